"""What a job's checkpoint holds, read and cleaned without Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.checkpoints import clear_unfinished_writes, first_batch_start

# As Spark's Kafka source writes its resolved starting offsets (KafkaSourceInitialOffsetWriter): a NUL byte first.
SPARK_WRITTEN = '\0v1\n{"orders":{"0":12,"1":0},"refunds":{"0":7}}'


def test_only_the_half_written_files_of_a_killed_query_are_removed(tmp_path: Path) -> None:
    for folder in ("offsets", "commits", "sources/0"):
        (tmp_path / folder).mkdir(parents=True)
    kept = ["offsets/0", "offsets/.0.crc", "commits/0", "sources/0/0", "sources/0/.1.a.tmp"]
    left = ["offsets/.1.3f2a.tmp", "offsets/..1.3f2a.tmp.crc", "commits/.1.9b1c.tmp"]
    for name in kept + left:
        (tmp_path / name).write_text("x")
    assert sorted(clear_unfinished_writes(LakePath.of(tmp_path))) == sorted(left)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == sorted(kept)


def test_a_first_batch_starts_where_the_kafka_source_resolved_its_starting_offsets(tmp_path: Path) -> None:
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_text(SPARK_WRITTEN)
    assert first_batch_start(LakePath.of(tmp_path)) == {("orders", 0): 12, ("orders", 1): 0, ("refunds", 0): 7}


@pytest.mark.parametrize(
    "files",
    [
        {},  # the query has not planned its first batch
        {"sources/0/1": SPARK_WRITTEN},  # no file of batch 0
        {"sources/0/0": SPARK_WRITTEN, "sources/1/.0.tmp": "x"},  # a second source without its file
        {"sources/0/0": "\0v2\n{}"},  # a version this code does not know
        {"sources/0/0": "\0v1\n[1]"},  # not {topic: {partition: offset}}
        {"sources/0/0": "\0v1\n"},
    ],
)
def test_a_first_batch_without_a_readable_start_is_left_to_its_records(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert first_batch_start(LakePath.of(tmp_path)) is None
