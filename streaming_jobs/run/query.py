"""One job's streaming query inside a driver: its checks, its query, its progress and its end.

A driver runs one (`cdcpipe jobs submit` of a job) or many (a table group: one per member table's mirror or
history, each with its own checkpoint, contract, dead letters and metrics). Each query is driven the same way:
`prepare` checks what would stop it before any Spark work, `start` starts it, `tick` is one second of watching
it (its progress written when it changed), `close` writes its last progress and frees what it holds.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from ground.errors import CdcpipeError
from schemas.contracts import ContractRegistry
from schemas.table_contracts import load_table_contract
from streaming_jobs.classify import outbox_events
from streaming_jobs.config import CONSUMER_GROUP_PREFIX, JobsSettings
from streaming_jobs.errors import PoisonCeilingError, SchemaChangeError, StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import TABLE_KINDS, JobSpec
from streaming_jobs.lake.lease import LeaseLostError, LeaseUnavailableError
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import Offsets, Partition
from streaming_jobs.once import sources
from streaming_jobs.once.applied import Interval
from streaming_jobs.once.checkpoints import (
    batch_end,
    clear_unfinished_writes,
    first_batch_start,
    read_progress,
    rendered_progress,
    write_progress,
)
from streaming_jobs.once.context import BatchContext, app_id
from streaming_jobs.once.event_ids import EventIds
from streaming_jobs.phases import Phases
from streaming_jobs.run import retention
from streaming_jobs.run.compaction import Compactor
from streaming_jobs.run.metrics import GroupMetrics, JobMetrics, offsets_of
from streaming_jobs.run.outage import KAFKA_TROUBLE, Outage, is_kafka_trouble
from streaming_jobs.sinks.batch import handle_batch

log = logging.getLogger(__name__)
# A batch that failed on these restarts the query instead of ending the job (their names reach us in the text
# of Spark's exception, which wraps the Python one).
LEASE_TROUBLE = (LeaseLostError.__name__, LeaseUnavailableError.__name__)
LEASE_RETRY_S = 2.0


@dataclass(frozen=True)
class Prepared:
    """A job checked and ready to start: where its things are and the topics it reads, as it found them."""

    spec: JobSpec
    where: locations.Location
    topics: Any


def prepare(spec: JobSpec, settings: JobsSettings) -> Prepared:
    """What would stop the job, checked before any Spark work; StreamingError (or a contract's) naming the fix."""
    where = locations.current(spec, settings.lake_root())
    # A missing topic, or one not the table's (recreated, repartitioned): refused with the fix, not a Java trace.
    topics = sources.check_topics(settings, spec, where.table)
    retention.check(settings, spec, where)  # offsets retention deleted: refuse before any work, naming them
    if spec.source_table:  # which row contract it reads, of the folders of CDCPIPE_TABLE_CONTRACT_DIRS
        contract = load_table_contract(spec.source_table)
        print(f"job {spec.name}: row contract of {spec.source_table}: v{contract.version}, {contract.path}", flush=True)
    cleared = clear_unfinished_writes(where.checkpoint)  # a kill mid-write must not stop every later start
    if cleared:
        log.warning("job %s: removed what a stopped run left half-written in its checkpoint: %s", spec.name, cleared)
    return Prepared(spec, where, topics)


class JobQuery:
    """One job's query in `spark`, from its start to its end."""

    def __init__(
        self,
        prepared: Prepared,
        settings: JobsSettings,
        spark: SparkSession,
        registry: ContractRegistry,
        trigger: str | None,
        *,
        group: GroupMetrics | None = None,
    ) -> None:
        """`group`: the table group's metrics, which serve this job's (else it serves its own).

        A group's member reads in turns (streaming_jobs.run.turns): its query starts when its turn does and
        stops when the turn ends; `batches` and `last_records_at` say how the turn goes.
        """
        spec, where = prepared.spec, prepared.where
        self.spec, self.where, self.settings = spec, where, settings
        self.counts = {"applied": 0, "dead_letters": 0}
        self.last_batch: dict[str, Any] = {}  # where the last batch's time went (streaming_jobs.phases)
        self.compactor = Compactor(spark, where, spec)
        self.chosen = trigger or spec.trigger
        self.in_group = group is not None
        self.batches = 0  # micro-batches with records, in this driver
        self.last_records_at = 0.0  # when the last of them ended (monotonic)
        self.metrics = JobMetrics(
            spec, None if self.chosen == "available-now" else spec.processing_seconds(self.chosen)
        )
        if group is not None:
            group.add(self.metrics)
        elif settings.metrics:
            port = self.metrics.start(settings.metrics_targets_dir)
            print(f"job {spec.name}: metrics on http://127.0.0.1:{port}/metrics", flush=True)
        self._written: tuple[object, ...] = ()
        self.writer = self._writer(spark, registry, prepared.topics)
        self.query: StreamingQuery | None = None
        self.retry_at: float | None = None  # when to start the query again (it failed on Kafka or its lease)
        self.outage = Outage(settings.kafka_outage_s)  # Kafka failing the query, if it does

    def _writer(self, spark: SparkSession, registry: ContractRegistry, topics: Any) -> Any:
        spec, where, settings = self.spec, self.where, self.settings
        identity = app_id(where.checkpoint)
        # The look-back of applied event ids, kept between micro-batches instead of read from a table by each.
        lookback = spec.dedupe_lookback_records
        event_ids = EventIds(lookback) if lookback else None
        classified = spec.kind not in TABLE_KINDS

        def each_batch(records: DataFrame, batch_id: int) -> None:
            # The batch's own session, not `spark`: a streaming query runs in a clone of the session, and the
            # idempotent-write settings (the applied offsets in userMetadata) must be set where the batch's
            # DataFrames write. Set on `spark`, an append of the batch committed without them, and a second
            # commit had to record the offsets: two commits, not one atomic one.
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
            ranges = _batch_ranges(where.checkpoint, batch_id)
            done, dead = handle_batch(records, ctx, registry, ranges, classified=classified)
            self.counts["applied"] += done
            self.counts["dead_letters"] += dead
            self.batches += 1
            self.last_records_at = time.monotonic()
            if ctx.phases:
                self.last_batch.update(ctx.phases.record())
                if done or dead:
                    self.metrics.after_batch(ctx.phases, done, dead)
            self.compactor.after_batch(batch_id)

        reader = (
            spark.readStream.format("kafka")
            .options(**settings.kafka_reader_options())
            .option("subscribe", ",".join(spec.topics))
            # Only a checkpoint Spark never wrote uses this: a new job, or a rewind/replay's new checkpoint.
            .option("startingOffsets", json.dumps(where.starting_offsets) if where.starting_offsets else "earliest")
            .option("includeHeaders", "true")
            .option("kafka.isolation.level", "read_committed")
            .option("failOnDataLoss", "true")
        )
        # The consumer groups of the jobs' principal share a prefix its ACL names (never committed).
        if self.in_group:
            # A group's table starts its query each turn, and Spark caches consumers (with the records they fetched)
            # by group id: a new id each start left every turn's consumers cached for minutes, and at 100 tables
            # they filled the driver's heap. One id per table (Spark assigns the partitions itself, so no two
            # readers of it meet in a group) gives the next turn the cached consumer back.
            reader = reader.option("kafka.group.id", f"{CONSUMER_GROUP_PREFIX}{spec.name}")
        else:
            reader = reader.option("groupIdPrefix", f"{CONSUMER_GROUP_PREFIX}{spec.name}")
        if spec.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", spec.max_offsets_per_trigger)
        stream = reader.load()
        # An event kind's stream is classified as it is read: Spark analyses the classification once for the
        # query, where a batch that classified its records would pay it again each time (streaming_jobs.sinks.batch).
        if classified:
            stream = outbox_events.classify(stream, registry)
        writer = stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", str(where.checkpoint))
        if self.chosen == "available-now":
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=spec.processing_time(self.chosen))

    def start(self) -> None:
        self.query = self.writer.queryName(self.spec.name).start()

    def tick(self, stop: threading.Event, wait_s: int = 1) -> bool:
        """Watch the query for up to `wait_s` (0: a look); False once it ended (its error raised, if it died of one)."""
        if self.retry_at is not None:
            return self._retry(stop, wait_s, self.retry_at)
        query = self.query
        if query is None:
            raise StreamingError(f"job {self.spec.name}: watched before it started")
        try:
            if query.isActive:
                if stop.is_set():
                    # Graceful: wait for the micro-batch in flight, then stop between batches.
                    while query.status.get("isTriggerActive"):
                        time.sleep(0.1)
                    query.stop()
                else:
                    if wait_s > 0:
                        query.awaitTermination(wait_s)
                    self._progress(query)
                    return True
            query.awaitTermination()  # raises the query's own error, if it died of one
            return False
        except StreamingQueryException as exc:
            _raise_stop_of_ours(exc)
            if stop.is_set():
                raise
            # Started again from its checkpoint, Spark replays the batch it did not mark done, and the batch first
            # reads what the table holds: nothing is applied twice.
            self.retry_at = time.monotonic() + self._retry_wait(exc)
            return True

    def _retry_wait(self, exc: StreamingQueryException) -> float:
        """How long before the query starts again after `exc`; `exc` raised again if it is not a passing fault."""
        text = str(exc)
        # The writer lease's Postgres went away (a restart, a network cut): the batch failed before or while
        # committing.
        if any(name in text for name in LEASE_TROUBLE):
            log.warning(
                "job %s: %s; starting its query again in %.0f s", self.spec.name, _first_line(exc), LEASE_RETRY_S
            )
            return LEASE_RETRY_S
        if not is_kafka_trouble(text):
            raise exc
        now = time.monotonic()
        wait = self.outage.wait(now)
        if wait is None:
            raise StreamingError(
                f"job {self.spec.name}: Kafka unreachable for {self.outage.lasted(now):.0f} s, past "
                f"CDCPIPE_KAFKA_OUTAGE_S ({self.outage.ceiling_s:.0f} s): {_first_line(exc)}; once the cluster "
                f"answers, `cdcpipe jobs submit {self.spec.name}` starts it from its checkpoint"
            ) from exc
        log.warning(
            "job %s: Kafka did not answer (%s); its query starts again in %.0f s (Kafka waited out for %.0f s of %.0f)",
            self.spec.name,
            _first_line(exc),
            wait,
            self.outage.lasted(now),
            self.outage.ceiling_s,
        )
        return wait

    def _retry(self, stop: threading.Event, wait_s: int, retry_at: float) -> bool:
        """Wait (up to `wait_s`) for `retry_at`, then start the failed query again; False if told to stop meanwhile."""
        if stop.wait(max(0.0, min(wait_s, retry_at - time.monotonic()))):
            self.retry_at = None
            return False
        if time.monotonic() >= retry_at:
            self.retry_at = None
            self.start()
        return True

    def _progress(self, query: StreamingQuery) -> None:
        # Written when it changed (a batch ran, or Spark's idle report every 10 s), not every second: on an
        # object store each write is a request, for every running job. Fetched once per tick (a call into the
        # JVM), rendered only when new: one report keyed, written and measured, never three if a batch ends.
        latest = query.lastProgress
        if latest is not None:
            self.outage.over()  # this query read its offsets from Kafka: the cluster answers again
        seen = _progress_key(latest, self.counts)
        if seen != self._written:
            progress = rendered_progress(latest)
            write_progress(self.where.checkpoint, progress, self.counts, running=True, batch=self.last_batch)
            self.metrics.after_progress(progress)
            self._written = seen

    def unpark(self) -> None:
        """Clear the error a previous run parked this group member on, keeping its last progress (it starts again)."""
        record = read_progress(self.where.checkpoint)
        if record.get("error"):
            write_progress(
                self.where.checkpoint,
                record.get("progress"),
                self.counts,
                running=True,
                batch=record.get("batch_steps"),
            )

    def turn_ended(self) -> Offsets:
        """A group member's turn over (its query ended or stopped well): its progress written; where its last batch ended."""
        query = self.query
        if query is None:
            return {}
        self._progress(query)
        latest = query.lastProgress
        reached: Offsets = {}
        for source in (rendered_progress(latest) or {}).get("sources") or []:
            reached.update(offsets_of(source.get("endOffset")))
        return reached

    def stop_between_batches(self) -> bool:
        """Stop the query if no micro-batch is running (True once it is stopped); a batch in flight finishes first.

        A table group asks each of its queries in turn until all have stopped, so it waits for its slowest batch,
        not for every batch one after the other.
        """
        query = self.query
        try:
            if query is None or not query.isActive:
                return True
            if query.status.get("isTriggerActive"):
                return False
            query.stop()
        except Exception as exc:  # it died meanwhile: `tick` raises its own error next
            log.warning("job %s: stopping its query: %s", self.spec.name, _first_line(exc))
        return True

    def stop_now(self) -> None:
        """Stop the query without waiting for its batch, as its driver ends on an error of its own."""
        try:
            if self.query is not None and self.query.isActive:
                self.query.stop()
        except Exception as exc:  # the JVM gone with the error being raised: that error is the one to say
            log.warning("job %s: its query could not be stopped: %s", self.spec.name, exc)

    def close(self, error: str | None = None) -> None:
        """The last progress written (with the error it stopped on, if any); compaction and metrics closed."""
        last = self.query.lastProgress if self.query is not None else None
        write_progress(
            self.where.checkpoint,
            rendered_progress(last),
            self.counts,
            running=False,
            batch=self.last_batch,
            error=error,
        )
        self.compactor.close()
        self.metrics.close()


