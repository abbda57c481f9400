"""Settings of the local stack (`[stack]` in the settings file, `CDCPIPE_*` in the environment)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ground.home import default_home
from ground.settings import StageSettings

MAX_SPARK_WORKERS = 8  # `stack down` and `status` look for this many workers' pid files


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
    connect_port: int = Field(8083, description="Kafka Connect REST port")
    connect_heap: str = Field("768m", description="Connect worker JVM heap (-Xmx)")
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

    @model_validator(mode="after")
    def _ports_distinct(self) -> StackSettings:
        ports = {name: getattr(self, name) for name in type(self).model_fields if name.endswith("_port")}
        seen: dict[int, str] = {}
        for name, port in ports.items():
            if port == 0:  # a listener that is off
                continue
            if port in seen:
                raise ValueError(f"{name} and {seen[port]} are both {port}; give each service its own port")
            seen[port] = name
        return self

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
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def connect_url(self) -> str:
        return f"http://127.0.0.1:{self.connect_port}"

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
