"""Helpers the `cdcpipe tables` tests share: a user's settings and folders, and running the commands."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
from psycopg import sql

from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe


def user_env(stack: Stack, outbox: Outbox, home: Path) -> dict[str, str]:
    """A user's settings: this test's outbox schema, connector, slot, publication, topic prefix and folders."""
    tag = outbox.tag
    folders = {name: home / name for name in ("contracts", "topics", "jobs", "connectors")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    # A contract of the same name in a later folder (as the demo's samples would be) never shadows the user's.
    decoy = home / "samples"
    decoy.mkdir()
    (decoy / f"public.orders_{tag}.json").write_text(json.dumps({"x-primary-key": ["id"], "properties": {"id": {}}}))
    return {
        **stack.process_env(),
        "CDCPIPE_PG_DSN": outbox.dsn,
        "CDCPIPE_OUTBOX_SCHEMA": outbox.names.outbox_schema,
        "CDCPIPE_TABLES_PUBLICATION": f"pub_tables_{tag}",
        "CDCPIPE_CAPTURE_CONNECTOR": f"tables-{tag}",
        "CDCPIPE_CAPTURE_TOPIC_PREFIX": f"cap_{tag}",
        "CDCPIPE_CAPTURE_SLOT": f"slot_cap_{tag}",
        "CDCPIPE_TABLE_CONTRACT_DIRS": f"{folders['contracts']}:{decoy}",
        "CDCPIPE_TOPICS_DIR": str(folders["topics"]),
        "CDCPIPE_JOBS_DIRS": str(folders["jobs"]),
        "CDCPIPE_CONNECTORS_DIR": str(folders["connectors"]),
        "CDCPIPE_LAKE": f"{stack.env['CDCPIPE_LAKE']}/capture_{tag}",  # the shared object-store lake
        "CDCPIPE_RUN_DIR": str(home / "run"),
    }


def forget(outbox: Outbox, env: dict[str, str], *schemas: str) -> None:
    """After a test: its connector gone with its slot and publication, its schemas dropped."""
    connector = env["CDCPIPE_CAPTURE_CONNECTOR"]
    cdcpipe("connectors", "delete", connector, "--drop-slot", "--drop-publication", "--yes", env=env)
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def tables(*args: str, env: dict[str, str]) -> str:
    """`cdcpipe tables ARGS`, which must succeed; its output."""
    result = cdcpipe("tables", *args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout
