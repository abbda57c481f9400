"""A source table's columns change under a running mirror and history: Debezium on a real table, Delta read back.

One table, one connector, two streaming jobs (a mirror with the default policy, a history that rewrites on
widening and dead-letters an incompatible change), and each kind of change in turn: ADD, DROP, RENAME,
a TOASTed value left unchanged, ALTER TYPE widening, ALTER TYPE incompatible. After each, the Delta tables
are read (delta-rs; Spark for the type-widened mirror, which delta-rs cannot read) and compared with the
table in Postgres.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError
from psycopg import sql

from schemas import outbox as schema_outbox
from tests.support.connectors import table_connector, wait_slot_active, wait_state, write_definition
from tests.support.jobs import alive_and, status
from tests.support.kafka import read_topics
from tests.support.outbox import Outbox
from tests.support.spark_host import spark_run
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

BIG = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 400))"  # 12,800 chars: TOASTed


@dataclass(frozen=True)
class Source:
    """The captured table, its connector's topic, its contracts folder, and the jobs' environment."""

    stack: Stack
    table: str  # schema.table
    topic: str
    contracts: Path
    env: dict[str, str]
    lake: str

    def run(self, *statements: str) -> None:
        schema, name = self.table.split(".")
        with psycopg.connect(self.stack.pg_dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(sql.SQL(statement).format(t=sql.Identifier(schema, name)))

    def rows(self) -> dict[int, dict[str, Any]]:
        schema, name = self.table.split(".")
        with psycopg.connect(self.stack.pg_dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, name)))
            return {int(r["id"]): dict(r) for r in cur.fetchall()}


def delta_rows(stack: Stack, path: str) -> list[dict[str, Any]]:
    """Rows read with delta-rs through DataFusion, which honours column mapping (to_pyarrow_table does not)."""
    table = DeltaTable(path, storage_options=stack.s3_options())
    found: list[dict[str, Any]] = pa.table(
        QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all()
    ).to_pylist()
    return found


def spark_rows(source: Source, path: str) -> list[dict[str, Any]]:
    """Rows read by Spark with Delta (on the test process's shared driver): for a table delta-rs cannot read."""
    result = spark_run("tests.support.spark_read", [path], source.env)
    assert result.returncode == 0, result.stderr[-3000:]
    found: list[dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def as_text(row: dict[str, Any], columns: list[str]) -> dict[str, str | None]:
    return {c: None if row.get(c) is None else str(row[c]) for c in columns}


def same_rows(source: Source, found: list[dict[str, Any]], columns: list[str]) -> bool:
    """The Delta rows hold, for these columns, what Postgres holds (compared as text)."""
    expected = {k: as_text(r, columns) for k, r in source.rows().items()}
    return {int(str(r["id"])): as_text(r, columns) for r in found} == expected


@pytest.fixture
def source(stack: Stack, outbox: Outbox, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Source]:
    # A test may ask for a table name with capitals (Postgres keeps its case when quoted, as every tool quotes it).
    name = f"{getattr(request, 'param', 'evo')}_{outbox.tag}"
    table = f"public.{name}"
    ident = sql.Identifier("public", name)
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id int PRIMARY KEY, name text, qty int4, price numeric(10,2), code varchar(10), "
                "tag text, doc text)"
            ).format(ident)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 'n' || g, g, g * 1.5, 'c' || g, 't' || g, 'd' || g FROM generate_series(1, 3) g"
            ).format(ident)
        )
    settings = outbox.schema_settings.model_copy(
        update={"captured_tables": (table,), "tables_publication": f"pub_evo_{outbox.tag}"}
    )
    with psycopg.connect(stack.pg_dsn) as conn:
        schema_outbox.apply(conn, outbox.names, settings)
    contracts = tmp_path / "table_contracts"
    env = {
        **stack.process_env(),
        "CDCPIPE_TABLE_CONTRACT_DIRS": str(contracts),
        "CDCPIPE_JOBS_DIRS": str(tmp_path / "jobs"),
        "CDCPIPE_RUN_DIR": str(tmp_path / "run"),
        "CDCPIPE_LAKE": stack.s3_lake(),
    }
    imported = cdcpipe("schema", "tables", "import", table, env=env)
    assert imported.returncode == 0, imported.stderr
    assert (contracts / f"{table}.json").is_file()
    prefix = f"evo_{outbox.tag}"
    config = table_connector(
        outbox, prefix=prefix, slot=f"slot_evo_{outbox.tag}", publication=f"pub_evo_{outbox.tag}", table=name
    )
    connector = f"test-evo-{outbox.tag}"
    applied = cdcpipe(
        "connectors",
        "apply",
        "--no-wait",
        str(write_definition(tmp_path, {"name": connector, "config": config})),
        env=env,
    )
    assert applied.returncode == 0, applied.stderr
    try:
        wait_state(stack, connector, "RUNNING")
        wait_slot_active(stack, f"slot_evo_{outbox.tag}", connector)
        read_topics(stack.kafka_config(), [f"{prefix}.{table}"], 3, timeout_s=90)  # the snapshot: the topic exists
        yield Source(stack, table, f"{prefix}.{table}", contracts, env, env["CDCPIPE_LAKE"])
    finally:
        cdcpipe("connectors", "delete", connector, "--drop-slot", "--drop-publication", "--yes", env=env)
        with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))


