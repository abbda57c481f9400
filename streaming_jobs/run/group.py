"""A table group's driver: the mirrors and histories of many tables in one Spark application, each table apart.

Each member (a table's mirror or history) keeps its own query, checkpoint, contract, dead letters and metrics,
as its job alone would. The queries run in turns (streaming_jobs.run.turns): each tick of the group's trigger,
one Kafka request reads the latest offsets of every member's topic, and the members behind get a turn, at most
`concurrent_tables` at once, the longest waiting first. A turn ends when another table waits and this one has
had a batch, or when its topic has brought nothing for a while (turns.turn_over). An idle table costs the group
nothing but its share of that one request.

A member that fails is parked alone: its query stopped, its error written with its progress (`jobs status`
shows it, `cdcpipe status` fails on it, `cdcpipe_job_parked` is 1), the others going on. It starts again with
the group (`jobs stop` and `jobs submit` of the group), from its own checkpoint.

The group's file is read again each tick: a table added (`tables add T --group G`) gets its query and its turn
from then on, a table removed stops between two of its batches and leaves; the other tables are not touched.
The driver says which members it runs in `<CDCPIPE_RUN_DIR>/<group>.members.json` (what `tables add` and
`tables remove` wait for). Any other change of the file takes a restart of the group, which its log says.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession

from ground.errors import CdcpipeError
from schemas.contracts import ContractRegistry
from streaming_jobs.classify.contracts import checked_registry
from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import KafkaUnreachableError, StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import GROUP, JobSpec, load_file
from streaming_jobs.offsets import KafkaPositions, Offsets, Partition
from streaming_jobs.once import sources
from streaming_jobs.once.checkpoints import committed_offsets, write_progress
from streaming_jobs.run import cluster, query
from streaming_jobs.run.control import members_file, set_aside
from streaming_jobs.run.metrics import GroupMetrics
from streaming_jobs.run.turns import Turns, turn_over
from streaming_jobs.spark_session import build_spark_session

log = logging.getLogger(__name__)
# How often the group looks again for its topics' partitions (a partition added to a topic is read from then on).
PARTITIONS_EVERY_S = 60.0
# What only a restart of the group changes: everything in its file but the tables and their topics.
LIVE_FIELDS = {"tables", "topics"}


def run_group(spec: JobSpec, settings: JobsSettings, *, trigger: str | None, stop: threading.Event) -> None:
    """Run the group's members in turns until `stop` is set (or, available-now, until each has read its backlog)."""
    chosen = trigger or spec.trigger
    metrics = GroupMetrics(spec)  # one server for every table's metrics, and which are parked
    print(f"group {spec.name}: reads Kafka as {sources.check_principal(settings, spec.name)}", flush=True)
    aside = set_aside(settings, spec.name)  # a table being replayed or rewound while the group restarts
    members = _prepared([m for m in spec.member_jobs() if m.name not in aside], settings, metrics)
    if not members:
        raise StreamingError(f"group {spec.name}: every table is parked (`cdcpipe jobs status {spec.name}`)")
    spark = build_spark_session(settings, app_name=cluster.application_name(spec.name))
    if settings.metrics:
        port = metrics.start(settings.metrics_targets_dir)
        print(f"group {spec.name}: metrics of every table on http://127.0.0.1:{port}/metrics", flush=True)
    group = Group(spec, settings, spark, checked_registry(spark), metrics, chosen)
    group.aside = aside
    try:
        group.add(members)
        print(
            f"group {spec.name}: {len(group.jobs)} of {len(spec.member_jobs())} jobs ready, "
            f"at most {spec.concurrent_tables} reading at once",
            flush=True,
        )
        group.loop(stop)
    finally:
        group.close()
        spark.stop()


