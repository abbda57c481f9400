"""What the benchmarks share: the stack's environment, topics, the relay as a process, load, CPU and memory.

The benchmarks are scripts run from the checkout (`python bench/<name>.py`); each imports this file as
`common`, never another benchmark.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from psycopg import sql

from ground.kafka_client import KafkaSettings
from infra.config import StackSettings
from infra.stack import env_values
from schemas import outbox as schema_outbox
from schemas import topics
from schemas.config import OutboxNames, SchemaSettings
from schemas.topics import PrefixGrant, TopicSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once.checkpoints import PROGRESS_FILE

# A smoke run (tests/bench) writes elsewhere: the figures here are the ones the docs quote.
BENCH = Path(__file__).resolve().parent
EXAMPLES = BENCH.parent / "examples"
# The benches' events: their own contract (BenchEvent) and the demo's (AccountOpened, ...), chosen here as the
# demo chooses its samples; cdcpipe itself ships none.
SAMPLE_FOLDERS = {
    "CDCPIPE_CONTRACT_DIRS": f"{BENCH / 'contracts'}:{EXAMPLES / 'contracts'}",
    "CDCPIPE_TABLE_CONTRACT_DIRS": str(EXAMPLES / "tables"),
}
RESULTS = Path(os.environ.get("CDCPIPE_BENCH_RESULTS") or Path(__file__).parent / "results")
PAD = "x" * 1000  # with the scheduled time and JSON punctuation, a payload of about 1 KB
PARTITIONS = 4
BATCH = 2000


def payload(scheduled_ns: int) -> str:
    # jsonb orders keys by length, so "t" always comes first (Debezium keeps that order): the consumer reads
    # it without parsing JSON.
    return f'{{"t": {scheduled_ns}, "pad": "{PAD}"}}'


def copy_rows(conn: psycopg.Connection[Any], names: OutboxNames, count: int, start: int = 0) -> None:
    copy = sql.SQL("COPY {} (aggregatetype, aggregateid, type, payload) FROM STDIN").format(
        sql.Identifier(names.outbox_schema, names.outbox_table)
    )
    now = time.time_ns()
    with conn.cursor() as cur, cur.copy(copy) as out:
        for k in range(start, start + count):
            out.write_row(("bench", f"agg-{k % 1000}", "BenchEvent", payload(now)))


def vacuum(dsn: str, *names: OutboxNames) -> None:
    """Clear the dead rows the last drains left in these outboxes, so a measurement starts from a clean table.

    Left to autovacuum, they piled up over the rounds: the Postgres ceiling fell from 115k to 95k rows/s and
    the drain from 58k to 51k events/s between a run's first and third round. And autovacuum then cleaned them
    in the middle of a latency run: its VACUUM ANALYZE of the ceiling's outbox stalled the application's commits
    (up to 97 ms, for the 9 s it ran). ANALYZE too, or autovacuum would still come for the statistics.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in names:
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(n.outbox_schema, n.outbox_table)))


def rss_mib(pid: int) -> float:
    """A process's resident memory; 0 once it is gone (a driver's short-lived children come and go)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    """Peak resident memory of a process (of several together: their sum), sampled every 100 ms."""

    def __init__(self, *pids: int) -> None:
        super().__init__(daemon=True)
        self.pids, self.peak, self._halt = pids, 0.0, threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.1):
            self.peak = max(self.peak, sum(rss_mib(pid) for pid in self.pids))

    def stop(self) -> float:
        self._halt.set()
        self.join()
        return round(self.peak, 1)


def machine_busy_ticks() -> int:
    """Clock ticks the whole machine has spent busy so far (all cores; idle and I/O wait left out)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4]


def machine_busy_s() -> float:
    """The same, in CPU-seconds."""
    return machine_busy_ticks() / os.sysconf("SC_CLK_TCK")


def cpu_us_per_event(busy_before: float, count: int) -> float:
    """Microseconds of CPU, all processes together, per event since `busy_before`: what each way costs."""
    return round(1e6 * (machine_busy_s() - busy_before) / max(count, 1), 1)


def start_relay(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cdcpipe", "relay", "run"], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def wait_leader(dsn: str, names: OutboxNames, pid: int) -> None:
    deadline = time.monotonic() + 30
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                "AND l.granted AND a.application_name = %s",
                (f"cdcpipe-relay:{pid}",),
            ).fetchone()
            if row:
                return
            time.sleep(0.1)
    raise SystemExit("the relay did not become leader within 30s")


