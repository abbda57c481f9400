"""One batch of a job (a streaming micro-batch or a backfill chunk), applied once.

It drops what the table already holds, classifies the rest, dead-letters the bad records and hands the
good ones to the job's kind. The whole of it runs under the table's writer lease (streaming_jobs.lake.lease),
so the check of which offsets the table holds (streaming_jobs.once.applied) and the write that adds this
batch's cannot interleave with another writer's, on this machine or another.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from typing import NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812

from ground.settings import revealed
from schemas.contracts import ContractRegistry
from schemas.table_contracts import load_table_contract
from streaming_jobs.classify import outbox_events, table_changes
from streaming_jobs.classify.table_changes import UNAVAILABLE
from streaming_jobs.config import JobsSettings
from streaming_jobs.jobs.spec import TABLE_KINDS
from streaming_jobs.lake.lease import ensure_held, table_lock
from streaming_jobs.offsets import Partition
from streaming_jobs.once import applied, sources
from streaming_jobs.once.context import RECORD_COLUMNS, BatchContext, record_only
from streaming_jobs.once.event_ids import Record
from streaming_jobs.once.resent import drop_resent
from streaming_jobs.schema_change import apply as schema_change
from streaming_jobs.sinks import poison
from streaming_jobs.sinks.dead_letters import write_dead_letters
from streaming_jobs.sinks.event_log import event_log
from streaming_jobs.sinks.latest_state import latest_state
from streaming_jobs.sinks.projection import projection
from streaming_jobs.sinks.scd import table_history, table_mirror

Handler = Callable[[DataFrame, BatchContext], int]
Ranges = Mapping[Partition, applied.Interval]


def _table_kind(write: Callable[..., int]) -> Handler:
    def handler(changes: DataFrame, ctx: BatchContext) -> int:
        return write(changes, ctx, ctx.contract or load_table_contract(ctx.job.source_table or ""))

    return handler


HANDLERS: dict[str, Handler] = {
    "event_log": event_log,
    "latest_state": latest_state,
    "projection": projection,
    "table_mirror": _table_kind(table_mirror),
    "table_history": _table_kind(table_history),
}


# The columns of a record's partition and offset: in Kafka's records, and once classified.
RAW = ("partition", "offset")
CLASSIFIED = ("kafka_partition", "kafka_offset")


def record_ranges(records: DataFrame, coordinates: tuple[str, str] = RAW) -> dict[Partition, applied.Interval]:
    """The [first, last + 1) offsets of the records, per partition (one small aggregation)."""
    partition, offset = coordinates
    rows = records.groupBy("topic", partition).agg(F.min(offset), F.max(offset)).collect()
    return {(str(r[0]), int(r[1])): (int(r[2]), int(r[3]) + 1) for r in rows}


def _outside(held: applied.Applied, ranges: Ranges, coordinates: tuple[str, str]) -> Column | None:
    """True for a record at an offset the table does not hold yet; None when the table holds none of `ranges`.

    Only the held intervals that meet the batch's ranges make the filter. A streaming batch starts where the
    last one ended, so usually none do and the batch's plan carries no offsets: a filter whose literals
    changed with every batch would make Spark generate and compile the batch's whole stage anew each time.
    """
    partition_column, offset_column = coordinates
    inside = [
        (F.col("topic") == topic)
        & (F.col(partition_column) == partition)
        & F.col(offset_column).between(start, end - 1)
        for (topic, partition), (first, last) in ranges.items()
        for start, end in held.intervals.get((topic, partition), ())
        if start < last and first < end
    ]
    return ~functools.reduce(operator.or_, inside) if inside else None


class Positions(NamedTuple):
    """What the batch's one job to the driver brings back (see `_positions`)."""

    valid: list[Record]  # each valid record's (partition, offset, event id)
    dead: int  # dead letters
    has_reads: bool | None  # table changes: the BatchContext flags; None for events
    has_unsent: bool | None
    source_times: list[float]  # when asked: each valid record's source commit (table) or Kafka time (event)


def _positions(classified: DataFrame, timed: bool) -> Positions:
    """The valid records, the count of dead letters and what the valid table changes hold: one Spark job.

    It is the batch's one job to the driver before the write, and it fills the classified batch's cache.
    `timed`: each valid record's source time too (`Positions.source_times`).
    """
    changes = UNAVAILABLE in classified.columns
    flags = [(F.col("_op") == "r").alias("read"), (F.size(UNAVAILABLE) > 0).alias("unsent")] if changes else []
    source = "_source_ts" if changes else "kafka_timestamp"
    times = [F.col(source).cast("double").alias("source_time")] if timed else []
    table = classified.select(*RECORD_COLUMNS, F.col("error").isNull().alias("valid"), *flags, *times).toArrow()
    topic, partition, offset, event_id, ok = (table.column(i).to_pylist() for i in range(5))
    valid = [((t, p), o, e) for t, p, o, e, v in zip(topic, partition, offset, event_id, ok, strict=True) if v]

    def held(name: str) -> bool | None:
        if not changes:
            return None
        return any(bool(f) and v for f, v in zip(table.column(name).to_pylist(), ok, strict=True))

    source_times = (
        [t for t, v in zip(table.column("source_time").to_pylist(), ok, strict=True) if v and t is not None]
        if timed
        else []
    )
    return Positions(valid, table.num_rows - len(valid), held("read"), held("unsent"), source_times)


