"""What a batch's write needs to happen once: the job, its tables, the offsets it covers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from schemas.table_contracts import TableContract
from streaming_jobs.jobs.spec import EVENT_IDS_SUFFIX, JobSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import Partition, TopicIdentity
from streaming_jobs.once import applied
from streaming_jobs.once.applied import Interval
from streaming_jobs.once.event_ids import EventIds, Record
from streaming_jobs.phases import Phases
from streaming_jobs.schema_change.columns import MAPPING, need_mapping

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


def applied_at() -> Column:
    """When the row was written (milliseconds): the `_applied_at` of the event kinds' tables.

    Read on the executor as it writes each row, not `current_timestamp()`: Spark makes that a literal of the
    query's start and compiles it into the generated code, so every batch's write would generate and compile
    its code anew (seen in the code generator's log: two compilations per batch, none with this).
    """
    return F.timestamp_millis(F.expr("reflect('java.lang.System', 'currentTimeMillis')").cast("long"))


USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@contextmanager
def commit_metadata(spark: SparkSession, metadata: str | None) -> Iterator[None]:
    """Delta commits made in this block carry `metadata` as their userMetadata (none: unchanged)."""
    if metadata:
        spark.conf.set(USER_METADATA, metadata)
    try:
        yield
    finally:
        if metadata:
            spark.conf.unset(USER_METADATA)


def app_id(checkpoint: LakePath) -> str:
    """The job's idempotence id, made with its checkpoint.

    A new checkpoint must never reuse an old id, or Delta would skip every write of the new run as done.
    """
    path = checkpoint / "cdcpipe_app_id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.write_text(str(uuid.uuid4()))
        return path.read_text().strip()


@dataclass(frozen=True)
class BatchContext:
    """What a micro-batch handler (and a user's projection) needs to write exactly once."""

    spark: SparkSession
    job: JobSpec
    table: LakePath
    dead_letters: LakePath
    app_id: str
    batch_id: int
    applied_metadata: str | None = (
        None  # the offsets the table holds once this batch is in (streaming_jobs.once.applied)
    )
    ranges: Mapping[Partition, Interval] = field(default_factory=dict)  # the offsets the batch covers, [start, end)
    event_ids: EventIds | None = None  # a memory of the ids `event_ids_table` holds, kept between batches
    topics: Mapping[str, TopicIdentity] = field(default_factory=dict)  # as checked when the run began
    # The Delta transaction marker of this batch's writes to the tables beside the job's (dead letters, event
    # ids) when it is not (app_id, batch_id): a piece of a batch that failed on a poison record
    # (streaming_jobs.sinks.poison) is one write of its own.
    txn: tuple[str, int] | None = None
    # The table kinds: the source table's contract the batch is written with (evolved by this batch, maybe).
    contract: TableContract | None = None
    # The batch's valid records (position, event id), brought to the driver once with its dead-letter count.
    records: list[Record] | None = None
    # The table kinds: whether the batch's valid changes hold snapshot reads (`_op = 'r'`) and values Debezium
    # left out (TOAST), seen with `records`; None when not known. A sink skips the work of what is absent: a
    # flag stays true of any part of the batch (a poison piece), since a part holds no more than the whole.
    has_reads: bool | None = None
    has_unsent: bool | None = None
    phases: Phases | None = None  # where the batch's time goes (a streaming job's batches)
    # A reduced range's records dropped as superseded (RECORD_COLUMNS): their ids are the table's too.
    superseded: DataFrame | None = None
    # The table kinds: the batch's Kafka records as read. Their classified changes keep no bytes (a change's
    # schema is most of them): a dead letter's key and value are read again from here.
    raw: DataFrame | None = None

    @property
    def marker(self) -> tuple[str, int]:
        """(txnAppId, txnVersion) of the batch's dead letters: Delta skips a write the table already has.

        The dead letters are written before the job's table, and hold no offsets of their own: after a crash
        between the two, the replayed batch writes them again, and this marker is what keeps their rows from
        doubling. The job's table (see `idempotent`) and its event ids (streaming_jobs.once.resent) carry
        offsets instead, and no marker.
        """
        return self.txn or (self.app_id, self.batch_id)

    @property
    def event_ids_table(self) -> LakePath:
        """Where the ids of the events the job applied are: its own table for an event log, else beside it."""
        if self.job.kind == "event_log":
            return self.table
        return self.table.with_name(self.table.name + EVENT_IDS_SUFFIX)

    @contextmanager
    def idempotent(self) -> Iterator[None]:
        """The batch's one write to its table, recording in the same commit the offsets the table then holds.

        Writes in this block (MERGE, UPDATE, DELETE, appends) carry, in the commit's userMetadata, the offset
        intervals the table holds with this batch in. Make exactly one commit to the job's table here: the
        intervals are true once that commit is in, and they are what applies each record once. A replayed
        batch, or the part of one the table holds, is dropped before any write (streaming_jobs.sinks.batch),
        under the writer lease; so no Delta txnAppId/txnVersion marker is needed here, and none is written:
        Delta rebuilds a table's transaction state (a Spark job) on every write that carries one.
        """
        with (
            commit_metadata(self.spark, self.applied_metadata),
            self.phases.table_write() if self.phases else nullcontext(),
        ):
            yield

    def step(self, name: str) -> AbstractContextManager[None]:
        """Time a step of the batch under `name` (streaming_jobs.phases)."""
        return self.phases.step(name) if self.phases else nullcontext()


def record_only(ctx: BatchContext) -> None:
    """Commit the batch's intervals alone, for a batch whose handler made no commit (say, all dead letters).

    Without it the table would not know it holds these offsets, and a later rewind or backfill over them
    would send their dead letters again.
    """
    if DeltaTable.isDeltaTable(ctx.spark, str(ctx.table)):
        empty = ctx.spark.read.format("delta").load(str(ctx.table)).limit(0)
        app, version = ctx.marker
        with ctx.idempotent():
            # Delta records an empty append only with an action: the batch's marker is that action here.
            (
                empty.write.format("delta")
                .mode("append")
                .option("txnAppId", app)
                .option("txnVersion", version)
                .save(str(ctx.table))
            )


def rows_added(ctx: BatchContext, before: int) -> int:
    """Rows the batch's commit added to the job's table, the table's newest version being `before` ahead of it.

    Read from the commit itself (its operation metrics), which costs one small file, not a Spark job: the
    first commit after `before` that records this batch's offsets (a compaction may have come in between).
    """
    commit = applied.commit_with(ctx.table, before, ctx.applied_metadata or "")
    output = _metric(commit, "numOutputRows")
    if output is not None:
        return output
    return sum(json.loads(a["add"].get("stats") or "{}").get("numRecords", 0) for a in commit if "add" in a)


def merge_source_rows(ctx: BatchContext, before: int) -> int | None:
    """The rows the batch's MERGE read from its source (its commit's `numSourceRows`), `before` as in `rows_added`.

    One small file read, where counting the source again would run its plan again (Spark jobs). None when no
    commit of this batch says it (Delta made none, or metrics are off): count instead.
    """
    return _metric(applied.commit_with(ctx.table, before, ctx.applied_metadata or ""), "numSourceRows")


def _metric(commit: list[dict[str, Any]], name: str) -> int | None:
    """An operation metric of a commit's actions (`commitInfo.operationMetrics`), None when it has none."""
    for action in commit:
        metrics = action.get("commitInfo", {}).get("operationMetrics", {})
        if name in metrics:
            return int(metrics[name])
    return None


def created_with(ctx: BatchContext, rows: DataFrame, partition_by: Sequence[str] = ()) -> bool:
    """On the first batch, the job's table created holding `rows`, in the batch's one commit; False if it exists.

    A first batch (a new table's snapshot or backlog: its largest) has nothing to merge with, and a MERGE into an
    empty table still joins its source with the table and plans its rewrite: a plain write costs a fraction of it.
    """
    if DeltaTable.isDeltaTable(ctx.spark, str(ctx.table)):
        return False
    writer = rows.write.format("delta").mode("append").partitionBy(*partition_by)
    if need_mapping(rows.columns):  # a name Delta stores only mapped (a delta.* option is a table property here)
        writer = writer.option(MAPPING, "name")
    with ctx.idempotent():
        writer.save(str(ctx.table))
    return True
