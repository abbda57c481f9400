"""The stack's services: what each one is (a tracked process with ports, a config and a health check)."""

from __future__ import annotations

import os
import shutil
import signal
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ground.processes import TrackedProcess
from infra import gc_log
from infra.config import StackSettings
from infra.errors import NotInstalledError, ServiceStartError
from infra.service_user import SERVICE_USERS, closed_parent, hand_over, service_user

# What the JMX exporter agent serves from each JVM that runs it: infra/jmx/<service>.yml.
JMX_CONFIGS = Path(__file__).resolve().parents[1] / "jmx"

POSTGRES_SUPERUSER = "postgres"
# The outbox roles `schema apply` creates (its default names), and the stack secret holding each one's password.
WRITER_ROLE, RELAY_ROLE = "cdcpipe_writer", "cdcpipe_relay"
# The jobs' role: it only connects, to hold the tables' writer leases (advisory locks need no privilege).
# The stack makes it itself; a production database gives the jobs any role that may connect.
JOBS_ROLE = "cdcpipe_jobs"
# The monitor role: the collector's and `cdcpipe status`'s (pg_monitor, SELECT on the outbox tables).
MONITOR_ROLE = "cdcpipe_monitor"
ROLE_SECRETS = {
    WRITER_ROLE: "pg_writer_password",
    RELAY_ROLE: "pg_relay_password",
    JOBS_ROLE: "pg_jobs_password",
    MONITOR_ROLE: "pg_monitor_password",
}


# Kafka 4 and the Connect runtime log through log4j2; everything goes to stdout, which the stack
# redirects into the service's log file.
LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


def properties(values: dict[str, object]) -> str:
    """A Java .properties file body; a backslash or a line break in a value is escaped as Java reads it."""
    return "".join(
        f"{key}={str(value).replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}\n"
        for key, value in values.items()
    )


@dataclass(frozen=True)
class PortSpec:
    """A port a service binds, and the setting that moves it."""

    port: int
    setting: str


