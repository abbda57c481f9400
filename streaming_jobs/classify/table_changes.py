"""Debezium table-change records (JSON, no schema envelope) -> typed changes, each valid or with a reason.

A change is `{"before": row, "after": row, "source": {..., "lsn": n, "ts_ms": t}, "op": "c|u|d|r"}`; the row
shape comes from the table's contract in schemas/tables/ (never inferred). The order of changes is the
order of the WAL: `source.lsn`, then the Kafka offset. The tombstone Debezium sends after a delete carries
nothing the delete did not already say, so it is dropped, not dead-lettered.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import LongType, StringType, StructField, StructType

from schemas.table_contracts import TableContract
from streaming_jobs.classify.contracts import CORRUPT, spark_type

SOURCE = StructType(
    [
        StructField("lsn", LongType()),
        StructField("ts_ms", LongType()),
        StructField("txId", LongType()),
        StructField("snapshot", StringType()),
    ]
)


def change_schema(contract: TableContract) -> StructType:
    """The StructType of a change event of this table, with a column for records that do not parse."""
    row = spark_type(contract.schema)
    return StructType(
        [
            StructField("before", row),
            StructField("after", row),
            StructField("source", SOURCE),
            StructField("op", StringType()),
            StructField("ts_ms", LongType()),
            StructField(CORRUPT, StringType()),
        ]
    )


def classify(records: DataFrame, contract: TableContract) -> DataFrame:
    """Every change as columns, with `error` null for a valid one; tombstones are dropped.

    Columns: the row's fields (from `after`, or `before` for a delete), `event_id` (the key as JSON, `@`, the
    LSN), _op, _lsn, _source_ts, the Kafka coordinates, the raw bytes, and `error`.
    """
    parsed = F.from_json(
        F.col("value").cast("string"),
        change_schema(contract),
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT},
    )
    changes = records.where(F.col("value").isNotNull()).select(
        parsed.alias("c"),
        F.col("key").alias("raw_key"),
        F.col("value").alias("raw_value"),
        "topic",
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
    )
    row = F.when(F.col("c.op") == "d", F.col("c.before")).otherwise(F.col("c.after"))
    missing_key = F.lit(False)
    for name in contract.primary_key:
        missing_key = missing_key | row[name].isNull()
    error: Column = (
        F.when(F.col(f"c.{CORRUPT}").isNotNull(), F.lit("malformed change event, or a field of the wrong type"))
        .when(
            ~F.col("c.op").isin("c", "u", "d", "r"),
            F.concat(F.lit("unknown op "), F.coalesce(F.col("c.op"), F.lit("null"))),
        )
        .when(row.isNull(), F.lit("no row image (after for c/u/r, before for d)"))
        .when(F.col("c.source.lsn").isNull(), F.lit("no source.lsn: cannot order the change"))
        .when(missing_key, F.lit(f"primary key {list(contract.primary_key)} missing from the row"))
    )
    # A change's identity across resends: its key and its LSN (a copy Debezium sends again has both).
    key = F.to_json(F.struct(*[row[name].alias(name) for name in contract.primary_key]))
    return changes.select(
        *[row[name].alias(name) for name in contract.columns],
        F.concat(key, F.lit("@"), F.col("c.source.lsn").cast("string")).alias("event_id"),
        F.col("c.op").alias("_op"),
        F.col("c.source.lsn").alias("_lsn"),
        (F.col("c.source.ts_ms") / 1000).cast("timestamp").alias("_source_ts"),
        "raw_key",
        "raw_value",
        "topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        F.lit(None).cast("map<string,string>").alias("headers"),
        error.alias("error"),
    )
