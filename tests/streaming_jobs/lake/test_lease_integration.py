"""The tables' writer lease, on the stack's Postgres: one writer at a time, handed over when a holder dies."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import psycopg
import pytest

from cdcpipe.errors import ConfigError
from streaming_jobs.config import SparkSettings
from streaming_jobs.lake.lease import NAMESPACE, LeaseLostError, lease_key, table_lock
from streaming_jobs.lake.paths import LakePath
from tests.conftest import Stack

pytestmark = pytest.mark.integration


def lake(stack: Stack, where: str) -> LakePath:
    return SparkSettings.load(lake=where, lease_pg_dsn=stack.env["CDCPIPE_LEASE_PG_DSN"]).lake_root()


def test_one_writer_at_a_time_per_table_and_the_waiter_is_told_who_holds_it(
    stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = lake(stack, stack.s3_lake()) / "out"
    order: list[str] = []

    def second() -> None:
        with table_lock(table, "second"):
            order.append("second")

    caplog.set_level(logging.INFO, logger="streaming_jobs.lake.lease")
    with table_lock(table, "first"):
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(1)
        order.append("first done")
    waiter.join(10)
    assert order == ["first done", "second"]
    assert "held by cdcpipe first" in caplog.text
    # Another table is not held up by this one's writer.
    with table_lock(table, "first"), table_lock(table.with_name("other"), "elsewhere"):
        pass


def test_a_writer_that_dies_hands_the_lease_over_at_once_and_learns_it_lost_it(stack: Stack, tmp_path: Path) -> None:
    table = lake(stack, str(tmp_path)) / "out"
    waited: list[float] = []

    def cut_and_take_over() -> None:
        # The holder's session is cut (as by a network partition or a Postgres restart) ...
        with psycopg.connect(stack.pg_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'cdcpipe first'"
            )
        started = time.monotonic()
        with table_lock(table, "second"):  # ... and another writer takes the lease at once
            waited.append(time.monotonic() - started)

    with pytest.raises(LeaseLostError, match="session ended while first held it"), table_lock(table, "first"):
        cut_and_take_over()
    assert waited
    assert waited[0] < 5, "the lease of a dead session is free at once"


def test_without_a_lease_database_a_write_says_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCPIPE_LEASE_PG_DSN", raising=False)
    table = SparkSettings.load(lake=str(tmp_path)).lake_root() / "out"
    with pytest.raises(ConfigError, match="set CDCPIPE_LEASE_PG_DSN"), table_lock(table, "w"):
        pass


def another_process_could_take(stack: Stack, table: LakePath) -> bool:
    """Whether a writer elsewhere (a session of its own) would get the table's lease now."""
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (NAMESPACE, lease_key(table))).fetchone()
        if row and row[0]:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (NAMESPACE, lease_key(table)))
        return bool(row and row[0])


def test_a_compaction_shares_its_jobs_lease_and_every_other_writer_still_waits(stack: Stack, tmp_path: Path) -> None:
    table = lake(stack, str(tmp_path)) / "out"
    entered = threading.Event()
    leave = threading.Event()

    def batch() -> None:
        with table_lock(table, "batch"):
            entered.set()
            leave.wait(10)

    with table_lock(table, "optimize", compaction=True):
        # The job's next batch takes the lease its compaction holds, at once ...
        writer = threading.Thread(target=batch)
        writer.start()
        assert entered.wait(5), "a batch waited for its own job's compaction"
        # ... and no other process gets it while either holds it.
        assert not another_process_could_take(stack, table)
    assert not another_process_could_take(stack, table), "the compaction let go of a lease its batch still used"
    leave.set()
    writer.join(10)
    assert another_process_could_take(stack, table), "the last holder did not hand the lease back"


def test_a_user_of_a_shared_lease_that_was_cut_learns_it_lost_it(stack: Stack, tmp_path: Path) -> None:
    table = lake(stack, str(tmp_path)) / "out"

    def batch_while_the_session_is_cut() -> None:
        with pytest.raises(LeaseLostError, match="while batch held it"), table_lock(table, "batch"):
            cut_session(stack, "cdcpipe optimize")

    with pytest.raises(LeaseLostError, match="while optimize held it"), table_lock(table, "optimize", compaction=True):
        batch_while_the_session_is_cut()


def cut_session(stack: Stack, application_name: str) -> None:
    with psycopg.connect(stack.pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
        )


def session_of(stack: Stack, application_name: str) -> int:
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
        ).fetchone()
    assert row, f"no session named {application_name!r}"
    return int(row[0])


def test_a_writer_keeps_its_session_between_writes_and_replaces_one_that_was_cut(stack: Stack, tmp_path: Path) -> None:
    table = lake(stack, str(tmp_path)) / "out"
    with table_lock(table, "batch 1"):
        first = session_of(stack, "cdcpipe batch 1")
    with table_lock(table, "batch 2"):
        assert session_of(stack, "cdcpipe batch 2") == first, "a new Postgres session for every batch"
    cut_session(stack, "cdcpipe batch 2")  # idle between batches: a Postgres restart, a cut network
    with table_lock(table, "batch 3"):
        assert session_of(stack, "cdcpipe batch 3") != first
        assert not another_process_could_take(stack, table)
    assert another_process_could_take(stack, table)
