"""Errors of the streaming stage."""

from __future__ import annotations

from cdcpipe.errors import CdcpipeError


class StreamingError(CdcpipeError):
    """A streaming job or its Spark session could not do what was asked."""


class SparkJarsMissingError(StreamingError):
    """The Kafka source or Delta jars are not installed where the session looks for them."""


class ContractPatternError(StreamingError):
    """A contract's `pattern` is one Java's regex (which Spark checks with) cannot compile."""
