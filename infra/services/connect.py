"""Kafka Connect in distributed mode, with Debezium's PostgreSQL connector and cdcpipe's transforms as plugins."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from infra.errors import ServiceNotReadyError, ServiceStartError
from infra.services.base import PortSpec, Service, properties
from infra.stack_secrets import secret

DEBEZIUM_POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


class Connect(Service):
    """One Kafka Connect worker in distributed mode, with Debezium's PostgreSQL connector as a plugin."""

    name = "connect"

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(self.settings.connect_port, "CDCPIPE_CONNECT_PORT")]

    @property
    def address(self) -> str:
        return self.settings.connect_url

    @property
    def config_file(self) -> Path:
        return self.settings.state / "conf" / "connect-distributed.properties"

    def prepare(self) -> None:
        self._write_log4j()
        s = self.settings
        plugins = s.lib / "plugins"
        self._jars(plugins / "debezium-connector-postgres")
        self._jars(plugins / "cdcpipe-transforms")
        self.config_file.write_text(
            properties(
                {
                    "bootstrap.servers": s.kafka_bootstrap,
                    "group.id": "cdcpipe-connect",
                    "listeners": s.connect_url,
                    "rest.advertised.host.name": "127.0.0.1",
                    "rest.advertised.port": s.connect_port,
                    # Keys are plain strings (the outbox aggregate id); values plain JSON without an envelope.
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable": "false",
                    "config.storage.topic": "_cdcpipe-connect-configs",
                    "offset.storage.topic": "_cdcpipe-connect-offsets",
                    "status.storage.topic": "_cdcpipe-connect-status",
                    "config.storage.replication.factor": 1,
                    "offset.storage.replication.factor": 1,
                    "status.storage.replication.factor": 1,
                    "offset.storage.partitions": 5,
                    "status.storage.partitions": 1,
                    # How often source offsets are committed: the bound on what is sent again after a crash.
                    "offset.flush.interval.ms": 1000,
                    "plugin.path": plugins,
                    "plugin.discovery": "service_load",
                    # Secrets in connector files are references, resolved by the worker (KIP-297).
                    "config.providers": "env,file",
                    "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
                    "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
                    # A connector definition may not override the worker's client settings (sasl.jaas.config...).
                    "connector.client.config.override.policy": "None",
                }
            )
        )

    def environment(self) -> dict[str, str]:
        """What connector files reference through ${env:...}: where Postgres is, and the Debezium password.

        The worker resolves these itself, so no connector definition holds a host or a secret.
        """
        return {
            **os.environ,
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
        )

    def check_health(self) -> None:
        try:
            root = httpx.get(f"{self.settings.connect_url}/", timeout=3)
            plugins = httpx.get(f"{self.settings.connect_url}/connector-plugins", timeout=5)
        except httpx.HTTPError as exc:
            raise ServiceNotReadyError(f"connect: REST API at {self.settings.connect_url} not answering yet") from exc
        if root.status_code != 200 or plugins.status_code != 200:
            raise ServiceNotReadyError(f"connect: REST API answers {root.status_code}/{plugins.status_code}")
        classes = {p["class"] for p in plugins.json()}
        if DEBEZIUM_POSTGRES_CONNECTOR not in classes:
            raise ServiceStartError(
                f"connect: the worker is up but {DEBEZIUM_POSTGRES_CONNECTOR} is not among its plugins "
                f"({sorted(classes)}); check {self.settings.lib / 'plugins'} and run `make install`"
            )
