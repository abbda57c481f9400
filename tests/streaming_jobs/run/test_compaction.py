"""When a streaming job compacts: every `optimize_every` batches, never just before a Delta checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streaming_jobs.jobs.locations import Location
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from streaming_jobs.run import compaction
from streaming_jobs.run.compaction import CHECKPOINT_MARGIN, Compactor, checkpoint_near
from streaming_jobs.spark_session import CHECKPOINT_INTERVAL


def _spec(kind: str, **fields: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "kind": kind, "topics": ["t"], "table": "out", **fields})


def test_a_checkpoint_is_near_within_the_margin_before_it_and_not_after_it() -> None:
    assert (CHECKPOINT_INTERVAL, CHECKPOINT_MARGIN) == (100, 20)
    assert [v for v in range(0, 201) if checkpoint_near(v)] == [*range(80, 100), *range(180, 200)]
    assert not checkpoint_near(-1)  # no table yet


@pytest.mark.parametrize("kind", ["event_log", "latest_state"])
def test_a_due_compaction_waits_for_the_checkpoints_batch_then_comes_every_n_batches(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = Location(LakePath.of(str(tmp_path / "out")), LakePath.of(str(tmp_path / "cp")))
    version = {"now": -1}
    compacted: list[tuple[int, str, bool]] = []  # (the table's version then, which table, beside the batches)
    monkeypatch.setattr(applied, "newest_version", lambda table: version["now"])
    monkeypatch.setattr(
        compaction,
        "compact",
        lambda spark, table, *, lease_of, carry_offsets, beside=False: compacted.append(
            (version["now"], table.name, beside)
        ),
    )
    trimmed: list[int] = []  # the table's version at each trim of the event ids

    def trim(*_: object) -> int:
        trimmed.append(version["now"])
        return 1

    monkeypatch.setattr(compaction, "trim_event_ids", trim)
    compactor = Compactor(None, where, _spec(kind))

    def beside() -> None:  # the thread's work, without Spark's scheduler pool
        for table in compactor.beside:
            compaction.compact(None, table, lease_of=where.table, carry_offsets=False, beside=True)

    compactor._beside = beside  # type: ignore[method-assign]
    # A job (re)started at batch 1000, its table then at version 50: the first compaction comes `every`
    # batches after the start (batch 1100, version 150: no checkpoint near), the next 100 batches later.
    for batch in range(1000, 1260):
        version["now"] = batch - 1000 + 50
        compactor.after_batch(batch)
        compactor.close()
    assert sorted({v for v, _, _ in compacted}) == [150, 250], compacted
    # A MERGE kind trims its event ids in line, just before each compaction; an event log has none.
    assert trimmed == ([] if kind == "event_log" else [150, 250])
    # A new job: batch N commits version N - 1. Due at batch 100, whose commit was version 99: the next commit
    # writes the checkpoint, so the compaction waits for batch 101 (version 100, checkpoint written), then
    # comes 100 batches later.
    again = Compactor(None, where, _spec(kind))
    again._beside = beside  # type: ignore[method-assign]
    compacted.clear()
    for batch in range(0, 205):
        version["now"] = batch - 1
        again.after_batch(batch)
        again.close()
    assert sorted({v for v, _, _ in compacted}) == [100, 200], compacted
    expected_tables = {"out", "out_dead_letters"} | ({"out_event_ids"} if kind != "event_log" else set())
    assert {name for _, name, _ in compacted} == expected_tables
    # The event log compacts all its tables beside the batches; a MERGE kind its own table in line.
    assert all(beside == (name != "out" or kind == "event_log") for _, name, beside in compacted)


def test_a_vacuum_is_due_every_so_many_hours_counted_across_restarts(tmp_path: Path) -> None:
    where = Location(LakePath.of(str(tmp_path / "out")), LakePath.of(str(tmp_path / "cp")))
    (tmp_path / "cp").mkdir()
    assert Compactor(None, where, _spec("latest_state"))._vacuum_due(), "never vacuumed: due"
    (tmp_path / "cp" / compaction.VACUUMED_AT).write_text(str(time.time() - 3600))
    assert not Compactor(None, where, _spec("latest_state", vacuum_every_hours=2))._vacuum_due()
    assert Compactor(None, where, _spec("latest_state", vacuum_every_hours=0.5))._vacuum_due()
    assert not Compactor(None, where, _spec("latest_state", vacuum_every_hours=0))._vacuum_due(), "0: never"
