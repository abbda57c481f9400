"""Chaos soak: the whole pipeline, every job kind, under steady load while its parts are killed and restarted.

    python bench/chaos.py [--minutes 10] [--rate 200] [--every 30] [--kafka-down-s 15] [--seed 1] [--faults relay,job,...]
                          [--jobs-on-cluster] [--results bench/results/chaos.json]

Needs the local stack running (`cdcpipe stack up`, or `--cluster`: three Kafka nodes, two Connect workers, a Spark
master and two workers): this run stops and starts its services. A generator
commits deposits at a fixed rate, one transaction each: it adds the amount to a row of a captured table
(`balance`, and `changes`, the row's update count) and emits a MoneyDeposited event through the outbox.
Two relays (a leader and a standby) publish the events; a Debezium connector captures the table. Five
streaming jobs (Spark, trigger 1 s) build every kind of read model at once:
- event_log and latest_state and the example balance projection, from the events;
- table_mirror and table_history, from the table's change events, as one table group (one driver for both,
  as `tables add --group` makes them).
Once the event log has applied its first batch (`warm_up_s`), every `--every` seconds one fault, the kinds in a
shuffled rotation (a rotation once begun is finished, so even the shortest run has every fault), once the
connector's task runs again after the last one (one fault at a time):
- relay: SIGKILL the leading relay (the standby takes over; the killed one comes back as the standby);
- job: SIGKILL one driver mid-stream (each in turn, the group's too), then `cdcpipe jobs submit` it again;
- connect: SIGKILL the Connect worker running the connector's task (Debezium sends again what it had not
  committed); of a group of two, the other takes the task (the time it took is `task_moved_s`); then it starts again;
- kafka: stop a Kafka node for longer than the relay's delivery timeout (`--kafka-down-s`, 15 s), start it again;
- postgres: crash it (SIGQUIT: immediate shutdown, then crash recovery), start it again;
and on a cluster (the single node's `kafka` covers them there):
- leader: SIGKILL the node leading the event topic's busiest partition, start it again after `--kafka-down-s`;
- cluster: stop every Kafka node, start them again;
- spark-worker: SIGKILL a Spark worker while the jobs run on the cluster (`--jobs-on-cluster`), start it again.
With `--keep-down`, a Kafka node or a Connect worker a fault killed stays down to the end: the cluster runs on
without it, nothing restarted by anyone; one rotation, however long `--minutes`.
Then the load stops, the outbox drains, and the run waits until every read model matches the truth in
Postgres (or 10 minutes pass), and prints per kind the missing / doubled / out-of-order counts
(bench/chaos_checks.py says what each means per kind). A commit cut off by a crash is "maybe": Postgres
says whether it landed. It also checks, per aggregate, that the first copy of each event in Kafka comes in
commit order, and that no relay, job or connector task stopped by itself (it is started again; the run fails).
The figures of each fault: besides the takeover and task-move times, `event_latency`, from an event's commit to its
row in the event log (relay, Kafka, Spark): median, p99 and max of the events committed from the fault to the next
one, and `recovered_s`, from the fault until the last of them over 3x the median latency before the faults landed
(chaos_checks.latency_around_faults); the same before the first fault, of the events committed after the warm-up,
and of the warm-up's own (`warm_up`: every event is in one of them).
`publish_latency`, the same of the relay's part (commit to the record's timestamp in Kafka): a fault that stalled
the jobs shows in the first, one that stalled the relay in both. The table path's recovery is the
connector's: `task_moved_s`, `connector_running_after_s`.
Writes the result JSON; exits 1 on any non-zero count.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC
from pathlib import Path
from typing import Any, cast

import chaos_checks as checks
import psycopg
from common import EXAMPLES, create_bench_topics, free_port, stack_env, start_relay
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable
from psycopg import sql

from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from ground.kafka_client import KafkaSettings
from infra import kafka_security
from infra import stack as local_stack
from infra.config import NODE_PORT_STEP, StackSettings
from infra.services import Connect, Kafka, Postgres, Service, SparkMaster, SparkWorker
from schemas import catalog, topics
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings
from schemas.emit import emit
from schemas.topics import PrefixGrant
from streaming_jobs.jobs.spec import table_job_name

RESULTS = Path(__file__).parent / "results" / "chaos.json"
PARTITIONS = 3
KEYS = 50
FAULTS = ("relay", "job", "connect", "kafka", "postgres", "leader", "cluster", "spark-worker")
ONE_NODE_FAULTS = FAULTS[:5]  # the default on a one-node stack
GROUP = "tables"  # the table group running the table kinds' jobs
DRIVERS = ("event_log", "latest_state", "projection", GROUP)
KIND_DRIVER = {"event_log": "event_log", "latest_state": "latest_state", "projection": "projection"} | {
    "table_mirror": GROUP,
    "table_history": GROUP,
}
CATCH_UP_S = 600.0
RECOVERY_S = 120.0  # how long a connector task may take to run again after a fault before the next one


class Generator(threading.Thread):
    """Commits `rate` deposits a second, one transaction each, reconnecting through Postgres outages."""

    def __init__(self, dsn: str, names: OutboxNames, accounts: sql.Composable, rate: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.names, self.rate = dsn, names, rate
        self.deposit = sql.SQL("UPDATE {} SET balance = balance + %s, changes = changes + 1 WHERE id = %s").format(
            accounts
        )
        self.rng = random.Random(seed)  # noqa: S311 - sample amounts, not secrets
        self.committed: list[checks.Event] = []  # in commit order
        self.committed_at: dict[str, float] = {}  # event id: when its commit returned (epoch seconds)
        self.maybe: list[checks.Event] = []  # the commit's outcome is unknown: the connection broke during it
        self.failed = 0  # transactions that surely did not commit (Postgres down): not events, not expected
        self.halt = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        k = 0
        began = time.monotonic()
        while not self.halt.is_set():
            due = began + k / self.rate
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            key, amount = account(k % KEYS), self.rng.randint(1, 1000)
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=2)
                conn.execute(self.deposit, (amount, key))
                event_id = emit(
                    conn,
                    "account",
                    key,
                    "MoneyDeposited",
                    {"account_id": key, "amount": amount, "currency": "EUR"},
                    names=self.names,
                )
            except psycopg.Error:
                self.failed += 1
                _close(conn)
                conn = None
                time.sleep(0.2)
                continue  # not committed: this sequence number is used by the next deposit
            event = checks.Event(str(event_id), key, k)
            try:
                conn.commit()
            except psycopg.Error:
                self.maybe.append(event)
                _close(conn)
                conn = None
            else:
                self.committed.append(event)
                self.committed_at[event.event_id] = time.time()
            k += 1
        _close(conn)


def account(n: int) -> str:
    return f"acc-{n:03d}"


def _close(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


@dataclass
class Soak:
    """One run's names: its outbox schema and captured table, topics, connector, jobs and lake."""

    env: dict[str, str]
    settings: StackSettings
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    relays: list[subprocess.Popen[bytes]] = field(default_factory=list)
    jobs_on_cluster: bool = False  # the jobs' executors on the stack's Spark workers, not in their drivers
    drivers: tuple[str, ...] = DRIVERS  # the jobs run (the event log always: it says which cut-off commits landed)

    @property
    def schema(self) -> str:
        return f"chaos_{self.tag}"

    @property
    def dsn(self) -> str:
        return self.env["CDCPIPE_PG_DSN"]

    @property
    def names(self) -> OutboxNames:
        return OutboxNames.load(outbox_schema=self.schema)

    @property
    def accounts(self) -> sql.Identifier:
        return sql.Identifier(self.schema, "accounts")

    @property
    def event_topic(self) -> str:
        return f"chaos.{self.tag}.account"

    @property
    def change_topic(self) -> str:
        return f"{self.schema}.{self.schema}.accounts"  # Debezium's <topic.prefix>.<schema>.<table>

    @property
    def connector_prefixes(self) -> list[str]:
        """The topics the table connector (topic.prefix = the schema) names and creates."""
        return [f"{self.schema}.", f"__debezium-heartbeat.{self.schema}"]

    @property
    def connector(self) -> str:
        return f"chaos-{self.tag}"

    @property
    def work(self) -> Path:
        return Path(self.env["CDCPIPE_LOCAL_LAKE"]) / f"_chaos_{self.tag}"

    def job(self, driver: str) -> str:
        """The job a driver runs (an event kind's, or the table group's)."""
        return f"chaos_{self.tag}_{driver}"

    def table(self, kind: str) -> Path:
        """Where a kind's read model is: the table group's members are named after the table."""
        member = table_job_name(f"{self.schema}.accounts", kind.removeprefix("table_"))
        return self.work / (member if kind in ("table_mirror", "table_history") else kind)

    @property
    def job_env(self) -> dict[str, str]:
        return {
            **self.env,
            "CDCPIPE_JOBS_DIRS": str(self.work / "jobs"),
            "CDCPIPE_LAKE": str(self.work),
            "CDCPIPE_RUN_DIR": str(self.work / "run"),  # the jobs' pid files, which the job faults read
            "CDCPIPE_TABLE_CONTRACT_DIRS": str(self.work / "contracts"),
            "CDCPIPE_SPARK_DRIVER_MEMORY": "1g",  # four drivers share the machine
            **({"CDCPIPE_SPARK_MASTER": self.settings.spark_master_url} if self.jobs_on_cluster else {}),
            "CDCPIPE_KAFKA_CONFIG": str(kafka_security.client_file(self.settings, "jobs")),
        }

    @property
    def relay_env(self) -> dict[str, str]:
        return {
            **self.env,
            "CDCPIPE_OUTBOX_SCHEMA": self.schema,
            "CDCPIPE_TOPIC_PATTERN": f"chaos.{self.tag}.{{aggregatetype}}",
            "CDCPIPE_BACKOFF_MAX_S": "2",
            "CDCPIPE_DELIVERY_TIMEOUT_S": "10",
            "CDCPIPE_KAFKA_CONFIG": str(kafka_security.client_file(self.settings, "relay")),
        }

    def connect(self) -> ConnectClient:
        return ConnectClient(
            ConnectSettings.load(
                connect_url=self.settings.connect_url,
                connect_user=self.env["CDCPIPE_CONNECT_USER"],
                connect_password_file=Path(self.env["CDCPIPE_CONNECT_PASSWORD_FILE"]),
            )
        )


