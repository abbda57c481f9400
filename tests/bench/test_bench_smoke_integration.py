"""Every benchmark runs: tiny sizes, seconds not minutes, so none can rot unnoticed (`make bench` gives the figures).

Each writes its results into a folder of the test's own (CDCPIPE_BENCH_RESULTS), never over the figures in
bench/results/. Only that it runs to the end and reports what it measured is checked here: the figures of a
tiny run on a busy machine say nothing. `bench/chaos.py` has its own short run (test_chaos_integration), and
`bench/replication_bench.py` runs there, on the cluster it needs; the
benches that restart the stack run in tests/infra/test_stack_lifecycle.py, within its one down/up cycle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import results, run_bench
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

# Benches whose figures leave their Spark session's start out run on the test process's shared driver (as the
# tests' job runs do): the smoke run proves they run to their end, not how long a driver takes to start.
ON_THE_SHARED_DRIVER = {"merge_bench", "replay_bench"}

# The floor's code and the job's, each with one of its options: every variant is one harness, one flag apart.
SMOKE_VARIANTS = "floor_marker,job_one_task_per_core"

# bench, tiny arguments, the results file, keys its JSON must hold
ON_A_RUNNING_STACK = [
    (
        "jobs_bench",
        # The floor (the event harness, a bare driver) and table_history (the table harness, a job's driver): the
        # event kinds run the floor's harness with a job's driver, table_mirror as table_history does (a mirror
        # runs in the throughput part, latest_state in the event one): the smoke run leaves them out for time.
        [
            *("--rate", "200", "--seconds", "3", "--runs", "1", "--events", "2000", "--lakes", "local"),
            *("--settle-s", "3", "--warmup-s", "2", "--kinds", "floor,table_history"),
        ],
        "jobs.json",
        ["local"],
    ),
    (
        "relay_bench",
        ["--events", "2000", "--rounds", "1", "--rates", "200", "--seconds", "2", "--warmup", "1"],
        "relay.json",
        ["relay_drain", "relay_drain_metrics_off", "relay_drain_metrics_on_over_off", "debezium_drain", "latency"],
    ),
    (
        "catch_up_bench",
        ["--events", "2000", "--notifications", "500", "--rounds", "1"],
        "catch_up.json",
        ["quiet_drain_events_per_s", "notified_drain_events_per_s"],
    ),
    (
        "replay_bench",
        ["--sizes", "2000", "--chunk-size", "1000", "--lakes", "local", "--no-warm-up"],
        "replay.json",
        ["runs"],
    ),
    (
        "replay_bench",
        ["--sizes", "2000", "--chunk-size", "1000", "--lakes", "local", "--no-warm-up", "--kind", "event_log"],
        "replay_event_log.json",
        ["runs", "job_over_floor_seconds"],
    ),
    (
        "snapshot_bench",
        ["--rows", "3000", "--writes-per-s", "5", "--timeout-s", "300", "--sample-s", "1"],
        "snapshot.json",
        ["snapshot_rows_per_s", "mirror_has_every_row_s"],
    ),
    ("driver_start", ["--runs", "1"], "driver_start.json", ["median", "jvm_cpu_ratio_archive_over_none"]),
    (
        "upkeep_bench",
        ["--changes", "1000", "--keys", "100", "--batch", "500", "--optimize-every", "1"],
        "upkeep.json",
        ["runs", "event_ids_rows_none_over_upkeep", "table_bytes_none_over_upkeep"],
    ),
    # The variant with a table property of its own; the others are the same MERGE under a Spark setting.
    (
        "merge_bench",
        ["--rows", "300", "--batches", "100", "--merges", "2", "--warmup", "1", "--variants", "deletion_vectors"],
        "merge.json",
        ["100", "rows"],
    ),
    # One setting, the one that copies the changes without their schemas first: the others are the same
    # driver with other options, on the topic as Debezium wrote it.
    (
        "table_read_bench",
        ["--changes", "500", "--runs", "1", "--settings", "bare_changes", "--java-options=-XX:TieredStopAtLevel=1"],
        "table_read.json",
        ["published", "bare_changes", "value_bytes"],
    ),
    # Each variant is a driver of its own (about 30 s).
    (
        "batch_bench",
        ["--events", "1500", "--per-batch", "300", "--variants", SMOKE_VARIANTS],
        "batch.json",
        ["ms_median"],
    ),
    (
        "jobs_bench",
        [
            *("--rate", "200", "--drift-minutes", "0.1", "--lakes", "local", "--settle-s", "3", "--warmup-s", "2"),
            *("--job-setting", "optimize_every=50"),
        ],
        "jobs_drift.json",
        ["local"],
    ),
]


@pytest.mark.parametrize(
    ("name", "args", "file", "keys"), ON_A_RUNNING_STACK, ids=[b[2].removesuffix(".json") for b in ON_A_RUNNING_STACK]
)
def test_a_bench_runs_and_reports(
    stack: Stack, tmp_path: Path, name: str, args: list[str], file: str, keys: list[str]
) -> None:
    run_bench(stack, tmp_path, name, args, shared_driver=name in ON_THE_SHARED_DRIVER)
    report = results(tmp_path, file)
    assert report
    for key in keys:
        assert key in report, f"{name}: no {key!r} in {sorted(report)}"
    if name == "snapshot_bench":
        assert report["passed"], report
        assert report["mirror_rows_differing_from_the_table"] == 0
    if name == "replay_bench":
        # 2,000 events over 10,000 keys: one row each in a latest state, an event log and the floor's copy.
        assert report["runs"], report
        assert all(r["rows_in_read_model"] == r["events"] == 2000 for r in report["runs"]), report["runs"]
    if name == "merge_bench":
        merges = report["100"]["deletion_vectors"]
        assert len(merges["ms_each"]) == 2
        assert merges["ms_median"] > 0
    if name == "table_read_bench":
        read = report["bare_changes"]
        assert report["published"] == read["records"] == read["read"] == 500, "every change read, each once"
        assert read["classified"] == 500, "every change classified, each once"
        assert 0 < report["value_bytes"]["without"] < report["value_bytes"]["with_schema"]
    if name == "batch_bench":
        assert set(report["ms_median"]) == set(SMOKE_VARIANTS.split(","))
        assert all(steps["batches"] >= 3 and steps["write"] > 0 for steps in report["ms_median"].values())
    if file == "jobs_drift.json":
        assert report["local"]["drift"]["job_settings"] == ["optimize_every = 50"]
        assert report["local"]["drift"]["batch_duration_by_minute_ms"], "no batch durations by minute"
        assert report["local"]["drift"]["slowest_batches"][0]["split_ms"], "no cycle split of the slowest batch"
    elif name == "jobs_bench":
        assert {"medians", "runs", "throughput"} <= set(report["local"])
        medians = report["local"]["medians"]
        assert {"floor", "table_history"} <= set(medians), medians
        assert medians["table_history_p50_over_floor_p50"] > 0
        history = report["local"]["runs"][0]["table_history"]
        assert history["superseded"] == 0, "the history keeps every version: each change is measured"
        assert history["applied"] >= history["generated"]["events"]
        mirror = report["local"]["mirror_throughput"]
        assert mirror["published"] == 2000
        assert mirror["applied"] == 1000, "2,000 changes of 1,000 rows: the mirror's batch applies one per row"
        assert mirror["batch_records_per_s"] > 0, "the backlog was not applied in one batch"
        assert {"job.classify.read", "job.write"} <= set(mirror["batch_split_ms"]), mirror["batch_split_ms"]
        assert report["local"]["runs"][0]["table_history"]["cycle_ms_median"], "no cycle split for the history"
        assert "keeps_up" in report["local"]["runs"][0]["table_history"], "no verdict on whether it kept up"
