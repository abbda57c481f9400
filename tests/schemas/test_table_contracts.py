"""Where row contracts are looked for and written: the user's folders only, in their order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas import table_contracts
from schemas.errors import ContractError
from schemas.pg_types import PgType


def test_contracts_are_written_to_the_first_folder_of_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CDCPIPE_TABLE_CONTRACT_DIRS", f"{tmp_path / 'mine'}:{tmp_path / 'shared'}")
    assert table_contracts.contract_folders() == [tmp_path / "mine", tmp_path / "shared"]
    assert table_contracts.user_folder() == tmp_path / "mine"


def test_without_the_variable_no_folder_is_searched_and_the_error_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCPIPE_TABLE_CONTRACT_DIRS", raising=False)
    assert table_contracts.contract_folders() == []
    assert table_contracts.user_folder() is None
    with pytest.raises(ContractError, match="looked in: nothing, CDCPIPE_TABLE_CONTRACT_DIRS is unset"):
        table_contracts.load_table_contract("public.accounts")


def test_a_document_that_is_not_a_contract_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "billing.Invoices.json"
    good = {"x-primary-key": ["id"], "x-version": 1, "properties": {"id": {"type": "integer", "x-pg-type": "int8"}}}
    table_contracts.write("billing.Invoices", path, good)
    bad = {**good, "x-version": 2, "properties": {"id": {"type": "string", "x-pg-type": "numeric(12,"}}}
    with pytest.raises(ContractError, match=r"column id: x-pg-type 'numeric\(12,' is not a Postgres type"):
        table_contracts.write("billing.Invoices", path, bad)
    assert json.loads(path.read_text()) == good  # the old contract stays, whole
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no half-written file left beside it


def test_a_change_naming_a_domain_is_the_contract_s_base_type(tmp_path: Path) -> None:
    document = {
        "x-primary-key": ["id"],
        "properties": {
            "id": {"type": "integer", "x-pg-type": "int8"},
            "total": {"type": "string", "x-pg-type": "numeric(12,2)", "x-pg-domain": "money2"},
        },
    }
    contract = table_contracts.from_document("billing.invoices", document, tmp_path / "c.json")
    assert contract.sent_type("total", PgType.parse("MONEY2")) == PgType("numeric", 12, 2)
    assert contract.sent_type("total", PgType.parse("TEXT")) == PgType("text")
