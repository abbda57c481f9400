"""Connector definition files: loading, secrets, plugin validation and plans (no Connect needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from connectors import definitions
from connectors.errors import DefinitionError
from demo.run import EXAMPLES

BASE = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "topic.prefix": "p"}


def write(tmp_path: Path, config: dict[str, object], name: str = "c.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"name": "c", "config": config}))
    return path


def test_the_shipped_definitions_load_and_hold_no_secret() -> None:
    loaded = definitions.load(EXAMPLES / "connectors")
    assert {d.name for d in loaded} == {"cdcpipe-outbox", "cdcpipe-tables"}
    for d in loaded:
        assert d.config["database.password"].startswith("${env:")


def test_yaml_numbers_and_booleans_become_connect_strings(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: c\nconfig:\n  connector.class: X\n  tasks.max: 1\n  provide.transaction.metadata: true\n")
    (d,) = definitions.load(path)
    assert d.config == {"connector.class": "X", "tasks.max": "1", "provide.transaction.metadata": "true"}


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"database.password": "hunter2"}, "database.password", "secret in plain text"),
        ({"producer.override.sasl.jaas.config": "${env:X}"}, "producer.override.sasl.jaas.config", "may not override"),
    ],
)
def test_file_level_problems_name_the_field(tmp_path: Path, extra: dict[str, str], field: str, message: str) -> None:
    with pytest.raises(DefinitionError) as raised:
        definitions.load(write(tmp_path, {**BASE, **extra}))
    assert field in raised.value.problems
    assert message in str(raised.value)
    assert "hunter2" not in str(raised.value)


def test_malformed_files_say_what_is_expected(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DefinitionError, match="not valid JSON"):
        definitions.load(tmp_path / "bad.json")
    (tmp_path / "shape.json").write_text(json.dumps({"config": {}}))
    with pytest.raises(DefinitionError, match=re.escape('expected {"name"')):
        definitions.load(tmp_path / "shape.json")


def validation(errors: dict[str, list[str]], known: list[str]) -> dict[str, object]:
    return {"configs": [{"value": {"name": k, "errors": errors.get(k, [])}} for k in known]}


def test_plugin_errors_and_unknown_keys_are_reported_per_field(tmp_path: Path) -> None:
    (d,) = definitions.load(
        write(tmp_path, {**BASE, "heartbeat.interval": "5", "value.converter.schemas.enable": "false"})
    )
    known = ["connector.class", "topic.prefix", "heartbeat.interval.ms"]
    with pytest.raises(DefinitionError) as raised:
        definitions.check_against_plugin(d, validation({"topic.prefix": ["Invalid value"]}, known))
    assert raised.value.problems["topic.prefix"] == ["Invalid value"]
    assert "did you mean heartbeat.interval.ms" in raised.value.problems["heartbeat.interval"][0]
    assert "value.converter.schemas.enable" not in raised.value.problems  # converter settings pass through


def test_plan_shows_what_changes_and_never_a_literal_secret(tmp_path: Path) -> None:
    (d,) = definitions.load(write(tmp_path, {**BASE, "database.password": "${env:PW}", "tasks.max": "2"}))
    assert definitions.plan(d, None).action == "create"
    same = definitions.plan(d, {**d.config, "name": "c"})
    assert same.action == "unchanged"
    changed = definitions.plan(d, {**d.config, "tasks.max": "1", "database.password": "plaintext-leak"})
    assert changed.action == "update"
    assert "~ tasks.max: 1 -> 2" in changed.diff
    assert all("plaintext-leak" not in line for line in changed.diff)
