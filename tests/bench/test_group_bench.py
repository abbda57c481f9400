"""The group bench's latency quantiles, from the driver's cumulative histogram buckets."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.bench import load_bench_module

group_bench: Any = load_bench_module("group_bench")
INF = float("inf")


def test_a_quantile_is_interpolated_within_its_bucket_as_prometheus_does() -> None:
    # 100 observations: 50 under 1 s, 40 more under 2 s, 10 more under 5 s.
    cumulative = {0.5: 10.0, 1.0: 50.0, 2.0: 90.0, 5.0: 100.0, INF: 100.0}
    assert group_bench.quantile(0.5, cumulative) == 1.0
    assert group_bench.quantile(0.7, cumulative) == pytest.approx(1.5)
    assert group_bench.quantile(0.99, cumulative) == pytest.approx(4.7)
    assert group_bench.quantile(0.5, {1.0: 0.0, INF: 0.0}) is None, "no observation: no figure"


def test_a_window_is_what_the_histogram_gained_in_it() -> None:
    before = {1.0: 5.0, INF: 8.0}
    after = {1.0: 7.0, INF: 20.0}
    assert group_bench.minus(after, before) == {1.0: 2.0, INF: 12.0}
    assert group_bench.quantile(0.5, group_bench.minus(after, before)) == 1.0  # beyond the last bound: its start
