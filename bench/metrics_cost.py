"""What metrics cost: the relay's backlog drain and the event-log job's latency, metrics on and off, same run.

    python bench/metrics_cost.py [--events 100000] [--rounds 3] [--rate 3000] [--seconds 30] [--warmup-s 60]

Needs the stack running (its Prometheus scrapes what is on, every 5 s, as it would in use).
- Relay: `--events` outbox rows committed at once, drained by a relay serving its metrics (a free port) and by
  one with them off (`CDCPIPE_METRICS_PORT=0`); events/s until a consumer has them all (bench/common.drain).
- Job: commit -> Delta latency of an event-log job at `--rate` (bench/jobs_bench.latency: its own relay and
  driver, a warm-up first), with `CDCPIPE_METRICS=true` (served, scraped, each record's source time read) and
  `false`.
On and off take turns within each round, the one first changing from round to round, so the machine's noise
falls on both; each figure is the median of the rounds. `*_on_over_off` are the ratios (1.0: no cost).
Writes bench/results/metrics_cost.json; prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import uuid
from typing import Any

import psycopg
from common import RESULTS, create_topic, drain, env_kafka, free_port, stack_env, start_relay, wait_leader
from confluent_kafka.admin import AdminClient
from jobs_bench import latency
from psycopg import sql

from infra.config import StackSettings
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings
from streaming_jobs.lake.paths import LakePath

MODES = ("on", "off")


def relay_drain(env: dict[str, str], names: OutboxNames, topic: str, events: int, metrics: bool) -> dict[str, Any]:
    """One relay started with its metrics on or off drains `events` rows."""
    relay_env = {
        **env,
        "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
        "CDCPIPE_TOPIC_PATTERN": topic.replace(".bench", ".{aggregatetype}"),
        "CDCPIPE_METRICS_PORT": str(free_port()) if metrics else "0",
    }
    relay = start_relay(relay_env, RESULTS / "metrics_cost_relay.log")
    try:
        wait_leader(env["CDCPIPE_PG_DSN"], names, relay.pid)
        return drain(env["CDCPIPE_PG_DSN"], names, env_kafka(env), topic, events, relay.pid)
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(60)


def job_latency(
    env: dict[str, str], lake: LakePath, tag: str, args: argparse.Namespace, metrics: bool
) -> dict[str, Any]:
    """The event-log job's latency with `CDCPIPE_METRICS` set so (jobs_bench.latency)."""
    run = latency(
        {**env, "CDCPIPE_METRICS": "true" if metrics else "false"},
        lake,
        tag,
        args.rate,
        args.seconds,
        "event_log",
        args.settle_s,
        args.warmup_s,
    )
    return {"latency_s": run["latency_s"], "cycle_ms_median": run["cycle_ms_median"], "applied": run["applied"]}


def summary(rounds: list[dict[str, dict[str, Any]]], figure: Any) -> dict[str, Any]:
    """Each mode's median of `figure(run)` over the rounds, and on over off."""
    found = {mode: statistics.median(figure(r[mode]) for r in rounds) for mode in MODES}
    return {**found, "on_over_off": round(found["on"] / found["off"], 3) if found["off"] else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="relay: rows of each drain")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=3000, help="job: events/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="job: measured seconds of each run")
    parser.add_argument("--warmup-s", type=float, default=60.0, help="job: seconds of the same load before")
    parser.add_argument("--settle-s", type=float, default=20.0, help="job: seconds its driver gets to start")
    args = parser.parse_args()
    if args.rounds < 1 or args.events < 1 or args.rate < 1 or args.seconds <= 0:
        parser.error("--rounds, --events and --rate must be 1 or more, --seconds more than 0")
    env = stack_env(StackSettings.load())
    RESULTS.mkdir(exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    names = OutboxNames.load(outbox_schema=f"metrics_{tag}")
    topic = f"bench.{tag}.metrics.bench"
    dsn = env["CDCPIPE_PG_DSN"]
    lake = LakePath.of(f"{env['CDCPIPE_LOCAL_LAKE']}/_bench_metrics_{tag}")
    create_topic(env, topic)
    with psycopg.connect(dsn) as conn:
        schema_outbox.apply(conn, names, SchemaSettings.load(pg_dsn=dsn, publication=f"pub_{names.outbox_schema}"))
    relay_rounds: list[dict[str, dict[str, Any]]] = []
    job_rounds: list[dict[str, dict[str, Any]]] = []
    job_topics: list[str] = []
    try:
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            relay_rounds.append({m: relay_drain(env, names, topic, args.events, m == "on") for m in order})
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            measured = {}
            for m in order:
                run_tag = f"{tag}m{r}{m}"
                job_topics.append(f"jobs.{run_tag}.bench")
                measured[m] = job_latency(env, lake, run_tag, args, m == "on")
            job_rounds.append(measured)
    finally:
        lake.delete_tree()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.outbox_schema)))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"pub_{names.outbox_schema}")))
        AdminClient(env_kafka(env).client_config()).delete_topics([topic, *job_topics])
    result = {
        "benchmark": "metrics_cost",
        "cores": os.cpu_count(),
        "arguments": vars(args),
        "relay_drain_events_per_s": summary(relay_rounds, lambda run: run["events_per_s"]),
        "relay_cpu_us_per_event": summary(relay_rounds, lambda run: run["cpu_us_per_event"]),
        "job_latency_p50_s": summary(job_rounds, lambda run: run["latency_s"]["p50"]),
        "job_latency_p99_s": summary(job_rounds, lambda run: run["latency_s"]["p99"]),
        "relay_rounds": relay_rounds,
        "job_rounds": job_rounds,
        "note": "on/off take turns in each round (the first alternating); medians over the rounds; "
        "relay: drain of a backlog; job: event log at a fixed rate after a warm-up, Prometheus scraping what is on",
    }
    (RESULTS / "metrics_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
