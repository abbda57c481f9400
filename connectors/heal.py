"""Restarting the tasks that failed on a transient fault, with backoff and a ceiling; never the others.

Debezium retries a lost connection while it streams, but an error in its start (Postgres down while the task
restarts after a Kafka fault, say) fails the task for good: Kafka Connect restarts nothing by itself. A task
FAILED on a connection refused or reset, a database shutting down or starting up, a timeout or a handshake cut
off is restarted at the next look, again `heal_backoff_s` after that, then twice as long each time (at most
`heal_backoff_max_s`), up to `heal_restarts_max` times in a row; one that then ran `heal_settled_s` starts the count afresh. A task failed
on anything else (a data or configuration error: a column not found, a password refused, a certificate not
trusted) is left as it is: restarting it would fail the same way, and hide the error. The monitor's collector
runs a `Healer` (its `cdcpipe_connect_task_*restarts*` series, and an alert when the ceiling is reached).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.errors import ConnectError

log = logging.getLogger(__name__)

# What a fault of the moment says in a task's trace (Java's, the Postgres driver's, Kafka's, Debezium's).
TRANSIENT = re.compile(
    r"|".join(
        [
            r"java\.net\.ConnectException",
            r"java\.net\.SocketTimeoutException",
            r"java\.net\.SocketException",
            r"java\.io\.EOFException",
            r"Connection to \S+ refused",
            r"Connection refused",
            r"Connection reset",
            r"connection attempt timed out",
            r"An I/O error occurred while sending to the backend",
            r"This connection has been closed",
            r"the database system is (?:shutting down|starting up|in recovery mode)",
            r"terminating connection due to administrator command",
            r"org\.apache\.kafka\.common\.errors\.(?:TimeoutException|DisconnectException|NetworkException)",
            r"Remote host terminated the handshake",
        ]
    ),
    re.IGNORECASE,
)
# What no restart mends, even when a transient word appears beside it (a refused login says "connection" too).
PERMANENT = re.compile(
    r"password authentication failed|SaslAuthenticationException|PKIX path|certificate|does not exist|"
    r"permission denied|not found in result set|ConfigException",
    re.IGNORECASE,
)


def transient(trace: str | None) -> bool:
    """Whether a FAILED task's trace names a fault of the moment, which a restart later may get past."""
    return bool(trace) and TRANSIENT.search(trace or "") is not None and PERMANENT.search(trace or "") is None


@dataclass
class TaskRecord:
    """One task's restarts in a row, and when it may be restarted next."""

    restarts: int = 0  # in a row, since it last ran `heal_settled_s`
    total: int = 0  # since the collector started: the counter Prometheus reads
    next_at: float = 0.0
    running_since: float | None = None
    exhausted: bool = False
    last_trace: str = ""


@dataclass
class Healer:
    """Reads every connector's tasks once per `tick` and restarts those it should."""

    settings: ConnectSettings
    clock: Callable[[], float] = time.monotonic
    tasks: dict[tuple[str, int], TaskRecord] = field(default_factory=dict)

    def tick(self, client: ConnectClient) -> list[tuple[str, int]]:
        """Restart the tasks due a restart now; those restarted."""
        now = self.clock()
        restarted = []
        seen = set()
        for name, found in client.expanded().items():
            for task in found.get("status", {}).get("tasks", []):
                key = (name, int(task.get("id", 0)))
                seen.add(key)
                record = self.tasks.setdefault(key, TaskRecord())
                if self._due(key, record, str(task.get("state", "")), task.get("trace"), now):
                    try:
                        client.restart_task(*key)
                    except ConnectError as exc:  # Connect down, or still rebalancing: the next tick tries again
                        log.warning("heal: restarting %s task %d failed: %s", *key, exc)
                        continue
                    record.restarts += 1
                    record.total += 1
                    delay = min(
                        self.settings.heal_backoff_s * 2 ** (record.restarts - 1), self.settings.heal_backoff_max_s
                    )
                    record.next_at = now + delay
                    restarted.append(key)
                    log.warning(
                        "heal: restarted %s task %d (%d of %d in a row) after a transient fault: %s",
                        *key,
                        record.restarts,
                        self.settings.heal_restarts_max,
                        record.last_trace,
                    )
        for gone in set(self.tasks) - seen:
            del self.tasks[gone]  # a connector deleted, or its task count lowered
        return restarted

    def _due(self, key: tuple[str, int], record: TaskRecord, state: str, trace: object, now: float) -> bool:
        if state != "FAILED":
            if state == "RUNNING":
                record.running_since = record.running_since or now
                if now - record.running_since >= self.settings.heal_settled_s:
                    record.restarts, record.exhausted = 0, False
            return False
        record.running_since = None
        lines = str(trace or "").strip().splitlines()
        # The deepest cause says what happened (the first line, only that the task stopped).
        record.last_trace = next((x for x in reversed(lines) if x.startswith("Caused by")), lines[0] if lines else "")
        if not transient(str(trace or "")) or self.settings.heal_restarts_max == 0:
            return False
        if record.restarts >= self.settings.heal_restarts_max:
            if not record.exhausted:
                log.error(
                    "heal: %s task %d left FAILED after %d restarts in a row: %s",
                    *key,
                    record.restarts,
                    record.last_trace,
                )
            record.exhausted = True
            return False
        return now >= record.next_at
