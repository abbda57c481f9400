"""The real stack: Postgres, Kafka and Kafka Connect with Debezium, as `cdcpipe stack up` starts them."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from confluent_kafka import Consumer, Producer

from infra import gc_log
from infra.gc_log import pauses
from tests.support.stack import Stack, cdcpipe

pytestmark = pytest.mark.integration

DEBEZIUM_POSTGRES = "io.debezium.connector.postgresql.PostgresConnector"
EVENT_ROUTER = "io.debezium.transforms.outbox.EventRouter"


def produce(stack: Stack, topic: str, records: list[tuple[str, str]]) -> None:
    producer = Producer({**stack.kafka_config(), "acks": "all", "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def consume_all(stack: Stack, topic: str, expected: int, timeout_s: float = 30) -> list[tuple[str, str]]:
    consumer = Consumer(
        {
            **stack.kafka_config(),
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received: list[tuple[str, str]] = []
    try:
        for message in iter(lambda: consumer.poll(timeout_s), None):
            assert message.error() is None, message.error()
            received.append(((message.key() or b"").decode(), (message.value() or b"").decode()))
            if len(received) == expected:
                break
    finally:
        consumer.close()
    return received


def test_kafka_gives_back_what_was_produced(stack: Stack, topic: str) -> None:
    records = [(f"k{i % 3}", json.dumps({"i": i})) for i in range(100)]
    produce(stack, topic, records)
    assert consume_all(stack, topic, len(records)) == records


def test_kcat_an_independent_client_reads_the_same_records(stack: Stack, topic: str) -> None:
    records = [(f"key-{i}", f"value-{i}") for i in range(20)]
    produce(stack, topic, records)
    out = subprocess.run(
        [stack.kcat, "-F", str(stack.kafka_file()), "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k=%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.splitlines() == [f"{k}={v}" for k, v in records]


def test_postgres_has_logical_wal_and_listens_on_loopback(stack: Stack) -> None:
    with psycopg.connect(stack.pg_dsn, passfile=stack.env["PGPASSFILE"]) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("SHOW server_version_num").fetchone()[0].startswith("15")  # type: ignore[index]


def test_connect_has_the_debezium_connector_and_its_outbox_router(stack: Stack) -> None:
    plugins = httpx.get(
        f"{stack.connect_url}/connector-plugins",
        params={"connectorsOnly": "false"},
        timeout=10,
        auth=stack.connect_auth(),
    )
    plugins.raise_for_status()
    classes = {p["class"]: p["type"] for p in plugins.json()}
    assert classes.get(DEBEZIUM_POSTGRES) == "source"
    assert classes.get(EVENT_ROUTER) == "transformation"

    # Loadable, not only listed: a config using the router validates with no error on its fields,
    # while a class that does not exist is reported against the same field.
    def validate(transform_class: str) -> dict[str, list[str]]:
        config = {
            "connector.class": DEBEZIUM_POSTGRES,
            "name": "validate-only",
            "topic.prefix": "validate",
            "database.hostname": "127.0.0.1",
            "database.user": "postgres",
            "database.dbname": "cdcpipe",
            "plugin.name": "pgoutput",
            "transforms": "outbox",
            "transforms.outbox.type": transform_class,
        }
        response = httpx.put(
            f"{stack.connect_url}/connector-plugins/{DEBEZIUM_POSTGRES}/config/validate",
            json=config,
            timeout=60,
            auth=stack.connect_auth(),
        )
        response.raise_for_status()
        return {
            c["value"]["name"]: c["value"]["errors"]
            for c in response.json()["configs"]
            if c["value"]["name"].startswith("transforms.outbox")
        }

    good = validate(EVENT_ROUTER)
    assert good["transforms.outbox.type"] == []
    assert "transforms.outbox.route.by.field" in good, "the router's own settings were not loaded"
    bad = validate("io.debezium.transforms.outbox.NoSuchRouter")
    assert bad["transforms.outbox.type"] != []


def test_every_service_listens_on_loopback_only(stack: Stack) -> None:
    status = cdcpipe("stack", "status", "--json", env=stack.process_env())
    pids = [row["pid"] for row in json.loads(status.stdout) if row["pid"]]
    if not stack.started_here and not pids:
        pytest.skip("the stack was given from outside; its pids are not ours to inspect")
    listening = listening_addresses(pids)
    assert listening, "found no listening socket of the stack's processes"
    assert [(a, p) for a, p in listening if not ipaddress.ip_address(a).is_loopback] == []


def listening_addresses(pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state held by these processes or their sessions."""
    inodes = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            session = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3])
            if session not in pids:
                continue
            for fd in (proc / "fd").iterdir():
                target = str(fd.readlink())
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            hex_addr, hex_port = local.split(":")
            # The kernel prints each 32-bit word of the address in host (little-endian) byte order.
            raw = b"".join(bytes.fromhex(hex_addr[i : i + 8])[::-1] for i in range(0, len(hex_addr), 8))
            ip = ipaddress.ip_address(raw)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped  # a JVM's dual-stack socket bound to 127.0.0.1
            found.add((str(ip), int(hex_port, 16)))
    return found


def test_up_twice_leaves_one_of_each(stack: Stack) -> None:
    before = {
        r["service"]: r["pid"] for r in json.loads(cdcpipe("stack", "status", "--json", env=stack.process_env()).stdout)
    }
    again = cdcpipe("stack", "up", "--spark-cluster", "--workers", "2", env=stack.process_env())
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already running") == 9, again.stdout
    after = {
        r["service"]: r["pid"] for r in json.loads(cdcpipe("stack", "status", "--json", env=stack.process_env()).stdout)
    }
    assert after == before
    assert len(after) == 9


