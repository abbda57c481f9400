"""`cdcpipe schema apply` and `emit` against the real Postgres."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from demo.run import EXAMPLES
from ground.errors import ConfigError
from ground.scram import scram_verifier
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings
from schemas.contracts import ContractRegistry
from schemas.emit import emit
from schemas.errors import ContractError, ContractViolationError, SchemaError
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe

pytestmark = pytest.mark.integration

ACCOUNT = {"account_id": "a-1", "owner": "Ann", "currency": "EUR"}


def test_apply_is_idempotent_and_creates_what_debezium_needs(stack: Stack, outbox: Outbox) -> None:
    with psycopg.connect(stack.pg_dsn) as conn:
        schema_outbox.apply(conn, outbox.names, outbox.schema_settings)  # a second time: no error, no change
        columns: dict[str, str] = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                (outbox.names.outbox_schema, outbox.names.outbox_table),
            ).fetchall()
        )
        published = conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
            (outbox.schema_settings.publication,),
        ).fetchall()
    for column, kind in {
        "id": "uuid",
        "aggregatetype": "text",
        "aggregateid": "text",
        "type": "text",
        "payload": "jsonb",
    }.items():
        assert columns[column] == kind
    # The heartbeat table rides in the publication, so Debezium's heartbeat moves an idle slot.
    assert sorted(published) == [
        (outbox.names.outbox_schema, outbox.schema_settings.heartbeat_table),
        (outbox.names.outbox_schema, outbox.names.outbox_table),
    ]


def test_schema_apply_command(stack: Stack) -> None:
    env = {**stack.process_env(), "CDCPIPE_OUTBOX_SCHEMA": "cli_apply_test", "CDCPIPE_PUBLICATION": "cli_apply_test"}
    try:
        for _ in range(2):
            result = cdcpipe("schema", "apply", env=env)
            assert result.returncode == 0, result.stderr
            assert "outbox cli_apply_test.outbox ready" in result.stdout
    finally:
        with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS cli_apply_test CASCADE")
            conn.execute("DROP PUBLICATION IF EXISTS cli_apply_test")


def test_hostile_names_are_quoted_never_executed(stack: Stack) -> None:
    hostile = 'a"; drop table x; --'
    names = OutboxNames.load(outbox_schema=hostile, outbox_table=hostile)
    settings = SchemaSettings.load(pg_dsn=stack.pg_dsn, publication=hostile)
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.x (n int)")
    try:
        with psycopg.connect(stack.pg_dsn) as conn:
            schema_outbox.apply(conn, names, settings)
            emit(conn, "account", "a-1", "AccountOpened", ACCOUNT, names=names)
            conn.commit()
            assert conn.execute("SELECT to_regclass('public.x')").fetchone() == ("x",)
            stored = conn.execute(
                sql.SQL("SELECT aggregateid FROM {}").format(sql.Identifier(hostile, hostile))
            ).fetchall()
            assert stored == [("a-1",)]
    finally:
        with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(hostile)))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(hostile)))
            conn.execute("DROP TABLE public.x")


def test_a_name_postgres_would_truncate_is_rejected() -> None:
    with pytest.raises(ConfigError, match="at most 63 bytes"):
        OutboxNames.load(outbox_table="t" * 64)


def test_emit_writes_inside_the_callers_transaction(outbox: Outbox) -> None:
    with psycopg.connect(outbox.dsn) as conn:
        emit(conn, "account", "a-1", "AccountOpened", ACCOUNT, names=outbox.names)
        conn.rollback()
        assert outbox.count() == 0, "a rolled-back transaction took its event with it"
        event_id = emit(conn, "account", "a-1", "AccountOpened", ACCOUNT, names=outbox.names)
        conn.commit()
    with psycopg.connect(outbox.dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT id, aggregatetype, aggregateid, type, type_version, payload FROM {}").format(
                sql.Identifier(outbox.names.outbox_schema, outbox.names.outbox_table)
            )
        ).fetchone()
    assert row == (event_id, "account", "a-1", "AccountOpened", 1, ACCOUNT)


@pytest.mark.parametrize(
    ("aggregate_type", "event_type", "payload", "field"),
    [
        ("account", "AccountOpened", {"account_id": "a-1", "owner": "Ann"}, "$.currency"),
        ("account", "AccountOpened", {**ACCOUNT, "currency": "euro"}, "$.currency"),
        ("account", "MoneyDeposited", {"account_id": "a-1", "amount": -5, "currency": "EUR"}, "$.amount"),
        ("transfer", "AccountOpened", ACCOUNT, "aggregate_type"),
    ],
)
def test_an_invalid_event_names_the_field_and_writes_nothing(
    outbox: Outbox, aggregate_type: str, event_type: str, payload: dict[str, object], field: str
) -> None:
    with psycopg.connect(outbox.dsn) as conn:
        with pytest.raises(ContractViolationError) as raised:
            emit(conn, aggregate_type, "a-1", event_type, payload, names=outbox.names)
        conn.commit()
    assert raised.value.field == field
    assert outbox.count() == 0


def test_emit_refuses_to_commit_on_its_own(outbox: Outbox) -> None:
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        with pytest.raises(SchemaError, match="needs the caller's transaction"):
            emit(conn, "account", "a-1", "AccountOpened", ACCOUNT, names=outbox.names)
        with conn.transaction():
            emit(conn, "account", "a-1", "AccountOpened", ACCOUNT, names=outbox.names)
    assert outbox.count() == 1


def test_roles_have_least_privilege(outbox: Outbox) -> None:
    table = sql.Identifier(outbox.names.outbox_schema, outbox.names.outbox_table)
    dead = sql.Identifier(outbox.names.outbox_schema, outbox.names.dead_letter_table)
    # As `stack env` gives them: each role's password is in PGPASSFILE, set by `schema apply` from the files.
    writer, relay = outbox.writer_dsn, outbox.relay_dsn
    with psycopg.connect(writer) as conn:
        emit(conn, "account", "a-1", "AccountOpened", ACCOUNT, names=outbox.names)
        conn.commit()
        for forbidden in ("SELECT * FROM {}", "DELETE FROM {}", "UPDATE {} SET type = 'x'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL(forbidden).format(table))
            conn.rollback()
    with psycopg.connect(relay) as conn:
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (1,)
        conn.execute(sql.SQL("SELECT count(*) FROM {}").format(dead))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                sql.SQL("INSERT INTO {} (aggregatetype, aggregateid, type) VALUES ('a', 'b', 'c')").format(table)
            )
        conn.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("UPDATE {} SET type = 'x'").format(table))
        conn.rollback()
        conn.execute(sql.SQL("DELETE FROM {}").format(table))
        conn.commit()
    assert outbox.count() == 0


def test_role_passwords_reach_postgres_only_as_scram_verifiers(stack: Stack, outbox: Outbox) -> None:
    role = f"verifier_{outbox.tag}"
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (outbox.schema_settings.writer_role,)
        ).fetchone()
        # What Postgres makes of a password it hashes itself, and ours with the salt it chose: the same.
        conn.execute(sql.SQL("CREATE ROLE {} PASSWORD 'pw'").format(sql.Identifier(role)))
        try:
            row = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()
        finally:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    assert stored is not None
    assert str(stored[0]).startswith("SCRAM-SHA-256$4096:")
    assert row is not None
    postgres = str(row[0])
    salt = base64.b64decode(postgres.split(":", 1)[1].split("$", 1)[0])
    assert scram_verifier("pw", salt=salt) == postgres


def test_one_aggregate_waits_for_the_other_writer_so_seq_is_commit_order(outbox: Outbox) -> None:
    """Two transactions emitting for one aggregate: the second one's insert waits until the first commits."""
    with psycopg.connect(outbox.dsn) as first, psycopg.connect(outbox.dsn) as second:
        emit(first, "account", "a-1", "AccountOpened", ACCOUNT, names=outbox.names)
        second.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            emit(
                second,
                "account",
                "a-1",
                "MoneyDeposited",
                {"account_id": "a-1", "amount": 1, "currency": "EUR"},
                names=outbox.names,
            )
        second.rollback()
        # Another aggregate is not held up.
        second.execute("SET lock_timeout = '300ms'")
        emit(second, "account", "a-2", "AccountOpened", {**ACCOUNT, "account_id": "a-2"}, names=outbox.names)
        second.commit()
        first.commit()


