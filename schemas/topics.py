"""Versioned topic files (`*.toml` in `CDCPIPE_TOPICS_DIR`; the demo's: `examples/topics/`) and `cdcpipe topics apply`.

The cluster creates no topic on its own (`auto.create.topics.enable=false`, as in production): every topic
the relay, the connectors' EventRouter and the jobs use is declared in a file and created by `apply`.

A file holds `[defaults]` (partitions, replication_factor, config) and `[[topic]]` entries (name, and any
default overridden). `apply` creates missing topics and sets the declared config keys on existing ones. It
never changes an existing topic's partition count: adding partitions moves keys, and with them the order
of each aggregate's events; it reports the difference instead.
"""

from __future__ import annotations

import re
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from pydantic import Field

from ground.kafka_client import KafkaSettings, unreachable_reason
from ground.settings import StageSettings
from schemas.errors import TopicError

LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
PRINCIPAL = re.compile(r"[A-Za-z]+:[^\s,;]+")
TOPIC_KEYS = ("name", "partitions", "replication_factor", "config", "producers", "consumers")
# What each role may do on its topic: a producer writes (and reads its metadata and limits), a consumer reads.
ROLE_OPERATIONS = {
    # DESCRIBE_CONFIGS: the relay reads a topic's max.message.bytes to tell which record is too large.
    "producers": (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS),
    "consumers": (AclOperation.READ, AclOperation.DESCRIBE),
    "creators": (AclOperation.CREATE,),
}
# How long `apply` waits for the broker to serve what the controller committed (KRaft propagates a new topic
# or ACL to the brokers a moment after CreateTopics/CreateAcls return).
VISIBLE_WITHIN_S = 30.0


class TopicSettings(StageSettings):
    """Where the topic files are and which cluster they go to (`[topics]`)."""

    toml_section: ClassVar[str] = "topics"

    kafka: KafkaSettings = Field(default_factory=KafkaSettings.load, description="the cluster ([kafka])")
    topics_dir: Path | None = Field(
        None, description="folder of topic files (*.toml), yours: cdcpipe ships none (the demo's: examples/topics)"
    )


@dataclass(frozen=True)
class TopicSpec:
    """One declared topic. `-1` for partitions or replication_factor takes the cluster's default."""

    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)
    source: str = ""
    producers: tuple[str, ...] = ()  # principals ("User:relay") that may write it
    consumers: tuple[str, ...] = ()  # principals that may read it


@dataclass(frozen=True)
class PrefixGrant:
    """ACLs on every topic whose name starts with `prefix`.

    For the topics a connector names and creates itself: Debezium's `<topic.prefix>.<schema>.<table>` and its
    heartbeat topic.
    """

    prefix: str
    producers: tuple[str, ...] = ()
    consumers: tuple[str, ...] = ()
    creators: tuple[str, ...] = ()  # may create such topics (Connect's topic.creation)
    source: str = ""


@dataclass(frozen=True)
class Declared:
    """What a folder of topic files declares."""

    topics: list[TopicSpec]
    prefixes: list[PrefixGrant]


def load(folder: Path | None) -> Declared:
    """Every topic and prefix declared in `folder/*.toml`, validated; a name declared twice is an error."""
    if folder is None:
        raise TopicError(
            "no topic files: set CDCPIPE_TOPICS_DIR (or topics_dir in [topics]) to your folder of *.toml "
            "(examples/topics holds the demo's)"
        )
    if not folder.is_dir():
        raise TopicError(f"topic files: {folder} is not a folder; set CDCPIPE_TOPICS_DIR to the folder of *.toml")
    specs: dict[str, TopicSpec] = {}
    prefixes: list[PrefixGrant] = []
    for path in sorted(folder.glob("*.toml")):
        topics, grants = _load_file(path)
        for spec in topics:
            if spec.name in specs:
                raise TopicError(f"{path}: topic {spec.name} is declared in {specs[spec.name].source} already")
            specs[spec.name] = spec
        prefixes += grants
    return Declared(list(specs.values()), prefixes)


def _load_file(path: Path) -> tuple[list[TopicSpec], list[PrefixGrant]]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TopicError(f"{path}: not valid TOML ({exc})") from exc
    unknown = set(data) - {"defaults", "topic", "prefix"}
    if unknown:
        raise TopicError(
            f"{path}: unknown sections {sorted(unknown)}; a topic file has [defaults], [[topic]] and [[prefix]]"
        )
    defaults = data.get("defaults", {})
    entries = data.get("topic", [])
    prefixes = data.get("prefix", [])
    if not isinstance(defaults, dict) or not isinstance(entries, list) or not isinstance(prefixes, list):
        raise TopicError(f"{path}: [defaults] must be a table, topics [[topic]] and prefixes [[prefix]] entries")
    topics = [_spec(path, i, {**defaults, **entry}, defaults.get("config", {})) for i, entry in enumerate(entries)]
    return topics, [_prefix(path, i, entry) for i, entry in enumerate(prefixes)]


