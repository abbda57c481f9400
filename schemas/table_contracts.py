"""Row contracts of captured business tables: `<schema>.<table>.json`, one JSON Schema each.

They describe a row as Debezium's table CDC connector sends it (the `before` and `after` of a change), and
name the key the mirror and history jobs key on (`x-primary-key`). `cdcpipe schema tables import` writes them
from the Postgres catalog (schemas.catalog), with each column's catalog type (`x-pg-type`) and `x-attnum`; a
hand-written one may leave those out (its JSON types then stand for int8, float8, bool and text).

Folders: CDCPIPE_TABLE_CONTRACT_DIRS (colon-separated), first match wins; its first folder is where `import`
writes, and where a job writes a contract it evolved. cdcpipe ships none (the demo's: `examples/tables/`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.contracts import read_json_schema
from schemas.errors import ContractError
from schemas.pg_types import PgType, canonical_name, from_json_schema

DIRS_VARIABLE = "CDCPIPE_TABLE_CONTRACT_DIRS"


def contract_folders() -> list[Path]:
    """Where contracts are looked for, in order: the folders of CDCPIPE_TABLE_CONTRACT_DIRS."""
    return [Path(p) for p in os.environ.get(DIRS_VARIABLE, "").split(":") if p]


def user_folder() -> Path | None:
    """The first folder of CDCPIPE_TABLE_CONTRACT_DIRS, where contracts are written; None when unset."""
    folders = contract_folders()
    return folders[0] if folders else None


def contract_path(folder: Path, table: str) -> Path:
    """A table's contract file in a folder: `<schema>.<table>.json` (a `/` or `%` of a name written `%2F`, `%25`)."""
    return folder / f"{table.replace('%', '%25').replace('/', '%2F')}.json"


@dataclass(frozen=True)
class TableContract:
    """One captured table's row shape and key."""

    table: str  # schema.table
    schema: Mapping[str, Any]
    primary_key: tuple[str, ...]
    path: Path

    @property
    def columns(self) -> list[str]:
        return list(self.schema.get("properties", {}))

    @property
    def types(self) -> dict[str, PgType]:
        """Each column's Postgres type (from `x-pg-type`, or read from a hand-written JSON type)."""
        return {name: from_json_schema(rules) for name, rules in self.schema.get("properties", {}).items()}

    def sent_type(self, column: str, sent: PgType) -> PgType:
        """`sent`, the type a change names for a column, as the contract names it.

        A change names a domain (`x-pg-domain`) by its own name; the contract, as the catalog, by its base
        type, whose values Debezium sends. One type, two names: never a change.
        """
        domain = self.schema["properties"][column].get("x-pg-domain")
        if domain is not None and sent.name == canonical_name(str(domain)):
            return self.types[column]
        return sent

    def nullable(self, column: str) -> bool:
        kind = self.schema["properties"][column].get("type")
        return isinstance(kind, list) and "null" in kind

    def attnum(self, column: str) -> int | None:
        value = self.schema["properties"][column].get("x-attnum")
        return int(value) if value is not None else None

    @property
    def version(self) -> int:
        return int(self.schema.get("x-version", 1))

    def earlier(self) -> list[TableContract]:
        """The contract's earlier versions, oldest first (`x-previous`, kept as each version replaced one)."""
        return [from_document(self.table, doc, self.path) for doc in self.schema.get("x-previous", [])]

    def next_version(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """`document` as the version after this one: its `x-version` one up, this version kept in `x-previous`."""
        current = {k: v for k, v in self.schema.items() if k != "x-previous"}
        return {**document, "x-version": self.version + 1, "x-previous": [*self.schema.get("x-previous", []), current]}

    @property
    def replica_identity(self) -> str:
        """`default`, `full`, `index` or `nothing`, as imported; `default` when not said."""
        return str(self.schema.get("x-replica-identity", "default"))


def load_table_contract(table: str) -> TableContract:
    """The contract of `schema.table`, from the first folder of CDCPIPE_TABLE_CONTRACT_DIRS that has one."""
    for folder in contract_folders():
        path = contract_path(folder, table)
        if path.is_file():
            return _load(table, path)
    raise ContractError(
        f"no row contract for table {table}: write it from the catalog with `cdcpipe schema tables import {table}` "
        f"(into the first folder of {DIRS_VARIABLE}, or --dir); looked in: "
        f"{':'.join(map(str, contract_folders())) or f'nothing, {DIRS_VARIABLE} is unset'}"
    )


def save(contract: TableContract, document: Mapping[str, Any]) -> None:
    """Write `document` as the table's contract file, unless the file already holds this version or a newer one."""
    try:
        if int(json.loads(contract.path.read_text()).get("x-version", 1)) >= int(document.get("x-version", 1)):
            return  # another job on this table got there first
    except (OSError, ValueError):
        pass
    write(contract.table, contract.path, document)


def write(table: str, path: Path, document: Mapping[str, Any]) -> TableContract:
    """Check `document` as a contract of `table`, then write it to `path` whole.

    ContractError, and nothing written, when it is not one: a contract file on disk is always one every
    command can read.
    """
    checked = from_document(table, document, path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    tmp.replace(path)  # a reader sees the old contract or the new, never half of one
    return checked


def _load(table: str, path: Path) -> TableContract:
    return from_document(table, read_json_schema(path), path)


def from_document(table: str, schema: Mapping[str, Any], path: Path) -> TableContract:
    """A contract from its JSON document, checked; `path` names where it came from in messages."""
    key = schema.get("x-primary-key")
    properties = schema.get("properties", {})
    if not isinstance(key, list) or not key or any(k not in properties for k in key):
        raise ContractError(f'{path}: "x-primary-key" must list one or more of its properties, e.g. ["id"]')
    for name, rules in properties.items():
        try:
            from_json_schema(rules)
        except ValueError as exc:
            raise ContractError(f"{path}: column {name}: x-pg-type {exc}") from exc
    return TableContract(table=table, schema=schema, primary_key=tuple(key), path=path)
