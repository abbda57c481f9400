"""The backlog probe: the outbox's size and oldest age, read in a thread of its own for the metrics."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from outbox_relay.relay import Relay


class BacklogProbe(threading.Thread):
    """Reads the backlog on a connection of its own, so a slow count never delays a batch."""

    def __init__(self, relay: Relay, stop_when: threading.Event) -> None:
        super().__init__(name="cdcpipe-relay-backlog", daemon=True)
        self._relay = relay
        self._halt = threading.Event()
        self._outer = stop_when

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        interval = self._relay.settings.backlog_interval_s
        conn: psycopg.Connection[Any] | None = None
        while not self._halt.is_set() and not self._outer.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self._relay.settings.dsn(),
                        autocommit=True,
                        application_name="cdcpipe-relay-backlog",
                        connect_timeout=5,
                    )
                count, age = self._relay.read_backlog(conn)
                self._relay.metrics.backlog.set(count)
                self._relay.metrics.backlog_age.set(age)
            except psycopg.Error:
                conn = None  # the main loop reports outages; here they only pause the gauge
            self._halt.wait(interval)
        if conn is not None:
            conn.close()
