"""`cdcpipe jobs`: streaming jobs and their backfill, replay and rewind (streaming_jobs).

The stage modules that load pyspark are imported inside the commands that need Spark, so `jobs list`,
`status` and `stop` (and every other `cdcpipe` command) start without it.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from cdcpipe.cli.common import settings_help
from streaming_jobs.config import JobsSettings

app = typer.Typer(
    help="Streaming jobs: Kafka topics into Delta tables (job files in $CDCPIPE_JOBS_DIRS; the demo's: examples/jobs).",
    epilog=settings_help(JobsSettings),
    no_args_is_help=True,
)


# Options backfill and replay share.
CHUNK_SIZE = typer.Option(250_000, min=1, help="records per Spark batch read")
REDUCE = typer.Option(
    True,
    "--reduce/--no-reduce",
    help="a latest-state job's range is first cut to each key's newest event outside Spark; "
    "--no-reduce has Spark read every record",
)
SPEC_HELP = "earliest, latest, an ISO 8601 time with a zone, or topic:partition:offset,..."
# Options submit, backfill and replay share: what a job may read Kafka as.
ALLOW_SUPERUSER = typer.Option(
    False,
    "--allow-superuser",
    help="start even with Kafka credentials that may alter the cluster (CDCPIPE_ALLOW_KAFKA_SUPERUSER): "
    "they reach the executors, where projections run",
)


def _settings(allow_superuser: bool) -> JobsSettings:
    return JobsSettings.load(**({"allow_kafka_superuser": True} if allow_superuser else {}))


# Options backfill, replay, rewind and accept-topics share: one table of a table group.
TABLE = typer.Option(
    None, "--table", help="of a table group: the table (schema.name) whose job to work on; the others go on"
)


@app.command("submit")
def jobs_submit(
    name: str,
    master: str | None = typer.Option(None, help="local[N] or spark://HOST:PORT (default CDCPIPE_SPARK_MASTER)"),
    trigger: str | None = typer.Option(None, help="1s, 500ms, 5min or available-now (default: the job's)"),
    allow_superuser: bool = ALLOW_SUPERUSER,
) -> None:
    """Start a job in the background, tracked by pid (its pid file and log: CDCPIPE_RUN_DIR/NAME.pid, NAME.log)."""
    from streaming_jobs.jobs.spec import find as find_job
    from streaming_jobs.run import control as job_control

    settings = _settings(allow_superuser)
    pid = job_control.submit(settings, name, master=master, trigger=trigger)
    spec = find_job(name, list(settings.jobs_dirs))
    typer.echo(f"{name}: started (pid {pid}) from {spec.file}; `cdcpipe jobs status {name}` shows its progress")


@app.command("list")
def jobs_list() -> None:
    """Every declared job: kind, table, topics, running or not."""
    from streaming_jobs.run import control as job_control

    settings = JobsSettings.load()
    for spec, where, running in job_control.listing(settings):
        state = "running" if running else "stopped"
        typer.echo(f"{spec.name:<24} {spec.kind:<13} {state:<8} {where.table}  <- {', '.join(spec.topics)}")


@app.command("status")
def jobs_status(name: str, as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Running or not, last batch, rows/s, dead letters, lag per partition, and the connectors feeding it."""
    from capture import flow
    from connectors.config import ConnectSettings
    from streaming_jobs.jobs.spec import find as find_job
    from streaming_jobs.run import control as job_control

    settings = JobsSettings.load()
    report = job_control.status(settings, name)
    writers = flow.sources(ConnectSettings.load(), list(find_job(name, list(settings.jobs_dirs)).topics))
    if as_json:
        found = writers if isinstance(writers, str) else [{**asdict(w), "flowing": w.flowing} for w in writers]
        typer.echo(json.dumps({**asdict(report), "total_lag": report.total_lag, "sources": found}, indent=2))
        return
    state = f"running (pid {report.pid})" if report.running else "not running"
    if report.last_error:
        state = f"stopped by an error: {report.last_error}"
    typer.echo(f"{report.name} ({report.kind}): {state}")
    if report.stalled:
        typer.echo(f"  {'NOT PROGRESSING' if report.stuck else 'not progressing yet'}: {report.stalled}")
    if report.members:
        # The worst first: parked, then the most behind.
        for member in sorted(report.members, key=lambda m: (m.last_error is None, -m.total_lag, m.name)):
            said = f"PARKED: {member.last_error}" if member.last_error else f"lag {member.total_lag}"
            batch = "no batch yet" if member.last_batch_id is None else f"last batch {member.last_batch_id}"
            typer.echo(
                f"  {member.name:<32} {said}; {batch}, applied {member.applied or 0}, "
                f"dead letters {member.dead_letters or 0}"
            )
        for line in report.log_tail:
            typer.echo(f"    | {line}")
        return
    if report.group:
        typer.echo(f"  runs in the table group {report.group}")
    typer.echo(f"  table {report.table}, checkpoint {report.checkpoint}")
    if report.last_batch_id is None:
        typer.echo("  no batch yet")
    else:
        typer.echo(
            f"  last batch {report.last_batch_id}, {report.processed_rows_per_s or 0:.0f} rows/s processed, "
            f"batch took {report.batch_duration_ms} ms; applied {report.applied or 0}, "
            f"dead letters {report.dead_letters or 0}"
        )
    for part in report.lag:
        typer.echo(
            f"  {part.topic}[{part.partition}]: at {part.checkpoint_offset}, latest {part.latest_offset}, lag {part.lag}"
        )
    for topic in report.missing_topics:
        typer.echo(f"  {topic}: does not exist; the job is refused until `cdcpipe topics apply` creates it")
    for line in [writers] if isinstance(writers, str) else [w.line() for w in writers]:
        typer.echo(f"  {line}")
    for line in report.log_tail:
        typer.echo(f"    | {line}")


