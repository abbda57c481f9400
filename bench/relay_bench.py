"""Outbox relay benchmark: backlog drain against the raw ceilings, and open-loop latency at fixed rates.

    python bench/relay_bench.py [--events 200000] [--rounds 3] [--rates 3000,20000] [--seconds 20] [--warmup 60]

Needs the stack running (`cdcpipe stack up`). Everything shares the machine's cores: Postgres, Kafka, the
relay (its own process, as users run it), the load generator (its own process) and the consumer (here).

- Drain: N outbox rows of ~1 KB committed at once; time until the relay has emptied the outbox. The same
  with a relay whose metrics are off (`relay_drain_metrics_off`, its own outbox; the two take turns, and
  the second half of the rounds starts the two processes in the other order): `relay_drain_metrics_on_over_off`
  is what serving metrics (scraped every 5 s) costs a drain.
- Ceilings, same run, same rows: Postgres alone removing them with the relay's own statement and batch
  size; confluent-kafka alone producing the same messages with the relay's own producer settings. For the
  drain and each ceiling, the whole machine's CPU per event: what the relay costs beyond the two alone.
  The two ceilings and the drain run in turn, `--rounds` times; each figure is the median of its rounds,
  so one noisy moment on the shared machine (or a broker whose JIT is still cold) does not make the ratio.
- Latency: the generator commits events on a fixed schedule (open loop: it never waits for the relay or the
  consumer, and a late commit counts from its *scheduled* time, so coordinated omission cannot hide a stall);
  the consumer records commit-schedule -> receipt in an HdrHistogram. Each rate runs `--warmup` seconds
  first, on the same schedule, recorded apart (`warmup_latency_ms`), then `--seconds` measured. A second
  histogram counts from when each commit actually returned: the difference is the database taking the
  application's commits late.
  Each event's latency is also split into legs (database, publisher, Kafka), and the relay's batches that
  spent over 10 ms in a stage are counted: where the tail comes from.
Writes bench/results/relay.json and bench/results/relay_latency.png; prints the JSON.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import os
import signal
import statistics
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from common import (
    BATCH,
    EXAMPLES,
    PARTITIONS,
    RESULTS,
    Generator,
    RssSampler,
    at_end,
    copy_rows,
    cpu_seconds,
    cpu_us_per_event,
    create_bench_topics,
    delete_connector_topics,
    drain,
    free_port,
    grant_connector_topics,
    machine_busy_s,
    outbox_load,
    payload,
    rss_mib,
    stack_env,
    start_relay,
    vacuum,
    wait_leader,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from hdrh.histogram import HdrHistogram
from psycopg import sql

from connectors import commands, definitions, slots
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from ground.kafka_client import KafkaSettings
from infra import gc_log, kafka_security
from infra.config import StackSettings
from outbox_relay.config import RelaySettings
from outbox_relay.kafka import producer_config
from outbox_relay.sql import take
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings

WARMUP_S = 60.0  # as the OpenMessaging Benchmark, one minute at the rate before anything is measured
T = TypeVar("T")


def outbox_empty(conn: psycopg.Connection[Any], names: OutboxNames) -> bool:
    query = sql.SQL("SELECT NOT EXISTS (SELECT 1 FROM {})").format(
        sql.Identifier(names.outbox_schema, names.outbox_table)
    )
    row = conn.execute(query).fetchone()
    return bool(row and row[0])


# --- ceilings ----------------------------------------------------------------------------------------------


def postgres_ceiling(dsn: str, names: OutboxNames, count: int) -> dict[str, float]:
    """COPY `count` rows (through the outbox triggers), then remove them with the relay's statement."""
    vacuum(dsn, names)
    with psycopg.connect(dsn) as conn:
        began = time.perf_counter()
        copy_rows(conn, names, count)
        conn.commit()
        copy_s = time.perf_counter() - began
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")  # as the relay's own session does
        began, busy = time.perf_counter(), machine_busy_s()
        removed = 0
        while rows := take(conn, names, BATCH):
            conn.execute("COMMIT")
            removed += len(rows)
        conn.execute("COMMIT")
        take_s = time.perf_counter() - began
        cpu = cpu_us_per_event(busy, removed)
    return {
        "copy_rows_per_s": round(count / copy_s),
        "remove_rows_per_s": round(removed / take_s),
        "remove_cpu_us_per_row": cpu,
    }


