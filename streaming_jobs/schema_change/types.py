"""Postgres types as Delta columns, and a change's values (as Debezium's JSON converter writes them) as those.

| Postgres | Delta (Spark) | from the change |
|---|---|---|
| int2, int4, int8 | short, int, long | JSON numbers |
| float4, float8 | float, double | JSON numbers |
| numeric(p,s), p <= 38 | decimal(p,s) | exact text (`decimal.handling.mode=string`) |
| numeric without precision, or p > 38 | string | exact text: Spark's decimal holds 38 digits; NaN, Infinity, -Infinity |
| bool | boolean | |
| text, varchar(n), bpchar(n), uuid, enums, json, jsonb, xml, others | string | jsonb as its JSON text |
| bytea | binary | base64 |
| date | date | days since 1970-01-01 |
| timestamp (without zone) | timestamp_ntz | epoch milliseconds or microseconds (by precision) |
| timestamptz | timestamp (an instant, UTC) | ISO 8601 text |
| time | long (microseconds) | microseconds |
| interval | string | ISO 8601 (`P1Y2M3DT4H5M6.78S`, `interval.handling.mode=string`): months and days kept apart |
| bit(n), varbit | string of 0 and 1 | bit(1) a boolean, others Debezium's Bits (little-endian bytes) |
| point | string `(x,y)` | Debezium's Point struct |
| line, lseg, box, path, polygon, circle, other types Debezium does not know | string | their text, sent as bytes (`include.unknown.datatypes`) |
| an array of any of these | array of its element's type | JSON array |
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from schemas.pg_types import PgType
from streaming_jobs.schema_change.shapes import Field

MAX_DECIMAL_PRECISION = 38
_SIMPLE: dict[str, DataType] = {
    "int2": ShortType(),
    "int4": IntegerType(),
    "int8": LongType(),
    "float4": FloatType(),
    "float8": DoubleType(),
    "bool": BooleanType(),
    "bytea": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampNTZType(),
    "timestamptz": TimestampType(),
    "time": LongType(),
}
_INTEGERS: list[DataType] = [ShortType(), IntegerType(), LongType()]
_INTEGER_DIGITS: dict[DataType, int] = {ShortType(): 5, IntegerType(): 10, LongType(): 20}


def spark_type(pg: PgType) -> DataType:
    """The Delta column type of a Postgres type (the table above)."""
    if pg.is_array:
        return ArrayType(spark_type(pg.element), True)
    if pg.name == "numeric":
        if pg.precision is not None and 0 < pg.precision <= MAX_DECIMAL_PRECISION:
            return DecimalType(pg.precision, pg.scale or 0)
        return StringType()
    return _SIMPLE.get(pg.name, StringType())


POINT = "io.debezium.data.geometry.Point"
# How Debezium writes a numeric's special values with decimal.handling.mode=string, and how Postgres does.
NUMERIC_SPECIALS = {"NAN": "NaN", "POSITIVE_INFINITY": "Infinity", "NEGATIVE_INFINITY": "-Infinity"}


def parse_type(field: Field) -> DataType:
    """The type `from_json` reads the field's JSON value as, before it becomes its Delta type."""
    if field.logical == POINT:
        return StructType([StructField("x", DoubleType()), StructField("y", DoubleType())])
    if field.connect == "array":
        return ArrayType(parse_type(field.items) if field.items else StringType(), True)
    if field.logical == "io.debezium.time.Date":
        return IntegerType()
    if field.connect in ("int8", "int16", "int32", "int64"):
        return LongType()
    if field.connect in ("float", "float32", "double", "float64"):
        return DoubleType()
    if field.connect == "boolean":
        return BooleanType()
    return StringType()  # strings, base64 bytes, and anything else as its JSON text


