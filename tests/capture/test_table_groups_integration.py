"""A table group: the mirrors of a schema's tables in one Spark driver, each table apart.

On a rental store's schema of twenty tables (tests.support.rental_schema: serial and identity keys, composite
keys, foreign keys, an enum, domains, arrays, a tsvector kept by a trigger, a generated column, a table
partitioned by month), filled before the capture and written to by the store's business after it:
`tables add --schema S --mirror --group G --submit` starts one driver; each table keeps its own mirror,
checkpoint and contract. One table's schema change that its policy stops on parks that table alone, loudly
(`jobs status`, `cdcpipe status`), while the others' changes keep arriving; each table's metrics come from the driver's
one server under the table's own job, and the parked table's alert fires. The driver killed mid-stream, the
policy fixed and the parked table rewound alone (`jobs rewind GROUP --table T`), the next start catches every
table up from its own checkpoint, nothing applied twice. On a group of its own, while its driver runs: one
table replayed into a new mirror and swapped in (`jobs replay GROUP --table T --swap`) while the others go on,
a table added joins it and one removed leaves it, the driver never restarted.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.support import rental_schema
from tests.support.browser import render, worst_first
from tests.support.capture import forget, tables, user_env
from tests.support.jobs import jobs_command, read_delta, status
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

TEXT_TYPES = ("daterange", "tsvector", "jsonb", "json", "mpaa_rating", "mood")  # compared as Postgres' text of them


def _truth(
    conn: psycopg.Connection[Any], schema: str, table: str
) -> tuple[list[str], dict[tuple[Any, ...], dict[str, Any]]]:
    """The table's captured columns and rows by primary key, each value as the mirror holds it."""
    columns = conn.execute(
        "SELECT a.attname, t.typname, a.attnum = ANY(i.indkey) FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' "
        "ORDER BY a.attnum",
        (sql.Identifier(schema, table).as_string(None),),
    ).fetchall()
    names = [c[0] for c in columns]
    key = [c[0] for c in columns if c[2]]
    exprs = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(n)) if t in TEXT_TYPES else sql.Identifier(n) for n, t, _ in columns
    )
    rows = {}
    for row in conn.execute(sql.SQL("SELECT {} FROM {}").format(exprs, sql.Identifier(schema, table))):
        values = {n: bytes(v) if isinstance(v, memoryview) else v for n, v in zip(names, row, strict=True)}
        rows[tuple(values[k] for k in key)] = values
    return key, rows


def _differences(
    stack: Stack, table: str, job: str, key: list[str], truth: dict[tuple[Any, ...], dict[str, Any]]
) -> list[str]:
    try:
        held = read_delta(stack, table)
    except Exception as exc:  # not made yet
        return [f"{job}: {exc}"]
    mirror = {tuple(r[k] for k in key): r for r in held}
    found = [f"{job}: {len(truth)} rows in Postgres, {len(mirror)} in the mirror"] if len(mirror) != len(truth) else []
    for k, row in truth.items():
        if k not in mirror:
            found.append(f"{job}: {k} missing")
            continue
        found += [f"{job} {k} {c}: {v!r} != {mirror[k].get(c)!r}" for c, v in row.items() if mirror[k].get(c) != v]
    return found


