"""Which outbox records the jobs' Spark classification would surely pass as valid, decided in plain Python.

A latest-state backfill or replay reduces each key to its newest event before Spark sees the range
(streaming_jobs.ranges.reduce). That drops records, so it is only correct if every record it drops is one Spark
would pass as valid (or its dead letter would be lost) and is superseded by a newer one Spark would pass.
Both hold if "surely valid" here implies "valid" in `outbox_events.classify`: then a record is dropped only
when it and a newer record of its key are surely valid. Anything this module is not sure of (a different
JSON parser's corner cases, regex dialects, odd headers) is a suspect and goes to Spark, which decides.

So every rule below is at least as strict as Spark's (streaming_jobs.classify.contracts), never laxer:
- the payload is strict UTF-8 JSON, one object and nothing around it, no duplicate key at any depth (Spark
  keeps the last copy of a key but fails the record if an earlier copy had the wrong type), no NaN or
  Infinity, no surrogate escape, no field named like a contract field but for case;
- each field has exactly its contract type (Spark turns a number into a string, for instance; we do not
  count on it), integers fit in 64 bits;
- the top-level rules Spark checks (required and not null, no extra field when `additionalProperties` is
  false, enum, pattern, minLength, minimum, exclusiveMinimum, maximum) hold; a pattern is only judged on
  ASCII text without line breaks, where Python's and Java's regexes agree, and a pattern Python reads
  differently (a warning) or cannot read leaves every value a suspect.
`tests/streaming_jobs/test_reduce_integration.py` checks the implication against Spark on tricky records: a
reduced replay must equal one where Spark reads every record, dead letters included.
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

CORRUPT = "_corrupt_record"  # the column Spark's from_json fills for a rejected payload: a field named so is rejected
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

Check = Callable[[Any], bool]
BOUNDS: dict[str, Callable[[Any, Any], bool]] = {
    "minimum": lambda v, b: v >= b,
    "exclusiveMinimum": lambda v, b: v > b,
    "maximum": lambda v, b: v <= b,
}
Header = tuple[str, bytes | None]


class _UnsureError(ValueError):
    """Raised inside parsing: the payload is not one this module can vouch for."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _UnsureError("duplicate key")
    return found


def _no_constant(name: str) -> Any:
    raise _UnsureError(f"{name} is not JSON")


# The C scanner without `decode`'s wrapper: (value, end index); a leading space raises StopIteration.
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]


def _no_near_names(named: Iterable[str]) -> Callable[[Mapping[str, Any]], bool]:
    """True for an object with no field whose name differs from a contract field's only in case.

    Spark ignores a field its schema does not name; whether it matches names ignoring case is not
    something to count on, so such a near miss is a suspect.
    """
    exact = set(named)
    lowered = {n.lower() for n in exact}
    return lambda found: all(k in exact or k.lower() not in lowered for k in found)


