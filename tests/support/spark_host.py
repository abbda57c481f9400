"""One Spark driver per test process, shared by the tests' job runs: the runner and the Spark commands, in-process.

A job run of the tests (`Job.run`, `cdcpipe jobs backfill|replay|optimize|rewind|accept-topics`) used to be a
process of its own, and paid a JVM, a SparkContext, and the first Kafka read and Delta write of a cold JVM:
13-15 s on this machine, against about one second warm. The host is a process (`python -m
tests.support.spark_host`) that keeps one SparkSession (local[2], the tests' master) and runs each request's
entry point (`streaming_jobs.run.runner.main`, `streaming_jobs.stack_check.main`, `cdcpipe.cli.main`, or a
bench/<name>.py script) with the request's environment, working folder and arguments, its stdout and stderr (the
JVM's included) captured at the file descriptors.

What the real processes did between runs, the host does after each request: every streaming query stopped,
Spark's cache and Delta's log cache cleared, the session's runtime settings put back as they were, the
contract caches emptied, signal handlers reset. `SparkSession.stop` is the one thing it changes: in the host
it stops the run's queries and leaves the driver up.

A run goes to a real process instead when its Spark session would differ from the host's (another master, a
`CDCPIPE_SPARK_*`, object-store or settings-file value, `--master`), when a run of the same test process is
already in the host, or when no host can start: what is proven of a driver's start and stop stays proven
by `jobs submit`, the chaos soak and the tests that kill jobs, which always run real processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import runpy
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import pytest

# The settings a Spark session is built from (streaming_jobs.spark_session.session_conf): a run whose values
# differ from the host's is given a process of its own.
SESSION_PREFIXES = ("CDCPIPE_SPARK_", "CDCPIPE_S3_", "AWS_")
SESSION_VARIABLES = ("CDCPIPE_HOME", "CDCPIPE_CONFIG")
# The commands that build a Spark session, as `cdcpipe jobs <command>`.
SPARK_COMMANDS = ("backfill", "replay", "optimize", "rewind", "accept-topics")
START_TIMEOUT_S = 180.0
SWITCH = "CDCPIPE_TEST_SPARK_HOST"  # 0: every run a process of its own, as before (to compare, or to debug)
log = logging.getLogger(__name__)


def command(entry: str, argv: list[str]) -> list[str]:
    """What a process of its own runs: `python -m <entry>`, or `python <script>` for a benchmark's script."""
    return [sys.executable, entry, *argv] if entry.endswith(".py") else [sys.executable, "-m", entry, *argv]


def session_key(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(SESSION_PREFIXES) or k in SESSION_VARIABLES}


class SparkHost:
    """The client side: starts the host on first use, sends it runs, falls back to a process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._key: dict[str, str] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._unable = False  # a host that could not start is not tried again: every run a process

    def run(
        self, entry: str, argv: list[str], env: dict[str, str], timeout: float = 600, cwd: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`python -m <entry> <argv>` with `env`: in the host when it can be, else as a process."""
        shared = os.environ.get(SWITCH, "1") != "0"
        began = time.monotonic()
        if shared and "--master" not in argv and self._lock.acquire(blocking=False):
            try:
                if self._ready(env):
                    result = self._send(entry, argv, env, timeout, cwd)
                    log.info("%s %s on the shared driver: %.1f s", entry, " ".join(argv[:2]), time.monotonic() - began)
                    return result
            finally:
                self._lock.release()
        result = subprocess.run(
            command(entry, argv),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=cwd,
            check=False,
        )
        log.info("%s %s in a driver of its own: %.1f s", entry, " ".join(argv[:2]), time.monotonic() - began)
        return result

    def _ready(self, env: dict[str, str]) -> bool:
        if self._conn is None and not self._unable:
            self._start(env)
        return self._conn is not None and self._key == session_key(env)

    def _start(self, env: dict[str, str]) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="cdcpipe-spark-host-")
        address = str(Path(self._folder.name) / "socket")
        authkey = secrets.token_hex(16)
        log = (Path(self._folder.name) / "host.log").open("wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.spark_host", address],
            env={**env, "CDCPIPE_TEST_SPARK_HOST_KEY": authkey},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        # The host listens once its session is up; until then, connecting fails.
        deadline = START_TIMEOUT_S
        waited = 0.0
        while waited < deadline and self._proc.poll() is None:
            try:
                self._conn = Client(address, authkey=authkey.encode())
                break
            except (FileNotFoundError, ConnectionRefusedError):
                threading.Event().wait(0.2)
                waited += 0.2
        if self._conn is None:
            sys.stderr.write(f"the tests' Spark host did not start; every run a process of its own:\n{self._log()}\n")
            self._unable = True
            self._stop(f"did not start within {deadline:.0f}s")
            return
        self._key = session_key(env)

    def _send(
        self, entry: str, argv: list[str], env: dict[str, str], timeout: float, cwd: str | None
    ) -> subprocess.CompletedProcess[str]:
        assert self._conn is not None
        args = command(entry, argv)
        try:
            self._conn.send({"entry": entry, "argv": argv, "env": env, "cwd": cwd or os.getcwd()})
            if not self._conn.poll(timeout):
                self._stop("timed out")
                raise subprocess.TimeoutExpired(args, timeout)
            reply: dict[str, Any] = self._conn.recv()
        except (EOFError, OSError, pickle.PicklingError) as exc:
            log = self._log()
            self._stop("died")
            pytest.fail(f"the tests' Spark host died during {entry} {' '.join(argv)} ({exc}); its log:\n{log}")
        except BaseException:
            self._stop("interrupted")  # a test's timeout, or ^C: the run in the host is abandoned with it
            raise
        return subprocess.CompletedProcess(args, reply["returncode"], reply["stdout"], reply["stderr"])

    def _log(self) -> str:
        if self._folder is None:
            return ""
        path = Path(self._folder.name) / "host.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def _stop(self, why: str) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn, self._key = None, None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(30)
        self._proc = None
        if self._folder is not None and why in ("closed",):
            self._folder.cleanup()
            self._folder = None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send(None)  # the host ends its session and exits
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(30)
        self._stop("closed")


