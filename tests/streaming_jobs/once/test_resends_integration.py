"""A resent event, landing in a later micro-batch than its original, is applied once by every job kind.

Publishers resend by design: our relay after a crash or a partial acknowledgement, Debezium after a
restart. The copy has the original's event id (outbox kinds) or key and LSN (table kinds), at a new offset.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.jobs import BALANCES, change, deposit, make_job, opened, row, send, send_changes
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def test_a_projection_adds_a_resent_deposit_once(stack: Stack, topic: str, tmp_path: Path) -> None:
    job = make_job(stack, tmp_path, "projection", [topic], projection=BALANCES)
    first = send(
        stack,
        topic,
        [("acc", "AccountOpened", opened("acc"), None), ("acc", "MoneyDeposited", deposit("acc", 100), None)],
    )
    job.run()
    assert {r["account_id"]: r["balance"] for r in job.table()} == {"acc": 100}
    # The deposit again (same event id), then a new one: the copy is in a later batch than its original.
    send(
        stack,
        topic,
        [
            ("acc", "MoneyDeposited", deposit("acc", 100), {"id": first[1]}),
            ("acc", "MoneyDeposited", deposit("acc", 5), None),
        ],
    )
    job.run()
    assert {r["account_id"]: r["balance"] for r in job.table()} == {"acc": 105}


def test_latest_state_keeps_the_newer_state_when_an_older_event_is_resent(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    job = make_job(stack, tmp_path, "latest_state", [topic])
    ids = send(
        stack,
        topic,
        [("acc", "MoneyDeposited", deposit("acc", 1), None), ("acc", "MoneyDeposited", deposit("acc", 2), None)],
    )
    job.run()
    send(stack, topic, [("acc", "MoneyDeposited", deposit("acc", 1), {"id": ids[0]})])
    job.run()
    (state,) = job.table()
    assert state["event_id"] == ids[1]
    assert json.loads(str(state["payload"]))["amount"] == 2


def test_history_makes_one_version_of_a_resent_change(stack: Stack, topic: str, tmp_path: Path) -> None:
    job = make_job(stack, tmp_path, "table_history", [topic], source_table="public.accounts")
    updated = change("u", row("k", 1), row("k", 2), 20)
    send_changes(stack, topic, [("k", change("c", None, row("k", 1), 10)), ("k", updated)])
    job.run()
    send_changes(stack, topic, [("k", updated)])  # Debezium after a restart: the same change again
    job.run()
    versions = sorted((r["balance"], r["is_current"]) for r in job.table())
    assert versions == [(1, False), (2, True)]


def test_a_mirror_does_not_bring_back_a_deleted_row_when_its_insert_is_resent(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    job = make_job(stack, tmp_path, "table_mirror", [topic], source_table="public.accounts")
    inserted = change("c", None, row("k", 1), 10)
    send_changes(
        stack,
        topic,
        [("k", inserted), ("k", change("d", row("k", 1), None, 20)), ("j", change("c", None, row("j", 7), 15))],
    )
    job.run()
    assert [r["id"] for r in job.table()] == ["j"]
    send_changes(stack, topic, [("k", inserted)])
    job.run()
    assert [r["id"] for r in job.table()] == ["j"]
