"""Where a job's tables and checkpoint are now: its file's defaults, or the location a replay or rewind chose.

A replay rebuilds into a new table with a new checkpoint, and a rewind starts a new checkpoint at earlier
offsets; neither edits Spark's checkpoint files. Each writes the job's location pointer,
`<lake>/_jobs/NAME.location.json`, in one atomic rename: the runner, `jobs status`, `jobs optimize` and
backfills all read it, so the switch is all or nothing. A new checkpoint carries the offsets its stream
starts from (Spark honours `startingOffsets` only for a checkpoint it has never written).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs.spec import DEAD_LETTER_SUFFIX, EVENT_IDS_SUFFIX, JobSpec


@dataclass(frozen=True)
class Location:
    """A job's table (its dead letters beside it), its checkpoint, and where a new checkpoint starts."""

    table: Path
    checkpoint: Path
    starting_offsets: dict[str, dict[str, int]] | None = field(default=None, compare=False)

    @property
    def dead_letters(self) -> Path:
        return self.table.with_name(self.table.name + DEAD_LETTER_SUFFIX)

    @property
    def event_ids(self) -> Path:
        """Where a job whose table does not keep every event id records them (see `sinks.drop_resent`)."""
        return self.table.with_name(self.table.name + EVENT_IDS_SUFFIX)

    def to_json(self) -> str:
        return json.dumps(
            {"table": str(self.table), "checkpoint": str(self.checkpoint), "starting_offsets": self.starting_offsets},
            indent=2,
        )


def pointer(lake: Path, name: str) -> Path:
    """The file that says where job `name` is, once a replay or a rewind moved it."""
    return lake / "_jobs" / f"{name}.location.json"


def default(spec: JobSpec, lake: Path) -> Location:
    """Where the job's file puts it."""
    return Location(spec.table_path(lake), spec.checkpoint_path(lake))


def current(spec: JobSpec, lake: Path) -> Location:
    """The job's location now: the pointer if a replay or rewind wrote one, else the file's default."""
    path = pointer(lake, spec.name)
    if not path.exists():
        return default(spec, lake)
    try:
        data = json.loads(path.read_text())
        return Location(Path(data["table"]), Path(data["checkpoint"]), data.get("starting_offsets"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StreamingError(
            f"{path}: the job's location pointer is unreadable ({exc}); restore it, or delete it to go back to "
            f"the table and checkpoint in the job's file"
        ) from exc


def switch(spec: JobSpec, lake: Path, location: Location) -> None:
    """Point the job at `location` in one atomic rename."""
    path = pointer(lake, spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(location.to_json())
    os.replace(tmp, path)


def new_checkpoint(spec: JobSpec, lake: Path, purpose: str) -> Path:
    """A checkpoint folder no run has used: `<lake>/_checkpoints/NAME@<purpose>-<UTC time>`."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return lake / "_checkpoints" / f"{spec.name}@{purpose}-{stamp}"
