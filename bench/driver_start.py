"""What a Spark driver's start costs, with and without the class-data archive `make install` writes.

    python bench/driver_start.py [--runs 3]

Each run starts a driver as a job does (streaming_jobs.spark_session), runs a small Delta write, MERGE and read,
and reads the JVM's own CPU time (user + system, from /proc) before it stops; runs alternate between the archive
and none, so both see the same machine. Prints JSON (medians and every run) and writes
bench/results/driver_start.json. Needs the jars `make install` puts on disk, not the stack.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from streaming_jobs.config import JobsSettings

PROBE = """
import os, sys, time
from pathlib import Path
from streaming_jobs.config import JobsSettings
from streaming_jobs.spark_session import build_spark_session
began = time.monotonic()
archive = sys.argv[2] or None
settings = JobsSettings.load(spark_master="local[2]", lake=sys.argv[1], spark_class_archive=archive)
spark = build_spark_session(settings, app_name="driver-start-bench")
session_s = time.monotonic() - began
table = sys.argv[1] + "/t"
spark.range(1000).selectExpr("id % 7 AS k", "id").groupBy("k").count().write.format("delta").save(table)
spark.read.format("delta").load(table).count()
pid = spark._jvm.java.lang.ProcessHandle.current().pid()
fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
print("result", session_s, time.monotonic() - began, cpu)
spark.stop()
"""


def one(archive: Path | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as lake:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        env.setdefault("CDCPIPE_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
        run = subprocess.run(
            [sys.executable, "-c", PROBE, lake, str(archive or "")], capture_output=True, text=True, env=env, check=True
        )
    line = next(x for x in run.stdout.splitlines() if x.startswith("result "))
    session_s, total_s, cpu_s = map(float, line.split()[1:])
    return {"session_s": round(session_s, 2), "wall_s": round(total_s, 2), "jvm_cpu_s": round(cpu_s, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    archive = JobsSettings.load().spark_class_archive
    if archive is None or not archive.is_file():
        raise SystemExit(f"no class archive at {archive}: run `make install` first")
    runs: dict[str, list[dict[str, float]]] = {"archive": [], "none": []}
    for _ in range(args.runs):
        runs["archive"].append(one(archive))
        runs["none"].append(one(None))
    medians = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    report = {
        "benchmark": "driver_start",
        "runs_each": args.runs,
        "median": medians,
        "jvm_cpu_ratio_archive_over_none": round(medians["archive"]["jvm_cpu_s"] / medians["none"]["jvm_cpu_s"], 2),
        "runs": runs,
    }
    text = json.dumps(report, indent=2)
    print(text)
    out = Path(os.environ.get("CDCPIPE_BENCH_RESULTS") or Path(__file__).parent / "results") / "driver_start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
