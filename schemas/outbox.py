"""The outbox table, its dead letters, the roles and what Debezium needs: `cdcpipe schema apply`.

Ordering. A row's `seq` is given by a BEFORE INSERT trigger *after* it takes a transaction-scoped advisory
lock on the row's aggregate. A second transaction writing an event of the same aggregate therefore waits
at its insert until the first one commits or aborts, and only then draws its `seq`: within an aggregate,
`seq` order is commit order. The relay publishes visible rows in `seq` order and removes them once Kafka
has them, so a transaction that commits late is still in the table when it becomes visible: no cursor,
nothing to skip.

Waking. A statement-level AFTER INSERT trigger sends NOTIFY on the outbox's channel; Postgres delivers it
at commit, so the relay wakes the moment a row becomes visible, never on a timer.

Everything here is idempotent (IF NOT EXISTS, CREATE OR REPLACE, grants), and every configured name is
passed as a quoted identifier or a literal, never spliced into SQL text.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from pydantic import SecretStr

from ground.scram import scram_verifier
from schemas.config import OutboxNames, SchemaSettings
from schemas.errors import SchemaError

# The functions' bodies hold no configured name: the sequence arrives as a trigger argument (a literal).
# A seq given by a role that may also remove outbox rows (`cdcpipe relay redrive`, putting a dead letter
# back under its own seq) is kept; any other writer's is replaced, so an application cannot reorder events.
_ASSIGN_SEQ = """
BEGIN
    IF NEW.seq IS NOT NULL AND pg_catalog.has_table_privilege(session_user, TG_RELID, 'DELETE') THEN
        RETURN NEW;
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtext(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME),
        pg_catalog.hashtext(NEW.aggregatetype || E'\\x1f' || NEW.aggregateid));
    NEW.seq := pg_catalog.nextval(TG_ARGV[0]::pg_catalog.regclass);
    RETURN NEW;
END
"""

_NOTIFY = """
BEGIN
    PERFORM pg_catalog.pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END
"""


def qualified(names: OutboxNames, table: str) -> sql.Identifier:
    """`"schema"."table"` for one of the outbox's objects."""
    return sql.Identifier(names.outbox_schema, table)


