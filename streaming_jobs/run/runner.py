"""Run one streaming job: Kafka -> classify -> dead letters + the job's Delta table, checkpointed.

    python -m streaming_jobs.run.runner NAME [--master local[2]|spark://HOST:PORT] [--trigger 1s|available-now]

The query reads with `read_committed` and `failOnDataLoss=true`: offsets that retention already deleted
stop the job with Spark's error rather than being skipped. SIGTERM (what `cdcpipe jobs stop` sends) lets
the micro-batch in flight finish, then stops the query and exits 0. While it runs, the job writes its
latest progress to `<checkpoint>/cdcpipe_progress.json`, which `cdcpipe jobs status` reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame

from cdcpipe.common.errors import CdcpipeError
from schemas.table_contracts import load_table_contract
from streaming_jobs.classify import outbox_events
from streaming_jobs.classify.contracts import checked_registry
from streaming_jobs.config import CONSUMER_GROUP_PREFIX, JobsSettings
from streaming_jobs.errors import PoisonCeilingError, SchemaChangeError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import TABLE_KINDS, JobSpec, find
from streaming_jobs.lake.lease import LeaseLostError, LeaseUnavailableError
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import Partition
from streaming_jobs.once import sources
from streaming_jobs.once.applied import Interval
from streaming_jobs.once.checkpoints import (
    batch_end,
    clear_unfinished_writes,
    first_batch_start,
    rendered_progress,
    write_progress,
)
from streaming_jobs.once.context import BatchContext, app_id
from streaming_jobs.once.event_ids import EventIds
from streaming_jobs.phases import Phases
from streaming_jobs.run import control, retention
from streaming_jobs.run.compaction import Compactor
from streaming_jobs.run.metrics import JobMetrics
from streaming_jobs.sinks.batch import handle_batch
from streaming_jobs.sinks.scd import unpartitioned_history
from streaming_jobs.spark_session import build_spark_session

log = logging.getLogger(__name__)
# A batch that failed on these restarts the query instead of ending the job (their names reach us in the text
# of Spark's exception, which wraps the Python one).
LEASE_TROUBLE = (LeaseLostError.__name__, LeaseUnavailableError.__name__)
LEASE_RETRY_S = 2.0


def run(
    spec: JobSpec, settings: JobsSettings, *, trigger: str | None = None, stop: threading.Event | None = None
) -> None:
    """Run until the sources are drained (available-now) or `stop` is set."""
    stop = stop or threading.Event()
    lake = settings.lake_root()
    where = locations.current(spec, lake)
    checkpoint = where.checkpoint
    # A missing topic, or one not the table's (recreated, repartitioned): refused with the fix, not a Java trace.
    topics = sources.check_topics(settings, spec, where.table)
    retention.check(settings, spec, where)  # offsets retention deleted: refuse before any work, naming them
    if spec.source_table:  # which row contract it reads, of the folders of CDCPIPE_TABLE_CONTRACT_DIRS
        contract = load_table_contract(spec.source_table)
        print(f"job {spec.name}: row contract of {spec.source_table}: v{contract.version}, {contract.path}", flush=True)
    cleared = clear_unfinished_writes(checkpoint)  # a kill mid-write must not stop every later start
    if cleared:
        log.warning("job %s: removed what a stopped run left half-written in its checkpoint: %s", spec.name, cleared)
    spark = build_spark_session(settings, app_name=f"cdcpipe-job-{spec.name}")
    registry = checked_registry(spark)
    if spec.kind == "table_history" and unpartitioned_history(spark, where.table):
        log.warning(
            "job %s: history %s is not partitioned by is_current (made by an earlier cdcpipe): each batch reads the "
            "whole table and grows with it; `cdcpipe jobs optimize %s` partitions it (one copy of the table)",
            spec.name,
            where.table,
            spec.name,
        )
    identity = app_id(checkpoint)
    counts = {"applied": 0, "dead_letters": 0}
    # The look-back of applied event ids, kept between micro-batches instead of read from a table by each.
    lookback = spec.dedupe_lookback_records
    event_ids = EventIds(lookback) if lookback else None
    last_batch: dict[str, Any] = {}  # where the last batch's time went (streaming_jobs.phases)
    compactor = Compactor(spark, where, spec.kind, spec.optimize_every)
    chosen = trigger or spec.trigger
    metrics = JobMetrics(spec, None if chosen == "available-now" else spec.processing_seconds(chosen))
    if settings.metrics:
        port = metrics.start(settings.metrics_targets_dir)
        print(f"job {spec.name}: metrics on http://127.0.0.1:{port}/metrics", flush=True)

    def each_batch(records: DataFrame, batch_id: int) -> None:
        # The batch's own session, not `spark`: a streaming query runs in a clone of the session, and the
        # idempotent-write settings (the applied offsets in userMetadata) must be set
        # where the batch's DataFrames write. Set on `spark`, an append of the batch committed without
        # them, and a second commit had to record the offsets: two commits, not one atomic one.
        ctx = BatchContext(
            records.sparkSession,
            spec,
            where.table,
            where.dead_letters,
            identity,
            batch_id,
            event_ids=event_ids,
            topics=topics,
            phases=Phases(batch_id, timed=settings.metrics),
        )
        done, dead = handle_batch(records, ctx, registry, _batch_ranges(checkpoint, batch_id), classified=classified)
        counts["applied"] += done
        counts["dead_letters"] += dead
        if ctx.phases:
            last_batch.update(ctx.phases.record())
            if done or dead:
                metrics.after_batch(ctx.phases, done, dead)
        compactor.after_batch(batch_id)

    reader = (
        spark.readStream.format("kafka")
        .options(**settings.kafka_reader_options())
        # The consumer groups of the jobs' principal share a prefix its ACL names (never committed).
        .option("groupIdPrefix", f"{CONSUMER_GROUP_PREFIX}{spec.name}")
        .option("subscribe", ",".join(spec.topics))
        # Only a checkpoint Spark never wrote uses this: a new job, or a rewind/replay's new checkpoint.
        .option("startingOffsets", json.dumps(where.starting_offsets) if where.starting_offsets else "earliest")
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
    )
    if spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", spec.max_offsets_per_trigger)
    stream = reader.load()
    # An event kind's stream is classified as it is read: Spark analyses the classification once for the
    # query, where a batch that classified its records would pay it again each time (streaming_jobs.sinks.batch).
    classified = spec.kind not in TABLE_KINDS
    if classified:
        stream = outbox_events.classify(stream, registry)
    writer = stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", str(checkpoint))
    if chosen == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spec.processing_time(chosen))
    query = writer.queryName(spec.name).start()
    written: tuple[object, ...] = ()
    try:
        while True:
            try:
                while query.isActive:
                    if stop.is_set():
                        # Graceful: wait for the micro-batch in flight, then stop between batches.
                        while query.status.get("isTriggerActive"):
                            time.sleep(0.1)
                        query.stop()
                        break
                    query.awaitTermination(1)
                    # Written when it changed (a batch ran, or Spark's idle report every 10 s), not every second:
                    # on an object store each write is a request, for every running job.
                    # Fetched once per tick (a call into the JVM), rendered only when new: one report keyed,
                    # written and measured, never three if a batch ends in between.
                    latest = query.lastProgress
                    seen = _progress_key(latest, counts)
                    if seen != written:
                        progress = rendered_progress(latest)
                        write_progress(checkpoint, progress, counts, running=True, batch=last_batch)
                        metrics.after_progress(progress)
                        written = seen
                query.awaitTermination()  # raises the query's own error, if it died of one
                break
            except StreamingQueryException as exc:
                _raise_stop_of_ours(exc)
                # The writer lease's Postgres went away (a restart, a network cut): the batch failed before or
                # while committing. Start the query again from its checkpoint: Spark replays the batch it did not
                # mark done, and the batch first reads what the table holds, so nothing is applied twice.
                if stop.is_set() or not any(name in str(exc) for name in LEASE_TROUBLE):
                    raise
                log.warning(
                    "job %s: %s; starting its query again in %.0f s", spec.name, _first_line(exc), LEASE_RETRY_S
                )
                time.sleep(LEASE_RETRY_S)
                query = writer.queryName(spec.name).start()
    finally:
        write_progress(checkpoint, rendered_progress(query.lastProgress), counts, running=False, batch=last_batch)
        compactor.close()
        metrics.close()
        spark.stop()


def _progress_key(progress: Any, counts: dict[str, int]) -> tuple[object, ...]:
    """What makes a progress report new: Spark's own report (its time and batch), or our counts."""
    stamp = (getattr(progress, "timestamp", None), getattr(progress, "batchId", None)) if progress else (None, None)
    return (*stamp, *sorted(counts.items()))