def _prefix(path: Path, index: int, entry: dict[str, Any]) -> PrefixGrant:
    where = f"{path}: prefix #{index + 1}"
    unknown = set(entry) - {"name", "producers", "consumers", "creators"}
    if unknown:
        raise TopicError(f"{where}: unknown keys {sorted(unknown)} (name, producers, consumers, creators)")
    name = entry.get("name")
    if not isinstance(name, str) or not LEGAL_TOPIC.fullmatch(name):
        raise TopicError(f"{where}: name {name!r} is not the start of a legal topic name")
    roles = {key: _principals(f"{where} ({name})", entry, key) for key in ("producers", "consumers", "creators")}
    return PrefixGrant(name, roles["producers"], roles["consumers"], roles["creators"], str(path))


def _principals(where: str, entry: dict[str, Any], key: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and PRINCIPAL.fullmatch(v) for v in value):
        raise TopicError(f'{where}: {key} = {value!r}: give a list of principals, like ["User:relay"]')
    return tuple(value)


def _spec(path: Path, index: int, entry: dict[str, Any], default_config: dict[str, Any]) -> TopicSpec:
    where = f"{path}: topic #{index + 1}"
    unknown = set(entry) - set(TOPIC_KEYS)
    if unknown:
        raise TopicError(f"{where}: unknown keys {sorted(unknown)} ({', '.join(TOPIC_KEYS)})")
    name = entry.get("name")
    if not isinstance(name, str) or not LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
        raise TopicError(f"{where}: name {name!r} is not a legal topic name (letters, digits, '.', '_', '-')")
    counts = {}
    for key in ("partitions", "replication_factor"):
        value = entry.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not (value >= 1 or value == -1):
            raise TopicError(f"{where} ({name}): {key} = {value!r}: give a whole number >= 1, or -1 (the default)")
        counts[key] = value
    config = {**default_config, **entry.get("config", {})}
    if not all(isinstance(v, str) for v in config.values()):
        raise TopicError(f'{where} ({name}): config values are strings, as Kafka takes them ("604800000")')
    principals = {key: _principals(f"{where} ({name})", entry, key) for key in ("producers", "consumers")}
    return TopicSpec(
        name,
        counts["partitions"],
        counts["replication_factor"],
        config,
        str(path),
        principals["producers"],
        principals["consumers"],
    )


@dataclass(frozen=True)
class Applied:
    """What `apply` did to one topic (created, configured, unchanged or partitions-differ) or prefix (granted)."""

    name: str
    action: str
    detail: str = ""
    acls: str = ""  # the ACLs granted, or why none were


def apply(
    admin_config: dict[str, Any],
    specs: Iterable[TopicSpec],
    prefixes: Iterable[PrefixGrant] = (),
    *,
    dry_run: bool = False,
) -> list[Applied]:
    """Create the missing topics, set the declared config keys on the others, grant the declared ACLs."""
    prefixes = list(prefixes)
    admin = AdminClient(admin_config)
    specs = list(specs)
    try:
        metadata = admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise TopicError(f"cannot read Kafka's topics: {unreachable_reason(admin, exc)}") from exc
    missing = [s for s in specs if s.name not in metadata.topics]
    # Kafka refuses such a topic too, but only when asked to create it, after the topics before it were made.
    too_many = [s for s in missing if s.replication_factor > len(metadata.brokers)]
    if too_many:
        raise TopicError(
            "; ".join(
                f"topic {s.name}{f' ({s.source})' if s.source else ''} asks for {s.replication_factor} replicas"
                for s in too_many
            )
            + f", and the cluster has {len(metadata.brokers)} broker(s) up: a topic cannot have more replicas than "
            "brokers. Nothing was created. Lower replication_factor in the file (-1 takes the cluster's default), or "
            "bring the brokers up"
        )
    results: dict[str, Applied] = {}
    if missing and not dry_run:
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, s.replication_factor, config=s.config) for s in missing],
            request_timeout=30,
        )
        for spec in missing:
            try:
                futures[spec.name].result()
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicError(f"creating topic {spec.name} ({spec.source}) failed: {error.str()}") from exc
    for spec in missing:
        results[spec.name] = Applied(spec.name, "created", f"{spec.partitions} partitions")
    for spec in specs:
        if spec.name in results:
            continue
        partitions = len(metadata.topics[spec.name].partitions)
        note = ""
        if spec.partitions != -1 and spec.partitions != partitions:
            note = (
                f"has {partitions} partitions, the file says {spec.partitions}: left as it is (adding partitions "
                "moves keys and breaks each key's order; create a new topic and move consumers to change it)"
            )
        changed = _configure(admin, spec, dry_run=dry_run)
        if changed:
            action = "configured"
            detail = ", ".join(changed) + (f"; {note}" if note else "")
        else:
            action, detail = ("partitions-differ", note) if note else ("unchanged", "")
        results[spec.name] = Applied(spec.name, action, detail)
    bindings = {s.name: acl_bindings(s.name, ResourcePatternType.LITERAL, s) for s in specs}
    for grant in prefixes:
        bindings[f"{grant.prefix}*"] = acl_bindings(grant.prefix, ResourcePatternType.PREFIXED, grant)
    granted = _grant(admin, bindings, dry_run=dry_run)
    if not dry_run:
        _await_visible(admin, [s.name for s in missing], [b for topic in bindings.values() for b in topic])
    applied = [replace(results[s.name], acls=granted.get(s.name, "")) for s in specs]
    return applied + [
        Applied(f"{g.prefix}*", "granted", granted.get(f"{g.prefix}*", "no principals named")) for g in prefixes
    ]


