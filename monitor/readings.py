"""What each part of the pipeline says of itself, read once: the collector and `cdcpipe status` share these.

Every read is bounded (`MonitorSettings.monitor_timeout_s`) and a part that cannot be read is an answer too
(`Reading.error`): a screen or a scrape shows the rest and says which part did not answer, and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psycopg

from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.slots import SlotStatus, read_logical_slots
from ground.processes import TrackedProcess
from monitor.config import MonitorSettings
from outbox_relay import status as relay_status
from outbox_relay.status import RelayStatus
from schemas.config import OutboxNames
from streaming_jobs.config import JobsSettings
from streaming_jobs.jobs.spec import JOB_NAME
from streaming_jobs.run import control

T = TypeVar("T")


@dataclass(frozen=True)
class Reading(Generic[T]):
    """A part's answer, or why there is none."""

    value: T | None
    error: str | None = None
    seconds: float = 0.0


def read(what: Callable[[], T]) -> Reading[T]:
    """`what()`, with the first line of its failure instead of an exception."""
    began = time.monotonic()
    try:
        return Reading(what(), seconds=time.monotonic() - began)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return Reading(None, f"{type(exc).__name__}: {first}"[:300], time.monotonic() - began)


@dataclass(frozen=True)
class Task:
    """One task of a connector."""

    id: int
    state: str
    trace: str | None  # the first line of a FAILED task's trace


@dataclass(frozen=True)
class Connector:
    """A connector, as Connect reports it."""

    name: str
    state: str
    tasks: tuple[Task, ...]
    slot: str | None  # a Postgres connector's replication slot


@dataclass(frozen=True)
class Driver:
    """A job submitted on this machine and not stopped: its driver runs, or it died."""

    name: str
    pid: int | None
    last_error: str | None = None  # what a dead driver died of (its log's last `error:` line)


def connectors(settings: ConnectSettings, timeout_s: float) -> list[Connector]:
    """Every connector of the Connect cluster, with its tasks' states (one REST request)."""
    quick = settings.model_copy(update={"connect_timeout_s": timeout_s, "connect_retries": 1})
    with ConnectClient(quick) as client:
        expanded = client.expanded()
    return sorted((_connector(name, body) for name, body in expanded.items()), key=lambda c: c.name)


def _connector(name: str, body: dict[str, Any]) -> Connector:
    status, config = body.get("status") or {}, (body.get("info") or {}).get("config") or {}
    tasks = tuple(
        Task(int(t.get("id", 0)), str(t.get("state", "UNKNOWN")), _first_line(t.get("trace")))
        for t in status.get("tasks") or []
    )
    state = str((status.get("connector") or {}).get("state", "UNKNOWN"))
    return Connector(
        name, state, tasks, config.get("slot.name") if "postgres" in config.get("connector.class", "").lower() else None
    )


def _first_line(trace: object) -> str | None:
    if not trace:
        return None
    lines = str(trace).strip().splitlines()
    return lines[0][:300] if lines else None


def connect(settings: MonitorSettings) -> psycopg.Connection[Any]:
    """A connection as the monitor role, bounded (connecting and each statement)."""
    seconds = max(1, int(settings.monitor_timeout_s))
    return psycopg.connect(
        settings.monitor_pg_dsn.get_secret_value(),
        autocommit=True,
        connect_timeout=seconds,
        options=f"-c statement_timeout={seconds * 1000}",
        application_name="cdcpipe-monitor",
    )


def slots(conn: psycopg.Connection[Any]) -> list[SlotStatus]:
    """Every logical replication slot: whether a reader holds it, and the WAL it keeps from being removed."""
    return read_logical_slots(conn)


def outbox(conn: psycopg.Connection[Any], names: OutboxNames) -> RelayStatus:
    """The relay's view: who leads, what is stalled, the backlog and its oldest event, the dead letters."""
    return relay_status.status(conn, names)


def relays(conn: psycopg.Connection[Any]) -> list[str]:
    """Every relay connected to Postgres (each names its session `cdcpipe-relay:<pid>`): the leader and standbys."""
    rows = conn.execute(
        "SELECT application_name FROM pg_catalog.pg_stat_activity WHERE application_name LIKE 'cdcpipe-relay:%'"
    ).fetchall()
    return sorted(str(row[0]) for row in rows)


def drivers(settings: JobsSettings) -> list[Driver]:
    """The jobs submitted on this machine (a pid file in CDCPIPE_RUN_DIR) and whether each driver still runs."""
    if not settings.run_dir.is_dir():
        return []
    found = []
    for path in sorted(settings.run_dir.glob("*.pid")):
        if not path.is_file() or not JOB_NAME.match(path.stem):
            continue  # not a job's pid file (the folder is the user's): nothing of ours to show
        process = control.tracked(settings, path.stem)
        pid = process.pid()
        found.append(Driver(path.stem, pid, None if pid is not None else _last_error(process)))
    return found


def _last_error(process: TrackedProcess) -> str | None:
    """The error a dead driver's log ends with; None where this user may not read the log.

    A job's log is its starter's alone (0600): `cdcpipe status` run by that user says why the driver died; the
    stack's collector, a user of its own, only that it is gone.
    """
    try:
        return control.last_error(process.log_tail(control.ERROR_SEARCH_LINES))
    except PermissionError:
        return None
