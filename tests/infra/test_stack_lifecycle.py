"""`stack down` stops every process of ours; `stack up` after it finds the data where it was.

The benches that restart the stack (stack_startup cycles it; tls_bench needs Kafka's opt-in plaintext listener)
run inside the same down/up cycle: stack_startup's `up` is the one the TLS bench runs on, then the stack comes
back as it was. The stack is the module's own (Spark cluster included, as the suite's), beside the suite's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer
from deltalake import DeltaTable, write_deltalake

from tests.support.bench import results, run_bench
from tests.support.stack import STACKS_APART, Stack, cdcpipe, stack_of_its_own

pytestmark = [pytest.mark.integration, pytest.mark.own_stack, pytest.mark.xdist_group("lifecycle")]


@pytest.fixture(scope="module")
def stack(stack: Stack) -> Iterator[Stack]:
    """The module's own stack, beside the suite's: its test stops it whole, which no other test may see."""
    with stack_of_its_own(stack, "lifecycle", spark_cluster=True) as own:
        yield own


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that name `text` (every service of ours names the stack's home)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if text in args and "pytest" not in args:
            found.append(f"{cmdline.parent.name}: {args[:200]}")
    return found


def alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for a parent (here often pid 1) to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.timeout(1200)
def test_down_stops_everything_the_restart_benches_run_and_up_reuses_the_data(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    env = stack.process_env()
    with psycopg.connect(stack.pg_dsn, passfile=stack.env["PGPASSFILE"], autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS lifecycle_marker (note text)")
        conn.execute("INSERT INTO lifecycle_marker VALUES (%s)", (topic,))
    s3 = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
    table = f"s3://{stack.env['CDCPIPE_S3_LAKE'].removeprefix('s3a://').split('/')[0]}/lifecycle/{topic}"
    write_deltalake(table, pa.table({"note": ["survives a restart"]}), storage_options=s3)
    producer = Producer({**stack.kafka_config(), "acks": "all"})
    producer.produce(topic, key="k", value="survives a restart")
    assert producer.flush(30) == 0
    pids = [r["pid"] for r in json.loads(cdcpipe("stack", "status", "--json", env=env).stdout)]
    plaintext = {"CDCPIPE_KAFKA_PLAINTEXT_PORT": str(9094 + STACKS_APART["lifecycle"])}
    try:
        down = cdcpipe("stack", "down", env=env)
        assert down.returncode == 0, down.stderr
        assert processes_mentioning(str(stack.home)) == []
        assert [pid for pid in pids if alive(pid)] == []
        status = cdcpipe("stack", "status", "--json", env=env)
        assert status.returncode == 1
        assert all(row["pid"] is None for row in json.loads(status.stdout))

        # The bench's last `up` stays up with Kafka's plaintext listener, which the TLS bench compares against.
        run_bench(stack, tmp_path, "stack_startup", ["--runs", "1", "--idle-seconds", "1", "--leave-up"], env=plaintext)
        assert results(tmp_path, "stack_startup.json")
        output = tmp_path / "tls.json"
        tls = ["--events", "2000", "--rounds", "1", "--rate", "200", "--seconds", "2", "--warmup", "1"]
        run_bench(stack, tmp_path, "tls_bench", [*tls, "--output", str(output)], env=plaintext)
        assert results(tmp_path, "tls.json")
    finally:
        cdcpipe("stack", "down", env=env)
        up = cdcpipe("stack", "up", "--spark-cluster", "--workers", "2", env=env)  # as it was
    assert up.returncode == 0, up.stderr
    assert (
        up.stdout.count("healthy after") == 9
    )  # postgres, kafka, connect, s3, prometheus, the collector, the master, two workers
    with psycopg.connect(stack.pg_dsn, passfile=stack.env["PGPASSFILE"]) as conn:
        notes = [row[0] for row in conn.execute("SELECT note FROM lifecycle_marker")]
    assert topic in notes
    assert DeltaTable(table, storage_options=s3).to_pyarrow_table().column("note").to_pylist() == ["survives a restart"]
    consumer = Consumer({**stack.kafka_config(), "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    message = consumer.poll(60)
    consumer.close()
    assert message is not None
    assert message.value() == b"survives a restart"
