"""A job whose next offsets retention deleted refuses to start, naming the offsets: nothing skipped silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from tests.support.jobs import jobs_command, make_job, opened, send
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def test_offsets_lost_to_retention_stop_the_job_with_the_offsets_named(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    send(stack, topic, [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(10)])
    job = make_job(stack, tmp_path, "event_log", [topic])
    job.run()
    assert len(job.table()) == 10
    send(stack, topic, [(f"b-{i}", "AccountOpened", opened(f"b-{i}"), None) for i in range(10)])
    # Retention removes offsets 10..14 before the job comes back for them.
    admin = AdminClient(stack.kafka_config())
    for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
        future.result(30)

    failed = job.run(check=False)
    assert failed.returncode == 2
    assert f"{topic}[0]: offsets 10..14 are gone (5 records); the first offset still available is 15" in failed.stderr
    assert "Nothing was skipped" in failed.stderr
    assert len(job.table()) == 10, "nothing may be applied past a gap"

    # The way out the message names: rebuild from what is retained and switch the job to it.
    env = {
        **stack.process_env(),
        "CDCPIPE_LAKE": str(job.lake),
        "CDCPIPE_JOBS_DIRS": str(job.folder),
    }
    rebuilt = jobs_command("jobs", "replay", job.name, "--into", "rebuilt", "--swap", env=env)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    send(stack, topic, [(f"c-{i}", "AccountOpened", opened(f"c-{i}"), None) for i in range(3)])
    job.run()  # starts where the rebuild ended; no refusal
    offsets = [r["kafka_offset"] for r in DeltaTable(f"{job.lake}/rebuilt").to_pyarrow_table().to_pylist()]
    assert sorted(offsets) == list(range(15, 23))
