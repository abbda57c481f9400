"""Settings of the collector and `cdcpipe status` (`[monitor]` in the settings file, `CDCPIPE_*` in the environment)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr

from ground.settings import StageSettings


class MonitorSettings(StageSettings):
    """Where the pipeline's state is read from, as the monitor role, and where the collector serves."""

    toml_section: ClassVar[str] = "monitor"

    monitor_pg_dsn: SecretStr = Field(
        SecretStr("postgresql://cdcpipe_monitor@127.0.0.1:5432/cdcpipe"),
        description="libpq connection string of the monitor role (`schema apply` grants it pg_monitor and SELECT "
        "on the outbox tables); its password from PGPASSFILE",
    )
    collector_port: int = Field(9091, ge=1024, le=65535, description="the collector's /metrics on 127.0.0.1")
    prometheus_url: str | None = Field(
        None, description="the Prometheus that scrapes cdcpipe (`stack env` sets the stack's): `status` names it"
    )
    slot_wal_warn_bytes: int = Field(
        1 << 30, ge=0, description="`status` warns when a replication slot holds more WAL than this (the alert's too)"
    )
    monitor_timeout_s: float = Field(5.0, gt=0, description="how long one read of one part may take")
    read_every_s: float = Field(
        5.0,
        gt=0,
        description="how often the collector reads every part; a scrape serves the last reading (no scrape opens "
        "a connection, however many there are), and readings older than 3 reads and a timeout are not served",
    )
    heal_every_s: float = Field(
        10.0, gt=0, description="how often the collector looks for connector tasks to restart (connectors' heal_*)"
    )
