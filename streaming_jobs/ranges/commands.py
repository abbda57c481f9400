"""`cdcpipe jobs backfill`, `cdcpipe jobs replay` and `cdcpipe jobs rewind`: a job's tables from earlier offsets.

    backfill JOB --from SPEC --to SPEC    apply exactly that range to the job's tables, beside the stream
    replay JOB [--into PATH] [--swap]     rebuild from the earliest retained offsets into a new table with a
                                          new checkpoint; --swap switches the job to it and resumes streaming
                                          where the rebuild ended
    jobs rewind JOB --to SPEC             the stream resumes from an earlier position (a new checkpoint)
    jobs accept-topics JOB                the table takes its topics as they are now (recreated, repartitioned)

None of them edits Spark's checkpoint files or repeats a record in a table: every write records the offsets
its table holds (streaming_jobs.once.applied) and skips those.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import PositionError, StreamingError
from streaming_jobs.jobs import locations
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.offsets import KafkaPositions, Offsets
from streaming_jobs.once import applied, sources
from streaming_jobs.once.checkpoints import committed_offsets
from streaming_jobs.ranges.backfill import DEFAULT_CHUNK, Outcome, apply_range
from streaming_jobs.ranges.positions import Position, Range, resolve_range
from streaming_jobs.ranges.progress import Progress
from streaming_jobs.run import control
from streaming_jobs.spark_session import build_spark_session

EARLIEST, LATEST = Position("earliest"), Position("latest")


def _span(settings: JobsSettings, spec: JobSpec, start: Position, end: Position) -> Range:
    with KafkaPositions(settings.kafka) as kafka:
        return resolve_range(kafka, spec.topics, start, end)


def backfill(
    settings: JobsSettings,
    spec: JobSpec,
    start: Position,
    end: Position,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    out: TextIO | None = None,
    reduce: bool = True,
) -> Outcome:
    """Apply [start, end) to the job's current tables. The range is checked before Spark starts."""
    where = locations.current(spec, settings.lake_root())
    span = _span(settings, spec, start, end)
    if span.total == 0:
        return Outcome(span, 0, 0, 0, 0.0)
    spark = build_spark_session(settings, app_name=f"cdcpipe-backfill-{spec.name}")
    try:
        return apply_range(
            spark,
            settings,
            spec,
            where,
            span,
            purpose="backfill",
            chunk_size=chunk_size,
            progress=Progress(f"backfill {spec.name}", span, out),
            reduce=reduce,
        )
    finally:
        spark.stop()


@dataclass(frozen=True)
class Replayed:
    """Where a replay built the job's tables, what it read, and whether the job now uses them."""

    location: locations.Location
    rebuild: Outcome
    catch_up: Outcome | None
    swapped: bool


def replay(
    settings: JobsSettings,
    spec: JobSpec,
    *,
    into: str | None = None,
    swap: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
    out: TextIO | None = None,
    reduce: bool = True,
) -> Replayed:
    """Rebuild into a new table from the earliest retained offsets; with `swap`, make it the job's.

    The rebuild runs beside the streaming job (which goes on with the old table). The swap then stops the
    job (its batch in flight finishes), applies what arrived meanwhile, points the job at the new table and a
    new checkpoint starting at the offsets the rebuild ended on, and starts the job again if it was running.
    """
    lake = settings.lake_root()
    now = locations.current(spec, lake)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    table = now.table.with_name(f"{Path(spec.table).name}__replay_{stamp}") if into is None else lake.place(into)
    if table == now.table:
        raise StreamingError(f"{table} is the job's current table; a replay builds a new one: pick another --into")
    target = locations.Location(table, locations.new_checkpoint(spec, lake, "replay"))
    spark = build_spark_session(settings, app_name=f"cdcpipe-replay-{spec.name}")

    def everything(purpose: str, label: str) -> Outcome:
        """Apply earliest..latest (as of now) to the new table."""
        span = _span(settings, spec, EARLIEST, LATEST)
        return apply_range(
            spark,
            settings,
            spec,
            target,
            span,
            purpose=purpose,
            chunk_size=chunk_size,
            progress=Progress(f"{label} {spec.name}", span, out),
            reduce=reduce,
        )

    try:
        rebuild = everything("replay", "replay")
        if not swap:
            return Replayed(target, rebuild, None, swapped=False)
        with control.paused(settings, spec.name):
            # The job is stopped: nothing moves the old table, and where this catch-up ends is where the new
            # checkpoint starts. Offsets the rebuild applied are skipped chunk by chunk without a Spark job.
            catch_up = everything("replay-catch-up", "catch up")
            starting = catch_up.span.spark_json(catch_up.span.end)
            locations.switch(spec, lake, locations.Location(target.table, target.checkpoint, starting))
        return Replayed(locations.current(spec, lake), rebuild, catch_up, swapped=True)
    finally:
        spark.stop()


