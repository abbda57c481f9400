"""Balance per account, from the account and transfer events: the example projection.

Amounts are integers in minor units. Every micro-batch becomes one MERGE that adds each account's change;
`ctx.idempotent()` makes Delta skip that MERGE if the batch already reached the table, which is what keeps
an increment from being applied twice after a crash.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import LongType, StringType, StructField, StructType

from streaming_jobs.once.context import BatchContext

AMOUNTS = StructType(
    [
        StructField("account_id", StringType()),
        StructField("from_account", StringType()),
        StructField("to_account", StringType()),
        StructField("amount", LongType()),
    ]
)
BALANCES = StructType([StructField("account_id", StringType()), StructField("balance", LongType())])


def apply(events: DataFrame, ctx: BatchContext) -> None:
    """Add each account's change in this batch to its balance."""
    parsed = events.select("event_type", F.from_json("payload", AMOUNTS).alias("p"))
    changes = (
        parsed.where("event_type = 'MoneyDeposited'")
        .select(F.col("p.account_id").alias("account_id"), F.col("p.amount").alias("delta"))
        .unionByName(
            parsed.where("event_type = 'TransferCompleted'").select(
                F.col("p.from_account").alias("account_id"), (-F.col("p.amount")).alias("delta")
            )
        )
        .unionByName(
            parsed.where("event_type = 'TransferCompleted'").select(
                F.col("p.to_account").alias("account_id"), F.col("p.amount").alias("delta")
            )
        )
        .unionByName(
            parsed.where("event_type = 'AccountOpened'").select(
                F.col("p.account_id").alias("account_id"), F.lit(0).cast("long").alias("delta")
            )
        )
        .groupBy("account_id")
        .agg(F.sum("delta").alias("delta"))
    )
    if not DeltaTable.isDeltaTable(ctx.spark, str(ctx.table)):
        ctx.spark.createDataFrame([], BALANCES).write.format("delta").mode("ignore").save(str(ctx.table))
    with ctx.idempotent():
        (
            DeltaTable.forPath(ctx.spark, str(ctx.table))
            .alias("t")
            .merge(changes.alias("s"), "t.account_id = s.account_id")
            .whenMatchedUpdate(set={"balance": "t.balance + s.delta"})
            .whenNotMatchedInsert(values={"account_id": "s.account_id", "balance": "s.delta"})
            .execute()
        )
