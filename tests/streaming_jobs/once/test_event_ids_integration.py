"""An event log's memory of event ids across batches, on real Kafka records, Spark and a Delta table.

The batches are driven by hand (as a backfill drives its chunks) so that another writer can commit at an
exact point between two of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from schemas.contracts import default_registry
from streaming_jobs.config import JobsSettings
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.once import resent
from streaming_jobs.once.context import BatchContext
from streaming_jobs.once.event_ids import EventIds
from streaming_jobs.sinks.batch import handle_batch
from streaming_jobs.spark_session import build_spark_session
from tests.support.jobs import opened
from tests.support.stack import Stack

pytestmark = [
    pytest.mark.integration,
    # PySpark leaves the local sockets it reads results from (collect, toArrow) for the garbage collector to
    # close; with Spark in this process, pytest would report each one.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture
def spark(stack: Stack, tmp_path: Path) -> Iterator[Any]:
    settings = JobsSettings.load(
        spark_master="local[1]",
        kafka=stack.kafka(),
        lake=tmp_path / "lake",
        spark_jars_dir=stack.home / "lib" / "spark",
    )
    session = build_spark_session(settings, app_name="test-event-ids")
    try:
        yield session
    finally:
        session.stop()


def test_the_memory_drops_resends_and_reads_the_table_again_after_another_writer(
    stack: Stack, topic: str, tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = ["e-0", "e-1", "e-0", "e-3", "e-4", "e-5", "e-5", "e-7", "e-8"]  # offsets 0-8; e-0 and e-5 sent twice
    producer = Producer({**stack.kafka_config(), "acks": "all"})
    for event_id in events:
        headers: list[tuple[str, str | bytes | None]] = [
            ("id", event_id),
            ("eventType", "AccountOpened"),
            ("eventVersion", "1"),
        ]
        producer.produce(topic, partition=0, key="a-1", value=opened("a-1"), headers=headers)
    assert producer.flush(30) == 0

    spec = JobSpec(name="ids", kind="event_log", topics=(topic,), table="out", dedupe_lookback_records=1000)
    lake = JobsSettings.load(lake=str(tmp_path / "lake")).lake_root()  # with the stack's writer leases
    table, dead = lake / "out", lake / "out_dead_letters"
    memory = EventIds(spec.dedupe_lookback_records)
    reads: list[int] = []  # the batches that read the table's ids
    read_table = resent.recent_ids

    def counted(ctx: BatchContext) -> Any:
        reads.append(ctx.batch_id)
        return read_table(ctx)

    monkeypatch.setattr(resent, "recent_ids", counted)

    def batch(start: int, end: int, batch_id: int, *, app: str = "stream", remember: bool = True) -> None:
        offsets = {topic: {"0": start}}, {topic: {"0": end}}
        records = (
            spark.read.format("kafka")
            .options(**stack.kafka().spark_options())
            .option("subscribe", topic)
            .option("includeHeaders", "true")
            .option("startingOffsets", json.dumps(offsets[0]))
            .option("endingOffsets", json.dumps(offsets[1]))
            .load()
        )
        ctx = BatchContext(spark, spec, table, dead, app, batch_id, event_ids=memory if remember else None)
        handle_batch(records, ctx, default_registry(), {(topic, 0): (start, end)})

    def held() -> list[tuple[str, int]]:
        rows = DeltaTable(str(table)).to_pyarrow_table(columns=["event_id", "kafka_offset"]).to_pylist()
        return sorted((str(r["event_id"]), int(r["kafka_offset"])) for r in rows)

    batch(0, 2, 0)
    batch(2, 4, 1)  # the copy of e-0: its hash is remembered, so the table is read to confirm it
    assert held() == [("e-0", 0), ("e-1", 1), ("e-3", 3)]
    assert reads == [1]

    # Another writer (a backfill beside the stream: its own app id, no memory) applies offset 5, e-5.
    batch(5, 6, 0, app="backfill", remember=False)
    reads.clear()
    # The stream's next batch: offset 5 is held (skipped by its interval); its copy at offset 6 is new to the
    # memory, which must notice the other writer's commit and read the table again, or e-5 lands twice.
    batch(4, 7, 2)
    assert held() == [("e-0", 0), ("e-1", 1), ("e-3", 3), ("e-4", 4), ("e-5", 5)]
    assert reads, "the memory answered for a table another writer had changed"

    reads.clear()
    batch(7, 9, 3)  # nothing sent twice: the memory answers alone, the table is not read
    assert held()[-2:] == [("e-7", 7), ("e-8", 8)]
    assert reads == []
