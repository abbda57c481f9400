"""What a job's Spark checkpoint says about how far it got."""

from __future__ import annotations

import json
from pathlib import Path

from streaming_jobs.positions import Offsets


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