HOST = SparkHost()


def spark_run(
    entry: str, argv: list[str], env: dict[str, str], timeout: float = 600, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Spark entry point (a module's `main`, or a bench/<name>.py script) on this test process's shared driver."""
    return HOST.run(entry, argv, env, timeout, cwd)


def pytest_sessionfinish() -> None:
    HOST.close()


# --- the host ----------------------------------------------------------------------------------------------


def _serve(address: str) -> None:
    from pyspark.sql import SparkSession

    from streaming_jobs.config import JobsSettings
    from streaming_jobs.spark_session import build_spark_session

    def keep_running(self: SparkSession) -> None:
        for query in self.streams.active:
            query.stop()

    spark = build_spark_session(JobsSettings.load(), app_name="cdcpipe-tests-spark-host")
    SparkSession.stop = keep_running  # type: ignore[method-assign]
    settled = dict(spark.conf.getAll)
    authkey = os.environ.pop("CDCPIPE_TEST_SPARK_HOST_KEY").encode()
    base_env, base_cwd = dict(os.environ), os.getcwd()
    with Listener(address, authkey=authkey) as listener, listener.accept() as conn:
        while True:
            try:
                request = conn.recv()
            except EOFError:
                break
            if request is None:
                break
            try:
                reply = _handle(request)
            finally:
                _reset(spark, settled, base_env, base_cwd)
            conn.send(reply)


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = _call(request["entry"], request["argv"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        return {
            "returncode": code,
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


def _call(entry: str, argv: list[str]) -> int:
    try:
        if entry == "streaming_jobs.run.runner":
            from streaming_jobs.run import runner

            return runner.main(argv)
        if entry == "cdcpipe":
            from cdcpipe import cli

            sys.argv = ["cdcpipe", *argv]
            cli.main()
            return 0
        if entry == "tests.support.spark_read":
            from tests.support import spark_read

            return spark_read.main(argv)
        if entry == "streaming_jobs.stack_check":
            from streaming_jobs import stack_check

            return stack_check.main(argv)
        if entry.endswith(".py") and Path(entry).parent.name == "bench":
            # A benchmark's script, as `python bench/<name>.py` runs it: its folder first on the path (its
            # `common`), its arguments in sys.argv. Its session is the host's (build_spark_session's
            # getOrCreate), its `spark.stop()` the host's.
            folder = str(Path(entry).parent)
            # Its own modules imported afresh, as in a new process: `common` reads CDCPIPE_BENCH_RESULTS on import.
            for name, module in list(sys.modules.items()):
                if str(Path(getattr(module, "__file__", None) or "/").parent) == folder:
                    del sys.modules[name]
            sys.path.insert(0, folder)
            sys.argv = [entry, *argv]
            try:
                runpy.run_path(entry, run_name="__main__")
            finally:
                sys.path.remove(folder)
            return 0
        print(
            f"the Spark host runs streaming_jobs.run.runner, streaming_jobs.stack_check, cdcpipe, "
            f"tests.support.spark_read and bench/<name>.py, not {entry}",
            file=sys.stderr,
        )
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1


def _reset(spark: Any, settled: dict[str, str], env: dict[str, str], cwd: str) -> None:
    """What a process's end did: no query, no cache, the settings as they were."""
    from schemas import contracts, emit
    from streaming_jobs.classify import outbox_events

    for query in spark.streams.active:
        query.stop()
    spark.catalog.clearCache()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    now = dict(spark.conf.getAll)
    for key in now.keys() - settled.keys():
        spark.conf.unset(key)
    for key, value in settled.items():
        if now.get(key) != value:
            spark.conf.set(key, value)
    # What a process read once from its environment: read again by the next run, from its own.
    contracts._registry_for.cache_clear()
    emit._default_names.cache_clear()
    outbox_events._columns.cache_clear()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)


if __name__ == "__main__":
    _serve(sys.argv[1])
