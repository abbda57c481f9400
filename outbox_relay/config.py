"""Settings of the outbox relay (`[relay]` in the settings file, `CDCPIPE_*` in the environment)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from ground.kafka_client import KafkaSettings, with_own_client_file
from ground.settings import DEFAULT_PG_DSN, StageSettings, split_list

TOPIC_PLACEHOLDER = "{aggregatetype}"


class RelaySettings(StageSettings):
    """How the relay reads the outbox and writes Kafka. The outbox's names come from `[outbox]`."""

    toml_section: ClassVar[str] = "relay"

    pg_dsn: SecretStr = Field(
        SecretStr(DEFAULT_PG_DSN),
        description="libpq connection string, used by the relay when relay_pg_dsn is not set",
    )
    relay_pg_dsn: SecretStr | None = Field(
        None,
        description="the relay's own connection, as the relay role (SELECT and DELETE on the outbox); "
        "`cdcpipe stack env` sets it to the stack's cdcpipe_relay",
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings.load, description="the cluster ([kafka])")
    relay_kafka_config: Path | None = Field(
        None,
        description="the relay's own Kafka client file: when set, the relay publishes with it whatever "
        "CDCPIPE_KAFKA_CONFIG says (`stack env` names the stack's relay user's)",
    )
    topic_pattern: str = Field(
        "outbox.event.{aggregatetype}",
        description="topic of an event; {aggregatetype} is replaced (Debezium EventRouter's default)",
    )
    allowed_aggregate_types: Annotated[frozenset[str], NoDecode] = Field(
        frozenset(),
        description="comma-separated; if not empty, events of any other aggregate type become dead letters",
    )
    batch_size: int = Field(2000, ge=1, le=100_000, description="most rows taken from the outbox at once")
    poll_interval_s: float = Field(
        2.0, gt=0, description="fallback wake-up when no NOTIFY arrives (NOTIFY wakes the relay at once)"
    )
    standby_retry_s: float = Field(1.0, gt=0, description="how often a standby relay tries to take over")
    delivery_timeout_s: float = Field(
        30.0, gt=0, description="how long Kafka may take to acknowledge a batch before it is retried"
    )
    backoff_max_s: float = Field(30.0, gt=0, description="longest wait between reconnect attempts")
    metrics_port: int = Field(9464, ge=0, le=65535, description="Prometheus metrics on 127.0.0.1 (0: off)")
    backlog_interval_s: float = Field(5.0, gt=0, description="how often the backlog (count, oldest age) is read")
    linger_ms: float = Field(0.0, ge=0, description="producer linger.ms (0: send at once; the relay batches itself)")

    def dsn(self) -> str:
        """The connection string the relay uses: its own role's if set, else the shared one."""
        return (self.relay_pg_dsn or self.pg_dsn).get_secret_value()

    @model_validator(mode="before")
    @classmethod
    def _relay_own_kafka_file(cls, data: Any) -> Any:
        return with_own_client_file(data, "relay_kafka_config")

    @field_validator("allowed_aggregate_types", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return split_list(value)

    @field_validator("topic_pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if TOPIC_PLACEHOLDER not in value:
            raise ValueError(f"the topic pattern must contain {TOPIC_PLACEHOLDER}")
        if not re.fullmatch(r"[A-Za-z0-9._-]*", value.replace(TOPIC_PLACEHOLDER, "")):
            raise ValueError("besides {aggregatetype}, a topic pattern may hold only letters, digits, '.', '_' and '-'")
        return value

    def topic_for(self, aggregate_type: str) -> str:
        return self.topic_pattern.replace(TOPIC_PLACEHOLDER, aggregate_type)
