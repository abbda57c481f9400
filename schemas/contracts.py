"""Event contracts: one JSON Schema file per event type and version, `<EventType>.v<N>.json`.

They live in the folders of `CDCPIPE_CONTRACT_DIRS` (colon-separated), the user's own: cdcpipe ships none
(the demo's are in `examples/contracts/`, which the demo chooses). Each file declares the aggregate type its events belong to
(`x-aggregate-type`). Writers (`emit`) and readers (the streaming jobs) validate against the same files.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, TypeChecker, validators
from jsonschema.exceptions import SchemaError as JsonSchemaError
from jsonschema.exceptions import ValidationError

from schemas import compatibility
from schemas.errors import ContractError, ContractViolationError, UnknownEventTypeError

DIRS_VARIABLE = "CDCPIPE_CONTRACT_DIRS"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# The formats `emit` checks: jsonschema's own (those it can check without optional packages) and
# date-time, which it leaves unchecked without one. A contract naming any other format is refused at load:
# an unchecked `format` would look like a rule and be none.
FORMAT_CHECKER = FormatChecker(Draft202012Validator.FORMAT_CHECKER.checkers)
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _date_time(value: object) -> bool:
    """RFC 3339 (JSON Schema's date-time): a full date and time with an offset, a real calendar moment."""
    if not isinstance(value, str):
        return True  # `type` says what a non-string may be
    if not _RFC3339.fullmatch(value):
        return False
    datetime.fromisoformat(value.upper().replace("Z", "+00:00"))  # raises for 2026-02-30 or 25:00
    return True


FORMAT_CHECKER.checks("date-time", raises=ValueError)(_date_time)


def _is_integer(_: TypeChecker, instance: object) -> bool:
    """An integer as the readers hold one: a 64-bit whole number written without a fraction.

    JSON Schema calls 5.0 an integer; Spark (Jackson) does not parse it into a long, nor anything beyond 64 bits,
    so `emit` refuses both rather than write an event every job would dead-letter.
    """
    return isinstance(instance, int) and not isinstance(instance, bool) and INT64_MIN <= instance <= INT64_MAX


def _pattern(validator: Draft202012Validator, pattern: str, instance: object, _: object) -> Iterator[ValidationError]:
    r"""`pattern` as JSON Schema (ECMA-262) and Java's regex read it: \d, \w and \s are ASCII classes.

    Python's `re` would take any Unicode digit for \d ("١٢٣" for ^\d{3}$), which every job dead-letters.
    """
    if validator.is_type(instance, "string") and not re.search(pattern, str(instance), re.ASCII):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# Draft 2020-12 with that integer and that pattern: what `emit` accepts, a streaming job accepts.
ContractValidator = validators.extend(
    Draft202012Validator,
    validators={"pattern": _pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
_FILE_NAME = re.compile(r"^(?P<type>[A-Za-z][A-Za-z0-9_.-]*)\.v(?P<version>[1-9][0-9]*)\.json$")


@dataclass(frozen=True)
class Contract:
    """One event type at one version."""

    event_type: str
    version: int
    aggregate_type: str
    schema: Mapping[str, Any]
    path: Path
    validator: Draft202012Validator = field(repr=False, compare=False)

    def validate(self, payload: object) -> None:
        """Raise ContractViolationError naming the first field that breaks the contract."""
        error = _first_error(self.validator.iter_errors(payload))
        if error is not None:
            raise ContractViolationError(
                self.event_type, self.version, _field_path(error), error.message, str(self.path)
            )
        unstorable = _unstorable(payload, "$")
        if unstorable is not None:
            raise ContractViolationError(self.event_type, self.version, *unstorable, str(self.path))


def _unstorable(value: object, path: str) -> tuple[str, str] | None:
    """(where, what) of the first text Postgres's jsonb cannot store (a NUL) or UTF-8 cannot encode."""
    if isinstance(value, str):
        if "\x00" in value:
            return path, "contains a NUL character, which Postgres's jsonb cannot store"
        try:
            value.encode()
        except UnicodeEncodeError:
            return path, "is not valid Unicode (a lone surrogate), which cannot be written as UTF-8"
        return None
    children: Iterable[tuple[str, object]] = ()
    if isinstance(value, Mapping):
        children = [(f"{path} (a key)", str(k)) for k in value] + [(f"{path}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list | tuple):
        children = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    return next((found for where, item in children if (found := _unstorable(item, where))), None)


def _first_error(errors: Iterable[ValidationError]) -> ValidationError | None:
    ordered = sorted(errors, key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    return ordered[0] if ordered else None


def _field_path(error: ValidationError) -> str:
    path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    if error.validator == "required":
        # The error sits on the parent object; the missing property is the field the user must add.
        missing = re.match(r"'([^']*)' is a required property", error.message)
        if missing:
            path += f".{missing.group(1)}"
    return path


class ContractRegistry:
    """Every contract found in a list of folders; a later folder may not redefine an earlier contract."""

    def __init__(self, folders: Iterable[Path]) -> None:
        self._contracts: dict[tuple[str, int], Contract] = {}
        self._breaks: dict[tuple[str, int], list[str]] = {}
        for folder in folders:
            if not folder.is_dir():
                raise ContractError(f"contract folder {folder} does not exist; fix {DIRS_VARIABLE}")
            for path in sorted(folder.glob("*.json")):
                contract = _load(path)
                key = (contract.event_type, contract.version)
                if key in self._contracts:
                    raise ContractError(
                        f"{path}: {contract.event_type} v{contract.version} is already defined by "
                        f"{self._contracts[key].path}; a version is never redefined, add v{contract.version + 1}"
                    )
                self._contracts[key] = contract

    def get(self, event_type: str, version: int | None = None) -> Contract:
        """The contract of `event_type` at `version`, or at its latest version when none is given."""
        versions = sorted(v for (t, v) in self._contracts if t == event_type)
        if not versions:
            known = ", ".join(sorted({t for t, _ in self._contracts})) or "none"
            raise UnknownEventTypeError(
                f"no contract for event type {event_type!r} (known: {known}); "
                f"add {event_type}.v1.json to a folder of {DIRS_VARIABLE} ({_dirs_said()})"
            )
        chosen = versions[-1] if version is None else version
        if chosen not in versions:
            raise UnknownEventTypeError(
                f"{event_type} has no version {chosen} (versions: {versions}); add {event_type}.v{chosen}.json"
            )
        return self._contracts[(event_type, chosen)]

    def previous(self, contract: Contract) -> Contract | None:
        """The version before this one (the newest lower version there is), if any."""
        lower = [v for (t, v) in self._contracts if t == contract.event_type and v < contract.version]
        return self._contracts[(contract.event_type, max(lower))] if lower else None

    def breaks(self, contract: Contract) -> list[str]:
        """How this version breaks the compatibility it declares with the version before it (none: it keeps it)."""
        key = (contract.event_type, contract.version)
        if key not in self._breaks:
            before = self.previous(contract)
            mode = compatibility.mode_of(contract.schema)
            self._breaks[key] = (
                [] if before is None or mode == "none" else compatibility.problems(mode, before.schema, contract.schema)
            )
        return self._breaks[key]

    def __iter__(self) -> Iterator[Contract]:
        return iter(sorted(self._contracts.values(), key=lambda c: (c.event_type, c.version)))

    def __len__(self) -> int:
        return len(self._contracts)


def read_json_schema(path: Path) -> dict[str, Any]:
    """A JSON Schema file, checked against the 2020-12 meta-schema; a ContractError names what is wrong."""
    try:
        schema: dict[str, Any] = json.loads(path.read_text())
        Draft202012Validator.check_schema(schema)
    except (json.JSONDecodeError, JsonSchemaError) as exc:
        raise ContractError(f"{path}: not a valid JSON Schema ({exc})") from exc
    return schema


def _load(path: Path) -> Contract:
    match = _FILE_NAME.match(path.name)
    if match is None:
        raise ContractError(f"{path}: a contract file is named <EventType>.v<N>.json, like AccountOpened.v1.json")
    schema = read_json_schema(path)
    aggregate_type = schema.get("x-aggregate-type")
    if not isinstance(aggregate_type, str) or not aggregate_type:
        raise ContractError(f'{path}: declare the aggregate type, e.g. "x-aggregate-type": "account"')
    try:
        compatibility.mode_of(schema)
    except ValueError as exc:
        raise ContractError(f"{path}: {exc}") from exc
    unchecked = sorted(set(_formats(schema)) - set(FORMAT_CHECKER.checkers))
    if unchecked:
        raise ContractError(
            f"{path}: format {', '.join(unchecked)} is not checked by emit (checked: "
            f"{', '.join(sorted(FORMAT_CHECKER.checkers))}); use `pattern` for it, or one of those"
        )
    return Contract(
        event_type=match["type"],
        version=int(match["version"]),
        aggregate_type=aggregate_type,
        schema=schema,
        path=path,
        validator=ContractValidator(schema, format_checker=FORMAT_CHECKER),
    )


def _formats(schema: object) -> Iterator[str]:
    """Every `format` named anywhere in a schema."""
    if isinstance(schema, Mapping):
        if isinstance(schema.get("format"), str):
            yield schema["format"]
        for value in schema.values():
            yield from _formats(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _formats(item)


@cache
def _registry_for(dirs: tuple[Path, ...]) -> ContractRegistry:
    return ContractRegistry(dirs)


def contract_dirs() -> tuple[Path, ...]:
    """The folders of $CDCPIPE_CONTRACT_DIRS, in order."""
    return tuple(Path(p) for p in os.environ.get(DIRS_VARIABLE, "").split(":") if p)


def _dirs_said() -> str:
    dirs = contract_dirs()
    return "now " + ":".join(map(str, dirs)) if dirs else "unset: no contract is known"


def default_registry() -> ContractRegistry:
    """The contracts in the folders of $CDCPIPE_CONTRACT_DIRS (loaded once per process)."""
    return _registry_for(contract_dirs())
