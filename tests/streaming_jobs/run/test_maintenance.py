"""Which event ids a job trims, and that its memory of ids survives the trim's commit."""

from __future__ import annotations

import json
from pathlib import Path

from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from streaming_jobs.run.maintenance import trim_floors


def test_ids_are_kept_for_the_look_back_below_the_first_offset_the_table_lacks() -> None:
    held = applied.Applied({("t", 0): ((0, 500_000),), ("t", 1): ((0, 40_000),), ("t", 2): ((0, 300), (900, 250_000))})
    # Partition 1 holds less than a look-back: nothing to trim. Partition 2 has a gap at 300 (a backfill may fill
    # it, looking back from there): nothing below it goes either.
    assert trim_floors(held, 100_000) == {("t", 0): 400_000}
    assert trim_floors(held, 0) == {}, "a look-back of 0 keeps every id"


def _commit(log: Path, version: int, operation: str, *, data_change: bool = True) -> None:
    info = {"commitInfo": {"operation": operation}}
    actions = [info, {"remove": {"path": f"f{version}.parquet", "dataChange": data_change}}]
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_a_trims_commit_changes_no_row_a_memory_of_ids_holds(tmp_path: Path) -> None:
    log = tmp_path / "ids" / "_delta_log"
    log.mkdir(parents=True)
    _commit(log, 0, "WRITE")
    _commit(log, 1, "DELETE")  # a trim: the memory holds more than the table, never less
    _commit(log, 2, "OPTIMIZE", data_change=False)
    table = LakePath.of(str(tmp_path / "ids"))
    assert applied.data_changes(table, 0, 2) == 0
    _commit(log, 3, "WRITE")
    assert applied.data_changes(table, 0, 3) == 1
