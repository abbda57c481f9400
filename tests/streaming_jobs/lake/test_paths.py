from __future__ import annotations

from pathlib import Path

import pytest

from streaming_jobs.config import JobsSettings
from streaming_jobs.lake.paths import LakePath, check_lake


def test_a_lake_is_an_absolute_folder_or_an_s3a_url() -> None:
    assert check_lake("s3a://bucket/a/../b/") == "s3a://bucket/b"
    assert check_lake("s3a://bucket") == "s3a://bucket"
    assert check_lake("relative/lake") == str(Path("relative/lake").resolve())
    with pytest.raises(ValueError, match=r"not s3://.*Hadoop's S3 connector is s3a://"):
        check_lake("s3://bucket/lake")
    with pytest.raises(ValueError, match="not gs://"):
        check_lake("gs://bucket/lake")
    with pytest.raises(ValueError, match="names no bucket"):
        check_lake("s3a:///lake")


def test_a_url_lake_setting_stays_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCPIPE_LAKE", "s3a://bucket/lake/")
    lake = JobsSettings.load().lake_root()
    assert str(lake) == "s3a://bucket/lake"
    assert str(lake / "_checkpoints" / "j") == "s3a://bucket/lake/_checkpoints/j"
    assert (lake / "out").with_name("out_dead_letters").url == "s3a://bucket/lake/out_dead_letters"
    assert not lake.is_local


def test_files_in_a_local_lake_are_replaced_whole(tmp_path: Path) -> None:
    lake = LakePath(str(tmp_path))
    target = lake / "a" / "b.json"
    with pytest.raises(FileNotFoundError):
        target.read_text()
    target.write_text("one")
    target.write_text("two")
    assert target.read_text() == "two"
    assert lake.names() == ["a"]
    assert (lake / "a").names() == ["b.json"]  # no temporary file left beside it
    assert (lake / "a").is_dir()
    assert target.exists()
    assert not (lake / "nothing").exists()
    (lake / "a").delete_tree()
    assert lake.names() == []


def test_object_store_settings_fall_back_to_the_standard_aws_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "shh")
    monkeypatch.setenv("CDCPIPE_S3_REGION", "eu-west-1")
    store = JobsSettings.load().object_store
    conf = store.hadoop_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.secret.key"] == "shh"
    assert "shh" not in repr(store)
