"""`cdcpipe tables add | remove | snapshot | list`: plan every part, show it, then change what differs.

A plan is a list of steps in the order they must run: Postgres (grants, publication), the row contract, the
topic (created before the connector names it, so it gets its declared partitions and ACLs), the connector,
the job files, the snapshot request, the jobs' start. Each step says what it would change; a step with
nothing to change is shown as `unchanged`, which is what a second run shows throughout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from capture import connector, files, postgres
from capture.config import CaptureSettings, own_name
from capture.errors import CaptureError
from connectors import commands as connector_commands
from connectors import definitions
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from ground.errors import CdcpipeError
from schemas import catalog, table_contracts, topics
from schemas.config import OutboxNames, SchemaSettings
from streaming_jobs.config import JobsSettings
from streaming_jobs.jobs.spec import GROUP, JobSpec, check_name, load_all
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


@contextmanager
def _opened(settings: Settings) -> Iterator[tuple[psycopg.Connection[Any], ConnectClient]]:
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


# --- add ---------------------------------------------------------------------------------------------------


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
    with _opened(settings) as (conn, client):
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
        steps += _group_steps(settings, group, tables, kinds, prefix, submit=submit)
    else:
        steps += _job_steps(settings, tables, kinds, prefix)
    if owed:
        steps.append(_snapshot_step(settings, owed, None, note="owed by an earlier run that did not finish"))
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
        steps.append(_snapshot_step(settings, newly, None))
    if submit and group is None:
        steps += _submit_steps(settings, [files.job_name(t, k) for t in tables for k in kinds])
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
    grants = files.uncovered(declared, files.connector_grants(settings.capture, prefix))
    if grants:
        writes.append(files.grants_file(folder, name, grants))
    kafka = settings.topics.kafka.client_config()
    planned = topics.apply(kafka, specs, grants, dry_run=True)
    steps = [Step("topic", w.path.name, "write", f"in {folder}", _write(w)) for w in writes]
    changing = [a for a in planned if a.action in ("created", "configured", "granted")]

    def apply() -> None:
        topics.apply(kafka, specs, grants)

    for applied in planned:
        verb = {"created": "create", "configured": "configure", "granted": "grant"}.get(applied.action, applied.action)
        detail = "; ".join(d for d in (applied.detail, applied.acls) if d)
        # One `topics apply` does every change of the plan: the first changing line runs it.
        run = None if applied not in changing else apply if applied is changing[0] else _nothing
        steps.append(Step("topic", applied.name, verb, detail, run))
    return steps


def _nothing() -> None:
    """A step done by an earlier one (one `topics apply` creates every topic and grant of the plan)."""


def _write(file: files.File) -> Callable[[], None]:
    def write() -> None:
        file.path.parent.mkdir(parents=True, exist_ok=True)
        file.path.write_text(file.text)

    return write


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
                    _write_definition(folder, name, config),
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


def _write_definition(folder: Path, name: str, config: dict[str, str]) -> Callable[[], None]:
    def write() -> None:
        connector.write_definition(folder, name, config)

    return write


def _job_steps(settings: Settings, tables: list[str], kinds: list[str], prefix: str) -> list[Step]:
    if not kinds:
        return []
    if not settings.jobs.jobs_dirs:
        raise CaptureError("where should the job files go? set CDCPIPE_JOBS_DIRS to your folder(s) of job files")
    folder = settings.jobs.jobs_dirs[0]
    existing = load_all(list(settings.jobs.jobs_dirs)) if any(d.is_dir() for d in settings.jobs.jobs_dirs) else {}
    steps = []
    for table in tables:
        for what in kinds:
            file = files.job_file(folder, table, what, files.topic_of(prefix, table))
            name = files.job_name(table, what)
            if name in existing:
                spec = existing[name]
                _check_same_job(spec, table, what)
                steps.append(Step("job", name, "unchanged", f"declared in {spec.file}"))
            else:
                steps.append(Step("job", name, "write", str(file.path), _write(file)))
    return steps


def _group_steps(
    settings: Settings, name: str, tables: list[str], kinds: list[str], prefix: str, *, submit: bool
) -> list[Step]:
    """The group's file with `tables` in it (made, or the tables added), and its driver started or restarted."""
    if not kinds:
        raise CaptureError(f"what should group {name} run for the tables? give --mirror and/or --history")
    check_name(name)
    if not settings.jobs.jobs_dirs:
        raise CaptureError("where should the job files go? set CDCPIPE_JOBS_DIRS to your folder(s) of job files")
    existing = load_all(list(settings.jobs.jobs_dirs)) if any(d.is_dir() for d in settings.jobs.jobs_dirs) else {}
    current = existing.get(name)
    if current is not None and current.kind != GROUP:
        raise CaptureError(f"job {name} ({current.file}) is a {current.kind}, not a table group: choose another name")
    held = list(current.tables) if current else []
    topics = list(current.topics) if current else []
    members: list[str] = list(current.members) if current else kinds
    if current is not None and set(kinds) - set(members):
        raise CaptureError(
            f"group {name} runs {' and '.join(members)} jobs ({current.file}); add {' and '.join(kinds)} there "
            "(members = [...]) or use a group of its own"
        )
    for table in tables:
        for what in members:
            job = existing.get(files.job_name(table, what))
            if job is not None and job.group != name:
                raise CaptureError(
                    f"{table} already has the job {job.name} ({job.file}): a table runs in one job or one group; "
                    f"`cdcpipe tables remove {table}` first (its Delta table and checkpoint stay, and the group "
                    "takes them over where they are), or leave it out of the group"
                )
    added = [t for t in tables if t not in held]
    folder = current.file.parent if current is not None and current.file else settings.jobs.jobs_dirs[0]
    listed, read = held + added, topics + [files.topic_of(prefix, t) for t in added]
    if current is not None and current.file is not None and added:
        # The file as it is (a policy or a trigger the user set stays), with the new tables in its two lists.
        file = files.regrouped(current.file, current.file.read_text(), listed, read) or _hand_made(current.file, added)
    else:
        file = files.group_file(folder, name, listed, read, members)
    if not added:
        steps = [Step("job", name, "unchanged", f"group {current.file if current else file.path} runs every table")]
    else:
        verb = "update" if current is not None else "write"
        steps = [Step("job", name, verb, f"{file.path}: {', '.join(added)} in the group", _write(file))]
    running = control.tracked(settings.jobs, name).pid() is not None
    if running and added:
        expected = {files.job_name(t, what) for t in held + added for what in members}
        steps.append(
            Step(
                "submit",
                name,
                "join",
                "the running driver reads its file again and starts the new tables' jobs; the others go on",
                _await_members(settings, name, expected),
            )
        )
    elif submit and not running:
        steps.append(Step("submit", name, "start", "one driver for every table of the group", _submit(settings, name)))
    elif submit:
        steps.append(Step("submit", name, "unchanged", "running"))
    return steps


