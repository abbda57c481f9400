"""Postgres column types as table contracts name them (`x-pg-type`), and the JSON Schema of each.

A type is written the way the catalog knows it: `pg_type.typname` (`int4`, `numeric`, `varchar`,
`timestamptz`, an enum's own name; an array is its element's name with a leading `_`), then the modifier
that matters for the data: `numeric(12,2)`, `varchar(100)`, `bpchar(3)`, `timestamp(3)`. Debezium's
`column.propagate.source.type` parameters name the same types (upper case), so a contract written from the
catalog and a change's own schema compare directly.

The JSON Schema of each type is what Debezium's JSON converter sends for it with the table connector's
settings (examples/connectors/tables.json): `decimal.handling.mode=string`, `binary.handling.mode=bytes`
(base64), `time.precision.mode=adaptive_time_microseconds`, `interval.handling.mode=numeric`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

INTEGERS = ("int2", "int4", "int8")
FLOATS = ("float4", "float8")
# Types whose modifier changes what a value may hold: written in the type, compared.
MODIFIED = ("numeric", "varchar", "bpchar", "timestamp", "timestamptz", "time", "timetz")
_TYPE = re.compile(r"^(?P<name>_?[a-z_][a-z0-9_]*)(\((?P<a>\d+)(,(?P<b>\d+))?\))?$")
# Plain spellings a hand-written contract may use, as the catalog names them.
ALIASES = {
    "smallint": "int2",
    "integer": "int4",
    "int": "int4",
    "bigint": "int8",
    "real": "float4",
    "double precision": "float8",
    "boolean": "bool",
    "decimal": "numeric",
    "character varying": "varchar",
    "character": "bpchar",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
}


@dataclass(frozen=True)
class PgType:
    """One column type: its catalog name and the modifier that matters (precision and scale, or length)."""

    name: str
    precision: int | None = None  # numeric precision, varchar/bpchar length, fractional digits of a time
    scale: int | None = None  # numeric scale

    def __str__(self) -> str:
        if self.precision is None:
            return self.name
        if self.scale is None:
            return f"{self.name}({self.precision})"
        return f"{self.name}({self.precision},{self.scale})"

    def normalized(self) -> PgType:
        """The same type as both the catalog and Debezium name it: a time's default precision (6) left out."""
        if self.element.name in ("timestamp", "timestamptz", "time", "timetz") and self.precision == 6:
            return PgType(self.name)
        if self.element.name not in MODIFIED:
            return PgType(self.name)
        return self

    @classmethod
    def parse(cls, text: str) -> PgType:
        """`numeric(12,2)`, `_int4`, `integer`; raises ValueError naming the form expected."""
        spelled = text.strip().lower()
        base, paren, rest = spelled.partition("(")
        spelled = ALIASES.get(base.strip(), base.strip()) + (paren + rest if paren else "")
        match = _TYPE.match(spelled.replace(" ", ""))
        if match is None:
            raise ValueError(
                f"{text!r} is not a Postgres type as contracts write it: the catalog name (pg_type.typname) "
                "with its modifier, e.g. int4, numeric(12,2), varchar(100), _text for text[]"
            )
        a, b = match["a"], match["b"]
        return cls(match["name"], int(a) if a else None, int(b) if b else None).normalized()

    @property
    def is_array(self) -> bool:
        return self.name.startswith("_")

    @property
    def element(self) -> PgType:
        """An array's element type (the modifier applies to the elements)."""
        return PgType(self.name[1:], self.precision, self.scale) if self.is_array else self


def json_schema(pg: PgType, nullable: bool, enum: list[str] | None = None) -> dict[str, Any]:
    """The JSON Schema of a column of this type as Debezium sends it, with `x-pg-type` naming the type."""
    schema = _value_schema(pg, enum)
    if nullable:
        kind = schema["type"]
        schema["type"] = [kind, "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
    return {**schema, "x-pg-type": str(pg)}


def _value_schema(pg: PgType, enum: list[str] | None) -> dict[str, Any]:
    if pg.is_array:
        return {"type": "array", "items": _value_schema(pg.element, enum)}
    name = pg.name
    if name in INTEGERS or name in ("date", "time", "interval") or (name == "timestamp"):
        # date: days since 1970-01-01; time: microseconds since midnight; interval: microseconds;
        # timestamp (no zone): milliseconds since the epoch up to 3 fractional digits, else microseconds.
        return {"type": "integer"}
    if name in FLOATS:
        return {"type": "number"}
    if name == "bool":
        return {"type": "boolean"}
    if name == "bytea":
        return {"type": "string", "contentEncoding": "base64"}
    if enum is not None:
        return {"type": "string", "enum": list(enum)}
    # numeric (as text, exact), text-like types, uuid, json/jsonb (as text), timestamptz and timetz (ISO 8601).
    return {"type": "string"}


def from_json_schema(rules: dict[str, Any]) -> PgType:
    """The type of a column: its `x-pg-type`, or the closest Postgres type of a hand-written JSON type."""
    if "x-pg-type" in rules:
        return PgType.parse(str(rules["x-pg-type"]))
    kind = rules.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "array":
        return PgType("_" + from_json_schema(rules.get("items", {})).name)
    return PgType({"integer": "int8", "number": "float8", "boolean": "bool"}.get(str(kind), "text"))
