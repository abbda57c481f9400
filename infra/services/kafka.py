"""Kafka: nodes that are each a KRaft controller and a broker; TLS + SASL/SCRAM, ACLs, topic auto-creation off.

One node by default; `kafka_nodes` of them (`stack up --cluster`: three) in one quorum, each its own system user,
config, key and log folder, topics at three replicas with two in sync.
"""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from ground.private_files import write_private
from ground.processes import as_user
from infra import kafka_security, tls
from infra.config import StackSettings
from infra.errors import ServiceNotReadyError, ServiceStartError
from infra.service_user import hand_over, private_folder
from infra.services.base import PortSpec, Service, properties

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
PLAINTEXT_LISTENER = "BENCH_PLAINTEXT"
# Written beside meta.properties once the admin user is in the metadata log.
SECURED_MARK = "cdcpipe-secured"


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes one: URL-safe base64 of 16 bytes, never starting with "-".

    The storage tool would read a leading "-" as an option of its own (`-t -Q...`: "expected one argument");
    Kafka's `Uuid.randomUuid` draws again in that case, and so does this.
    """
    while True:
        drawn = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not drawn.startswith("-"):
            return drawn


def shared_cluster_id(settings: StackSettings) -> str:
    """The id every node of a cluster is formatted with: drawn by the first format, kept in state/."""
    kept = settings.state / "conf" / "kafka-cluster-id"
    if not kept.exists():
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(new_cluster_id() + "\n")
    return kept.read_text().strip()


class Kafka(Service):
    """One Kafka node (the Nth of `kafka_nodes`): a KRaft controller and a broker."""

    name = "kafka"
    kind = "kafka"
    system_user = "kafka"
    # Nodes of a quorum are started together: none is healthy before a majority of them runs.
    starts_with_peers = True

    def __init__(self, settings: StackSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self.system_user = self.name  # kafka-N: each node a user of its own (infra.service_user.SERVICE_USERS)

    @property
    def node_id(self) -> int:
        return self.index + 1

    def _port(self, port: int) -> int:
        return self.settings.node_port(port, self.index) if port else 0

    @property
    def ports(self) -> list[PortSpec]:
        s = self.settings
        ports = [
            PortSpec(self._port(s.kafka_port), "CDCPIPE_KAFKA_PORT"),
            PortSpec(self._port(s.kafka_controller_port), "CDCPIPE_KAFKA_CONTROLLER_PORT"),
        ]
        if s.kafka_plaintext_port:
            ports.append(PortSpec(self._port(s.kafka_plaintext_port), "CDCPIPE_KAFKA_PLAINTEXT_PORT"))
        if s.kafka_metrics_port:
            ports.append(PortSpec(self._port(s.kafka_metrics_port), "CDCPIPE_KAFKA_METRICS_PORT"))
        return ports

    @property
    def config_file(self) -> Path:
        return (
            self.settings.state
            / "conf"
            / ("server.properties" if not self.index else f"server-{self.node_id}.properties")
        )

    @property
    def data_dir(self) -> Path:
        return self.settings.state / self.name

    @property
    def key_file(self) -> Path:
        """The node's TLS key and certificate: the stack's broker key, a copy of its own for each further node."""
        folder = kafka_security.tls_folder(self.settings)
        return folder / ("broker.pem" if not self.index else f"broker-{self.node_id}.pem")

    def _quorum(self) -> dict[str, object]:
        """How the node finds its controllers: itself alone, or every node as a voter (a static quorum)."""
        s = self.settings
        if s.kafka_nodes == 1:
            return {"controller.quorum.bootstrap.servers": f"127.0.0.1:{s.kafka_controller_port}"}
        voters = (f"{n + 1}@127.0.0.1:{s.node_port(s.kafka_controller_port, n)}" for n in range(s.kafka_nodes))
        return {"controller.quorum.voters": ",".join(voters)}

    def prepare(self) -> None:
        self._write_log4j()
        self._write_jmx_config()
        s = self.settings
        tls.ensure(kafka_security.tls_folder(s))
        kafka_security.write_client_files(s)
        if self.index:  # refreshed at each start: `tls.ensure` renews the broker's key before it expires
            write_private(self.key_file, (kafka_security.tls_folder(s) / "broker.pem").read_text())
        folder = kafka_security.tls_folder(s)
        admin = kafka_security.password(s, kafka_security.ADMIN)
        controller = kafka_security.password(s, "controller")
        port, controller_port = self._port(s.kafka_port), self._port(s.kafka_controller_port)
        listeners = f"BROKER://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
        protocols = "BROKER:SASL_SSL,CONTROLLER:SASL_SSL"
        if s.kafka_plaintext_port:
            # Opt-in, for measuring TLS and SASL's cost only: unauthenticated clients here are User:ANONYMOUS,
            # which may do nothing unless a benchmark grants it on its own topics.
            listeners += f",{PLAINTEXT_LISTENER}://127.0.0.1:{self._port(s.kafka_plaintext_port)}"
            protocols += f",{PLAINTEXT_LISTENER}:PLAINTEXT"
        write_private(
            self.config_file,
            properties(
                {
                    "process.roles": "broker,controller",
                    "node.id": self.node_id,
                    **self._quorum(),
                    # As a production cluster: TLS and SASL on every listener, nothing in plain text (unless
                    # kafka_plaintext_port opens one for a benchmark).
                    "listeners": listeners,
                    "advertised.listeners": listeners,
                    "controller.listener.names": "CONTROLLER",
                    "inter.broker.listener.name": "BROKER",
                    "listener.security.protocol.map": protocols,
                    "listener.name.broker.sasl.enabled.mechanisms": kafka_security.MECHANISM,
                    "sasl.mechanism.inter.broker.protocol": kafka_security.MECHANISM,
                    "listener.name.broker.scram-sha-512.sasl.jaas.config": (
                        f'{SCRAM_LOGIN} required username="{kafka_security.ADMIN}" password="{admin}";'
                    ),
                    # SCRAM users live in the metadata log the controller serves, so the controller listener
                    # cannot use SCRAM: it takes PLAIN (over TLS) with one user declared here.
                    "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
                    "sasl.mechanism.controller.protocol": "PLAIN",
                    "listener.name.controller.plain.sasl.jaas.config": (
                        f'{PLAIN_LOGIN} required username="controller" password="{controller}" '
                        f'user_controller="{controller}";'
                    ),
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": self.key_file,
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": folder / "ca.pem",
                    # Whatever no ACL allows is denied (allow.everyone.if.no.acl.found stays false).
                    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "super.users": f"User:{kafka_security.ADMIN};User:controller",
                    "log.dirs": self.data_dir,
                    "num.partitions": 1,
                    # One node: one replica of everything. Three or more: three replicas, two of which must hold a
                    # write before acks=all is answered, so one node may die without losing an acknowledged record.
                    "default.replication.factor": s.replicas,
                    "min.insync.replicas": s.min_insync,
                    "offsets.topic.replication.factor": s.replicas,
                    "offsets.topic.num.partitions": 10,
                    "transaction.state.log.replication.factor": s.replicas,
                    "transaction.state.log.min.isr": s.min_insync,
                    "share.coordinator.state.topic.replication.factor": s.replicas,
                    "share.coordinator.state.topic.min.isr": s.min_insync,
                    # A replica that was not in sync never becomes leader: it would drop what the others acknowledged.
                    "unclean.leader.election.enable": "false",
                    "group.initial.rebalance.delay.ms": 0,
                    # As on a production cluster: topics are created explicitly (`cdcpipe topics apply`, or
                    # Connect for what a connector's topic.creation.* declares), never by a first produce.
                    "auto.create.topics.enable": "false",
                    "log.retention.hours": 168,
                }
            ),
        )
        user = self.run_as()
        # Its segments hold every event in clear, past TLS, SASL and ACLs: the broker's user alone may enter.
        private_folder(self.data_dir)
        # The broker's own files: its log folder, its config (passwords) and its key. Nothing else.
        hand_over(user, self.data_dir, self.config_file, self.key_file)
        self._hand_over_gc_log()
        if (self.data_dir / "meta.properties").exists():
            if not (self.data_dir / SECURED_MARK).exists():
                raise ServiceStartError(
                    f"kafka: {self.data_dir} was formatted before the stack's Kafka used TLS and SASL, and has no "
                    "admin user; remove the stack's data (`cdcpipe stack down --purge`) and start it again"
                )
            return
        cluster_id = shared_cluster_id(s) if s.kafka_nodes > 1 else new_cluster_id()
        # The admin's SCRAM credential is written with the metadata log's first records (the broker itself
        # authenticates with it). Its password goes in an argument file, 0600, never on a command line.
        arguments = self.settings.state / "conf" / "kafka-format.args"
        command = self._java(
            "256m",
            self._jars(self.settings.lib / "kafka"),
            "kafka.tools.StorageTool",
            "format",
            # One node: its own quorum. More: the voters are in its config (a static quorum), named nowhere else.
            *(["--standalone"] if self.settings.kafka_nodes == 1 else []),
            "-t",
            cluster_id,
            "-c",
            str(self.config_file),
            "--add-scram",
            f"{kafka_security.MECHANISM}=[name={kafka_security.ADMIN},password={admin}]",
            "--ignore-formatted",
            service=False,
        )
        write_private(arguments, "\n".join(f'"{word}"' for word in command[1:]) + "\n")
        hand_over(user, arguments)
        try:
            proc = subprocess.run(  # noqa: S603
                [command[0], f"@{arguments}"],
                capture_output=True,
                text=True,
                check=False,
                **as_user(user),
                cwd="/",
                umask=0o077,  # the metadata log's folder, as the broker's own files: nobody else's
            )
        finally:
            arguments.unlink()
        if proc.returncode != 0:
            raise ServiceStartError(
                f"kafka: formatting the log folder {self.data_dir} failed:\n{proc.stdout}{proc.stderr}"
            )
        write_private(self.data_dir / SECURED_MARK, "admin user created at format\n")
        hand_over(user, self.data_dir)

    def run_as(self) -> str | None:
        return self._own_user()

    def command(self) -> list[str]:
        return self._java(
            self.settings.kafka_heap,
            self._jars(self.settings.lib / "kafka"),
            "kafka.Kafka",
            str(self.config_file),
            options=self._metrics_agent(self._port(self.settings.kafka_metrics_port)),
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port(self.settings.kafka_port)}"

    def check_health(self) -> None:
        """Healthy once this node answers and is a registered broker of the cluster (a quorum has formed)."""
        client = kafka_security.client(self.settings)
        admin = AdminClient(
            {
                **client.client_config(**{"socket.connection.setup.timeout.ms": 2000, "logger": _QUIET}),
                "bootstrap.servers": self.address,
            }
        )
        try:
            metadata = admin.list_topics(timeout=3)
        except Exception as exc:  # confluent-kafka raises KafkaException, or a bare one on timeout
            raise ServiceNotReadyError(f"{self.name}: no metadata from {self.address} yet ({exc})") from exc
        if self.node_id not in metadata.brokers:
            raise ServiceNotReadyError(f"{self.name}: node {self.node_id} has not registered as a broker yet")

    def after_healthy(self) -> None:
        if self.index == self.settings.kafka_nodes - 1:  # once, when the last node has joined
            kafka_security.ensure_users_and_acls(self.settings)


# The readiness probe's librdkafka logs every refused connection while the broker starts: not worth showing.
_QUIET = logging.getLogger("cdcpipe.infra.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
