"""The `cdcpipe` command: a thin layer that hands each command to its stage.

One module per command group (`cdcpipe/cli/<group>.py`); each command parses its arguments, calls one
stage function and prints. `main` turns a CdcpipeError into its message and exit code 2.
"""

from __future__ import annotations

import importlib
import sys

import typer

from ground.errors import CdcpipeError

# The command groups, each a module of this package with its own `app`.
GROUPS = ("stack", "schema", "topics", "relay", "connectors", "jobs", "tables")


def build(group: str | None = None) -> typer.Typer:
    """The command line; with `group`, that group alone (a command of one group need not import the others)."""
    app = typer.Typer(
        help="Change data capture from PostgreSQL through Kafka into Delta Lake: outbox relay, Debezium, Spark jobs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name in GROUPS if group is None else (group,):
        app.add_typer(importlib.import_module(f"cdcpipe.cli.{name}").app, name=name)
    if group is None:
        from cdcpipe.cli import status

        app.command("status")(status.status)
        app.command("demo")(demo)
    return app


def demo() -> None:
    """Run a sample workload through the running stack: emit -> relay -> Kafka -> Spark -> Delta, and check it."""
    from demo import run as sample

    sample.run(typer.echo)


def __getattr__(name: str) -> typer.Typer:
    # `cli.app`, every command (the tests' CliRunner, the settings reference), built when first asked for.
    if name == "app":
        app = build()
        globals()["app"] = app
        return app
    raise AttributeError(name)


def main() -> None:
    """Entry point: a CdcpipeError is a message for the user, not a traceback.

    Scripts and tests run `cdcpipe` hundreds of times a day: a group's command imports that group alone (each
    group pulls in its stage's clients), not all of them; `--help` and the other commands get the whole line.
    """
    first = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        build(first if first in GROUPS else None)()
    except CdcpipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
