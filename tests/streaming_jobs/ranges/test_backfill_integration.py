"""A range's reads, in a Spark session of the test's own: what they leave of the driver's logging."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming_jobs.config import JobsSettings
from streaming_jobs.ranges.backfill import _logger_at
from streaming_jobs.spark_session import build_spark_session
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")]

PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


@pytest.fixture
def spark(stack: Stack, tmp_path: Path) -> Iterator[Any]:
    settings = JobsSettings.load(
        spark_master="local[1]", lake=tmp_path / "lake", spark_jars_dir=stack.home / "lib" / "spark"
    )
    session = build_spark_session(settings, app_name="test-backfill-logging")
    try:
        yield session
    finally:
        session.stop()


def test_the_kafka_source_quieted_for_a_read_follows_the_session_log_level_again_after(spark: Any) -> None:
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j

    def level() -> str:
        return str(log4j.LogManager.getLogger(PROVIDER).getLevel())

    assert level() == "WARN"  # the session's level (build_spark_session), inherited
    with _logger_at(spark, PROVIDER, "ERROR"):
        assert level() == "ERROR"
    assert level() == "WARN"
    spark.sparkContext.setLogLevel("INFO")
    assert level() == "INFO", "the logger kept the level it had in effect, as one of its own"
