"""What capturing a table needs in Postgres: the table with a key, the Debezium role's grants, the publication.

Each function reads first and changes only what differs, so a plan can be shown before anything changes.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
from psycopg import sql

from capture import connector
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
    # Spark and Delta resolve column names ignoring case: `id` and `ID` would be one column of the mirror.
    clashes = conn.execute(
        "SELECT string_agg(quote_ident(attname), ' and ' ORDER BY attname) FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped GROUP BY lower(attname) HAVING count(*) > 1",
        (found[0],),
    ).fetchall()
    if clashes:
        raise CaptureError(
            f"{table} has columns whose names differ only in case ({'; '.join(c[0] for c in clashes)}): Spark and "
            "Delta resolve names ignoring case, so its mirror could not hold both; rename one of each pair "
            "(ALTER TABLE ... RENAME COLUMN) and run this again"
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


def check_condition(conn: psycopg.Connection[Any], settings: SchemaSettings, table: str, where: str) -> None:
    """`where` is one condition on `table` that Debezium's role may evaluate: planned (never run), as that role.

    EXPLAIN without ANALYZE runs nothing, in a read-only transaction rolled back; one statement only (sent as a
    prepared statement, which Postgres refuses to hold two commands): `x); DROP TABLE t; --` is refused.
    """
    schema, name = split(table)
    query = sql.SQL("EXPLAIN SELECT * FROM {} WHERE ({})").format(sql.Identifier(schema, name), sql.SQL(where))
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("SET TRANSACTION READ ONLY")
            try:
                with conn.transaction():  # a role that may not act as Debezium's checks the condition as itself
                    conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(settings.debezium_role)))
            except psycopg.errors.InsufficientPrivilege:
                pass
            conn.execute(query, prepare=True)
    except psycopg.Error as exc:
        raise CaptureError(
            f"--where {where!r} is not a condition Debezium can snapshot {table} by: "
            f"{str(exc).strip().splitlines()[0]}; write it as SQL on the table's columns (e.g. \"created_at > "
            "'2024-01-01'\"), which the Debezium role may read"
        ) from exc


def request_snapshot(
    conn: psycopg.Connection[Any],
    names: OutboxNames,
    settings: SchemaSettings,
    tables: list[str],
    where: str | None,
    *,
    stop: bool = False,
) -> list[str]:
    """Insert Debezium's execute-snapshot signals for `tables` (incremental, in chunks); returns their ids.

    `where` becomes each table's `additional-conditions` filter: only the rows it selects are snapshotted.
    `stop`: the stop-snapshot signal instead, which ends the tables' running snapshot (rows sent stay sent).
    As many signals as the signal table's `data` (2,048 characters) needs, in one transaction.
    """
    signals = []
    for group in _fitting(tables, where):
        data = _signal_data(group, where)
        signals.append((f"cdcpipe-{uuid.uuid4().hex}", json.dumps(data)))  # ids: 42 characters at most
    table = sql.Identifier(names.outbox_schema, settings.signal_table)
    with conn.transaction():
        for signal_id, data_text in signals:
            conn.execute(
                sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(table),
                (signal_id, "stop-snapshot" if stop else "execute-snapshot", data_text),
            )
        if not stop:  # asked now: no longer pending
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE type = %s AND data = ANY(%s)").format(table),
                (PENDING, [json.dumps(t) for t in tables]),
            )
    return [signal_id for signal_id, _ in signals]


SIGNAL_DATA = 2048  # characters of the signal table's `data` (schemas.outbox)


def _signal_data(tables: list[str], where: str | None) -> dict[str, Any]:
    named = [connector.data_collection(t) for t in tables]
    data: dict[str, Any] = {"data-collections": [n for n, _ in named], "type": "incremental"}
    if where:
        # Parenthesised: Debezium joins it to its chunk's own condition with AND, which binds before an OR of it.
        data["additional-conditions"] = [{"data-collection": pattern, "filter": f"({where})"} for _, pattern in named]
    return data


def _fitting(tables: list[str], where: str | None) -> list[list[str]]:
    """`tables` in groups whose signal fits the signal table's `data`, in order; CaptureError if one cannot."""
    groups: list[list[str]] = []
    for table in tables:
        if groups and len(json.dumps(_signal_data([*groups[-1], table], where))) <= SIGNAL_DATA:
            groups[-1].append(table)
            continue
        if len(json.dumps(_signal_data([table], where))) > SIGNAL_DATA:
            raise CaptureError(
                f"the snapshot signal of {table} would not fit the signal table's {SIGNAL_DATA} characters: "
                "shorten the --where condition"
            )
        groups.append([table])
    return groups


# A snapshot `tables add` owes a table, recorded in the signal table before the connector captures it and
# deleted with the signal that asks for it: a run that failed in between leaves it for the next run to ask.
# Debezium reads the row and ignores its type (a warning in the worker's log).
PENDING = "cdcpipe-pending-snapshot"


def record_pending(
    conn: psycopg.Connection[Any], names: OutboxNames, settings: SchemaSettings, tables: list[str]
) -> None:
    """Record that `tables` are owed a snapshot (once each)."""
    table = sql.Identifier(names.outbox_schema, settings.signal_table)
    with conn.transaction():
        for name in tables:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (id, type, data) SELECT %s, %s, %s WHERE NOT EXISTS "
                    "(SELECT 1 FROM {} WHERE type = %s AND data = %s)"
                ).format(table, table),
                (f"cdcpipe-{uuid.uuid4().hex}", PENDING, json.dumps(name), PENDING, json.dumps(name)),
            )


def pending(conn: psycopg.Connection[Any], names: OutboxNames, settings: SchemaSettings) -> list[str]:
    """The tables owed a snapshot by an earlier `tables add` that did not finish."""
    rows = conn.execute(
        sql.SQL("SELECT data FROM {} WHERE type = %s ORDER BY id").format(
            sql.Identifier(names.outbox_schema, settings.signal_table)
        ),
        (PENDING,),
    ).fetchall()
    return [str(json.loads(r[0])) for r in rows]
