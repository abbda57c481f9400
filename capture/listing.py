"""`cdcpipe tables list`: every captured table, and how far each part of it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capture import connector, files, postgres
from capture.plan import (
    Settings,
    opened,
)
from connectors import commands as connector_commands
from ground.errors import CdcpipeError
from schemas import table_contracts
from streaming_jobs.jobs.spec import load_all
from streaming_jobs.run import control


@dataclass(frozen=True)
class JobLine:
    """A job reading a captured table's topic."""

    name: str
    kind: str
    running: bool
    lag: int | None
    error: str | None = None  # what stopped it (a group's table: what parked it)


@dataclass(frozen=True)
class TableLine:
    """Everything `tables list` shows about one captured table."""

    table: str
    contract: str
    connector: str
    topic: str
    jobs: list[JobLine]
    snapshot: str
    published: bool


def listing(settings: Settings) -> list[TableLine]:
    """Every table the connector captures or the publication carries, with how far each part of it is."""
    name = settings.capture.capture_connector
    with opened(settings) as (conn, client):
        config = client.config(name) or {}
        state = "absent"
        if config:
            report = connector_commands.status(client, settings.connect, name)
            tasks = ",".join(t.state for t in report.tasks) or "no tasks"
            state = f"{report.state}, tasks {tasks}"
        held = postgres.published(conn, settings.schema) or set()
    ours = f"{settings.names.outbox_schema}."
    tables = sorted({*connector.captured_tables(config, settings.names), *(t for t in held if not t.startswith(ours))})
    prefix = config.get("topic.prefix", settings.capture.capture_topic_prefix)
    kafka = settings.topics.kafka.client_config()
    progress = progress_of(kafka, connector.notifications_topic(config), tables) if config else {}
    jobs = load_all(list(settings.jobs.jobs_dirs)) if settings.jobs.jobs_dirs else {}
    states = _job_states(settings, [spec.name for spec in jobs.values() if spec.source_table in tables])
    lines = []
    for table in tables:
        try:
            contract = table_contracts.load_table_contract(table)
            said = f"v{contract.version} {contract.path}"
        except CdcpipeError as exc:
            files_of = [table_contracts.contract_path(f, table) for f in table_contracts.contract_folders()]
            said = (
                f"BROKEN: {str(exc).strip()}"
                if any(p.is_file() for p in files_of)
                else "none: `cdcpipe tables add` imports it"
            )
        captured = connector.captured_by(config, table) is not None
        readers = [
            JobLine(spec.name, spec.kind, *states.get(spec.name, (False, None, None)))
            for spec in sorted(jobs.values(), key=lambda s: s.name)
            if spec.source_table == table
        ]
        lines.append(
            TableLine(
                table=table,
                contract=said,
                connector=f"{name} {state}" if captured else f"not captured by {name}",
                topic=files.topic_of(prefix, table),
                jobs=readers,
                snapshot=_snapshot_said(progress, table),
                published=table in held,
            )
        )
    return lines


def _snapshot_said(found: dict[str, Any], table: str) -> str:
    from capture import progress

    said = progress.of(found, table)
    return said.line() if said is not None else "no snapshot reported"


def progress_of(kafka: dict[str, Any], topic: str, tables: list[str]) -> dict[str, Any]:
    """Snapshot progress per table (loaded here so `tables add` never reads the topic)."""
    from capture import progress

    return progress.latest(kafka, topic, tables).found


def _job_states(settings: Settings, names: list[str]) -> dict[str, tuple[bool, int | None, str | None]]:
    """Whether each job runs, its lag and what stopped it; none when its status cannot be read."""
    try:
        reports = control.statuses(settings.jobs, names)
    except CdcpipeError:
        return {}
    return {r.name: (r.running, r.total_lag, r.last_error) for r in reports}