def cdcpipe(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "cdcpipe", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"chaos: `cdcpipe {' '.join(args)}` failed:\n{done.stdout}{done.stderr}")


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> float:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if condition():
            return time.monotonic() - began
        time.sleep(0.5)
    raise SystemExit(f"chaos: {what} did not happen within {seconds:.0f} s")


def prepare(soak: Soak) -> list[checks.Event]:
    """The schema, the captured table with its accounts, topics, connector and job files; the opening events."""
    opened: list[checks.Event] = []
    with psycopg.connect(soak.dsn) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(soak.schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {} (id text PRIMARY KEY, owner text, balance bigint, changes bigint)").format(
                soak.accounts
            )
        )
        schema_outbox.apply(
            conn,
            soak.names,
            SchemaSettings.load(
                pg_dsn=soak.dsn,
                publication=f"pub_{soak.schema}",
                captured_tables=(f"{soak.schema}.accounts",),
                tables_publication=f"pub_tables_{soak.schema}",
                debezium_password_file=Path(soak.env["CDCPIPE_DEBEZIUM_PASSWORD_FILE"]),
            ),
        )
        for n in range(KEYS):
            key = account(n)
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'chaos', 0, 0)").format(soak.accounts), (key,))
            payload = {"account_id": key, "owner": "chaos", "currency": "EUR"}
            event_id = emit(conn, "account", key, "AccountOpened", payload, names=soak.names)
            opened.append(checks.Event(str(event_id), key, -KEYS + n))
        conn.commit()
    kafka = kafka_security.client(soak.settings)
    create_bench_topics(kafka, [soak.event_topic], PARTITIONS)
    # Debezium names and creates the captured table's topic and its heartbeat topic itself.
    grants = [PrefixGrant(p, ("User:connect",), ("User:jobs",), ("User:connect",)) for p in soak.connector_prefixes]
    topics.apply(kafka.client_config(), [], grants)

    # The mirror and history jobs' contract, written from the catalog as a user would (`schema tables import`).
    with psycopg.connect(soak.dsn, autocommit=True) as conn:
        catalog.import_tables(conn, [f"{soak.schema}.accounts"], soak.work / "contracts")
    shipped = json.loads((EXAMPLES / "connectors" / "tables.json").read_text())["config"]
    definition = soak.work / "connector.json"
    definition.write_text(
        json.dumps(
            {
                "name": soak.connector,
                "config": {
                    **shipped,
                    "topic.prefix": soak.schema,
                    "slot.name": soak.schema,
                    "publication.name": f"pub_tables_{soak.schema}",
                    "table.include.list": f"{soak.schema}\\.accounts",
                    # The run's own heartbeat table: the shipped one is the default schema's, which a fresh stack
                    # does not have (Debezium would restart the connector every 10 s until it did).
                    "heartbeat.action.query": f"INSERT INTO {soak.schema}.debezium_heartbeat (id, beat) "
                    "VALUES (2, now()) ON CONFLICT (id) DO UPDATE SET beat = EXCLUDED.beat",
                },
            }
        )
    )
    cdcpipe(soak.env, "connectors", "apply", str(definition))
    with soak.connect() as client:
        wait_for(lambda: _tasks(client, soak.connector) == ["RUNNING"], 120, "the connector to run")
    wait_for(lambda: topic_exists(soak, soak.change_topic), 120, "the snapshot's topic")

    jobs = soak.work / "jobs"
    jobs.mkdir()
    shutil.copy(EXAMPLES / "jobs" / "balances.py", jobs)  # the projection job's module, beside its file
    common = 'trigger = "1s"\n'
    events = f'topics = ["{soak.event_topic}"]\n'
    bodies = {
        "event_log": events,
        "latest_state": events,
        "projection": events + 'projection = "balances:apply"\n',
    }
    for kind, body in bodies.items():
        (jobs / f"{soak.job(kind)}.toml").write_text(
            f'name = "{soak.job(kind)}"\nkind = "{kind}"\ntable = "{kind}"\n{common}{body}'
        )
    (jobs / f"{soak.job(GROUP)}.toml").write_text(
        f'name = "{soak.job(GROUP)}"\nkind = "table_group"\nmembers = ["mirror", "history"]\n{common}'
        f'tables = ["{soak.schema}.accounts"]\ntopics = ["{soak.change_topic}"]\n'
    )
    return opened


