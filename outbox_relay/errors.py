"""Errors of the outbox relay."""

from __future__ import annotations

from cdcpipe.errors import CdcpipeError, RetryableError


class RelayError(CdcpipeError):
    """The relay cannot go on; the message says why and what to change."""


class KafkaUnavailableError(RetryableError, RelayError):
    """Kafka did not acknowledge a batch in time; the rows stay in the outbox and are sent again."""