def _table_changes(records: DataFrame, ctx: BatchContext) -> tuple[BatchContext, DataFrame, DataFrame]:
    """The batch's table changes, read shape by shape; the contract evolved first if the source's columns changed.

    Kafka is read once: into a cache of the changes without their schemas (`slim`, the third value: unpersist
    it once the changes are cached), which the shapes are found in and the changes classified from. The changes
    come back cached (not read yet).
    """
    with ctx.step("classify.read"):  # Kafka read into the cache, and its shapes found: one Spark job
        schema_change.meet_first(records)
        slim = schema_change.slim(records).cache()
        shapes = schema_change.observed(slim)
    with ctx.step("classify.plan"):
        start, own = schema_change.table_contract(ctx.table, ctx.job.source_table or "")
        contract, plans = schema_change.reconcile(
            ctx.spark, ctx.job, ctx.table, start, shapes, lambda: revealed(JobsSettings.load().source_pg_dsn), own
        )
        changes = table_changes.classify(slim, contract, plans).cache()
    return replace(ctx, contract=contract, raw=records), changes, slim


def handle_batch(
    records: DataFrame,
    ctx: BatchContext,
    registry: ContractRegistry,
    covered: Ranges | None = None,
    *,
    classified: bool = False,
) -> tuple[int, int]:
    """Apply the records the table does not hold yet; (applied, dead-lettered) counts.

    `covered` is the offsets the batch read, per partition (from the plan: a streaming batch's offsets
    file, a backfill's chunk); without it they are taken from the records. `classified`: the records are
    outbox events classified already (`outbox_events.classify`), as a streaming job of an event kind reads
    them: its stream classifies, so Spark analyses the classification once, not on every batch.
    """
    coordinates = CLASSIFIED if classified else RAW
    holder = f"job {ctx.job.name} batch {ctx.batch_id}"
    with ExitStack() as lease:
        with ctx.step("lease"):
            lease.enter_context(table_lock(ctx.table, holder=holder))
        with ctx.step("offsets"):
            held = applied.read(ctx.table)
            ranges = dict(covered) if covered is not None else record_ranges(records, coordinates)
            if held.covers(ranges):
                return 0, 0  # a replayed batch, or a range applied before: nothing to do, no Spark job run
            sources.check_partitions(ctx.job.name, ctx.topics, ranges)
            ctx = replace(ctx, applied_metadata=held.plus(ranges).with_topics(ctx.topics).metadata(), ranges=ranges)
            outside = _outside(held, ranges, coordinates)
            fresh = records.where(outside) if outside is not None else records
            # One task per core, not one per Kafka partition: a micro-batch's tasks are short, and each one's
            # fixed costs (its launch, its own data file and that file's statistics) outweigh its records. The
            # partitions are joined, not shuffled: each keeps its records in offset order.
            fresh = fresh.coalesce(ctx.spark.sparkContext.defaultParallelism)
        slim: DataFrame | None = None  # the table kinds: the batch as read, cached until its changes are
        if not classified and ctx.job.kind in TABLE_KINDS:
            ctx, events, slim = _table_changes(fresh, ctx)  # its steps timed apart: the read, the plan
        else:
            with ctx.step("classify.plan"):
                events = (fresh if classified else outbox_events.classify(fresh, registry)).cache()
        try:
            with ctx.step("classify.run"):
                valid_records, dead, reads, unsent, source_times = _positions(
                    events, ctx.phases is not None and ctx.phases.timed
                )
                if slim is not None:
                    slim.unpersist()  # the changes are cached now: free the batch's memory before the MERGE
                ctx = replace(ctx, records=valid_records, has_reads=reads, has_unsent=unsent)
                if ctx.phases is not None:
                    ctx.phases.source_times = source_times
            if dead:
                with ctx.step("dead_letters"):
                    write_dead_letters(events, ctx)
            with ctx.step("resent"):
                valid = events if ctx.job.kind == "event_log" else drop_resent(events, ctx)
            # The commit below records the offsets read under this lease: never after another writer took it.
            ensure_held(ctx.table, holder)
            done, poisoned = poison.apply(HANDLERS[ctx.job.kind], valid, ctx)
        finally:
            events.unpersist()
            if slim is not None:
                slim.unpersist()  # when `_positions` failed before it freed the cache (else a no-op)
        with ctx.step("after"):
            if not applied.read(ctx.table).covers(ranges):
                ensure_held(ctx.table, holder)
                record_only(ctx)
        return done, dead + poisoned
