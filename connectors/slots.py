"""The source side of a Debezium connector: its replication slot, and how much WAL it holds back."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from connectors.config import ConnectSettings
from connectors.errors import ConnectError


@dataclass(frozen=True)
class SlotStatus:
    """One replication slot as Postgres sees it."""

    name: str
    plugin: str | None
    active: bool
    retained_wal_bytes: int  # WAL Postgres keeps for this slot (from restart_lsn): disk it cannot free
    lag_bytes: int  # from what the consumer confirmed to the current WAL position


def _connect(settings: ConnectSettings) -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(settings.pg_dsn.get_secret_value(), connect_timeout=10, autocommit=True)
    except psycopg.OperationalError as exc:
        raise ConnectError(f"cannot read replication slots from Postgres ({exc}); check CDCPIPE_PG_DSN") from exc


def slot_status(settings: ConnectSettings, slot: str) -> SlotStatus | None:
    """The slot's state, or None when it does not exist (yet, or any more)."""
    with _connect(settings) as conn:
        row = conn.execute(
            "SELECT slot_name, plugin, active, "
            "coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, "
            "coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    if row is None:
        return None
    name, plugin, active, retained, lag = row
    return SlotStatus(
        str(name), None if plugin is None else str(plugin), bool(active), int(str(retained)), int(str(lag))
    )


def drop_slot(settings: ConnectSettings, slot: str) -> None:
    """Drop a slot (the events it still holds are lost for its consumer)."""
    with _connect(settings) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def drop_publication(settings: ConnectSettings, publication: str) -> None:
    """Drop a publication (a connector using it fails until it exists again)."""
    with _connect(settings) as conn:
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))
