"""`cdcpipe relay`: our outbox relay, its status and redrive (outbox_relay)."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from cdcpipe.cli.common import settings_help
from outbox_relay import redrive, serve
from outbox_relay import status as outbox_status
from outbox_relay.config import RelaySettings
from schemas.config import OutboxNames, SchemaSettings

app = typer.Typer(
    help="Our outbox relay: outbox rows -> Kafka, in Debezium's EventRouter wire format.",
    epilog=settings_help(OutboxNames) + settings_help(RelaySettings),
    no_args_is_help=True,
)


@app.command("run")
def relay_run(
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
) -> None:
    """Publish until SIGTERM or Ctrl-C (then finish the batch in flight and exit 0)."""
    serve.serve(RelaySettings.load(), OutboxNames.load(), log_level=log_level)


@app.command("status")
def relay_status(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The leading relay, what publishing is stalled on (if anything), the backlog and the dead letters."""
    settings, names = RelaySettings.load(), OutboxNames.load()
    with outbox_status.connect(settings.dsn()) as conn:
        report = outbox_status.status(conn, names)
    if as_json:
        typer.echo(json.dumps(asdict(report), indent=2, default=str))
        return
    typer.echo(f"leader: {report.leader or 'none (no relay is publishing)'}")
    if report.leader_is_a_stranger:
        typer.echo(
            "LOCK HELD BY A STRANGER: that session's role may not delete from the outbox, so it is no relay, and no "
            "relay publishes while it holds the lock; end it (pg_terminate_backend(PID) as a superuser)"
        )
    for stall in report.stalls:
        if not stall.waiting:
            continue  # its events are gone: the stall is over (monitor.status reads it the same)
        typer.echo(
            f"STALLED since {stall.since} on topic {stall.topic}: {stall.waiting} events of aggregate types "
            f"{', '.join(stall.aggregate_types)} wait (every other topic flows): {stall.reason}"
        )
    if report.stalled_topic and not report.stalls and report.waiting:  # written by an older relay: it held every event
        typer.echo(f"STALLED since {report.stalled_since} on topic {report.stalled_topic}: {report.stalled_reason}")
    typer.echo(f"waiting: {report.waiting} events, the oldest {report.oldest_age_s:.1f}s old")
    typer.echo(
        f"dead letters: {report.dead_letters} ({report.dead_letters_overtaken} overtaken by a later event of "
        "their aggregate); `cdcpipe relay redrive` puts them back"
    )
    if report.stalled_topic or report.stalls or report.leader_is_a_stranger:
        raise typer.Exit(1)


@app.command("redrive")
def relay_redrive(
    reason: str | None = typer.Option(None, help="only dead letters whose reason contains this text"),
    aggregate_type: str | None = typer.Option(None, help="only dead letters of this aggregate type"),
    allow_reorder: bool = typer.Option(
        False,
        "--allow-reorder",
        help="also move dead letters a later event of their aggregate was published after (consumers see them late)",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="list what would move, move nothing"),
) -> None:
    """Put dead letters back into the outbox under their own seq, to be published once their cause is fixed."""
    names, settings = OutboxNames.load(), SchemaSettings.load()
    with outbox_status.connect(settings.pg_dsn.get_secret_value()) as conn:
        result = redrive.redrive(
            conn, names, reason=reason, aggregate_type=aggregate_type, allow_reorder=allow_reorder, dry_run=dry_run
        )
    verb = "would move" if dry_run else "moved"
    typer.echo(f"{verb} {len(result.moved)} dead letters back into {names.outbox_schema}.{names.outbox_table}")
    for ref in result.left_overtaken:
        typer.echo(
            f"left: seq {ref.seq} (event {ref.id}, {ref.aggregatetype} {ref.aggregateid}): a later event of its "
            "aggregate was published after it; --allow-reorder moves it anyway"
        )
