"""What each `cdcpipe connectors ...` command does, apart from printing."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors import definitions, slots
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.definitions import Change
from connectors.errors import ConnectError, ConnectorNotFoundError, DefinitionError
from connectors.slots import SlotStatus


def apply(
    client: ConnectClient, path: Path, *, dry_run: bool = False, settings: ConnectSettings | None = None
) -> list[Change]:
    """Validate every definition under `path` first; only if all pass, create or update what differs.

    A Postgres connector is created STOPPED, and started only once its offsets are known to fit its slot
    (`settings` say where Postgres is; without them it is created running). With `settings`, a Postgres
    connector's heartbeat query is planned on Postgres first (`slots.heartbeat_query_problem`).
    """
    return apply_definitions(client, definitions.load(path), dry_run=dry_run, settings=settings)


def apply_definitions(
    client: ConnectClient,
    loaded: list[definitions.Definition],
    *,
    dry_run: bool = False,
    settings: ConnectSettings | None = None,
    resumed: set[str] | None = None,
) -> list[Change]:
    """`apply` of definitions already loaded (or made by `cdcpipe tables add`).

    `resumed` gets the name of each connector created here that resumes from offsets an earlier connector of its
    name left (its slot kept): such a one takes no initial snapshot, whatever its snapshot.mode.
    """
    for definition in loaded:
        definitions.check_against_plugin(definition, client.validate({**definition.config, "name": definition.name}))
        problem = slots.heartbeat_query_problem(settings, definition.config) if settings is not None else None
        if problem:
            raise DefinitionError(f"{definition.source} ({definition.name})", {slots.HEARTBEAT_QUERY: [problem]})
    changes = [definitions.plan(d, client.config(d.name)) for d in loaded]
    users = slot_users(client) if any(_slot_of(c.definition.config) for c in changes) else {}
    for change in changes:
        slot = _slot_of(change.definition.config)
        other = users.get(slot or "")
        if slot and other is not None and other != change.definition.name:
            # Two connectors on one slot: one of them fails ("slot is active"), and each one's confirmed LSN
            # would move the other's: changes lost.
            raise DefinitionError(
                f"{change.definition.source} ({change.definition.name})",
                {"slot.name": [f"{slot} is the replication slot of connector {other}: give this one its own"]},
            )
    if not dry_run:
        for change in changes:
            name, config = change.definition.name, change.definition.config
            if change.action == "create" and settings is not None and _slot_of(config):
                client.create_stopped(name, config)
                if _check_offsets_fit_slot(client, settings, name, _slot_of(config) or "") and resumed is not None:
                    resumed.add(name)
                client.resume(name)
            elif change.action != "unchanged":
                client.put_config(name, config)
    return changes


def _slot_of(config: dict[str, str]) -> str | None:
    """The replication slot a Postgres connector streams from (Debezium's default name when unset)."""
    if "postgres" not in config.get("connector.class", "").lower():
        return None
    return config.get("slot.name", "debezium")


def _check_offsets_fit_slot(client: ConnectClient, settings: ConnectSettings, name: str, slot: str) -> bool:
    """Connect keeps a deleted connector's offsets under its name: a new one would resume from them.

    Resuming from an LSN of a slot that is gone fails the task at once, so such offsets are refused here
    (the connector stays STOPPED) with the way on. True when it resumes from offsets (of a slot that exists).
    """
    held = [o.get("offset") or {} for o in client.offsets(name).get("offsets", [])]
    lsns = [o["lsn"] for o in held if "lsn" in o]
    if lsns and slots.slot_status(settings, slot) is None:
        raise ConnectError(
            f"connector {name} was created STOPPED: Connect still holds offsets (LSN {max(lsns)}) of an earlier "
            f"connector of this name, whose replication slot {slot} no longer exists, so its task would fail at once. "
            f"Start it afresh (a new snapshot, per its snapshot.mode): `cdcpipe connectors offsets reset {name}`, "
            f"then `cdcpipe connectors resume {name}`"
        )
    return bool(lsns)


@dataclass(frozen=True)
class TaskState:
    """One task of a connector."""

    id: int
    state: str
    worker: str
    trace: str | None


@dataclass(frozen=True)
class ConnectorReport:
    """Everything `connectors status` shows about one connector."""

    name: str
    state: str
    worker: str
    tasks: list[TaskState]
    slot_name: str | None
    slot: SlotStatus | None
    advice: list[str]

    @property
    def healthy(self) -> bool:
        return self.state == "RUNNING" and all(t.state == "RUNNING" for t in self.tasks)

    @property
    def failed(self) -> bool:
        """The connector or one of its tasks FAILED: it stays so until restarted."""
        return self.state == "FAILED" or any(t.state == "FAILED" for t in self.tasks)


# Causes we recognise in a failed task's trace, and what to do about each.
ADVICE = [
    (
        re.compile(r"password authentication failed|no password supplied", re.I),
        "the worker cannot log in to Postgres: check CDCPIPE_DEBEZIUM_PASSWORD in the Connect worker's environment "
        "and run `cdcpipe schema apply` so the role's password matches",
    ),
    (
        re.compile(r"publication .* does not exist", re.I),
        "the publication is missing: run `cdcpipe schema apply` (publication.autocreate.mode is disabled)",
    ),
    (
        re.compile(r"replication slot .* is active", re.I),
        "another client holds the replication slot: give each connector its own slot.name",
    ),
    (
        re.compile(r"must be superuser or replication role|permission denied", re.I),
        "the connector's role lacks a privilege: run `cdcpipe schema apply`, which grants REPLICATION and SELECT",
    ),
    (
        re.compile(r"Connection refused|Connection to .* refused", re.I),
        "Postgres is not reachable from the worker: check database.hostname / database.port",
    ),
    (re.compile(r"wal_level", re.I), "Postgres needs wal_level=logical (the cdcpipe stack sets it)"),
    (
        # Kafka's client says it one way, Connect's topic admin another.
        re.compile(r"Not authorized to (?:access topics: \[([^\]]+)\]|(?:describe|create) topic\(s\) '([^']+)')", re.I),
        "Connect may not write topic(s) {0}: declare them (or their prefix) in a topic file of CDCPIPE_TOPICS_DIR "
        'with "User:connect" among the producers, and run `cdcpipe topics apply`',
    ),
    (
        re.compile(r"Topic (\S+) not present in metadata", re.I),
        "topic {0} does not exist and the cluster creates none on its own: declare it in a topic file of "
        "CDCPIPE_TOPICS_DIR and run `cdcpipe topics apply`",
    ),
]
# After a connector is created or changed, its tasks start, connect, snapshot and first produce: a task that
# cannot write its topics fails only then (the table connector's first heartbeat comes after 10 s). `apply`
# calls it running once every task has stayed RUNNING this long.
STEADY_S = 15.0


def shorten(trace: str | None, lines: int = 6) -> str | None:
    """The exception line and its causes: what a person reads first in a Java stack trace."""
    if not trace:
        return None
    keep = [ln for ln in trace.splitlines() if ln and not ln.lstrip().startswith(("at ", "..."))]
    return "\n".join(keep[:lines])


def status(client: ConnectClient, settings: ConnectSettings, name: str) -> ConnectorReport:
    """Connector and task states from Connect; the replication slot from Postgres."""
    raw = client.status(name)
    config = client.config(name) or {}
    tasks = [
        TaskState(int(t["id"]), str(t["state"]), str(t.get("worker_id", "")), shorten(t.get("trace")))
        for t in raw.get("tasks", [])
    ]
    connector = raw.get("connector", {})
    advice: list[str] = []
    traces = " ".join(filter(None, [connector.get("trace"), *(t.get("trace") for t in raw.get("tasks", []))]))
    for pattern, what in ADVICE:
        found = pattern.search(traces)
        if found:
            advice.append(what.format(*(g for g in found.groups() if g)))
    failed = connector.get("state") == "FAILED" or any(t.state == "FAILED" for t in tasks)
    if failed:
        advice.append(f"once fixed: `cdcpipe connectors restart {name} --failed-only`")
    slot_name = config.get("slot.name") if "postgres" in config.get("connector.class", "").lower() else None
    slot = slots.slot_status(settings, slot_name) if slot_name else None
    return ConnectorReport(
        name=name,
        state=str(connector.get("state", "UNKNOWN")),
        worker=str(connector.get("worker_id", "")),
        tasks=tasks,
        slot_name=slot_name,
        slot=slot,
        advice=advice,
    )


def wait_running(
    client: ConnectClient,
    settings: ConnectSettings,
    names: list[str],
    *,
    timeout_s: float,
    steady_s: float = STEADY_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Until each connector and its tasks are RUNNING and stay so for `steady_s`; ConnectError on a failure.

    The error names the failed connector or task, the first line of its cause, and what to do.
    """
    deadline = clock() + timeout_s
    steady_since: float | None = None
    reports: list[ConnectorReport] = []
    while True:
        reports = []
        unknown = []  # accepted, but no worker has started them yet: Connect answers 404 for their status until then
        for name in names:
            try:
                reports.append(status(client, settings, name))
            except ConnectorNotFoundError:
                unknown.append(name)
        for report in reports:
            if report.failed:
                raise ConnectError(failure(report))
        now = clock()
        healthy = not unknown and all(r.healthy and r.tasks for r in reports)
        steady_since = (now if steady_since is None else steady_since) if healthy else None
        if steady_since is not None and now - steady_since >= steady_s:
            return
        if now >= deadline:
            waiting = "; ".join(
                [f"{name} not started by any worker yet" for name in unknown]
                + [
                    f"{r.name} {r.state}, tasks {[t.state for t in r.tasks] or 'none yet'}"
                    for r in reports
                    if not r.healthy
                ]
            )
            waiting = waiting or f"every task RUNNING, but for less than {steady_s:.0f}s"
            raise ConnectError(
                f"not RUNNING within {timeout_s:.0f}s: {waiting}; "
                "`cdcpipe connectors status NAME` shows more, and the worker's log its cause"
            )
        sleep(1.0)


def _wait_connector_state(client: ConnectClient, name: str, state: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (now := client.status(name).get("connector", {}).get("state")) != state:
        if time.monotonic() > deadline:
            raise ConnectError(f"connector {name} is {now}, not {state}, after {timeout_s:.0f}s; try again")
        time.sleep(0.5)


def failure(report: ConnectorReport) -> str:
    """What failed (the connector or its first failed task), the first line of its cause, and the fix."""
    failed = [t for t in report.tasks if t.state == "FAILED"]
    what = f"task {failed[0].id} FAILED" if failed else "the connector FAILED"
    cause = next((line for t in failed for line in (t.trace or "").splitlines()[:1]), "")
    fix = "; ".join(report.advice) or f"`cdcpipe connectors status {report.name}` shows the whole trace"
    return f"connector {report.name}: {what}" + (f": {cause}" if cause else "") + f". Fix: {fix}"


@dataclass(frozen=True)
class Deletion:
    """What deleting a connector would leave behind, for the confirmation question."""

    name: str
    slot_name: str | None
    slot: SlotStatus | None
    publication: str | None
    slot_shared_with: tuple[str, ...] = ()  # other connectors streaming from the same slot
    publication_shared_with: tuple[str, ...] = ()  # other connectors reading the same publication


def deletion(client: ConnectClient, settings: ConnectSettings, name: str) -> Deletion:
    """What deleting `name` would touch: the connector, and what it leaves in Postgres."""
    config = client.config(name)
    if config is None:
        raise ConnectError(f"no connector named {name!r} (`cdcpipe connectors list` shows what exists)")
    slot_name = config.get("slot.name")
    others = {n: client.config(n) or {} for n in client.connectors() if n != name}
    postgres = {n: c for n, c in others.items() if "postgres" in c.get("connector.class", "").lower()}
    publication = config.get("publication.name")
    return Deletion(
        name=name,
        slot_name=slot_name,
        slot=slots.slot_status(settings, slot_name) if slot_name else None,
        publication=publication,
        # Debezium's defaults: slot `debezium`, publication `dbz_publication`.
        slot_shared_with=tuple(n for n, c in postgres.items() if c.get("slot.name", "debezium") == slot_name),
        publication_shared_with=tuple(
            n for n, c in postgres.items() if c.get("publication.name", "dbz_publication") == publication
        ),
    )


def delete(
    client: ConnectClient, settings: ConnectSettings, plan: Deletion, *, drop_slot: bool, drop_publication: bool
) -> list[str]:
    """Delete the connector, then (only if asked) its slot and publication. Returns what was done.

    With the slot, its offsets go too: Connect keeps a deleted connector's offsets under its name, and a
    connector made again under it (a repair, `tables remove` then `add`) would resume from an LSN of the
    dropped slot and fail at once. KIP-875 resets them while the connector is STOPPED, before it is deleted.
    """
    for asked, what, users in (
        (drop_slot, f"replication slot {plan.slot_name}", plan.slot_shared_with),
        (drop_publication, f"publication {plan.publication}", plan.publication_shared_with),
    ):
        if asked and users:
            raise ConnectError(
                f"the {what} of {plan.name} is also the one of {', '.join(users)}: dropping it would break "
                f"{'them' if len(users) > 1 else 'it'}. Nothing was changed; delete {plan.name} without that flag"
            )
    done = []
    if drop_slot:
        client.stop(plan.name)
        _wait_connector_state(client, plan.name, "STOPPED")
        client.reset_offsets(plan.name)
        done.append(f"reset the offsets of {plan.name}: a connector made again under this name starts afresh")
    client.delete(plan.name)
    done.append(f"deleted connector {plan.name}")
    if drop_slot and plan.slot is not None:
        slots.drop_slot(settings, plan.slot.name)
        done.append(f"dropped replication slot {plan.slot.name}")
    if drop_publication and plan.publication:
        slots.drop_publication(settings, plan.publication)
        done.append(f"dropped publication {plan.publication}")
    return done


def slot_users(client: ConnectClient) -> dict[str, str]:
    """Each slot name a Postgres connector on the cluster streams from, with that connector."""
    users: dict[str, str] = {}
    for name in client.connectors():
        config = client.config(name) or {}  # None: deleted since the listing
        if "postgres" in config.get("connector.class", "").lower():
            users[config.get("slot.name", "debezium")] = name  # Debezium's default slot name
    return users


def unused_slot(client: ConnectClient, settings: ConnectSettings, slot: str) -> slots.SlotStatus:
    """The slot `connectors drop-slot` may drop: one that exists and no connector uses, else ConnectError."""
    user = slot_users(client).get(slot)
    if user is not None:
        raise ConnectError(
            f"replication slot {slot} belongs to connector {user}; "
            f"delete both with `cdcpipe connectors delete {user} --drop-slot`"
        )
    found = slots.slot_status(settings, slot)
    if found is None:
        raise ConnectError(f"there is no replication slot {slot}; `cdcpipe connectors list` names the unused ones")
    return found


def orphaned_slots(client: ConnectClient, settings: ConnectSettings) -> list[slots.SlotStatus]:
    """Inactive logical slots no connector on the cluster uses: each holds WAL back until it is dropped.

    A slot outlives its connector unless the connector was deleted with --drop-slot, and Postgres keeps
    every byte of WAL the slot has not confirmed: left alone, it fills the database server's disk.
    """
    used = slot_users(client)
    return [slot for slot in slots.logical_slots(settings) if not slot.active and slot.name not in used]


def reset_offsets(client: ConnectClient, name: str) -> dict[str, Any]:
    """KIP-875 needs the connector STOPPED first; say so instead of letting Connect answer 400."""
    state = client.status(name).get("connector", {}).get("state")
    if state != "STOPPED":
        raise ConnectError(
            f"{name} is {state}: offsets can be reset only while it is stopped; "
            f"run `cdcpipe connectors stop {name}` first, then `cdcpipe connectors resume {name}` after the reset"
        )
    return client.reset_offsets(name)
