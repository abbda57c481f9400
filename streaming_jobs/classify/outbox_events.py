"""Kafka records in the outbox wire format -> events, each either valid or with the reason it is not.

The wire format is Debezium EventRouter's (and our relay's): key = aggregate id, value = payload JSON,
headers `id`, `eventType`, `eventVersion`. A record with no key, no id, an unknown (type, version), or a
payload that breaks its contract gets an `error`; the job sends it to its dead-letter table. A record with
no value is a tombstone: valid for any known event type, and it carries no payload to check.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812

from schemas.contracts import ContractRegistry
from streaming_jobs.classify.contracts import parse, violation


def _headers() -> Column:
    """The record's headers as a map; the last value wins when a name repeats (spark.sql.mapKeyDedupPolicy).

    Built without higher-order functions (filter, transform): Spark evaluates those row by row without
    generated code, and they were a good part of classifying a record. The map is one common expression of
    the projection, computed once per record whatever reads it.
    """
    return F.map_from_entries(F.col("headers"))


def _header(name: str) -> Column:
    """The value of one Kafka header as text (null when absent); the last one when the name repeats."""
    return F.try_element_at(_headers(), F.lit(name)).cast("string")


@dataclass(frozen=True)
class _Columns:
    """The classification as Spark columns: built once per registry, reused by every batch."""

    base: list[Column]
    parsed: list[Column]
    parsed_names: list[str]
    error: Column


@functools.lru_cache(maxsize=8)
def _columns(registry: ContractRegistry) -> _Columns:
    # Building these expressions is hundreds of calls into the JVM: a few tenths of a second that a
    # micro-batch of a few thousand records should not pay each time.
    base = [
        _header("id").alias("event_id"),
        _header("eventType").alias("event_type"),
        _header("eventVersion").alias("event_version_text"),
        F.col("key").cast("string").alias("aggregate_id"),
        F.col("value").cast("string").alias("payload"),
        F.col("value").alias("raw_value"),
        F.col("key").alias("raw_key"),
        F.col("topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        _headers().cast("map<string,string>").alias("headers"),
        _header("eventVersion").try_cast("int").alias("event_version"),
    ]
    by_contract = F.lit(None).cast("string")
    known = F.lit(False)
    parsed: list[Column] = []
    names: list[str] = []
    for i, contract in enumerate(registry):
        this = (F.col("event_type") == contract.event_type) & (F.col("event_version") == contract.version)
        known = known | this
        # Parsed once, only for the events of this contract, into a column the checks then read.
        name = f"_parsed_{i}"
        names.append(name)
        parsed.append(F.when(this, parse(contract, F.col("payload"))).alias(name))
        by_contract = F.when(
            this & F.col("raw_value").isNotNull(), violation(contract, F.col("payload"), F.col(name))
        ).otherwise(by_contract)
    error = (
        F.when(F.col("raw_key").isNull(), F.lit("null key: the aggregate id is missing"))
        .when(F.col("event_id").isNull(), F.lit("no 'id' header: the event id is missing"))
        .when(F.col("event_type").isNull(), F.lit("no 'eventType' header"))
        .when(F.col("event_version").isNull(), F.lit("no 'eventVersion' header, or not a number"))
        .when(
            ~known,
            F.concat(
                F.lit("unknown event type "),
                F.col("event_type"),
                F.lit(" v"),
                F.col("event_version_text"),
                F.lit(": no contract "),
                F.col("event_type"),
                F.lit(".v"),
                F.col("event_version_text"),
                F.lit(".json in a folder of CDCPIPE_CONTRACT_DIRS"),
            ),
        )
        .otherwise(by_contract)
    )
    return _Columns(base, parsed, names, error.alias("error"))


def classify(records: DataFrame, registry: ContractRegistry) -> DataFrame:
    """Columns of every event: ids, coordinates, payload text, and `error` (null for a valid event)."""
    columns = _columns(registry)
    events = records.select(*columns.base)
    # Three projections, not a withColumn per contract: each one is analysed again with the whole plan.
    events = events.select("*", *columns.parsed)
    kept = [c for c in events.columns if c not in {*columns.parsed_names, "event_version_text"}]
    return events.select(*kept, columns.error)
