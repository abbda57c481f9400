"""`cdcpipe tables` on the real stack, as a new user runs it: a table of their own, their own folders.

The rows a table held before it was captured reach the mirror: through the new connector's initial
snapshot for the first table, through Debezium's incremental snapshot for a table added to the running
connector. The mirror is read back with delta-rs and compared with Postgres.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from psycopg import sql

from capture import postgres as capture_postgres
from connectors.client import ConnectClient
from schemas.config import SchemaSettings
from tests.support.capture import tables, user_env
from tests.support.jobs import drain, read_delta, table_rows
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def create_table(conn: psycopg.Connection[object], ident: sql.Identifier, rows: int) -> None:
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2), "
            "placed_at timestamptz NOT NULL DEFAULT now())"
        ).format(ident)
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (id, customer, amount) SELECT g, 'c' || g, g * 1.5 FROM generate_series(1, %s) g"
        ).format(ident),
        (rows,),
    )


def postgres_rows(conn: psycopg.Connection[object], ident: sql.Identifier) -> dict[str, dict[str, object]]:
    query = sql.SQL("SELECT id, customer, amount::text FROM {}").format(ident)
    return {str(r[0]): {"customer": r[1], "amount": r[2]} for r in conn.execute(query)}  # type: ignore[index]


def mirrored(stack: Stack, env: dict[str, str], job: str) -> dict[str, dict[str, object]]:
    rows = table_rows(f"{env['CDCPIPE_LAKE']}/{job}", "id", stack)
    return {k: {"customer": v["customer"], "amount": _text(v["amount"])} for k, v in rows.items()}


def current_versions(stack: Stack, env: dict[str, str], job: str) -> dict[str, dict[str, object]]:
    rows = read_delta(stack, f"{env['CDCPIPE_LAKE']}/{job}")
    return {str(r["id"]): {"customer": r["customer"], "amount": _text(r["amount"])} for r in rows if r["is_current"]}


def _text(amount: object) -> str | None:
    return None if amount is None else str(amount)


def topic_records(stack: Stack, topic: str) -> int:
    """How many records the topic's partitions hold (nothing is compacted or expired here)."""
    consumer = Consumer({**stack.kafka_config(), "group.id": f"count-{topic}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions]
    finally:
        consumer.close()
    return sum(high - low for low, high in ends)


def snapshot_line(env: dict[str, str], table: str) -> str:
    listed = tables("list", env=env).splitlines()
    at = listed.index(f"public.{table}")
    return next(line for line in listed[at:] if line.startswith("  snapshot"))


# 635 s in CI, 902 s beside the cluster smoke on a slower day (past the suite's 900 s): the margin of the others.
@pytest.mark.timeout(1500)
def test_tables_add_captures_a_users_tables_with_their_rows_and_a_second_run_changes_nothing(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    env = user_env(stack, outbox, tmp_path)
    first, second = f"orders_{outbox.tag}", f"refunds_{outbox.tag}"
    idents = {name: sql.Identifier("public", name) for name in (first, second)}
    connector = env["CDCPIPE_CAPTURE_CONNECTOR"]
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        create_table(conn, idents[first], 50)
        create_table(conn, idents[second], 5_000)  # held before it is captured: 5 snapshot chunks (of 1,024)
    try:
        # The plan changes nothing.
        plan = tables("add", f"public.{first}", "--mirror", "--dry-run", env=env)
        assert "would create" in plan
        assert "dry run: nothing changed" in plan
        written = [
            p
            for v in ("CDCPIPE_TOPICS_DIR", "CDCPIPE_JOBS_DIRS", "CDCPIPE_CONNECTORS_DIR")
            for p in Path(env[v]).iterdir()
        ]
        assert written == []
        with ConnectClient(stack.connect_settings()) as client:
            assert client.config(connector) is None

        # The first table: the connector is created, and its initial snapshot takes the rows.
        said = tables("add", f"public.{first}", "--mirror", env=env)
        assert f"it takes precedence over {tmp_path / 'samples'}/public.{first}.json" in said, said
        definition = json.loads((Path(env["CDCPIPE_CONNECTORS_DIR"]) / f"{connector}.json").read_text())
        assert f"public\\.{first}" in definition["config"]["table.include.list"]
        # The second, added to the running connector: Debezium's incremental snapshot takes its rows.
        added = tables("add", f"public.{second}", "--mirror", "--history", env=env)
        assert f"snapshot   public.{second}: request" in added, added
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:  # changes while the snapshot reads the rows
            for round_ in range(1, 7):
                ident = idents[second]
                conn.execute(sql.SQL("UPDATE {} SET amount = -%s WHERE id %% 97 = %s").format(ident), (round_, round_))
                conn.execute(sql.SQL("DELETE FROM {} WHERE id %% 1000 = %s").format(ident), (round_,))
                conn.execute(
                    sql.SQL("INSERT INTO {} (id, customer) VALUES (%s, 'late')").format(ident), (10**6 + round_,)
                )
                time.sleep(0.3)
            conn.execute(sql.SQL("UPDATE {} SET customer = 'changed' WHERE id = 7").format(idents[first]))
            truth = {name: postgres_rows(conn, ident) for name, ident in idents.items()}

        # Run twice, every line says unchanged.
        again = tables("add", f"public.{first}", "--mirror", env=env)
        again += tables("add", f"public.{second}", "--mirror", "--history", env=env)
        assert all(": unchanged" in line for line in again.splitlines()), again
        # The ACLs name each topic: the jobs read the tables' topics, Connect writes those and its own four, and
        # creates none; no grant covers a whole prefix (it would reach every table captured later).
        prefix = f"cap_{outbox.tag}"
        acls = topic_acls(stack, (f"{prefix}.", f"__debezium-heartbeat.{prefix}"))
        assert {(name, pattern) for name, pattern, _, _ in acls} == {(name, "LITERAL") for name, _, _, _ in acls}, (
            "a grant on a prefix"
        )
        table_topics = {f"{prefix}.public.{name}" for name in (first, second)}
        own = {
            f"__debezium-heartbeat.{prefix}",
            f"{prefix}.debezium_notifications",
            f"{prefix}.{env['CDCPIPE_OUTBOX_SCHEMA']}.debezium_heartbeat",
            f"{prefix}.{env['CDCPIPE_OUTBOX_SCHEMA']}.debezium_signal",
        }
        assert {n for n, _, who, op in acls if who == "User:jobs" and op == "READ"} == table_topics
        assert {n for n, _, who, op in acls if who == "User:connect" and op == "WRITE"} == table_topics | own
        assert not [a for a in acls if a[3] == "CREATE"], acls
        # A contract file broken by hand is shown broken, with why, never as "none".
        contract = tmp_path / "contracts" / f"public.{first}.json"
        kept = contract.read_text()
        contract.write_text(kept[: len(kept) // 2])
        try:
            lines = tables("list", env=env).splitlines()
            shown = lines[lines.index(f"public.{first}") + 1]
            assert shown.startswith("  contract   BROKEN: "), shown
            assert str(contract) in shown, shown
        finally:
            contract.write_text(kept)

        def snapshot_done() -> bool:
            listed = tables("list", env=env)
            return f"public.{second}" in listed and "incremental snapshot completed" in listed

        wait_until(snapshot_done, 180, f"the incremental snapshot of public.{second} to complete")
        listed = tables("list", env=env)
        assert f"{connector} RUNNING" in listed, listed
        for name in (first, second):
            job = f"{name}_mirror"
            assert f"job        {job} (table_mirror)" in listed
            ran = drain(job, env)
            assert f"row contract of public.{name}: v1, {tmp_path / 'contracts'}/public.{name}.json" in ran.stdout
            assert mirrored(stack, env, job) == truth[name], f"{job} differs from public.{name}"

        # The history holds the table's rows as its current versions; a snapshot taken again adds no version.
        history, topic = f"{second}_history", f"cap_{outbox.tag}.public.{second}"
        drain(history, env)
        versions = len(read_delta(stack, f"{env['CDCPIPE_LAKE']}/{history}"))
        assert current_versions(stack, env, history) == truth[second]
        # While it runs, a transaction deletes a row before the snapshot reads it and commits after the chunk's
        # closing mark, with another commit in between: the delete is streamed after the row, with a lower LSN
        # than the commit before the mark. Ordered as they committed, the row stays deleted in the mirror.
        before, records = snapshot_line(env, second), topic_records(stack, topic)
        held = psycopg.connect(outbox.dsn)  # its transaction stays open
        held.execute(sql.SQL("DELETE FROM {} WHERE id = 4242").format(idents[second]))
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {} SET customer = 'later' WHERE id = 8").format(idents[first]))
        try:
            assert "snapshot   public." in tables("snapshot", f"public.{second}", env=env)
            wait_until(
                lambda: snapshot_line(env, second) != before and "completed" in snapshot_line(env, second),
                180,
                f"the second snapshot of public.{second} to complete",
            )
        finally:
            held.commit()
            held.close()
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            truth[second] = postgres_rows(conn, idents[second])
        assert "4242" not in truth[second]
        # The snapshot's rows (4242 among them), then the delete.
        wanted = records + len(truth[second]) + 2
        wait_until(lambda: topic_records(stack, topic) >= wanted, 60, "the snapshot's rows and the delete in the topic")
        drain(history, env)
        assert len(read_delta(stack, f"{env['CDCPIPE_LAKE']}/{history}")) == versions
        assert current_versions(stack, env, history) == truth[second]
        drain(f"{second}_mirror", env)
        assert mirrored(stack, env, f"{second}_mirror") == truth[second], "a row the snapshot read came back"

        # A connector that stopped is said on the job's status, never a quiet "lag 0".
        job = f"{first}_mirror"
        assert f"<- connector {connector}: RUNNING" in cdcpipe("jobs", "status", job, env=env).stdout
        assert cdcpipe("connectors", "pause", connector, env=env).returncode == 0
        wait_until(lambda: "WARNING" in cdcpipe("jobs", "status", job, env=env).stdout, 60, f"{job}'s status to warn")
        status = cdcpipe("jobs", "status", job, env=env).stdout
        assert f"WARNING cap_{outbox.tag}.public.{first} <- connector {connector}: PAUSED" in status, status
        # A table added to a paused connector would wait unsaid: refused, nothing changed, the way on named.
        refused = cdcpipe("tables", "add", f"public.{second}", "--mirror", env=env)
        assert refused.returncode != 0
        assert f"connector {connector} is PAUSED" in refused.stderr, refused.stderr
        assert f"cdcpipe connectors resume {connector}" in refused.stderr
        assert cdcpipe("connectors", "resume", connector, env=env).returncode == 0

        # Remove the second: its job file goes, the connector and the publication no longer carry it.
        removed = tables("remove", f"public.{second}", "--yes", env=env)
        assert f"{second}_mirror: remove" in removed, removed
        assert not (Path(env["CDCPIPE_JOBS_DIRS"]) / f"{second}_mirror.toml").exists()
        with ConnectClient(stack.connect_settings()) as client:
            include = (client.config(connector) or {})["table.include.list"]
        assert second not in include
        assert first in include
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            carried = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                    (env["CDCPIPE_TABLES_PUBLICATION"],),
                )
            ]
        assert first in carried
        assert second not in carried

        # A run that failed after the connector took a table (Postgres gone, tasks slow to reconfigure) leaves the
        # table's snapshot recorded as owed, which is the state made here: running the command again asks for it.
        owed = f"owed_{outbox.tag}"
        idents[owed] = sql.Identifier("public", owed)
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            create_table(conn, idents[owed], 30)
        tables("add", f"public.{owed}", "--no-snapshot", env=env)
        schema_settings = SchemaSettings.load()
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            capture_postgres.record_pending(conn, outbox.names, schema_settings, [f"public.{owed}"])
        again = tables("add", f"public.{owed}", env=env)
        assert f"snapshot   public.{owed}: request" in again, again
        assert "owed by an earlier run" in again
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            assert capture_postgres.pending(conn, outbox.names, schema_settings) == []
        wait_until(
            lambda: topic_records(stack, f"cap_{outbox.tag}.public.{owed}") >= 30, 120, "the owed snapshot's rows"
        )
        third_run = tables("add", f"public.{owed}", env=env)
        assert all(": unchanged" in line for line in third_run.splitlines()), third_run

        # A connector deleted without its slot, made again by `tables add`: Connect kept its offsets, so it streams
        # on from them and takes no initial snapshot; its tables get an incremental one instead.
        assert cdcpipe("connectors", "delete", connector, "--yes", env=env).returncode == 0
        before = snapshot_line(env, first)
        again = tables("add", f"public.{first}", "--mirror", env=env)
        assert f"connector  {connector}: create" in again, again
        assert f"snapshot   public.{first}: take" in again, again
        wait_until(
            lambda: (
                snapshot_line(env, first) != before and "incremental snapshot completed" in snapshot_line(env, first)
            ),
            180,
            "the incremental snapshot of a connector made again on its offsets",
        )
    finally:
        cdcpipe("connectors", "delete", connector, "--drop-slot", "--drop-publication", "--yes", env=env)
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            for ident in idents.values():
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))


def topic_acls(stack: Stack, prefixes: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """(topic or prefix, LITERAL or PREFIXED, principal, operation) of each ACL on a name under `prefixes`."""
    anyone: Any = None  # matches any name, principal and host (the stubs type them str only)
    every = AclBindingFilter(
        ResourceType.TOPIC, anyone, ResourcePatternType.ANY, anyone, anyone, AclOperation.ANY, AclPermissionType.ANY
    )
    admin = AdminClient(stack.kafka().client_config())
    bindings = admin.describe_acls(every, request_timeout=30).result()
    return [
        (b.name, b.resource_pattern_type.name, b.principal, b.operation.name)
        for b in bindings
        if b.name.startswith(prefixes)
    ]
