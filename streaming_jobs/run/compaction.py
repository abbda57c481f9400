"""Compaction of a running job's tables, beside its micro-batches rather than in one of them.

Each micro-batch adds a few small files to each table it writes; every `optimize_every` batches the job
compacts them. Done in line, the batch that compacts is late by the whole compaction, and every event in it
with it. So a streaming job compacts in a thread of its own, in Spark's `compaction` scheduler pool (the
fair scheduler gives the batches their share of the cores meanwhile), and the batches go on.

A compaction never starts just before one of the job table's Delta checkpoints (every CHECKPOINT_INTERVAL
commits, written by the batch whose commit it is, after its commit: the table's whole state rebuilt). Both at
once on the same cores made that batch the longest of a run; a due compaction waits until the checkpoint's
batch is done.

- An append-only table (the event log, and every job's dead letters and event ids) is compacted beside the
  batches: Delta commits a compaction and a blind append one after the other without conflict, and the
  compaction's commit records no offsets, which `streaming_jobs.once.applied` steps over. It holds the table's
  writer lease shared with the job's own batches (streaming_jobs.lake.lease): no other process writes
  meanwhile, which Delta's S3 log store needs, and the job's batches do not wait for it.
- A table the job MERGEs into (latest state, the table kinds, a projection's) is compacted in line, between
  two batches, as before: a MERGE that read files a compaction removed would fail its batch.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from streaming_jobs.jobs.locations import Location
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake.lease import table_lock
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from streaming_jobs.once.context import commit_metadata
from streaming_jobs.run.maintenance import trim_event_ids, vacuum
from streaming_jobs.spark_session import CHECKPOINT_INTERVAL

log = logging.getLogger(__name__)

POOL = "compaction"  # the fair scheduler's pool the background compactions run in
VACUUMED_AT = "cdcpipe_vacuumed_at"  # in the job's checkpoint: when its tables were last vacuumed (epoch seconds)
# A compaction beside the batches takes seconds, some batches: it does not start when a checkpoint falls within
# the job table's next this many commits.
CHECKPOINT_MARGIN = CHECKPOINT_INTERVAL // 5


def compact(spark: Any, table: LakePath, *, lease_of: LakePath, carry_offsets: bool, beside: bool = False) -> None:
    """Compact one table under its job table's writer lease (`beside`: shared with the job's own batches).

    `carry_offsets`: the compaction's commit records the table's applied offsets again, so the table's newest
    commit still says what it holds (what `cdcpipe jobs optimize` and an in-line compaction do). A compaction
    beside the batches must not: a batch may commit more offsets while it runs.
    """
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, str(table)):
        return
    with (
        table_lock(lease_of, holder="optimize", compaction=beside),
        # Read under the lease (entered first): no write may come between the read and the compaction.
        commit_metadata(spark, applied.read(table).metadata() if carry_offsets else None),
    ):
        DeltaTable.forPath(spark, str(table)).optimize().executeCompaction()


def checkpoint_near(version: int) -> bool:
    """Whether one of the next CHECKPOINT_MARGIN commits after `version` is a Delta checkpoint's."""
    return version >= 0 and CHECKPOINT_INTERVAL - version % CHECKPOINT_INTERVAL <= CHECKPOINT_MARGIN


def optimize(spark: Any, where: Location, spec: JobSpec) -> None:
    """Trim a table job's event ids and compact its tables now (`cdcpipe jobs optimize`), under its writer lease.

    The job's table carries its applied offsets forward, like any write of the job. The tables beside it
    (dead letters, event ids) carry no offsets of their own.
    """
    if spec.kind != "event_log":
        trim_event_ids(spark, where.event_ids, where.table, spec.dedupe_lookback_records)
    for table in (where.table, where.dead_letters, where.event_ids):
        compact(spark, table, lease_of=where.table, carry_offsets=table == where.table)


class Compactor:
    """Compacts a streaming job's tables every `optimize_every` batches: the append-only ones in a background thread.

    Before, between two batches, it trims the event ids past the look-back; in that thread, after, it vacuums
    every `vacuum_every_hours` (streaming_jobs.run.maintenance).
    """

    def __init__(self, spark: Any, where: Location, spec: JobSpec) -> None:
        self.spark = spark
        self.where = where
        self.spec = spec
        self.every = spec.optimize_every
        # The event log's own table is append-only (its event ids are in it); a job of another kind MERGEs.
        event_log = spec.kind == "event_log"
        appended = [where.table] if event_log else []
        self.beside = [*appended, where.dead_letters, *([] if event_log else [where.event_ids])]
        self.in_line = [] if event_log else [where.table]
        self.trims = not event_log and spec.dedupe_lookback_records > 0
        self._thread: threading.Thread | None = None
        self._due: int | None = None  # the batch from which the next compaction is due

    def after_batch(self, batch_id: int) -> None:
        """Called after each batch: compact if one is due (in line the MERGE tables, beside the rest)."""
        if not self.every:
            return
        if self._due is None:
            self._due = batch_id + self.every  # `every` batches after the job (re)started
        if batch_id < self._due or checkpoint_near(applied.newest_version(self.where.table)):
            return
        self._due = batch_id + self.every
        if self.trims:  # in line: Delta fails a DELETE that an append beside it committed under
            trim_event_ids(self.spark, self.where.event_ids, self.where.table, self.spec.dedupe_lookback_records)
        for table in self.in_line:
            compact(self.spark, table, lease_of=self.where.table, carry_offsets=True)
        if self._thread is not None and self._thread.is_alive():
            return  # the last one is still at it: skip this turn rather than queue behind it
        self._thread = threading.Thread(target=self._beside, name="cdcpipe-compaction", daemon=True)
        self._thread.start()

    def _beside(self) -> None:
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", POOL)
        where = self.where
        try:
            for table in self.beside:
                compact(self.spark, table, lease_of=where.table, carry_offsets=False, beside=True)
            if self._vacuum_due():
                tables = [
                    where.table,
                    where.dead_letters,
                    *([] if self.spec.kind == "event_log" else [where.event_ids]),
                ]
                vacuum(self.spark, tables, lease_of=where.table, retain_hours=self.spec.vacuum_retain_hours)
                (where.checkpoint / VACUUMED_AT).write_text(str(time.time()))
        except Exception as exc:  # a failed compaction loses nothing: the small files stay; the next one retries
            log.warning("compaction of %s's tables failed (the next one tries again): %s", where.table, exc)

    def _vacuum_due(self) -> bool:
        """Whether `vacuum_every_hours` passed since the last vacuum (kept in the checkpoint, across restarts)."""
        if not self.spec.vacuum_every_hours:
            return False
        marker = self.where.checkpoint / VACUUMED_AT
        last = float(marker.read_text()) if marker.exists() else 0.0
        return time.time() - last >= self.spec.vacuum_every_hours * 3600

    def close(self, timeout_s: float = 300) -> None:
        """Wait for a compaction in progress (a job that stops lets it finish, or its files stay small)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
