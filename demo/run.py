"""`make demo`: the whole pipeline on a sample workload, end to end, on the local stack.

Application transactions write account events with `emit()`; our relay publishes them to Kafka; the
`account_balances` streaming job (Spark, a projection) folds them into a Delta table. The demo then reads
that table with a reader that shares no code with Spark (delta-rs), compares every balance with what the
transactions committed, and prints the result. One event that breaks its contract, written without
`emit()` as a careless writer might, shows where such events go: the job's dead-letter table.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from ground.errors import CdcpipeError
from ground.home import REPO_ROOT
from infra import kafka_security
from infra.config import StackSettings
from infra.stack import env_values
from schemas import outbox, topics
from schemas.config import OutboxNames, SchemaSettings
from schemas.emit import emit
from schemas.topics import TopicSettings
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.lake.store import ObjectStoreSettings

EXAMPLES = REPO_ROOT / "examples"
SAMPLES = {
    "CDCPIPE_CONTRACT_DIRS": EXAMPLES / "contracts",
    "CDCPIPE_TABLE_CONTRACT_DIRS": EXAMPLES / "tables",
    "CDCPIPE_TOPICS_DIR": EXAMPLES / "topics",
    "CDCPIPE_JOBS_DIRS": EXAMPLES / "jobs",
}
JOB = "account_balances"
ACCOUNTS = 40
DEPOSITS = 600
TRANSFERS = 200
WAIT_S = 300.0


class DemoError(CdcpipeError):
    """The demo did not see the pipeline deliver what was committed."""


def _workload(conn: psycopg.Connection[Any], run: str, names: OutboxNames) -> dict[str, int]:
    """Commit the sample's business transactions; return the balance each account must end with."""
    rng = random.Random(run)  # noqa: S311 - sample amounts, not secrets
    accounts = [f"demo-{run}-{n:03d}" for n in range(ACCOUNTS)]
    balances = dict.fromkeys(accounts, 0)
    for account in accounts:
        with conn.transaction():
            emit(conn, "account", account, "AccountOpened", {"account_id": account, "owner": "demo", "currency": "EUR"})
    for _ in range(DEPOSITS):
        account, amount = rng.choice(accounts), rng.randint(1, 500_00)
        with conn.transaction():
            emit(
                conn, "account", account, "MoneyDeposited", {"account_id": account, "amount": amount, "currency": "EUR"}
            )
        balances[account] += amount
    for n in range(TRANSFERS):
        source, target = rng.sample(accounts, 2)
        amount = rng.randint(1, 100_00)
        with conn.transaction():
            emit(
                conn,
                "transfer",
                f"tr-{run}-{n}",
                "TransferCompleted",
                {
                    "transfer_id": f"tr-{run}-{n}",
                    "from_account": source,
                    "to_account": target,
                    "amount": amount,
                    "currency": "EUR",
                },
            )
        balances[source] -= amount
        balances[target] += amount
    # A writer that skipped emit(): the amount is text, which MoneyDeposited's contract does not allow.
    with conn.transaction():
        conn.execute(
            sql.SQL("INSERT INTO {} (aggregatetype, aggregateid, type, payload) VALUES (%s, %s, %s, %s)").format(
                sql.Identifier(names.outbox_schema, names.outbox_table)
            ),
            (
                "account",
                accounts[0],
                "MoneyDeposited",
                json.dumps({"account_id": accounts[0], "amount": "ten", "currency": "EUR"}),
            ),
        )
    return balances


def _read(table: LakePath, store: ObjectStoreSettings) -> list[dict[str, Any]]:
    """The table's rows, read with delta-rs (a reader of its own, not Spark): from a folder or through S3."""
    from deltalake import DeltaTable

    if not any(n.endswith(".json") for n in (table / "_delta_log").names()):
        return []  # not created yet (the job makes it with its first batch)
    options = None if table.is_local else store.delta_rs_options()
    rows: list[dict[str, Any]] = DeltaTable(str(table), storage_options=options).to_pyarrow_table().to_pylist()
    return rows


