"""Balance per account, from the account and transfer events: the example projection.

Amounts are integers in minor units. Every micro-batch becomes one MERGE that adds each account's change,
made inside `batch.idempotent()`: the commit records the offsets the table then holds, and a batch the table
already holds never reaches the projection again, which is what keeps an increment from being applied twice
after a crash. It imports only cdcpipe's public `cdcpipe.projection` (and Spark's and Delta's own).
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdcpipe.projection import Batch

AMOUNTS = StructType(
    [
        StructField("account_id", StringType()),
        StructField("from_account", StringType()),
        StructField("to_account", StringType()),
        StructField("amount", LongType()),
    ]
)
BALANCES = StructType([StructField("account_id", StringType()), StructField("balance", LongType())])


def apply(events: DataFrame, batch: Batch) -> None:
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
    if not DeltaTable.isDeltaTable(batch.spark, batch.table):
        batch.spark.createDataFrame([], BALANCES).write.format("delta").mode("ignore").save(batch.table)
    with batch.idempotent():
        (
            DeltaTable.forPath(batch.spark, batch.table)
            .alias("t")
            .merge(changes.alias("s"), "t.account_id = s.account_id")
            .whenMatchedUpdate(set={"balance": "t.balance + s.delta"})
            .whenNotMatchedInsert(values={"account_id": "s.account_id", "balance": "s.delta"})
            .execute()
        )