def write_jobs(source: Source, tmp_path: Path, tag: str) -> tuple[str, str]:
    folder = tmp_path / "jobs"
    folder.mkdir(exist_ok=True)
    mirror, history = f"mirror-{tag}", f"history-{tag}"
    common = f'topics = ["{source.topic}"]\nsource_table = "{source.table}"\ntrigger = "1s"\n'
    (folder / f"{mirror}.toml").write_text(f'name = "{mirror}"\nkind = "table_mirror"\ntable = "mirror"\n{common}')
    (folder / f"{history}.toml").write_text(
        f'name = "{history}"\nkind = "table_history"\ntable = "history"\n{common}'
        '[on_schema_change]\ntype_widened = "rewrite"\nincompatible = "dead_letter"\n'
    )
    return mirror, history


def current(source: Source) -> list[dict[str, Any]]:
    return [r for r in delta_rows(source.stack, f"{source.lake}/history") if r["is_current"]]


def submitted(source: Source, tmp_path: Path, tag: str) -> tuple[str, str]:
    """The mirror and history jobs written and submitted."""
    jobs = write_jobs(source, tmp_path, tag)
    for job in jobs:
        result = cdcpipe("jobs", "submit", job, env=source.env)
        assert result.returncode == 0, result.stderr
    return jobs


def wait_converged(
    source: Source, tmp_path: Path, jobs: tuple[str, str], columns: list[str], what: str, reader: str = "delta-rs"
) -> None:
    """Until the mirror (read with delta-rs) and the history's current rows hold what Postgres holds."""
    mirror, history = jobs

    def both() -> bool:
        try:
            mirrored = delta_rows(source.stack, f"{source.lake}/mirror") if reader == "delta-rs" else []
            return (reader != "delta-rs" or same_rows(source, mirrored, columns)) and same_rows(
                source, current(source), columns
            )
        except (DeltaError, OSError):
            return False  # not created yet

    wait_until(alive_and(history, source.env, tmp_path, alive_and(mirror, source.env, tmp_path, both)), 240, what)