class _Converged:
    """Until each table's mirror (at `mirror[t]`) equals it, a poll reading only the tables still behind.

    A mirror found equal is not read again: nothing more is written to its table while this waits.
    """

    def __init__(
        self, stack: Stack, dsn: str, schema: str, mirror: dict[str, str], job: dict[str, str], said: Callable[[], str]
    ) -> None:
        self.stack, self.dsn, self.schema, self.mirror, self.job = stack, dsn, schema, mirror, job
        self.said = said  # what the group's driver says of its tables (`jobs status GROUP`), for a timeout's reason
        self.behind: set[str] = set()
        self.last: list[str] = []

    def wait(self, timeout_s: float, what: str, *tables: str) -> None:
        self.behind, self.last = set(tables), []
        wait_until(self.check, timeout_s, what, self.explain)

    def check(self) -> bool:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            truths = {t: _truth(conn, self.schema, t) for t in sorted(self.behind)}
        found = {t: _differences(self.stack, self.mirror[t], self.job[t], *truths[t]) for t in truths}
        self.behind = {t for t, differences in found.items() if differences}
        self.last = [d for t in sorted(self.behind) for d in found[t][:3]]
        return not self.behind

    def explain(self) -> str:
        """The tables behind, their first differences, and what the group says of them: slow, stuck or parked."""
        jobs = {self.job[t] for t in self.behind}
        said = self.said().splitlines()
        status = [line for line in said if line.strip() and (not line.startswith(" ") or line.split()[0] in jobs)]
        return (
            f"{len(self.behind)} tables behind ({', '.join(sorted(self.behind))}); "
            + "; ".join(self.last[:12])
            + "\n`jobs status` of the group:\n"
            + "\n".join(status)
        )


def said_of(group: str, env: dict[str, str]) -> str:
    shown = cdcpipe("jobs", "status", group, env=env)
    return shown.stdout + shown.stderr


