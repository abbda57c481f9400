"""Session fixtures: the real local stack, started once, or taken from CDCPIPE_* variables if given.

To run the integration tests against a stack that is already up: `eval "$(cdcpipe stack env)"`, then
`pytest`. Without those variables the session starts the stack (Spark cluster included) and stops at the
end whatever it started.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from cdcpipe.common.kafka_client import KafkaSettings
from connectors.config import ConnectSettings
from outbox_relay.config import RelaySettings
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings
from tests.kafka_helpers import create_topics, grant_prefixes


def cdcpipe(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real `cdcpipe` command (as a user would), capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "cdcpipe", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def parse_exports(text: str) -> dict[str, str]:
    """`export KEY=VALUE` lines (as `cdcpipe stack env` prints them) into a dict, as a shell evaluates them.

    A double-quoted variable (`PATH=/x:"$PATH"`) is expanded from this process's environment; a single-quoted
    value (how every other value is quoted) is taken as it is.
    """
    import shlex

    values = {}
    for line in text.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            parsed = shlex.split(value)[0] if value else ""
            values[key] = os.path.expandvars(parsed) if '"$' in value else parsed
    return values


@dataclass(frozen=True)
class Stack:
    """Addresses of the running stack, as the tests see them."""

    env: dict[str, str]
    started_here: bool
    cluster: str | None = None  # the Spark master's URL when the cluster is up

    @classmethod
    def of(cls, env: dict[str, str], started_here: bool) -> Stack:
        """The stack as `env` describes it, with the jobs the tests start in local mode.

        A test that means the cluster submits to `cluster`: side-by-side tests' applications would queue for
        the one worker's cores.
        """
        master = env.get("CDCPIPE_SPARK_MASTER", "")
        return cls(
            env={**env, "CDCPIPE_SPARK_MASTER": "local[2]"},
            started_here=started_here,
            cluster=master if master.startswith("spark://") else None,
        )

    @property
    def home(self) -> Path:
        return Path(self.env["CDCPIPE_HOME"])

    @property
    def pg_dsn(self) -> str:
        return self.env["CDCPIPE_PG_DSN"]

    @property
    def kafka_bootstrap(self) -> str:
        return self.env["CDCPIPE_KAFKA_BOOTSTRAP"]

    @property
    def kcat(self) -> str:
        """The kcat `make install` puts on a librdkafka that can do SCRAM with Kafka 4."""
        return str(self.home / "bin" / "kcat")

    def kafka_file(self, user: str = "admin") -> Path:
        """A Kafka user's client file: `stack env` names the admin's, the components' are beside it."""
        return Path(self.env["CDCPIPE_KAFKA_CONFIG"]).with_name(f"{user}.properties")

    def kafka(self, user: str = "admin") -> KafkaSettings:
        """A Kafka user's client settings (the tests' own clients are the operator: admin)."""
        return KafkaSettings.from_file(self.kafka_file(user))

    def kafka_config(self, **extra: object) -> dict[str, Any]:
        """The librdkafka configuration of a client of the tests' own, authenticated as the admin."""
        return self.kafka().client_config(**extra)

    @property
    def connect_url(self) -> str:
        return self.env["CDCPIPE_CONNECT_URL"]

    @property
    def lake(self) -> Path:
        """The stack's local-folder lake (its default lake, CDCPIPE_LAKE, is on the object store)."""
        return Path(self.env["CDCPIPE_LOCAL_LAKE"])

    def connect_settings(self) -> ConnectSettings:
        """The connectors stage's settings for this stack's Connect, with its REST user."""
        return ConnectSettings.load(
            connect_url=self.connect_url,
            pg_dsn=self.pg_dsn,
            connect_user=self.env["CDCPIPE_CONNECT_USER"],
            connect_password_file=Path(self.env["CDCPIPE_CONNECT_PASSWORD_FILE"]),
        )

    def connect_auth(self) -> tuple[str, str]:
        """(user, password) of Connect's REST API, for a test's own HTTP calls."""
        auth = self.connect_settings().basic_auth()
        assert auth is not None
        return auth

    def s3_options(self, **changes: str) -> dict[str, str]:
        """delta-rs's storage options for the stack's object store, as `stack env` exports them."""
        names = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP")
        return {**{k: self.env[k] for k in names}, **changes}

    def s3_lake(self) -> str:
        """A lake of a test's own on the stack's object store (an s3a:// URL under CDCPIPE_S3_LAKE)."""
        return f"{self.env['CDCPIPE_S3_LAKE']}/tests/{uuid.uuid4().hex[:10]}"

    def process_env(self) -> dict[str, str]:
        """The environment for a child process wired to this stack."""
        return {**os.environ, **self.env}


