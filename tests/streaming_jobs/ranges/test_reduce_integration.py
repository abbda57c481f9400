"""A latest-state replay reduced outside Spark equals one where Spark reads every record (real Kafka, Spark, Delta).

The topic mixes valid events with every kind of record the Python pre-check must leave to Spark: broken
JSON, wrong and lenient types, repeated keys, surrogate escapes, bad headers, tombstones and delete events.
Most of those are superseded by a later valid event of their key, so a record the pre-check wrongly
vouched for would be dropped, and its dead letter (or its row) would be missing from the reduced replay.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from tests.support.jobs import deposit, job_env, opened, run, send, table_rows
from tests.support.kafka import create_topics
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

PARTITIONS = 3
DEAD = "dead"  # the record must end in the dead letters, whichever way the replay reads
LIVE = "live"  # it must be applied (it keeps its key's row, or deletes it)


def owner_number(key: str) -> bytes:
    return json.dumps({"account_id": key, "owner": 7, "currency": "EUR"}).encode()  # Spark reads 7 as "7"


# (what, event type, payload bytes or None, headers to change, expected outcome)
TRICKY: list[tuple[str, str, bytes | None, dict[str, bytes | None], str]] = [
    ("broken JSON", "AccountOpened", b'{"account_id": ', {}, DEAD),
    ("a field too many", "AccountOpened", b'{"account_id":"k","owner":"o","currency":"EUR","x":1}', {}, DEAD),
    (
        "repeated key, first of the wrong type",
        "MoneyDeposited",
        b'{"amount":"x","account_id":"k","amount":5,"currency":"EUR"}',
        {},
        DEAD,
    ),
    ("whole float for an integer", "MoneyDeposited", b'{"account_id":"k","amount":5.0,"currency":"EUR"}', {}, DEAD),
    ("pattern broken", "MoneyDeposited", deposit("k", 5).replace("EUR", "eur").encode(), {}, DEAD),
    ("no id header", "AccountOpened", opened("k").encode(), {"id": None}, DEAD),
    ("unknown event type", "Nope", opened("k").encode(), {}, DEAD),
    ("a number Spark reads as text", "AccountOpened", b"", {}, LIVE),
    ("a surrogate escape", "AccountOpened", b'{"account_id":"k","owner":"\\ud800","currency":"EUR"}', {}, LIVE),
    ("trailing whitespace", "AccountOpened", opened("k").encode() + b"\n", {}, LIVE),
    (
        "a repeated key of one type",
        "AccountOpened",
        b'{"account_id":"k","owner":"a","owner":"b","currency":"EUR"}',
        {},
        LIVE,
    ),
    ("a tombstone", "AccountOpened", None, {}, LIVE),
    ("a delete event", "AccountClosed", json.dumps({"account_id": "k"}).encode(), {}, LIVE),
]


def produce(stack: Stack, topic: str) -> tuple[int, set[str]]:
    """Every tricky record twice: once superseded by a later valid event of its key, once its key's last word.

    Returns how many records must become dead letters, and the keys whose row must be gone.
    """
    create_topics(stack.kafka_config(), [topic], partitions=PARTITIONS)
    producer = Producer({**stack.kafka_config(), "acks": "all"})

    def send(
        key: str | None, event_type: str, value: bytes | None, changed: dict[str, bytes | None], part: int
    ) -> None:
        headers = {"id": str(uuid.uuid4()).encode(), "eventType": event_type.encode(), "eventVersion": b"1", **changed}
        kept: list[tuple[str, str | bytes | None]] = [(k, v) for k, v in headers.items() if v is not None]
        producer.produce(topic, key=key, value=value, headers=kept, partition=part)

    dead, gone = 0, set()
    for i, (_, event_type, value, changed, outcome) in enumerate(TRICKY):
        for last in (False, True):
            key = f"k-{i}-{'last' if last else 'superseded'}"
            part = i % PARTITIONS
            value = owner_number(key) if value == b"" else value
            for n in range(3):  # valid history first: several versions, most of them superseded
                send(key, "AccountOpened", opened(f"{key}-v{n}").encode(), {}, part)
            send(key, event_type, value, changed, part)
            if not last:
                send(key, "AccountOpened", opened(f"{key}-final").encode(), {}, part)
            dead += outcome == DEAD
            if last and outcome == LIVE and (value is None or event_type == "AccountClosed"):
                gone.add(key)
    # (No key in two partitions: Kafka orders none across partitions, so which wins depends on the batches.)
    send(None, "AccountOpened", opened("no-key").encode(), {}, 1)  # a null key: dead
    assert producer.flush(30) == 0
    return dead + 1, gone


def dead_letters(table: Path) -> set[tuple[object, ...]]:
    rows = DeltaTable(str(table.with_name(f"{table.name}_dead_letters"))).to_pyarrow_table().to_pylist()
    return {(r["topic"], r["kafka_partition"], r["kafka_offset"], r["error"]) for r in rows}


def test_a_reduced_latest_state_replay_equals_one_where_spark_reads_every_record(
    stack: Stack, topic_name: str, tmp_path: Path
) -> None:
    topic = topic_name  # created by `produce`, with partitions of its own
    expected_dead, gone = produce(stack, topic)
    name, env = job_env(stack, tmp_path, "latest_state", topic, delete_event_types=["AccountClosed"])
    lake = tmp_path / "lake"

    # Rounds of at most 12 kept records (4 per partition): the reduction's batches, not only one.
    run("jobs", "replay", name, "--into", "reduced", "--chunk-size", "12", env=env)
    run("jobs", "replay", name, "--into", "full", "--no-reduce", env=env)

    full, reduced = table_rows(lake / "full", "aggregate_id"), table_rows(lake / "reduced", "aggregate_id")
    assert reduced == full
    assert dead_letters(lake / "reduced") == dead_letters(lake / "full")

    # Again into the same table: it holds every offset, so nothing is read or committed again.
    version = DeltaTable(str(lake / "reduced")).version()
    run("jobs", "replay", name, "--into", "reduced", env=env)
    assert DeltaTable(str(lake / "reduced")).version() == version
    # A swap's catch-up goes through the reduction too, and the job then uses the rebuilt table.
    run("jobs", "replay", name, "--into", "swapped", "--swap", env=env)
    assert json.loads((lake / "_jobs" / f"{name}.location.json").read_text())["table"].endswith("swapped")
    assert table_rows(lake / "swapped", "aggregate_id") == full

    # And both are right, not merely equal.
    assert len(dead_letters(lake / "full")) == expected_dead
    keys = {f"k-{i}-{w}" for i in range(len(TRICKY)) for w in ("last", "superseded")}
    assert set(full) == keys - gone
    lenient = TRICKY.index(next(t for t in TRICKY if t[0] == "a number Spark reads as text"))
    assert json.loads(str(full[f"k-{lenient}-last"]["payload"]))["owner"] == 7
    assert all(json.loads(str(full[k]["payload"]))["owner"] == k.upper() + "-FINAL" for k in keys if "superseded" in k)


def resend(stack: Stack, topic: str, key: str, value: str, event_id: str) -> None:
    """One event sent again as a publisher resends it: same id, a new offset."""
    send(stack, topic, [(key, "AccountOpened", value, {"id": event_id})])


def test_a_resent_older_event_never_sets_a_latest_state_row_back_after_backfills(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    """A then B for a key; a backfill; A sent again, then B; each backfill leaves the row at B (or what came after).

    The reduction drops A as superseded by B, so A never reaches Spark: its id must still be one the table holds.
    (Spark reading every record, `--no-reduce`, records every id it applies: the reduction is what could lose one.)
    And a resent copy in a later range must not hide a newer event of its key that came before it there.
    """
    name, env = job_env(stack, tmp_path, "latest_state", topic)
    first, second, third = opened("k-first"), opened("k-second"), opened("k-third")
    a, b = send(stack, topic, [("k", "AccountOpened", first, None), ("k", "AccountOpened", second, None)])

    def backfill() -> str:
        run("jobs", "backfill", name, "--from", "earliest", "--reduce", env=env)
        (row,) = table_rows(tmp_path / "lake" / "out", "aggregate_id").values()
        return str(json.loads(str(row["payload"]))["account_id"])

    assert backfill() == "k-second"
    resend(stack, topic, "k", first, a)  # A again, alone in its range
    assert backfill() == "k-second", "the resent A set the row back"
    resend(stack, topic, "k", first, a)
    resend(stack, topic, "k", second, b)  # A and B again, in order
    assert backfill() == "k-second"
    # A newer event C, then A again in the same range: C is the newest event of the key, A a copy.
    send(stack, topic, [("k", "AccountOpened", third, None)])
    resend(stack, topic, "k", first, a)
    assert backfill() == "k-third", "the resent A hid C"
