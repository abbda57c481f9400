"""A batch's invalid records, raw bytes and all, into `<table>_dead_letters` with the reason and coordinates."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs.once.context import BatchContext


def write_dead_letters(events: DataFrame, ctx: BatchContext) -> None:
    """Append the batch's invalid records, raw bytes and all, with the reason and the coordinates."""
    bad = events.where(F.col("error").isNotNull())
    if ctx.raw is not None:
        coordinates = ["topic", "kafka_partition", "kafka_offset"]
        raw = ctx.raw.select(
            "topic",
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
            F.col("key").alias("raw_key"),
            F.col("value").alias("raw_value"),
        )
        bad = bad.join(raw, coordinates, "left")
    (
        bad.select(
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
