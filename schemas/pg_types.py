"""Postgres column types as table contracts name them (`x-pg-type`), and the JSON Schema of each.

A type is written the way the catalog knows it: `pg_type.typname` (`int4`, `numeric`, `varchar`,
`timestamptz`, an enum's own name; an array is its element's name with a leading `_`), then the modifier
that matters for the data: `numeric(12,2)`, `varchar(100)`, `bpchar(3)`, `timestamp(3)`. Debezium's
`column.propagate.source.type` parameters name the same types (upper case), so a contract written from the
catalog and a change's own schema compare directly.

The JSON Schema of each type is what Debezium's JSON converter sends for it with the table connector's
settings (examples/connectors/tables.json): `decimal.handling.mode=string`, `binary.handling.mode=bytes`
(base64), `time.precision.mode=adaptive_time_microseconds`, `interval.handling.mode=string` (ISO 8601).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

INTEGERS = ("int2", "int4", "int8")
FLOATS = ("float4", "float8")
# Types whose modifier changes what a value may hold: written in the type, compared.
MODIFIED = ("numeric", "varchar", "bpchar", "bit", "varbit", "timestamp", "timestamptz", "time", "timetz")
TIMES = ("timestamp", "timestamptz", "time", "timetz")
# Postgres' largest numeric precision: a larger "length" is a driver's word for "no precision" (pgjdbc: 131089).
MAX_NUMERIC_PRECISION = 1000
# A varchar or bpchar length a driver gives for "no length".
UNBOUNDED_LENGTH = 2147483647
# `name`, then an optional `(a)` or `(a,b)` and `[]`; the name may hold any character a type name may.
_TYPE = re.compile(r"^(?P<name>.+?)(\((?P<a>-?\d+)(,(?P<b>-?\d+))?\))?(?P<array>\[\])?$")
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
    "time without time zone": "time",
    "time with time zone": "timetz",
    "bit varying": "varbit",
}
# What the JDBC driver (so a Debezium snapshot) calls an integer column whose default calls nextval(): the
# column's type is the integer; the sequence is its default, not its type.
SERIALS = {
    "smallserial": "int2",
    "serial2": "int2",
    "serial": "int4",
    "serial4": "int4",
    "bigserial": "int8",
    "serial8": "int8",
}


def canonical_name(spelled: str) -> str:
    """The one spelling of a type name, whoever wrote it: the catalog, a Debezium snapshot, the stream, a user.

    `pg_type.typname` in lower case, without a schema or quotes: a snapshot's `"billing"."inv_status"` (pgjdbc
    qualifies a type outside the search path) and the stream's `INV_STATUS` (pgoutput's bare name, upper-cased
    by Debezium) are both `inv_status`; `BIGSERIAL` is `int8`; `int4[]` is `_int4`. Case is folded because
    Debezium upper-cases every name it sends: two types whose names differ only in case are one here.
    Only a quoted name is split at its dots (a bare name from the stream is never qualified).
    """
    text = " ".join(spelled.split())
    array = text.endswith("[]")
    text = text.removesuffix("[]").strip()
    if text.startswith('"'):
        text = _unquoted_last(text)
    name = text.lower()
    name = ALIASES.get(name, SERIALS.get(name, name))
    return "_" + name if array else name


def _unquoted_last(text: str) -> str:
    """The last part of a quoted, maybe qualified, name: `"s"."t"` -> `t`, `"a""b"` -> `a"b`."""
    parts, current, quoted, i = [], "", False, 0
    while i < len(text):
        char = text[i]
        if char == '"':
            if quoted and text[i + 1 : i + 2] == '"':
                current += '"'
                i += 1
            else:
                quoted = not quoted
        elif char == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
        i += 1
    parts.append(current)
    return parts[-1]


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
        """The same type as both the catalog and Debezium name it (PgType.of)."""
        return PgType.of(self.name, self.precision, self.scale)

    @classmethod
    def of(cls, name: str, precision: int | None = None, scale: int | None = None) -> PgType:
        """The canonical type of any spelling of a name (canonical_name) and its modifier, as drivers give them.

        A modifier is kept only where it changes what a value may hold (MODIFIED), and only when it says
        something: a time's default precision (6), a numeric "precision" past Postgres' 1,000 (a driver's
        word for none) and a varchar of unbounded length are no modifier, so the catalog, a snapshot and the
        stream give one type for one column.
        """
        canonical = canonical_name(name)
        base = canonical.removeprefix("_")
        if base not in MODIFIED or precision is None or precision < 0:
            return cls(canonical)
        if base in TIMES:
            return cls(canonical) if precision == 6 else cls(canonical, precision)
        if base == "numeric":
            if not 0 < precision <= MAX_NUMERIC_PRECISION:
                return cls(canonical)
            return cls(canonical, precision, scale or 0)
        return cls(canonical, precision) if 0 < precision < UNBOUNDED_LENGTH else cls(canonical)

    @classmethod
    def parse(cls, text: str) -> PgType:
        """`numeric(12,2)`, `_int4`, `integer`, `"billing"."inv_status"`; ValueError naming the form expected."""
        match = _TYPE.match(" ".join(text.split()).replace(", ", ","))
        name = match["name"].strip() if match else ""
        if match is None or not name or "(" in name or ")" in name:
            raise ValueError(
                f"{text!r} is not a Postgres type as contracts write it: the catalog name (pg_type.typname) "
                "with its modifier, e.g. int4, numeric(12,2), varchar(100), _text for text[]"
            )
        a, b = match["a"], match["b"]
        return cls.of(name + (match["array"] or ""), int(a) if a else None, int(b) if b else None)

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
    if name in INTEGERS or name in ("date", "time") or (name == "timestamp"):
        # date: days since 1970-01-01; time: microseconds since midnight;
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