class Group:
    """The group's members: their queries, their turns, its metrics, and its file read again when it changes."""

    def __init__(
        self,
        spec: JobSpec,
        settings: JobsSettings,
        spark: SparkSession,
        registry: ContractRegistry,
        metrics: GroupMetrics,
        chosen: str,
    ) -> None:
        self.spec, self.settings, self.spark, self.registry, self.metrics = spec, settings, spark, registry, metrics
        self.once = chosen == "available-now"
        self.chosen = chosen
        self.jobs: dict[str, query.JobQuery] = {}
        self.turns = Turns(slots=spec.concurrent_tables, topics={})
        metrics.turns = self.turns
        self.started: dict[str, tuple[float, int]] = {}  # each turn in flight: when it began, its batches before
        # The file as last read: none yet, as it may have changed since `spec` was read from it (a table added
        # while this driver started), so the first tick reads it again.
        self.text: str | None = None
        # Members set aside by a command working on that table alone (`jobs replay --swap`, `rewind`): not run.
        self.aside: set[str] = set()
        # Every member's name in the file: kept, as each tick asks (a hundred JobSpecs built per call otherwise).
        self.names = {m.name for m in spec.member_jobs()}

    def add(self, members: list[query.Prepared]) -> None:
        """Members checked (`_prepared`) get their query; each waits for a turn if its topic holds records for it."""
        added: dict[str, query.JobQuery] = {}
        for prepared in members:
            try:
                added[prepared.spec.name] = query.JobQuery(
                    prepared,
                    self.settings,
                    self.spark,
                    self.registry,
                    self.chosen,
                    group=self.metrics,
                )
            except Exception as exc:  # its query could not be planned (its table unreadable, say)
                self.metrics.park(prepared.spec)
                _park(prepared.spec, self.settings, query.one_line(exc))
        applied = _ready(added)
        self.jobs.update(added)
        self.turns.topics.update({name: job.spec.topics for name, job in added.items()})
        self.turns.applied.update(applied)
        self._say_members()

    def remove(self, names: set[str]) -> None:
        """Members out of the group: a turn in flight ends between two batches; their last progress written."""
        if not names:
            return
        _stop_between_batches([self.jobs[name] for name in names if name in self.turns.running])
        for name in names:
            job = self.jobs.pop(name, None)
            if job is not None:
                job.close()
            self.turns.drop(name)
            self.started.pop(name, None)
            self.metrics.forget(name)
        self._say_members()

    def loop(self, stop: threading.Event) -> None:
        """Each tick: the file read again, the turns that ended, the latest offsets read once, the turns that start."""
        positions = KafkaPositions(self.settings.kafka)
        period_s = 1.0 if self.once else self.spec.processing_seconds(self.chosen)
        partitions: list[Partition] = []
        looked_at = 0.0
        unreachable = False
        first = True
        while self.jobs:
            if stop.is_set():
                # Graceful, every turn at once: each query stops between two of its batches.
                _stop_between_batches([self.jobs[name] for name in self.turns.running])
                return
            if not self.once and self._reread():
                looked_at = 0.0  # new topics: their partitions
            self._ended_turns(stop)
            try:
                if time.monotonic() - looked_at > PARTITIONS_EVERY_S:
                    topics = sorted({t for job in self.jobs.values() for t in job.spec.topics})
                    partitions = positions.partitions(topics, missing_ok=True)
                    looked_at = time.monotonic()
                latest = positions.latest(partitions)
            except KafkaUnreachableError as exc:
                # The turns in flight go on (Spark's own consumers wait for Kafka); new ones wait for the next look.
                if not unreachable:
                    log.warning("group %s: no new turn until the latest offsets can be read: %s", self.spec.name, exc)
                unreachable = True
                stop.wait(period_s)
                continue
            unreachable = False
            lags = self.turns.lags(latest, self.jobs)
            if not self.once or first:  # available-now: each member reads what its topic held when the group began
                self.turns.see(lags, time.monotonic())
                first = False
            for name, job in self.jobs.items():
                job.metrics.set_lag(lags[name])
            self._start_turns(latest)
            if self.once and not self.turns.running and not self.turns.waiting:
                return
            stop.wait(period_s)

    def close(self) -> None:
        """The driver ends: a turn still in flight stopped at once (an error of the driver, not of one member)."""
        for name in self.turns.running:
            self.jobs[name].stop_now()
        for job in self.jobs.values():
            try:
                job.close()
            except Exception as exc:
                log.warning("job %s: its last progress could not be written: %s", job.spec.name, exc)
        self.metrics.close()
        members_file(self.settings, self.spec.name).unlink(missing_ok=True)

    def _ended_turns(self, stop: threading.Event) -> None:
        for name in list(self.turns.running):
            job = self.jobs[name]
            try:
                in_turn = job.tick(stop, wait_s=0)
                if in_turn and self._turn_over(name, job) and job.stop_between_batches():
                    in_turn = job.tick(stop, wait_s=0)  # False now, or the error its query stopped on, raised
            except Exception as exc:
                self._park_running(name, query.one_line(exc))
                continue
            if not in_turn:
                self.turns.done(name, job.turn_ended(), whole=self.once)
                began, _ = self.started.pop(name)
                self.metrics.turn_seconds.observe(time.monotonic() - began)

    def _turn_over(self, name: str, job: query.JobQuery) -> bool:
        """A turn ends when it had a batch and a table waits, or when its topic brought nothing for a while."""
        if self.once:
            return False  # an available-now run ends by itself
        began, batches = self.started[name]
        quiet_s = time.monotonic() - max(began, job.last_records_at)
        return turn_over(others_waiting=bool(self.turns.waiting), batches=job.batches - batches, quiet_s=quiet_s)

    def _start_turns(self, latest: Offsets) -> None:
        for name in self.turns.take(latest):
            self.started[name] = (time.monotonic(), self.jobs[name].batches)
            try:
                self.jobs[name].start()
            except Exception as exc:
                self._park_running(name, query.one_line(exc))

    def _park_running(self, name: str, error: str) -> None:
        job = self.jobs.pop(name)
        self.turns.drop(name)
        self.started.pop(name, None)
        self.metrics.park(job.spec)
        job.close(_parked(job.spec, error))

    def _reread(self) -> bool:
        """The group's file read again if it changed, and the tables set aside: members added and removed (True if any)."""
        old = self._active()
        self._read_file()
        self.aside = set_aside(self.settings, self.spec.name)
        new = self._active()
        if new == old:
            return False
        gone = old - new
        came = [m for m in self.spec.member_jobs() if m.name in new - old]
        self.remove(gone)
        self.add(_prepared(came, self.settings, self.metrics))
        print(f"group {self.spec.name}: {len(came)} jobs added, {len(gone)} removed", flush=True)
        return True

    def _active(self) -> set[str]:
        """The members this driver runs (or holds parked): every member of its file but those set aside."""
        return self.names - self.aside

    def _read_file(self) -> None:
        """`spec` from the group's file again when the file changed; only its tables take effect before a restart."""
        text = _text(self.spec.file)
        if text is None or text == self.text or self.spec.file is None:
            return
        self.text = text
        try:
            new = load_file(self.spec.file)
            if new.kind != GROUP:
                raise StreamingError(f"{self.spec.file}: kind is {new.kind}, no longer {GROUP}")
        except StreamingError as exc:
            log.warning(
                "group %s: its file changed and cannot be read; the group goes on as it was: %s", self.spec.name, exc
            )
            return
        if new.model_dump(exclude=LIVE_FIELDS) != self.spec.model_dump(exclude=LIVE_FIELDS):
            print(
                f"group {self.spec.name}: {self.spec.file} changed beyond its tables; the change takes effect when the "
                f"group starts again (`cdcpipe jobs stop {self.spec.name}` and `cdcpipe jobs submit {self.spec.name}`)",
                flush=True,
            )
            new = self.spec.model_copy(update={"tables": new.tables, "topics": new.topics})
            new._file = self.spec.file
        self.spec = new
        self.names = {m.name for m in new.member_jobs()}

    def _say_members(self) -> None:
        """Which members this driver runs now, parked ones included (what `tables add` and `remove` wait for)."""
        path = members_file(self.settings, self.spec.name)
        path.parent.mkdir(parents=True, exist_ok=True)  # a driver run by hand, not by `jobs submit`, may be first
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps({"members": sorted(self._active())}))
        partial.replace(path)


