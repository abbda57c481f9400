"""Settings of `cdcpipe tables` (`[capture]` in the settings file, `CDCPIPE_CAPTURE_*` in the environment)."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator

from ground.settings import StageSettings

PRINCIPAL = re.compile(r"[A-Za-z]+:[^\s,;]+")


def own_name(connector: str) -> str:
    """A slot's or a publication's name for a connector (lower-case letters, digits and `_`): each its own."""
    return re.sub(r"[^a-z0-9_]", "_", connector.lower())[:63]


class CaptureSettings(StageSettings):
    """Which connector captures the tables, and how their topics are declared."""

    toml_section: ClassVar[str] = "capture"

    capture_connector: str = Field(
        "cdcpipe-tables", description="the Debezium connector `tables add` adds tables to (created when missing)"
    )
    capture_topic_prefix: str = Field(
        "cdcpipe", description="topic.prefix of a connector `tables add` creates: topics are <prefix>.<schema>.<table>"
    )
    capture_slot: str | None = Field(
        None,
        description="replication slot of a connector `tables add` creates (default: the connector's name in a slot's "
        "characters: cdcpipe_tables for cdcpipe-tables)",
    )
    capture_partitions: int = Field(6, ge=1, description="partitions of a captured table's topic")
    capture_retention_ms: int = Field(604_800_000, ge=-1, description="retention.ms of a captured table's topic")
    capture_connect_principal: str = Field("User:connect", description="Kafka principal of the Connect workers")
    capture_jobs_principal: str = Field("User:jobs", description="Kafka principal of the streaming jobs")

    @property
    def slot(self) -> str:
        """The slot of the connector: its own, never another connector's (two on one slot lose changes)."""
        return self.capture_slot or own_name(self.capture_connector)

    @field_validator("capture_connect_principal", "capture_jobs_principal")
    @classmethod
    def _principal(cls, value: str) -> str:
        if not PRINCIPAL.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kafka principal: write it as User:NAME")
        return value