def acl_bindings(name: str, pattern: ResourcePatternType, declared: TopicSpec | PrefixGrant) -> list[AclBinding]:
    """The ACLs the declared producers, consumers (and creators) need on a topic or a prefix."""
    return [
        AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)
        for role, operations in ROLE_OPERATIONS.items()
        for principal in getattr(declared, role, ())
        for operation in operations
    ]


def _grant(admin: AdminClient, bindings: dict[str, list[AclBinding]], *, dry_run: bool) -> dict[str, str]:
    """Create the ACLs (creating one that exists changes nothing); what was granted, per topic or prefix."""
    wanted = [b for topic in bindings.values() for b in topic]
    if not wanted:
        return {}
    said = {
        name: "acls " + ", ".join(sorted({f"{b.principal} {_operation(b)}" for b in topic}))
        for name, topic in bindings.items()
        if topic
    }
    if dry_run:
        return said
    futures = admin.create_acls(wanted, request_timeout=30)
    for binding, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.SECURITY_DISABLED:
                # A cluster without an authorizer allows everything: nothing to grant, and that is said.
                return dict.fromkeys(said, "acls not applied: the cluster has no authorizer")
            raise TopicError(
                f"granting {binding.principal} {_operation(binding)} on topic {binding.name} failed: "
                f"{error.str()}; `topics apply` needs a principal allowed to ALTER the cluster's ACLs"
            ) from exc
    return said


def _await_visible(admin: AdminClient, created: list[str], granted: list[AclBinding]) -> None:
    """Return once the broker serves the created topics (each partition led) and the granted ACLs.

    Without this, a client started right after `apply` could be told its topic does not exist or that it may
    not read it. The broker answers both from its own copy of the cluster metadata, which is what is polled.
    """
    deadline = time.monotonic() + VISIBLE_WITHIN_S
    # None matches any name, principal and host (the stubs type them str only).
    anyone: Any = None
    everything = AclBindingFilter(
        ResourceType.TOPIC, anyone, ResourcePatternType.ANY, anyone, anyone, AclOperation.ANY, AclPermissionType.ANY
    )
    while True:
        metadata = admin.list_topics(timeout=15)
        topics_waiting = [
            t
            for t in created
            if t not in metadata.topics
            or not metadata.topics[t].partitions
            or any(p.leader < 0 for p in metadata.topics[t].partitions.values())
        ]
        acls_waiting: set[AclBinding] = set()
        if granted:
            try:
                acls_waiting = set(granted) - set(admin.describe_acls(everything, request_timeout=15).result())
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.SECURITY_DISABLED:
                    raise TopicError(f"reading back the granted ACLs failed: {exc.args[0].str()}") from exc
        if not topics_waiting and not acls_waiting:
            return
        if time.monotonic() > deadline:
            waiting = topics_waiting + sorted({f"{b.principal} {_operation(b)} on {b.name}" for b in acls_waiting})
            raise TopicError(
                f"the broker does not serve {', '.join(waiting)} {VISIBLE_WITHIN_S:.0f} s after the controller "
                "accepted them; check the broker's log for metadata errors and run `cdcpipe topics apply` again"
            )
        time.sleep(0.1)


def _operation(binding: AclBinding) -> str:
    operation = binding.operation
    return operation.name if isinstance(operation, AclOperation) else str(operation)


def _configure(admin: AdminClient, spec: TopicSpec, *, dry_run: bool) -> list[str]:
    """Set the declared config keys that differ; return them as `key=value`."""
    if not spec.config:
        return []
    resource = ConfigResource(ResourceType.TOPIC, spec.name)
    try:
        current = admin.describe_configs([resource], request_timeout=15)[resource].result()
    except KafkaException as exc:
        raise TopicError(f"reading topic {spec.name}'s config failed: {exc.args[0]}") from exc
    changed = {k: v for k, v in spec.config.items() if k not in current or current[k].value != v}
    if changed and not dry_run:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changed.items()]
        target = ConfigResource(ResourceType.TOPIC, spec.name, incremental_configs=entries)
        try:
            admin.incremental_alter_configs([target], request_timeout=15)[target].result()
        except KafkaException as exc:
            raise TopicError(f"setting {sorted(changed)} on topic {spec.name} failed: {exc.args[0]}") from exc
    return [f"{k}={v}" for k, v in changed.items()]
