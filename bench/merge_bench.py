"""A mirror's MERGE alone: what one batch's write costs, by batch size and Delta setting.

    python bench/merge_bench.py [--rows 20000] [--batches 1000,20000] [--merges 8] [--variants baseline,...]

No stack needed: one Spark session in this process (`local[2]`, as a job runs by default), a lake in a folder.
For each variant and batch size, a fresh mirror table of `--rows` rows of the bench table's shape
(common.TABLE_COLUMNS: 11 columns) is written, then `--merges` batches of changed rows (updates of random keys,
each batch's LSNs above the last) go through the mirror's own write (`streaming_jobs.sinks.scd.table_mirror`,
the MERGE a running mirror makes). `--warmup` MERGEs run first, not measured (the JVM compiling the path: a
variant measured first was 1.7x slower than the same setting measured after others); then the variants take
turns, MERGE by MERGE. The figure is each one's median, in milliseconds. `baseline` is the jobs' own session
(streaming_jobs.spark_session); the variants, each one setting apart from it:
- `deletion_vectors`: the table with `delta.enableDeletionVectors` (a MERGE marks the rows it replaces instead
  of rewriting their files);
- `no_adaptive`: `spark.sql.adaptive.enabled=false` (adaptive planning re-plans each stage of a small join);
- `checkpoint_every_10`: the table with `delta.checkpointInterval` 10, Delta's default, not the jobs' 100 (a
  MERGE rebuilds the table's file list from the last checkpoint and every commit since: does it grow?).
`--jobs`: the Spark jobs of each variant's last MERGE too (Delta's description of each, its running time, and
the time between them), read from the Spark UI's REST API.
Not a variant: `spark.databricks.delta.merge.materializeSource=none` (Delta copies the MERGE's source before it
reads it twice): Delta refuses it for a cached source (DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION), and a job's
changes are cached.
Writes bench/results/merge.json; prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from common import PAD, RESULTS

from schemas.table_contracts import from_document
from streaming_jobs.config import JobsSettings
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.context import BatchContext
from streaming_jobs.sinks.scd import table_mirror
from streaming_jobs.spark_session import build_spark_session

# The bench table's columns (common.TABLE_COLUMNS) as its row contract says them.
COLUMNS = {
    "id": "int8",
    "account": "text",
    "currency": "text",
    "amount": "numeric(14,2)",
    "status": "text",
    "kind": "text",
    "t": "int8",
    "attempts": "int4",
    "note": "text",
    "created_at": "timestamptz",
    "updated_at": "timestamptz",
}
CONTRACT = from_document(
    "public.bench",
    {
        "x-primary-key": ["id"],
        "x-replica-identity": "default",
        "properties": {name: {"x-pg-type": pg} for name, pg in COLUMNS.items()},
    },
    Path("merge_bench"),
)
VARIANTS: dict[str, dict[str, str]] = {
    "baseline": {},
    "deletion_vectors": {},
    "no_adaptive": {"spark.sql.adaptive.enabled": "false"},
    "checkpoint_every_10": {},
}
TABLE_PROPERTIES = {
    "deletion_vectors": {"delta.enableDeletionVectors": "true"},
    "checkpoint_every_10": {"delta.checkpointInterval": "10"},
}
SCHEMA = (
    "id long, account string, currency string, amount decimal(14,2), status string, kind string, t long, "
    "attempts int, note string, created_at timestamp, updated_at timestamp, event_id string, _op string, "
    "_lsn long, _commit_lsn long, _source_ts timestamp, _unavailable array<string>, topic string, "
    "kafka_partition int, kafka_offset long, kafka_timestamp timestamp, headers map<string,string>, error string"
)


def changes(keys: list[int], lsn: int) -> list[tuple[Any, ...]]:
    """An update of each key, as the classifier gives a mirror its valid changes (LSNs from `lsn` up)."""
    now = datetime.now(UTC)
    return [
        (
            k,
            f"acct-{k:08d}",
            "EUR",
            Decimal(f"{(lsn + n) % 100_000}.25"),
            "settled",
            "card",
            lsn + n,
            n,
            PAD[:600],
            now,
            now,
            f'{{"id":{k}}}@{lsn + n}',
            "u",
            lsn + n,
            lsn + n - 1,
            now,
            [],
            "bench",
            0,
            lsn + n,
            now,
            None,
            None,
        )
        for n, k in enumerate(keys)
    ]


@contextlib.contextmanager
def settings(spark: Any, values: dict[str, str]) -> Iterator[None]:
    """Spark settings for the block, the session's own back after it."""
    before = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def mirror(spark: Any, lake: Path, name: str, rows: int, properties: dict[str, str]) -> BatchContext:
    """A fresh mirror of `rows` rows (its first MERGE inserts them), with these table properties."""
    table = LakePath(str(lake / name))
    job = JobSpec(
        name="merge-bench", kind="table_mirror", topics=("bench",), table=table.name, source_table=CONTRACT.table
    )
    ctx = BatchContext(
        spark=spark,
        job=job,
        table=table,
        dead_letters=LakePath(str(lake / f"{name}_dead_letters")),
        app_id="merge-bench",
        batch_id=0,
        contract=CONTRACT,
        has_unsent=False,
        has_reads=False,
    )
    table_mirror(spark.createDataFrame(changes(list(range(rows)), 1), SCHEMA), ctx, CONTRACT)
    for key, value in properties.items():
        spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{key}' = '{value}')")
    return ctx


