"""Event contracts (JSON Schema files in schemas/) as Spark schemas and Spark checks: no inference at run time.

`spark_schema(contract)` is the StructType a payload parses into; `violation(contract, raw)` is one Spark
column holding the first way a payload breaks its contract (null when it keeps it). Checked inside Spark,
without a Python UDF: JSON syntax and types (through `from_json` with a corrupt-record column), required
fields, unexpected fields when `additionalProperties` is false, and, on top-level fields, `enum`,
`pattern`, `minLength`, `minimum`, `exclusiveMinimum`, `maximum`. Other keywords are left to the writer's
`emit`, which checks the whole schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from schemas.contracts import Contract, ContractRegistry, default_registry
from streaming_jobs.errors import ContractPatternError

CORRUPT = "_corrupt_record"


def checked_registry(spark: SparkSession) -> ContractRegistry:
    """The contracts a job classifies with, each `pattern` first compiled by Java's regex (see check_patterns)."""
    registry = default_registry()
    check_patterns(spark, registry)
    return registry


def check_patterns(spark: SparkSession, contracts: Iterable[Contract]) -> None:
    """Refuse a contract whose `pattern` Java's regex cannot compile, before any batch runs.

    `emit` checks patterns with Python's `re`, Spark's `rlike` with java.util.regex: a pattern only Python
    accepts would fail every batch holding such an event, after every restart.
    """
    compile_java = spark.sparkContext._jvm.java.util.regex.Pattern.compile  # type: ignore[union-attr]
    for contract in contracts:
        for name, rules in contract.schema.get("properties", {}).items():
            pattern = rules.get("pattern") if isinstance(rules, Mapping) else None
            if pattern is None:
                continue
            try:
                compile_java(pattern)
            except (Py4JJavaError, PySparkException) as exc:  # PySpark converts PatternSyntaxException
                reason = str(exc).strip().splitlines()[0]
                raise ContractPatternError(
                    f"contract {contract.event_type} v{contract.version} ({contract.path}): $.{name} has pattern "
                    f"{pattern!r}, which is not a Java regular expression ({reason}); Spark checks patterns "
                    "with Java's regex and emit() with Python's: write it in syntax both accept (for a named "
                    "group (?P<name>...), a plain group (...))"
                ) from exc


def spark_type(schema: Mapping[str, Any]) -> DataType:
    """The Spark type a JSON Schema fragment parses into (a nullable union picks its non-null type)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        properties = schema.get("properties", {})
        return StructType([StructField(name, spark_type(sub), True) for name, sub in properties.items()])
    if kind == "array":
        return ArrayType(spark_type(schema.get("items", {})), True)
    return {"integer": LongType(), "number": DoubleType(), "boolean": BooleanType()}.get(str(kind), StringType())


def spark_schema(contract: Contract) -> StructType:
    """The payload's StructType, plus the column that receives a payload that does not parse."""
    base = spark_type(contract.schema)
    fields = list(base.fields) if isinstance(base, StructType) else []
    return StructType([*fields, StructField(CORRUPT, StringType(), True)])


def parse(contract: Contract, raw: Column) -> Column:
    """`raw` (a JSON string column) parsed with the contract's schema; bad input lands in CORRUPT."""
    return F.from_json(raw, spark_schema(contract), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})


def _wrong_types(raw: Column, properties: Mapping[str, Any]) -> list[Column]:
    """Per top-level field, the message naming it when it alone does not parse as its contract type.

    Each field is parsed on its own, with Spark's own rules, so the field named is the one Spark refused.
    Only a payload the whole parse rejected gets here, so the valid case never pays for these parses.
    """
    named = []
    for name, rules in properties.items():
        alone = StructType([StructField(name, spark_type(rules), True), StructField(CORRUPT, StringType(), True)])
        parsed = F.from_json(raw, alone, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
        kind = rules.get("type")
        expected = " or ".join(kind) if isinstance(kind, list) else str(kind)
        named.append(
            F.when(parsed[CORRUPT].isNotNull(), F.lit(f"$.{name} has the wrong type: the contract says {expected}"))
        )
    return named


def violation(contract: Contract, raw: Column, parsed: Column) -> Column:
    """The first way `raw` breaks `contract`, as text naming the field; null when it keeps the contract.

    `parsed` is `parse(contract, raw)` as a column of its own: every check reads its fields, and a column
    is computed once per row where a repeated expression would parse the JSON again for each check.
    """
    schema = contract.schema
    properties: Mapping[str, Any] = schema.get("properties", {})
    # from_json parses each payload once; only a payload it rejects is looked at again (to say whether the
    # JSON itself is broken or a field has the wrong type), so the common, valid case costs one parse.
    rejected = F.when(F.json_object_keys(raw).isNull(), F.lit("malformed JSON, or not a JSON object")).otherwise(
        F.coalesce(*_wrong_types(raw, properties), F.lit("a field has the wrong type for the contract"))
    )
    checks: list[tuple[Column, Column | str]] = [
        (raw.isNull(), "no payload (null value) for an event that is not a tombstone"),
        (parsed[CORRUPT].isNotNull(), rejected),
    ]
    for name in schema.get("required", []):
        if _allows_null(properties.get(name, {})):
            # Present is enough, as JSON Schema reads `required`; this costs a second parse, so only here.
            present = F.array_contains(F.json_object_keys(raw), F.lit(name))
            checks.append((~present, f"missing field $.{name}"))
        else:
            checks.append((parsed[name].isNull(), f"missing field $.{name}"))
    if schema.get("additionalProperties") is False:
        extra = F.array_except(F.json_object_keys(raw), F.array(*[F.lit(p) for p in properties]))
        checks.append((F.size(extra) > 0, F.concat(F.lit("unexpected field(s) "), F.array_join(extra, ", "))))
    for name, rules in properties.items():
        value = parsed[name]
        if "enum" in rules:
            checks.append((value.isNotNull() & ~value.isin(*rules["enum"]), f"$.{name} is not one of {rules['enum']}"))
        if "pattern" in rules:
            checks.append(
                (value.isNotNull() & ~value.rlike(rules["pattern"]), f"$.{name} does not match {rules['pattern']}")
            )
        if "minLength" in rules:
            checks.append((F.length(value) < rules["minLength"], f"$.{name} is shorter than {rules['minLength']}"))
        if "minimum" in rules:
            checks.append((value < rules["minimum"], f"$.{name} is below the minimum {rules['minimum']}"))
        if "exclusiveMinimum" in rules:
            checks.append((value <= rules["exclusiveMinimum"], f"$.{name} must be above {rules['exclusiveMinimum']}"))
        if "maximum" in rules:
            checks.append((value > rules["maximum"], f"$.{name} is above the maximum {rules['maximum']}"))
    # The checks run in this order, so malformed input reports as malformed, not as a dozen missing fields.
    return F.coalesce(
        *[F.when(bad, message if isinstance(message, Column) else F.lit(message)) for bad, message in checks]
    )


def _allows_null(rules: Mapping[str, Any]) -> bool:
    """Whether a property's schema takes null (`"type": ["string", "null"]`)."""
    kind = rules.get("type")
    return kind == "null" or (isinstance(kind, list) and "null" in kind)
