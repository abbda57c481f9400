"""The relay against the real Postgres and Kafka: wire format, no skips, order, crashes, takeover, dead letters."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from outbox_relay import sql as relay_sql
from outbox_relay.errors import RelayError
from outbox_relay.leader import HEARTBEAT_S, IDLE_TIMEOUT_S, holder
from outbox_relay.relay import Relay
from outbox_relay.sql import backlog_sql, take, take_after_sql, take_sql
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames
from schemas.emit import emit
from tests.support.kafka import create_topics, grant, read_topics, set_topic_config
from tests.support.outbox import Outbox
from tests.support.relay import (
    by_key,
    dead_letter_reasons,
    dead_rows_held_back_after_a_flood,
    relay_process,
    relay_status,
    relay_thread,
    wait_stalled,
)
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def test_wire_format_is_debeziums_eventrouter_and_kcat_reads_it(stack: Stack, outbox: Outbox) -> None:
    events: list[tuple[str, str, str, dict[str, object]]] = [
        ("account", "acc-1", "AccountOpened", {"account_id": "acc-1", "owner": "Ann", "currency": "EUR"}),
        ("account", "acc-1", "MoneyDeposited", {"account_id": "acc-1", "amount": 250, "currency": "EUR"}),
        (
            "transfer",
            "tr-9",
            "TransferCompleted",
            {"transfer_id": "tr-9", "from_account": "acc-1", "to_account": "acc-2", "amount": 100, "currency": "EUR"},
        ),
    ]
    # Emitted as the writer role and published by the relay role, as `stack env` sets them up.
    with psycopg.connect(outbox.writer_dsn) as conn:
        ids = [str(emit(conn, t, a, e, p, names=outbox.names)) for t, a, e, p in events]
        conn.commit()
    with relay_thread(outbox.relay_settings(stack), outbox):
        wait_until(lambda: outbox.count() == 0, 30, "the relay to take the rows")
        with psycopg.connect(outbox.dsn) as conn:
            roles = conn.execute(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE application_name LIKE 'cdcpipe-relay:%'"
            ).fetchall()
        assert roles == [(outbox.schema_settings.relay_role,)]
    lines = []
    for aggregate_type in ("account", "transfer"):
        out = subprocess.run(
            [
                stack.kcat,
                "-F",  # the client file `stack env` exports, as any librdkafka tool reads it
                str(stack.kafka_file()),
                "-C",
                "-t",
                outbox.topic(aggregate_type),
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%t\t%k\t%h\t%s\n",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        lines += out.splitlines()
    assert len(lines) == 3
    for line, event_id, (aggregate_type, aggregate_id, event_type, payload) in zip(lines, ids, events, strict=True):
        topic, key, headers, value = line.split("\t")
        assert topic == f"test.{outbox.tag}.{aggregate_type}"
        assert key == aggregate_id
        assert dict(h.split("=", 1) for h in headers.split(",")) == {
            "id": event_id,
            "eventType": event_type,
            "eventVersion": "1",
        }
        assert json.loads(value) == payload


def test_a_late_commit_is_published_and_each_aggregate_keeps_commit_order(stack: Stack, outbox: Outbox) -> None:
    """A late commit is published; per aggregate, Kafka order is commit order.

    Writers emit *before* they lock their business row, so only the outbox trigger keeps seq in commit
    order; one transaction takes its seq early and commits seconds later, after thousands of others.
    """
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.relay_test_accounts (id text PRIMARY KEY, version int)")
        conn.execute("CREATE TABLE IF NOT EXISTS public.relay_test_commits (event_id uuid, id text, version int)")
        conn.execute(
            "INSERT INTO public.relay_test_accounts SELECT 'acc-' || g, 0 FROM generate_series(0, 9) g "
            "ON CONFLICT (id) DO UPDATE SET version = 0"
        )
        conn.execute("TRUNCATE public.relay_test_commits")

    def writer(worker: int, count: int) -> None:
        with psycopg.connect(outbox.dsn) as conn:
            for i in range(count):
                account = f"acc-{(worker * 7 + i) % 10}"
                event_id = emit(
                    conn,
                    "account",
                    account,
                    "MoneyDeposited",
                    {"account_id": account, "amount": 1 + i, "currency": "EUR"},
                    names=outbox.names,
                )
                version = conn.execute(
                    "UPDATE public.relay_test_accounts SET version = version + 1 WHERE id = %s RETURNING version",
                    (account,),
                ).fetchone()
                assert version is not None
                conn.execute(
                    "INSERT INTO public.relay_test_commits VALUES (%s, %s, %s)", (event_id, account, version[0])
                )
                conn.commit()

    with relay_thread(outbox.relay_settings(stack, batch_size=200), outbox), psycopg.connect(outbox.dsn) as slow:
        late_id = emit(
            slow,
            "account",
            "acc-late",
            "AccountOpened",
            {"account_id": "acc-late", "owner": "Late", "currency": "EUR"},
            names=outbox.names,
        )
        workers = [threading.Thread(target=writer, args=(w, 400)) for w in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        published_before_late = read_topics(stack.kafka_config(), [outbox.topic("account")], 1600, timeout_s=60)
        assert len(published_before_late) >= 1600, "the relay must not wait for the open transaction"
        slow.commit()
        records = read_topics(stack.kafka_config(), [outbox.topic("account")], 1601, timeout_s=60)

    ids = {r.headers["id"] for r in records}
    assert str(late_id).encode() in ids, "the transaction that committed late was skipped"
    assert len(ids) == 1601
    with psycopg.connect(outbox.dsn) as conn:
        commits = conn.execute(
            "SELECT event_id::text, id FROM public.relay_test_commits ORDER BY id, version"
        ).fetchall()
    expected: dict[bytes, list[bytes]] = defaultdict(list)
    for event_id, account in commits:
        expected[account.encode()].append(event_id.encode())
    published = by_key(records)
    for account, order in expected.items():
        assert published[account] == order, f"{account!r}: Kafka order differs from commit order"


def test_behind_overlapping_batches_take_a_late_commit_in_order(stack: Stack, outbox: Outbox) -> None:
    """Behind, batches overlap (the next is taken while Kafka acknowledges the last); order still holds.

    A row whose transaction drew its seq before the whole backlog and commits mid-drain is still taken
    before the later events of its aggregate, and nothing else moves out of order.
    """
    insert = sql.SQL(
        "INSERT INTO {} (id, aggregatetype, aggregateid, type, payload) VALUES (%s, 'order', %s, 'X', %s)"
    ).format(sql.Identifier(outbox.names.outbox_schema, outbox.names.outbox_table))
    late_id, after_late_id = str(uuid.uuid4()), str(uuid.uuid4())
    total = 40_000

    def after_late() -> None:
        # Same aggregate: the outbox trigger makes it wait for the late transaction, then draw a later seq.
        with psycopg.connect(outbox.dsn) as conn:
            conn.execute(insert, (after_late_id, "o-late", Jsonb({"n": "after"})))

    with psycopg.connect(outbox.dsn) as slow:
        slow.execute(insert, (late_id, "o-late", Jsonb({"n": "late"})))  # its seq comes before the backlog's
        ids = outbox.insert([("order", f"o-{i % 50}", "X", {"n": i}) for i in range(total)])
        with relay_thread(outbox.relay_settings(stack, batch_size=100), outbox) as relay:
            wait_until(lambda: outbox.count() < total * 3 // 4, 60, "the relay to be mid-drain")
            waiter = threading.Thread(target=after_late)
            waiter.start()
            time.sleep(0.3)
            assert waiter.is_alive(), "the second event of o-late must wait for the late transaction"
            slow.commit()
            still_queued = outbox.count()
            waiter.join(30)
            wait_until(lambda: outbox.count() == 0, 120, "the relay to drain the outbox")
            registry = relay.metrics.registry
            batches = registry.get_sample_value("cdcpipe_relay_batch_size_count") or 0.0
            small = registry.get_sample_value("cdcpipe_relay_batch_size_bucket", {"le": "50.0"}) or 0.0
    assert still_queued > 0, "the late commit should land while the backlog drains; make the backlog larger"
    assert batches - small >= total // 100 // 2, "the backlog should have been taken in full, overlapping batches"
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], total + 2, timeout_s=60)
    assert {r.headers["id"].decode() for r in records} == {*ids, late_id, after_late_id}
    expected: dict[bytes, list[bytes]] = defaultdict(list)
    for i, event_id in enumerate(ids):
        expected[f"o-{i % 50}".encode()].append(event_id.encode())
    expected[b"o-late"] = [late_id.encode(), after_late_id.encode()]
    assert by_key(records) == expected


def test_the_takes_plan_no_join_even_when_statistics_say_the_outbox_is_empty(outbox: Outbox) -> None:
    """After a drain, autovacuum's statistics say the outbox is empty; then a burst arrives.

    `seq IN (SELECT ...)` was planned as a join that scans the table once per row taken: 4 s for 2,000 rows,
    minutes with the in-flight rows left out. The takes must leave Postgres no join to choose.
    """
    outbox.insert([("order", "o-1", "X", {"n": i}) for i in range(200)])
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        table = sql.Identifier(outbox.names.outbox_schema, outbox.names.outbox_table)
        conn.execute(sql.SQL("DELETE FROM {}").format(table))
        conn.execute(sql.SQL("ANALYZE {}").format(table))  # the statistics of an emptied outbox
    outbox.insert([("order", "o-1", "X", {"n": i}) for i in range(2000)])
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        for statement, params in (
            (take_sql(outbox.names), (500,)),
            (take_after_sql(outbox.names), (list(range(1, 501)), 500)),
        ):
            plan = "\n".join(row[0] for row in conn.execute(sql.SQL("EXPLAIN ") + statement, params).fetchall())
            assert "Join" not in plan, plan
            assert "Nested Loop" not in plan, plan


def test_sigkill_mid_stream_loses_nothing(stack: Stack, outbox: Outbox, tmp_path: Path) -> None:
    total = 20_000
    process = relay_process(stack, outbox, tmp_path / "relay.log", CDCPIPE_BATCH_SIZE="500")
    ids: list[str] = []
    try:
        for start in range(0, total, 1000):
            ids += outbox.insert(
                [("order", f"o-{i % 50}", "OrderPlaced", {"n": i}) for i in range(start, start + 1000)]
            )
            if start == 8000:
                wait_until(lambda: outbox.count() < 9000 - 500, 30, "the relay to be mid-stream")
                process.send_signal(signal.SIGKILL)
                process.wait(10)
                process = relay_process(stack, outbox, tmp_path / "relay.log", CDCPIPE_BATCH_SIZE="500")
        wait_until(lambda: outbox.count() == 0, 120, "the restarted relay to drain the outbox")
    finally:
        process.terminate()
        process.wait(30)
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], total, timeout_s=60)
    assert {r.headers["id"].decode() for r in records} == set(ids)
    # One writer, so insert order is commit order; per key, the first copies keep it.
    expected: dict[bytes, list[bytes]] = defaultdict(list)
    for i, event_id in enumerate(ids):
        expected[f"o-{i % 50}".encode()].append(event_id.encode())
    assert by_key(records) == expected


def leader_pid(outbox: Outbox) -> int | None:
    """The pid of the relay process holding this outbox's leader lock (from its application_name)."""
    with psycopg.connect(outbox.dsn) as conn:
        found = holder(conn, outbox.names)
    return int(found.application.split(":")[1]) if found and found.relay else None


