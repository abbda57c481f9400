"""Outbox names: every name made from the configured ones must fit Postgres, checked when settings load."""

from __future__ import annotations

import pytest

from ground.errors import ConfigError
from schemas.config import DERIVED_SUFFIXES, MAX_IDENTIFIER_BYTES, OutboxNames


def test_a_table_name_whose_derived_names_would_be_cut_is_refused_at_load() -> None:
    longest = max(len(s) for s in DERIVED_SUFFIXES)
    fits = "t" * (MAX_IDENTIFIER_BYTES - longest)
    names = OutboxNames.load(outbox_table=fits)
    assert len(names.relay_status_table.encode()) <= MAX_IDENTIFIER_BYTES
    assert names.assign_function == f"{fits}_assign_seq"
    with pytest.raises(ConfigError, match=r"outbox_table .* is too long: the derived name .*_relay_status"):
        OutboxNames.load(outbox_table=fits + "t")
