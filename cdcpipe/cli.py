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
from pathlib import Path

import psycopg
import typer

from cdcpipe.errors import CdcpipeError
from cdcpipe.settings import StageSettings
from connectors import commands as connector_commands
from connectors import slots
from connectors.client import ConnectClient
from connectors.config import DEFINITIONS_DIR, ConnectSettings
from connectors.errors import ConnectError
from infra import checks, stack
from infra.config import StackSettings
from infra.errors import StackError
from outbox_relay import redrive
from outbox_relay.config import RelaySettings
from outbox_relay.metrics import RelayMetrics
from outbox_relay.relay import Relay
from schemas import outbox, topics
from schemas.config import OutboxNames, SchemaSettings
from schemas.contracts import default_registry
from schemas.errors import SchemaError
from schemas.topics import TopicSettings
from streaming_jobs.config import SparkSettings

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


topics_app = typer.Typer(
    help="Kafka topics from versioned files (schemas/topics/*.toml): the cluster creates none on its own.",
    epilog=settings_help(TopicSettings),
    no_args_is_help=True,
)
app.add_typer(topics_app, name="topics")


@topics_app.command("apply")
def topics_apply(
    dry_run: bool = typer.Option(False, "--dry-run", help="say what would change, change nothing"),
) -> None:
    """Create the declared topics that are missing; set their declared config keys (partitions never change)."""
    settings = TopicSettings.load()
    specs = topics.load(settings.topics_dir)
    for applied in topics.apply({"bootstrap.servers": settings.kafka_bootstrap}, specs, dry_run=dry_run):
        action = (
            f"would be {applied.action}" if dry_run and applied.action in ("created", "configured") else applied.action
        )
        typer.echo(f"{applied.name}: {action}" + (f" ({applied.detail})" if applied.detail else ""))


relay_app = typer.Typer(
    help="Our outbox relay: outbox rows -> Kafka, in Debezium's EventRouter wire format.",
    epilog=settings_help(OutboxNames) + settings_help(RelaySettings),
    no_args_is_help=True,
)
app.add_typer(relay_app, name="relay")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@relay_app.command("run")
def relay_run(
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
) -> None:
    """Publish until SIGTERM or Ctrl-C (then finish the batch in flight and exit 0)."""
    if log_level.upper() not in LOG_LEVELS:
        raise typer.BadParameter(f"{log_level!r} is not a log level: use one of {', '.join(LOG_LEVELS)}")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings, names = RelaySettings.load(), OutboxNames.load()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics = RelayMetrics()
    metrics.serve(settings.metrics_port)
    Relay(settings, names, stop=stop, metrics=metrics).run()


