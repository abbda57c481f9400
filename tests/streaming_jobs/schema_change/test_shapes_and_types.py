"""A change's row shape from its Connect schema (a change captured from Debezium 3.4), and the type rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from schemas.pg_types import PgType
from streaming_jobs.schema_change.shapes import parse_shape
from streaming_jobs.schema_change.types import spark_type, widens

# A snapshot read of a row with one column of each kind, as the table connector sends it
# (examples/connectors/tables.json), captured from a real connector.
CAPTURED = json.loads((Path(__file__).parent / "debezium_change.json").read_text())


def test_a_captured_change_names_each_column_s_postgres_type() -> None:
    shape = parse_shape(json.dumps(CAPTURED["schema"]))
    assert shape.described
    types = {f.name: str(f.pg) for f in shape.fields}
    assert types == {
        "id": "int4",
        "small": "int2",
        "big": "int8",
        "n": "numeric(12,2)",
        "nu": "numeric",
        "vc": "varchar(20)",
        "t": "text",
        "ch": "bpchar(3)",
        "u": "uuid",
        "j": "jsonb",
        "arr": "_int4",
        "tarr": "_text",
        "m": "mood",
        "b": "bytea",
        "d": "date",
        "ts": "timestamp",
        "ts3": "timestamp(3)",
        "tz": "timestamptz",
        "tm": "time",
        "f4": "float4",
        "f8": "float8",
        "bo": "bool",
        "iv": "interval",
    }
    assert shape.field("m").enum == ("sad", "ok", "happy")
    assert shape.field("ts").logical == "io.debezium.time.MicroTimestamp"
    assert shape.field("ts3").logical == "io.debezium.time.Timestamp"
    assert not shape.field("id").optional


def test_a_schema_without_a_row_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Debezium table change"):
        parse_shape('{"type":"struct","fields":[{"type":"string","field":"op"}]}')


@pytest.mark.parametrize(
    ("pg", "spark"),
    [
        ("int2", ShortType()),
        ("int4", IntegerType()),
        ("int8", LongType()),
        ("float4", FloatType()),
        ("float8", DoubleType()),
        ("numeric(12,2)", DecimalType(12, 2)),
        ("numeric(38,0)", DecimalType(38, 0)),
        ("numeric(40,2)", StringType()),  # beyond Spark's 38 digits: exact text
        ("numeric", StringType()),
        ("date", DateType()),
        ("timestamp", TimestampNTZType()),
        ("timestamptz", TimestampType()),
        ("_int4", ArrayType(IntegerType(), True)),
        ("jsonb", StringType()),
        ("mood", StringType()),
    ],
)
def test_each_postgres_type_has_its_delta_type(pg: str, spark: object) -> None:
    assert spark_type(PgType.parse(pg)) == spark


@pytest.mark.parametrize(
    ("old", "new", "widened"),
    [
        ("int4", "int8", True),
        ("int2", "int4", True),
        ("int8", "int4", False),
        ("numeric(10,2)", "numeric(14,2)", True),
        ("numeric(10,2)", "numeric(12,4)", True),
        ("numeric(10,2)", "numeric(10,4)", False),  # fewer integer digits
        ("numeric(10,2)", "numeric(9,2)", False),
        ("int4", "numeric(12,2)", True),
        ("int8", "numeric(12,2)", False),
        ("float4", "float8", True),
        ("date", "timestamp", True),
        ("varchar(10)", "text", True),  # both strings in Delta: the contract alone changes
        ("text", "int4", False),
        ("int4", "text", False),
        ("timestamptz", "timestamp", False),
    ],
)
def test_which_type_changes_delta_widens_in_place(old: str, new: str, widened: bool) -> None:
    assert widens(spark_type(PgType.parse(old)), spark_type(PgType.parse(new))) is widened
