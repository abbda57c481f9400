"""Processes the stack starts: started detached, recorded by pid, stopped by that pid and no other.

A pid file holds the pid and the process's start time (field 22 of /proc/PID/stat). A pid counts as
ours only while a process with that pid and that start time exists, so a pid reused by an unrelated
process after a reboot or a crash is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ground.private_files import open_private_log

# Popen objects of the services this process started, kept so that they are reaped (and not reported
# as "still running" when garbage-collected) while this process lives; keyed by pid.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}

# The line each start of a process writes into its log, before the process says anything.
RUN_MARK = "==== "

# A log past this size is renamed `.1` (ground.log_pump); this many such files are kept besides it.
LOG_MAX_BYTES = 64 * 1024 * 1024
LOG_KEEP = 4
# How much of a log's end `log_tail` reads per line asked for: enough for a stack trace's, never the whole file.
TAIL_BYTES_PER_LINE = 1024


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat[stat.rindex(")") + 2 :].split()
    state, start = fields[0], fields[19]
    return None if state == "Z" else start


def as_user(user: str | None) -> dict[str, Any]:
    """`subprocess` arguments that run a child as `user` (its group, no supplementary groups); None: as this process."""
    return {"user": user, "group": user, "extra_groups": [] if user else None}


def running(pid: int) -> bool:
    """Whether process `pid` runs: it exists and is not a zombie (killed, not yet reaped by its parent).

    A zombie still answers `kill(pid, 0)`; where PID 1 reaps nothing (some containers) it stays one for good.
    A process whose state this user may not read counts as running.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


@dataclass(frozen=True)
class TrackedProcess:
    """One long-running service process of the stack."""

    name: str
    pid_file: Path
    log_file: Path
    stop_signal: signal.Signals = signal.SIGTERM
    log_max_bytes: int = LOG_MAX_BYTES
    log_keep: int = LOG_KEEP

    @property
    def pump_file(self) -> Path:
        """Where the pid of the process's log pump is kept (beside its pid file, in the same form)."""
        return self.pid_file.with_name(f"{self.pid_file.name}.pump")

    def _recorded(self, path: Path | None = None) -> tuple[int, str] | None:
        try:
            pid_text, start = (path or self.pid_file).read_text().split()
            return int(pid_text), start
        except (OSError, ValueError):  # none, unreadable, a folder, or not what start() writes: no process of ours
            return None

    def pid(self) -> int | None:
        """The pid if our process is alive, else None (a stale pid file is ignored)."""
        recorded = self._recorded()
        if recorded is None:
            return None
        pid, start = recorded
        return pid if _start_time(pid) == start else None

    def start(
        self,
        command: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        user: str | None = None,
        umask: int = -1,
    ) -> int:
        """Start detached (own session, so it outlives the CLI and no terminal signal reaches it).

        `umask` (-1: the caller's) is the mode mask of every file the process makes.
        """
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(open_private_log(self.log_file), "ab") as log:
            log.write(f"\n{RUN_MARK}{time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode())
        # The process writes into a pipe; the log pump (its own session, as the starter) writes and rotates the file.
        source, sink = os.pipe()
        try:
            pump = subprocess.Popen(  # noqa: S603 - this interpreter, a module of ours, numbers and a path
                [
                    sys.executable,
                    "-m",
                    "ground.log_pump",
                    str(self.log_file),
                    str(self.log_max_bytes),
                    str(self.log_keep),
                ],
                stdin=source,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "")},
                cwd="/",
                start_new_session=True,
            )
            _reap()
            _CHILDREN[pump.pid] = pump
            proc = subprocess.Popen(  # noqa: S603 - the command is built by the stack, not from input
                command,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                umask=umask,
                **as_user(user),
            )
        finally:
            os.close(source)
            os.close(sink)
        _CHILDREN[proc.pid] = proc
        self.pump_file.write_text(f"{pump.pid} {_start_time(pump.pid)}\n")
        start = _start_time(proc.pid)
        self.pid_file.write_text(f"{proc.pid} {start}\n")
        return proc.pid

    def exited(self) -> bool:
        """True once the started process is gone (reaps it if it was our child)."""
        recorded = self._recorded()
        child = _CHILDREN.get(recorded[0]) if recorded else None
        if child is not None and child.poll() is not None:
            del _CHILDREN[child.pid]  # reaped: no zombie left behind
        return self.pid() is None

    def stop(self, timeout_s: float = 60.0) -> bool:
        """Ask the process to stop; kill it if it has not after timeout_s. True if it was running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            self.pump_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, self.stop_signal)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.exited():
            time.sleep(0.1)
        if not self.exited():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            while not self.exited():
                time.sleep(0.05)
        self._drained(5.0)
        self.pid_file.unlink(missing_ok=True)
        self.pump_file.unlink(missing_ok=True)
        return True

    def _drained(self, timeout_s: float) -> None:
        """Wait (up to `timeout_s`) for the log pump of an ended process to write what it had left, and end."""
        pump = self._recorded(self.pump_file)
        deadline = time.monotonic() + timeout_s
        while pump is not None and time.monotonic() < deadline and _start_time(pump[0]) == pump[1]:
            _reap()
            time.sleep(0.02)

    def rss_bytes(self) -> int | None:
        """Resident memory of the process and its children in the same session (Postgres backends)."""
        pid = self.pid()
        if pid is None:
            return None
        total = 0
        for status in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = status.read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
                continue
            if int(fields[3]) == pid:  # the session id; ours started a new session, so sid == pid
                total += _rss(int(status.parent.name))
        return total

    def log_tail(self, lines: int = 15, drain_s: float = 5.0) -> list[str]:
        """The log's last lines; once the process has ended, after its pump wrote what was left (up to `drain_s`)."""
        if self.pid() is None:
            self._drained(drain_s)
        most = lines * TAIL_BYTES_PER_LINE
        text = _last_bytes(self.log_file, most)
        if text.count(b"\n") <= lines and len(text) < most:  # just rotated: the lines before are in `.1`
            text = _last_bytes(self.log_file.with_name(f"{self.log_file.name}.1"), most) + text
        return [line.decode(errors="replace") for line in text.splitlines()[-lines:]]


def _last_bytes(path: Path, size: int) -> bytes:
    """The last `size` bytes of `path` (empty when there is no such file)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read()
    except FileNotFoundError:
        return b""


def _reap() -> None:
    """Forget the children that have ended (a log pump ends after its process), reaping each."""
    for pid, child in list(_CHILDREN.items()):
        if child.poll() is not None:
            del _CHILDREN[pid]


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0
