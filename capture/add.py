"""`cdcpipe tables add`: each part a table needs to be captured and mirrored, planned, then done in order."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from capture import connector, files, postgres
from capture.errors import CaptureError
from capture.jobs import group_steps, job_steps, submit_steps
from capture.plan import (
    INITIAL_MODES,
    TASKS_WITHIN_S,
    Settings,
    Step,
    opened,
    write,
    write_definition,
)
from capture.snapshot import snapshot_step
from connectors import commands as connector_commands
from connectors import definitions
from connectors.client import ConnectClient
from ground.errors import CdcpipeError
from schemas import catalog, table_contracts, topics


def plan_add(
    settings: Settings,
    tables: list[str],
    *,
    mirror: bool,
    history: bool,
    submit: bool,
    snapshot: bool,
    group: str | None = None,
) -> list[Step]:
    """The steps that capture `tables`, each with what it changes."""
    with opened(settings) as (conn, client):
        for table in tables:
            postgres.check_capturable(conn, table)
        if not postgres.signal_table_exists(conn, settings.names, settings.schema):
            raise CaptureError(
                f"the signal table {settings.signal_table} is missing: run `cdcpipe schema apply` (it creates it)"
            )
        steps = _postgres_steps(settings, conn, tables)
        steps += _contract_steps(settings, conn, tables)
        current = client.config(settings.capture.capture_connector)
        if current is not None:
            _check_connector_runs(client, settings)
        generated = {t: columns for t in tables if (columns := catalog.read_generated(conn, t))}
        resumed: set[str] = set()  # filled by the connector's step, read by the snapshot's
        connector_steps, newly, config = _connector_steps(settings, current, tables, generated, resumed)
        prefix = config.get("topic.prefix", settings.capture.capture_topic_prefix)
        _check_names(tables, connector.captured_tables(current or {}, settings.names), prefix)
        # The topic first: created by Connect instead, it would get the broker's defaults, not the file's.
        steps += _topic_steps(settings, tables, prefix)
        initial = current is None and config.get("snapshot.mode", "initial") in INITIAL_MODES
        owed = [t for t in postgres.pending(conn, settings.names, settings.schema) if t in tables and t not in newly]
        if newly and snapshot and not initial:
            # Recorded before the connector captures them: a failure after that leaves the snapshot to a rerun.
            steps.append(
                Step("snapshot", ", ".join(newly), "record", "owed until it is asked for", _record(settings, newly))
            )
        steps += connector_steps
    kinds = [what for what, wanted in (("mirror", mirror), ("history", history)) if wanted]
    if group is not None:
        steps += group_steps(settings, group, tables, kinds, prefix, submit=submit)
    else:
        steps += job_steps(settings, tables, kinds, prefix)
    if owed:
        steps.append(snapshot_step(settings, owed, None, note="owed by an earlier run that did not finish"))
    if newly and initial:
        steps.append(
            Step(
                "snapshot",
                ", ".join(newly),
                "take",
                "the new connector's first snapshot (incremental if it resumes an earlier one's offsets)",
                _snapshot_if_resumed(settings, newly, resumed),
            )
        )
    elif newly and snapshot:
        steps.append(snapshot_step(settings, newly, None))
    if submit and group is None:
        steps += submit_steps(settings, [files.job_name(t, k) for t in tables for k in kinds])
    return steps


def _check_connector_runs(client: ConnectClient, settings: Settings) -> None:
    """The connector runs (or starts within a minute): a table added to a stopped or failed one would wait unsaid."""
    name = settings.capture.capture_connector
    report = connector_commands.status(client, settings.connect, name)
    if report.state in ("STOPPED", "PAUSED"):
        raise CaptureError(
            f"connector {name} is {report.state}: tables added to it are not captured until it runs again; "
            f"`cdcpipe connectors resume {name}`, then run this again. Nothing was changed"
        )
    try:
        connector_commands.wait_running(client, settings.connect, [name], timeout_s=60.0, steady_s=0.0)
    except CdcpipeError as exc:
        raise CaptureError(f"{exc}. Nothing was changed; run this again once it runs") from exc


def _check_names(tables: list[str], captured: list[str], prefix: str) -> None:
    """No two tables share a topic or a job name once their names are sanitised; checked before any change."""
    namings: list[tuple[str, Callable[[str], str]]] = [
        ("topic", lambda t: files.topic_of(prefix, t)),
        ("job name", lambda t: files.job_name(t, "mirror")),
    ]
    for what, name_of in namings:
        seen: dict[str, str] = {}
        for table in dict.fromkeys([*captured, *tables]):
            name = name_of(table)
            other = seen.setdefault(name, table)
            if other != table:
                raise CaptureError(
                    f"{other} and {table} would share the {what} {name} (topic names keep only A-Z a-z 0-9 . _ -, "
                    "as Debezium writes them; job names only a-z 0-9 _): capture one of them with a connector of "
                    "its own (CDCPIPE_CAPTURE_CONNECTOR and CDCPIPE_CAPTURE_TOPIC_PREFIX), or rename it"
                )


def _postgres_steps(settings: Settings, conn: psycopg.Connection[Any], tables: list[str]) -> list[Step]:
    steps = []
    role = settings.schema.debezium_role
    for table in tables:
        missing = postgres.missing_grants(conn, settings.schema, table)
        steps.append(
            Step(
                "postgres", f"grants on {table}", "grant", f"{' and '.join(missing)} to {role}", _grant(settings, table)
            )
            if missing
            else Step("postgres", f"grants on {table}", "unchanged", f"{role} may read it")
        )
    held = postgres.published(conn, settings.schema) or set()
    missing_tables = [t for t in tables if t not in held]
    publication = settings.schema.tables_publication
    if missing_tables:
        steps.append(
            Step(
                "postgres",
                f"publication {publication}",
                "add",
                ", ".join(missing_tables),
                _publish(settings, missing_tables),
            )
        )
    else:
        steps.append(Step("postgres", f"publication {publication}", "unchanged", "carries every table"))
    return steps


def _grant(settings: Settings, table: str) -> Callable[[], None]:
    def grant() -> None:
        with postgres.connect(settings.schema) as conn:
            postgres.grant(conn, settings.schema, table)

    return grant


def _publish(settings: Settings, tables: list[str]) -> Callable[[], None]:
    def publish() -> None:
        with postgres.connect(settings.schema) as conn:
            postgres.publish(conn, settings.names, settings.schema, tables)

    return publish


def _contract_steps(settings: Settings, conn: psycopg.Connection[Any], tables: list[str]) -> list[Step]:
    folder = table_contracts.user_folder()
    if folder is None:
        raise CaptureError(
            f"where should the tables' row contracts go? set {table_contracts.DIRS_VARIABLE} to your folder "
            "(its first folder is where they are written)"
        )
    steps = []
    for table in tables:
        path = table_contracts.contract_path(folder, table)
        shadowed = [
            str(table_contracts.contract_path(f, table))
            for f in table_contracts.contract_folders()[1:]
            if table_contracts.contract_path(f, table).is_file()
        ]
        note = f"; it takes precedence over {', '.join(shadowed)}" if shadowed else ""
        if path.is_file():
            held = table_contracts.from_document(table, json.loads(path.read_text()), path)
            differs = catalog.differences(held, catalog.contract_document(conn, table))
            if not differs:
                steps.append(Step("contract", table, "unchanged", f"{path} agrees with the catalog{note}"))
                continue
            steps.append(
                Step(
                    "contract",
                    table,
                    "update",
                    f"{path}: a new version: {'; '.join(differs)}{note}",
                    _import(settings, table, folder),
                )
            )
        else:
            steps.append(
                Step("contract", table, "create", f"{path}, from the catalog{note}", _import(settings, table, folder))
            )
    return steps


def _import(settings: Settings, table: str, folder: Path) -> Callable[[], None]:
    def write() -> None:
        catalog.import_tables_with_settings(settings.schema, [table], folder)

    return write


def _topic_steps(settings: Settings, tables: list[str], prefix: str) -> list[Step]:
    folder = settings.topics.topics_dir
    if folder is None:
        raise CaptureError("where should the tables' topic files go? set CDCPIPE_TOPICS_DIR to your folder of *.toml")
    declared = topics.load(folder) if folder.is_dir() else topics.Declared([], [])  # made when written
    by_name = {t.name: t for t in declared.topics}
    name = settings.capture.capture_connector
    writes: list[files.File] = []
    specs = []
    for table in tables:
        topic = files.topic_of(prefix, table)
        spec = by_name.get(topic) or files.topic_spec(settings.capture, topic)
        if topic not in by_name:
            writes.append(files.topic_file(folder, name, table, spec))
        specs.append(spec)
    # The connector's own topics by name, so Connect needs no CREATE and no grant on a whole prefix.
    notifications = connector.notifications_topic({"topic.prefix": prefix})
    own_tables = [settings.heartbeat_table, settings.signal_table]
    own = files.connector_topics(settings.capture, prefix, own_tables, notifications)
    undeclared = [spec for spec in own if spec.name not in by_name]
    if undeclared:
        writes.append(files.connector_file(folder, name, undeclared))
    specs += [by_name.get(spec.name) or spec for spec in own]
    kafka = settings.topics.kafka.client_config()
    planned = topics.apply(kafka, specs, [], dry_run=True)
    steps = [Step("topic", w.path.name, "write", f"in {folder}", write(w)) for w in writes]
    changing = [a for a in planned if a.action in ("created", "configured", "granted")]

    def apply() -> None:
        topics.apply(kafka, specs, [])

    for applied in planned:
        verb = {"created": "create", "configured": "configure", "granted": "grant"}.get(applied.action, applied.action)
        detail = "; ".join(d for d in (applied.detail, applied.acls) if d)
        # One `topics apply` does every change of the plan: the first changing line runs it.
        run = None if applied not in changing else apply if applied is changing[0] else _nothing
        steps.append(Step("topic", applied.name, verb, detail, run))
    return steps


def _nothing() -> None:
    """A step done by an earlier one (one `topics apply` creates every topic and grant of the plan)."""


def _connector_steps(
    settings: Settings,
    current: dict[str, str] | None,
    tables: list[str],
    generated: dict[str, list[str]],
    resumed: set[str],
) -> tuple[list[Step], list[str], dict[str, str]]:
    """The connector's change, the tables it starts capturing (to snapshot), and its config after."""
    name = settings.capture.capture_connector
    folder = settings.connect.connectors_dir
    signal = settings.signal_table
    if current is None:
        source = connector.definition_file(folder, name) if folder else None
        if source is not None:
            base = next(d for d in definitions.load(source) if d.name == name).config
            config = connector.with_tables(base, tables, signal, generated)
        else:
            config = connector.new_config(settings.capture, settings.schema, settings.names, tables, generated)
        newly = tables
        action, detail = "create", f"capturing {', '.join(tables)}"
    else:
        current = {k: v for k, v in current.items() if k != "name"}  # Connect's copy names it; a definition does not
        config = connector.with_tables(current, tables, signal, generated)
        newly = [t for t in tables if connector.captured_by(current, t) is None]
        action = "update" if config != current else "unchanged"
        detail = f"adds {', '.join(newly)} to {connector.INCLUDE}" if newly else "captures every table already"
        if action == "update" and not newly:
            detail = f"sets its signal table ({signal}) and its notifications topic"
    steps = []
    if action != "unchanged":
        steps.append(
            Step(
                "connector",
                name,
                action,
                detail,
                _apply_connector(settings, config, resumed),
            )
        )
    else:
        steps.append(Step("connector", name, "unchanged", detail))
    if folder is not None:
        path = connector.definition_file(folder, name)
        stored = None if path is None else next(d for d in definitions.load(path) if d.name == name).config
        if stored != config:
            target = path or folder / f"{name}.json"
            steps.append(
                Step(
                    "connector",
                    str(target),
                    "write",
                    "its definition, in step with Connect",
                    write_definition(folder, name, config),
                )
            )
    else:
        steps.append(
            Step(
                "connector",
                "definition file",
                "skip",
                "CDCPIPE_CONNECTORS_DIR is unset: no file is kept in step; `connectors apply` of an older file would undo this",
            )
        )
    return steps, newly, config


