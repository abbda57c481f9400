"""The event log: every valid event once, with its Kafka coordinates and headers."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs.once import applied
from streaming_jobs.once.context import EVENT_COLUMNS, BatchContext, applied_at, rows_added
from streaming_jobs.once.resent import choose, remember, without


def event_log(events: DataFrame, ctx: BatchContext) -> int:
    """Append every valid event once: dedupe by event id within the batch, and against the table's recent rows.

    A publisher sends an event again only when it restarts (a relay, a connector), as the first records it
    sends, so the copy follows its original in the same partition (same key) within the few thousand records
    the publisher had in flight, whatever time passed in between. The check against the table therefore
    looks only at the event ids of the last `dedupe_lookback_records` records of each partition before the
    batch; a streaming job remembers those between batches (streaming_jobs.once.event_ids). A MERGE, or a
    look-back in time, would read more of the table on every batch as the log grows.

    The batch's (partition, offset, event id) come to the driver (one small Spark job), which picks the
    records to drop; usually none, and then the batch is appended as it is, without a shuffle or a join.
    Returns the rows appended.
    """
    with ctx.step("dedupe"):
        valid = events.where(F.col("error").isNull())
        before = applied.newest_version(ctx.table)
        chosen = choose(valid, ctx, before)
        fresh = without(valid.select(*EVENT_COLUMNS, "headers"), ctx, chosen.drop)
    with ctx.idempotent():
        fresh.withColumn("_applied_at", applied_at()).write.format("delta").mode("append").save(str(ctx.table))
    with ctx.step("dedupe"):
        remember(ctx, before, chosen)
        return rows_added(ctx, before)
