"""What each kind of job does with one micro-batch, so that applying it twice changes nothing.

Every Delta write of a batch carries Delta's idempotent-write marker (txnAppId = the job's app id, kept in
its checkpoint folder; txnVersion = the batch id). A batch replayed after a crash (Spark re-runs the last
batch when its checkpoint commit did not happen) is skipped by each table it already reached: no row is
applied twice, including increments such as a running balance. Within a batch, rows are deduplicated by
event id before any MERGE, since a MERGE fails when two source rows match one target row.
"""

from __future__ import annotations

import functools
import importlib
import json
import operator
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs import applied
from streaming_jobs.applied import Interval
from streaming_jobs.errors import StreamingError
from streaming_jobs.event_ids import EventIds, Record, split
from streaming_jobs.jobs import JobSpec
from streaming_jobs.positions import Partition

EVENT_COLUMNS = [
    "event_id",
    "event_type",
    "event_version",
    "aggregate_id",
    "payload",
    "topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
]

RECORD_COLUMNS = ["topic", "kafka_partition", "kafka_offset", "event_id"]  # an event_ids.Record

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def app_id(checkpoint: Path) -> str:
    """The job's idempotence id, made with its checkpoint.

    A new checkpoint must never reuse an old id, or Delta would skip every write of the new run as done.
    """
    checkpoint.mkdir(parents=True, exist_ok=True)
    path = checkpoint / "cdcpipe_app_id"
    if not path.exists():
        path.write_text(str(uuid.uuid4()))
    return path.read_text().strip()


@dataclass(frozen=True)
class BatchContext:
    """What a micro-batch handler (and a user's projection) needs to write exactly once."""

    spark: SparkSession
    job: JobSpec
    table: Path
    dead_letters: Path
    app_id: str
    batch_id: int
    applied_metadata: str | None = None  # the offsets the table holds once this batch is in (streaming_jobs.applied)
    ranges: Mapping[Partition, Interval] = field(default_factory=dict)  # the offsets the batch covers, [start, end)
    event_ids: EventIds | None = None  # an event log's memory of the ids its table holds, kept between batches

    @contextmanager
    def idempotent(self) -> Iterator[None]:
        """The batch's one write to its table: skipped if this batch reached the table, and recording its offsets.

        Writes in this block (MERGE, UPDATE, DELETE, appends) carry Delta's txnAppId/txnVersion and, in the
        commit's userMetadata, the offset intervals the table holds with this batch in. Make exactly one
        commit to the job's table here: the intervals are true once that commit is in.
        """
        conf = self.spark.conf
        conf.set("spark.databricks.delta.write.txnAppId", self.app_id)
        conf.set("spark.databricks.delta.write.txnVersion", str(self.batch_id))
        if self.applied_metadata:
            conf.set(USER_METADATA, self.applied_metadata)
        try:
            yield
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")
            conf.unset(USER_METADATA)


def count_dead(events: DataFrame) -> int:
    """How many of the batch's records are dead letters (this also fills the classified batch's cache)."""
    return events.where(F.col("error").isNotNull()).count()


def write_dead_letters(events: DataFrame, ctx: BatchContext) -> None:
    """Append the batch's invalid records, raw bytes and all, with the reason and the coordinates."""
    (
        events.where(F.col("error").isNotNull())
        .select(
            F.lit(ctx.job.name).alias("job"),
            F.lit(ctx.batch_id).alias("batch_id"),
            "topic",
            "kafka_partition",
            "kafka_offset",
            "kafka_timestamp",
            F.col("raw_key").alias("key"),
            F.col("raw_value").alias("value"),
            "headers",
            "error",
            F.current_timestamp().alias("detected_at"),
        )
        .write.format("delta")
        .mode("append")
        .option("txnAppId", ctx.app_id)
        .option("txnVersion", ctx.batch_id)
        .save(str(ctx.dead_letters))
    )


