"""Where a micro-batch's time goes: wall-clock seconds per step, written with the job's progress.

`cdcpipe jobs status` shows them, and the jobs bench splits a batch's cycle with them (bench/jobs_bench.py).
Timing costs two clock readings per step; nothing here runs a Spark job or reads the lake.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Phases:
    """Seconds per named step of one batch, in the order first seen, and when its table write ran."""

    def __init__(self, batch_id: int, *, timed: bool = True) -> None:
        self.batch_id = batch_id
        self.timed = timed  # whether the batch brings back each record's source time (`source_times`)
        self.began = time.time()
        self.seconds: dict[str, float] = {}
        self.write_span: tuple[float, float] | None = None  # epoch seconds: the job's table write and commit
        # Epoch seconds of each valid record's source: a table change's commit (`source.ts_ms`), an event's Kafka
        # timestamp. Against the commit, the end-to-end latency (streaming_jobs.run.metrics).
        self.source_times: list[float] = []

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    @contextmanager
    def table_write(self) -> Iterator[None]:
        """The write and commit to the job's table (a data file's time and the commit's split them apart)."""
        began = time.time()
        with self.step("write"):
            yield
        self.write_span = (began, time.time())

    def record(self) -> dict[str, Any]:
        """What the progress file keeps of the batch."""
        return {
            "batch_id": self.batch_id,
            "began": round(self.began, 3),
            "seconds": {name: round(s, 4) for name, s in self.seconds.items()},
            "write_span": [round(t, 3) for t in self.write_span] if self.write_span else None,
        }
