"""What a job's checkpoint holds, read and cleaned without Spark."""

from __future__ import annotations

from pathlib import Path

from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.checkpoints import clear_unfinished_writes


def test_only_the_half_written_files_of_a_killed_query_are_removed(tmp_path: Path) -> None:
    for folder in ("offsets", "commits", "sources/0"):
        (tmp_path / folder).mkdir(parents=True)
    kept = ["offsets/0", "offsets/.0.crc", "commits/0", "sources/0/0", "sources/0/.1.a.tmp"]
    left = ["offsets/.1.3f2a.tmp", "offsets/..1.3f2a.tmp.crc", "commits/.1.9b1c.tmp"]
    for name in kept + left:
        (tmp_path / name).write_text("x")
    assert sorted(clear_unfinished_writes(LakePath.of(tmp_path))) == sorted(left)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == sorted(kept)
