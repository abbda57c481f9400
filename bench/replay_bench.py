"""Replay benchmark: a latest-state read model rebuilt from a topic, and how the time grows with the events.

    python bench/replay_bench.py [--sizes 100000,250000,500000,1000000] [--chunk-size 250000]

Needs the stack running (Kafka; Spark runs in this process, local[2], beside the whole stack on the two
cores). One 4-partition topic is filled with the largest size of 1 KB AccountOpened events over 10,000
accounts; each size is then rebuilt into a fresh table with a fresh checkpoint by the replay engine
(`streaming_jobs.backfill.apply_range`, what `cdcpipe replay` runs) over offsets [earliest, earliest + share).
Reported per size: seconds and events/s (Spark session start excluded, the same for every size), and
seconds per million events, whose spread across sizes says whether the time grows linearly.
Writes bench/results/replay.json; prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from jobs_bench import PARTITIONS, create_topic, fill_topic

from infra.config import StackSettings
from infra.stack import env_values

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    """Fill the topic once, rebuild each size, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,250000,500000,1000000")
    parser.add_argument("--chunk-size", type=int, default=250_000)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    os.environ.update(env_values(StackSettings.load()))
    tag = uuid.uuid4().hex[:8]
    lake = Path(os.environ["CDCPIPE_LAKE"]) / f"_bench_replay_{tag}"
    os.environ["CDCPIPE_LAKE"] = str(lake)
    topic = f"replay.{tag}"
    env = dict(os.environ)
    create_topic(env, topic)
    began = time.monotonic()
    fill_topic(env, topic, sizes[-1])
    fill_s = time.monotonic() - began

    # Imported here: pyspark starts nothing until a session is built, but keep the fill free of it.
    from streaming_jobs.backfill import apply_range
    from streaming_jobs.config import SparkSettings
    from streaming_jobs.jobs import JobSpec
    from streaming_jobs.locations import Location
    from streaming_jobs.positions import KafkaPositions, Position, resolve_range
    from streaming_jobs.spark_session import build_spark_session

    settings = SparkSettings.load()
    spec = JobSpec(name="replay_bench", kind="latest_state", topics=(topic,), table="latest")
    with KafkaPositions(settings.kafka_bootstrap) as kafka:
        whole = resolve_range(kafka, spec.topics, Position("earliest"), Position("latest"))
    spark = build_spark_session(settings, app_name="cdcpipe-replay-bench")
    runs: list[dict[str, Any]] = []
    try:
        for index, size in enumerate([min(20_000, sizes[0]), *sizes]):  # the first warms the JVM up: not reported
            # Each partition's share of `size`, in proportion to what it holds (keys hash unevenly).
            scale = min(1.0, size / whole.total)
            span = type(whole)(
                dict(whole.start),
                {tp: start + round((whole.end[tp] - start) * scale) for tp, start in whole.start.items()},
            )
            where = Location(lake / f"latest_{index}_{size}", lake / "_checkpoints" / f"replay_{index}_{size}")
            outcome = apply_range(spark, settings, spec, where, span, purpose="bench", chunk_size=args.chunk_size)
            rows = spark.read.format("delta").load(str(where.table)).count()
            if index == 0:
                continue
            runs.append(
                {
                    "events": span.total,
                    "seconds": round(outcome.seconds, 2),
                    "events_per_s": round(outcome.events_per_s),
                    "seconds_per_million": round(outcome.seconds / span.total * 1e6, 1),
                    "chunks": outcome.chunks,
                    "rows_in_read_model": rows,
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    finally:
        spark.stop()
    per_million = [r["seconds_per_million"] for r in runs]
    result = {
        "benchmark": "replay_latest_state",
        "cores": os.cpu_count(),
        "partitions": PARTITIONS,
        "event_bytes": 1024,
        "distinct_keys": 10_000,
        "chunk_size": args.chunk_size,
        "topic_fill_seconds": round(fill_s, 1),
        "runs": runs,
        "linearity": {
            "seconds_per_million_min": min(per_million),
            "seconds_per_million_max": max(per_million),
            "max_over_min": round(max(per_million) / min(per_million), 2),
            "median_events_per_s": round(statistics.median(r["events_per_s"] for r in runs)),
        },
        "goal_events_per_s": 100_000,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "replay.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
