"""A job driver's metrics: what a batch and a progress report set, and the target file's life."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.phases import Phases
from streaming_jobs.run.metrics import GroupMetrics, JobMetrics, stale_targets, target_file


def spec(kind: str = "table_mirror") -> JobSpec:
    table_kind = {"source_table": "public.orders"} if kind.startswith("table_") else {}
    return JobSpec(name="orders_mirror", kind=kind, topics=("t",), table="orders", **table_kind)


def value(metrics: JobMetrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return metrics.registry.get_sample_value(name, labels or {})


def test_a_batch_counts_its_rows_and_each_records_latency_against_the_commit() -> None:
    metrics = JobMetrics(spec(), 1.0)
    phases = Phases(7)
    phases.write_span = (phases.began + 0.5, phases.began + 1.0)
    committed = phases.write_span[1]
    phases.source_times = [committed - 0.2, committed - 4.0, committed - 40.0]
    metrics.after_batch(phases, applied=3, dead=1)
    assert value(metrics, "cdcpipe_job_batches_total") == 1
    assert value(metrics, "cdcpipe_job_rows_applied_total") == 3
    assert value(metrics, "cdcpipe_job_rows_dead_lettered_total") == 1
    assert value(metrics, "cdcpipe_job_last_commit_timestamp_seconds") == committed
    assert value(metrics, "cdcpipe_job_trigger_interval_seconds") == 1.0
    latency = "cdcpipe_job_end_to_end_latency_seconds_bucket"
    assert value(metrics, latency, {"le": "0.25"}) == 1
    assert value(metrics, latency, {"le": "5.0"}) == 2
    assert value(metrics, latency, {"le": "60.0"}) == 3
    assert value(metrics, "cdcpipe_job_end_to_end_latency_seconds_sum") == pytest.approx(44.2)
    assert value(metrics, "cdcpipe_job_info", {"name": "orders_mirror", "kind": "table_mirror"}) == 1
    assert b"the change's commit in Postgres" in generate_latest(metrics.registry)


def test_lag_per_partition_is_the_latest_offset_less_the_planned_one() -> None:
    metrics = JobMetrics(spec("event_log"), None)
    metrics.after_progress(
        {
            "sources": [
                {
                    "latestOffset": json.dumps({"t": {"0": 120, "1": 50}}),
                    "endOffset": {"t": {"0": 100, "1": 50}},
                }
            ]
        }
    )
    assert value(metrics, "cdcpipe_job_kafka_lag_records", {"topic": "t", "partition": "0"}) == 20
    assert value(metrics, "cdcpipe_job_kafka_lag_records", {"topic": "t", "partition": "1"}) == 0
    assert value(metrics, "cdcpipe_job_trigger_interval_seconds") == 0
    metrics.after_progress(None)  # no report yet: nothing changes, nothing fails


def test_the_driver_serves_on_loopback_writes_its_target_and_removes_it(tmp_path: Path) -> None:
    metrics = JobMetrics(spec(), 1.0)
    port = metrics.start(tmp_path)
    try:
        target = json.loads(target_file(tmp_path, "orders_mirror").read_text())
        assert target == [
            {
                "targets": [f"127.0.0.1:{port}"],
                "labels": {"job": "orders_mirror", "kind": "table_mirror", "__meta_pid": str(os.getpid())},
            }
        ]
        assert "cdcpipe_job_batches_total 0.0" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        metrics.close()
    assert not target_file(tmp_path, "orders_mirror").exists()
    assert stale_targets(tmp_path) == []


def test_a_group_serves_each_tables_metrics_once_labelled_with_its_job_and_which_are_parked(tmp_path: Path) -> None:
    group = GroupMetrics(
        JobSpec(
            name="shop",
            kind="table_group",
            table="shop",
            tables=("s.a", "s.b"),
            topics=("p.s.a", "p.s.b"),
            members=("mirror",),
        )
    )
    a, b = (
        JobMetrics(JobSpec(name=n, kind="table_mirror", topics=("t",), table=n, source_table="s.x"), 1.0)
        for n in ("a_mirror", "b_mirror")
    )
    group.add(a)
    group.add(b)
    phases = Phases(1)
    a.after_batch(phases, applied=5, dead=0)
    group.park(b.spec)
    port = group.start(tmp_path)
    try:
        served = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert json.loads(target_file(tmp_path, "shop").read_text())[0]["labels"]["kind"] == "table_group"
    finally:
        group.close()
    assert 'cdcpipe_job_rows_applied_total{job="a_mirror",kind="table_mirror"} 5.0' in served
    assert 'cdcpipe_job_rows_applied_total{job="b_mirror",kind="table_mirror"} 0.0' in served
    assert 'cdcpipe_job_parked{group="shop",job="b_mirror",kind="table_mirror"} 1.0' in served
    assert 'cdcpipe_job_parked{group="shop",job="a_mirror",kind="table_mirror"} 0.0' in served
    assert served.count("# TYPE cdcpipe_job_rows_applied_total counter") == 1, "one family, a series per table"
    assert not target_file(tmp_path, "shop").exists()


def test_a_target_whose_driver_died_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for name, pid in (("gone", int(dead.stdout)), ("alive", os.getpid())):
        labels = {"job": name, "kind": "event_log", "__meta_pid": str(pid)}
        target_file(tmp_path, name).write_text(json.dumps([{"targets": ["127.0.0.1:1"], "labels": labels}]))
    assert stale_targets(tmp_path) == [target_file(tmp_path, "gone")]
    assert target_file(tmp_path, "alive").exists()
    assert stale_targets(None) == []
