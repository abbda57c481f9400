"""Settings of the local stack (`[stack]` in the settings file, `CDCPIPE_*` in the environment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, ModelWrapValidatorHandler, ValidationInfo, field_validator, model_validator

from ground.home import default_home
from ground.settings import StageSettings

MAX_SPARK_WORKERS = 8  # `stack down` and `status` look for this many workers' pid files
MAX_KAFKA_NODES = 5
MAX_CONNECT_WORKERS = 4
# Kafka node N, and Connect worker N, listen on each port of the first + NODE_PORT_STEP x (N - 1).
NODE_PORT_STEP = 100
# A stack's Kafka data is made for one set of voters, its Connect topics for one replication factor: the counts
# `up` made it with are kept here (state/), and every later command takes them from it.
TOPOLOGY_FILE = "topology.json"
TOPOLOGY = ("kafka_nodes", "connect_workers")


# Ports whose listener may be off (0).
OPTIONAL_PORTS = ("kafka_plaintext_port", "kafka_metrics_port", "connect_metrics_port")


class StackSettings(StageSettings):
    """Where the stack lives and what it listens on. Every service binds 127.0.0.1 only."""

    toml_section: ClassVar[str] = "stack"

    home: Path = Field(
        default_factory=default_home,
        description="folder of jars (lib/), data (state/), logs (logs/) and pid files (run/)",
    )
    pg_port: int = Field(5432, description="PostgreSQL port")
    pg_database: str = Field("cdcpipe", description="database created for the pipeline")
    pg_bin_dir: Path = Field(Path("/usr/lib/postgresql/15/bin"), description="PostgreSQL 15 server binaries")
    kafka_port: int = Field(9092, description="Kafka broker port (TLS + SASL/SCRAM-SHA-512)")
    kafka_controller_port: int = Field(9093, description="KRaft controller port")
    kafka_plaintext_port: int = Field(
        0,
        description="0: none. Else a loopback PLAINTEXT listener on this port, only to measure what TLS and "
        "SASL cost (bench/tls_bench.py); its clients are User:ANONYMOUS, which no ACL of the stack allows",
    )
    kafka_heap: str = Field("768m", description="broker JVM heap (-Xmx)")
    kafka_nodes: int = Field(
        1,
        ge=1,
        le=MAX_KAFKA_NODES,
        description="Kafka nodes, each a KRaft controller and a broker (`stack up --cluster`: 3); node N listens on "
        "each Kafka port + 100 x (N - 1). Three or more: topics take 3 replicas and need 2 in sync. A stack keeps the "
        "count it was made with (`stack down --purge` to change it)",
    )
    connect_port: int = Field(8083, description="Kafka Connect REST port")
    connect_heap: str = Field("768m", description="Connect worker JVM heap (-Xmx)")
    connect_workers: int = Field(
        1,
        ge=1,
        le=MAX_CONNECT_WORKERS,
        description="Kafka Connect workers in one group (`stack up --cluster`: 2); worker N's REST and metrics "
        "ports are the first's + 100 x (N - 1). A stack keeps the count it was made with",
    )
    s3_port: int = Field(9000, description="S3-compatible object store port (s3proxy)")
    s3_heap: str = Field("256m", description="object store JVM heap (-Xmx)")
    spark_master_port: int = Field(7077, description="Spark standalone master port (with --spark-cluster)")
    spark_master_ui_port: int = Field(8080, description="Spark master web UI port")
    spark_worker_ui_port: int = Field(8081, description="Spark worker web UI port")
    spark_worker_cores: int = Field(2, ge=1, description="cores each Spark worker offers")
    spark_worker_memory: str = Field("2g", description="memory each Spark worker offers to executors")
    spark_workers: int = Field(
        1,
        ge=1,
        le=MAX_SPARK_WORKERS,
        description="Spark workers `stack up --spark-cluster` starts (the Nth's web UI on CDCPIPE_SPARK_WORKER_UI_PORT + N - 1)",
    )
    prometheus_port: int = Field(9090, description="Prometheus (scrapes every component; the alert rules) port")
    relay_metrics_port: int = Field(
        9464, description="where the stack's Prometheus scrapes the relay (the relay's CDCPIPE_METRICS_PORT)"
    )
    kafka_metrics_port: int = Field(
        9404,
        description="0: none. Else the broker's JMX beans (docs/metrics.md) served to Prometheus on this loopback "
        "port by the JMX exporter agent",
    )
    connect_metrics_port: int = Field(
        9405,
        description="0: none. Else the Connect worker's and Debezium's JMX beans (docs/metrics.md) served to "
        "Prometheus on this loopback port by the JMX exporter agent",
    )
    start_timeout_s: float = Field(180.0, gt=0, description="seconds a service may take to become healthy")
    log_max_mb: int = Field(
        64, ge=1, description="a service's log past this many MiB is renamed NAME.log.1 (.1 to .2, ...) and begun anew"
    )
    log_keep: int = Field(4, ge=0, description="rotated logs kept per service besides its current one (NAME.log.1 ...)")
    java: str = Field("java", description="java executable (17 or newer)")

    @field_validator(
        "pg_port",
        "kafka_port",
        "kafka_controller_port",
        "kafka_plaintext_port",
        "connect_port",
        "s3_port",
        "spark_master_port",
        "spark_master_ui_port",
        "spark_worker_ui_port",
        "prometheus_port",
        "relay_metrics_port",
        "kafka_metrics_port",
        "connect_metrics_port",
    )
    @classmethod
    def _port_in_range(cls, value: int, info: ValidationInfo) -> int:
        if value == 0 and info.field_name in OPTIONAL_PORTS:
            return value
        if not 1024 <= value <= 65535:
            raise ValueError("a port must be between 1024 and 65535")
        return value

    @field_validator("kafka_heap", "connect_heap", "s3_heap", "spark_worker_memory")
    @classmethod
    def _jvm_size(cls, value: str) -> str:
        if not value[:-1].isdigit() or value[-1].lower() not in "kmg":
            raise ValueError("a memory size is a number followed by k, m or g, like 768m")
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _as_made(cls, data: Any, handler: ModelWrapValidatorHandler[StackSettings]) -> StackSettings:
        """The node counts the stack's data was made with, unless a count is given; a given count that differs fails."""
        settings = handler(data)
        made = settings.topology_made()
        if not made or not isinstance(data, dict):
            return settings
        for name, count in made.items():
            asked = data.get(name)
            if asked is not None and int(asked) != count:
                raise ValueError(
                    f"the stack in {settings.home} was made with {name}={count}, and {asked} is asked: its data is "
                    f"made for {count}. Leave CDCPIPE_{name.upper()} unset (or the `--cluster` flag off) to use it as "
                    "made, or delete its data (`cdcpipe stack down --purge`) to make it anew"
                )
        missing = {name: count for name, count in made.items() if name not in data}
        return handler({**data, **missing}) if missing else settings

    @model_validator(mode="after")
    def _ports_distinct(self) -> StackSettings:
        seen: dict[int, str] = {}
        for name, port in self.all_ports():
            if port > 65535:
                raise ValueError(f"{name} is {port}: past 65535; lower the first node's ports or the node count")
            if port in seen:
                raise ValueError(f"{name} and {seen[port]} are both {port}; give each service its own port")
            seen[port] = name
        return self

    def all_ports(self) -> list[tuple[str, int]]:
        """(setting, port) of every listener that is on, a second node's and worker's included ("kafka_port#2")."""
        found = []
        for name in type(self).model_fields:
            port = getattr(self, name)
            if not name.endswith("_port") or port == 0:  # 0: a listener that is off
                continue
            found.append((name, port))
            extra = (
                self.kafka_nodes
                if name.startswith("kafka_")
                else self.connect_workers
                if name.startswith("connect_")
                else 1
            )
            found += [(f"{name}#{n + 1}", port + NODE_PORT_STEP * n) for n in range(1, extra)]
        return found

    def node_port(self, port: int, index: int) -> int:
        """The Nth (0-based) Kafka node's or Connect worker's port whose first is `port`."""
        return port + NODE_PORT_STEP * index

    def topology_made(self) -> dict[str, int]:
        """The node counts `up` made this stack's data with ({} before the first `up`)."""
        try:
            recorded = json.loads((self.state / TOPOLOGY_FILE).read_text())
        except FileNotFoundError:
            # A stack made before the counts were kept has one node's data, if it has any.
            return dict.fromkeys(TOPOLOGY, 1) if (self.state / "kafka" / "meta.properties").exists() else {}
        return {name: int(recorded[name]) for name in TOPOLOGY if name in recorded}

    def record_topology(self) -> None:
        """For `up`, before it makes any data: the counts later commands take."""
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / TOPOLOGY_FILE).write_text(json.dumps({name: getattr(self, name) for name in TOPOLOGY}) + "\n")

    @property
    def replicas(self) -> int:
        """Replicas of a topic (3 on three nodes or more, as a production cluster keeps them)."""
        return min(self.kafka_nodes, 3)

    @property
    def min_insync(self) -> int:
        """Replicas that must hold a write before it is acknowledged to acks=all (2 of 3: one node may fail)."""
        return 2 if self.replicas >= 3 else 1

    # --- where things are (derived, never configured separately) ---------------------------------

    @property
    def lib(self) -> Path:
        return self.home / "lib"

    @property
    def state(self) -> Path:
        return self.home / "state"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def lake(self) -> Path:
        """Root folder of the Delta tables and Spark checkpoints."""
        return self.state / "lake"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def kafka_bootstrap(self) -> str:
        """Every node: a client reaches the cluster through whichever answers."""
        return ",".join(f"127.0.0.1:{self.node_port(self.kafka_port, n)}" for n in range(self.kafka_nodes))

    @property
    def connect_url(self) -> str:
        """Every worker of the group, comma-separated: a client passes over one that is down."""
        return ",".join(f"http://127.0.0.1:{self.node_port(self.connect_port, n)}" for n in range(self.connect_workers))

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def metrics_targets(self) -> Path:
        """Prometheus' file-based discovery: a running job's driver writes its target here."""
        return self.state / "prometheus" / "targets"

    @property
    def spark_master_url(self) -> str:
        return f"spark://127.0.0.1:{self.spark_master_port}"
