"""The vocabulary of `cdcpipe tables`: a plan's steps, the settings every command reads, carrying a plan out.

A plan is a list of steps in the order they must run: Postgres (grants, publication), the row contract, the
topic (created before the connector names it, so it gets its declared partitions and ACLs), the connector,
the job files, the snapshot request, the jobs' start. Each step says what it would change; a step with
nothing to change is shown as `unchanged`, which is what a second run shows throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from capture import connector, files, postgres
from capture.config import CaptureSettings, own_name
from capture.errors import CaptureError
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from ground.errors import CdcpipeError
from schemas import topics
from schemas.config import OutboxNames, SchemaSettings
from streaming_jobs.config import JobsSettings
from streaming_jobs.run import control

MARK = "Written by `cdcpipe tables add`"
# Debezium's snapshot modes in which a new connector reads every captured table's rows before streaming.
INITIAL_MODES = ("initial", "always", "initial_only", "when_needed")
# How long `add` waits for the connector's tasks to run its new include list before it asks for a snapshot.
TASKS_WITHIN_S = 120.0


@dataclass(frozen=True)
class Step:
    """One change of a plan: what it touches, what it does, and the function that does it (None: nothing)."""

    part: str
    subject: str
    action: str
    detail: str = ""
    run: Callable[[], None] | None = field(default=None, compare=False)

    def line(self, *, done: bool) -> str:
        verb = self.action if done or self.run is None else f"would {self.action}"
        return f"{self.part:<10} {self.subject}: {verb}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Settings:
    """Every stage's settings a `tables` command reads."""

    capture: CaptureSettings
    schema: SchemaSettings
    names: OutboxNames
    connect: ConnectSettings
    topics: topics.TopicSettings
    jobs: JobsSettings

    @classmethod
    def load(cls) -> Settings:
        capture, schema = CaptureSettings.load(), SchemaSettings.load()
        if "tables_publication" not in schema.model_fields_set:
            # A connector's own publication, as its own slot (CaptureSettings.slot): cdcpipe_tables by default.
            schema = schema.model_copy(update={"tables_publication": own_name(capture.capture_connector)})
        return cls(
            capture,
            schema,
            OutboxNames.load(),
            ConnectSettings.load(),
            topics.TopicSettings.load(),
            JobsSettings.load(),
        )

    @property
    def signal_table(self) -> str:
        return f"{self.names.outbox_schema}.{self.schema.signal_table}"

    @property
    def heartbeat_table(self) -> str:
        return f"{self.names.outbox_schema}.{self.schema.heartbeat_table}"


@contextmanager
def opened(settings: Settings) -> Iterator[tuple[psycopg.Connection[Any], ConnectClient]]:
    """Postgres and Connect, as every command that plans reads them."""
    with postgres.connect(settings.schema) as conn, ConnectClient(settings.connect) as client:
        yield conn, client


def resolve(settings: Settings, tables: list[str], schemas: list[str]) -> list[str]:
    """The tables named, and every table of each schema named, once each, in order."""
    if not tables and not schemas:
        raise CaptureError("which tables? name them as schema.table, or give --schema NAME for all of a schema's")
    for table in tables:
        postgres.split(table)
    if not schemas:
        return list(dict.fromkeys(tables))
    with postgres.connect(settings.schema) as conn:
        found = [t for schema in schemas for t in postgres.tables_of_schema(conn, schema)]
    ours = f"{settings.names.outbox_schema}."
    return list(dict.fromkeys([*tables, *(t for t in found if not t.startswith(ours))]))


def run(steps: list[Step], report: Callable[[str], None]) -> None:
    """Carry the plan out in order, saying each step as it is done."""
    for step in steps:
        if step.run is not None:
            try:
                step.run()
            except (CdcpipeError, psycopg.Error, OSError) as exc:
                raise CaptureError(
                    f"{step.part} {step.subject}: {step.action} failed: {str(exc).strip()}. The steps above it are "
                    "done; once this is fixed, run the same command again: it changes only what differs"
                ) from exc
        report(step.line(done=True))


def write(file: files.File) -> Callable[[], None]:
    """A step's work: write `file` (its folder made)."""

    def write() -> None:
        file.path.parent.mkdir(parents=True, exist_ok=True)
        file.path.write_text(file.text)

    return write


def write_definition(folder: Path, name: str, config: dict[str, str]) -> Callable[[], None]:
    """A step's work: keep the connector's definition file in `folder` in step with `config`."""

    def write() -> None:
        connector.write_definition(folder, name, config)

    return write


def await_members(settings: Settings, name: str, members: set[str]) -> Callable[[], None]:
    """A step's work: wait until the running group `name`'s driver has read its file's `members`."""

    def wait() -> None:
        control.await_members(settings.jobs, name, members)

    return wait