def convert(value: Column, field: Field, target: DataType) -> Column:
    """The field's parsed value as the Delta column type `target`; null where it does not fit (`lost` tells)."""
    if isinstance(target, ArrayType) and field.items is not None:
        items, element = field.items, target.elementType
        return F.transform(value, lambda item: convert(item, items, element))
    logical = field.logical or ""
    if field.pg.element.name in ("bit", "varbit") and isinstance(target, StringType):
        return _bits(value, field)
    if logical == POINT:
        return F.concat(F.lit("("), _float_text(value["x"]), F.lit(","), _float_text(value["y"]), F.lit(")"))
    if field.pg.element.name == "numeric" and isinstance(target, StringType):
        specials = F.create_map(*[F.lit(x) for pair in NUMERIC_SPECIALS.items() for x in pair])
        return F.coalesce(specials[value], value)
    if logical == "io.debezium.time.Date":
        value = F.date_from_unix_date(value)
    elif logical == "io.debezium.time.Timestamp":
        value = F.timestamp_millis(value)
    elif logical == "io.debezium.time.MicroTimestamp":
        value = F.timestamp_micros(value)
    elif logical == "io.debezium.time.NanoTimestamp":
        value = F.timestamp_micros(F.floor(value / 1000))
    elif logical == "io.debezium.time.Time":
        value = value * 1000
    elif logical == "io.debezium.time.NanoTime":
        value = F.floor(value / 1000)
    elif field.connect == "bytes":
        value = F.unbase64(value)
    # Epoch-based timestamps become instants; a timestamp without zone is that instant read in UTC (the
    # session's zone, see spark_session), which gives back the wall-clock value Postgres stored.
    return value.try_cast(target)


def _bits(value: Column, field: Field) -> Column:
    """A bit string as Postgres prints it (`0101`), from Debezium's boolean (bit(1)) or Bits bytes.

    Bits are the string read as a binary number, in little-endian bytes: the digits are the number's, left-padded
    to bit(n)'s n. A varbit's length is not sent, so its leading zeros are not known: `0011` arrives as `11`.
    """
    if field.connect == "boolean":
        return F.when(value, F.lit("1")).when(~value, F.lit("0"))
    pairs = F.regexp_extract_all(F.hex(F.unbase64(value)), F.lit("(..)"), 1)
    binary = F.array_join(F.transform(F.reverse(pairs), lambda h: F.lpad(F.conv(h, 16, 2), 8, "0")), "")
    digits = F.regexp_replace(binary, "^0+", "")
    length = field.pg.precision
    if field.pg.name == "bit" and length:
        return F.when(value.isNotNull(), F.lpad(digits, length, "0"))
    return F.when(value.isNotNull(), F.when(digits == "", F.lit("0")).otherwise(digits))


def _float_text(value: Column) -> Column:
    """A float8 as Postgres prints it in a geometric value: `2`, not `2.0`."""
    return F.regexp_replace(value.cast("string"), r"\.0$", "")


def lost(raw: Column, value: Column, target: DataType) -> Column:
    """Whether `convert` made null what `raw` held: a value its column's type cannot hold.

    Under ANSI a cast of such a value fails its whole batch, at every restart: the change is set aside instead.
    An array: an element lost (one level deep; Postgres' arrays of arrays are one column type, rarely used).
    """
    if isinstance(target, ArrayType):
        return F.size(_nulls(value)) > F.size(_nulls(raw))
    return raw.isNotNull() & value.isNull()


def _nulls(items: Column) -> Column:
    return F.filter(items, lambda item: item.isNull())


def widens(old: DataType, new: DataType) -> bool:
    """Whether Delta's type widening can change a column from `old` to `new` in place, keeping every value."""
    if old == new:
        return True
    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        return widens(old.elementType, new.elementType)
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(old) <= _INTEGERS.index(new)
    if old in _INTEGERS and isinstance(new, DecimalType):
        return new.precision - new.scale >= _INTEGER_DIGITS[old]
    if old in _INTEGERS[:2] and new == DoubleType():
        return True
    if old == FloatType() and new == DoubleType():
        return True
    if old == DateType() and new == TimestampNTZType():
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return False
