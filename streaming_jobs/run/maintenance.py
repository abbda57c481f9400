"""What keeps a running job's tables from growing without bound: event ids trimmed, old files vacuumed.

- `<table>_event_ids` gets a row per change a table job applied, for the look-back in which a publisher's resend
  is caught (`dedupe_lookback_records` per partition). An id below the first offset the job's table lacks, less
  that look-back, is never looked for again: at each compaction such ids are deleted. They lie below every floor
  of the job's memory of ids (streaming_jobs.once.event_ids), and a DELETE's commit leaves that memory true
  (`applied.data_changes`), so the batches do not read the look-back again after it. A look-back of 0 (every
  id, forever) trims nothing.
- A MERGE rewrites the files holding the rows it changes or deletes, and a compaction the small files; the old
  files stay for the table versions that still name them. Every `vacuum_every_hours` a compaction also vacuums
  the job's tables: files no version of the last `vacuum_retain_hours` needs are deleted. Until then a deleted
  row's bytes remain in the lake (docs/guarantees.md says for how long).
"""

from __future__ import annotations

from typing import Any

from streaming_jobs.lake.lease import table_lock
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.once import applied

# Delta refuses a vacuum that keeps less than this (its default retention) unless its check is turned off.
DELTA_DEFAULT_RETAIN_HOURS = 168.0


def trim_floors(held: applied.Applied, lookback: int) -> dict[tuple[str, int], int]:
    """Per partition, the offset below which no event id is looked for again (none: keep every id)."""
    if lookback <= 0:
        return {}
    floors = {}
    for tp, spans in held.intervals.items():
        # Below the first offset the table lacks: a backfill may still fill a gap above, looking back from it.
        floor = spans[0][1] - lookback if spans else 0
        if floor > 0:
            floors[tp] = floor
    return floors


def trim_event_ids(spark: Any, event_ids: LakePath, table: LakePath, lookback: int) -> int:
    """Delete the ids past the look-back of what `table` holds; how many partitions had some to trim.

    Called between two of the job's batches (a DELETE fails when an append commits under it), under its lease.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F  # noqa: N812

    floors = trim_floors(applied.read(table), lookback)
    if not floors or not DeltaTable.isDeltaTable(spark, str(event_ids)):
        return 0
    below = None
    for (topic, partition), floor in sorted(floors.items()):
        one = (F.col("topic") == topic) & (F.col("kafka_partition") == partition) & (F.col("kafka_offset") < floor)
        below = one if below is None else below | one
    with table_lock(table, holder="trim"):
        DeltaTable.forPath(spark, str(event_ids)).delete(below)
    return len(floors)


def vacuum(spark: Any, tables: list[LakePath], *, lease_of: LakePath, retain_hours: float) -> None:
    """Delete the files of `tables` that no version of the last `retain_hours` names.

    Delta's LITE vacuum: the files to delete are read from the log's removes since the last vacuum, not found by
    listing the table's folder and joining it with every file of the snapshot (3 s a table here, where that took
    27-41 s). Delta refuses it when the log no longer reaches back to the last vacuum; the full one runs then.
    """
    from delta.tables import DeltaTable

    if retain_hours < DELTA_DEFAULT_RETAIN_HOURS:
        # The job's own setting, read from its file: the check guards a default, not a choice made.
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    for table in tables:
        if not DeltaTable.isDeltaTable(spark, str(table)):
            continue
        with table_lock(lease_of, holder="vacuum", compaction=True):
            try:
                spark.sql(f"VACUUM delta.`{table}` LITE RETAIN {retain_hours} HOURS")
            except Exception as exc:
                if "DELTA_CANNOT_VACUUM_LITE" not in str(exc):
                    raise
                DeltaTable.forPath(spark, str(table)).vacuum(retain_hours)
