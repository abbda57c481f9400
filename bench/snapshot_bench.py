"""Snapshot benchmark: a table that already holds N rows, captured with `cdcpipe tables add`, into a running mirror.

    python bench/snapshot_bench.py [--rows 1000000] [--writes-per-s 50] [--lake s3|local] [--sample-s 5]

Needs the stack running. Everything is the bench's own (a tag): its outbox schema, connector, slot,
publication, topic prefix, and folders of contracts, topics, jobs and connector definitions, as a user's. It
creates a small table and a big one of `--rows` rows (bigint key, text, numeric, timestamptz; about 60 bytes
a row), then runs what a user runs:
1. `tables add <small> --mirror`: the connector is created, its initial snapshot takes the small table;
2. `tables add <big> --mirror --submit`: the big table joins the running connector, Debezium's incremental
   snapshot reads its rows in chunks beside the stream, and the mirror job runs (its own driver, trigger 1 s).
While the snapshot runs, a writer updates random rows of the big table (`--writes-per-s`), as an application
would. Reported: the snapshot's seconds and rows/s (from Debezium's notifications: the signal, then
COMPLETED); the rows in the topic and in the mirror every few seconds (the mirror's rows counted with
delta-rs); the seconds until the mirror holds every row once the writer stopped; and whether it then equals
the table, row for row. Writes bench/results/snapshot.json; prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from common import RESULTS, cdcpipe, stack_env
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from psycopg import sql

from ground.kafka_client import KafkaSettings
from infra.config import StackSettings
from schemas import outbox
from schemas.config import OutboxNames, SchemaSettings

CHUNK_ROWS = 1024  # Debezium's incremental.snapshot.chunk.size default, which `tables add` keeps


def create_table(dsn: str, table: str, rows: int) -> float:
    """The table and its rows, loaded with COPY; the seconds it took."""
    began = time.monotonic()
    ident = sql.Identifier("public", table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2), "
                "placed_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, customer, amount) SELECT g, 'c' || g, g %% 100000 * 0.01 FROM generate_series(1, %s) g"
            ).format(ident),
            (rows,),
        )
        conn.execute(sql.SQL("ANALYZE {}").format(ident))
    return time.monotonic() - began


class Writer(threading.Thread):
    """Updates random rows of the table at a fixed rate until halted, as an application would."""

    def __init__(self, dsn: str, table: str, rows: int, per_s: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table, self.rows, self.per_s = dsn, table, rows, per_s
        self.halt = threading.Event()
        self.updates = 0

    def run(self) -> None:
        if self.per_s <= 0:
            return
        rng = random.Random(1)  # noqa: S311 - which rows change, not a secret
        statement = sql.SQL("UPDATE {} SET amount = amount + 1 WHERE id = %s").format(
            sql.Identifier("public", self.table)
        )
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.halt.wait(1 / self.per_s):
                conn.execute(statement, (rng.randint(1, self.rows),))
                self.updates += 1


def topic_records(kafka: dict[str, Any], topic: str) -> int:
    consumer = Consumer({**kafka, "group.id": f"snapshot-bench-{uuid.uuid4().hex[:6]}"})
    try:
        described = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if described is None or described.error is not None:
            return 0
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in described.partitions]
        return sum(high - low for low, high in ends)
    finally:
        consumer.close()


def mirror_rows(table: str, options: dict[str, str] | None) -> int:
    try:
        return int(DeltaTable(table, storage_options=options).to_pyarrow_dataset().count_rows())
    except TableNotFoundError:  # the job has not written yet
        return 0


def differing(dsn: str, table: str, mirror: str, options: dict[str, str] | None) -> int:
    """Rows whose amount differs between the table and its mirror (a row on one side only counts too)."""
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT id, amount FROM {}").format(sql.Identifier("public", table))
        truth = {r[0]: str(r[1]) for r in conn.execute(query)}
    held = DeltaTable(mirror, storage_options=options).to_pyarrow_table(columns=["id", "amount"]).to_pylist()
    mirrored = {r["id"]: str(r["amount"]) for r in held}
    return sum(1 for k in truth.keys() | mirrored.keys() if truth.get(k) != mirrored.get(k))


def snapshot_state(env: dict[str, str], table: str) -> str:
    listed = cdcpipe(env, "tables", "list").splitlines()
    at = listed.index(f"public.{table}")
    return next(line for line in listed[at:] if line.startswith("  snapshot")).split(maxsplit=1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--writes-per-s", type=int, default=50, help="updates of random rows while the snapshot runs")
    parser.add_argument("--lake", choices=("s3", "local"), default="s3")
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between two samples")
    args = parser.parse_args()
    env = stack_env(StackSettings.load())
    tag = uuid.uuid4().hex[:8]
    home = Path(tempfile.mkdtemp(prefix=f"snapshot_bench_{tag}_"))
    folders = {name: home / name for name in ("contracts", "topics", "jobs", "connectors", "run")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    names = OutboxNames.load(outbox_schema=f"snap_{tag}")
    schema = SchemaSettings.load(tables_publication=f"pub_snap_{tag}")
    dsn = schema.pg_dsn.get_secret_value()
    root = env["CDCPIPE_S3_LAKE"] if args.lake == "s3" else env["CDCPIPE_LOCAL_LAKE"]
    lake = f"{root}/_bench_snapshot_{tag}"
    env.update(
        {
            "CDCPIPE_OUTBOX_SCHEMA": names.outbox_schema,
            "CDCPIPE_TABLES_PUBLICATION": schema.tables_publication,
            "CDCPIPE_CAPTURE_CONNECTOR": f"snapshot-bench-{tag}",
            "CDCPIPE_CAPTURE_TOPIC_PREFIX": f"snap_{tag}",
            "CDCPIPE_CAPTURE_SLOT": f"snap_{tag}",
            "CDCPIPE_TABLE_CONTRACT_DIRS": str(folders["contracts"]),
            "CDCPIPE_TOPICS_DIR": str(folders["topics"]),
            "CDCPIPE_JOBS_DIRS": str(folders["jobs"]),
            "CDCPIPE_CONNECTORS_DIR": str(folders["connectors"]),
            "CDCPIPE_RUN_DIR": str(folders["run"]),
            "CDCPIPE_LAKE": lake,
        }
    )
    small, big = f"snap_small_{tag}", f"snap_big_{tag}"
    job, topic = f"{big}_mirror", f"snap_{tag}.public.{big}"
    options = (
        {
            k: env[k]
            for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP")
        }
        if args.lake == "s3"
        else None
    )
    mirror = f"{lake}/{job}"
    kafka = KafkaSettings.from_file(Path(env["CDCPIPE_KAFKA_CONFIG"])).client_config()
    with psycopg.connect(dsn) as conn:
        outbox.apply(conn, names, schema)
    writer = Writer(dsn, big, args.rows, args.writes_per_s)
    samples: list[dict[str, Any]] = []
    try:
        load_s = create_table(dsn, big, args.rows)
        create_table(dsn, small, 10)
        cdcpipe(env, "tables", "add", f"public.{small}", "--mirror")
        began = time.monotonic()
        added = cdcpipe(env, "tables", "add", f"public.{big}", "--mirror", "--submit")
        requested = time.monotonic()
        writer.start()
        completed: float | None = None
        while time.monotonic() - began < args.timeout_s:
            time.sleep(args.sample_s)
            state = snapshot_state(env, big)
            now = round(time.monotonic() - requested, 1)
            samples.append(
                {
                    "s": now,
                    "topic_records": topic_records(kafka, topic),
                    "mirror_rows": mirror_rows(mirror, options),
                    "snapshot": state,
                }
            )
            print(json.dumps(samples[-1]), flush=True)
            if completed is None and state.startswith("incremental snapshot completed"):
                completed = now
                writer.halt.set()
                writer.join()
            if completed is not None and samples[-1]["mirror_rows"] >= args.rows:
                break
        caught_up = samples[-1]["s"] if samples and samples[-1]["mirror_rows"] >= args.rows else None
        # The writer's last updates reach the mirror a few batches later: compare until equal, a minute at most.
        differ = -1
        for _ in range(6):
            time.sleep(2 * args.sample_s)
            differ = differing(dsn, big, mirror, options)
            if differ == 0:
                break
    finally:
        writer.halt.set()
        cdcpipe(env, "jobs", "stop", job)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "cdcpipe",
                "connectors",
                "delete",
                env["CDCPIPE_CAPTURE_CONNECTOR"],
                "--drop-slot",
                "--drop-publication",
                "--yes",
            ],
            env=env,
            capture_output=True,
            check=False,
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in (small, big):
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("public", table)))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.outbox_schema)))
    result: dict[str, Any] = {
        "benchmark": "snapshot",
        "cores": os.cpu_count(),
        "rows": args.rows,
        "lake": args.lake,
        "table_load_s": round(load_s, 1),
        "tables_add_s": round(requested - began, 1),
        "tables_add_output": added.splitlines(),
        "snapshot_s": completed,
        "snapshot_rows_per_s": round(args.rows / completed) if completed else None,
        "updates_while_snapshotting": writer.updates,
        "mirror_has_every_row_s": caught_up,
        "mirror_rows_differing_from_the_table": differ,
        "samples": samples,
        "passed": completed is not None and caught_up is not None and differ == 0,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "snapshot.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
