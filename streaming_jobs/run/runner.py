"""Run one streaming job, or a table group's jobs: Kafka -> classify -> dead letters + Delta, checkpointed.

    python -m streaming_jobs.run.runner NAME [--master local[2]|spark://HOST:PORT] [--trigger 1s|available-now]

Each job's query is streaming_jobs.run.query's; a group runs its members' in one driver (streaming_jobs.run.group).

The query reads with `read_committed` and `failOnDataLoss=true`: offsets that retention already deleted
stop the job with Spark's error rather than being skipped. SIGTERM (what `cdcpipe jobs stop` sends) lets
the micro-batch in flight finish, then stops the query and exits 0. While it runs, the job writes its
latest progress to `<checkpoint>/cdcpipe_progress.json`, which `cdcpipe jobs status` reads.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import traceback
from pathlib import Path

from ground.errors import CdcpipeError
from streaming_jobs.classify.contracts import checked_registry
from streaming_jobs.config import JobsSettings
from streaming_jobs.jobs.spec import GROUP, JobSpec, find
from streaming_jobs.once import sources
from streaming_jobs.run import cluster, control, group, query
from streaming_jobs.run.query import one_line
from streaming_jobs.spark_session import build_spark_session

log = logging.getLogger(__name__)


def run(
    spec: JobSpec, settings: JobsSettings, *, trigger: str | None = None, stop: threading.Event | None = None
) -> None:
    """Run until the sources are drained (available-now) or `stop` is set."""
    stop = stop or threading.Event()
    if spec.kind == GROUP:
        group.run_group(spec, settings, trigger=trigger, stop=stop)
        return
    print(f"job {spec.name}: reads Kafka as {sources.check_principal(settings, spec.name)}", flush=True)
    prepared = query.prepare(spec, settings)
    spark = build_spark_session(settings, app_name=cluster.application_name(spec.name))
    job = query.JobQuery(prepared, settings, spark, checked_registry(spark), trigger)
    error = None
    try:
        job.start()
        while job.tick(stop):
            pass
    except BaseException as exc:
        error = one_line(exc)
        raise
    finally:
        job.close(error)
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    """Run a job by name from the command line (what `cdcpipe jobs submit` starts)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--master")
    parser.add_argument("--trigger")
    parser.add_argument(
        "--jobs-dir", type=Path, action="append", help="folders of job files (default: CDCPIPE_JOBS_DIRS)"
    )
    args = parser.parse_args(argv)
    settings = JobsSettings.load(**({"spark_master": args.master} if args.master else {}))
    spec = find(args.name, args.jobs_dir or list(settings.jobs_dirs))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        run(spec, settings, trigger=args.trigger, stop=stop)
    except CdcpipeError as exc:
        print(f"{control.ERROR_MARK}{one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()
        # The last line of the log, which `jobs status` and `cdcpipe status` show of a job that died.
        print(f"{control.ERROR_MARK}{one_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
