"""`cdcpipe relay redrive`: dead letters back into the outbox, in their aggregate's order.

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

from dataclasses import dataclass
from typing import Any

import psycopg

from outbox_relay.errors import RedriveError
from outbox_relay.sql import dead_letters_sql, lock_outbox_sql, redrive_sql
from schemas.config import OutboxNames


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
    try:
        with conn.transaction():
            conn.execute(lock_outbox_sql(names))
            rows = conn.execute(dead_letters_sql(names, reason, aggregate_type)).fetchall()
            chosen = [r for r in rows if allow_reorder or not r[5]]
            left = [_ref(r) for r in rows if not (allow_reorder or not r[5])]
            if chosen and not dry_run:
                seqs = [r[0] for r in chosen]
                moved = conn.execute(redrive_sql(names), (seqs,)).fetchall()
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
