"""Postgres types as table contracts write them, and the JSON Schema each becomes."""

from __future__ import annotations

import pytest

from schemas.pg_types import PgType, from_json_schema, json_schema


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("int4", "int4"),
        ("integer", "int4"),
        ("bigint", "int8"),
        ("numeric(12,2)", "numeric(12,2)"),
        ("NUMERIC(12, 2)", "numeric(12,2)"),
        ("decimal(5)", "numeric(5)"),
        ("character varying(100)", "varchar(100)"),
        ("timestamp with time zone", "timestamptz"),
        ("timestamp(6)", "timestamp"),  # Postgres's default precision, said the way the catalog says it
        ("timestamp(3)", "timestamp(3)"),
        ("int4(10)", "int4"),  # a modifier that does not change the data is not part of the type
        ("_text", "_text"),
    ],
)
def test_types_are_written_as_the_catalog_names_them(text: str, written: str) -> None:
    assert str(PgType.parse(text)) == written


def test_a_type_that_does_not_parse_says_the_form_expected() -> None:
    with pytest.raises(ValueError, match=r"pg_type.typname"):
        PgType.parse("numeric(12,")


def test_json_schemas_say_what_debezium_sends() -> None:
    assert json_schema(PgType.parse("numeric(12,2)"), True) == {
        "type": ["string", "null"],
        "x-pg-type": "numeric(12,2)",
    }
    assert json_schema(PgType.parse("timestamp"), False) == {"type": "integer", "x-pg-type": "timestamp"}
    assert json_schema(PgType("mood"), True, ["sad", "ok"]) == {
        "type": ["string", "null"],
        "enum": ["sad", "ok", None],
        "x-pg-type": "mood",
    }
    assert json_schema(PgType("_int4"), True)["items"] == {"type": "integer"}
    assert json_schema(PgType("bytea"), False)["contentEncoding"] == "base64"


def test_a_hand_written_contract_s_json_types_stand_for_postgres_types() -> None:
    assert from_json_schema({"type": ["integer", "null"]}) == PgType("int8")
    assert from_json_schema({"type": "string"}) == PgType("text")
    assert from_json_schema({"type": "array", "items": {"type": "number"}}) == PgType("_float8")
    assert from_json_schema({"type": "string", "x-pg-type": "uuid"}) == PgType("uuid")
