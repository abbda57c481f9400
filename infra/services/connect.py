"""Kafka Connect in distributed mode, with Debezium's PostgreSQL connector and cdcpipe's transforms as plugins."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from ground.private_files import write_private
from infra import kafka_security
from infra.config import StackSettings
from infra.errors import ServiceNotReadyError, ServiceStartError
from infra.service_user import hand_over
from infra.services.base import PortSpec, Service, properties
from infra.stack_secrets import secret

BASIC_AUTH_EXTENSION = "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
PROPERTY_FILE_LOGIN = "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule"
# cdcpipe's own REST extension (connectors/transforms/, on the plugin path): users that may read and restart a task.
LIMITED_REST_EXTENSION = "dev.cdcpipe.connect.LimitedRestUsers"
REST_USER = "admin"
# The collector's user: it reads connectors and tasks and restarts a task failed on a fault of the moment (its
# healer); it may not create, change or delete a connector, nor reset its offsets.
MONITOR_REST_USER = "monitor"


def rest_password(settings: StackSettings) -> str:
    """The REST API admin's generated password (state/secrets/connect_rest_password)."""
    return secret(settings, "connect_rest_password")


def monitor_rest_password(settings: StackSettings) -> str:
    """The collector's REST password (state/secrets/connect_rest_monitor_password)."""
    return secret(settings, "connect_rest_monitor_password")


WORKER_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "JAVA_HOME", "TMPDIR")
DEBEZIUM_POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


