"""A table group's driver: the mirrors and histories of many tables in one Spark application, each table apart.

Each member (a table's mirror or history) keeps its own query, checkpoint, contract, dead letters and metrics,
as its job alone would. The queries run in turns (streaming_jobs.run.turns): each tick of the group's trigger,
one Kafka request reads the latest offsets of every member's topic, and the members behind get an available-now
run of their query, at most `concurrent_tables` at once, the longest waiting first. An idle table costs the
group nothing but its share of that one request.

A member that fails is parked alone: its query stopped, its error written with its progress (`jobs status`
shows it, `cdcpipe status` fails on it, `cdcpipe_job_parked` is 1), the others going on. It starts again with
the group (`jobs stop` and `jobs submit` of the group), from its own checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from cdcpipe.common.errors import CdcpipeError
from streaming_jobs.classify.contracts import checked_registry
from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import KafkaUnreachableError, StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.offsets import KafkaPositions, Offsets, Partition
from streaming_jobs.once.checkpoints import committed_offsets, write_progress
from streaming_jobs.run import cluster, query
from streaming_jobs.run.metrics import GroupMetrics
from streaming_jobs.run.turns import Turns
from streaming_jobs.spark_session import build_spark_session

log = logging.getLogger(__name__)
# How often the group looks again for a topic's partitions (a partition added to a topic is read from then on).
PARTITIONS_EVERY_S = 60.0


def run_group(spec: JobSpec, settings: JobsSettings, *, trigger: str | None, stop: threading.Event) -> None:
    """Run the group's members in turns until `stop` is set (or, available-now, until each has read its backlog)."""
    chosen = trigger or spec.trigger
    once = chosen == "available-now"
    metrics = GroupMetrics(spec)  # one server for every table's metrics, and which are parked
    members = _prepared(spec, settings, metrics)
    spark = build_spark_session(settings, app_name=cluster.application_name(spec.name))
    registry = checked_registry(spark)
    if settings.metrics:
        port = metrics.start(settings.metrics_targets_dir)
        print(f"group {spec.name}: metrics of every table on http://127.0.0.1:{port}/metrics", flush=True)
    jobs: dict[str, query.JobQuery] = {}
    turns = Turns(slots=spec.concurrent_tables, topics={})
    try:
        for prepared in members:
            try:
                jobs[prepared.spec.name] = query.JobQuery(
                    prepared, settings, spark, registry, None if once else chosen, group=metrics
                )
            except Exception as exc:  # its query could not be planned (its table unreadable, say)
                metrics.park(prepared.spec)
                _park(prepared.spec, settings, query.one_line(exc))
        turns.topics = {name: job.spec.topics for name, job in jobs.items()}
        turns.applied = _ready(jobs)
        metrics.turns = turns
        print(
            f"group {spec.name}: {len(jobs)} of {len(spec.member_jobs())} jobs ready, "
            f"at most {spec.concurrent_tables} reading at once",
            flush=True,
        )
        period_s = 1.0 if once else spec.processing_seconds(chosen)
        _loop(spec, settings, jobs, turns, metrics, period_s=period_s, once=once, stop=stop)
    finally:
        for name in turns.running:
            jobs[name].stop_now()  # an error of the driver itself (not of one member): all stop, nothing parked
        for job in jobs.values():
            try:
                job.close()
            except Exception as exc:
                log.warning("job %s: its last progress could not be written: %s", job.spec.name, exc)
        metrics.close()
        spark.stop()


def _loop(
    spec: JobSpec,
    settings: JobsSettings,
    jobs: dict[str, query.JobQuery],
    turns: Turns,
    metrics: GroupMetrics,
    *,
    period_s: float,
    once: bool,
    stop: threading.Event,
) -> None:
    """Each tick: the turns that ended, the latest offsets read once, the turns that start."""
    positions = KafkaPositions(settings.kafka)
    topics = sorted({t for job in jobs.values() for t in job.spec.topics})
    partitions: list[Partition] = []
    looked_at = 0.0
    unreachable = False
    first = True
    started: dict[str, float] = {}  # when each turn in flight began
    while jobs:
        if stop.is_set():
            _stop_turns(jobs, turns)
            return
        for name in list(turns.running):
            job = jobs[name]
            try:
                in_turn = job.tick(stop, wait_s=0)
            except Exception as exc:
                _park_running(job, metrics, query.one_line(exc))
                turns.drop(name)
                del jobs[name]
                continue
            if not in_turn:
                turns.done(name, job.turn_ended())
                metrics.turn_seconds.observe(time.monotonic() - started.pop(name))
        try:
            if time.monotonic() - looked_at > PARTITIONS_EVERY_S:
                partitions = positions.partitions(topics, missing_ok=True)
                looked_at = time.monotonic()
            latest = positions.latest(partitions)
        except KafkaUnreachableError as exc:
            # The turns in flight go on (Spark's own consumers wait for Kafka); new ones wait for the next look.
            if not unreachable:
                log.warning(
                    "group %s: the latest offsets could not be read, no new turn until they are: %s", spec.name, exc
                )
            unreachable = True
            stop.wait(period_s)
            continue
        unreachable = False
        if not once or first:  # available-now: each member reads what its topic held when the group started
            turns.see(latest, time.monotonic(), jobs)
            first = False
        for name, job in jobs.items():
            behind = turns.behind(name, latest)
            job.metrics.set_lag({tp: behind.get(tp, 0) for tp in latest if tp[0] in job.spec.topics})
        for name in turns.take(latest):
            started[name] = time.monotonic()
            try:
                jobs[name].start()
            except Exception as exc:
                _park_running(jobs[name], metrics, query.one_line(exc))
                turns.drop(name)
                del jobs[name]
        if once and not turns.running and not turns.waiting:
            return
        stop.wait(period_s)


def _prepared(spec: JobSpec, settings: JobsSettings, metrics: GroupMetrics) -> list[query.Prepared]:
    """Each member checked (topics, retention, contract); one that fails a check is parked before any Spark work."""
    members: list[query.Prepared] = []
    for member in spec.member_jobs():
        try:
            members.append(query.prepare(member, settings))
        except CdcpipeError as exc:
            metrics.park(member)
            _park(member, settings, query.one_line(exc))
    if not members:
        raise StreamingError(f"group {spec.name}: every table is parked (`cdcpipe jobs status {spec.name}`)")
    return members


def _ready(jobs: dict[str, query.JobQuery]) -> dict[str, Offsets]:
    """How far each member's checkpoint got (its last committed batch), read side by side; a parked one's error cleared.

    A member that is caught up gets no turn, so nothing else would rewrite the error that parked it last run.
    """

    def ready(job: query.JobQuery) -> Offsets:
        job.unpark()
        return committed_offsets(job.where.checkpoint)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(jobs, pool.map(ready, jobs.values()), strict=True))


def _stop_turns(jobs: dict[str, query.JobQuery], turns: Turns) -> None:
    """Graceful, every turn at once: each query stops between two of its batches."""
    stopping = [jobs[name] for name in turns.running]
    while stopping:
        stopping = [job for job in stopping if not job.stop_between_batches()]
        time.sleep(0.1)


def _park_running(job: query.JobQuery, metrics: GroupMetrics, error: str) -> None:
    metrics.park(job.spec)
    job.close(_parked(job.spec, error))


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
