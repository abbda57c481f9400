"""The benches' load generator: its report a file, every wait on it bounded (a run that fails never hangs)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from schemas.config import OutboxNames
from tests.support.bench import load_bench_module

common: Any = load_bench_module("common")
REFUSED = "postgresql://nobody@127.0.0.1:9/none"  # nothing listens on port 9: the generator fails at once


def test_a_generator_that_failed_is_said_at_once_not_waited_for() -> None:
    generator = common.Generator(
        REFUSED, common.outbox_load(OutboxNames()), rate=10, seconds=60, start_ns=time.time_ns()
    )
    began = time.monotonic()
    with pytest.raises(SystemExit, match="without its report"):
        generator.report()
    assert time.monotonic() - began < 30, "a dead generator is seen when it ends, not after its 60 s"


def test_a_generator_stopped_mid_run_ends_within_its_bound() -> None:
    generator = common.Generator(
        REFUSED, common.outbox_load(OutboxNames()), rate=10, seconds=60, start_ns=time.time_ns() + 10**12
    )
    began = time.monotonic()
    generator.stop()
    assert not generator.process.is_alive()
    assert time.monotonic() - began < 25