def test_a_stranger_holding_the_leader_lock_is_named_with_its_role_and_the_fix(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    """Any role may take an advisory lock: one that may not remove the outbox's rows is no relay, and is said so."""
    key = f"{outbox.names.outbox_schema}.{outbox.names.outbox_table}"
    writer = conninfo_to_dict(outbox.writer_dsn)["user"]
    log = tmp_path / "relay.log"
    squatter = psycopg.connect(outbox.writer_dsn, autocommit=True, application_name="not-a-relay")
    relay = None
    try:
        squatter.execute("SELECT pg_advisory_lock(hashtext('cdcpipe.relay'), hashtext(%s))", (key,))
        relay = relay_process(stack, outbox, log)
        wait_until(lambda: "may not remove the outbox's rows" in log.read_text(), 30, "the relay to name the stranger")
        said = log.read_text()
        assert f"not-a-relay (pid {squatter.info.backend_pid}, role {writer}" in said, said
        assert f"pg_terminate_backend({squatter.info.backend_pid})" in said, said
        shown = cdcpipe("relay", "status", env=outbox.relay_env(stack))
        assert shown.returncode == 1, shown.stdout + shown.stderr
        assert f"leader: not-a-relay (pid {squatter.info.backend_pid}, role {writer}" in shown.stdout, shown.stdout
        assert "LOCK HELD BY A STRANGER" in shown.stdout, shown.stdout
        overall = cdcpipe("status", env=outbox.relay_env(stack)).stdout
        assert f"the leader lock is held by not-a-relay (pid {squatter.info.backend_pid}" in overall, overall
        # The stranger gone, the relay leads and publishes.
        squatter.close()
        outbox.insert([("order", "o-1", "OrderPlaced", {"n": 1})])
        wait_until(lambda: leader_pid(outbox) == relay.pid, 30, "the relay to lead")
        wait_until(lambda: outbox.count() == 0, 30, "the relay to publish")
        assert cdcpipe("relay", "status", env=outbox.relay_env(stack)).returncode == 0
    finally:
        squatter.close()
        if relay is not None:
            relay.terminate()
            relay.wait(30)


@pytest.mark.parametrize(
    ("fault", "bound_s"),
    [
        # Killed: its session ends with it, and a standby takes over at its next try.
        ("dies", 15.0),
        # Frozen (SIGSTOP; a hung host alike): its kernel still answers TCP keepalives, so only the leader
        # session's idle timeout ends it.
        ("freezes", IDLE_TIMEOUT_S + HEARTBEAT_S + 10.0),
    ],
)
def test_a_standby_takes_over_within_its_bound_when_the_leader_dies_or_freezes(
    stack: Stack, outbox: Outbox, tmp_path: Path, fault: str, bound_s: float
) -> None:
    first = relay_process(stack, outbox, tmp_path / "first.log")
    wait_until(lambda: leader_pid(outbox) == first.pid, 30, "the first relay to lead")
    second = relay_process(stack, outbox, tmp_path / "second.log")
    try:
        # Waited for, not slept on: a relay starting on a loaded machine can take seconds to try the lock, and one
        # that first tries after the leader died never stands by at all.
        wait_until(lambda: "standby for" in (tmp_path / "second.log").read_text(), 30, "the second relay to stand by")
        assert leader_pid(outbox) == first.pid, "the standby must not publish while the leader lives"
        ids = outbox.insert([("order", f"o-{i % 5}", "OrderPlaced", {"n": i}) for i in range(500)])
        wait_until(lambda: outbox.count() == 0, 30, "the leader to publish")
        if fault == "dies":
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        else:
            first.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        wait_until(lambda: leader_pid(outbox) == second.pid, bound_s, "the standby to take over")
        takeover_s = time.monotonic() - stopped_at
        ids += outbox.insert([("order", f"o-{i % 5}", "OrderPlaced", {"n": i}) for i in range(500, 1000)])
        wait_until(lambda: outbox.count() == 0, 30, "the new leader to publish")
        if fault == "freezes":
            # Woken, the old leader finds its session gone and waits as a standby: one leader, never two.
            first.send_signal(signal.SIGCONT)
            wait_until(lambda: "standby for" in (tmp_path / "first.log").read_text(), 30, "the old leader to stand by")
            assert leader_pid(outbox) == second.pid
    finally:
        for p in (first, second):
            p.send_signal(signal.SIGCONT)
            p.terminate()
            p.wait(30)
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], 1000, timeout_s=60)
    assert {r.headers["id"].decode() for r in records} == set(ids)
    sys.stderr.write(f"standby took over {takeover_s:.1f}s after the leader {fault}\n")


