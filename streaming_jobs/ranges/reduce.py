"""A partition's range reduced to what a latest-state table can use: each key's newest event, and every suspect.

A latest-state read model keeps one row per key: the newest valid event. Rebuilding it from a topic (a
replay or a backfill) through Spark means parsing and shuffling every event, and most are superseded. Here
one worker process per partition reads its range with the plain Kafka client and keeps, per key, only the
newest record that surely passes the job's checks (streaming_jobs.classify.python_prefilter), plus every record it is
not sure of. Spark then applies that remainder with the job's own logic (classification, dead letters,
MERGE), so the table and the dead letters come out as if Spark had read every record: a dropped record is
surely valid and superseded by a newer surely valid record of its key, or a copy (its event id came earlier in
the range: a publisher resent it).

A superseded record's event id is still one the table has applied: a resend of it, later, must be dropped, or it
would set its key back to an older state. So the worker also leaves the ids of the records it dropped as
superseded (`SUPERSEDED_SCHEMA`), and they are recorded in `<table>_event_ids` beside the ids of the records
Spark applies (streaming_jobs.once.resent).

A worker is `python -m streaming_jobs.ranges.reduce`, its task as JSON on stdin: plain Python, no pyspark, no
JVM, and no re-import of the caller's main module (which multiprocessing's spawn would do). It prints
`reached OFFSET` lines as it goes, then one `reduced {...}` line, and leaves its remainder in a Parquet
file with the columns of Spark's Kafka source.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from ground.kafka_client import report_error
from streaming_jobs.classify.python_prefilter import SurelyValid
from streaming_jobs.config import CONSUMER_GROUP_PREFIX
from streaming_jobs.errors import ReduceError, StreamingError
from streaming_jobs.lake.paths import LakePath

READ_BATCH = 10_000
STALL_S = 60.0  # no record and no end of partition for this long: something is wrong, say so
PROGRESS_EVERY = 20_000

# Spark's Kafka source names: 0 CreateTime, 1 LogAppendTime, -1 none; librdkafka: 1, 2, 0.
_TIMESTAMP_TYPE = {0: -1, 1: 0, 2: 1}

KAFKA_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


# The ids of the records a worker dropped as superseded, with their coordinates (an event_ids.Record).
SUPERSEDED_SCHEMA = pa.schema(
    [("topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()), ("event_id", pa.string())]
)


@dataclass(frozen=True)
class Task:
    """One partition's [start, end), read until the end or until `keep` records are kept."""

    kafka: dict[str, str]  # the client settings under librdkafka's names (sent to the worker as JSON)
    topic: str
    partition: int
    start: int
    end: int
    keep: int
    folder: str  # where the kept records go: in the lake, for executors anywhere to read
    logs: str  # a local folder for the worker's own files
    contracts: tuple[tuple[str, int, Mapping[str, Any]], ...]
    # A Parquet file of the event ids the table applied in the partition's look-back before `start` (column
    # event_id): a record with one of them is a resent copy, never the newest of its key.
    held_ids: str | None = None


@dataclass(frozen=True)
class Reduced:
    """What a task read ([start, stopped)) and what it kept, in `file` (None when it kept nothing).

    `superseded`: the file of the ids of the records it dropped as superseded (None when it dropped none).
    """

    topic: str
    partition: int
    start: int
    stopped: int
    read: int
    kept: int
    file: str | None
    superseded: str | None = None


def _report(offset: int) -> None:
    print(f"reached {offset}", flush=True)


