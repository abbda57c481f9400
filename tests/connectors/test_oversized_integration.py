"""Debezium's outbox connector: an event too large for its topic goes to the dead-letter topic; the task runs on.

Without the shipped `oversized` transform the broker refuses the record, the task fails, and the slot holds
WAL until someone acts; every later event waits behind it.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.support.connectors import connect_client, outbox_connector, wait_slot_active, wait_state, write_definition
from tests.support.kafka import create_topics, read_topics
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

TOPIC_LIMIT = 20_000  # the topic's max.message.bytes
GUARD = 16_000  # the transform's max.bytes: below the topic's limit, with room for Kafka's batch overhead


def test_an_event_too_large_for_its_topic_is_dead_lettered_and_the_connector_runs_on(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    topic, dead = f"test.{outbox.tag}.debezium.account", f"test.{outbox.tag}.dead_letters"
    create_topics(stack.kafka_config(), [topic], config={"max.message.bytes": str(TOPIC_LIMIT)})
    create_topics(stack.kafka_config(), [dead])
    definition = outbox_connector(
        outbox, **{"transforms.oversized.topic": dead, "transforms.oversized.max.bytes": str(GUARD)}
    )
    name, slot = f"test-{outbox.tag}", f"slot_{outbox.tag}"
    applied = cdcpipe(
        "connectors", "apply", "--no-wait", str(write_definition(tmp_path, definition)), env=stack.process_env()
    )
    assert applied.returncode == 0, applied.stderr
    try:
        wait_state(stack, name, "RUNNING")
        wait_slot_active(stack, slot, name)
        small, big, after = outbox.insert(
            [
                ("account", "acc-1", "Pinged", {"n": 1}),
                ("account", "acc-1", "Pinged", {"n": 2, "pad": "x" * 30_000}),
                ("account", "acc-1", "Pinged", {"n": 3}),
            ]
        )
        with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
            assert row is not None
            written = row[0]
        published = read_topics(stack.kafka_config(), [topic], 2, timeout_s=90)
        (letter,) = read_topics(stack.kafka_config(), [dead], 1, timeout_s=30)
        with connect_client(stack) as client:
            status = client.status(name)
        assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status

        def slot_moved_past_the_big_event() -> bool:
            with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
                moved = conn.execute(
                    "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                    (written, slot),
                ).fetchone()
            return moved == (True,)

        wait_until(slot_moved_past_the_big_event, 60, "the slot to confirm past the large event")
    finally:
        cdcpipe("connectors", "delete", name, "--drop-slot", "--yes", env=stack.process_env())
    assert [r.headers["id"].decode() for r in published] == [small, after]
    assert letter.headers["id"].decode() == big
    assert letter.key == b"acc-1"
    assert letter.value is not None
    body = json.loads(letter.value)
    assert body["topic"] == topic
    assert body["bytes"] > GUARD
    assert body["max_bytes"] == GUARD
    assert f"above max.bytes {GUARD}" in body["error"]
