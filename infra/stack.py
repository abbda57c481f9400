"""`cdcpipe stack up | status | down | env`: the local stack as one unit."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from infra import kafka_security
from infra.config import MAX_SPARK_WORKERS, StackSettings
from infra.errors import PortInUseError, ServiceNotReadyError, ServiceStartError
from infra.services import CORE_SERVICES, Collector, Connect, Kafka, Postgres, Service, SparkMaster, SparkWorker
from infra.services.base import JOBS_ROLE, MONITOR_ROLE, RELAY_ROLE, ROLE_SECRETS, WRITER_ROLE
from infra.services.connect import REST_USER
from infra.services.object_store import ACCESS_KEY, BUCKET, REGION, secret_key
from infra.stack_secrets import secret_file

Report = Callable[[str], None]


def services(
    settings: StackSettings, *, spark_cluster: bool = True, workers: int | None = None, collector: Sequence[str] = ()
) -> list[Service]:
    """Every service in start order: the Spark master and `workers` workers only when asked for.

    Without `workers`, every worker there may be (what `status` and `down` look for: the pid files say
    which ran). `collector`: the collector's command (the monitor's, given by the CLI above the stack).
    """
    found: list[Service] = []
    for cls in CORE_SERVICES:
        if cls is Collector:
            found.append(Collector(settings, collector))
        elif cls is Kafka:
            found += [Kafka(settings, i) for i in range(settings.kafka_nodes)]
        elif cls is Connect:
            found += [Connect(settings, i) for i in range(settings.connect_workers)]
        else:
            found.append(cls(settings))
    if spark_cluster:
        found.append(SparkMaster(settings))
        found += [SparkWorker(settings, i) for i in range(workers or MAX_SPARK_WORKERS)]
    return found


def port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port (a bind also sees a listener on 0.0.0.0 that a connect to 127.0.0.1 might not reach)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# A process killed a moment ago may hold its listening socket a little after its pid is gone: a restart
# right after a stop (a fault test, `down` then `up`) waits this long for the port before calling it taken.
PORT_RELEASE_S = 3.0


def wait_port_free(port: int, timeout_s: float = PORT_RELEASE_S) -> bool:
    """Whether the port is free, or becomes free within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not port_is_free(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


@dataclass(frozen=True)
class Started:
    """What `up` did for one service."""

    service: str
    address: str
    pid: int
    seconds: float
    already_running: bool


def up(
    settings: StackSettings,
    *,
    spark_cluster: bool = False,
    report: Report = print,
    collector: Sequence[str] = (),
    only: Collection[str] | None = None,
) -> list[Started]:
    """Start each service that is not running, one after another, each only once the previous is healthy.

    Without the collector's `collector` command (a restart of the services a fault took down, say), a collector
    that is not running is left so, and said. `only`: the names of the services to start (the others are left
    as they are).
    """
    for folder in (settings.state, settings.logs, settings.run_dir):
        folder.mkdir(parents=True, exist_ok=True)
    # The local lake holds every event the jobs apply: no other local user may enter it (only the others' bits go,
    # so a group's or an ACL's grant, as the Spark workers' user gets, stays).
    settings.lake.mkdir(parents=True, exist_ok=True)
    settings.lake.chmod(settings.lake.stat().st_mode & 0o770)
    if not settings.topology_made():
        settings.record_topology()  # before any data is made for it
    results = []
    wanted: list[Service] = []
    for service in services(settings, spark_cluster=spark_cluster, workers=settings.spark_workers, collector=collector):
        if only is not None and service.name not in only:
            continue
        if isinstance(service, Collector) and not collector and service.process.pid() is None:
            report(f"{service.name:<15} not started: `cdcpipe stack up` starts it")
            continue
        wanted.append(service)
    for service in wanted:
        service.run_as()  # a service that would run as root is refused before anything starts
    launched: dict[str, tuple[float, int, bool]] = {}
    for position, service in enumerate(wanted):
        if service.name not in launched:
            # The nodes of a quorum start together (none is healthy alone); anything else once the one before is.
            peers = [service]
            if service.starts_with_peers:
                peers += [p for p in wanted[position + 1 :] if p.kind == service.kind]
            for peer in peers:
                launched[peer.name] = _launch(peer)
        results.append(_finish(service, settings, report, *launched[service.name]))
    return results


def _launch(service: Service) -> tuple[float, int, bool]:
    """Start the service unless it runs: (when, its pid, whether it ran already)."""
    started = time.monotonic()
    pid = service.process.pid()
    if pid is not None:
        return started, pid, True
    for spec in service.ports:
        if not wait_port_free(spec.port):
            raise PortInUseError(service.name, spec.port, spec.setting)
    service.prepare()
    pid = service.process.start(
        service.command(),
        env=service.environment(),
        cwd=service.cwd(),
        user=service.run_as(),
        # What a service writes (Kafka's segments, the object store's objects, Connect's and Spark's files)
        # is its own: no other local user may read the events in it, whatever the caller's umask.
        umask=0o077,
    )
    return started, pid, False


def _finish(
    service: Service, settings: StackSettings, report: Report, started: float, pid: int, already: bool
) -> Started:
    _wait_healthy(service, settings.start_timeout_s)
    service.after_healthy()
    seconds = time.monotonic() - started
    state = "already running" if already else f"healthy after {seconds:.1f}s"
    owner = _owner(pid)
    report(f"{service.name:<15} {state:<22} pid {pid:<8} {service.address}" + (f"  (as {owner})" if owner else ""))
    return Started(service.name, service.address, pid, seconds, already)


def _owner(pid: int) -> str:
    """The user a process runs as ("" if it is gone)."""
    try:
        return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
    except (FileNotFoundError, KeyError):
        return ""


def _wait_healthy(service: Service, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no health check ran"
    while True:
        if service.process.exited():
            tail = "\n  ".join(service.process.log_tail(20))
            raise ServiceStartError(
                f"{service.name} exited while starting; last lines of {service.process.log_file}:\n  {tail}"
            )
        try:
            service.check_health()
            return
        except ServiceNotReadyError as exc:
            last = str(exc)
        if time.monotonic() > deadline:
            tail = "\n  ".join(service.process.log_tail(20))
            raise ServiceStartError(
                f"{service.name} not healthy after {timeout_s:.0f}s (last check: {last}); it is still running, "
                f"see {service.process.log_file} (raise CDCPIPE_START_TIMEOUT_S if the machine is slow):\n  {tail}"
            )
        time.sleep(0.25)


@dataclass(frozen=True)
class ServiceStatus:
    """One row of `stack status`."""

    service: str
    pid: int | None
    address: str
    healthy: bool
    detail: str
    rss_bytes: int | None
    log_tail: list[str]


def status(settings: StackSettings) -> list[ServiceStatus]:
    """Each service of the stack; the Spark pair only when it was started."""
    rows = []
    for service in services(settings, spark_cluster=True):
        pid = service.process.pid()
        if pid is None and service.name.startswith("spark") and not service.process.pid_file.exists():
            continue  # never started with --spark-cluster: nothing to report
        healthy, detail = False, "not running"
        if pid is not None:
            try:
                service.check_health()
                healthy, detail = True, "healthy"
            except (ServiceNotReadyError, ServiceStartError) as exc:
                detail = str(exc)
        rows.append(
            ServiceStatus(
                service=service.name,
                pid=pid,
                address=service.address,
                healthy=healthy,
                detail=detail,
                rss_bytes=service.process.rss_bytes(),
                log_tail=[] if healthy else service.process.log_tail(10),
            )
        )
    return rows


def down(settings: StackSettings, *, purge: bool = False, report: Report = print) -> list[str]:
    """Stop, in reverse start order, exactly the processes `up` recorded. Data stays unless purge."""
    stopped = []
    for service in reversed(services(settings, spark_cluster=True)):
        pid = service.process.pid()
        if service.process.stop():
            stopped.append(service.name)
            report(f"{service.name:<15} stopped (pid {pid})")
    if purge:
        pg_data = Postgres(settings).data_dir
        for folder in (
            settings.state,
            settings.logs,
            pg_data.parent if not pg_data.is_relative_to(settings.state) else None,
        ):
            if folder is not None and folder.exists():
                shutil.rmtree(folder)
                report(f"removed {folder}")
    return stopped


def env_exports(settings: StackSettings) -> list[str]:
    """Shell exports that wire any tool to this stack.

    No secret but the object store's key, in the variables every S3 client reads (the AWS SDKs and CLIs,
    delta-rs); every other tool reads its password from a file named here (libpq from PGPASSFILE).
    """
    exports = [f"export {key}={shlex.quote(value)}" for key, value in env_values(settings).items()]
    # The stack's tools first: its kcat runs on a librdkafka that does SCRAM with Kafka 4 (Debian's cannot), so
    # `kcat -F "$CDCPIPE_KAFKA_CONFIG"` works as the docs show. The shell expands "$PATH" when it evaluates this.
    return [*exports, f'export PATH={shlex.quote(str(settings.home / "bin"))}:"$PATH"']


def env_values(settings: StackSettings) -> dict[str, str]:
    """The variables `env_exports` sets, for a process that starts tools itself (the demo, the benches)."""
    postgres = Postgres(settings)
    values = {
        "CDCPIPE_HOME": str(settings.home),
        "CDCPIPE_PG_DSN": postgres.dsn(),
        "PGPASSFILE": str(postgres.pgpass_file),
        # Least privilege: the relay connects as the relay role; an application that only emits can connect as
        # the writer role (or be granted it). Their passwords are in PGPASSFILE; `schema apply` sets them from
        # the files named here.
        "CDCPIPE_RELAY_PG_DSN": postgres.dsn(role=RELAY_ROLE),
        "CDCPIPE_WRITER_PG_DSN": postgres.dsn(role=WRITER_ROLE),
        "CDCPIPE_RELAY_PASSWORD_FILE": str(secret_file(settings, ROLE_SECRETS[RELAY_ROLE])),
        "CDCPIPE_WRITER_PASSWORD_FILE": str(secret_file(settings, ROLE_SECRETS[WRITER_ROLE])),
        "CDCPIPE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        # Paths, not the secrets. The admin's client file is for the CLI's topic and ACL commands and kcat; the
        # jobs and the relay each read Kafka as their own user, whose ACLs say what they may do.
        "CDCPIPE_KAFKA_CONFIG": str(kafka_security.client_file(settings, kafka_security.ADMIN)),
        "CDCPIPE_JOBS_KAFKA_CONFIG": str(kafka_security.client_file(settings, "jobs")),
        "CDCPIPE_RELAY_KAFKA_CONFIG": str(kafka_security.client_file(settings, "relay")),
        "CDCPIPE_CONNECT_URL": settings.connect_url,
        "CDCPIPE_CONNECT_USER": REST_USER,
        "CDCPIPE_CONNECT_PASSWORD_FILE": str(secret_file(settings, "connect_rest_password")),
        # A path, not the secret: `cdcpipe schema apply` gives the Debezium role this password.
        "CDCPIPE_DEBEZIUM_PASSWORD_FILE": str(secret_file(settings, "debezium_password")),
        # The jobs' lake is the object store, as a production lake would be; the local folder stays one variable away.
        "CDCPIPE_LAKE": f"s3a://{BUCKET}/lake",
        "CDCPIPE_LOCAL_LAKE": str(settings.lake),
        # The jobs take turns writing a table through a lease in Postgres (streaming_jobs.lake.lease).
        "CDCPIPE_LEASE_PG_DSN": postgres.dsn(role=JOBS_ROLE),
        # The jobs read the captured tables' catalog (pg_attribute, readable by any role) to tell renames apart.
        "CDCPIPE_SOURCE_PG_DSN": postgres.dsn(role=JOBS_ROLE),
        "CDCPIPE_SPARK_JARS_DIR": str(settings.lib / "spark"),
        # The object store, as any S3 client reads it (http on loopback: delta-rs wants AWS_ALLOW_HTTP for that).
        "AWS_ENDPOINT_URL": settings.s3_endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": secret_key(settings),
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
        "CDCPIPE_S3_LAKE": f"s3a://{BUCKET}/lake",
        # Observing: the stack's Prometheus, where a job's driver writes its scrape target, the monitor role.
        "CDCPIPE_PROMETHEUS_URL": settings.prometheus_url,
        "CDCPIPE_METRICS_TARGETS_DIR": str(settings.metrics_targets),
        "CDCPIPE_MONITOR_PG_DSN": postgres.dsn(role=MONITOR_ROLE),
        "CDCPIPE_MONITOR_PASSWORD_FILE": str(secret_file(settings, ROLE_SECRETS[MONITOR_ROLE])),
    }
    if SparkMaster(settings).process.pid() is not None:
        # Jobs read CDCPIPE_SPARK_MASTER: with the cluster up, they run on it (each capped by spark_cores_max).
        values["CDCPIPE_SPARK_MASTER"] = settings.spark_master_url
        # Its web UI's JSON says whether a job's application holds executors (`jobs status`, `cdcpipe status`).
        values["CDCPIPE_SPARK_MASTER_UI_URL"] = f"http://127.0.0.1:{settings.spark_master_ui_port}"
        # A path, not the secret: the cluster admits only applications that know it (spark.authenticate).
        values["CDCPIPE_SPARK_AUTHENTICATE_SECRET_FILE"] = str(secret_file(settings, "spark_authenticate_secret"))
    return values
