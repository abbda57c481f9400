"""The row shape a table change carries: its columns, each with Debezium's type and the Postgres type.

The table connector sends each change with its Kafka Connect schema (`value.converter.schemas.enable`) and
each column's source type in the field's parameters (`column.propagate.source.type`), so a change says
exactly which columns the table had, and of which types, when it was made: a job compares that with its
contract instead of guessing from values. A change sent without a schema (an older connector definition,
a hand-made record) is read with the contract's own shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from schemas.pg_types import TIMES, PgType, canonical_name
from schemas.table_contracts import TableContract

SOURCE_TYPE = "__debezium.source.column.type"
SOURCE_LENGTH = "__debezium.source.column.length"
SOURCE_SCALE = "__debezium.source.column.scale"
# Debezium's Connect types as Postgres's, for a field without the source type in its parameters.
CONNECT_TO_PG = {
    "int8": "int2",
    "int16": "int2",
    "int32": "int4",
    "int64": "int8",
    "float": "float4",
    "float32": "float4",
    "double": "float8",
    "float64": "float8",
    "boolean": "bool",
    "bytes": "bytea",
    "string": "text",
}
LOGICAL_TO_PG = {
    "io.debezium.time.Date": "date",
    "io.debezium.time.Timestamp": "timestamp",
    "io.debezium.time.MicroTimestamp": "timestamp",
    "io.debezium.time.NanoTimestamp": "timestamp",
    "io.debezium.time.ZonedTimestamp": "timestamptz",
    "io.debezium.time.MicroTime": "time",
    "io.debezium.time.Time": "time",
    "io.debezium.time.MicroDuration": "interval",
    "io.debezium.time.Interval": "interval",
    "io.debezium.data.Json": "jsonb",
    "io.debezium.data.Uuid": "uuid",
}


@dataclass(frozen=True)
class Field:
    """One column as a change carries it."""

    name: str
    connect: str  # Kafka Connect's type: int32, int64, string, bytes, boolean, double, array, ...
    logical: str | None  # the schema's name, e.g. io.debezium.time.MicroTimestamp
    pg: PgType
    optional: bool = True
    items: Field | None = None  # an array's element
    enum: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Shape:
    """A table's columns as one set of changes carries them, in the table's column order."""

    fields: tuple[Field, ...]
    described: bool  # False: a change without a schema, read with the contract's shape

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)


def _pg_type(schema: dict[str, Any]) -> PgType:
    params = schema.get("parameters") or {}
    source = params.get(SOURCE_TYPE)
    if source is None:
        logical = schema.get("name")
        if schema.get("type") == "array":
            return PgType("_" + _pg_type(schema.get("items") or {}).name)
        return PgType(LOGICAL_TO_PG.get(str(logical), CONNECT_TO_PG.get(str(schema.get("type")), "text")))
    length = int(params.get(SOURCE_LENGTH, 0) or 0)
    scale = int(params[SOURCE_SCALE]) if SOURCE_SCALE in params else None
    base = canonical_name(str(source)).removeprefix("_")
    # A time's precision travels as the "scale"; a numeric's and a varchar's as the length.
    return PgType.of(str(source), scale if base in TIMES else length, scale)


def _field(schema: dict[str, Any], name: str) -> Field:
    items = schema.get("items")
    allowed = (schema.get("parameters") or {}).get("allowed")
    return Field(
        name=name,
        connect=str(schema.get("type")),
        logical=schema.get("name"),
        pg=_pg_type(schema),
        optional=bool(schema.get("optional", True)),
        items=_field(items, "element") if isinstance(items, dict) else None,
        enum=tuple(allowed.split(",")) if isinstance(allowed, str) else None,
    )


def parse_shape(schema_text: str) -> Shape:
    """The row shape in a change's Connect schema (the `schema` of `{"schema": ..., "payload": ...}`)."""
    schema = json.loads(schema_text)
    row = next(
        (f for f in schema.get("fields", []) if f.get("field") in ("after", "before") and f.get("type") == "struct"),
        None,
    )
    if row is None:
        raise ValueError("the change's schema has no `after` or `before` struct: not a Debezium table change")
    return Shape(tuple(_field(f, f["field"]) for f in row["fields"]), described=True)


def contract_shape(contract: TableContract) -> Shape:
    """The contract's columns as a change without a schema carries them (plain JSON values)."""
    fields = []
    for name, pg in contract.types.items():
        if contract.schema["properties"][name].get("x-dropped"):
            continue
        element = pg.element
        connect = "array" if pg.is_array else _plain(element)
        items = Field("element", _plain(element), None, element) if pg.is_array else None
        fields.append(Field(name, connect, None, pg, contract.nullable(name), items))
    return Shape(tuple(fields), described=False)


def _plain(pg: PgType) -> str:
    if pg.name in ("int2", "int4", "int8"):
        return "int64"
    if pg.name in ("float4", "float8"):
        return "double"
    return "boolean" if pg.name == "bool" else "string"
