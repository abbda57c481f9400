"""A batch that fails on a record's values: apply it in pieces, and dead-letter the record it fails on.

A kind's write or a user's projection can fail on one record's values: under ANSI mode (Spark's default)
a sum beyond 64 bits, a cast of a value that does not fit. Retried as a whole, such a batch fails on every
restart and the job never moves past it. Spark marks these failures as data exceptions, SQLSTATE class
22; only those are isolated. Any other failure (storage, memory, a bug) still fails the batch, to be retried.

On a data exception the batch's records are ordered by (topic, partition, offset) and applied in halves,
each half a write of its own, halving again the piece that fails, down to the lone record it fails on,
which becomes a dead letter with Spark's message. Each piece is contiguous in that order, so the records
of one partition (hence of one key) are still applied in offset order. Each piece's commit records the
offsets it covers (streaming_jobs.once.applied): after a crash the batch runs again over what no piece
committed, so nothing is applied twice. A crash between a poison's dead letter and the commit of its
offset writes that dead letter again when the batch is retried (a copy in the dead letters, never a loss).
A poison costs about one more pass over the batch and two failed attempts per halving (log2 of its size).

An error of the job itself (a projection that divides by zero for every record) would make every record a
poison, at that cost, forever: once `max_poison_in_a_row` records in a row have failed (in offset order, no piece
applied between them), the job stops with Spark's message and the setting, before dead-lettering that one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs.errors import PoisonCeilingError
from streaming_jobs.offsets import Partition
from streaming_jobs.once import applied
from streaming_jobs.once.applied import Interval
from streaming_jobs.once.context import BatchContext, record_only
from streaming_jobs.sinks.dead_letters import write_dead_letters

log = logging.getLogger(__name__)

Handler = Callable[[DataFrame, BatchContext], int]
Position = tuple[str, int, int]  # topic, partition, offset
DATA_EXCEPTION = "22"  # the SQLSTATE class of data exceptions (ISO SQL): the record's values, not the system


SPARK_ERRORS = (PySparkException, Py4JJavaError)


def is_data_error(exc: BaseException) -> bool:
    """True when Spark failed on the data itself (SQLSTATE 22xxx), which retrying cannot fix.

    A write wraps the task's error (TASK_WRITE_FAILED, then the foreachBatch and stream errors): the data
    exception is a cause further down the Java chain, so every cause's SQLSTATE is looked at.
    """
    states = [exc.getSqlState()] if isinstance(exc, PySparkException) else []
    for throwable in _java_causes(exc):
        try:
            states.append(throwable.getSqlState())
        except Py4JError:
            continue  # not a SparkThrowable: it has no SQLSTATE
    return any(str(state or "").startswith(DATA_EXCEPTION) for state in states)


def _java_causes(exc: BaseException) -> Iterator[Any]:
    throwable = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    for _ in range(32):  # a cause chain is short; never loop on a cyclic one
        if throwable is None:
            return
        yield throwable
        throwable = throwable.getCause()


def apply(handler: Handler, records: DataFrame, ctx: BatchContext) -> tuple[int, int]:
    """Run the kind's handler on the batch; on a data exception, in pieces. (applied, dead-lettered)."""
    try:
        return handler(records, ctx), 0
    except SPARK_ERRORS as exc:
        if not is_data_error(exc):
            raise
        log.warning("job %s batch %s failed on its data (%s); finding the record", ctx.job.name, ctx.batch_id, exc)
    rows = records.select("topic", "kafka_partition", "kafka_offset").toArrow().to_pylist()
    positions = sorted((str(r["topic"]), int(r["kafka_partition"]), int(r["kafka_offset"])) for r in rows)
    pieces = _Pieces(handler, records, ctx, app_id=f"{ctx.app_id}-poison-{ctx.batch_id}-{uuid.uuid4().hex[:8]}")
    return pieces.apply(positions)


@dataclass
class _Pieces:
    handler: Handler
    records: DataFrame
    ctx: BatchContext
    app_id: str  # new for each isolation: a retried batch is kept from doubling by the offsets, not the marker
    writes: int = field(default=0)
    in_a_row: int = field(default=0)  # poisons found since the last piece that applied

    def apply(self, piece: list[Position]) -> tuple[int, int]:
        ctx = self._context(piece)
        frame = self._select(piece)
        try:
            done = self.handler(frame, ctx)
        except SPARK_ERRORS as exc:
            if not is_data_error(exc):
                raise
            if len(piece) > 1:
                half = len(piece) // 2
                first, second = self.apply(piece[:half]), self.apply(piece[half:])
                return first[0] + second[0], first[1] + second[1]
            self.in_a_row += 1
            ceiling = ctx.job.max_poison_in_a_row
            if ceiling and self.in_a_row >= ceiling:
                raise PoisonCeilingError(
                    f"job {ctx.job.name}: {self.in_a_row} records in a row failed the {ctx.job.kind} write on their "
                    f"values, the last at {piece[0][0]}[{piece[0][1]}]@{piece[0][2]}: {_data_error_message(exc)}. "
                    "So many look like an error of the job (its projection, its contract), not poison records: fix "
                    "it and start the job again (this record and those after it are applied then), or raise "
                    f"max_poison_in_a_row in the job file (now {ceiling}; 0: never stop)"
                ) from exc
            log.error("job %s: %s:%s:%s is a poison record, dead-lettered: %s", ctx.job.name, *piece[0], exc)
            message = f"the {ctx.job.kind} write failed on this record: {_data_error_message(exc)}"
            write_dead_letters(frame.withColumn("error", F.lit(message)), ctx)
            record_only(self._context(piece))  # its offset is handled: a retried batch must not apply it
            return 0, 1
        self.in_a_row = 0
        return done, 0

    def _context(self, piece: list[Position]) -> BatchContext:
        """The piece as one write: its own marker, and the offsets the table holds once it is in."""
        ranges: dict[Partition, Interval] = {}
        for topic, partition, offset in piece:
            start, end = ranges.get((topic, partition), (offset, offset + 1))
            ranges[(topic, partition)] = (min(start, offset), max(end, offset + 1))
        held = applied.read(self.ctx.table).plus(ranges).with_topics(self.ctx.topics)
        self.writes += 1
        return replace(
            self.ctx, applied_metadata=held.metadata(), ranges=ranges, txn=(self.app_id, self.writes), records=None
        )

    def _select(self, piece: list[Position]) -> DataFrame:
        wanted = self.ctx.spark.createDataFrame(piece, "topic string, kafka_partition int, kafka_offset long")
        return self.records.join(F.broadcast(wanted), ["topic", "kafka_partition", "kafka_offset"], "left_semi")


def _data_error_message(exc: BaseException) -> str:
    """Spark's message for the data exception itself (e.g. [ARITHMETIC_OVERFLOW] ...), not its wrappers'."""
    for throwable in _java_causes(exc):
        try:
            if str(throwable.getSqlState() or "").startswith(DATA_EXCEPTION):
                return str(throwable.getMessage()).splitlines()[0]
        except Py4JError:
            continue
    return str(exc).splitlines()[0]