def _raise_stop_of_ours(exc: Exception) -> None:
    """A batch that stopped the job on purpose ends it with that message.

    On purpose: a schema change its policy stops on, or a run of poison records past the job's ceiling. Spark wraps the Python error of a batch in its own; the message is the line naming our error's class.
    """
    for stop_error in (SchemaChangeError, PoisonCeilingError):
        marker = f"{stop_error.__module__}.{stop_error.__name__}: "
        said = next((line.split(marker, 1)[1] for line in str(exc).splitlines() if marker in line), None)
        if said is not None:
            raise stop_error(said.strip()) from exc


def _first_line(exc: Exception) -> str:
    found = next((line for line in str(exc).splitlines() if any(n in line for n in LEASE_TROUBLE)), str(exc))
    return found.strip()[:300]


def _batch_ranges(checkpoint: LakePath, batch_id: int) -> dict[Partition, Interval] | None:
    """The offsets batch N reads, from the checkpoint's plan: [end of batch N-1, end of batch N).

    A first batch starts where the Kafka source resolved its starting offsets. Without them (None) the records
    say where the batch starts, at the price of reading the whole batch from Kafka once more: a new job's first
    batch is its backlog (a table's snapshot), the largest it reads.
    """
    end = batch_end(checkpoint, batch_id)
    start = batch_end(checkpoint, batch_id - 1) if batch_id > 0 else first_batch_start(checkpoint)
    if end is None or start is None:
        return None
    # A partition new since the last batch starts at its first offset: it is not in the previous plan.
    return {tp: (start.get(tp, 0), offset) for tp, offset in end.items()}