@pytest.mark.timeout(1500)  # about 5 minutes alone; twice that beside two others on a slow machine
def test_a_running_mirror_and_history_follow_each_kind_of_schema_change(
    stack: Stack, source: Source, outbox: Outbox, tmp_path: Path
) -> None:
    mirror, history = jobs = submitted(source, tmp_path, outbox.tag)
    mirror_path = f"{source.lake}/mirror"
    try:

        def converged(columns: list[str], what: str, reader: str = "delta-rs") -> None:
            wait_converged(source, tmp_path, jobs, columns, what, reader)

        converged(["id", "name", "qty", "price", "code", "tag", "doc"], "the snapshot")

        # ADD COLUMN: a new Delta column, filled from then on.
        source.run("ALTER TABLE {t} ADD COLUMN email text", "UPDATE {t} SET email = 'a@x' WHERE id = 1")
        source.run("INSERT INTO {t} VALUES (4, 'n4', 4, 6, 'c4', 't4', 'd4', 'd@x')")
        converged(["id", "name", "email", "doc"], "the added column")

        # DROP COLUMN (policy keep): the Delta column stays; a row changed after the drop has null there.
        source.run("ALTER TABLE {t} DROP COLUMN tag", "UPDATE {t} SET name = 'two' WHERE id = 2")
        converged(["id", "name", "email"], "the update after the drop")
        tags = {r["id"]: r["tag"] for r in delta_rows(stack, mirror_path)}
        assert tags == {1: "t1", 2: None, 3: "t3", 4: "t4"}

        # RENAME COLUMN: the Delta column renamed (column mapping), every row keeps its value.
        source.run("ALTER TABLE {t} RENAME COLUMN name TO full_name", "UPDATE {t} SET full_name = 'three' WHERE id = 3")
        converged(["id", "full_name", "email", "qty"], "the renamed column")
        assert "name" not in delta_rows(stack, mirror_path)[0]

        # TOAST: an update that leaves a large value alone sends a placeholder, never written as data.
        source.run(f"UPDATE {{t}} SET doc = {BIG} WHERE id = 4")
        converged(["id", "doc"], "the large value")
        source.run("UPDATE {t} SET qty = qty + 1 WHERE id = 4")
        converged(["id", "qty", "doc"], "the update beside the TOASTed value")
        versions = sorted(
            (r for r in delta_rows(stack, f"{source.lake}/history") if r["id"] == 4), key=lambda r: r["_lsn"]
        )
        big = source.rows()[4]["doc"]
        assert len(big) == 12_800
        assert [v["doc"] for v in versions][-2:] == [big, big]

        # ALTER TYPE, widening: the mirror widens in place (Delta type widening), the history is rewritten.
        source.run(
            "ALTER TABLE {t} ALTER COLUMN qty TYPE bigint",
            "ALTER TABLE {t} ALTER COLUMN price TYPE numeric(14,2)",
            "ALTER TABLE {t} ALTER COLUMN code TYPE text",
            "UPDATE {t} SET qty = 5000000000, price = 123456789012.34, code = 'longer than ten' WHERE id = 1",
        )
        widened = ["id", "full_name", "qty", "price", "code", "email", "doc"]
        converged(widened, "the widened history", reader="spark")
        # The rewrite kept the history's partitioning, by which its MERGE reads current versions only.
        partitioning = DeltaTable(f"{source.lake}/history", storage_options=stack.s3_options()).metadata()
        assert partitioning.partition_columns == ["is_current"]
        wait_until(
            alive_and(
                mirror, source.env, tmp_path, lambda: same_rows(source, spark_rows(source, mirror_path), widened)
            ),
            240,
            "the widened mirror",
        )
        with pytest.raises(DeltaError, match="TypeWidening"):
            delta_rows(stack, mirror_path)  # delta-rs 1.6 does not read type-widened tables: `rewrite` is for it

        # A new table over the whole topic (a replay's): one batch holding every shape, walked from the
        # contract version of the oldest changes (kept in the file), not backwards from the newest.
        again = f"again-{outbox.tag}"
        (tmp_path / "jobs" / f"{again}.toml").write_text(
            f'name = "{again}"\nkind = "table_mirror"\ntable = "again"\ntopics = ["{source.topic}"]\n'
            f'source_table = "{source.table}"\n[on_schema_change]\ntype_widened = "rewrite"\n'
        )
        ran = spark_run("streaming_jobs.run.runner", [again, "--trigger", "available-now"], source.env)
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert "a new table starts at contract v1" in ran.stderr
        rebuilt = delta_rows(stack, f"{source.lake}/again")
        assert same_rows(source, rebuilt, widened)
        streamed = spark_rows(source, mirror_path)
        every = [*widened, "tag", "_lsn"]  # the kept column too: the same rows, change for change
        assert {int(str(r["id"])): as_text(r, every) for r in rebuilt} == {
            int(str(r["id"])): as_text(r, every) for r in streamed
        }

        contract = json.loads((source.contracts / f"{source.table}.json").read_text())
        assert contract["properties"]["qty"]["x-pg-type"] == "int8"
        assert contract["properties"]["full_name"]["x-attnum"] == 2  # the renamed column kept its number
        assert contract["properties"]["tag"]["x-dropped"] is True
        assert contract["x-version"] == 5
        assert [v["x-version"] for v in contract["x-previous"]] == [1, 2, 3, 4]
        check = cdcpipe("schema", "tables", "import", "--check", source.table, env=source.env)
        assert check.returncode == 0, check.stdout + check.stderr

        # ALTER TYPE, incompatible: the mirror stops and says what changed; the history sets the change aside.
        source.run(
            "ALTER TABLE {t} ALTER COLUMN code TYPE int USING length(code)", "UPDATE {t} SET code = 7 WHERE id = 2"
        )

        def history_dead_letters() -> list[dict[str, Any]]:
            try:
                return delta_rows(stack, f"{source.lake}/history_dead_letters")
            except DeltaError:
                return []

        wait_until(lambda: status(mirror, source.env)["running"] is False, 240, "the mirror to stop")
        log = (tmp_path / "run" / f"{mirror}.log").read_text()
        said = log.strip().splitlines()[-1]  # the job's last word: the change and the ways on, not a trace
        assert said.startswith(f"error: job {mirror}: table {source.table}")
        assert "column code changed text -> int4" in said
        assert 'on_schema_change.incompatible = "stop"' in said
        wait_until(
            alive_and(history, source.env, tmp_path, lambda: len(history_dead_letters()) == 1), 240, "a dead letter"
        )
        dead = history_dead_letters()[0]
        assert "column code changed text -> int4" in str(dead["error"])
        # The whole record as Debezium sent it, its schema too (the job keeps only the change: read again).
        sent = json.loads(dead["value"])
        assert {f["field"] for f in sent["schema"]["fields"]} >= {"before", "after", "source", "op"}
        assert sent["payload"]["after"]["code"] == 7
        check = cdcpipe("schema", "tables", "import", "--check", source.table, env=source.env)
        assert check.returncode == 1
        assert "column code is text in the contract, int4 in the table" in check.stdout
    finally:
        for job in (mirror, history):
            cdcpipe("jobs", "stop", job, env=source.env)


