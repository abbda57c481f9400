"""Kafka: one broker that is its own KRaft controller, topic auto-creation off."""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from infra.errors import ServiceNotReadyError, ServiceStartError
from infra.services.base import PortSpec, Service, properties


class Kafka(Service):
    """One broker that is its own KRaft controller."""

    name = "kafka"

    @property
    def ports(self) -> list[PortSpec]:
        return [
            PortSpec(self.settings.kafka_port, "CDCPIPE_KAFKA_PORT"),
            PortSpec(self.settings.kafka_controller_port, "CDCPIPE_KAFKA_CONTROLLER_PORT"),
        ]

    @property
    def config_file(self) -> Path:
        return self.settings.state / "conf" / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.settings.state / "kafka"

    def prepare(self) -> None:
        self._write_log4j()
        s = self.settings
        self.config_file.write_text(
            properties(
                {
                    "process.roles": "broker,controller",
                    "node.id": 1,
                    "controller.quorum.bootstrap.servers": f"127.0.0.1:{s.kafka_controller_port}",
                    "listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port},CONTROLLER://127.0.0.1:{s.kafka_controller_port}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port},CONTROLLER://127.0.0.1:{s.kafka_controller_port}",
                    "controller.listener.names": "CONTROLLER",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "log.dirs": self.data_dir,
                    "num.partitions": 1,
                    # One broker: every internal topic has one replica.
                    "offsets.topic.replication.factor": 1,
                    "offsets.topic.num.partitions": 10,
                    "transaction.state.log.replication.factor": 1,
                    "transaction.state.log.min.isr": 1,
                    "share.coordinator.state.topic.replication.factor": 1,
                    "share.coordinator.state.topic.min.isr": 1,
                    "group.initial.rebalance.delay.ms": 0,
                    # As on a production cluster: topics are created explicitly (`cdcpipe topics apply`, or
                    # Connect for what a connector's topic.creation.* declares), never by a first produce.
                    "auto.create.topics.enable": "false",
                    "log.retention.hours": 168,
                }
            )
        )
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        command = self._java(
            "256m",
            self._jars(self.settings.lib / "kafka"),
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            "-t",
            cluster_id,
            "-c",
            str(self.config_file),
            "--ignore-formatted",
            service=False,
        )
        proc = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode != 0:
            raise ServiceStartError(
                f"kafka: formatting the log folder {self.data_dir} failed:\n{proc.stdout}{proc.stderr}"
            )

    def command(self) -> list[str]:
        return self._java(
            self.settings.kafka_heap, self._jars(self.settings.lib / "kafka"), "kafka.Kafka", str(self.config_file)
        )

    def check_health(self) -> None:
        admin = AdminClient(
            {
                "bootstrap.servers": self.settings.kafka_bootstrap,
                "socket.connection.setup.timeout.ms": 2000,
                "logger": _QUIET,  # type: ignore[dict-item]  # librdkafka accepts a logging.Logger
            }
        )
        try:
            metadata = admin.list_topics(timeout=3)
        except Exception as exc:  # confluent-kafka raises KafkaException, or a bare one on timeout
            raise ServiceNotReadyError(f"kafka: no metadata from {self.settings.kafka_bootstrap} yet ({exc})") from exc
        if not metadata.brokers:
            raise ServiceNotReadyError("kafka: the broker has not registered yet")


# The readiness probe's librdkafka logs every refused connection while the broker starts: not worth showing.
_QUIET = logging.getLogger("cdcpipe.infra.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