@pytest.mark.skipif(os.geteuid() != 0, reason="started by another user, every service runs as that user")
def test_a_stack_whose_java_services_would_run_as_root_is_refused_before_anything_starts(tmp_path: Path) -> None:
    # pytest's folders are 0700 (/tmp/pytest-of-root): no service user may enter a home below them.
    closed = next(p for p in reversed(tmp_path.parents) if not p.stat().st_mode & 0o001)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDCPIPE_", "AWS_")) and k != "PGPASSFILE"}
    refused = cdcpipe("stack", "up", env={**env, "CDCPIPE_HOME": str(home)})
    assert refused.returncode != 0
    assert "kafka would run as root" in refused.stderr, refused.stderr
    assert f"cannot enter {closed}" in refused.stderr, refused.stderr
    assert f"chmod o+x {closed}" in refused.stderr, refused.stderr
    assert "healthy after" not in refused.stdout, refused.stdout  # Postgres, first, was not started either
    assert not list((home / "run").glob("*.pid"))


def test_status_reports_each_service_healthy_with_its_memory(stack: Stack) -> None:
    result = cdcpipe("stack", "status", "--json", env=stack.process_env())
    assert result.returncode == 0, result.stdout
    rows = {row["service"]: row for row in json.loads(result.stdout)}
    workers = {name for name in rows if name.startswith("spark-worker")}
    assert set(rows) - workers == {"postgres", "kafka", "connect", "s3", "prometheus", "collector", "spark-master"}
    # The suite's stack runs two workers (`--workers 2`): the first keeps its name, the second is numbered.
    assert workers == {"spark-worker", "spark-worker-2"}
    for row in rows.values():
        assert row["healthy"], row
        assert row["rss_bytes"] > 10 * 2**20, row


def test_env_exports_wire_a_tool_to_the_stack(stack: Stack) -> None:
    exports = cdcpipe("stack", "env", env=stack.process_env()).stdout
    for variable in ("CDCPIPE_PG_DSN", "CDCPIPE_KAFKA_BOOTSTRAP", "CDCPIPE_CONNECT_URL", "CDCPIPE_LAKE", "PGPASSFILE"):
        assert f"export {variable}=" in exports
    password = (Path(stack.env["PGPASSFILE"]).read_text().strip().split(":"))[-1]
    assert password not in exports, "stack env must not print the database password"
    # A fresh shell that only evaluates the exports reaches Postgres (psql reads PGPASSFILE itself).
    shell = subprocess.run(
        ["bash", "-c", f'{exports}\npsql "$CDCPIPE_PG_DSN" -tAc "select 42"'],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert shell.stdout.strip() == "42", shell.stderr
    # ... and Kafka with kcat as the docs show it: the stack's kcat comes first on PATH (Debian's fails SCRAM).
    kcat = subprocess.run(
        ["bash", "-c", f'{exports}\ncommand -v kcat; kcat -F "$CDCPIPE_KAFKA_CONFIG" -L -m 10'],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert kcat.stdout.splitlines()[0] == str(stack.home / "bin" / "kcat"), kcat.stdout + kcat.stderr
    assert kcat.returncode == 0, kcat.stderr
    assert "1 brokers:" in kcat.stdout, kcat.stdout


@pytest.mark.parametrize("service", ["kafka", "connect", "s3"])
def test_each_jvm_logs_its_pauses_where_the_benchmark_reads_them(stack: Stack, service: str) -> None:
    log = gc_log.log_file(stack.home / "logs", service)
    assert log.exists(), f"{log} is missing: a stack started before GC logging; restart it (cdcpipe stack down, up)"
    # Every JVM collects while it starts (class loading fills the first, small young generation).
    found = pauses(log)
    assert found, log.read_text()[:2000]
    assert all(p.kind.startswith("Pause") and p.ms > 0 for p in found)
    # Its folder is its JVM's (HotSpot rotates the file by renaming it), whoever else's JVM started after it.
    assert log.parent.stat().st_uid == log.stat().st_uid, f"{log.parent} is not its JVM's user's"


def test_prometheus_keeps_a_bounded_history(stack: Stack) -> None:
    """Its storage is bounded by age and by size: a busy stack never fills the disk with metrics."""
    flags = httpx.get(f"{stack.env['CDCPIPE_PROMETHEUS_URL']}/api/v1/status/flags", timeout=10).json()["data"]
    assert flags["storage.tsdb.retention.time"] == "1w"  # 7d, as Prometheus writes it
    assert flags["storage.tsdb.retention.size"] == "1GiB"  # 1GB, as Prometheus writes it (its units are binary)


def test_each_service_writes_its_log_through_a_pump_that_keeps_it_to_a_size(stack: Stack) -> None:
    """No service writes its log file itself: its output goes into a pipe, and a log pump rotates the file."""
    pumps = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            if b"ground.log_pump" in args:
                pumps[(proc / "fd" / "0").readlink().name] = [a.decode() for a in args]
        except (FileNotFoundError, ProcessLookupError):
            continue
    run, logs = stack.home / "run", stack.home / "logs"
    services = sorted(p.stem for p in run.glob("*.pid"))
    assert {"postgres", "kafka", "connect", "prometheus", "collector"} <= set(services), services
    for service in services:
        pid = int((run / f"{service}.pid").read_text().split()[0])
        output = (Path("/proc") / str(pid) / "fd" / "1").readlink().name
        assert output.startswith("pipe:"), f"{service} writes {output} itself"
        assert output in pumps, f"no log pump reads {service}'s output"
        assert pumps[output][-3:] == [str(logs / f"{service}.log"), str(64 * 1024 * 1024), "4"], pumps[output]
