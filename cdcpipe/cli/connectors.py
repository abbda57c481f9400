"""`cdcpipe connectors`: Debezium connectors on Kafka Connect (connectors)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from cdcpipe.cli.common import settings_help
from connectors import commands as connector_commands
from connectors import slots
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.errors import ConnectError

app = typer.Typer(
    help="Debezium connectors on Kafka Connect, from versioned definition files of yours (the demo's: examples/connectors).",
    epilog=settings_help(ConnectSettings),
    no_args_is_help=True,
)


def _connect() -> tuple[ConnectClient, ConnectSettings]:
    settings = ConnectSettings.load()
    return ConnectClient(settings), settings


def _lifecycle(action: str, name: str) -> None:
    client, _ = _connect()
    with client:
        getattr(client, action)(name)
    typer.echo(f"{name}: {action} requested")


@app.command("apply")
def connectors_apply(
    path: Path | None = typer.Argument(
        None,
        help="a definition file, or a folder of them (default: CDCPIPE_CONNECTORS_DIR; the demo's: examples/connectors)",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and show the plan; change nothing"),
    wait_s: float = typer.Option(
        120.0, "--wait-s", min=1, help="how long to wait for each changed connector and its tasks to run"
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="return once Connect took the configs"),
) -> None:
    """Validate each definition, create or update what differs, then wait until what changed is RUNNING."""
    client, settings = _connect()
    path = path or settings.connectors_dir
    if path is None:
        raise ConnectError(
            "which definitions? give a file or folder, or set CDCPIPE_CONNECTORS_DIR to your folder of them"
        )
    with client:
        changes = connector_commands.apply(client, path, dry_run=dry_run, settings=settings)
        for change in changes:
            verb = {"create": "created", "update": "updated", "unchanged": "unchanged"}[change.action]
            if dry_run and change.action != "unchanged":
                verb = f"would be {verb}"
            typer.echo(f"{change.definition.name}: {verb} ({change.definition.source})")
            for line in change.diff if change.action == "update" or dry_run else []:
                typer.echo(f"    {line}")
        changed = [c.definition.name for c in changes if c.action != "unchanged"]
        if changed and not dry_run and not no_wait:
            connector_commands.wait_running(client, settings, changed, timeout_s=wait_s)
            typer.echo(f"{', '.join(changed)}: RUNNING, every task")


@app.command("list")
def connectors_list() -> None:
    """Every connector on the Connect cluster, with its state; and replication slots no connector uses."""
    client, settings = _connect()
    with client:
        for name in client.connectors():
            status = client.status(name)
            tasks = [t.get("state", "?") for t in status.get("tasks", [])]
            running = sum(1 for t in tasks if t == "RUNNING")
            state = status.get("connector", {}).get("state", "?")
            typer.echo(f"{name:<32} {state:<10} tasks running: {running}/{len(tasks)}")
        orphans = connector_commands.orphaned_slots(client, settings)
    for slot in orphans:
        typer.echo(
            f"replication slot {slot.name}: no connector uses it and it holds "
            f"{slots.human_bytes(slot.retained_wal_bytes)} of WAL on the database server; drop it with "
            f"`cdcpipe connectors drop-slot {slot.name}` (or point a connector's slot.name at it to resume)"
        )


@app.command("status")
def connectors_status(name: str, as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Connector and task states (a failure's trace, shortened, and what to do); the replication slot."""
    client, settings = _connect()
    with client:
        report = connector_commands.status(client, settings, name)
    if as_json:
        typer.echo(json.dumps(asdict(report), indent=2))
    else:
        typer.echo(f"{report.name}: {report.state} on {report.worker}")
        for task in report.tasks:
            typer.echo(f"  task {task.id}: {task.state} on {task.worker}")
            for line in (task.trace or "").splitlines():
                typer.echo(f"    | {line}")
        if report.slot_name:
            if report.slot is None:
                typer.echo(f"  slot {report.slot_name}: does not exist yet")
            else:
                slot = report.slot
                typer.echo(
                    f"  slot {slot.name}: {'active' if slot.active else 'INACTIVE'}, {slot.lag_bytes} bytes behind "
                    f"the current WAL, {slot.retained_wal_bytes} bytes of WAL retained"
                )
        for advice in report.advice:
            typer.echo(f"  -> {advice}")
    if not report.healthy:
        raise typer.Exit(1)


