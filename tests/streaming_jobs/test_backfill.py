from __future__ import annotations

import io

from streaming_jobs.backfill import chunks
from streaming_jobs.positions import Range
from streaming_jobs.progress import Progress


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
