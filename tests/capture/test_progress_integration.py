"""Snapshot progress, read from the notifications topic's end, not its start.

The topic holds one notification per snapshot chunk for as long as it is kept, and `tables list` asks it every time.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from capture import progress
from tests.support.kafka import create_topics
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def note(kind: str, aggregate: str, **data: str) -> bytes:
    payload = {"aggregate_type": aggregate, "type": kind, "additional_data": data, "timestamp": 1_795_000_000_000}
    return json.dumps({"schema": {}, "payload": payload}).encode()


def test_the_newest_word_per_table_is_read_back_from_the_end(stack: Stack, topic_name: str) -> None:
    create_topics(stack.kafka_config(), [topic_name])
    incremental = "Incremental Snapshot"
    older = [
        note("STARTED", incremental, data_collections="s.a,s.b"),
        note("TABLE_SCAN_COMPLETED", incremental, scanned_collection="s.a", total_rows_scanned="3"),
        note("TABLE_SCAN_COMPLETED", incremental, scanned_collection="s.b", total_rows_scanned="4"),
        note("COMPLETED", incremental),  # names no table: it stands for those its STARTED named
    ]
    # A long snapshot of s.c since, a notification per chunk: so many that twice the first window holds the
    # COMPLETED above but not the STARTED that names its tables.
    chunks = 2 * progress.TAIL - len(older)
    newer = [note("STARTED", incremental, data_collections="s.c")] + [
        note("IN_PROGRESS", incremental, current_collection_in_progress="s.c", last_processed_key=str(k))
        for k in range(chunks)
    ]
    producer = Producer(stack.kafka_config())
    for value in [*older, *newer]:
        producer.produce(topic_name, value)
    assert producer.flush(30) == 0

    tail = progress.latest(stack.kafka_config(), topic_name, ["s.c"])
    assert tail.found["s.c"].detail == f"at key {chunks - 1} of ?"
    assert tail.read == progress.TAIL, "only the newest notifications are read for a table that has its word there"

    # Tables whose word is older: read back until each has it. The second window has a word of each (their scans)
    # and the COMPLETED, not its STARTED: it widens once more, so the COMPLETED stands for the tables it ended.
    every = progress.latest(stack.kafka_config(), topic_name, ["s.a", "s.b", "s.c"])
    assert {t: p.state for t, p in every.found.items()} == {
        "s.a": "COMPLETED",
        "s.b": "COMPLETED",
        "s.c": "IN_PROGRESS",
    }
    assert every.read == progress.TAIL + 2 * progress.TAIL + len(older) + len(newer)

    assert progress.latest(stack.kafka_config(), f"{topic_name}.absent", ["s.a"]) == progress.Tail({}, 0)
