"""Backfill, replay (+ swap) and rewind on real Kafka, Spark and Delta, through the `cdcpipe` commands.

Balances are increments, so any record applied twice or missed shows in them; the event log shows it by id.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from tests.support.jobs import (
    BALANCES,
    Event,
    alive_and,
    deposit,
    drain,
    job_env,
    jobs_command,
    opened,
    run,
    send,
    status,
    table_rows,
)
from tests.support.kafka import create_topics
from tests.support.stack import Stack
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def balances(path: Path) -> dict[str, object]:
    return {k: r["balance"] for k, r in table_rows(path, "account_id").items()}


def deposits(stack: Stack, topic: str, rounds: int, accounts: int, expected: dict[str, int]) -> None:
    events: list[Event] = []
    for r in range(rounds):
        for i in range(accounts):
            events.append((f"a-{i}", "MoneyDeposited", deposit(f"a-{i}", r + 1), None))
            expected[f"a-{i}"] = expected.get(f"a-{i}", 0) + r + 1
    send(stack, topic, events)


def test_backfill_applies_exactly_the_range_and_a_rerun_changes_nothing(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    start = int(time.time() * 1000) - 3_600_000
    producer = Producer({**stack.kafka_config(), "acks": "all"})
    for i in range(30):  # offset i, timestamped i minutes after `start`
        headers: list[tuple[str, str | bytes | None]] = [
            ("id", f"e-{i}"),
            ("eventType", "AccountOpened"),
            ("eventVersion", "1"),
        ]
        producer.produce(topic, key=f"a-{i}", value=opened(f"a-{i}"), headers=headers, timestamp=start + i * 60_000)
    assert producer.flush(30) == 0
    name, env = job_env(stack, tmp_path, "event_log", topic)
    table = tmp_path / "lake" / "out"

    done = run("jobs", "backfill", name, "--from", f"{topic}:0:10", "--to", f"{topic}:0:25", env=env)
    assert "backfilled 15 records" in done.stdout
    assert f"backfill {name}: 15/15 events (100%)" in done.stderr  # the progress line
    rows = table_rows(table, "event_id")
    assert sorted(rows) == sorted(f"e-{i}" for i in range(10, 25))
    assert {r["kafka_offset"] for r in rows.values()} == set(range(10, 25))
    version = DeltaTable(str(table)).version()

    again = run("jobs", "backfill", name, "--from", f"{topic}:0:10", "--to", f"{topic}:0:25", env=env)
    assert "0 applied" in again.stdout
    assert DeltaTable(str(table)).version() == version, "a rerun must not even commit"
    assert table_rows(table, "event_id") == rows

    # A wider range by time: only what the table does not hold yet is applied.
    from_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((start + 5 * 60_000) / 1000))
    wider = run("jobs", "backfill", name, "--from", from_time, "--to", "latest", env=env)
    assert "backfilled 25 records" in wider.stdout
    assert sorted(table_rows(table, "event_id")) == sorted(f"e-{i}" for i in range(5, 30))


def test_backfill_beside_the_stream_equals_a_clean_replay(stack: Stack, topic: str, tmp_path: Path) -> None:
    name, env = job_env(stack, tmp_path, "projection", topic, projection=BALANCES, max_offsets_per_trigger=400)
    expected: dict[str, int] = {}
    deposits(stack, topic, 100, 20, expected)  # 2,000 records: the stream takes 5 batches at least
    run("jobs", "submit", name, env=env)
    try:
        backfill = subprocess.Popen(
            [sys.executable, "-m", "cdcpipe", "jobs", "backfill", name, "--from", "earliest", "--chunk-size", "500"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deposits(stack, topic, 20, 20, expected)  # more while both run
        output, _ = backfill.communicate(timeout=600)
        assert backfill.returncode == 0, output
        wait_until(
            alive_and(name, env, tmp_path, lambda: status(name, env)["total_lag"] == 0), 300, "the stream to catch up"
        )
    finally:
        run("jobs", "stop", name, env=env)
    streamed = balances(tmp_path / "lake" / "out")
    assert streamed == expected

    rebuilt = run("jobs", "replay", name, "--into", "clean", env=env)
    assert "still uses its old table" in rebuilt.stdout
    assert balances(tmp_path / "lake" / "clean") == streamed


def test_replay_and_swap_rebuild_row_for_row_and_streaming_resumes_without_a_gap(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    name, env = job_env(stack, tmp_path, "latest_state", topic, delete_event_types=["AccountClosed"])
    events: list[Event] = [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(40)]
    events += [(f"a-{i}", "MoneyDeposited", deposit(f"a-{i}", i), None) for i in range(0, 40, 2)]
    events += [(f"a-{i}", "AccountClosed", json.dumps({"account_id": f"a-{i}"}), None) for i in range(0, 40, 5)]
    send(stack, topic, events)
    run("jobs", "submit", name, env=env)
    try:
        wait_until(alive_and(name, env, tmp_path, lambda: status(name, env)["total_lag"] == 0), 300, "the stream")
        old = tmp_path / "lake" / "out"
        streamed = table_rows(old, "aggregate_id")
        assert len(streamed) == 32  # 40 opened, 8 closed

        swapped = run("jobs", "replay", name, "--into", "rebuilt", "--swap", env=env)
        assert "now uses" in swapped.stdout
        report = status(name, env)
        assert report["table"] == str(tmp_path / "lake" / "rebuilt")
        assert report["running"] is True, "the job runs again after the swap"
        assert table_rows(tmp_path / "lake" / "rebuilt", "aggregate_id") == streamed  # row for row

        after: list[Event] = [(f"b-{i}", "AccountOpened", opened(f"b-{i}"), None) for i in range(5)]
        send(stack, topic, after)
        wait_until(
            alive_and(
                name,
                env,
                tmp_path,
                lambda: len(table_rows(tmp_path / "lake" / "rebuilt", "aggregate_id")) == 37,
            ),
            180,
            "the events sent after the swap to reach the new table",
        )
    finally:
        run("jobs", "stop", name, env=env)
    assert table_rows(old, "aggregate_id") == streamed, "the old table is left as it was"


def test_rewind_resumes_earlier_without_applying_a_row_twice(stack: Stack, topic: str, tmp_path: Path) -> None:
    name, env = job_env(stack, tmp_path, "projection", topic, projection=BALANCES)
    table = tmp_path / "lake" / "out"
    expected: dict[str, int] = {}

    deposits(stack, topic, 5, 10, expected)
    drain(name, env)
    assert balances(table) == expected
    deposits(stack, topic, 2, 10, expected)  # 20 more, not applied yet

    moved = run("jobs", "rewind", name, "--to", "earliest", env=env)
    assert f"{topic}[0]: 50 -> 0" in moved.stdout
    assert "@rewind-" in str(status(name, env)["checkpoint"])
    drain(name, env)
    assert balances(table) == expected, "the first 50 deposits read again, not applied again"

    # An incident: the table is restored to its first version, from before any balance. Rewinding now
    # applies again exactly what the restore undid.
    DeltaTable(str(table)).restore(0)
    assert balances(table) == {}
    run("jobs", "rewind", name, "--to", f"{topic}:0:0", env=env)
    drain(name, env)
    assert balances(table) == expected

    # Moving forward past unapplied records is not a rewind.
    deposits(stack, topic, 1, 10, expected)
    refused = jobs_command("jobs", "rewind", name, "--to", "latest", env=env)
    assert refused.returncode == 2
    assert f"{topic}[0] 70 -> 80" in refused.stderr
    assert "only moves back" in refused.stderr


def test_a_range_below_retention_is_refused_naming_the_first_offset_still_there(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    send(stack, topic, [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(20)])
    admin = AdminClient(stack.kafka_config())
    for future in admin.delete_records([TopicPartition(topic, 0, 12)]).values():
        future.result(30)
    name, env = job_env(stack, tmp_path, "event_log", topic)

    refused = jobs_command("jobs", "backfill", name, "--from", f"{topic}:0:3", env=env)
    assert refused.returncode == 2
    assert f"{topic}[0]: offset 3 was deleted by retention; the first offset still available is 12" in refused.stderr
    old = jobs_command("jobs", "backfill", name, "--from", "2000-01-01", env=env)
    assert old.returncode == 2
    assert "may already be deleted by retention; the first offset still available is 12" in old.stderr
    rewind = jobs_command("jobs", "rewind", name, "--to", f"{topic}:0:0", env=env)
    assert rewind.returncode == 2
    assert "the first offset still available is 12" in rewind.stderr
    assert not (tmp_path / "lake" / "out").exists(), "nothing may start before the range is known to be whole"

    done = run("jobs", "backfill", name, "--from", "earliest", env=env)
    assert "backfilled 8 records" in done.stdout


def test_a_backfill_killed_and_run_again_with_other_chunks_applies_every_offset_once(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    expected: dict[str, int] = {}
    deposits(stack, topic, rounds=20, accounts=10, expected=expected)  # 200 records
    name, env = job_env(stack, tmp_path, "projection", topic, projection=BALANCES)
    table = tmp_path / "lake" / "out"
    log = tmp_path / "first.log"
    with log.open("w") as out:
        first = subprocess.Popen(
            [sys.executable, "-m", "cdcpipe", "jobs", "backfill", name, "--from", "earliest", "--chunk-size", "20"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # Killed once some chunks (each a MERGE, 20 records) are in, and long before the last.
        wait_until(lambda: len(list((table / "_delta_log").glob("*.json"))) >= 4, 300, "a few chunks to commit")
    finally:
        first.kill()
        first.wait(30)
    partial = balances(table)
    assert partial != expected, "the first backfill finished before it was killed: make the range longer"
    run("jobs", "backfill", name, "--from", "earliest", "--chunk-size", "150", env=env)
    assert balances(table) == expected


def test_a_replay_of_many_chunks_of_large_events_fits_a_small_driver_heap(
    stack: Stack, topic_name: str, tmp_path: Path
) -> None:
    """Each chunk's Kafka consumers, and the records they fetched ahead, are taken up by the next chunk.

    Spark pools its executors' consumers and their fetched records by (consumer group, partition) and keeps an
    idle one 5 minutes; read with a group of its own, each chunk left 4 consumers' worth of large events fetched
    ahead in the heap, and this replay ran its 512 MB driver out of memory within a few chunks.
    The topic is compressed (lz4), as a producer's batches often are: a fetch's byte limit counts compressed
    bytes, so with 20,000 records allowed a poll, each consumer's first poll held its whole partition (6,000
    of these 16 KB events, 96 MB) and the first chunk ran this driver out of memory, until a poll was capped at
    2,000 records.
    """
    create_topics(stack.kafka_config(), [topic_name], partitions=4)
    producer = Producer({**stack.kafka_config(), "acks": "all", "linger.ms": 20, "compression.type": "lz4"})
    events = 24_000
    for i in range(events):
        value = json.dumps({"account_id": f"a-{i}", "owner": "o" * 15_900, "currency": "EUR"})
        headers: list[tuple[str, str | bytes | None]] = [
            ("id", f"e-{i}"),
            ("eventType", "AccountOpened"),
            ("eventVersion", "1"),
        ]
        while True:
            try:
                producer.produce(topic_name, key=f"a-{i % 400}", value=value, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    name, env = job_env(stack, tmp_path, "event_log", topic_name)
    env["CDCPIPE_SPARK_DRIVER_MEMORY"] = "512m"  # a driver of its own, with a small heap

    done = run("jobs", "replay", name, "--into", "rebuilt", "--chunk-size", "2000", env=env)
    assert f"from {events} records" in done.stdout, done.stdout + done.stderr[-3000:]
    ids = DeltaTable(str(tmp_path / "lake" / "rebuilt")).to_pyarrow_table(columns=["event_id"]).column(0)
    assert sorted(ids.to_pylist()) == sorted(f"e-{i}" for i in range(events))
