"""Waits that poll a condition and fail with what was awaited: never a bare sleep."""

from __future__ import annotations

import time

import pytest


def wait_until(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
