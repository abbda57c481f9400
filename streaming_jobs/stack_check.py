"""A Kafka topic into a Delta table through Structured Streaming, read back: proof the Spark side works.

    python -m streaming_jobs.stack_check --topic T --table PATH [--master local[2]|spark://HOST:PORT]

Reads the whole topic once (trigger available-now, checkpointed next to the table), appends it to a
Delta table, reads the table back and prints one JSON object. `cdcpipe stack check` and the stack's
integration tests run it; it is also the smallest example of a job on this stack.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the name every Spark user knows

from ground.errors import CdcpipeError
from ground.kafka_client import KafkaSettings
from streaming_jobs.config import CONSUMER_GROUP_PREFIX, JobsSettings
from streaming_jobs.spark_session import build_spark_session


def topic_to_delta(spark: SparkSession, kafka: KafkaSettings, topic: str, table: Path) -> int:
    """Append every committed record of `topic` to the Delta table at `table`; return the table's row count."""
    records = (
        spark.readStream.format("kafka")
        .options(**kafka.spark_options())
        # The consumer groups of the jobs' principal share a prefix its ACL names (never committed).
        .option("groupIdPrefix", f"{CONSUMER_GROUP_PREFIX}stack-check")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        # Aborted transactional records are never read; data lost to retention fails the query.
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
        .load()
    )
    rows = records.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
    )
    query = (
        rows.writeStream.format("delta")
        .option("checkpointLocation", str(table.with_name(table.name + "._checkpoint")))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    count: int = spark.read.format("delta").load(str(table)).count()
    return count


def main(argv: list[str] | None = None) -> int:
    """Run the check from the command line and print its result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, type=Path, help="folder of the Delta table")
    parser.add_argument("--master", help="local[N] or spark://HOST:PORT (default: CDCPIPE_SPARK_MASTER)")
    args = parser.parse_args(argv)
    overrides = {"spark_master": args.master} if args.master else {}
    started = time.monotonic()
    try:
        settings = JobsSettings.load(**overrides)
        spark = build_spark_session(settings, app_name=f"cdcpipe-stack-check-{args.topic}")
    except CdcpipeError as exc:  # the parent shows stderr: the message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        rows = topic_to_delta(spark, settings.kafka, args.topic, args.table.resolve())
        master = spark.sparkContext.master
    finally:
        spark.stop()
    print(
        json.dumps(
            {
                "master": master,
                "topic": args.topic,
                "table": str(args.table.resolve()),
                "rows": rows,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
