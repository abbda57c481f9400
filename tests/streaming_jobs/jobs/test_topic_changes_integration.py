"""Offsets that move under a job: a topic deleted and created again, partitions added to a topic.

Each is refused with what happened and the ways on; `cdcpipe jobs accept-topics` is one of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # type: ignore[attr-defined]
from deltalake import CommitProperties, DeltaTable, write_deltalake

from streaming_jobs.config import JobsSettings
from streaming_jobs.lake.lease import lease_key, table_lock
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from tests.support.jobs import Job, deposit, jobs_command, make_job, opened, send
from tests.support.stack import Stack
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def publish(stack: Stack, topic: str, keys: list[str], partition: int | None = None) -> None:
    producer = Producer({**stack.kafka_config(), "acks": "all"})
    for key in keys:
        headers: list[tuple[str, str | bytes | None]] = [
            ("id", str(uuid.uuid4())),
            ("eventType", "AccountOpened"),
            ("eventVersion", "1"),
        ]
        if partition is None:
            producer.produce(topic, key=key, value=opened(key), headers=headers)
        else:
            producer.produce(topic, key=key, value=opened(key), headers=headers, partition=partition)
    assert producer.flush(30) == 0


def recreate(stack: Stack, topic: str) -> None:
    admin = AdminClient(stack.kafka_config())
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            return
        except KafkaException as exc:  # the deletion is still going on
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def accept_env(job: Job) -> dict[str, str]:
    return {**job.stack.process_env(), "CDCPIPE_JOBS_DIRS": str(job.folder), "CDCPIPE_LAKE": job.lake}


def accept(job: Job) -> str:
    result = jobs_command("jobs", "accept-topics", job.name, env=accept_env(job))
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# `cdcpipe jobs accept-topics` that dies (as if SIGKILLed) between its two lasting steps, whichever comes
# first: the table's commit (taken under the writer lease) and the rewind of the job's checkpoint.
DIES_HALFWAY = """
import os, sys
from cdcpipe.cli import main
from streaming_jobs.lake import lease
from streaming_jobs.ranges import commands

steps = []

def halfway(real):
    def step(*args, **kwargs):
        steps.append(real)
        if len(steps) == 2:
            os._exit(137)
        return real(*args, **kwargs)
    return step

lease.table_lock, commands.rewind = halfway(lease.table_lock), halfway(commands.rewind)
sys.argv = ["cdcpipe", "jobs", "accept-topics", sys.argv[1]]
main()
"""


def keys(job: Job) -> list[str]:
    return sorted(str(r["aggregate_id"]) for r in job.table())


def test_a_recreated_topic_is_refused_and_once_accepted_is_read_from_its_start(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    job = make_job(stack, tmp_path, "event_log", [topic])
    publish(stack, topic, ["old-0", "old-1", "old-2"])
    job.run()
    recreate(stack, topic)
    # More records than the old topic had: Spark's checkpoint (offset 3) would resume past the first three.
    publish(stack, topic, [f"new-{i}" for i in range(5)])
    refused = job.run(check=False)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert f"topic {topic} was deleted and created again" in refused.stderr
    assert f"cdcpipe jobs accept-topics {job.name}" in refused.stderr
    assert keys(job) == ["old-0", "old-1", "old-2"]
    # An accept-topics that dies halfway is finished by running it again.
    died = subprocess.run(
        [sys.executable, "-c", DIES_HALFWAY, job.name], env=accept_env(job), capture_output=True, text=True, timeout=600
    )
    assert died.returncode == 137, died.stdout + died.stderr[-3000:]
    assert "recreated: read again from its earliest offsets" in accept(job)
    job.run()
    assert keys(job) == ["new-0", "new-1", "new-2", "new-3", "new-4", "old-0", "old-1", "old-2"]


def test_a_latest_state_job_records_the_ids_of_a_recreated_topic_and_drops_their_resends(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    """The event ids' own applied offsets are of the old topic: they must not pass for the new one's."""
    job = make_job(stack, tmp_path, "latest_state", [topic], lake=stack.s3_lake())
    send(stack, topic, [("acc", "MoneyDeposited", deposit("acc", n), None) for n in (1, 2, 3)])
    job.run()
    recreate(stack, topic)
    # As many records as the old topic had: the same offsets [0, 3) its ids' commits recorded.
    ids = send(stack, topic, [("acc", "MoneyDeposited", deposit("acc", n), None) for n in (10, 20, 30)])
    assert job.run(check=False).returncode == 2
    accept(job)
    job.run()
    send(stack, topic, [("acc", "MoneyDeposited", deposit("acc", 20), {"id": ids[1]})])  # a resend, offset 3
    job.run()
    (state,) = job.table()
    assert (state["event_id"], json.loads(str(state["payload"]))["amount"]) == (ids[2], 30)
    recorded = sorted(str(r["event_id"]) for r in job.table("_event_ids") if r["event_id"] in ids)
    assert recorded == sorted(ids), "the new topic's ids are recorded once each"


def test_partitions_added_to_a_topic_are_refused_until_accepted(stack: Stack, topic: str, tmp_path: Path) -> None:
    job = make_job(stack, tmp_path, "event_log", [topic])
    publish(stack, topic, ["a", "b"])
    job.run()
    admin = AdminClient(stack.kafka_config())
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3, 30, "3 partitions")
    publish(stack, topic, ["c"], partition=2)
    refused = job.run(check=False)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert f"topic {topic} has 3 partitions, 1 when the job's table last wrote" in refused.stderr
    assert keys(job) == ["a", "b"]
    assert "new partitions" in accept(job)
    job.run()
    assert keys(job) == ["a", "b", "c"]


def test_accept_topics_reads_what_the_table_holds_under_the_writer_lease(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    """A writer that commits while accept-topics waits for the lease keeps its offsets: they are read after."""
    job = make_job(stack, tmp_path, "event_log", [topic])
    publish(stack, topic, ["a", "b"])
    job.run()
    admin = AdminClient(stack.kafka_config())
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2, 30, "2 partitions")
    settings = JobsSettings.load(lake=job.lake, lease_pg_dsn=stack.env["CDCPIPE_LEASE_PG_DSN"])
    table = settings.lake_root() / "out"
    with table_lock(table, "a backfill"):
        waiting = subprocess.Popen(
            [sys.executable, "-m", "cdcpipe", "jobs", "accept-topics", job.name],
            env=accept_env(job),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_until(lambda: lease_waiters(stack, table) > 0, 120, "accept-topics to wait for the lease")
        # Meanwhile the lease's holder commits one more offset of partition 0, as a backfill would.
        rows = DeltaTable(str(table)).to_pyarrow_table()
        extra = rows.slice(0, 1).set_column(
            rows.schema.get_field_index("kafka_offset"),
            "kafka_offset",
            pa.array([2], rows.schema.field("kafka_offset").type),
        )
        held = applied.read(table).plus({(topic, 0): (2, 3)})
        write_deltalake(
            str(table),
            extra,
            mode="append",
            commit_properties=CommitProperties(custom_metadata={"userMetadata": held.metadata()}),
        )
        assert applied.read(table).covers({(topic, 0): (0, 3)})
    out, _ = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, out
    assert applied.read(table).covers({(topic, 0): (0, 3)}), "the holder's offset survived accept-topics' commit"


def lease_waiters(stack: Stack, table: LakePath) -> int:
    """Sessions waiting for the table's writer lease."""
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s::oid",
            (lease_key(table) & 0xFFFFFFFF,),
        ).fetchone()
    return int(row[0]) if row else 0
