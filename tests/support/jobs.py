"""Helpers the streaming-job tests share: job files, records in the wire formats, running and watching jobs."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable, QueryBuilder

from demo.run import EXAMPLES
from ground.processes import TrackedProcess
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.checkpoints import read_progress
from tests.support.spark_host import SPARK_COMMANDS, spark_run
from tests.support.stack import Stack, cdcpipe


@dataclass(frozen=True)
class Job:
    """A job file written for one test, with its own topics and lake."""

    name: str
    folder: Path
    lake: str  # a local folder or an s3a:// URL
    stack: Stack
    env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        """What the job's runs and its `cdcpipe jobs` commands see: `stack env`'s (Kafka as the jobs' user), its lake."""
        return {
            **self.stack.process_env(),
            "CDCPIPE_LAKE": self.lake,
            "CDCPIPE_JOBS_DIRS": str(self.folder),
            **self.env,
        }

    def run(self, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # On this test process's shared Spark driver (tests.support.spark_host), or a process of its own.
        proc = spark_run(
            "streaming_jobs.run.runner",
            [self.name, "--jobs-dir", str(self.folder), "--trigger", "available-now", *extra],
            self.environment(),
        )
        if check:
            assert proc.returncode == 0, proc.stderr[-4000:]
        return proc

    def table(self, suffix: str = "") -> list[dict[str, object]]:
        return read_delta(self.stack, f"{self.lake}/out{suffix}")

    def checkpoint(self) -> LakePath:
        return LakePath.of(self.lake) / "_checkpoints" / self.name

    def progress(self) -> dict[str, Any]:
        """The job's progress file as its last run left it (`cdcpipe jobs status` reads the same)."""
        return read_progress(self.checkpoint())

    def counts(self) -> tuple[int, int]:
        """(applied, dead letters) of the last run, as `cdcpipe jobs status` reads them."""
        progress = self.progress()
        return int(progress["applied"]), int(progress["dead_letters"])


def read_delta(stack: Stack, where: str | Path) -> list[dict[str, object]]:
    """A Delta table's rows read with delta-rs (not Spark): from a folder, or through the S3 API."""
    options = stack.s3_options() if str(where).startswith("s3a://") else None
    return delta_rows(DeltaTable(str(where), storage_options=options))


def delta_rows(table: DeltaTable) -> list[dict[str, object]]:
    """Every row of `table` through delta-rs' query engine, which reads a table with column mapping by name.

    (`to_pyarrow_table` does not: deltalake 1.6 gives such a table's columns as nulls.)
    """
    result = QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all()
    rows: list[dict[str, object]] = pa.table(result).to_pylist()
    return rows


def make_job(
    stack: Stack,
    tmp_path: Path,
    kind: str,
    topics: list[str],
    env: dict[str, str] | None = None,
    lake: str | None = None,
    **extra: object,
) -> Job:
    name = f"job-{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "jobs"
    folder.mkdir()
    shutil.copy(EXAMPLES / "jobs" / "balances.py", folder)
    lines = [f'name = "{name}"', f'kind = "{kind}"', f"topics = {json.dumps(topics)}", 'table = "out"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
    (folder / f"{name}.toml").write_text("\n".join(lines) + "\n")
    return Job(name, folder, lake or str(tmp_path / "lake"), stack, env or {})


Event = tuple[str | None, str, str | None, dict[str, str] | None]


def send(stack: Stack, topic: str, events: list[Event]) -> list[str]:
    """(key, event type, payload text, extra headers) in the outbox wire format; returns the event ids."""
    producer = Producer({**stack.kafka_config(), "acks": "all"})
    ids = []
    for key, event_type, value, headers in events:
        event_id = str(uuid.uuid4())
        ids.append(event_id)
        all_headers = {"id": event_id, "eventType": event_type, "eventVersion": "1", **(headers or {})}
        producer.produce(topic, key=key, value=value, headers=list(all_headers.items()))
    assert producer.flush(30) == 0
    return ids


def deposit(account: str, amount: int) -> str:
    return json.dumps({"account_id": account, "amount": amount, "currency": "EUR"})


def opened(account: str) -> str:
    return json.dumps({"account_id": account, "owner": account.upper(), "currency": "EUR"})


T0 = 1_795_000_000_000  # ms
BALANCES = "balances:apply"  # the example projection (a balance per account), copied beside each test's job files


def change(
    op: str,
    before: dict[str, object] | None,
    after: dict[str, object] | None,
    lsn: int | None,
    sequence: tuple[int, int] | None = None,
) -> str:
    """A change event as Debezium's JSON converter (schemas disabled) writes it.

    `sequence`: Debezium's (last commit before the change's transaction, the change's LSN); an incremental
    snapshot's row has only that (`lsn` None), the second being its chunk's closing mark.
    """
    at = lsn if lsn is not None else (sequence or (0, 0))[1]
    source: dict[str, object] = {"lsn": lsn, "ts_ms": T0 + at, "txId": at, "snapshot": "false"}
    if sequence is not None:
        source["sequence"] = json.dumps([str(n) for n in sequence])
        source["snapshot"] = "incremental" if lsn is None else "false"
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": T0 + at, "source": source})


def send_changes(stack: Stack, topic: str, changes: list[tuple[str, str | None]]) -> None:
    producer = Producer({**stack.kafka_config(), "acks": "all"})
    for key, value in changes:
        producer.produce(topic, key=json.dumps({"id": key}), value=value)
    assert producer.flush(30) == 0


def row(id_: str, balance: int) -> dict[str, object]:
    return {"id": id_, "owner": id_.upper(), "balance": balance}


def job_env(
    stack: Stack, tmp_path: Path, kind: str, topic: str, lake: str | None = None, **extra: object
) -> tuple[str, dict[str, str]]:
    name = f"job-{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "jobs"
    folder.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "jobs" / "balances.py", folder)
    lines = [f'name = "{name}"', f'kind = "{kind}"', f'topics = ["{topic}"]', 'table = "out"', 'trigger = "1s"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
    (folder / f"{name}.toml").write_text("\n".join(lines) + "\n")
    env = {
        **stack.process_env(),
        "CDCPIPE_JOBS_DIRS": str(folder),
        "CDCPIPE_LAKE": lake or str(tmp_path / "lake"),
        "CDCPIPE_RUN_DIR": str(tmp_path / "run"),  # the submitted jobs' pid files and logs
    }
    return name, env


def status(name: str, env: dict[str, str]) -> dict[str, object]:
    result = cdcpipe("jobs", "status", name, "--json", env=env)
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    return report


def alive_and(name: str, env: dict[str, str], tmp_path: Path, condition: Callable[[], bool]) -> Callable[[], bool]:
    """`condition`, but fail at once with the job's log if the job died (instead of waiting out the timeout)."""
    # Its pid file, as `jobs status` reads it (not the command: a process of its own per poll).
    run_dir = Path(env.get("CDCPIPE_RUN_DIR") or tmp_path / "run")
    job = TrackedProcess(name=f"job {name}", pid_file=run_dir / f"{name}.pid", log_file=run_dir / f"{name}.log")

    def check() -> bool:
        if condition():
            return True
        if job.pid() is None:
            log = (run_dir / f"{name}.log").read_text()
            pytest.fail(f"job {name} died:\n{log[-3000:]}")
        return False

    return check


def job_rows(tmp_path: Path) -> list[dict[str, object]]:
    """The rows of a `job_env` job's table (its lake's `out`), none before its first commit."""
    path = tmp_path / "lake" / "out"
    if not any((path / "_delta_log").glob("*.json")):  # not created yet, or its first commit is in flight
        return []
    found: list[dict[str, object]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return found


def table_rows(path: Path | str, key: str, stack: Stack | None = None) -> dict[str, dict[str, object]]:
    """A Delta table read with delta-rs (not Spark), by `key`, without the time it was applied at."""
    options = stack.s3_options() if stack is not None and str(path).startswith("s3a://") else None
    rows = delta_rows(DeltaTable(str(path), storage_options=options))
    by_key = {str(r[key]): {k: v for k, v in r.items() if k != "_applied_at"} for r in rows}
    assert len(by_key) == len(rows), f"{path}: {len(rows) - len(by_key)} duplicate {key}(s)"
    return by_key


def drain(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run job `name` until it has applied what its topics hold now (available-now), on the shared driver.

    For a test that needs the job's rows, not a job in the background: `jobs submit` proves that apart.
    """
    result = spark_run("streaming_jobs.run.runner", [name, "--trigger", "available-now"], env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def jobs_command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`cdcpipe ARGS`; the Spark commands of `cdcpipe jobs` on this test process's shared driver."""
    spark = args[:1] == ("jobs",) and len(args) > 1 and args[1] in SPARK_COMMANDS
    return spark_run("cdcpipe", list(args), env) if spark else cdcpipe(*args, env=env)


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`cdcpipe ARGS`, asserted to succeed (`jobs_command`)."""
    result = jobs_command(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result
