"""An outbox of a test's own: a fresh Postgres schema with its roles' grants, and topics under a fresh prefix."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from outbox_relay.config import RelaySettings
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings
from tests.support.kafka import create_topics, grant_prefixes
from tests.support.stack import Stack


@dataclass(frozen=True)
class Outbox:
    """An outbox of its own for one test: a fresh Postgres schema, and topics under a fresh prefix."""

    names: OutboxNames
    schema_settings: SchemaSettings
    dsn: str  # the superuser: the tests' own reads and writes
    tag: str
    relay_dsn: str  # the relay role, as `stack env` gives it: what every relay of the tests connects as
    writer_dsn: str  # the writer role, as an application that only emits may connect

    @property
    def topic_pattern(self) -> str:
        return f"test.{self.tag}.{{aggregatetype}}"

    def topic(self, aggregate_type: str) -> str:
        return self.topic_pattern.replace("{aggregatetype}", aggregate_type)

    def relay_settings(self, stack: Stack, **overrides: object) -> RelaySettings:
        values: dict[str, object] = {
            "pg_dsn": self.dsn,
            "relay_pg_dsn": self.relay_dsn,
            "kafka": stack.kafka("relay"),
            "topic_pattern": self.topic_pattern,
            "metrics_port": 0,
            "poll_interval_s": 5.0,
            "standby_retry_s": 0.5,
        }
        values.update(overrides)
        return RelaySettings.load(**values)

    def relay_env(self, stack: Stack, **overrides: str) -> dict[str, str]:
        """Environment for `cdcpipe relay run` as a separate process on this outbox."""
        env = stack.process_env()
        env.update(
            {
                "CDCPIPE_PG_DSN": self.dsn,
                "CDCPIPE_OUTBOX_SCHEMA": self.names.outbox_schema,
                "CDCPIPE_TOPIC_PATTERN": self.topic_pattern,
                "CDCPIPE_METRICS_PORT": "0",
                "CDCPIPE_STANDBY_RETRY_S": "0.5",
                "CDCPIPE_BACKOFF_MAX_S": "2",
            }
        )
        env.update(overrides)
        return env

    def count(self, table: str | None = None) -> int:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(self.names.outbox_schema, table or self.names.outbox_table)
                )
            ).fetchone()
        assert row is not None
        return int(row[0])

    def insert(self, rows: list[tuple[str, str, str, object]]) -> list[str]:
        """Insert raw outbox rows (aggregatetype, aggregateid, type, payload) in one transaction.

        As any writer may, without `emit`. Returns the event ids in insert order.
        """
        ids = [str(uuid.uuid4()) for _ in rows]
        with psycopg.connect(self.dsn) as conn, conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {} (id, aggregatetype, aggregateid, type, payload) VALUES (%s, %s, %s, %s, %s)"
                ).format(sql.Identifier(self.names.outbox_schema, self.names.outbox_table)),
                [(i, t, a, e, None if p is None else Jsonb(p)) for i, (t, a, e, p) in zip(ids, rows, strict=True)],
            )
        return ids


@pytest.fixture
def outbox(stack: Stack) -> Iterator[Outbox]:
    tag = uuid.uuid4().hex[:10]
    names = OutboxNames.load(outbox_schema=f"t_{tag}")
    settings = SchemaSettings.load(
        pg_dsn=stack.pg_dsn,
        publication=f"pub_{tag}",
        writer_password_file=Path(stack.env["CDCPIPE_WRITER_PASSWORD_FILE"]),
        relay_password_file=Path(stack.env["CDCPIPE_RELAY_PASSWORD_FILE"]),
        debezium_password_file=Path(stack.env["CDCPIPE_DEBEZIUM_PASSWORD_FILE"]),
        monitor_password_file=Path(stack.env["CDCPIPE_MONITOR_PASSWORD_FILE"]),
    )
    with psycopg.connect(stack.pg_dsn) as conn:
        schema_outbox.apply(conn, names, settings)
    box = Outbox(
        names=names,
        schema_settings=settings,
        dsn=stack.pg_dsn,
        tag=tag,
        relay_dsn=stack.env["CDCPIPE_RELAY_PG_DSN"],
        writer_dsn=stack.env["CDCPIPE_WRITER_PG_DSN"],
    )
    create_topics(stack.kafka_config(), [box.topic(kind) for kind in OUTBOX_TOPICS])
    # Debezium's own topics for a connector on this outbox.
    prefixes = [
        f"test_{tag}",
        f"tables_{tag}",
        f"mirror_{tag}",
        f"evo_{tag}",
    ]  # the topic.prefix of the tests' connectors
    grant_prefixes(stack.kafka_config(), [p for x in prefixes for p in (f"{x}.", f"__debezium-heartbeat.{x}")])
    yield box
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(names.outbox_schema)))
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(settings.publication)))


# The aggregate types whose topics an outbox fixture creates; a test that needs another creates it.
OUTBOX_TOPICS = ("order", "account", "transfer")
