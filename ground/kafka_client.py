"""How every Kafka client of cdcpipe connects: one `[kafka]` section, or a client properties file, for all.

The relay's producer, the admin clients, the reduce workers (librdkafka) and Spark's Kafka source (the Java
client) read the same settings. A properties file in librdkafka's format (`CDCPIPE_KAFKA_CONFIG`, what
`kcat -F` reads) fills every setting not given as a `CDCPIPE_KAFKA_*` variable or in `[kafka]`; the Java
client gets the same values under its own names (`java_properties`).
"""

from __future__ import annotations

import functools
import logging
import socket
import ssl
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from confluent_kafka import KafkaError
from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from ground.errors import ConfigError
from ground.private_files import write_private
from ground.settings import StageSettings

# librdkafka's name of each setting read from a properties file, and the field it fills.
PROPERTIES = {
    "bootstrap.servers": "kafka_bootstrap",
    "security.protocol": "kafka_security_protocol",
    "sasl.mechanism": "kafka_sasl_mechanism",
    "sasl.mechanisms": "kafka_sasl_mechanism",  # librdkafka's older spelling
    "sasl.username": "kafka_sasl_username",
    "sasl.password": "kafka_sasl_password",
    "ssl.ca.location": "kafka_ssl_ca_location",
    "ssl.certificate.location": "kafka_ssl_certificate_location",
    "ssl.key.location": "kafka_ssl_key_location",
    "ssl.key.password": "kafka_ssl_key_password",
    "ssl.endpoint.identification.algorithm": "kafka_ssl_endpoint_identification_algorithm",
}

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# What Spark redacts from logs, the UI and plans: its default, plus the Java client's inline private key.
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|keystore"

# Librdkafka's own log lines (`%3|...|FAIL|...`) go to this silent logger, not the user's terminal: `error_cb`
# (report_error) says what a user must fix, once, with the fix. A service passes its own logger instead.
LIBRDKAFKA_LOG = logging.getLogger("cdcpipe.librdkafka")
LIBRDKAFKA_LOG.propagate = False
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())