OWNED_VARIABLE = "CDCPIPE_TEST_STACK_OWNED"


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    given = os.environ.get("CDCPIPE_KAFKA_BOOTSTRAP")
    if given:
        missing = [
            v
            for v in ("CDCPIPE_PG_DSN", "CDCPIPE_CONNECT_URL", "CDCPIPE_HOME", "CDCPIPE_KAFKA_CONFIG")
            if not os.environ.get(v)
        ]
        if missing:
            pytest.fail(f'CDCPIPE_KAFKA_BOOTSTRAP is set but {missing} are not: eval "$(cdcpipe stack env)" sets all')
        keys = [k for k in os.environ if k.startswith(("CDCPIPE_", "AWS_")) or k == "PGPASSFILE"]
        # `python -m tests.suite` (make test) marks a stack it started as the session's own: its tests may
        # stop and crash it. A stack you started yourself is left alone.
        yield Stack.of({k: os.environ[k] for k in keys}, started_here=os.environ.get(OWNED_VARIABLE) == "1")
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(
            'tests in parallel share one stack: start it first (`python -m tests.suite`, or `eval "$(cdcpipe stack env)"`)'
        )
    up = cdcpipe("stack", "up", "--spark-cluster", "--workers", "2")
    if up.returncode != 0:
        pytest.fail(f"`cdcpipe stack up` failed:\n{up.stdout}\n{up.stderr}")
    sys.stderr.write(f"\n{up.stdout}")
    started_here = "healthy after" in up.stdout
    exports = cdcpipe("stack", "env")
    assert exports.returncode == 0, exports.stderr
    env = parse_exports(exports.stdout)
    # libpq (psycopg, psql) in this process finds the password where `stack env` says, like any tool.
    os.environ["PGPASSFILE"] = env["PGPASSFILE"]
    try:
        yield Stack.of(env, started_here=started_here)
    finally:
        if started_here:
            down = cdcpipe("stack", "down")
            sys.stderr.write(f"\n{down.stdout}{down.stderr}")


@pytest.fixture
def cluster_path(stack: Stack) -> Iterator[Path]:
    """A folder of its own under the stack's lake, for a test whose executors run on the Spark cluster.

    Started as root, the cluster's executors run as the service user and may write only where the stack shared
    with them (its lake), as on a real cluster; a pytest tmp_path (0700, root's) is closed to them.
    """
    path = stack.lake / "tests" / uuid.uuid4().hex[:10]
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses, not created: for a test that creates it its own way."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:120]
    return f"test.{name}.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(stack: Stack, topic_name: str) -> str:
    """A topic of one partition no other test uses, created first (the stack's Kafka creates none on use)."""
    create_topics(stack.kafka_config(), [topic_name])
    return topic_name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that restart the shared stack run last, so no other test sees it go down."""
    items.sort(key=lambda item: item.get_closest_marker("stack_lifecycle") is not None)


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
                # As deployed: the relay authenticates as its own Kafka user, with only its own ACLs.
                "CDCPIPE_KAFKA_CONFIG": str(stack.kafka_file("relay")),
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