def _value_check(schema: Mapping[str, Any]) -> Check:
    """True when a (non-null) value has exactly the type Spark parses this schema fragment into."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return lambda v: type(v) is int and LONG_MIN <= v <= LONG_MAX
    if kind == "number":
        return lambda v: (type(v) is int and LONG_MIN <= v <= LONG_MAX) or (type(v) is float and math.isfinite(v))
    if kind == "boolean":
        return lambda v: type(v) is bool
    if kind == "object":
        fields = {name: _value_check(sub) for name, sub in schema.get("properties", {}).items()}
        near = _no_near_names(fields)
        # A nested null is a null to Spark (only top-level required fields are checked).
        return lambda v: (
            type(v) is dict
            and near(v)
            and all(v[name] is None or check(v[name]) for name, check in fields.items() if name in v)
        )
    if kind == "array":
        item = _value_check(schema.get("items", {}))
        return lambda v: type(v) is list and all(x is None or item(x) for x in v)
    return lambda v: type(v) is str  # a string, and any type Spark reads as a string


def _pattern_check(pattern: str) -> Check:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "possible set intersection" and friends: Java reads those otherwise
            compiled = re.compile(pattern, re.ASCII)
    except (re.error, Warning):
        return lambda v: False
    return lambda v: (
        type(v) is str and v.isascii() and "\n" not in v and "\r" not in v and compiled.search(v) is not None
    )


def _number(kind: object) -> Callable[[Any], float | int]:
    # A "number" field is a double in Spark: compare as a double, as Spark does.
    return float if kind == "number" else int


def _rule_checks(rules: Mapping[str, Any]) -> list[Check]:
    """The per-field rules Spark checks on a top-level field, each true when the (non-null) value keeps it."""
    kind = rules.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    checks: list[Check] = []
    if "enum" in rules:
        allowed = list(rules["enum"])
        checks.append(lambda v: any(type(a) is type(v) and a == v for a in allowed))
    if "pattern" in rules:
        checks.append(_pattern_check(str(rules["pattern"])))
    if "minLength" in rules:
        least = int(rules["minLength"])
        # Python counts code points as Spark does; a lone surrogate (the payload is refused below) would differ.
        checks.append(lambda v: type(v) is str and len(v) >= least)
    as_number = _number(kind)
    # An integer compared with a fractional bound: Spark compares as doubles, exact only up to 2**53.
    numeric = kind == "number" or (kind == "integer" and all(type(rules.get(k, 0)) is int for k in BOUNDS))
    for key, keeps in BOUNDS.items():
        if key in rules:
            checks.append(_bound_check(keeps, as_number(rules[key]), as_number) if numeric else lambda v: False)
    return checks


def _bound_check(
    keeps: Callable[[Any, Any], bool], bound: float | int, as_number: Callable[[Any], float | int]
) -> Check:
    return lambda v: type(v) in (int, float) and keeps(as_number(v), bound)


def payload_check(schema: Mapping[str, Any]) -> Callable[[bytes], bool]:
    """A function: raw payload bytes -> True when Spark would surely find them keeping this contract."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = list(schema.get("required", []))
    closed = schema.get("additionalProperties") is False
    allowed = set(properties)
    near = _no_near_names(allowed)
    fields = [(name, _value_check(rules), _rule_checks(rules)) for name, rules in properties.items()]

    def check(raw: bytes) -> bool:
        if b"\\ud" in raw or b"\\uD" in raw:
            return False  # a surrogate escape: Python keeps a lone one as is, Java's UTF-8 replaces it
        try:
            text = raw.decode("utf-8")
            payload, end = _SCAN(text, 0)
        except (_UnsureError, ValueError, RecursionError, StopIteration):
            return False
        if end != len(text):  # whitespace or anything after the value: Spark's reader and ours may differ
            return False
        if type(payload) is not dict or CORRUPT in payload:
            return False
        if closed and not allowed.issuperset(payload):
            return False
        if not closed and not near(payload):
            return False
        for name in required:
            if payload.get(name) is None:
                return False
        for name, typed, rules in fields:
            value = payload.get(name)
            if value is None:
                continue
            if not typed(value):
                return False
            for keeps in rules:
                if not keeps(value):
                    return False
        return True

    return check


class SurelyValid:
    """The decision for one Kafka record of the outbox wire format, from its key, value and headers."""

    def __init__(self, contracts: Iterable[tuple[str, int, Mapping[str, Any]]]) -> None:
        self._checks = {
            (event_type.encode(), version): payload_check(schema) for event_type, version, schema in contracts
        }

    def __call__(self, key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> bool:
        if key is None or not headers:
            return False
        found: dict[str, bytes | None] = {}
        for name, data in headers:
            if name in found:  # a repeated name (Spark takes the last one): rare, so Spark reads it
                return False
            found[name] = data
        event_id, event_type, version = found.get("id"), found.get("eventType"), found.get("eventVersion")
        if event_id is None or event_type is None or version is None:
            return False
        if not (0 < len(version) <= 9 and version.isdigit()):
            return False
        check = self._checks.get((event_type, int(version)))
        if check is None:
            return False
        return value is None or check(value)  # no value: a tombstone, valid for any known event type