def _apply_connector(settings: Settings, config: dict[str, str], resumed: set[str]) -> Callable[[], None]:
    name = settings.capture.capture_connector

    def apply() -> None:
        with ConnectClient(settings.connect) as client:
            definition = connector.as_definition(name, config, settings.connect.connectors_dir or Path("."))
            connector_commands.apply_definitions(client, [definition], settings=settings.connect, resumed=resumed)
            _wait_tasks_run(client, settings, name, config)

    return apply


def _snapshot_if_resumed(settings: Settings, tables: list[str], resumed: set[str]) -> Callable[[], None]:
    """The tables' incremental snapshot, if the connector was made resuming an earlier one's offsets.

    A connector made again under a name whose offsets Connect kept (deleted without --drop-slot) streams on
    from them and snapshots nothing, whatever its snapshot.mode.
    """

    def request() -> None:
        if settings.capture.capture_connector in resumed:
            with postgres.connect(settings.schema) as conn:
                postgres.request_snapshot(conn, settings.names, settings.schema, tables, None)

    return request


def _wait_tasks_run(client: ConnectClient, settings: Settings, name: str, config: dict[str, str]) -> None:
    """Until every task runs `config`'s include list: a snapshot asked of an older task would be lost."""
    deadline = time.monotonic() + TASKS_WITHIN_S
    while True:
        tasks = client.task_configs(name)
        if tasks and all(t.get(connector.INCLUDE) == config[connector.INCLUDE] for t in tasks):
            break
        if time.monotonic() > deadline:
            raise CaptureError(
                f"the tasks of {name} do not run its new {connector.INCLUDE} {TASKS_WITHIN_S:.0f} s after the change; "
                f"`cdcpipe connectors status {name}` says why"
            )
        time.sleep(0.5)
    connector_commands.wait_running(client, settings.connect, [name], timeout_s=TASKS_WITHIN_S, steady_s=3.0)


def _record(settings: Settings, tables: list[str]) -> Callable[[], None]:
    def record() -> None:
        with postgres.connect(settings.schema) as conn:
            postgres.record_pending(conn, settings.names, settings.schema, tables)

    return record
