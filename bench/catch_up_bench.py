"""Catching up while the application keeps committing: a backlog drain, with and without notifications.

    python bench/catch_up_bench.py [--events 1000000] [--notifications 300000] [--rounds 2]

Needs the stack running (`cdcpipe stack up`). Each commit into the outbox sends one NOTIFY, and Postgres
hands a listener its notifications under a snapshot that it keeps until the last one is sent. A relay that
left them unread while behind (before commit 3c60e91) blocked its listening session in the send, with that
snapshot held: from then on nothing removed could be cleaned up, and every take stepped over all the rows
removed since. This measures the drain of `--events` rows (`relay_bench.drain`) with none, then with
`--notifications` arriving right after the rows are committed (an application's commits during an outage, or
during the drain), in turn, `--rounds` times.
Writes bench/results/catch_up.json; prints the JSON.
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
from common import BATCH, PARTITIONS, RESULTS, create_bench_topics, drain, stack_env, start_relay, wait_leader
from confluent_kafka.admin import AdminClient
from psycopg import sql

from infra import kafka_security
from infra.config import StackSettings
from schemas import outbox as schema_outbox
from schemas.config import OutboxNames, SchemaSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--notifications", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.events < 1 or args.notifications < 1 or args.rounds < 1:
        parser.error("--events, --notifications and --rounds must each be at least 1")

    stack = StackSettings.load()
    env = stack_env(stack)
    dsn = env["CDCPIPE_PG_DSN"]
    tag = uuid.uuid4().hex[:8]
    names = OutboxNames.load(outbox_schema=f"bench_{tag}")
    topic = f"bench.{tag}.catchup.bench"
    kafka = kafka_security.client(stack)
    create_bench_topics(kafka, [topic], PARTITIONS)
    settings = SchemaSettings.load(
        pg_dsn=dsn, publication=f"pub_{tag}", debezium_password_file=Path(env["CDCPIPE_DEBEZIUM_PASSWORD_FILE"])
    )
    with psycopg.connect(dsn) as conn:
        schema_outbox.apply(conn, names, settings)
    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / "catch_up_relay.log"
    log.write_text("")
    relay_env = {
        **env,
        "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
        "CDCPIPE_TOPIC_PATTERN": f"bench.{tag}.catchup.{{aggregatetype}}",
        "CDCPIPE_METRICS_PORT": "0",
        "CDCPIPE_BATCH_SIZE": str(BATCH),
    }
    rounds: dict[str, list[dict[str, Any]]] = {"quiet": [], "notified": []}
    relay = start_relay(relay_env, log)
    try:
        wait_leader(dsn, names, relay.pid)
        for _ in range(args.rounds):
            for kind, notifications in (("quiet", 0), ("notified", args.notifications)):
                rounds[kind].append(drain(dsn, names, kafka, topic, args.events, relay.pid, notifications))
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(names.outbox_schema)))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(settings.publication)))
        AdminClient(kafka.client_config()).delete_topics([topic])
    quiet, notified = (statistics.median(r["events_per_s"] for r in rounds[k]) for k in ("quiet", "notified"))
    result: dict[str, Any] = {
        "benchmark": "outbox_relay_catch_up",
        "events": args.events,
        "notifications": args.notifications,
        "quiet_drain_events_per_s": round(quiet),
        "notified_drain_events_per_s": round(notified),
        "ratio_notified_to_quiet": round(notified / quiet, 2),
        "rounds": rounds,
        "note": (
            "drains are timed from the commit of all rows until a consumer has received every message; the "
            "notifications are sent on the outbox's channel right after that commit, in one transaction"
        ),
    }
    (RESULTS / "catch_up.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