def test_emit_refuses_a_version_that_breaks_the_compatibility_it_declares(outbox: Outbox, tmp_path: Path) -> None:
    v1 = json.loads((EXAMPLES / "contracts" / "MoneyDeposited.v1.json").read_text())
    required = {
        **v1,
        "required": [*v1["required"], "memo"],
        "properties": {**v1["properties"], "memo": {"type": "string"}},
    }
    (tmp_path / "MoneyDeposited.v2.json").write_text(json.dumps(required))
    registry = ContractRegistry([EXAMPLES / "contracts", tmp_path])
    payload = {"account_id": "a-1", "amount": 5, "currency": "EUR", "memo": "rent"}
    with psycopg.connect(outbox.dsn) as conn:
        with pytest.raises(ContractError) as raised:
            emit(conn, "account", "a-1", "MoneyDeposited", payload, names=outbox.names, registry=registry)
        conn.commit()
    assert "MoneyDeposited v2" in str(raised.value)
    assert "is not backward compatible with v1" in str(raised.value)
    assert "$.memo: required by the reader, not by the writer" in str(raised.value)
    assert '"x-compatibility": "none"' in str(raised.value)
    assert outbox.count() == 0
    # Told: the break declared in the file, the version is written.
    (tmp_path / "MoneyDeposited.v2.json").write_text(json.dumps({**required, "x-compatibility": "none"}))
    registry = ContractRegistry([EXAMPLES / "contracts", tmp_path])
    with psycopg.connect(outbox.dsn) as conn:
        emit(conn, "account", "a-1", "MoneyDeposited", payload, names=outbox.names, registry=registry)
        conn.commit()
    assert outbox.count() == 1


def test_two_applies_at_once_take_turns(stack: Stack, outbox: Outbox) -> None:
    """Two outboxes applied at once grant on one role and schema: one fails unless they take turns."""
    shared = outbox.names.outbox_schema
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.shared (id int PRIMARY KEY)").format(sql.Identifier(shared)))
    settings = outbox.schema_settings.model_copy(update={"captured_tables": (f"{shared}.shared",)})
    failures: list[BaseException] = []
    others = [OutboxNames.load(outbox_schema=f"{shared}_{i}") for i in range(3)]

    def apply_many(names: OutboxNames) -> None:
        try:
            for _ in range(10):
                with psycopg.connect(stack.pg_dsn) as conn:
                    schema_outbox.apply(conn, names, settings)
        except psycopg.Error as exc:
            failures.append(exc)

    threads = [threading.Thread(target=apply_many, args=(names,)) for names in others]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
            for names in others:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.outbox_schema)))
    assert failures == []
