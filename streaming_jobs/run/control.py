"""`cdcpipe jobs submit | list | status | stop | optimize`: jobs as tracked background processes.

A submitted job is a `python -m streaming_jobs.run.runner NAME` process (the Spark driver), started detached and
tracked by pid in `<run_dir>/NAME.pid`, its log in `<run_dir>/NAME.log` (on this machine: the lake may be an
object store). Its state comes from three
places that each tell the truth about one thing: the process (running or not), the progress file the
runner writes (last batch, rates, counts), and the checkpoint's offsets against the topics' latest offsets
(lag per partition).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from ground.processes import RUN_MARK, TrackedProcess
from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import GROUP, JobSpec, check_name, find, load_all, pick
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import KafkaPositions, Offsets
from streaming_jobs.once import sources
from streaming_jobs.once.checkpoints import committed_offsets, read_progress
from streaming_jobs.run import cluster
from streaming_jobs.run.metrics import stale_targets


def tracked(settings: JobsSettings, name: str) -> TrackedProcess:
    """The job's driver process, as a pid file and a log under CDCPIPE_RUN_DIR."""
    check_name(name)  # it names files: never a path
    folder = settings.run_dir
    return TrackedProcess(
        name=f"job {name}", pid_file=folder / f"{name}.pid", log_file=folder / f"{name}.log", stop_signal=signal.SIGTERM
    )


def submit(settings: JobsSettings, name: str, *, master: str | None, trigger: str | None) -> int:
    """Start the job in the background (once: a running job is not started twice); return its pid."""
    spec = find(name, list(settings.jobs_dirs))
    _not_a_member(spec, "submit")
    process = tracked(settings, spec.name)
    if process.pid() is not None:
        raise StreamingError(f"job {name} is already running (pid {process.pid()}); `cdcpipe jobs stop {name}` first")
    sources.check_principal(settings, spec.name)  # refused here, not in a driver's log
    sources.check_topics(settings, spec, locations.current(spec, settings.lake_root()).table)
    command = [sys.executable, "-m", "streaming_jobs.run.runner", spec.name]
    for folder in settings.jobs_dirs:
        command += ["--jobs-dir", str(folder)]
    if master:
        command += ["--master", master]
    if trigger:
        command += ["--trigger", trigger]
    # The job reads what this process read, from a settings file or the environment alike (a secret is passed in
    # the environment, never on the command line).
    env = {**os.environ, **settings.environment()}
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    pid = process.start(command, env=env, cwd=settings.run_dir)
    # What it was started with, so a rewind or a replay's swap can start it again the same way.
    _submitted(settings, spec.name).write_text(json.dumps({"master": master, "trigger": trigger}))
    return pid


def _not_a_member(spec: JobSpec, what: str) -> None:
    if spec.group is not None:
        raise StreamingError(
            f"job {spec.name} runs in the table group {spec.group} ({spec.file}): {what} the group "
            f"(`cdcpipe jobs {what} {spec.group}`), or take {spec.source_table} out of it to run it alone"
        )


def _submitted(settings: JobsSettings, name: str) -> Path:
    return settings.run_dir / f"{name}.submit.json"


@contextmanager
def paused(settings: JobsSettings, name: str) -> Iterator[bool]:
    """Stop the job gracefully if it runs, and start it again afterwards the way it was submitted.

    Yields whether it was running. If the block fails, the job stays stopped: the error is the user's to read
    before anything resumes. A table of a running group is set aside instead: its turns stop between two
    batches while the group's other tables go on, and it takes turns again after the block.
    """
    driver = _driver_of(settings, name)
    if driver != name and tracked(settings, driver).pid() is not None:
        with _set_aside(settings, driver, name):
            yield True
        return
    was_running = stop(settings, driver)
    yield was_running
    if was_running:
        _resubmit(settings, driver)


def aside_folder(settings: JobsSettings, group: str) -> Path:
    """Where a table of a running group is set aside (a file per member, holding its setter's pid)."""
    return settings.run_dir / f"{check_name(group)}.aside"


