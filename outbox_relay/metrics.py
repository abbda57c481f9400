"""Prometheus metrics of the relay, served on 127.0.0.1 only."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ground.metrics import BatchHistogram, serve
from outbox_relay.errors import RelayError


@dataclass
class RelayMetrics:
    """Every metric of one relay, in a registry of its own (no process-global state)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.published = Counter("cdcpipe_relay_events_published", "events Kafka acknowledged", registry=r)
        self.batches = Counter("cdcpipe_relay_batches", "batches taken from the outbox", registry=r)
        self.batch_size = Histogram(
            "cdcpipe_relay_batch_size",
            "rows per batch",
            registry=r,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000),
        )
        self.publish_latency = BatchHistogram(
            "cdcpipe_relay_publish_latency_seconds",
            "from the outbox insert to Kafka's acknowledgement",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60),
            registry=r,
        )
        self.stage_seconds = Histogram(
            "cdcpipe_relay_batch_stage_seconds",
            "time a batch spends in each stage: take (the DELETE), ack (produce until Kafka acknowledged), commit",
            ["stage"],
            registry=r,
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 5),
        )
        self.backlog = Gauge(
            "cdcpipe_relay_backlog_events",
            "rows waiting in the outbox: counted up to 100,000, Postgres's running count of live rows beyond",
            registry=r,
        )
        self.backlog_age = Gauge(
            "cdcpipe_relay_backlog_oldest_age_seconds",
            "age of the oldest row waiting in the outbox (among the 100,000 next to go)",
            registry=r,
        )
        self.dead_letters = Counter(
            "cdcpipe_relay_dead_letters", "rows moved to the dead-letter table", ["reason"], registry=r
        )
        self.errors = Counter("cdcpipe_relay_errors", "failures the relay retried", ["kind"], registry=r)
        self.leader = Gauge("cdcpipe_relay_leader", "1 while this relay is the one publishing", registry=r)
        self.stalled = Gauge(
            "cdcpipe_relay_stalled",
            "1 while publishing waits on this topic (missing, or an ACL lacking): nothing leaves the outbox",
            ["topic"],
            registry=r,
        )

    def serve(self, port: int) -> None:
        """Expose /metrics on 127.0.0.1:port (nothing when port is 0)."""
        if port == 0:
            return
        try:
            serve(self.registry, port)
        except OSError as exc:
            raise RelayError(
                f"metrics: cannot listen on 127.0.0.1:{port} ({exc.strerror}); set CDCPIPE_METRICS_PORT to a free "
                "port, or 0 to turn metrics off"
            ) from exc
