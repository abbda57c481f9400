"""What `emit` accepts, a streaming job never dead-letters: generated payloads per contract, checked on both sides.

The writer's side is `Contract.validate` (what `emit` runs). The reader's side is the jobs' classification in
Spark, given each accepted payload as the relay sends it: the text Postgres's jsonb renders it as. Payloads
mix values a contract wants with the ones that part writers and readers: integral floats (5.0), numbers
beyond 64 bits, NUL characters, lone surrogates, deep nesting, huge strings, missing and unexpected keys.
(A payload with a key twice cannot reach `emit`, which takes a dict.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.contracts import Contract, ContractRegistry, default_registry
from schemas.errors import ContractViolationError
from streaming_jobs.classify import outbox_events
from streaming_jobs.config import JobsSettings
from streaming_jobs.spark_session import build_spark_session
from tests.support.stack import Stack

pytestmark = [
    pytest.mark.integration,
    # One worker for the module: its tests share a Spark session (the scheduler keeps a group together).
    pytest.mark.xdist_group("contract_agreement"),
    # PySpark leaves the local sockets it reads results from for the garbage collector to close.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]
# The shipped contracts, and the edge cases where a writer and a reader could part (a required field that may be
# null, a pattern with \d: Python's `re` matches any Unicode digit there, Java's regex and JSON Schema's only 0-9).
EDGE_CASES = ContractRegistry([Path(__file__).parent / "contracts"])
CONTRACTS = [c for c in default_registry() if c.path.parent.name == "contracts"] + list(EDGE_CASES)


@pytest.fixture(scope="module")
def spark(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = JobsSettings.load(
        spark_master="local[1]",
        kafka=stack.kafka(),
        lake=tmp_path_factory.mktemp("lake"),
        spark_jars_dir=stack.home / "lib" / "spark",
    )
    session = build_spark_session(settings, app_name="test-contract-agreement")
    yield session
    session.stop()


def nested(depth: int) -> object:
    value: object = "deep"
    for _ in range(depth):
        value = {"n": value}
    return value


TRICKY = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-(10**6), max_value=10**6).map(float),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "EUR", "eur", "EURO", "\x00", "a\x00b", "\ud800", "é€😀", "x" * 300_000]),
    st.text(max_size=12),
    st.booleans(),
    st.none(),
    st.integers(min_value=0, max_value=300).map(nested),
    st.lists(st.integers(), max_size=3),
)


def fitting(schema: dict[str, Any]) -> st.SearchStrategy[object]:
    """Values the property's schema wants (so most payloads get past their first field)."""
    kind = schema.get("type")
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -(2**63) - 1) + 1)
        return st.integers(min_value=low, max_value=2**63 - 1)
    if kind == "string" and "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True)
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=20)
    return TRICKY


@st.composite
def payloads(draw: st.DrawFn, contract: Contract) -> dict[str, object]:
    properties: dict[str, dict[str, Any]] = contract.schema.get("properties", {})
    payload = {name: draw(st.one_of(fitting(schema), fitting(schema), TRICKY)) for name, schema in properties.items()}
    for name in draw(st.sets(st.sampled_from(sorted(properties)), max_size=1)):
        del payload[name]
    if draw(st.integers(0, 9)) == 0:
        payload["unexpected"] = draw(TRICKY)
    return payload


def accepted_by_emit(contract: Contract, payload: dict[str, object]) -> bool:
    try:
        contract.validate(payload)
    except ContractViolationError:
        return False
    return True


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: f"{c.event_type}.v{c.version}")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_what_emit_accepts_a_job_accepts(stack: Stack, spark: Any, contract: Contract, data: st.DataObject) -> None:
    batch = data.draw(st.lists(payloads(contract), min_size=40, max_size=40))
    accepted = [p for p in batch if accepted_by_emit(contract, p)]
    if not accepted:
        return
    found = disagreements(stack, spark, contract, accepted)
    assert found == [], f"emit accepted, the job dead-letters ({len(accepted)} accepted): {found[:5]}"


def test_the_edge_cases_agree_every_time(stack: Stack, spark: Any) -> None:
    """The cases a generator may miss, each given: emit and the job take the same side of each."""
    edge = EDGE_CASES.get("EdgeCase", 1)
    cases: list[tuple[dict[str, object], bool]] = [
        ({"note": None, "code": "123"}, True),  # required and nullable, given null: present
        ({"code": "123"}, False),  # required, missing
        ({"note": "n", "code": "\u0661\u0662\u0663"}, False),  # Arabic-Indic digits: \d is 0-9 only
        ({"note": "n", "code": "\uff11\uff12\uff13"}, False),  # fullwidth digits
        ({"note": "n", "code": "007"}, True),
    ]
    assert [accepted_by_emit(edge, payload) for payload, _ in cases] == [accepted for _, accepted in cases]
    accepted = [payload for payload, ok in cases if ok]
    assert disagreements(stack, spark, edge, accepted) == []


def disagreements(stack: Stack, spark: Any, contract: Contract, accepted: list[dict[str, object]]) -> list[Any]:
    """Each payload emit accepted that the job dead-letters, with the job's reason."""
    with psycopg.connect(stack.pg_dsn) as conn:
        # As the relay reads it: `payload::text` of the jsonb that emit's insert stored.
        wire = [
            str(row[0])
            for row in conn.execute(
                "SELECT p::jsonb::text FROM unnest(%s::text[]) WITH ORDINALITY AS t(p, n) ORDER BY n",
                ([json.dumps(p, ensure_ascii=False) for p in accepted],),
            ).fetchall()
        ]
    now = datetime.now(tz=UTC)
    records = spark.createDataFrame(
        [
            (
                b"key",
                text.encode(),
                "topic",
                0,
                offset,
                now,
                0,
                [
                    ("id", str(uuid.uuid4()).encode()),
                    ("eventType", contract.event_type.encode()),
                    ("eventVersion", str(contract.version).encode()),
                ],
            )
            for offset, text in enumerate(wire)
        ],
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
        "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>",
    )
    registry = EDGE_CASES if contract in list(EDGE_CASES) else default_registry()
    refused = outbox_events.classify(records, registry).where("error IS NOT NULL")
    return [(wire[r["kafka_offset"]][:200], r["error"]) for r in refused.select("kafka_offset", "error").collect()]


def test_payloads_are_generated_for_the_shipped_contracts() -> None:
    """The parametrized test above runs once per contract found: none found would pass vacuously."""
    assert {c.event_type for c in CONTRACTS} >= {"AccountOpened", "MoneyDeposited", "TransferCompleted", "EdgeCase"}