@app.command("stop")
def jobs_stop(name: str) -> None:
    """Stop gracefully: the micro-batch in flight finishes first."""
    from streaming_jobs.run import control as job_control

    stopped = job_control.stop(JobsSettings.load(), name)
    typer.echo(f"{name}: {'stopped' if stopped else 'was not running'}")


@app.command("optimize")
def jobs_optimize(name: str) -> None:
    """Compact the job's Delta tables now, its event ids trimmed first (jobs do both every `optimize_every` batches)."""
    from streaming_jobs.run import control as job_control

    table = job_control.optimize(JobsSettings.load(), name)
    typer.echo(f"{name}: compacted {table}")


@app.command("rewind")
def jobs_rewind(
    name: str, to: str = typer.Option(..., "--to", help=f"where to resume: {SPEC_HELP}"), table: str | None = TABLE
) -> None:
    """Resume the job from an earlier position (a new checkpoint); rows it holds are not applied twice."""
    from streaming_jobs.jobs.spec import one_job
    from streaming_jobs.ranges import commands, positions

    settings = JobsSettings.load()
    spec = one_job(name, list(settings.jobs_dirs), table)
    name = spec.name
    where, before, after = commands.rewind(settings, spec, positions.parse(to))
    for (topic, partition), offset in sorted(after.items()):
        typer.echo(f"  {topic}[{partition}]: {before[(topic, partition)]} -> {offset}")
    typer.echo(f"{name}: resumes from these offsets with checkpoint {where.checkpoint}")


@app.command("accept-topics")
def jobs_accept_topics(name: str, table: str | None = TABLE) -> None:
    """Take the job's topics as they are now, after one was deleted and created again or gained partitions."""
    from streaming_jobs.jobs.spec import one_job
    from streaming_jobs.ranges import commands

    settings = JobsSettings.load()
    spec = one_job(name, list(settings.jobs_dirs), table)
    name = spec.name
    accepted = commands.accept_topics(settings, spec)
    if not accepted.changed:
        typer.echo(f"{name}: its topics are those its table holds offsets of; nothing to accept")
    for topic in accepted.changed:
        how = "recreated: read again from its earliest offsets" if topic in accepted.recreated else "new partitions"
        typer.echo(f"{name}: {topic} accepted ({how})")


@app.command("backfill")
def backfill_command(
    job: str,
    start: str = typer.Option(..., "--from", help=f"where the range starts: {SPEC_HELP}"),
    end: str = typer.Option("latest", "--to", help=f"where it ends (exclusive): {SPEC_HELP}"),
    chunk_size: int = CHUNK_SIZE,
    reduce: bool = REDUCE,
    table: str | None = TABLE,
    allow_superuser: bool = ALLOW_SUPERUSER,
) -> None:
    """Apply a range of the job's topics to its tables with the job's own logic (safe beside the stream)."""
    from streaming_jobs.jobs.spec import one_job
    from streaming_jobs.ranges import commands, positions

    settings = _settings(allow_superuser)
    spec = one_job(job, list(settings.jobs_dirs), table)
    job = spec.name
    outcome = commands.backfill(
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
    into: str | None = typer.Option(
        None, help="the new table: a folder or s3a:// URL (default: beside the current one)"
    ),
    swap: bool = typer.Option(False, "--swap", help="then switch the job to it and resume streaming from there"),
    chunk_size: int = CHUNK_SIZE,
    reduce: bool = REDUCE,
    table: str | None = TABLE,
    allow_superuser: bool = ALLOW_SUPERUSER,
) -> None:
    """Rebuild the job's tables from the earliest retained offsets into a new location (and --swap to it)."""
    from streaming_jobs.jobs.spec import one_job
    from streaming_jobs.ranges import commands

    settings = _settings(allow_superuser)
    spec = one_job(job, list(settings.jobs_dirs), table)
    job = spec.name
    done = commands.replay(settings, spec, into=into, swap=swap, chunk_size=chunk_size, reduce=reduce)
    typer.echo(
        f"{job}: rebuilt {done.location.table} from {done.rebuild.span.total} records "
        f"({done.rebuild.events_per_s:,.0f}/s)"
    )
    if done.swapped:
        typer.echo(f"{job}: now uses {done.location.table}, streaming from where the rebuild ended")
    else:
        typer.echo(f"{job}: still uses its old table; `cdcpipe jobs replay {job} --into {done.location.table} --swap`")
