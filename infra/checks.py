"""Checks that exercise the running stack end to end (used by `cdcpipe stack check` and the demo)."""

from __future__ import annotations

import json
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from infra.config import StackSettings
from infra.errors import StackError


def produce_sample(settings: StackSettings, topic: str, count: int) -> None:
    """Create `topic` (one partition), produce `count` small JSON records to it and wait for every ack."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 1, -1)], request_timeout=30)[topic].result()
    except KafkaException as exc:
        raise StackError(f"kafka: creating topic {topic} failed ({exc.args[0]}); check `cdcpipe stack status`") from exc
    # log_level 3: librdkafka's transient retry warnings (a coordinator still loading) are not news to a user.
    producer = Producer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "log_level": 3,
        }
    )
    failures: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(count):
        value = json.dumps({"n": i, "produced_at": time.time()})
        producer.produce(topic, key=f"k{i % 10}", value=value, on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(30)
    if remaining or failures:
        raise StackError(
            f"kafka: {remaining} records not acknowledged and {len(failures)} failed on {topic} "
            f"(first error: {failures[:1]}); check `cdcpipe stack status`"
        )
