"""What a batch's write needs to happen once: the job, its tables, Delta's idempotence marker, the offsets it covers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from schemas.table_contracts import TableContract
from streaming_jobs.jobs.spec import EVENT_IDS_SUFFIX, JobSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from streaming_jobs.once.applied import Interval, TopicIdentity
from streaming_jobs.once.event_ids import EventIds
from streaming_jobs.ranges.positions import Partition

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
    # The Delta transaction marker of this write when it is not (app_id, batch_id): a piece of a batch that
    # failed on a poison record (streaming_jobs.once.poison) is one write of its own.
    txn: tuple[str, int] | None = None
    # The table kinds: the source table's contract the batch is written with (evolved by this batch, maybe).
    contract: TableContract | None = None

    @property
    def marker(self) -> tuple[str, int]:
        """(txnAppId, txnVersion) of this write: Delta skips a write whose marker the table already has."""
        return self.txn or (self.app_id, self.batch_id)

    @property
    def event_ids_table(self) -> LakePath:
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
