"""The replication bench's latency part: RF 3 and RF 1 in turn each round, their medians and ratio."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from tests.support.bench import load_bench_module

replication_bench: Any = load_bench_module("replication_bench")


def test_each_round_measures_both_replications_in_alternating_order_and_sums_them_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[int] = []

    def latency(*args: Any, replicas: int, **kwargs: Any) -> dict[str, Any]:  # jobs_bench.latency, without a stack
        asked.append(replicas)
        p50 = 2.0 if replicas == 3 else 1.0
        return {"latency_s": {"p50": p50 + len(asked) / 100, "p99": 2 * p50}, "applied": 10, "keeps_up": True}

    monkeypatch.setattr(replication_bench, "latency", latency)
    args = argparse.Namespace(rounds=3, rate=50, latency_seconds=5.0, settle_s=1.0, warmup_s=1.0)
    runs = replication_bench.measure_latency({"CDCPIPE_LOCAL_LAKE": str(tmp_path)}, "t", args)
    assert asked == [3, 1, 1, 3, 3, 1]  # the order swapped every round: neither always runs on a warmer machine
    summary = replication_bench.latency_summary(runs, 50, 5.0)
    assert summary["median_of_rounds_s"] == {"rf3": {"p50": 2.04, "p99": 4.0}, "rf1": {"p50": 1.03, "p99": 2.0}}
    assert summary["rf3_over_rf1"] == {"p50": 1.98, "p99": 2.0}
    assert [run["p50"] for run in summary["runs"]["rf1"]] == [1.02, 1.03, 1.06]


def test_a_run_whose_events_never_reached_delta_stops_the_bench(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(replication_bench, "latency", lambda *a, **k: {"latency_s": None})
    args = argparse.Namespace(rounds=1, rate=50, latency_seconds=5.0, settle_s=1.0, warmup_s=1.0)
    with pytest.raises(SystemExit, match="topic of 3 replica"):
        replication_bench.measure_latency({"CDCPIPE_LOCAL_LAKE": str(tmp_path)}, "t", args)
