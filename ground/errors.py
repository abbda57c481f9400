"""The root of every error cdcpipe raises on purpose."""

from __future__ import annotations


class CdcpipeError(Exception):
    """Something the user can fix. The message says what is wrong, where, and how to fix it.

    `retryable` is a property of the type, not of the message: a caller retries only those errors whose
    class says the same call may succeed later (a service still starting, a rebalance in progress).
    """

    retryable: bool = False


class RetryableError(CdcpipeError):
    """The same call may succeed later without anybody changing anything."""

    retryable = True


class ConfigError(CdcpipeError):
    """A setting (from a file, the environment or the command line) is invalid."""
