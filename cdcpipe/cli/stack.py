"""`cdcpipe stack`: the local stack's services (infra)."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from cdcpipe.cli.common import settings_help
from infra import checks, stack
from infra.config import StackSettings
from monitor import collector

app = typer.Typer(
    help="The local stack: PostgreSQL, Kafka (KRaft), Kafka Connect + Debezium, optionally Spark standalone.",
    epilog=settings_help(StackSettings),
    no_args_is_help=True,
)


@app.command("up")
def stack_up(
    spark_cluster: bool = typer.Option(False, "--spark-cluster", help="also start a Spark master and its workers"),
    workers: int | None = typer.Option(
        None, "--workers", help="Spark workers to start with --spark-cluster (default: CDCPIPE_SPARK_WORKERS, 1)"
    ),
    cluster: bool = typer.Option(
        False,
        "--cluster",
        help="a production-shaped stack: 3 Kafka nodes (3 replicas, 2 in sync), 2 Connect workers in one group, "
        "the Spark master and 2 workers",
    ),
) -> None:
    """Start every service not yet running, one at a time, each once the previous is healthy."""
    overrides: dict[str, int] = {"kafka_nodes": 3, "connect_workers": 2, "spark_workers": 2} if cluster else {}
    if workers is not None:
        overrides["spark_workers"] = workers
    settings = StackSettings.load(**overrides)
    stack.up(settings, spark_cluster=spark_cluster or cluster, report=typer.echo, collector=collector.COMMAND)


@app.command("status")
def stack_status(as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")) -> None:
    """Each service: pid, address, healthy or not, memory; for a dead one its last log lines."""
    rows = stack.status(StackSettings.load())
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        typer.echo(f"{'service':<15} {'pid':<8} {'address':<24} {'rss':>8}  state")
        for row in rows:
            rss = f"{row.rss_bytes / 2**20:.0f} MiB" if row.rss_bytes else "-"
            typer.echo(f"{row.service:<15} {row.pid or '-'!s:<8} {row.address:<24} {rss:>8}  {row.detail}")
            for line in row.log_tail:
                typer.echo(f"    | {line}")
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


@app.command("down")
def stack_down(purge: bool = typer.Option(False, "--purge", help="also delete all data and logs")) -> None:
    """Stop exactly the processes `up` started (by pid). Data stays unless --purge."""
    stopped = stack.down(StackSettings.load(), purge=purge, report=typer.echo)
    if not stopped:
        typer.echo("nothing was running")


@app.command("check")
def stack_check(
    master: str = typer.Option("local[2]", help="where the Spark job runs: local[N] or spark://HOST:PORT"),
    count: int = typer.Option(1000, min=1, help="records to send through"),
) -> None:
    """Send sample records through Kafka into a Delta table with Spark, and read them back."""
    result = checks.round_trip(StackSettings.load(), master=master, count=count, report=typer.echo)
    typer.echo(json.dumps(result, indent=2))
    typer.echo(f"ok: {count} records went Kafka -> Spark -> Delta in {result['seconds']}s")


@app.command("env")
def stack_env() -> None:
    """Shell exports for the running stack: eval "$(cdcpipe stack env)"."""
    for line in stack.env_exports(StackSettings.load()):
        typer.echo(line)
