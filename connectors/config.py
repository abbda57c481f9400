"""Settings of the connectors stage (`[connect]` in the settings file, `CDCPIPE_*` in the environment)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, SecretStr, model_validator

from ground.errors import ConfigError
from ground.settings import DEFAULT_PG_DSN, StageSettings


class ConnectSettings(StageSettings):
    """Where Kafka Connect is, and the database its Debezium connectors read (for slot status)."""

    toml_section: ClassVar[str] = "connect"

    connect_url: str = Field(
        "http://127.0.0.1:8083",
        description="Kafka Connect REST API: one worker's URL, or several of one group's, comma-separated (the "
        "first that takes the connection answers)",
    )
    connect_timeout_s: float = Field(30.0, gt=0, description="timeout of one REST request")
    connect_retries: int = Field(10, ge=0, description="retries of a request that met a rebalance (409)")
    connect_user: str | None = Field(None, description="user for the REST API's basic authentication")
    connect_password: SecretStr | None = Field(None, description="that user's password (secret: never printed)")
    connect_password_file: Path | None = Field(
        None, description="file holding that user's password (instead of CDCPIPE_CONNECT_PASSWORD)"
    )
    pg_dsn: SecretStr = Field(
        SecretStr(DEFAULT_PG_DSN),
        description="libpq connection string used to read replication slots and publications",
    )
    connectors_dir: Path | None = Field(
        None,
        description="folder of your connector definitions: `connectors apply`'s default, and where `tables add` "
        "keeps the table connector's definition in step (the demo's: examples/connectors)",
    )

    heal_restarts_max: int = Field(
        6,
        ge=0,
        description="restarts in a row of a task FAILED on a transient fault (a connection lost, a timeout) before "
        "it is left FAILED and alerted on; 0: none (the monitor's collector restarts them)",
    )
    heal_backoff_s: float = Field(
        10.0, gt=0, description="wait before the second restart of such a task; doubled each time"
    )
    heal_backoff_max_s: float = Field(300.0, gt=0, description="the longest wait between two restarts of a task")
    heal_settled_s: float = Field(
        600.0, gt=0, description="a restarted task that runs this long starts its count of restarts in a row afresh"
    )

    @model_validator(mode="after")
    def _credentials(self) -> ConnectSettings:
        if self.connect_password is not None and self.connect_password_file is not None:
            raise ValueError("give the Connect password once: CDCPIPE_CONNECT_PASSWORD or ..._PASSWORD_FILE")
        if self.connect_password_file is not None and not self.connect_password_file.is_file():
            raise ValueError(f"connect_password_file {self.connect_password_file}: no such file")
        return self

    def connect_urls(self) -> list[str]:
        """Each worker's URL of `connect_url`, in order, without a trailing slash."""
        return [url.strip().rstrip("/") for url in self.connect_url.split(",") if url.strip()]

    def basic_auth(self) -> tuple[str, str] | None:
        """(user, password) for the REST API, or None when no user is set."""
        if self.connect_user is None:
            return None
        if self.connect_password_file is not None:
            return self.connect_user, self.connect_password_file.read_text().strip()
        if self.connect_password is None:
            raise ConfigError(
                f"CDCPIPE_CONNECT_USER={self.connect_user} has no password: set CDCPIPE_CONNECT_PASSWORD_FILE "
                "(or CDCPIPE_CONNECT_PASSWORD)"
            )
        return self.connect_user, self.connect_password.get_secret_value()
