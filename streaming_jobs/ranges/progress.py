"""A progress line for long runs (backfill, replay): offsets done / total per partition, events/s, time left."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from streaming_jobs.offsets import Offsets
from streaming_jobs.ranges.positions import Range

MAX_PARTITIONS_SHOWN = 6


class Progress:
    """Redraws one line on a terminal; writes a line per step elsewhere (a log, CI)."""

    def __init__(
        self,
        label: str,
        span: Range,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.span = span
        self.out = out if out is not None else sys.stderr
        self.clock = clock
        self.started = clock()
        self.reached: Offsets = dict(span.start)

    @property
    def done(self) -> int:
        return sum(self.reached[tp] - self.span.start[tp] for tp in self.span.start)

    def advance(self, reached: Offsets) -> None:
        """The run has read up to these offsets (exclusive) in these partitions."""
        self.reached.update({tp: offset for tp, offset in reached.items() if tp in self.reached})
        self._draw(final=False)

    def finish(self) -> None:
        self._draw(final=True)

    def line(self) -> str:
        total = self.span.total
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        left = (total - self.done) / rate if rate > 0 else None
        share = 100.0 * self.done / total if total else 100.0
        parts = [
            f"{t}[{p}] {self.reached[(t, p)] - self.span.start[(t, p)]}/{self.span.end[(t, p)] - self.span.start[(t, p)]}"
            for t, p in sorted(self.span.start)[:MAX_PARTITIONS_SHOWN]
        ]
        if len(self.span.start) > MAX_PARTITIONS_SHOWN:
            parts.append(f"+{len(self.span.start) - MAX_PARTITIONS_SHOWN} partitions")
        eta = "done" if self.done >= total else ("?" if left is None else f"{_duration(left)} left")
        return f"{self.label}: {self.done}/{total} events ({share:.0f}%), {rate:,.0f} events/s, {eta} | " + ", ".join(
            parts
        )

    def _draw(self, *, final: bool) -> None:
        if self.out.isatty():
            self.out.write("\r\033[K" + self.line() + ("\n" if final else ""))
        else:
            self.out.write(self.line() + "\n")
        self.out.flush()


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
