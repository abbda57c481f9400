"""The Python pre-check of a latest-state reduction: sure only of what Spark surely passes.

Each "suspect" case here is one where Python's reading and Spark's may differ (or Spark refuses the record):
the check must not vouch for it. The comparison with Spark itself is in test_reduce_integration.py.
"""

from __future__ import annotations

import json

import pytest

from schemas.contracts import default_registry
from streaming_jobs.classify.python_prefilter import SurelyValid, payload_check

HEADERS = [("id", b"e-1"), ("eventType", b"MoneyDeposited"), ("eventVersion", b"1")]
DEPOSIT = {"account_id": "a-1", "amount": 5, "currency": "EUR"}


@pytest.fixture(scope="module")
def surely() -> SurelyValid:
    return SurelyValid((c.event_type, c.version, dict(c.schema)) for c in default_registry())


def raw(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_deposit_that_keeps_its_contract_is_surely_valid_and_so_is_a_tombstone(surely: SurelyValid) -> None:
    schema = default_registry().get("MoneyDeposited", 1).schema
    assert set(DEPOSIT) == set(schema["properties"]), "the sample must stay a full, valid deposit"
    assert surely(b"a-1", raw(DEPOSIT), HEADERS)
    assert surely(b"a-1", raw({**DEPOSIT, "account_id": "Zoë"}), HEADERS)  # non-ASCII text is fine
    assert surely(b"a-1", None, HEADERS)


@pytest.mark.parametrize(
    ("why", "payload"),
    [
        ("not JSON", b"{not json"),
        ("not an object", b"[1, 2]"),
        ("text after the object", raw(DEPOSIT) + b" x"),
        ("trailing whitespace", raw(DEPOSIT) + b"\n"),
        ("leading whitespace", b" " + raw(DEPOSIT)),
        ("invalid UTF-8", raw(DEPOSIT).replace(b'"a-1"', b'"a-\xff"')),
        ("a repeated key, the first copy of another type", b'{"amount":"x",' + raw(DEPOSIT)[1:]),
        ("a number where the contract wants text", raw({**DEPOSIT, "account_id": 7})),
        ("a string where the contract wants an integer", raw({**DEPOSIT, "amount": "5"})),
        ("a whole float where the contract wants an integer", raw({**DEPOSIT, "amount": 5.0})),
        ("an integer past 64 bits", raw({**DEPOSIT, "amount": 2**63})),
        ("NaN", raw(DEPOSIT).replace(b'"amount":5', b'"amount":NaN')),
        ("a boolean where the contract wants an integer", raw({**DEPOSIT, "amount": True})),
        ("a required field missing", raw({k: v for k, v in DEPOSIT.items() if k != "amount"})),
        ("a required field null", raw({**DEPOSIT, "amount": None})),
        ("a field the contract does not allow", raw({**DEPOSIT, "note": "x"})),
        ("Spark's corrupt-record column as a field", raw({**DEPOSIT, "_corrupt_record": "x"})),
        ("below the minimum", raw({**DEPOSIT, "amount": 0})),
        ("a pattern broken", raw({**DEPOSIT, "currency": "eur"})),
        ("a pattern on text with a line break", raw({**DEPOSIT, "currency": "EUR\n"})),
        ("a pattern on non-ASCII text", raw({**DEPOSIT, "currency": "EUŔ"})),
        ("shorter than minLength", raw({**DEPOSIT, "account_id": ""})),
        ("a surrogate escape", raw(DEPOSIT).replace(b'"a-1"', b'"a-\\ud800"')),
    ],
)
def test_what_python_and_spark_may_read_differently_is_a_suspect(surely: SurelyValid, why: str, payload: bytes) -> None:
    assert not surely(b"a-1", payload, HEADERS), why


@pytest.mark.parametrize(
    ("why", "key", "headers"),
    [
        ("no key", None, HEADERS),
        ("no headers", b"a-1", []),
        ("no id", b"a-1", HEADERS[1:]),
        ("a null id", b"a-1", [("id", None), *HEADERS[1:]]),
        ("a repeated header", b"a-1", [*HEADERS, ("id", b"e-2")]),
        ("an unknown event type", b"a-1", [HEADERS[0], ("eventType", b"Nope"), HEADERS[2]]),
        ("an unknown version", b"a-1", [*HEADERS[:2], ("eventVersion", b"9")]),
        ("a version that is not digits", b"a-1", [*HEADERS[:2], ("eventVersion", b" 1")]),
    ],
)
def test_records_whose_headers_or_key_are_off_are_suspects(
    surely: SurelyValid, why: str, key: bytes | None, headers: list[tuple[str, bytes | None]]
) -> None:
    assert not surely(key, raw(DEPOSIT), headers), why


def test_contract_rules_are_read_as_spark_reads_them() -> None:
    schema = {
        "type": "object",
        "required": ["n"],
        "properties": {
            "n": {"type": "number", "maximum": 10},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "integer"}},
            "inner": {"type": "object", "properties": {"x": {"type": "boolean"}}},
            "maybe": {"type": ["string", "null"]},
            "odd": {"type": "string", "pattern": "[a-z&&[^b]]"},  # Java: an intersection; Python: not that
        },
    }
    check = payload_check(schema)
    assert check(raw({"n": 3, "kind": "a", "tags": [1, None], "inner": {"x": True, "y": 1}, "maybe": None}))
    assert check(raw({"n": 2.5, "extra": "open schemas allow other fields"}))
    assert not check(raw({"n": 11}))
    assert not check(raw({"n": 1, "kind": "c"}))
    assert not check(raw({"n": 1, "tags": [1.5]}))
    assert not check(raw({"n": 1, "inner": {"x": "yes"}}))
    assert not check(raw({"n": 1, "N": 2})), "a name that differs only in case"
    assert not check(raw({"n": 1, "odd": "a"})), "a pattern Python reads otherwise leaves every value a suspect"