def _first_per(events: DataFrame, keys: list[str], newest: bool) -> DataFrame:
    """One row per key: the earliest (or newest) by Kafka position."""
    order = [F.col("kafka_partition"), F.col("kafka_offset")]
    window = Window.partitionBy(*keys).orderBy(*[c.desc() for c in order] if newest else order)
    return events.withColumn("_n", F.row_number().over(window)).where("_n = 1").drop("_n")


def rows_added(ctx: BatchContext) -> int:
    """Rows the batch's commit added to the job's table (0 when Delta skipped the write as done before).

    Read from the commit itself (its operation metrics), which costs one small file, not a Spark job.
    """
    commit = applied.newest_commit(ctx.table)
    txn: dict[str, Any] = next((a["txn"] for a in commit if "txn" in a), {})
    if txn.get("appId") != ctx.app_id or txn.get("version") != ctx.batch_id:
        return 0
    for action in commit:
        metrics = action.get("commitInfo", {}).get("operationMetrics", {})
        if "numOutputRows" in metrics:
            return int(metrics["numOutputRows"])
    return sum(json.loads(a["add"].get("stats") or "{}").get("numRecords", 0) for a in commit if "add" in a)


def ensure_table(ctx: BatchContext, columns: DataFrame) -> DeltaTable:
    """The job's table, created empty with these columns on the first batch."""
    if not DeltaTable.isDeltaTable(ctx.spark, str(ctx.table)):
        columns.limit(0).write.format("delta").mode("ignore").save(str(ctx.table))
    return DeltaTable.forPath(ctx.spark, str(ctx.table))


def event_log(events: DataFrame, ctx: BatchContext) -> int:
    """Append every valid event once: dedupe by event id within the batch, and against the table's recent rows.

    A publisher sends an event again only when it restarts (a relay, a connector), as the first records it
    sends, so the copy follows its original in the same partition (same key) within the few thousand records
    the publisher had in flight, whatever time passed in between. The check against the table therefore
    looks only at the event ids of the last `dedupe_lookback_records` records of each partition before the
    batch; a streaming job remembers those between batches (streaming_jobs.event_ids). A MERGE, or a
    look-back in time, would read more of the table on every batch as the log grows.

    The batch's (partition, offset, event id) come to the driver (one small Spark job), which picks the
    records to drop; usually none, and then the batch is appended as it is, without a shuffle or a join.
    Returns the rows appended.
    """
    valid = events.where(F.col("error").isNull())
    records = [_record(r) for r in valid.select(*RECORD_COLUMNS).toArrow().to_pylist()]
    before = applied.newest_version(ctx.table)
    chosen = split(records, _held(ctx, valid, before, records))
    fresh = valid.select(*EVENT_COLUMNS, "headers")
    if chosen.drop:
        dropped = ctx.spark.createDataFrame(
            [(tp[0], tp[1], offset) for tp, offset, _ in chosen.drop],
            "topic string, kafka_partition int, kafka_offset long",
        )
        fresh = fresh.join(F.broadcast(dropped), ["topic", "kafka_partition", "kafka_offset"], "left_anti")
    with ctx.idempotent():
        fresh.withColumn("_applied_at", F.current_timestamp()).write.format("delta").mode("append").save(str(ctx.table))
    if ctx.event_ids is not None:
        after = applied.newest_version(ctx.table)
        if after == before + 1:  # this batch's commit (the writer lock keeps any other out)
            ctx.event_ids.appended(after, ctx.ranges, chosen.keep)
        else:  # Delta skipped the write as done before: what the table holds came from elsewhere
            ctx.event_ids.forget()
    return rows_added(ctx)


