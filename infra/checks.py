"""Checks that exercise the running stack end to end (used by `cdcpipe stack check` and the demo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from infra import kafka_security
from infra.config import StackSettings
from infra.errors import StackError
from infra.stack_secrets import secret_file


def produce_sample(settings: StackSettings, topic: str, count: int) -> None:
    """Create `topic` (one partition), produce `count` small JSON records to it and wait for every ack."""
    kafka = kafka_security.client(settings)  # the stack's own check runs as its admin
    admin = AdminClient(kafka.client_config())
    try:
        admin.create_topics([NewTopic(topic, 1, -1)], request_timeout=30)[topic].result()
    except KafkaException as exc:
        raise StackError(f"kafka: creating topic {topic} failed ({exc.args[0]}); check `cdcpipe stack status`") from exc
    # log_level 3: librdkafka's transient retry warnings (a coordinator still loading) are not news to a user.
    producer = Producer(kafka.client_config(acks="all", **{"enable.idempotence": True, "log_level": 3}))
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


def round_trip(settings: StackSettings, *, master: str, count: int, report: Callable[[str], None]) -> dict[str, Any]:
    """`cdcpipe stack check`: `count` records through Kafka into a Delta table with Spark, read back.

    Returns the Spark side's result (master, rows, seconds); raises StackError when a record is missing.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    topic = f"cdcpipe.stack-check.{stamp}"
    table = settings.lake / "stack-check" / stamp
    produce_sample(settings, topic, count)
    report(f"produced {count} records to {topic}; running a Spark job on {master} ...")
    env = {
        **os.environ,
        **kafka_security.client(settings).environment(),
        "CDCPIPE_SPARK_AUTHENTICATE_SECRET_FILE": str(secret_file(settings, "spark_authenticate_secret")),
    }
    # A child process: the Spark driver JVM lives and dies with the job, not with this command.
    command = [sys.executable, "-m", "streaming_jobs.stack_check", "--topic", topic, "--table", str(table)]
    proc = subprocess.run(  # noqa: S603 - our own module, arguments built here
        [*command, "--master", master], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise StackError(f"the Spark job failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["rows"] != count:
        raise StackError(f"sent {count} records but the Delta table at {table} holds {result['rows']}")
    return result
