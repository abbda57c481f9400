from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from ground.errors import ConfigError
from ground.kafka_client import KafkaSettings
from ground.settings import StageSettings, dsn_shown
from infra.config import StackSettings


def test_environment_overrides_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCPIPE_KAFKA_PORT", "19092")
    assert StackSettings.load().kafka_port == 19092


def test_file_section_is_read_and_environment_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "cdcpipe.toml"
    config.write_text('[stack]\nkafka_port = 29092\nconnect_port = 28083\n[jobs]\nspark_master = "local[1]"\n')
    monkeypatch.setenv("CDCPIPE_CONFIG", str(config))
    monkeypatch.setenv("CDCPIPE_CONNECT_PORT", "38083")
    settings = StackSettings.load()
    assert settings.kafka_port == 29092
    assert settings.connect_port == 38083


def test_a_section_renamed_since_is_refused_with_its_new_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "cdcpipe.toml"
    config.write_text('[spark]\nspark_master = "local[1]"\n')
    monkeypatch.setenv("CDCPIPE_CONFIG", str(config))
    with pytest.raises(ConfigError, match=r"the \[spark\] section is now \[jobs\]; rename it"):
        StackSettings.load()


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


SECRET = "s3cr3t-value-never-shown"  # noqa: S105 - a value to look for, not a credential


def _settings_models() -> list[type[StageSettings]]:
    from connectors.config import ConnectSettings
    from outbox_relay.config import RelaySettings
    from schemas.config import OutboxNames, SchemaSettings
    from schemas.topics import TopicSettings
    from streaming_jobs.config import JobsSettings
    from streaming_jobs.lake.store import ObjectStoreSettings

    return [
        StackSettings,
        KafkaSettings,
        ConnectSettings,
        RelaySettings,
        OutboxNames,
        SchemaSettings,
        TopicSettings,
        JobsSettings,
        ObjectStoreSettings,
    ]


def _secret_variables(model: type[BaseModel]) -> list[str]:
    """Every secret setting of a model and of the models nested in it, as its environment variable."""
    found = []
    for name, field in model.model_fields.items():
        if "SecretStr" in str(field.annotation):
            found.append(f"CDCPIPE_{name.upper()}")
        elif isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            found += _secret_variables(field.annotation)
    return found


@pytest.mark.parametrize("model", _settings_models(), ids=lambda m: m.__name__)
def test_no_validation_error_of_any_settings_model_shows_a_secret(
    model: type[StageSettings], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every secret set; then a misspelt secret, an invalid secret, and an invalid plain setting: none echoes one."""
    variables = _secret_variables(model)
    for variable in variables:
        monkeypatch.setenv(variable, f"{SECRET}-{variable}")
    config = tmp_path / "cdcpipe.toml"
    # A misspelt secret in the settings file, and a secret of the wrong type: both rejected, neither shown.
    section = model.toml_section or "x"
    wrong_type = next((v.removeprefix("CDCPIPE_").lower() for v in variables if v.count("_") > 1), None)
    config.write_text(
        f'[{section}]\npasword = "{SECRET}-misspelt"\n'
        + (f'{wrong_type} = ["{SECRET}-wrong-type"]\n' if wrong_type and wrong_type in model.model_fields else "")
    )
    monkeypatch.setenv("CDCPIPE_CONFIG", str(config))
    with pytest.raises(ConfigError) as raised:
        model.load()
    message = str(raised.value)
    assert SECRET not in message, message
    assert "pasword" in message, "the message still names the setting to fix"


def test_a_whole_model_error_says_what_and_how_without_a_dump(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from connectors.config import ConnectSettings

    password_file = tmp_path / "password"
    password_file.write_text(SECRET)
    monkeypatch.setenv("CDCPIPE_CONNECT_PASSWORD", SECRET)
    monkeypatch.setenv("CDCPIPE_CONNECT_PASSWORD_FILE", str(password_file))
    monkeypatch.setenv("CDCPIPE_PG_DSN", f"postgresql://postgres:{SECRET}@127.0.0.1/cdcpipe")
    with pytest.raises(ConfigError) as raised:
        ConnectSettings.load()
    message = str(raised.value)
    assert SECRET not in message
    assert message.startswith("invalid settings: give the Connect password once: CDCPIPE_CONNECT_PASSWORD or"), message
    assert "{" not in message, "no dump of the model"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://mon:pw-1@db.example:6543/app?sslmode=require", "postgresql://mon@db.example:6543/app"),
        ("host=db user=mon password=pw-1 dbname=app options='-c search_path=x'", "postgresql://mon@db:5432/app"),
        ("postgresql:///app", "postgresql://localhost:5432/app"),
        ("host=db password='unterminated", "(a connection string libpq cannot read)"),
    ],
)
def test_a_dsn_is_shown_by_where_and_as_whom_only(dsn: str, shown: str) -> None:
    assert dsn_shown(dsn) == shown
    assert "pw-1" not in dsn_shown(dsn)
