"""Chaos soak: the whole pipeline under steady load while its parts are killed and restarted.

    python bench/chaos.py [--minutes 10] [--rate 300] [--every 30] [--seed 1]

Needs the local stack running (`cdcpipe stack up`): this run stops and starts its services. A generator
commits BenchEvents through the outbox at a fixed rate, each in its own transaction; two relays (a leader
and a standby) publish them; an event-log job (Spark, trigger 1 s) writes them to Delta. Every `--every`
seconds one fault, the kinds in a shuffled rotation:
- relay: SIGKILL the leading relay (the standby takes over; the killed one comes back as the standby);
- job: SIGKILL the Spark driver mid-stream, then `cdcpipe jobs submit` it again;
- kafka: stop the broker, leave it down 10 s, start it again;
- postgres: crash it (SIGQUIT: immediate shutdown, then crash recovery), start it again.
Then the load stops, the outbox drains and the job catches up, and the run checks what arrived against
every event the generator saw committed (a commit cut off by the crash is "maybe": either is fine):
- the Delta table holds each committed event exactly once, and nothing else;
- in Kafka, per aggregate, the first copy of each event comes in commit order (copies sent again after a
  relay or Postgres crash are counted, and allowed: delivery is at least once).
Before each fault and at the end it also checks that no relay and no job stopped by itself (each is started
again if one did, and the run fails).
Writes bench/results/chaos.json; exits 1 when an event is lost, doubled in Delta, unknown, or out of order,
or a part stopped by itself.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import psycopg
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from deltalake import DeltaTable
from psycopg import sql
from relay_bench import free_port, start_relay

from infra import stack as local_stack
from infra.config import StackSettings
from infra.services import Kafka, Postgres
from infra.stack import env_values
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings

RESULTS = Path(__file__).parent / "results"
PARTITIONS = 3
KEYS = 50
FAULTS = ("relay", "job", "kafka", "postgres")


class Generator(threading.Thread):
    """Commits `rate` events a second, one transaction each, reconnecting through Postgres outages."""

    def __init__(self, dsn: str, names: OutboxNames, rate: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rate = dsn, rate
        self.insert = sql.SQL(
            "INSERT INTO {} (id, aggregatetype, aggregateid, type, payload) VALUES (%s, %s, %s, %s, %s)"
        ).format(sql.Identifier(names.outbox_schema, names.outbox_table))
        self.committed: list[tuple[str, str, int]] = []  # (event id, aggregate id, sequence) in commit order
        self.maybe: set[str] = set()  # the commit's outcome is unknown: the connection broke during it
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
            event_id, key = str(uuid.uuid4()), f"agg-{k % KEYS}"
            payload = json.dumps({"t": k, "pad": "x" * 200})
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=2)
                conn.execute(self.insert, (event_id, "chaos", key, "BenchEvent", payload))
            except psycopg.Error:
                self.failed += 1
                _close(conn)
                conn = None
                time.sleep(0.2)
                continue  # not committed: this sequence number is used by the next event
            try:
                conn.commit()
            except psycopg.Error:
                self.maybe.add(event_id)
                _close(conn)
                conn = None
                k += 1
                continue
            self.committed.append((event_id, key, k))
            k += 1
        _close(conn)


def _close(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


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


def wait_for(condition: Any, seconds: float, what: str) -> float:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if condition():
            return time.monotonic() - began
        time.sleep(0.2)
    raise SystemExit(f"chaos: {what} did not happen within {seconds:.0f} s")


def cdcpipe(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "-m", "cdcpipe", *args], env=env, check=True, capture_output=True)


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, dict[str, bytes]]]:
    """Every record: (partition, offset, key, headers)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"chaos-{uuid.uuid4()}", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    records, ended = [], 0
    while ended < PARTITIONS:
        for m in consumer.consume(10_000, 2.0):
            if m.error() is not None:
                ended += 1
                continue
            headers = cast("list[tuple[str, bytes]]", m.headers() or [])
            records.append((m.partition() or 0, m.offset() or 0, m.key() or b"", dict(headers)))
    consumer.close()
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=300, help="events committed per second")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    settings = StackSettings.load()
    env = {**os.environ, **env_values(settings)}
    dsn = env["CDCPIPE_PG_DSN"]
    os.environ["PGPASSFILE"] = env["PGPASSFILE"]
    tag = uuid.uuid4().hex[:8]
    names = OutboxNames.load(outbox_schema=f"chaos_{tag}")
    pattern = f"chaos.{tag}.{{aggregatetype}}"
    topic = pattern.format(aggregatetype="chaos")
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    del admin  # or its client logs every refused connection while Kafka is down
    with psycopg.connect(dsn) as conn:
        schema_outbox.apply(
            conn,
            names,
            SchemaSettings.load(
                pg_dsn=dsn,
                publication=f"pub_{names.outbox_schema}",
                debezium_password_file=Path(env["CDCPIPE_DEBEZIUM_PASSWORD_FILE"]),
            ),
        )
    RESULTS.mkdir(exist_ok=True)
    work = Path(env["CDCPIPE_LAKE"]) / f"_chaos_{tag}"
    (work / "jobs").mkdir(parents=True)
    job = f"chaos_{tag}"
    (work / "jobs" / f"{job}.toml").write_text(
        f'name = "{job}"\nkind = "event_log"\ntopics = ["{topic}"]\ntable = "events"\ntrigger = "1s"\n'
    )
    job_env = {**env, "CDCPIPE_JOBS_DIRS": str(work / "jobs"), "CDCPIPE_LAKE": str(work)}
    relay_env = {
        **env,
        "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
        "CDCPIPE_TOPIC_PATTERN": pattern,
        "CDCPIPE_BACKOFF_MAX_S": "2",
        "CDCPIPE_DELIVERY_TIMEOUT_S": "10",
    }
    log = RESULTS / "chaos_relays.log"
    log.write_text("")

    def relay() -> subprocess.Popen[bytes]:
        return start_relay({**relay_env, "CDCPIPE_METRICS_PORT": str(free_port())}, log)

    relays = [relay(), relay()]
    cdcpipe(job_env, "jobs", "submit", job)
    generator = Generator(dsn, names, args.rate)
    generator.start()
    rng = random.Random(args.seed)  # noqa: S311 - a reproducible fault order, not a secret
    faults: list[dict[str, Any]] = []
    kinds: list[str] = []
    began = time.monotonic()
    died: list[str] = []  # parts that stopped without being killed: a finding, and a failed run

    def check_alive(when: str) -> None:
        for r in relays:
            if r.poll() is not None:
                died.append(f"relay pid {r.pid} exited by itself ({r.returncode}) before {when}")
                relays[relays.index(r)] = relay()
        pid_file = work / "_jobs" / f"{job}.pid"
        pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        if pid is None or not Path(f"/proc/{pid}").exists():
            died.append(f"the job stopped by itself before {when}; see {work / '_jobs' / (job + '.log')}")
            cdcpipe(job_env, "jobs", "submit", job)

    try:
        while time.monotonic() - began < args.minutes * 60:
            time.sleep(args.every)
            check_alive(f"fault {len(faults) + 1}")
            if not kinds:
                kinds = rng.sample(FAULTS, len(FAULTS))
            kind = kinds.pop()
            at = round(time.monotonic() - began, 1)
            detail: dict[str, Any] = {"at_s": at, "fault": kind}
            if kind == "relay":
                pid = leader_pid(dsn)
                victim = next((r for r in relays if r.pid == pid), None)
                if victim is None:
                    detail["skipped"] = "no relay held the leader lock"
                else:
                    victim.kill()
                    victim.wait()
                    detail["takeover_s"] = round(
                        wait_for(lambda old=pid: leader_pid(dsn) not in (None, old), 60, "a standby takeover"), 1
                    )
                    relays[relays.index(victim)] = relay()
            elif kind == "job":
                pid_file = work / "_jobs" / f"{job}.pid"
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
                time.sleep(1)
                cdcpipe(job_env, "jobs", "submit", job)
            elif kind == "kafka":
                Kafka(settings).process.stop()
                time.sleep(10)
                local_stack.up(settings, report=lambda _: None)
            else:
                replace(Postgres(settings).process, stop_signal=signal.SIGQUIT).stop()
                time.sleep(2)
                local_stack.up(settings, report=lambda _: None)
            detail["took_s"] = round(time.monotonic() - began - at, 1)
            faults.append(detail)
            print(json.dumps(detail), flush=True)
    finally:
        generator.halt.set()
        generator.join(30)

    expected = {event_id for event_id, _, _ in generator.committed}
    outbox = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(names.outbox_schema, names.outbox_table))

    def outbox_empty() -> bool:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(outbox).fetchone()
        return row is not None and row[0] == 0

    drained_s = wait_for(outbox_empty, 300, "the outbox to drain")
    table = work / "events"

    def all_in_delta() -> bool:
        try:
            ids = DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
        except Exception:  # not created yet, or a commit being written: look again
            return False
        return expected <= set(ids)

    caught_up_s = wait_for(all_in_delta, 600, "the job to apply every committed event")
    check_alive("the end")
    cdcpipe(job_env, "jobs", "stop", job)
    for r in relays:
        r.send_signal(signal.SIGTERM)
        r.wait(60)

    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
    in_delta = set(rows)
    records = read_topic(settings.kafka_bootstrap, topic)
    first: dict[bytes, list[int]] = defaultdict(list)
    seen: set[bytes] = set()
    sequence = {event_id.encode(): k for event_id, _, k in generator.committed}
    for _, _, key, headers in sorted(records, key=lambda r: (r[0], r[1])):
        event_id = headers.get("id", b"")
        if event_id in seen or event_id not in sequence:
            continue
        seen.add(event_id)
        first[key].append(sequence[event_id])
    out_of_order = sum(1 for ks in first.values() for a, b in itertools.pairwise(ks) if b < a)
    verdict = {
        "missing_from_delta": len(expected - in_delta),
        "doubled_in_delta": len(rows) - len(in_delta),
        "unknown_in_delta": len(in_delta - expected - generator.maybe),
        "out_of_order_in_kafka": out_of_order,
        "stopped_by_themselves": len(died),
    }
    result = {
        "benchmark": "chaos",
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "seed": args.seed,
        "faults": faults,
        "events_committed": len(expected),
        "commits_cut_off_maybe": len(generator.maybe),
        "transactions_refused_while_postgres_was_down": generator.failed,
        "records_in_kafka": len(records),
        "sent_again_in_kafka": len(records) - len({h.get("id") for _, _, _, h in records}),
        "outbox_drained_s_after_load": round(drained_s, 1),
        "delta_complete_s_after_drain": round(caught_up_s, 1),
        **verdict,
        "stopped_by_themselves_detail": died,
        "passed": not any(verdict.values()),
    }
    (RESULTS / "chaos.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
