from __future__ import annotations

from pathlib import Path

import pytest

from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake.paths import LakePath

SPEC = JobSpec(name="j", kind="event_log", topics=("t",), table="out")


def test_a_job_is_where_its_file_says_until_a_pointer_moves_it(tmp_path: Path) -> None:
    lake = LakePath(str(tmp_path))
    assert locations.current(SPEC, lake) == locations.Location(lake / "out", lake / "_checkpoints" / "j")
    moved = locations.Location(lake / "out2", lake / "_checkpoints" / "j@x", {"t": {"0": 5}})
    locations.switch(SPEC, lake, moved)
    assert locations.current(SPEC, lake) == moved
    assert locations.current(SPEC, lake).starting_offsets == {"t": {"0": 5}}
    assert locations.current(SPEC, lake).dead_letters == lake / "out2_dead_letters"
    assert [p.name for p in (tmp_path / "_jobs").iterdir()] == ["j.location.json"]  # no temporary file left


def test_a_broken_pointer_says_how_to_go_back(tmp_path: Path) -> None:
    (tmp_path / "_jobs").mkdir()
    (tmp_path / "_jobs" / "j.location.json").write_text("{")
    with pytest.raises(StreamingError, match="delete it to go back to the table and checkpoint in the job's file"):
        locations.current(SPEC, LakePath(str(tmp_path)))


def test_new_checkpoints_never_repeat(tmp_path: Path) -> None:
    lake = LakePath(str(tmp_path))
    assert locations.new_checkpoint(SPEC, lake, "rewind") != locations.new_checkpoint(SPEC, lake, "rewind")