class KafkaSettings(StageSettings):
    """The cluster every component talks to and how it authenticates (`[kafka]`)."""

    toml_section: ClassVar[str] = "kafka"

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    kafka_config: Path | None = Field(
        None,
        description="client properties file in librdkafka's format (what `kcat -F` reads): fills the "
        "CDCPIPE_KAFKA_* settings not set otherwise",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="security.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="sasl.mechanism with a SASL_* protocol: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
    )
    kafka_sasl_username: str | None = Field(None, description="SASL user name")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (secret: never printed)")
    kafka_ssl_ca_location: Path | None = Field(
        None, description="PEM file of the CA certificates the broker's certificate is checked against"
    )
    kafka_ssl_certificate_location: Path | None = Field(
        None, description="PEM file of the client certificate (mutual TLS)"
    )
    kafka_ssl_key_location: Path | None = Field(None, description="PEM file of the client's private key (mutual TLS)")
    kafka_ssl_key_password: SecretStr | None = Field(None, description="password of the client's private key")
    kafka_ssl_endpoint_identification_algorithm: Literal["https", "none"] = Field(
        "https", description="check the broker's host name against its certificate (https) or not (none)"
    )

    @model_validator(mode="before")
    @classmethod
    def _from_properties_file(cls, data: Any) -> Any:
        """Settings given explicitly win; the properties file fills the rest; names in any case."""
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        path = Path(data["kafka_config"]) if data.get("kafka_config") else None
        for key, value in read_properties(path).items() if path else ():
            field = PROPERTIES.get(key)
            if field is None:
                raise ConfigError(
                    f"{path}: Kafka client setting {key!r} is not one cdcpipe passes on (it must give each setting "
                    f"to librdkafka and to Spark's Java client alike); supported: {', '.join(sorted(PROPERTIES))}"
                )
            filled.setdefault(field, value)
        for field in ("kafka_security_protocol", "kafka_sasl_mechanism"):
            if isinstance(filled.get(field), str):
                filled[field] = filled[field].upper()  # librdkafka takes `sasl_ssl` as well
        return filled

    @model_validator(mode="after")
    def _complete(self) -> KafkaSettings:
        sasl = self.kafka_security_protocol.startswith("SASL_")
        if sasl and not (self.kafka_sasl_mechanism and self.kafka_sasl_username and self.kafka_sasl_password):
            raise ValueError(
                f"security.protocol {self.kafka_security_protocol} needs sasl.mechanism, sasl.username and "
                "sasl.password (CDCPIPE_KAFKA_SASL_*, or in the CDCPIPE_KAFKA_CONFIG file)"
            )
        if (self.kafka_ssl_certificate_location is None) != (self.kafka_ssl_key_location is None):
            raise ValueError("mutual TLS needs both ssl.certificate.location and ssl.key.location")
        for name in ("kafka_ssl_ca_location", "kafka_ssl_certificate_location", "kafka_ssl_key_location"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name.removeprefix('kafka_').replace('_', '.')} {path}: no such file")
        return self

    @classmethod
    def from_file(cls, path: Path) -> KafkaSettings:
        """The settings of one client properties file alone: no CDCPIPE_KAFKA_* variable, no settings file."""
        try:
            return _FileOnly(kafka_config=path)
        except ValidationError as exc:
            raise ConfigError(f"{path}: {exc.errors()[0]['msg']}") from exc

    def environment(self) -> dict[str, str]:
        """These settings as `CDCPIPE_KAFKA_*` variables, for a child process (secrets included: not argv)."""
        values = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name == "kafka_config" or value is None:
                continue
            shown = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
            values[f"CDCPIPE_{name.upper()}"] = shown
        return values

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """Librdkafka's configuration (confluent-kafka's Producer, Consumer, AdminClient), plus `extra`."""
        return {
            **self.properties(),
            "error_cb": functools.partial(report_error, settings=self),
            "logger": LIBRDKAFKA_LOG,
            **extra,
        }

    def properties(self) -> dict[str, str]:
        """The settings under librdkafka's names, strings only (what a client file holds; JSON can carry it)."""
        config: dict[str, str] = {
            "bootstrap.servers": self.kafka_bootstrap,
            "security.protocol": self.kafka_security_protocol,
        }
        sasl = self._sasl()
        if sasl is not None:
            config["sasl.mechanism"], config["sasl.username"], config["sasl.password"] = sasl
        if self.kafka_security_protocol.endswith("SSL"):
            config["ssl.endpoint.identification.algorithm"] = self.kafka_ssl_endpoint_identification_algorithm
            if self.kafka_ssl_ca_location is not None:
                config["ssl.ca.location"] = str(self.kafka_ssl_ca_location)
            if self.kafka_ssl_certificate_location is not None:
                config["ssl.certificate.location"] = str(self.kafka_ssl_certificate_location)
                config["ssl.key.location"] = str(self.kafka_ssl_key_location)
            if self.kafka_ssl_key_password is not None:
                config["ssl.key.password"] = self.kafka_ssl_key_password.get_secret_value()
        return config

    def _sasl(self) -> tuple[str, str, str] | None:
        """(mechanism, user name, password) with a SASL protocol (all three are checked at load)."""
        if not self.kafka_security_protocol.startswith("SASL_"):
            return None
        if not (self.kafka_sasl_mechanism and self.kafka_sasl_username and self.kafka_sasl_password):
            raise ConfigError(
                f"security.protocol {self.kafka_security_protocol} needs sasl.mechanism/username/password"
            )
        return self.kafka_sasl_mechanism, self.kafka_sasl_username, self.kafka_sasl_password.get_secret_value()

    def java_properties(self) -> dict[str, str]:
        """The same settings under the Java client's names (Spark's Kafka source, a Connect worker).

        Certificates go inline (PEM text, not a path), so an executor on another machine needs no file.
        """
        props = {
            "bootstrap.servers": self.kafka_bootstrap,
            "security.protocol": self.kafka_security_protocol,
        }
        sasl = self._sasl()
        if sasl is not None:
            mechanism, username, secret = sasl
            props["sasl.mechanism"] = mechanism
            props["sasl.jaas.config"] = (
                f'{LOGIN_MODULES[mechanism]} required username="{_jaas_quoted(username)}" '
                f'password="{_jaas_quoted(secret)}";'
            )
        if self.kafka_security_protocol.endswith("SSL"):
            algorithm = self.kafka_ssl_endpoint_identification_algorithm
            props["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
            if self.kafka_ssl_ca_location is not None:
                props["ssl.truststore.type"] = "PEM"
                props["ssl.truststore.certificates"] = self.kafka_ssl_ca_location.read_text()
            if self.kafka_ssl_certificate_location is not None and self.kafka_ssl_key_location is not None:
                props["ssl.keystore.type"] = "PEM"
                props["ssl.keystore.certificate.chain"] = self.kafka_ssl_certificate_location.read_text()
                props["ssl.keystore.key"] = self.kafka_ssl_key_location.read_text()
            if self.kafka_ssl_key_password is not None:
                props["ssl.key.password"] = self.kafka_ssl_key_password.get_secret_value()
        return props

    def spark_options(self) -> dict[str, str]:
        """Spark's Kafka source and sink options: every Java client setting prefixed with `kafka.`."""
        return {f"kafka.{key}": value for key, value in self.java_properties().items()}


class _FileOnly(KafkaSettings):
    """Kafka settings read from the arguments (a properties file) and nothing else."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


_log = logging.getLogger("cdcpipe.kafka")
_last_said: dict[str, float] = {}  # each kind of problem explained, and when it was last logged
_explained: dict[str, str] = {}  # each kind's explanation as last logged
_latest: list[str] = []  # the problem explained last, for the error a failed request raises
REPEAT_AFTER_S = 30.0


def with_own_client_file(data: Any, field: str) -> Any:
    """A stage's settings `data` whose `kafka` comes from the stage's own client file (`field`) when it names one.

    A component's own file wins over CDCPIPE_KAFKA_CONFIG, which an operator's shell points at the admin's; explicit
    CDCPIPE_KAFKA_* variables still win over the file, as they do over CDCPIPE_KAFKA_CONFIG's.
    """
    if isinstance(data, dict) and data.get(field) and "kafka" not in data:
        return {**data, "kafka": KafkaSettings.load(kafka_config=data[field])}
    return data


def explain(error: KafkaError, settings: KafkaSettings | None = None) -> str | None:
    """What a user must fix for a client error, or None for one librdkafka retries by itself.

    Given the client's settings, a refused certificate is looked at again to say why (librdkafka only says
    "certificate verify failed").
    """
    code = error.code()
    if code == KafkaError._AUTHENTICATION:
        return (
            f"authentication failed ({error.str()}); check the user name, password and mechanism in "
            "CDCPIPE_KAFKA_SASL_* or the CDCPIPE_KAFKA_CONFIG file"
        )
    if code == KafkaError._SSL or "certificate verify failed" in error.str():
        reason = tls_refusal(settings) if settings else None
        return (
            f"TLS handshake failed{': ' + reason if reason else ''} ({error.str()}); the broker's certificate must "
            "be valid (not expired), signed by a CA in ssl.ca.location (CDCPIPE_KAFKA_SSL_CA_LOCATION) and name the "
            "host the client dials"
        )
    return None


def tls_refusal(settings: KafkaSettings) -> str | None:
    """OpenSSL's reason for refusing the first bootstrap server's certificate ("certificate has expired"...).

    A TLS handshake of our own, checked as librdkafka checks it; None if it succeeds or the server is not reached.
    """
    host, _, port = settings.kafka_bootstrap.split(",")[0].strip().rpartition(":")
    if not host or not port.isdigit():
        return None
    context = ssl.create_default_context(
        cafile=str(settings.kafka_ssl_ca_location) if settings.kafka_ssl_ca_location else None
    )
    context.check_hostname = settings.kafka_ssl_endpoint_identification_algorithm == "https"
    try:
        with (
            socket.create_connection((host, int(port)), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname=host),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message)
    except OSError:
        return None


def report_error(error: KafkaError, settings: KafkaSettings | None = None) -> None:
    """Librdkafka's error callback: an error a user must fix is logged with the fix (once per 30 s)."""
    if explain(error) is None:
        return
    now, kind = time.monotonic(), error.name()  # the message varies per attempt ("after 308ms"); the kind not
    if now - _last_said.get(kind, -REPEAT_AFTER_S) >= REPEAT_AFTER_S:
        _last_said[kind] = now
        _explained[kind] = explain(error, settings) or ""
        _log.error("kafka: %s", _explained[kind])
    _latest[:] = [_explained[kind]]


