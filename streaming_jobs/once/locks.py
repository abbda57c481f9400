"""One writer at a time per Delta table: the streaming job, a backfill, a replay's catch-up, `jobs optimize`.

Each holds the table's lock for the whole read-check-write of a batch (reading which offsets the table
already holds, then writing the rest), so two writers never both decide to apply the same records, and
Delta never sees two of our commits race (no ConcurrentAppendException to retry or to show a user). It is an
flock on a file beside the table: right for a lake on a local or shared POSIX file system, which is what
the stack runs; an object-store lake would need a lock service instead.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


def lock_file(table: Path) -> Path:
    """The lock of a table: a hidden file beside it (inside it would be Delta's folder)."""
    return table.with_name(f".{table.name}.cdcpipe-lock")


@contextmanager
def table_lock(table: Path, holder: str) -> Iterator[None]:
    """Hold the table's writer lock; waits (saying for whom) while another writer has it."""
    path = lock_file(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            log.info("waiting for %s's writer lock, held by %s", table, handle.read().strip() or "another writer")
            started = time.monotonic()
            fcntl.flock(handle, fcntl.LOCK_EX)
            log.info("got %s's writer lock after %.1f s", table, time.monotonic() - started)
        try:
            handle.truncate(0)
            handle.write(f"{holder} (pid {os.getpid()})\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
