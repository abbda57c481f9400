"""One component cannot become another: own system users, own files, no secret on a command line.

Each test here asks the machine as an attacker would: as another service's user, or as any local user (`nobody`),
or by reading every process's command line as `ps` does.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ground.kafka_client import read_properties
from infra.kafka_security import CONNECT_GROUP, JOBS_GROUP_PREFIX
from infra.service_user import SERVICE_USERS
from streaming_jobs.config import CONSUMER_GROUP_PREFIX
from tests.support.jobs import alive_and, job_env, opened, read_delta, run, send, status
from tests.support.outbox import Outbox
from tests.support.relay import relay_process
from tests.support.stack import Stack
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="started by another user, every service runs as that user")


def read_as(user: str, path: Path) -> subprocess.CompletedProcess[str]:
    """`cat` (a file) or `ls` (a folder) run as `user`."""
    command = ["ls", "-a", str(path)] if path.is_dir() else ["cat", str(path)]
    return subprocess.run(["runuser", "-u", user, "--", *command], capture_output=True, text=True, check=False)


def pid_owner(stack: Stack, service: str) -> str:
    pid = (stack.home / "run" / f"{service}.pid").read_text().split()[0]
    return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name


def private_files(stack: Stack) -> dict[str, list[Path]]:
    """Who (a service's system user, or root) alone may read which of the stack's secret files and data."""
    state = stack.home / "state"
    pg_data = next(p for p in (state / "pg", *Path("/var/lib/cdcpipe").glob("*/pg")) if (p / "PG_VERSION").exists())
    return {
        "postgres": [pg_data / "PG_VERSION"],
        SERVICE_USERS["kafka"]: [state / "conf" / "server.properties", state / "tls" / "broker.pem", state / "kafka"],
        SERVICE_USERS["connect"]: [
            state / "conf" / "connect-distributed.properties",
            state / "conf" / "connect-rest-users.properties",
        ],
        SERVICE_USERS["s3"]: [state / "conf" / "s3proxy.properties", state / "s3"],
        SERVICE_USERS["spark"]: [state / "conf" / "spark-defaults.conf", state / "spark" / "work"],
        SERVICE_USERS["prometheus"]: [state / "prometheus" / "data"],
        SERVICE_USERS["collector"]: [state / "collector" / "monitor.pgpass", state / "collector"],
        "root": [
            state / "tls" / "ca.key",
            *sorted((state / "secrets").iterdir()),
            *sorted((state / "kafka-clients").iterdir()),
        ],
    }


@as_root
def test_each_service_runs_as_its_own_user_and_reads_no_other_services_secrets(stack: Stack) -> None:
    services = {
        "postgres": "postgres",
        "kafka": "kafka",
        "connect": "connect",
        "s3": "s3",
        "prometheus": "prometheus",
        "collector": "collector",
    }
    if stack.cluster:
        services |= {"spark-master": "spark", "spark-worker": "spark"}
    owners = {service: pid_owner(stack, service) for service in services}
    assert owners == {s: "postgres" if s == "postgres" else SERVICE_USERS[key] for s, key in services.items()}
    files = private_files(stack)
    readable = []
    for user in (u for u in files if u != "root"):  # the users of this stack's services (one Kafka node here)
        own = files[user]
        assert read_as(user, own[0]).returncode == 0, f"{user} must read its own {own[0]}"
        for owner, paths in files.items():
            for path in paths if owner != user else []:
                done = read_as(user, path)
                if done.returncode == 0 or "Permission denied" not in done.stderr:
                    readable.append(f"{user} read {path} ({owner}'s)")
    assert readable == []


@as_root
def test_no_local_user_reads_the_event_data_of_kafka_the_object_store_or_the_lake(stack: Stack, topic: str) -> None:
    producer = Producer(stack.kafka_config(acks="all"))
    producer.produce(topic, b"an event no local user may read", key=b"k")
    assert producer.flush(20) == 0
    segments = sorted((stack.home / "state" / "kafka" / f"{topic}-0").glob("*.log"))
    assert segments, "the topic's segment is where the broker keeps it"
    assert b"an event no local user may read" in segments[0].read_bytes()
    paths = [
        *segments,
        segments[0].parent,
        stack.home / "state" / "kafka",
        stack.home / "state" / "s3",
        stack.lake,
    ]
    opened_by_nobody = [str(p) for p in paths if read_as("nobody", p).returncode == 0]
    assert opened_by_nobody == []
    # What a job writes below the lake stays closed too (the folders' default ACL gives others nothing).
    table = stack.lake / "tests" / uuid.uuid4().hex[:10] / "table"
    table.mkdir(parents=True)
    (table / "part.parquet").write_bytes(b"rows")
    assert (table / "part.parquet").stat().st_mode & 0o007 == 0
    assert table.stat().st_mode & 0o007 == 0


def test_the_jobs_user_cannot_describe_or_join_connects_consumer_group(stack: Stack, topic: str) -> None:
    assert CONSUMER_GROUP_PREFIX == JOBS_GROUP_PREFIX, "the groups the jobs use are the ones they are granted"
    assert not CONNECT_GROUP.startswith(JOBS_GROUP_PREFIX)
    jobs = stack.kafka("jobs")
    admin = AdminClient(jobs.client_config())  # kept until its future is done
    described = admin.describe_consumer_groups([CONNECT_GROUP], request_timeout=20)
    with pytest.raises(KafkaException) as refused:
        described[CONNECT_GROUP].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    def joins(group: str) -> KafkaError | None:
        errors: list[KafkaError] = []
        consumer = Consumer(
            jobs.client_config(**{"group.id": group, "auto.offset.reset": "earliest", "error_cb": errors.append})
        )
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error():
                    return message.error()
                if consumer.assignment():
                    return None
            pytest.fail(f"no assignment and no error joining {group} in 30 s")
        finally:
            consumer.close()

    refused_join = joins(CONNECT_GROUP)
    assert refused_join is not None
    assert refused_join.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert joins(f"{JOBS_GROUP_PREFIX}isolation-check") is None, "its own prefix still works"


def stack_secrets(stack: Stack) -> dict[str, str]:
    """Every secret the stack keeps, by its file's name."""
    folder = stack.home / "state" / "secrets"
    values = {p.name: p.read_text().strip() for p in folder.iterdir() if p.is_file() and p.name != "pgpass"}
    assert len(values) >= 8, sorted(values)
    return values


def command_lines() -> dict[int, str]:
    """Every process's arguments, as `ps` shows them to any local user."""
    lines = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (FileNotFoundError, ProcessLookupError):
                continue
    return lines


def test_no_process_of_the_stack_the_relay_or_a_cluster_job_holds_a_secret_in_its_arguments(
    stack: Stack, outbox: Outbox, topic: str, tmp_path: Path
) -> None:
    if not stack.cluster:
        pytest.skip("no Spark standalone master in this stack (cdcpipe stack up --spark-cluster)")
    relay = relay_process(stack, outbox, tmp_path / "relay.log")
    # A job on the cluster, on the object-store lake: its driver knows the store's secret and the cluster's.
    lake = stack.s3_lake()
    name, env = job_env(stack, tmp_path, "event_log", topic, lake=lake)
    env = {**env, "CDCPIPE_SPARK_MASTER": stack.cluster}
    ids = send(stack, topic, [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(20)])
    try:
        run("jobs", "submit", name, env=env)
        wait_until(
            alive_and(name, env, tmp_path, lambda: len(read_delta_or_empty(stack, lake)) == len(ids)), 300, "rows"
        )
        assert status(name, env)["running"] is True
        assert relay.poll() is None, (tmp_path / "relay.log").read_text()
        lines = command_lines()
        running = " ".join(lines.values())
        assert "CoarseGrainedExecutorBackend" in running, "an executor of the job runs"
        assert f"cdcpipe-job-{name}" in running or "streaming_jobs.run.runner" in running, "the job's driver runs"
        assert "outbox_relay" in running or "relay run" in running, "the relay runs"
        leaks = [
            f"{secret} in pid {pid}: {line[:200]}"
            for secret, value in stack_secrets(stack).items()
            for pid, line in lines.items()
            if value in line
        ]
        assert leaks == []
        assert not [line for line in lines.values() if "secret.key=" in line or "authenticate.secret=" in line]
    finally:
        relay.terminate()
        relay.wait(30)
        run("jobs", "stop", name, env=env)


def read_delta_or_empty(stack: Stack, lake: str) -> list[dict[str, object]]:
    try:
        return read_delta(stack, f"{lake}/out")
    except Exception:
        return []


def test_connect_resolves_only_the_variables_meant_for_connectors(stack: Stack) -> None:
    """The worker has the `env` config provider alone, and lets connectors read only their variables.

    A `file` provider would let a connector definition read whatever the worker's user may (its own config holds
    its Kafka password).
    """
    settings = read_properties(stack.home / "state" / "conf" / "connect-distributed.properties")
    assert settings["config.providers"] == "env"
    assert not [key for key in settings if key.startswith("config.providers.file")]
    assert settings["config.providers.env.param.allowlist.pattern"] == "^CDCPIPE_(PG|DEBEZIUM)_[A-Z_]+$"
