"""Copies of events a job applied before (a publisher resent them), dropped before a kind writes."""

from __future__ import annotations

import functools
import operator
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs.once import applied
from streaming_jobs.once.context import RECORD_COLUMNS, BatchContext, commit_metadata
from streaming_jobs.once.event_ids import Record, Split, split


def drop_resent(events: DataFrame, ctx: BatchContext) -> DataFrame:
    """The batch without the copies of events the job applied before; for every kind but the event log.

    A copy is a record whose event id (for table changes: key and LSN) is at another offset among the job's
    applied events, in the look-back of its partition, or earlier in the batch: the same rule as the event
    log's, over `<table>_event_ids`, since these kinds' tables do not keep every id. The ids of the records
    kept are appended there first, in a commit of their own that records the batch's offsets (`_recorded`). A
    crash before the table's own write leaves them recorded; the replayed batch then finds them at its own
    records' positions, which never count as copies (see `_held`), and those offsets skip the second append.
    """
    table = ctx.event_ids_table
    valid = events.where(F.col("error").isNull())
    before = applied.newest_version(table)
    chosen = choose(valid, ctx, before)
    recorded = _recorded(ctx, before)
    if not recorded.covers(ctx.ranges):  # else an attempt of this batch that crashed recorded them already
        ids = without(valid.select(*RECORD_COLUMNS), ctx, chosen.drop)
        if ctx.superseded is not None:  # a reduced range: the ids of the events it dropped as superseded too
            ids = ids.unionByName(ctx.superseded.select(*RECORD_COLUMNS))
        with commit_metadata(ctx.spark, recorded.plus(ctx.ranges).with_topics(ctx.topics).metadata()):
            ids.write.format("delta").mode("append").save(str(table))
    remember(ctx, before, chosen)
    return without(events, ctx, chosen.drop)


def _recorded(ctx: BatchContext, version: int) -> applied.Applied:
    """The offsets whose ids `<table>_event_ids` holds (streaming_jobs.once.applied), of the topics as they are.

    Its commits carry them as the job's table's commits do, which is what skips a replayed batch's second
    append; Delta's txnAppId/txnVersion marker did it before, at the price of rebuilding the table's
    transaction state (Spark jobs over its whole log) on every append. A table written before its commits
    carried offsets holds none by this reading: a batch replayed across that upgrade appends its ids again,
    at their own positions, which never count as copies. The intervals of a topic deleted and created again
    (another id) number other records: they hold nothing of the topic now.
    """
    recorded = applied.read(ctx.event_ids_table, unknown_is_none=True, version=version)
    for topic, identity in recorded.topics.items():
        if ctx.topics.get(topic, identity) != identity:
            recorded = recorded.without_topic(topic)
    return recorded


def choose(valid: DataFrame, ctx: BatchContext, version: int) -> Split:
    """Which of the batch's valid records to apply: the first copy of each id the job did not apply yet.

    The batch's (partition, offset, event id) come to the driver (one small Spark job, unless the batch
    brought them already), which picks the records to drop: usually none.
    """
    if ctx.records is not None:
        records = ctx.records  # collected with the batch's dead-letter count (streaming_jobs.sinks.batch)
    else:
        records = [_record_of(r) for r in valid.select(*RECORD_COLUMNS).toArrow().to_pylist()]
    return split(records, _held(ctx, valid, version, records))


def without(frame: DataFrame, ctx: BatchContext, drop: list[Record]) -> DataFrame:
    """`frame` less the records at the positions of `drop` (no join at all when there are none)."""
    if not drop:
        return frame
    dropped = ctx.spark.createDataFrame(
        [(tp[0], tp[1], offset) for tp, offset, _ in drop], "topic string, kafka_partition int, kafka_offset long"
    )
    return frame.join(F.broadcast(dropped), ["topic", "kafka_partition", "kafka_offset"], "left_anti")


def remember(ctx: BatchContext, before: int, chosen: Split) -> None:
    """Bring the job's memory of ids up to the commit it just made to `event_ids_table`."""
    if ctx.event_ids is None:
        return
    table = ctx.event_ids_table
    after = applied.newest_version(table)
    # This batch's commit is the only one that changed rows since `before`: the writer lease keeps every other
    # writer out, but the job's own compaction may have committed beside it.
    if after == before + 1 or applied.data_changes(table, before, after) == 1:
        ctx.event_ids.appended(after, ctx.ranges, chosen.keep)
    else:  # Delta skipped a side table's write as done, or the table changed otherwise
        ctx.event_ids.forget()


def _held(ctx: BatchContext, valid: DataFrame, version: int, records: list[Record]) -> set[str]:
    """The batch's event ids the job applied before, in the look-back of the batch's partitions."""
    lookback = ctx.job.dedupe_lookback_records
    memory = ctx.event_ids if lookback and ctx.ranges else None
    # Commits since the memory's version that change no rows (the job's compaction) leave it true: reading the
    # look-back from the table again would make the batch after each compaction seconds late.
    known = memory.version if memory is not None else None
    if (
        memory is not None
        and known is not None
        and known < version
        and applied.data_changes(ctx.event_ids_table, known, version) == 0
    ):
        memory.advance(version)
    if memory is not None and not memory.answers(version, ctx.ranges):
        rows = [] if version < 0 else recent_ids(ctx).select(*RECORD_COLUMNS).toArrow().to_pylist()
        memory.load(version, memory.floors(ctx.ranges), [_record_of(r) for r in rows])
    if version < 0:
        return set()  # no table yet
    if memory is not None and not memory.suspects(event_id for _, _, event_id in records):
        return set()  # the common case: no Spark job, the table is not read
    # The batch is the small side: broadcast its ids and stream the table's past them, so the table is
    # neither shuffled nor sorted; only the ids found there (usually none) come back.
    # An id found at the position of one of the batch's own records is that record's, recorded by an attempt
    # of this batch that crashed before its table's write (`drop_resent`): not a copy.
    present = (
        recent_ids(ctx).select(*RECORD_COLUMNS).join(F.broadcast(valid.select("event_id")), "event_id", "left_semi")
    )
    own = {(tp, offset) for tp, offset, _ in records}
    return {
        event_id for tp, offset, event_id in map(_record_of, present.toArrow().to_pylist()) if (tp, offset) not in own
    }


def recent_ids(ctx: BatchContext) -> DataFrame:
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


def _record_of(row: dict[str, Any]) -> Record:
    """A record of the batch from its row of RECORD_COLUMNS."""
    return (row["topic"], row["kafka_partition"]), row["kafka_offset"], row["event_id"]
