"""The services of the local stack: how each is prepared, started and found healthy.

Order matters and is the order of `SERVICES`: Postgres, the Kafka broker, Kafka Connect (which needs the
broker), and with `--spark-cluster` a Spark master and one worker. Each listens on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import logging
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
from confluent_kafka.admin import AdminClient
from psycopg import sql

from cdcpipe.private_files import write_private
from cdcpipe.processes import TrackedProcess
from infra.config import StackSettings
from infra.errors import NotInstalledError, ServiceNotReadyError, ServiceStartError
from infra.gc_log import gc_flags

DEBEZIUM_POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
POSTGRES_SUPERUSER = "postgres"

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


def secret(settings: StackSettings, name: str) -> str:
    """A generated secret of the stack, kept in state/secrets/<name> (mode 0600), made on first use."""
    folder = settings.state / "secrets"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / name
    if not path.exists():
        write_private(path, secrets.token_urlsafe(24) + "\n")
    return path.read_text().strip()


def secret_file(settings: StackSettings, name: str) -> Path:
    """The file that holds a generated secret (made on first use): a path any command may print."""
    secret(settings, name)
    return settings.state / "secrets" / name


def properties(values: dict[str, object]) -> str:
    """A Java .properties file body."""
    return "".join(f"{key}={value}\n" for key, value in values.items())


@dataclass(frozen=True)
class PortSpec:
    """A port a service binds, and the setting that moves it."""

    port: int
    setting: str


class Service(ABC):
    """One process of the stack."""

    name: str
    stop_signal: signal.Signals = signal.SIGTERM

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.process = TrackedProcess(
            name=self.name,
            pid_file=settings.run_dir / f"{self.name}.pid",
            log_file=settings.logs / f"{self.name}.log",
            stop_signal=self.stop_signal,
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

    def _java(self, heap: str, classpath: str, main: str, *args: str, service: bool = True) -> list[str]:
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
            *(gc_flags(self.settings.logs / f"{self.name}-gc.log") if service else []),
            "-Djava.awt.headless=true",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _write_log4j(self) -> None:
        conf = self.settings.state / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "log4j2.properties").write_text(LOG4J2_PROPERTIES)


# --- PostgreSQL -----------------------------------------------------------------------------------------


class Postgres(Service):
    """A PostgreSQL 15 cluster of our own, `wal_level=logical`, password auth on 127.0.0.1."""

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown; SIGTERM would wait for every client to disconnect

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(self.settings.pg_port, "CDCPIPE_PG_PORT")]

    @property
    def secrets_dir(self) -> Path:
        return self.settings.state / "secrets"

    @property
    def password_file(self) -> Path:
        return secret_file(self.settings, "pg_superuser_password")

    @property
    def pgpass_file(self) -> Path:
        """A libpq password file: tools find the password through PGPASSFILE, never on a command line."""
        return self.secrets_dir / "pgpass"

    @property
    def data_dir(self) -> Path:
        """The cluster's folder.

        Under the state folder when the `postgres` user can reach it; when a parent folder is closed to other users (a checkout under /root, say), a folder of its own under
        /var/lib/cdcpipe named after the state folder, so two checkouts never share a cluster.
        """
        preferred = self.settings.state / "pg"
        if self.run_as() is None or _others_can_traverse(self.settings.state):
            return preferred
        tag = base64.b32encode(str(self.settings.state).encode()).decode().lower().rstrip("=")[-20:]
        return Path("/var/lib/cdcpipe") / tag / "pg"

    def dsn(self, database: str | None = None) -> str:
        db = database or self.settings.pg_database
        return f"postgresql://{POSTGRES_SUPERUSER}@127.0.0.1:{self.settings.pg_port}/{db}"

    def run_as(self) -> str | None:
        # Postgres refuses to run as root; as any other user it runs as that user.
        return "postgres" if os.geteuid() == 0 else None

    def prepare(self) -> None:
        bin_dir = self.settings.pg_bin_dir
        if not (bin_dir / "postgres").exists():
            raise NotInstalledError(
                f"postgres: no server binary in {bin_dir}; run `make install` (it installs postgresql-15) "
                "or set CDCPIPE_PG_BIN_DIR to the folder holding `postgres` and `initdb`"
            )
        password = secret(self.settings, "pg_superuser_password")
        write_private(self.pgpass_file, f"127.0.0.1:*:*:{POSTGRES_SUPERUSER}:{password}\n")

        data = self.data_dir
        if (data / "PG_VERSION").exists():
            return
        user = self.run_as()
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o700)
        pwfile = data.parent / ".initdb-password"
        write_private(pwfile, password + "\n")
        if user is not None:
            entry = pwd.getpwnam(user)
            for path in (data, pwfile):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        try:
            proc = subprocess.run(  # noqa: S603
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    POSTGRES_SUPERUSER,
                    f"--pwfile={pwfile}",
                    "--auth-host=scram-sha-256",
                    "--auth-local=peer",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ],
                capture_output=True,
                text=True,
                check=False,
                user=user,
                group=user,
                extra_groups=[] if user else None,
                cwd="/",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise ServiceStartError(f"postgres: initdb of {data} failed:\n{proc.stdout}{proc.stderr}")

    def command(self) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": self.settings.pg_port,
            "unix_socket_directories": "",  # TCP only: no socket folder to own or to collide on
            "wal_level": "logical",
            "max_replication_slots": 16,
            "max_wal_senders": 16,
            "max_connections": 200,
            "shared_buffers": "256MB",
            "logging_collector": "off",
        }
        args = [str(self.settings.pg_bin_dir / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        return args

    def cwd(self) -> Path:
        return self.data_dir

    def check_health(self) -> None:
        try:
            with psycopg.connect(self._superuser_dsn("postgres"), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError as exc:
            raise ServiceNotReadyError(f"postgres: not accepting connections yet ({exc})") from exc

    def after_healthy(self) -> None:
        with psycopg.connect(self._superuser_dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.settings.pg_database,)
            ).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.settings.pg_database)))

    def _superuser_dsn(self, database: str) -> str:
        password = self.password_file.read_text().strip()
        return psycopg.conninfo.make_conninfo(self.dsn(database), password=password)


def _others_can_traverse(path: Path) -> bool:
    """Whether a user other than the owner can reach `path`: every existing parent must be o+x."""
    return all(not p.exists() or p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


# --- Kafka broker -----------------------------------------------------------------------------------------


class Kafka(Service):
    """One broker that is its own KRaft controller."""

    name = "kafka"

    @property
    def ports(self) -> list[PortSpec]:
        return [
            PortSpec(self.settings.kafka_port, "CDCPIPE_KAFKA_PORT"),
            PortSpec(self.settings.kafka_controller_port, "CDCPIPE_KAFKA_CONTROLLER_PORT"),
        ]

    @property
    def config_file(self) -> Path:
        return self.settings.state / "conf" / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.settings.state / "kafka"

    def prepare(self) -> None:
        self._write_log4j()
        s = self.settings
        self.config_file.write_text(
            properties(
                {
                    "process.roles": "broker,controller",
                    "node.id": 1,
                    "controller.quorum.bootstrap.servers": f"127.0.0.1:{s.kafka_controller_port}",
                    "listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port},CONTROLLER://127.0.0.1:{s.kafka_controller_port}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port},CONTROLLER://127.0.0.1:{s.kafka_controller_port}",
                    "controller.listener.names": "CONTROLLER",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "log.dirs": self.data_dir,
                    "num.partitions": 1,
                    # One broker: every internal topic has one replica.
                    "offsets.topic.replication.factor": 1,
                    "offsets.topic.num.partitions": 10,
                    "transaction.state.log.replication.factor": 1,
                    "transaction.state.log.min.isr": 1,
                    "share.coordinator.state.topic.replication.factor": 1,
                    "share.coordinator.state.topic.min.isr": 1,
                    "group.initial.rebalance.delay.ms": 0,
                    # As on a production cluster: topics are created explicitly (`cdcpipe topics apply`, or
                    # Connect for what a connector's topic.creation.* declares), never by a first produce.
                    "auto.create.topics.enable": "false",
                    "log.retention.hours": 168,
                }
            )
        )
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        command = self._java(
            "256m",
            self._jars(self.settings.lib / "kafka"),
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            "-t",
            cluster_id,
            "-c",
            str(self.config_file),
            "--ignore-formatted",
            service=False,
        )
        proc = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode != 0:
            raise ServiceStartError(
                f"kafka: formatting the log folder {self.data_dir} failed:\n{proc.stdout}{proc.stderr}"
            )

    def command(self) -> list[str]:
        return self._java(
            self.settings.kafka_heap, self._jars(self.settings.lib / "kafka"), "kafka.Kafka", str(self.config_file)
        )

    def check_health(self) -> None:
        admin = AdminClient(
            {
                "bootstrap.servers": self.settings.kafka_bootstrap,
                "socket.connection.setup.timeout.ms": 2000,
                "logger": _QUIET,  # type: ignore[dict-item]  # librdkafka accepts a logging.Logger
            }
        )
        try:
            metadata = admin.list_topics(timeout=3)
        except Exception as exc:  # confluent-kafka raises KafkaException, or a bare one on timeout
            raise ServiceNotReadyError(f"kafka: no metadata from {self.settings.kafka_bootstrap} yet ({exc})") from exc
        if not metadata.brokers:
            raise ServiceNotReadyError("kafka: the broker has not registered yet")


_QUIET = logging.getLogger("cdcpipe.infra.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


# --- Kafka Connect -----------------------------------------------------------------------------------------


class Connect(Service):
    """One Kafka Connect worker in distributed mode, with Debezium's PostgreSQL connector as a plugin."""

    name = "connect"

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(self.settings.connect_port, "CDCPIPE_CONNECT_PORT")]

    @property
    def address(self) -> str:
        return self.settings.connect_url

    @property
    def config_file(self) -> Path:
        return self.settings.state / "conf" / "connect-distributed.properties"

    def prepare(self) -> None:
        self._write_log4j()
        s = self.settings
        plugins = s.lib / "plugins"
        self._jars(plugins / "debezium-connector-postgres")
        self._jars(plugins / "cdcpipe-transforms")
        self.config_file.write_text(
            properties(
                {
                    "bootstrap.servers": s.kafka_bootstrap,
                    "group.id": "cdcpipe-connect",
                    "listeners": s.connect_url,
                    "rest.advertised.host.name": "127.0.0.1",
                    "rest.advertised.port": s.connect_port,
                    # Keys are plain strings (the outbox aggregate id); values plain JSON without an envelope.
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable": "false",
                    "config.storage.topic": "_cdcpipe-connect-configs",
                    "offset.storage.topic": "_cdcpipe-connect-offsets",
                    "status.storage.topic": "_cdcpipe-connect-status",
                    "config.storage.replication.factor": 1,
                    "offset.storage.replication.factor": 1,
                    "status.storage.replication.factor": 1,
                    "offset.storage.partitions": 5,
                    "status.storage.partitions": 1,
                    # How often source offsets are committed: the bound on what is sent again after a crash.
                    "offset.flush.interval.ms": 1000,
                    "plugin.path": plugins,
                    "plugin.discovery": "service_load",
                    # Secrets in connector files are references, resolved by the worker (KIP-297).
                    "config.providers": "env,file",
                    "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
                    "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
                    # A connector definition may not override the worker's client settings (sasl.jaas.config...).
                    "connector.client.config.override.policy": "None",
                }
            )
        )

    def environment(self) -> dict[str, str]:
        """What connector files reference through ${env:...}: where Postgres is, and the Debezium password.

        The worker resolves these itself, so no connector definition holds a host or a secret.
        """
        return {
            **os.environ,
            "CDCPIPE_PG_HOST": "127.0.0.1",
            "CDCPIPE_PG_PORT": str(self.settings.pg_port),
            "CDCPIPE_PG_DATABASE": self.settings.pg_database,
            "CDCPIPE_DEBEZIUM_PASSWORD": secret(self.settings, "debezium_password"),
        }

    def command(self) -> list[str]:
        return self._java(
            self.settings.connect_heap,
            self._jars(self.settings.lib / "connect"),
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(self.config_file),
        )

    def check_health(self) -> None:
        try:
            root = httpx.get(f"{self.settings.connect_url}/", timeout=3)
            plugins = httpx.get(f"{self.settings.connect_url}/connector-plugins", timeout=5)
        except httpx.HTTPError as exc:
            raise ServiceNotReadyError(f"connect: REST API at {self.settings.connect_url} not answering yet") from exc
        if root.status_code != 200 or plugins.status_code != 200:
            raise ServiceNotReadyError(f"connect: REST API answers {root.status_code}/{plugins.status_code}")
        classes = {p["class"] for p in plugins.json()}
        if DEBEZIUM_POSTGRES_CONNECTOR not in classes:
            raise ServiceStartError(
                f"connect: the worker is up but {DEBEZIUM_POSTGRES_CONNECTOR} is not among its plugins "
                f"({sorted(classes)}); check {self.settings.lib / 'plugins'} and run `make install`"
            )


