"""Upkeep benchmark: a latest-state table after millions of changes, with and without the job's own upkeep.

    python bench/upkeep_bench.py [--changes 10000000] [--keys 100000] [--batch 100000] [--optimize-every 10]

Needs the stack running (Kafka; the job runs in local[2] on the stack's local lake). One 4-partition topic is
filled with `--changes` small AccountOpened events (about 200 bytes) over `--keys` accounts, then applied by a
latest-state job in one available-now run, `--batch` records a micro-batch, twice, each into a fresh table:

- `none`: `optimize_every = 0`: no compaction, no trim of `<table>_event_ids`, no vacuum (what a job did before);
- `upkeep`: a compaction every `--optimize-every` batches, which first trims the event ids past the look-back
  (`dedupe_lookback_records`, 100,000 a partition) and vacuums the tables, keeping no old file
  (`vacuum_retain_hours = 0`: what the lake holds once the default 7 days have passed).

Reported per run: the bytes and data files of the table and of its event ids, the event ids' rows, the median and
90th-percentile batch time, and the median of the first and the last third of the batches (growth).
Writes bench/results/upkeep.json; prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from common import RESULTS, create_topic, fill_topic, stack_env, watch_batches
from deltalake import DeltaTable

from infra.config import StackSettings
from streaming_jobs.lake.paths import LakePath

VARIANTS = ("none", "upkeep")


def folder(path: Path) -> dict[str, int]:
    """Bytes and data files under a local table's folder (its log left out), and its rows."""
    files = [f for f in path.rglob("*.parquet") if "_delta_log" not in f.parts]
    rows = DeltaTable(str(path)).to_pyarrow_dataset().count_rows() if (path / "_delta_log").is_dir() else 0
    return {"bytes": sum(f.stat().st_size for f in files), "data_files": len(files), "rows": rows}


def run(env: dict[str, str], topic: str, variant: str, batch: int, optimize_every: int) -> dict[str, Any]:
    """One available-now run of a latest-state job over the whole topic, into a fresh local table."""
    tag = uuid.uuid4().hex[:8]
    name, lake = f"upkeep_{variant}_{tag}", Path(env["CDCPIPE_LOCAL_LAKE"]) / f"upkeep_bench_{tag}"
    jobs = RESULTS / f"_bench_upkeep_{tag}"
    jobs.mkdir(parents=True)
    upkeep = [f"optimize_every = {optimize_every}", "vacuum_every_hours = 0.0001", "vacuum_retain_hours = 0"]
    settings = [f"max_offsets_per_trigger = {batch}", *(upkeep if variant == "upkeep" else ["optimize_every = 0"])]
    (jobs / f"{name}.toml").write_text(
        f'name = "{name}"\nkind = "latest_state"\ntopics = ["{topic}"]\ntable = "{name}"\n'
        'trigger = "available-now"\n' + "".join(f"{line}\n" for line in settings)
    )
    batches: dict[int, dict[str, Any]] = {}
    done = threading.Event()
    watcher = threading.Thread(
        target=watch_batches, args=(LakePath.of(str(lake / "_checkpoints" / name)), batches, done), daemon=True
    )
    watcher.start()
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "streaming_jobs.run.runner", name, "--jobs-dir", str(jobs)],
        env={**env, "CDCPIPE_LAKE": str(lake)},
        check=True,
        capture_output=True,
    )
    wall = time.monotonic() - began
    done.set()
    watcher.join()
    seconds = [
        float(b["durationMs"]["triggerExecution"]) / 1000 for _, b in sorted(batches.items()) if b.get("numInputRows")
    ]
    third = max(1, len(seconds) // 3)
    result = {
        "seconds": round(wall, 1),
        "batches_seen": len(seconds),
        "batch_s_median": round(statistics.median(seconds), 2) if seconds else None,
        "batch_s_p90": round(sorted(seconds)[int(0.9 * (len(seconds) - 1))], 2) if seconds else None,
        "batch_s_first_third_median": round(statistics.median(seconds[:third]), 2) if seconds else None,
        "batch_s_last_third_median": round(statistics.median(seconds[-third:]), 2) if seconds else None,
        "table": folder(lake / name),
        "event_ids": folder(lake / f"{name}_event_ids"),
    }
    shutil.rmtree(jobs, ignore_errors=True)
    shutil.rmtree(lake, ignore_errors=True)
    return result


def main() -> None:
    """Fill the topic once, run each variant over it, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100_000, help="records a micro-batch (max_offsets_per_trigger)")
    parser.add_argument("--optimize-every", type=int, default=10)
    args = parser.parse_args()
    env = stack_env(StackSettings.load())
    topic = f"bench.upkeep.{uuid.uuid4().hex[:8]}"
    create_topic(env, topic)
    began = time.monotonic()
    fill_topic(env, topic, args.changes, keys=args.keys, pad=100)
    filled = time.monotonic() - began
    runs = {variant: run(env, topic, variant, args.batch, args.optimize_every) for variant in VARIANTS}
    none, upkeep = runs["none"], runs["upkeep"]

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a and b else None

    result = {
        "changes": args.changes,
        "keys": args.keys,
        "batch": args.batch,
        "optimize_every": args.optimize_every,
        "fill_seconds": round(filled, 1),
        "runs": runs,
        "event_ids_rows_none_over_upkeep": ratio(none["event_ids"]["rows"], upkeep["event_ids"]["rows"]),
        "table_bytes_none_over_upkeep": ratio(none["table"]["bytes"], upkeep["table"]["bytes"]),
        "batch_median_upkeep_over_none": ratio(upkeep["batch_s_median"], none["batch_s_median"]),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "upkeep.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("CDCPIPE_METRICS", "false")
    main()
