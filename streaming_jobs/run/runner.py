"""Run one streaming job, or a table group's jobs: Kafka -> classify -> dead letters + Delta, checkpointed.

    python -m streaming_jobs.run.runner NAME [--master local[2]|spark://HOST:PORT] [--trigger 1s|available-now]

Each job's query is streaming_jobs.run.query's; a group runs its members' in one driver (`run_group`).

The query reads with `read_committed` and `failOnDataLoss=true`: offsets that retention already deleted
stop the job with Spark's error rather than being skipped. SIGTERM (what `cdcpipe jobs stop` sends) lets
the micro-batch in flight finish, then stops the query and exits 0. While it runs, the job writes its
latest progress to `<checkpoint>/cdcpipe_progress.json`, which `cdcpipe jobs status` reads.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from cdcpipe.common.errors import CdcpipeError
from streaming_jobs.classify.contracts import checked_registry
from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import GROUP, JobSpec, find
from streaming_jobs.once.checkpoints import write_progress
from streaming_jobs.run import cluster, control, query
from streaming_jobs.run.metrics import GroupMetrics
from streaming_jobs.spark_session import build_spark_session

log = logging.getLogger(__name__)


def run(
    spec: JobSpec, settings: JobsSettings, *, trigger: str | None = None, stop: threading.Event | None = None
) -> None:
    """Run until the sources are drained (available-now) or `stop` is set."""
    stop = stop or threading.Event()
    if spec.kind == GROUP:
        run_group(spec, settings, trigger=trigger, stop=stop)
        return
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


def run_group(spec: JobSpec, settings: JobsSettings, *, trigger: str | None, stop: threading.Event) -> None:
    """Every member of a table group in one driver, each its own query; a member that fails is parked alone.

    Parked: its query stopped, its error written with its progress (`jobs status` shows it, `cdcpipe status`
    fails on it), the others going on. It starts again with the group (`jobs stop` and `jobs submit` of the
    group), from its own checkpoint: the others' positions are theirs and untouched.
    """
    jobs = spec.member_jobs()
    metrics = GroupMetrics(spec)  # one server for every table's metrics, and which are parked
    members: list[query.Prepared] = []
    for member in jobs:
        try:
            members.append(query.prepare(member, settings))
        except CdcpipeError as exc:
            metrics.park(member)
            _park(member, settings, one_line(exc))
    if not members:
        raise StreamingError(f"group {spec.name}: every table is parked (`cdcpipe jobs status {spec.name}`)")
    spark = build_spark_session(settings, app_name=cluster.application_name(spec.name))
    registry = checked_registry(spark)
    if settings.metrics:
        port = metrics.start(settings.metrics_targets_dir)
        print(f"group {spec.name}: metrics of every table on http://127.0.0.1:{port}/metrics", flush=True)
    running: list[query.JobQuery] = []

    def park(job: query.JobQuery, exc: Exception) -> None:
        metrics.park(job.spec)
        job.close(_parked(job.spec, one_line(exc)))

    try:
        for prepared in members:
            try:
                job = query.JobQuery(prepared, settings, spark, registry, trigger, group=metrics)
            except Exception as exc:  # its query could not be planned (its table unreadable, say)
                metrics.park(prepared.spec)
                _park(prepared.spec, settings, one_line(exc))
                continue
            try:
                job.start()
            except Exception as exc:
                park(job, exc)
                continue
            running.append(job)
        print(f"group {spec.name}: {len(running)} of {len(jobs)} jobs running", flush=True)
        while running:
            if stop.is_set():
                # Graceful, every query at once: each stops between two of its batches.
                stopping = list(running)
                while stopping:
                    stopping = [job for job in stopping if not job.stop_between_batches()]
                    time.sleep(0.1)
            # A look at each query, then a second's wait: not a second per query, which a group of a hundred
            # tables would make a hundred seconds before a failed table was parked or a progress written.
            for job in list(running):
                try:
                    active = job.tick(stop, wait_s=0)
                except Exception as exc:
                    park(job, exc)
                    running.remove(job)
                    continue
                if not active:
                    job.close()
                    running.remove(job)
            stop.wait(1.0)
    finally:
        for job in running:  # an error of the driver itself (not of one member): all stop, nothing parked
            job.stop_now()
            try:
                job.close()
            except Exception as exc:
                log.warning("job %s: its last progress could not be written: %s", job.spec.name, exc)
        metrics.close()
        spark.stop()


def _parked(member: JobSpec, error: str) -> str:
    log.error("group %s: %s parked: %s", member.group, member.name, error)
    print(f"group {member.group}: {member.name} parked: {error}", flush=True)
    return error


def _park(member: JobSpec, settings: JobsSettings, error: str) -> None:
    """A member that cannot start: its error recorded where its progress is, for `jobs status` to show."""
    where = locations.current(member, settings.lake_root())
    write_progress(
        where.checkpoint, None, {"applied": 0, "dead_letters": 0}, running=False, error=_parked(member, error)
    )


# A Python error's last line, `module.SomeError: message`, as a traceback ends (Spark quotes the batch's).
PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt): ")


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


def one_line(exc: BaseException) -> str:
    """What a job died of, in one line: our error's message, or the Python error inside Spark's wrapping."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, CdcpipeError) or not lines:
        return " ".join(lines)[:1000] or type(exc).__name__
    python = [line for line in lines if PYTHON_ERROR.match(line) and not line.startswith(("py4j.", "org.", "java."))]
    return (python[-1] if python else f"{type(exc).__name__}: {lines[0]}")[:1000]


if __name__ == "__main__":
    sys.exit(main())
