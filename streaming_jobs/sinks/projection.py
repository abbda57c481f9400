"""Projections: the user's function over each batch's valid events, writing through `batch.idempotent()`."""

from __future__ import annotations

import importlib
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs.errors import StreamingError
from streaming_jobs.once.context import EVENT_COLUMNS, BatchContext


@dataclass(frozen=True)
class Batch:
    """What a projection writes one micro-batch with (public: `cdcpipe.projection`; its fields keep their meaning).

    `spark`: the job's session. `table`: where the job's table is (a folder or an s3a:// URL; it may not exist
    yet). `job`: the job's name. `batch_id`: the micro-batch's number (a replayed batch has its number again).
    """

    spark: SparkSession
    table: str
    job: str
    batch_id: int
    _context: BatchContext

    def idempotent(self) -> AbstractContextManager[None]:
        """Make the batch's one commit to `table` in here: it records the offsets the table then holds.

        A batch replayed after a crash, or the part of one the table holds, never reaches the projection: so
        a projection that adds (a balance) adds each event once. Exactly one commit to `table` per batch.
        """
        return self._context.idempotent()


def projection(events: DataFrame, ctx: BatchContext) -> int:
    """Hand the batch's valid events to the user's function, with the `Batch` it writes through."""
    module_name, _, function_name = (ctx.job.projection or "").partition(":")
    folder = ctx.job.folder
    if folder is not None and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # a projection's module may sit beside its job file
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise StreamingError(f"job {ctx.job.name}: cannot load projection {ctx.job.projection!r} ({exc})") from exc
    valid = events.where(F.col("error").isNull()).select(*EVENT_COLUMNS)  # copies went in `drop_resent`
    function(valid, Batch(ctx.spark, str(ctx.table), ctx.job.name, ctx.batch_id, ctx))
    return valid.count()
