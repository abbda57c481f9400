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


def latest(kafka: dict[str, Any], topic: str, timeout_s: float = 10.0) -> dict[str, Progress]:
    """Per table (schema.table), the newest notification of `topic`; empty when the topic does not exist yet."""
    consumer = Consumer(
        {
            **kafka,
            "group.id": f"cdcpipe-tables-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            return {}
        ends = {}
        for partition in described.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            if high > low:
                ends[partition] = high
        if not ends:
            return {}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        values: list[bytes | None] = []
        remaining = dict(ends)
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
        return fold(values)
    except KafkaException as exc:
        raise CaptureError(f"cannot read the snapshot notifications of {topic}: {exc.args[0]}") from exc
    finally:
        consumer.close()


def fold(values: list[bytes | None]) -> dict[str, Progress]:
    """Per table, what the newest notification about it says (notifications of unknown shapes say nothing).

    A table scan names its table (`scanned_collection`), a chunk the table in progress; STARTED, COMPLETED
    and ABORTED of an incremental snapshot name none or all, and stand for every table that snapshot took.
    """
    found: dict[str, Progress] = {}
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
    return found


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
