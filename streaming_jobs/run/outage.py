"""How long a job's query waits before it starts again while Kafka fails it, and for how long it keeps trying.

Kafka's errors of a cluster that is restarting or moving a leader (its own client retries them) end a query when
the source's offset lookups give up (3 tries: streaming_jobs.config.FAILOVER). The job starts the query again from
its checkpoint, 5 s after the first failure, then twice as long each time up to 30 s, until Kafka has failed it
for longer than its ceiling (`kafka_outage_s`). A query that read its offsets again ends the outage.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kafka's exceptions, as Spark's text of a failed query names them, that a cluster restarting or moving a leader
# raises. Never an authorization, an authentication or a data-loss error: those need a person.
KAFKA_TROUBLE = tuple(
    f"org.apache.kafka.common.errors.{name}"
    for name in (
        "TimeoutException",
        "NetworkException",
        "DisconnectException",
        "NotLeaderOrFollowerException",
        "LeaderNotAvailableException",
        "NotEnoughReplicasException",
    )
)
FIRST_WAIT_S = 5.0
LONGEST_WAIT_S = 30.0


@dataclass
class Outage:
    """One job's Kafka outage as its query sees it: since when, and the last wait."""

    ceiling_s: float
    since: float | None = None
    last_wait_s: float = 0.0

    def wait(self, now: float) -> float | None:
        """The wait before the next start after a failure at `now` (monotonic); None once past the ceiling."""
        if self.since is None:
            self.since, self.last_wait_s = now, 0.0
        if now - self.since > self.ceiling_s:
            return None
        self.last_wait_s = min(max(2 * self.last_wait_s, FIRST_WAIT_S), LONGEST_WAIT_S)
        return self.last_wait_s

    def lasted(self, now: float) -> float:
        return 0.0 if self.since is None else now - self.since

    def over(self) -> None:
        """Kafka answered: the next failure starts a new outage."""
        self.since = None


def is_kafka_trouble(text: str) -> bool:
    """Whether a failed query's text names one of Kafka's passing faults."""
    return any(name in text for name in KAFKA_TROUBLE)
