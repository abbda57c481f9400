"""A table group at scale: many captured tables in one Spark driver, under a steady load spread over all of them.

    python bench/group_bench.py [--tables 100] [--rows 300] [--rate 1000] [--minutes 10] [--idle-s 60]
                                [--baseline-minutes 3] [--join-rows 10000] [--drivers]

Needs the stack running. As a user: a schema of `--tables` tables (int key, a bigint, a text) of `--rows` rows
each, captured with `cdcpipe tables add --schema S --mirror --group G --submit` in folders of the run's own
(one connector, one group file, one driver; local[2], as every bench's jobs). Then:
1. snapshot: the seconds until every mirror holds its table's rows;
2. idle: the driver's CPU (its Python and its JVM) over `--idle-s` without a change, as a share of one core, and
   its resident memory;
3. load: `--rate` changes/s, each an UPDATE of a random row of a random table, committed 10 to a transaction,
   for `--minutes`. From the driver's own metrics (`cdcpipe_job_end_to_end_latency_seconds`: from the change's
   commit in Postgres to the Delta commit that made it visible, every table's series summed), p50 and p99 of
   each `--window-s`, by interpolation within the histogram's buckets as Prometheus' histogram_quantile does;
   drift is the last window's p99 over the first's. The driver's peak resident memory. Those latencies are of the
   changes applied during the load: `applied_share` (applied / written) and the lag at its end say whether the
   job kept up (kept up: less behind at the end than 30 s of the load), and the latency goals count only then.
4. join: a table of `--join-rows` rows added to the running group (`tables add T --group G`): the seconds until
   its mirror holds them; restart: the group stopped and submitted again, its backlog empty: the seconds until
   its driver runs every table and until its metrics say none reads or waits;
5. one driver each (`--drivers`): as many tables again, captured without a group (a job and a driver per table,
   today's way), the same figures (snapshot, idle, load) beside the group's and their ratios;
6. baseline (unless `--baseline-minutes 0`): the group stopped, one more table with a mirror job of its own
   (`tables add T --mirror --submit`), the same total rate into that one table; the ratio of the p50s.
Then every mirror is compared with its table (row counts and the sum of the bigint column). Writes
bench/results/group.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pyarrow as pa
from common import (
    RESULTS,
    RssSampler,
    cdcpipe,
    cpu_seconds,
    delete_connector_topics,
    env_kafka,
    process_ticks,
    rss_mib,
    stack_env,
)
from deltalake import DeltaTable, QueryBuilder
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from infra.config import StackSettings
from schemas import outbox
from schemas.config import OutboxNames, SchemaSettings

LATENCY = "cdcpipe_job_end_to_end_latency_seconds"
PER_TRANSACTION = 10


class Writer(threading.Thread):
    """UPDATEs of random rows of random tables at a steady rate, PER_TRANSACTION to a commit."""

    def __init__(self, dsn: str, tables: list[sql.Identifier], rows: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rows, self.rate = dsn, rows, rate
        self.statements = [sql.SQL("UPDATE {} SET v = v + 1 WHERE id = %s").format(t) for t in tables]
        self.halt, self.changes, self.behind_s = threading.Event(), 0, 0.0

    def run(self) -> None:
        rng = random.Random(7)  # noqa: S311 - a reproducible load, not a secret
        with psycopg.connect(self.dsn) as conn:
            began = time.monotonic()
            while not self.halt.is_set():
                for _ in range(PER_TRANSACTION):
                    conn.execute(rng.choice(self.statements), (rng.randrange(self.rows),))
                conn.commit()
                self.changes += PER_TRANSACTION
                due = began + self.changes / self.rate
                wait = due - time.monotonic()  # kept from the start: the writer's own delays do not add up
                if wait > 0:
                    self.halt.wait(wait)
                else:
                    self.behind_s = max(self.behind_s, -wait)  # the writer could not keep the rate


def driver_pids(run_dir: Path, job: str) -> list[int]:
    """The job's driver: its Python process and every process under it (the JVM)."""
    recorded = run_dir / f"{job}.pid"
    top = int(recorded.read_text().split()[0])
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = process_ticks(int(entry.name))[1]
            except OSError:
                continue
    tree, grew = {top}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sorted(tree)


