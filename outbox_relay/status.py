"""`cdcpipe relay status`: Postgres's view of the outbox and its relay (who leads, stalls, backlog, dead letters)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from outbox_relay.errors import RelayError
from outbox_relay.leader import holder
from outbox_relay.sql import backlog_sql, dead_count_sql, read_backlog_row, status_row_sql, waiting_of_types_sql
from schemas.config import OutboxNames


@contextmanager
def connect(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection for the relay's commands; an unreachable Postgres is a RelayError with the fix."""
    try:
        conn = psycopg.connect(dsn, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise RelayError(
            f"cannot connect to Postgres ({str(exc).strip()}); check CDCPIPE_PG_DSN and PGPASSFILE "
            "(`cdcpipe stack env` prints the local stack's)"
        ) from exc
    with conn:
        yield conn


@dataclass(frozen=True)
class TopicStall:
    """One topic publishing is stalled on: why, since when, and the events waiting for it."""

    topic: str
    reason: str
    since: str
    aggregate_types: list[str]
    waiting: int


@dataclass(frozen=True)
class RelayStatus:
    """What `cdcpipe relay status` shows: Postgres's view of the outbox and of its relay."""

    leader: str | None
    leader_is_a_stranger: bool  # the lock's holder may not delete from the outbox: no relay, and none can lead
    stalled_topic: str | None
    stalled_reason: str | None
    stalled_since: datetime | None
    stalls: list[TopicStall]  # every stalled topic (stalled_*: the first of them, as older tools read it)
    waiting: int
    oldest_age_s: float
    dead_letters: int
    dead_letters_overtaken: int


def status(conn: psycopg.Connection[Any], names: OutboxNames) -> RelayStatus:
    """Who leads, what publishing is stalled on, how much waits, how many dead letters."""
    try:
        return _status(conn, names)
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
        raise RelayError(
            f"{exc.diag.message_primary}: the outbox {names.outbox_schema}.{names.outbox_table} is missing, or was "
            "made by an older `cdcpipe schema apply`; run `cdcpipe schema apply` (it only adds what is missing)"
        ) from exc


def _status(conn: psycopg.Connection[Any], names: OutboxNames) -> RelayStatus:
    leader = holder(conn, names)
    stall = conn.execute(status_row_sql(names)).fetchone()
    stalls = [_topic_stall(conn, names, s) for s in (stall[3] if stall and stall[3] else [])]
    waiting, age = read_backlog_row(conn.execute(backlog_sql(names)).fetchone())  # the relay's own gauge
    dead = conn.execute(dead_count_sql(names)).fetchone()
    assert dead is not None  # noqa: S101 - an aggregate always returns a row
    return RelayStatus(
        leader=leader.said() if leader else None,
        leader_is_a_stranger=leader is not None and not leader.relay,
        stalled_topic=stall[0] if stall else None,
        stalled_reason=stall[1] if stall else None,
        stalled_since=stall[2] if stall else None,
        stalls=stalls,
        waiting=waiting,
        oldest_age_s=age,
        dead_letters=int(dead[0]),
        dead_letters_overtaken=int(dead[1]),
    )


def _topic_stall(conn: psycopg.Connection[Any], names: OutboxNames, stall: dict[str, Any]) -> TopicStall:
    """A stall of the status row, with how many events of its aggregate types wait in the outbox."""
    types = [str(t) for t in stall.get("aggregate_types", [])]
    row = conn.execute(waiting_of_types_sql(names), (types,)).fetchone()
    return TopicStall(
        topic=str(stall["topic"]),
        reason=str(stall["reason"]),
        since=str(stall["since"]),
        aggregate_types=types,
        waiting=int(row[0]) if row else 0,
    )
