"""What a job's Spark checkpoint says about how far it got."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from streaming_jobs.ranges.positions import Offsets

# What a running job writes into its checkpoint folder for `cdcpipe jobs status` (Spark's own files aside).
PROGRESS_FILE = "cdcpipe_progress.json"


def batch_end(checkpoint: Path, batch_id: int) -> Offsets | None:
    """The offsets batch `batch_id` reads up to (exclusive), as planned in `offsets/N`; None if not planned.

    Spark writes `offsets/N` when it plans batch N and `commits/N` once the batch's sink succeeded; the
    offsets file holds "v1", the batch metadata, then one JSON object per source: {topic: {partition: offset}}.
    """
    path = checkpoint / "offsets" / str(batch_id)
    if not path.exists():
        return None
    reached: Offsets = {}
    for line in path.read_text().splitlines()[2:]:
        for topic, partitions in json.loads(line).items():
            for partition, offset in partitions.items():
                reached[(topic, int(partition))] = int(offset)
    return reached


def committed_offsets(checkpoint: Path) -> Offsets:
    """The offsets the last *committed* batch reached, per (topic, partition); a planned batch does not count."""
    commits_dir = checkpoint / "commits"
    commits = [int(p.name) for p in commits_dir.glob("[0-9]*")] if commits_dir.is_dir() else []
    return (batch_end(checkpoint, max(commits)) or {}) if commits else {}


def write_progress(checkpoint: Path, progress: Any, counts: dict[str, int], *, running: bool) -> None:
    """Replace `<checkpoint>/cdcpipe_progress.json` with the query's latest progress (what `status` reads)."""
    # pyspark 4 hands back a StreamingQueryProgress (its .json is Spark's own rendering) where 3.x gave a dict.
    rendered = json.loads(progress.json) if hasattr(progress, "json") else progress
    record = {"running": running, "updated_at": time.time(), **counts, "progress": rendered}
    tmp = checkpoint / (PROGRESS_FILE + ".tmp")
    tmp.write_text(json.dumps(record, default=str))
    tmp.replace(checkpoint / PROGRESS_FILE)
