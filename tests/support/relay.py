"""Relays in threads and processes, and what the relay tests read back: stalls, dead letters, status."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from outbox_relay.config import RelaySettings
from outbox_relay.relay import Relay
from tests.support.kafka import Record
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until


@contextmanager
def relay_thread(settings: RelaySettings, outbox: Outbox) -> Iterator[Relay]:
    """A relay running in this process until the block ends."""
    stop = threading.Event()
    relay = Relay(settings, outbox.names, stop=stop)
    thread = threading.Thread(target=relay.run, name="test-relay", daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        stop.set()
        thread.join(60)
        assert not thread.is_alive(), "the relay did not stop within 60s of being asked"


def relay_process(stack: Stack, outbox: Outbox, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """`cdcpipe relay run` as its own process, the way users run it."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cdcpipe", "relay", "run"],
            env=outbox.relay_env(stack, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def by_key(records: list[Record]) -> dict[bytes, list[bytes]]:
    """Event ids per key in Kafka order, first occurrence only (a resend after a crash is a duplicate)."""
    seen: set[bytes] = set()
    keyed: dict[bytes, list[bytes]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        event_id = r.headers["id"]
        if event_id not in seen:
            seen.add(event_id)
            keyed[r.key or b""].append(event_id)
    return keyed


def dead_rows_held_back_after_a_flood(conn: psycopg.Connection[Any], outbox: Outbox) -> list[int]:
    """Send 400,000 notifications on the outbox's channel, then delete 1,000 rows of a scratch table.

    Then VACUUM the table every 0.2 s until it removed every dead row, for 20 s at most. Returns, per VACUUM,
    the dead rows it could not remove yet: a last 0 means nothing held the database's xmin horizon back.
    """
    scratch = sql.Identifier(outbox.names.outbox_schema, "scratch")
    conn.execute(sql.SQL("CREATE TABLE {} (x integer)").format(scratch))
    held_back: list[int] = []

    def count(notice: psycopg.errors.Diagnostic) -> None:
        found = re.findall(r"(\d+) are dead but not yet removable", notice.message_primary or "")
        held_back.extend(int(n) for n in found)

    conn.add_notice_handler(count)
    conn.execute("SELECT pg_notify(%s, g::text) FROM generate_series(1, 400000) g", (outbox.names.notify_channel,))
    time.sleep(1)  # the listening backend has its notifications to send
    conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, 1000)").format(scratch))
    conn.execute(sql.SQL("DELETE FROM {}").format(scratch))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and held_back[-1:] != [0]:
        conn.execute(sql.SQL("VACUUM (VERBOSE) {}").format(scratch))
        time.sleep(0.2)
    conn.remove_notice_handler(count)
    return held_back


def relay_status(stack: Stack, outbox: Outbox) -> str:
    """What `cdcpipe relay status` prints for this outbox."""
    result = cdcpipe("relay", "status", env=outbox.relay_env(stack), timeout=120)
    return result.stdout + result.stderr


def dead_letter_reasons(outbox: Outbox) -> dict[str, str]:
    """Event id -> reason of every dead letter, in seq order."""
    with psycopg.connect(outbox.dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id::text, reason FROM {} ORDER BY seq").format(
                sql.Identifier(outbox.names.outbox_schema, outbox.names.dead_letter_table)
            )
        ).fetchall()
    return {str(i): str(r) for i, r in rows}


def wait_stalled(relay: Relay, topic: str) -> None:
    """Until the relay reports publishing stalled on `topic` in its metric."""
    wait_until(
        lambda: relay.metrics.registry.get_sample_value("cdcpipe_relay_stalled", {"topic": topic}) == 1,
        60,
        f"the relay to report the stall on {topic} in its metric",
    )