def rewind(settings: JobsSettings, spec: JobSpec, to: Position) -> tuple[locations.Location, Offsets, Offsets]:
    """Point the job at a new checkpoint that starts at `to`; (location, from, to) offsets.

    An offsets SPEC moves the partitions it names; the others resume where the checkpoint reached. A
    position after where the job is would skip records, so it is refused (that is not a rewind).
    """
    lake = settings.lake_root()
    with control.paused(settings, spec.name):
        now = locations.current(spec, lake)
        reached = committed_offsets(now.checkpoint)
        if not reached and now.starting_offsets:
            reached = {(t, int(p)): o for t, parts in now.starting_offsets.items() for p, o in parts.items()}
        with KafkaPositions(settings.kafka) as kafka:
            every = resolve_range(kafka, spec.topics, EARLIEST, LATEST)
            if to.kind == "offsets":
                named = resolve_range(kafka, spec.topics, to, to).start
                target = {tp: named.get(tp, reached.get(tp, every.start[tp])) for tp in every.start}
            else:
                target = resolve_range(kafka, spec.topics, to, LATEST).start
        before = {tp: reached.get(tp, every.start[tp]) for tp in every.start}
        forward = [f"{t}[{p}] {before[(t, p)]} -> {o}" for (t, p), o in sorted(target.items()) if o > before[(t, p)]]
        if forward:
            raise PositionError(
                "a rewind only moves back, and these would move forward, skipping records the job has not "
                f"applied: {', '.join(forward)}. Pick an earlier position (or name only the partitions to move)"
            )
        moved = locations.Location(now.table, locations.new_checkpoint(spec, lake, "rewind"), every.spark_json(target))
        locations.switch(spec, lake, moved)
    return moved, before, target


@dataclass(frozen=True)
class Accepted:
    """What `accept_topics` changed: topics whose new identity the table took, and those read again from 0."""

    changed: list[str]
    recreated: list[str]


def accept_topics(settings: JobsSettings, spec: JobSpec) -> Accepted:
    """Record the job's topics as they are now in its table, after one was recreated or gained partitions.

    A recreated topic's old offsets are forgotten by the table (they numbered other records) and the job
    rewinds to the new topic's earliest offsets; a latest-state table's rows from the old topic take the
    position -1 (the new topic's events come after them). A repartitioned topic's new count is recorded, and
    the job goes on where it was.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F  # noqa: N812

    from streaming_jobs.lake.lease import table_lock
    from streaming_jobs.once.context import commit_metadata

    with control.paused(settings, spec.name):
        where = locations.current(spec, settings.lake_root())
        now = sources.identities(settings, spec.name, spec.topics)
        # Everything from reading what the table holds to the commit under the writer lease: a backfill or replay
        # committing meanwhile is waited for and its offsets kept, never overwritten by an older read.
        with table_lock(where.table, holder="accept-topics"):
            held = applied.read(where.table)
            changed = sorted(t for t, was in held.topics.items() if t in now and now[t] != was)
            recreated = [t for t in changed if now[t].topic_id != held.topics[t].topic_id]
            if not changed:
                return Accepted([], [])
            accepted = held
            for topic in recreated:
                accepted = accepted.without_topic(topic)
            if recreated:
                # The rewind first: until the table's commit below, the job refuses to start (its topics are not
                # those its table holds), so dying in between leaves nothing half-done. This run again finds the
                # topics still to accept and rewinds once more, to the same offsets.
                with KafkaPositions(settings.kafka) as kafka:
                    start = resolve_range(kafka, recreated, EARLIEST, LATEST).start
                rewind(settings, spec, Position("offsets", offsets=start))
            spark = build_spark_session(settings, app_name=f"cdcpipe-accept-topics-{spec.name}")
            try:
                with commit_metadata(spark, accepted.with_topics(now).metadata()):
                    before = applied.newest_version(where.table)
                    if recreated and spec.kind == "latest_state":
                        # Its rows give way only to a later Kafka position, and the new topic numbers its records
                        # from 0 again: the old topic's rows get the position before every offset (-1), so the
                        # new topic's events replace them as the events that came after them.
                        DeltaTable.forPath(spark, str(where.table)).update(
                            F.col("topic").isin(*recreated), {"kafka_offset": F.lit(-1).cast("long")}
                        )
                    if applied.newest_version(where.table) == before:
                        # Nothing committed yet (no rows to update): an empty append, recorded only with an action
                        # (a marker of its own; Delta skips an empty commit otherwise).
                        empty = spark.read.format("delta").load(str(where.table)).limit(0)
                        (
                            empty.write.format("delta")
                            .mode("append")
                            .option("txnAppId", "cdcpipe:accept-topics")
                            .option("txnVersion", time.time_ns())
                            .save(str(where.table))
                        )
            finally:
                spark.stop()
    return Accepted(changed, recreated)
