from __future__ import annotations

from pathlib import Path

import pytest

from cdcpipe.errors import ConfigError
from infra.config import StackSettings


def test_environment_overrides_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCPIPE_KAFKA_PORT", "19092")
    assert StackSettings.load().kafka_port == 19092


def test_file_section_is_read_and_environment_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "cdcpipe.toml"
    config.write_text('[stack]\nkafka_port = 29092\nconnect_port = 28083\n[spark]\nspark_master = "local[1]"\n')
    monkeypatch.setenv("CDCPIPE_CONFIG", str(config))
    monkeypatch.setenv("CDCPIPE_CONNECT_PORT", "38083")
    settings = StackSettings.load()
    assert settings.kafka_port == 29092
    assert settings.connect_port == 38083


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCPIPE_PG_PORT", "not-a-port")
    with pytest.raises(ConfigError, match="CDCPIPE_PG_PORT"):
        StackSettings.load()


def test_unknown_key_in_file_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "cdcpipe.toml"
    config.write_text("[stack]\nkafka_prot = 1\n")
    monkeypatch.setenv("CDCPIPE_CONFIG", str(config))
    with pytest.raises(ConfigError, match="kafka_prot"):
        StackSettings.load()


def test_missing_config_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CDCPIPE_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="no such file"):
        StackSettings.load()


def test_settings_are_frozen() -> None:
    settings = StackSettings.load()
    with pytest.raises(ValueError, match="frozen"):
        settings.kafka_port = 1  # type: ignore[misc]


def test_help_lists_each_variable() -> None:
    variables = [row[0] for row in StackSettings.describe()]
    assert "CDCPIPE_PG_PORT" in variables
    assert "CDCPIPE_HOME" in variables


def test_lists_come_from_the_environment_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    from outbox_relay.config import RelaySettings
    from schemas.config import SchemaSettings

    monkeypatch.setenv("CDCPIPE_CAPTURED_TABLES", "public.accounts, sales.orders")
    monkeypatch.setenv("CDCPIPE_ALLOWED_AGGREGATE_TYPES", "account,transfer")
    assert SchemaSettings.load().captured_tables == ("public.accounts", "sales.orders")
    assert RelaySettings.load().allowed_aggregate_types == frozenset({"account", "transfer"})


def test_a_captured_table_needs_its_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas.config import SchemaSettings

    monkeypatch.setenv("CDCPIPE_CAPTURED_TABLES", "accounts")
    with pytest.raises(ConfigError, match=r"schema\.table"):
        SchemaSettings.load()


def test_a_secret_is_never_echoed_in_an_error() -> None:
    from outbox_relay.config import RelaySettings

    with pytest.raises(ConfigError) as raised:
        RelaySettings.load(pg_dsn=12345, batch_size=0)
    assert "12345" not in str(raised.value)
    assert "CDCPIPE_BATCH_SIZE" in str(raised.value)