def test_rows_that_can_never_be_published_become_dead_letters_and_the_rest_flows(stack: Stack, outbox: Outbox) -> None:
    small_topic = outbox.topic("limited")
    create_topics(stack.kafka_config(), [small_topic], config={"max.message.bytes": "20000"})
    ids = outbox.insert(
        [
            ("limited", "k", "Note", {"text": "small before"}),
            ("limited", "k", "Note", {"text": "x" * 50_000}),
            ("limited", "k", "Note", {"text": "small after"}),
            ("forbidden", "k", "Note", {"text": "an aggregate type nobody allowed"}),
            ("bad/topic name", "k", "Note", {"text": "no topic can carry this"}),
        ]
    )
    settings = outbox.relay_settings(stack, allowed_aggregate_types=frozenset({"limited", "bad/topic name"}))
    with relay_thread(settings, outbox) as relay:
        wait_until(lambda: outbox.count() == 0, 30, "the relay to take every row")
        too_large = relay.metrics.registry.get_sample_value("cdcpipe_relay_dead_letters_total", {"reason": "too_large"})
        assert too_large == 1
    records = read_topics(stack.kafka_config(), [small_topic], 2, timeout_s=30)
    assert [json.loads(r.value or b"")["text"] for r in records] == ["small before", "small after"]
    with psycopg.connect(outbox.dsn) as conn:
        dead: dict[str, str] = dict(
            conn.execute(
                sql.SQL("SELECT id::text, reason FROM {} ORDER BY seq").format(
                    sql.Identifier(outbox.names.outbox_schema, outbox.names.dead_letter_table)
                )
            ).fetchall()
        )
    assert set(dead) == {ids[1], ids[3], ids[4]}
    assert "max.message.bytes" in dead[ids[1]]
    assert small_topic in dead[ids[1]]
    assert "CDCPIPE_ALLOWED_AGGREGATE_TYPES" in dead[ids[3]]
    assert "does not allow" in dead[ids[4]]


