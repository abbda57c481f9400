"""Every job kind, backfill, replay, rewind, optimize and status on an s3a:// lake (the stack's object store).

Spark writes through Hadoop's S3A connector; every table is read back with delta-rs through the S3 API, and
nothing may land on a local disk.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable
from pyarrow import fs as pafs

from tests.support.jobs import (
    BALANCES,
    Event,
    alive_and,
    change,
    deposit,
    drain,
    job_env,
    make_job,
    opened,
    read_delta,
    row,
    run,
    send,
    send_changes,
    status,
    table_rows,
)
from tests.support.stack import Stack
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

OUTBOX_EVENTS: list[Event] = [
    ("a-1", "AccountOpened", opened("a-1"), None),
    ("a-1", "MoneyDeposited", deposit("a-1", 5), None),
    ("a-2", "AccountOpened", opened("a-2"), None),
    ("a-2", "MoneyDeposited", "{not json", None),
]
CHANGES: list[tuple[str, str | None]] = [
    ("a", change("r", None, row("a", 10), 100)),
    ("b", change("c", None, row("b", 20), 110)),
    ("a", change("u", row("a", 10), row("a", 11), 120)),
]


@pytest.mark.parametrize("kind", ["event_log", "latest_state", "projection", "table_mirror", "table_history"])
def test_each_job_kind_applies_once_on_the_object_store(stack: Stack, topic: str, tmp_path: Path, kind: str) -> None:
    lake = stack.s3_lake()
    extra: dict[str, str] = {}
    if kind == "projection":
        extra["projection"] = BALANCES
    if kind.startswith("table_"):
        extra["source_table"] = "public.accounts"
        send_changes(stack, topic, CHANGES)
    else:
        send(stack, topic, OUTBOX_EVENTS)
    job = make_job(stack, tmp_path, kind, [topic], None, lake, **extra)
    job.run()
    if kind == "event_log":
        # The first batch took its start from the checkpoint on the object store: its records were read once.
        progress = job.progress()["progress"]
        assert progress["numInputRows"] == len(OUTBOX_EVENTS)
        job.run()  # nothing new: a second run reads the applied offsets back from the S3 log and applies nothing
        assert job.counts()[0] == 0
    rows = job.table()
    if kind == "event_log":
        assert sorted((r["aggregate_id"], r["event_type"]) for r in rows) == [
            ("a-1", "AccountOpened"),
            ("a-1", "MoneyDeposited"),
            ("a-2", "AccountOpened"),
        ]
        assert [r["kafka_offset"] for r in job.table("_dead_letters")] == [3]
    elif kind == "latest_state":
        assert {r["aggregate_id"]: r["event_type"] for r in rows} == {"a-1": "MoneyDeposited", "a-2": "AccountOpened"}
    elif kind == "projection":
        assert {r["account_id"]: r["balance"] for r in rows} == {"a-1": 5, "a-2": 0}
    elif kind == "table_mirror":
        assert {r["id"]: r["balance"] for r in rows} == {"a": 11, "b": 20}
        assert job.counts() == (2, 0)  # the newest change per key: the first batch writes them, no MERGE
        send_changes(stack, topic, [("b", change("u", row("b", 20), row("b", 21), 130))])
        job.run()
        assert {r["id"]: r["balance"] for r in job.table()} == {"a": 11, "b": 21}
        assert job.counts() == (1, 0)  # counted from the MERGE's commit in the S3 log
    else:
        assert sorted((r["id"], r["balance"]) for r in rows) == [("a", 10), ("a", 11), ("b", 20)]
        assert job.counts() == (3, 0)
        log = DeltaTable(f"{lake}/out", storage_options=stack.s3_options())
        assert log.metadata().partition_columns == ["is_current"]
    assert not (tmp_path / "lake").exists(), "nothing of an s3a:// lake lands on the local disk"
    # The offsets the table holds are in its own log, as on a local lake.
    info = DeltaTable(f"{lake}/out", storage_options=stack.s3_options()).history(1)[0]
    assert json.loads(info["userMetadata"])["cdcpipe"]["applied"][topic]["0"][0][0] == 0


def test_backfill_replay_and_rewind_on_the_object_store(stack: Stack, topic: str, tmp_path: Path) -> None:
    lake = stack.s3_lake()
    name, env = job_env(stack, tmp_path, "projection", topic, lake=lake, projection=BALANCES)
    events: list[Event] = [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(10)]
    events += [(f"a-{i}", "MoneyDeposited", deposit(f"a-{i}", i + 1), None) for i in range(10)]
    send(stack, topic, events)
    expected = {f"a-{i}": i + 1 for i in range(10)}

    def balances(table: str) -> dict[str, object]:
        return {str(r["account_id"]): r["balance"] for r in read_delta(stack, f"{lake}/{table}")}

    done = run("jobs", "backfill", name, "--from", f"{topic}:0:0", "--to", f"{topic}:0:15", env=env)
    assert "backfilled 15 records" in done.stdout
    assert balances("out") == {**{f"a-{i}": 0 for i in range(10)}, **{f"a-{i}": i + 1 for i in range(5)}}
    # (A rerun applying nothing reads the same applied offsets from the S3 log as the event log's second run.)

    drain(name, env)  # the stream applies the rest
    assert balances("out") == expected
    assert status(name, env)["total_lag"] == 0

    swapped = run("jobs", "replay", name, "--into", "rebuilt", "--swap", env=env)
    assert "now uses" in swapped.stdout
    assert status(name, env)["table"] == f"{lake}/rebuilt"
    assert balances("rebuilt") == expected

    moved = run("jobs", "rewind", name, "--to", "earliest", env=env)
    assert f"{topic}[0]: 20 -> 0" in moved.stdout
    drain(name, env)  # the rewound job
    assert balances("rebuilt") == expected, "read again from offset 0, applied once"
    assert not (tmp_path / "lake").exists()


def test_a_stream_optimize_and_status_on_the_object_store(stack: Stack, topic: str, tmp_path: Path) -> None:
    lake = stack.s3_lake()
    name, env = job_env(stack, tmp_path, "latest_state", topic, lake=lake)
    send(stack, topic, [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(20)])
    run("jobs", "submit", name, env=env)
    try:
        wait_until(alive_and(name, env, tmp_path, lambda: status(name, env)["total_lag"] == 0), 300, "the stream")
        send(stack, topic, [(f"b-{i}", "AccountOpened", opened(f"b-{i}"), None) for i in range(5)])
        wait_until(
            alive_and(name, env, tmp_path, lambda: len(table_rows(f"{lake}/out", "aggregate_id", stack)) == 25),
            180,
            "the second round of events",
        )
        report = status(name, env)
        assert report["running"] is True
        assert report["lag"] == [
            {"topic": topic, "partition": 0, "checkpoint_offset": 25, "latest_offset": 25, "lag": 0}
        ]
        optimized = run("jobs", "optimize", name, env=env)  # beside the running job, taking turns with it
        assert f"{lake}/out" in optimized.stdout
    finally:
        run("jobs", "stop", name, env=env)
    table = DeltaTable(f"{lake}/out", storage_options=stack.s3_options())
    assert "OPTIMIZE" in [h["operation"] for h in table.history()]
    streamed = table_rows(f"{lake}/out", "aggregate_id", stack)
    assert len(streamed) == 25
    # A latest-state replay is reduced outside Spark first: its workers write what they keep to the lake (here,
    # objects under s3a://.../_reduce-*), which Spark's executors read wherever they run.
    run("jobs", "replay", name, "--into", "rebuilt", env=env)
    rebuilt = table_rows(f"{lake}/rebuilt", "aggregate_id", stack)
    assert {k: v["event_id"] for k, v in rebuilt.items()} == {k: v["event_id"] for k, v in streamed.items()}
    s3 = pafs.S3FileSystem(
        endpoint_override=stack.env["AWS_ENDPOINT_URL"].removeprefix("http://"),
        scheme="http",
        access_key=stack.env["AWS_ACCESS_KEY_ID"],
        secret_key=stack.env["AWS_SECRET_ACCESS_KEY"],
        region=stack.env["AWS_REGION"],
    )
    left = [i.path for i in s3.get_file_info(pafs.FileSelector(lake.removeprefix("s3a://"))) if "_reduce-" in i.path]
    assert left == [], "the reduction's scratch objects are removed"


def test_a_stream_and_two_backfills_on_one_s3_table_never_lose_or_duplicate_a_commit(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    """Three writers at once on one table: the stream and two overlapping backfills.

    Delta's S3 log store writes commit N with a plain PUT: two writers committing N at once would leave one
    of them. With the writer lease they take turns: every version is there once, each commit's offsets only
    grow, and each event is in the table exactly once.
    """
    lake = stack.s3_lake()
    name, env = job_env(stack, tmp_path, "event_log", topic, lake=lake, max_offsets_per_trigger=40)
    total = 600
    send(stack, topic, [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(total)])
    run("jobs", "submit", name, "--trigger", "500ms", env=env)
    cli = [sys.executable, "-m", "cdcpipe"]
    try:
        backfills = [
            subprocess.Popen(
                [
                    *cli,
                    "jobs",
                    "backfill",
                    name,
                    "--from",
                    f"{topic}:0:{start}",
                    "--to",
                    f"{topic}:0:{end}",
                    "--chunk-size",
                    "50",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for start, end in ((0, 400), (200, total))
        ]
        for proc in backfills:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, out + err
        wait_until(alive_and(name, env, tmp_path, lambda: status(name, env)["total_lag"] == 0), 300, "the stream")
    finally:
        run("jobs", "stop", name, env=env)

    rows = read_delta(stack, f"{lake}/out")
    offsets = sorted(int(str(r["kafka_offset"])) for r in rows)
    assert offsets == list(range(total)), "each event once: none lost, none twice"
    table = DeltaTable(f"{lake}/out", storage_options=stack.s3_options())
    history = sorted(table.history(), key=lambda h: int(h["version"]))
    assert [int(h["version"]) for h in history] == list(range(table.version() + 1)), "no version missing"
    held = [json.loads(h["userMetadata"])["cdcpipe"]["applied"][topic]["0"] for h in history if h.get("userMetadata")]
    sizes = [sum(end - start for start, end in spans) for spans in held]
    assert sizes == sorted(sizes), "each commit holds at least what the one before it held: none overwritten"
    assert held[-1] == [[0, total]]


def test_a_job_on_two_workers_writes_its_rows_once_to_the_object_store(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    if not stack.cluster:
        pytest.skip("no Spark standalone master in this stack (cdcpipe stack up --spark-cluster --workers 2)")
    master_ui = "http://127.0.0.1:8080/json/"
    alive = [w for w in httpx.get(master_ui, timeout=10).json()["workers"] if w["state"] == "ALIVE"]
    assert len(alive) >= 2, "start the stack with two workers: cdcpipe stack up --spark-cluster --workers 2"
    lake = stack.s3_lake()
    name, env = job_env(stack, tmp_path, "event_log", topic, lake=lake)
    ids = send(stack, topic, [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(200)])
    # Two executors of one core each: the master spreads them over the two workers.
    env = {
        **env,
        "CDCPIPE_SPARK_MASTER": stack.cluster,
        "CDCPIPE_SPARK_CORES_MAX": "2",
        "CDCPIPE_SPARK_EXECUTOR_CORES": "1",
    }
    run("jobs", "submit", name, "--trigger", "available-now", env=env)
    wait_until(lambda: status(name, env)["running"] is False, 300, "the job to drain the topic and exit")
    rows = read_delta(stack, f"{lake}/out")
    assert sorted(str(r["event_id"]) for r in rows) == sorted(ids), "every row once"
    app = next(
        a for a in httpx.get(master_ui, timeout=10).json()["completedapps"] if a["name"] == f"cdcpipe-job-{name}"
    )
    work = stack.home / "state" / "spark"
    ran_on = [folder.name for folder in sorted(work.glob("work*")) if (folder / app["id"]).is_dir()]
    assert len(ran_on) >= 2, f"the job's executors ran on {ran_on} only"