def topic_exists(soak: Soak, topic: str) -> bool:
    admin = AdminClient(kafka_security.client(soak.settings).client_config())
    return topic in admin.list_topics(timeout=10).topics


def _tasks(client: ConnectClient, name: str) -> list[str]:
    try:
        status = client.status(name)
    except Exception:  # Connect restarting: not running yet
        return []
    return [str(t.get("state")) for t in status.get("tasks", [])]


def nodes(settings: StackSettings) -> list[Kafka]:
    return [Kafka(settings, i) for i in range(settings.kafka_nodes)]


def busiest_leader(soak: Soak) -> tuple[Kafka, int]:
    """The node leading the event topic's partition that holds the most records, and that partition."""
    consumer = Consumer(kafka_security.client(soak.settings).client_config(**{"group.id": f"chaos-{soak.tag}"}))
    try:
        partitions = consumer.list_topics(soak.event_topic, timeout=10).topics[soak.event_topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(soak.event_topic, p), timeout=10)[1] for p in partitions
        }
    finally:
        consumer.close()
    busiest = max(ends, key=lambda p: ends[p])
    return Kafka(soak.settings, partitions[busiest].leader - 1), busiest


def _task_workers(client: ConnectClient, name: str) -> list[str]:
    """Where each of the connector's tasks runs ("127.0.0.1:8183"), as Connect says."""
    try:
        return [str(t.get("worker_id")) for t in client.status(name).get("tasks", []) if t.get("state") == "RUNNING"]
    except Exception:  # a worker restarting, a rebalance: not known now
        return []