def test_only_the_record_above_the_topics_limit_is_buried_even_when_kafka_refuses_its_whole_request(
    stack: Stack, outbox: Outbox
) -> None:
    """Kafka refuses a whole produce request for one record too large in it, the innocent records too.

    The relay buries a record only once it can tell it is the one above the limit: without the right to read
    the limit it stalls, naming the ACL; a refusal after the limit was lowered makes it read the limit again.
    """
    topic = outbox.topic("limited")
    create_topics(stack.kafka_config(), [topic], config={"max.message.bytes": "20000"}, producers=())
    grant(stack.kafka_config(), topic, "User:relay", [AclOperation.WRITE, AclOperation.DESCRIBE])
    first = outbox.insert([("limited", "k", "Note", {"text": t}) for t in ("small", "x" * 50_000, "small")])
    with relay_thread(outbox.relay_settings(stack, backoff_max_s=1.0), outbox) as relay:
        wait_stalled(relay, topic)
        assert "grant it DESCRIBE_CONFIGS on topic" in relay_status(stack, outbox)
        assert (outbox.count(), dead_letter_reasons(outbox)) == (3, {})
        grant(stack.kafka_config(), topic, "User:relay", [AclOperation.DESCRIBE_CONFIGS])
        wait_until(lambda: outbox.count() == 0, 60, "the relay to publish once it may read the limit")
        assert list(dead_letter_reasons(outbox)) == [first[1]]

        # The limit goes down while the relay remembers the old one: Kafka refuses the request it sends.
        set_topic_config(stack.kafka_config(), topic, "max.message.bytes", "10000")
        second = outbox.insert([("limited", "k", "Note", {"text": t}) for t in ("small", "x" * 15_000, "small")])
        wait_until(lambda: outbox.count() == 0, 60, "the relay to publish after reading the limit again")
    reasons = dead_letter_reasons(outbox)
    assert list(reasons) == [first[1], second[1]]
    assert "exceeds the 10000 bytes topic" in reasons[second[1]]
    records = read_topics(stack.kafka_config(), [topic], 4, timeout_s=30)
    published = [r.headers["id"].decode() for r in records]
    # A record Kafka took in an earlier request than the refused one is sent again with the retried batch:
    # a copy after the first (at-least-once), so the first occurrences keep the outbox's order.
    assert list(dict.fromkeys(published)) == [first[0], first[2], second[0], second[2]], published