def _metrics_text(targets: Path, job: str) -> str:
    target = json.loads((targets / f"job-{job}.json").read_text())[0]["targets"][0]
    return httpx.get(f"http://{target}/metrics", timeout=10).text


def lag_records(targets: Path, jobs: list[str]) -> float:
    """Records in the jobs' topics past what they applied (every table's summed), as their drivers last saw them."""
    return sum(
        sample.value
        for job in jobs
        for family in text_string_to_metric_families(_metrics_text(targets, job))
        if family.name == "cdcpipe_job_kafka_lag_records"
        for sample in family.samples
    )


def buckets(targets: Path, jobs: list[str]) -> dict[float, float]:
    """The jobs' latency histogram now, every table's series summed: {upper bound: cumulative count}."""
    found: dict[float, float] = {}
    for job in jobs:
        for family in text_string_to_metric_families(_metrics_text(targets, job)):
            if family.name != LATENCY:
                continue
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    bound = float(sample.labels["le"])
                    found[bound] = found.get(bound, 0.0) + sample.value
    return found


def quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """histogram_quantile's interpolation: within the bucket the q-th observation falls in."""
    bounds = sorted(cumulative)
    total = cumulative.get(float("inf"), 0.0)
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            return round(lower + (bound - lower) * (rank - below) / max(count - below, 1e-9), 3)
        lower, below = bound, count
    return None


