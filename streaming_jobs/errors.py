"""Errors of the streaming stage."""

from __future__ import annotations

from cdcpipe.errors import CdcpipeError


class StreamingError(CdcpipeError):
    """A streaming job or its Spark session could not do what was asked."""


class SparkJarsMissingError(StreamingError):
    """The Kafka source or Delta jars are not installed where the session looks for them."""


class ContractPatternError(StreamingError):
    """A contract's `pattern` is one Java's regex (which Spark checks with) cannot compile."""


class KafkaUnreachableError(StreamingError):
    """Kafka did not answer a request for partitions or offsets."""

    def __init__(self, bootstrap: str, cause: Exception) -> None:
        reason = cause.args[0].str() if cause.args and hasattr(cause.args[0], "str") else str(cause)
        super().__init__(
            f"cannot read topics or offsets from Kafka at {bootstrap} ({reason}); check CDCPIPE_KAFKA_BOOTSTRAP "
            "and that the broker is up (`cdcpipe stack status`)"
        )
