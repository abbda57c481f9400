"""What a job's Spark checkpoint says about how far it got."""

from __future__ import annotations

import json
from pathlib import Path


def committed_offsets(checkpoint: Path) -> dict[tuple[str, int], int]:
    """The offsets the last *committed* batch reached, per (topic, partition); a planned batch does not count.

    Spark writes `offsets/N` when it plans batch N and `commits/N` once the batch's sink succeeded; the
    offsets file holds "v1", the batch metadata, then one JSON object per source: {topic: {partition: offset}}.
    """
    commits_dir = checkpoint / "commits"
    commits = [int(p.name) for p in commits_dir.glob("[0-9]*")] if commits_dir.is_dir() else []
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    reached: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        for topic, partitions in json.loads(line).items():
            for partition, offset in partitions.items():
                reached[(topic, int(partition))] = int(offset)
    return reached
