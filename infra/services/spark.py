"""Spark standalone: a master and one worker, for jobs submitted to a cluster."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import httpx

from ground.private_files import write_private
from infra.config import StackSettings
from infra.errors import NotInstalledError, ServiceNotReadyError
from infra.service_user import hand_over, private_folder, share_folder
from infra.services.base import PortSpec, Service
from infra.stack_secrets import secret


def pyspark_home() -> Path:
    """SPARK_HOME of the pip-installed Spark: the pyspark package folder (it holds bin/ and jars/).

    Found, not imported: the stack only starts Spark's JVMs (importing pyspark belongs to the jobs).
    """
    found = importlib.util.find_spec("pyspark")
    if found is None or found.origin is None:
        raise NotInstalledError("pyspark is not installed in this environment; run `make install`")
    return Path(found.origin).parent


def authenticate_secret(settings: StackSettings) -> str:
    """The cluster's shared secret (spark.authenticate), in state/secrets/spark_authenticate_secret."""
    return secret(settings, "spark_authenticate_secret")


class _SparkDaemon(Service):
    system_user = "spark"

    def spark_defaults(self) -> Path:
        return self.settings.state / "conf" / "spark-defaults.conf"

    def run_as(self) -> str | None:
        return self._own_user()

    def reads(self) -> list[Path]:
        return [*super().reads(), pyspark_home()]  # Spark's own jars and scripts, in the virtual environment

    def prepare(self) -> None:
        path = self.spark_defaults()
        path.parent.mkdir(parents=True, exist_ok=True)
        # Only an application that knows the stack's secret may register with the master or use the worker;
        # the file holds the secret, so it is 0600 (the daemons read it; nothing is on a command line).
        write_private(
            path,
            "spark.master.rest.enabled false\nspark.ui.reverseProxy false\nspark.worker.cleanup.enabled true\n"
            f"spark.authenticate true\nspark.authenticate.secret {authenticate_secret(self.settings)}\n",
        )
        hand_over(self.run_as(), path)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(pyspark_home()),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "512m",
                # Executors the worker launches run Python from our virtual environment.
                "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            }
        )
        return env

    def _spark_class(self, main: str, *args: str) -> list[str]:
        spark_class = pyspark_home() / "bin" / "spark-class"
        if not spark_class.exists():
            raise NotInstalledError(f"{self.name}: {spark_class} is missing; run `make install`")
        # spark-class ends in `exec java ...`, so the pid we record is the JVM's own.
        return ["bash", str(spark_class), main, *args, "--properties-file", str(self.spark_defaults())]

    def _master_json(self) -> dict[str, object]:
        try:
            response = httpx.get(f"http://127.0.0.1:{self.settings.spark_master_ui_port}/json/", timeout=3)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise ServiceNotReadyError(f"{self.name}: master web UI not answering yet") from exc
        try:
            data: dict[str, object] = response.json()
        except ValueError as exc:  # the UI answers before its JSON page is served, for a moment after start
            raise ServiceNotReadyError(f"{self.name}: master web UI not serving its status yet") from exc
        return data


class SparkMaster(_SparkDaemon):
    """A Spark standalone master on loopback."""

    name = "spark-master"

    @property
    def ports(self) -> list[PortSpec]:
        return [
            PortSpec(self.settings.spark_master_port, "CDCPIPE_SPARK_MASTER_PORT"),
            PortSpec(self.settings.spark_master_ui_port, "CDCPIPE_SPARK_MASTER_UI_PORT"),
        ]

    @property
    def address(self) -> str:
        return self.settings.spark_master_url

    def command(self) -> list[str]:
        return self._spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.settings.spark_master_port),
            "--webui-port",
            str(self.settings.spark_master_ui_port),
        )

    def check_health(self) -> None:
        status = self._master_json().get("status")
        if status != "ALIVE":
            raise ServiceNotReadyError(f"spark-master: status {status}")


class SparkWorker(_SparkDaemon):
    """One Spark standalone worker registered with the master (the first of `spark_workers`)."""

    name = "spark-worker"

    @property
    def ui_port(self) -> int:
        return self.settings.spark_worker_ui_port + self.index

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(self.ui_port, "CDCPIPE_SPARK_WORKER_UI_PORT")]

    @property
    def work_dir(self) -> Path:
        return self.settings.state / "spark" / ("work" if not self.index else f"work-{self.index + 1}")

    def prepare(self) -> None:
        super().prepare()
        private_folder(self.work_dir)  # executors' logs and the applications' files: the Spark user's alone
        hand_over(self.run_as(), self.work_dir)
        # Its executors write data files into the tables the drivers create (drivers run as whoever starts them).
        share_folder(self.run_as(), self.settings.lake)

    def command(self) -> list[str]:
        return self._spark_class(
            "org.apache.spark.deploy.worker.Worker",
            self.settings.spark_master_url,
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.settings.spark_worker_cores),
            "--memory",
            self.settings.spark_worker_memory,
            "--webui-port",
            str(self.ui_port),
            "--work-dir",
            str(self.work_dir),
        )

    def check_health(self) -> None:
        workers = self._master_json().get("workers", [])
        if not isinstance(workers, list) or not any(
            isinstance(w, dict) and w.get("state") == "ALIVE" and w.get("webuiaddress", "").endswith(f":{self.ui_port}")
            for w in workers
        ):
            raise ServiceNotReadyError("spark-worker: not registered with the master yet")