def test_sigterm_finishes_in_flight_work_and_exits_zero(stack: Stack, outbox: Outbox, tmp_path: Path) -> None:
    process = relay_process(stack, outbox, tmp_path / "relay.log", CDCPIPE_BATCH_SIZE="1000")
    ids = outbox.insert([("order", f"o-{i % 10}", "OrderPlaced", {"n": i}) for i in range(5000)])
    wait_until(lambda: outbox.count() < 5000, 30, "the relay to start publishing")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0, (tmp_path / "relay.log").read_text()
    left = outbox.count()
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], 5000 - left, timeout_s=30)
    published = {r.headers["id"].decode() for r in records}
    # What left the outbox is in Kafka, what is not in Kafka is still in the outbox: nothing in between.
    assert len(published) == 5000 - left
    assert published <= set(ids)


def test_a_commit_wakes_the_relay_at_once_and_an_idle_relay_uses_no_cpu(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    # A 60s fallback poll: only NOTIFY can explain a prompt delivery.
    process = relay_process(stack, outbox, tmp_path / "relay.log", CDCPIPE_POLL_INTERVAL_S="60")
    try:
        wait_until(lambda: leader_pid(outbox) == process.pid, 30, "the relay to lead")
        time.sleep(1)
        before = cpu_seconds(process.pid)
        time.sleep(5)
        idle_cpu = cpu_seconds(process.pid) - before
        started = time.monotonic()
        outbox.insert([("order", "o-1", "OrderPlaced", {"n": 1})])
        # The row leaves the outbox once Kafka acknowledged it: that moment is the relay's, not a consumer's.
        wait_until(lambda: outbox.count() == 0, 30, "the relay to publish the row")
        delivered_s = time.monotonic() - started
        records = read_topics(stack.kafka_config(), [outbox.topic("order")], 1, timeout_s=30)
    finally:
        process.terminate()
        process.wait(30)
    assert len(records) == 1
    assert delivered_s < 10, f"took {delivered_s:.1f}s: the relay was not woken by NOTIFY"
    assert idle_cpu < 0.05, f"an idle relay used {idle_cpu:.3f}s of CPU in 5s"


def test_a_relay_behind_keeps_reading_its_notifications_so_postgres_can_still_vacuum(
    stack: Stack, outbox: Outbox
) -> None:
    """Behind, the relay still reads the NOTIFYs it is not waiting for, and so holds back no dead row.

    Postgres sends a listener its notifications under a snapshot that it holds until all are sent. Left
    unread (here 400,000 of them: a busy application's commits for some minutes), they fill the socket, and
    the listening backend blocks in the send, with that snapshot held. Until the relay caught up, no VACUUM
    could then remove a row deleted meanwhile, in any table of the database.
    """
    total = 100_000
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (aggregatetype, aggregateid, type, payload) "
                "SELECT 'order', 'o-' || g %% 50, 'X', jsonb_build_object('n', g) FROM generate_series(1, %s) g"
            ).format(sql.Identifier(outbox.names.outbox_schema, outbox.names.outbox_table)),
            (total,),
        )
        # Batches of 10: the relay stays behind for the whole backlog.
        with relay_thread(outbox.relay_settings(stack, batch_size=10), outbox):
            wait_until(lambda: outbox.count() < total, 30, "the relay to start on the backlog")
            held_back = dead_rows_held_back_after_a_flood(conn, outbox)
            left = outbox.count()
    assert left > 0, "the relay caught up before the test could see it behind: make the backlog larger"
    assert held_back[-1:] == [0], (
        f"while the relay was behind, {len(held_back)} VACUUMs in 20s left the scratch table's dead rows "
        f"(last: {held_back[-1:]}): something held the database's xmin horizon"
    )


