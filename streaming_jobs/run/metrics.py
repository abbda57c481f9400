"""Prometheus metrics of a running job's driver, on 127.0.0.1, and the target file Prometheus finds it by.

The driver serves on a free port and writes `<CDCPIPE_METRICS_TARGETS_DIR>/job-<name>.json` (Prometheus'
file-based discovery: the address, and the labels `job` and `kind`), removed when the job ends; `cdcpipe jobs
stop` removes it too, and a file whose driver died is dropped by whoever lists them (`stale_targets`). Every
series of the driver thus carries `job="<name>"`, `kind="<kind>"` in Prometheus, with no file edited by hand.
A table group's driver serves once for all its tables (`GroupMetrics`): each series carries its table's own
job and kind as labels (kept over the target's by the scrape's `honor_labels`), so one series per table and
metric, bounded by the group's tables, and `cdcpipe_job_parked` says which tables are parked.

Everything is updated from what the runner has at hand after a batch (its counts, its Phases, Spark's progress
report): no Spark job and no Kafka request is made for a metric.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Metric
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ground.metrics import LATENCY_BUCKETS, BatchHistogram, serve
from ground.processes import running
from streaming_jobs.jobs.spec import TABLE_KINDS, JobSpec
from streaming_jobs.phases import Phases
from streaming_jobs.run.turns import Turns

BATCH_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300)


class _Served:
    """A registry served on a free port of 127.0.0.1 under a target file of its own while the driver runs."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.registry = CollectorRegistry()
        self._server: Any = None
        self._target: Path | None = None

    def start(self, targets_dir: Path | None) -> int:
        """Serve on a free port of 127.0.0.1, and write the target file when a folder is given; the port."""
        self._server = serve(self.registry, 0)
        port: int = self._server.server_port
        if targets_dir is not None:
            targets_dir.mkdir(parents=True, exist_ok=True)
            self._target = target_file(targets_dir, self.spec.name)
            labels = {"job": self.spec.name, "kind": self.spec.kind, "__meta_pid": str(os.getpid())}
            # Replaced whole, never seen half-written; Prometheus reads it as another user (an address, no secret).
            partial = self._target.with_suffix(".tmp")
            partial.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": labels}]))
            partial.chmod(0o644)
            partial.replace(self._target)
        return port

    def close(self) -> None:
        """Stop serving and remove the target file (only if it is still this driver's)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._target is not None and target_pid(self._target) == os.getpid():
            self._target.unlink(missing_ok=True)
        self._target = None


class JobMetrics(_Served):
    """Every metric of one job, in a registry of its own (served by its driver, or by its group's)."""

    def __init__(self, spec: JobSpec, trigger_s: float | None) -> None:
        super().__init__(spec)
        r = self.registry
        info = Gauge("cdcpipe_job_info", "1, labelled with the job's name and kind", ["name", "kind"], registry=r)
        info.labels(spec.name, spec.kind).set(1)
        self.trigger = Gauge(
            "cdcpipe_job_trigger_interval_seconds", "the job's processing-time trigger (0: available-now)", registry=r
        )
        self.trigger.set(trigger_s or 0)
        self.batches = Counter("cdcpipe_job_batches", "micro-batches that held records", registry=r)
        self.applied = Counter("cdcpipe_job_rows_applied", "records applied to the job's table", registry=r)
        self.dead = Counter(
            "cdcpipe_job_rows_dead_lettered", "records written to the dead-letter table instead", registry=r
        )
        self.duration = Histogram(
            "cdcpipe_job_batch_duration_seconds",
            "a micro-batch from its start to its last commit",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.last_commit = Gauge(
            "cdcpipe_job_last_commit_timestamp_seconds",
            "when the job last committed a batch to its tables (epoch seconds; 0: not yet in this run)",
            registry=r,
        )
        self.lag = Gauge(
            "cdcpipe_job_kafka_lag_records",
            "records in the partition past the job's last planned offset, as of Spark's latest progress report",
            ["topic", "partition"],
            registry=r,
        )
        source = "the change's commit in Postgres" if spec.kind in TABLE_KINDS else "the event's Kafka timestamp"
        self.latency = BatchHistogram(
            "cdcpipe_job_end_to_end_latency_seconds",
            f"from {source} to the Delta commit that made it visible",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def after_batch(self, phases: Phases, applied: int, dead: int) -> None:
        """Count a batch that held records, and the latency of each valid one."""
        ended = time.time()
        committed = phases.write_span[1] if phases.write_span else ended
        self.batches.inc()
        self.applied.inc(applied)
        self.dead.inc(dead)
        self.duration.observe(ended - phases.began)
        self.last_commit.set(committed)
        self.latency.observe_many(committed - t for t in phases.source_times)

    def set_lag(self, behind: dict[tuple[str, int], int]) -> None:
        """Each partition's lag as its table group read it (a member without a turn has no progress report)."""
        for (topic, partition), records in behind.items():
            self.lag.labels(topic, str(partition)).set(records)

    def after_progress(self, progress: dict[str, Any] | None) -> None:
        """Each partition's lag from Spark's progress report (its sources' latest and planned offsets)."""
        for source in (progress or {}).get("sources") or []:
            latest, planned = offsets_of(source.get("latestOffset")), offsets_of(source.get("endOffset"))
            for (topic, partition), offset in latest.items():
                behind = max(0, offset - planned.get((topic, partition), offset))
                self.lag.labels(topic, str(partition)).set(behind)


class GroupMetrics(_Served):
    """A table group driver's one server: each member's metrics labelled with its job and kind, and who is parked."""

    def __init__(self, spec: JobSpec) -> None:
        super().__init__(spec)
        self.members: dict[str, JobMetrics] = {}
        self.parked: set[str] = set()
        self.turns: Turns | None = None  # who reads, who waits (set once the group's queries are ready)
        self.turn_seconds = Histogram(
            "cdcpipe_group_turn_seconds",
            "a table's turn, from its query's start to its end (its batches, and the start and stop around them)",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_Members(self))

    def add(self, member: JobMetrics) -> None:
        self.members[member.spec.name] = member

    def park(self, member: JobSpec) -> None:
        self.parked.add(member.name)

    def forget(self, member: str) -> None:
        """A member out of the group: its series go."""
        self.members.pop(member, None)
        self.parked.discard(member)


class _Members(Collector):
    """The members' registries as one exposition: a family per metric, a series per member (and its labels)."""

    def __init__(self, group: GroupMetrics) -> None:
        self.group = group

    def collect(self) -> Iterator[Metric]:
        group = self.group
        parked = GaugeMetricFamily(
            "cdcpipe_job_parked",
            "1 while the table's job is parked: stopped by an error while the rest of its group runs",
            labels=["job", "kind", "group"],
        )
        names = sorted({*group.members, *group.parked})
        kinds = {name: m.spec.kind for name, m in group.members.items()}
        for name in names:
            parked.add_metric([name, kinds.get(name, ""), group.spec.name], 1 if name in group.parked else 0)
        yield parked
        yield from _turns(group)
        families: dict[str, Metric] = {}
        for name, member in sorted(group.members.items()):
            own = {"job": name, "kind": member.spec.kind}
            for family in member.registry.collect():
                merged = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type, family.unit)
                )
                merged.samples += [sample._replace(labels={**sample.labels, **own}) for sample in family.samples]
        yield from families.values()


def _turns(group: GroupMetrics) -> Iterator[Metric]:
    """How many of the group's tables read now, how many wait for a turn, and for how long the longest has."""
    turns, labels = group.turns, [group.spec.name]
    if turns is None:
        return
    now = time.monotonic()
    for name, what, value in (
        ("cdcpipe_group_tables_reading", "tables of the group reading now (in a turn)", len(turns.running)),
        ("cdcpipe_group_tables_waiting", "tables with records to read waiting for a turn", len(turns.waiting)),
        (
            "cdcpipe_group_longest_wait_seconds",
            "how long the table waiting longest for a turn has waited (0: none waits)",
            max((now - since for since in turns.waiting.values()), default=0.0),
        ),
    ):
        family = GaugeMetricFamily(name, what, labels=["group"])
        family.add_metric(labels, value)
        yield family


def target_file(targets_dir: Path, job: str) -> Path:
    """Where a job's driver writes its target."""
    return targets_dir / f"job-{job}.json"


def target_pid(path: Path) -> int | None:
    """The pid of the driver a target file names; None when the file is gone or not one of ours."""
    try:
        return int(json.loads(path.read_text())[0]["labels"]["__meta_pid"])
    except (OSError, ValueError, LookupError, TypeError):
        return None


def stale_targets(targets_dir: Path | None) -> list[Path]:
    """Remove the target files whose driver is gone (killed: it could not remove its own); those removed."""
    if targets_dir is None or not targets_dir.is_dir():
        return []
    removed = []
    for path in sorted(targets_dir.glob("job-*.json")):
        pid = target_pid(path)
        if pid is None or not running(pid):
            try:
                path.unlink()
            except FileNotFoundError:
                pass  # another remover was first
            except PermissionError:
                continue  # not ours to remove (the collector, which owns the folder, will)
            removed.append(path)
    return removed


def offsets_of(rendered: object) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} from a Kafka source's offsets as Spark reports them (JSON text or a dict)."""
    value = json.loads(rendered) if isinstance(rendered, str) else rendered
    if not isinstance(value, dict):
        return {}
    found: dict[tuple[str, int], int] = {}
    for topic, partitions in value.items():
        if isinstance(partitions, dict):
            for partition, offset in partitions.items():
                found[(str(topic), int(partition))] = int(offset)
    return found