# A Python error's last line, `module.SomeError: message`, as a traceback ends (Spark quotes the batch's).
PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt): ")


def main(argv: list[str] | None = None) -> int:
    """Run a job by name from the command line (what `cdcpipe jobs submit` starts)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--master")
    parser.add_argument("--trigger")
    parser.add_argument("--jobs-dir", type=Path, action="append", help="folders of job files (default: the built-in)")
    args = parser.parse_args(argv)
    settings = JobsSettings.load(**({"spark_master": args.master} if args.master else {}))
    spec = find(args.name, args.jobs_dir or list(settings.jobs_dirs))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        run(spec, settings, trigger=args.trigger, stop=stop)
    except CdcpipeError as exc:
        print(f"{control.ERROR_MARK}{one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()
        # The last line of the log, which `jobs status` and `cdcpipe status` show of a job that died.
        print(f"{control.ERROR_MARK}{one_line(exc)}", file=sys.stderr)
        return 1
    return 0


def one_line(exc: BaseException) -> str:
    """What a job died of, in one line: our error's message, or the Python error inside Spark's wrapping."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, CdcpipeError) or not lines:
        return " ".join(lines)[:1000] or type(exc).__name__
    python = [line for line in lines if PYTHON_ERROR.match(line) and not line.startswith(("py4j.", "org.", "java."))]
    return (python[-1] if python else f"{type(exc).__name__}: {lines[0]}")[:1000]


if __name__ == "__main__":
    sys.exit(main())
