"""Errors of the outbox relay."""

from __future__ import annotations

from ground.errors import CdcpipeError, RetryableError


class RelayError(CdcpipeError):
    """The relay cannot go on; the message says why and what to change."""


class KafkaUnavailableError(RetryableError, RelayError):
    """Kafka did not acknowledge a batch in time; the rows stay in the outbox and are sent again."""


class PublishStalledError(KafkaUnavailableError):
    """A topic the batch needs cannot take records until an operator acts: it does not exist, or an ACL lacks.

    The batch stays in the outbox and the relay keeps retrying: nothing becomes a dead letter.
    """

    def __init__(self, topic: str, cause: str) -> None:
        self.topic = topic
        self.cause = cause
        super().__init__(f"publishing is stalled on topic {topic}: {cause}")


class RedriveError(RelayError):
    """`relay redrive` could not put dead letters back; nothing was moved."""