class Connect(Service):
    """One Kafka Connect worker (the Nth of `connect_workers`, one group), with Debezium's connector as a plugin."""

    name = "connect"
    kind = "connect"
    # The workers of a group share one user: they hold the same Kafka and REST credentials, and a task may move to
    # any of them.
    system_user = "connect"

    @property
    def rest_port(self) -> int:
        return self.settings.node_port(self.settings.connect_port, self.index)

    @property
    def metrics_port(self) -> int:
        """The worker's metrics port (0: none)."""
        port = self.settings.connect_metrics_port
        return self.settings.node_port(port, self.index) if port else 0

    @property
    def ports(self) -> list[PortSpec]:
        ports = [PortSpec(self.rest_port, "CDCPIPE_CONNECT_PORT")]
        if self.metrics_port:
            ports.append(PortSpec(self.metrics_port, "CDCPIPE_CONNECT_METRICS_PORT"))
        return ports

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def config_file(self) -> Path:
        name = "connect-distributed" if not self.index else f"connect-distributed-{self.index + 1}"
        return self.settings.state / "conf" / f"{name}.properties"

    def prepare(self) -> None:
        self._write_log4j()
        self._write_jmx_config()
        s = self.settings
        plugins = s.lib / "plugins"
        self._jars(plugins / "debezium-connector-postgres")
        self._jars(plugins / "cdcpipe-transforms")
        self._write_rest_users()
        # The worker, and the producers, consumers and admin clients it makes for connectors, authenticate as
        # `connect` (a connector may not override them: connector.client.config.override.policy below).
        kafka = kafka_security.client(s, "connect").java_properties()
        clients = {
            f"{prefix}{key}": value
            for prefix in ("", "producer.", "consumer.", "admin.")
            for key, value in kafka.items()
        }
        write_private(
            self.config_file,
            properties(
                {
                    **clients,
                    "group.id": kafka_security.CONNECT_GROUP,
                    "listeners": self.address,
                    # Where the other workers reach this one (a request a follower forwards to the leader).
                    "rest.advertised.host.name": "127.0.0.1",
                    "rest.advertised.port": self.rest_port,
                    # Keys are plain strings (the outbox aggregate id); values plain JSON without an envelope.
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable": "false",
                    "config.storage.topic": f"{kafka_security.CONNECT_INTERNAL_TOPIC_PREFIX}configs",
                    "offset.storage.topic": f"{kafka_security.CONNECT_INTERNAL_TOPIC_PREFIX}offsets",
                    "status.storage.topic": f"{kafka_security.CONNECT_INTERNAL_TOPIC_PREFIX}status",
                    # The cluster's replicas (three of three nodes or more): the group's configs and source offsets
                    # outlive a node.
                    "config.storage.replication.factor": s.replicas,
                    "offset.storage.replication.factor": s.replicas,
                    "status.storage.replication.factor": s.replicas,
                    "offset.storage.partitions": 5,
                    "status.storage.partitions": 1,
                    # A worker that left the group gets its tasks back if it returns within this, else they move to
                    # the others: Kafka's 5 minutes would leave a dead worker's connectors idle that long; 15 s
                    # still lets a worker restart (a deploy) keep its tasks.
                    "scheduled.rebalance.max.delay.ms": 15000,
                    # How often source offsets are committed: the bound on what is sent again after a crash.
                    "offset.flush.interval.ms": 1000,
                    "plugin.path": plugins,
                    "plugin.discovery": "service_load",
                    # Secrets in connector files are references, resolved by the worker (KIP-297). Only `env`: the
                    # connectors need nothing else, and a `file` provider would let any connector definition read
                    # whatever files the worker's user may (its own config holds its Kafka password).
                    "config.providers": "env",
                    "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
                    # A connector may read only the variables meant for connectors: Postgres' address, Debezium's
                    # password; nothing else of the worker's environment.
                    "config.providers.env.param.allowlist.pattern": "^CDCPIPE_(PG|DEBEZIUM)_[A-Z_]+$",
                    # A connector definition may not override the worker's client settings (sasl.jaas.config...).
                    "connector.client.config.override.policy": "None",
                    # The REST API asks every caller for a user and password (HTTP basic authentication); the
                    # collector's user may only read and restart a task.
                    "rest.extension.classes": f"{BASIC_AUTH_EXTENSION},{LIMITED_REST_EXTENSION}",
                    "cdcpipe.rest.limited.users": MONITOR_REST_USER,
                }
            ),
        )
        # The worker's own files: its config and the REST credentials (its Kafka state lives in Kafka).
        hand_over(self.run_as(), self.config_file, self.jaas_file, self.credentials_file)
        self._hand_over_gc_log()

    def run_as(self) -> str | None:
        return self._own_user()

    @property
    def jaas_file(self) -> Path:
        return self.settings.state / "conf" / "connect-rest-jaas.conf"

    @property
    def credentials_file(self) -> Path:
        return self.settings.state / "conf" / "connect-rest-users.properties"

    def _write_rest_users(self) -> None:
        """The REST API's users, `admin` and the collector's `monitor`, with generated passwords; both files 0600."""
        write_private(
            self.credentials_file,
            f"{REST_USER}={rest_password(self.settings)}\n{MONITOR_REST_USER}={monitor_rest_password(self.settings)}\n",
        )
        write_private(
            self.jaas_file,
            f'KafkaConnect {{\n  {PROPERTY_FILE_LOGIN} required file="{self.credentials_file}";\n}};\n',
        )

    def environment(self) -> dict[str, str]:
        """What connector files reference through ${env:...}: where Postgres is, and the Debezium password.

        The worker resolves these itself, so no connector definition holds a host or a secret.
        """
        return {
            # Only what a JVM needs to run: no variable of the shell that started the stack.
            **{k: v for k, v in os.environ.items() if k in WORKER_ENVIRONMENT},
            "CDCPIPE_PG_HOST": "127.0.0.1",
            "CDCPIPE_PG_PORT": str(self.settings.pg_port),
            "CDCPIPE_PG_DATABASE": self.settings.pg_database,
            "CDCPIPE_DEBEZIUM_PASSWORD": secret(self.settings, "debezium_password"),
        }

    def command(self) -> list[str]:
        return self._java(
            self.settings.connect_heap,
            self._jars(self.settings.lib / "connect"),
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(self.config_file),
            options=[
                f"-Djava.security.auth.login.config={self.jaas_file}",
                *self._metrics_agent(self.metrics_port),
            ],
        )

    def check_health(self) -> None:
        try:
            auth = (REST_USER, rest_password(self.settings))
            root = httpx.get(f"{self.address}/", timeout=3, auth=auth)
            plugins = httpx.get(f"{self.address}/connector-plugins", timeout=5, auth=auth)
        except httpx.HTTPError as exc:
            raise ServiceNotReadyError(f"{self.name}: REST API at {self.address} not answering yet") from exc
        if root.status_code != 200 or plugins.status_code != 200:
            raise ServiceNotReadyError(f"{self.name}: REST API answers {root.status_code}/{plugins.status_code}")
        classes = {p["class"] for p in plugins.json()}
        if DEBEZIUM_POSTGRES_CONNECTOR not in classes:
            raise ServiceStartError(
                f"{self.name}: the worker is up but {DEBEZIUM_POSTGRES_CONNECTOR} is not among its plugins "
                f"({sorted(classes)}); check {self.settings.lib / 'plugins'} and run `make install`"
            )