def test_the_backlog_counts_the_head_of_the_outbox_and_takes_postgres_count_beyond(
    stack: Stack, outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exact up to BACKLOG_COUNTED rows, Postgres's running count of live rows beyond; never a full count.

    The head is cut to 1,000 rows here. With the real 100,000, an outbox of 120,000 small rows is cheaper to
    sort whole, and Postgres does so; it walks the index for large outboxes, which this test stands for.
    """
    monkeypatch.setattr(relay_sql, "BACKLOG_COUNTED", 1000)
    table = sql.Identifier(outbox.names.outbox_schema, outbox.names.outbox_table)

    def backlog(conn: psycopg.Connection[Any]) -> tuple[int, float]:  # what the relay's backlog probe reads
        return relay_sql.read_backlog_row(conn.execute(relay_sql.backlog_sql(outbox.names)).fetchone())

    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        # Postgres's count is exact here unless an ANALYZE replaces it with an estimate meanwhile.
        conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = off)").format(table))
        assert backlog(conn) == (0, 0.0)
        outbox.insert([("order", "o-1", "X", {"n": i}) for i in range(3)])
        time.sleep(0.5)
        count, age = backlog(conn)
        assert count == 3
        assert 0.5 <= age < 30
        total = 50_000
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (aggregatetype, aggregateid, type) SELECT 'order', 'o-1', 'X' FROM generate_series(4, %s)"
            ).format(table),
            (total,),
        )
        # Postgres counts the committed rows once the inserting session reports them (within a second or so).
        wait_until(lambda: backlog(conn)[0] == total, 30, f"the backlog to read {total}")
        row = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + backlog_sql(outbox.names)).fetchone()
    assert row is not None
    scans = [node for node in plan_nodes(row[0][0]["Plan"]) if node.get("Relation Name") == outbox.names.outbox_table]
    assert [node["Actual Rows"] for node in scans] == [1000], "the backlog read more than the head of the outbox"


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def test_a_relay_pointed_at_no_outbox_says_so_and_how_to_create_it(stack: Stack, outbox: Outbox) -> None:
    names = OutboxNames.load(outbox_schema=f"{outbox.names.outbox_schema}_missing")
    relay = Relay(outbox.relay_settings(stack), names)
    with pytest.raises(RelayError, match=r"outbox table .*_missing\.outbox does not exist.*cdcpipe schema apply"):
        relay.run()


def test_a_relay_on_an_outbox_of_an_older_schema_apply_says_to_run_it_again(stack: Stack, outbox: Outbox) -> None:
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP TABLE {}").format(sql.Identifier(outbox.names.outbox_schema, outbox.names.relay_status_table))
        )
    relay = Relay(outbox.relay_settings(stack), outbox.names)
    with pytest.raises(RelayError, match=r"made by an older `cdcpipe schema apply`.*Run `cdcpipe schema apply` again"):
        relay.run()
    with psycopg.connect(outbox.dsn) as conn:
        schema_outbox.apply(conn, outbox.names, outbox.schema_settings)
    ids = outbox.insert([("order", "o-1", "OrderPlaced", {"n": 1})])
    with relay_thread(outbox.relay_settings(stack), outbox):
        wait_until(lambda: outbox.count() == 0, 30, "the relay to publish once the schema is applied again")
    records = read_topics(stack.kafka_config(), [outbox.topic("order")], 1, timeout_s=30)
    assert [r.headers["id"].decode() for r in records] == ids


def test_a_failed_take_rolls_back_and_raises_postgres_own_error(outbox: Outbox) -> None:
    """A take that Postgres refuses leaves no transaction open on the connection, and says what Postgres said."""
    outbox.insert([("order", "o-1", "X", {"n": 1})])
    missing = OutboxNames.load(outbox_schema=f"{outbox.names.outbox_schema}_missing")
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable, match="does not exist"):
            take(conn, missing, 10)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        rows = take(conn, outbox.names, 10)  # the connection is still usable
        conn.execute("ROLLBACK")
    assert len(rows) == 1
    assert outbox.count() == 1  # rolled back: the row is still there
