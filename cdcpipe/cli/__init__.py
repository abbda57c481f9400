"""The `cdcpipe` command: a thin layer that hands each command to its stage.

One module per command group (`cdcpipe/cli/<group>.py`); each command parses its arguments, calls one
stage function and prints. `main` turns a CdcpipeError into its message and exit code 2.
"""

from __future__ import annotations

import sys

import typer

from cdcpipe.cli import connectors, jobs, relay, schema, stack, status, tables, topics
from cdcpipe.common.errors import CdcpipeError

app = typer.Typer(
    help="Change data capture from PostgreSQL through Kafka into Delta Lake: outbox relay, Debezium, Spark jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for group in (stack, schema, topics, relay, connectors, jobs, tables):
    app.add_typer(group.app, name=group.__name__.rsplit(".", 1)[1])


app.command("status")(status.status)


@app.command("demo")
def demo() -> None:
    """Run a sample workload through the running stack: emit -> relay -> Kafka -> Spark -> Delta, and check it."""
    from demo import run as sample

    sample.run(typer.echo)


def main() -> None:
    """Entry point: a CdcpipeError is a message for the user, not a traceback."""
    try:
        app()
    except CdcpipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
