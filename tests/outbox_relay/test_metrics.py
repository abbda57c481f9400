"""The relay's batch histogram exposes what prometheus_client's own Histogram would for the same values."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ground.metrics import BatchHistogram
from outbox_relay.metrics import RelayMetrics

BUCKETS = (0.001, 0.01, 0.1, 1, 30)


def exposition(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")]


def test_a_batch_histogram_exposes_what_prometheus_histogram_does() -> None:
    # Values on a bound count in that bucket (le), below the first, above the last, negative (a clock step).
    batches = [[0.0005, 0.001, 0.0011, 0.5, 1.0], [45.0, -0.2], [], [0.01, 0.01, 29.999]]
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batch_histogram = BatchHistogram("lat_seconds", "latency", BUCKETS, ours)
    histogram = Histogram("lat_seconds", "latency", registry=theirs, buckets=BUCKETS)
    for batch in batches:
        batch_histogram.observe_many(batch)
        for value in batch:
            histogram.observe(value)
    # prometheus_client also exports a _created timestamp; the relay's histogram has no use for one.
    assert exposition(ours) == [line for line in exposition(theirs) if "_created" not in line]
    assert ours.get_sample_value("lat_seconds_bucket", {"le": "0.001"}) == 3
    assert ours.get_sample_value("lat_seconds_count") == 10


def test_the_relay_exposes_publish_latency_as_a_histogram() -> None:
    metrics = RelayMetrics()
    metrics.publish_latency.observe_many([0.003, 0.004, 0.25])
    registry = metrics.registry
    assert registry.get_sample_value("cdcpipe_relay_publish_latency_seconds_bucket", {"le": "0.005"}) == 2
    assert registry.get_sample_value("cdcpipe_relay_publish_latency_seconds_count") == 3
    assert registry.get_sample_value("cdcpipe_relay_publish_latency_seconds_sum") == pytest.approx(0.257)


def test_buckets_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct and ascending"):
        BatchHistogram("x_seconds", "x", (0.1, 0.01), CollectorRegistry())
