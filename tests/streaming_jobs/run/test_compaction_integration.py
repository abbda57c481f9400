"""A running job compacts its tables itself: the event log beside its micro-batches, a MERGEd table between them.

On the object store (the production lake) and on a local folder: a compaction beside the batches rests on the
lake's own way of making one commit at a time (Delta's S3 log store serialises a JVM's commits per table; a
local file system's rename is atomic).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming_jobs.config import JobsSettings
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied
from tests.support.jobs import Event, make_job, opened, read_delta, send
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def commits(table: LakePath) -> list[tuple[str, str | None]]:
    """(operation, userMetadata) of each commit of the table, oldest first."""
    log = table / "_delta_log"
    out = []
    for name in sorted(n for n in log.names() if n.endswith(".json")):
        actions = [json.loads(line) for line in (log / name).read_text().splitlines() if line]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        out.append((str(info["operation"]), info.get("userMetadata")))
    return out


def added_files(table: LakePath) -> set[str]:
    """Every data file a commit of the table ever added."""
    log = table / "_delta_log"
    added = set()
    for name in (n for n in log.names() if n.endswith(".json")):
        for line in (log / name).read_text().splitlines():
            action = json.loads(line) if line else {}
            if "add" in action:
                added.add(action["add"]["path"])
    return added


def data_files(table: LakePath) -> list[str]:
    """The data files in an unpartitioned table's folder, on either lake."""
    return [name for name in table.names() if name.endswith(".parquet")]


# A MERGEd table's compaction is in line, the same on either lake: one is enough, the object store, where its upkeep
# (the trim, the LITE vacuum) runs in production.
CASES = [("event_log", "s3"), ("event_log", "local"), ("latest_state", "s3")]


@pytest.mark.parametrize(("kind", "where"), CASES, ids=[f"{kind}-{where}" for kind, where in CASES])
def test_a_job_compacts_its_tables_as_it_runs_and_every_event_stays_applied_once(
    stack: Stack, topic: str, tmp_path: Path, kind: str, where: str
) -> None:
    events: list[Event] = [(f"a-{i}", "AccountOpened", opened(f"a-{i}"), None) for i in range(24)]
    ids = send(stack, topic, events)
    # Three records a batch, a compaction every second batch: eight batches, compactions at 2, 4 and 6.
    lake = stack.s3_lake() if where == "s3" else str(tmp_path / "lake")
    # A MERGE kind keeps resent ids 4 records a partition back: older ones are trimmed at each compaction, and
    # its tables are vacuumed at the first one (never vacuumed before; then not for an hour), keeping no old file.
    upkeep = kind == "latest_state"
    job = make_job(
        stack,
        tmp_path,
        kind,
        [topic],
        lake=lake,
        max_offsets_per_trigger=3,
        optimize_every=2,
        dedupe_lookback_records=4 if upkeep else 100_000,
        vacuum_every_hours=1 if upkeep else 0,
        vacuum_retain_hours=0,
    )
    ran = job.run()
    root = JobsSettings.load(lake=lake, lease_pg_dsn=stack.env["CDCPIPE_LEASE_PG_DSN"]).lake_root()
    table = root / "out"
    operations = [op for op, _ in commits(table)]
    assert "OPTIMIZE" in operations, operations
    assert operations.count("WRITE") + operations.count("MERGE") == 8, operations
    rows = job.table()
    assert sorted(str(r["event_id"]) for r in rows) == sorted(ids), "a compaction lost or doubled rows"
    # The compactions recorded no offsets of their own (one beside the batches must not: more may have
    # come meanwhile); the table's newest offsets still say it holds every record.
    held = applied.read(table)
    assert held.covers({(topic, 0): (0, 24)}), held
    if kind == "event_log":
        assert all(meta is None for op, meta in commits(table) if op == "OPTIMIZE")
    else:  # a MERGEd table is compacted between batches, carrying the offsets forward
        assert all('"applied"' in (meta or "") for op, meta in commits(table) if op == "OPTIMIZE")
        assert "OPTIMIZE" in [op for op, _ in commits(root / "out_event_ids")], ran.stderr[-5000:]
        # Trimmed: the ids of the last offsets are all there, the look-back at least; the older ones went in
        # commits marked so (a job's memory of ids steps over them).
        offsets = sorted(int(str(r["kafka_offset"])) for r in read_delta(stack, str(root / "out_event_ids")))
        assert offsets == list(range(offsets[0], 24)), offsets
        assert 0 < offsets[0] <= 24 - 4, offsets
        assert "DELETE" in [op for op, _ in commits(root / "out_event_ids")]
        # Vacuumed: files a MERGE or a compaction replaced were deleted (without, every file ever added stays).
        for name in ("out", "out_event_ids"):
            assert len(data_files(root / name)) < len(added_files(root / name)), name
    job.run()  # nothing new: nothing applied again
    assert sorted(str(r["event_id"]) for r in job.table()) == sorted(ids)
