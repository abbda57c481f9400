"""The backlog probe: the outbox's size and oldest age, read in a thread of its own for the metrics."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from outbox_relay.config import RelaySettings
from outbox_relay.metrics import RelayMetrics
from outbox_relay.sql import backlog_sql, read_backlog_row
from schemas.config import OutboxNames


class BacklogProbe(threading.Thread):
    """Reads the backlog on a connection of its own, so a slow count never delays a batch."""

    def __init__(
        self, settings: RelaySettings, names: OutboxNames, metrics: RelayMetrics, stop_when: threading.Event
    ) -> None:
        super().__init__(name="cdcpipe-relay-backlog", daemon=True)
        self._settings = settings
        self._query = backlog_sql(names)
        self._metrics = metrics
        self._halt = threading.Event()
        self._outer = stop_when

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._halt.is_set() and not self._outer.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self._settings.dsn(),
                        autocommit=True,
                        application_name="cdcpipe-relay-backlog",
                        connect_timeout=5,
                    )
                # Rows waiting and the age of the oldest, in seconds: see `outbox_relay.sql.BACKLOG_COUNTED`.
                count, age = read_backlog_row(conn.execute(self._query).fetchone())
                self._metrics.backlog.set(count)
                self._metrics.backlog_age.set(age)
            except psycopg.Error:
                conn = None  # the main loop reports outages; here they only pause the gauge
            self._halt.wait(self._settings.backlog_interval_s)
        if conn is not None:
            conn.close()
