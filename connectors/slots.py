"""The source side of a Debezium connector: its replication slot, and how much WAL it holds back."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from connectors.config import ConnectSettings
from connectors.errors import ConnectError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlotStatus:
    """One replication slot as Postgres sees it."""

    name: str
    plugin: str | None
    active: bool
    retained_wal_bytes: int  # WAL Postgres keeps for this slot (from restart_lsn): disk it cannot free
    lag_bytes: int  # from what the consumer confirmed to the current WAL position


def _connect(
    settings: ConnectSettings, what: str = "read replication slots from Postgres"
) -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(settings.pg_dsn.get_secret_value(), connect_timeout=10, autocommit=True)
    except psycopg.OperationalError as exc:
        raise ConnectError(f"cannot {what} ({exc}); check CDCPIPE_PG_DSN") from exc


_SLOTS = (
    "SELECT slot_name, plugin, active, "
    "coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, "
    "coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint "
    "FROM pg_replication_slots"
)


def _status(row: tuple[object, ...]) -> SlotStatus:
    name, plugin, active, retained, lag = row
    return SlotStatus(
        str(name), None if plugin is None else str(plugin), bool(active), int(str(retained)), int(str(lag))
    )


def slot_status(settings: ConnectSettings, slot: str) -> SlotStatus | None:
    """The slot's state, or None when it does not exist (yet, or any more)."""
    with _connect(settings) as conn:
        row = conn.execute(_SLOTS + " WHERE slot_name = %s", (slot,)).fetchone()
    return None if row is None else _status(row)


def logical_slots(settings: ConnectSettings) -> list[SlotStatus]:
    """Every logical replication slot of the database server, by name."""
    with _connect(settings) as conn:
        return read_logical_slots(conn)


def read_logical_slots(conn: psycopg.Connection[Any]) -> list[SlotStatus]:
    """`logical_slots` on a connection of the caller's (any role with pg_monitor, or the slots' owner)."""
    return [_status(row) for row in conn.execute(_SLOTS + " WHERE slot_type = 'logical' ORDER BY slot_name")]


def human_bytes(count: int) -> str:
    """1536 -> '1.5 KiB': slot sizes are read by people deciding whether to drop them."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def drop_slot(settings: ConnectSettings, slot: str, wait_s: float = 30.0) -> None:
    """Drop a slot (the events it still holds are lost for its consumer).

    A connector that was just deleted keeps its slot active until its task has stopped, so this waits for
    the slot to be released before dropping it.
    """
    deadline = time.monotonic() + wait_s
    with _connect(settings) as conn:
        while True:
            row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if row is None:
                return
            if row[0] is None:
                break
            if time.monotonic() > deadline:
                raise ConnectError(
                    f"replication slot {slot} is still in use by Postgres backend {row[0]} after {wait_s:.0f}s; "
                    "stop whatever streams from it (another connector with this slot.name?) and drop it again"
                )
            time.sleep(0.5)
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        except psycopg.errors.ObjectInUse as exc:
            raise ConnectError(f"replication slot {slot} was taken again before it could be dropped ({exc})") from exc


def drop_publication(settings: ConnectSettings, publication: str) -> None:
    """Drop a publication (a connector using it fails until it exists again)."""
    with _connect(settings) as conn:
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))


HEARTBEAT_QUERY = "heartbeat.action.query"


def heartbeat_query_problem(settings: ConnectSettings, config: dict[str, str]) -> str | None:
    """Why Postgres would refuse the connector's `heartbeat.action.query`, or None when it plans it.

    Debezium runs the query at each heartbeat and, when Postgres refuses it, restarts the connector's task
    every heartbeat interval, its snapshot again each time, while Connect shows the task RUNNING. So the query
    is planned here first, never run: `EXPLAIN (ANALYZE false)` (a query that begins `ANALYZE` is no way to
    make it EXPLAIN ANALYZE), one statement as a prepared statement, in a read-only transaction rolled back, as the
    connector's `database.user` when it is named (its privileges, not CDCPIPE_PG_DSN's), on CDCPIPE_PG_DSN's
    database when it is the connector's.
    """
    query = config.get(HEARTBEAT_QUERY, "").strip().rstrip(";")
    if not query or "postgres" not in config.get("connector.class", "").lower():
        return None
    database = str(conninfo_to_dict(settings.pg_dsn.get_secret_value()).get("dbname", ""))
    named, user = config.get("database.dbname", ""), config.get("database.user", "")
    if named and not named.startswith("${") and named != database:
        return None  # another database than CDCPIPE_PG_DSN's: not one this can see (a provider's is taken as it)
    with _connect(settings, f"check {HEARTBEAT_QUERY} on Postgres") as conn, conn.transaction(force_rollback=True):
        conn.execute("SET TRANSACTION READ ONLY")
        as_user = bool(user) and not user.startswith("${")
        row = conn.execute("SELECT current_user").fetchone()
        planner = str(row[0]) if row else "CDCPIPE_PG_DSN's user"
        if as_user and conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)).fetchone():
            try:
                with conn.transaction():  # a savepoint: a refused SET ROLE leaves the check's transaction usable
                    conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(user)))
                planner = user
            except psycopg.errors.InsufficientPrivilege:
                # CDCPIPE_PG_DSN's user is no member of the connector's role: planned with its own privileges.
                log.warning(
                    "%s planned as %s, not as the connector's database.user %s (not a member of it): "
                    "to check it with the connector's privileges, GRANT %s TO %s",
                    HEARTBEAT_QUERY,
                    planner,
                    user,
                    user,
                    planner,
                )
        try:
            # The user's own SQL, as Debezium runs it; a prepared statement holds one command only.
            conn.execute("EXPLAIN (ANALYZE false) " + query, prepare=True)
        except psycopg.Error as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "multiple commands" in first:
                log.warning("%s holds several statements: not checked, as Debezium runs it", HEARTBEAT_QUERY)
                return None
            return (
                f"Postgres (database {database}, as {planner}) refuses it ({first}), and Debezium would restart "
                "the task every heartbeat: create what it names (`cdcpipe schema apply` makes <outbox "
                "schema>.debezium_heartbeat), grant the connector's role what it needs, or change the query"
            )
    return None