def drain(
    dsn: str, names: OutboxNames, kafka: KafkaSettings, topic: str, count: int, pid: int | None, notifications: int = 0
) -> dict[str, Any]:
    """Commit `count` rows at once; time until a consumer has received every one of them from Kafka.

    Then, if asked, `notifications` more on the outbox's channel at once, as that many commits of an
    application would send while the publisher is busy with the backlog.
    """
    vacuum(dsn, names)
    consumer = at_end(kafka, topic)
    sampler = RssSampler(pid) if pid else None
    if sampler:
        sampler.start()
    with psycopg.connect(dsn) as conn:
        copy_rows(conn, names, count)
        conn.commit()  # the NOTIFY at this commit wakes the relay; Debezium sees the commit in the WAL
        began, busy = time.perf_counter(), machine_busy_s()
        if notifications:
            conn.execute(
                "SELECT pg_catalog.pg_notify(%s, g::text) FROM generate_series(1, %s) AS g",
                (names.notify_channel, notifications),
            )
            conn.commit()
    received = 0
    deadline = time.monotonic() + 600
    while received < count and time.monotonic() < deadline:
        received += sum(1 for m in consumer.consume(num_messages=10_000, timeout=0.2) if m.error() is None)
    elapsed = time.perf_counter() - began
    cpu = cpu_us_per_event(busy, received)  # this consumer's share included
    consumer.close()
    result: dict[str, Any] = {
        "events": count,
        "received": received,
        "seconds": round(elapsed, 2),
        "events_per_s": round(received / elapsed),
        "cpu_us_per_event": cpu,
        "machine_busy_percent": round(cpu * received / elapsed / 1e4, 1),
    }
    if sampler:
        result["publisher_peak_rss_mib"] = sampler.stop()
    return result


