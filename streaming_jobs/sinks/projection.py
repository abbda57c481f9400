"""Projections: the user's function over each batch's valid events, writing through `ctx.idempotent()`."""

from __future__ import annotations

import importlib
import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812

from streaming_jobs.errors import StreamingError
from streaming_jobs.once.context import EVENT_COLUMNS, BatchContext


def projection(events: DataFrame, ctx: BatchContext) -> int:
    """Hand the batch's valid events to the user's function, which writes through ctx.idempotent()."""
    module_name, _, function_name = (ctx.job.projection or "").partition(":")
    folder = ctx.job.folder
    if folder is not None and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # a projection's module may sit beside its job file
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise StreamingError(f"job {ctx.job.name}: cannot load projection {ctx.job.projection!r} ({exc})") from exc
    valid = events.where(F.col("error").isNull()).select(*EVENT_COLUMNS)  # copies went in `drop_resent`
    function(valid, ctx)
    return valid.count()
