"""What each kind of job does with one micro-batch, so that applying it twice changes nothing.

Every Delta write of a batch carries Delta's idempotent-write marker (txnAppId = the job's app id, kept in
its checkpoint folder; txnVersion = the batch id). A batch replayed after a crash (Spark re-runs the last
batch when its checkpoint commit did not happen) is skipped by each table it already reached: no row is
applied twice, including increments such as a running balance.

A publisher's resent copy of an event (a new record, at a later offset, perhaps in a later batch) is dropped
before any kind sees it: by event id (for table changes, key and LSN) among the ids the job applied in the
look-back of each partition (`event_log`, `drop_resent`).
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
from streaming_jobs.applied import Interval, TopicIdentity
from streaming_jobs.errors import StreamingError
from streaming_jobs.event_ids import EventIds, Record, Split, split
from streaming_jobs.jobs import EVENT_IDS_SUFFIX, JobSpec
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
    event_ids: EventIds | None = None  # a memory of the ids `event_ids_table` holds, kept between batches
    topics: Mapping[str, TopicIdentity] = field(default_factory=dict)  # as checked when the run began
    # The Delta transaction marker of this write when it is not (app_id, batch_id): a piece of a batch that
    # failed on a poison record (streaming_jobs.poison) is one write of its own.
    txn: tuple[str, int] | None = None

    @property
    def marker(self) -> tuple[str, int]:
        """(txnAppId, txnVersion) of this write: Delta skips a write whose marker the table already has."""
        return self.txn or (self.app_id, self.batch_id)

    @property
    def event_ids_table(self) -> Path:
        """Where the ids of the events the job applied are: its own table for an event log, else beside it."""
        if self.job.kind == "event_log":
            return self.table
        return self.table.with_name(self.table.name + EVENT_IDS_SUFFIX)

    @contextmanager
    def idempotent(self) -> Iterator[None]:
        """The batch's one write to its table: skipped if this batch reached the table, and recording its offsets.

        Writes in this block (MERGE, UPDATE, DELETE, appends) carry Delta's txnAppId/txnVersion and, in the
        commit's userMetadata, the offset intervals the table holds with this batch in. Make exactly one
        commit to the job's table here: the intervals are true once that commit is in.
        """
        conf = self.spark.conf
        app, version = self.marker
        conf.set("spark.databricks.delta.write.txnAppId", app)
        conf.set("spark.databricks.delta.write.txnVersion", str(version))
        if self.applied_metadata:
            conf.set(USER_METADATA, self.applied_metadata)
        try:
            yield
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")
            conf.unset(USER_METADATA)


def record_only(ctx: BatchContext) -> None:
    """Commit the batch's intervals alone, for a batch whose handler made no commit (say, all dead letters).

    Without it the table would not know it holds these offsets, and a later rewind or backfill over them
    would send their dead letters again.
    """
    if DeltaTable.isDeltaTable(ctx.spark, str(ctx.table)):
        empty = ctx.spark.read.format("delta").load(str(ctx.table)).limit(0)
        with ctx.idempotent():
            empty.write.format("delta").mode("append").save(str(ctx.table))


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
        .option("txnAppId", ctx.marker[0])
        .option("txnVersion", ctx.marker[1])
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
    if (txn.get("appId"), txn.get("version")) != ctx.marker:
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
    before = applied.newest_version(ctx.table)
    chosen = _choose(valid, ctx, before)
    fresh = _without(valid.select(*EVENT_COLUMNS, "headers"), ctx, chosen.drop)
    with ctx.idempotent():
        fresh.withColumn("_applied_at", F.current_timestamp()).write.format("delta").mode("append").save(str(ctx.table))
    _remember(ctx, before, chosen)
    return rows_added(ctx)


def drop_resent(events: DataFrame, ctx: BatchContext) -> DataFrame:
    """The batch without the copies of events the job applied before; for every kind but the event log.

    A copy is a record whose event id (for table changes: key and LSN) is at another offset among the job's
    applied events, in the look-back of its partition, or earlier in the batch: the same rule as the event
    log's, over `<table>_event_ids`, since these kinds' tables do not keep every id. The ids of the records
    kept are appended there first, in a commit of their own that carries the batch's idempotence marker. A
    crash before the table's own write leaves them recorded; the replayed batch then finds them at its own
    records' positions, which never count as copies (see `_held`), and the marker skips the second append.
    """
    table = ctx.event_ids_table
    valid = events.where(F.col("error").isNull())
    before = applied.newest_version(table)
    chosen = _choose(valid, ctx, before)
    (
        _without(valid.select(*RECORD_COLUMNS), ctx, chosen.drop)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", ctx.app_id)
        .option("txnVersion", ctx.batch_id)
        .save(str(table))
    )
    _remember(ctx, before, chosen)
    return _without(events, ctx, chosen.drop)


def _choose(valid: DataFrame, ctx: BatchContext, version: int) -> Split:
    """Which of the batch's valid records to apply: the first copy of each id the job did not apply yet.

    The batch's (partition, offset, event id) come to the driver (one small Spark job), which picks the
    records to drop: usually none.
    """
    records = [_record(r) for r in valid.select(*RECORD_COLUMNS).toArrow().to_pylist()]
    return split(records, _held(ctx, valid, version, records))


def _without(frame: DataFrame, ctx: BatchContext, drop: list[Record]) -> DataFrame:
    """`frame` less the records at the positions of `drop` (no join at all when there are none)."""
    if not drop:
        return frame
    dropped = ctx.spark.createDataFrame(
        [(tp[0], tp[1], offset) for tp, offset, _ in drop], "topic string, kafka_partition int, kafka_offset long"
    )
    return frame.join(F.broadcast(dropped), ["topic", "kafka_partition", "kafka_offset"], "left_anti")


def _remember(ctx: BatchContext, before: int, chosen: Split) -> None:
    """Bring the job's memory of ids up to the commit it just made to `event_ids_table`."""
    if ctx.event_ids is None:
        return
    after = applied.newest_version(ctx.event_ids_table)
    if after == before + 1:  # this batch's commit (the writer lock keeps any other out)
        ctx.event_ids.appended(after, ctx.ranges, chosen.keep)
    else:  # Delta skipped the write as done before: what the table holds came from elsewhere
        ctx.event_ids.forget()


def _held(ctx: BatchContext, valid: DataFrame, version: int, records: list[Record]) -> set[str]:
    """The batch's event ids the job applied before, in the look-back of the batch's partitions."""
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
    # An id found at the position of one of the batch's own records is that record's, recorded by an attempt
    # of this batch that crashed before its table's write (`drop_resent`): not a copy.
    present = _recent(ctx).select(*RECORD_COLUMNS).join(F.broadcast(valid.select("event_id")), "event_id", "left_semi")
    own = {(tp, offset) for tp, offset, _ in records}
    return {event_id for tp, offset, event_id in map(_record, present.toArrow().to_pylist()) if (tp, offset) not in own}


def _recent(ctx: BatchContext) -> DataFrame:
    """The applied ids a batch's are looked for among: its partitions' last records (all, without a look-back)."""
    seen = ctx.spark.read.format("delta").load(str(ctx.event_ids_table))
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
    valid = events.where(F.col("error").isNull()).select(*EVENT_COLUMNS)  # copies went in `drop_resent`
    function(valid, ctx)
    return valid.count()
