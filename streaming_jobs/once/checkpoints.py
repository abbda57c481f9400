"""What a job's Spark checkpoint says about how far it got."""

from __future__ import annotations

import json
import time
from typing import Any

from streaming_jobs.errors import StreamingError
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import Offsets

# What a running job writes into its checkpoint folder for `cdcpipe jobs status` (Spark's own files aside).
PROGRESS_FILE = "cdcpipe_progress.json"


def batch_end(checkpoint: LakePath, batch_id: int) -> Offsets | None:
    """The offsets batch `batch_id` reads up to (exclusive), as planned in `offsets/N`; None if not planned.

    Spark writes `offsets/N` when it plans batch N and `commits/N` once the batch's sink succeeded; the
    offsets file holds "v1", the batch metadata, then one JSON object per source: {topic: {partition: offset}}.
    """
    try:
        text = (checkpoint / "offsets" / str(batch_id)).read_text()
    except FileNotFoundError:
        return None
    reached: Offsets = {}
    for line in text.splitlines()[2:]:
        for topic, partitions in json.loads(line).items():
            for partition, offset in partitions.items():
                reached[(topic, int(partition))] = int(offset)
    return reached


def first_batch_start(checkpoint: LakePath) -> Offsets | None:
    """The offsets a query's first batch reads from, as its Kafka source resolved them; None if not written yet.

    Spark's Kafka source writes them to `sources/<n>/0` (a NUL byte, "v1", then {topic: {partition: offset}},
    earliest and latest already turned into offsets) before it plans batch 0, and starts batch 0 there. None
    too when a source's file is missing or not in that form (then the batch's records say where it starts).
    """
    folder = checkpoint / "sources"
    start: Offsets = {}
    for source in folder.names():
        try:
            lines = (folder / source / "0").read_text().lstrip("\0").splitlines()
        except FileNotFoundError:
            return None
        if len(lines) != 2 or lines[0] != "v1":
            return None
        try:
            found = json.loads(lines[1])
            for topic, partitions in found.items():
                for partition, offset in partitions.items():
                    start[(topic, int(partition))] = int(offset)
        except (ValueError, AttributeError):
            return None
    return start or None


def clear_unfinished_writes(checkpoint: LakePath) -> list[str]:
    """Delete what a killed query left half-written in `offsets/` and `commits/`; returns their names.

    Spark writes each file as `.N.<uuid>.tmp` (with Hadoop's `..N.<uuid>.tmp.crc`) and renames it once whole:
    such a file was never part of the checkpoint, and nothing reads it. But a kill before the rename of
    `offsets/0` leaves the folder not empty, and Spark 4 then refuses to start the query at batch 0
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), for good.
    """
    cleared = []
    for folder in ("offsets", "commits"):
        for name in (checkpoint / folder).names("."):
            if name.endswith((".tmp", ".tmp.crc")):
                (checkpoint / folder / name).delete()
                cleared.append(f"{folder}/{name}")
    return cleared


def committed_offsets(checkpoint: LakePath) -> Offsets:
    """The offsets the last *committed* batch reached, per (topic, partition); a planned batch does not count."""
    commits = [int(n) for n in (checkpoint / "commits").names() if n.isdigit()]
    return (batch_end(checkpoint, max(commits)) or {}) if commits else {}


def rendered_progress(progress: Any) -> dict[str, Any] | None:
    """Spark's progress report as a dict (pyspark 4 hands back an object whose .json is Spark's rendering)."""
    if progress is None:
        return None
    found: dict[str, Any] = json.loads(progress.json) if hasattr(progress, "json") else dict(progress)
    return found


def write_progress(
    checkpoint: LakePath,
    progress: dict[str, Any] | None,
    counts: dict[str, int],
    *,
    running: bool,
    batch: dict[str, Any] | None = None,
    error: str | None = None,
) -> None:
    """Replace `<checkpoint>/cdcpipe_progress.json` with the query's latest progress (what `status` reads).

    `progress`: Spark's report rendered as a dict (`rendered_progress`). `batch`: where the last batch's
    time went, by step (streaming_jobs.phases). `error`: what the query stopped on, if it did.
    """
    record: dict[str, Any] = {"running": running, "updated_at": time.time(), **counts, "progress": progress}
    if batch:
        record["batch_steps"] = batch
    if error:
        record["error"] = error
    (checkpoint / PROGRESS_FILE).write_text(json.dumps(record, default=str))


def read_progress(checkpoint: LakePath, attempts: int = 10) -> dict[str, Any]:
    """What `write_progress` last wrote; empty when the job never wrote it.

    An object store may serve a file while it is being replaced, part old and part new (the local stack's
    s3proxy does, on its file-system backend): such a read is not JSON (not even UTF-8 at times), and is read again.
    """
    path = checkpoint / PROGRESS_FILE
    for attempt in range(attempts):
        try:
            record: dict[str, Any] = json.loads(path.read_text())
            return record
        except FileNotFoundError:
            return {}
        except ValueError:  # not JSON, or not even text
            if attempt == attempts - 1:
                raise StreamingError(
                    f"{path.url} is not JSON in {attempts} reads: the job rewrites it after each batch, so it should "
                    "be whole in the next; if it stays broken, delete it (the running job writes it again)"
                ) from None
            time.sleep(0.05)
    return {}
