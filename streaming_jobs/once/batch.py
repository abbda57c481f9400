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
from dataclasses import replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812

from schemas.contracts import ContractRegistry
from schemas.table_contracts import load_table_contract
from streaming_jobs.classify import outbox_events, table_changes
from streaming_jobs.config import SparkSettings
from streaming_jobs.jobs import topics as sources
from streaming_jobs.jobs.spec import TABLE_KINDS
from streaming_jobs.lake.lease import table_lock
from streaming_jobs.once import applied, poison
from streaming_jobs.once.resent import drop_resent
from streaming_jobs.ranges.positions import Partition
from streaming_jobs.schema_change import apply as schema_change
from streaming_jobs.sinks.context import BatchContext, record_only
from streaming_jobs.sinks.dead_letters import count_dead, write_dead_letters
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


def record_ranges(records: DataFrame) -> dict[Partition, applied.Interval]:
    """The [first, last + 1) offsets of the records, per partition (one small aggregation)."""
    rows = records.groupBy("topic", "partition").agg(F.min("offset"), F.max("offset")).collect()
    return {(str(r[0]), int(r[1])): (int(r[2]), int(r[3]) + 1) for r in rows}


def _outside(held: applied.Applied) -> Column:
    """True for a record at an offset the table does not hold yet."""
    inside = [
        (F.col("topic") == topic) & (F.col("partition") == partition) & F.col("offset").between(start, end - 1)
        for (topic, partition), spans in held.intervals.items()
        for start, end in spans
    ]
    return ~functools.reduce(operator.or_, inside) if inside else F.lit(True)


def _table_changes(records: DataFrame, ctx: BatchContext) -> tuple[BatchContext, DataFrame]:
    """The batch's table changes, read shape by shape; the contract evolved first if the source's columns changed."""
    shaped = schema_change.with_shape(records)
    start, own = schema_change.table_contract(ctx.table, ctx.job.source_table or "")
    contract, plans = schema_change.reconcile(
        ctx.spark,
        ctx.job,
        ctx.table,
        start,
        schema_change.observed(shaped),
        lambda: SparkSettings.load().source_pg_dsn,
        own,
    )
    return replace(ctx, contract=contract), table_changes.classify(shaped, contract, plans)


def handle_batch(
    records: DataFrame, ctx: BatchContext, registry: ContractRegistry, covered: Ranges | None = None
) -> tuple[int, int]:
    """Apply the records the table does not hold yet; (applied, dead-lettered) counts.

    `covered` is the offsets the batch read, per partition (from the plan: a streaming batch's offsets
    file, a backfill's chunk); without it they are taken from the records.
    """
    with table_lock(ctx.table, holder=f"job {ctx.job.name} batch {ctx.batch_id}"):
        held = applied.read(ctx.table)
        ranges = dict(covered) if covered is not None else record_ranges(records)
        if held.covers(ranges):
            return 0, 0  # a replayed batch, or a range applied before: nothing to do, no Spark job run
        sources.check_partitions(ctx.job.name, ctx.topics, ranges)
        ctx = replace(ctx, applied_metadata=held.plus(ranges).with_topics(ctx.topics).metadata(), ranges=ranges)
        fresh = records.where(_outside(held)) if held.intervals else records
        if ctx.job.kind in TABLE_KINDS:
            ctx, classified = _table_changes(fresh, ctx)
        else:
            classified = outbox_events.classify(fresh, registry)
        classified = classified.cache()
        try:
            dead = count_dead(classified)
            if dead:
                write_dead_letters(classified, ctx)
            valid = classified if ctx.job.kind == "event_log" else drop_resent(classified, ctx)
            done, poisoned = poison.apply(HANDLERS[ctx.job.kind], valid, ctx)
        finally:
            classified.unpersist()
        if not applied.read(ctx.table).covers(ranges):
            record_only(ctx)
        return done, dead + poisoned