def at_end(kafka: KafkaSettings, topic: str) -> Consumer:
    """A consumer positioned at the end of every partition of `topic` (it sees only what comes next)."""
    consumer = Consumer(
        {
            **kafka.client_config(),
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",
            "socket.nagle.disable": True,  # as the relay's producer: the fetch requests go out at once
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
    consumer.consume(num_messages=1, timeout=1.0)  # join the partitions before anything is sent
    return consumer


@dataclass(frozen=True)
class Load:
    """What a generator commits: the statement, and the row of event `k` scheduled at `scheduled_ns`."""

    insert: sql.Composed
    row: Callable[[int, int], tuple[object, ...]]


def outbox_load(names: OutboxNames) -> Load:
    """~1 KB events into an outbox, over 1,000 aggregates."""
    insert = sql.SQL("INSERT INTO {} (aggregatetype, aggregateid, type, payload) VALUES (%s, %s, %s, %s)").format(
        sql.Identifier(names.outbox_schema, names.outbox_table)
    )
    return Load(insert, lambda k, scheduled_ns: ("bench", f"agg-{k % 1000}", "BenchEvent", payload(scheduled_ns)))


TABLE_COLUMNS = (
    "id bigint PRIMARY KEY, account text NOT NULL, currency text NOT NULL, amount numeric(14,2) NOT NULL, "
    "status text NOT NULL, kind text NOT NULL, t bigint NOT NULL, attempts int NOT NULL DEFAULT 0, note text, "
    "created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now()"
)


def table_load(table: sql.Identifier, keys: int) -> Load:
    """Row changes of an application's table (11 columns, ~700 bytes a row): event `k` writes row `k % keys`.

    The first pass over the keys inserts, every later one updates (an upsert, as applications write): `t` is the
    change's scheduled commit time, so the row a reader sees says which change it is.
    """
    insert = sql.SQL(
        "INSERT INTO {} AS cur (id, account, currency, amount, status, kind, t, note) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (id) DO UPDATE SET amount = excluded.amount, status = excluded.status, t = excluded.t, "
        "attempts = cur.attempts + 1, note = excluded.note, updated_at = now()"
    ).format(table)
    statuses = ("pending", "authorized", "captured", "settled")
    return Load(
        insert,
        lambda k, scheduled_ns: (
            k % keys,
            f"acct-{k % keys:08d}",
            "EUR",
            (k % 100_000) / 100,
            statuses[k % 4],
            "card",
            scheduled_ns,
            PAD[:600],
        ),
    )


def generate(dsn: str, load: Load, rate: int, seconds: float, start_ns: int, measured_from: int, report: str) -> None:
    """Commit `rate` events per second on schedule; each transaction holds every event that is due.

    The worst lag of a commit behind its schedule counts only the transactions from event `measured_from`
    on: those of the warm-up are not measured. The report is written to the file `report` (JSON) as it
    ends: a file, not a queue, so nothing holds the process at its exit when its parent reads no more.
    """
    total = int(rate * seconds)
    interval = 1e9 / rate
    sent, transactions, worst_lag_ns = 0, 0, 0
    commits: list[tuple[int, int]] = []  # (events committed so far, when that commit returned)
    with psycopg.connect(dsn) as conn:
        while sent < total:
            now = time.time_ns()
            due = min(total, int((now - start_ns) / interval) + 1) if now >= start_ns else 0
            if due <= sent:
                time.sleep(max(0.0, (start_ns + sent * interval - now) / 1e9))
                continue
            rows = [load.row(k, start_ns + int(k * interval)) for k in range(sent, due)]
            # A prepared statement (psycopg prepares it after a few runs; executemany pipelines the rows): the
            # cheapest way for Postgres to take one small transaction, as an application would send it.
            with conn.cursor() as cur:
                if len(rows) == 1:
                    cur.execute(load.insert, rows[0])
                else:
                    cur.executemany(load.insert, rows)
            conn.commit()
            committed_ns = time.time_ns()
            commits.append((due, committed_ns))
            if due > measured_from:
                worst_lag_ns = max(worst_lag_ns, committed_ns - (start_ns + int((due - 1) * interval)))
            transactions += 1
            sent = due
    partial = Path(report + ".partial")
    partial.write_text(
        json.dumps(
            {
                "events": sent,
                "transactions": transactions,
                "worst_commit_lag_ms": round(worst_lag_ns / 1e6, 1),
                "commits": commits,
            }
        )
    )
    partial.replace(report)  # whole or not there


class Generator:
    """`generate` in a process of its own; every wait on it bounded."""

    def __init__(self, dsn: str, load: Load, rate: int, seconds: float, start_ns: int, measured_from: int = 0) -> None:
        self.seconds = seconds
        self._folder = tempfile.TemporaryDirectory(prefix="cdcpipe-bench-generator-")
        self._report = Path(self._folder.name) / "report.json"
        args = (dsn, load, rate, seconds, start_ns, measured_from, str(self._report))
        self.process = mp.Process(target=generate, args=args)
        self.process.start()

    def report(self, grace_s: float = 120.0) -> dict[str, Any]:
        """Its report, once it has committed every event (within its seconds from now and `grace_s`)."""
        self.process.join(self.seconds + grace_s)
        try:
            if self.process.is_alive():
                self.stop()
                raise SystemExit(f"the load generator did not finish within {self.seconds + grace_s:.0f} s; stopped it")
            if not self._report.is_file():
                raise SystemExit(f"the load generator ended (exit code {self.process.exitcode}) without its report")
            found: dict[str, Any] = json.loads(self._report.read_text())
            return found
        finally:
            self._folder.cleanup()

    def stop(self) -> None:
        """End it now, whatever it was doing (a run that failed)."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)
        self._folder.cleanup()


def process_ticks(pid: int) -> tuple[int, int]:
    """A process's (user + system CPU clock ticks so far, parent pid); OSError once it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    return int(fields[11]) + int(fields[12]), int(fields[1])


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (those gone count as 0)."""
    total = 0
    for pid in pids:
        try:
            total += process_ticks(pid)[0]
        except OSError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


def create_bench_topics(kafka: KafkaSettings, names: list[str], partitions: int, replicas: int = -1) -> None:
    """Create topics as `cdcpipe topics apply` does, with the ACLs the stack's relay, connect and jobs need.

    `replicas` -1: the cluster's (three on a cluster of three, as production keeps them); 1 needs 1 in sync.
    """
    config = {"min.insync.replicas": "1"} if replicas == 1 else {}
    specs = [
        TopicSpec(
            name,
            partitions,
            replicas,
            config=config,
            producers=("User:relay", "User:connect"),
            consumers=("User:jobs",),
        )
        for name in names
    ]
    topics.apply(kafka.client_config(), specs)


def connector_grants(prefix: str) -> list[PrefixGrant]:
    """A bench's connector writes topics Connect creates (a bench declares none): grants on its two prefixes.

    `tables add` declares each topic instead (capture.files.connector_topics); a bench's tables come and go.
    """
    connect = ("User:connect",)
    return [
        PrefixGrant(f"{prefix}.", connect, ("User:jobs",), connect),
        PrefixGrant(f"__debezium-heartbeat.{prefix}", connect, (), connect),
    ]


def grant_connector_topics(kafka: KafkaSettings, prefix: str) -> None:
    """Let Connect create and write the topics a connector with `topic.prefix` = `prefix` names itself."""
    topics.apply(kafka.client_config(), [], connector_grants(prefix))


def delete_connector_topics(kafka: KafkaSettings, prefix: str) -> None:
    """The topics Connect made under a connector's prefixes (`grant_connector_topics`), deleted."""
    own = tuple(g.prefix for g in connector_grants(prefix))
    admin = AdminClient(kafka.client_config())
    made = [t for t in admin.list_topics(timeout=10).topics if t.startswith(own)]
    for future in admin.delete_topics(made).values() if made else []:
        with contextlib.suppress(Exception):
            future.result(30)


def env_kafka(env: dict[str, str]) -> KafkaSettings:
    """The Kafka client settings `stack env` points at (the stack's admin)."""
    return KafkaSettings.from_file(Path(env["CDCPIPE_KAFKA_CONFIG"]))


def stack_env(stack: StackSettings) -> dict[str, str]:
    """The environment of this process, wired to the local stack, as `eval "$(cdcpipe stack env)"` would.

    The bench's own settings read it too (the roles' password files, the relay's DSN), so what it sets up and
    the processes it starts agree. Jobs a bench starts run in local mode even with the cluster up: the figures
    are for local[2], and several applications would queue for one worker's cores.
    """
    os.environ.update({**env_values(stack), "CDCPIPE_SPARK_MASTER": "local[2]"})
    for variable, folders in SAMPLE_FOLDERS.items():
        os.environ.setdefault(variable, folders)
    # The benches' own events need their own contract, whatever else the folders hold.
    held = os.environ["CDCPIPE_CONTRACT_DIRS"].split(":")
    if str(BENCH / "contracts") not in held:
        os.environ["CDCPIPE_CONTRACT_DIRS"] = ":".join([str(BENCH / "contracts"), *held])
    return dict(os.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def create_topic(env: dict[str, str], topic: str, replicas: int = -1) -> None:
    create_bench_topics(env_kafka(env), [topic], PARTITIONS, replicas)


def fill_topic(env: dict[str, str], topic: str, events: int, keys: int = 10_000, pad: int = 900) -> None:
    """`events` AccountOpened events in the outbox wire format (1 KB with `pad` 900), over `keys` accounts."""
    producer = Producer(env_kafka(env).client_config(**{"linger.ms": 20}))
    value = json.dumps({"account_id": "x", "owner": PAD[:pad], "currency": "EUR"}).encode()
    for k in range(events):
        headers: list[tuple[str, str | bytes | None]] = [
            ("id", str(uuid.uuid4()).encode()),
            ("eventType", b"AccountOpened"),
            ("eventVersion", b"1"),
        ]
        while True:
            try:
                producer.produce(topic, key=f"acc-{k % keys}".encode(), value=value, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()


def watch_batches(checkpoint: LakePath, batches: dict[int, dict[str, Any]], done: threading.Event) -> None:
    """Collect each micro-batch's progress (rows, Spark's time per phase, the job's steps) as the job writes it."""
    path = checkpoint / PROGRESS_FILE
    while not done.wait(0.2):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        progress = record.get("progress") or {}
        if "batchId" in progress:
            batches.setdefault(int(progress["batchId"]), {}).update(progress)
        steps = record.get("batch_steps") or {}
        if "batch_id" in steps:
            batches.setdefault(int(steps["batch_id"]), {})["steps"] = steps


def cdcpipe(env: dict[str, str], *args: str) -> str:
    """`cdcpipe ARGS` as a user runs it, with `env`; its output, or exit naming the command and what it said."""
    done = subprocess.run(
        [sys.executable, "-m", "cdcpipe", *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"cdcpipe {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


@dataclass(frozen=True)
class Captured:
    """A table of this run's own, captured with `cdcpipe tables add` in folders of its own, and its job."""

    env: dict[str, str]  # the run's user: its folders, connector, slot, publication, topic prefix, lake
    table: sql.Identifier
    job: str
    topic: str
    name: str  # the table as `cdcpipe tables add` names it, and its contract: schema.table


@contextlib.contextmanager
def captured(
    env: dict[str, str], lake: LakePath, tag: str, what: str, settings: tuple[str, ...] = ()
) -> Iterator[Captured]:
    """An empty application table (common.TABLE_COLUMNS), `tables add --<what>` run on it; all removed after.

    `settings`: more keys of the job's definition, after what `add` wrote.
    """
    dsn = env["CDCPIPE_PG_DSN"]
    home = RESULTS / f"_bench_tables_{tag}"
    folders = {name: home / name for name in ("contracts", "topics", "jobs", "connectors")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    connector, prefix, table = f"jobs-bench-{tag}", f"jb_{tag}", f"jb_{tag}"
    ident = sql.Identifier("public", table)
    names = OutboxNames.load(outbox_schema=f"jobs_bench_{tag}")  # where `tables add` finds Debezium's signal table
    user = {
        **env,
        "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
        "CDCPIPE_TABLES_PUBLICATION": f"pub_{prefix}",
        "CDCPIPE_CAPTURE_CONNECTOR": connector,
        "CDCPIPE_CAPTURE_TOPIC_PREFIX": prefix,
        "CDCPIPE_CAPTURE_SLOT": f"slot_{prefix}",
        "CDCPIPE_TABLE_CONTRACT_DIRS": str(folders["contracts"]),
        "CDCPIPE_TOPICS_DIR": str(folders["topics"]),
        "CDCPIPE_JOBS_DIRS": str(folders["jobs"]),
        "CDCPIPE_CONNECTORS_DIR": str(folders["connectors"]),
        "CDCPIPE_LAKE": str(lake),
    }
    schema = SchemaSettings.load(
        pg_dsn=dsn, publication=f"pub_jobs_bench_{tag}", tables_publication=user["CDCPIPE_TABLES_PUBLICATION"]
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(ident, sql.SQL(TABLE_COLUMNS)))
    try:
        with psycopg.connect(dsn) as conn:
            schema_outbox.apply(conn, names, schema)
        cdcpipe(user, "tables", "add", f"public.{table}", f"--{what}")
        job = f"{table}_{what}"
        with (folders["jobs"] / f"{job}.toml").open("a") as definition:
            definition.write("".join(f"{line}\n" for line in settings))
        yield Captured(user, ident, job, f"{prefix}.public.{table}", f"public.{table}")
    finally:
        command = ["connectors", "delete", connector, "--drop-slot", "--drop-publication", "--yes"]
        subprocess.run([sys.executable, "-m", "cdcpipe", *command], env=user, capture_output=True, check=False)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.outbox_schema)))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"pub_jobs_bench_{tag}")))
        shutil.rmtree(home, ignore_errors=True)
        # The table's topic (`tables add` made it), and those Connect made for the connector's own prefixes.
        delete_connector_topics(env_kafka(env), prefix)


def commit_changes(source: Captured, changes: int, timeout_s: float = 600) -> tuple[int, float]:
    """`changes` upserts (common.table_load, over changes // 2 rows) into a captured table, until its topic holds them.

    Committed in transactions of 10,000. Returns the records in the topic and the seconds from the first commit to
    the last change published; stops the bench if Debezium has not published them all within `timeout_s`.
    """
    env = source.env
    load = table_load(source.table, max(1, changes // 2))
    began = time.monotonic()
    with psycopg.connect(env["CDCPIPE_PG_DSN"]) as conn:
        for first in range(0, changes, 10_000):
            with conn.cursor() as cur:
                cur.executemany(load.insert, [load.row(k, k) for k in range(first, min(changes, first + 10_000))])
            conn.commit()
    consumer = Consumer(env_kafka(env).client_config(**{"group.id": f"jobs-bench-{uuid.uuid4().hex[:8]}"}))
    try:
        partitions = sorted(consumer.list_topics(source.topic, timeout=10).topics[source.topic].partitions)
        deadline, held = time.monotonic() + timeout_s, 0
        while held < changes:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{source.topic} holds {held} of the {changes} changes committed after {timeout_s:.0f} s: see the "
                    f"connector {env['CDCPIPE_CAPTURE_CONNECTOR']!r} (`cdcpipe connectors status`) and Connect's log"
                )
            time.sleep(0.5)
            held = sum(
                high - low
                for low, high in (
                    consumer.get_watermark_offsets(TopicPartition(source.topic, p), 10) for p in partitions
                )
            )
        return held, time.monotonic() - began
    finally:
        consumer.close()
