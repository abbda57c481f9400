"""Table contracts written from the Postgres catalog (`cdcpipe schema tables import`), and checked against it.

A contract holds each column's catalog type (`x-pg-type`, see schemas.pg_types), whether it may be null,
its `attnum` (`x-attnum`: a renamed column keeps it, a dropped and re-added one gets a new one, which is how
a job tells a rename from a drop and an add), the key the mirror and history jobs key on (the primary key,
else the replica identity index) and the table's replica identity (whether Debezium sends unchanged TOASTed
values, see docs/schema-changes.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from schemas import table_contracts
from schemas.config import SchemaSettings
from schemas.errors import ContractError, SchemaError
from schemas.pg_types import PgType, canonical_name, json_schema
from schemas.table_contracts import (
    DIRS_VARIABLE,
    TableContract,
    contract_path,
    from_document,
    load_table_contract,
    user_folder,
)

_COLUMNS = """
SELECT a.attnum, a.attname, COALESCE(bt.typname, t.typname), CASE WHEN t.typtype = 'd' THEN t.typtypmod
       ELSE a.atttypmod END, a.attnotnull, COALESCE(bt.oid, t.oid), c.relreplident,
       CASE WHEN t.typtype = 'd' THEN t.typname END
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  AND a.attgenerated = ''
ORDER BY a.attnum
"""
# The enum labels of a type, or of an array's element type.
_ENUM = """
SELECT e.enumlabel FROM pg_type t JOIN pg_enum e ON e.enumtypid = CASE WHEN t.typcategory = 'A' THEN t.typelem
       ELSE t.oid END
WHERE t.oid = %s ORDER BY e.enumsortorder
"""
# The primary key's columns in key order; else those of the replica identity index.
_KEY = """
SELECT a.attname FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE n.nspname = %s AND c.relname = %s AND (i.indisprimary OR i.indisreplident)
ORDER BY i.indisprimary DESC, k.position
"""
# Stored generated columns: pgoutput leaves them out of every change (before PostgreSQL 18), so a contract does too.
_GENERATED = """
SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> ''
ORDER BY a.attnum
"""
REPLICA_IDENTITY = {"d": "default", "f": "full", "i": "index", "n": "nothing"}


@dataclass(frozen=True)
class CatalogColumn:
    """One live column of a table, as the catalog describes it."""

    attnum: int
    name: str
    type: PgType
    nullable: bool
    enum: list[str] | None
    domain: str | None = None  # the domain's name, when the column's type is one (`type` is its base type)


def _modifier(name: str, typmod: int) -> tuple[int | None, int | None]:
    """What atttypmod holds for the types whose modifier matters (Postgres stores -1 for none)."""
    base = name.removeprefix("_")
    if typmod < 0:
        return None, None
    if base == "numeric" and typmod >= 4:
        return ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
    if base in ("varchar", "bpchar") and typmod >= 4:
        return typmod - 4, None
    if base in ("bit", "varbit"):
        return typmod, None
    if base in ("timestamp", "timestamptz", "time", "timetz"):
        return typmod, None
    return None, None


def _split(table: str) -> tuple[str, str]:
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise ContractError(f"{table!r}: name a table as schema.table, e.g. public.orders")
    return schema, name


def read_columns(conn: psycopg.Connection[Any], table: str) -> tuple[list[CatalogColumn], str]:
    """The live columns of `schema.table` in attnum order, and its replica identity."""
    schema, name = _split(table)
    rows = conn.execute(_COLUMNS, (schema, name)).fetchall()
    if not rows:
        raise ContractError(
            f"table {table} is not in the catalog of {conn.info.dbname} (or the role {conn.info.user} cannot see "
            "it): check the name, and that it is a table"
        )
    columns = []
    for attnum, attname, typname, typmod, notnull, type_oid, _, domain in rows:
        precision, scale = _modifier(typname, typmod)
        labels = [r[0] for r in conn.execute(_ENUM, (type_oid,)).fetchall()]
        pg = PgType.of(typname, precision, scale)
        columns.append(CatalogColumn(attnum, attname, pg, not notnull, labels or None, domain))
    return columns, REPLICA_IDENTITY.get(rows[0][6], "default")


def read_generated(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """The table's stored generated columns: not in its contract, and not captured (the stream never has them)."""
    schema, name = _split(table)
    return [r[0] for r in conn.execute(_GENERATED, (schema, name)).fetchall()]