def _members(group: str, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each member of the group as `jobs status GROUP --json` reports it."""
    members: list[dict[str, Any]] = status(group, env)["members"]  # type: ignore[assignment]
    return {m["name"]: m for m in members}


# Twenty tables' snapshot, a restart and their catch-ups: 330 to 520 s alone, 950 s beside two others on a slow machine.
@pytest.mark.timeout(1800)
def test_a_rental_stores_twenty_tables_run_as_one_group_and_one_table_is_parked_alone(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    env = user_env(stack, outbox, tmp_path)
    schema, group = f"rent_{outbox.tag}", f"store_{outbox.tag}"
    lake = env["CDCPIPE_LAKE"]
    job = {t: f"{schema}_{t}_mirror" for t in rental_schema.TABLES}
    mirror = {t: f"{lake}/{name}" for t, name in job.items()}
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        for statement in rental_schema.ddl(schema):
            conn.execute(statement)
        rental_schema.fill(conn, schema)
        for day in range(3):
            rental_schema.business(conn, schema, day)
    try:
        said = tables("add", "--schema", schema, "--mirror", "--group", group, env=env)
        assert f"job        {group}: write" in said, said
        assert f"{schema}.payment_p2025_01" not in said  # the partitions are the partitioned table's
        group_file = Path(env["CDCPIPE_JOBS_DIRS"]) / f"{group}.toml"
        assert [p.name for p in Path(env["CDCPIPE_JOBS_DIRS"]).iterdir()] == [group_file.name]  # one file, one driver
        # The group's policy, for every table: a column added stops the table (to park one, below).
        text = group_file.read_text()
        group_file.write_text(text + '\n[on_schema_change]\ncolumn_added = "stop"\n')
        assert cdcpipe("jobs", "submit", group, env=env).returncode == 0
        contract = json.loads(
            (Path(env["CDCPIPE_TABLE_CONTRACT_DIRS"].split(":")[0]) / f"{schema}.film.json").read_text()
        )
        assert "length_hours" not in contract["properties"]  # a stored generated column is not captured

        converge = _Converged(stack, outbox.dsn, schema, mirror, job, lambda: said_of(group, env)).wait

        # The application goes on while the group takes the snapshot and the stream.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            for day in range(3, 8):
                rental_schema.business(conn, schema, day)
        # 226 s alone; past 600 s in CI beside the cluster's soak (13 JVMs on two cores).
        converge(900, "every mirror of the group to equal its table", *rental_schema.TABLES)
        assert sorted(_members(group, env)) == sorted(job[t] for t in rental_schema.TABLES)
        assert status(group, env)["running"] is True

        # One table's schema change that the group's policy stops on: that table is parked, the others flow.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN code text").format(sql.Identifier(schema, "category")))
            conn.execute(
                sql.SQL("INSERT INTO {} (name, code) VALUES ('Horror', 'H')").format(sql.Identifier(schema, "category"))
            )

        def parked() -> bool:
            return bool(_members(group, env)[job["category"]]["last_error"])

        wait_until(parked, 180, f"{job['category']} to be parked")
        reason = _members(group, env)[job["category"]]["last_error"]
        assert "column code (text) added" in reason, reason
        shown = cdcpipe("jobs", "status", group, env=env).stdout.splitlines()
        assert re.match(rf"\s+{job['category']}\s+PARKED: ", shown[1]), shown  # the worst first
        listed = tables("list", env=env)
        assert f"job        {job['category']} (table_mirror): stopped by an error: " in listed, listed
        overall = cdcpipe("status", env=env).stdout
        assert f"PARKED {job['category']}" in overall, overall
        # One server for the driver, each table's series under its own job, and the parked table's alert.
        wait_until(
            lambda: stack.prometheus(
                f'ALERTS{{alertname="CdcpipeTableParked", job="{job["category"]}", group="{group}"}}'
            ),
            120,
            "the parked table's alert",
        )
        # The stack's page puts the parked table first, before any table behind.
        ranked = worst_first(render(f"{stack.env['CDCPIPE_PROMETHEUS_URL']}/consoles/cdcpipe.html"))
        assert ranked, "no row in the page's worst-first table"
        assert ranked[0]["parked"] == "1", ranked
        assert job["category"] in {r["job"] for r in ranked if r["parked"] == "1"}, ranked
        applied = stack.prometheus(f'cdcpipe_job_rows_applied_total{{job=~"{schema}_.*_mirror"}}')
        assert {r["metric"]["job"] for r in applied} == {job[t] for t in rental_schema.TABLES}, applied
        assert len({r["metric"]["instance"] for r in applied}) == 1, "one metrics server for the group's driver"
        # The application holds its executor on the cluster, under the name `jobs status` looks it up by.
        if stack.env.get("CDCPIPE_SPARK_MASTER", "").startswith("spark://"):
            apps = httpx.get(f"{stack.env['CDCPIPE_SPARK_MASTER_UI_URL']}/json/", timeout=10).json()
            assert any(a["name"] == f"cdcpipe-job-{group}" and a["cores"] >= 1 for a in apps["activeapps"]), apps
        assert status(group, env)["stalled"] is None

        # The others keep flowing while it is parked.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            for day in range(8, 10):
                rental_schema.business(conn, schema, day)
        others = [t for t in rental_schema.TABLES if t != "category"]
        converge(600, "the others' changes while one is parked", *others)
        assert status(group, env)["running"] is True

        # The driver killed while the store writes: the next start goes on from each table's checkpoint.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            rental_schema.business(conn, schema, 10)
        os.kill(status(group, env)["pid"], signal.SIGKILL)  # type: ignore[arg-type]
        wait_until(lambda: not status(group, env)["running"], 30, "the killed driver to be seen gone")
        # Fixed (the column taken), and the parked table read again from its topic's start while the group is
        # down (`--table`: one table of the group): the rows it holds are not applied twice.
        group_file.write_text(text + '\n[on_schema_change]\ncolumn_added = "add"\n')
        rewound = cdcpipe("jobs", "rewind", group, "--table", f"{schema}.category", "--to", "earliest", env=env)
        assert rewound.returncode == 0, rewound.stdout + rewound.stderr
        assert f"{job['category']}: resumes from these offsets" in rewound.stdout, rewound.stdout
        started = cdcpipe("jobs", "submit", group, env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        converge(600, "every table, the parked one too, after the restart", *rental_schema.TABLES)
        assert not any(m["last_error"] for m in _members(group, env).values())
    finally:
        cdcpipe("jobs", "stop", group, env=env)
        forget(outbox, env, schema)


def test_a_running_group_replays_one_table_alone_and_takes_tables_in_and_out_without_a_restart(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    env = user_env(stack, outbox, tmp_path)
    schema, group = f"live_{outbox.tag}", f"live_{outbox.tag}"
    lake = env["CDCPIPE_LAKE"]
    names = ["a", "b", "c", "late"]
    job = {t: f"{schema}_{t}_mirror" for t in names}
    mirror = {t: f"{lake}/{job[t]}" for t in names}  # where each mirror is: a replay moves one

    def shaped(table: str) -> sql.Composed:
        """A table as real ones are: a bigserial key, an enum of its schema, an array with a NULL, a numeric."""
        return sql.SQL(
            "CREATE TABLE {} (id bigserial PRIMARY KEY, v text, mood {} NOT NULL, tags text[], amount numeric(10, 2))"
        ).format(sql.Identifier(schema, table), sql.Identifier(schema, "mood"))

    def write(conn: psycopg.Connection[Any], *tables_: str, rows: range) -> None:
        for table in tables_:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (id, v, mood, tags, amount) SELECT g, 'v' || g, "
                    "(CASE WHEN g %% 2 = 0 THEN 'busy' ELSE 'calm' END)::{}, ARRAY['t' || g, NULL], g * 1.25 "
                    "FROM generate_series(%s::int, %s::int) g ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v || '+', "
                    "mood = 'busy', tags = array_append({}.tags, 'again'), amount = {}.amount + 0.01"
                ).format(
                    sql.Identifier(schema, table),
                    sql.Identifier(schema, "mood"),
                    sql.Identifier(table),
                    sql.Identifier(table),
                ),
                (rows.start, rows.stop - 1),
            )

    converge = _Converged(stack, outbox.dsn, schema, mirror, job, lambda: said_of(group, env)).wait

    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TYPE {} AS ENUM ('calm', 'busy')").format(sql.Identifier(schema, "mood")))
        for table in names[:3]:
            conn.execute(shaped(table))
        write(conn, "a", "b", "c", rows=range(0, 50))
    try:
        tables("add", "--schema", schema, "--mirror", "--group", group, env=env)
        group_file = Path(env["CDCPIPE_JOBS_DIRS"]) / f"{group}.toml"
        group_file.write_text(group_file.read_text() + '\n[on_schema_change]\ncolumn_dropped = "drop"\n')
        assert cdcpipe("jobs", "submit", group, env=env).returncode == 0
        driver = status(group, env)["pid"]
        converge(240, "the group's three mirrors", "a", "b", "c")

        # One table rebuilt from its topic into a new mirror and swapped in while the others take changes: it is
        # set aside in the running driver, the others go on; nothing lost or applied twice.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            write(conn, "a", "b", "c", rows=range(25, 75))
        replayed = jobs_command("jobs", "replay", group, "--table", f"{schema}.a", "--swap", env=env)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert f"{job['a']}: now uses " in replayed.stdout, replayed.stdout
        mirror["a"] = str(status(job["a"], env)["table"])
        assert mirror["a"] != f"{lake}/{job['a']}", mirror["a"]
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            write(conn, "a", "b", "c", rows=range(70, 80))
        converge(240, "every mirror, the replayed one in its new table", "a", "b", "c")
        assert status(group, env)["pid"] == driver, "the group's driver was not restarted"

        # A table added to the running group joins it (the driver reads its file again); the group's policy set
        # by hand stays in the file.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            conn.execute(shaped("late"))
            write(conn, "late", rows=range(0, 5))
        added = tables("add", f"{schema}.late", "--mirror", "--group", group, env=env)
        assert f"{schema}.late in the group" in added, added
        assert f"submit     {group}: join" in added, added
        assert 'column_dropped = "drop"' in group_file.read_text()
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            write(conn, "a", "b", "late", rows=range(78, 90))
        converge(240, "every table, the added one too", *names)

        # A table removed leaves the running group; the group file keeps the others.
        removed = tables("remove", f"{schema}.late", "--yes", env=env)
        assert f"{schema}.late out of the group" in removed, removed
        assert f"submit     {group}: leave" in removed, removed
        assert f'"{schema}.late"' not in group_file.read_text()
        assert job["late"] not in _members(group, env)
        assert status(group, env)["pid"] == driver, "the group's driver was not restarted"
        assert not any(m["last_error"] for m in _members(group, env).values())
    finally:
        cdcpipe("jobs", "stop", group, env=env)
        forget(outbox, env, schema)
