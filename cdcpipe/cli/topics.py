"""`cdcpipe topics`: Kafka topics from versioned files (schemas.topics)."""

from __future__ import annotations

import typer

from cdcpipe.cli.common import settings_help
from schemas import topics
from schemas.topics import TopicSettings

app = typer.Typer(
    help="Kafka topics from versioned files (*.toml in $CDCPIPE_TOPICS_DIR): the cluster creates none on its own.",
    epilog=settings_help(TopicSettings),
    no_args_is_help=True,
)


@app.command("apply")
def topics_apply(
    dry_run: bool = typer.Option(False, "--dry-run", help="say what would change, change nothing"),
) -> None:
    """Create the declared topics that are missing; set their declared config keys (partitions never change)."""
    settings = TopicSettings.load()
    declared = topics.load(settings.topics_dir)
    for applied in topics.apply(settings.kafka.client_config(), declared.topics, declared.prefixes, dry_run=dry_run):
        action = (
            f"would be {applied.action}"
            if dry_run and applied.action in ("created", "configured", "granted")
            else applied.action
        )
        details = "; ".join(d for d in (applied.detail, applied.acls) if d)
        typer.echo(f"{applied.name}: {action}" + (f" ({details})" if details else ""))
