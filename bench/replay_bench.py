"""Replay benchmark: a read model rebuilt from a topic, and how the time grows with the events.

    python bench/replay_bench.py [--sizes 100000,250000,500000,1000000] [--chunk-size 250000] [--no-compare]
                                 [--no-warm-up] [--kind latest_state|event_log]
                                 [--lakes local,s3]

Needs the stack running (Kafka; Spark runs in this process, local[2], beside the whole stack on the two
cores). One 4-partition topic is filled with the largest size of 1 KB AccountOpened events over 10,000
accounts; each size is then rebuilt into a fresh table with a fresh checkpoint by the replay engine
(`streaming_jobs.ranges.backfill.apply_range`, what `cdcpipe jobs replay` runs) over offsets [earliest, earliest + share).
A latest-state replay is reduced to each key's newest event outside Spark (streaming_jobs.ranges.reduce) before
Spark applies it; with --compare (the default) the largest size is also run with Spark reading every
record (`--no-reduce`), and the ratio is reported. `--kind event_log` rebuilds an event log instead (Spark reads
every record: an event log keeps them all).
Each lake asked for is rebuilt into in turn, in one run: the stack's local folder (`local`) and its object store
(`s3`, through S3A); `s3_vs_local` holds the ratio of seconds per size of the reduced path.
Reported per size: seconds and events/s (Spark session start excluded, the same for every size); and the
growth: a least-squares fit seconds = fixed + per-million x events, with each run's distance from it.
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

from common import PARTITIONS, create_topic, fill_topic, stack_env

from infra.config import StackSettings

# A smoke run (tests/bench) writes elsewhere: the figures here are the ones the docs quote.
RESULTS = Path(os.environ.get("CDCPIPE_BENCH_RESULTS") or Path(__file__).parent / "results")
LAKES = {"local": "CDCPIPE_LOCAL_LAKE", "s3": "CDCPIPE_S3_LAKE"}  # what `stack env` names each lake
KINDS = ("latest_state", "event_log")  # an event log has no reduced path: Spark reads every record
# An event log's floor: the same chunks copied from Kafka to a Delta table by Spark and nothing else (no
# classification, no dead letters, no resend check, no applied offsets), what any replay pays here.
FLOOR = "floor_bare_copy"


def main() -> None:
    """Fill the topic once, rebuild each size, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,250000,500000,1000000")
    parser.add_argument("--chunk-size", type=int, default=250_000)
    parser.add_argument(
        "--no-compare", dest="compare", action="store_false", help="skip the run where Spark reads every record"
    )
    parser.add_argument(
        "--no-warm-up", dest="warm_up", action="store_false", help="skip the unreported runs that warm the JVM up"
    )
    parser.add_argument("--lakes", default="local,s3", help="comma-separated: local (a folder), s3 (the object store)")
    parser.add_argument("--kind", choices=KINDS, default="latest_state", help="the read model rebuilt")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    stack_env(StackSettings.load())
    tag = uuid.uuid4().hex[:8]
    chosen = [lake.strip() for lake in args.lakes.split(",") if lake.strip()]
    if set(chosen) - set(LAKES):
        parser.error(f"--lakes: pick from {', '.join(LAKES)}")
    topic = f"replay.{tag}"
    env = dict(os.environ)
    create_topic(env, topic)
    began = time.monotonic()
    fill_topic(env, topic, sizes[-1])
    fill_s = time.monotonic() - began

    # Imported here: pyspark starts nothing until a session is built, but keep the fill free of it.
    from streaming_jobs.config import JobsSettings
    from streaming_jobs.jobs.locations import Location
    from streaming_jobs.jobs.spec import JobSpec
    from streaming_jobs.offsets import KafkaPositions
    from streaming_jobs.ranges.backfill import apply_range
    from streaming_jobs.ranges.positions import Position, resolve_range
    from streaming_jobs.spark_session import build_spark_session

    settings = JobsSettings.load()
    spec = JobSpec(name="replay_bench", kind=args.kind, topics=(topic,), table="rebuilt")
    reducible = args.kind == "latest_state"
    with KafkaPositions(settings.kafka) as kafka:
        whole = resolve_range(kafka, spec.topics, Position("earliest"), Position("latest"))
    spark = build_spark_session(settings, app_name="cdcpipe-replay-bench")
    runs: list[dict[str, Any]] = []
    # (path, size, reported): a small run of each path first warms the JVM up. A latest state: Spark reading
    # every record (the path before the reduction, and what `--no-reduce` does) runs once, at the largest size.
    # An event log: the floor (`FLOOR`) runs after the job at each size.
    warm = min(20_000, sizes[0])
    path = "reduced" if reducible else "spark_reads_every_record"
    paths = [path, *([FLOOR] if args.compare and not reducible else [])]
    plan = [(p, warm, False) for p in paths if args.warm_up] + [(p, n, True) for n in sizes for p in paths]
    if args.compare and reducible:
        plan += [
            *([("spark_reads_every_record", warm, False)] if args.warm_up else []),
            ("spark_reads_every_record", sizes[-1], True),
        ]
    # Each lake with what reaching it takes (its store, the writer leases' Postgres), as a job's settings give it.
    lakes = [
        (kind, settings.model_copy(update={"lake": f"{os.environ[LAKES[kind]]}/_bench_replay_{tag}"}).lake_root())
        for kind in chosen
    ]
    steps = [(kind, lake, *step) for kind, lake in lakes for step in plan]
    try:
        for index, (kind, lake, way, size, reported) in enumerate(steps):
            settings = settings.model_copy(update={"lake": lake.url})
            # Each partition's share of `size`, in proportion to what it holds (keys hash unevenly).
            scale = min(1.0, size / whole.total)
            span = type(whole)(
                dict(whole.start),
                {tp: start + round((whole.end[tp] - start) * scale) for tp, start in whole.start.items()},
            )
            where = Location(lake / f"{args.kind}_{index}_{size}", lake / "_checkpoints" / f"replay_{index}_{size}")
            if way == FLOOR:
                seconds, chunks = _bare_copy(spark, settings, span, args.chunk_size, where.table)
            else:
                outcome = apply_range(
                    spark,
                    settings,
                    spec,
                    where,
                    span,
                    purpose="bench",
                    chunk_size=args.chunk_size,
                    reduce=way == "reduced",
                )
                seconds, chunks = outcome.seconds, outcome.chunks
            rows = spark.read.format("delta").load(str(where.table)).count()
            if not reported:
                continue
            runs.append(
                {
                    "lake": kind,
                    "path": way,
                    "events": span.total,
                    "seconds": round(seconds, 2),
                    "events_per_s": round(span.total / seconds),
                    "seconds_per_million": round(seconds / span.total * 1e6, 1),
                    "chunks": chunks,
                    "rows_in_read_model": rows,
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    finally:
        spark.stop()
        for _, lake in lakes:
            lake.delete_tree()
    first = chosen[0]
    measured = [r for r in runs if r["path"] == path and r["lake"] == first]
    result: dict[str, Any] = {
        "benchmark": f"replay_{args.kind}",
        "cores": os.cpu_count(),
        "partitions": PARTITIONS,
        "event_bytes": 1024,
        "distinct_keys": 10_000,
        "chunk_size": args.chunk_size,
        "topic_fill_seconds": round(fill_s, 1),
        "runs": runs,
        "growth": _growth(measured),  # of the first lake asked for
        "growth_by_lake": {k: _growth([r for r in runs if r["path"] == path and r["lake"] == k]) for k in chosen},
        "goal_events_per_s": 200_000 if args.kind == "event_log" else 100_000,
    }
    if "local" in chosen and "s3" in chosen:
        local = {r["events"]: r["seconds"] for r in runs if r["lake"] == "local" and r["path"] == path}
        s3 = {r["events"]: r["seconds"] for r in runs if r["lake"] == "s3" and r["path"] == path}
        result["s3_vs_local_seconds"] = {str(n): round(s3[n] / local[n], 2) for n in sorted(local) if n in s3}
    if reducible:
        largest = [r for r in runs if r["lake"] == first and r["events"] == max(x["events"] for x in runs)]
        if len(largest) == 2:
            fast, slow = sorted(largest, key=lambda r: r["seconds"])
            result["reduced_over_spark_reads_every_record"] = round(slow["seconds"] / fast["seconds"], 2)
    else:
        floor = [r for r in runs if r["lake"] == first and r["path"] == FLOOR]
        by_size = {r["events"]: r["seconds"] for r in floor}
        result["job_over_floor_seconds"] = {
            str(r["events"]): round(r["seconds"] / by_size[r["events"]], 2) for r in measured if r["events"] in by_size
        }
        result["floor_growth"] = _growth(floor)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("replay.json" if reducible else f"replay_{args.kind}.json")).write_text(
        json.dumps(result, indent=2) + "\n"
    )
    print(json.dumps(result, indent=2))


def _bare_copy(spark: Any, settings: Any, span: Any, chunk_size: int, table: Any) -> tuple[float, int]:
    """Seconds and chunks of copying `span`, chunk by chunk as a replay cuts it, into a Delta table, as it is."""
    from streaming_jobs.ranges.backfill import chunks, range_group, read_chunk

    started = time.monotonic()
    count = 0
    group = range_group()
    for start, end in chunks(span, chunk_size):
        records = read_chunk(spark, settings, start, end, group).coalesce(spark.sparkContext.defaultParallelism)
        records.write.format("delta").mode("append").save(str(table))
        count += 1
    return time.monotonic() - started, count


def _growth(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Least-squares seconds = fixed + per_million * events/1e6 over the sizes, and how far each run is off it.

    A fixed cost (worker processes starting, one Spark batch and Delta commit) makes seconds per million
    fall with size even when the work per event is constant: the fit separates the two.
    """
    xs = [r["events"] / 1e6 for r in runs]
    ys = [r["seconds"] for r in runs]
    if len(runs) < 2:
        return {}
    slope, intercept = statistics.linear_regression(xs, ys)
    worst = max(abs(y - (intercept + slope * x)) / y for x, y in zip(xs, ys, strict=True))
    return {
        "fixed_seconds": round(intercept, 2),
        "seconds_per_million_events": round(slope, 2),
        "worst_relative_residual": round(worst, 3),
        "events_per_s_at_largest": runs[-1]["events_per_s"],
    }


if __name__ == "__main__":
    main()
