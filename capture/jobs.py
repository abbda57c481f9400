"""`cdcpipe tables add`'s job steps: a mirror or history job per table, or the tables in a group's file; their start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from capture import files
from capture.errors import CaptureError
from capture.plan import (
    Settings,
    Step,
    await_members,
    write,
)
from streaming_jobs.jobs.spec import GROUP, JobSpec, check_name, load_all
from streaming_jobs.run import control


def job_steps(settings: Settings, tables: list[str], kinds: list[str], prefix: str) -> list[Step]:
    """A job file per table and kind (`mirror`, `history`) in the first jobs folder; one there already is kept."""
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
                steps.append(Step("job", name, "write", str(file.path), write(file)))
    return steps


def group_steps(
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
        steps = [Step("job", name, verb, f"{file.path}: {', '.join(added)} in the group", write(file))]
    running = control.tracked(settings.jobs, name).pid() is not None
    if running and added:
        expected = {files.job_name(t, what) for t in held + added for what in members}
        steps.append(
            Step(
                "submit",
                name,
                "join",
                "the running driver reads its file again and starts the new tables' jobs; the others go on",
                await_members(settings, name, expected),
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


def _check_same_job(spec: JobSpec, table: str, what: str) -> None:
    if spec.source_table != table or spec.kind != files.JOB_KINDS[what]:
        raise CaptureError(
            f"a job named {spec.name} ({spec.file}) exists but is a {spec.kind} of {spec.source_table}: rename it, "
            f"or remove it, for `tables add` to write the {what} of {table}"
        )


def submit_steps(settings: Settings, names: list[str]) -> list[Step]:
    """Each job started in the background, unless it runs."""
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
