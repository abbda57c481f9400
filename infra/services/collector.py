"""The collector (monitor/collector.py): Connect, Postgres and the jobs' drivers as metrics, for the stack's Prometheus.

Its command comes from above (`cdcpipe stack up` gives monitor's): the stack runs it, and knows nothing of what it
reads. It is cdcpipe's own Python, started from the virtual environment that runs `stack up`; started as root, as
a user of its own (`cdcpipe-collector`): its port answers every local user, and what answers there must hold
nothing else. Its environment holds only what it reads with, in a folder of its own (0700): the monitor role's
password (a pgpass of that one line) and the password of Connect's `monitor` REST user, which may read and restart
a task, nothing else (connectors/transforms' LimitedRestUsers); never the stack's other secrets. It owns the
folder of the jobs' Prometheus targets, where it removes a killed driver's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import httpx

from ground.private_files import write_private
from infra.config import StackSettings
from infra.errors import ServiceNotReadyError, ServiceStartError
from infra.service_user import hand_over, private_folder
from infra.services.base import MONITOR_ROLE, ROLE_SECRETS, PortSpec, Service
from infra.services.connect import MONITOR_REST_USER, monitor_rest_password
from infra.services.postgres import Postgres
from infra.services.prometheus import collector_port
from infra.stack_secrets import secret

# What the collector reads of the caller's environment: where the outbox and the jobs are, and a settings file.
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TZ", "CDCPIPE_CONFIG")
PASSED_ON_PREFIXES = ("CDCPIPE_OUTBOX_", "CDCPIPE_RUN_DIR")


# The checkout whose code the collector runs (the virtual environment's install of cdcpipe is editable).
CHECKOUT = Path(__file__).resolve().parents[2]


class Collector(Service):
    """The collector's command (given by the caller) on 127.0.0.1, the port after Prometheus's."""

    name = "collector"
    system_user = "collector"

    def __init__(self, settings: StackSettings, command: Sequence[str] = ()) -> None:
        super().__init__(settings)
        self._command = list(command)

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(collector_port(self.settings), "CDCPIPE_PROMETHEUS_PORT (the collector takes the next)")]

    @property
    def folder(self) -> Path:
        return self.settings.state / "collector"

    @property
    def passfile(self) -> Path:
        return self.folder / "monitor.pgpass"

    @property
    def connect_password_file(self) -> Path:
        return self.folder / "connect-rest-password"

    def cwd(self) -> Path:
        return self.folder

    def run_as(self) -> str | None:
        return self._own_user()

    def reads(self) -> list[Path]:
        """The home, the code, and the interpreter (a venv's python is a link to the one it was made from)."""
        found = [self.settings.home, CHECKOUT]
        if self._command:
            interpreter = Path(self._command[0])
            found += [interpreter.parent, interpreter.resolve().parent]
        return found

    def closed_fix(self, folder: Path, path: Path) -> str:
        if path in self.reads()[2:]:
            return (
                "make the virtual environment from an interpreter every user may run: `make install` makes it "
                "again from the machine's own (Debian: python3.11 with python3-venv) when yours is in such a folder"
            )
        return super().closed_fix(folder, path)

    def prepare(self) -> None:
        private_folder(self.folder)
        password = secret(self.settings, ROLE_SECRETS[MONITOR_ROLE])
        write_private(self.passfile, f"127.0.0.1:*:*:{MONITOR_ROLE}:{password}\n")
        write_private(self.connect_password_file, monitor_rest_password(self.settings) + "\n")
        user = self.run_as()
        hand_over(user, self.folder)
        targets = self.settings.metrics_targets
        targets.mkdir(parents=True, exist_ok=True)
        targets.chmod(0o755)  # Prometheus reads it; the drivers (the stack's owner) write their targets in it
        hand_over(user, targets)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in PASSED_ON or k.startswith(PASSED_ON_PREFIXES)}
        env.update(
            {
                "CDCPIPE_HOME": str(self.settings.home),
                "CDCPIPE_MONITOR_PG_DSN": Postgres(self.settings).dsn(role=MONITOR_ROLE),
                "PGPASSFILE": str(self.passfile),
                "CDCPIPE_CONNECT_URL": self.settings.connect_url,
                "CDCPIPE_CONNECT_USER": MONITOR_REST_USER,
                "CDCPIPE_CONNECT_PASSWORD_FILE": str(self.connect_password_file),
                "CDCPIPE_COLLECTOR_PORT": str(collector_port(self.settings)),
                "CDCPIPE_METRICS_TARGETS_DIR": str(self.settings.metrics_targets),
                # Whether each job's application holds executors (none answers when the cluster is not started).
                "CDCPIPE_SPARK_MASTER_UI_URL": f"http://127.0.0.1:{self.settings.spark_master_ui_port}",
            }
        )
        return env

    def command(self) -> list[str]:
        if not self._command:
            raise ServiceStartError(f"{self.name}: no command was given for it; `cdcpipe stack up` starts it")
        return self._command

    def check_health(self) -> None:
        url = f"http://127.0.0.1:{collector_port(self.settings)}/metrics"
        try:
            response = httpx.get(url, timeout=10)
        except httpx.HTTPError as exc:
            raise ServiceNotReadyError(f"collector: not answering on {url} yet") from exc
        if "cdcpipe_collector_source_up" not in response.text:
            raise ServiceNotReadyError(f"collector: {url} answered without the collector's metrics")
