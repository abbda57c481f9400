"""The table kinds: a mirror (SCD1) and a history (SCD2) of a captured table, in LSN order, from Debezium changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable
from psycopg import sql

from demo.run import EXAMPLES
from schemas import outbox as schema_outbox
from tests.support.connectors import table_connector, wait_slot_active, wait_state, write_definition
from tests.support.jobs import T0, change, make_job, row, send_changes
from tests.support.kafka import read_topics
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


FIRST_BATCH = [
    ("a", change("r", None, row("a", 10), 100)),
    ("b", change("r", None, row("b", 20), 100)),
    ("c", change("c", None, row("c", 5), 110)),
    ("a", change("u", row("a", 10), row("a", 11), 120)),
    ("a", change("u", row("a", 11), row("a", 12), 130)),
    ("b", change("d", {"id": "b", "owner": None, "balance": None}, None, 140)),
    ("b", None),  # the tombstone after a delete
    ("x", "{not a change"),
]


def ts(lsn: int) -> datetime:
    return datetime.fromtimestamp((T0 + lsn) / 1000, tz=UTC)


def test_mirror_applies_inserts_updates_deletes_in_lsn_order(stack: Stack, topic: str, tmp_path: Path) -> None:
    send_changes(stack, topic, FIRST_BATCH)
    job = make_job(stack, tmp_path, "table_mirror", [topic], source_table="public.accounts")
    job.run()
    mirror = {r["id"]: r for r in job.table()}
    assert {k: v["balance"] for k, v in mirror.items()} == {"a": 12, "c": 5}
    assert mirror["a"]["_lsn"] == 130
    # One change applied per key (its newest; b's is the delete), the tombstone skipped, the bad record dead.
    assert job.counts() == (3, 1)
    dead = job.table("_dead_letters")
    assert [d["kafka_offset"] for d in dead] == [7]
    # The record's own bytes, read again from Kafka: the classified changes keep none.
    assert (dead[0]["key"], dead[0]["value"]) == (b'{"id": "x"}', b"{not a change")
    # A later batch: a newer change applies, an older one (a replayed, stale change) does not.
    send_changes(
        stack, topic, [("c", change("u", row("c", 5), row("c", 6), 150)), ("a", change("u", None, row("a", 1), 125))]
    )
    job.run()
    assert {r["id"]: r["balance"] for r in job.table()} == {"a": 12, "c": 6}
    assert job.counts() == (2, 0), "each key's newest change of the batch counts, the stale one too"


def test_a_change_whose_value_does_not_fit_its_column_is_dead_lettered_and_the_mirror_goes_on(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    """Changes without their Connect schema (`schemas.enable=false`), typed by the table's contract only.

    The column became int8 in Postgres and its contract still says int4: a balance past 2**31 cannot be written.
    Before, the cast failed the whole batch at every restart; now that change is a dead letter, its own bytes
    kept, with the column, the type and the fix, and the rest applies.
    """
    contracts = tmp_path / "tables"
    contracts.mkdir()
    accounts = json.loads((EXAMPLES / "tables" / "public.accounts.json").read_text())
    accounts["properties"]["balance"]["x-pg-type"] = "int4"
    (contracts / "public.accounts.json").write_text(json.dumps(accounts))
    too_big = change("u", None, row("a", 3_000_000_000), 130)
    send_changes(stack, topic, [*FIRST_BATCH[:6], ("a", too_big)])
    job = make_job(
        stack,
        tmp_path,
        "table_mirror",
        [topic],
        env={"CDCPIPE_TABLE_CONTRACT_DIRS": str(contracts)},
        source_table="public.accounts",
    )
    job.run()
    assert {r["id"]: r["balance"] for r in job.table()} == {"a": 12, "c": 5}
    (dead,) = job.table("_dead_letters")
    assert dead["kafka_offset"] == 6
    assert (dead["key"], dead["value"]) == (b'{"id": "a"}', too_big.encode())
    assert str(dead["error"]).startswith("values that do not fit their column's type in the contract: balance (int4); ")
    assert "cdcpipe tables add" in str(dead["error"])
    send_changes(stack, topic, [("c", change("u", row("c", 5), row("c", 7), 150))])
    job.run()
    assert {r["id"]: r["balance"] for r in job.table()} == {"a": 12, "c": 7}


# An incremental snapshot's row (no lsn; its chunk's closing mark at 32723648, the commit before the mark at
# 32712904) and a delete written at 32700000, before that commit, by a transaction that committed after the mark
# (the commit before it: 32724040). Its LSN is the lowest; as the transactions committed, the delete is last.
SNAPSHOT_ROW = (32712904, 32723648)
LATE_DELETE = 32700000, (32724040, 32700000)


def test_a_mirror_orders_changes_as_they_committed(stack: Stack, topic: str, tmp_path: Path) -> None:
    """A row a snapshot read and a transaction open across the mark deleted stays deleted, in one batch or two."""
    read = [
        (key, change("r", None, row(key, n), None, SNAPSHOT_ROW)) for key, n in (("k", 1), ("m", 2), ("j", 3), ("p", 5))
    ]
    send_changes(stack, topic, [*read, ("k", change("d", row("k", 1), None, *LATE_DELETE))])
    job = make_job(stack, tmp_path, "table_mirror", [topic], source_table="public.accounts")
    job.run()
    assert {r["id"]: r["balance"] for r in job.table()} == {"m": 2, "j": 3, "p": 5}
    send_changes(stack, topic, [("j", change("d", row("j", 3), None, *LATE_DELETE))])  # the delete a batch later
    job.run()
    assert {r["id"]: (r["_commit_lsn"], r["_lsn"]) for r in job.table()} == {"m": SNAPSHOT_ROW, "p": SNAPSHOT_ROW}

    # Later changes go on in commit order.
    send_changes(
        stack,
        topic,
        [
            ("p", change("u", None, row("p", 6), 32731000, (32730500, 32731000))),
            ("n", change("c", None, row("n", 4), 32732000, (32731500, 32732000))),
        ],
    )
    job.run()
    found = {r["id"]: (r["balance"], r["_commit_lsn"]) for r in job.table()}
    assert found == {"m": (2, SNAPSHOT_ROW[0]), "p": (6, 32730500), "n": (4, 32731500)}


def test_history_keeps_every_version_even_several_of_one_key_in_a_batch(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    send_changes(stack, topic, FIRST_BATCH)
    job = make_job(stack, tmp_path, "table_history", [topic], source_table="public.accounts")
    job.run()
    send_changes(stack, topic, [("c", change("u", row("c", 5), row("c", 6), 150))])
    job.run()
    versions = sorted(
        ((r["id"], r["balance"], r["valid_from"], r["valid_to"], r["is_current"]) for r in job.table()),
        key=lambda v: (str(v[0]), str(v[2])),
    )
    assert versions == [
        ("a", 10, ts(100), ts(120), False),
        ("a", 11, ts(120), ts(130), False),
        ("a", 12, ts(130), None, True),
        ("b", 20, ts(100), ts(140), False),
        ("c", 5, ts(110), ts(150), False),
        ("c", 6, ts(150), None, True),
    ]
    # Partitioned by is_current: a closed version lies apart from the current ones, and the second batch's MERGE
    # (closing c's version) removed only files of current versions: the closed versions' files it never read.
    path = f"{job.lake}/out"
    out = DeltaTable(path)
    assert out.metadata().partition_columns == ["is_current"]
    for flag in (True, False):
        part = out.to_pyarrow_table(filters=[("is_current", "=", flag)]).to_pylist()
        assert len(part) == (2 if flag else 4)
        assert all((r["valid_to"] is None) == flag for r in part), part
    merge = out.history(1)[0]
    assert merge["operation"] == "MERGE"
    commit = Path(path) / "_delta_log" / f"{merge['version']:020d}.json"
    removed = [json.loads(line)["remove"]["path"] for line in commit.read_text().splitlines() if '"remove"' in line]
    assert removed
    assert all(p.startswith("is_current=true/") for p in removed), removed


def test_a_mirror_of_a_real_table_through_debezium_equals_the_table(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    table = f"accounts_{outbox.tag}"
    ident = sql.Identifier("public", table)
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id text PRIMARY KEY, owner text, balance bigint)").format(ident))
        conn.execute(sql.SQL("INSERT INTO {} SELECT 'a' || g, 'o' || g, g FROM generate_series(1, 20) g").format(ident))
    settings = outbox.schema_settings.model_copy(
        update={"captured_tables": (f"public.{table}",), "tables_publication": f"pub_tables_{outbox.tag}"}
    )
    with psycopg.connect(stack.pg_dsn) as conn:
        schema_outbox.apply(conn, outbox.names, settings)
    contracts = tmp_path / "table_contracts"
    contracts.mkdir()
    contract = json.loads((EXAMPLES / "tables" / "public.accounts.json").read_text())
    (contracts / f"public.{table}.json").write_text(json.dumps(contract))
    config = table_connector(
        outbox,
        prefix=f"mirror_{outbox.tag}",
        slot=f"slot_mirror_{outbox.tag}",
        publication=f"pub_tables_{outbox.tag}",
        table=table,
    )
    name = f"test-mirror-{outbox.tag}"
    env = stack.process_env()
    topic = f"mirror_{outbox.tag}.public.{table}"
    try:
        assert (
            cdcpipe(
                "connectors",
                "apply",
                "--no-wait",
                str(write_definition(tmp_path, {"name": name, "config": config})),
                env=env,
            ).returncode
            == 0
        )
        wait_state(stack, name, "RUNNING")
        wait_slot_active(stack, f"slot_mirror_{outbox.tag}", name)
        with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {} SET balance = balance * 10 WHERE id IN ('a1', 'a2', 'a3')").format(ident))
            conn.execute(sql.SQL("DELETE FROM {} WHERE id IN ('a4', 'a5')").format(ident))
            conn.execute(sql.SQL("INSERT INTO {} VALUES ('z', 'new', 99)").format(ident))
            with conn.transaction():  # several changes of one row in one transaction
                conn.execute(sql.SQL("UPDATE {} SET balance = 1 WHERE id = 'a6'").format(ident))
                conn.execute(sql.SQL("UPDATE {} SET balance = 2 WHERE id = 'a6'").format(ident))
            expected = {
                r[0]: (r[1], r[2]) for r in conn.execute(sql.SQL("SELECT id, owner, balance FROM {}").format(ident))
            }
        # 20 snapshot reads, 3 updates, 2 deletes and their tombstones, 1 insert, 2 updates in one transaction.
        read_topics(stack.kafka_config(), [topic], 20 + 3 + 2 * 2 + 1 + 2, timeout_s=90)
        job = make_job(
            stack,
            tmp_path,
            "table_mirror",
            [topic],
            env={"CDCPIPE_TABLE_CONTRACT_DIRS": str(contracts)},
            source_table=f"public.{table}",
        )
        job.run()
        # The connector beats on this test's own heartbeat table: one naming another schema's table restarts the
        # connector every 10 s (Debezium retries the failed query) until that table exists.
        beat = sql.SQL("SELECT count(*) FROM {} WHERE id = 2").format(
            sql.Identifier(outbox.names.outbox_schema, "debezium_heartbeat")
        )

        def beaten() -> bool:
            with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
                found = conn.execute(beat).fetchone()
            return found is not None and found[0] == 1

        wait_until(beaten, 60, f"the connector's heartbeat in {outbox.names.outbox_schema}.debezium_heartbeat")
    finally:
        cdcpipe("connectors", "delete", name, "--drop-slot", "--drop-publication", "--yes", env=env)
        with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(ident))
    assert {r["id"]: (r["owner"], r["balance"]) for r in job.table()} == expected
