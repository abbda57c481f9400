"""The collector: Kafka Connect, Postgres and the jobs' drivers as Prometheus metrics, read at each scrape.

    python -m monitor.collector        (the stack starts it; beside a Connect cluster of your own, run it so)

Why Connect's REST API here: the state of each connector and task, and a failed task's trace, are what an
operator acts on, and REST gives them as Connect itself reports them, from one request. What only JMX has
(Debezium's streaming and snapshot metrics, the broker's) the JMX exporter agent in those JVMs serves
(infra/jmx/); each slot's retained WAL, read here, is how far a connector is behind in bytes.

Nothing is cached: each scrape reads every part once (a few milliseconds each), so a value is never older than
the scrape interval. A part that cannot be read gives `cdcpipe_collector_source_up{source} 0` and its error in
the collector's log; the other parts are still reported.

Beside the scrapes, every `heal_every_s` a thread restarts the connector tasks that failed on a transient fault
(connectors.heal: backoff, a ceiling, never a data or configuration error), whether or not anyone scrapes.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.errors import ConnectError
from connectors.heal import Healer
from connectors.slots import SlotStatus
from ground.metrics import serve
from monitor import readings
from monitor.config import MonitorSettings
from monitor.errors import MonitorError
from outbox_relay.status import RelayStatus
from schemas.config import OutboxNames
from streaming_jobs.config import JobsSettings
from streaming_jobs.run import cluster
from streaming_jobs.run.metrics import stale_targets

log = logging.getLogger(__name__)
# How the stack runs it (`cdcpipe stack up` hands it to infra, which starts it as a service).
COMMAND = (sys.executable, "-m", "monitor.collector")
STATES = ("RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED", "RESTARTING")


class PipelineCollector(Collector):
    """Reads every part every `read_every_s` (`refresh`, the reader thread's); a scrape serves the last reading.

    A scrape then costs no connection and no wait, whoever asks and however often: the port is open to every
    local user, and one Postgres session per scrape would let any of them use up Postgres's connections. A
    reading grown stale (the reader stuck) is not served, so the alerts on absent series fire.
    """

    def __init__(self, settings: MonitorSettings, connect: ConnectSettings, names: OutboxNames, jobs: JobsSettings):
        self.settings, self.connect, self.names, self.jobs = settings, connect, names, jobs
        self._said: dict[str, str | None] = {}  # each part's last error, logged once, not at every scrape
        self.healer = Healer(connect)
        self._reading: tuple[float, list[Metric]] | None = None  # (monotonic time, metrics) of the last read
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Read every part now; the scrapes serve it from then on."""
        metrics = list(self._read())
        with self._lock:
            self._reading = (time.monotonic(), metrics)

    def collect(self) -> Iterator[Metric]:
        if self._reading is None:
            self.refresh()  # the first scrape before the reader's first read
        with self._lock:
            assert self._reading is not None  # noqa: S101 - set just above
            read_at, metrics = self._reading
        age = time.monotonic() - read_at
        if age > 3 * self.settings.read_every_s + self.settings.monitor_timeout_s:
            log.warning("collector: the last reading is %.0f s old (the reader is stuck): not served", age)
            return
        yield from metrics
        yield GaugeMetricFamily(
            "cdcpipe_collector_reading_age_seconds", "seconds since the collector last read every part", value=age
        )

    def heal(self) -> None:
        """Restart the tasks due a restart (Connect not answering: nothing now, the next call tries again).

        Nothing it meets ends the healing: an error it did not expect is logged with its trace, and the next call
        tries again (a healer thread that died would leave every failed task failed, saying nothing).
        """
        try:
            with ConnectClient(self.connect) as client:
                self.healer.tick(client)
        except ConnectError as exc:
            log.debug("heal: Connect did not answer: %s", exc)
        except Exception:
            log.exception("heal: failed; tried again in %s s", self.settings.heal_every_s)

    def _postgres(self) -> tuple[list[SlotStatus], readings.Reading[RelayStatus]]:
        """The slots, and the outbox apart (it may not exist yet, or the monitor role not read it yet)."""
        with readings.connect(self.settings) as conn:
            return readings.slots(conn), readings.read(lambda: readings.outbox(conn, self.names))

    def _read(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("cdcpipe_collector_source_up", "1 when the part answered this scrape", labels=["source"])
        took = GaugeMetricFamily(
            "cdcpipe_collector_source_read_seconds", "how long reading the part took", labels=["source"]
        )

        def answered(source: str, reading: readings.Reading[Any]) -> None:
            up.add_metric([source], 0 if reading.error else 1)
            took.add_metric([source], reading.seconds)
            if reading.error != self._said.get(source):
                if reading.error:
                    log.warning("collector: %s did not answer: %s", source, reading.error)
                elif source in self._said:
                    log.info("collector: %s answers again", source)
                self._said[source] = reading.error

        found = readings.read(lambda: readings.connectors(self.connect, self.settings.monitor_timeout_s))
        answered("connect", found)
        yield from _connector_metrics(found.value or [])
        yield from _heal_metrics(self.healer)

        pg = readings.read(self._postgres)
        answered("postgres", pg)
        if pg.value is not None:
            slots, relay = pg.value
            yield from _slot_metrics(slots)
            answered("outbox", relay)
            if relay.value is not None:
                yield from _outbox_metrics(relay.value, f"{self.names.outbox_schema}.{self.names.outbox_table}")

        def drivers() -> list[readings.Driver]:
            stale_targets(self.jobs.metrics_targets_dir)  # a killed driver's target: Prometheus stops asking it
            return readings.drivers(self.jobs)

        jobs = readings.read(drivers)
        answered("jobs", jobs)
        running = GaugeMetricFamily(
            "cdcpipe_job_driver_running",
            "1 while the driver of a job submitted on this machine (and not stopped) runs; 0: it died",
            labels=["job"],
        )
        for driver in jobs.value or []:
            running.add_metric([driver.name], 0 if driver.pid is None else 1)
        yield running
        if any(driver.pid is not None for driver in jobs.value or []):
            yield from self._executors([d.name for d in jobs.value or [] if d.pid is not None], answered)
        yield up
        yield took

    def _executors(self, names: list[str], answered: Callable[[str, readings.Reading[Any]], None]) -> Iterator[Metric]:
        """Cores each running job's application holds, as a standalone master reports (none: no such master)."""
        found = readings.read(lambda: cluster.read(self.jobs))
        if found.value is None:
            return
        answered("spark-master", found)
        cores = GaugeMetricFamily(
            "cdcpipe_job_executor_cores",
            "cores the executors of the job's Spark application hold on the standalone cluster (0: it runs no batch)",
            labels=["job"],
        )
        for name in names:
            held = found.value.cores_of(name)
            if held is not None:
                cores.add_metric([name], held)
        yield cores


def _connector_metrics(found: list[readings.Connector]) -> Iterator[Metric]:
    connector = GaugeMetricFamily(
        "cdcpipe_connect_connector_state", "1 for the connector's current state", labels=["connector", "state"]
    )
    task = GaugeMetricFamily(
        "cdcpipe_connect_task_state", "1 for the task's current state", labels=["connector", "task", "state"]
    )
    for c in found:
        for state in STATES:
            connector.add_metric([c.name, state], 1 if c.state == state else 0)
        for t in c.tasks:
            for state in STATES:
                task.add_metric([c.name, str(t.id), state], 1 if t.state == state else 0)
    yield connector
    yield task


def _heal_metrics(healer: Healer) -> Iterator[Metric]:
    restarts = CounterMetricFamily(
        "cdcpipe_connect_task_auto_restarts",
        "restarts of the task after a transient fault, by the collector, since it started",
        labels=["connector", "task"],
    )
    exhausted = GaugeMetricFamily(
        "cdcpipe_connect_task_restarts_exhausted",
        "1 when the task failed on a transient fault again after heal_restarts_max restarts in a row: left FAILED",
        labels=["connector", "task"],
    )
    for (name, task), record in sorted(dict(healer.tasks).items()):  # a copy: the heal thread changes it
        restarts.add_metric([name, str(task)], record.total)
        exhausted.add_metric([name, str(task)], 1 if record.exhausted else 0)
    yield restarts
    yield exhausted


def _slot_metrics(found: list[SlotStatus]) -> Iterator[Metric]:
    active = GaugeMetricFamily(
        "cdcpipe_pg_replication_slot_active", "1 while a reader (a connector's task) holds the slot", labels=["slot"]
    )
    retained = GaugeMetricFamily(
        "cdcpipe_pg_replication_slot_retained_wal_bytes",
        "WAL Postgres keeps for the slot (current WAL position minus its restart_lsn): how far its reader is behind",
        labels=["slot"],
    )
    for s in found:
        active.add_metric([s.name], 1 if s.active else 0)
        retained.add_metric([s.name], s.retained_wal_bytes)
    yield active
    yield retained


def _outbox_metrics(status: RelayStatus, outbox: str) -> Iterator[Metric]:
    def gauge(name: str, text: str, value: float) -> Metric:
        family = GaugeMetricFamily(name, text, labels=["outbox"])
        family.add_metric([outbox], value)
        return family

    yield gauge(
        "cdcpipe_outbox_backlog_events", "events waiting in the outbox (as the relay counts them)", status.waiting
    )
    yield gauge(
        "cdcpipe_outbox_oldest_event_age_seconds", "age of the oldest event waiting in the outbox", status.oldest_age_s
    )
    yield gauge("cdcpipe_outbox_dead_letters", "rows in the outbox's dead-letter table", status.dead_letters)
    yield gauge(
        "cdcpipe_outbox_relay_leading",
        "1 while a relay holds the outbox's leader lock",
        1 if status.leader and not status.leader_is_a_stranger else 0,
    )
    yield gauge(
        "cdcpipe_outbox_leader_lock_held_by_a_stranger",
        "1 while a session whose role may not delete from the outbox (no relay) holds its leader lock",
        1 if status.leader_is_a_stranger else 0,
    )
    yield gauge(
        "cdcpipe_outbox_stalled_topics", "topics publishing waits on (missing, or an ACL lacking)", len(status.stalls)
    )


def serve_forever(settings: MonitorSettings) -> None:
    """Serve /metrics on 127.0.0.1:collector_port until SIGTERM."""
    registry = CollectorRegistry()
    collector = PipelineCollector(settings, ConnectSettings.load(), OutboxNames.load(), JobsSettings.load())
    registry.register(collector)
    try:
        server = serve(registry, settings.collector_port)
    except OSError as exc:
        raise MonitorError(
            f"collector: cannot listen on 127.0.0.1:{settings.collector_port} ({exc.strerror}); set "
            "CDCPIPE_COLLECTOR_PORT to a free port"
        ) from exc
    print(f"collector: metrics on http://127.0.0.1:{settings.collector_port}/metrics", flush=True)
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())

    def reading() -> None:
        while True:
            collector.refresh()
            if done.wait(settings.read_every_s):
                return

    def healing() -> None:
        while not done.wait(settings.heal_every_s):
            collector.heal()

    for work in (reading, healing):
        threading.Thread(target=work, name=work.__name__, daemon=True).start()
    done.wait()
    server.shutdown()


def main() -> int:
    """Run the collector (what the stack starts)."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a request per scrape: not a log line each
    try:
        serve_forever(MonitorSettings.load())
    except MonitorError as exc:
        print(f"error: {exc}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