def one_merge(spark: Any, ctx: BatchContext, keys: list[int], lsn: int) -> float:
    """Seconds of one MERGE of updates of `keys` (the batch cached first, as a job's changes are)."""
    frame = spark.createDataFrame(changes(keys, lsn), SCHEMA).cache()
    frame.count()
    # A job's MERGE commit carries the batch's offsets (its userMetadata), by which the mirror finds its count.
    ctx = dataclasses.replace(ctx, applied_metadata=f"merge-bench {ctx.table.name} {lsn}")
    began = time.monotonic()
    table_mirror(frame, ctx, CONTRACT)
    seconds = time.monotonic() - began
    frame.unpersist()
    return seconds


def spark_jobs(spark: Any, after: int) -> list[dict[str, Any]]:
    """The application's Spark jobs with an id above `after`, oldest first (the Spark UI's REST API)."""
    url = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/jobs", timeout=30) as answer:  # noqa: S310
        jobs: list[dict[str, Any]] = json.loads(answer.read())
    return sorted((j for j in jobs if j["jobId"] > after), key=lambda j: j["jobId"])


def settled_jobs(spark: Any, after: int, within_s: float = 10.0) -> list[dict[str, Any]]:
    """`spark_jobs`, once the UI has heard every one of them end (its listener runs behind the driver)."""
    deadline = time.monotonic() + within_s
    jobs = spark_jobs(spark, after)
    while any(not j.get("completionTime") for j in jobs) and time.monotonic() < deadline:
        time.sleep(0.2)
        jobs = spark_jobs(spark, after)
    return jobs


def _instant(stamp: str) -> float:
    return datetime.strptime(stamp.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def job_split(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """One MERGE's Spark jobs: how many, each one's description and running time, and the time between them."""
    done = [j for j in jobs if j.get("completionTime")]
    each = [
        {
            "what": (j.get("description") or j["name"]).splitlines()[-1][:120],
            "ms": round(1000 * (_instant(j["completionTime"]) - _instant(j["submissionTime"]))),
        }
        for j in done
    ]
    span = _instant(done[-1]["completionTime"]) - _instant(done[0]["submissionTime"]) if done else 0.0
    running = sum(e["ms"] for e in each)
    return {"count": len(each), "running_ms": running, "between_ms": round(1000 * span) - running, "jobs": each}


def measure(
    spark: Any, lake: Path, variants: list[str], rows: int, batch: int, merges: int, jobs: bool = False
) -> dict[str, Any]:
    """Each variant's MERGEs of `batch` rows, the variants taking turns (their order turning each round)."""
    tables = {v: mirror(spark, lake, f"{v}_{batch}", rows, TABLE_PROPERTIES.get(v, {})) for v in variants}
    drawn = random.Random(batch)  # noqa: S311 - which keys change, the same in every variant
    seconds: dict[str, list[float]] = {v: [] for v in variants}
    last_jobs: dict[str, dict[str, Any]] = {}
    for n in range(merges):
        keys, lsn = drawn.sample(range(rows), batch), 10 * rows + n * batch
        turn = n % len(variants)
        for variant in variants[turn:] + variants[:turn]:
            with settings(spark, VARIANTS[variant]):
                before = spark_jobs(spark, -1)[-1]["jobId"] if jobs and n == merges - 1 else None
                seconds[variant].append(one_merge(spark, tables[variant], keys, lsn))
                if before is not None:
                    # From the batch's caching (not timed) to the MERGE's end: Delta's descriptions name the MERGE's.
                    last_jobs[variant] = job_split(settled_jobs(spark, before + 1))
    return {
        v: {
            "ms_median": round(1000 * statistics.median(seconds[v])),
            "ms_each": [round(1000 * s) for s in seconds[v]],
            "table_files": spark.sql(f"DESCRIBE DETAIL delta.`{tables[v].table}`").first()["numFiles"],
            **({"spark_jobs_of_the_last_merge": last_jobs[v]} if v in last_jobs else {}),
        }
        for v in variants
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows in the mirror before the MERGEs")
    parser.add_argument("--batches", default="1000,20000", help="rows each MERGE changes (comma-separated)")
    parser.add_argument("--merges", type=int, default=8, help="MERGEs per variant and batch size")
    parser.add_argument("--warmup", type=int, default=10, help="MERGEs before any is measured (the JVM compiling)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"which of {', '.join(VARIANTS)}")
    parser.add_argument("--jobs", action="store_true", help="the Spark jobs of each variant's last MERGE too")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    variants = args.variants.split(",")
    if set(variants) - set(VARIANTS) or args.merges < 1 or any(not 0 < b <= args.rows for b in batches):
        parser.error(f"--variants among {', '.join(VARIANTS)}; --merges >= 1; each batch between 1 and --rows")
    lake = Path(tempfile.mkdtemp(prefix="merge-bench-"))
    session = JobsSettings.load(spark_master="local[2]", lake=lake, spark_ui=args.jobs)
    spark = build_spark_session(session, app_name="merge-bench")
    result: dict[str, Any] = {"benchmark": "mirror_merge", "rows": args.rows, "cores": os.cpu_count()}
    result["spark_java_options"] = os.environ.get("CDCPIPE_SPARK_JAVA_OPTIONS", "")
    try:
        warm = mirror(spark, lake, "warmup", args.rows, {})
        for n in range(args.warmup):
            one_merge(spark, warm, list(range(n % 2, args.rows, 2)), 10 * args.rows + n * args.rows)
        for batch in batches:
            result[str(batch)] = measure(spark, lake, variants, args.rows, batch, args.merges, args.jobs)
            print(f"merge_bench: {batch}: {result[str(batch)]}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(lake, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "merge.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
