"""A process's output into its log file, kept to a size: past it, the file is renamed `.1` (`.1` to `.2`, ...).

    python -m ground.log_pump LOG_FILE MAX_BYTES KEEP   (the output on standard input)

`TrackedProcess` starts one beside each service and job: the service writes into a pipe, this writes the file.
A service's own log settings cannot do it for all (Postgres, Prometheus, s3proxy and the Python processes
write to standard output); a rename under a process that holds the file open would not either, as it
goes on writing into the renamed file. At most KEEP + 1 files of at most MAX_BYTES (plus one read's worth)
are kept. It ends when the last writer closes the pipe (the service and any child that inherited it).
Standard library only: it starts beside every process, and must start fast and small.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

CHUNK = 64 * 1024


def rotated(path: Path, keep: int) -> None:
    """`path` renamed `path.1`, each `path.N` renamed `path.N+1`; the one past `keep` is removed."""
    path.with_name(f"{path.name}.{keep}").unlink(missing_ok=True)
    for n in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            older.rename(path.with_name(f"{path.name}.{n + 1}"))
    if keep > 0:
        path.rename(path.with_name(f"{path.name}.1"))
    else:
        path.unlink(missing_ok=True)


def _open(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)  # a log may hold a secret a service printed
    return fd


def pump(source: int, path: Path, max_bytes: int, keep: int) -> None:
    """Copy `source` into `path` until its end; a read that finds `path` at `max_bytes` or past rotates it first.

    Rotated before a write, never after: the file a reader opens holds the newest lines, never nothing.
    """
    fd = _open(path)
    size = os.fstat(fd).st_size
    try:
        while chunk := os.read(source, CHUNK):
            if size >= max_bytes:
                os.close(fd)
                rotated(path, keep)
                fd = _open(path)
                size = 0
            os.write(fd, chunk)
            size += len(chunk)
    finally:
        os.close(fd)


def main() -> None:
    """The command line: LOG_FILE MAX_BYTES KEEP, the output on standard input."""
    # The service's stop signal reaches its own session only; a terminal's ^C none: the pump ends at its input's end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path, max_bytes, keep = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    pump(sys.stdin.fileno(), path, max_bytes, keep)


if __name__ == "__main__":
    main()