@app.command("pause")
def connectors_pause(name: str) -> None:
    """Pause the connector and its tasks (they keep their offsets)."""
    _lifecycle("pause", name)


@app.command("resume")
def connectors_resume(name: str) -> None:
    """Resume a paused or stopped connector."""
    _lifecycle("resume", name)


@app.command("stop")
def connectors_stop(name: str) -> None:
    """Stop the connector and shut its tasks down (needed before `offsets reset`)."""
    _lifecycle("stop", name)


@app.command("restart")
def connectors_restart(
    name: str, failed_only: bool = typer.Option(False, "--failed-only", help="restart only failed instances")
) -> None:
    """Restart the connector and its tasks."""
    client, _ = _connect()
    with client:
        client.restart(name, only_failed=failed_only)
    typer.echo(f"{name}: restart requested{' (failed instances only)' if failed_only else ''}")


@app.command("delete")
def connectors_delete(
    name: str,
    drop_slot: bool = typer.Option(False, "--drop-slot", help="also drop its replication slot"),
    drop_publication: bool = typer.Option(False, "--drop-publication", help="also drop its publication"),
    yes: bool = typer.Option(False, "--yes", help="do not ask (for scripts)"),
) -> None:
    """Delete the connector. Its slot and publication stay unless asked for (and confirmed)."""
    client, settings = _connect()
    with client:
        plan = connector_commands.deletion(client, settings, name)
        if (drop_slot or drop_publication) and not yes:
            if drop_slot and plan.slot is not None:
                typer.echo(
                    f"Dropping replication slot {plan.slot.name} loses the events it holds "
                    f"({plan.slot.lag_bytes} bytes of WAL not yet confirmed by the connector): a new connector "
                    "starts from now, or from a new snapshot."
                )
            if drop_publication and plan.publication:
                typer.echo(f"Dropping publication {plan.publication} stops every connector that uses it.")
            typer.confirm("Go on?", abort=True)
        for line in connector_commands.delete(
            client, settings, plan, drop_slot=drop_slot, drop_publication=drop_publication
        ):
            typer.echo(line)
    if plan.slot is not None and not drop_slot:
        typer.echo(f"kept replication slot {plan.slot.name}: it holds WAL until dropped (--drop-slot)")


@app.command("drop-slot")
def connectors_drop_slot(
    slot: str,
    yes: bool = typer.Option(False, "--yes", help="do not ask (for scripts)"),
) -> None:
    """Drop a replication slot no connector uses (one a deleted connector left behind)."""
    client, settings = _connect()
    with client:
        found = connector_commands.unused_slot(client, settings, slot)
    if not yes:
        typer.echo(
            f"Dropping replication slot {slot} frees {slots.human_bytes(found.retained_wal_bytes)} of WAL and loses "
            "the changes it holds for whoever streamed from it."
        )
        typer.confirm("Go on?", abort=True)
    slots.drop_slot(settings, slot)
    typer.echo(f"dropped replication slot {slot}")


@app.command("offsets")
def connectors_offsets(words: list[str] = typer.Argument(..., metavar="[reset] NAME")) -> None:
    """Show a connector's source offsets, or `offsets reset NAME` (the connector must be stopped)."""
    client, _ = _connect()
    with client:
        if words[0] == "reset" and len(words) == 2:
            connector_commands.reset_offsets(client, words[1])
            typer.echo(f"{words[1]}: offsets reset; `cdcpipe connectors resume {words[1]}` starts it from scratch")
        elif len(words) == 1 and words[0] != "reset":
            typer.echo(json.dumps(client.offsets(words[0]), indent=2))
        else:
            raise ConnectError("usage: cdcpipe connectors offsets NAME | cdcpipe connectors offsets reset NAME")