def _held(ctx: BatchContext, valid: DataFrame, version: int, records: list[Record]) -> set[str]:
    """The batch's event ids the table already holds, in the look-back of the batch's partitions."""
    lookback = ctx.job.dedupe_lookback_records
    memory = ctx.event_ids if lookback and ctx.ranges else None
    if memory is not None and not memory.answers(version, ctx.ranges):
        rows = [] if version < 0 else _recent(ctx).select(*RECORD_COLUMNS).toArrow().to_pylist()
        memory.load(version, memory.floors(ctx.ranges), [_record(r) for r in rows])
    if version < 0:
        return set()  # no table yet
    if memory is not None and not memory.suspects(event_id for _, _, event_id in records):
        return set()  # the common case: no Spark job, the table is not read
    # The batch is the small side: broadcast its ids and stream the table's past them, so the table is
    # neither shuffled nor sorted; only the ids found there (usually none) come back.
    present = _recent(ctx).select("event_id").join(F.broadcast(valid.select("event_id")), "event_id", "left_semi")
    return {str(row[0]) for row in present.distinct().collect()}


def _recent(ctx: BatchContext) -> DataFrame:
    """The table's rows a batch's ids are looked for among: its partitions' last records (all, without a look-back)."""
    seen = ctx.spark.read.format("delta").load(str(ctx.table))
    lookback = ctx.job.dedupe_lookback_records
    if not (lookback and ctx.ranges):
        return seen
    near = [
        (F.col("topic") == topic)
        & (F.col("kafka_partition") == partition)
        & (F.col("kafka_offset") >= start - lookback)
        for (topic, partition), (start, _) in ctx.ranges.items()
    ]
    return seen.where(functools.reduce(operator.or_, near))


def _record(row: dict[str, Any]) -> Record:
    return (row["topic"], row["kafka_partition"]), row["kafka_offset"], row["event_id"]


def latest_state(events: DataFrame, ctx: BatchContext) -> int:
    """Upsert the newest event per aggregate; a configured event type, or a tombstone, deletes the row."""
    deletes = list(ctx.job.delete_event_types)
    valid = events.where(F.col("error").isNull())
    newest = (
        _first_per(valid, ["aggregate_id"], newest=True)
        .select(
            *EVENT_COLUMNS,
            (
                F.col("payload").isNull() | F.col("event_type").isin(*deletes) if deletes else F.col("payload").isNull()
            ).alias("_delete"),
        )
        .cache()  # counted, then written: computed once
    )
    try:
        count = newest.count()
        if not DeltaTable.isDeltaTable(ctx.spark, str(ctx.table)):
            # The first batch: nothing to merge with, so one plain write creates the table with its rows.
            with ctx.idempotent():
                (
                    newest.where(~F.col("_delete"))
                    .drop("_delete")
                    .withColumn("_applied_at", F.current_timestamp())
                    .write.format("delta")
                    .mode("append")
                    .save(str(ctx.table))
                )
            return count
        table = DeltaTable.forPath(ctx.spark, str(ctx.table))
        # Within one key, Kafka order is the order of the key's partition; an older position never wins.
        later = "(s.kafka_partition <> t.kafka_partition OR s.kafka_offset > t.kafka_offset)"
        columns: dict[str, str | Column] = {c: f"s.{c}" for c in EVENT_COLUMNS} | {"_applied_at": F.current_timestamp()}
        with ctx.idempotent():
            (
                table.alias("t")
                .merge(newest.alias("s"), "t.aggregate_id = s.aggregate_id")
                .whenMatchedDelete(condition=f"s._delete AND {later}")
                .whenMatchedUpdate(condition=f"NOT s._delete AND {later}", set=columns)
                .whenNotMatchedInsert(condition="NOT s._delete", values=columns)
                .execute()
            )
        return count
    finally:
        newest.unpersist()


def projection(events: DataFrame, ctx: BatchContext) -> int:
    """Hand the batch's valid events to the user's function, which writes through ctx.idempotent()."""
    module_name, _, function_name = (ctx.job.projection or "").partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise StreamingError(f"job {ctx.job.name}: cannot load projection {ctx.job.projection!r} ({exc})") from exc
    valid = _first_per(events.where(F.col("error").isNull()), ["event_id"], newest=False).select(*EVENT_COLUMNS)
    function(valid, ctx)
    return valid.count()
