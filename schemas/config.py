"""Names of the outbox objects (`[outbox]` in the settings file, `CDCPIPE_*` in the environment).

Every name here reaches SQL only as a quoted identifier (psycopg.sql.Identifier), never as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from ground.settings import DEFAULT_PG_DSN, StageSettings, split_list

# Postgres truncates longer names silently, which would make two settings name one object.
MAX_IDENTIFIER_BYTES = 63
# The objects named after the outbox table (OutboxNames' properties below).
DERIVED_SUFFIXES = ("_dead_letter", "_relay_status", "_seq", "_assign_seq", "_notify")


def check_identifier(value: str) -> str:
    """Accept any name Postgres can hold as one quoted identifier; quoting makes it inert."""
    if not value:
        raise ValueError("a name cannot be empty")
    if "\x00" in value:
        raise ValueError("a name cannot contain a NUL byte")
    if len(value.encode()) > MAX_IDENTIFIER_BYTES:
        raise ValueError(f"a name is at most {MAX_IDENTIFIER_BYTES} bytes (Postgres would cut it)")
    return value


class OutboxNames(StageSettings):
    """Where the outbox lives. Shared by `schema apply`, `emit` and the relay, so all agree."""

    toml_section: ClassVar[str] = "outbox"

    outbox_schema: str = Field("cdcpipe", description="Postgres schema of the outbox tables")
    outbox_table: str = Field("outbox", description="the outbox table (Debezium EventRouter columns)")

    @field_validator("outbox_schema", "outbox_table")
    @classmethod
    def _identifier(cls, value: str) -> str:
        return check_identifier(value)

    @model_validator(mode="after")
    def _derived_names_fit(self) -> OutboxNames:
        """The names made from `outbox_table` must fit too: checked here, not when SQL is first built."""
        for suffix in DERIVED_SUFFIXES:
            name = f"{self.outbox_table}{suffix}"
            if len(name.encode()) > MAX_IDENTIFIER_BYTES:
                longest = max(len(s) for s in DERIVED_SUFFIXES)
                raise ValueError(
                    f"outbox_table {self.outbox_table!r} is too long: the derived name {name!r} would be "
                    f"{len(name.encode())} bytes, over Postgres's {MAX_IDENTIFIER_BYTES}; use a table name of at "
                    f"most {MAX_IDENTIFIER_BYTES - longest} bytes"
                )
        return self

    @property
    def dead_letter_table(self) -> str:
        return check_identifier(f"{self.outbox_table}_dead_letter")

    @property
    def relay_status_table(self) -> str:
        """One row: what the leading relay is stalled on, if anything (`cdcpipe relay status` reads it)."""
        return check_identifier(f"{self.outbox_table}_relay_status")

    @property
    def sequence(self) -> str:
        return check_identifier(f"{self.outbox_table}_seq")

    @property
    def assign_function(self) -> str:
        """The trigger function that gives each row its `seq` under the outbox's lock."""
        return check_identifier(f"{self.outbox_table}_assign_seq")

    @property
    def notify_function(self) -> str:
        """The trigger function that wakes the relay on commit."""
        return check_identifier(f"{self.outbox_table}_notify")

    @property
    def notify_channel(self) -> str:
        """The LISTEN/NOTIFY channel an insert into the outbox signals (any text is a valid channel)."""
        return f"cdcpipe_outbox:{self.outbox_schema}.{self.outbox_table}"


class SchemaSettings(StageSettings):
    """What `cdcpipe schema apply` creates besides the outbox tables, and as whom (`[schema]`)."""

    toml_section: ClassVar[str] = "schema"

    pg_dsn: SecretStr = Field(
        SecretStr(DEFAULT_PG_DSN),
        description="libpq connection string of a role that may create schemas and roles",
    )
    writer_role: str = Field("cdcpipe_writer", description="role that may only insert into the outbox")
    relay_role: str = Field("cdcpipe_relay", description="role that may only read and remove outbox rows")
    writer_password: SecretStr | None = Field(None, description="if set, the writer role may log in with it")
    writer_password_file: Path | None = Field(
        None, description="file holding the writer role's password (`cdcpipe stack env` names the stack's one)"
    )
    relay_password: SecretStr | None = Field(None, description="if set, the relay role may log in with it")
    relay_password_file: Path | None = Field(
        None, description="file holding the relay role's password (`cdcpipe stack env` names the stack's one)"
    )
    monitor_role: str = Field(
        "cdcpipe_monitor",
        description="role of the metrics collector and `cdcpipe status`: pg_monitor, and SELECT on the outbox tables",
    )
    monitor_password: SecretStr | None = Field(None, description="if set, the monitor role may log in with it")
    monitor_password_file: Path | None = Field(
        None, description="file holding the monitor role's password (`cdcpipe stack env` names the stack's one)"
    )
    publication: str = Field("cdcpipe_outbox", description="publication of the outbox table for Debezium")
    heartbeat_table: str = Field("debezium_heartbeat", description="table Debezium's heartbeat query updates")
    signal_table: str = Field(
        "debezium_signal",
        description="table in the outbox schema through which the table connector is asked for incremental snapshots",
    )
    debezium_role: str = Field(
        "cdcpipe_debezium", description="role of the Debezium connectors: REPLICATION, SELECT on what they capture"
    )
    debezium_password: SecretStr | None = Field(None, description="if set, the Debezium role may log in with it")
    debezium_password_file: Path | None = Field(
        None, description="file holding the Debezium role's password (`cdcpipe stack env` names the stack's one)"
    )
    tables_publication: str = Field("cdcpipe_tables", description="publication of the captured business tables")
    captured_tables: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="business tables (schema.table) the table CDC connector captures, comma-separated"
    )

    replica_identity_full: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="captured tables (schema.table) to set REPLICA IDENTITY FULL on, so Debezium sends unchanged "
        "TOASTed values (large text, jsonb, bytea) in every update; costs WAL, comma-separated",
    )

    @field_validator(
        "writer_role",
        "relay_role",
        "monitor_role",
        "publication",
        "heartbeat_table",
        "signal_table",
        "debezium_role",
        "tables_publication",
    )
    @classmethod
    def _names(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("captured_tables", "replica_identity_full", mode="before")
    @classmethod
    def _tables(cls, value: object) -> object:
        value = split_list(value)
        for table in value if isinstance(value, list | tuple) else []:
            schema, dot, name = str(table).partition(".")
            if not dot:
                raise ValueError(f"{table!r}: name each captured table as schema.table")
            check_identifier(schema)
            check_identifier(name)
        return value

    def writer_secret(self) -> SecretStr | None:
        """The writer role's password, from the setting or the file it names."""
        return _secret(self.writer_password, self.writer_password_file)

    def relay_secret(self) -> SecretStr | None:
        """The relay role's password, from the setting or the file it names."""
        return _secret(self.relay_password, self.relay_password_file)

    def monitor_secret(self) -> SecretStr | None:
        """The monitor role's password, from the setting or the file it names."""
        return _secret(self.monitor_password, self.monitor_password_file)

    def debezium_secret(self) -> SecretStr | None:
        """The Debezium role's password, from the setting or the file it names."""
        return _secret(self.debezium_password, self.debezium_password_file)


def _secret(value: SecretStr | None, file: Path | None) -> SecretStr | None:
    """A password given as it is wins over the file named for it; neither: the role does not log in."""
    if value is not None:
        return value
    if file is not None:
        return SecretStr(file.read_text().strip())
    return None
