"""A SparkSession with the Kafka source and Delta, from the jars `make install` put on disk."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from delta.tables import DeltaTable
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from ground.errors import ConfigError
from ground.kafka_client import SPARK_REDACTION_REGEX
from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import SparkJarsMissingError

FAIR_POOLS = Path(__file__).parent / "run" / "fair_pools.xml"
# Every this many commits Delta writes a checkpoint of the table in the committing writer's post-commit
# (streaming_jobs.run.compaction keeps its compactions off those batches).
CHECKPOINT_INTERVAL = 100

# Settings that hold a secret. PySpark starts the driver's JVM as `spark-submit --conf key=value ...` with every
# setting it has at that moment, where `ps` shows them to every local user: these are given to the JVM only
# once it runs (build_spark_session), in memory. Executors get them from the driver over its authenticated RPC.
SECRET_SETTINGS = frozenset({"spark.authenticate.secret", "spark.hadoop.fs.s3a.secret.key"})

# Jars the session cannot work without; a prefix match, versions come from infra/versions.toml.
REQUIRED_JARS = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "delta-spark_",
    "delta-storage-",
)


def spark_jars(folder: Path) -> list[Path]:
    """The jars to put on the session's classpath; raises naming any required one that is missing."""
    jars = sorted(folder.glob("*.jar"))
    missing = [prefix for prefix in REQUIRED_JARS if not any(j.name.startswith(prefix) for j in jars)]
    if missing:
        raise SparkJarsMissingError(
            f"no {', '.join(p + '*.jar' for p in missing)} in {folder}: run `make install`, "
            "or point CDCPIPE_SPARK_JARS_DIR at the folder that holds them"
        )
    return jars


def session_conf(settings: JobsSettings, app_name: str) -> dict[str, str]:
    """Every setting the session is built with (separate, so it can be read and tested without a JVM)."""
    jars = spark_jars(settings.spark_jars_dir)
    # On a standalone cluster an application takes every free core unless capped: one job would starve the next.
    cluster = (
        {
            "spark.cores.max": str(settings.spark_cores_max),
            "spark.executor.cores": str(
                min(settings.spark_executor_cores or settings.spark_cores_max, settings.spark_cores_max)
            ),
        }
        if settings.spark_master.startswith("spark://")
        else {}
    )
    if cluster and settings.spark_authenticate_secret_file is not None:
        # The executors get it from their worker, in the environment: never on a command line.
        cluster["spark.authenticate"] = "true"
        cluster["spark.authenticate.secret"] = _read_secret(settings.spark_authenticate_secret_file)
    archive = settings.spark_class_archive
    # The driver's classpath is the archive's (the same pyspark): an executor's is not, so only the driver maps it.
    # The code cache the JIT's tiers would get (240 MB): without the optimising tier (`TieredStopAtLevel=1`) the
    # JVM gives it 48 MB, which a table group's driver (a query per table, each with code of its own) fills
    # ("Out of space in CodeCache for adapters": every query of the driver fails).
    options = settings.spark_java_options
    cut = "TieredStopAtLevel" in options and "ReservedCodeCacheSize" not in options
    code_cache = "-XX:ReservedCodeCacheSize=240m" if cut else ""
    driver = " ".join(
        o
        for o in (
            settings.spark_java_options,
            code_cache,
            f"-XX:SharedArchiveFile={archive}" if archive and archive.is_file() else "",
        )
        if o
    )
    java = {"spark.driver.extraJavaOptions": driver} if driver else {}
    if settings.spark_java_options:
        java["spark.executor.extraJavaOptions"] = settings.spark_java_options
    return (
        cluster
        | java
        | {
            "spark.app.name": app_name,
            "spark.master": settings.spark_master,
            "spark.jars": ",".join(str(j) for j in jars),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.driver.memory": settings.spark_driver_memory,
            "spark.executor.memory": settings.spark_executor_memory,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": str(settings.spark_ui).lower(),
            "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
            "spark.sql.warehouse.dir": str(settings.lake_root() / "_warehouse"),
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            # Statistics on the first 10 columns: enough to cover the Kafka coordinates and timestamp the jobs
            # filter on (an event log's dedupe window), without paying for every column of wide payloads.
            "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "10",
            # A job commits once per micro-batch; Delta's default checkpoint every 10 commits rewrites the whole
            # file list in the batch that triggers it: a tenth of the batches paid seconds for it. Every 100
            # commits, a reader rebuilding a snapshot replays at most 99 small commit files.
            "spark.databricks.delta.properties.defaults.checkpointInterval": str(CHECKPOINT_INTERVAL),
            # Rebuilding a Delta snapshot uses 50 tasks by default: on 2 cores, 50 tiny tasks per read is overhead.
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.ui.showConsoleProgress": "false",
            # A job compacts its append-only tables in a thread beside its micro-batches (streaming_jobs.run.
            # compaction): pools share the cores fairly, so a batch's jobs do not queue behind a compaction's.
            "spark.scheduler.mode": "FAIR",
            # Declares the `compaction` pool (Spark warns on every job run in an undeclared one).
            "spark.scheduler.allocation.file": str(FAIR_POOLS),
            # Instants are kept as instants; a Postgres timestamp without zone, which Debezium sends as epoch time of
            # its wall-clock value, is read back in UTC to give that wall-clock value (schema_change.types).
            "spark.sql.session.timeZone": "UTC",
            # Kafka allows a header name more than once; building the headers map must not fail the job on it.
            # The last value wins, as Kafka's Headers.lastHeader() reads it (outbox_events takes the last too).
            "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
            # Hadoop chmods each folder it makes to 0777 less this mask, which also caps what an ACL grants: with the
            # default 022, executors of a shared cluster (another OS user, given the lake by a default ACL, as the
            # local stack does) could not write data files into the table folders the driver made.
            "spark.hadoop.fs.permissions.umask-mode": "002",
            # The Kafka source's options hold the SASL login (sasl.jaas.config) and maybe a private key: never shown.
            "spark.redaction.regex": SPARK_REDACTION_REGEX,
            # The object store of an s3a:// lake (or of a table given as an s3a:// URL): endpoint, region, keys.
            **settings.object_store.hadoop_conf(),
        }
    )


