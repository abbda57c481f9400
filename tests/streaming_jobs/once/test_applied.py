from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming_jobs.errors import StreamingError
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.applied import Applied, data_changes, read


def test_intervals_merge_where_they_touch_or_overlap() -> None:
    held = Applied().plus({("t", 0): (0, 10)}).plus({("t", 0): (10, 20), ("t", 1): (5, 6)}).plus({("t", 0): (30, 40)})
    assert held.intervals == {("t", 0): ((0, 20), (30, 40)), ("t", 1): ((5, 6),)}
    assert held.plus({("t", 0): (15, 35)}).intervals[("t", 0)] == ((0, 40),)
    assert held.plus({("t", 2): (3, 3)}).intervals == held.intervals  # an empty range adds nothing


def test_covers_only_what_is_held_whole() -> None:
    held = Applied({("t", 0): ((0, 20), (30, 40))})
    assert held.covers({("t", 0): (0, 20)})
    assert held.covers({("t", 0): (31, 35), ("t", 1): (4, 4)})  # an empty range is covered
    assert not held.covers({("t", 0): (15, 25)})
    assert not held.covers({("t", 0): (19, 31)})  # spans the hole
    assert not held.covers({("t", 1): (0, 1)})


def test_next_missing_steps_over_what_is_held_to_the_first_offset_that_is_not() -> None:
    held = Applied({("t", 0): ((0, 20), (30, 40))})
    assert held.next_missing(("t", 0), 0) == 20
    assert held.next_missing(("t", 0), 19) == 20
    assert held.next_missing(("t", 0), 20) == 20
    assert held.next_missing(("t", 0), 35) == 40
    assert held.next_missing(("t", 1), 7) == 7  # nothing held in that partition


def test_metadata_round_trips_and_foreign_metadata_is_ignored() -> None:
    held = Applied({("a.b", 0): ((0, 5),), ("a.b", 3): ((7, 9), (11, 12))})
    assert Applied.from_metadata(held.metadata()) == held
    assert Applied.from_metadata("a note someone wrote") is None
    assert Applied.from_metadata(json.dumps({"team": "x"})) is None


def commit(log: Path, version: int, info: dict[str, object]) -> None:
    log.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"commitInfo": info}), json.dumps({"add": {"path": f"part-{version}.parquet"}})]
    (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def test_read_takes_the_newest_commit_that_carries_intervals(tmp_path: Path) -> None:
    log = tmp_path / "t" / "_delta_log"
    assert read(LakePath(str(tmp_path / "t"))) == Applied()
    commit(log, 0, {"operation": "CREATE TABLE"})
    assert read(LakePath(str(tmp_path / "t"))) == Applied()
    first = Applied({("t", 0): ((0, 10),)})
    second = first.plus({("t", 0): (10, 20)})
    commit(log, 1, {"operation": "MERGE", "userMetadata": first.metadata()})
    commit(log, 2, {"operation": "WRITE", "userMetadata": second.metadata()})
    commit(log, 3, {"operation": "OPTIMIZE"})
    assert read(LakePath(str(tmp_path / "t"))) == second


def test_read_starts_from_the_last_checkpoint_and_finds_the_commits_after_it(tmp_path: Path) -> None:
    log = tmp_path / "t" / "_delta_log"
    held = Applied({("t", 0): ((0, 30),)})
    commit(log, 10, {"operation": "WRITE", "userMetadata": Applied({("t", 0): ((0, 10),)}).metadata()})
    commit(log, 11, {"operation": "WRITE", "userMetadata": held.metadata()})
    commit(log, 12, {"operation": "OPTIMIZE"})
    (log / "_last_checkpoint").write_text(json.dumps({"version": 10, "size": 3}))  # versions 0..9 cleaned up
    assert read(LakePath(str(tmp_path / "t"))) == held


def test_a_restore_brings_back_the_intervals_of_the_version_it_restored(tmp_path: Path) -> None:
    log = tmp_path / "t" / "_delta_log"
    first = Applied({("t", 0): ((0, 10),)})
    commit(log, 0, {"operation": "WRITE", "userMetadata": first.metadata()})
    commit(log, 1, {"operation": "WRITE", "userMetadata": first.plus({("t", 0): (10, 20)}).metadata()})
    commit(log, 2, {"operation": "RESTORE", "operationParameters": {"version": "0", "timestamp": None}})
    assert read(LakePath(str(tmp_path / "t"))) == first


def test_a_log_cleaned_below_commits_without_intervals_is_an_error_not_a_guess(tmp_path: Path) -> None:
    log = tmp_path / "t" / "_delta_log"
    commit(log, 7, {"operation": "OPTIMIZE"})  # versions 0..6 were cleaned up
    with pytest.raises(StreamingError, match="cannot tell which offsets the table holds"):
        read(LakePath(str(tmp_path / "t")))
    # Event ids written before their commits carried offsets: they hold none, an append records them.
    assert read(LakePath(str(tmp_path / "t")), unknown_is_none=True) == Applied()


def test_a_compactions_commits_change_no_rows_and_an_unreadable_commit_says_so(tmp_path: Path) -> None:
    log = tmp_path / "t" / "_delta_log"
    commit(log, 0, {"operation": "WRITE"})
    compaction = [
        {"commitInfo": {"operation": "OPTIMIZE"}},
        {"add": {"path": "big.parquet", "dataChange": False}},
        {"remove": {"path": "part-0.parquet", "dataChange": False}},
    ]
    (log / f"{1:020d}.json").write_text("\n".join(json.dumps(a) for a in compaction) + "\n")
    commit(log, 2, {"operation": "WRITE"})  # an add without dataChange: Delta's default, true
    table = LakePath.of(str(tmp_path / "t"))
    assert data_changes(table, 0, 1) == 0
    assert data_changes(table, 0, 2) == 1
    assert data_changes(table, -1, 2) == 2
    (log / f"{1:020d}.json").unlink()  # cleaned up by log retention
    assert data_changes(table, 0, 2) is None
