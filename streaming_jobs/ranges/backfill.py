"""Apply a bounded range of a job's topics to its tables with the job's own logic (backfill, replay).

The range is read with Spark's Kafka batch source in chunks (`chunk_size` records at most per chunk across
partitions), each chunk going through the same `handle_batch` as a streaming micro-batch: the same
classification, dead letters and kind, under the table's writer lock, dropping the offsets the table
already holds. So a backfill run twice changes nothing the second time, and one running beside the
streaming job applies each record once, whichever writer reaches it first.

A latest-state job's range is first reduced, outside Spark, to each key's newest event and every record
not surely valid (streaming_jobs.ranges.reduce), one worker process per partition; Spark applies that remainder in
rounds of at most `chunk_size` records, through the same `handle_batch`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from streaming_jobs.classify.contracts import checked_registry
from streaming_jobs.config import CONSUMER_GROUP_PREFIX, JobsSettings
from streaming_jobs.errors import ReduceError
from streaming_jobs.jobs.locations import Location
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import Offsets, Partition, TopicIdentity
from streaming_jobs.once import applied, sources
from streaming_jobs.once.context import BatchContext
from streaming_jobs.once.event_ids import EventIds
from streaming_jobs.once.resent import recent_ids
from streaming_jobs.ranges.positions import Range
from streaming_jobs.ranges.progress import Progress
from streaming_jobs.ranges.reduce import Reduced, Task
from streaming_jobs.sinks.batch import handle_batch

DEFAULT_CHUNK = 250_000
KAFKA_COLUMNS = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
MAX_WORKERS = 4  # reading processes of a reduced range: measured best with 4 partitions on 2 cores


@dataclass(frozen=True)
class Outcome:
    """What a bounded run did."""

    span: Range
    applied: int
    dead_letters: int
    chunks: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.span.total / self.seconds if self.seconds > 0 else 0.0


def chunks(span: Range, size: int) -> Iterator[tuple[Offsets, Offsets]]:
    """[start, end) offsets per partition of each chunk, every partition advancing by its share of `size`."""
    at = dict(span.start)
    pending = [tp for tp in at if at[tp] < span.end[tp]]
    step = max(1, size // max(1, len(pending)))
    while pending:
        upto = {tp: min(at[tp] + step, span.end[tp]) for tp in pending}
        yield {tp: at[tp] for tp in pending}, upto
        at.update(upto)
        pending = [tp for tp in pending if at[tp] < span.end[tp]]


def range_group() -> str:
    """The consumer group of one range's reads (never committed: the offsets are assigned), under the jobs' prefix.

    One group for all of a range's chunks, not Spark's new group per read: Spark's executors pool their Kafka
    consumers and each one's fetched records by (group, partition) and keep an idle entry for 5 minutes, so a
    group per chunk left every chunk's consumers, with the records they had fetched ahead (megabytes a
    partition), in the heap: a replay of a few dozen chunks ran the driver out of memory. With one group the
    next chunk takes the consumer, and the records fetched ahead, where the last one stopped.
    """
    return f"{CONSUMER_GROUP_PREFIX}backfill-{uuid.uuid4().hex}"


def read_chunk(spark: SparkSession, settings: JobsSettings, start: Offsets, end: Offsets, group: str) -> DataFrame:
    """The records of [start, end) with Spark's Kafka batch source, read_committed, failing on missing offsets.

    `group`: the range's consumer group (`range_group`), the same for each of its chunks.
    """
    assign: dict[str, list[int]] = {}
    for topic, partition in sorted(start):
        assign.setdefault(topic, []).append(partition)
    span = Range(start, end)
    reader = (
        spark.read.format("kafka")
        .options(**settings.kafka_reader_options())
        # The consumer groups of the jobs' principal share a prefix its ACL names (never committed).
        .option("kafka.group.id", group)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(span.spark_json(start)))
        .option("endingOffsets", json.dumps(span.spark_json(end)))
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
    )
    # Spark warns at each read given a group that queries sharing it interfere; a range's reads are assigned
    # partitions, commit nothing and run one after another: the warning, a dozen lines a chunk, is not for them.
    with _logger_at(spark, "org.apache.spark.sql.kafka010.KafkaSourceProvider", "ERROR"):
        return reader.load()


@contextlib.contextmanager
def _logger_at(spark: SparkSession, name: str, level: str) -> Iterator[None]:
    """The driver's log4j logger `name` at `level` for the block, as it was after.

    A logger without a level of its own gets its parent's back (null), not the level it had in effect: pinned,
    it would no longer follow `setLogLevel`.
    """
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
    configurator = log4j.core.config.Configurator
    configured = log4j.LogManager.getContext(False).getConfiguration().getLoggers().get(name)
    before = configured.getLevel() if configured is not None else None
    configurator.setLevel(name, log4j.Level.toLevel(level))
    try:
        yield
    finally:
        configurator.setLevel(name, before)


def apply_range(
    spark: SparkSession,
    settings: JobsSettings,
    spec: JobSpec,
    where: Location,
    span: Range,
    *,
    purpose: str,
    chunk_size: int = DEFAULT_CHUNK,
    progress: Progress | None = None,
    reduce: bool = True,
) -> Outcome:
    """Apply `span` to the tables at `where`, chunk by chunk, reporting progress.

    `reduce` (latest-state jobs only) reduces the range outside Spark first; False reads it all with Spark.
    """
    sources.check_principal(settings, spec.name)
    topics = sources.check_topics(settings, spec, where.table)
    if reduce and spec.kind == "latest_state":
        return _apply_reduced(spark, settings, spec, where, span, purpose, chunk_size, progress, topics)
    registry = checked_registry(spark)
    # The chunks' ids are their indexes, so the id names the chunk size: a rerun cut into other chunks must
    # not find chunk N of the first run "already written" and skip records it never held.
    identity = _identity(where, purpose, span, f":chunks of {chunk_size}")
    # The look-back of applied ids kept from chunk to chunk, as a streaming job keeps it from batch to batch:
    # each chunk's look-back is the chunk before's, which read again from the table cost each chunk a scan.
    lookback = spec.dedupe_lookback_records
    event_ids = EventIds(lookback) if lookback else None
    group = range_group()
    started = time.monotonic()
    total = dead = count = 0
    for index, (start, end) in enumerate(chunks(span, chunk_size)):
        ctx = BatchContext(
            spark, spec, where.table, where.dead_letters, identity, index, event_ids=event_ids, topics=topics
        )
        records = read_chunk(spark, settings, start, end, group)
        done, bad = handle_batch(records, ctx, registry, {tp: (start[tp], end[tp]) for tp in start})
        total, dead, count = total + done, dead + bad, count + 1
        if progress is not None:
            progress.advance(end)
    if progress is not None:
        progress.finish()
    return Outcome(span, total, dead, count, time.monotonic() - started)


def _identity(where: Location, purpose: str, span: Range, how: str = "") -> str:
    """Delta's idempotent-write id for this range: a rerun of it finds each chunk's writes already done.

    `how` names the way the range is cut into batches (the reduced path numbers its rounds by offset): a
    run cut otherwise must not pass for the same writes.
    """
    name = f"cdcpipe:{where.table}:{purpose}:{span.spark_json(span.start)}:{span.spark_json(span.end)}{how}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def _apply_reduced(
    spark: SparkSession,
    settings: JobsSettings,
    spec: JobSpec,
    where: Location,
    span: Range,
    purpose: str,
    chunk_size: int,
    progress: Progress | None,
    topics: Mapping[str, TopicIdentity],
) -> Outcome:
    """A latest-state range: reduced per partition by worker processes, the remainder applied by Spark.

    Each round, every unfinished partition is read until its end or until it kept its share of
    `chunk_size` records; Spark applies what the round kept as one batch covering exactly what it read.
    """
    registry = checked_registry(spark)
    contracts = tuple((c.event_type, c.version, dict(c.schema)) for c in registry)
    identity = _identity(where, purpose, span, ":reduced")
    started = time.monotonic()
    at = dict(span.start)
    total = dead = rounds = 0
    # In the lake: Spark's executors read the kept records from there, and they reach the lake wherever
    # they run (a local temp folder would only work for executors on this machine).
    scratch = settings.lake_root() / f"_reduce-{uuid.uuid4().hex}"
    scratch.mkdir()
    logs = Path(tempfile.mkdtemp(prefix="cdcpipe-reduce-"))  # the workers' stderr, on this machine
    drawing = threading.Lock()  # workers report from their own threads: one progress line at a time

    def report(reached: Offsets) -> None:
        if progress is not None:
            with drawing:
                progress.advance(reached)

    try:
        with ThreadPoolExecutor(MAX_WORKERS) as workers:
            while True:
                # Skip what the table holds (a rerun, a swap's catch-up): the workers would read it for nothing.
                held = applied.read(where.table)
                at = {tp: min(span.end[tp], held.next_missing(tp, offset)) for tp, offset in at.items()}
                report(at)
                pending = sorted(tp for tp in at if at[tp] < span.end[tp])
                if not pending:
                    break
                share = max(1, chunk_size // len(pending))
                held_ids = _write_held_ids(spark, spec, where, identity, scratch, {tp: at[tp] for tp in pending})
                tasks = [
                    Task(
                        settings.kafka.properties(),
                        t,
                        p,
                        at[(t, p)],
                        span.end[(t, p)],
                        share,
                        str(scratch),
                        str(logs),
                        contracts,
                        held_ids.get((t, p)),
                    )
                    for t, p in pending
                ]
                reduced = list(workers.map(lambda task: _run_worker(task, report), tasks))
                # Delta's txnVersion of the round: how far into the range it starts. It grows from round to
                # round, and a rerun (which starts past what the table holds) never reuses a committed one
                # for other records, as a round count would once held offsets are skipped.
                version = sum(at[tp] - span.start[tp] for tp in at)
                superseded = [r.superseded for r in reduced if r.superseded]
                ctx = BatchContext(
                    spark,
                    spec,
                    where.table,
                    where.dead_letters,
                    identity,
                    version,
                    topics=topics,
                    superseded=spark.read.parquet(*superseded) if superseded else None,
                )
                covered = {(r.topic, r.partition): (r.start, r.stopped) for r in reduced}
                done, bad = handle_batch(_kept(spark, reduced), ctx, registry, covered)
                total, dead, rounds = total + done, dead + bad, rounds + 1
                for r in reduced:
                    at[(r.topic, r.partition)] = r.stopped
                    for file in (r.file, r.superseded, held_ids.get((r.topic, r.partition))):
                        if file:
                            LakePath.of(file, scratch.access).delete()
    finally:
        scratch.delete_tree()
        shutil.rmtree(logs, ignore_errors=True)
    if progress is not None:
        progress.finish()
    return Outcome(span, total, dead, rounds, time.monotonic() - started)


def _write_held_ids(
    spark: SparkSession,
    spec: JobSpec,
    where: Location,
    identity: str,
    scratch: LakePath,
    starts: Mapping[Partition, int],
) -> dict[Partition, str]:
    """Per partition, a file of the event ids the table applied in the look-back before its start (none: no file).

    A worker drops a record with one of these ids as a resent copy: kept, it could supersede a newer event of
    its key in the range and then be dropped by Spark as the copy it is, taking that newer event with it.
    """
    ctx = BatchContext(
        spark, spec, where.table, where.dead_letters, identity, 0, ranges={tp: (s, s) for tp, s in starts.items()}
    )
    if applied.newest_version(ctx.event_ids_table) < 0:
        return {}
    rows = recent_ids(ctx).select("topic", "kafka_partition", "event_id").toArrow().to_pylist()
    by_partition: dict[Partition, list[str]] = {}
    for row in rows:
        by_partition.setdefault((str(row["topic"]), int(row["kafka_partition"])), []).append(str(row["event_id"]))
    files = {}
    for (topic, partition), ids in by_partition.items():
        if (topic, partition) not in starts:
            continue
        target = scratch / f"{topic}-{partition}-{starts[(topic, partition)]}-held.parquet"
        filesystem, path = target.filesystem()
        pq.write_table(pa.table({"event_id": pa.array(ids, pa.string())}), path, filesystem=filesystem)
        files[(topic, partition)] = str(target)
    return files


def _run_worker(task: Task, report: Callable[[Offsets], None]) -> Reduced:
    """Run one task in its own process (streaming_jobs.ranges.reduce), passing its progress on as it comes."""
    log = Path(task.logs) / f"{task.topic}-{task.partition}-{task.start}.log"
    outcome: Reduced | None = None
    # stderr to a file: the Kafka client may log more there than a pipe holds while stdout is read.
    with (
        log.open("w+") as errors,
        subprocess.Popen(
            [sys.executable, "-m", "streaming_jobs.ranges.reduce"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        ) as worker,
    ):
        assert worker.stdin is not None  # noqa: S101 - PIPE was asked for
        assert worker.stdout is not None  # noqa: S101
        # On stdin, not in argv: every contract's schema goes with the task, more than an argument may hold.
        try:
            worker.stdin.write(json.dumps(asdict(task)))
            worker.stdin.close()
        except BrokenPipeError:  # a worker that died at once: its stderr says why
            with contextlib.suppress(BrokenPipeError):
                worker.stdin.close()  # marks it closed even though the flush fails
        for line in worker.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "reached":
                report({(task.topic, task.partition): int(rest)})
            elif word == "reduced":
                outcome = Reduced(**json.loads(rest))
        worker.wait()
        errors.seek(0)
        problem = errors.read().strip()[-2000:]
    if worker.returncode != 0 or outcome is None:
        raise ReduceError(
            f"reading {task.topic}[{task.partition}] from offset {task.start} failed "
            f"(exit {worker.returncode}): {problem or 'no message'}"
        )
    return outcome


def _kept(spark: SparkSession, reduced: list[Reduced]) -> DataFrame:
    """The records a round kept, as Spark's Kafka source would give them."""
    files = [r.file for r in reduced if r.file]
    if files:
        return spark.read.parquet(*files)
    return spark.createDataFrame([], KAFKA_COLUMNS)  # read only transaction markers or aborted records
