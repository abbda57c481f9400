"""The relay rides out a Kafka outage and a Postgres restart, and resumes by itself; so does a running job (short fault tests)."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from infra import stack as local_stack
from infra.config import StackSettings
from infra.services import Kafka, Postgres, Service
from tests.support.jobs import BALANCES, alive_and, deposit, job_env, job_rows, status
from tests.support.kafka import read_topics
from tests.support.outbox import Outbox
from tests.support.relay import by_key, dead_rows_held_back_after_a_flood, relay_process
from tests.support.stack import Stack, cdcpipe, stack_of_its_own
from tests.support.waits import wait_until

# One worker runs the module's tests one after another, on the stack of their own (`stack` below).
pytestmark = [pytest.mark.integration, pytest.mark.own_stack, pytest.mark.xdist_group("outages")]

# Longer than a job's offset lookups wait for Kafka before its query fails (streaming_jobs.config.FAILOVER).
OUTAGE_S = 3 * 21 + 20


def job_log(env: dict[str, str], name: str) -> str:
    return (Path(env["CDCPIPE_RUN_DIR"]) / f"{name}.log").read_text()


@pytest.fixture(scope="module")
def stack(stack: Stack) -> Iterator[Stack]:
    """The module's own stack, beside the suite's: its tests stop and crash Kafka and Postgres.

    No Spark cluster: its jobs run in their drivers.
    """
    with stack_of_its_own(stack, "outages", spark_cluster=False) as own:
        yield own


def stop_service(stack: Stack, service: type[Service]) -> StackSettings:
    """Stop one service of the module's stack."""
    settings = StackSettings.load(home=stack.home)
    assert service(settings).process.stop(), f"{service.name} was not running"
    return settings


def restart(stack: Stack, settings: StackSettings) -> None:
    local_stack.up(settings, spark_cluster=stack.cluster is not None, report=lambda _: None)


