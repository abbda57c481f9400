"""The floor under the jobs bench: Kafka to Delta with nothing of cdcpipe's own in between.

    python bench/floor_job.py TOPIC TABLE CHECKPOINT [--one-task-per-core]

One Structured Streaming query, started as the bench starts a job (its own driver, the session every
cdcpipe job uses, trigger 1 s): each micro-batch appends the records' value (as `payload`), partition and
offset to a Delta table, as a job's table write does: without Delta's txnAppId/txnVersion marker (a job
skips what its table holds by the offsets its commits record, streaming_jobs.once.applied). No contracts,
no dead letters, no dedupe, no headers. The jobs bench measures it beside the event-log
job, under the same load: its latency is what micro-batches and a Delta commit cost on this machine, which
no job can go below here. With `--one-task-per-core` it coalesces each batch to one task per core before
the write, as the jobs do (streaming_jobs.sinks.batch): the floor under that lever too.

It writes its progress as a job does (`streaming_jobs.once.checkpoints.write_progress`), with its write's time
(streaming_jobs.phases), for the bench's batch summary and cycle split.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.functions import col

from streaming_jobs.config import JobsSettings
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.checkpoints import rendered_progress, write_progress
from streaming_jobs.phases import Phases
from streaming_jobs.spark_session import build_spark_session


def main() -> None:
    topic, table, checkpoint = sys.argv[1], sys.argv[2], LakePath.of(sys.argv[3])
    one_task_per_core = sys.argv[4:] == ["--one-task-per-core"]
    settings = JobsSettings.load()
    spark = build_spark_session(settings, app_name="cdcpipe-bench-floor")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    last_batch: dict[str, Any] = {}

    def each_batch(records: DataFrame, batch_id: int) -> None:
        phases = Phases(batch_id)
        if one_task_per_core:
            records = records.coalesce(spark.sparkContext.defaultParallelism)
        with phases.table_write():
            (
                records.select(col("value").cast("string").alias("payload"), "partition", "offset")
                .write.format("delta")
                .mode("append")
                .save(table)
            )
        last_batch.update(phases.record())

    query = (
        spark.readStream.format("kafka")
        .options(**settings.kafka.spark_options())
        .option("groupIdPrefix", "cdcpipe-bench-floor")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        while query.isActive and not stop.is_set():
            query.awaitTermination(1)
            write_progress(checkpoint, rendered_progress(query.lastProgress), {}, running=True, batch=last_batch)
        while query.status.get("isTriggerActive"):
            time.sleep(0.1)
        query.stop()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
