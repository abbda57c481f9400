"""The table kinds: a mirror of a captured table (SCD type 1) and its history (SCD type 2), in commit order.

Both key on the table's primary key (from its row contract) and order a key's changes as their transactions
committed, then by LSN (`_commit_lsn`, `_lsn`: classify.table_changes.position), then Kafka offset. Each
writes its batch in one MERGE inside `ctx.idempotent()`, so a replayed batch is skipped
whole; and a change never overwrites a newer one (`NEWER`), so order holds across batches too.

An unchanged TOASTed value (named in `_unavailable`, classify.table_changes) takes the key's value before it:
from an earlier change of the batch, else from the table (the mirror's row, the history's current version).
A key the table does not hold yet gets null there: the value was never sent. `REPLICA IDENTITY FULL` on the
source table makes Debezium send every value (`schema apply` sets it for `replica_identity_full` tables).
"""

from __future__ import annotations

import functools

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import ArrayType, BinaryType, StringType

from schemas.table_contracts import TableContract
from streaming_jobs.classify.table_changes import UNAVAILABLE
from streaming_jobs.once import applied
from streaming_jobs.once.context import BatchContext, created_with, merge_source_rows
from streaming_jobs.schema_change.apply import keep_copy
from streaming_jobs.schema_change.columns import column, quoted
from streaming_jobs.schema_change.types import spark_type

MIRROR_META = ["_lsn", "_commit_lsn", "_source_ts"]
HISTORY_META = ["_lsn", "_commit_lsn", "valid_from", "valid_to", "is_current"]
HISTORY_PARTITIONING = ["is_current"]  # why: table_history
IN_ORDER = ("_commit_lsn", "_lsn", "kafka_offset")
# The change `s` is newer than the table's row `t`: committed later, or later in the same transaction.
NEWER = "(s._commit_lsn > t._commit_lsn OR (s._commit_lsn = t._commit_lsn AND s._lsn > t._lsn))"


def toastable(contract: TableContract, ctx: BatchContext | None = None) -> list[str]:
    """Columns whose unchanged value Debezium may leave out (variable-length text, bytes, arrays), unless FULL.

    Empty when the batch is known to hold no value left out (`ctx.has_unsent`): then there is nothing to carry.
    """
    if contract.replica_identity == "full" or (ctx is not None and ctx.has_unsent is False):
        return []
    return [c for c, t in contract.types.items() if isinstance(spark_type(t), StringType | BinaryType | ArrayType)]


