"""Reading topics back in tests: an independent consumer that reads from the beginning."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from schemas import topics as topic_files
from schemas.topics import PrefixGrant, TopicSpec


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topics(kafka: dict[str, Any], topics: list[str], expected: int, timeout_s: float = 60) -> list[Record]:
    """Every record of `topics` from the beginning, until `expected` distinct events arrived or the time is up.

    Distinct by the `id` header where there is one: a copy sent again after a crash does not count twice.
    """
    consumer = Consumer(
        {
            **kafka,
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


# Who may use a test's topics unless the test says otherwise: the stack's component users.
PRODUCERS = ("User:relay", "User:connect")
CONSUMERS = ("User:jobs",)


def create_topics(
    kafka: dict[str, Any],
    topics: list[str],
    partitions: int = 1,
    config: dict[str, str] | None = None,
    *,
    producers: tuple[str, ...] = PRODUCERS,
    consumers: tuple[str, ...] = CONSUMERS,
) -> None:
    """Create topics and grant their ACLs as an operator would (`topics apply`): the broker creates none on use."""
    specs = [TopicSpec(t, partitions, 1, config or {}, "test", producers, consumers) for t in topics]
    topic_files.apply(kafka, specs)


def grant_prefixes(kafka: dict[str, Any], prefixes: list[str]) -> None:
    """Let Connect create and write, and the jobs read, the topics a test's connector names itself."""
    grants = [PrefixGrant(p, PRODUCERS, CONSUMERS, ("User:connect",), "test") for p in prefixes]
    topic_files.apply(kafka, [], grants)


def grant(kafka: dict[str, Any], topic: str, principal: str, operations: list[AclOperation]) -> None:
    """Only these operations on one topic, as an operator granting by hand would."""
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for op in operations
    ]
    admin = AdminClient(kafka)  # kept until its futures are done
    for future in admin.create_acls(bindings).values():
        future.result(30)


def set_topic_config(kafka: dict[str, Any], topic: str, key: str, value: str) -> None:
    """Change one config key of a topic, as an operator would."""
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    target = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient(kafka)
    admin.incremental_alter_configs([target])[target].result(30)
