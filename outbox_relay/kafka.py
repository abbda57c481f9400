"""The relay's producer and how it reads Kafka's errors: which bury a record, which stall publishing."""

from __future__ import annotations

import os
import re

from confluent_kafka import KafkaError

from outbox_relay.config import RelaySettings

# The producer refuses anything larger than this itself (librdkafka's message.max.bytes).
PRODUCER_MAX_MESSAGE_BYTES = 1_000_000


# Record overhead beyond key, value and headers (batch and record headers), so the size check is safe.
RECORD_OVERHEAD_BYTES = 256


LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


# Errors after which the same record will never be accepted: the row becomes a dead letter. Nothing an
# operator can fix on the cluster is here: a record refused for one of these is refused for what it is.
PERMANENT_ERRORS = {
    KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_EXCEPTION,  # an illegal topic name
    KafkaError._INVALID_ARG,
}


# Kafka refuses a whole produce request when one record in it is too large: every record of it comes back
# with the error, the innocent ones too. The topic's limit is read again and the batch retried; the check
# before producing then buries only the records larger than the limit.
SIZE_ERRORS = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.RECORD_LIST_TOO_LARGE,
}


# Errors an operator fixes on the cluster (create the topic, grant the ACL): the batch goes back into the
# outbox and publishing stalls, loudly, until they are fixed. Never a dead letter.
STALLING_ERRORS = {
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


def producer_config(settings: RelaySettings) -> dict[str, str | int | float | bool]:
    """The relay's producer: idempotent, acks=all, so a retried send can neither duplicate nor reorder."""
    return settings.kafka.client_config(
        **{
            "client.id": f"cdcpipe-relay-{os.getpid()}",
            "enable.idempotence": True,
            "acks": "all",
            # The Java client's partitioner (librdkafka's own default hashes keys differently): an aggregate lands in
            # the partition Debezium's Connect worker puts it in, so switching publishers keeps its order.
            "partitioner": "murmur2_random",
            "linger.ms": settings.linger_ms,
            "message.timeout.ms": int(settings.delivery_timeout_s * 1000),
            "message.max.bytes": PRODUCER_MAX_MESSAGE_BYTES,
            "queue.buffering.max.messages": max(100_000, 2 * settings.batch_size),
            # librdkafka leaves Nagle's algorithm on (the Java client turns it off): a small produce request could
            # wait behind the broker's delayed ACK, milliseconds added to a batch that is waiting for its ack.
            "socket.nagle.disable": True,
        }
    )


def stall_cause(topic: str, error: KafkaError) -> str:
    """What is wrong with a topic that stalls publishing, and the fix."""
    code = error.code()
    if code in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART):
        return (
            f"the topic does not exist ({error.name()}) and this relay does not create topics: declare it in a "
            f"topic file and run `cdcpipe topics apply`, or create it on the cluster"
        )
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
        return (
            f"the relay's principal is not authorized ({error.name()}): grant it WRITE and DESCRIBE on topic {topic} "
            "(name it under `producers` in the topic's file and run `cdcpipe topics apply`)"
        )
    return f"{error.name()}: {error.str()}"
