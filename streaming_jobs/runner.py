"""Run one streaming job: Kafka -> classify -> dead letters + the job's Delta table, checkpointed.

    python -m streaming_jobs.runner NAME [--master local[2]|spark://HOST:PORT] [--trigger 1s|available-now]

The query reads with `read_committed` and `failOnDataLoss=true`: offsets that retention already deleted
stop the job with Spark's error rather than being skipped. SIGTERM (what `cdcpipe jobs stop` sends) lets
the micro-batch in flight finish, then stops the query and exits 0. While it runs, the job writes its
latest progress to `<checkpoint>/cdcpipe_progress.json`, which `cdcpipe jobs status` reads.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from cdcpipe.errors import CdcpipeError
from schemas.contracts import default_registry
from streaming_jobs import retention
from streaming_jobs.batches import handle_batch
from streaming_jobs.config import SparkSettings
from streaming_jobs.jobs import JobSpec, find
from streaming_jobs.sinks import BatchContext, app_id
from streaming_jobs.spark_session import build_spark_session

PROGRESS_FILE = "cdcpipe_progress.json"


def run(
    spec: JobSpec, settings: SparkSettings, *, trigger: str | None = None, stop: threading.Event | None = None
) -> None:
    """Run until the sources are drained (available-now) or `stop` is set."""
    stop = stop or threading.Event()
    spark = build_spark_session(settings, app_name=f"cdcpipe-job-{spec.name}")
    registry = default_registry()
    lake = settings.lake
    checkpoint = spec.checkpoint_path(lake)
    retention.check(settings, spec)  # offsets retention deleted: refuse before any work, naming them
    identity = app_id(checkpoint)
    counts = {"applied": 0, "dead_letters": 0}

    def each_batch(records: DataFrame, batch_id: int) -> None:
        ctx = BatchContext(spark, spec, spec.table_path(lake), spec.dead_letter_path(lake), identity, batch_id)
        applied, dead = handle_batch(records, ctx, registry)
        counts["applied"] += applied
        counts["dead_letters"] += dead
        if spec.optimize_every and batch_id and batch_id % spec.optimize_every == 0:
            optimize(spark, spec, lake)

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("subscribe", ",".join(spec.topics))
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
    )
    if spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", spec.max_offsets_per_trigger)
    writer = reader.load().writeStream.foreachBatch(each_batch).option("checkpointLocation", str(checkpoint))
    chosen = trigger or spec.trigger
    if chosen == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spec.processing_time(chosen))
    query = writer.queryName(spec.name).start()
    try:
        while query.isActive:
            if stop.is_set():
                # Graceful: wait for the micro-batch in flight, then stop between batches.
                while query.status.get("isTriggerActive"):
                    time.sleep(0.1)
                query.stop()
                break
            query.awaitTermination(1)
            _write_progress(checkpoint, query.lastProgress, counts, running=True)
        query.awaitTermination()  # raises the query's own error, if it died of one
    finally:
        _write_progress(checkpoint, query.lastProgress, counts, running=False)
        spark.stop()


def optimize(spark: Any, spec: JobSpec, lake: Path) -> None:
    """Compact the job's tables (small files from many micro-batches) so reads do not slow down."""
    from delta.tables import DeltaTable

    for path in (spec.table_path(lake), spec.dead_letter_path(lake)):
        if DeltaTable.isDeltaTable(spark, str(path)):
            DeltaTable.forPath(spark, str(path)).optimize().executeCompaction()


def _write_progress(checkpoint: Path, progress: Any, counts: dict[str, int], *, running: bool) -> None:
    # pyspark 4 hands back a StreamingQueryProgress (its .json is Spark's own rendering) where 3.x gave a dict.
    rendered = json.loads(progress.json) if hasattr(progress, "json") else progress
    record = {"running": running, "updated_at": time.time(), **counts, "progress": rendered}
    tmp = checkpoint / (PROGRESS_FILE + ".tmp")
    tmp.write_text(json.dumps(record, default=str))
    tmp.replace(checkpoint / PROGRESS_FILE)


def main(argv: list[str] | None = None) -> int:
    """Run a job by name from the command line (what `cdcpipe jobs submit` starts)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--master")
    parser.add_argument("--trigger")
    parser.add_argument("--jobs-dir", type=Path, action="append", help="folders of job files (default: the built-in)")
    args = parser.parse_args(argv)
    settings = SparkSettings.load(**({"spark_master": args.master} if args.master else {}))
    spec = find(args.name, args.jobs_dir or list(settings.jobs_dirs))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        run(spec, settings, trigger=args.trigger, stop=stop)
    except CdcpipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
