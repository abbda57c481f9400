"""Event contracts: files, versions, and errors that name the field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from schemas.contracts import ContractRegistry, default_registry
from schemas.errors import ContractError, ContractViolationError, UnknownEventTypeError


def write(folder: Path, name: str, schema: Mapping[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(schema))


ORDER = {
    "x-aggregate-type": "order",
    "type": "object",
    "required": ["order_id", "lines"],
    "properties": {
        "order_id": {"type": "string"},
        "lines": {
            "type": "array",
            "items": {"type": "object", "required": ["qty"], "properties": {"qty": {"type": "integer"}}},
        },
    },
}


def test_builtin_contracts_load() -> None:
    registry = default_registry()
    assert registry.get("AccountOpened").aggregate_type == "account"
    assert registry.get("TransferCompleted", 1).version == 1


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"lines": []}, "$.order_id"),
        ({"order_id": 7, "lines": []}, "$.order_id"),
        ({"order_id": "o1", "lines": [{"qty": 1}, {"qty": "two"}]}, "$.lines[1].qty"),
        ({"order_id": "o1", "lines": [{}]}, "$.lines[0].qty"),
    ],
)
def test_a_violation_names_the_field(tmp_path: Path, payload: dict[str, object], field: str) -> None:
    write(tmp_path, "OrderPlaced.v1.json", ORDER)
    contract = ContractRegistry([tmp_path]).get("OrderPlaced")
    with pytest.raises(ContractViolationError) as raised:
        contract.validate(payload)
    assert raised.value.field == field
    assert field in str(raised.value)
    assert "OrderPlaced.v1.json" in str(raised.value)


def test_latest_version_unless_one_is_asked_for(tmp_path: Path) -> None:
    write(tmp_path, "OrderPlaced.v1.json", ORDER)
    write(tmp_path, "OrderPlaced.v2.json", {**ORDER, "required": ["order_id"]})
    registry = ContractRegistry([tmp_path])
    assert registry.get("OrderPlaced").version == 2
    assert registry.get("OrderPlaced", 1).version == 1
    with pytest.raises(UnknownEventTypeError, match="no version 3"):
        registry.get("OrderPlaced", 3)


def test_unknown_type_lists_the_known_ones(tmp_path: Path) -> None:
    write(tmp_path, "OrderPlaced.v1.json", ORDER)
    with pytest.raises(UnknownEventTypeError, match="known: OrderPlaced"):
        ContractRegistry([tmp_path]).get("OrderShipped")


def test_a_version_is_never_redefined(tmp_path: Path) -> None:
    write(tmp_path / "a", "OrderPlaced.v1.json", ORDER)
    write(tmp_path / "b", "OrderPlaced.v1.json", ORDER)
    with pytest.raises(ContractError, match="already defined"):
        ContractRegistry([tmp_path / "a", tmp_path / "b"])


@pytest.mark.parametrize(
    ("name", "schema", "problem"),
    [
        ("order.json", ORDER, "named <EventType>.v<N>.json"),
        ("OrderPlaced.v1.json", {"type": "object"}, "x-aggregate-type"),
        ("OrderPlaced.v1.json", {"x-aggregate-type": "order", "type": "nonsense"}, "not a valid JSON Schema"),
    ],
)
def test_broken_contract_files_are_named(tmp_path: Path, name: str, schema: Mapping[str, object], problem: str) -> None:
    write(tmp_path, name, schema)
    with pytest.raises(ContractError, match=problem):
        ContractRegistry([tmp_path])


@pytest.mark.parametrize(
    ("amount", "says"),
    [
        (5.0, "is not of type 'integer'"),
        (2**63, "is not of type 'integer'"),
        (True, "is not of type 'integer'"),
    ],
)
def test_an_integer_is_what_the_jobs_read_as_one(amount: object, says: str) -> None:
    """JSON Schema calls 5.0 an integer; Spark does not, nor anything beyond 64 bits: emit refuses both."""
    contract = default_registry().get("MoneyDeposited", 1)
    contract.validate({"account_id": "a", "amount": 2**63 - 1, "currency": "EUR"})
    with pytest.raises(ContractViolationError, match=says):
        contract.validate({"account_id": "a", "amount": amount, "currency": "EUR"})


@pytest.mark.parametrize(
    ("account", "where", "says"),
    [
        ("a\x00b", "$.account_id", "NUL character"),
        ("\ud800", "$.account_id", "lone surrogate"),
    ],
)
def test_text_postgres_or_utf8_cannot_hold_is_refused(account: str, where: str, says: str) -> None:
    contract = default_registry().get("MoneyDeposited", 1)
    with pytest.raises(ContractViolationError, match=says) as caught:
        contract.validate({"account_id": account, "amount": 1, "currency": "EUR"})
    assert where in str(caught.value)


def test_a_date_time_format_is_checked_and_an_unchecked_format_is_refused(tmp_path: Path) -> None:
    stamped = {
        "x-aggregate-type": "order",
        "type": "object",
        "properties": {"at": {"type": "string", "format": "date-time"}},
    }
    write(tmp_path, "Stamped.v1.json", stamped)
    contract = ContractRegistry([tmp_path]).get("Stamped")
    contract.validate({"at": "2026-11-24T10:00:00Z"})
    contract.validate({"at": "2026-11-24t10:00:00.5+01:00"})
    for bad in ("not a time", "2026-02-30T10:00:00Z", "2026-11-24 10:00:00", "2026-11-24T10:00:00"):
        with pytest.raises(ContractViolationError, match=r"\$\.at"):
            contract.validate({"at": bad})
    other = tmp_path / "other"
    other.mkdir()
    write(other, "Hosted.v1.json", {"x-aggregate-type": "host", "properties": {"h": {"format": "hostname"}}})
    with pytest.raises(ContractError, match="format hostname is not checked by emit"):
        ContractRegistry([other])