def _carry_unavailable(changes: DataFrame, keys: list[str], columns: list[str]) -> DataFrame:
    """Each unavailable value replaced by the key's latest available one in the batch, in commit, then LSN order."""
    if not columns:
        return changes
    so_far = (
        Window.partitionBy(*_columns(keys)).orderBy(*IN_ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    carried = changes
    for c in columns:
        # Wrapped in a struct, so a real null is a value and only "not sent" is skipped.
        given = F.when(~F.array_contains(UNAVAILABLE, c), F.struct(column(c).alias("v")))
        carried = carried.withColumn(f"_have_{c}", F.last(given, ignorenulls=True).over(so_far))
    still = F.array_compact(F.array(*[F.when(column(f"_have_{c}").isNull(), F.lit(c)) for c in columns]))
    return carried.select(
        *[
            column(f"_have_{c}").getField("v").alias(c) if c in columns else column(c)
            for c in changes.columns
            if c != UNAVAILABLE
        ],
        still.alias(UNAVAILABLE),
    )


def _columns(names: list[str]) -> list[Column]:
    return [column(n) for n in names]


def _kept(name: str, unavailable: list[str]) -> str | Column:
    """The MERGE value of a column: the table's own where the change did not send it."""
    if name in unavailable:
        sent = ~F.array_contains(F.col(f"s.{UNAVAILABLE}"), F.lit(name))
        return F.when(sent, F.col(f"s.{quoted(name)}")).otherwise(F.col(f"t.{quoted(name)}"))
    return f"s.{quoted(name)}"


def table_mirror(changes: DataFrame, ctx: BatchContext, contract: TableContract) -> int:
    """Insert, update and delete rows as the source did, newest change per key winning."""
    keys, columns = list(contract.primary_key), contract.columns
    unsent = toastable(contract, ctx)
    window = Window.partitionBy(*_columns(keys)).orderBy(*[F.col(c).desc() for c in IN_ORDER])
    newest = (
        _carry_unavailable(changes.where(F.col("error").isNull()), keys, unsent)
        .withColumn("_n", F.row_number().over(window))
        .where("_n = 1")
        .select(*_columns(columns), *MIRROR_META, "_op", UNAVAILABLE)
    )
    keep_copy(ctx.table, contract)
    if created_with(ctx, newest.where("_op <> 'd'").drop("_op", UNAVAILABLE)):
        return newest.count()  # a new table: its first batch's rows written, the deletes of rows it never had dropped
    table = DeltaTable.forPath(ctx.spark, str(ctx.table))
    on = " AND ".join(f"t.{quoted(k)} = s.{quoted(k)}" for k in keys)
    inserted: dict[str, str | Column] = {quoted(c): f"s.{quoted(c)}" for c in [*columns, *MIRROR_META]}
    updated: dict[str, str | Column] = {quoted(c): _kept(c, unsent) for c in [*columns, *MIRROR_META]}
    before = applied.newest_version(ctx.table)
    with ctx.idempotent():
        (
            table.alias("t")
            .merge(newest.alias("s"), on)
            .whenMatchedDelete(condition=f"s._op = 'd' AND {NEWER}")
            .whenMatchedUpdate(condition=f"s._op <> 'd' AND {NEWER}", set=updated)
            .whenNotMatchedInsert(condition="s._op <> 'd'", values=inserted)
            .execute()
        )
    merged = merge_source_rows(ctx, before)
    return newest.count() if merged is None else merged


def _from_current_versions(ordered: DataFrame, ctx: BatchContext, keys: list[str], unsent: list[str]) -> DataFrame:
    """Values no change of the batch sent, from the key's current version in the table."""
    current = (
        DeltaTable.forPath(ctx.spark, str(ctx.table))
        .toDF()
        .where("is_current")
        .select(*[column(k).alias(f"_cur_{k}") for k in keys], *[column(c).alias(f"_cur_{c}") for c in unsent])
    )
    on = [ordered[quoted(k)].eqNullSafe(current[quoted(f"_cur_{k}")]) for k in keys]
    joined = ordered.join(current, on, "left")
    filled = [
        F.when(F.array_contains(UNAVAILABLE, c), column(f"_cur_{c}")).otherwise(column(c)).alias(c)
        if c in unsent
        else column(c)
        for c in ordered.columns
    ]
    return joined.select(*filled)


def _without_repeated_reads(changes: DataFrame, ctx: BatchContext, keys: list[str], columns: list[str]) -> DataFrame:
    """The changes less each snapshot read (`r`) equal to the version before it: no version says nothing new.

    A snapshot of a table the history already holds (`cdcpipe tables snapshot`, after a repair) reads every
    row again; only a row that differs from its current version (or from the change before it in the batch)
    is a new version. A read never stands for a change: a row updated since is read with its update's values.
    """
    current = (
        DeltaTable.forPath(ctx.spark, str(ctx.table))
        .toDF()
        .where("is_current")
        .select(*[column(c).alias(f"_cur_{c}") for c in columns])
    )
    on = [changes[quoted(k)].eqNullSafe(current[quoted(f"_cur_{k}")]) for k in keys]
    in_order = Window.partitionBy(*_columns(keys)).orderBy(*IN_ORDER)
    joined = changes.join(current, on, "left")
    first = F.row_number().over(in_order) == 1
    before = [
        F.when(first, column(f"_cur_{c}")).otherwise(F.lag(column(c)).over(in_order)).eqNullSafe(column(c))
        for c in columns
    ]
    had_one = F.when(first, column(f"_cur_{keys[0]}").isNotNull()).otherwise(F.lag("_op").over(in_order) != "d")
    repeated = (F.col("_op") == "r") & had_one & functools.reduce(lambda a, b: a & b, before)
    return joined.withColumn("_repeated", repeated).where(~F.col("_repeated")).select(*_columns(changes.columns))


def table_history(changes: DataFrame, ctx: BatchContext, contract: TableContract) -> int:
    """One row per version (valid_from, valid_to, is_current); a delete closes the last version.

    Several changes of one key in one batch become several versions, chained in order (`IN_ORDER`). One MERGE both
    closes each key's open version in the table and inserts the new ones: the closing rows match on the key,
    the new versions carry no merge key, so they never match and are inserted.

    The table is partitioned by `is_current`: the MERGE (whose condition names `t.is_current`) and the reads of
    current versions then skip every closed version's file, so a batch reads about as much as a mirror's does
    however long the history grows. Unpartitioned, each batch read the whole table and the batches grew with it
    (docs/benchmarks.md).
    """
    keys, columns = list(contract.primary_key), contract.columns
    unsent = toastable(contract, ctx)
    in_order = Window.partitionBy(*_columns(keys)).orderBy(*IN_ORDER)
    valid = _carry_unavailable(changes.where(F.col("error").isNull()), keys, unsent)
    if (
        ctx.has_reads is not False
        and DeltaTable.isDeltaTable(ctx.spark, str(ctx.table))
        and not valid.where("_op = 'r'").isEmpty()
    ):
        valid = _without_repeated_reads(valid, ctx, keys, columns)
    ordered = (
        valid.withColumn("_next_ts", F.lead("_source_ts").over(in_order))
        .withColumn("_rank", F.row_number().over(in_order))
        .cache()
    )
    cached = ordered
    if (
        unsent
        and DeltaTable.isDeltaTable(ctx.spark, str(ctx.table))
        and not ordered.where(F.size(UNAVAILABLE) > 0).isEmpty()
    ):
        ordered = _from_current_versions(ordered, ctx, keys, unsent)
    versions = ordered.where("_op <> 'd'").select(
        *[F.lit(None).cast(ordered.schema[k].dataType).alias(f"_mk_{k}") for k in keys],
        F.lit(None).cast("timestamp").alias("_close_at"),
        F.lit(True).alias("_insert"),
        *_columns(columns),
        "_lsn",
        "_commit_lsn",
        F.col("_source_ts").alias("valid_from"),
        F.col("_next_ts").alias("valid_to"),
        F.col("_next_ts").isNull().alias("is_current"),
    )
    closing = ordered.where("_rank = 1").select(
        *[column(k).alias(f"_mk_{k}") for k in keys],
        F.col("_source_ts").alias("_close_at"),
        F.lit(False).alias("_insert"),
        *[F.lit(None).cast(ordered.schema[c].dataType).alias(c) for c in columns],
        "_lsn",
        "_commit_lsn",
        F.lit(None).cast("timestamp").alias("valid_from"),
        F.lit(None).cast("timestamp").alias("valid_to"),
        F.lit(None).cast("boolean").alias("is_current"),
    )
    staged = versions.unionByName(closing)
    keep_copy(ctx.table, contract)
    # A new table has no version to close: its first batch is its versions, written.
    if not created_with(ctx, versions.select(*_columns(columns), *HISTORY_META), partition_by=HISTORY_PARTITIONING):
        table = DeltaTable.forPath(ctx.spark, str(ctx.table))
        on = " AND ".join(f"t.{quoted(k)} = s.{quoted('_mk_' + k)}" for k in keys) + " AND t.is_current"
        values: dict[str, str | Column] = {quoted(c): f"s.{quoted(c)}" for c in [*columns, *HISTORY_META]}
        with ctx.idempotent():
            (
                table.alias("t")
                .merge(staged.alias("s"), on)
                .whenMatchedUpdate(condition=NEWER, set={"valid_to": "s._close_at", "is_current": "false"})
                .whenNotMatchedInsert(condition="s._insert", values=values)
                .execute()
            )
    count = cached.count()
    cached.unpersist()
    return count
