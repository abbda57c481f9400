"""`cdcpipe topics apply` against the stack's broker, which (as in production) creates no topic on first use."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from schemas import topics
from schemas.topics import TopicSpec
from tests.support.stack import Stack, cdcpipe

pytestmark = pytest.mark.integration


def test_the_broker_creates_no_topic_on_first_produce(stack: Stack) -> None:
    topic = f"test.never-created.{uuid.uuid4().hex[:8]}"
    errors: list[str] = []
    producer = Producer({**stack.kafka_config(), "message.timeout.ms": 5000})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err.name() if err else "ok"))
    producer.flush(15)
    assert errors in (["_UNKNOWN_TOPIC"], ["UNKNOWN_TOPIC_OR_PART"], ["_MSG_TIMED_OUT"]), errors
    assert topic not in AdminClient(stack.kafka_config()).list_topics(timeout=10).topics


def test_apply_creates_configures_and_never_repartitions(stack: Stack, tmp_path: Path) -> None:
    name = f"test.applied.{uuid.uuid4().hex[:8]}"
    env = {**stack.process_env(), "CDCPIPE_TOPICS_DIR": str(tmp_path)}
    file = tmp_path / "t.toml"

    def declare(partitions: int, retention_ms: str) -> None:
        file.write_text(
            f'[[topic]]\nname = "{name}"\npartitions = {partitions}\nreplication_factor = -1\n'
            f'config = {{ "retention.ms" = "{retention_ms}" }}\n'
        )

    declare(3, "3600000")
    dry = cdcpipe("topics", "apply", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"{name}: would be created" in dry.stdout
    admin = AdminClient(stack.kafka_config())
    assert name not in admin.list_topics(timeout=10).topics

    first = cdcpipe("topics", "apply", env=env)
    assert first.returncode == 0, first.stderr
    assert f"{name}: created (3 partitions)" in first.stdout
    assert len(admin.list_topics(timeout=10).topics[name].partitions) == 3
    again = cdcpipe("topics", "apply", env=env)
    assert f"{name}: unchanged" in again.stdout

    declare(5, "7200000")
    changed = cdcpipe("topics", "apply", env=env)
    assert changed.returncode == 0, changed.stderr
    assert f"{name}: configured (retention.ms=7200000; has 3 partitions, the file says 5" in changed.stdout
    resource = ConfigResource(ResourceType.TOPIC, name)
    assert admin.describe_configs([resource])[resource].result(15)["retention.ms"].value == "7200000"
    assert len(admin.list_topics(timeout=10).topics[name].partitions) == 3


def test_a_bad_topic_file_is_an_error_naming_the_file_not_a_traceback(stack: Stack, tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text('[[topic]]\nname = "a topic"\npartitions = 1\nreplication_factor = 1\n')
    result = cdcpipe("topics", "apply", env={**stack.process_env(), "CDCPIPE_TOPICS_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert "t.toml: topic #1: name 'a topic' is not a legal topic name" in result.stderr
    assert "Traceback" not in result.stderr


def test_more_replicas_than_brokers_are_refused_before_any_topic_is_made(stack: Stack, tmp_path: Path) -> None:
    names = [f"test.replicas.{uuid.uuid4().hex[:8]}" for _ in range(2)]
    (tmp_path / "t.toml").write_text(
        f'[[topic]]\nname = "{names[0]}"\npartitions = 1\nreplication_factor = 1\n\n'
        f'[[topic]]\nname = "{names[1]}"\npartitions = 1\nreplication_factor = 3\n'
    )
    result = cdcpipe("topics", "apply", env={**stack.process_env(), "CDCPIPE_TOPICS_DIR": str(tmp_path)})
    assert result.returncode == 2, result.stdout
    assert f"topic {names[1]} ({tmp_path / 't.toml'}) asks for 3 replicas" in result.stderr, result.stderr
    assert "the cluster has 1 broker(s) up" in result.stderr
    assert "Nothing was created" in result.stderr
    assert not set(names) & set(AdminClient(stack.kafka_config()).list_topics(timeout=10).topics)


def test_what_apply_created_and_granted_is_usable_the_moment_it_returns(stack: Stack) -> None:
    # KRaft commits a new topic and ACL on the controller and the broker takes them up a moment later; a job
    # submitted right after `topics apply` (as the demo does) was refused as if its topic did not exist.
    consumer = AdminClient(stack.kafka("jobs").client_config())
    consumer.list_topics(timeout=10)  # connected and authenticated before the race starts
    names = [f"test.visible.{uuid.uuid4().hex[:8]}" for _ in range(10)]
    refused: dict[str, str] = {}
    for pair in (names[i : i + 2] for i in range(0, len(names), 2)):
        topics.apply(stack.kafka_config(), [TopicSpec(n, 6, -1, consumers=("User:jobs",)) for n in pair])
        for name, future in consumer.describe_topics(TopicCollection(pair), request_timeout=15).items():
            try:
                assert len(future.result().partitions) == 6
            except KafkaException as exc:
                refused[name] = str(exc)
    assert refused == {}
