"""Who may do what on the local stack's Kafka: a SCRAM user per component, its ACLs, its client file.

The broker listens with TLS and SASL/SCRAM-SHA-512 only, and its authorizer denies what no ACL allows, as a
production cluster does. `admin` is the super user (the stack's own checks, `topics apply`, an operator's
shell). `relay`, `jobs` and `connect` get what they need here (consumer groups, Connect's internal topics);
what each may do on a data topic comes from the topic files (`producers`, `consumers`), applied by
`cdcpipe topics apply` with the topics themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from ground.kafka_client import KafkaSettings, write_properties
from infra.config import StackSettings
from infra.errors import StackError
from infra.stack_secrets import secret

ADMIN = "admin"
COMPONENTS = ("relay", "jobs", "connect")
MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192

# Consumer groups the jobs use (Spark's Kafka source, the reduce workers) all start with this
# (streaming_jobs.config.CONSUMER_GROUP_PREFIX); no other component's group does.
JOBS_GROUP_PREFIX = "cdcpipe-jobs-"
CONNECT_GROUP = "cdcpipe-connect"
CONNECT_INTERNAL_TOPIC_PREFIX = "_cdcpipe-connect-"


def tls_folder(settings: StackSettings) -> Path:
    """The stack's CA (`ca.pem`, what clients trust) and the broker's key and certificate."""
    return settings.state / "tls"


def password(settings: StackSettings, user: str) -> str:
    """A Kafka user's generated password (state/secrets/kafka_<user>_password)."""
    return secret(settings, f"kafka_{user}_password")


def client_file(settings: StackSettings, user: str) -> Path:
    """The client properties file of one user (librdkafka's format: `kcat -F` reads it as it is)."""
    return settings.state / "kafka-clients" / f"{user}.properties"


def write_client_files(settings: StackSettings) -> None:
    """Each user's client file, 0600 in a 0700 folder: what a component is configured with."""
    folder = settings.state / "kafka-clients"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for user in (ADMIN, *COMPONENTS):
        write_properties(
            client_file(settings, user),
            {
                "bootstrap.servers": settings.kafka_bootstrap,
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": MECHANISM,
                "sasl.username": user,
                "sasl.password": password(settings, user),
                "ssl.ca.location": str(tls_folder(settings) / "ca.pem"),
            },
        )


def client(settings: StackSettings, user: str = ADMIN) -> KafkaSettings:
    """The settings of one user's client file, whatever this shell's CDCPIPE_KAFKA_* variables say."""
    return KafkaSettings.from_file(client_file(settings, user))


def ensure_users_and_acls(settings: StackSettings) -> None:
    """Create (or reset to the stack's secrets) each component's user and grant its fixed ACLs. Idempotent."""
    admin = AdminClient(client(settings).client_config())
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            password(settings, user).encode(),
        )
        for user in COMPONENTS
    ]
    _wait_all(admin.alter_user_scram_credentials(upserts, request_timeout=30), "creating the SCRAM users")
    _wait_all(admin.create_acls(base_acls(), request_timeout=30), "granting the components' ACLs")


def base_acls() -> list[AclBinding]:
    """What a component needs besides its data topics: its consumer groups, Connect's own topics."""

    def allow(user: str, kind: ResourceType, name: str, pattern: ResourcePatternType, op: AclOperation) -> AclBinding:
        return AclBinding(kind, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)

    prefixed, literal = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    return [
        allow("jobs", ResourceType.GROUP, JOBS_GROUP_PREFIX, prefixed, AclOperation.READ),
        allow("connect", ResourceType.GROUP, CONNECT_GROUP, literal, AclOperation.READ),
        # Connect creates, configures, reads and writes its config, offset and status topics.
        allow("connect", ResourceType.TOPIC, CONNECT_INTERNAL_TOPIC_PREFIX, prefixed, AclOperation.ALL),
    ]


def _wait_all(futures: Mapping[Any, Future[Any]], what: str) -> None:
    for future in futures.values():
        try:
            future.result()
        except KafkaException as exc:
            raise StackError(f"kafka: {what} failed ({exc.args[0]}); see the broker's log") from exc