def _hand_made(file: Path, added: list[str]) -> files.File:
    raise CaptureError(
        f"{file}: its tables and topics lists are not in the form `tables add` writes (edited by hand?); add "
        f"{', '.join(added)} to `tables` and each one's topic to `topics` yourself, in the same order"
    )


def _await_members(settings: Settings, name: str, members: set[str]) -> Callable[[], None]:
    def wait() -> None:
        control.await_members(settings.jobs, name, members)

    return wait


def _check_same_job(spec: JobSpec, table: str, what: str) -> None:
    if spec.source_table != table or spec.kind != files.JOB_KINDS[what]:
        raise CaptureError(
            f"a job named {spec.name} ({spec.file}) exists but is a {spec.kind} of {spec.source_table}: rename it, "
            f"or remove it, for `tables add` to write the {what} of {table}"
        )


def _record(settings: Settings, tables: list[str]) -> Callable[[], None]:
    def record() -> None:
        with postgres.connect(settings.schema) as conn:
            postgres.record_pending(conn, settings.names, settings.schema, tables)

    return record


def _snapshot_step(
    settings: Settings, tables: list[str], where: str | None, *, stop: bool = False, note: str = ""
) -> Step:
    def request() -> None:
        with postgres.connect(settings.schema) as conn:
            postgres.request_snapshot(conn, settings.names, settings.schema, tables, where, stop=stop)

    if stop:
        return Step("snapshot", ", ".join(tables), "stop", "the rows sent so far stay sent", request)
    detail = "incremental, in chunks, beside the stream" + (f"; rows where {where}" if where else "")
    detail += f"; {note}" if note else ""
    return Step("snapshot", ", ".join(tables), "request", detail, request)


