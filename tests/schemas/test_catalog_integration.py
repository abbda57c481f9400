"""`cdcpipe schema tables import` and `--check` on a real Postgres catalog; REPLICA IDENTITY FULL on request."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from schemas import outbox as schema_outbox
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe

pytestmark = pytest.mark.integration


@pytest.fixture
def table(stack: Stack, outbox: Outbox) -> str:
    schema = outbox.names.outbox_schema  # a schema of this test's own
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TYPE {}.mood AS ENUM ('sad', 'ok', 'happy')").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE DOMAIN {}.price AS numeric(9,3)").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.orders (id bigint, line int2, amount numeric(12,2), rate numeric, code varchar(20) "
                "NOT NULL, note text, ref uuid, doc jsonb, tags text[], m {}.mood, blob bytea, day date, "
                "at timestamp, at3 timestamp(3), seen timestamptz, unit {}.price, PRIMARY KEY (line, id))"
            ).format(sql.Identifier(schema), sql.Identifier(schema), sql.Identifier(schema))
        )
    return f"{schema}.orders"


def test_import_writes_each_column_s_type_nullability_number_and_the_key(
    stack: Stack, table: str, tmp_path: Path
) -> None:
    env = stack.process_env()
    result = cdcpipe("schema", "tables", "import", table, "--dir", str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / f"{table}.json").read_text())
    assert document["x-primary-key"] == ["line", "id"]  # key order, not column order
    assert document["x-replica-identity"] == "default"
    properties = document["properties"]
    assert {name: rules["x-pg-type"] for name, rules in properties.items()} == {
        "id": "int8",
        "line": "int2",
        "amount": "numeric(12,2)",
        "rate": "numeric",
        "code": "varchar(20)",
        "note": "text",
        "ref": "uuid",
        "doc": "jsonb",
        "tags": "_text",
        "m": "mood",
        "blob": "bytea",
        "day": "date",
        "at": "timestamp",
        "at3": "timestamp(3)",
        "seen": "timestamptz",
        "unit": "numeric(9,3)",  # a domain is its base type
    }
    assert [rules["x-attnum"] for rules in properties.values()] == list(range(1, 17))
    assert properties["code"]["type"] == "string"  # NOT NULL
    assert properties["note"]["type"] == ["string", "null"]
    assert properties["m"]["enum"] == ["sad", "ok", "happy", None]
    assert properties["tags"] == {
        "type": ["array", "null"],
        "items": {"type": "string"},
        "x-pg-type": "_text",
        "x-attnum": 9,
    }
    assert sorted(document["required"]) == ["code", "id", "line"]
    assert document["x-version"] == 1

    # The contract is found where the jobs look (CDCPIPE_TABLE_CONTRACT_DIRS) and agrees with the catalog.
    env["CDCPIPE_TABLE_CONTRACT_DIRS"] = str(tmp_path)
    check = cdcpipe("schema", "tables", "import", "--check", table, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    schema = table.split(".")[0]
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        orders = sql.Identifier(schema, "orders")
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN extra int4").format(orders))
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN amount TYPE numeric(14,2)").format(orders))
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN note SET NOT NULL").format(orders))
    check = cdcpipe("schema", "tables", "import", "--check", table, env=env)
    assert check.returncode == 1
    assert check.stdout.splitlines() == [
        f"{table} ({tmp_path / (table + '.json')}): column amount is numeric(12,2) in the contract, numeric(14,2) in the table",
        f"{table} ({tmp_path / (table + '.json')}): column extra (int4) is in the table, not in the contract",
        f"{table} ({tmp_path / (table + '.json')}): column note is nullable in the contract, NOT NULL in the table",
    ]
    # Imported again, the contract follows the catalog as its next version.
    assert cdcpipe("schema", "tables", "import", table, env=env).returncode == 0
    assert json.loads((tmp_path / f"{table}.json").read_text())["x-version"] == 2
    assert cdcpipe("schema", "tables", "import", "--check", table, env=env).returncode == 0


def test_a_table_without_a_key_or_not_there_is_refused_with_the_fix(
    stack: Stack, outbox: Outbox, tmp_path: Path
) -> None:
    schema = outbox.names.outbox_schema
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.loose (a int)").format(sql.Identifier(schema)))
    env = stack.process_env()
    loose = cdcpipe("schema", "tables", "import", f"{schema}.loose", "--dir", str(tmp_path), env=env)
    assert loose.returncode == 2
    assert "has no primary key and no replica identity index" in loose.stderr
    assert "REPLICA IDENTITY USING INDEX" in loose.stderr
    missing = cdcpipe("schema", "tables", "import", f"{schema}.nothing", "--dir", str(tmp_path), env=env)
    assert missing.returncode == 2
    assert f"table {schema}.nothing is not in the catalog" in missing.stderr
    nowhere = cdcpipe("schema", "tables", "import", f"{schema}.loose", env={**env, "CDCPIPE_TABLE_CONTRACT_DIRS": ""})
    assert nowhere.returncode == 2
    assert "pass --dir, or set CDCPIPE_TABLE_CONTRACT_DIRS" in nowhere.stderr


def test_schema_apply_sets_replica_identity_full_on_request(stack: Stack, outbox: Outbox, tmp_path: Path) -> None:
    schema = outbox.names.outbox_schema
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.docs (id int PRIMARY KEY, body text)").format(sql.Identifier(schema)))
    settings = outbox.schema_settings.model_copy(update={"replica_identity_full": (f"{schema}.docs",)})
    with psycopg.connect(stack.pg_dsn) as conn:
        schema_outbox.apply(conn, outbox.names, settings)
    result = cdcpipe("schema", "tables", "import", f"{schema}.docs", "--dir", str(tmp_path), env=stack.process_env())
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / f"{schema}.docs.json").read_text())["x-replica-identity"] == "full"
