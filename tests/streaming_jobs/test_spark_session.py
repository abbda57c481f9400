"""The session's settings, checked without starting a JVM."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ground.errors import ConfigError
from ground.kafka_client import KafkaSettings
from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import SparkJarsMissingError
from streaming_jobs.spark_session import REQUIRED_JARS, session_conf

JAR_NAMES = [
    "spark-sql-kafka-0-10_2.13-4.0.0.jar",
    "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
    "kafka-clients-3.9.0.jar",
    "delta-spark_2.13-4.0.0.jar",
    "delta-storage-4.0.0.jar",
    "commons-pool2-2.12.0.jar",
]


def jars_folder(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_conf_uses_local_jars_by_absolute_path_and_configures_delta(tmp_path: Path) -> None:
    folder = jars_folder(tmp_path, JAR_NAMES)
    conf = session_conf(JobsSettings.load(spark_jars_dir=folder, lake=tmp_path / "lake"), "t")
    jars = conf["spark.jars"].split(",")
    assert sorted(Path(j).name for j in jars) == sorted(JAR_NAMES)
    assert all(Path(j).is_absolute() for j in jars)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.jars.packages" not in conf, "nothing may be downloaded at run time"


@pytest.mark.parametrize("missing", REQUIRED_JARS)
def test_a_missing_jar_is_named_with_the_fix(tmp_path: Path, missing: str) -> None:
    folder = jars_folder(tmp_path, [n for n in JAR_NAMES if not n.startswith(missing)])
    with pytest.raises(SparkJarsMissingError, match=r"make install") as raised:
        session_conf(JobsSettings.load(spark_jars_dir=folder), "t")
    assert missing in str(raised.value)


def test_the_installed_jars_satisfy_the_session() -> None:
    """What `make install` put on disk is what the session needs (no JVM started)."""
    conf = session_conf(JobsSettings.load(), "t")
    assert len(conf["spark.jars"].split(",")) >= len(REQUIRED_JARS)


@pytest.mark.parametrize(
    ("trigger", "spark"), [("1s", "1 seconds"), ("500ms", "500 milliseconds"), ("5min", "5 minutes")]
)
def test_triggers_become_spark_intervals(trigger: str, spark: str) -> None:
    from streaming_jobs.jobs.spec import JobSpec

    spec = JobSpec(name="j", kind="event_log", topics=("t",), table="t", trigger=trigger)
    assert spec.processing_time() == spark


def test_a_job_on_a_standalone_cluster_takes_only_its_share_of_cores(tmp_path: Path) -> None:
    folder = jars_folder(tmp_path, JAR_NAMES)
    local = session_conf(JobsSettings.load(spark_jars_dir=folder, spark_master="local[2]"), "t")
    assert "spark.cores.max" not in local
    cluster = session_conf(JobsSettings.load(spark_jars_dir=folder, spark_master="spark://127.0.0.1:7077"), "t")
    assert cluster["spark.cores.max"] == "1"
    assert cluster["spark.executor.cores"] == "1"


def test_a_job_on_a_cluster_with_a_secret_authenticates_and_the_secret_is_redacted(tmp_path: Path) -> None:
    folder = jars_folder(tmp_path, JAR_NAMES)
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    cluster = session_conf(
        JobsSettings.load(
            spark_jars_dir=folder, spark_master="spark://127.0.0.1:7077", spark_authenticate_secret_file=secret
        ),
        "t",
    )
    assert (cluster["spark.authenticate"], cluster["spark.authenticate.secret"]) == ("true", "s3cret")
    assert re.search(cluster["spark.redaction.regex"], "spark.authenticate.secret")
    # Spark redacts an option whose key or value matches: the JAAS login's value names its password.
    assert re.search(cluster["spark.redaction.regex"], 'ScramLoginModule required username="u" password="p";')
    assert re.search(cluster["spark.redaction.regex"], "kafka.ssl.keystore.key")
    local = session_conf(
        JobsSettings.load(spark_jars_dir=folder, spark_master="local[2]", spark_authenticate_secret_file=secret), "t"
    )
    assert "spark.authenticate" not in local


def test_a_lake_url_other_than_s3a_is_refused_not_taken_for_a_relative_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CDCPIPE_LAKE", "s3://cdcpipe/lake")
    with pytest.raises(ConfigError, match="s3a://"):
        JobsSettings.load()
    assert list(tmp_path.iterdir()) == []


def test_the_driver_maps_the_class_archive_when_there_is_one_and_executors_never(tmp_path: Path) -> None:
    folder = jars_folder(tmp_path, JAR_NAMES)
    archive = tmp_path / "spark-driver.jsa"

    def java(options: str = "") -> tuple[str | None, str | None]:
        settings = JobsSettings.load(
            spark_jars_dir=folder, lake=tmp_path / "lake", spark_class_archive=archive, spark_java_options=options
        )
        conf = session_conf(settings, "t")
        return conf.get("spark.driver.extraJavaOptions"), conf.get("spark.executor.extraJavaOptions")

    assert java() == (None, None), "no archive written: none named"
    archive.write_bytes(b"")
    assert java() == (f"-XX:SharedArchiveFile={archive}", None)
    assert java("-XX:TieredStopAtLevel=1") == (
        # The code cache without the optimising tier would be 48 MB, too little for a table group's queries.
        f"-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:SharedArchiveFile={archive}",
        "-XX:TieredStopAtLevel=1",
    )


def test_a_jobs_kafka_reads_never_wait_on_the_broker_cap_their_polls_and_keep_the_clusters_login() -> None:
    # A task reads only offsets the driver saw written; a broker holding its fetch past them for 500 ms
    # delayed every read of a quiet topic (docs/benchmarks.md, "A quiet topic's read waited on the broker").
    # A stream and a backfill read with these options: the poll cap the small-heap replay test proves on a
    # compressed topic (tests/streaming_jobs/ranges) reaches a streaming job's reader too.
    cluster = KafkaSettings(
        kafka_bootstrap="broker:9093",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="jobs",
        kafka_sasl_password="pw",  # noqa: S106 - a test login
    )
    options = JobsSettings.load(kafka=cluster).kafka_reader_options()
    assert options["kafka.fetch.max.wait.ms"] == "0"
    assert int(options["kafka.max.poll.records"]) <= 2000
    assert (options["kafka.bootstrap.servers"], options["kafka.security.protocol"]) == ("broker:9093", "SASL_SSL")
    assert 'username="jobs"' in options["kafka.sasl.jaas.config"]
    # A dead partition leader holds a lookup 20 s at most (Kafka's 60 s held every job a minute and more).
    assert (options["kafka.default.api.timeout.ms"], options["kafka.request.timeout.ms"]) == ("20000", "15000")
