from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from streaming_jobs.errors import ReduceError
from streaming_jobs.ranges.backfill import _run_worker, chunks
from streaming_jobs.ranges.positions import Range
from streaming_jobs.ranges.progress import Progress
from streaming_jobs.ranges.reduce import Task


def test_chunks_cover_the_range_exactly_once_each_partition_advancing_by_its_share() -> None:
    span = Range({("t", 0): 0, ("t", 1): 100, ("t", 2): 7}, {("t", 0): 25, ("t", 1): 110, ("t", 2): 7})
    parts = list(chunks(span, 20))
    assert parts[0] == ({("t", 0): 0, ("t", 1): 100}, {("t", 0): 10, ("t", 1): 110})
    seen: dict[tuple[str, int], list[int]] = {}
    for start, end in parts:
        assert set(start) == set(end)
        for tp in start:
            assert end[tp] > start[tp]
            seen.setdefault(tp, []).extend(range(start[tp], end[tp]))
    assert seen == {("t", 0): list(range(25)), ("t", 1): list(range(100, 110))}


def test_progress_shows_done_over_total_per_partition_the_rate_and_the_time_left() -> None:
    now = [0.0]
    out = io.StringIO()
    span = Range({("t", 0): 0, ("t", 1): 50}, {("t", 0): 100, ("t", 1): 150})
    progress = Progress("backfill j", span, out, clock=lambda: now[0])
    now[0] = 2.0
    progress.advance({("t", 0): 50, ("t", 1): 100})
    assert out.getvalue() == "backfill j: 100/200 events (50%), 50 events/s, 2s left | t[0] 50/100, t[1] 50/100\n"
    now[0] = 4.0
    progress.advance({("t", 0): 100, ("t", 1): 150})
    assert out.getvalue().splitlines()[-1].startswith("backfill j: 200/200 events (100%), 50 events/s, done")


def test_a_reduce_worker_that_fails_is_an_error_naming_the_partition_and_what_the_worker_said(
    tmp_path: Path,
) -> None:
    # A contract version that is not a number makes the worker fail as it reads its task, before any Kafka.
    bad_contracts: Any = (("OrderPlaced", "one", {}),)
    task = Task(
        {"bootstrap.servers": "127.0.0.1:1"}, "orders", 3, 40, 50, 10, str(tmp_path), str(tmp_path), bad_contracts
    )
    reports: list[object] = []
    with pytest.raises(ReduceError) as failed:
        _run_worker(task, reports.append)
    message = str(failed.value)
    assert "reading orders[3] from offset 40 failed (exit 1)" in message
    assert "invalid literal for int()" in message  # the worker's own error, from its stderr
    assert reports == []