def _progress_key(progress: Any, counts: dict[str, int]) -> tuple[object, ...]:
    """What makes a progress report new: Spark's own report (its time and batch), or our counts."""
    stamp = (getattr(progress, "timestamp", None), getattr(progress, "batchId", None)) if progress else (None, None)
    return (*stamp, *sorted(counts.items()))


def _raise_stop_of_ours(exc: Exception) -> None:
    """A batch that stopped the job on purpose ends it with that message.

    On purpose: a schema change its policy stops on, or a run of poison records past the job's ceiling. Spark
    wraps the Python error of a batch in its own; the message is the line naming our error's class.
    """
    for stop_error in (SchemaChangeError, PoisonCeilingError):
        marker = f"{stop_error.__module__}.{stop_error.__name__}: "
        said = next((line.split(marker, 1)[1] for line in str(exc).splitlines() if marker in line), None)
        if said is not None:
            raise stop_error(said.strip()) from exc


def _first_line(exc: Exception) -> str:
    """The line of `exc` that names the passing fault (a lease's, or Kafka's)."""
    marks = LEASE_TROUBLE + KAFKA_TROUBLE
    found = next((line for line in str(exc).splitlines() if any(n in line for n in marks)), str(exc))
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


def one_line(exc: BaseException) -> str:
    """What a job died of, in one line: our error's message, or the Python error inside Spark's wrapping."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, CdcpipeError) or not lines:
        return " ".join(lines)[:1000] or type(exc).__name__
    python = [line for line in lines if PYTHON_ERROR.match(line) and not line.startswith(("py4j.", "org.", "java."))]
    return (python[-1] if python else f"{type(exc).__name__}: {lines[0]}")[:1000]
