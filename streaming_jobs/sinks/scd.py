"""The table kinds: a mirror of a captured table (SCD type 1) and its history (SCD type 2), in WAL order.

Both key on the table's primary key (from its row contract) and order a key's changes by `source.lsn`, then
Kafka offset. Each writes its batch in one MERGE inside `ctx.idempotent()`, so a replayed batch is skipped
whole; and a change never overwrites a newer one (an LSN comparison), so order holds across batches too.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812

from schemas.table_contracts import TableContract
from streaming_jobs.sinks.context import BatchContext, ensure_table

MIRROR_META = ["_lsn", "_source_ts"]
HISTORY_META = ["_lsn", "valid_from", "valid_to", "is_current"]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_mirror(changes: DataFrame, ctx: BatchContext, contract: TableContract) -> int:
    """Insert, update and delete rows as the source did, newest change per key winning."""
    keys, columns = list(contract.primary_key), contract.columns
    window = Window.partitionBy(*keys).orderBy(F.col("_lsn").desc(), F.col("kafka_offset").desc())
    newest = (
        changes.where(F.col("error").isNull())
        .withColumn("_n", F.row_number().over(window))
        .where("_n = 1")
        .select(*columns, *MIRROR_META, "_op")
    )
    table = ensure_table(ctx, newest.drop("_op"))
    on = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in keys)
    values: dict[str, str | Column] = {_quoted(c): f"s.{_quoted(c)}" for c in [*columns, *MIRROR_META]}
    with ctx.idempotent():
        (
            table.alias("t")
            .merge(newest.alias("s"), on)
            .whenMatchedDelete(condition="s._op = 'd' AND s._lsn > t._lsn")
            .whenMatchedUpdate(condition="s._op <> 'd' AND s._lsn > t._lsn", set=values)
            .whenNotMatchedInsert(condition="s._op <> 'd'", values=values)
            .execute()
        )
    return newest.count()


def table_history(changes: DataFrame, ctx: BatchContext, contract: TableContract) -> int:
    """One row per version (valid_from, valid_to, is_current); a delete closes the last version.

    Several changes of one key in one batch become several versions, chained in LSN order. One MERGE both
    closes each key's open version in the table and inserts the new ones: the closing rows match on the key,
    the new versions carry no merge key, so they never match and are inserted.
    """
    keys, columns = list(contract.primary_key), contract.columns
    in_order = Window.partitionBy(*keys).orderBy("_lsn", "kafka_offset")
    ordered = (
        changes.where(F.col("error").isNull())
        .withColumn("_next_ts", F.lead("_source_ts").over(in_order))
        .withColumn("_rank", F.row_number().over(in_order))
        .cache()
    )
    versions = ordered.where("_op <> 'd'").select(
        *[F.lit(None).cast(ordered.schema[k].dataType).alias(f"_mk_{k}") for k in keys],
        F.lit(None).cast("timestamp").alias("_close_at"),
        F.lit(True).alias("_insert"),
        *columns,
        "_lsn",
        F.col("_source_ts").alias("valid_from"),
        F.col("_next_ts").alias("valid_to"),
        F.col("_next_ts").isNull().alias("is_current"),
    )
    closing = ordered.where("_rank = 1").select(
        *[F.col(k).alias(f"_mk_{k}") for k in keys],
        F.col("_source_ts").alias("_close_at"),
        F.lit(False).alias("_insert"),
        *[F.lit(None).cast(ordered.schema[c].dataType).alias(c) for c in columns],
        "_lsn",
        F.lit(None).cast("timestamp").alias("valid_from"),
        F.lit(None).cast("timestamp").alias("valid_to"),
        F.lit(None).cast("boolean").alias("is_current"),
    )
    staged = versions.unionByName(closing)
    table = ensure_table(ctx, versions.select(*columns, *HISTORY_META))
    on = " AND ".join(f"t.{_quoted(k)} = s.{_quoted('_mk_' + k)}" for k in keys) + " AND t.is_current"
    values: dict[str, str | Column] = {_quoted(c): f"s.{_quoted(c)}" for c in [*columns, *HISTORY_META]}
    with ctx.idempotent():
        (
            table.alias("t")
            .merge(staged.alias("s"), on)
            .whenMatchedUpdate(condition="s._lsn > t._lsn", set={"valid_to": "s._close_at", "is_current": "false"})
            .whenNotMatchedInsert(condition="s._insert", values=values)
            .execute()
        )
    count = ordered.count()
    ordered.unpersist()
    return count