def _submit_steps(settings: Settings, names: list[str]) -> list[Step]:
    steps = []
    for name in names:
        if control.tracked(settings.jobs, name).pid() is not None:
            steps.append(Step("submit", name, "unchanged", "running"))
        else:
            steps.append(Step("submit", name, "start", "in the background", _submit(settings, name)))
    return steps


def _submit(settings: Settings, name: str) -> Callable[[], None]:
    def submit() -> None:
        control.submit(settings.jobs, name, master=None, trigger=None)

    return submit


# --- snapshot ----------------------------------------------------------------------------------------------


def plan_snapshot(settings: Settings, tables: list[str], where: str | None, *, stop: bool = False) -> list[Step]:
    """An incremental snapshot of tables the connector captures (`stop`: the end of the one running)."""
    name = settings.capture.capture_connector
    with ConnectClient(settings.connect) as client:
        config = client.config(name)
    if config is None:
        raise CaptureError(f"there is no connector {name}: `cdcpipe tables add {' '.join(tables)}` captures them first")
    for table in tables:
        if connector.captured_by(config, table) is None:
            raise CaptureError(f"{name} does not capture {table}: `cdcpipe tables add {table}` first")
    if config.get("signal.data.collection") != settings.signal_table:
        raise CaptureError(
            f"{name} reads no signals from {settings.signal_table} (signal.data.collection): "
            f"`cdcpipe tables add {' '.join(tables)}` sets it"
        )
    if stop:
        return [_snapshot_step(settings, tables, None, stop=True)]
    if where is not None:
        with postgres.connect(settings.schema) as conn:
            for table in tables:
                postgres.check_condition(conn, settings.schema, table, where)
    return [_snapshot_step(settings, tables, where)]


# --- remove ------------------------------------------------------------------------------------------------


