"""One micro-batch of a job: classify the records, dead-letter the bad ones, hand the rest to the job's kind."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from schemas.contracts import ContractRegistry
from schemas.table_contracts import load_table_contract
from streaming_jobs import outbox_events, table_changes
from streaming_jobs.jobs import TABLE_KINDS
from streaming_jobs.sinks import BatchContext, event_log, latest_state, projection, write_dead_letters
from streaming_jobs.sinks_tables import table_history, table_mirror

Handler = Callable[[DataFrame, BatchContext], int]


def _table_kind(write: Callable[..., int]) -> Handler:
    def handler(changes: DataFrame, ctx: BatchContext) -> int:
        return write(changes, ctx, load_table_contract(ctx.job.source_table or ""))

    return handler


HANDLERS: dict[str, Handler] = {
    "event_log": event_log,
    "latest_state": latest_state,
    "projection": projection,
    "table_mirror": _table_kind(table_mirror),
    "table_history": _table_kind(table_history),
}


def handle_batch(records: DataFrame, ctx: BatchContext, registry: ContractRegistry) -> tuple[int, int]:
    """Classify the batch once, dead-letter the invalid records, apply the rest; (applied, dead) counts."""
    if ctx.job.kind in TABLE_KINDS:
        classified = table_changes.classify(records, load_table_contract(ctx.job.source_table or ""))
    else:
        classified = outbox_events.classify(records, registry)
    classified = classified.cache()
    try:
        dead = write_dead_letters(classified, ctx)
        applied = HANDLERS[ctx.job.kind](classified, ctx)
    finally:
        classified.unpersist()
    return applied, dead