def unreachable_reason(client: Any, exc: Exception) -> str:
    """Why a request of `client` (an AdminClient, Producer...) failed, with the fix, for the error to raise.

    librdkafka reports an authentication or TLS failure through the error callback, served by poll(), while
    the request itself only times out: poll first, and prefer what the callback explained.
    """
    _latest.clear()
    client.poll(0.5)
    if _latest:
        return _latest[0]
    error = exc.args[0] if exc.args else exc
    reason = error.str() if isinstance(error, KafkaError) else str(error)
    return f"{reason}; check CDCPIPE_KAFKA_BOOTSTRAP (or the CDCPIPE_KAFKA_CONFIG file) and that the broker is up"


def read_properties(path: Path) -> dict[str, str]:
    """`key=value` lines, `#` comments: librdkafka's (and kcat's) client properties format."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"CDCPIPE_KAFKA_CONFIG={path}: cannot read it ({exc.strerror}); point it at a file") from exc
    values = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line[:40]!r}")
        values[key.strip()] = value.strip()
    return values


def write_properties(path: Path, values: dict[str, str]) -> None:
    """A client properties file any librdkafka tool reads (`kcat -F`); created 0600, it holds a password."""
    write_private(path, "".join(f"{key}={value}\n" for key, value in values.items()))


def _jaas_quoted(value: str) -> str:
    """A value inside JAAS's double quotes: backslash and quote escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
