"""A table group: the mirrors of a schema's tables in one Spark driver, each table apart.

`tables add --schema S --mirror --group G --submit` starts one driver; each table keeps its own mirror,
checkpoint and contract. One table's schema change that its policy stops on parks that table alone, loudly
(`jobs status`, `cdcpipe status`), while the others' changes keep arriving; once the policy is fixed and the
group restarted, the parked table catches up from its own checkpoint. A table added to the running group joins
it (the driver restarted, the others resuming where they were); one removed leaves it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.capture import tables, user_env
from tests.support.jobs import read_delta, status
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

# Tables of different shapes: a serial key, a composite key, text and numbers, a timestamp.
SHAPES = {
    "customers": "id serial PRIMARY KEY, name text NOT NULL, tier int",
    "orders": "id bigserial PRIMARY KEY, customer int, amount numeric(12,2), placed timestamptz DEFAULT now()",
    "order_lines": "order_id bigint, line int, sku text, qty int, PRIMARY KEY (order_id, line)",
    "products": "sku text PRIMARY KEY, title text, price numeric(10,2)",
}


def _rows(conn: psycopg.Connection[Any], schema: str, table: str) -> list[dict[str, Any]]:
    cursor = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
    names = [d.name for d in cursor.description or []]
    return sorted(
        ({n: v for n, v in zip(names, row, strict=True)} for row in cursor), key=lambda r: json.dumps(r, default=str)
    )


def _mirror(stack: Stack, lake: str, job: str, columns: list[str]) -> list[dict[str, Any]]:
    rows = [{c: r[c] for c in columns} for r in read_delta(stack, f"{lake}/{job}")]
    return sorted(rows, key=lambda r: json.dumps(r, default=str))


def _members(group: str, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each member of the group as `jobs status GROUP --json` reports it."""
    members: list[dict[str, Any]] = status(group, env)["members"]  # type: ignore[assignment]
    return {m["name"]: m for m in members}


def _write(conn: psycopg.Connection[Any], schema: str, round_: int) -> None:
    """An application's writes to every table."""

    def ident(table: str) -> sql.Identifier:
        return sql.Identifier(schema, table)

    conn.execute(sql.SQL("INSERT INTO {} (name, tier) VALUES (%s, %s)").format(ident("customers")), (f"c{round_}", 1))
    conn.execute(sql.SQL("UPDATE {} SET tier = tier + 1 WHERE id %% 3 = %s").format(ident("customers")), (round_ % 3,))
    conn.execute(
        sql.SQL("INSERT INTO {} (customer, amount) VALUES (%s, %s)").format(ident("orders")), (round_, round_ * 1.5)
    )
    conn.execute(
        sql.SQL("INSERT INTO {} VALUES (%s, 1, 'a', 1), (%s, 2, 'b', 2)").format(ident("order_lines")),
        (100 + round_, 100 + round_),
    )
    conn.execute(sql.SQL("DELETE FROM {} WHERE order_id = %s AND line = 2").format(ident("order_lines")), (round_,))
    conn.execute(
        sql.SQL("INSERT INTO {} VALUES (%s, 'p', 1) ON CONFLICT (sku) DO UPDATE SET price = {}.price + 1").format(
            ident("products"), ident("products")
        ),
        (f"sku-{round_ % 4}",),
    )


