"""Settings of the jobs: their Spark session, the lake, the writer lease, the job files and the run folder.

`[jobs]` in the settings file, `CDCPIPE_*` in the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from ground.home import default_home
from ground.kafka_client import KafkaSettings, with_own_client_file
from ground.settings import StageSettings, revealed, split_list
from streaming_jobs.lake.paths import LakePath, check_lake
from streaming_jobs.lake.store import LakeAccess, ObjectStoreSettings

# Every consumer group a job, a backfill or a check uses starts with this; the jobs' Kafka principal is granted READ
# on this prefix and no other. It shares no prefix with another component's group (Connect's `cdcpipe-connect`).
CONSUMER_GROUP_PREFIX = "cdcpipe-jobs-"
# A job's fetches. The Java consumer's defaults (1 MB a partition, 500 records a poll) cut a batch of table
# changes (8 KB each with their Connect schema) into a round trip per hundred records.
# A poll's records stay in the heap until the next poll, one poll for each partition a task read (Spark pools
# the consumers and what they fetched): the cap on a poll is what bounds that, since a fetch's byte limit counts
# compressed bytes. An lz4 topic of such changes fills an 8 MB fetch with many times its size in records: at
# 20,000 a poll a 2 GB driver ran out of memory on a backlog; 2,000 read uncompressed topics as fast.
# No wait on the broker: a task reads only offsets the driver saw written. But the consumer sends its next fetch
# (past the range's end) before it returns a poll, and Spark then asks the same broker for the partition's first
# and last offsets, which the broker answers only after that fetch: after `fetch.max.wait.ms` (500) when no new
# record comes. A task of a quiet topic waited those 500 ms on every read.
FETCH = {
    "kafka.max.partition.fetch.bytes": str(8 << 20),
    "kafka.max.poll.records": "2000",
    "kafka.fetch.max.wait.ms": "0",
}

# A partition leader's death: the driver's offset lookups (an admin client) and the tasks' fetches each wait for a
# request to the dead node to time out before they ask the new leader. At Kafka's defaults (a request 30 s, a whole
# call 60 s) every job stood still a minute or more after a leader's SIGKILL (bench/chaos.py on
# `stack up --cluster`, the `leader` fault); with these a lookup gives up in 20 s and Spark tries it again.
FAILOVER = {
    "kafka.request.timeout.ms": "15000",
    "kafka.default.api.timeout.ms": "20000",
}


class JobsSettings(StageSettings):
    """What a job runs with: its Spark session (jars from disk, nothing downloaded at run time), lake and files."""

    toml_section: ClassVar[str] = "jobs"

    spark_master: str = Field("local[2]", description="where jobs run: local[N] or spark://HOST:PORT")
    spark_jars_dir: Path = Field(
        default_factory=lambda: default_home() / "lib" / "spark",
        description="folder of the Kafka source and Delta jars (installed by `make install`)",
    )
    spark_class_archive: Path | None = Field(
        default_factory=lambda: default_home() / "lib" / "spark-driver.jsa",
        description="the JVM class-data archive of a Spark driver (`make install` writes it): a driver maps Spark's "
        "classes from it instead of loading each one (bench/driver_start.py measures it); none there, none used",
    )
    spark_driver_memory: str = Field("2g", description="driver JVM heap")
    spark_java_options: str = Field(
        "",
        description="extra JVM options of the driver and executors; `-XX:TieredStopAtLevel=1` (no optimising JIT) "
        "starts a short job faster on few cores (the test suite uses it) but reads Kafka 5-9x slower: never for a job "
        "that runs for long",
    )
    spark_executor_memory: str = Field("1g", description="executor heap on a standalone cluster")
    spark_cores_max: int = Field(
        1,
        ge=1,
        description="cores one job takes on a standalone cluster (spark.cores.max); without a cap the first job "
        "takes every core and the next waits",
    )
    spark_executor_cores: int | None = Field(
        None,
        ge=1,
        description="cores per executor on a standalone cluster; unset: spark_cores_max (one executor per job). "
        "Fewer spreads a job's executors over the workers",
    )
    spark_master_ui_url: str | None = Field(
        None,
        description="a standalone master's web UI (http://HOST:PORT), whose JSON says whether each job's application "
        "holds executors; unset: the master's host, port 8080",
    )
    spark_authenticate_secret_file: Path | None = Field(
        None,
        description="file holding the standalone cluster's shared secret (spark.authenticate); for spark:// masters",
    )
    spark_shuffle_partitions: int = Field(
        2, ge=1, description="spark.sql.shuffle.partitions (one per core: micro-batches are small)"
    )
    spark_ui: bool = Field(False, description="serve the Spark UI on 127.0.0.1:4040")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings.load, description="the cluster ([kafka])")
    jobs_kafka_config: Path | None = Field(
        None,
        description="the jobs' own Kafka client file: when set, jobs read Kafka with it whatever "
        "CDCPIPE_KAFKA_CONFIG says (`stack env` names the stack's jobs user's; its admin file is for the CLI's "
        "topic and ACL commands)",
    )
    allow_kafka_superuser: bool = Field(
        False,
        description="let a job start with Kafka credentials that may alter the cluster (a super user's): they "
        "would reach its executors, where projections run. Off: such a job is refused, naming the fix",
    )
    jobs_dirs: Annotated[tuple[Path, ...], NoDecode] = Field(
        (),
        description="folders of job files (colon-separated), yours: cdcpipe ships none (the demo's: examples/jobs)",
    )
    lake: str = Field(
        default_factory=lambda: str(default_home() / "state" / "lake"),
        description="root of the Delta tables and checkpoints: a folder, or s3a://bucket/prefix on an object store",
    )
    object_store: ObjectStoreSettings = Field(
        default_factory=ObjectStoreSettings.load, description="the S3 API of an s3a:// lake ([object_store])"
    )
    lease_pg_dsn: SecretStr | None = Field(
        None,
        description="Postgres holding each table's writer lease (one writer at a time, across machines); any role "
        "that may connect, its password from PGPASSFILE",
    )
    lease_wait_s: float = Field(
        900.0,
        gt=0,
        description="how long a writer waits for a table's lease held by another (a running batch, a backfill's "
        "chunk, an optimize) before it gives up, naming the holder",
    )
    kafka_outage_s: float = Field(
        900.0,
        gt=0,
        description="how long a running job waits out Kafka unreachable (a cluster restarting, a leader moving): "
        "its query is started again from its checkpoint, first after 5 s, then up to 30 s apart; past it, the job "
        "stops with Kafka's error",
    )
    source_pg_dsn: SecretStr | None = Field(
        None,
        description="the captured tables' Postgres, read-only catalog access: tells a renamed column from a dropped "
        "and added one (table kinds), its password from PGPASSFILE",
    )
    metrics: bool = Field(
        True,
        description="a streaming job's driver serves Prometheus metrics on 127.0.0.1 (a free port: see the next); "
        "false also skips reading each record's source time for the latency histogram",
    )
    metrics_targets_dir: Path | None = Field(
        None,
        description="folder where a running job's driver writes its Prometheus target (file-based discovery); "
        "`stack env` names the stack Prometheus's",
    )
    run_dir: Path = Field(
        default_factory=lambda: default_home() / "run" / "jobs",
        description="local folder of the jobs this machine started: their pid files and logs",
    )

    @model_validator(mode="before")
    @classmethod
    def _jobs_own_kafka_file(cls, data: Any) -> Any:
        return with_own_client_file(data, "jobs_kafka_config")

    @field_validator("jobs_dirs", mode="before")
    @classmethod
    def _colon_separated(cls, value: object) -> object:
        return split_list(value, ":")

    @field_validator("lake", mode="before")
    @classmethod
    def _a_lake(cls, value: object) -> object:
        # A URL taken as a Path would become a relative folder named "s3a:" beside wherever the job started.
        return check_lake(str(value)) if isinstance(value, (str, Path)) else value

    def environment(self) -> dict[str, str]:
        """The lake, its store, its leases and the Kafka client as variables: a child process reads what this one read."""
        env = {"CDCPIPE_LAKE": self.lake, **self.object_store.environment(), **self.kafka.environment()}
        if self.allow_kafka_superuser:
            env["CDCPIPE_ALLOW_KAFKA_SUPERUSER"] = "true"
        if self.lease_pg_dsn:
            env["CDCPIPE_LEASE_PG_DSN"] = self.lease_pg_dsn.get_secret_value()
        env["CDCPIPE_LEASE_WAIT_S"] = str(self.lease_wait_s)
        if self.source_pg_dsn:
            env["CDCPIPE_SOURCE_PG_DSN"] = self.source_pg_dsn.get_secret_value()
        return env

    def kafka_reader_options(self) -> dict[str, str]:
        """Spark's Kafka source options: the cluster's client settings, `FETCH` and `FAILOVER`.

        The client file's own settings win over both.
        """
        return {**FETCH, **FAILOVER, **self.kafka.spark_options()}

    def lake_root(self) -> LakePath:
        """The lake, with what reaching it takes (its store's settings, the writer leases' Postgres)."""
        return LakePath(
            check_lake(str(self.lake)), LakeAccess(self.object_store, revealed(self.lease_pg_dsn), self.lease_wait_s)
        )