def kafka_ceiling(settings: RelaySettings, topic: str, count: int) -> dict[str, float]:
    """Produce `count` messages like the relay's (key, ~1 KB value, three headers), relay producer settings."""
    producer = Producer(producer_config(settings))
    value = payload(time.time_ns()).encode()
    headers: list[tuple[str, str | bytes | None]] = [
        ("id", str(uuid.uuid4()).encode()),
        ("eventType", b"BenchEvent"),
        ("eventVersion", b"1"),
    ]
    began, busy = time.perf_counter(), machine_busy_s()
    for k in range(count):
        while True:
            try:
                producer.produce(topic, value=value, key=f"agg-{k % 1000}".encode(), headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
        if k % BATCH == BATCH - 1:
            producer.flush()  # the relay waits for each batch too
    producer.flush()
    seconds = time.perf_counter() - began
    return {"produce_msgs_per_s": round(count / seconds), "produce_cpu_us_per_msg": cpu_us_per_event(busy, count)}


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the rounds (a peak's highest), and the rounds themselves."""
    numeric = [key for key, value in runs[0].items() if isinstance(value, int | float)]
    summary: dict[str, Any] = {
        key: round((max if "peak" in key else statistics.median)(run[key] for run in runs), 2) for key in numeric
    }
    return {**summary, "rounds": runs}


# --- the relay under test -----------------------------------------------------------------------------------


def settle(dsn: str, names: Sequence[OutboxNames]) -> None:
    """Write back what earlier runs left dirty before a latency run starts.

    A drain leaves about 1 GB dirty: Kafka's log in the page cache and Postgres's WAL and heap. Left alone, the
    kernel writes it back 30 s later (vm.dirty_expire_centisecs) in one burst, and Postgres starts a checkpoint
    for the WAL volume, both in the middle of the next run: that run would measure the drain's writeback
    rather than the publisher at its rate. A steady 3,000 events/s checkpoints and writes back continuously.
    The drains' dead rows go first, in every outbox of the bench (`vacuum`).
    """
    vacuum(dsn, *names)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    os.sync()


# --- Debezium, for comparison -------------------------------------------------------------------------------


def start_debezium(
    connect: ConnectClient, settings: ConnectSettings, names: OutboxNames, tag: str, topic_prefix: str
) -> str:
    """The shipped outbox connector, pointed at the benchmark's outbox; returns its name once it streams."""
    schema = names.outbox_schema
    config = dict(definitions.load(EXAMPLES / "connectors" / "outbox.json")[0].config)
    config.update(
        {
            "topic.prefix": f"bench_{tag}",
            "slot.name": f"bench_{tag}",
            "publication.name": f"pub_{schema}",
            "table.include.list": f"{schema}\\.outbox,{schema}\\.debezium_heartbeat",
            "predicates.isOutbox.pattern": f"bench_{tag}\\.{schema}\\.outbox",
            "transforms.outbox.route.topic.replacement": f"{topic_prefix}${{routedByValue}}",
            "heartbeat.action.query": f"INSERT INTO {schema}.debezium_heartbeat (id, beat) VALUES (1, now()) "
            "ON CONFLICT (id) DO UPDATE SET beat = EXCLUDED.beat",
        }
    )
    name = f"bench-{tag}"
    connect.put_config(name, config)
    # As `connectors apply` checks one: its tasks RUNNING past their first heartbeat (10 s), the first write to a
    # topic of its own; a task that cannot write it fails then, and the error says why.
    commands.wait_running(connect, settings, [name], timeout_s=120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        slot = slots.slot_status(settings, f"bench_{tag}")
        if slot is not None and slot.active:
            return name
        time.sleep(0.2)
    raise SystemExit(f"Debezium connector {name} did not start streaming within 120s: {connect.status(name)}")


def failure_of(connect: ConnectClient, settings: ConnectSettings, name: str) -> str | None:
    """What failed in connector `name` and how to fix it (`connectors apply`'s words); None while it runs."""
    report = commands.status(connect, settings, name)
    return commands.failure(report) if report.failed else None


def connect_worker_pid() -> int:
    """The Connect worker's pid, from the stack's pid file (its memory is Debezium's memory)."""
    return int((StackSettings.load().run_dir / "connect.pid").read_text().split()[0])


# --- fixed-rate latency -----------------------------------------------------------------------------------------


def percentiles_ms(histogram: HdrHistogram) -> dict[str, float]:
    return {
        label: round(histogram.get_value_at_percentile(p) / 1000, 2)
        for label, p in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9), ("p99.99", 99.99))
    } | {"max": round(histogram.get_max_value() / 1000, 2)}


def from_actual_commit(
    received: list[tuple[int, int, int]], commits: list[tuple[int, int]], start_ns: int, interval: float
) -> HdrHistogram:
    """Latency from when each event's commit actually returned (not when it was due): the pipeline's own part.

    The headline figure counts from the scheduled time, so a commit that Postgres itself was slow to make
    counts against the pipeline too (no coordinated omission). This one leaves that stall out: the two
    side by side say how much of the tail is the database taking the application's commit late.
    """
    ends = [n for n, _ in commits]
    histogram = HdrHistogram(1, 120_000_000, 3)
    for scheduled, _, arrived in received:
        committed = _committed_at(scheduled, commits, ends, start_ns, interval)
        histogram.record_value(max(1, (arrived - committed) // 1000))
    return histogram


def _committed_at(
    scheduled: int, commits: list[tuple[int, int]], ends: list[int], start_ns: int, interval: float
) -> int:
    """When the transaction that held the event scheduled at `scheduled` returned from its commit."""
    k = round((scheduled - start_ns) / interval)
    return commits[min(bisect.bisect_right(ends, k), len(commits) - 1)][1]


def slowest_1pct(items: list[T], key: Callable[[T], int]) -> list[T]:
    """The slowest 1% of `items` by `key` (at least one), the slowest last: the tail every breakdown looks at."""
    return sorted(items, key=key)[-max(1, len(items) // 100) :]


def legs(
    received: list[tuple[int, int, int]], commits: list[tuple[int, int]], start_ns: int, interval: float
) -> dict[str, dict[str, float]]:
    """Each event's latency in three legs: at the median, and on average over the slowest 1% of events.

    - database: scheduled time -> its transaction's commit returned (the application's own commit);
    - publisher: commit -> handed to the producer (the record's Kafka CreateTime, in ms): wake-up, take;
      for Debezium, whatever timestamp Kafka Connect gave the record;
    - kafka: producer -> the consumer has it: the acknowledgement, the broker, the consumer's fetch.
    Where the tail comes from, without guessing: a slow commit, a late relay, or Kafka.
    """
    ends = [n for n, _ in commits]
    rows = []
    for scheduled, produced, arrived in received:
        committed = _committed_at(scheduled, commits, ends, start_ns, interval)
        rows.append((arrived - scheduled, committed - scheduled, produced - committed, arrived - produced))
    slowest = slowest_1pct(rows, key=lambda r: r[0])  # the total latency
    names = ("database", "publisher", "kafka")
    return {
        "median_ms": {n: round(statistics.median(r[i + 1] for r in rows) / 1e6, 2) for i, n in enumerate(names)},
        "slowest_1pct_mean_ms": {
            n: round(statistics.fmean(r[i + 1] for r in slowest) / 1e6, 2) for i, n in enumerate(names)
        },
    }


def backend_pids(dsn: str, application_name: str) -> list[int]:
    """The Postgres backends serving the sessions of one application name."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,))
        return [int(pid) for (pid,) in rows.fetchall()]


def latency_run(
    dsn: str,
    names: OutboxNames,
    kafka: KafkaSettings,
    topic: str,
    rate: int,
    seconds: float,
    publisher_pid: int,
    bench_outboxes: Sequence[OutboxNames] = (),
    warmup: float = WARMUP_S,
    connector_failure: Callable[[], str | None] | None = None,
) -> dict[str, Any]:
    """Events at `rate` per second for `warmup` + `seconds` into `names`'s outbox; the last `seconds` are measured.

    `connector_failure`: for a Debezium publisher, what failed in its connector (None while it runs), which the
    error names when no measured event arrives.

    The warm-up runs the same schedule, without a gap, and its events are recorded apart. On a freshly
    started stack, in 8 runs, the first minute at 3,000/s had a p99 of 13-26 ms where the 20 s after it had
    8-12 ms; the broker was still compiling (JIT) hundreds of methods through that minute, the drains before
    it having run other paths (large batches, not small requests and caught-up fetches). The warm-up's own
    percentiles are in the output, so nothing it would have shown is hidden.
    """
    stack_logs = StackSettings.load().logs
    settle(dsn, bench_outboxes or [names])
    # What the publisher costs: its own process and, for our relay, its Postgres sessions (Debezium's
    # walsender is not counted: it is named by the slot, not by an application).
    backends = backend_pids(dsn, f"cdcpipe-relay:{publisher_pid}")
    consumer = at_end(kafka, topic)
    histogram = HdrHistogram(1, 120_000_000, 3)  # microseconds, up to 2 minutes
    warmup_histogram = HdrHistogram(1, 120_000_000, 3)
    total = int(rate * (warmup + seconds))
    warmup_events = int(rate * warmup)
    interval = 1e9 / rate
    start_ns = time.time_ns() + 1_000_000_000
    # The first measured event's scheduled time, by the generator's own expression (no event off by a rounding)
    measured_ns = start_ns + int(warmup_events * interval)
    sampler = RssSampler(publisher_pid)
    sampler.start()
    generator = Generator(dsn, outbox_load(names), rate, warmup + seconds, start_ns, warmup_events)
    gc.collect()
    gc.freeze()  # the measuring loop should not pause to walk what the bench set up before it
    received = 0
    arrivals: list[tuple[int, int, int]] = []  # (scheduled, produced, received) ns of each measured event
    cpu_before: tuple[float, float, float] | None = None
    deadline = time.monotonic() + warmup + seconds + 60
    while received < total and time.monotonic() < deadline:
        # poll() returns as soon as one message is there; consume(timeout=0) then takes what else arrived.
        # (consume() with a timeout waits for the whole batch or the timeout, adding its own latency.)
        first = consumer.poll(0.1)
        if first is None:
            continue
        for message in [first, *consumer.consume(num_messages=5000, timeout=0)]:
            now = time.time_ns()
            value = message.value()
            if message.error() is not None or not value:
                continue
            # {"t": 123, ...} from the relay (jsonb text), {"t":123,...} from Debezium (compact JSON)
            scheduled = int(value[value.index(b":") + 1 : value.index(b",")])
            received += 1
            if scheduled < measured_ns:
                warmup_histogram.record_value(max(1, (now - scheduled) // 1000))
                continue
            if cpu_before is None:  # the publisher's CPU over the measured part only
                cpu_before = (cpu_seconds([publisher_pid]), cpu_seconds(backends), time.monotonic())
            histogram.record_value(max(1, (now - scheduled) // 1000))
            arrivals.append((scheduled, message.timestamp()[1] * 1_000_000, now))
    cpu_after = (cpu_seconds([publisher_pid]), cpu_seconds(backends), time.monotonic())
    if cpu_before is None:
        generator.stop()
        sampler.stop()
        why = where_events_stopped(
            dsn, names, consumer, topic, publisher_pid, received, warmup_events, connector_failure
        )
        consumer.close()
        raise SystemExit(f"{rate}/s: no measured event arrived within {warmup + seconds + 60:.0f} s: {why}")
    wall = cpu_after[2] - cpu_before[2]
    consumer.close()
    generated = generator.report(grace_s=30)
    commits = generated.pop("commits")
    after_commit = from_actual_commit(arrivals, commits, start_ns, interval)
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "warmup_seconds": warmup,
        "received": received,
        "expected": total,
        "measured_events": len(arrivals),
        "generator": generated,
        "publisher_peak_rss_mib": sampler.stop(),
        "publisher_cpu_percent": round(100 * (cpu_after[0] - cpu_before[0]) / wall, 1),
        "publisher_postgres_sessions_cpu_percent": round(100 * (cpu_after[1] - cpu_before[1]) / wall, 1),
        "latency_ms": percentiles_ms(histogram),
        "warmup_latency_ms": percentiles_ms(warmup_histogram),
        "latency_from_actual_commit_ms": percentiles_ms(after_commit),
        "legs": legs(arrivals, commits, start_ns, interval),
        "worst_seconds": worst_seconds(arrivals, measured_ns),
        "jvm_pauses": jvm_pauses(arrivals, {name: gc_log.log_file(stack_logs, name) for name in ("kafka", "connect")}),
        "_histogram": histogram,
    }


def where_events_stopped(
    dsn: str,
    names: OutboxNames,
    consumer: Consumer,
    topic: str,
    publisher_pid: int,
    received: int,
    warmup: int,
    connector_failure: Callable[[], str | None] | None = None,
) -> str:
    """Why a latency run saw none of its measured events: which stage holds them, read when it gave up.

    A Debezium publisher (`connector_failure` given) reads the WAL and leaves the outbox's rows where they are,
    so the rows left say nothing of it: its connector's state does.
    """
    seen = f"{received} of the {warmup} warm-up events arrived"
    failed = connector_failure() if connector_failure is not None else None
    if failed:
        return f"{seen}; {failed}"
    table = sql.Identifier(names.outbox_schema, names.outbox_table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
    waiting = int(row[0]) if row else 0
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions)
    read = sum(max(0, tp.offset) for tp in consumer.position(partitions))
    if not Path(f"/proc/{publisher_pid}").exists():
        return f"{seen}; the publisher (pid {publisher_pid}) is gone: see its log"
    if waiting and connector_failure is None:
        return (
            f"{seen}; {waiting} events are still in {names.outbox_schema}.{names.outbox_table}: the publisher "
            "fell behind or stopped publishing (its log; `cdcpipe relay status` for a stall)"
        )
    if ends > read:
        return (
            f"{seen}; the outbox is empty and {topic} holds {ends - read} events past what this consumer read "
            "(read_committed): an open Kafka transaction, or a consumer that lost its partitions"
        )
    return f"{seen}; the outbox is empty and {topic} holds nothing more: the events were never published there"


def jvm_pauses(arrivals: list[tuple[int, int, int]], logs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Each JVM's stop-the-world pauses during a run, and how many of the slowest 1% of events waited through one.

    A broker in a pause holds every acknowledgement and fetch for its length: the share says how much of
    the tail a collector explains, rather than leaving it to guesswork. Read from the stack's GC logs.
    """
    if not arrivals:
        return {}
    slowest = slowest_1pct(arrivals, key=lambda a: a[2] - a[0])
    since, until = min(a[0] for a in arrivals) / 1e9, max(a[2] for a in arrivals) / 1e9
    found = {}
    for jvm, log in logs.items():
        during = gc_log.pauses(log, since, until)
        waited = sum(1 for s, _, r in slowest if any(p.ended >= s / 1e9 and p.began <= r / 1e9 for p in during))
        found[jvm] = {
            "pauses": len(during),
            "max_ms": round(max((p.ms for p in during), default=0.0), 1),
            "total_ms": round(sum(p.ms for p in during), 1),
            "slowest_1pct_share_in_a_pause": round(waited / len(slowest), 2),
        }
    return found


def worst_seconds(arrivals: list[tuple[int, int, int]], start_ns: int, top: int = 5) -> list[dict[str, Any]]:
    """The seconds of the run (by scheduled time) with the highest latency.

    When the tail happened, to set beside the logs of Postgres checkpoints, Kafka and the relay.
    """
    worst: dict[int, int] = {}
    for scheduled, _, arrived in arrivals:
        second = (scheduled - start_ns) // 1_000_000_000
        worst[second] = max(worst.get(second, 0), arrived - scheduled)
    ranked = sorted(worst.items(), key=lambda item: -item[1])[:top]
    return [
        {
            "second": s,
            "wall_clock": time.strftime("%H:%M:%S", time.gmtime(start_ns / 1e9 + s)),
            "max_ms": round(ns / 1e6, 1),
        }
        for s, ns in ranked
    ]


def stage_totals(port: int) -> dict[str, float]:
    """Sums and counts of the relay's batch metrics, scraped from its /metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    totals = {}
    for line in text.splitlines():
        if line.startswith(
            (
                "cdcpipe_relay_batch_stage_seconds_sum",
                "cdcpipe_relay_batch_stage_seconds_count",
                "cdcpipe_relay_batch_size_sum",
                "cdcpipe_relay_batch_size_count",
            )
        ) or (line.startswith("cdcpipe_relay_batch_stage_seconds_bucket") and 'le="0.01"' in line):
            name, value = line.rsplit(" ", 1)
            totals[name] = float(value)
    return totals


def stage_means(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Batches during one run: how many, mean size, and mean milliseconds in each stage."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    batches = delta.get("cdcpipe_relay_batch_size_count", 0.0)
    means: dict[str, Any] = {
        "batches": batches,
        "mean_size": round(delta.get("cdcpipe_relay_batch_size_sum", 0.0) / max(batches, 1), 1),
    }
    for stage in ("take", "ack", "commit"):
        total, count = (
            delta.get(f'cdcpipe_relay_batch_stage_seconds_{kind}{{stage="{stage}"}}', 0.0) for kind in ("sum", "count")
        )
        means[f"mean_{stage}_ms"] = round(1000 * total / max(count, 1), 3)
    # The tail: batches that spent over 10 ms in a stage (a stalled DELETE, acknowledgement or COMMIT).
    means["over_10ms"] = {
        stage: delta.get(f'cdcpipe_relay_batch_stage_seconds_count{{stage="{stage}"}}', 0.0)
        - delta.get(f'cdcpipe_relay_batch_stage_seconds_bucket{{le="0.01",stage="{stage}"}}', 0.0)
        for stage in ("take", "ack", "commit")
    }
    return means


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    xs = [1 - 10 ** (-k / 40) for k in range(0, 201)]  # 0 .. 99.999 %
    for run in runs:
        h = run["_histogram"]
        ax.plot(
            [1 / (1 - x) for x in xs],
            [h.get_value_at_percentile(100 * x) / 1000 for x in xs],
            label=f"{run['publisher']} {run['rate_per_s']:,} events/s",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = [1, 10, 100, 1000, 10000, 100000]
    ax.set_xticks(ticks, ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("commit (scheduled) -> consumer receipt, ms")
    ax.set_title("outbox -> Kafka latency by percentile: cdcpipe relay and Debezium (open loop, 1 KB, 2 cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Run every measurement in one go and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="ceilings and drain, each run this many times")
    parser.add_argument("--rates", default="3000,20000")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds of each latency run")
    parser.add_argument(
        "--warmup",
        type=float,
        default=WARMUP_S,
        help="seconds at the same rate before each latency run is measured (reported apart)",
    )
    parser.add_argument("--no-debezium", action="store_true", help="measure only our relay")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.warmup < 0 or args.seconds <= 0:
        parser.error("--warmup must be 0 or more and --seconds more than 0")
    rates = [int(r) for r in args.rates.split(",")]

    stack = StackSettings.load()
    env = stack_env(stack)
    dsn = env["CDCPIPE_PG_DSN"]
    tag = uuid.uuid4().hex[:8]
    relay_names = OutboxNames.load(outbox_schema=f"bench_{tag}")
    debezium_names = OutboxNames.load(outbox_schema=f"bench_{tag}_dbz")
    ceiling_names = OutboxNames.load(outbox_schema=f"bench_{tag}_ceiling")
    quiet_names = OutboxNames.load(outbox_schema=f"bench_{tag}_quiet")  # a relay of its own, metrics off
    all_names = (relay_names, debezium_names, ceiling_names, quiet_names)
    relay_topic, debezium_topic, ceiling_topic, quiet_topic = (
        f"bench.{tag}.{p}.bench" for p in ("relay", "dbz", "ceiling", "quiet")
    )
    kafka = kafka_security.client(stack)
    create_bench_topics(kafka, [relay_topic, debezium_topic, ceiling_topic, quiet_topic], PARTITIONS)
    # The topics the Debezium connector names itself (its heartbeats every 10 s, its heartbeat table's changes),
    # granted to Connect as the shipped topic files grant the shipped connector's: the broker creates none on use.
    if not args.no_debezium:
        grant_connector_topics(kafka, f"bench_{tag}")
    password_file = Path(env["CDCPIPE_DEBEZIUM_PASSWORD_FILE"])
    with psycopg.connect(dsn) as conn:
        for n in all_names:
            schema_outbox.apply(
                conn,
                n,
                SchemaSettings.load(
                    pg_dsn=dsn, publication=f"pub_{n.outbox_schema}", debezium_password_file=password_file
                ),
            )
    pattern = f"bench.{tag}.relay.{{aggregatetype}}"
    relay_settings = RelaySettings.load(pg_dsn=dsn, kafka=kafka, topic_pattern=pattern, batch_size=BATCH)
    RESULTS.mkdir(parents=True, exist_ok=True)
    metrics_port = free_port()
    log = RESULTS / "relay_bench_relay.log"
    log.write_text("")
    relay_env = {
        **env,
        "CDCPIPE_OUTBOX_SCHEMA": relay_names.outbox_schema,
        "CDCPIPE_TOPIC_PATTERN": pattern,
        "CDCPIPE_METRICS_PORT": str(metrics_port),
        "CDCPIPE_BATCH_SIZE": str(BATCH),
    }
    connect_settings = ConnectSettings.load(
        connect_url=stack.connect_url,
        pg_dsn=dsn,
        connect_user=env["CDCPIPE_CONNECT_USER"],
        connect_password_file=Path(env["CDCPIPE_CONNECT_PASSWORD_FILE"]),
    )
    result: dict[str, Any] = {
        "benchmark": "outbox_relay",
        "payload_bytes": len(payload(time.time_ns())),
        "partitions": PARTITIONS,
        "batch_size": BATCH,
        "cores": os.cpu_count(),
    }
    # The same relay with its metrics off (no port: nothing served, nothing scraped), on an outbox of its own.
    quiet_env = {
        **relay_env,
        "CDCPIPE_OUTBOX_SCHEMA": quiet_names.outbox_schema,
        "CDCPIPE_TOPIC_PATTERN": f"bench.{tag}.quiet.{{aggregatetype}}",
        "CDCPIPE_METRICS_PORT": "0",
    }
    runs: list[dict[str, Any]] = []
    debezium_name: str | None = None

    def start_both(on_first: bool) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
        """Both relays, the one with metrics first or second, each leading its outbox."""
        if on_first:
            relay = start_relay(relay_env, log)
            quiet = start_relay(quiet_env, log)
        else:
            quiet = start_relay(quiet_env, log)
            relay = start_relay(relay_env, log)
        wait_leader(dsn, relay_names, relay.pid)
        wait_leader(dsn, quiet_names, quiet.pid)
        return relay, quiet

    def stop(*processes: subprocess.Popen[bytes]) -> None:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(60)

    try:
        relay, quiet = start_both(on_first=True)
        try:
            result["relay_idle_rss_mib"] = round(rss_mib(relay.pid), 1)
            rounds: dict[str, list[dict[str, Any]]] = {
                "ceiling_postgres": [],
                "ceiling_kafka": [],
                "relay_drain": [],
                "relay_drain_metrics_off": [],
            }
            started_first: list[str] = []
            for r in range(args.rounds):
                if args.rounds > 1 and r == args.rounds // 2:
                    # Which of the two processes started first moved their drains by 10% (docs/benchmarks.md):
                    # the second half of the rounds starts them the other way round, so the order cancels.
                    stop(relay, quiet)
                    relay, quiet = start_both(on_first=False)
                started_first.append("on" if r < args.rounds // 2 or args.rounds == 1 else "off")
                rounds["ceiling_postgres"].append(postgres_ceiling(dsn, ceiling_names, args.events))
                rounds["ceiling_kafka"].append(kafka_ceiling(relay_settings, ceiling_topic, args.events))
                # Metrics on and off take turns, the first changing from round to round.
                drains = [
                    ("relay_drain", relay_names, relay_topic, relay.pid),
                    ("relay_drain_metrics_off", quiet_names, quiet_topic, quiet.pid),
                ]
                for name, names, topic, pid in drains if r % 2 == 0 else drains[::-1]:
                    rounds[name].append(drain(dsn, names, kafka, topic, args.events, pid))
            result["relay_started_first_per_round"] = started_first
            result.update({name: medians(runs_of) for name, runs_of in rounds.items()})
            on_over_off = [
                on["events_per_s"] / off["events_per_s"]
                for on, off in zip(rounds["relay_drain"], rounds["relay_drain_metrics_off"], strict=True)
            ]
            result["relay_drain_metrics_on_over_off"] = round(statistics.median(on_over_off), 3)
            result["relay_drain_metrics_on_over_off_per_round"] = [round(x, 3) for x in on_over_off]
            for rate in rates:
                before = stage_totals(metrics_port)
                run = latency_run(
                    dsn,
                    relay_names,
                    kafka,
                    relay_topic,
                    rate,
                    args.seconds,
                    relay.pid,
                    all_names,
                    args.warmup,
                )
                run["relay_batches"] = stage_means(before, stage_totals(metrics_port))
                runs.append({"publisher": "relay", **run})
        finally:
            stop(relay, quiet)
        if not args.no_debezium:
            with ConnectClient(connect_settings) as connect:
                debezium_name = start_debezium(connect, connect_settings, debezium_names, tag, f"bench.{tag}.dbz.")
                worker = connect_worker_pid()
                result["debezium_drain"] = drain(dsn, debezium_names, kafka, debezium_topic, args.events, worker)
                for rate in rates:
                    run = latency_run(
                        dsn,
                        debezium_names,
                        kafka,
                        debezium_topic,
                        rate,
                        args.seconds,
                        worker,
                        all_names,
                        args.warmup,
                        connector_failure=lambda: failure_of(connect, connect_settings, debezium_name or ""),
                    )
                    runs.append({"publisher": "debezium", **run})
    finally:
        if debezium_name:
            with ConnectClient(connect_settings) as connect:
                connect.delete(debezium_name)
            slots.drop_slot(connect_settings, f"bench_{tag}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for n in all_names:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(n.outbox_schema)))
                conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"pub_{n.outbox_schema}")))
        AdminClient(kafka.client_config()).delete_topics([relay_topic, debezium_topic, ceiling_topic, quiet_topic])
        if not args.no_debezium:
            delete_connector_topics(kafka, f"bench_{tag}")
    lower = min(result["ceiling_postgres"]["remove_rows_per_s"], result["ceiling_kafka"]["produce_msgs_per_s"])
    result["relay_drain"]["ratio_to_lower_ceiling"] = round(result["relay_drain"]["events_per_s"] / lower, 2)
    result["relay_drain"]["ratio_to_lower_ceiling_per_round"] = [
        round(d["events_per_s"] / min(p["remove_rows_per_s"], k["produce_msgs_per_s"]), 2)
        for d, p, k in zip(rounds["relay_drain"], rounds["ceiling_postgres"], rounds["ceiling_kafka"], strict=True)
    ]
    if "debezium_drain" in result:
        result["drain_ratio_relay_to_debezium"] = round(
            result["relay_drain"]["events_per_s"] / result["debezium_drain"]["events_per_s"], 2
        )
        for relay_run, dbz_run in zip(runs[: len(rates)], runs[len(rates) :], strict=True):
            relay_run["p99_ratio_debezium_to_relay"] = round(
                dbz_run["latency_ms"]["p99"] / max(relay_run["latency_ms"]["p99"], 0.001), 2
            )
    plot(runs, RESULTS / "relay_latency.png")
    result["latency"] = [{k: v for k, v in run.items() if not k.startswith("_")} for run in runs]
    result["latency_plot"] = str(RESULTS / "relay_latency.png")
    result["note"] = (
        "latency counts from each event's scheduled commit time (open loop), so a stalled generator or "
        "publisher shows up in the percentiles instead of being omitted; drains are timed from the commit "
        "of all rows until a consumer has received every message; Debezium's memory is the Connect worker's"
    )
    (RESULTS / "relay.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
