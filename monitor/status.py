"""`cdcpipe status`: the whole pipeline on one screen, each line OK, WARN or FAIL with its reason and what shows more.

The parts, in the order a change flows: the stack's services (when it runs here), the relay and its outbox, each
connector with its tasks and its slot, each job submitted on this machine. A part that does not answer is a
FAIL line that says so; the others are still shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from connectors.config import ConnectSettings
from connectors.slots import SlotStatus, human_bytes
from ground.settings import dsn_shown
from infra import stack
from infra.config import StackSettings
from monitor import readings
from monitor.config import MonitorSettings
from outbox_relay.status import RelayStatus
from schemas.config import OutboxNames
from streaming_jobs.config import JobsSettings
from streaming_jobs.run import control

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True)
class Line:
    """One part's state: its level, what it is, what it says, and the command that shows more."""

    level: str
    part: str
    says: str
    more: str = ""


@dataclass(frozen=True)
class Parts:
    """What `status` reads, each part's settings."""

    monitor: MonitorSettings
    connect: ConnectSettings
    names: OutboxNames
    jobs: JobsSettings
    stack: StackSettings | None  # None: no local stack to show

    @classmethod
    def load(cls) -> Parts:
        """Every part's settings from the settings file and the environment."""
        return cls(
            MonitorSettings.load(),
            ConnectSettings.load(),
            OutboxNames.load(),
            JobsSettings.load(),
            StackSettings.load(),
        )


def lines(parts: Parts) -> list[Line]:
    """Every line of the screen."""
    found: list[Line] = []
    if parts.stack is not None:
        found += list(_services(parts.stack))
    pg = readings.read(lambda: _postgres(parts))
    if pg.value is None:
        found.append(
            Line(
                FAIL,
                "postgres",
                f"cannot read as {dsn_shown(parts.monitor.monitor_pg_dsn.get_secret_value())}: {pg.error}",
                "cdcpipe schema apply (it makes the monitor role); CDCPIPE_MONITOR_PG_DSN names it",
            )
        )
        slots: list[SlotStatus] = []
    else:
        relay, relays, slots = pg.value
        if relay.value is None:
            found.append(
                Line(
                    FAIL,
                    "relay",
                    f"cannot read the outbox: {relay.error}",
                    "cdcpipe schema apply; cdcpipe relay status",
                )
            )
        else:
            found += list(_relay(relay.value, relays, parts.names))
    connect = readings.read(lambda: readings.connectors(parts.connect, parts.monitor.monitor_timeout_s))
    if connect.value is None:
        found.append(
            Line(
                FAIL, "connect", f"no answer from {parts.connect.connect_url}: {connect.error}", "cdcpipe stack status"
            )
        )
    else:
        found += list(_connectors(connect.value, slots, parts.monitor.slot_wal_warn_bytes, pg.value is not None))
    found += list(_jobs(parts.jobs))
    return found


def failed(found: list[Line]) -> bool:
    """Whether any line is a FAIL (the command's exit code is then 1)."""
    return any(line.level == FAIL for line in found)


def _postgres(parts: Parts) -> tuple[readings.Reading[RelayStatus], list[str], list[SlotStatus]]:
    with readings.connect(parts.monitor) as conn:
        return readings.read(lambda: readings.outbox(conn, parts.names)), readings.relays(conn), readings.slots(conn)


def _services(settings: StackSettings) -> Iterator[Line]:
    rows = stack.status(settings)
    if not any(row.pid for row in rows):
        return  # no stack here: its services are someone else's to watch
    for row in rows:
        if row.pid:
            yield Line(OK, f"service {row.service}", f"running (pid {row.pid}) on {row.address}")
        elif row.service.startswith("spark-"):
            continue  # the Spark cluster is optional (`stack up --spark-cluster`)
        else:
            yield Line(
                FAIL,
                f"service {row.service}",
                "not running",
                f"cdcpipe stack up; its log: {settings.logs}/{row.service}.log",
            )


def _relay(status: RelayStatus, relays: list[str], names: OutboxNames) -> Iterator[Line]:
    outbox = f"{names.outbox_schema}.{names.outbox_table}"
    waiting = f"{status.waiting} events waiting, the oldest {status.oldest_age_s:.0f}s old"
    standbys = max(0, len(relays) - (1 if status.leader else 0))
    # A stall whose events are gone (published since, or deleted) is over, even if no relay ran to say so.
    stalls = [s for s in status.stalls if s.waiting]
    if stalls or (status.stalled_topic and status.waiting):
        topics = ", ".join(s.topic for s in stalls) or str(status.stalled_topic)
        yield Line(FAIL, f"relay {outbox}", f"STALLED on topic {topics}: {waiting}", "cdcpipe relay status")
    elif status.leader and status.leader_is_a_stranger:
        yield Line(
            FAIL,
            f"relay {outbox}",
            f"the leader lock is held by {status.leader}, whose role may not remove the outbox's rows: no relay "
            f"publishes; {waiting}",
            "end that session (pg_terminate_backend(PID) as a superuser); cdcpipe relay status",
        )
    elif status.leader:
        yield Line(
            OK, f"relay {outbox}", f"leader {status.leader}, {standbys} standby; {waiting}", "cdcpipe relay status"
        )
    elif status.waiting:
        yield Line(FAIL, f"relay {outbox}", f"no relay is publishing: {waiting}", "cdcpipe relay run")
    else:
        yield Line(WARN, f"relay {outbox}", "no relay is running (nothing waits)", "cdcpipe relay run")
    if status.dead_letters:
        yield Line(
            WARN,
            f"relay {outbox}",
            f"{status.dead_letters} dead letters ({status.dead_letters_overtaken} overtaken)",
            "cdcpipe relay status; cdcpipe relay redrive --dry-run",
        )


