"""The Spark driver's class-data archive: each job's driver then starts on about half the CPU.

    python -m streaming_jobs.class_archive      (`make install` and `make test` run it; `make demo` does not)

A driver started with `-XX:ArchiveClassesAtExit` runs what a job's driver runs at its start (a session, a Delta
write, a MERGE, a read) and the JVM writes every class it loaded from its classpath (Spark's, Hadoop's, Scala's)
into the archive as it exits. Drivers started later map those classes instead of loading each one
(`bench/driver_start.py` measures it). Built once per Java, pyspark and Spark jars (a stamp beside it says which);
a stale one is only ignored by the JVM, with a warning. The demo's one driver does not repay the minute it takes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import StreamingError

WAIT_S = 120  # how long the probe driver's JVM may take to write the archive as it exits


def _stamp(settings: JobsSettings) -> str:
    """What the archive is built from: the Java, the Spark jars and pyspark's jars (paths, sizes and times).

    The JVM maps an archive only while every jar on its class path has the size and time it had when it was built:
    a virtual environment made again (the same pyspark, new files) must build it again, or every driver starts
    without it, silently.
    """
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if java is None:
        raise StreamingError("spark driver class archive: no java on PATH (nor JAVA_HOME): `make install` installs it")
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr  # noqa: S603
    import pyspark  # only its folder: the jars it ships

    ours = sorted(f"{j}:{j.stat().st_size}:{j.stat().st_mtime_ns}" for j in settings.spark_jars_dir.glob("*.jar"))
    shipped = sorted(
        f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")
    )
    h = hashlib.sha256()
    for part in (version, "\n".join(ours), "\n".join(shipped)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def probe(jars: Path) -> None:
    """The probe driver: what a job's driver does at its start; prints its JVM's pid."""
    from streaming_jobs.spark_session import write_class_archive

    with tempfile.TemporaryDirectory() as lake:
        settings = JobsSettings.load(spark_master="local[2]", lake=lake, spark_jars_dir=jars, spark_class_archive=None)
        print("driver pid", write_class_archive(settings, Path(lake)), flush=True)


def build(settings: JobsSettings) -> str:
    """Build the archive at `spark_class_archive` unless it is up to date; what was done, in a line."""
    archive = settings.spark_class_archive
    if archive is None:
        return "spark driver class archive: none wanted (spark_class_archive is unset)"
    wanted = _stamp(settings)
    stamp = archive.with_suffix(".installed")
    if stamp.is_file() and stamp.read_text().strip() == wanted and archive.is_file():
        return f"spark driver class archive: up to date ({archive})"
    started = time.monotonic()
    partial = archive.with_suffix(".jsa.partial")
    partial.unlink(missing_ok=True)
    env = {
        **os.environ,
        "CDCPIPE_SPARK_JAVA_OPTIONS": f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial}",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [sys.executable, "-m", "streaming_jobs.class_archive", "--probe", str(settings.spark_jars_dir)]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)  # noqa: S603 - this module
    if proc.returncode != 0:
        raise StreamingError(f"spark driver class archive: the probe driver failed\n{proc.stderr[-3000:]}")
    # The JVM's own output (its archiving warnings) shares stdout with the probe's: the line it printed says the pid.
    pid = int(next(line for line in proc.stdout.splitlines() if line.startswith("driver pid ")).split()[-1])
    deadline = time.monotonic() + WAIT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:  # the JVM writes it as it exits
        time.sleep(0.2)
    if not partial.is_file() or Path(f"/proc/{pid}").exists():
        raise StreamingError(f"spark driver class archive: the driver (pid {pid}) wrote no {partial} in {WAIT_S} s")
    partial.chmod(0o644)  # drivers of other users (a cluster's) map it too
    partial.replace(archive)
    stamp.write_text(wanted + "\n")
    return f"spark driver class archive: {archive.stat().st_size >> 20} MiB in {time.monotonic() - started:.0f}s"


def main() -> int:
    """Build the archive (or, with --probe JARS, be the probe driver)."""
    if sys.argv[1:2] == ["--probe"]:
        probe(Path(sys.argv[2]))
        return 0
    try:
        print(f"[install] {build(JobsSettings.load())}", flush=True)
    except StreamingError as exc:
        print(f"[install] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
