"""Streaming jobs on real Kafka, Spark and Delta: each kind, dead letters, and a replayed batch applied once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from tests.support.jobs import BALANCES, Event, deposit, make_job, opened, send
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def assert_each_batch_is_one_commit(table: LakePath) -> None:
    """Each commit that adds rows carries the offsets the table then holds, and no Delta txn marker.

    One atomic commit per batch: rows written without their offsets, and the offsets recorded by a second
    commit, leave a window where a crash keeps rows the table does not know it holds. The offsets are what
    skip a replayed batch; a txnAppId/txnVersion marker would only make Delta rebuild the table's
    transaction state on every write.
    """
    data_commits = 0
    log = table / "_delta_log"
    for name in log.names():
        if not name.endswith(".json") or not name.removesuffix(".json").isdigit():
            continue
        commit = log / name
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        if not any("add" in a for a in actions):
            continue
        data_commits += 1
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert not any("txn" in a for a in actions), f"{commit.name}: rows committed with a txnAppId/txnVersion"
        assert '"applied"' in (info.get("userMetadata") or ""), f"{commit.name}: rows committed without their offsets"
    assert data_commits, f"no commit of {table} added rows"


def test_event_log_appends_each_event_once_and_bad_records_become_dead_letters(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    good: list[Event] = [
        ("a-1", "AccountOpened", opened("a-1"), None),
        ("a-1", "MoneyDeposited", deposit("a-1", 5), None),
    ]
    bad: list[Event] = [
        ("a-2", "MoneyDeposited", "{not json", None),
        ("a-2", "MoneyDeposited", json.dumps({"account_id": "a-2", "amount": "five", "currency": "EUR"}), None),
        ("a-2", "MoneyDeposited", json.dumps({"account_id": "a-2", "currency": "EUR"}), None),
        (None, "MoneyDeposited", deposit("a-2", 1), None),
        ("a-2", "SomethingElse", json.dumps({"x": 1}), None),
        ("a-2", "MoneyDeposited", json.dumps({"account_id": "a-2", "amount": 3, "currency": "EUR", "tip": 1}), None),
        ("a-2", "MoneyDeposited", deposit("a-2", 2), {"eventVersion": "9"}),  # a version with no contract here
    ]
    ids = send(stack, topic, good + bad)
    # The same event sent twice (a publisher's retry): it must appear once.
    send_again = Producer(stack.kafka_config())
    send_again.produce(
        topic,
        key="a-1",
        value=opened("a-1"),
        headers=[("id", ids[0]), ("eventType", "AccountOpened"), ("eventVersion", "1")],
    )
    send_again.flush(30)
    job = make_job(stack, tmp_path, "event_log", [topic])
    job.run()
    assert job.counts() == (2, 7), "the rows appended (the copy in the batch is not) and the dead letters"
    # A first batch starts where the checkpoint says, as later ones do: its records are read from Kafka once, not
    # a second time to find their offsets (Spark counts every read of the batch's records).
    progress = job.progress()["progress"]
    assert progress["numInputRows"] == 10
    assert applied.read(LakePath.of(job.lake) / "out").intervals == {(topic, 0): ((0, 10),)}
    rows = job.table()
    assert sorted(str(r["event_id"]) for r in rows) == sorted(ids[:2])
    first = next(r for r in rows if r["event_id"] == ids[0])
    assert (first["topic"], first["kafka_partition"], first["kafka_offset"]) == (topic, 0, 0)
    assert first["event_type"] == "AccountOpened"
    assert json.loads(str(first["payload"])) == json.loads(opened("a-1"))
    assert first["headers"] is not None

    dead = sorted(job.table("_dead_letters"), key=lambda r: int(str(r["kafka_offset"])))
    assert [r["kafka_offset"] for r in dead] == [2, 3, 4, 5, 6, 7, 8]
    reasons = [str(r["error"]) for r in dead]
    assert "malformed JSON" in reasons[0]
    assert "$.amount has the wrong type: the contract says integer" in reasons[1]
    assert "missing field $.amount" in reasons[2]
    assert "null key" in reasons[3]
    assert "unknown event type SomethingElse v1" in reasons[4]
    assert "unexpected field(s) tip" in reasons[5]
    assert "unknown event type MoneyDeposited v9: no contract MoneyDeposited.v9.json" in reasons[6]
    assert dead[0]["value"] == b"{not json"
    assert all(r["topic"] == topic for r in dead)

    job.run()  # nothing new: nothing changes
    assert len(job.table()) == 2
    assert len(job.table("_dead_letters")) == 7
    # A copy sent again later (a publisher restarting) lands in another micro-batch: still one row.
    send_again.produce(
        topic,
        key="a-1",
        value=deposit("a-1", 5),
        headers=[("id", ids[1]), ("eventType", "MoneyDeposited"), ("eventVersion", "1")],
    )
    # Kafka allows a header name twice (tracing tools add theirs): the event is valid, and the last value wins,
    # as Kafka's own Headers.lastHeader() reads it.
    send_again.produce(
        topic,
        key="a-3",
        value=opened("a-3"),
        headers=[
            ("id", "e-twice"),
            ("eventType", "AccountOpened"),
            ("eventVersion", "1"),
            ("trace", "a"),
            ("trace", "b"),
        ],
    )
    send_again.flush(30)
    job.run()
    assert job.counts() == (1, 0), "the copy already in the table is not appended again, nor counted"
    assert sorted(str(r["event_id"]) for r in job.table()) == sorted([*ids[:2], "e-twice"])
    twice = next(r for r in job.table() if r["event_id"] == "e-twice")
    assert dict(twice["headers"])["trace"] == "b"  # type: ignore[call-overload]
    assert_each_batch_is_one_commit(LakePath.of(job.lake) / "out")


def test_latest_state_keeps_the_newest_event_per_aggregate_and_deletes_on_close(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    send(
        stack,
        topic,
        [
            ("a-1", "AccountOpened", opened("a-1"), None),
            ("a-2", "AccountOpened", opened("a-2"), None),
            ("a-3", "AccountOpened", opened("a-3"), None),
            ("a-1", "MoneyDeposited", deposit("a-1", 10), None),
            ("a-2", "AccountClosed", json.dumps({"account_id": "a-2"}), None),
        ],
    )
    job = make_job(stack, tmp_path, "latest_state", [topic], delete_event_types=["AccountClosed"])
    job.run()
    state = {str(r["aggregate_id"]): r for r in job.table()}
    assert sorted(state) == ["a-1", "a-3"]
    assert state["a-1"]["event_type"] == "MoneyDeposited"
    assert state["a-3"]["event_type"] == "AccountOpened"
    # A later batch: a tombstone deletes, a newer event replaces.
    send(stack, topic, [("a-3", "MoneyDeposited", None, None), ("a-1", "MoneyDeposited", deposit("a-1", 99), None)])
    job.run()
    state = {str(r["aggregate_id"]): r for r in job.table()}
    assert sorted(state) == ["a-1"]
    assert json.loads(str(state["a-1"]["payload"]))["amount"] == 99
    assert_each_batch_is_one_commit(LakePath.of(job.lake) / "out")


def test_a_replayed_batch_is_applied_once_even_by_an_incrementing_projection(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    """A replayed batch is applied once, whichever of its commits the crash came after.

    The first crash window: Delta committed the batch, the checkpoint did not, so Spark replays the batch. The
    balances, which a MERGE increments, must not move. The second: the batch's event ids were recorded, the
    driver died before the table's commit; the replay applies the batch, and records its ids once. On the
    object-store lake, the production setting (Delta's S3 log store, Spark's checkpoint on S3).
    """
    send(
        stack,
        topic,
        [
            ("a-1", "AccountOpened", opened("a-1"), None),
            ("a-2", "AccountOpened", opened("a-2"), None),
            ("a-1", "MoneyDeposited", deposit("a-1", 100), None),
            ("a-2", "MoneyDeposited", deposit("a-2", 30), None),
            (
                "tr-1",
                "TransferCompleted",
                json.dumps(
                    {"transfer_id": "tr-1", "from_account": "a-1", "to_account": "a-2", "amount": 40, "currency": "EUR"}
                ),
                None,
            ),
        ],
    )
    job = make_job(
        stack,
        tmp_path,
        "projection",
        [topic],
        lake=stack.s3_lake(),
        projection=BALANCES,
    )
    job.run()
    expected = {"a-1": 60, "a-2": 70}
    assert {r["account_id"]: r["balance"] for r in job.table()} == expected

    last = _drop_newest(job.checkpoint() / "commits", "")  # the driver died after the Delta commit
    job.run()
    assert (job.checkpoint() / "commits" / last.name).exists(), "the batch was not replayed"
    assert {r["account_id"]: r["balance"] for r in job.table()} == expected
    assert_each_batch_is_one_commit(LakePath.of(job.lake) / "out")

    # The driver died between the event ids' commit and the table's.
    _drop_newest(LakePath.of(job.lake) / "out" / "_delta_log", ".json")
    _drop_newest(job.checkpoint() / "commits", "")
    job.run()
    assert {r["account_id"]: r["balance"] for r in job.table()} == expected
    positions = [(r["kafka_partition"], r["kafka_offset"]) for r in job.table("_event_ids")]
    assert sorted(positions) == [(0, offset) for offset in range(5)], "the batch's ids were recorded twice"
    assert_each_batch_is_one_commit(LakePath.of(job.lake) / "out")
    assert_each_batch_is_one_commit(LakePath.of(job.lake) / "out_event_ids")


def _drop_newest(folder: LakePath, suffix: str) -> LakePath:
    """Delete the newest numbered file (a checkpoint's or a Delta log's commit) and its checksum, as a crash would."""
    numbered = [n for n in folder.names() if n.removesuffix(suffix).isdigit() and n.endswith(suffix)]
    last = folder / max(numbered, key=lambda n: int(n.removesuffix(suffix)))
    last.delete()
    (folder / f".{last.name}.crc").delete()  # Spark's checksum of a checkpoint file
    (folder / f"{last.name.removesuffix(suffix)}.crc").delete()  # Delta's of a table version
    return last