def test_a_kafka_outage_past_a_jobs_offset_lookups_the_relay_retries_and_a_running_job_rides_it_out(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    """Kafka down for longer than a job's offset lookups wait (3 tries of 20 s): both ends heal by themselves.

    The relay retries and resumes, each key's events in order; a projection submitted before the outage stays up
    in the same driver (a whole-cluster restart used to stop every job: bench/chaos.py on `stack up --cluster`)
    and applies every event once: balances are sums, so a batch applied twice or skipped would show.
    """
    log = tmp_path / "relay.log"
    name, env = job_env(stack, tmp_path, "projection", outbox.topic("account"), projection=BALANCES)
    assert cdcpipe("jobs", "submit", name, env=env).returncode == 0
    driver = status(name, env)["pid"]
    # Batches of 20: the 100 rows written during the outage are full batches, so the relay is behind and
    # overlapping them (one in flight, the next taken) when Kafka fails; both must go back to the outbox.
    process = relay_process(
        stack, outbox, log, CDCPIPE_DELIVERY_TIMEOUT_S="3", CDCPIPE_BACKOFF_MAX_S="2", CDCPIPE_BATCH_SIZE="20"
    )
    expected: dict[str, int] = defaultdict(int)

    def deposits(numbers: range) -> list[str]:
        for i in numbers:
            expected[f"a-{i % 5}"] += i + 1
        return outbox.insert(
            [("account", f"a-{i % 5}", "MoneyDeposited", json.loads(deposit(f"a-{i % 5}", i + 1))) for i in numbers]
        )

    def balanced() -> bool:
        return {str(r["account_id"]): r["balance"] for r in job_rows(tmp_path)} == expected

    try:
        ids = deposits(range(100))
        wait_until(lambda: outbox.count() == 0, 30, "the first events to be published")
        wait_until(alive_and(name, env, tmp_path, balanced), 300, "the job to apply the first events")
        settings = stop_service(stack, Kafka)
        down_at = time.monotonic()
        ids += deposits(range(100, 200))
        wait_until(lambda: "retrying" in log.read_text(), 30, "the relay to report the outage")
        # Waiting for Kafka, the relay still reads its notifications: Postgres can still clean up.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            held_back = dead_rows_held_back_after_a_flood(conn, outbox)
        assert held_back[-1:] == [0], (
            f"while Kafka was down, {len(held_back)} VACUUMs in 20s left the scratch table's dead rows "
            f"(last: {held_back[-1:]}): something held the database's xmin horizon"
        )
        assert outbox.count() == 100, "nothing may leave the outbox while Kafka is down"
        # Past the job's offset lookups (FAILOVER: 3 tries of 20 s), its query failed at least once on Kafka.
        wait_until(
            alive_and(name, env, tmp_path, lambda: time.monotonic() - down_at > OUTAGE_S),
            OUTAGE_S + 30,
            f"an outage of {OUTAGE_S} s with the job alive",
        )
        assert "Kafka did not answer" in job_log(env, name), job_log(env, name)[-3000:]
        restart(stack, settings)
        wait_until(lambda: outbox.count() == 0, 90, "the relay to resume after Kafka came back")
        wait_until(alive_and(name, env, tmp_path, balanced), 300, "the job to apply what was written meanwhile")
        assert status(name, env)["pid"] == driver, "the job's driver was restarted"
    finally:
        process.terminate()
        process.wait(30)
        cdcpipe("jobs", "stop", name, env=env)
    records = read_topics(stack.kafka_config(), [outbox.topic("account")], 200, timeout_s=60)
    assert {r.headers["id"].decode() for r in records} == set(ids)
    by_account: dict[bytes, list[bytes]] = defaultdict(list)  # one writer: insert order is commit order
    for i, event_id in enumerate(ids):
        by_account[f"a-{i % 5}".encode()].append(event_id.encode())
    assert by_key(records) == by_account


def test_postgres_restart_the_relay_reconnects(stack: Stack, outbox: Outbox, tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    process = relay_process(stack, outbox, log, CDCPIPE_BACKOFF_MAX_S="2")
    try:
        ids = outbox.insert([("order", "o-1", "OrderPlaced", {"n": i}) for i in range(50)])
        wait_until(lambda: outbox.count() == 0, 30, "the first events to be published")
        settings = stop_service(stack, Postgres)
        wait_until(lambda: "postgres unreachable" in log.read_text(), 30, "the relay to report the outage")
        restart(stack, settings)
        ids += outbox.insert([("order", "o-1", "OrderPlaced", {"n": i}) for i in range(50, 100)])
        wait_until(lambda: outbox.count() == 0, 60, "the relay to reconnect and publish")
        assert process.poll() is None, "the relay exited instead of reconnecting"
    finally:
        process.terminate()
        process.wait(30)
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], 100, timeout_s=60)
    assert {r.headers["id"].decode() for r in records} == set(ids)


def test_a_postgres_crash_mid_stream_loses_nothing(stack: Stack, outbox: Outbox, tmp_path: Path) -> None:
    """The relay commits its removals without waiting for the WAL flush; a crash may undo some, never lose a row."""
    log = tmp_path / "relay.log"
    ids = outbox.insert([("order", f"o-{i % 20}", "OrderPlaced", {"n": i}) for i in range(20_000)])
    process = relay_process(stack, outbox, log, CDCPIPE_BATCH_SIZE="500", CDCPIPE_BACKOFF_MAX_S="2")
    try:
        wait_until(lambda: outbox.count() < 15_000, 60, "the relay to be mid-stream")
        settings = StackSettings.load(home=stack.home)
        # SIGQUIT is Postgres's immediate shutdown: no checkpoint, no flush of what is not flushed yet; the
        # restart goes through crash recovery, as after a power cut of the database alone.
        crashed = replace(Postgres(settings).process, stop_signal=signal.SIGQUIT)
        assert crashed.stop(), "postgres was not running"
        restart(stack, settings)
        wait_until(lambda: outbox.count() == 0, 120, "the relay to reconnect and drain the outbox")
        assert process.poll() is None, "the relay exited instead of reconnecting"
    finally:
        process.terminate()
        process.wait(30)
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], len(ids), timeout_s=60)
    assert {r.headers["id"].decode() for r in records} == set(ids)
    expected: dict[bytes, list[bytes]] = defaultdict(list)
    for i, event_id in enumerate(ids):
        expected[f"o-{i % 20}".encode()].append(event_id.encode())
    assert by_key(records) == expected  # per key, the first copies keep commit order
    sys.stderr.write(f"{len(records) - len(ids)} events sent again after the crash\n")