def minus(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {b: after[b] - before.get(b, 0.0) for b in after}


def loaded(
    env: dict[str, str],
    dsn: str,
    tables: list[sql.Identifier],
    rows: int,
    rate: int,
    minutes: float,
    jobs: list[str],
    window_s: float = 60,
) -> dict[str, Any]:
    """`rate` changes/s over `tables` for `minutes`: latency per window from the jobs' metrics, peak RSS (summed)."""
    run_dir, targets = Path(env["CDCPIPE_RUN_DIR"]), Path(env["CDCPIPE_METRICS_TARGETS_DIR"])
    pids = [pid for job in jobs for pid in driver_pids(run_dir, job)]
    sampler = RssSampler(*pids)
    sampler.start()
    writer = Writer(dsn, tables, rows, rate)
    first = last = buckets(targets, jobs)
    per_window: list[dict[str, Any]] = []
    cpu_before, began = cpu_seconds(pids), time.monotonic()
    writer.start()
    try:
        for n in range(max(1, round(60 * minutes / window_s))):
            time.sleep(max(0.0, began + window_s * (n + 1) - time.monotonic()))
            now = buckets(targets, jobs)
            window = minus(now, last)
            per_window.append(
                {"ends_s": round(window_s * (n + 1)), "p50_s": quantile(0.5, window), "p99_s": quantile(0.99, window)}
            )
            print(json.dumps(per_window[-1]), flush=True)
            last = now
    finally:
        writer.halt.set()
        writer.join()
    took = time.monotonic() - began
    cpu = cpu_seconds(pids) - cpu_before
    whole = minus(last, first)
    p99s = [m["p99_s"] for m in per_window if m["p99_s"] is not None]
    return {
        "rate_per_s": rate,
        "changes": writer.changes,
        "writer_behind_s": round(writer.behind_s, 1),
        "p50_s": quantile(0.5, whole),
        "p99_s": quantile(0.99, whole),
        "measured_changes": whole.get(float("inf"), 0.0),
        # The latency above is of the changes applied during the load: a job that falls behind leaves the rest out.
        "applied_share": round(whole.get(float("inf"), 0.0) / max(writer.changes, 1), 3),
        "lag_at_end_records": lag_records(targets, jobs),
        "per_window": per_window,
        "p99_last_over_first_window": round(p99s[-1] / p99s[0], 2) if len(p99s) > 1 and p99s[0] else None,
        "driver_cpu_share_of_a_core": round(cpu / took, 2),
        "driver_peak_rss_mib": sampler.stop(),  # every process of the drivers: Python and JVM
    }


def mirrors_equal(dsn: str, schema: str, lake: Path, tables: list[str], job_of: dict[str, str]) -> list[str]:
    """The tables whose mirror differs from it: its row count or the sum of v."""
    differ = []
    with psycopg.connect(dsn) as conn:
        for table in tables:
            row = conn.execute(
                sql.SQL("SELECT count(*), coalesce(sum(v), 0) FROM {}").format(sql.Identifier(schema, table))
            ).fetchone()
            truth = (int(row[0]), int(row[1])) if row else (0, 0)
            try:
                held = QueryBuilder().register("t", DeltaTable(str(lake / job_of[table])))
                got = pa.table(
                    held.execute("SELECT count(*) AS n, coalesce(sum(v), 0) AS s FROM t").read_all()
                ).to_pylist()[0]
                mirror = (int(got["n"]), int(got["s"]))
            except Exception:  # not made yet
                mirror = (-1, -1)
            if mirror != truth:
                differ.append(f"{table}: {truth} in Postgres, {mirror} in the mirror")
    return differ


def wait_equal(
    dsn: str, schema: str, lake: Path, tables: list[str], job_of: dict[str, str], timeout_s: float, poll_s: float = 5
) -> float:
    """Seconds until every mirror equals its table (a mirror found equal is not read again)."""
    began, behind = time.monotonic(), list(tables)
    while behind and time.monotonic() - began < timeout_s:
        behind = [t.split(":")[0] for t in mirrors_equal(dsn, schema, lake, behind, job_of)]
        if behind:
            time.sleep(poll_s)
    if behind:
        raise SystemExit(f"group bench: {len(behind)} mirrors still differ after {timeout_s:.0f} s: {behind[:5]}")
    return round(time.monotonic() - began, 1)


def joined(
    env: dict[str, str],
    dsn: str,
    schema: str,
    group: str,
    lake: Path,
    job_of: dict[str, str],
    rows: int,
    timeout_s: float,
) -> dict[str, Any]:
    """A table of `rows` rows added to the running group: the seconds until its mirror holds them all."""
    ident = sql.Identifier(schema, "joined")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v bigint NOT NULL, note text)").format(ident))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, g, 'row ' || g FROM generate_series(0, %s) g").format(ident), (rows - 1,)
        )
    job_of["joined"] = f"{schema}_joined_mirror"
    began = time.monotonic()
    cdcpipe(env, "tables", "add", f"{schema}.joined", "--mirror", "--group", group)
    added_s = time.monotonic() - began
    equal_s = wait_equal(dsn, schema, lake, ["joined"], job_of, timeout_s, poll_s=1)
    return {"rows": rows, "tables_add_s": round(added_s, 1), "mirrored_s": round(added_s + equal_s, 1)}


def restarted(env: dict[str, str], group: str) -> dict[str, Any]:
    """The group started again on an empty backlog: seconds until its driver runs every table, and until none waits.

    Runs every table: its members file written. None waits: its metrics say no table reads or waits for a turn.
    """
    run_dir, targets = Path(env["CDCPIPE_RUN_DIR"]), Path(env["CDCPIPE_METRICS_TARGETS_DIR"])
    members = run_dir / f"{group}.members.json"
    began = time.monotonic()
    cdcpipe(env, "jobs", "submit", group)
    ready_s = idle_s = None
    while time.monotonic() - began < 600 and idle_s is None:
        if ready_s is None and members.exists():
            ready_s = round(time.monotonic() - began, 1)
        if ready_s is not None:
            gauges = group_gauges(targets, group)
            if gauges.get("cdcpipe_group_tables_reading") == 0 and gauges.get("cdcpipe_group_tables_waiting") == 0:
                idle_s = round(time.monotonic() - began, 1)
        time.sleep(0.5)
    return {"every_table_ready_s": ready_s, "every_table_seen_caught_up_s": idle_s}


