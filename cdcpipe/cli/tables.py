"""`cdcpipe tables`: capture Postgres tables in one command (capture)."""

from __future__ import annotations

import typer

from capture import add, listing, plan, remove, snapshot
from capture.config import CaptureSettings
from cdcpipe.cli.common import settings_help

app = typer.Typer(
    help="Capture Postgres tables: publication, contract, topic, connector, jobs and a snapshot, in one command.",
    epilog=settings_help(CaptureSettings),
    no_args_is_help=True,
)

TABLES = typer.Argument(None, help="schema.table, one or more")
SCHEMAS = typer.Option(None, "--schema", help="every table of this schema (repeatable)")
DRY_RUN = typer.Option(False, "--dry-run", help="print the plan; change nothing")


def _show(steps: list[plan.Step], *, dry_run: bool) -> None:
    if dry_run:
        for step in steps:
            typer.echo(step.line(done=False))
        typer.echo("dry run: nothing changed")
        return
    plan.run(steps, typer.echo)


@app.command("add")
def tables_add(
    tables: list[str] | None = TABLES,
    schemas: list[str] | None = SCHEMAS,
    mirror: bool = typer.Option(False, "--mirror", help="write a table_mirror job file (SCD type 1)"),
    history: bool = typer.Option(False, "--history", help="write a table_history job file (SCD type 2)"),
    submit: bool = typer.Option(False, "--submit", help="start the jobs written"),
    group: str | None = typer.Option(
        None, "--group", help="run the tables' jobs in this table group: one Spark driver for all of them"
    ),
    snapshot: bool = typer.Option(True, "--snapshot/--no-snapshot", help="snapshot the rows the tables already hold"),
    dry_run: bool = DRY_RUN,
) -> None:
    """Capture tables: grants and publication, contract, topic with ACLs, the table connector, jobs, a snapshot."""
    settings = plan.Settings.load()
    chosen = plan.resolve(settings, tables or [], schemas or [])
    steps = add.plan_add(
        settings, chosen, mirror=mirror, history=history, submit=submit, snapshot=snapshot, group=group
    )
    _show(steps, dry_run=dry_run)


@app.command("snapshot")
def tables_snapshot(
    tables: list[str] | None = TABLES,
    where: str | None = typer.Option(None, "--where", help="only rows matching this SQL condition"),
    stop: bool = typer.Option(False, "--stop", help="stop the tables' running snapshot instead"),
    dry_run: bool = DRY_RUN,
) -> None:
    """Snapshot the rows of captured tables again (Debezium's incremental snapshot, beside the stream)."""
    settings = plan.Settings.load()
    steps = snapshot.plan_snapshot(settings, plan.resolve(settings, tables or [], []), where, stop=stop)
    _show(steps, dry_run=dry_run)
    if not dry_run:
        typer.echo("progress: `cdcpipe tables list`")


@app.command("remove")
def tables_remove(
    tables: list[str] | None = TABLES,
    yes: bool = typer.Option(False, "--yes", help="do not ask"),
    dry_run: bool = DRY_RUN,
) -> None:
    """Stop capturing tables: their jobs stopped and files removed, the connector and publication without them."""
    settings = plan.Settings.load()
    steps = remove.plan_remove(settings, plan.resolve(settings, tables or [], []))
    if dry_run:
        _show(steps, dry_run=True)
        return
    for step in steps:
        typer.echo(step.line(done=False))
    if not yes and not typer.confirm("go ahead?", default=False):
        typer.echo("nothing changed")
        raise typer.Exit(1)
    plan.run(steps, typer.echo)


@app.command("list")
def tables_list() -> None:
    """Each captured table: contract, connector and tasks, topic, jobs with their lag, snapshot progress."""
    for line in listing.listing(plan.Settings.load()):
        typer.echo(line.table)
        typer.echo(f"  contract   {line.contract}")
        typer.echo(f"  connector  {line.connector}" + ("" if line.published else "; NOT in the publication"))
        typer.echo(f"  topic      {line.topic}")
        for job in line.jobs:
            lag = "lag ?" if job.lag is None else f"lag {job.lag}"
            state = "running" if job.running else f"stopped by an error: {job.error}" if job.error else "stopped"
            typer.echo(f"  job        {job.name} ({job.kind}): {state}, {lag}")
        typer.echo(f"  snapshot   {line.snapshot}")
