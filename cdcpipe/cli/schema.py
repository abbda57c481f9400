"""`cdcpipe schema`: the outbox schema, roles and event contracts (schemas)."""

from __future__ import annotations

from pathlib import Path

import typer

from cdcpipe.cli.common import settings_help
from schemas import catalog, outbox
from schemas.compatibility_report import compatibility_report
from schemas.config import OutboxNames, SchemaSettings
from schemas.contracts import default_registry

app = typer.Typer(
    help="The outbox schema, roles and event contracts.",
    epilog=settings_help(OutboxNames) + settings_help(SchemaSettings),
    no_args_is_help=True,
)


@app.command("apply")
def schema_apply() -> None:
    """Create or update the outbox, its dead letters, roles, publication and heartbeat table (idempotent)."""
    names, settings = OutboxNames.load(), SchemaSettings.load()
    outbox.apply_with_settings(names, settings)
    typer.echo(
        f"outbox {names.outbox_schema}.{names.outbox_table} ready (dead letters: {names.dead_letter_table}, "
        f"roles: {settings.writer_role}, {settings.relay_role}, {settings.monitor_role}, publication: {settings.publication})"
    )


@app.command("contracts")
def schema_contracts() -> None:
    """List the event contracts (type, version, aggregate type, file)."""
    for contract in default_registry():
        typer.echo(f"{contract.event_type:<24} v{contract.version:<3} {contract.aggregate_type:<16} {contract.path}")


@app.command("check")
def schema_check(
    event_types: list[str] = typer.Argument(None, help="event types to check (default: every one)"),
) -> None:
    """Each event contract version against the one before it: backward / forward, and the mode it declares."""
    failed = False
    for line, broken in compatibility_report(default_registry(), event_types or None):
        typer.echo(line)
        failed = failed or broken
    if failed:
        raise typer.Exit(1)


tables_app = typer.Typer(help="Table contracts of captured tables, from the Postgres catalog.", no_args_is_help=True)
app.add_typer(tables_app, name="tables")


@tables_app.command("import")
def tables_import(
    tables: list[str] = typer.Argument(..., help="schema.table, one or more"),
    folder: Path | None = typer.Option(
        None, "--dir", help="where to write (default: first of CDCPIPE_TABLE_CONTRACT_DIRS)"
    ),
    check: bool = typer.Option(
        False, "--check", help="write nothing; report each contract that differs from the catalog"
    ),
) -> None:
    """Write each table's contract from the catalog (columns, types, nullability, key), or --check them."""
    settings = SchemaSettings.load()
    if check:
        problems = catalog.check_tables_with_settings(settings, tables)
        for line in problems:
            typer.echo(line)
        if problems:
            raise typer.Exit(1)
        typer.echo(f"{len(tables)} contract(s) agree with the catalog")
        return
    for path in catalog.import_tables_with_settings(settings, tables, folder):
        typer.echo(f"wrote {path}")
