"""Snapshot progress, from the notifications Debezium writes to the table connector's notifications topic.

An incremental snapshot reports STARTED, IN_PROGRESS (per chunk, with the last key read and the table's
largest key), TABLE_SCAN_COMPLETED (with the rows scanned) and COMPLETED; an initial snapshot reports its
own kinds. The newest notification about a table says where its snapshot is.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from capture.errors import CaptureError


@dataclass(frozen=True)
class Progress:
    """The newest word on one table's snapshot."""

    kind: str  # "Incremental Snapshot" or "Initial Snapshot"
    state: str  # STARTED, IN_PROGRESS, TABLE_SCAN_COMPLETED, COMPLETED, ABORTED, ...
    detail: str
    at: str = ""  # when Debezium said it, UTC

    def line(self) -> str:
        said = f"{self.kind.lower()} {self.state.lower().replace('_', ' ')}"
        said += f" ({self.detail})" if self.detail else ""
        return said + (f" at {self.at}" if self.at else "")


# Notifications read first from each partition's end; doubled until every table asked about has its word. The
# topic holds one notification per snapshot chunk, for as long as its retention: never read it all to say the end.
TAIL = 500


@dataclass(frozen=True)
class Tail:
    """What the newest notifications say per table (schema.table), and how many were read to say it."""

    found: dict[str, Progress]
    read: int


def latest(kafka: dict[str, Any], topic: str, tables: list[str], timeout_s: float = 10.0) -> Tail:
    """Each of `tables`' newest notification in `topic`, read back from its end; empty when there is no topic.

    A window of the newest notifications is folded; it widens (twice as many) while a table asked about has no
    word in it or a notification in it belongs to a snapshot whose start (which names its tables) is older.
    """
    consumer = Consumer({**kafka, "group.id": f"cdcpipe-tables-{uuid.uuid4()}", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            return Tail({}, 0)
        bounds = {}
        for partition in described.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            if high > low:
                bounds[partition] = (low, high)
        window, read = TAIL, 0
        while bounds:
            starts = {p: max(low, high - window) for p, (low, high) in bounds.items()}
            values = _read(consumer, topic, starts, {p: high for p, (_, high) in bounds.items()}, timeout_s)
            read += len(values)
            found, loose = _fold(values)
            whole = all(starts[p] == low for p, (low, _) in bounds.items())
            if whole or (not loose and all(of(found, t) is not None for t in tables)):
                return Tail(found, read)
            window *= 2
        return Tail({}, read)
    except KafkaException as exc:
        raise CaptureError(f"cannot read the snapshot notifications of {topic}: {exc.args[0]}") from exc
    finally:
        consumer.close()


def _read(
    consumer: Consumer, topic: str, starts: dict[int, int], ends: dict[int, int], timeout_s: float
) -> list[bytes | None]:
    """The values from `starts` to `ends` of each partition (one partition's in order: Debezium writes one)."""
    consumer.assign([TopicPartition(topic, p, offset) for p, offset in starts.items()])
    values: list[bytes | None] = []
    remaining = {p: end for p, end in ends.items() if end > starts[p]}
    while remaining:
        message = consumer.poll(timeout_s)
        if message is None:
            break
        if message.error() is not None:
            continue
        partition, offset = message.partition(), message.offset()
        if partition in remaining and offset is not None and offset + 1 >= remaining[partition]:
            del remaining[partition]
        values.append(message.value())
    consumer.unassign()
    return values


def fold(values: list[bytes | None]) -> dict[str, Progress]:
    """Per table, what the newest notification about it says (notifications of unknown shapes say nothing).

    A table scan names its table (`scanned_collection`), a chunk the table in progress; STARTED, COMPLETED
    and ABORTED of an incremental snapshot name none or all, and stand for every table that snapshot took.
    """
    return _fold(values)[0]


def _fold(values: list[bytes | None]) -> tuple[dict[str, Progress], bool]:
    """`fold`, and whether a notification stands for tables named only before it (in an older window)."""
    found: dict[str, Progress] = {}
    loose = False
    taking: dict[str, list[str]] = {}  # per kind of snapshot, the tables of the one under way
    for value in values:
        payload = _payload(value)
        if payload is None:
            continue
        data = payload.get("additional_data") or {}
        kind, state = str(payload.get("aggregate_type", "")), str(payload.get("type", ""))
        if data.get("data_collections"):
            taking[kind] = _tables(data["data_collections"])
        named = data.get("scanned_collection") or data.get("current_collection_in_progress")
        tables = _tables(named) if named else taking.get(kind, [])
        # An initial snapshot's STARTED names no table, and nothing before it would: only a later word is loose.
        loose = loose or (not tables and state != "STARTED")
        detail = ""
        if "total_rows_scanned" in data:
            detail = f"{data['total_rows_scanned']} rows" + (
                f", {data['status'].lower()}" if data.get("status") else ""
            )
        elif "last_processed_key" in data:
            detail = f"at key {data['last_processed_key']} of {data.get('maximum_key', '?')}"
        at = ""
        if isinstance(payload.get("timestamp"), int | float):
            at = datetime.fromtimestamp(payload["timestamp"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        for table in tables:
            found[table] = Progress(kind, state, detail, at)
    return found, loose


def _payload(value: bytes | None) -> dict[str, Any] | None:
    """A snapshot notification's payload (JSON, with or without its schema envelope); None for anything else."""
    try:
        document = json.loads(value or b"null")
    except ValueError:
        return None
    payload = document.get("payload", document) if isinstance(document, dict) else None
    if not isinstance(payload, dict) or "Snapshot" not in str(payload.get("aggregate_type", "")):
        return None
    return payload


def _tables(named: object) -> list[str]:
    return [t.strip() for t in str(named).split(",") if t.strip()]


def of(found: dict[str, Progress], table: str) -> Progress | None:
    """`table`'s progress: Debezium names it `schema.table`, or `db.schema.table` in some notifications.

    Matched whole, never cut at a dot: a table's own name may have one (`sales.Order Lines.v2`).
    """
    return found.get(table) or next((p for name, p in found.items() if name.endswith(f".{table}")), None)
