"""One relay publishes per outbox: a Postgres advisory lock, held by its session, elects it.

The lock dies with the session, so a relay that crashes or loses its connection hands over at once; a
standby waits, trying again every `standby_retry_s`.

A leader that neither ends nor works (its process frozen, its host hung or cut off) would keep its session,
and the lock, for the kernel's two hours: TCP keepalives do not notice a frozen process, whose kernel still
answers them. So once it leads, the session ends itself after IDLE_TIMEOUT_S without a query (Postgres'
`idle_session_timeout`), and the leader queries it at least every HEARTBEAT_S (outbox_relay.wakeups, at every
take and every wait): a live leader keeps the lock, a silent one loses it within IDLE_TIMEOUT_S and a standby
takes over. Woken, the old leader finds its session gone at its next query and becomes a standby. Rows it had
sent but not yet deleted are sent again by the new leader: a resend, which delivery at least once allows.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

log = logging.getLogger("cdcpipe.relay")

IDLE_TIMEOUT_S = 20  # a leader's session ends after this long without a query: a frozen leader's lock goes
HEARTBEAT_S = 5.0  # a leader queries its session at least this often


def wait_for_lock(conn: psycopg.Connection[Any], key: str, stop: threading.Event, retry_s: float) -> bool:
    """Block until this session holds the leader lock of `key` (True), or `stop` is set first (False)."""
    announced = False
    while not stop.is_set():
        row = conn.execute("SELECT pg_try_advisory_lock(hashtext('cdcpipe.relay'), hashtext(%s))", (key,)).fetchone()
        if row and row[0]:
            conn.execute("SELECT set_config('idle_session_timeout', %s, false)", (f"{IDLE_TIMEOUT_S}s",))
            log.info("leader for %s: publishing", key)
            return True
        if not announced:
            log.info("standby for %s: another relay is publishing; taking over when it stops", key)
            announced = True
        stop.wait(retry_s)
    return False