def run(say: Callable[[str], None] = print) -> None:
    """Run the sample through the pipeline and show the result; raise DemoError if it does not arrive."""
    stack = StackSettings.load()
    # The demo's samples (contracts, table contract, topic files, job files): cdcpipe ships none and finds none
    # by default; the demo chooses these, over any folders of the user's.
    env = {**os.environ, **env_values(stack), **{v: str(folder) for v, folder in SAMPLES.items()}}
    os.environ.update(env)  # the settings loaded below, in this process, read the same stack and samples
    from streaming_jobs.config import JobsSettings
    from streaming_jobs.run import control as job_control

    names, schema_settings = OutboxNames.load(), SchemaSettings.load()
    dsn = schema_settings.pg_dsn.get_secret_value()
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            outbox.apply(conn, names, schema_settings)
    except psycopg.OperationalError as exc:
        raise DemoError(
            f"cannot reach the stack's Postgres ({exc}); start the stack first: `cdcpipe stack up` (make demo does)"
        ) from exc
    say(f"1. outbox {names.outbox_schema}.{names.outbox_table} ready (cdcpipe schema apply)")
    topic_settings = TopicSettings.load()
    declared = topics.load(topic_settings.topics_dir)
    applied = topics.apply(topic_settings.kafka.client_config(), declared.topics, declared.prefixes)
    say(f"   topics {', '.join(a.name for a in applied if a.action != 'granted')} ready (cdcpipe topics apply)")

    settings = JobsSettings.load()
    lake = settings.lake_root() / "demo"  # the stack's lake: its object store, unless CDCPIPE_LAKE says otherwise
    lake.delete_tree()  # a fresh read model and checkpoint on every run
    # Each component as its own Kafka user, with only the ACLs it needs (the stack's client files).
    spark = settings.model_copy(update={"lake": str(lake), "kafka": kafka_security.client(stack, "jobs")})
    stack.logs.mkdir(parents=True, exist_ok=True)
    relay_log = stack.logs / "demo-relay.log"
    with relay_log.open("wb") as log:
        relay = subprocess.Popen(
            [sys.executable, "-m", "outbox_relay"],  # what `cdcpipe relay run` runs
            env={**env, "CDCPIPE_METRICS_PORT": "0"},  # as the relay's own Kafka user (env_values names its file)
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    say(f"2. relay started (cdcpipe relay run, pid {relay.pid}; log {relay_log})")
    try:
        pid = job_control.submit(spark, JOB, master=None, trigger=None)
        say(
            f"3. streaming job {JOB} started on {spark.spark_master} "
            f"(cdcpipe jobs submit {JOB}, pid {pid}; tables under {lake})"
        )
        # Unique per run: the fresh checkpoint reads the topics from the start, earlier runs' events included.
        run_id = time.strftime("%Y%m%d%H%M%S")
        began = time.monotonic()
        # The application's writes, as an application connects: the writer role, which may only insert events.
        with psycopg.connect(env["CDCPIPE_WRITER_PG_DSN"]) as conn:
            expected = _workload(conn, run_id, names)
        events = ACCOUNTS + DEPOSITS + TRANSFERS
        say(f"4. committed {events} events in {events} transactions with emit(), and 1 that breaks its contract")
        table = lake / JOB
        deadline = time.monotonic() + WAIT_S
        got: dict[str, int] = {}
        dead: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            got = {
                r["account_id"]: r["balance"] for r in _read(table, spark.object_store) if r["account_id"] in expected
            }
            dead = [
                r
                for r in _read(lake / f"{JOB}_dead_letters", spark.object_store)
                if (r["key"] or b"").decode() in expected
            ]
            if got == expected and dead:
                break
            if relay.poll() is not None:
                raise DemoError(f"the relay exited with {relay.returncode}; its log: {relay_log}")
            time.sleep(1)
        seconds = time.monotonic() - began
        if got != expected or not dead:
            wrong = sorted(a for a in expected if got.get(a) != expected[a])
            raise DemoError(
                f"after {WAIT_S:.0f}s the Delta table has {len(wrong)} of {len(expected)} balances wrong or missing "
                f"and {len(dead)} dead letter(s) of 1; see `cdcpipe jobs status {JOB}`, the job's log "
                f"{spark.run_dir / f'{JOB}.log'}, and the relay's log {relay_log}"
            )
        say(
            f"5. every balance in Delta equals what was committed ({len(expected)} accounts, "
            f"{seconds:.0f}s from the first commit; read with delta-rs from {table}):"
        )
        for account in sorted(expected)[:5]:
            say(f"     {account}  {expected[account] / 100:>12.2f} EUR")
        say(f"     ... and {len(expected) - 5} more")
        for letter in dead:
            say(
                f"6. the bad event is in {JOB}_dead_letters, the rest flowed on: "
                f"{letter['topic']}:{letter['kafka_partition']}:{letter['kafka_offset']}: {letter['error']}"
            )
    finally:
        job_control.stop(spark, JOB)
        relay.send_signal(signal.SIGTERM)
        relay.wait(60)
    say(
        "Watch it: `cdcpipe status` (every part on one screen), the graphs at "
        f"{stack.prometheus_url}/consoles/cdcpipe.html, the alerts at {stack.prometheus_url}/alerts."
    )
    say("The stack is still up: `cdcpipe stack status`, `cdcpipe stack down` when you are done.")
