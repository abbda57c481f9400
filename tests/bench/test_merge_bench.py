"""The MERGE bench's split of one MERGE into its Spark jobs, from the Spark UI's REST API answer."""

from __future__ import annotations

from typing import Any

from tests.support.bench import load_bench_module

merge_bench: Any = load_bench_module("merge_bench")


def job(job_id: int, began: str, ended: str | None, description: str) -> dict[str, Any]:
    found = {"jobId": job_id, "name": f"call at {job_id}", "submissionTime": f"2026-11-27T08:00:{began}GMT"}
    if description:
        found["description"] = description
    if ended is not None:
        found["completionTime"] = f"2026-11-27T08:00:{ended}GMT"
    return found


def test_a_merges_jobs_are_counted_with_their_running_time_and_the_time_between_them() -> None:
    jobs = [
        job(7, "01.000", "01.100", "job x\nbatch = 3 - MERGE operation - materialize source"),
        job(8, "01.300", "01.700", "batch = 3 - MERGE operation - scanning files for matches: Compute snapshot"),
        job(9, "02.000", "02.050", ""),
    ]
    split = merge_bench.job_split(jobs)
    assert split["count"] == 3
    assert [j["ms"] for j in split["jobs"]] == [100, 400, 50]
    assert split["running_ms"] == 550
    assert split["between_ms"] == 500, "01.000 to 02.050 is 1,050 ms, 550 of them running"
    assert split["jobs"][0]["what"] == "batch = 3 - MERGE operation - materialize source", "the description's last line"
    assert split["jobs"][2]["what"] == "call at 9", "no description: the job's name"


def test_a_job_still_running_is_left_out() -> None:
    split = merge_bench.job_split([job(1, "01.000", "01.200", "a"), job(2, "01.300", None, "b")])
    assert split["count"] == 1
    assert split["between_ms"] == 0
