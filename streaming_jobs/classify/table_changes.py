"""Debezium table-change records (JSON) -> typed changes, each valid or with a reason.

A change is `{"before": row, "after": row, "source": {..., "lsn": n, "ts_ms": t}, "op": "c|u|d|r"}`, sent with
its Connect schema (`{"schema": ..., "payload": change}`) by the table connector, or bare. Each set of changes
with one row shape is read with that shape (streaming_jobs.schema_change) into the columns and Delta types of
the job's contract; a bare change is read with the contract's own shape. Changes are ordered as their
transactions committed (`position`), then by the Kafka offset. The tombstone Debezium sends after a delete
carries nothing the delete did not already say, so it is dropped, not dead-lettered.

An unchanged TOASTed value (a large text, jsonb or bytea the update did not touch, under the default replica
identity) arrives as Debezium's placeholder: it is never a value. The column is null here and named in
`_unavailable`, and the mirror and the history keep the value they hold (sinks.scd).
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from schemas.table_contracts import TableContract
from streaming_jobs.classify.contracts import CORRUPT
from streaming_jobs.schema_change.apply import PAYLOAD, SHAPE, Plan
from streaming_jobs.schema_change.shapes import Field, Shape
from streaming_jobs.schema_change.types import convert, lost, parse_type, spark_type

SOURCE = StructType(
    [
        StructField("lsn", LongType()),
        StructField("ts_ms", LongType()),
        StructField("txId", LongType()),
        StructField("snapshot", StringType()),
        # Postgres: ["the last commit before the change's transaction", "the change's LSN"], as text. An
        # incremental snapshot's rows carry no lsn, only this: the stream's position at their chunk's closing mark.
        StructField("sequence", StringType()),
    ]
)
# Debezium's unavailable.value.placeholder (its default), as a string column and as base64 bytes.
PLACEHOLDER = "__debezium_unavailable_value"
PLACEHOLDER_BASE64 = base64.b64encode(PLACEHOLDER.encode()).decode()
# An hstore's (hstore.handling.mode=json): the placeholder mapped to itself.
PLACEHOLDER_MAP = json.dumps({PLACEHOLDER: PLACEHOLDER}, separators=(",", ":"))
UNAVAILABLE = "_unavailable"


def _row_type(shape: Shape) -> StructType:
    return StructType([StructField(f.name, parse_type(f), True) for f in shape.fields])


def placeholder(raw: Column, field: Field) -> Column | None:
    """Whether the field's value is Debezium's placeholder for an unchanged TOASTed value, in its type's form.

    None: a type without a placeholder (a number, a boolean).

    A string or jsonb: the placeholder; bytea: its bytes (base64); hstore: a map of it to itself (its JSON text);
    an array of strings or bytes: a one-element array of it; an array of integers: its bytes as numbers.
    """
    parsed = parse_type(field)
    if isinstance(parsed, StringType):
        if field.connect == "bytes":
            return raw == F.lit(PLACEHOLDER_BASE64)
        return raw.isin(PLACEHOLDER, PLACEHOLDER_MAP)
    if isinstance(parsed, ArrayType) and field.items is not None:
        if isinstance(parsed.elementType, StringType):
            marker = PLACEHOLDER_BASE64 if field.items.connect == "bytes" else PLACEHOLDER
            return (F.size(raw) == 1) & (raw[0] == F.lit(marker))
        if isinstance(parsed.elementType, LongType):
            return raw == F.array(*[F.lit(b).cast(LongType()) for b in PLACEHOLDER.encode()])
    return None


def change_type(shape: Shape) -> StructType:
    """A change of rows of this shape: before, after, source, op, ts_ms."""
    row = _row_type(shape)
    return StructType(
        [
            StructField("before", row),
            StructField("after", row),
            StructField("source", SOURCE),
            StructField("op", StringType()),
            StructField("ts_ms", LongType()),
        ]
    )


def change_schema_of(shape: Shape) -> StructType:
    """A bare change of rows of this shape, with a column for records that do not parse."""
    return StructType([*change_type(shape).fields, StructField(CORRUPT, StringType())])


def classify(records: DataFrame, contract: TableContract, plans: Mapping[int | None, Plan]) -> DataFrame:
    """Every change as the contract's columns, with `error` null for a valid one; tombstones are dropped.

    `records`: as streaming_jobs.schema_change.apply.slim gives them; `plans` (apply.reconcile) says how each
    shape in them is read.
    Columns: the contract's columns, `event_id` (the key as JSON, `@`, the LSN), _op, _lsn, _commit_lsn
    (`position`), _source_ts, _unavailable, the Kafka coordinates and `error`. Not the record's bytes: a dead
    letter's are read again from Kafka (BatchContext.raw), as few batches have one.
    """
    parts = []
    for shape_hash, plan in plans.items():
        mine = F.col(SHAPE).isNull() if shape_hash is None else F.col(SHAPE) == F.lit(shape_hash)
        parts.append(_classify(records.where(F.col(PAYLOAD).isNotNull() & mine), contract, plan))
    return functools.reduce(DataFrame.unionByName, parts)


def position() -> tuple[Column, Column]:
    """Where a change stands: (the last commit before its transaction, its own LSN): Debezium's `source.sequence`.

    Changes are ordered by both, commit first: the order in which transactions committed, then the order of the
    changes in one. The LSN alone is that order only among changes of one row of the stream (a row's next change
    waits for its lock, so for the commit before it). It is not for an incremental snapshot's row (DBLog): the
    row is emitted as the stream reads its chunk's closing mark and carries the mark's LSN, while a
    transaction that wrote before the mark and committed after it is streamed after the row with a lower LSN
    (a row it deleted came back; seen in make test). By commit, that transaction is after the mark's. Without
    a `sequence`, or with no commit seen yet (an initial snapshot's rows and the first transaction after
    them), the change's LSN stands for the commit too.
    """
    # try_cast: a part not known yet is JSON null, which get_json_object gives as the text "null".
    last_commit, lsn = (F.get_json_object(F.col("c.source.sequence"), f"$[{i}]").try_cast(LongType()) for i in (0, 1))
    own = F.coalesce(F.col("c.source.lsn"), lsn)
    return F.coalesce(last_commit, own), own


def _classify(records: DataFrame, contract: TableContract, plan: Plan) -> DataFrame:
    # The change alone, its schema cut off (apply.slim): the parser never walks the schema's kilobytes.
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    changes = records.select(
        F.from_json(F.col(PAYLOAD), change_schema_of(plan.shape), options).alias("c"),
        "topic",
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
    )
    row = F.when(F.col("c.op") == "d", F.col("c.before")).otherwise(F.col("c.after"))
    commit, lsn = position()
    types = contract.types
    values: list[Column] = []
    unavailable: list[Column] = []
    misfits: list[Column] = []
    for name in contract.columns:
        source = plan.source(name)
        target = spark_type(types[name])
        if source is None:
            values.append(F.lit(None).cast(target).alias(name))
            continue
        field = plan.shape.field(source)
        raw = row[source]
        toasted = placeholder(raw, field)
        if toasted is not None:
            unavailable.append(F.when(toasted, F.lit(name)))
            raw = F.when(F.coalesce(toasted, F.lit(False)), F.lit(None)).otherwise(raw)
        value = convert(raw, field, target)
        misfits.append(F.when(lost(raw, value, target), F.lit(f"{name} ({types[name]})")))
        values.append(value.alias(name))
    key_fields = [plan.source(k) or k for k in contract.primary_key]
    missing_key = functools.reduce(
        lambda a, b: a | b, [row[k].isNull() if k in plan.shape.names else F.lit(True) for k in key_fields]
    )
    error: Column = (
        F.when(F.col(f"c.{CORRUPT}").isNotNull(), F.lit("malformed change event, or a field of the wrong type"))
        .when(
            ~F.col("c.op").isin("c", "u", "d", "r"),
            F.concat(F.lit("unknown op "), F.coalesce(F.col("c.op"), F.lit("null"))),
        )
        .when(row.isNull(), F.lit("no row image (after for c/u/r, before for d)"))
        .when(lsn.isNull(), F.lit("no source.lsn (nor source.sequence): cannot order the change"))
        .when(missing_key, F.lit(f"primary key {list(contract.primary_key)} missing from the row"))
    )
    if misfits and not plan.dead_letter:
        # A contract behind its table (a column widened in Postgres), or a producer of its own: the change is a
        # dead letter, its bytes kept. A set-aside shape's values may not fit either: its own reason is said.
        # concat_ws skips the nulls, as array_compact would, but runs in Spark's generated code: array_compact is a
        # higher-order function, evaluated by interpretation with every conversion under it (twice the whole
        # classification's time, bench/table_read_bench.py `classify_s`).
        misfit = F.concat_ws(", ", *misfits)
        error = error.when(
            misfit != "",
            F.concat(
                F.lit("values that do not fit their column's type in the contract: "),
                misfit,
                F.lit(
                    f"; if the table's columns changed, write its contract again from the catalog (cdcpipe tables "
                    f"add {contract.table}), then replay from this offset (cdcpipe jobs backfill)"
                ),
            ),
        )
    if plan.dead_letter:
        error = F.coalesce(error, F.lit(plan.dead_letter))
    # A change's identity across resends: its key and its LSN (a copy Debezium sends again has both).
    key = F.to_json(
        F.struct(
            *[row[s].alias(k) for s, k in zip(key_fields, contract.primary_key, strict=True) if s in plan.shape.names]
        )
    )
    return changes.select(
        *values,
        F.concat(key, F.lit("@"), lsn.cast("string")).alias("event_id"),
        F.col("c.op").alias("_op"),
        lsn.alias("_lsn"),
        commit.alias("_commit_lsn"),
        (F.col("c.source.ts_ms") / 1000).cast("timestamp").alias("_source_ts"),
        (F.array_compact(F.array(*unavailable)) if unavailable else F.array().cast(ArrayType(StringType()))).alias(
            UNAVAILABLE
        ),
        "topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        F.lit(None).cast("map<string,string>").alias("headers"),
        error.alias("error"),
    )
