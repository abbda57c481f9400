"""Reading topics back in tests: an independent consumer that reads from the beginning."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topics(bootstrap: str, topics: list[str], expected: int, timeout_s: float = 60) -> list[Record]:
    """Every record of `topics` from the beginning, until `expected` distinct events arrived or the time is up.

    Distinct by the `id` header where there is one: a copy sent again after a crash does not count twice.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe(topics)
    records: list[Record] = []
    distinct: set[object] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(distinct) < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                if m.error() is not None:
                    continue  # e.g. the topic does not exist yet
                raw_headers = m.headers() or []
                pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
                headers = {str(k): v if isinstance(v, bytes) else (v or "").encode() for k, v in pairs}
                record = Record(m.topic() or "", m.partition() or 0, m.offset() or 0, m.key(), m.value(), headers)
                records.append(record)
                distinct.add(headers.get("id") or (record.topic, record.partition, record.offset))
    finally:
        consumer.close()
    return records


def create_topics(bootstrap: str, topics: list[str], partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create topics as an operator would: the stack's broker creates none on first use."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1, config=config or {}) for t in topics])
    for future in futures.values():
        future.result(30)