def set_aside(settings: JobsSettings, group: str) -> set[str]:
    """The members of the group set aside now: those whose setter (a `cdcpipe` command) still runs.

    A setter killed before it could put its table back leaves its file: a pid no longer running, ignored.
    """
    found: set[str] = set()
    try:
        marks = list(aside_folder(settings, group).iterdir())
    except OSError:
        return found
    for mark in marks:
        try:
            os.kill(int(mark.read_text().split()[0]), 0)
        except (OSError, ValueError, IndexError):
            continue
        found.add(mark.name)
    return found


@contextmanager
def _set_aside(settings: JobsSettings, group: str, name: str) -> Iterator[None]:
    """One table of a running group out of its turns while the block runs, the others going on; back in after.

    Back in after an error too: what such a block changes takes effect at its last step only
    (`locations.switch`), so a block that failed left the table where it was, to go on from there.
    """
    before = _members_now(settings, group)
    folder = aside_folder(settings, group)
    folder.mkdir(parents=True, exist_ok=True)
    mark = folder / name
    mark.write_text(f"{os.getpid()}\n")
    try:
        await_members(settings, group, before - {name})
        yield
    finally:
        mark.unlink(missing_ok=True)
        await_members(settings, group, before | {name})


def _members_now(settings: JobsSettings, group: str) -> set[str]:
    try:
        return set(json.loads(members_file(settings, group).read_text())["members"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StreamingError(
            f"group {group}'s driver runs but has not said its tables yet ({members_file(settings, group)}): "
            "try again once it has started"
        ) from exc


def _driver_of(settings: JobsSettings, name: str) -> str:
    """The name the job's driver runs under: its group's, for a table group's job."""
    try:
        declared = load_all(list(settings.jobs_dirs)) if settings.jobs_dirs else {}
    except StreamingError:
        return name  # a job file broken since: its own driver, if any, is the one to stop
    spec = declared.get(name)
    return spec.group if spec is not None and spec.group else name


def members_file(settings: JobsSettings, group: str) -> Path:
    """Where a running group's driver says which members it runs (streaming_jobs.run.group)."""
    return settings.run_dir / f"{check_name(group)}.members.json"


def await_members(settings: JobsSettings, group: str, members: set[str], timeout_s: float = 60) -> None:
    """Wait until the running group's driver runs exactly `members`: it reads its file again each tick."""
    process = tracked(settings, group)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.pid() is None:
            raise StreamingError(
                f"group {group}'s driver stopped while taking its new tables: {last_error(process.log_tail(ERROR_SEARCH_LINES))}; "
                f"its log: {process.log_file}"
            )
        try:
            if set(json.loads(members_file(settings, group).read_text())["members"]) == members:
                return
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not written yet by this driver
        time.sleep(0.5)
    raise StreamingError(
        f"group {group}'s driver has not taken its file's tables in {timeout_s:.0f} s (it reads the file each tick): "
        f"see {process.log_file}; `cdcpipe jobs stop {group}` and `cdcpipe jobs submit {group}` start it on the file"
    )


def restart(settings: JobsSettings, name: str) -> bool:
    """Stop the job gracefully if it runs and start it again the way it was submitted (a group re-reads its file).

    False if it was not running: it is not started then.
    """
    was_running = stop(settings, name)
    if was_running:
        _resubmit(settings, name)
    return was_running


def _resubmit(settings: JobsSettings, name: str) -> None:
    path = _submitted(settings, name)
    args = json.loads(path.read_text()) if path.exists() else {}
    submit(settings, name, master=args.get("master"), trigger=args.get("trigger"))


def stop(settings: JobsSettings, name: str, timeout_s: float = 180) -> bool:
    """SIGTERM: the micro-batch in flight finishes, then the job exits. False if it was not running.

    Its Prometheus target goes with it: the driver removes it as it exits, and this removes every target whose
    driver is gone (killed, it could not).
    """
    try:
        declared = load_all(list(settings.jobs_dirs)) if settings.jobs_dirs else {}
    except StreamingError:
        declared = {}  # a job file broken since: the driver is stopped all the same
    if name in declared:  # a job whose file is gone is stopped all the same: its driver may run on
        _not_a_member(declared[name], "stop")
    was_running = tracked(settings, name).stop(timeout_s=timeout_s)
    stale_targets(settings.metrics_targets_dir)
    return was_running


@dataclass(frozen=True)
class PartitionLag:
    """How far the checkpoint is behind one partition's latest offset."""

    topic: str
    partition: int
    checkpoint_offset: int | None
    latest_offset: int
    lag: int


# A driver that has run this long with records to read and no batch done (or no executor) makes no progress:
# a start and a first batch take well under it on 2 cores shared with the whole stack.
NO_PROGRESS_S = 120.0

# The line a driver's log ends with when the job died of an error (streaming_jobs.run.runner.main).
ERROR_MARK = "error: "
# How much of a dead driver's log is searched for it.
ERROR_SEARCH_LINES = 400


def last_error(log: list[str]) -> str | None:
    """What the job died of, from its driver's log: its last run's `error:` line, if that run ended with one.

    Each run's lines follow a `==== <time> starting` line (ground.processes), in one log.
    """
    for line in reversed(log):
        if line.startswith(ERROR_MARK):
            return line.removeprefix(ERROR_MARK)
        if line.startswith(RUN_MARK):
            return None
    return None


@dataclass(frozen=True)
class JobStatus:
    """Everything `jobs status` shows."""

    name: str
    kind: str
    table: str
    checkpoint: str
    running: bool
    pid: int | None
    last_batch_id: int | None
    input_rows_per_s: float | None
    processed_rows_per_s: float | None
    batch_duration_ms: int | None
    applied: int | None
    dead_letters: int | None
    lag: list[PartitionLag]
    missing_topics: list[str]
    log_tail: list[str]
    last_error: str | None  # what a job that is not running died of (a group's member: what parked it)
    group: str | None = None  # the table group it runs in
    members: list[JobStatus] = field(default_factory=list)  # a group's jobs, each table's mirror or history
    running_s: float | None = None  # how long its driver has run (since `jobs submit`)
    stalled: str | None = None  # why a running driver makes no progress (no executor, no batch with records to read)

    @property
    def stuck(self) -> bool:
        """Making no progress for longer than NO_PROGRESS_S: FAIL, not WARN."""
        return self.stalled is not None and (self.running_s or 0) >= NO_PROGRESS_S

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.lag) + sum(m.total_lag for m in self.members)

    @property
    def parked(self) -> list[JobStatus]:
        """A group's members stopped by an error while the others run."""
        return [m for m in self.members if m.last_error]


def lag(settings: JobsSettings, spec: JobSpec, high: Offsets) -> list[PartitionLag]:
    """Per partition of the job's topics: the latest offset (`high`, of every job's topics) minus the checkpoint's."""
    reached = committed_offsets(locations.current(spec, settings.lake_root()).checkpoint)
    rows = []
    for (topic, partition), end in sorted(high.items()):
        if topic in spec.topics:
            at = reached.get((topic, partition))
            rows.append(PartitionLag(topic, partition, at, end, end - (at or 0)))
    return rows


def status(settings: JobsSettings, name: str) -> JobStatus:
    """The job's process, its last progress, and its lag."""
    return statuses(settings, [name])[0]


def statuses(settings: JobsSettings, names: list[str]) -> list[JobStatus]:
    """Each job's status, from one reading of the job files and one of the latest offsets of all their topics.

    A group of a hundred tables is one call to Kafka, not one per member.
    """
    folders = list(settings.jobs_dirs)
    jobs = load_all(folders) if folders else {}
    specs = [pick(name, jobs, folders) for name in names]
    topics = {t for spec in specs for job in [spec, *_members(spec)] for t in job.topics}
    with KafkaPositions(settings.kafka) as kafka:
        # A topic that does not exist (or the job may not describe) has no partition here: `missing_topics` says so.
        high = kafka.watermarks(sorted(topics), missing_ok=True).high
    reports = [_status(settings, spec, high) for spec in specs]
    if any(r.running and not r.group for r in reports):
        on = cluster.read(settings)
        reports = [_progressing(r, on, _running_s(settings, r)) if r.running and not r.group else r for r in reports]
    return reports


def _running_s(settings: JobsSettings, report: JobStatus) -> float | None:
    try:
        return time.time() - tracked(settings, report.name).pid_file.stat().st_mtime
    except OSError:
        return None


def _progressing(report: JobStatus, on: cluster.Cluster | None, running_s: float | None) -> JobStatus:
    """The report with why its driver makes no progress, if it makes none: no executor, or no batch yet."""
    stalled = on.starved(report.name) if on is not None else None
    if stalled is None and report.last_batch_id is None and report.total_lag:
        stalled = f"no batch done in {running_s or 0:.0f} s with {report.total_lag} records to read"
    return replace(report, running_s=running_s, stalled=stalled)


def _members(spec: JobSpec) -> list[JobSpec]:
    return spec.member_jobs() if spec.kind == GROUP else []


def _status(settings: JobsSettings, spec: JobSpec, high: Offsets) -> JobStatus:
    process = tracked(settings, spec.group or spec.name)  # a group's member runs in the group's driver
    where = locations.current(spec, settings.lake_root())
    record = read_progress(where.checkpoint) if spec.kind != GROUP else {}
    progress = record.get("progress") or {}
    pid = process.pid()
    parked = record.get("error") if spec.group else None
    if spec.kind == GROUP:
        members = [_status(settings, m, high) for m in _members(spec)]
        return JobStatus(
            name=spec.name,
            kind=spec.kind,
            table=str(where.table),
            checkpoint=str(where.checkpoint),
            running=pid is not None,
            pid=pid,
            last_batch_id=max((m.last_batch_id for m in members if m.last_batch_id is not None), default=None),
            input_rows_per_s=None,
            processed_rows_per_s=None,
            batch_duration_ms=None,
            applied=sum(m.applied or 0 for m in members),
            dead_letters=sum(m.dead_letters or 0 for m in members),
            lag=[],
            missing_topics=[t for m in members for t in m.missing_topics],
            log_tail=[] if pid is not None else process.log_tail(10),
            last_error=None if pid is not None else last_error(process.log_tail(ERROR_SEARCH_LINES)),
            members=members,
        )
    present = {topic for topic, _ in high}
    return JobStatus(
        name=spec.name,
        kind=spec.kind,
        table=str(where.table),
        checkpoint=str(where.checkpoint),
        running=pid is not None and not parked,
        pid=pid,
        last_batch_id=progress.get("batchId"),
        input_rows_per_s=progress.get("inputRowsPerSecond"),
        processed_rows_per_s=progress.get("processedRowsPerSecond"),
        batch_duration_ms=(progress.get("durationMs") or {}).get("triggerExecution"),
        applied=record.get("applied"),
        dead_letters=record.get("dead_letters"),
        lag=lag(settings, spec, high),
        missing_topics=[t for t in spec.topics if t not in present],
        log_tail=[] if pid is not None or spec.group else process.log_tail(10),
        last_error=parked or (None if pid is not None else last_error(process.log_tail(ERROR_SEARCH_LINES))),
        group=spec.group,
    )


def listing(settings: JobsSettings) -> list[tuple[JobSpec, locations.Location, bool]]:
    """Every declared job, where its table is now, and whether it runs."""
    return [
        (spec, locations.current(spec, settings.lake_root()), tracked(settings, spec.group or name).pid() is not None)
        for name, spec in sorted(load_all(list(settings.jobs_dirs)).items())
    ]


def optimize(settings: JobsSettings, name: str) -> LakePath:
    """`cdcpipe jobs optimize`: compact the job's tables now, beside the running job; returns its table."""
    # pyspark loads here, not when this module does: `jobs list|status|stop` must start without it.
    from streaming_jobs.run.compaction import optimize as optimize_tables
    from streaming_jobs.spark_session import build_spark_session

    spec = find(name, list(settings.jobs_dirs))
    where = locations.current(spec, settings.lake_root())
    spark = build_spark_session(settings, app_name=f"cdcpipe-optimize-{name}")
    try:
        optimize_tables(spark, where, spec)
    finally:
        spark.stop()
    return where.table
