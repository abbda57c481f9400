"""What a projection receives: each micro-batch's valid events, and a `Batch` to write them with exactly once.

    from cdcpipe.projection import Batch

    def apply(events: DataFrame, batch: Batch) -> None:     # `projection = "module:apply"` in the job file
        changes = ...                                         # your transformation of `events`
        with batch.idempotent():                              # exactly one commit to batch.table in here
            DeltaTable.forPath(batch.spark, batch.table).merge(...).execute()

`events` has one row per valid event of the batch (dead letters and resends already taken out): `event_id`,
`event_type`, `event_version`, `aggregate_id`, `payload` (the JSON text), `topic`, `kafka_partition`,
`kafka_offset`, `kafka_timestamp`. This module and `cdcpipe.application` are cdcpipe's
public API: what they name keeps its meaning across releases; every other module may change without notice.
"""

from __future__ import annotations

from streaming_jobs.sinks.projection import Batch

__all__ = ["Batch"]