def statements(names: OutboxNames, settings: SchemaSettings) -> list[sql.Composed]:
    """Every statement `apply` runs, in order (also what `schema apply --dry-run` prints)."""
    schema = sql.Identifier(names.outbox_schema)
    outbox = qualified(names, names.outbox_table)
    dead = qualified(names, names.dead_letter_table)
    status = qualified(names, names.relay_status_table)
    seq = qualified(names, names.sequence)
    heartbeat = qualified(names, settings.heartbeat_table)
    signal = qualified(names, settings.signal_table)
    assign_fn = qualified(names, names.assign_function)
    notify_fn = qualified(names, names.notify_function)
    writer, relay = sql.Identifier(settings.writer_role), sql.Identifier(settings.relay_role)
    debezium, monitor = sql.Identifier(settings.debezium_role), sql.Identifier(settings.monitor_role)
    seq_literal = sql.Literal(f"{_quote_ident(names.outbox_schema)}.{_quote_ident(names.sequence)}")

    return [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema),
        sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(seq),
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {outbox} (
                seq bigint NOT NULL PRIMARY KEY,
                id uuid NOT NULL UNIQUE DEFAULT pg_catalog.gen_random_uuid(),
                aggregatetype text NOT NULL CHECK (aggregatetype <> ''),
                aggregateid text NOT NULL,
                type text NOT NULL,
                type_version integer NOT NULL DEFAULT 1,
                payload jsonb,
                created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
            )"""
        ).format(outbox=outbox),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            outbox,
            sql.Literal(
                "cdcpipe outbox: columns as Debezium's EventRouter expects; seq (commit order per aggregate) "
                "and the NOTIFY are set by triggers; the relay removes a row once Kafka acknowledged it"
            ),
        ),
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {dead} (
                seq bigint NOT NULL PRIMARY KEY,
                id uuid NOT NULL,
                aggregatetype text NOT NULL,
                aggregateid text NOT NULL,
                type text NOT NULL,
                type_version integer NOT NULL,
                payload jsonb,
                created_at timestamptz NOT NULL,
                reason text NOT NULL,
                failed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
                overtaken boolean NOT NULL DEFAULT false
            )"""
        ).format(dead=dead),
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {status} (
                id integer PRIMARY KEY CHECK (id = 1),
                stalled_topic text,
                stalled_reason text,
                stalled_since timestamptz,
                updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
                stalls jsonb  -- every topic publishing is stalled on, with the aggregate types waiting for it
            )"""
        ).format(status=status),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER "
            "SET search_path = pg_catalog, pg_temp AS {body}"
        ).format(fn=assign_fn, body=sql.Literal(_ASSIGN_SEQ)),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql "
            "SET search_path = pg_catalog, pg_temp AS {body}"
        ).format(fn=notify_fn, body=sql.Literal(_NOTIFY)),
        sql.SQL("REVOKE ALL ON FUNCTION {}() FROM PUBLIC").format(assign_fn),
        sql.SQL(
            "CREATE OR REPLACE TRIGGER cdcpipe_assign_seq BEFORE INSERT ON {outbox} "
            "FOR EACH ROW EXECUTE FUNCTION {fn}({seq})"
        ).format(outbox=outbox, fn=assign_fn, seq=seq_literal),
        sql.SQL(
            "CREATE OR REPLACE TRIGGER cdcpipe_notify AFTER INSERT ON {outbox} "
            "FOR EACH STATEMENT EXECUTE FUNCTION {fn}({channel})"
        ).format(outbox=outbox, fn=notify_fn, channel=sql.Literal(names.notify_channel)),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (id integer PRIMARY KEY, beat timestamptz NOT NULL DEFAULT pg_catalog.now())"
        ).format(heartbeat),
        # Debezium's signal table, in the shape it requires: `cdcpipe tables snapshot` inserts execute-snapshot
        # signals; the connector itself inserts the watermarks of each incremental snapshot chunk.
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))"
        ).format(signal),
        # Roles: created without login unless a password is configured, so an admin can also grant them.
        *_role(settings.writer_role, settings.writer_secret()),
        *_role(settings.relay_role, settings.relay_secret()),
        *_role(settings.debezium_role, settings.debezium_secret()),
        *_role(settings.monitor_role, settings.monitor_secret()),
        # Reads every session's and slot's statistics (pg_stat_activity, pg_replication_slots), and nothing else.
        sql.SQL("GRANT pg_monitor TO {}").format(monitor),
        # Debezium streams through a replication slot; it needs no superuser, only REPLICATION.
        sql.SQL("ALTER ROLE {} REPLICATION").format(sql.Identifier(settings.debezium_role)),
        sql.SQL("REVOKE ALL ON {outbox}, {dead}, {status} FROM PUBLIC").format(outbox=outbox, dead=dead, status=status),
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}, {}").format(schema, writer, relay),
        sql.SQL("GRANT INSERT ON {} TO {}").format(outbox, writer),
        sql.SQL("GRANT SELECT, DELETE ON {} TO {}").format(outbox, relay),
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON {} TO {}").format(dead, relay),
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON {} TO {}").format(status, relay),
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, debezium),
        sql.SQL("GRANT SELECT ON {} TO {}").format(outbox, debezium),
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, monitor),
        sql.SQL("GRANT SELECT ON {}, {}, {} TO {}").format(outbox, dead, status, monitor),
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON {} TO {}").format(heartbeat, debezium),
        sql.SQL("GRANT SELECT, INSERT, DELETE ON {} TO {}").format(signal, debezium),
        *[
            statement
            for table in settings.captured_tables
            for statement in (
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(table.split(".", 1)[0]), debezium),
                sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(*table.split(".", 1)), debezium),
            )
        ],
        *[
            sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(*table.split(".", 1)))
            for table in settings.replica_identity_full
        ],
    ]


def _role(name: str, password: SecretStr | None) -> list[sql.Composed]:
    role = sql.Identifier(name)
    create = sql.SQL(
        "DO $cdcpipe$ BEGIN CREATE ROLE {} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $cdcpipe$"
    ).format(role)
    if password is None:
        return [create]
    # Postgres stores a SCRAM verifier given in place of a password as it is: the password itself never
    # reaches the server, its statement log or pg_stat_statements.
    verifier = scram_verifier(password.get_secret_value())
    return [create, sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(verifier))]


def _quote_ident(name: str) -> str:
    """The identifier as Postgres quotes it, for a regclass literal (a name, not SQL text)."""
    return '"' + name.replace('"', '""') + '"'


def apply(conn: psycopg.Connection[object], names: OutboxNames, settings: SchemaSettings) -> None:
    """Create or bring up to date every object, in one transaction: all of it, or nothing."""
    with conn.transaction():
        # Two applies at once (two outboxes, or two deploys) grant on the same roles and schemas; Postgres
        # refuses the second concurrent change of one catalog row ("tuple concurrently updated"): take turns.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('cdcpipe schema apply'))")
        for statement in statements(names, settings):
            conn.execute(statement)
        _ensure_publication(conn, names, settings)


def apply_with_settings(names: OutboxNames, settings: SchemaSettings) -> None:
    """`cdcpipe schema apply`: connect with the settings' DSN and `apply`; an unreachable Postgres is a SchemaError."""
    try:
        with psycopg.connect(settings.pg_dsn.get_secret_value(), connect_timeout=10) as conn:
            apply(conn, names, settings)
    except psycopg.OperationalError as exc:
        raise SchemaError(f"cannot connect to Postgres ({exc}); check CDCPIPE_PG_DSN and PGPASSFILE") from exc


