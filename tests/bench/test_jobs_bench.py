"""The jobs bench's sustained-rate search: a job that falls behind is seen, and the search stops there."""

from __future__ import annotations

from typing import Any

from tests.support.bench import load_bench_module

jobs_bench: Any = load_bench_module("jobs_bench")


def steady(n: int, seconds: float) -> list[tuple[float, float]]:
    return [(i / 100, seconds) for i in range(n)]


def test_a_latency_that_holds_keeps_up_and_one_that_grows_does_not() -> None:
    assert jobs_bench.keeps_up(jobs_bench.thirds(steady(300, 1.2))) is True
    # 1.2x over capacity for 30 s: each change waits 0.2 s longer per second of the run.
    growing = [(t / 100, 1.0 + 0.2 * t / 100) for t in range(3000)]
    first, last = jobs_bench.thirds(growing)
    assert last - first > 3
    assert jobs_bench.keeps_up((first, last)) is False
    # A slow kind whose latency holds keeps up: the allowance is half its first third's.
    assert jobs_bench.keeps_up((10.0, 14.0)) is True
    assert jobs_bench.keeps_up(jobs_bench.thirds(steady(2, 1.0))) is None
    # A window of a few long batches shows the warm-up draining, not a trend: no verdict.
    assert jobs_bench.keeps_up((20.0, 13.0), batches=6) is None


def test_batches_that_lengthen_fall_behind_even_when_the_latency_grows_within_its_allowance() -> None:
    # A history for ten minutes at 3,000 changes/s: latency thirds 28.6 -> 42.4 s (within half of 28.6),
    # its batches 14.7 -> 33.4 s: behind. A mirror's batches that hold (14.5 -> 11.1 s) keep up.
    assert jobs_bench.keeps_up((28.6, 42.4)) is True
    assert jobs_bench.keeps_up((28.6, 42.4), durations=(14.7, 33.4)) is False
    assert jobs_bench.keeps_up((16.0, 15.0), durations=(14.5, 11.1)) is True
    # Short batches may vary by a second without a trend.
    assert jobs_bench.keeps_up((1.5, 1.6), durations=(0.4, 1.3)) is True
    batches = {n: {"numInputRows": 10, "durationMs": {"triggerExecution": 1000 * (1 + n)}} for n in range(12)}
    assert jobs_bench._duration_thirds(batches) == (2.5, 10.5)


def test_the_search_stops_at_the_first_rate_not_kept_up_and_names_the_one_before() -> None:
    asked: list[int] = []

    def measure(kind: str, rate: int) -> dict[str, Any]:
        asked.append(rate)
        return {"keeps_up": rate <= 2000, "latency_s": {"p50": rate / 1000}}

    found = jobs_bench.highest_sustained(measure, "table_mirror", [4000, 1000, 3000, 2000, 6000])
    assert asked == [1000, 2000, 3000], "ascending, and not past the first rate it fell behind at"
    assert found["highest_sustained_per_s"] == 2000
    assert found["rates"]["3000"]["keeps_up"] is False
    assert found["stopped_at"] == {"rate": 3000, "why": "fell behind"}
    unsure = jobs_bench.highest_sustained(lambda kind, rate: {"keeps_up": None}, "table_mirror", [750])
    assert unsure["stopped_at"] == {"rate": 750, "why": "no verdict"}
    none = jobs_bench.highest_sustained(lambda kind, rate: {"keeps_up": False}, "floor", [500])
    assert none["highest_sustained_per_s"] is None


def test_a_backlog_s_rate_is_its_records_over_its_one_batch_not_spark_s_count_of_reads() -> None:
    # Spark's numInputRows counts each read of the batch's records: twice here, and its rate with it.
    report: dict[str, Any] = {"batchId": 0, "numInputRows": 2000, "processedRowsPerSecond": 1000.0}
    progress = {"progress": report | {"durationMs": {"triggerExecution": 2000}}}
    assert jobs_bench.batch_rate(progress, 1000) == 500
    progress["progress"]["batchId"] = 1  # a run of several batches: the last one's records are not the backlog's
    assert jobs_bench.batch_rate(progress, 1000) is None


def test_a_backlogs_batch_is_split_into_the_jobs_steps_largest_first() -> None:
    progress = {
        "progress": {"batchId": 0, "durationMs": {"triggerExecution": 9000, "addBatch": 8500}},
        "batch_steps": {"batch_id": 0, "seconds": {"classify.read": 4.0, "write": 3.0, "resent": 0.5}},
    }
    assert list(jobs_bench.batch_split(progress).items()) == [
        ("spark.triggerExecution", 9000),
        ("job.classify.read", 4000),
        ("job.write", 3000),
        ("job.resent", 500),
    ]
    assert jobs_bench.batch_split({}) == {"spark.triggerExecution": 0}
