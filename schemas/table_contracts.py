"""Row contracts of captured business tables: `schemas/tables/<schema>.<table>.json`, one JSON Schema each.

They describe a row as Debezium's table CDC connector sends it (the `before` and `after` of a change), and
name the primary key (`x-primary-key`) the mirror and history jobs key on. More folders: CDCPIPE_TABLE_CONTRACT_DIRS.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.contracts import read_json_schema
from schemas.errors import ContractError

BUILTIN_DIR = Path(__file__).parent / "tables"
DIRS_VARIABLE = "CDCPIPE_TABLE_CONTRACT_DIRS"


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


def load_table_contract(table: str) -> TableContract:
    """The contract of `schema.table`, from the built-in folder or CDCPIPE_TABLE_CONTRACT_DIRS."""
    folders = [BUILTIN_DIR, *(Path(p) for p in os.environ.get(DIRS_VARIABLE, "").split(":") if p)]
    for folder in folders:
        path = folder / f"{table}.json"
        if path.is_file():
            return _load(table, path)
    raise ContractError(
        f"no row contract for table {table}: add {BUILTIN_DIR / (table + '.json')} (or a folder in {DIRS_VARIABLE}) "
        'with its columns as JSON Schema properties and "x-primary-key"'
    )


def _load(table: str, path: Path) -> TableContract:
    schema = read_json_schema(path)
    key = schema.get("x-primary-key")
    properties = schema.get("properties", {})
    if not isinstance(key, list) or not key or any(k not in properties for k in key):
        raise ContractError(f'{path}: "x-primary-key" must list one or more of its properties, e.g. ["id"]')
    return TableContract(table=table, schema=schema, primary_key=tuple(key), path=path)
