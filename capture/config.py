"""Settings of `cdcpipe tables` (`[capture]` in the settings file, `CDCPIPE_CAPTURE_*` in the environment)."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator

from cdcpipe.common.settings import StageSettings

PRINCIPAL = re.compile(r"[A-Za-z]+:[^\s,;]+")


class CaptureSettings(StageSettings):
    """Which connector captures the tables, and how their topics are declared."""

    toml_section: ClassVar[str] = "capture"

    capture_connector: str = Field(
        "cdcpipe-tables", description="the Debezium connector `tables add` adds tables to (created when missing)"
    )
    capture_topic_prefix: str = Field(
        "cdcpipe", description="topic.prefix of a connector `tables add` creates: topics are <prefix>.<schema>.<table>"
    )
    capture_slot: str = Field("cdcpipe_tables", description="replication slot of a connector `tables add` creates")
    capture_partitions: int = Field(6, ge=1, description="partitions of a captured table's topic")
    capture_retention_ms: int = Field(604_800_000, ge=-1, description="retention.ms of a captured table's topic")
    capture_connect_principal: str = Field("User:connect", description="Kafka principal of the Connect workers")
    capture_jobs_principal: str = Field("User:jobs", description="Kafka principal of the streaming jobs")

    @field_validator("capture_connect_principal", "capture_jobs_principal")
    @classmethod
    def _principal(cls, value: str) -> str:
        if not PRINCIPAL.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kafka principal: write it as User:NAME")
        return value