# --- Spark standalone --------------------------------------------------------------------------------------


def pyspark_home() -> Path:
    """SPARK_HOME of the pip-installed Spark: the pyspark package folder (it holds bin/ and jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


class _SparkDaemon(Service):
    def spark_defaults(self) -> Path:
        return self.settings.state / "conf" / "spark-defaults.conf"

    def prepare(self) -> None:
        path = self.spark_defaults()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "spark.master.rest.enabled false\nspark.ui.reverseProxy false\nspark.worker.cleanup.enabled true\n"
        )

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
        data: dict[str, object] = response.json()
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
    """One Spark standalone worker registered with the master."""

    name = "spark-worker"

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(self.settings.spark_worker_ui_port, "CDCPIPE_SPARK_WORKER_UI_PORT")]

    def command(self) -> list[str]:
        work = self.settings.state / "spark" / "work"
        work.mkdir(parents=True, exist_ok=True)
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
            str(self.settings.spark_worker_ui_port),
            "--work-dir",
            str(work),
        )

    def check_health(self) -> None:
        workers = self._master_json().get("workers", [])
        if not isinstance(workers, list) or not any(
            isinstance(w, dict)
            and w.get("state") == "ALIVE"
            and w.get("webuiaddress", "").endswith(f":{self.settings.spark_worker_ui_port}")
            for w in workers
        ):
            raise ServiceNotReadyError("spark-worker: not registered with the master yet")


CORE_SERVICES: tuple[type[Service], ...] = (Postgres, Kafka, Connect)
SPARK_SERVICES: tuple[type[Service], ...] = (SparkMaster, SparkWorker)
