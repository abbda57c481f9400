"""Latest state: the newest event per aggregate; a tombstone or a configured event type deletes the row."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs.once.context import EVENT_COLUMNS, BatchContext, applied_at


def _first_per(events: DataFrame, keys: list[str], newest: bool) -> DataFrame:
    """One row per key: the earliest (or newest) by Kafka position."""
    order = [F.col("kafka_partition"), F.col("kafka_offset")]
    window = Window.partitionBy(*keys).orderBy(*[c.desc() for c in order] if newest else order)
    return events.withColumn("_n", F.row_number().over(window)).where("_n = 1").drop("_n")


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
                    .withColumn("_applied_at", applied_at())
                    .write.format("delta")
                    .mode("append")
                    .save(str(ctx.table))
                )
            return count
        table = DeltaTable.forPath(ctx.spark, str(ctx.table))
        # Within one key, Kafka order is the order of the key's partition; an older position never wins.
        later = "(s.kafka_partition <> t.kafka_partition OR s.kafka_offset > t.kafka_offset)"
        columns: dict[str, str | Column] = {c: f"s.{c}" for c in EVENT_COLUMNS} | {"_applied_at": applied_at()}
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
