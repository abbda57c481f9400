"""What a micro-batch's pieces cost, each way of doing them side by side: the jobs' latency levers, one by one.

    python bench/batch_bench.py [--events 48000] [--per-batch 6000] [--variants floor,floor_marker,...]

Needs the stack running. A topic is filled first (1 KB AccountOpened events, 4 partitions); then each variant
is one Structured Streaming query (available-now, `--per-batch` records a batch) over it, in its own driver
on the stack's Spark, timing its steps in every batch. The first two batches (JVM warm-up) are left out;
the figures are medians over the rest. With no load beside it, batches are the same size for every variant,
so the differences are the levers' own:

- `floor` / `floor_marker`: a bare append of the records, without / with Delta's txnAppId/txnVersion marker;
- `job`: classify (as a job does, here per batch), cache, bring the ids and dead-letter count to the driver
  in one Spark job, write the valid events with `_applied_at` (streaming_jobs.once.context.applied_at);
- `job_no_cache`: the same without caching the classified batch: the write reads and classifies it again;
- `job_cache_uncompressed`: the same with Spark's in-memory cache not compressing its column batches;
- `job_two_jobs`: the same with the dead-letter count a Spark job of its own, as jobs did before;
- `job_current_timestamp`: the same with `_applied_at = current_timestamp()`, a literal new every batch;
- `floor_one_task_per_core` / `job_one_task_per_core`: `floor` / `job` with the batch coalesced to one task
  per core (the driver's `defaultParallelism`) before anything reads it.

Writes bench/results/batch.json; prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import create_topic, env_kafka, fill_topic, stack_env
from confluent_kafka.admin import AdminClient

from infra.config import StackSettings

RESULTS = Path(os.environ.get("CDCPIPE_BENCH_RESULTS") or Path(__file__).parent / "results")
VARIANTS = (
    "floor",
    "floor_marker",
    "job",
    "job_no_cache",
    "job_cache_uncompressed",
    "job_two_jobs",
    "job_current_timestamp",
    "floor_one_task_per_core",
    "job_one_task_per_core",
)


def run_variant(topic: str, per_batch: int, variant: str, lake: Path) -> dict[str, int]:
    """One query over the topic in a driver of its own (this file, as a child); its median step times."""
    done = subprocess.run(
        [sys.executable, __file__, "--variant", variant, "--topic", topic, "--per-batch", str(per_batch)],
        env={**os.environ, "CDCPIPE_LAKE": str(lake)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"batch_bench: variant {variant} failed:\n{done.stderr[-4000:]}")
    steps: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return steps


def query(variant: str, topic: str, per_batch: int) -> None:
    """The child: run one variant's query and print the median milliseconds of each of its steps."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F  # noqa: N812

    from streaming_jobs.classify import outbox_events
    from streaming_jobs.classify.contracts import checked_registry
    from streaming_jobs.config import JobsSettings
    from streaming_jobs.once.context import EVENT_COLUMNS, RECORD_COLUMNS, applied_at
    from streaming_jobs.spark_session import build_spark_session

    settings = JobsSettings.load()
    spark = build_spark_session(settings, app_name=f"cdcpipe-bench-batch-{variant}")
    registry = checked_registry(spark)
    out = str(settings.lake_root() / f"{variant}_{uuid.uuid4().hex[:8]}")
    times: dict[str, list[float]] = {}

    def timed(step: str, work: Callable[[], Any]) -> None:
        started = time.perf_counter()
        work()
        times.setdefault(step, []).append(time.perf_counter() - started)

    def each_batch(records: DataFrame, batch_id: int) -> None:
        if variant.endswith("_one_task_per_core"):
            records = records.coalesce(spark.sparkContext.defaultParallelism)
        if variant.startswith("floor"):
            write = records.select(F.col("value").cast("string").alias("payload"), "partition", "offset").write
            if variant == "floor_marker":
                write = write.option("txnAppId", "bench").option("txnVersion", batch_id)
            timed("write", lambda: write.format("delta").mode("append").save(out))
            return
        if variant == "job_cache_uncompressed":
            spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
        events = outbox_events.classify(records, registry)
        events = events if variant == "job_no_cache" else events.cache()
        if variant == "job_two_jobs":
            timed("count_dead", lambda: events.where(F.col("error").isNotNull()).count())
        timed("collect", lambda: events.select(*RECORD_COLUMNS, F.col("error").isNull()).toArrow())
        stamp = F.current_timestamp() if variant == "job_current_timestamp" else applied_at()
        valid = events.where(F.col("error").isNull()).select(*EVENT_COLUMNS, "headers")
        timed("write", lambda: valid.withColumn("_applied_at", stamp).write.format("delta").mode("append").save(out))
        events.unpersist()

    (
        spark.readStream.format("kafka")
        .options(**settings.kafka.spark_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", per_batch)
        .option("kafka.isolation.level", "read_committed")
        .load()
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", out + "_checkpoint")
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    spark.stop()
    medians = {step: round(1000 * statistics.median(seconds[2:] or seconds)) for step, seconds in times.items()}
    medians["total"] = sum(medians.values())
    medians["batches"] = len(next(iter(times.values())))
    print(json.dumps(medians))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=48_000)
    parser.add_argument("--per-batch", type=int, default=6_000)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated of {', '.join(VARIANTS)}")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        query(args.variant, args.topic, args.per_batch)
        return
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if sorted(set(variants) - set(VARIANTS)):
        parser.error(f"--variants: pick from {', '.join(VARIANTS)}")
    env = stack_env(StackSettings.load())
    os.environ.update(env)
    RESULTS.mkdir(exist_ok=True)
    topic = f"jobs.{uuid.uuid4().hex[:8]}.batch"
    create_topic(env, topic)
    lake = Path(env["CDCPIPE_LOCAL_LAKE"]) / f"_bench_batch_{uuid.uuid4().hex[:8]}"
    try:
        fill_topic(env, topic, args.events)
        result = {
            "benchmark": "batch_levers",
            "cores": os.cpu_count(),
            "events": args.events,
            "per_batch": args.per_batch,
            "ms_median": {variant: run_variant(topic, args.per_batch, variant, lake) for variant in variants},
            "note": "one query per variant, available-now over the same records; medians of each step over the "
            "batches after the first two; the stack idle otherwise",
        }
    finally:
        with contextlib.suppress(Exception):
            AdminClient(env_kafka(env).client_config()).delete_topics([topic])[topic].result(30)
        shutil.rmtree(lake, ignore_errors=True)
    (RESULTS / "batch.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