@pytest.mark.parametrize("source", ["Evo"], indirect=True)
def test_a_mirror_follows_a_rename_a_column_added_back_and_a_narrower_type_and_stops_on_a_new_key(
    stack: Stack, source: Source, outbox: Outbox, tmp_path: Path
) -> None:
    """On a table whose name has capitals: each change the review found silently corrupting a mirror."""
    mirror, history = jobs = submitted(source, tmp_path, outbox.tag)
    mirror_path = f"{source.lake}/mirror"
    try:

        def converged(columns: list[str], what: str) -> None:
            wait_converged(source, tmp_path, jobs, columns, what)

        converged(["id", "name", "qty", "code", "tag"], "the snapshot")

        # RENAME on a table named with capitals: read as a rename (the catalog looked up by its exact name), so
        # rows untouched since keep their values; read as drop + add, they would be null there.
        source.run("ALTER TABLE {t} RENAME COLUMN name TO full_name", "UPDATE {t} SET full_name = 'one' WHERE id = 1")
        converged(["id", "full_name"], "the renamed column")

        # DROP, then ADD again with the same name and another type: every row the source did not touch since is
        # NULL there in Postgres, and must be in the mirror too; the old values move aside, kept.
        source.run("ALTER TABLE {t} DROP COLUMN tag", "UPDATE {t} SET full_name = 'two' WHERE id = 2")
        converged(["id", "full_name"], "the update after the drop")
        source.run("ALTER TABLE {t} ADD COLUMN tag int", "UPDATE {t} SET tag = 5 WHERE id = 1")
        converged(["id", "full_name", "tag"], "the column added back")
        rows = {r["id"]: r for r in delta_rows(stack, mirror_path)}
        assert {k: r["tag"] for k, r in rows.items()} == {1: 5, 2: None, 3: None}
        moved = [c for c in rows[3] if c.startswith("tag__dropped_v")]
        assert len(moved) == 1, sorted(rows[3])
        assert rows[3][moved[0]] == "t3", "the values of the dropped column are kept aside"

        # A narrower type at the source (int4 -> int2): the wider Delta column holds every value; the job goes on.
        source.run("ALTER TABLE {t} ALTER COLUMN qty TYPE int2", "UPDATE {t} SET qty = 7 WHERE id = 3")
        converged(["id", "full_name", "qty", "tag"], "the narrowed column")

        # A new primary key at the source: the mirror would merge on the old one and collapse rows. It stops.
        source.run(
            f'ALTER TABLE {{t}} DROP CONSTRAINT "{source.table.split(".")[1]}_pkey", ADD PRIMARY KEY (id, code)',
            "UPDATE {t} SET qty = 8 WHERE id = 2",
        )
        wait_until(lambda: status(mirror, source.env)["running"] is False, 240, "the mirror to stop")
        said = (tmp_path / "run" / f"{mirror}.log").read_text().strip().splitlines()[-1]
        assert said.startswith(f"error: job {mirror}: table {source.table}"), said
        assert "the source's primary key changed" in said
        assert "['code', 'id']" in said
        assert f"jobs replay {mirror} --swap" in said
        # `jobs status` says why in one line, not "not running" (and `cdcpipe status` reads the same line).
        assert status(mirror, source.env)["last_error"] == said.removeprefix("error: ")
        shown = cdcpipe("jobs", "status", mirror, env=source.env).stdout.splitlines()[0]
        assert shown.startswith(f"{mirror} (table_mirror): stopped by an error: job {mirror}: table"), shown
        assert {r["id"]: r["qty"] for r in delta_rows(stack, mirror_path)}[2] != 8, "nothing of that batch written"
    finally:
        for job in (mirror, history):
            cdcpipe("jobs", "stop", job, env=source.env)