@relay_app.command("status")
def relay_status(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The leading relay, what publishing is stalled on (if anything), the backlog and the dead letters."""
    settings, names = RelaySettings.load(), OutboxNames.load()
    with redrive.connect(settings.pg_dsn.get_secret_value()) as conn:
        report = redrive.status(conn, names)
    if as_json:
        typer.echo(json.dumps(asdict(report), indent=2, default=str))
        return
    typer.echo(f"leader: {report.leader or 'none (no relay is publishing)'}")
    if report.stalled_topic:
        typer.echo(f"STALLED since {report.stalled_since} on topic {report.stalled_topic}: {report.stalled_reason}")
    typer.echo(f"waiting: {report.waiting} events, the oldest {report.oldest_age_s:.1f}s old")
    typer.echo(
        f"dead letters: {report.dead_letters} ({report.dead_letters_overtaken} overtaken by a later event of "
        "their aggregate); `cdcpipe relay redrive` puts them back"
    )
    if report.stalled_topic:
        raise typer.Exit(1)


@relay_app.command("redrive")
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
    with redrive.connect(settings.pg_dsn.get_secret_value()) as conn:
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


connectors_app = typer.Typer(
    help="Debezium connectors on Kafka Connect, from versioned definition files (connectors/definitions/).",
    epilog=settings_help(ConnectSettings),
    no_args_is_help=True,
)
app.add_typer(connectors_app, name="connectors")


def _connect() -> tuple[ConnectClient, ConnectSettings]:
    settings = ConnectSettings.load()
    return ConnectClient(settings), settings


@connectors_app.command("apply")
def connectors_apply(
    path: Path = typer.Argument(DEFINITIONS_DIR, help="a definition file, or a folder of them"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and show the plan; change nothing"),
) -> None:
    """Validate each definition against its plugin, then create or update what differs."""
    client, _ = _connect()
    with client:
        changes = connector_commands.apply(client, path, dry_run=dry_run)
    for change in changes:
        verb = {"create": "created", "update": "updated", "unchanged": "unchanged"}[change.action]
        if dry_run and change.action != "unchanged":
            verb = f"would be {verb}"
        typer.echo(f"{change.definition.name}: {verb} ({change.definition.source})")
        for line in change.diff if change.action == "update" or dry_run else []:
            typer.echo(f"    {line}")


@connectors_app.command("list")
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


@connectors_app.command("status")
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


def _lifecycle(action: str, name: str) -> None:
    client, _ = _connect()
    with client:
        getattr(client, action)(name)
    typer.echo(f"{name}: {action} requested")


@connectors_app.command("pause")
def connectors_pause(name: str) -> None:
    """Pause the connector and its tasks (they keep their offsets)."""
    _lifecycle("pause", name)


@connectors_app.command("resume")
def connectors_resume(name: str) -> None:
    """Resume a paused or stopped connector."""
    _lifecycle("resume", name)


@connectors_app.command("stop")
def connectors_stop(name: str) -> None:
    """Stop the connector and shut its tasks down (needed before `offsets reset`)."""
    _lifecycle("stop", name)


@connectors_app.command("restart")
def connectors_restart(
    name: str, failed_only: bool = typer.Option(False, "--failed-only", help="restart only failed instances")
) -> None:
    """Restart the connector and its tasks."""
    client, _ = _connect()
    with client:
        client.restart(name, only_failed=failed_only)
    typer.echo(f"{name}: restart requested{' (failed instances only)' if failed_only else ''}")


@connectors_app.command("delete")
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


@connectors_app.command("drop-slot")
def connectors_drop_slot(
    slot: str,
    yes: bool = typer.Option(False, "--yes", help="do not ask (for scripts)"),
) -> None:
    """Drop a replication slot no connector uses (one a deleted connector left behind)."""
    client, settings = _connect()
    with client:
        user = connector_commands.slot_users(client).get(slot)
    if user is not None:
        raise ConnectError(
            f"replication slot {slot} belongs to connector {user}; "
            f"delete both with `cdcpipe connectors delete {user} --drop-slot`"
        )
    found = slots.slot_status(settings, slot)
    if found is None:
        raise ConnectError(f"there is no replication slot {slot}; `cdcpipe connectors list` names the unused ones")
    if not yes:
        typer.echo(
            f"Dropping replication slot {slot} frees {slots.human_bytes(found.retained_wal_bytes)} of WAL and loses "
            "the changes it holds for whoever streamed from it."
        )
        typer.confirm("Go on?", abort=True)
    slots.drop_slot(settings, slot)
    typer.echo(f"dropped replication slot {slot}")


@connectors_app.command("offsets")
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


jobs_app = typer.Typer(
    help="Streaming jobs: Kafka topics into Delta tables (job files in streaming_jobs/definitions/).",
    epilog=settings_help(SparkSettings),
    no_args_is_help=True,
)
app.add_typer(jobs_app, name="jobs")


@jobs_app.command("submit")
def jobs_submit(
    name: str,
    master: str | None = typer.Option(None, help="local[N] or spark://HOST:PORT (default CDCPIPE_SPARK_MASTER)"),
    trigger: str | None = typer.Option(None, help="1s, 500ms, 5min or available-now (default: the job's)"),
) -> None:
    """Start a job in the background, tracked by pid (its log: <lake>/_jobs/NAME.log)."""
    from streaming_jobs import control as job_control

    settings = SparkSettings.load()
    pid = job_control.submit(settings, name, master=master, trigger=trigger)
    typer.echo(f"{name}: started (pid {pid}); `cdcpipe jobs status {name}` shows its progress")


@jobs_app.command("list")
def jobs_list() -> None:
    """Every declared job: kind, table, topics, running or not."""
    from streaming_jobs import control as job_control

    settings = SparkSettings.load()
    for spec, where, running in job_control.listing(settings):
        state = "running" if running else "stopped"
        typer.echo(f"{spec.name:<24} {spec.kind:<13} {state:<8} {where.table}  <- {', '.join(spec.topics)}")


@jobs_app.command("status")
def jobs_status(name: str, as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Running or not, last batch, rows/s, batch duration, dead letters, lag per partition."""
    from streaming_jobs import control as job_control

    report = job_control.status(SparkSettings.load(), name)
    if as_json:
        typer.echo(json.dumps({**asdict(report), "total_lag": report.total_lag}, indent=2))
        return
    state = f"running (pid {report.pid})" if report.running else "not running"
    typer.echo(f"{report.name} ({report.kind}): {state}")
    typer.echo(f"  table {report.table}, checkpoint {report.checkpoint}")
    typer.echo(
        f"  last batch {report.last_batch_id}, {report.processed_rows_per_s or 0:.0f} rows/s processed, "
        f"batch took {report.batch_duration_ms} ms; applied {report.applied}, dead letters {report.dead_letters}"
    )
    for part in report.lag:
        typer.echo(
            f"  {part.topic}[{part.partition}]: at {part.checkpoint_offset}, latest {part.latest_offset}, lag {part.lag}"
        )
    for topic in report.missing_topics:
        typer.echo(f"  {topic}: does not exist; the job is refused until `cdcpipe topics apply` creates it")
    for line in report.log_tail:
        typer.echo(f"    | {line}")


@jobs_app.command("stop")
def jobs_stop(name: str) -> None:
    """Stop gracefully: the micro-batch in flight finishes first."""
    from streaming_jobs import control as job_control

    stopped = job_control.stop(SparkSettings.load(), name)
    typer.echo(f"{name}: {'stopped' if stopped else 'was not running'}")


@jobs_app.command("optimize")
def jobs_optimize(name: str) -> None:
    """Compact the job's Delta tables now (jobs also do it every `optimize_every` batches)."""
    # pyspark loads only for the jobs commands, not for every `cdcpipe` call (the relay among them).
    from streaming_jobs import locations
    from streaming_jobs.jobs import find as find_job
    from streaming_jobs.runner import optimize as optimize_job
    from streaming_jobs.spark_session import build_spark_session

    settings = SparkSettings.load()
    where = locations.current(find_job(name, list(settings.jobs_dirs)), settings.lake)
    spark = build_spark_session(settings, app_name=f"cdcpipe-optimize-{name}")
    try:
        optimize_job(spark, where)
    finally:
        spark.stop()
    typer.echo(f"{name}: compacted {where.table}")


SPEC_HELP = "earliest, latest, an ISO 8601 time with a zone, or topic:partition:offset,..."


@app.command("backfill")
def backfill_command(
    job: str,
    start: str = typer.Option(..., "--from", help=f"where the range starts: {SPEC_HELP}"),
    end: str = typer.Option("latest", "--to", help=f"where it ends (exclusive): {SPEC_HELP}"),
    chunk_size: int = typer.Option(250_000, min=1, help="records per Spark batch read"),
    reduce: bool = typer.Option(
        True,
        "--reduce/--no-reduce",
        help="a latest-state job's range is first cut to each key's newest event outside Spark; "
        "--no-reduce has Spark read every record",
    ),
) -> None:
    """Apply a range of the job's topics to its tables with the job's own logic (safe beside the stream)."""
    from streaming_jobs import positions, rerun
    from streaming_jobs.jobs import find as find_job

    settings = SparkSettings.load()
    spec = find_job(job, list(settings.jobs_dirs))
    outcome = rerun.backfill(
        settings, spec, positions.parse(start), positions.parse(end), chunk_size=chunk_size, reduce=reduce
    )
    typer.echo(
        f"{job}: backfilled {outcome.span.total} records in {outcome.chunks} chunk(s), {outcome.seconds:.1f} s "
        f"({outcome.events_per_s:,.0f}/s): {outcome.applied} applied, {outcome.dead_letters} dead letters; "
        "offsets the table already held were skipped"
    )


@app.command("replay")
def replay_command(
    job: str,
    into: Path | None = typer.Option(None, help="the new table's folder (default: beside the current one)"),
    swap: bool = typer.Option(False, "--swap", help="then switch the job to it and resume streaming from there"),
    chunk_size: int = typer.Option(250_000, min=1, help="records per Spark batch read"),
    reduce: bool = typer.Option(
        True,
        "--reduce/--no-reduce",
        help="a latest-state job's range is first cut to each key's newest event outside Spark; "
        "--no-reduce has Spark read every record",
    ),
) -> None:
    """Rebuild the job's tables from the earliest retained offsets into a new location (and --swap to it)."""
    from streaming_jobs import rerun
    from streaming_jobs.jobs import find as find_job

    settings = SparkSettings.load()
    spec = find_job(job, list(settings.jobs_dirs))
    done = rerun.replay(settings, spec, into=into, swap=swap, chunk_size=chunk_size, reduce=reduce)
    typer.echo(
        f"{job}: rebuilt {done.location.table} from {done.rebuild.span.total} records "
        f"({done.rebuild.events_per_s:,.0f}/s)"
    )
    if done.swapped:
        typer.echo(f"{job}: now uses {done.location.table}, streaming from where the rebuild ended")
    else:
        typer.echo(f"{job}: still uses its old table; `cdcpipe replay {job} --into {done.location.table} --swap`")


@jobs_app.command("rewind")
def jobs_rewind(name: str, to: str = typer.Option(..., "--to", help=f"where to resume: {SPEC_HELP}")) -> None:
    """Resume the job from an earlier position (a new checkpoint); rows it holds are not applied twice."""
    from streaming_jobs import positions, rerun
    from streaming_jobs.jobs import find as find_job

    settings = SparkSettings.load()
    where, before, after = rerun.rewind(settings, find_job(name, list(settings.jobs_dirs)), positions.parse(to))
    for (topic, partition), offset in sorted(after.items()):
        typer.echo(f"  {topic}[{partition}]: {before[(topic, partition)]} -> {offset}")
    typer.echo(f"{name}: resumes from these offsets with checkpoint {where.checkpoint}")


@jobs_app.command("accept-topics")
def jobs_accept_topics(name: str) -> None:
    """Take the job's topics as they are now, after one was deleted and created again or gained partitions."""
    from streaming_jobs import rerun
    from streaming_jobs.jobs import find as find_job

    settings = SparkSettings.load()
    accepted = rerun.accept_topics(settings, find_job(name, list(settings.jobs_dirs)))
    if not accepted.changed:
        typer.echo(f"{name}: its topics are those its table holds offsets of; nothing to accept")
    for topic in accepted.changed:
        how = "recreated: read again from its earliest offsets" if topic in accepted.recreated else "new partitions"
        typer.echo(f"{name}: {topic} accepted ({how})")


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
