"""Processes are tracked by pid and start time, and stopped by that pid only."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ground.processes import TrackedProcess, running


def tracked(tmp_path: Path, stop_signal: signal.Signals = signal.SIGTERM) -> TrackedProcess:
    return TrackedProcess("sleeper", tmp_path / "run" / "sleeper.pid", tmp_path / "logs" / "sleeper.log", stop_signal)


def test_start_records_the_pid_and_stop_ends_it(tmp_path: Path) -> None:
    process = tracked(tmp_path)
    pid = process.start(["sleep", "60"], env=dict(os.environ), cwd=tmp_path)
    assert process.pid() == pid
    assert process.stop(timeout_s=5) is True
    assert process.pid() is None
    assert not Path(f"/proc/{pid}").exists()
    assert not process.pid_file.exists()


def test_a_reused_pid_is_not_ours(tmp_path: Path) -> None:
    """A pid file whose pid now belongs to another process (other start time) is ignored, never signalled."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        process = tracked(tmp_path)
        process.pid_file.parent.mkdir(parents=True)
        process.pid_file.write_text(f"{bystander.pid} 1\n")
        assert process.pid() is None
        assert process.stop(timeout_s=1) is False
        assert bystander.poll() is None, "stop() signalled a process that is not ours"
    finally:
        bystander.kill()
        bystander.wait()


def test_a_process_that_ignores_the_stop_signal_is_killed(tmp_path: Path) -> None:
    process = tracked(tmp_path)
    process.start(["bash", "-c", "trap '' TERM; sleep 60"], env=dict(os.environ), cwd=tmp_path)
    assert process.stop(timeout_s=0.5) is True
    assert process.pid() is None


def test_log_tail_shows_the_last_lines(tmp_path: Path) -> None:
    process = tracked(tmp_path)
    process.start(["bash", "-c", "for i in $(seq 1 50); do echo line $i; done"], env=dict(os.environ), cwd=tmp_path)
    while not process.exited():
        pass
    assert process.log_tail(3) == ["line 48", "line 49", "line 50"]


def test_a_killed_process_not_yet_reaped_is_not_running() -> None:
    """A zombie answers kill(pid, 0); where PID 1 reaps nothing, a killed driver stays one (seen in make test)."""
    child = subprocess.Popen(["sleep", "60"])
    assert running(child.pid)
    child.kill()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)  # killed, and not reaped: Popen reaps only in wait/poll
    assert not running(child.pid)
    child.wait()
    assert not running(child.pid)


def test_a_log_is_kept_to_its_size_in_a_few_files_and_the_newest_lines_stay(tmp_path: Path) -> None:
    """A process's output past the log's size moves the file to `.1`, `.1` to `.2`; no more than `keep` old ones."""
    process = TrackedProcess(
        "talker", tmp_path / "run" / "talker.pid", tmp_path / "logs" / "talker.log", log_max_bytes=10_000, log_keep=2
    )
    process.start(
        ["python3", "-c", "import sys\nfor i in range(20000): print(f'line {i:05d}', flush=i % 100 == 0)"],
        env=dict(os.environ),
        cwd=tmp_path,
    )
    while not process.exited():
        time.sleep(0.05)
    logs = tmp_path / "logs"
    assert process.log_tail(1) == ["line 19999"], "the tail of an ended process waits for its pump to write the rest"
    assert sorted(p.name for p in logs.iterdir()) == ["talker.log", "talker.log.1", "talker.log.2"]
    sizes = [(logs / name).stat().st_size for name in ("talker.log.1", "talker.log.2")]
    assert all(10_000 <= size < 10_000 + 64 * 1024 for size in sizes), sizes
    kept = "".join((logs / name).read_text() for name in ("talker.log.2", "talker.log.1", "talker.log"))
    numbers = [int(line.split()[1]) for line in kept.splitlines() if line.startswith("line ")]
    assert numbers == list(range(numbers[0], 20000)), "the kept lines are the newest, in order, none lost between"
    assert numbers[0] > 0, "older lines were dropped"
    assert all(oct((logs / p).stat().st_mode & 0o777) == "0o600" for p in ("talker.log", "talker.log.1"))
