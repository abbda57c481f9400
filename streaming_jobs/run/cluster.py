"""Whether a job's Spark application holds executors on a standalone cluster, and if not, who holds the cores.

A driver whose application got no executor (every worker's cores held by other applications) runs no batch
and says nothing: Spark logs "Initial job has not accepted any resources" and waits forever. The master's
JSON (`<web UI>/json/`) lists the active applications with their cores and state; from it `starved` says, in
words, why a job's application waits. One request, answered in milliseconds; None where there is no cluster
(a `local[N]` master) or the master does not answer (the job's own lag then speaks for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from streaming_jobs.config import JobsSettings

DEFAULT_UI_PORT = 8080
TIMEOUT_S = 3.0


def application_name(job: str) -> str:
    """The Spark application name of a job's (or a table group's) driver, which the master lists it by."""
    return f"cdcpipe-job-{job}"


@dataclass(frozen=True)
class Application:
    """An application the master runs: a driver and the cores its executors hold."""

    id: str
    name: str
    cores: int
    state: str


@dataclass(frozen=True)
class Cluster:
    """The standalone cluster's cores and who holds them, as its master reports."""

    cores: int
    cores_used: int
    applications: list[Application]

    def cores_of(self, job: str) -> int | None:
        """Cores the job's application holds; None when the master does not list it (not started, or gone)."""
        found = [a for a in self.applications if a.name == application_name(job)]
        return sum(a.cores for a in found) if found else None

    def starved(self, job: str) -> str | None:
        """Why the job's application holds no executor, in words; None when it holds some or is not listed."""
        if self.cores_of(job) != 0:
            return None
        holders = [a for a in self.applications if a.cores > 0 and a.name != application_name(job)]
        held = ", ".join(f"{a.name} ({a.cores})" for a in sorted(holders, key=lambda a: -a.cores)) or "none"
        return (
            f"waiting for cluster resources: its application holds no executor; the workers' {self.cores} cores "
            f"({self.cores_used} in use) are held by {held}: stop one of those, add a worker, or lower "
            "spark_cores_max"
        )


def ui_url(settings: JobsSettings) -> str | None:
    """The master's web UI: the setting, else the spark:// master's host on the default UI port.

    None for a `local[N]` master: the job's executors are in its driver, there is no cluster to ask.
    """
    if not settings.spark_master.startswith("spark://"):
        return None
    if settings.spark_master_ui_url:
        return settings.spark_master_ui_url.rstrip("/")
    host = urlsplit(settings.spark_master.split(",")[0]).hostname
    return f"http://{host}:{DEFAULT_UI_PORT}" if host else None


def read(settings: JobsSettings) -> Cluster | None:
    """The cluster as the master reports it; None without a standalone master, or when it does not answer."""
    url = ui_url(settings)
    if url is None:
        return None
    try:
        response = httpx.get(f"{url}/json/", timeout=TIMEOUT_S)
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    return parse(data)


def parse(data: dict[str, object]) -> Cluster:
    """The master's `/json/` document as a Cluster."""
    found = data.get("activeapps")
    applications = [
        Application(str(a.get("id", "")), str(a.get("name", "")), int(a.get("cores", 0)), str(a.get("state", "")))
        for a in (found if isinstance(found, list) else [])
        if isinstance(a, dict)
    ]
    return Cluster(_int(data.get("cores")), _int(data.get("coresused")), applications)


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
