from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.once.locks import table_lock

SPEC = JobSpec(name="j", kind="event_log", topics=("t",), table="out")


def test_a_job_is_where_its_file_says_until_a_pointer_moves_it(tmp_path: Path) -> None:
    assert locations.current(SPEC, tmp_path) == locations.Location(tmp_path / "out", tmp_path / "_checkpoints" / "j")
    moved = locations.Location(tmp_path / "out2", tmp_path / "_checkpoints" / "j@x", {"t": {"0": 5}})
    locations.switch(SPEC, tmp_path, moved)
    assert locations.current(SPEC, tmp_path) == moved
    assert locations.current(SPEC, tmp_path).starting_offsets == {"t": {"0": 5}}
    assert locations.current(SPEC, tmp_path).dead_letters == tmp_path / "out2_dead_letters"
    assert not list((tmp_path / "_jobs").glob("*.tmp"))


def test_a_broken_pointer_says_how_to_go_back(tmp_path: Path) -> None:
    locations.pointer(tmp_path, "j").parent.mkdir(parents=True)
    locations.pointer(tmp_path, "j").write_text("{")
    with pytest.raises(StreamingError, match="delete it to go back to the table and checkpoint in the job's file"):
        locations.current(SPEC, tmp_path)


def test_new_checkpoints_never_repeat(tmp_path: Path) -> None:
    assert locations.new_checkpoint(SPEC, tmp_path, "rewind") != locations.new_checkpoint(SPEC, tmp_path, "rewind")


def test_one_writer_at_a_time_per_table(tmp_path: Path) -> None:
    order: list[str] = []
    with table_lock(tmp_path / "out", "first"):
        second = threading.Thread(target=lambda: _write(tmp_path / "out", order))
        second.start()
        time.sleep(0.3)
        order.append("first done")
    second.join(10)
    assert order == ["first done", "second"]


def _write(table: Path, order: list[str]) -> None:
    with table_lock(table, "second"):
        order.append("second")
