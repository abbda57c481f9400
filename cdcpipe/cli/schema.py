"""`cdcpipe schema`: the outbox schema, roles and event contracts (schemas)."""

from __future__ import annotations

import typer

from cdcpipe.cli.common import settings_help
from schemas import outbox
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
        f"roles: {settings.writer_role}, {settings.relay_role}, publication: {settings.publication})"
    )


@app.command("contracts")
def schema_contracts() -> None:
    """List the event contracts (type, version, aggregate type, file)."""
    for contract in default_registry():
        typer.echo(f"{contract.event_type:<24} v{contract.version:<3} {contract.aggregate_type:<16} {contract.path}")
