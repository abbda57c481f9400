"""`make test`: the whole suite on one stack, in parallel; tests that stop services on stacks of their own.

    python -m tests.suite [pytest arguments...]

1. Starts the stack (Spark cluster included) unless `CDCPIPE_KAFKA_BOOTSTRAP` says one is given, and hands it
   to pytest through the variables `stack env` prints. A stack started here is marked ours
   (`CDCPIPE_TEST_STACK_OWNED`): the run stops it at its end. `--start-only` starts it and
   ends (`make test` runs that beside the lint, the type checks and the class archive): the marker it leaves
   (`STARTED`) tells the run after it that the stack is the suite's own.
2. Every test, in `--workers` processes (pytest-xdist, the longest first): most of an integration test is
   waiting (a JVM starting, a connector snapshotting, a micro-batch trigger), and the tests share nothing but
   the stack (each has its own topics, schemas, tables and job names). Those that stop, crash or restart
   services (`own_stack`) do it to a stack of their own beside it (tests.support.stack.stack_of_its_own).
3. Stops the stack if it started it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infra.config import StackSettings
from tests.support.stack import OWNED_VARIABLE, cdcpipe, parse_exports
from tests.support.timeline import VARIABLE as TIMELINE
from tests.support.timeline import summary

# Left by `--start-only` in the stack's run folder when it started the stack: the next run owns it, and stops it.
STARTED = "suite-started"


def started_marker() -> Path:
    return StackSettings.load().run_dir / STARTED


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Three on 2 cores: most of an integration test waits (a trigger, Connect, a snapshot), and each worker keeps
    # one Spark driver (tests/support/spark_host.py) instead of starting one per job run.
    parser.add_argument("--workers", type=int, default=3, help="test processes of the first run (1: one at a time)")
    parser.add_argument("--start-only", action="store_true", help="start the suite's stack and end (see 1. above)")
    args, pytest_args = parser.parse_known_args()
    env = dict(os.environ)
    started_here = False
    if not env.get("CDCPIPE_KAFKA_BOOTSTRAP"):
        up = cdcpipe("stack", "up", "--spark-cluster", "--workers", "2")
        sys.stdout.write(up.stdout)
        if up.returncode != 0:
            sys.stderr.write(up.stderr)
            return up.returncode
        marker = started_marker()
        if args.start_only:
            if "healthy after" in up.stdout:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            return 0
        started_here = "healthy after" in up.stdout or marker.exists()
        marker.unlink(missing_ok=True)
        exports = cdcpipe("stack", "env")
        if exports.returncode != 0:
            sys.stderr.write(exports.stderr)
            return exports.returncode
        env.update(parse_exports(exports.stdout))
        env[OWNED_VARIABLE] = "1" if started_here else ""
    if args.start_only:
        return 0  # a stack given (`CDCPIPE_KAFKA_BOOTSTRAP`): nothing to start
    # A test's jobs live seconds: the optimising JIT costs more CPU than it saves, on 2 cores shared by 2 tests.
    env.setdefault("CDCPIPE_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    try:
        pytest = [sys.executable, "-m", "pytest"]
        # The longest first (tests.support.timeline sorts them), each to whichever worker is free; a module marked
        # `xdist_group` goes to one worker whole.
        parallel = (
            ["-n", str(args.workers), "--dist", "loadgroup", "--no-loadscope-reorder"] if args.workers > 1 else []
        )
        timeline = Path(tempfile.mkstemp(prefix="cdcpipe-test-timeline-", suffix=".jsonl")[1])
        env[TIMELINE] = str(timeline)
        began = time.monotonic()
        run = subprocess.run([*pytest, *parallel, *pytest_args], env=env, check=False)
        print(summary(timeline))
        print(f"suite: {time.monotonic() - began:.0f}s for the tests")
        return run.returncode
    finally:
        if started_here:
            down = cdcpipe("stack", "down")
            sys.stdout.write(down.stdout + down.stderr)


if __name__ == "__main__":
    sys.exit(main())