def reduce_partition(task: Task) -> Reduced:
    """Read the task's range; keep each key's newest surely valid record and every other record."""
    surely = SurelyValid(task.contracts)
    consumer = Consumer(
        {
            **task.kafka,
            "error_cb": report_error,
            "group.id": f"{CONSUMER_GROUP_PREFIX}reduce-{uuid.uuid4()}",  # never committed: the offsets are assigned
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "error",  # an offset retention deleted meanwhile is an error, never skipped
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 256 << 10,
        }
    )
    newest: dict[bytes, tuple[Message, bytes]] = {}  # by key: its newest surely valid record, and its event id
    suspects: list[Message] = []
    superseded: list[tuple[int, bytes]] = []  # (offset, event id) of each surely valid record a newer one replaced
    # The event ids applied before the range, and those read so far: a record with one of them is a resent copy.
    seen: set[bytes] = _held_ids(task.held_ids) if task.held_ids else set()
    position, read = task.start, 0
    where = f"{task.topic}[{task.partition}]"
    try:
        consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
        quiet_since = time.monotonic()
        while position < task.end and len(newest) + len(suspects) < task.keep:
            messages = consumer.consume(READ_BATCH, 1.0)
            if not messages:
                if time.monotonic() - quiet_since > STALL_S:
                    raise ReduceError(
                        f"{where}: nothing read for {STALL_S:.0f} s at offset {position} (range ends at {task.end}); "
                        "is the broker up, or a transaction left open on the topic?"
                    )
                continue
            quiet_since = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # read_committed skips aborted records and transaction markers: the end may lie past
                        # the last record returned.
                        if (message.offset() or 0) >= task.end:
                            position = task.end
                        continue
                    raise ReduceError(f"{where}: reading at offset {position} failed: {error}")
                offset = message.offset() or 0
                if offset >= task.end:
                    position = task.end
                    break
                position = offset + 1
                read += 1
                key = message.key()
                headers = _headers(message)
                event_id = _event_id(headers)
                if event_id is not None and event_id in seen:
                    pass  # a copy of an event earlier in the range, which is applied (or superseded) once already
                elif key is not None and surely(key, message.value(), headers):
                    assert event_id is not None  # noqa: S101 - a surely valid record has exactly one id header
                    previous = newest.get(key)
                    if previous is not None:
                        superseded.append((previous[0].offset() or 0, previous[1]))
                    newest[key] = (message, event_id)  # the partition is read in order: a later offset supersedes
                else:
                    suspects.append(message)
                if event_id is not None:
                    seen.add(event_id)
                if read % PROGRESS_EVERY == 0:
                    _report(position)
                if len(newest) + len(suspects) >= task.keep:
                    break
    finally:
        consumer.close()
    _report(position)
    kept = [*(message for message, _ in newest.values()), *suspects]
    file = _write(task, kept) if kept else None
    ids = _write_superseded(task, superseded) if superseded else None
    return Reduced(task.topic, task.partition, task.start, position, read, len(kept), file, ids)


def _held_ids(file: str) -> set[bytes]:
    filesystem, path = LakePath.of(file).filesystem()
    ids = pq.read_table(path, filesystem=filesystem, columns=["event_id"]).column("event_id").to_pylist()
    return {str(event_id).encode() for event_id in ids if event_id is not None}


def _event_id(headers: list[tuple[str, bytes | None]]) -> bytes | None:
    """The record's event id as Spark reads it: the last `id` header."""
    return next((value for name, value in reversed(headers) if name == "id"), None)


def _write_superseded(task: Task, superseded: list[tuple[int, bytes]]) -> str:
    table = pa.table(
        {
            "topic": [task.topic] * len(superseded),
            "kafka_partition": [task.partition] * len(superseded),
            "kafka_offset": [offset for offset, _ in superseded],
            "event_id": [event_id.decode(errors="replace") for _, event_id in superseded],
        },
        schema=SUPERSEDED_SCHEMA,
    )
    target = LakePath.of(task.folder) / f"{task.topic}-{task.partition}-{task.start}-superseded.parquet"
    filesystem, path = target.filesystem()
    pq.write_table(table, path, filesystem=filesystem)
    return str(target)


def _headers(message: Message) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers: (name, bytes or None) in order, repeated names kept."""
    return cast("list[tuple[str, bytes | None]]", message.headers() or [])


def _write(task: Task, records: Sequence[Message]) -> str:
    stamps = [m.timestamp() for m in records]
    table = pa.table(
        {
            "key": [m.key() for m in records],
            "value": [m.value() for m in records],
            "topic": [task.topic] * len(records),
            "partition": [task.partition] * len(records),
            "offset": [m.offset() for m in records],
            "timestamp": [millis for _, millis in stamps],
            "timestampType": [_TIMESTAMP_TYPE.get(kind, -1) for kind, _ in stamps],
            "headers": [[{"key": k, "value": v} for k, v in _headers(m)] for m in records],
        },
        schema=KAFKA_SCHEMA,
    )
    # The driver's scratch folder in the lake: a local folder, or an object-store prefix (one PUT per file).
    target = LakePath.of(task.folder) / f"{task.topic}-{task.partition}-{task.start}.parquet"
    filesystem, path = target.filesystem()
    pq.write_table(table, path, filesystem=filesystem)
    return str(target)


def main() -> int:
    """`python -m streaming_jobs.ranges.reduce < TASK_JSON`: run one task, print what it did."""
    fields = json.loads(sys.stdin.read())
    fields["contracts"] = tuple((t, int(v), schema) for t, v, schema in fields["contracts"])
    try:
        reduced = reduce_partition(Task(**fields))
    except StreamingError as exc:
        print(exc, file=sys.stderr)
        return 1
    print("reduced " + json.dumps(asdict(reduced)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