def read_key(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """The primary key's columns in key order, else the replica identity index's; none when neither exists."""
    schema, name = _split(table)
    return [r[0] for r in conn.execute(_KEY, (schema, name)).fetchall()]


def contract_document(conn: psycopg.Connection[Any], table: str) -> dict[str, Any]:
    """The contract of `schema.table` as the catalog describes it now (a JSON Schema document)."""
    columns, identity = read_columns(conn, table)
    key = read_key(conn, table)
    if not key:
        raise ContractError(
            f"table {table} has no primary key and no replica identity index: a mirror and a history key on one. "
            f"Add a primary key, or ALTER TABLE {table} REPLICA IDENTITY USING INDEX <a unique index>"
        )
    # A key column has a value in every change, whatever the catalog's NOT NULL says.
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": table,
        "description": f"A row of {table}, as Debezium's table connector sends it; written from the catalog by "
        "`cdcpipe schema tables import`.",
        "x-primary-key": key,
        "x-replica-identity": identity,
        "x-version": 1,
        "type": "object",
        "required": [c.name for c in columns if not c.nullable or c.name in key],
        "properties": {
            c.name: {
                **json_schema(c.type, c.nullable and c.name not in key, c.enum),
                **({"x-pg-domain": canonical_name(c.domain)} if c.domain else {}),
                "x-attnum": c.attnum,
            }
            for c in columns
        },
    }


def import_tables(conn: psycopg.Connection[Any], tables: Iterable[str], folder: Path) -> list[Path]:
    """Write each table's contract into `folder` (a contract there already is replaced); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for table in tables:
        document = contract_document(conn, table)
        path = contract_path(folder, table)
        if path.is_file():
            previous = from_document(table, json.loads(path.read_text()), path)
            same = _columns_of(dict(previous.schema)) == _columns_of(document)
            if not same or list(previous.primary_key) != document["x-primary-key"]:
                document = previous.next_version(document)  # the version before stays readable: replays need it
            else:
                earlier = previous.schema.get("x-previous")
                document = {**document, "x-version": previous.version, **({"x-previous": earlier} if earlier else {})}
        table_contracts.write(table, path, document)
        written.append(path)
    return written


def _columns_of(document: dict[str, Any]) -> dict[str, Any]:
    return dict(document.get("properties", {}))


def check_tables(conn: psycopg.Connection[Any], tables: Iterable[str]) -> list[str]:
    """What differs between each table's contract and the catalog, one line per difference (none: they agree)."""
    problems = []
    for table in tables:
        contract = load_table_contract(table)
        problems += [f"{table} ({contract.path}): {d}" for d in differences(contract, contract_document(conn, table))]
    return problems


def differences(contract: TableContract, catalog: dict[str, Any]) -> list[str]:
    """How the contract's columns, types, nullability and key differ from the catalog's document."""
    found = []
    # A column dropped at the source but kept in the Delta table (x-dropped) is not the source's any more.
    ours = {k: v for k, v in contract.schema.get("properties", {}).items() if not v.get("x-dropped")}
    theirs = dict(catalog["properties"])
    for name in ours.keys() - theirs.keys():
        found.append(f"column {name} is in the contract, not in the table")
    for name in theirs.keys() - ours.keys():
        found.append(f"column {name} ({theirs[name]['x-pg-type']}) is in the table, not in the contract")
    for name in ours.keys() & theirs.keys():
        mine, actual = contract.types[name], PgType.parse(theirs[name]["x-pg-type"])
        if mine != actual:
            found.append(f"column {name} is {mine} in the contract, {actual} in the table")
        nullable = "null" in theirs[name]["type"]
        if contract.nullable(name) != nullable:
            said = {True: "nullable", False: "NOT NULL"}
            found.append(
                f"column {name} is {said[contract.nullable(name)]} in the contract, {said[nullable]} in the table"
            )
    if list(contract.primary_key) != catalog["x-primary-key"]:
        found.append(f"key {list(contract.primary_key)} in the contract, {catalog['x-primary-key']} in the table")
    return sorted(found)


def _connect(settings: SchemaSettings) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(settings.pg_dsn.get_secret_value(), autocommit=True)
    except psycopg.OperationalError as exc:
        raise SchemaError(
            f"cannot reach Postgres to read the catalog ({str(exc).strip()}); set CDCPIPE_PG_DSN or [schema] pg_dsn"
        ) from exc


def import_tables_with_settings(settings: SchemaSettings, tables: Iterable[str], folder: Path | None) -> list[Path]:
    """`schema tables import`: into `folder`, else the first folder of CDCPIPE_TABLE_CONTRACT_DIRS."""
    target = folder or user_folder()
    if target is None:
        raise SchemaError(f"where should the contracts go? pass --dir, or set {DIRS_VARIABLE} (its first folder)")
    with _connect(settings) as conn:
        return import_tables(conn, tables, target)


def check_tables_with_settings(settings: SchemaSettings, tables: Iterable[str]) -> list[str]:
    """`schema tables import --check`: what differs between the contracts and the catalog."""
    with _connect(settings) as conn:
        return check_tables(conn, tables)