def _ensure_publication(conn: psycopg.Connection[object], names: OutboxNames, settings: SchemaSettings) -> None:
    """The outbox publication, and the business tables' one.

    Each also carries the heartbeat table, so a heartbeat moves the slot of an idle source: no pinned WAL.
    The tables' one also carries the signal table (incremental snapshots), and only grows here: a table
    `cdcpipe tables add` put in it stays until `cdcpipe tables remove` takes it out.
    """
    heartbeat = qualified(names, settings.heartbeat_table)
    outbox = [qualified(names, names.outbox_table), heartbeat]
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (settings.publication,)).fetchone()
    verb = "ALTER PUBLICATION {} SET TABLE {}" if exists else "CREATE PUBLICATION {} FOR TABLE {}"
    conn.execute(sql.SQL(verb).format(sql.Identifier(settings.publication), sql.SQL(", ").join(outbox)))
    if settings.captured_tables:
        add_to_tables_publication(conn, names, settings, settings.captured_tables)


def publication_tables(conn: psycopg.Connection[object], publication: str) -> set[str] | None:
    """The tables (schema.table) a publication carries; None when it does not exist."""
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone() is None:
        return None
    rows = conn.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (publication,))
    return {f"{row[0]}.{row[1]}" for row in rows.fetchall()}  # type: ignore[index]


def add_to_tables_publication(
    conn: psycopg.Connection[object], names: OutboxNames, settings: SchemaSettings, tables: tuple[str, ...]
) -> list[str]:
    """Put `tables` (with the heartbeat and signal tables) in the business tables' publication; what was added."""
    wanted = [
        *tables,
        f"{names.outbox_schema}.{settings.heartbeat_table}",
        f"{names.outbox_schema}.{settings.signal_table}",
    ]
    publication = sql.Identifier(settings.tables_publication)
    # A partitioned table's changes are published under its own name, not each partition's (a partition
    # attached later included): the name Debezium captures, one topic for the whole table.
    row = conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (settings.tables_publication,))
    via_root: tuple[bool] | None = row.fetchone()  # type: ignore[assignment]
    if via_root is not None and not via_root[0]:
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)").format(publication))
    held = publication_tables(conn, settings.tables_publication)
    missing = [t for t in dict.fromkeys(wanted) if held is None or t not in held]
    if missing:
        listed = sql.SQL(", ").join(sql.Identifier(*t.split(".", 1)) for t in missing)
        if held is None:
            verb = "CREATE PUBLICATION {} FOR TABLE {} WITH (publish_via_partition_root = true)"
        else:
            verb = "ALTER PUBLICATION {} ADD TABLE {}"
        conn.execute(sql.SQL(verb).format(publication, listed))
    return [t for t in missing if t in tables]
