"""Prometheus pieces every stage's metrics share: a histogram fed a batch at a time, a loopback server."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from itertools import accumulate
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# Seconds from a source commit to the Delta commit that shows it: from a micro-batch's sub-second to a backlog's hours.
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 900, 3600)


def serve(registry: CollectorRegistry, port: int) -> WSGIServer:
    """/metrics of `registry` on 127.0.0.1:port (0: a free port; the server's `server_port` says which).

    Loopback only, as every service of the stack: a scraper on the same host reads it, nothing else can.
    """
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    return server


class BatchHistogram(Collector):
    """A Prometheus histogram that takes a whole batch's observations in one call.

    prometheus_client's `Histogram.observe` takes a lock and walks the buckets for every value, per event, on
    the relay's main thread, the thread every batch waits for. Here a batch is sorted into buckets by C code
    (`bisect` through `map`), and the lock is taken once.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry) -> None:
        if list(buckets) != sorted(set(buckets)):
            raise ValueError(f"{name}: buckets must be distinct and ascending, got {list(buckets)}")
        self._name = name
        self._documentation = documentation
        self._bounds = [float(b) for b in buckets]
        self._counts = [0] * (len(self._bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe_many(self, values: Iterable[float]) -> None:
        """Count every value in the first bucket whose upper bound is at least the value (Prometheus' `le`)."""
        values = list(values)
        tally = Tally(map(partial(bisect_left, self._bounds), values))
        total = sum(values)
        with self._lock:
            for index, count in tally.items():
                self._counts[index] += count
            self._sum += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        bounds = [*map(floatToGoString, self._bounds), "+Inf"]
        yield HistogramMetricFamily(
            self._name, self._documentation, buckets=list(zip(bounds, accumulate(counts), strict=True)), sum_value=total
        )

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self._name, self._documentation)
