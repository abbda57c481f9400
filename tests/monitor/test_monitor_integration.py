"""On the real stack: the collector's and the JMX exporter agents' metrics, alerts firing, `status` saying FAIL.

A failed connector fires its alert and `status` names it; the agents in Connect and the broker serve Debezium's
and Kafka's metrics. Connect, Kafka, Postgres, the collector and Prometheus are the stack's own, as `stack up`
starts them; the connector fails as a misconfigured one does in production (its publication missing, and
Debezium told not to create it).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from psycopg.conninfo import conninfo_to_dict

from tests.support.connectors import outbox_connector, wait_slot_active, wait_state, write_definition
from tests.support.kafka import create_topics
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def firing(stack: Stack, alert: str, connector: str) -> bool:
    found = stack.prometheus(f'ALERTS{{alertname="{alert}", connector="{connector}", alertstate="firing"}}')
    return bool(found)


def test_a_failed_connector_fires_its_alert_and_status_fails_naming_it_and_the_waiting_outbox(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    env = {**outbox.relay_env(stack), "CDCPIPE_PG_DSN": stack.pg_dsn}
    outbox.insert([("order", "o-1", "OrderPlaced", {"n": 1}), ("order", "o-2", "OrderPlaced", {"n": 2})])
    definition = outbox_connector(
        outbox,
        **{"publication.name": f"missing_{outbox.tag}", "publication.autocreate.mode": "disabled"},
    )
    name = str(definition["name"])
    applied = cdcpipe("connectors", "apply", "--no-wait", str(write_definition(tmp_path, definition)), env=env)
    assert applied.returncode == 0, applied.stderr
    try:
        wait_until(
            lambda: stack.prometheus_value(f'cdcpipe_connect_task_state{{connector="{name}", state="FAILED"}}') == 1,
            120,
            "the collector to report the connector's task FAILED",
        )
        assert stack.prometheus_value('cdcpipe_collector_source_up{source="connect"}') == 1
        assert stack.prometheus_value('cdcpipe_collector_source_up{source="postgres"}') == 1
        wait_until(lambda: firing(stack, "CdcpipeConnectorFailed", name), 90, "the alert to fire")
        [alert] = stack.prometheus(f'ALERTS{{alertname="CdcpipeConnectorFailed", connector="{name}"}}')
        assert alert["metric"]["severity"] == "critical"

        shown = cdcpipe("status", "--json", env=env)
        assert shown.returncode == 1, shown.stdout + shown.stderr
        lines = {line["part"]: line for line in json.loads(shown.stdout)["lines"]}
        failed = lines[f"connector {name}"]
        assert failed["level"] == "FAIL"
        assert "Publication autocreation is disabled" in failed["says"], failed  # the task's trace, first line
        assert f"connectors restart {name}" in failed["more"]
        relay = lines[f"relay {outbox.names.outbox_schema}.outbox"]
        assert relay["level"] == "FAIL"
        assert "no relay is publishing: 2 events waiting" in relay["says"]
        assert lines["service prometheus"]["level"] == "OK"
        assert lines["service collector"]["level"] == "OK"
        screen = cdcpipe("status", env=env)
        assert screen.returncode == 1
        assert f"FAIL connector {name}" in screen.stdout  # no colour codes when not on a terminal
    finally:
        cdcpipe("connectors", "delete", name, "--drop-slot", "--yes", env=env)
    wait_until(
        lambda: stack.prometheus(f'cdcpipe_connect_connector_state{{connector="{name}"}}') == [],
        60,
        "the deleted connector to leave the collector's metrics",
    )


def test_debezium_connect_and_the_broker_serve_their_jmx_metrics_and_a_wrong_password_fires_its_alert(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    """Debezium's streaming metrics for a running connector, its task's and the broker's counts of what it wrote.

    Then a client with a wrong password: the broker counts the failed authentication and its alert fires. When the
    connector is deleted, its Debezium series leave Prometheus (no stale "connected" for a connector gone).
    """
    agents = 'sum(up{job=~"kafka|connect"})'  # the agents' scrape jobs, both healthy
    wait_until(
        lambda: stack.prometheus_value(agents) == 2, 30, "Prometheus to scrape the broker's and Connect's agents"
    )
    prefix, name = f"test_{outbox.tag}", f"test-{outbox.tag}"
    topic = f"test.{outbox.tag}.debezium.order"
    create_topics(stack.kafka_config(), [topic])
    path = write_definition(tmp_path, outbox_connector(outbox))
    applied = cdcpipe("connectors", "apply", "--no-wait", str(path), env=stack.process_env())
    assert applied.returncode == 0, applied.stderr
    try:
        wait_state(stack, name, "RUNNING")
        wait_slot_active(stack, f"slot_{outbox.tag}", name)
        outbox.insert([("order", f"o-{n}", "OrderPlaced", {"n": n}) for n in range(3)])
        wait_until(
            lambda: (stack.prometheus_value(f'kafka_broker_topic_messages_in_total{{topic="{topic}"}}') or 0) >= 3,
            90,
            "the broker to count the 3 events Debezium wrote to their topic",
        )
        wait_until(
            lambda: (
                (stack.prometheus_value(f'kafka_connect_source_task_records_written_total{{connector="{name}"}}') or 0)
                >= 3
            ),
            30,
            "Connect to count the task's records written",
        )
        assert stack.prometheus_value(f'debezium_postgres_streaming_connected{{server="{prefix}"}}') == 1
        seen = stack.prometheus_value(f'debezium_postgres_events_seen_total{{context="streaming", server="{prefix}"}}')
        assert (seen or 0) >= 3  # the outbox rows, and the heartbeats Debezium writes itself
        behind = stack.prometheus_value(f'debezium_postgres_streaming_behind_source_seconds{{server="{prefix}"}}')
        assert behind is not None
        assert 0 <= behind < 60, behind
        assert stack.prometheus_value(f'debezium_postgres_snapshot_running{{server="{prefix}"}}') == 0
        assert stack.prometheus_value("kafka_controller_active_controllers") == 1
        assert stack.prometheus_value("kafka_controller_offline_partitions") == 0
    finally:
        cdcpipe("connectors", "delete", name, "--drop-slot", "--yes", env=stack.process_env())
    wait_until(
        lambda: stack.prometheus(f'debezium_postgres_streaming_connected{{server="{prefix}"}}') == [],
        60,
        "the deleted connector's Debezium metrics to leave Prometheus",
    )

    failed = 'sum(kafka_broker_failed_authentications_total{listener="BROKER"})'
    before = stack.prometheus_value(failed) or 0
    intruder = AdminClient(stack.kafka_config(**{"sasl.password": "wrong", "log_level": 0}))
    with pytest.raises(KafkaException):
        intruder.list_topics(timeout=5)
    wait_until(lambda: (stack.prometheus_value(failed) or 0) > before, 30, "the broker to count the failed login")
    wait_until(
        lambda: bool(stack.prometheus('ALERTS{alertname="CdcpipeKafkaAuthenticationFailing", alertstate="firing"}')),
        60,
        "the failed-authentication alert to fire",
    )


def test_status_names_the_monitor_role_by_user_and_host_never_its_password(stack: Stack) -> None:
    """A DSN's password (a URL's `user:password@`, a keyword string's `password=`) is never printed.

    The password here is wrong, so Postgres refuses the monitor role and `status` says as whom it could not read.
    """
    secret = f"wrong-{uuid.uuid4().hex}"
    pg = conninfo_to_dict(stack.pg_dsn)
    host, port = pg.get("host", "127.0.0.1"), pg.get("port", "5432")
    for dsn in (
        f"postgresql://cdcpipe_monitor:{secret}@{host}:{port}/cdcpipe",
        f"host={host} port={port} dbname=cdcpipe user=cdcpipe_monitor password={secret}",
    ):
        env = {**stack.env, "CDCPIPE_MONITOR_PG_DSN": dsn, "CDCPIPE_MONITOR_TIMEOUT_S": "5"}
        for shown in (cdcpipe("status", env=env), cdcpipe("status", "--json", env=env)):
            said = shown.stdout + shown.stderr
            assert secret not in said, said
            assert f"cannot read as postgresql://cdcpipe_monitor@{host}:{port}/cdcpipe" in said, said


def test_status_reads_past_stray_files_in_the_run_folder(stack: Stack, tmp_path: Path) -> None:
    """Files named like a job's pid file that are not one are passed over; `status` shows the real job.

    A name no job may have, a folder, garbage: none ends `status` in an error (it did, with a traceback).
    """
    run = tmp_path / "run"
    run.mkdir()
    (run / "not a job!.pid").write_text("garbage")
    (run / "a-folder.pid").mkdir()
    (run / "garbled.pid").write_text("x y z")
    (run / "gone_job.pid").write_text("1 0")  # a job's file whose driver is gone
    shown = cdcpipe("status", env={**stack.env, "CDCPIPE_RUN_DIR": str(run)})
    said = shown.stdout + shown.stderr
    assert "Traceback" not in said, said
    assert "Error:" not in said, said
    assert "FAIL job gone_job" in said, said
    assert "not a job!" not in said, said


def test_a_target_prometheus_cannot_scrape_fires_its_alert(stack: Stack) -> None:
    """A driver alive whose metrics no longer answer: its series vanish, and the target's own alert fires instead."""
    job = f"test_unscraped_{uuid.uuid4().hex[:8]}"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = Path(stack.env["CDCPIPE_METRICS_TARGETS_DIR"]) / f"job-{job}.json"
    labels = {"job": job, "kind": "event_log", "__meta_pid": str(os.getpid())}  # a live pid: not a stale target
    target.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": labels}]))
    target.chmod(0o644)
    try:
        wait_until(
            lambda: stack.prometheus(
                f'ALERTS{{alertname="CdcpipeScrapeTargetDown", job="{job}", alertstate="firing"}}'
            ),
            150,
            "the unscraped target's alert",
        )
    finally:
        target.unlink(missing_ok=True)
