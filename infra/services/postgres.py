"""PostgreSQL: the cluster, its superuser's password file, and the cdcpipe database."""

from __future__ import annotations

import base64
import os
import pwd
import signal
import stat
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

from ground.private_files import write_private
from ground.processes import as_user
from ground.scram import scram_verifier
from infra.errors import NotInstalledError, ServiceNotReadyError, ServiceStartError
from infra.service_user import private_folder
from infra.services.base import JOBS_ROLE, MONITOR_ROLE, POSTGRES_SUPERUSER, ROLE_SECRETS, PortSpec, Service
from infra.stack_secrets import secret, secret_file


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

    def dsn(self, database: str | None = None, *, role: str = POSTGRES_SUPERUSER) -> str:
        db = database or self.settings.pg_database
        return f"postgresql://{role}@127.0.0.1:{self.settings.pg_port}/{db}"

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
        # libpq finds each role's password here; `schema apply` gives the roles these (stack env names the files).
        logins = {POSTGRES_SUPERUSER: password} | {
            role: secret(self.settings, name) for role, name in ROLE_SECRETS.items()
        }
        write_private(self.pgpass_file, "".join(f"127.0.0.1:*:*:{role}:{pw}\n" for role, pw in logins.items()))

        data = self.data_dir
        if (data / "PG_VERSION").exists():
            return
        user = self.run_as()
        private_folder(data)
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
                **as_user(user),
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
            # A client whose host vanished (a cut network, a dead machine) is dropped within about 25 s, not the
            # kernel's two hours: its sessions, and the locks they hold, go with it. (A frozen process, whose
            # kernel still answers, is the leases' own idle timeout's to notice: streaming_jobs.lake.lease.)
            "tcp_keepalives_idle": 10,
            "tcp_keepalives_interval": 5,
            "tcp_keepalives_count": 3,
            "tcp_user_timeout": 25000,
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
            # The jobs' lease role (streaming_jobs.lake.lease): it logs in and does nothing else. The monitor role
            # (the collector's, `cdcpipe status`'s) reads statistics: pg_monitor; `schema apply` adds the outbox.
            for name in (JOBS_ROLE, MONITOR_ROLE):
                role = sql.Identifier(name)
                if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
                verifier = scram_verifier(secret(self.settings, ROLE_SECRETS[name]))
                conn.execute(sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(verifier)))
            conn.execute(sql.SQL("GRANT pg_monitor TO {}").format(sql.Identifier(MONITOR_ROLE)))

    def _superuser_dsn(self, database: str) -> str:
        password = self.password_file.read_text().strip()
        return psycopg.conninfo.make_conninfo(self.dsn(database), password=password)


def _others_can_traverse(path: Path) -> bool:
    """Whether a user other than the owner can reach `path`: every existing parent must be o+x."""
    return all(not p.exists() or p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])
