"""What three replicas cost the relay: a backlog drained into a topic of 3 replicas (2 in sync) and into one of 1.

    python bench/replication_bench.py [--events 50000] [--rounds 3] [--latency-seconds 60] [--rate 100]
                                      [--results bench/results/replication.json]

Needs a stack of three Kafka nodes (`cdcpipe stack up --cluster`). Two outboxes, each with a relay of its own (as
users run it: idempotent, acks=all), one publishing to a topic of 3 replicas with `min.insync.replicas=2`, the
other to a topic of 1 replica on the same cluster: the same run, the same brokers, only the replication differs.
Each round commits `--events` outbox rows of ~1 KB at once to each outbox in turn (the order swapped every round)
and times until a consumer has received them all (`common.drain`). Then, each round, the latency from a commit in
Postgres to its row in Delta (relay, Kafka, an event-log job in a driver of its own: `jobs_bench.latency`, a warm-up
first) at `--rate` events a second for `--latency-seconds`, on a topic of 3 replicas and on one of 1, in turn
(`--latency-seconds 0`: none). Prints the medians and their ratios; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import uuid
from pathlib import Path
from typing import Any

import psycopg
from common import BATCH, PARTITIONS, RESULTS, drain, free_port, stack_env, start_relay, wait_leader
from jobs_bench import SETTLE_S, latency
from psycopg import sql

from infra import kafka_security
from infra.config import StackSettings
from schemas import outbox as schema_outbox
from schemas import topics
from schemas.config import OutboxNames, SchemaSettings
from schemas.topics import TopicSpec
from streaming_jobs.lake.paths import LakePath

REPLICAS = (3, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=60.0, help="measured per round and topic (0: none)")
    parser.add_argument("--rate", type=int, default=100, help="events a second while the latency is measured")
    parser.add_argument(
        "--settle-s", type=float, default=SETTLE_S, help="the job's driver starting, before its warm-up"
    )
    parser.add_argument("--warmup-s", type=float, default=30.0, help="the same load before each latency measure")
    parser.add_argument("--results", type=Path, default=RESULTS / "replication.json")
    args = parser.parse_args()
    stack = StackSettings.load()
    if stack.kafka_nodes < 3:
        parser.error(
            f"the stack has {stack.kafka_nodes} Kafka node(s): start one of three (`cdcpipe stack up --cluster`)"
        )
    env = stack_env(stack)
    dsn = env["CDCPIPE_PG_DSN"]
    tag = uuid.uuid4().hex[:8]
    kafka = kafka_security.client(stack)
    names = {r: OutboxNames.load(outbox_schema=f"bench_{tag}_rf{r}") for r in REPLICAS}
    topic = {r: f"bench.{tag}.rf{r}.bench" for r in REPLICAS}
    topics.apply(
        kafka.client_config(),
        [
            TopicSpec(
                topic[r], PARTITIONS, r, config={"min.insync.replicas": str(min(r, 2))}, producers=("User:relay",)
            )
            for r in REPLICAS
        ],
    )
    with psycopg.connect(dsn) as conn:
        for n in names.values():
            schema_outbox.apply(
                conn,
                n,
                SchemaSettings.load(
                    pg_dsn=dsn,
                    publication=f"pub_{n.outbox_schema}",
                    debezium_password_file=Path(env["CDCPIPE_DEBEZIUM_PASSWORD_FILE"]),
                ),
            )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    log = args.results.with_suffix(".relays.log")
    log.write_text("")
    relays = {
        r: start_relay(
            {
                **env,
                "CDCPIPE_OUTBOX_SCHEMA": names[r].outbox_schema,
                "CDCPIPE_TOPIC_PATTERN": f"bench.{tag}.rf{r}.{{aggregatetype}}",
                "CDCPIPE_METRICS_PORT": str(free_port()),
                "CDCPIPE_BATCH_SIZE": str(BATCH),
                "CDCPIPE_KAFKA_CONFIG": str(kafka_security.client_file(stack, "relay")),
            },
            log,
        )
        for r in REPLICAS
    }
    rounds: dict[int, list[dict[str, Any]]] = {r: [] for r in REPLICAS}
    try:
        for r, relay in relays.items():
            wait_leader(dsn, names[r], relay.pid)
        for turn in range(args.rounds):
            for r in REPLICAS if turn % 2 == 0 else tuple(reversed(REPLICAS)):
                rounds[r].append(drain(dsn, names[r], kafka, topic[r], args.events, relays[r].pid))
    finally:
        for relay in relays.values():
            relay.send_signal(signal.SIGTERM)
            relay.wait(60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for n in names.values():
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(n.outbox_schema)))
                conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"pub_{n.outbox_schema}")))
    latencies = measure_latency(env, tag, args) if args.latency_seconds else {}
    median = {r: statistics.median(d["events_per_s"] for d in rounds[r]) for r in REPLICAS}
    result = {
        "benchmark": "replication",
        "kafka_nodes": stack.kafka_nodes,
        "events_per_drain": args.events,
        "rounds": args.rounds,
        "drain_events_per_s_median": {f"rf{r}": median[r] for r in REPLICAS},
        "drain_seconds_median": {f"rf{r}": statistics.median(d["seconds"] for d in rounds[r]) for r in REPLICAS},
        "rf1_over_rf3": round(median[1] / median[3], 2),
        "drains": {f"rf{r}": rounds[r] for r in REPLICAS},
    }
    if latencies:
        result["commit_to_delta"] = latency_summary(latencies, args.rate, args.latency_seconds)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def measure_latency(env: dict[str, str], tag: str, args: argparse.Namespace) -> dict[int, list[dict[str, Any]]]:
    """Each round, commit-to-Delta latency on a topic of each replication (the order swapped every round)."""
    lake = LakePath.of(f"{env['CDCPIPE_LOCAL_LAKE']}/_bench_{tag}")
    runs: dict[int, list[dict[str, Any]]] = {r: [] for r in REPLICAS}
    try:
        for turn in range(args.rounds):
            for r in REPLICAS if turn % 2 == 0 else tuple(reversed(REPLICAS)):
                run = latency(
                    env,
                    lake,
                    f"{tag}l{turn}rf{r}",
                    args.rate,
                    args.latency_seconds,
                    "event_log",
                    args.settle_s,
                    args.warmup_s,
                    replicas=r,
                )
                if run["latency_s"] is None:
                    raise SystemExit(f"no event of the latency run on the topic of {r} replica(s) reached Delta")
                runs[r].append({**run["latency_s"], "applied": run["applied"], "keeps_up": run["keeps_up"]})
    finally:
        lake.delete_tree()
    return runs


def latency_summary(runs: dict[int, list[dict[str, Any]]], rate: int, seconds: float) -> dict[str, Any]:
    """The median over the rounds of each replication's p50 and p99, and RF 3's over RF 1's."""
    p = {(r, q): statistics.median(run[q] for run in runs[r]) for r in REPLICAS for q in ("p50", "p99")}
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "median_of_rounds_s": {f"rf{r}": {q: round(p[r, q], 3) for q in ("p50", "p99")} for r in REPLICAS},
        "rf3_over_rf1": {q: round(p[3, q] / p[1, q], 2) for q in ("p50", "p99")},
        "runs": {f"rf{r}": runs[r] for r in REPLICAS},
    }


if __name__ == "__main__":
    main()
