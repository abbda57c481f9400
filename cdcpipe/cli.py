"""The `cdcpipe` command: a thin layer that hands each command to its stage."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict

import psycopg
import typer

from cdcpipe.errors import CdcpipeError
from cdcpipe.settings import StageSettings
from infra import checks, stack
from infra.config import StackSettings
from infra.errors import StackError
from outbox_relay.config import RelaySettings
from outbox_relay.metrics import RelayMetrics
from outbox_relay.relay import Relay
from schemas import outbox
from schemas.config import OutboxNames, SchemaSettings
from schemas.contracts import default_registry
from schemas.errors import SchemaError

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def settings_help(model: type[StageSettings]) -> str:
    """The settings a command reads, each with its environment variable: shown under --help."""
    # "\\[" keeps rich from reading the section name as markup.
    lines = [f"Settings (\\[{model.toml_section}] in $CDCPIPE_CONFIG or ./cdcpipe.toml, or environment):\n\n"]
    lines += [f"{var} (default {default or 'none'}): {text}\n\n" for var, default, text in model.describe()]
    return "".join(lines)


stack_app = typer.Typer(
    help="The local stack: PostgreSQL, Kafka (KRaft), Kafka Connect + Debezium, optionally Spark standalone.",
    epilog=settings_help(StackSettings),
    no_args_is_help=True,
)
app.add_typer(stack_app, name="stack")


@stack_app.command("up")
def stack_up(
    spark_cluster: bool = typer.Option(False, "--spark-cluster", help="also start a Spark master and one worker"),
) -> None:
    """Start every service not yet running, one at a time, each once the previous is healthy."""
    settings = StackSettings.load()
    stack.up(settings, spark_cluster=spark_cluster, report=typer.echo)


@stack_app.command("status")
def stack_status(as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")) -> None:
    """Each service: pid, address, healthy or not, memory; for a dead one its last log lines."""
    rows = stack.status(StackSettings.load())
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        typer.echo(f"{'service':<13} {'pid':<8} {'address':<24} {'rss':>8}  state")
        for row in rows:
            rss = f"{row.rss_bytes / 2**20:.0f} MiB" if row.rss_bytes else "-"
            typer.echo(f"{row.service:<13} {row.pid or '-'!s:<8} {row.address:<24} {rss:>8}  {row.detail}")
            for line in row.log_tail:
                typer.echo(f"    | {line}")
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


@stack_app.command("down")
def stack_down(purge: bool = typer.Option(False, "--purge", help="also delete all data and logs")) -> None:
    """Stop exactly the processes `up` started (by pid). Data stays unless --purge."""
    stopped = stack.down(StackSettings.load(), purge=purge, report=typer.echo)
    if not stopped:
        typer.echo("nothing was running")


@stack_app.command("check")
def stack_check(
    master: str = typer.Option("local[2]", help="where the Spark job runs: local[N] or spark://HOST:PORT"),
    count: int = typer.Option(1000, min=1, help="records to send through"),
) -> None:
    """Send sample records through Kafka into a Delta table with Spark, and read them back."""
    settings = StackSettings.load()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    topic = f"cdcpipe.stack-check.{stamp}"
    table = settings.lake / "stack-check" / stamp
    checks.produce_sample(settings, topic, count)
    typer.echo(f"produced {count} records to {topic}; running a Spark job on {master} ...")
    env = {**os.environ, "CDCPIPE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    # A child process: the Spark driver JVM lives and dies with the job, not with this command.
    proc = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-m",
            "streaming_jobs.stack_check",
            "--topic",
            topic,
            "--table",
            str(table),
            "--master",
            master,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise StackError(f"the Spark job failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    typer.echo(json.dumps(result, indent=2))
    if result["rows"] != count:
        raise StackError(f"sent {count} records but the Delta table at {table} holds {result['rows']}")
    typer.echo(f"ok: {count} records went Kafka -> Spark -> Delta in {result['seconds']}s")


@stack_app.command("env")
def stack_env() -> None:
    """Shell exports for the running stack: eval "$(cdcpipe stack env)"."""
    for line in stack.env_exports(StackSettings.load()):
        typer.echo(line)


schema_app = typer.Typer(
    help="The outbox schema, roles and event contracts.",
    epilog=settings_help(OutboxNames) + settings_help(SchemaSettings),
    no_args_is_help=True,
)
app.add_typer(schema_app, name="schema")


@schema_app.command("apply")
def schema_apply() -> None:
    """Create or update the outbox, its dead letters, roles, publication and heartbeat table (idempotent)."""
    names, settings = OutboxNames.load(), SchemaSettings.load()
    try:
        with psycopg.connect(settings.pg_dsn.get_secret_value(), connect_timeout=10) as conn:
            outbox.apply(conn, names, settings)
    except psycopg.OperationalError as exc:
        raise SchemaError(f"cannot connect to Postgres ({exc}); check CDCPIPE_PG_DSN and PGPASSFILE") from exc
    typer.echo(
        f"outbox {names.outbox_schema}.{names.outbox_table} ready (dead letters: {names.dead_letter_table}, "
        f"roles: {settings.writer_role}, {settings.relay_role}, publication: {settings.publication})"
    )


@schema_app.command("contracts")
def schema_contracts() -> None:
    """List the event contracts (type, version, aggregate type, file)."""
    for contract in default_registry():
        typer.echo(f"{contract.event_type:<24} v{contract.version:<3} {contract.aggregate_type:<16} {contract.path}")


relay_app = typer.Typer(
    help="Our outbox relay: outbox rows -> Kafka, in Debezium's EventRouter wire format.",
    epilog=settings_help(OutboxNames) + settings_help(RelaySettings),
    no_args_is_help=True,
)
app.add_typer(relay_app, name="relay")


@relay_app.command("run")
def relay_run(
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
) -> None:
    """Publish until SIGTERM or Ctrl-C (then finish the batch in flight and exit 0)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings, names = RelaySettings.load(), OutboxNames.load()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics = RelayMetrics()
    metrics.serve(settings.metrics_port)
    Relay(settings, names, stop=stop, metrics=metrics).run()


def main() -> None:
    """Entry point: a CdcpipeError is a message for the user, not a traceback."""
    try:
        app()
    except CdcpipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
