"""The driver's class archive is built again whenever a jar it maps changed, a new file of the same size included."""

from __future__ import annotations

import os
from pathlib import Path

from streaming_jobs.class_archive import _stamp
from streaming_jobs.config import JobsSettings


def test_a_jar_written_again_with_the_same_size_changes_the_stamp(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    jar = jars / "delta-spark_2.13-4.4.0.jar"
    jar.write_bytes(b"PK")
    settings = JobsSettings.load(spark_jars_dir=jars, lake=tmp_path / "lake")
    before = _stamp(settings)
    assert _stamp(settings) == before, "the same files, the same stamp"
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))  # a venv made again
    assert _stamp(settings) != before, "the JVM would refuse the archive: it must be built again"
