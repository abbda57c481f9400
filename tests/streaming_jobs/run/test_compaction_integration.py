"""A running job compacts its tables itself: the event log beside its micro-batches, a MERGEd table between them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from tests.conftest import Stack
from tests.streaming_jobs.helpers import Event, make_job, opened, send

pytestmark = pytest.mark.integration


def commits(table: Path) -> list[tuple[str, str | None]]:
    """(operation, userMetadata) of each commit of the table, oldest first."""
    out = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        out.append((str(info["operation"]), info.get("userMetadata")))
    return out


@pytest.mark.parametrize("kind", ["event_log", "latest_state"])
def test_a_job_compacts_its_tables_as_it_runs_and_every_event_stays_applied_once(
    stack: Stack, topic: str, tmp_path: Path, kind: str
) -> None:
    events: list[Event] = [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(24)]
    ids = send(stack, topic, events)
    # Three records a batch, a compaction every second batch: eight batches, compactions at 2, 4 and 6.
    job = make_job(stack, tmp_path, kind, [topic], max_offsets_per_trigger=3, optimize_every=2)
    job.run()
    table = Path(job.lake) / "out"
    operations = [op for op, _ in commits(table)]
    assert "OPTIMIZE" in operations, operations
    assert operations.count("WRITE") + operations.count("MERGE") == 8, operations
    rows = job.table()
    assert sorted(str(r["event_id"]) for r in rows) == sorted(ids), "a compaction lost or doubled rows"
    # The compactions recorded no offsets of their own (one beside the batches must not: more may have
    # come meanwhile); the table's newest offsets still say it holds every record.
    held = applied.read(LakePath.of(str(table)))
    assert held.covers({(topic, 0): (0, 24)}), held
    if kind == "event_log":
        assert all(meta is None for op, meta in commits(table) if op == "OPTIMIZE")
    else:  # a MERGEd table is compacted between batches, carrying the offsets forward
        assert all('"applied"' in (meta or "") for op, meta in commits(table) if op == "OPTIMIZE")
        assert "OPTIMIZE" in [op for op, _ in commits(Path(job.lake) / "out_event_ids")]
    job.run()  # nothing new: nothing applied again
    assert sorted(str(r["event_id"]) for r in job.table()) == sorted(ids)
