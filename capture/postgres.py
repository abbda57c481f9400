"""What capturing a table needs in Postgres: the table with a key, the Debezium role's grants, the publication.

Each function reads first and changes only what differs, so a plan can be shown before anything changes.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
from psycopg import sql

from capture.errors import CaptureError
from schemas import outbox
from schemas.config import OutboxNames, SchemaSettings


def connect(settings: SchemaSettings) -> psycopg.Connection[Any]:
    """A connection with the settings' DSN (a role that may grant and alter publications)."""
    try:
        return psycopg.connect(settings.pg_dsn.get_secret_value(), autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise CaptureError(
            f"cannot connect to Postgres ({str(exc).strip()}); check CDCPIPE_PG_DSN and PGPASSFILE"
        ) from exc


def split(table: str) -> tuple[str, str]:
    """`schema.table` as its two names; CaptureError when it is not so written."""
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise CaptureError(f"{table!r}: name the table as schema.table, e.g. public.orders")
    return schema, name


def tables_of_schema(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Every ordinary or partitioned table of `schema`, as schema.table."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname",
        (schema,),
    ).fetchall()
    if not rows:
        raise CaptureError(f"schema {schema} has no tables (or does not exist); `\\dt {schema}.*` in psql lists them")
    return [f"{schema}.{row[0]}" for row in rows]


def check_capturable(conn: psycopg.Connection[Any], table: str) -> None:
    """The table exists and has a primary key: its topic's keys, the mirror's MERGE and history need one."""
    schema, name = split(table)
    found = conn.execute(
        "SELECT c.oid, (SELECT pn.nspname || '.' || p.relname FROM pg_inherits i "
        "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace pn ON pn.oid = p.relnamespace "
        "WHERE i.inhrelid = c.oid AND c.relispartition) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, name),
    ).fetchone()
    if found is None:
        raise CaptureError(f"there is no table {table} (names are exact, as in the catalog: mind their case)")
    if found[1] is not None:
        raise CaptureError(
            f"{table} is a partition of {found[1]}: capture the partitioned table instead (`cdcpipe tables add "
            f"{found[1]}`): the changes of every partition, one attached later included, reach its one topic and "
            "mirror"
        )
    key = conn.execute("SELECT 1 FROM pg_constraint WHERE conrelid = %s AND contype = 'p'", (found[0],)).fetchone()
    if key is None:
        raise CaptureError(
            f"{table} has no primary key: its change events would have no key to order and merge rows by; "
            f'add one (ALTER TABLE "{schema}"."{name}" ADD PRIMARY KEY (...)) and run this again'
        )


def missing_grants(conn: psycopg.Connection[Any], settings: SchemaSettings, table: str) -> list[str]:
    """What the Debezium role lacks to snapshot and stream `table` (USAGE on its schema, SELECT on it)."""
    schema, _ = split(table)
    role = settings.debezium_role
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
        raise CaptureError(f"role {role} does not exist: run `cdcpipe schema apply` first (it creates the roles)")
    row = conn.execute(
        "SELECT has_schema_privilege(%s, %s, 'USAGE'), has_table_privilege(%s, %s, 'SELECT')",
        (
            role,
            schema,
            role,
            str(sql.Identifier(*split(table)).as_string(conn)),
        ),
    ).fetchone()
    if row is None:
        raise CaptureError(f"Postgres returned no privileges of {role} on {table}")
    return [what for what, held in (("USAGE on schema", row[0]), ("SELECT", row[1])) if not held]


def grant(conn: psycopg.Connection[Any], settings: SchemaSettings, table: str) -> None:
    """USAGE on the table's schema and SELECT on it, to the Debezium role."""
    schema, name = split(table)
    role = sql.Identifier(settings.debezium_role)
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), role))
    conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(schema, name), role))


def published(conn: psycopg.Connection[Any], settings: SchemaSettings) -> set[str] | None:
    """The tables the business tables' publication carries; None when it does not exist yet."""
    return outbox.publication_tables(conn, settings.tables_publication)


def publish(conn: psycopg.Connection[Any], names: OutboxNames, settings: SchemaSettings, tables: list[str]) -> None:
    """Add the tables (and the heartbeat and signal tables) to the publication, creating it when missing."""
    with conn.transaction():
        outbox.add_to_tables_publication(conn, names, settings, tuple(tables))


def unpublish(conn: psycopg.Connection[Any], settings: SchemaSettings, tables: list[str]) -> None:
    """Take the tables out of the publication (the publication itself stays)."""
    listed = sql.SQL(", ").join(sql.Identifier(*split(t)) for t in tables)
    conn.execute(
        sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(sql.Identifier(settings.tables_publication), listed)
    )


def signal_table_exists(conn: psycopg.Connection[Any], names: OutboxNames, settings: SchemaSettings) -> bool:
    """Whether `schema apply` has made Debezium's signal table."""
    row = conn.execute("SELECT to_regclass(%s)", (f'"{names.outbox_schema}"."{settings.signal_table}"',)).fetchone()
    return row is not None and row[0] is not None


def request_snapshot(
    conn: psycopg.Connection[Any], names: OutboxNames, settings: SchemaSettings, tables: list[str], where: str | None
) -> str:
    """Insert Debezium's execute-snapshot signal for `tables` (incremental, in chunks); returns the signal's id.

    `where` becomes each table's `additional-conditions` filter: only the rows it selects are snapshotted.
    """
    data: dict[str, Any] = {"data-collections": tables, "type": "incremental"}
    if where:
        data["additional-conditions"] = [{"data-collection": t, "filter": where} for t in tables]
    signal_id = f"cdcpipe-{uuid.uuid4().hex}"  # the table's id column holds 42 characters
    conn.execute(
        sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, 'execute-snapshot', %s)").format(
            sql.Identifier(names.outbox_schema, settings.signal_table)
        ),
        (signal_id, json.dumps(data)),
    )
    return signal_id
