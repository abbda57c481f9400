"""When the relay takes its next batch: LISTEN/NOTIFY wake-ups, and sleeping until one comes."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from outbox_relay.leader import HEARTBEAT_S


class Wakeups:
    """The leader's LISTEN connection, read at every take and every wait; its notifications kept as one flag.

    A notification only says "rows were committed", and a take sees every row committed before it began.
    So the relay needs one flag: set when a notification is read, cleared when a take begins.

    Why read them while busy, when the relay is not going to wait for them: Postgres sends a listener its
    notifications under a snapshot that it holds until all are sent. Left unread while the relay is behind
    (or waits for Kafka), a busy application's commits fill the socket within minutes, and the listening
    backend blocks in the send with that snapshot held. No VACUUM could then remove a row deleted in any
    table of the database until the relay caught up, and every take had to step over all the rows removed
    since: the further behind, the slower (`bench/catch_up_bench.py` measures it; docs/benchmarks.md).
    """

    def __init__(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        self._conn = conn
        self._stop = stop
        self._announced = False
        self._beaten = time.monotonic()

    def _beat(self) -> None:
        """Query the leader's session if HEARTBEAT_S passed: a leader that stays silent loses the lock.

        Notifications that arrive during the query wait in psycopg's backlog for the next `notifies()`.
        """
        now = time.monotonic()
        if now - self._beaten >= HEARTBEAT_S:
            self._conn.execute("SELECT 1")
            self._beaten = now

    def read(self) -> None:
        """Read every notification that arrived, without waiting (a few microseconds when there are none).

        Until none is left: one call reads what libpq's buffer holds (16 kB, some 400 notifications), and the
        backend keeps its snapshot until it has sent the last one.
        """
        self._beat()
        while sum(1 for _ in self._conn.notifies(timeout=0)):
            self._announced = True

    def before_take(self) -> None:
        """A take begins next: it sees the rows of every notification read until now."""
        self.read()
        self._announced = False

    def sleep(self, seconds: float) -> None:
        """Until rows are announced (perhaps while the last batch ran), `seconds` passed, or stop."""
        self._wait(seconds, until_announced=True)

    def pause(self, seconds: float) -> None:
        """`seconds` (or until stop), reading notifications meanwhile."""
        self._wait(seconds, until_announced=False)

    def _wait(self, seconds: float, *, until_announced: bool) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and not (until_announced and self._announced):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._beat()
            # Slices of at most 0.5s, so a stop request is seen promptly.
            for _ in self._conn.notifies(timeout=min(left, 0.5), stop_after=1 if until_announced else None):
                self._announced = True
