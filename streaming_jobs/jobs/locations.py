"""Where a job's tables and checkpoint are now: its file's defaults, or the location a replay or rewind chose.

A replay rebuilds into a new table with a new checkpoint, and a rewind starts a new checkpoint at earlier
offsets; neither edits Spark's checkpoint files. Each writes the job's location pointer,
`<lake>/_jobs/NAME.location.json`, in one atomic write (a rename, or one PUT on an object store): the
runner, `jobs status`, `jobs optimize` and backfills all read it, so the switch is all or nothing. A new
checkpoint carries the offsets its stream starts from (Spark honours `startingOffsets` only for a checkpoint
it has never written).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs.spec import DEAD_LETTER_SUFFIX, EVENT_IDS_SUFFIX, JobSpec
from streaming_jobs.lake.paths import LakePath


@dataclass(frozen=True)
class Location:
    """A job's table (its dead letters beside it), its checkpoint, and where a new checkpoint starts."""

    table: LakePath
    checkpoint: LakePath
    starting_offsets: dict[str, dict[str, int]] | None = field(default=None, compare=False)

    @property
    def dead_letters(self) -> LakePath:
        return self.table.with_name(self.table.name + DEAD_LETTER_SUFFIX)

    @property
    def event_ids(self) -> LakePath:
        """Where a job whose table does not keep every event id records them (see `sinks.drop_resent`)."""
        return self.table.with_name(self.table.name + EVENT_IDS_SUFFIX)

    def to_json(self) -> str:
        return json.dumps(
            {"table": str(self.table), "checkpoint": str(self.checkpoint), "starting_offsets": self.starting_offsets},
            indent=2,
        )


def pointer(lake: LakePath, name: str) -> LakePath:
    """The file that says where job `name` is, once a replay or a rewind moved it."""
    return lake / "_jobs" / f"{name}.location.json"


def default(spec: JobSpec, lake: LakePath) -> Location:
    """Where the job's file puts it."""
    return Location(spec.table_path(lake), spec.checkpoint_path(lake))


def current(spec: JobSpec, lake: LakePath) -> Location:
    """The job's location now: the pointer if a replay or rewind wrote one, else the file's default."""
    path = pointer(lake, spec.name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return default(spec, lake)
    except (OSError, ValueError) as exc:
        raise StreamingError(
            f"{path}: the job's location pointer is unreadable ({exc}); restore it, or delete it to go back to "
            f"the table and checkpoint in the job's file"
        ) from exc
    try:
        return Location(
            LakePath.of(data["table"], lake.access),
            LakePath.of(data["checkpoint"], lake.access),
            data.get("starting_offsets"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StreamingError(
            f"{path}: the job's location pointer is unreadable ({exc}); restore it, or delete it to go back to "
            f"the table and checkpoint in the job's file"
        ) from exc


def switch(spec: JobSpec, lake: LakePath, location: Location) -> None:
    """Point the job at `location` in one write: a rename on a local disk, one PUT on an object store."""
    pointer(lake, spec.name).write_text(location.to_json())


def new_checkpoint(spec: JobSpec, lake: LakePath, purpose: str) -> LakePath:
    """A checkpoint folder no run has used: `<lake>/_checkpoints/NAME@<purpose>-<UTC time>`."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return lake / "_checkpoints" / f"{spec.name}@{purpose}-{stamp}"
