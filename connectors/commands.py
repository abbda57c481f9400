"""What each `cdcpipe connectors ...` command does, apart from printing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors import definitions, slots
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.definitions import Change
from connectors.errors import ConnectError
from connectors.slots import SlotStatus


def apply(client: ConnectClient, path: Path, *, dry_run: bool = False) -> list[Change]:
    """Validate every definition under `path` first; only if all pass, create or update what differs."""
    loaded = definitions.load(path)
    for definition in loaded:
        definitions.check_against_plugin(definition, client.validate({**definition.config, "name": definition.name}))
    changes = [definitions.plan(d, client.config(d.name)) for d in loaded]
    if not dry_run:
        for change in changes:
            if change.action != "unchanged":
                client.put_config(change.definition.name, change.definition.config)
    return changes


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
]


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
        if pattern.search(traces):
            advice.append(what)
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


@dataclass(frozen=True)
class Deletion:
    """What deleting a connector would leave behind, for the confirmation question."""

    name: str
    slot_name: str | None
    slot: SlotStatus | None
    publication: str | None


def deletion(client: ConnectClient, settings: ConnectSettings, name: str) -> Deletion:
    """What deleting `name` would touch: the connector, and what it leaves in Postgres."""
    config = client.config(name)
    if config is None:
        raise ConnectError(f"no connector named {name!r} (`cdcpipe connectors list` shows what exists)")
    slot_name = config.get("slot.name")
    return Deletion(
        name=name,
        slot_name=slot_name,
        slot=slots.slot_status(settings, slot_name) if slot_name else None,
        publication=config.get("publication.name"),
    )


def delete(
    client: ConnectClient, settings: ConnectSettings, plan: Deletion, *, drop_slot: bool, drop_publication: bool
) -> list[str]:
    """Delete the connector, then (only if asked) its slot and publication. Returns what was done."""
    done = []
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
