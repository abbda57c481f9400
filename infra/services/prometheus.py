"""Prometheus on loopback: scrapes every component of the pipeline and evaluates cdcpipe's alert rules.

What it scrapes (docs/metrics.md lists every metric):
- `cdcpipe-jobs`: each running job's driver, found through the target file the driver writes into
  `metrics_targets` (file-based discovery: no file to edit by hand; the target carries `job` and `kind`);
- `cdcpipe-relay`: the relay on `relay_metrics_port`;
- `cdcpipe-collector`: the stack's collector (connectors and tasks, replication slots, the outbox backlog,
  dead letters, the submitted jobs' drivers);
- `kafka` and `connect`: the JMX exporter agent in the broker and in the Connect worker (the broker's metrics;
  the worker's, its tasks' and Debezium's);
- itself.
The alert rules are `infra/prometheus/cdcpipe-alerts.yml`, the file a production Prometheus loads too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import yaml

from infra.config import StackSettings
from infra.errors import NotInstalledError, ServiceNotReadyError
from infra.service_user import hand_over, private_folder
from infra.services.base import PortSpec, Service

RULES = Path(__file__).resolve().parents[1] / "prometheus" / "cdcpipe-alerts.yml"
CONSOLES = Path(__file__).resolve().parents[1] / "prometheus" / "consoles"
# Seconds between scrapes and between rule evaluations: a local stack shows a stall within seconds.
INTERVAL_S = 5


def collector_port(settings: StackSettings) -> int:
    """The collector's port: the one after Prometheus's own (the collector is a stack service too)."""
    return settings.prometheus_port + 1


def scrape_config(settings: StackSettings) -> dict[str, object]:
    """prometheus.yml as a dict."""
    interval = f"{INTERVAL_S}s"

    def static(name: str, port: int) -> dict[str, object]:
        return {"job_name": name, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}

    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": "4s"},
        "rule_files": [str(settings.state / "prometheus" / RULES.name)],
        "scrape_configs": [
            static("prometheus", settings.prometheus_port),
            # The collector speaks of other jobs (`cdcpipe_job_driver_running{job=...}`): its `job` label is kept,
            # not renamed `exported_job` under the scrape's own (the alerts and the page name the job by it).
            {**static("cdcpipe-collector", collector_port(settings)), "honor_labels": True},
            static("cdcpipe-relay", settings.relay_metrics_port),
            # Every Kafka node and every Connect worker, one target each (their `instance` tells them apart).
            *[
                {
                    "job_name": name,
                    "static_configs": [{"targets": [f"127.0.0.1:{settings.node_port(port, n)}" for n in range(count)]}],
                }
                for name, port, count in (
                    ("kafka", settings.kafka_metrics_port, settings.kafka_nodes),
                    ("connect", settings.connect_metrics_port, settings.connect_workers),
                )
                if port
            ],
            # A table group's driver labels each table's series with that table's job: kept over the target's.
            {
                "job_name": "cdcpipe-jobs",
                "honor_labels": True,
                "file_sd_configs": [
                    {"files": [str(settings.metrics_targets / "job-*.json")], "refresh_interval": interval}
                ],
            },
        ],
    }


class Prometheus(Service):
    """Debian's prometheus, its data in state/prometheus/data, 7 days kept."""

    name = "prometheus"
    system_user = "prometheus"
    binary = "/usr/bin/prometheus"

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(self.settings.prometheus_port, "CDCPIPE_PROMETHEUS_PORT")]

    @property
    def address(self) -> str:
        return self.settings.prometheus_url

    @property
    def folder(self) -> Path:
        return self.settings.state / "prometheus"

    def run_as(self) -> str | None:
        return self._own_user()

    def prepare(self) -> None:
        data = self.folder / "data"
        private_folder(data)  # what every component reported: Prometheus's alone
        # The jobs' drivers write their targets here (as the stack's owner); Prometheus only reads them (0755).
        self.settings.metrics_targets.mkdir(parents=True, exist_ok=True)
        (self.folder / "prometheus.yml").write_text(yaml.safe_dump(scrape_config(self.settings), sort_keys=False))
        shutil.copyfile(RULES, self.folder / RULES.name)
        shutil.copytree(CONSOLES, self.folder / "consoles", dirs_exist_ok=True)
        hand_over(self.run_as(), data)

    def command(self) -> list[str]:
        if not Path(self.binary).exists():
            raise NotInstalledError(f"{self.name}: {self.binary} is missing; run `make install` (Debian's prometheus)")
        return [
            self.binary,
            f"--config.file={self.folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.folder / 'data'}",
            # Bounded by age and by size, whichever comes first: a busy stack's metrics never fill its disk.
            "--storage.tsdb.retention.time=7d",
            "--storage.tsdb.retention.size=1GB",
            f"--web.listen-address=127.0.0.1:{self.settings.prometheus_port}",
            f"--web.console.templates={self.folder / 'consoles'}",
            f"--web.console.libraries={self.folder / 'consoles'}",
            "--log.level=warn",
        ]

    def check_health(self) -> None:
        try:
            response = httpx.get(f"{self.settings.prometheus_url}/-/ready", timeout=3)
        except httpx.HTTPError as exc:
            raise ServiceNotReadyError(f"prometheus: not answering on {self.settings.prometheus_url} yet") from exc
        if response.status_code != 200:
            raise ServiceNotReadyError(f"prometheus: /-/ready says {response.status_code}")