def _connectors(
    found: list[readings.Connector], slots: list[SlotStatus], wal_warn: int, slots_read: bool
) -> Iterator[Line]:
    by_slot = {s.name: s for s in slots}
    for c in found:
        more = f"cdcpipe connectors status {c.name}"
        tasks = ", ".join(f"task {t.id} {t.state}" for t in c.tasks) or "no task"
        failed_tasks = [t for t in c.tasks if t.state == "FAILED"]
        slot = by_slot.get(c.slot) if c.slot else None
        wal = f"; slot {c.slot} holds {human_bytes(slot.retained_wal_bytes)} of WAL" if slot else ""
        if c.state == "FAILED" or failed_tasks:
            why = failed_tasks[0].trace if failed_tasks and failed_tasks[0].trace else "see its trace"
            yield Line(
                FAIL,
                f"connector {c.name}",
                f"{c.state}, {tasks}{wal}: {why}",
                f"{more}; cdcpipe connectors restart {c.name}",
            )
        elif c.state != "RUNNING" or any(t.state != "RUNNING" for t in c.tasks) or not c.tasks:
            yield Line(WARN, f"connector {c.name}", f"{c.state}, {tasks}{wal}: nothing new reaches its topics", more)
        elif slot is not None and slot.retained_wal_bytes > wal_warn:
            yield Line(
                WARN, f"connector {c.name}", f"RUNNING, {tasks}{wal} (over {human_bytes(wal_warn)}): it is behind", more
            )
        elif c.slot and slots_read and slot is None:
            yield Line(WARN, f"connector {c.name}", f"RUNNING, {tasks}; its slot {c.slot} does not exist yet", more)
        else:
            yield Line(OK, f"connector {c.name}", f"RUNNING, {tasks}{wal}", more)
    captured = {c.slot for c in found if c.slot}
    for s in slots:
        if s.name not in captured:
            level = WARN if not s.active else OK
            yield Line(
                level,
                f"slot {s.name}",
                f"{'active' if s.active else 'no reader'}, holds {human_bytes(s.retained_wal_bytes)} of WAL; no connector of "
                "this Connect cluster names it",
                "cdcpipe connectors list; a slot nobody reads keeps WAL forever: drop it with connectors delete --drop-slot",
            )


def _jobs(settings: JobsSettings) -> Iterator[Line]:
    for driver in readings.drivers(settings):
        more = f"cdcpipe jobs status {driver.name}"
        if driver.pid is None:
            yield Line(
                FAIL,
                f"job {driver.name}",
                f"stopped by an error: {driver.last_error}"
                if driver.last_error
                else "submitted, but its driver is gone (killed, or the machine restarted)",
                f"{more}; cdcpipe jobs submit {driver.name}",
            )
            continue
        report = readings.read(_status_of(settings, driver.name))
        if report.value is None:
            yield Line(
                WARN,
                f"job {driver.name}",
                f"running (pid {driver.pid}); its progress cannot be read: {report.error}",
                more,
            )
            continue
        yield _job_line(report.value, driver.pid, more)


def _status_of(settings: JobsSettings, name: str) -> Callable[[], control.JobStatus]:
    return lambda: control.status(settings, name)


def _job_line(report: control.JobStatus, pid: int, more: str) -> Line:
    says = (
        f"running (pid {pid}), lag {report.total_lag}, last batch {report.last_batch_id}, "
        f"applied {report.applied or 0}, dead letters {report.dead_letters or 0}"
    )
    if report.last_batch_id is None:
        says = f"running (pid {pid}), lag {report.total_lag}, no batch yet"
    if report.members:
        says = f"group of {len(report.members)} jobs, {says}"
    if report.parked:
        # One table stopped by an error while the rest of its group flows: loud, named, with why.
        parked = "; ".join(f"{m.name}: {m.last_error}" for m in report.parked)
        return Line(FAIL, f"job {report.name}", f"{says}; PARKED {parked}", more)
    if report.missing_topics:
        return Line(FAIL, f"job {report.name}", f"{says}; topics missing: {', '.join(report.missing_topics)}", more)
    if report.dead_letters:
        return Line(WARN, f"job {report.name}", says, f"{more}; its table's _dead_letters hold the reasons")
    if report.stalled:
        # A driver without executors (a cluster's cores all taken), or with records and no batch: never OK, and
        # FAIL once it has been so for longer than a start and a first batch take.
        return Line(FAIL if report.stuck else WARN, f"job {report.name}", f"{says}; {report.stalled}", more)
    return Line(OK, f"job {report.name}", says, more)
