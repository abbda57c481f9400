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
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from cdcpipe.common.private_files import open_private_log

# Popen objects of the services this process started, kept so that they are reaped (and not reported
# as "still running" when garbage-collected) while this process lives; keyed by pid.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}

# The line each start of a process writes into its log, before the process says anything.
RUN_MARK = "==== "


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat[stat.rindex(")") + 2 :].split()
    state, start = fields[0], fields[19]
    return None if state == "Z" else start


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

    def _recorded(self) -> tuple[int, str] | None:
        try:
            pid_text, start = self.pid_file.read_text().split()
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
            log.flush()
            proc = subprocess.Popen(  # noqa: S603 - the command is built by the stack, not from input
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                user=user,
                group=user,
                extra_groups=[] if user else None,
                umask=umask,
            )
        _CHILDREN[proc.pid] = proc
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
        self.pid_file.unlink(missing_ok=True)
        return True

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

    def log_tail(self, lines: int = 15) -> list[str]:
        try:
            with self.log_file.open(errors="replace") as f:
                return [line.rstrip("\n") for line in deque(f, maxlen=lines)]
        except FileNotFoundError:
            return []


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0
