"""Warm `stack up` time per service and idle resident memory, over several down/up cycles.

    python bench/stack_startup.py [--runs 3] [--idle-seconds 20] [--leave-up]

Needs the stack installed and stopped (its data may exist: that is the warm case). Prints JSON with the
median and every run, and writes it to bench/results/stack_startup.json. `--leave-up`: the last run's stack
stays up, for a caller that goes on with it (the stack's lifecycle test, which saves a cycle).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from infra import stack
from infra.config import StackSettings
from monitor.collector import COMMAND as COLLECTOR


def main() -> None:
    """Run the cycles and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--leave-up", action="store_true", help="keep the last run's stack up")
    args = parser.parse_args()
    settings = StackSettings.load()
    if any(row.pid for row in stack.status(settings)):
        raise SystemExit("stop the stack first (cdcpipe stack down): this measures start-up")
    runs: list[dict[str, Any]] = []
    for run in range(args.runs):
        began = time.monotonic()
        started = stack.up(settings, spark_cluster=True, report=lambda _: None, collector=COLLECTOR)
        total = time.monotonic() - began
        time.sleep(args.idle_seconds)
        rss = {row.service: row.rss_bytes for row in stack.status(settings)}
        if run < args.runs - 1 or not args.leave_up:
            stack.down(settings, report=lambda _: None)
        runs.append(
            {
                "total_up_s": round(total, 2),
                "up_s": {s.service: round(s.seconds, 2) for s in started},
                "idle_rss_mib": {name: round((v or 0) / 2**20) for name, v in rss.items()},
            }
        )
    services = list(runs[0]["up_s"])
    result = {
        "benchmark": "stack_startup",
        "runs": len(runs),
        "idle_seconds": args.idle_seconds,
        "median_total_up_s": statistics.median(r["total_up_s"] for r in runs),
        "median_up_s": {s: statistics.median(r["up_s"][s] for r in runs) for s in services},
        "median_idle_rss_mib": {s: statistics.median(r["idle_rss_mib"][s] for r in runs) for s in services},
        "every_run": runs,
    }
    out = Path(os.environ.get("CDCPIPE_BENCH_RESULTS") or Path(__file__).parent / "results") / "stack_startup.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