class Service(ABC):
    """One process of the stack."""

    name: str
    # What it is, when several of a kind run (kafka, kafka-2...): names its metrics rules (infra/jmx/<kind>.yml).
    kind: str = ""
    # Started together with the services of its kind before any is waited for (the nodes of a quorum).
    starts_with_peers: bool = False
    # Its key in infra.service_user.SERVICE_USERS: whose system user it runs as when started as root.
    system_user: str = ""
    stop_signal: signal.Signals = signal.SIGTERM

    def __init__(self, settings: StackSettings, index: int = 0) -> None:
        # The Nth (0-based) of its kind when several run (Kafka nodes, Connect and Spark workers): the first keeps
        # the kind's name, the Nth is `<name>-N`, with its own pid file and log.
        self.index = index
        if index:
            self.name = f"{type(self).name}-{index + 1}"
        self.settings = settings
        self.process = TrackedProcess(
            name=self.name,
            pid_file=settings.run_dir / f"{self.name}.pid",
            log_file=settings.logs / f"{self.name}.log",
            stop_signal=self.stop_signal,
            log_max_bytes=settings.log_max_mb * 1024 * 1024,
            log_keep=settings.log_keep,
        )

    @property
    @abstractmethod
    def ports(self) -> list[PortSpec]:
        """Ports to check before start; the first one is the service's address."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ports[0].port}"

    def prepare(self) -> None:  # noqa: B027 - optional hook, most services need no preparation
        """Create data folders and config files (idempotent: never wipes existing data)."""

    @abstractmethod
    def command(self) -> list[str]:
        """The command line; its first word is exec'd, so the pid is the service's own."""

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def run_as(self) -> str | None:
        return None

    def reads(self) -> list[Path]:
        """The folders the service's own user must enter: the home (its jars, data and logs)."""
        return [self.settings.home]

    def _own_user(self) -> str | None:
        """Who the service runs as: its own user when the stack is started as root, else the caller.

        Never root: a service left as root (its user unable to enter a folder it needs, as in a checkout under
        /root) would read every secret of the stack. Refused instead, naming the folder and the fix.
        """
        if os.geteuid() != 0:
            return None
        closed = [(folder, path) for path in self.reads() if (folder := closed_parent(path)) is not None]
        if closed:
            folder, path = closed[0]
            raise ServiceStartError(
                f"{self.name} would run as root: its user {SERVICE_USERS[self.system_user]!r} cannot enter "
                f"{folder} (no x for others), above {path}, which it reads; {self.closed_fix(folder, path)}"
            )
        return service_user(self.system_user)

    def closed_fix(self, folder: Path, path: Path) -> str:
        """What to do when the service's user cannot enter `folder`, above `path` (which it reads)."""
        return (
            f"start the stack from a checkout (or with a CDCPIPE_HOME) outside it, e.g. under /srv, or "
            f"`chmod o+x {folder}`, or start it as a user other than root"
        )

    def _hand_over_gc_log(self) -> None:
        """The GC log folder belongs to whoever runs the JVMs: HotSpot rotates its files by renaming them."""
        folder = gc_log.log_file(self.settings.logs, self.name).parent
        folder.mkdir(parents=True, exist_ok=True)
        folder.parent.chmod(0o755)  # logs/gc: the stack's owner's; each service's folder in it its own
        hand_over(self.run_as(), folder)

    def after_healthy(self) -> None:  # noqa: B027 - optional hook
        """One-off setup that needs the running service (idempotent)."""

    @abstractmethod
    def check_health(self) -> None:
        """Return if healthy; raise ServiceNotReadyError saying what is not ready yet."""

    def cwd(self) -> Path:
        return self.settings.state

    def _jars(self, folder: Path) -> str:
        if not any(folder.glob("*.jar")):
            raise NotInstalledError(f"{self.name}: no jars in {folder}; run `make install` first")
        return f"{folder}/*"

    def _java(
        self, heap: str, classpath: str, main: str, *args: str, service: bool = True, options: Sequence[str] = ()
    ) -> list[str]:
        """The command that runs `main`; a `service` (not a one-off tool) logs its GC pauses."""
        java = shutil.which(self.settings.java)
        if java is None:
            raise NotInstalledError(
                f"{self.name}: java executable {self.settings.java!r} not found; install Java 17 "
                "(`make install` does) or set CDCPIPE_JAVA to its path"
            )
        conf = self.settings.state / "conf"
        return [
            java,
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            # Every pause, with its wall-clock time: a broker that stops holds every acknowledgement and
            # fetch meanwhile, and the relay benchmark reads these logs to say how much of its tail that was.
            *(gc_log.gc_flags(gc_log.log_file(self.settings.logs, self.name)) if service else []),
            "-Djava.awt.headless=true",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}",
            *options,
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _metrics_agent(self, port: int) -> list[str]:
        """The JVM option that serves this service's JMX beans to Prometheus on 127.0.0.1:`port` (none for 0).

        Prometheus' JMX exporter runs as a Java agent inside the JVM: Debezium's streaming and snapshot metrics
        and the broker's exist only as JMX beans. What it serves, and under which names, is
        infra/jmx/<service>.yml, which `prepare` copies beside the service's other config (`_write_jmx_config`).
        """
        if port == 0:
            return []
        folder = self.settings.lib / "jmx-exporter"
        agents = sorted(folder.glob("jmx_prometheus_javaagent-*.jar"))
        if not agents:
            raise NotInstalledError(f"{self.name}: no JMX exporter agent in {folder}; run `make install` first")
        return [f"-javaagent:{agents[-1]}=127.0.0.1:{port}:{self._jmx_config()}"]

    def _jmx_config(self) -> Path:
        return self.settings.state / "conf" / f"jmx-{self.name}.yml"

    def _write_jmx_config(self) -> None:
        """For `prepare`: the agent's rules (infra/jmx/<service>.yml) beside the service's other config."""
        conf = self._jmx_config()
        conf.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(JMX_CONFIGS / f"{self.kind or self.name}.yml", conf)

    def _write_log4j(self) -> None:
        conf = self.settings.state / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
