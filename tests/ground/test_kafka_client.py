"""One Kafka client configuration for every component: librdkafka's names and the Java client's."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from ground import kafka_client
from ground.errors import ConfigError
from ground.kafka_client import KafkaSettings, read_properties, report_error, write_properties
from outbox_relay.config import RelaySettings
from streaming_jobs.config import JobsSettings

SECURED = {
    "bootstrap.servers": "broker:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "relay",
    "sasl.password": 'se"cr\\et',
}


@pytest.fixture
def client_file(tmp_path: Path) -> Path:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    path = tmp_path / "client.properties"
    write_properties(path, {**SECURED, "ssl.ca.location": str(ca)})
    return path


@pytest.fixture(autouse=True)
def _no_kafka_settings_from_this_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(KafkaSettings.model_fields):
        monkeypatch.delenv(f"CDCPIPE_{name.upper()}", raising=False)
    for name in ("CDCPIPE_CONFIG", "CDCPIPE_JOBS_KAFKA_CONFIG", "CDCPIPE_RELAY_KAFKA_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CDCPIPE_ALLOW_KAFKA_SUPERUSER", raising=False)
    monkeypatch.chdir("/")


def test_a_client_file_is_written_for_its_owner_only_and_read_back(client_file: Path) -> None:
    assert client_file.stat().st_mode & 0o777 == 0o600
    assert read_properties(client_file)["sasl.password"] == 'se"cr\\et'


def reports_for(callback: object) -> object:
    """The settings an error callback explains errors with: it must be report_error bound to them."""
    assert isinstance(callback, functools.partial)
    assert callback.func is report_error
    return callback.keywords["settings"]


def test_the_file_configures_librdkafka_as_it_is(client_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCPIPE_KAFKA_CONFIG", str(client_file))
    settings = KafkaSettings.load()
    config = settings.client_config(acks="all")
    assert reports_for(config.pop("error_cb")) == settings
    assert config.pop("logger") is kafka_client.LIBRDKAFKA_LOG  # librdkafka's own lines never reach a terminal
    assert config == {
        **SECURED,
        "ssl.ca.location": str(client_file.with_name("ca.pem")),
        "ssl.endpoint.identification.algorithm": "https",
        "acks": "all",
    }


def test_a_variable_wins_over_the_file(client_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCPIPE_KAFKA_CONFIG", str(client_file))
    monkeypatch.setenv("CDCPIPE_KAFKA_BOOTSTRAP", "other:9094")
    assert KafkaSettings.load().kafka_bootstrap == "other:9094"
    # A file read on its own ignores the shell's variables (the stack's admin is the admin).
    assert KafkaSettings.from_file(client_file).kafka_bootstrap == "broker:9093"


def test_every_stage_reads_the_same_kafka_settings(client_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCPIPE_KAFKA_CONFIG", str(client_file))
    assert RelaySettings.load().kafka.client_config()["sasl.username"] == "relay"


def test_the_java_client_gets_a_jaas_login_and_the_ca_inline(client_file: Path) -> None:
    options = KafkaSettings.from_file(client_file).spark_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="relay" password="se\\"cr\\\\et";'
    )
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.certificates"].startswith("-----BEGIN CERTIFICATE-----")
    assert "kafka.ssl.truststore.location" not in options, "an executor elsewhere has no such file"


def test_a_plaintext_cluster_needs_only_its_address() -> None:
    settings = KafkaSettings(kafka_bootstrap="h:9092")
    config = settings.client_config()
    assert reports_for(config.pop("error_cb")) == settings
    assert config.pop("logger") is kafka_client.LIBRDKAFKA_LOG  # librdkafka's own lines never reach a terminal
    assert config == {"bootstrap.servers": "h:9092", "security.protocol": "PLAINTEXT"}
    assert settings.spark_options() == {"kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "PLAINTEXT"}


def test_mutual_tls_gives_the_java_client_a_pem_key_store(tmp_path: Path) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("CERT")
    key.write_text("KEY")
    settings = KafkaSettings(
        kafka_security_protocol="SSL", kafka_ssl_certificate_location=cert, kafka_ssl_key_location=key
    )
    assert settings.client_config()["ssl.key.location"] == str(key)
    java = settings.java_properties()
    assert (java["ssl.keystore.type"], java["ssl.keystore.certificate.chain"], java["ssl.keystore.key"]) == (
        "PEM",
        "CERT",
        "KEY",
    )


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n", "needs sasl.mechanism, sasl.username and"),
        ("sasl.kerberos.service.name=kafka\n", "'sasl.kerberos.service.name' is not one cdcpipe passes on"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=a\nsasl.password=b\n", "GSSAPI"),
        ("ssl.ca.location=/no/such/ca.pem\nsecurity.protocol=SSL\n", "/no/such/ca.pem: no such file"),
        ("just a line\n", "expected key=value"),
    ],
)
def test_a_bad_client_file_is_refused_with_what_to_fix(tmp_path: Path, lines: str, says: str) -> None:
    path = tmp_path / "bad.properties"
    path.write_text(lines)
    with pytest.raises(ConfigError, match=None) as caught:
        KafkaSettings.load(kafka_config=path)
    assert says in str(caught.value)
    assert 'se"cr' not in str(caught.value)


def test_a_password_is_never_shown(client_file: Path) -> None:
    settings = KafkaSettings.from_file(client_file)
    assert 'se"cr' not in repr(settings)
    assert 'se"cr' not in str(settings)


def test_an_authentication_failure_is_said_with_the_fix_once_not_per_retry(caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka import KafkaError

    error = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials")
    for _ in range(5):
        report_error(error)
    said = [r.getMessage() for r in caplog.records if r.name == "cdcpipe.kafka"]
    assert len(said) == 1
    assert "authentication failed" in said[0]
    assert "CDCPIPE_KAFKA_CONFIG" in said[0]
    report_error(KafkaError(KafkaError._TRANSPORT, "broker down"))  # librdkafka retries that: not news
    assert len([r for r in caplog.records if r.name == "cdcpipe.kafka"]) == 1


def test_names_are_taken_in_any_case_as_librdkafka_takes_them(tmp_path: Path) -> None:
    path = tmp_path / "lower.properties"
    path.write_text(
        "security.protocol=sasl_plaintext\nsasl.mechanisms=scram-sha-256\nsasl.username=u\nsasl.password=p\n"
    )
    settings = KafkaSettings.from_file(path)
    assert (settings.kafka_security_protocol, settings.kafka_sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-256")


@pytest.mark.parametrize(("settings", "variable"), [(RelaySettings, "RELAY"), (JobsSettings, "JOBS")])
def test_a_components_own_file_wins_over_the_shells_admin_file(
    settings: type[RelaySettings | JobsSettings], variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `stack env` exports: the admin's file for the CLI, each component's own beside it.
    files = {}
    for user in ("admin", variable.lower()):
        files[user] = tmp_path / f"{user}.properties"
        write_properties(files[user], {**SECURED, "sasl.username": user})
    monkeypatch.setenv("CDCPIPE_KAFKA_CONFIG", str(files["admin"]))
    assert settings.load().kafka.kafka_sasl_username == "admin"
    monkeypatch.setenv(f"CDCPIPE_{variable}_KAFKA_CONFIG", str(files[variable.lower()]))
    assert settings.load().kafka.kafka_sasl_username == variable.lower()
    # A variable given explicitly still wins over either file.
    monkeypatch.setenv("CDCPIPE_KAFKA_SASL_USERNAME", "someone")
    assert settings.load().kafka.kafka_sasl_username == "someone"


def test_a_job_started_with_superuser_leave_passes_it_to_its_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "CDCPIPE_ALLOW_KAFKA_SUPERUSER" not in JobsSettings.load().environment()
    allowed = JobsSettings.load(allow_kafka_superuser=True)
    assert allowed.environment()["CDCPIPE_ALLOW_KAFKA_SUPERUSER"] == "true"
    monkeypatch.setenv("CDCPIPE_ALLOW_KAFKA_SUPERUSER", "true")
    assert JobsSettings.load().allow_kafka_superuser
