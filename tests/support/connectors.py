"""Connectors for tests: the example definitions pointed at a test's outbox, waits on Connect and its slots."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import pytest

from connectors.client import ConnectClient
from demo.run import EXAMPLES
from tests.support.outbox import Outbox
from tests.support.stack import Stack
from tests.support.waits import wait_until


def shipped(name: str) -> dict[str, str]:
    config: dict[str, str] = json.loads((EXAMPLES / "connectors" / f"{name}.json").read_text())["config"]
    return config


def outbox_connector(outbox: Outbox, **overrides: str) -> dict[str, object]:
    """The shipped outbox definition, pointed at this test's outbox, slot, publication and topics."""
    schema = outbox.names.outbox_schema
    config = shipped("outbox")
    config.update(
        {
            # Debezium names its JMX beans after topic.prefix: two connectors on one worker need two prefixes.
            "topic.prefix": f"test_{outbox.tag}",
            "slot.name": f"slot_{outbox.tag}",
            "publication.name": outbox.schema_settings.publication,
            "table.include.list": f"{schema}\\.outbox,{schema}\\.debezium_heartbeat",
            "predicates.isOutbox.pattern": f"test_{outbox.tag}\\.{schema}\\.outbox",
            "transforms.outbox.route.topic.replacement": f"test.{outbox.tag}.debezium.${{routedByValue}}",
            "heartbeat.interval.ms": "1000",
            "heartbeat.action.query": f"INSERT INTO {schema}.debezium_heartbeat (id, beat) VALUES (1, now()) "
            "ON CONFLICT (id) DO UPDATE SET beat = EXCLUDED.beat",
        }
    )
    config.update(overrides)
    return {"name": f"test-{outbox.tag}", "config": config}


def table_connector(outbox: Outbox, *, prefix: str, slot: str, publication: str, table: str) -> dict[str, str]:
    """The shipped table connector's config for public.`table`, with this test's names and heartbeat table.

    The shipped heartbeat names the default outbox schema's table, which exists only once something has made it:
    a connector whose heartbeat fails restarts every 10 s until then (Debezium retries the error), its snapshot
    taken again each time.
    """
    config = shipped("tables")
    config.update(
        {
            "topic.prefix": prefix,
            "slot.name": slot,
            "publication.name": publication,
            "table.include.list": f"public\\.{table}",
            "heartbeat.action.query": f"INSERT INTO {outbox.names.outbox_schema}.debezium_heartbeat (id, beat) "
            "VALUES (2, now()) ON CONFLICT (id) DO UPDATE SET beat = EXCLUDED.beat",
        }
    )
    return config


def write_definition(tmp_path: Path, definition: dict[str, object], file: str = "connector.json") -> Path:
    path = tmp_path / file
    path.write_text(json.dumps(definition, indent=2))
    return path


def connect_client(stack: Stack) -> ConnectClient:
    return ConnectClient(stack.connect_settings())


def wait_state(stack: Stack, name: str, state: str, timeout_s: float = 60) -> None:
    def reached() -> bool:
        status = client.status(name)
        tasks = status.get("tasks", [])
        if status.get("connector", {}).get("state") != state:
            return False
        # A stopped connector has no tasks; otherwise no tasks yet is not "every task RUNNING": Connect assigns
        # them after a rebalance.
        return state == "STOPPED" or bool(tasks and all(t["state"] == state for t in tasks))

    with connect_client(stack) as client:
        wait_until(reached, timeout_s, f"{name} to be {state}")


def wait_slot_active(stack: Stack, slot: str, connector: str | None = None) -> None:
    """A task is RUNNING before Debezium has created its slot: only an active slot captures new rows.

    On a timeout the failure says what Connect and Postgres were doing, so a slow start can be told from a stuck one.
    """
    query = "SELECT active FROM pg_replication_slots WHERE slot_name = %s"
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if conn.execute(query, (slot,)).fetchone() == (True,):
                return
            time.sleep(0.1)
        slots = conn.execute("SELECT slot_name, active, active_pid FROM pg_replication_slots").fetchall()
        activity = conn.execute(
            "SELECT pid, backend_type, state, wait_event, now() - xact_start, left(query, 120) "
            "FROM pg_stat_activity WHERE datname IS NOT NULL AND pid <> pg_backend_pid()"
        ).fetchall()
    status: object = None
    if connector is not None:
        with connect_client(stack) as client:
            status = client.status(connector)
    pytest.fail(f"slot {slot} not active after 120s\nslots: {slots}\nactivity: {activity}\nconnector: {status}")