def plan_remove(settings: Settings, tables: list[str]) -> list[Step]:
    """Stop and remove the jobs `add` wrote, stop capturing, take the tables out of the publication.

    Kept: the topics and their files (their data stays until retention), the contracts (replays read them),
    the Delta tables, the replication slot and the publication.
    """
    name = settings.capture.capture_connector
    steps: list[Step] = []
    jobs = load_all(list(settings.jobs.jobs_dirs)) if settings.jobs.jobs_dirs else {}
    for group in sorted({j.group for j in jobs.values() if j.group and j.source_table in tables}):
        steps += _out_of_group(settings, jobs[group], tables)
    for spec in sorted(jobs.values(), key=lambda s: s.name):
        if spec.source_table not in tables or spec.group is not None:
            continue
        if spec.file is None or MARK not in spec.file.read_text():
            steps.append(
                Step("job", spec.name, "keep", f"{spec.file} is not one `tables add` wrote; remove it yourself")
            )
            continue
        if control.tracked(settings.jobs, spec.name).pid() is not None:
            steps.append(Step("job", spec.name, "stop", "the batch in flight finishes", _stop(settings, spec.name)))
        steps.append(Step("job", spec.name, "remove", f"{spec.file}; its Delta table stays", _unlink(spec.file)))
    with _opened(settings) as (conn, client):
        current = client.config(name)
        if current is not None:
            config = connector.without_tables(current, tables)
            if config != current:
                left = connector.captured_tables(config, settings.names)
                detail = f"stops capturing {', '.join(tables)}" + (
                    ""
                    if left
                    else f"; it captures no table now: `cdcpipe connectors delete {name} --drop-slot` ends it"
                )
                steps.append(Step("connector", name, "update", detail, _put(settings, config)))
                folder = settings.connect.connectors_dir
                if folder is not None and connector.definition_file(folder, name) is not None:
                    steps.append(
                        Step(
                            "connector",
                            str(connector.definition_file(folder, name)),
                            "write",
                            "in step",
                            _write_definition(folder, name, config),
                        )
                    )
            else:
                steps.append(Step("connector", name, "unchanged", "captures none of them"))
        held = postgres.published(conn, settings.schema) or set()
        published = [t for t in tables if t in held]
        publication = settings.schema.tables_publication
        if published:
            steps.append(
                Step(
                    "postgres",
                    f"publication {publication}",
                    "drop",
                    ", ".join(published),
                    _unpublish(settings, published),
                )
            )
        else:
            steps.append(Step("postgres", f"publication {publication}", "unchanged", "carries none of them"))
    steps.append(
        Step(
            "kept", ", ".join(tables), "unchanged", "topics, contracts, Delta tables, the slot and the publication stay"
        )
    )
    return steps


def _out_of_group(settings: Settings, group: JobSpec, tables: list[str]) -> list[Step]:
    """The group's file without `tables` (their Delta tables and checkpoints stay), its driver restarted."""
    if group.file is None or MARK not in group.file.read_text():
        return [Step("job", group.name, "keep", f"{group.file} is not one `tables add` wrote; edit it yourself")]
    kept = [(t, topic) for t, topic in zip(group.tables, group.topics, strict=True) if t not in tables]
    running = control.tracked(settings.jobs, group.name).pid() is not None
    if not kept:
        steps = [Step("job", group.name, "stop", "its last tables go", _stop(settings, group.name))] if running else []
        return [
            *steps,
            Step("job", group.name, "remove", f"{group.file}; its tables' Delta tables stay", _unlink(group.file)),
        ]
    file = files.regrouped(group.file, group.file.read_text(), [t for t, _ in kept], [topic for _, topic in kept])
    if file is None:
        return [Step("job", group.name, "keep", f"{group.file}: its tables and topics were edited by hand; edit them")]
    gone = [t for t in group.tables if t in tables]
    steps = [Step("job", group.name, "update", f"{group.file}: {', '.join(gone)} out of the group", _write(file))]
    if running:
        expected = {files.job_name(t, what) for t, _ in kept for what in group.members}
        steps.append(
            Step(
                "submit",
                group.name,
                "leave",
                "the running driver reads its file again and stops their jobs between two batches; the others go on",
                _await_members(settings, group.name, expected),
            )
        )
    return steps


def _stop(settings: Settings, name: str) -> Callable[[], None]:
    def stop() -> None:
        control.stop(settings.jobs, name)

    return stop


def _unlink(path: Path) -> Callable[[], None]:
    def unlink() -> None:
        path.unlink(missing_ok=True)

    return unlink


def _put(settings: Settings, config: dict[str, str]) -> Callable[[], None]:
    def put() -> None:
        with ConnectClient(settings.connect) as client:
            client.put_config(settings.capture.capture_connector, config)

    return put


def _unpublish(settings: Settings, tables: list[str]) -> Callable[[], None]:
    def unpublish() -> None:
        with postgres.connect(settings.schema) as conn:
            postgres.unpublish(conn, settings.schema, tables)

    return unpublish


# --- list --------------------------------------------------------------------------------------------------


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
    with _opened(settings) as (conn, client):
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
