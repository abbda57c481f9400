"""Compatibility of event contract versions: a schema registry's modes, applied to JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schemas.compatibility import cannot_read, problems
from schemas.compatibility_report import compatibility_report
from schemas.contracts import ContractRegistry
from schemas.errors import ContractError
from tests.support.stack import cdcpipe

V1: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["account_id", "amount"],
    "properties": {
        "account_id": {"type": "string", "minLength": 1},
        "amount": {"type": "integer", "minimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
    },
}


def changed(**changes: Any) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(json.dumps(V1))
    for where, value in changes.items():
        *path, last = where.split("__")
        node = schema
        for part in path:
            node = node[part]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return schema


@pytest.mark.parametrize(
    ("v2", "backward", "forward"),
    [
        (V1, True, True),
        # An optional field added to a closed schema: v2 reads v1's events; v1 refuses v2's with the field.
        (changed(properties__note={"type": "string"}), True, False),
        # A field made required: v2 refuses v1's events without it.
        (changed(properties__note={"type": "string"}, required=["account_id", "amount", "note"]), False, False),
        # A field removed from a closed schema: v1's events may carry it, v2 refuses them.
        (changed(properties__currency=None), False, True),
        # A type widened (integer -> number): v2 reads v1; v1 refuses 2.5.
        (changed(properties__amount={"type": "number", "minimum": 0}), True, False),
        (changed(properties__amount={"type": "string"}), False, False),
        # An enum grown: v2 reads v1; v1 refuses the new value.
        (changed(properties__currency={"type": "string", "enum": ["EUR", "USD", "GBP"]}), True, False),
        # A bound tightened: v2 refuses some of v1's; loosened: the other way round.
        (changed(properties__amount={"type": "integer", "minimum": 10}), False, True),
        (changed(properties__account_id={"type": "string"}), True, False),
        # Opened up: v2 reads anything v1 accepted; v1 refuses fields it does not know.
        (changed(additionalProperties=None), True, False),
    ],
)
def test_backward_and_forward_as_a_schema_registry_decides_them(
    v2: dict[str, Any], backward: bool, forward: bool
) -> None:
    assert (not problems("backward", V1, v2)) is backward
    assert (not problems("forward", V1, v2)) is forward
    assert (not problems("full", V1, v2)) is (backward and forward)


def test_a_field_added_to_an_open_schema_may_already_be_sent_with_any_value() -> None:
    open_v1 = changed(additionalProperties=None)
    open_v2 = changed(additionalProperties=None, properties__note={"type": "string"})
    reasons = problems("backward", open_v1, open_v2)
    assert reasons == [
        "backward: $.note: the writer's schema is open (no additionalProperties: false), so it may already send "
        "this field with any value; the reader constrains it"
    ]


def test_each_reason_names_the_field_and_the_direction() -> None:
    reasons = problems("full", V1, changed(properties__amount={"type": "string"}))
    assert "backward: $.amount: the writer allows type ['integer'], the reader only ['string']" in reasons
    assert "forward: $.amount: the writer allows type ['string'], the reader only ['integer']" in reasons
    assert cannot_read({"oneOf": [{"type": "string"}]}, {}) == [
        "$: oneOf differs, which this check cannot prove compatible"
    ]


def write(folder: Path, name: str, schema: dict[str, Any], **extra: Any) -> None:
    (folder / name).write_text(json.dumps({**schema, "x-aggregate-type": "account", **extra}))


def test_the_registry_holds_a_version_to_the_mode_it_declares(tmp_path: Path) -> None:
    write(tmp_path, "Paid.v1.json", V1)
    write(tmp_path, "Paid.v2.json", changed(properties__note={"type": "string"}))  # backward only
    write(tmp_path, "Paid.v3.json", changed(properties__note={"type": "string"}), **{"x-compatibility": "forward"})
    write(tmp_path, "Paid.v4.json", changed(properties__amount={"type": "string"}), **{"x-compatibility": "none"})
    registry = ContractRegistry([tmp_path])
    assert registry.breaks(registry.get("Paid", 2)) == []
    assert registry.breaks(registry.get("Paid", 3)) == []  # the same schema as v2: nothing to read differently
    assert registry.breaks(registry.get("Paid", 4)) == []  # a break, declared
    lines = [line for line, _ in compatibility_report(registry, None)]
    assert lines[0] == "Paid v1 -> v2: backward compatible, NOT forward compatible; declares backward: ok"
    assert "Paid v3 -> v4: NOT backward compatible, NOT forward compatible; declares none: ok" in lines

    write(tmp_path, "Paid.v5.json", V1, **{"x-compatibility": "full"})  # drops `note`, which v4 allowed
    registry = ContractRegistry([tmp_path])
    assert registry.breaks(registry.get("Paid", 5))


def test_an_unknown_mode_is_refused_at_load(tmp_path: Path) -> None:
    write(tmp_path, "Paid.v1.json", V1, **{"x-compatibility": "sideways"})
    with pytest.raises(ContractError, match=r"Paid.v1.json: \"x-compatibility\": 'sideways' is not one of backward"):
        ContractRegistry([tmp_path])


def test_schema_check_exits_1_on_a_version_that_breaks_its_mode(tmp_path: Path) -> None:
    write(tmp_path, "Paid.v1.json", V1)
    write(
        tmp_path,
        "Paid.v2.json",
        changed(properties__note={"type": "string"}, required=["account_id", "amount", "note"]),
    )
    result = cdcpipe("schema", "check", "Paid", env={"CDCPIPE_CONTRACT_DIRS": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0] == (
        "Paid v1 -> v2: NOT backward compatible, NOT forward compatible; declares backward: BROKEN"
    )
    assert "    backward: $.note: required by the reader, not by the writer" in result.stdout
    unknown = cdcpipe("schema", "check", "Nope", env={"CDCPIPE_CONTRACT_DIRS": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert unknown.returncode == 2
    assert "no contract for event type 'Nope'" in unknown.stderr
