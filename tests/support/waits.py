"""Waits that poll a condition and fail with what was awaited: never a bare sleep."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

log = logging.getLogger(__name__)


def wait_until(condition: object, timeout_s: float, what: str, explain: Callable[[], str] | None = None) -> None:
    """Poll `condition` until it holds; between two polls, twice as long as the last one took (at least 0.1 s).

    On a timeout the failure says what was awaited and, given `explain`, what still stood in the way at the last poll.

    Many conditions run a command (`cdcpipe jobs status`, `tables list`): a process of a second or two of CPU.
    Polled back to back, each waiting test kept a core busy with them, on a suite whose two cores are its limit.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    while time.monotonic() < deadline:
        began = time.monotonic()
        if condition():  # type: ignore[operator]
            # Where a long test's time goes (`--log-cli-level=INFO`, or a failure's captured log).
            log.info("waited %.1f s for %s", time.monotonic() - start, what)
            return
        time.sleep(max(0.1, min(2 * (time.monotonic() - began), 5.0)))
    why = f": {explain()}" if explain else ""
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}{why}")