def group_gauges(targets: Path, group: str) -> dict[str, float]:
    """The group's own gauges (tables reading, waiting) from its driver's metrics; empty until it serves."""
    try:
        target = json.loads((targets / f"job-{group}.json").read_text())[0]["targets"][0]
        text = httpx.get(f"http://{target}/metrics", timeout=10).text
    except (OSError, ValueError, LookupError, httpx.HTTPError):
        return {}
    return {
        family.name: family.samples[0].value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("cdcpipe_group_tables_") and family.samples
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def made(dsn: str, schema: str, tables: list[str], rows: int) -> None:
    """The tables (int key, a bigint, a text) of `rows` rows each, in `schema` (made if missing)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        for table in tables:
            ident = sql.Identifier(schema, table)
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v bigint NOT NULL, note text)").format(ident))
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT g, 0, 'row ' || g FROM generate_series(0, %s) g").format(ident),
                (rows - 1,),
            )


def idle(run_dir: Path, jobs: list[str], seconds: float) -> dict[str, Any]:
    """The drivers' CPU over `seconds` without a change (a share of one core, all of them) and their memory."""
    pids = [pid for job in jobs for pid in driver_pids(run_dir, job)]
    cpu_before = cpu_seconds(pids)
    time.sleep(seconds)
    return {
        "driver_cpu_share_of_a_core": round((cpu_seconds(pids) - cpu_before) / seconds, 3),
        "driver_rss_mib": round(sum(rss_mib(p) for p in pids), 1),
        "processes": len(pids),
    }


def one_driver_each(env: dict[str, str], dsn: str, schema: str, args: argparse.Namespace) -> dict[str, Any]:
    """Today's way beside the group: as many tables of the same shape, each with a driver of its own, same figures.

    `tables add --schema S --mirror --submit` (no group): a job and a driver per table. The seconds until every
    mirror holds its rows, the drivers' idle CPU and memory (all of them), the same load over their tables.
    """
    lake = Path(env["CDCPIPE_LAKE"])
    tables = [f"d{n:03d}" for n in range(args.tables)]
    job_of = {t: f"{schema}_{t}_mirror" for t in tables}
    jobs = list(job_of.values())
    made(dsn, schema, tables, args.rows)
    result: dict[str, Any] = {"drivers": len(jobs)}
    try:
        began = time.monotonic()
        cdcpipe(env, "tables", "add", "--schema", schema, "--mirror", "--submit")
        result["tables_add_s"] = round(time.monotonic() - began, 1)
        result["snapshot_in_every_mirror_s"] = round(
            result["tables_add_s"] + wait_equal(dsn, schema, lake, tables, job_of, args.timeout_s), 1
        )
        result["idle"] = idle(Path(env["CDCPIPE_RUN_DIR"]), jobs, args.idle_s)
        print(json.dumps({"drivers": result["idle"]}), flush=True)
        idents = [sql.Identifier(schema, t) for t in tables]
        result["load"] = loaded(env, dsn, idents, args.rows, args.rate, args.minutes, jobs, args.window_s)
        result["load"]["caught_up_s"] = wait_equal(dsn, schema, lake, tables, job_of, args.timeout_s)
        result["mirrors_differing"] = mirrors_equal(dsn, schema, lake, tables, job_of)
    finally:
        for job in jobs:
            subprocess.run([sys.executable, "-m", "cdcpipe", "jobs", "stop", job], env=env, capture_output=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--rate", type=int, default=1000, help="changes per second, over every table")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--window-s", type=float, default=60.0, help="latency is reported per window of this length")
    parser.add_argument("--baseline-minutes", type=float, default=3.0, help="one table alone at --rate (0: skip)")
    parser.add_argument("--timeout-s", type=float, default=1200.0, help="for the snapshot and each catch-up")
    parser.add_argument(
        "--join-rows", type=int, default=10_000, help="a table of this many rows joins the running group (0: skip)"
    )
    parser.add_argument(
        "--drivers",
        action="store_true",
        help="then as many tables again with a driver each (today's way), the same figures beside the group's",
    )
    args = parser.parse_args()
    env = stack_env(StackSettings.load())
    tag = uuid.uuid4().hex[:8]
    home = Path(tempfile.mkdtemp(prefix=f"group_bench_{tag}_"))
    folders = {name: home / name for name in ("contracts", "topics", "jobs", "connectors", "run")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    folders["lake"] = Path(env["CDCPIPE_LOCAL_LAKE"]) / f"_bench_group_{tag}"  # read back with delta-rs
    schema, group, prefix = f"grp_{tag}", f"group_{tag}", f"grp_{tag}"
    names = OutboxNames.load(outbox_schema=f"grp_out_{tag}")
    settings = SchemaSettings.load(tables_publication=f"pub_grp_{tag}")
    dsn = settings.pg_dsn.get_secret_value()
    env.update(
        {
            "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
            "CDCPIPE_TABLES_PUBLICATION": settings.tables_publication,
            "CDCPIPE_CAPTURE_CONNECTOR": f"group-bench-{tag}",
            "CDCPIPE_CAPTURE_TOPIC_PREFIX": prefix,
            "CDCPIPE_CAPTURE_SLOT": f"grp_{tag}",
            "CDCPIPE_TABLE_CONTRACT_DIRS": str(folders["contracts"]),
            "CDCPIPE_TOPICS_DIR": str(folders["topics"]),
            "CDCPIPE_JOBS_DIRS": str(folders["jobs"]),
            "CDCPIPE_CONNECTORS_DIR": str(folders["connectors"]),
            "CDCPIPE_RUN_DIR": str(folders["run"]),
            "CDCPIPE_LAKE": str(folders["lake"]),
        }
    )
    tables = [f"t{n:03d}" for n in range(args.tables)]
    job_of = {t: f"{schema}_{t}_mirror" for t in tables}
    result: dict[str, Any] = {"benchmark": "group", "cores": os.cpu_count(), **vars(args)}
    made(dsn, schema, tables, args.rows)
    with psycopg.connect(dsn) as conn:
        outbox.apply(conn, names, settings)
    try:
        began = time.monotonic()
        cdcpipe(env, "tables", "add", "--schema", schema, "--mirror", "--group", group, "--submit")
        result["tables_add_s"] = round(time.monotonic() - began, 1)
        result["snapshot_in_every_mirror_s"] = round(
            result["tables_add_s"] + wait_equal(dsn, schema, folders["lake"], tables, job_of, args.timeout_s), 1
        )
        print(json.dumps({k: result[k] for k in ("tables_add_s", "snapshot_in_every_mirror_s")}), flush=True)
        result["idle"] = idle(folders["run"], [group], args.idle_s)
        print(json.dumps(result["idle"]), flush=True)
        idents = [sql.Identifier(schema, t) for t in tables]
        result["group"] = loaded(env, dsn, idents, args.rows, args.rate, args.minutes, [group], args.window_s)
        result["group"]["caught_up_s"] = wait_equal(dsn, schema, folders["lake"], tables, job_of, args.timeout_s)
        if args.join_rows > 0:
            result["join"] = joined(env, dsn, schema, group, folders["lake"], job_of, args.join_rows, args.timeout_s)
            tables.append("joined")
            print(json.dumps(result["join"]), flush=True)
        cdcpipe(env, "jobs", "stop", group)
        result["restart"] = restarted(env, group)
        print(json.dumps(result["restart"]), flush=True)
        cdcpipe(env, "jobs", "stop", group)
        if args.drivers:
            result["one_driver_each"] = one_driver_each(env, dsn, f"{schema}_d", args)
            print(json.dumps({"one_driver_each": result["one_driver_each"]["load"]}), flush=True)
        if args.baseline_minutes > 0:
            alone = "alone"
            made(dsn, schema, [alone], args.rows)
            cdcpipe(env, "tables", "add", f"{schema}.{alone}", "--mirror", "--submit")
            job_of[alone] = f"{schema}_{alone}_mirror"
            wait_equal(dsn, schema, folders["lake"], [alone], job_of, args.timeout_s)
            result["single"] = loaded(
                env,
                dsn,
                [sql.Identifier(schema, alone)],
                args.rows,
                args.rate,
                args.baseline_minutes,
                [job_of[alone]],
                args.window_s,
            )
            cdcpipe(env, "jobs", "stop", job_of[alone])
            group_p50, single_p50 = result["group"]["p50_s"], result["single"]["p50_s"]
            result["p50_group_over_single"] = round(group_p50 / single_p50, 2) if group_p50 and single_p50 else None
        result["mirrors_differing"] = mirrors_equal(dsn, schema, folders["lake"], tables, job_of)
    finally:
        for job in (group, f"{schema}_alone_mirror"):
            subprocess.run([sys.executable, "-m", "cdcpipe", "jobs", "stop", job], env=env, capture_output=True)
        connector = env["CDCPIPE_CAPTURE_CONNECTOR"]
        command = ["connectors", "delete", connector, "--drop-slot", "--drop-publication", "--yes"]
        subprocess.run([sys.executable, "-m", "cdcpipe", *command], env=env, capture_output=True, check=False)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for dropped in (schema, f"{schema}_d"):
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(dropped)))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.outbox_schema)))
        delete_connector_topics(env_kafka(env), prefix)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(folders["lake"], ignore_errors=True)
    group_run = result.get("group", {})
    # Kept up: at the load's end, less behind than 30 s of the load (the p99 goal); the latency figures are of the
    # changes applied, so they count only then.
    kept_up = group_run.get("lag_at_end_records", 1e18) <= 30 * args.rate
    result["goals"] = {
        "rss_at_most_3_gib": (group_run.get("driver_peak_rss_mib") or 1e9) <= 3072,
        "idle_cpu_at_most_10_percent": result.get("idle", {}).get("driver_cpu_share_of_a_core", 1.0) <= 0.10,
        "kept_up": kept_up,
        "p50_within_2x_single": (result.get("p50_group_over_single") or 1e9) <= 2.0 and kept_up,
        "p99_under_30_s": (group_run.get("p99_s") or 1e9) < 30 and kept_up,
        "startup_at_most_90_s": (result.get("restart", {}).get("every_table_seen_caught_up_s") or 1e9) <= 90,
        "joined_table_mirrored_within_60_s": (result.get("join", {}).get("mirrored_s") or 1e9) <= 60,
    }
    # A part this run left out (`--baseline-minutes 0`, `--join-rows 0`) is not measured: neither met nor missed.
    unmeasured = {"p50_within_2x_single": "single", "joined_table_mirrored_within_60_s": "join"}
    result["goals"].update({goal: None for goal, part in unmeasured.items() if part not in result})
    drivers = result.get("one_driver_each", {})
    if drivers:
        result["group_over_one_driver_each"] = {
            "idle_cpu": ratio(
                result["idle"]["driver_cpu_share_of_a_core"], drivers["idle"]["driver_cpu_share_of_a_core"]
            ),
            "idle_rss": ratio(result["idle"]["driver_rss_mib"], drivers["idle"]["driver_rss_mib"]),
            "snapshot_s": ratio(result["snapshot_in_every_mirror_s"], drivers["snapshot_in_every_mirror_s"]),
            "load_p50": ratio(group_run.get("p50_s"), drivers["load"].get("p50_s")),
            "load_p99": ratio(group_run.get("p99_s"), drivers["load"].get("p99_s")),
        }
    result["passed"] = not result.get("mirrors_differing") and not drivers.get("mirrors_differing")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "group.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
