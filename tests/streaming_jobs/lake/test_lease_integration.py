"""The tables' writer lease, on the stack's Postgres: one writer at a time, handed over when a holder dies."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from ground.errors import ConfigError
from streaming_jobs.config import JobsSettings
from streaming_jobs.lake.lease import (
    HEARTBEAT_S,
    IDLE_TIMEOUT_S,
    NAMESPACE,
    LeaseLostError,
    LeaseWaitError,
    lease_key,
    table_lock,
)
from streaming_jobs.lake.paths import LakePath
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def lake(stack: Stack, where: str) -> LakePath:
    return JobsSettings.load(lake=where, lease_pg_dsn=stack.env["CDCPIPE_LEASE_PG_DSN"]).lake_root()


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
    table = JobsSettings.load(lake=str(tmp_path)).lake_root() / "out"
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


HOLDER = """
import sys, time
from streaming_jobs.config import JobsSettings
from streaming_jobs.lake.lease import LeaseLostError, ensure_held, table_lock
table = JobsSettings.load(lake=sys.argv[1]).lake_root() / "out"
try:
    with table_lock(table, "frozen"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))  # a batch that outlives the idle timeout: the heartbeat keeps the lease
        print("still held after", sys.argv[2], flush=True)
        sys.stdin.readline()  # frozen here by the test, and woken after another writer took over
        ensure_held(table, "frozen")  # what a batch does right before its commit
        print("committed", flush=True)
except LeaseLostError as exc:
    print("refused:", exc, flush=True)
"""


def test_a_frozen_writer_loses_its_lease_within_the_bound_and_never_commits_after(stack: Stack, tmp_path: Path) -> None:
    """A holder that stops answering is taken over within IDLE_TIMEOUT_S, and never commits after.

    SIGSTOP: its kernel still answers TCP keepalives. Woken, it learns before its commit that the lease is gone. A
    live holder keeps it for longer than the timeout.
    """
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = {**stack.process_env(), "CDCPIPE_LEASE_PG_DSN": stack.env["CDCPIPE_LEASE_PG_DSN"]}
    busy_s = IDLE_TIMEOUT_S + 6
    with subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(busy_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdin is not None
        try:
            assert holder.stdout.readline().strip() == "held"
            table = lake(stack, str(tmp_path)) / "out"
            assert not another_process_could_take(stack, table)
            assert holder.stdout.readline().startswith("still held after"), "a live holder keeps it past the timeout"
            assert not another_process_could_take(stack, table)
            os.kill(holder.pid, signal.SIGSTOP)
            frozen = time.monotonic()
            with table_lock(table, "next writer"):
                took_over = time.monotonic() - frozen
            assert took_over < IDLE_TIMEOUT_S + HEARTBEAT_S + 5, f"took over after {took_over:.1f} s"
            os.kill(holder.pid, signal.SIGCONT)
            holder.stdin.write("go on\n")
            holder.stdin.flush()
            said = holder.stdout.read()
            holder.wait(60)
        finally:
            if holder.poll() is None:
                os.kill(holder.pid, signal.SIGCONT)
                holder.kill()
    assert "committed" not in said
    assert said.startswith("refused:"), said  # LeaseLostError: before its commit, or at release


def test_a_waiter_gives_up_after_its_lease_wait_naming_the_holder(stack: Stack, tmp_path: Path) -> None:
    table = (
        JobsSettings.load(
            lake=str(tmp_path), lease_pg_dsn=stack.env["CDCPIPE_LEASE_PG_DSN"], lease_wait_s=2
        ).lake_root()
        / "out"
    )
    failed: list[BaseException] = []

    def second() -> None:
        try:
            with table_lock(table, "second"):
                pass
        except LeaseWaitError as exc:
            failed.append(exc)

    with table_lock(table, "slow holder"):
        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(30)
    assert len(failed) == 1
    assert "held by cdcpipe slow holder" in str(failed[0])
    assert "lease_wait_s" in str(failed[0])


def test_a_lease_taken_by_a_session_of_another_role_is_named_a_stranger_with_the_fix(
    stack: Stack, tmp_path: Path
) -> None:
    """Advisory locks need no privilege: a role that is not the writers' holding a table's lease is said to be one."""
    table = (
        JobsSettings.load(
            lake=str(tmp_path), lease_pg_dsn=stack.env["CDCPIPE_LEASE_PG_DSN"], lease_wait_s=2
        ).lake_root()
        / "out"
    )
    writer = conninfo_to_dict(stack.env["CDCPIPE_WRITER_PG_DSN"])["user"]
    with psycopg.connect(stack.env["CDCPIPE_WRITER_PG_DSN"], autocommit=True, application_name="squatter") as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", (NAMESPACE, lease_key(table)))
        pid = other.info.backend_pid
        with pytest.raises(LeaseWaitError) as failed, table_lock(table, "job"):
            pass
    said = str(failed.value)
    assert f"held by squatter (local, pid {pid}, role {writer}), a STRANGER" in said, said
    assert f"pg_terminate_backend({pid})" in said, said
