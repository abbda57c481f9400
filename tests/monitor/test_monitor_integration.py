"""On the real stack: Prometheus scrapes the collector, a failed connector fires its alert, `status` says FAIL.

Connect, Postgres, the collector and Prometheus are the stack's own, as `stack up` starts them; the connector
fails as a misconfigured one does in production (its publication missing, and Debezium told not to create it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.connectors import outbox_connector, write_definition
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
