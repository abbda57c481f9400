"""Where each aggregate type's events go: its topic and the largest record it takes, or why it has none.

Read from Kafka's metadata once per aggregate type and kept until a produce error says the topic changed.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from outbox_relay.batches import Refusal
from outbox_relay.config import RelaySettings
from outbox_relay.errors import KafkaUnavailableError, PublishStalledError
from outbox_relay.kafka import LEGAL_TOPIC, PRODUCER_MAX_MESSAGE_BYTES, stall_cause

log = logging.getLogger("cdcpipe.relay")

Target = tuple[str, int] | Refusal  # (topic, max record bytes), or why the aggregate type can have none


class TopicTargets:
    """Each aggregate type's target, resolved on first use."""

    def __init__(self, settings: RelaySettings, admin: AdminClient) -> None:
        self.settings = settings
        self._admin = admin
        self._targets: dict[str, Target] = {}

    def target(self, aggregate_type: str) -> Target:
        """The remembered target, or one resolved now (raising while its topic cannot take records)."""
        return self._targets.get(aggregate_type) or self._resolve(aggregate_type)

    def remember(self, aggregate_type: str, target: Target) -> Target:
        self._targets[aggregate_type] = target
        return target

    def forget(self, topic: str) -> None:
        """Resolve the aggregate types of `topic` again at their next batch (it may have been deleted)."""
        for kind, target in list(self._targets.items()):
            if isinstance(target, tuple) and target[0] == topic:
                del self._targets[kind]

    def _resolve(self, aggregate_type: str) -> Target:
        """The topic of an aggregate type and the largest record it takes; or why it can have none."""
        allowed = self.settings.allowed_aggregate_types
        topic = self.settings.topic_for(aggregate_type)
        result: Target
        if allowed and aggregate_type not in allowed:
            result = Refusal(
                f"aggregate type {aggregate_type!r} is not in CDCPIPE_ALLOWED_AGGREGATE_TYPES "
                f"({sorted(allowed)}); add it there to publish these events",
                "not_allowed",
            )
        elif not LEGAL_TOPIC.fullmatch(topic):
            result = Refusal(
                f"aggregate type {aggregate_type!r} gives the topic name {topic!r}, which Kafka "
                "does not allow (letters, digits, '.', '_', '-'; at most 249)",
                "bad_topic",
            )
        else:
            self.check(topic)  # raises while it cannot take records: nothing is cached then
            result = (topic, self.max_record_bytes(topic))
        return self.remember(aggregate_type, result)

    def check(self, topic: str) -> None:
        """Raise `PublishStalledError` unless the topic exists and this relay may see it."""
        try:
            metadata = self._admin.list_topics(topic=topic, timeout=10)
        except KafkaException as exc:
            raise KafkaUnavailableError(f"cannot read topic {topic}'s metadata: {exc.args[0]}") from exc
        found = metadata.topics.get(topic)
        error = found.error if found is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        if error is not None:
            raise PublishStalledError(topic, stall_cause(topic, error))

    def max_record_bytes(self, topic: str) -> int:
        """The topic's max.message.bytes (capped by the producer's own limit).

        The relay must know it: a record too large is a dead letter only when the relay can tell it is the one
        too large. Kafka refuses a whole produce request for one record in it, so its refusal does not say
        which of the records it held was; without the limit, publishing stalls, naming the ACL to grant.
        """
        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            configs = self._admin.describe_configs([resource], request_timeout=10)[resource].result()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                raise PublishStalledError(
                    topic,
                    f"the relay may not read the topic's max.message.bytes ({error.name()}): grant it "
                    f"DESCRIBE_CONFIGS on topic {topic} (`cdcpipe topics apply` grants it to the topic's producers)",
                ) from exc
            raise KafkaUnavailableError(f"cannot read topic {topic}'s config: {error.str()}") from exc
        return min(PRODUCER_MAX_MESSAGE_BYTES, int(configs["max.message.bytes"].value))
