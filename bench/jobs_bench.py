"""Streaming job benchmark: commit in Postgres -> row in the Delta read model, and what a job sustains.

    python bench/jobs_bench.py [--rate 3000] [--seconds 30] [--runs 3] [--s3-runs N] [--kinds event_log,...]
                               [--warmup-s 180] [--events 200000] [--lakes local,s3] [--job-setting KEY=VALUE]
    python bench/jobs_bench.py --lakes local --drift-minutes 10 [--drift-kind table_mirror]
    python bench/jobs_bench.py --lakes local --sustain-rates 1000,2000,3000,4500 --kinds floor,table_mirror

Needs the stack running. Everything shares the two cores: Postgres, Kafka, our relay, the Spark driver.

- Latency: the relay publishes an outbox that a generator fills at a fixed rate (open loop, 1 KB events); an
  event-log job (trigger 1s) applies them. Latency = when the Delta commit that adds the row was written
  minus the event's scheduled commit time. Each job's driver first gets --warmup-s of the same load, not
  measured. p50, p99, max, and where a batch's time went (`cycle_ms_median`, `slowest_batches`).
- Table kinds (`table_mirror`, `table_history`): the changes of an application's table (11 columns, upserts
  of 20,000 rows at the same rate), published by Debezium's table connector as a user gets it from
  `cdcpipe tables add`; latency = the Delta commit that first shows the row's version minus the change's
  scheduled commit time. A mirror keeps one version of a row per batch: a change its batch overwrote is
  never visible, counted as `superseded`, not measured. `latest_state` takes the outbox's events.
- Floor (kind `floor`): the same, with the job replaced by a bare Kafka -> Delta append
  (`bench/floor_job.py`): what Spark micro-batches and a Delta commit cost here, whatever the job does.
  `floor_one_task_per_core` (not run unless asked): the same floor with the jobs' one task per core.
  `event_log_no_metrics` (not run unless asked): the event log with CDCPIPE_METRICS=false.
- Throughput: N events already in a topic, one available-now run of a latest-state job; events/s of the
  batch that applied them (`batch_records_per_s`, `batch_rate`), where that batch's time went (`batch_split_ms`),
  and of the whole run including start-up. With a table kind asked for, the same for a mirror over N changes of
  the table (`mirror_throughput`).
- Sustained rate (`--sustain-rates`): each kind at each rate in turn, ascending, until its latency grows over
  the window (the last third's median over the first third's by more than `GROWTH_S` or half, `keeps_up`) or
  its batches lengthen (the last third's median batch over the first's by more than `DURATION_GROWTH` times);
  the highest rate it kept up with, and its ratio over the floor's. A window of fewer than `MIN_BATCHES` batches
  gives no verdict (`keeps_up` null) and ends the search: give such a kind --seconds of ten of its batches.
Each measurement runs on each lake asked for, one after the other in one run: the stack's local folder
(`local`) and its object store (`s3`, through S3A); `s3_vs_local` holds the ratios.
Writes bench/results/jobs.json and a plot of each kind's latency by percentile (jobs_latency_<lake>.png, the
last run); prints the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import psycopg
import pyarrow.parquet as pq
from common import (
    RESULTS,
    Generator,
    Load,
    captured,
    commit_changes,
    create_topic,
    env_kafka,
    fill_topic,
    machine_busy_ticks,
    outbox_load,
    process_ticks,
    stack_env,
    start_relay,
    table_load,
    wait_leader,
    watch_batches,
)
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from psycopg import sql
from pyarrow import fs as pafs

from infra.config import StackSettings
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.checkpoints import PROGRESS_FILE, committed_offsets

# A driver's first minutes are slower than its days after (the 10-minute run's batch durations fall by minute
# for about three: the JVM compiles its hot code, caches fill): the latency figures are of a job that has run a
# while. Each run starts its own driver, so each gets this much of the same load before it is measured.
WARMUP_S = 180.0


@contextlib.contextmanager
def stage(what: str) -> Iterator[None]:
    """Say on stderr where a run is and how long each part took (a run takes minutes; the JSON holds figures)."""
    began = time.monotonic()
    print(f"jobs_bench: {what} ...", file=sys.stderr, flush=True)
    yield
    print(f"jobs_bench: {what}: {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)


def job_file(folder: Path, name: str, kind: str, topic: str, trigger: str, settings: tuple[str, ...] = ()) -> None:
    """A job definition; `settings`: more of its keys as TOML lines (`optimize_every = 0`), a lever to measure."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.toml").write_text(
        f'name = "{name}"\nkind = "{kind}"\ntopics = ["{topic}"]\ntable = "{name}"\ntrigger = "{trigger}"\n'
        + "".join(f"{line}\n" for line in settings)
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


# A job keeps up with a rate when its latency does not grow over the measured window: the median of the last
# third of the changes (by scheduled commit) is at most this much above the first third's (or half of it, the
# larger). A job at 1.2x its capacity for 30 s grows by about 4 s between the two.
GROWTH_S = 1.0


def thirds(latencies: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The median latency of the first and of the last third of (scheduled time, latency), in scheduled order."""
    if len(latencies) < 3:
        return None
    ordered = [seconds for _, seconds in sorted(latencies)]
    third = len(ordered) // 3
    return statistics.median(ordered[:third]), statistics.median(ordered[-third:])


# Fewer batches than this in the window say nothing of a trend: a kind whose batch takes a third of the window
# shows the warm-up's backlog draining (measured: a mirror's 3-6 batches in 30 s, its last third below its first).
MIN_BATCHES = 10


# Nor do its batches lengthen: a job behind its rate takes, each batch, all that came during the one before, so
# its batches grow one after the other. The latency's allowance (half its first third's) alone is wide for a slow
# kind: a history at 3,000 changes/s for ten minutes grew by 13.8 s, under its 14.3 s allowance, while its batches
# grew from 14.7 to 33.4 s by minute. The median batch of the last third may be this many times the first's.
DURATION_GROWTH = 1.5


def keeps_up(
    first_last: tuple[float, float] | None,
    batches: int = MIN_BATCHES,
    durations: tuple[float, float] | None = None,
) -> bool | None:
    """Whether the latency held over the window (`thirds`), and the batches' durations (`thirds`, seconds) too.

    None when too little was measured to say.
    """
    if first_last is None or batches < MIN_BATCHES:
        return None
    first, last = first_last
    held = last - first <= max(GROWTH_S, first / 2)
    if durations is not None:
        shortest, longest = durations[0] * DURATION_GROWTH, durations[0] + GROWTH_S
        held = held and durations[1] <= max(shortest, longest)
    return held


def highest_sustained(measure: Callable[[str, int], dict[str, Any]], kind: str, rates: list[int]) -> dict[str, Any]:
    """Each rate in turn, ascending, until one the kind does not keep up with: the highest it kept up with.

    `measure(kind, rate)` is one latency run (its result holds `keeps_up` and `latency_s`).
    """
    tried: dict[str, Any] = {}
    best = None
    for rate in sorted(rates):
        run = measure(kind, rate)
        tried[str(rate)] = {
            "keeps_up": run.get("keeps_up"),
            "latency_s": run.get("latency_s"),
            "latency_thirds_s": run.get("latency_thirds_s"),
            "batches": run.get("batches"),
        }
        if not run.get("keeps_up"):
            # None is no verdict (too few batches), not a rate it fell behind at: the JSON says which.
            stop = "fell behind" if run.get("keeps_up") is False else "no verdict"
            return {"highest_sustained_per_s": best, "stopped_at": {"rate": rate, "why": stop}, "rates": tried}
        best = rate
    return {"highest_sustained_per_s": best, "stopped_at": None, "rates": tried}


# What a latency run measures: a job of a kind, or the floor job (bare, or with the jobs' one task per core);
# `event_log_no_metrics`: the event log with CDCPIPE_METRICS=false (what its metrics cost).
KINDS = (
    "event_log",
    "latest_state",
    "floor",
    "floor_one_task_per_core",
    "event_log_no_metrics",
    "table_mirror",
    "table_history",
)
TABLE_KINDS = ("table_mirror", "table_history")
# The table kinds' source: rows of an application's table, each change an upsert of row (its number % KEYS).
KEYS = 20_000


SETTLE_S = 20.0  # the driver's start-up and its first (empty) batches, before the warm-up


def latency(
    env: dict[str, str],
    lake: LakePath,
    tag: str,
    rate: int,
    seconds: float,
    kind: str,
    settle_s: float = SETTLE_S,
    warmup_s: float = WARMUP_S,
    settings: tuple[str, ...] = (),
    replicas: int = -1,
) -> dict[str, Any]:
    """Commit in Postgres -> row visible in Delta, through the relay and a job of `kind` (or the floor job).

    `replicas`: the topic's (-1: the cluster's).
    """
    if kind in TABLE_KINDS:
        return table_latency(env, lake, tag, rate, seconds, kind, settle_s, warmup_s, settings)
    floor = kind.startswith("floor")
    dsn = env["CDCPIPE_PG_DSN"]
    names = OutboxNames.load(outbox_schema=f"jobs_bench_{tag}")
    with psycopg.connect(dsn) as conn:
        schema_outbox.apply(conn, names, SchemaSettings.load(pg_dsn=dsn, publication=f"pub_jobs_bench_{tag}"))
    topic = f"jobs.{tag}.bench"
    create_topic(env, topic, replicas)
    jobs = RESULTS / f"_bench_jobs_{tag}"
    name = f"latency_{tag}"
    job_file(jobs, name, "event_log" if floor or kind == "event_log_no_metrics" else kind, topic, "1s", settings)
    job_env = {**env, "CDCPIPE_LAKE": str(lake), "CDCPIPE_JOBS_DIRS": str(jobs)}
    if kind == "event_log_no_metrics":
        job_env["CDCPIPE_METRICS"] = "false"
    relay_env = {
        **env,
        "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
        "CDCPIPE_TOPIC_PATTERN": f"jobs.{tag}.{{aggregatetype}}",
        "CDCPIPE_METRICS_PORT": "0",
    }
    log = RESULTS / "jobs_bench_relay.log"
    relay = start_relay(relay_env, log)
    job_log = (RESULTS / "jobs_bench_job.log").open("wb")
    checkpoint = lake / "_checkpoints" / name
    if floor:
        checkpoint.mkdir()  # for its progress file before Spark's first write
        command = [
            sys.executable,
            str(Path(__file__).parent / "floor_job.py"),
            topic,
            str(lake / name),
            str(checkpoint),
            *(["--one-task-per-core"] if kind == "floor_one_task_per_core" else []),
        ]
    else:
        command = [sys.executable, "-m", "streaming_jobs.run.runner", name, "--jobs-dir", str(jobs)]
    # The job runs as `cdcpipe jobs submit` runs it: its own driver process.
    driver = subprocess.Popen(
        command,
        env=job_env,
        stdout=job_log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_leader(dsn, names, relay.pid)
        measured = _measure(
            env, outbox_load(names), topic, driver.pid, relay.pid, lake, name, kind, rate, seconds, settle_s, warmup_s
        )
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(180)
        shutil.rmtree(jobs, ignore_errors=True)
        relay.send_signal(signal.SIGTERM)
        relay.wait(60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.outbox_schema)))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"pub_jobs_bench_{tag}")))
    return {"kind": kind, "job_settings": list(settings), **measured}


def table_latency(
    env: dict[str, str],
    lake: LakePath,
    tag: str,
    rate: int,
    seconds: float,
    kind: str,
    settle_s: float = SETTLE_S,
    warmup_s: float = WARMUP_S,
    settings: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Commit in Postgres -> row visible in Delta, through Debezium's table connector and a mirror or history job.

    The source is an application's table (common.table_load: upserts of `KEYS` rows), captured as a user
    captures one (`captured`). The job runs from the file `tables add` wrote, in its own driver.
    """
    with captured(env, lake, tag, kind.removeprefix("table_"), settings) as source:
        # The job runs as `cdcpipe jobs submit` runs it: its own driver process.
        with (RESULTS / "jobs_bench_job.log").open("wb") as log:
            driver = subprocess.Popen(
                [sys.executable, "-m", "streaming_jobs.run.runner", source.job],
                env=source.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            load = table_load(source.table, KEYS)
            measured = _measure(
                source.env, load, source.topic, driver.pid, 0, lake, source.job, kind, rate, seconds, settle_s, warmup_s
            )
        finally:
            driver.send_signal(signal.SIGTERM)
            driver.wait(180)
    return {"kind": kind, "job_settings": list(settings), "keys": KEYS, **measured}


def table_throughput(env: dict[str, str], lake: LakePath, tag: str, changes: int) -> dict[str, Any]:
    """A mirror draining a backlog: `changes` upserts in the topic (through Debezium), one available-now run.

    The changes are committed in transactions of 10,000 (half inserts, half updates of those rows); once the
    topic holds them all, the mirror job runs once over them. Events/s of its batches (Spark's
    `batch_rate`) and of the whole run including the driver's start.
    """
    with captured(env, lake, tag, "mirror") as source:
        published, load_s = commit_changes(source, changes)
        began = time.monotonic()
        ran = subprocess.run(
            [sys.executable, "-m", "streaming_jobs.run.runner", source.job, "--trigger", "available-now"],
            env=source.env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - began
        if ran.returncode != 0:
            raise SystemExit(f"the mirror's available-now run failed:\n{ran.stderr[-3000:]}")
        progress = json.loads((lake / "_checkpoints" / source.job / PROGRESS_FILE).read_text())
    return {
        "changes": changes,
        "published": published,
        "committed_and_published_s": round(load_s, 1),
        "applied": progress.get("applied"),
        "batch_records_per_s": batch_rate(progress, changes),
        "batch_split_ms": batch_split(progress),
        "run_s": round(wall, 1),
        "run_changes_per_s": round(changes / wall),
    }


def _measure(
    env: dict[str, str],
    load: Load,
    topic: str,
    driver: int,
    publisher: int,
    lake: LakePath,
    name: str,
    kind: str,
    rate: int,
    seconds: float,
    settle_s: float,
    warmup_s: float,
) -> dict[str, Any]:
    """Warm the running job with `load` at `rate`, then measure `seconds` of it: latency, batches, CPU.

    `driver`: the job's pid; `publisher`: the relay's (0: none, Debezium's Connect publishes).
    """
    dsn = env["CDCPIPE_PG_DSN"]
    checkpoint = lake / "_checkpoints" / name
    table = lake / name
    time.sleep(settle_s)
    # A job runs for days: its first batches (JVM warm-up, the Kafka consumer's start) are not what a
    # user waits for on any given event. Warm it with the same load first; measure only what follows.
    warmup = _generate(dsn, load, rate, warmup_s)
    _wait_applied(env, topic, checkpoint, table, kind, warmup["events"])
    start_ns = time.time_ns() + 1_000_000_000
    watching = threading.Event()
    batches: dict[int, dict[str, Any]] = {}
    watcher = threading.Thread(target=watch_batches, args=(checkpoint, batches, watching))
    watcher.start()
    cpu_before, cpu_began = _cpu_ticks(), time.monotonic()
    try:
        generated = _generate(dsn, load, rate, seconds, start_ns)
        cpu = _cpu_shares(cpu_before, _cpu_ticks(), time.monotonic() - cpu_began, publisher, driver)
        expected = warmup["events"] + generated["events"]
        applied = _wait_applied(env, topic, checkpoint, table, kind, expected)
    finally:
        watching.set()
        watcher.join()
    first_seen: dict[int, float] = {}
    for scheduled_ns, visible in _visible_at(table, "t" if kind in TABLE_KINDS else "payload"):
        # A MERGE rewrites the rows that share a file with the ones it changes: the first commit counts.
        first_seen[scheduled_ns] = min(visible, first_seen.get(scheduled_ns, visible))
    # The warm-up's events are not measured. A mirror keeps one version of a row per batch: a change that
    # another of the same row followed in its batch is never visible, and not counted (`superseded`).
    each = [(n / 1e9, visible - n / 1e9) for n, visible in first_seen.items() if n >= start_ns]
    seconds_each = [seconds for _, seconds in each]
    commits = _commit_times(table)
    growth = thirds(each)
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "generated": generated,
        "applied": applied,
        "superseded": generated["events"] - len(seconds_each),
        "latency_s": {
            "p50": round(percentile(seconds_each, 50), 3),
            "p99": round(percentile(seconds_each, 99), 3),
            "max": round(max(seconds_each), 3),
            "mean": round(statistics.fmean(seconds_each), 3),
        }
        if seconds_each
        else None,
        "latency_thirds_s": [round(x, 3) for x in growth] if growth else None,
        "keeps_up": keeps_up(growth, len(_measured(batches)), _duration_thirds(batches)),
        "batches": _batch_summary(batches, commits),
        "cycle_ms_median": _cycle_split(batches, commits),
        "batch_duration_by_minute_ms": _by_minute(batches),
        "slowest_batches": _slowest(batches, commits),
        "cpu_percent_of_one_core_while_generating": cpu,
        "_latencies_s": sorted(seconds_each),  # for the plot, not the JSON
    }


def _cpu_ticks() -> dict[int, tuple[int, int, str]]:
    """Every process's (CPU ticks, parent pid, command line) now; key 0: the whole machine's busy ticks."""
    out: dict[int, tuple[int, int, str]] = {0: (machine_busy_ticks(), 0, "machine")}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ticks, parent = process_ticks(int(entry.name))
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(entry.name)] = (ticks, parent, command)
    return out


def _cpu_shares(
    before: dict[int, tuple[int, int, str]], after: dict[int, tuple[int, int, str]], wall: float, relay: int, job: int
) -> dict[str, float]:
    """Where the two cores went while the load ran: the job (its driver and Spark JVM), the relay, the rest.

    A process that ended before the second reading is not in it: the load generator, and its Postgres
    session, show only in the whole machine's figure.
    """

    def descends(pid: int, root: int) -> bool:
        while pid > 1 and pid in after:
            if pid == root:
                return True
            pid = after[pid][1]
        return False

    shares: dict[str, float] = {}
    for pid, (ticks, _, command) in after.items():
        used = ticks - before[pid][0] if pid in before else ticks
        if used <= 0:
            continue
        if pid == 0:
            group = "whole machine (of 200)"
        elif descends(pid, job):
            group = "job (driver + Spark)"
        elif descends(pid, relay):
            group = "relay"
        elif command.startswith("postgres"):
            group = "postgres"
        elif "kafka.Kafka" in command:
            group = "kafka broker"
        elif "ConnectDistributed" in command:
            group = "kafka connect"
        elif descends(pid, os.getpid()):
            group = "bench"
        else:
            group = "other"
        shares[group] = shares.get(group, 0.0) + used
    hz = os.sysconf("SC_CLK_TCK")
    return {group: round(100 * used / hz / wall, 1) for group, used in sorted(shares.items(), key=lambda kv: -kv[1])}


def _commit_times(table: LakePath) -> list[tuple[float, float]]:
    """(newest data file written, commit file written) of each commit that added data, epoch seconds."""
    out: list[tuple[float, float]] = []
    filesystem, log = (table / "_delta_log").filesystem()
    for commit in filesystem.get_file_info(pafs.FileSelector(log)):
        if not commit.path.endswith(".json"):
            continue
        lines = (table / "_delta_log" / commit.base_name).read_text().splitlines()
        adds = [a["add"] for a in map(json.loads, lines) if "add" in a]
        if adds:
            out.append((max(a["modificationTime"] for a in adds) / 1000, commit.mtime.timestamp()))
    return sorted(out)


def _measured(batches: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for _, b in sorted(batches.items()) if b.get("numInputRows")]


def _duration_thirds(batches: dict[int, dict[str, Any]]) -> tuple[float, float] | None:
    """The median duration (s) of the first and of the last third of the batches seen while measuring."""
    seen = _measured(batches)
    return thirds([(n, float(b["durationMs"].get("triggerExecution", 0)) / 1000) for n, b in enumerate(seen)])


def _batch_summary(batches: dict[int, dict[str, Any]], commits: list[tuple[float, float]]) -> dict[str, Any]:
    """Median rows and milliseconds per phase of the batches seen while measuring: where the latency goes."""
    seen = _measured(batches)
    if not seen:
        return {"count": 0}
    phases = sorted({k for b in seen for k in b.get("durationMs", {})})
    return {
        "count": len(seen),
        "rows_median": statistics.median(b["numInputRows"] for b in seen),
        "duration_ms_median": {k: statistics.median(b["durationMs"].get(k, 0) for b in seen) for k in phases},
    }


def _cycle_split(batches: dict[int, dict[str, Any]], commits: list[tuple[float, float]]) -> dict[str, float] | None:
    """Median milliseconds of each part of a batch's cycle, from trigger to trigger.

    Spark's own steps (durationMs: planning the batch's offsets, the write-ahead log, the commit of its
    offsets), the job's steps (streaming_jobs.phases: the writer lease, reading the applied offsets, reading
    and classifying the batch, the table write), the table write split by the Delta log into writing data
    files, committing (the commit file's time less the newest data file's) and after the commit (Delta's
    own bookkeeping until the write returns), the driver's time in the batch outside those steps, and the
    wait for the next trigger.
    """
    rows = [row for _, row in _cycle_rows(batches, commits)]
    if not rows:
        return None
    keys = sorted({k for r in rows for k in r})
    return {k: round(statistics.median(r.get(k, 0.0) for r in rows), 1) for k in keys}


def _slowest(
    batches: dict[int, dict[str, Any]], commits: list[tuple[float, float]], n: int = 3
) -> list[dict[str, Any]]:
    """The `n` longest batches with their cycle split (a latency tail's cause: a compaction, a checkpoint)."""
    timed = [
        (float(b.get("durationMs", {}).get("triggerExecution", 0)), b, row) for b, row in _cycle_rows(batches, commits)
    ]
    return [
        {
            "batch": b.get("batchId"),
            "rows": b.get("numInputRows"),
            "ms": round(ms),
            "split_ms": {k: round(v) for k, v in sorted(row.items()) if v >= 1},
        }
        for ms, b, row in sorted(timed, key=lambda t: t[0], reverse=True)[:n]
    ]


def _cycle_rows(
    batches: dict[int, dict[str, Any]], commits: list[tuple[float, float]]
) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """Each measured batch with its cycle split in milliseconds (see `_cycle_split`)."""
    seen = _measured(batches)
    rows: list[tuple[dict[str, Any], dict[str, float]]] = []
    for this, following in zip(seen, [*seen[1:], {}], strict=True):
        spent = this.get("durationMs", {})
        row = {f"spark.{k}": float(spent.get(k, 0)) for k in ("latestOffset", "queryPlanning", "walCommit")}
        row["spark.commitOffsets"] = float(spent.get("commitOffsets", 0))
        steps = (this.get("steps") or {}).get("seconds", {})
        ours = 0.0
        for name, s in steps.items():
            if name != "write":
                row[f"job.{name}"] = 1000 * s
                ours += 1000 * s
        span = (this.get("steps") or {}).get("write_span")
        if span:
            inside = [c for c in commits if span[0] <= c[1] <= span[1] + 0.5]
            if inside:
                files, committed = inside[0]
                row["job.write.data_files"] = 1000 * max(0.0, files - span[0])
                row["job.write.commit"] = 1000 * max(0.0, committed - files)
                row["job.write.after_commit"] = 1000 * max(0.0, span[1] - committed)
            ours += 1000 * steps.get("write", 0.0)
        row["job.other (driver)"] = max(0.0, spent.get("addBatch", 0) - ours) if steps else 0.0
        if following.get("timestamp") and this.get("timestamp"):
            gap = _epoch(following["timestamp"]) - _epoch(this["timestamp"]) - spent.get("triggerExecution", 0) / 1000
            row["wait for trigger"] = 1000 * max(0.0, gap)
        rows.append((this, row))
    return rows


def _epoch(stamp: str) -> float:
    """Spark progress' timestamp (ISO 8601, UTC) as epoch seconds."""
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _by_minute(batches: dict[int, dict[str, Any]]) -> list[float]:
    """The median batch duration (triggerExecution, ms) of each minute of the run: a drift shows as a rise."""
    seen = [b for b in _measured(batches) if b.get("timestamp")]
    if not seen:
        return []
    first = _epoch(seen[0]["timestamp"])
    minutes: dict[int, list[float]] = {}
    for b in seen:
        minutes.setdefault(int((_epoch(b["timestamp"]) - first) // 60), []).append(
            float(b["durationMs"].get("triggerExecution", 0))
        )
    return [round(statistics.median(v)) for _, v in sorted(minutes.items())]


def _generate(dsn: str, load: Load, rate: int, seconds: float, start_ns: int | None = None) -> dict[str, Any]:
    """Commit `rate` events/s for `seconds` (an outbox's, a table's), open loop, from its own process; its report."""
    # measured_from 0: every transaction of this run counts (the warm-up is a run of its own).
    result = Generator(dsn, load, rate, seconds, start_ns or time.time_ns() + 1_000_000_000).report()
    result.pop("commits")  # per-transaction times, for the relay bench's second histogram; not wanted here
    return result


def _wait_applied(
    env: dict[str, str], topic: str, checkpoint: LakePath, table: LakePath, kind: str, expected: int
) -> int:
    """Wait until the job applied the `expected` events: rows of an append, offsets of a MERGE kind's job."""
    if kind != "latest_state" and kind not in TABLE_KINDS:
        return _wait_rows(table, expected)
    # A MERGE keeps one row per key: wait for the topic's records (every event published) to be read
    # by a batch the job committed.
    consumer = Consumer(env_kafka(env).client_config(**{"group.id": f"jobs-bench-{uuid.uuid4().hex[:8]}"}))
    try:
        deadline = time.monotonic() + 180
        ends: dict[tuple[str, int], int] = {}
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        while time.monotonic() < deadline:
            ends = {(topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in partitions}
            if sum(ends.values()) >= expected:
                break
            time.sleep(0.5)
        while time.monotonic() < deadline:
            reached = committed_offsets(checkpoint)
            if all(reached.get(tp, 0) >= end for tp, end in ends.items()):
                return sum(ends.values())
            time.sleep(0.5)
        return sum(committed_offsets(checkpoint).values())
    finally:
        consumer.close()


def _wait_rows(table: LakePath, expected: int, timeout_s: float = 120) -> int:
    """How many rows the table holds once it holds `expected`, or at the timeout.

    Counted from the commits' own record counts, each commit file read once: reading the table's data
    every second would take CPU from the job being measured.
    """
    deadline = time.monotonic() + timeout_s
    count, version = 0, 0
    while time.monotonic() < deadline:
        while (commit := table / "_delta_log" / f"{version:020d}.json").exists():
            actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
            count += sum(
                json.loads(a["add"].get("stats") or "{}").get("numRecords", 0)
                for a in actions
                if "add" in a and a["add"].get("dataChange", True)
            )
            version += 1
        if count >= expected:
            break
        time.sleep(0.5)
    return count


def _visible_at(table: LakePath, column: str) -> list[tuple[int, float]]:
    """(scheduled commit ns, when a reader could first see the row) for every row of the table.

    `column`: where a row holds its scheduled time: `payload` (an event's JSON, `{"t": ns, ...}`) or `t`.

    A row becomes visible when the Delta commit file that adds its data file is written: that file's
    modification time (on an object store, the object's LastModified), read from the log itself. Not the
    micro-batch's start (`_applied_at`), which comes a whole batch earlier.
    """
    out: list[tuple[int, float]] = []
    filesystem, log = (table / "_delta_log").filesystem()
    commits = filesystem.get_file_info(pafs.FileSelector(log))
    for commit in sorted((c for c in commits if c.path.endswith(".json")), key=lambda c: c.path):
        visible = commit.mtime.timestamp()
        for line in (table / "_delta_log" / commit.base_name).read_text().splitlines():
            add = json.loads(line).get("add")
            if add is None or not add.get("dataChange", True):
                continue  # a compaction rewrites rows that were visible before
            data_fs, data = (table / unquote(add["path"])).filesystem()
            for value in pq.read_table(data, columns=[column], filesystem=data_fs).column(0).to_pylist():
                if column == "t":
                    out.append((int(value), visible))
                    continue
                text = str(value)
                out.append((int(text[text.index(":") + 1 : text.index(",")]), visible))
    return out


def batch_rate(progress: dict[str, Any], records: int) -> int | None:
    """Records a second of an available-now run's one batch: `records` over the batch's `triggerExecution`.

    Not Spark's `processedRowsPerSecond`: its `numInputRows` counts every read of the batch's records, so a batch
    that read them twice reported twice its rate (a first batch did, before it took its start from the checkpoint:
    the mirror's and the latest state's backlog figures until 2026-11-27). None unless the run was one batch (the
    jobs' cap, `max_offsets_per_trigger`, is above what the bench sends).
    """
    report = progress.get("progress") or {}
    duration_ms = (report.get("durationMs") or {}).get("triggerExecution")
    if report.get("batchId") != 0 or not duration_ms:
        return None
    return round(records / (float(duration_ms) / 1000))


def batch_split(progress: dict[str, Any]) -> dict[str, int]:
    """Where the last batch's time went, ms: Spark's whole batch, and the job's steps in it (streaming_jobs.phases)."""
    spark = (progress.get("progress") or {}).get("durationMs") or {}
    steps = (progress.get("batch_steps") or {}).get("seconds") or {}
    split = {f"job.{k}": 1000 * float(v) for k, v in steps.items()}
    split["spark.triggerExecution"] = float(spark.get("triggerExecution", 0))
    return {k: round(v) for k, v in sorted(split.items(), key=lambda kv: -kv[1])}


def throughput(env: dict[str, str], lake: LakePath, tag: str, events: int) -> dict[str, Any]:
    topic = f"jobs.{tag}.throughput"
    create_topic(env, topic)
    fill_topic(env, topic, events)
    jobs = RESULTS / f"_bench_jobs_{tag}"
    name = f"throughput_{tag}"
    job_file(jobs, name, "latest_state", topic, "available-now")
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "streaming_jobs.run.runner", name, "--jobs-dir", str(jobs)],
        env={**env, "CDCPIPE_LAKE": str(lake)},
        check=True,
        capture_output=True,
    )
    shutil.rmtree(jobs, ignore_errors=True)
    wall = time.monotonic() - began
    progress = json.loads((lake / "_checkpoints" / name / PROGRESS_FILE).read_text())
    return {
        "events": events,
        "distinct_keys": 10_000,
        "run_seconds_with_startup": round(wall, 1),
        "events_per_s_with_startup": round(events / wall),
        "batch_records_per_s": batch_rate(progress, events),
        "batch_split_ms": batch_split(progress),
        "applied": progress.get("applied"),
    }


LAKES = {"local": "CDCPIPE_LOCAL_LAKE", "s3": "CDCPIPE_S3_LAKE"}  # what `stack env` names each lake


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind, the median over the runs of p50, p99 and max; and of p50 ratios taken within each run.

    `<kind>_p50_over_floor_p50`: each kind against the bare append; `event_log_p50_over_<floor>_p50` for
    both floors; `event_log_p50_over_event_log_no_metrics_p50`: what the job's metrics cost.
    """
    out: dict[str, Any] = {}
    for kind in KINDS:
        figures = [r[kind]["latency_s"] for r in runs if (r.get(kind) or {}).get("latency_s")]
        if figures:
            out[kind] = {k: round(statistics.median(f[k] for f in figures), 3) for k in ("p50", "p99", "max")}
    pairs = [
        ("event_log", "floor"),
        ("event_log", "floor_one_task_per_core"),
        ("event_log", "event_log_no_metrics"),
        *((kind, "floor") for kind in ("latest_state", *TABLE_KINDS)),
    ]
    for kind, base in pairs:
        found = [
            r[kind]["latency_s"]["p50"] / r[base]["latency_s"]["p50"]
            for r in runs
            if (r.get(kind) or {}).get("latency_s") and (r.get(base) or {}).get("latency_s")
        ]
        if found:
            out[f"{kind}_p50_over_{base}_p50"] = round(statistics.median(found), 2)
            out[f"{kind}_p50_over_{base}_p50_each_run"] = [round(x, 2) for x in found]
    return out


def ratios(local: dict[str, Any], s3: dict[str, Any]) -> dict[str, float | None]:
    """The object store's figures over the local folder's (latency: > 1 is slower; events/s: < 1 is slower)."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(b / a, 2) if a and b else None

    out = {
        f"{kind}_latency_{p}": ratio(local["medians"].get(kind, {}).get(p), s3["medians"].get(kind, {}).get(p))
        for kind in KINDS
        for p in ("p50", "p99")
    }
    if local.get("throughput") and s3.get("throughput"):
        out["throughput_batch_records_per_s"] = ratio(
            local["throughput"]["batch_records_per_s"], s3["throughput"]["batch_records_per_s"]
        )
        out["throughput_with_startup"] = ratio(
            local["throughput"]["events_per_s_with_startup"], s3["throughput"]["events_per_s_with_startup"]
        )
    return out


def main() -> None:
    """Run the measurements on each lake and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=3, help="latency runs of each kind; figures are their medians")
    parser.add_argument("--s3-runs", type=int, help="latency runs on the s3 lake (default: --runs)")
    parser.add_argument(
        "--kinds",
        default="event_log,latest_state,table_mirror,table_history,floor",
        help=f"comma-separated of {', '.join(KINDS)}",
    )
    parser.add_argument("--events", type=int, default=200_000, help="throughput: events in the topic (0: skip)")
    parser.add_argument("--lakes", default="local,s3", help="comma-separated: local (a folder), s3 (the object store)")
    parser.add_argument(
        "--drift-minutes",
        type=float,
        default=0,
        help="instead: one job (--drift-kind) for this long at --rate, batch duration per minute (jobs_drift.json)",
    )
    parser.add_argument("--drift-kind", default="event_log", choices=KINDS, help="the job kind of a drift run")
    parser.add_argument(
        "--sustain-rates",
        default="",
        help="instead: each kind at these rates (comma-separated), ascending until it falls behind: the highest "
        "it keeps up with, a run of --seconds each (jobs_sustain.json)",
    )
    parser.add_argument(
        "--settle-s", type=float, default=SETTLE_S, help="seconds a driver gets to start before the warm-up"
    )
    parser.add_argument(
        "--warmup-s", type=float, default=WARMUP_S, help="seconds of the same load before each measured window"
    )
    parser.add_argument(
        "--keep-lake", action="store_true", help="leave the runs' tables and checkpoints (to read their Delta logs)"
    )
    parser.add_argument(
        "--job-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a key of the jobs' definition, as TOML (optimize_every=0): a lever to measure; repeatable",
    )
    args = parser.parse_args()
    env = stack_env(StackSettings.load())
    RESULTS.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    chosen = [lake.strip() for lake in args.lakes.split(",") if lake.strip()]
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    unknown = sorted(set(chosen) - set(LAKES))
    if unknown:
        parser.error(f"--lakes: {', '.join(unknown)} unknown; pick from {', '.join(LAKES)}")
    if sorted(set(kinds) - set(KINDS)):
        parser.error(f"--kinds: {', '.join(sorted(set(kinds) - set(KINDS)))} unknown; pick from {', '.join(KINDS)}")
    if any("=" not in setting for setting in args.job_setting):
        parser.error('--job-setting: give KEY=VALUE, the value as TOML (optimize_every=0, trigger="500ms")')
    settings = tuple(" = ".join(part.strip() for part in s.split("=", 1)) for s in args.job_setting)
    result: dict[str, Any] = {
        "benchmark": "streaming_jobs",
        "cores": os.cpu_count(),
        # What the drivers' JVMs ran with: the tests' `-XX:TieredStopAtLevel=1` (no optimising JIT) makes a
        # driver read Kafka several times slower; a figure made under it is not a job's figure.
        "spark_java_options": env.get("CDCPIPE_SPARK_JAVA_OPTIONS", ""),
    }
    topics: list[str] = []
    try:
        for index, name in enumerate(chosen):
            lake = LakePath.of(f"{env[LAKES[name]]}/_bench_{tag}")
            try:
                if args.drift_minutes:
                    topics.append(f"jobs.{tag}{index}d.bench")
                    run = latency(
                        env,
                        lake,
                        f"{tag}{index}d",
                        args.rate,
                        60 * args.drift_minutes,
                        args.drift_kind,
                        args.settle_s,
                        args.warmup_s,
                        settings,
                    )
                    run.pop("_latencies_s", None)
                    by_minute = run["batch_duration_by_minute_ms"]
                    result[name] = {
                        "lake": str(lake),
                        "drift": run,
                        "last_minute_over_first": _last_over_first(by_minute),
                    }
                    continue
                if args.sustain_rates:
                    rates = [int(r) for r in args.sustain_rates.split(",")]

                    def one(kind: str, rate: int, name: str = name, lake: LakePath = lake) -> dict[str, Any]:
                        run_tag = f"{tag}{chosen.index(name)}{KINDS.index(kind)}s{rate}"
                        topics.append(f"jobs.{run_tag}.bench")
                        with stage(f"{name}: {kind} at {rate}/s"):
                            return latency(
                                env, lake, run_tag, rate, args.seconds, kind, args.settle_s, args.warmup_s, settings
                            )

                    sustained = {kind: highest_sustained(one, kind, rates) for kind in kinds}
                    floor_best = sustained.get("floor", {}).get("highest_sustained_per_s")
                    for found in sustained.values():
                        best = found["highest_sustained_per_s"]
                        found["over_floor"] = round(best / floor_best, 2) if best and floor_best else None
                    result[name] = {"lake": str(lake), "sustain": sustained}
                    continue
                runs: list[dict[str, Any]] = []
                for r in range(args.s3_runs if name == "s3" and args.s3_runs is not None else args.runs):
                    # The kinds take turns within each run, so the machine's noise falls on all of them alike.
                    measured: dict[str, Any] = {}
                    for kind in kinds:
                        run_tag = f"{tag}{index}{KINDS.index(kind)}{r}"  # the floors share a first letter
                        topics.append(f"jobs.{run_tag}.bench")
                        with stage(f"{name} run {r + 1}: {kind} latency"):
                            measured[kind] = latency(
                                env,
                                lake,
                                run_tag,
                                args.rate,
                                args.seconds,
                                kind,
                                args.settle_s,
                                args.warmup_s,
                                settings,
                            )
                    runs.append(measured)
                result[name] = {"lake": str(lake), "medians": medians(runs), "runs": runs}
                plot(runs[-1], RESULTS / f"jobs_latency_{name}.png", args.rate)
                for measured in runs:
                    for run in measured.values():
                        run.pop("_latencies_s", None)
                if args.events:
                    topics.append(f"jobs.{tag}{index}.throughput")
                    with stage(f"{name}: latest_state throughput"):
                        result[name]["throughput"] = throughput(env, lake, f"{tag}{index}", args.events)
                    if any(kind in TABLE_KINDS for kind in kinds):
                        with stage(f"{name}: table_mirror throughput"):
                            result[name]["mirror_throughput"] = table_throughput(
                                env, lake, f"{tag}{index}t", args.events
                            )
            finally:
                if not args.keep_lake:
                    lake.delete_tree()
        if "local" in result and "s3" in result and not (args.drift_minutes or args.sustain_rates):
            result["s3_vs_local"] = ratios(result["local"], result["s3"])
        result["note"] = (
            "latency: scheduled commit time in Postgres -> the Delta commit that made the row visible (trigger 1s); "
            "after a warm-up of the same load. floor: the same load and measure through bench/floor_job.py, a bare "
            "Kafka -> Delta append. medians: over the runs, the kinds taking turns in each run; each lake in turn."
        )
    finally:
        # Each run leaves about 350 MB of records and tables; a stack that kept them all would slow later runs.
        admin = AdminClient(env_kafka(env).client_config())
        for future in admin.delete_topics(topics).values() if topics else []:
            with contextlib.suppress(Exception):  # a topic the run did not get to create
                future.result(30)
    file = "jobs_drift.json" if args.drift_minutes else "jobs_sustain.json" if args.sustain_rates else "jobs.json"
    (RESULTS / file).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def plot(run: dict[str, dict[str, Any]], path: Path, rate: int) -> None:
    """Each kind's latency by percentile in one run (the kinds took turns): where a user's table stands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for kind, measured in run.items():
        seconds = measured.get("_latencies_s") or []
        if not seconds:
            continue
        ax.plot([100 * (i + 1) / len(seconds) for i in range(len(seconds))], seconds, label=kind)
    ax.set_xlabel("percentile of the measured events")
    ax.set_ylabel("commit (scheduled) -> visible in Delta, s")
    ax.set_yscale("log")
    ax.set_title(f"commit -> Delta latency by job kind, {rate:,} changes/s, trigger 1 s (2 shared cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _last_over_first(by_minute: list[float]) -> float | None:
    """The last full minute's median batch duration over the first's (> 1: batches got slower)."""
    full = by_minute[:-1] if len(by_minute) > 2 else by_minute
    return round(full[-1] / full[0], 2) if len(full) >= 2 and full[0] else None


if __name__ == "__main__":
    main()
