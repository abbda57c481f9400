"""Spark reads a real Kafka topic and writes a real Delta table, locally and on the standalone cluster."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from tests.support.spark_host import spark_run
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def send(stack: Stack, topic: str, count: int) -> list[str]:
    values = [json.dumps({"n": i, "topic": topic}) for i in range(count)]
    producer = Producer({**stack.kafka_config(), "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i % 7}", value=value)
    assert producer.flush(30) == 0
    return values


def run_check(stack: Stack, topic: str, table: Path, master: str | None = None) -> dict[str, object]:
    """`python -m streaming_jobs.stack_check`: on this test process's shared driver (local[2]) unless `master`."""
    argv = ["--topic", topic, "--table", str(table), *(["--master", master] if master else [])]
    proc = spark_run("streaming_jobs.stack_check", argv, stack.process_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def read_back(table: Path) -> list[dict[str, object]]:
    """Read with delta-rs, a reader that shares no code with Spark."""
    rows: list[dict[str, object]] = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    return rows


def test_local_session_reads_kafka_and_writes_delta(stack: Stack, topic: str, tmp_path: Path) -> None:
    values = send(stack, topic, 200)
    table = tmp_path / "events"
    result = run_check(stack, topic, table)
    assert result["master"] == "local[2]"
    assert result["rows"] == 200
    rows = read_back(table)
    assert sorted(r["value"] for r in rows) == sorted(values)  # type: ignore[type-var]
    assert sorted(r["offset"] for r in rows) == list(range(200))  # type: ignore[type-var]
    assert {r["topic"] for r in rows} == {topic}

    # The checkpoint holds the position: a second run appends only what was sent since.
    more = send(stack, topic, 30)
    assert run_check(stack, topic, table)["rows"] == 230
    assert sorted(r["value"] for r in read_back(table)) == sorted(values + more)  # type: ignore[type-var]


def test_a_job_submitted_to_the_standalone_master_runs_there(stack: Stack, topic: str, cluster_path: Path) -> None:
    if not stack.cluster:
        pytest.skip("no Spark standalone master in this stack (start it with `cdcpipe stack up --spark-cluster`)")
    values = send(stack, topic, 150)
    table = cluster_path / "events"  # the executors write its data files: a folder the stack shares with them
    result = run_check(stack, topic, table, stack.cluster)
    assert result["master"] == stack.cluster
    assert sorted(r["value"] for r in read_back(table)) == sorted(values)  # type: ignore[type-var]
    # The master saw the application run to completion, with executors on its worker.
    ui_port = stack.env.get("CDCPIPE_SPARK_MASTER_UI_PORT", "8080")
    master = httpx.get(f"http://127.0.0.1:{ui_port}/json/", timeout=10).json()
    names = [app["name"] for app in master["completedapps"]]
    assert f"cdcpipe-stack-check-{topic}" in names
