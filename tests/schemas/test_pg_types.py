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
        ("decimal(5)", "numeric(5,0)"),  # Postgres' numeric(5) is numeric(5,0), as the catalog says it
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


@pytest.mark.parametrize(
    ("spellings", "canonical"),
    [
        # A Debezium snapshot names an integer column whose default calls nextval() as pgjdbc does.
        (["int8", "INT8", "bigint", "BIGSERIAL", "serial8"], "int8"),
        (["int4", "INT4", "integer", "SERIAL", "serial4"], "int4"),
        (["int2", "smallint", "SMALLSERIAL", "serial2"], "int2"),
        # A type outside the search path: the snapshot qualifies and quotes it, the stream gives the bare name.
        (['"billing"."inv_status"', "INV_STATUS", "inv_status"], "inv_status"),
        (['"billing"."_inv_status"', "_INV_STATUS", "inv_status[]"], "_inv_status"),
        (['"Billing"."Inv Status"', "INV STATUS"], "inv status"),
        (['"sales"."a.b"', "A.B"], "a.b"),
        (['"char"', "CHAR"], "char"),
        (["СУММА", '"учёт"."сумма"', "сумма"], "сумма"),  # noqa: RUF001
        # numeric without precision: pgjdbc's length 131089 in a snapshot, none in the stream.
        (["numeric", "NUMERIC(131089,0)", "numeric(0)"], "numeric"),
        (["varchar", "VARCHAR(2147483647)"], "varchar"),
        (["timestamptz", "TIMESTAMPTZ(6)", "timestamp with time zone"], "timestamptz"),
        (["timetz", "time with time zone"], "timetz"),
        (["varbit", "bit varying"], "varbit"),
    ],
)
def test_every_spelling_of_a_type_is_one_canonical_type(spellings: list[str], canonical: str) -> None:
    assert {str(PgType.parse(s)) for s in spellings} == {canonical}


def test_of_keeps_only_a_modifier_that_says_something() -> None:
    assert PgType.of("NUMERIC", 131089, 0) == PgType("numeric")
    assert PgType.of("NUMERIC", 12, 2) == PgType("numeric", 12, 2)
    assert PgType.of("TIMESTAMP", 3) == PgType("timestamp", 3)
    assert PgType.of("TIMESTAMP", 6) == PgType("timestamp")
    assert PgType.of("BPCHAR", 3) == PgType("bpchar", 3)
    assert PgType.of("INT4", 10) == PgType("int4")
    assert PgType.of("BIGSERIAL", 19, 0) == PgType("int8")
