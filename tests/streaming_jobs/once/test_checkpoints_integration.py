"""The progress file `jobs status` reads, on the object store, while the job replaces it."""

from __future__ import annotations

import threading
import time

import pytest

from streaming_jobs.config import JobsSettings
from streaming_jobs.once.checkpoints import read_progress, write_progress
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


def test_status_reads_a_whole_progress_file_while_the_job_replaces_it(stack: Stack) -> None:
    """A reader caught mid-replace once got the end of one version after another (seen in `make test`)."""
    checkpoint = JobsSettings.load(lake=stack.s3_lake()).lake_root() / "_checkpoints" / "job"
    stop = threading.Event()

    def job() -> None:
        batch = 0
        while not stop.is_set():
            # As a running job does: the first file is short (no progress yet), later ones longer.
            progress = {"batchId": batch, "sources": [{"description": "x" * (batch % 7) * 100}]} if batch % 2 else None
            write_progress(checkpoint, progress, {"applied": batch, "dead_letters": 0}, running=True)
            batch += 1

    writer = threading.Thread(target=job, daemon=True)
    write_progress(checkpoint, None, {"applied": 0, "dead_letters": 0}, running=True)
    writer.start()
    reads = 0
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            record = read_progress(checkpoint)
            assert record["running"] is True
            reads += 1
    finally:
        stop.set()
        writer.join()
    assert reads > 50
