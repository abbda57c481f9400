"""The relay never removes an event Kafka could still accept later; dead letters go back with `relay redrive`.

On the stack's broker topic auto-creation is off, as in production: a topic nobody created yet is an
operator's mistake, and publishing stalls on it (loudly) instead of burying events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType  # type: ignore[attr-defined]
from psycopg import sql

from outbox_relay.relay import Relay
from tests.support.kafka import create_topics, read_topics
from tests.support.outbox import Outbox
from tests.support.relay import by_key, relay_thread, wait_stalled
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def dead_letters(outbox: Outbox) -> list[tuple[Any, ...]]:
    """(seq, event id, aggregate id, reason, overtaken) of every dead letter, by seq."""
    with psycopg.connect(outbox.dsn) as conn:
        return conn.execute(
            sql.SQL("SELECT seq, id::text, aggregateid, reason, overtaken FROM {} ORDER BY seq").format(
                sql.Identifier(outbox.names.outbox_schema, outbox.names.dead_letter_table)
            )
        ).fetchall()


def relay_cli(stack: Stack, outbox: Outbox, *args: str) -> Any:
    env = outbox.relay_env(stack, CDCPIPE_OUTBOX_SCHEMA=outbox.names.outbox_schema)
    return cdcpipe("relay", *args, env=env, timeout=120)


def test_a_missing_topic_holds_only_its_own_events_loudly_and_every_other_topic_flows(
    stack: Stack, outbox: Outbox
) -> None:
    """Events for two topics nobody created, interleaved with an existing topic's: only theirs wait, in order."""
    rows: list[tuple[str, str, str, object]] = []
    for n in range(30):
        rows.append(("order", f"o-{n % 3}", "OrderPlaced", {"n": n}))
        if n % 3 == 0:
            rows.append(("invoice", f"i-{n % 2}", "InvoiceSent", {"n": n}))
        if n % 5 == 0:
            rows.append(("refund", "r-1", "RefundIssued", {"n": n}))
    ids = outbox.insert(rows)
    by_type = {
        kind: [i for i, r in zip(ids, rows, strict=True) if r[0] == kind] for kind in ("order", "invoice", "refund")
    }
    create_topics(stack.kafka_config(), [outbox.topic("order")])
    invoice_topic, refund_topic = outbox.topic("invoice"), outbox.topic("refund")  # nobody created them
    with relay_thread(outbox.relay_settings(stack, backoff_max_s=1.0), outbox) as relay:
        wait_stalled(relay, invoice_topic)
        wait_stalled(relay, refund_topic)
        # The existing topic's events leave at once, in order; the stalled topics' wait, nothing dead-lettered.
        waiting = len(by_type["invoice"]) + len(by_type["refund"])
        wait_until(lambda: outbox.count() == waiting, 30, "every order event to leave past the stalled ones")
        orders = read_topics(stack.kafka_config(), [outbox.topic("order")], len(by_type["order"]), timeout_s=60)
        assert sorted(r.headers["id"].decode() for r in orders) == sorted(by_type["order"])
        for key, sent in by_key(orders).items():
            expected = [i for i, r in zip(ids, rows, strict=True) if r[1] == key.decode()]
            assert sent == [i.encode() for i in expected], "each aggregate in order"
        status = relay_cli(stack, outbox, "status")
        assert status.returncode == 1, status.stdout + status.stderr
        lines = [line for line in status.stdout.splitlines() if line.startswith("STALLED since")]
        assert len(lines) == 2, status.stdout
        assert any(
            f"on topic {invoice_topic}: {len(by_type['invoice'])} events of aggregate types invoice wait" in line
            for line in lines
        ), lines
        assert any(f"on topic {refund_topic}: {len(by_type['refund'])} events" in line for line in lines), lines
        assert "cdcpipe topics apply" in status.stdout
        assert dead_letters(outbox) == []
        # One topic declared: its events follow, in order; the other still waits.
        create_topics(stack.kafka_config(), [invoice_topic])
        wait_until(lambda: outbox.count() == len(by_type["refund"]), 60, "the invoices to follow")
        assert relay.metrics.registry.get_sample_value("cdcpipe_relay_stalled", {"topic": invoice_topic}) is None
        assert relay.metrics.registry.get_sample_value("cdcpipe_relay_stalled", {"topic": refund_topic}) == 1
        create_topics(stack.kafka_config(), [refund_topic])
        wait_until(lambda: outbox.count() == 0, 60, "the refunds to follow")
    assert dead_letters(outbox) == []
    records = read_topics(stack.kafka_config(), [invoice_topic, refund_topic], waiting, timeout_s=60)
    for key, sent in by_key(records).items():
        expected = [i for i, r in zip(ids, rows, strict=True) if r[1] == key.decode()]
        assert sent == [i.encode() for i in expected], "each aggregate in order"
    status = relay_cli(stack, outbox, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "STALLED" not in status.stdout


def test_a_topic_the_relay_may_not_write_stalls_naming_the_acl_until_it_is_granted(
    stack: Stack, outbox: Outbox
) -> None:
    ids = outbox.insert([("invoice", f"i-{n}", "InvoiceSent", {"n": n}) for n in range(3)])
    invoice_topic = outbox.topic("invoice")
    create_topics(stack.kafka_config(), [invoice_topic], producers=("User:connect",))  # not the relay
    with relay_thread(outbox.relay_settings(stack, backoff_max_s=1.0), outbox) as relay:
        wait_stalled(relay, invoice_topic)
        status = relay_cli(stack, outbox, "status")
        assert status.returncode == 1, status.stdout + status.stderr
        assert "TOPIC_AUTHORIZATION_FAILED" in status.stdout
        assert f"grant it WRITE and DESCRIBE on topic {invoice_topic}" in status.stdout
        assert outbox.count() == len(ids)
        assert dead_letters(outbox) == []
        create_topics(stack.kafka_config(), [invoice_topic])  # `topics apply` with the relay among producers
        wait_until(lambda: outbox.count() == 0, 60, "the relay to publish once it may")
    assert dead_letters(outbox) == []
    records = read_topics(stack.kafka_config(), [invoice_topic], len(ids), timeout_s=60)
    assert sorted(r.headers["id"].decode() for r in records) == sorted(ids)


class _FailsOnce:
    """A producer whose first produce() raises the fatal error of a fenced idempotent producer."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self.raised = False

    def produce(self, *args: Any, **kwargs: Any) -> None:
        if not self.raised:
            self.raised = True
            raise KafkaException(KafkaError(KafkaError._FATAL, "injected: producer fenced", fatal=True))
        self._producer.produce(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


def test_a_fatal_producer_error_replaces_the_producer_and_buries_nothing(
    stack: Stack, outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[_FailsOnce] = []
    real_new_producer = Relay._new_producer

    def new_producer(self: Relay) -> Any:
        producer = real_new_producer(self)
        if made:
            return producer
        made.append(_FailsOnce(producer))
        return made[0]

    monkeypatch.setattr(Relay, "_new_producer", new_producer)
    ids = outbox.insert([("order", f"o-{n % 3}", "OrderPlaced", {"n": n}) for n in range(50)])
    with relay_thread(outbox.relay_settings(stack, backoff_max_s=1.0), outbox):
        wait_until(lambda: outbox.count() == 0, 60, "the relay to publish with a new producer")
    assert made
    assert made[0].raised
    assert dead_letters(outbox) == []
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], len(ids), timeout_s=60)
    assert {r.headers["id"].decode() for r in records} == set(ids)


def test_redrive_puts_dead_letters_back_under_their_seq_and_keeps_aggregate_order(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    small = outbox.topic("limited")
    create_topics(stack.kafka_config(), [small], config={"max.message.bytes": "20000"})
    big = "x" * 50_000
    ids = outbox.insert(
        [
            ("limited", "k-1", "Note", {"text": big}),  # dead, then overtaken by the next one
            ("limited", "k-1", "Note", {"text": "k-1 later"}),
            ("limited", "k-2", "Note", {"text": big}),  # dead; nothing of k-2 published after it
        ]
    )
    settings = outbox.relay_settings(stack, backoff_max_s=1.0)
    with relay_thread(settings, outbox):
        wait_until(lambda: outbox.count() == 0, 60, "the relay to take every row")
    dead = dead_letters(outbox)
    assert [(d[1], d[4]) for d in dead] == [(ids[0], True), (ids[2], False)]
    status = relay_cli(stack, outbox, "status")
    assert "dead letters: 2 (1 overtaken" in status.stdout, status.stdout + status.stderr

    # The cause is fixed: the topic takes large records now.
    admin = AdminClient(stack.kafka_config())
    target = ConfigResource(
        ResourceType.TOPIC,
        small,
        incremental_configs=[ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([target])[target].result(30)

    # A new event of k-2 arrives before the redrive: the redriven one still goes first (its own seq).
    later_k2 = outbox.insert([("limited", "k-2", "Note", {"text": "k-2 later"})])
    moved = relay_cli(stack, outbox, "redrive", "--reason", "max.message.bytes")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "moved 1 dead letters" in moved.stdout
    assert "left: seq" in moved.stdout
    assert ids[0] in moved.stdout
    assert "--allow-reorder" in moved.stdout
    with psycopg.connect(outbox.dsn) as conn:
        waiting = conn.execute(
            sql.SQL("SELECT seq, id::text FROM {} ORDER BY seq").format(
                sql.Identifier(outbox.names.outbox_schema, outbox.names.outbox_table)
            )
        ).fetchall()
    assert waiting == [(dead[1][0], ids[2]), (waiting[1][0], later_k2[0])]
    assert waiting[1][0] > dead[1][0]

    again = relay_cli(stack, outbox, "redrive", "--allow-reorder")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "moved 1 dead letters" in again.stdout
    assert dead_letters(outbox) == []
    with relay_thread(settings, outbox):
        wait_until(lambda: outbox.count() == 0, 60, "the relay to publish the redriven events")
    assert dead_letters(outbox) == []
    records = read_topics(stack.kafka_config(), [small], 5, timeout_s=60)
    keyed = by_key(records)
    assert keyed[b"k-2"] == [ids[2].encode(), later_k2[0].encode()]
    # Redriven with --allow-reorder: after the later event of k-1, as the redrive said it would be.
    assert keyed[b"k-1"] == [ids[1].encode(), ids[0].encode()]
    assert json.loads(next(r.value for r in records if r.headers["id"] == ids[0].encode()) or b"")["text"] == big


def test_relay_status_on_an_outbox_that_is_not_there_says_how_to_make_it(stack: Stack, outbox: Outbox) -> None:
    env = outbox.relay_env(stack, CDCPIPE_OUTBOX_SCHEMA=f"{outbox.names.outbox_schema}_missing")
    result = cdcpipe("relay", "status", env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "run `cdcpipe schema apply`" in result.stderr
    assert "Traceback" not in result.stderr
