"""Settings of the connectors stage (`[connect]` in the settings file, `CDCPIPE_*` in the environment)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, SecretStr

from cdcpipe.settings import StageSettings

DEFINITIONS_DIR = Path(__file__).parent / "definitions"


class ConnectSettings(StageSettings):
    """Where Kafka Connect is, and the database its Debezium connectors read (for slot status)."""

    toml_section: ClassVar[str] = "connect"

    connect_url: str = Field("http://127.0.0.1:8083", description="Kafka Connect REST API")
    connect_timeout_s: float = Field(30.0, gt=0, description="timeout of one REST request")
    connect_retries: int = Field(10, ge=0, description="retries of a request that met a rebalance (409)")
    pg_dsn: SecretStr = Field(
        SecretStr("postgresql://postgres@127.0.0.1:5432/cdcpipe"),
        description="libpq connection string used to read replication slots and publications",
    )
