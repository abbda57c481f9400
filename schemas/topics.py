"""Versioned topic files (`schemas/topics/*.toml`) and `cdcpipe topics apply`.

The cluster creates no topic on its own (`auto.create.topics.enable=false`, as in production): every topic
the relay, the connectors' EventRouter and the jobs use is declared in a file and created by `apply`.

A file holds `[defaults]` (partitions, replication_factor, config) and `[[topic]]` entries (name, and any
default overridden). `apply` creates missing topics and sets the declared config keys on existing ones. It
never changes an existing topic's partition count: adding partitions moves keys, and with them the order
of each aggregate's events; it reports the difference instead.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from pydantic import Field

from cdcpipe.settings import StageSettings
from schemas.errors import TopicError

TOPICS_DIR = Path(__file__).resolve().parent / "topics"
LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


class TopicSettings(StageSettings):
    """Where the topic files are and which cluster they go to (`[topics]`)."""

    toml_section: ClassVar[str] = "topics"

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    topics_dir: Path = Field(TOPICS_DIR, description="folder of topic files (*.toml)")


@dataclass(frozen=True)
class TopicSpec:
    """One declared topic. `-1` for partitions or replication_factor takes the cluster's default."""

    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)
    source: str = ""


def load(folder: Path) -> list[TopicSpec]:
    """Every topic declared in `folder/*.toml`, validated; a name declared twice is an error."""
    if not folder.is_dir():
        raise TopicError(f"topic files: {folder} is not a folder; set CDCPIPE_TOPICS_DIR to the folder of *.toml")
    specs: dict[str, TopicSpec] = {}
    for path in sorted(folder.glob("*.toml")):
        for spec in _load_file(path):
            if spec.name in specs:
                raise TopicError(f"{path}: topic {spec.name} is declared in {specs[spec.name].source} already")
            specs[spec.name] = spec
    return list(specs.values())


def _load_file(path: Path) -> list[TopicSpec]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TopicError(f"{path}: not valid TOML ({exc})") from exc
    unknown = set(data) - {"defaults", "topic"}
    if unknown:
        raise TopicError(f"{path}: unknown sections {sorted(unknown)}; a topic file has [defaults] and [[topic]]")
    defaults = data.get("defaults", {})
    entries = data.get("topic", [])
    if not isinstance(defaults, dict) or not isinstance(entries, list):
        raise TopicError(f"{path}: [defaults] must be a table and topics [[topic]] entries")
    return [_spec(path, i, {**defaults, **entry}, defaults.get("config", {})) for i, entry in enumerate(entries)]


def _spec(path: Path, index: int, entry: dict[str, Any], default_config: dict[str, Any]) -> TopicSpec:
    where = f"{path}: topic #{index + 1}"
    unknown = set(entry) - {"name", "partitions", "replication_factor", "config"}
    if unknown:
        raise TopicError(f"{where}: unknown keys {sorted(unknown)} (name, partitions, replication_factor, config)")
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
    return TopicSpec(name, counts["partitions"], counts["replication_factor"], config, str(path))


@dataclass(frozen=True)
class Applied:
    """What `apply` did to one topic: `action` is created, configured, unchanged or partitions-differ."""

    name: str
    action: str
    detail: str = ""


def apply(admin_config: dict[str, Any], specs: Iterable[TopicSpec], *, dry_run: bool = False) -> list[Applied]:
    """Create the missing topics and set the declared config keys on the others."""
    admin = AdminClient(admin_config)
    specs = list(specs)
    try:
        metadata = admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise TopicError(
            f"cannot reach Kafka to read its topics ({exc.args[0]}); check CDCPIPE_KAFKA_BOOTSTRAP"
        ) from exc
    missing = [s for s in specs if s.name not in metadata.topics]
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
    return [results[s.name] for s in specs]


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
