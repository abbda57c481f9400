"""What TLS + SASL/SCRAM cost the relay: the same measurements over the secured listener and over plaintext.

    CDCPIPE_KAFKA_PLAINTEXT_PORT=9094 cdcpipe stack up     # the plaintext listener is opt-in, for this only
    CDCPIPE_KAFKA_PLAINTEXT_PORT=9094 python bench/tls_bench.py [--events 100000] [--rounds 3] [--rate 3000]

In one run, alternating the two modes round by round (so a noisy moment on the shared machine hits both):
- Kafka alone: the relay's producer settings producing `--events` ~1 KB messages;
- the relay draining `--events` committed outbox rows (its own process, as users run it);
- the relay at `--rate` events/s, open loop, latency from each event's scheduled commit to its receipt.
Only the publisher's side changes: over plaintext it is User:ANONYMOUS (granted on the bench's topic only);
the measuring consumer reads over the secured listener in both modes. Each figure is the median of its rounds;
the ratios are secured / plaintext. Writes bench/results/tls.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg
from common import BATCH, PARTITIONS, RESULTS, drain, stack_env, start_relay, wait_leader
from confluent_kafka.admin import AdminClient
from psycopg import sql
from relay_bench import kafka_ceiling, latency_run  # this bench is the relay bench over the TLS listener

from ground.kafka_client import KafkaSettings
from infra import kafka_security
from infra.config import StackSettings
from outbox_relay.config import RelaySettings
from schemas import outbox as schema_outbox
from schemas import topics
from schemas.config import OutboxNames, SchemaSettings
from schemas.topics import TopicSpec

MODES = ("secured", "plaintext")


def plaintext_client(port: int, folder: Path) -> Path:
    """A librdkafka client file for the plaintext listener; refuse with the fix if the broker has none."""
    file = folder / "plaintext.properties"
    file.write_text(f"bootstrap.servers=127.0.0.1:{port}\nsecurity.protocol=PLAINTEXT\n")
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "socket.connection.setup.timeout.ms": 3000})
    try:
        admin.list_topics(timeout=5)
    except Exception as exc:  # confluent-kafka raises KafkaException, or a bare one on timeout
        raise SystemExit(
            f"no plaintext listener on 127.0.0.1:{port} ({exc}); restart the broker with it: "
            f"`cdcpipe stack down && CDCPIPE_KAFKA_PLAINTEXT_PORT={port} cdcpipe stack up`"
        ) from exc
    return file


def median_of(rounds: list[dict[str, Any]], key: str) -> float:
    return round(float(statistics.median(r[key] for r in rounds)), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds of each latency run")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds at the rate before each is measured")
    parser.add_argument("--output", type=Path, default=RESULTS / "tls.json")
    args = parser.parse_args()
    if args.rounds < 1 or args.events < 1 or args.rate < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--rounds, --events and --rate must be at least 1, --seconds above 0, --warmup 0 or more")
    stack = StackSettings.load()
    if not stack.kafka_plaintext_port:
        parser.error(
            "set CDCPIPE_KAFKA_PLAINTEXT_PORT (say 9094) for this bench and for `cdcpipe stack up`: the stack "
            "opens a plaintext listener only when asked"
        )
    env = stack_env(stack)
    dsn = env["CDCPIPE_PG_DSN"]
    admin = kafka_security.client(stack)
    tag = uuid.uuid4().hex[:8]
    names = OutboxNames.load(outbox_schema=f"bench_tls_{tag}")
    topic = f"bench.{tag}.tls.bench"
    pattern = f"bench.{tag}.tls.{{aggregatetype}}"
    # The relay writes as `relay` over TLS, as ANONYMOUS over plaintext: each granted on this topic only.
    topics.apply(admin.client_config(), [TopicSpec(topic, PARTITIONS, 1, producers=("User:relay", "User:ANONYMOUS"))])
    with psycopg.connect(dsn) as conn:
        schema_outbox.apply(conn, names, SchemaSettings.load(pg_dsn=dsn, publication=f"pub_{names.outbox_schema}"))
    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / "tls_bench_relay.log"
    log.write_text("")
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"kafka": [], "drain": [], "latency": []} for m in MODES}
    try:
        with tempfile.TemporaryDirectory() as folder:
            files = {
                "secured": kafka_security.client_file(stack, "relay"),
                "plaintext": plaintext_client(stack.kafka_plaintext_port, Path(folder)),
            }
            for _ in range(args.rounds):
                for mode in MODES:
                    kafka = KafkaSettings.from_file(files[mode])
                    settings = RelaySettings.load(pg_dsn=dsn, kafka=kafka, topic_pattern=pattern, batch_size=BATCH)
                    rounds[mode]["kafka"].append(kafka_ceiling(settings, topic, args.events))
                    relay_env = {
                        # The client file alone says where and how to connect: a CDCPIPE_KAFKA_* variable of the
                        # stack's (its TLS bootstrap) would win over the plaintext file's.
                        **{k: v for k, v in env.items() if not k.startswith("CDCPIPE_KAFKA_")},
                        "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
                        "CDCPIPE_TOPIC_PATTERN": pattern,
                        "CDCPIPE_METRICS_PORT": "0",
                        "CDCPIPE_BATCH_SIZE": str(BATCH),
                        "CDCPIPE_KAFKA_CONFIG": str(files[mode]),
                    }
                    relay = start_relay(relay_env, log)
                    try:
                        wait_leader(dsn, names, relay.pid)
                        rounds[mode]["drain"].append(drain(dsn, names, admin, topic, args.events, relay.pid))
                        run = latency_run(
                            dsn, names, admin, topic, args.rate, args.seconds, relay.pid, warmup=args.warmup
                        )
                        rounds[mode]["latency"].append(
                            {
                                **{f"{k}_ms": v for k, v in run["latency_ms"].items()},
                                "cpu": run["publisher_cpu_percent"],
                            }
                        )
                    finally:
                        relay.send_signal(signal.SIGTERM)
                        relay.wait(60)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.outbox_schema)))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"pub_{names.outbox_schema}")))
        AdminClient(admin.client_config()).delete_topics([topic])
    figures: dict[str, dict[str, Any]] = {
        mode: {
            "kafka_produce_msgs_per_s": median_of(r["kafka"], "produce_msgs_per_s"),
            "kafka_produce_cpu_us_per_msg": median_of(r["kafka"], "produce_cpu_us_per_msg"),
            "relay_drain_events_per_s": median_of(r["drain"], "events_per_s"),
            "relay_drain_cpu_us_per_event": median_of(r["drain"], "cpu_us_per_event"),
            "latency_p50_ms": median_of(r["latency"], "p50_ms"),
            "latency_p99_ms": median_of(r["latency"], "p99_ms"),
            "relay_cpu_percent_at_rate": median_of(r["latency"], "cpu"),
            "rounds": r,
        }
        for mode, r in rounds.items()
    }
    secured, plain = figures["secured"], figures["plaintext"]
    result = {
        "benchmark": "tls_cost",
        "events": args.events,
        "rounds": args.rounds,
        "rate_per_s": args.rate,
        **figures,
        "ratio_secured_to_plaintext": {
            key: round(float(secured[key]) / max(float(plain[key]), 1e-9), 2) for key in secured if key != "rounds"
        },
        "note": "only the publisher's connection changes; the measuring consumer reads over TLS+SASL in both modes",
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