def _stop_between_batches(jobs: list[query.JobQuery]) -> None:
    """Stop the queries, each between two of its batches, all at once: the wait is for the slowest batch."""
    while jobs:
        jobs = [job for job in jobs if not job.stop_between_batches()]
        time.sleep(0.1)


def _text(file: Path | None) -> str | None:
    try:
        return file.read_text() if file is not None else None
    except OSError:
        return None


def _prepared(members: list[JobSpec], settings: JobsSettings, metrics: GroupMetrics) -> list[query.Prepared]:
    """Each member checked (topics, retention, contract); one that fails a check is parked before any Spark work."""
    ready: list[query.Prepared] = []
    for member in members:
        try:
            ready.append(query.prepare(member, settings))
        except CdcpipeError as exc:
            metrics.park(member)
            _park(member, settings, query.one_line(exc))
    return ready


def _ready(jobs: dict[str, query.JobQuery]) -> dict[str, Offsets]:
    """How far each member's checkpoint got (its last committed batch), read side by side; a parked one's error cleared.

    A member that is caught up gets no turn, so nothing else would rewrite the error that parked it last run.
    """

    def ready(job: query.JobQuery) -> Offsets:
        job.unpark()
        return committed_offsets(job.where.checkpoint)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(jobs, pool.map(ready, jobs.values()), strict=True))


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
