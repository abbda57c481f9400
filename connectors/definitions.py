"""Connector definitions: versioned files, checked against the plugin before anything is applied.

A definition is a JSON or YAML file shaped like Connect's own create request: `{"name": ..., "config": {...}}`.
It holds no secret: a password is a reference to one of the worker's config providers (`${env:VAR}`; the
stack's worker has only that one), which the worker resolves; Connect stores and returns the reference, never the value.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from connectors.errors import DefinitionError

SUFFIXES = (".json", ".yaml", ".yml")
# Keys Connect passes on instead of declaring: converter settings, Debezium's JDBC pass-through, topic creation.
PASS_THROUGH_PREFIXES = (
    "key.converter.",
    "value.converter.",
    "header.converter.",
    "driver.",
    "database.",
    "topic.creation.",
    "errors.",
    "signal.",
    "notification.",
)
# A connector may not override the worker's clients (the worker's policy refuses it too; saying why here is kinder).
FORBIDDEN_PREFIXES = ("producer.override.", "consumer.override.", "admin.override.")
SECRET_KEY = re.compile(r"password|secret|jaas|credential|token|keystore|truststore|api\.key", re.IGNORECASE)
PROVIDER_REFERENCE = re.compile(r"^\$\{[A-Za-z0-9_.-]+:[^}]*\}$")


@dataclass(frozen=True)
class Definition:
    """One connector as declared in a file."""

    name: str
    config: dict[str, str]
    source: Path

    @property
    def connector_class(self) -> str:
        return self.config.get("connector.class", "")

    @property
    def slot_name(self) -> str | None:
        return self.config.get("slot.name")


def load(path: Path) -> list[Definition]:
    """The definitions in a file, or in every JSON/YAML file of a folder (sorted by name)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES)
        if not files:
            raise DefinitionError(str(path), {"(folder)": [f"no {'/'.join(SUFFIXES)} files here"]})
        return [d for f in files for d in load(f)]
    if not path.is_file():
        raise DefinitionError(str(path), {"(file)": ["no such file"]})
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DefinitionError(str(path), {"(file)": [f"not valid {path.suffix[1:].upper()}: {exc}"]}) from exc
    return [_definition(data, path)]


def _definition(data: Any, path: Path) -> Definition:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not isinstance(data.get("config"), dict):
        raise DefinitionError(str(path), {"(file)": ['expected {"name": "...", "config": {...}}']})
    config = {str(k): _as_text(v) for k, v in data["config"].items()}
    problems: dict[str, list[str]] = {}
    if not data["name"].strip() or "/" in data["name"]:
        problems["name"] = ["empty or with '/': Kafka Connect's REST API cannot address such a connector"]
    if "connector.class" not in config:
        problems["connector.class"] = [
            "missing: the plugin class, e.g. io.debezium.connector.postgresql.PostgresConnector"
        ]
    for key, value in config.items():
        if key.startswith(FORBIDDEN_PREFIXES):
            problems[key] = [
                "a connector may not override the worker's client settings "
                "(connector.client.config.override.policy=None); set it on the worker"
            ]
        elif SECRET_KEY.search(key) and value and not PROVIDER_REFERENCE.match(value):
            problems[key] = [
                "a secret in plain text: use a config provider reference such as ${env:VAR} "
                "(the variable set on the Connect workers)"
            ]
    if problems:
        raise DefinitionError(str(path), problems)
    config.pop("name", None)
    return Definition(name=data["name"], config=config, source=path)


def _as_text(value: Any) -> str:
    """Connect's configs are strings; YAML/JSON numbers and booleans become their Connect spelling."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def check_against_plugin(definition: Definition, validation: dict[str, Any]) -> None:
    """Raise DefinitionError naming each field the plugin rejected, and each key it does not know."""
    known: set[str] = set()
    problems: dict[str, list[str]] = {}
    for entry in validation.get("configs", []):
        value = entry.get("value", {})
        name = value.get("name", "")
        known.add(name)
        if value.get("errors"):
            problems[name] = list(value["errors"])
    for key in definition.config:
        if key in known or key.startswith(PASS_THROUGH_PREFIXES) or key == "name":
            continue
        guess = difflib.get_close_matches(key, sorted(known), n=1)
        problems[key] = [
            f"unknown setting for {definition.connector_class}" + (f" (did you mean {guess[0]}?)" if guess else "")
        ]
    if problems:
        raise DefinitionError(f"{definition.source} ({definition.name})", problems)


def shown(key: str, value: str | None) -> str:
    """A config value as any command may print it: a literal secret never, a provider reference as is."""
    if value is None:
        return "(unset)"
    if SECRET_KEY.search(key) and not PROVIDER_REFERENCE.match(value):
        return "********"
    return value


@dataclass(frozen=True)
class Change:
    """What `apply` would do to one connector."""

    definition: Definition
    action: str  # "create", "update" or "unchanged"
    diff: list[str]


def plan(definition: Definition, current: dict[str, str] | None) -> Change:
    """Compare a definition with the connector's stored config."""
    if current is None:
        return Change(definition, "create", [f"+ {k} = {shown(k, v)}" for k, v in sorted(definition.config.items())])
    stored = {k: v for k, v in current.items() if k != "name"}
    diff = []
    for key in sorted(set(stored) | set(definition.config)):
        before, after = stored.get(key), definition.config.get(key)
        if before != after:
            diff.append(f"~ {key}: {shown(key, before)} -> {shown(key, after)}")
    return Change(definition, "update" if diff else "unchanged", diff)
