"""`cdcpipe relay redrive` and `cdcpipe relay status`: dead letters back into the outbox; what the relay waits on.

The order rule. A dead letter goes back under its own `seq`, so it is published before every event of its
aggregate still waiting in the outbox. Events of its aggregate that were already published after it cannot
be called back: the relay marks such a dead letter `overtaken` in the transaction that publishes the later
event. Redrive moves an overtaken dead letter only with `allow_reorder` (consumers will see it after a later
event of its aggregate), and otherwise leaves it and names it.

Redrive holds a SHARE ROW EXCLUSIVE lock on the outbox while it reads and moves: it waits for the relay's
batches in flight to commit (so every `overtaken` mark is final), and no batch is taken until it commits.
Application inserts wait the same few milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from outbox_relay.errors import RedriveError, RelayError
from outbox_relay.leader import holder
from outbox_relay.sql import backlog_sql, read_backlog_row
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
class DeadLetterRef:
    """One dead letter, as redrive reports it."""

    seq: int
    id: str
    aggregatetype: str
    aggregateid: str
    reason: str


@dataclass(frozen=True)
class Redriven:
    """What a redrive moved, and what it left because later events of its aggregate were already published."""

    moved: list[DeadLetterRef]
    left_overtaken: list[DeadLetterRef]


def redrive(
    conn: psycopg.Connection[Any],
    names: OutboxNames,
    *,
    reason: str | None = None,
    aggregate_type: str | None = None,
    allow_reorder: bool = False,
    dry_run: bool = False,
) -> Redriven:
    """Move the dead letters matching the filters back into the outbox, in one transaction.

    `reason` matches a part of the recorded reason (case-insensitive); `aggregate_type` exactly.
    """
    outbox = sql.Identifier(names.outbox_schema, names.outbox_table)
    dead = sql.Identifier(names.outbox_schema, names.dead_letter_table)
    where = sql.SQL(" AND ").join(
        [
            sql.SQL("true"),
            *([sql.SQL("strpos(lower(reason), lower({})) > 0").format(sql.Literal(reason))] if reason else []),
            *([sql.SQL("aggregatetype = {}").format(sql.Literal(aggregate_type))] if aggregate_type else []),
        ]
    )
    try:
        with conn.transaction():
            conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(outbox))
            rows = conn.execute(
                sql.SQL(
                    "SELECT seq, id::text, aggregatetype, aggregateid, reason, overtaken FROM {} WHERE {} ORDER BY seq"
                ).format(dead, where)
            ).fetchall()
            chosen = [r for r in rows if allow_reorder or not r[5]]
            left = [_ref(r) for r in rows if not (allow_reorder or not r[5])]
            if chosen and not dry_run:
                seqs = [r[0] for r in chosen]
                moved = conn.execute(
                    sql.SQL(
                        "WITH back AS (DELETE FROM {dead} WHERE seq = ANY(%s) "
                        "RETURNING seq, id, aggregatetype, aggregateid, type, type_version, payload, created_at) "
                        "INSERT INTO {outbox} (seq, id, aggregatetype, aggregateid, type, type_version, payload, "
                        "created_at) SELECT * FROM back ORDER BY seq RETURNING seq"
                    ).format(dead=dead, outbox=outbox),
                    (seqs,),
                ).fetchall()
                kept = {r[0] for r in moved}
                if kept != set(seqs):
                    raise RedriveError(
                        f"{len(seqs) - len(kept & set(seqs))} dead letters did not keep their seq in "
                        f"{names.outbox_schema}.{names.outbox_table}: this role may not remove outbox rows, so the "
                        "outbox's trigger gave them new ones (after later events). Nothing was moved; redrive as "
                        "the outbox's owner (CDCPIPE_PG_DSN of `cdcpipe schema apply`)"
                    )
    except psycopg.errors.UniqueViolation as exc:
        raise RedriveError(
            f"a dead letter's event id is already in the outbox ({exc.diag.message_detail}); nothing was moved. "
            "Remove that row from the dead letters, or from the outbox, then redrive again"
        ) from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise RedriveError(
            f"this role may not move dead letters ({exc.diag.message_primary}); nothing was moved. Redrive as the "
            "outbox's owner"
        ) from exc
    return Redriven(moved=[_ref(r) for r in chosen], left_overtaken=left)


def _ref(row: tuple[Any, ...]) -> DeadLetterRef:
    return DeadLetterRef(seq=row[0], id=row[1], aggregatetype=row[2], aggregateid=row[3], reason=row[4])


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
    stall = conn.execute(
        sql.SQL("SELECT stalled_topic, stalled_reason, stalled_since, stalls FROM {}").format(
            sql.Identifier(names.outbox_schema, names.relay_status_table)
        )
    ).fetchone()
    stalls = [_topic_stall(conn, names, s) for s in (stall[3] if stall and stall[3] else [])]
    waiting, age = read_backlog_row(conn.execute(backlog_sql(names)).fetchone())  # the relay's own gauge
    dead = conn.execute(
        sql.SQL("SELECT count(*), count(*) FILTER (WHERE overtaken) FROM {}").format(
            sql.Identifier(names.outbox_schema, names.dead_letter_table)
        )
    ).fetchone()
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
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE aggregatetype = ANY(%s)").format(
            sql.Identifier(names.outbox_schema, names.outbox_table)
        ),
        (types,),
    ).fetchone()
    return TopicStall(
        topic=str(stall["topic"]),
        reason=str(stall["reason"]),
        since=str(stall["since"]),
        aggregate_types=types,
        waiting=int(row[0]) if row else 0,
    )