def _read_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ConfigError(
            f"CDCPIPE_SPARK_AUTHENTICATE_SECRET_FILE={path}: cannot read it ({exc.strerror}); point it at the "
            "cluster's secret file (the local stack's: `cdcpipe stack env`)"
        ) from exc


def write_class_archive(settings: JobsSettings, lake: Path) -> int:
    """Run what a job's driver runs at its start, in a driver started with `-XX:ArchiveClassesAtExit`; its JVM pid.

    The JVM writes every class it loaded from its classpath (Spark's, Hadoop's, Scala's: the jars of pyspark) into
    the archive as it exits, which is after this process ends: wait for the pid. `make install` calls this once
    per pyspark and Java (infra/install.py); the archive option comes from CDCPIPE_SPARK_JAVA_OPTIONS.
    """
    spark = build_spark_session(settings, app_name="cdcpipe-class-archive")
    table = str(lake / "t")
    counts = spark.range(1000).selectExpr("id % 7 AS k", "id", "current_timestamp() AS ts").groupBy("k").count()
    counts.write.format("delta").mode("overwrite").save(table)
    target = DeltaTable.forPath(spark, table)
    target.alias("t").merge(counts.alias("s"), "t.k = s.k").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    spark.read.format("delta").load(table).where("k > 2").collect()
    pid: int = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    spark.stop()
    return pid


def build_spark_session(settings: JobsSettings | None = None, app_name: str = "cdcpipe") -> SparkSession:
    """The session every cdcpipe job uses. Call once per process: Spark allows one driver per JVM."""
    settings = settings or JobsSettings.load()
    # Everything Spark binds (driver, block manager, UI) stays on loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = session_conf(settings, app_name)
    # The JVM is launched with every setting but the secrets (see SECRET_SETTINGS); the context made next sets all.
    SparkContext._ensure_initialized(
        conf=SparkConf(loadDefaults=False).setAll([(k, v) for k, v in conf.items() if k not in SECRET_SETTINGS])
    )
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