def test_a_group_runs_a_schemas_mirrors_in_one_driver_and_parks_one_table_alone(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    env = user_env(stack, outbox, tmp_path)
    schema, group = f"grp_{outbox.tag}", f"shop_{outbox.tag}"
    lake = env["CDCPIPE_LAKE"]
    job = {t: f"{schema}_{t}_mirror" for t in [*SHAPES, "late"]}
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for table, columns in SHAPES.items():
            conn.execute(sql.SQL(f"CREATE TABLE {{}} ({columns})").format(sql.Identifier(schema, table)))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (order_id, line, sku, qty) SELECT g, l, 's' || g, l FROM generate_series(1, 20) g, "
                "generate_series(1, 2) l"
            ).format(sql.Identifier(schema, "order_lines"))
        )
        for round_ in range(3):
            _write(conn, schema, round_)
    try:
        said = tables("add", "--schema", schema, "--mirror", "--group", group, "--submit", env=env)
        assert f"job        {group}: write" in said, said
        assert f"submit     {group}: start" in said, said
        group_file = Path(env["CDCPIPE_JOBS_DIRS"]) / f"{group}.toml"
        assert [p.name for p in Path(env["CDCPIPE_JOBS_DIRS"]).iterdir()] == [group_file.name]  # one file, one driver

        def equal(*names: str) -> bool:
            with psycopg.connect(outbox.dsn, autocommit=True) as conn:
                truth = {t: _rows(conn, schema, t) for t in names}
            for t in names:
                columns = list(truth[t][0]) if truth[t] else []
                try:
                    if _mirror(stack, lake, job[t], columns) != truth[t]:
                        return False
                except Exception:  # not made yet
                    return False
            return True

        wait_until(lambda: equal(*SHAPES), 300, "every mirror of the group to equal its table")
        report = status(group, env)
        assert report["running"] is True
        assert sorted(_members(group, env)) == sorted(job[t] for t in SHAPES)

        # One table's schema change that the group's policy stops on: that table is parked, the others flow.
        text = group_file.read_text()
        group_file.write_text(text + '\n[on_schema_change]\ncolumn_added = "stop"\n')
        assert cdcpipe("jobs", "stop", group, env=env).returncode == 0
        assert cdcpipe("jobs", "submit", group, env=env).returncode == 0
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN color text").format(sql.Identifier(schema, "products")))
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES ('new', 'n', 2, 'red')").format(sql.Identifier(schema, "products"))
            )

        def parked() -> bool:
            return bool(_members(group, env)[job["products"]]["last_error"])

        wait_until(parked, 180, f"{job['products']} to be parked")
        reason = _members(group, env)[job["products"]]["last_error"]
        assert "color" in reason, reason
        shown = cdcpipe("jobs", "status", group, env=env).stdout.splitlines()
        assert re.match(rf"\s+{job['products']}\s+PARKED: ", shown[1]), shown  # the worst first
        overall = cdcpipe("status", env=env).stdout
        assert f"PARKED {job['products']}" in overall, overall
        # The others keep flowing while it is parked.
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            for round_ in range(3, 6):
                _write(conn, schema, round_)
        wait_until(lambda: equal("customers", "orders", "order_lines"), 180, "the others' changes while one is parked")
        assert status(group, env)["running"] is True

        # Fixed (the column taken), restarted: the parked table catches up from its own checkpoint.
        group_file.write_text(text + '\n[on_schema_change]\ncolumn_added = "add"\n')
        assert cdcpipe("jobs", "stop", group, env=env).returncode == 0
        # A table added to the group joins it (the driver restarted; the others resume where they were).
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(sql.Identifier(schema, "late")))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'x'), (2, 'y')").format(sql.Identifier(schema, "late")))
        added = tables("add", f"{schema}.late", "--mirror", "--group", group, "--submit", env=env)
        assert f"{schema}.late in the group" in added, added
        wait_until(lambda: equal(*SHAPES, "late"), 300, "the parked table and the added one to catch up")
        members = _members(group, env)
        assert not any(m["last_error"] for m in members.values()), members

        # A table removed leaves the group; the group file keeps the others.
        removed = tables("remove", f"{schema}.late", "--yes", env=env)
        assert f"{schema}.late out of the group" in removed, removed
        assert f'"{schema}.late"' not in group_file.read_text()
    finally:
        cdcpipe("jobs", "stop", group, env=env)
        cdcpipe(
            "connectors",
            "delete",
            env["CDCPIPE_CAPTURE_CONNECTOR"],
            "--drop-slot",
            "--drop-publication",
            "--yes",
            env=env,
        )
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
