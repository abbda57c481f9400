"""Where row contracts are looked for and written: the user's folders only, in their order."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas import table_contracts
from schemas.errors import ContractError


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
