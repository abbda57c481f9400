"""One relay publishes per outbox: a Postgres advisory lock, held by its session, elects it.

The lock dies with the session, so a relay that crashes or loses its connection hands over at once; a
standby waits, trying again every `standby_retry_s`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

log = logging.getLogger("cdcpipe.relay")


def wait_for_lock(conn: psycopg.Connection[Any], key: str, stop: threading.Event, retry_s: float) -> bool:
    """Block until this session holds the leader lock of `key` (True), or `stop` is set first (False)."""
    announced = False
    while not stop.is_set():
        row = conn.execute("SELECT pg_try_advisory_lock(hashtext('cdcpipe.relay'), hashtext(%s))", (key,)).fetchone()
        if row and row[0]:
            log.info("leader for %s: publishing", key)
            return True
        if not announced:
            log.info("standby for %s: another relay is publishing; taking over when it stops", key)
            announced = True
        stop.wait(retry_s)
    return False