def task_worker(soak: Soak) -> Connect:
    """The Connect worker running the connector's task (the first worker when none runs it now)."""
    with soak.connect() as client:
        running = _task_workers(client, soak.connector)
    ports = [int(w.rpartition(":")[2]) for w in running]
    index = (ports[0] - soak.settings.connect_port) // NODE_PORT_STEP if ports else 0
    return Connect(soak.settings, index)


def moved(soak: Soak, gone: Connect) -> float:
    """Seconds until the connector's task runs on a worker other than `gone`."""
    with soak.connect() as client:
        return wait_for(
            lambda: any(not w.endswith(f":{gone.rest_port}") for w in _task_workers(client, soak.connector)),
            RECOVERY_S,
            f"the connector's task to move off {gone.name}",
        )


def slot_active(dsn: str, slot: str) -> bool:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    except psycopg.Error:
        return False
    return bool(row and row[0])


def leader_pid(dsn: str) -> int | None:
    """The pid of the relay holding the leader lock, from Postgres's own view."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            row = conn.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name LIKE 'cdcpipe-relay:%%'"
            ).fetchone()
    except psycopg.Error:
        return None
    return int(str(row[0]).split(":")[1]) if row else None


def takeover(dsn: str, old: int) -> float:
    """Seconds until a relay other than `old` holds the leader lock."""
    return wait_for(lambda: leader_pid(dsn) not in (None, old), 60, "a standby takeover")


def job_pid(soak: Soak, driver: str) -> int | None:
    pid_file = soak.work / "run" / f"{soak.job(driver)}.pid"
    pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
    return pid if pid is not None and Path(f"/proc/{pid}").exists() else None


def _parked(soak: Soak) -> dict[str, str]:
    """The group's tables parked (stopped by an error while the group's driver runs), with why."""
    done = subprocess.run(
        [sys.executable, "-m", "cdcpipe", "jobs", "status", soak.job(GROUP), "--json"],
        env=soak.job_env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return {}  # not answering now (Kafka down): the next check sees it
    members = json.loads(done.stdout).get("members") or []
    return {m["name"]: m["last_error"] for m in members if m.get("last_error")}


def read_topic(kafka: KafkaSettings, topic: str) -> tuple[list[tuple[int, int, bytes, str]], dict[str, float]]:
    """Every record: (partition, offset, key, event id header); and when each event id was first sent (epoch s).

    The send time is the record's timestamp, which the relay's producer sets as it hands the record over: with the
    commit times, it splits an event's latency into the relay's part and Kafka-to-lake's.
    """
    consumer = Consumer(kafka.client_config(**{"group.id": f"chaos-{uuid.uuid4()}", "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    records, ended = [], 0
    sent: dict[str, float] = {}
    while ended < PARTITIONS:
        for m in consumer.consume(10_000, 2.0):
            if m.error() is not None:
                ended += 1
                continue
            headers = dict(cast("list[tuple[str, bytes]]", m.headers() or []))
            event_id = headers.get("id", b"").decode()
            records.append((m.partition() or 0, m.offset() or 0, m.key() or b"", event_id))
            at = m.timestamp()[1] / 1000
            sent[event_id] = min(at, sent.get(event_id, at))
    consumer.close()
    return records, sent


def delta_rows(table: Path, columns: list[str]) -> list[dict[str, Any]]:
    try:
        rows: list[dict[str, Any]] = DeltaTable(str(table)).to_pyarrow_table(columns=columns).to_pylist()
    except Exception:  # not created yet, or a commit being written: none yet
        return []
    return rows


def verdicts(soak: Soak, generator: Generator) -> dict[str, checks.Verdict]:
    """Each read model against Postgres, now."""
    with psycopg.connect(soak.dsn) as conn:
        table = {
            str(r[0]): {"id": r[0], "owner": r[1], "balance": r[2], "changes": r[3]}
            for r in conn.execute(sql.SQL("SELECT id, owner, balance, changes FROM {}").format(soak.accounts))
        }
    logged = delta_rows(soak.table("event_log"), ["event_id"])
    in_log = {str(r["event_id"]) for r in logged}
    maybe = {e.event_id for e in generator.maybe}
    # A cut-off commit landed if its event did: the table's update and the event are one transaction.
    landed = generator.committed + [e for e in generator.maybe if e.event_id in in_log]
    found = {
        "event_log": checks.event_log({e.event_id for e in generator.committed}, maybe, logged),
        "latest_state": checks.latest_state(
            landed, delta_rows(soak.table("latest_state"), ["aggregate_id", "event_id"])
        ),
        "projection": checks.projection(
            {k: int(v["balance"]) for k, v in table.items()},
            delta_rows(soak.table("projection"), ["account_id", "balance"]),
        ),
        "table_mirror": checks.mirror(
            table, delta_rows(soak.table("table_mirror"), ["id", "owner", "balance", "changes"]), ("balance", "changes")
        ),
        "table_history": checks.history(
            table, delta_rows(soak.table("table_history"), ["id", "changes", "_lsn", "is_current"])
        ),
    }
    return {kind: verdict for kind, verdict in found.items() if KIND_DRIVER[kind] in soak.drivers}


def landed(soak: Soak, generator: Generator) -> list[tuple[float, float]]:
    """(commit time, seconds from the commit to its row in the event log) of each committed event, epoch seconds."""
    rows = delta_rows(soak.table("event_log"), ["event_id", "_applied_at"])
    applied: dict[str, float] = {}
    for r in rows:
        stamp = r["_applied_at"]
        seconds = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
        applied[str(r["event_id"])] = min(seconds, applied.get(str(r["event_id"]), seconds))
    return [(at, applied[event_id] - at) for event_id, at in generator.committed_at.items() if event_id in applied]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=200, help="deposits committed per second")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between faults")
    parser.add_argument(
        "--kafka-down-s",
        type=float,
        default=15.0,
        help="how long a stopped Kafka node stays down (longer than the relay's delivery timeout, 10 s)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--faults",
        default="",
        help=f"which, comma-separated, of {','.join(FAULTS)} (default: every one the stack can have: "
        f"{','.join(ONE_NODE_FAULTS)} on one Kafka node)",
    )
    parser.add_argument(
        "--jobs-on-cluster", action="store_true", help="run the jobs' executors on the stack's Spark workers"
    )
    parser.add_argument(
        "--keep-down",
        action="store_true",
        help="leave a killed Kafka node or Connect worker down to the end: the cluster runs on without it (then one "
        "rotation and at most one Kafka fault: a second would leave fewer nodes than min.insync.replicas)",
    )
    parser.add_argument(
        "--drivers",
        default=",".join(DRIVERS),
        help=f"the jobs to run, of {','.join(DRIVERS)} ({GROUP}: the table group's mirror and history); event_log always",
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    drivers = tuple(d for d in DRIVERS if d in args.drivers.split(","))
    if "event_log" not in drivers or set(args.drivers.split(",")) - set(DRIVERS):
        parser.error(f"--drivers: some of {','.join(DRIVERS)}, event_log among them")
    settings = StackSettings.load()
    if args.jobs_on_cluster and SparkMaster(settings).process.pid() is None:
        parser.error("--jobs-on-cluster: the stack has no Spark master (`cdcpipe stack up --spark-cluster`)")
    possible = [f for f in (FAULTS if settings.kafka_nodes > 1 else ONE_NODE_FAULTS) if f != "spark-worker"]
    possible += ["spark-worker"] if args.jobs_on_cluster else []
    chosen = tuple(f for f in args.faults.split(",") if f) or tuple(possible)
    if unknown := set(chosen) - set(possible):
        parser.error(f"faults {sorted(unknown)} cannot happen on this stack: choose from {','.join(possible)}")
    if args.keep_down and (settings.kafka_nodes < 3 or len({"kafka", "leader", "cluster"} & set(chosen)) > 1):
        parser.error("--keep-down: a cluster of three Kafka nodes, and one Kafka fault of kafka, leader, cluster")
    soak = Soak(env=stack_env(settings), settings=settings, jobs_on_cluster=args.jobs_on_cluster, drivers=drivers)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    log = args.results.with_suffix(".relays.log")
    log.write_text("")
    opened = prepare(soak)
    try:
        result = soak_run(soak, args, chosen, opened, log)
    finally:
        cleanup(soak)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["passed"] else 1)


def soak_run(
    soak: Soak, args: argparse.Namespace, chosen: tuple[str, ...], opened: list[checks.Event], log: Path
) -> dict[str, Any]:
    settings = soak.settings
    spark_cluster = SparkMaster(settings).process.pid() is not None  # a restart brings back what was up

    def relay() -> subprocess.Popen[bytes]:
        return start_relay({**soak.relay_env, "CDCPIPE_METRICS_PORT": str(free_port())}, log)

    relays = soak.relays
    relays += [relay(), relay()]
    for driver in soak.drivers:
        cdcpipe(soak.job_env, "jobs", "submit", soak.job(driver))
    generator = Generator(soak.dsn, soak.names, soak.accounts, args.rate, args.seed)
    generator.committed.extend(opened)
    generator.start()
    rng = random.Random(args.seed)  # noqa: S311 - a reproducible fault order, not a secret
    faults: list[dict[str, Any]] = []
    faults_at: list[float] = []  # epoch seconds, as the generator's commit times
    rotation: list[str] = []
    victims = iter(soak.drivers * 1000)
    died: list[str] = []  # parts that stopped without being killed: a finding, and a failed run
    # The faults begin once the event log has applied its first batch (the opening events and the load since): a
    # fault that hits a job's first batch, which holds everything published before it, measures the driver's start.
    warm_up_s = wait_for(
        lambda: len(delta_rows(soak.table("event_log"), ["event_id"])) >= len(opened),
        900,
        "the event log's first batch",
    )
    began = time.monotonic()
    steady_from = time.time()  # the baseline's events: committed once the event log had caught up (epoch s)

    def restart(*killed: Service) -> None:
        """Start what a fault stopped, and nothing else (a node `--keep-down` left down stays so)."""
        local_stack.up(settings, spark_cluster=spark_cluster, report=lambda _: None, only={k.name for k in killed})

    def check_alive(when: str) -> None:
        for r in relays:
            if r.poll() is not None:
                died.append(f"relay pid {r.pid} exited by itself ({r.returncode}) before {when}")
                relays[relays.index(r)] = relay()
        for driver in soak.drivers:
            if job_pid(soak, driver) is None:
                died.append(f"job {soak.job(driver)} stopped by itself before {when}; see its log under {soak.work}")
                cdcpipe(soak.job_env, "jobs", "submit", soak.job(driver))
        parked = _parked(soak) if GROUP in soak.drivers else {}
        if parked:  # a table of the group stopped by an error: a finding; the group started again to go on
            died.append(f"group {soak.job(GROUP)} parked {parked} before {when}; see its log under {soak.work}")
            cdcpipe(soak.job_env, "jobs", "stop", soak.job(GROUP))
            cdcpipe(soak.job_env, "jobs", "submit", soak.job(GROUP))
        with soak.connect() as client:
            if "FAILED" in _tasks(client, soak.connector):  # not restarted by the collector within RECOVERY_S
                died.append(f"connector {soak.connector}'s task failed and was not healed before {when}")
                client.restart(soak.connector, only_failed=True)

    def recovered() -> float:
        """Seconds until the connector's tasks run again after the last fault (a task left FAILED is check_alive's).

        One fault at a time: a Debezium task still starting after the last fault (Connect rebalances after a
        broker outage) may fail for good if Postgres goes away under it (Debezium treats some errors in its start
        as fatal); the stack's collector restarts it (connectors/heal.py), which this wait includes.
        """
        waited = time.monotonic()
        with soak.connect() as client:
            while time.monotonic() - waited < RECOVERY_S:
                tasks = _tasks(client, soak.connector)
                if tasks and set(tasks) == {"RUNNING"} and slot_active(soak.dsn, soak.schema):
                    break  # running: started, and streaming from its slot (a stale RUNNING has no slot yet)
                time.sleep(0.5)
        return round(time.monotonic() - waited, 1)

    try:
        while time.monotonic() - began < args.minutes * 60 or rotation:
            if args.keep_down and faults and not rotation:
                break  # one rotation: a second would kill another node or worker, the one the cluster runs on
            time.sleep(args.every)
            if faults:
                faults[-1]["connector_running_after_s"] = recovered()
            check_alive(f"fault {len(faults) + 1}")
            if not rotation:
                rotation = rng.sample(chosen, len(chosen))
            fault = rotation.pop()
            at = round(time.monotonic() - began, 1)
            faults_at.append(time.time())
            detail: dict[str, Any] = {"at_s": at, "fault": fault}
            if fault == "relay":
                pid = leader_pid(soak.dsn)
                victim = next((r for r in relays if r.pid == pid), None)
                if victim is None:
                    detail["skipped"] = "no relay held the leader lock"
                else:
                    victim.kill()
                    victim.wait()
                    detail["takeover_s"] = round(takeover(soak.dsn, victim.pid), 1)
                    relays[relays.index(victim)] = relay()
            elif fault == "job":
                driver = next(victims)
                detail["job"] = driver
                if (pid := job_pid(soak, driver)) is not None:
                    os.kill(pid, signal.SIGKILL)
                    time.sleep(1)
                cdcpipe(soak.job_env, "jobs", "submit", soak.job(driver))
            elif fault == "connect":
                worker = task_worker(soak)
                detail["worker"] = worker.name
                replace(worker.process, stop_signal=signal.SIGKILL).stop()
                if settings.connect_workers > 1:  # the group's other worker takes the task, nobody typing a command
                    detail["task_moved_s"] = round(moved(soak, worker), 1)
                if not (args.keep_down and settings.connect_workers > 1):
                    restart(worker)
            elif fault in ("kafka", "leader"):
                node, partition = busiest_leader(soak) if fault == "leader" else (rng.choice(nodes(settings)), None)
                detail.update({"node": node.name, **({"partition": partition} if partition is not None else {})})
                process = replace(node.process, stop_signal=signal.SIGKILL) if fault == "leader" else node.process
                process.stop()
                if not args.keep_down:
                    time.sleep(args.kafka_down_s)
                    restart(node)
            elif fault == "cluster":
                for node in nodes(settings):
                    node.process.stop()
                restart(*nodes(settings))
            elif fault == "spark-worker":
                executor_host = rng.choice([SparkWorker(settings, i) for i in range(settings.spark_workers)])
                detail["worker"] = executor_host.name
                replace(executor_host.process, stop_signal=signal.SIGKILL).stop()
                time.sleep(2)
                restart(executor_host)
            else:
                replace(Postgres(settings).process, stop_signal=signal.SIGQUIT).stop()
                time.sleep(2)
                restart(Postgres(settings))
            detail["took_s"] = round(time.monotonic() - began - at, 1)
            faults.append(detail)
            print(json.dumps(detail), flush=True)
    finally:
        generator.halt.set()
        generator.join(30)
    load_ended = time.time()

    outbox = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(soak.schema, soak.names.outbox_table))

    def outbox_empty() -> bool:
        with psycopg.connect(soak.dsn) as conn:
            row = conn.execute(outbox).fetchone()
        return row is not None and row[0] == 0

    drained_s = wait_for(outbox_empty, 300, "the outbox to drain")
    found: dict[str, checks.Verdict] = {}

    def all_clean() -> bool:
        nonlocal found
        found = verdicts(soak, generator)
        return all(v.clean for v in found.values())

    try:
        caught_up_s: float | None = wait_for(all_clean, CATCH_UP_S, "every read model to match Postgres")
    except SystemExit:
        caught_up_s = None  # reported with the counts that were still wrong
    check_alive("the end")
    stop_parts(soak)
    around = checks.latency_around_faults(landed(soak, generator), faults_at, load_ended, steady_from=steady_from)
    for detail, window in zip(faults, around.pop("faults"), strict=True):
        detail["event_latency"] = window
    records, sent = read_topic(kafka_security.client(settings), soak.event_topic)
    # The relay's part of it (commit to the record's send): which stage a fault stalled.
    relayed = [(at, sent[event_id] - at) for event_id, at in generator.committed_at.items() if event_id in sent]
    published = checks.latency_around_faults(relayed, faults_at, load_ended, steady_from=steady_from)
    for detail, window in zip(faults, published.pop("faults"), strict=True):
        detail["publish_latency"] = window
    sequence = {e.event_id: e.sequence for e in generator.committed + generator.maybe}
    out_of_order = checks.first_copy_order(records, sequence)
    kinds = {kind: v.as_dict() for kind, v in found.items()}
    return {
        "benchmark": "chaos",
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "seed": args.seed,
        "warm_up_s": round(warm_up_s, 1),
        "faults": faults,
        "events_committed": len(generator.committed),
        "deposits_committed": len(generator.committed_at),  # the load's own (the accounts' openings before it)
        "commits_cut_off_maybe": len(generator.maybe),
        "transactions_refused_while_postgres_was_down": generator.failed,
        "records_in_kafka": len(records),
        "sent_again_in_kafka": len(records) - len({r[3] for r in records}),
        "out_of_order_in_kafka": out_of_order,
        "outbox_drained_s_after_load": round(drained_s, 1),
        "read_models_match_s_after_drain": None if caught_up_s is None else round(caught_up_s, 1),
        "kinds": kinds,
        # Commit in Postgres to row in the event log (relay, Kafka, Spark), before the faults; each fault's in it.
        "event_latency": around,
        "publish_latency": published,
        "stopped_by_themselves": died,
        "passed": caught_up_s is not None and out_of_order == 0 and not died,
    }


def stop_parts(soak: Soak) -> None:
    """Stop the run's jobs and relays (also when the run failed: nothing of it may outlive it)."""
    for driver in soak.drivers:
        with contextlib.suppress(SystemExit):
            cdcpipe(soak.job_env, "jobs", "stop", soak.job(driver))
    for r in soak.relays:
        if r.poll() is None:
            r.send_signal(signal.SIGTERM)
            try:
                r.wait(60)
            except subprocess.TimeoutExpired:
                r.kill()
                r.wait()
    soak.relays.clear()


def cleanup(soak: Soak) -> None:
    """Stop what the run started, and drop its connector and slot: a slot left behind pins WAL."""
    stop_parts(soak)
    with contextlib.suppress(SystemExit):
        cdcpipe(soak.env, "connectors", "delete", soak.connector, "--drop-slot", "--drop-publication", "--yes")


if __name__ == "__main__":
    main()
