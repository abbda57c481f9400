"""`cdcpipe tables remove`: a table taken out of every part `add` put it in, the others left as they are."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from capture import connector, files, postgres
from capture.plan import (
    MARK,
    Settings,
    Step,
    await_members,
    opened,
    write,
    write_definition,
)
from connectors.client import ConnectClient
from streaming_jobs.jobs.spec import JobSpec, load_all
from streaming_jobs.run import control


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
    with opened(settings) as (conn, client):
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
                            write_definition(folder, name, config),
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
    steps = [Step("job", group.name, "update", f"{group.file}: {', '.join(gone)} out of the group", write(file))]
    if running:
        expected = {files.job_name(t, what) for t, _ in kept for what in group.members}
        steps.append(
            Step(
                "submit",
                group.name,
                "leave",
                "the running driver reads its file again and stops their jobs between two batches; the others go on",
                await_members(settings, group.name, expected),
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
