"""Positions in a job's topics: `earliest`, `latest`, a timestamp, or offsets per partition, resolved against Kafka.

    earliest                          the first offset retention still keeps, per partition
    latest                            the end of each partition now (exclusive: the next offset to be written)
    2026-11-22T03:00:00Z              the first record at or after that time (ISO 8601 with a zone, or a date)
    orders:0:1200,orders:1:980        these offsets; an offsets SPEC limits a range to the partitions it names

A range is [start, end) per partition. Resolving refuses, before any work, a start that retention already
deleted (naming the first offset still available), an end past the end of a partition, and a start after
its end: nothing is ever skipped silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Literal

from streaming_jobs.errors import BelowRetentionError, PositionError
from streaming_jobs.offsets import KafkaPositions, Offsets, Partition, Watermarks

DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]|$)")
OFFSETS = re.compile(r"^[A-Za-z0-9._-]+:\d+:\d+$")
SPEC_HELP = "earliest, latest, an ISO 8601 time with a zone (2026-11-22T03:00:00Z), or topic:partition:offset,..."


@dataclass(frozen=True)
class Position:
    """One parsed SPEC."""

    kind: Literal["earliest", "latest", "timestamp", "offsets"]
    timestamp_ms: int | None = None
    offsets: Mapping[Partition, int] = field(default_factory=dict)


def parse(text: str) -> Position:
    """A SPEC as typed on the command line; the error says which form was expected."""
    spec = text.strip()
    if spec in ("earliest", "latest"):
        return Position(spec)  # type: ignore[arg-type]  # narrowed by the membership test
    if DATE.match(spec):  # before offsets: 2026-11-22T03:00:00 would also read as topic:partition:offset
        try:
            moment = (
                datetime.fromisoformat(spec)
                if len(spec) > 10
                else datetime.combine(date.fromisoformat(spec), datetime.min.time(), tzinfo=UTC)
            )
        except ValueError:
            raise PositionError(f"{text!r} is not a time: use ISO 8601, e.g. 2026-11-22T03:00:00Z") from None
        if moment.tzinfo is None:
            raise PositionError(f"{text!r} has no time zone: add one, e.g. {spec}Z for UTC or {spec}+01:00")
        if moment.timestamp() < 0:
            raise PositionError(
                f"{text!r} is before 1970-01-01T00:00:00Z, where Kafka's timestamps begin: use earliest"
            )
        return Position("timestamp", timestamp_ms=int(moment.timestamp() * 1000))
    if ":" in spec and all(OFFSETS.match(part) for part in spec.split(",")):
        offsets: dict[Partition, int] = {}
        for part in spec.split(","):
            topic, partition, offset = part.rsplit(":", 2)
            if (topic, int(partition)) in offsets:
                raise PositionError(f"{text!r}: {topic}:{partition} is given twice")
            offsets[(topic, int(partition))] = int(offset)
        return Position("offsets", offsets=offsets)
    raise PositionError(f"{text!r} is not a position: use {SPEC_HELP}")


def _at(position: Position, marks: Watermarks, kafka: KafkaPositions, *, end: bool) -> Offsets:
    """Where `position` is in each partition (only the named ones, for an offsets SPEC)."""
    if position.kind == "earliest":
        return dict(marks.low)
    if position.kind == "latest":
        return dict(marks.high)
    if position.kind == "offsets":
        unknown = sorted(set(position.offsets) - set(marks.high))
        if unknown:
            known = ", ".join(f"{t}:{p}" for t, p in sorted(marks.high))
            raise PositionError(
                f"{', '.join(f'{t}:{p}' for t, p in unknown)} is not a partition of the job's topics ({known})"
            )
        return dict(position.offsets)
    assert position.timestamp_ms is not None  # noqa: S101 - set by parse() for the timestamp kind
    found = kafka.offsets_for_time(marks.high, position.timestamp_ms)
    resolved = {tp: marks.high[tp] if at is None else at[0] for tp, at in found.items()}
    if not end:
        for tp, at in found.items():
            if at is not None and at[0] == marks.low[tp] and marks.low[tp] > 0:
                # Kafka answers "the first retained record" for a time older than retention: refuse, since
                # records between the time and that one may have been deleted.
                offset, first_ts = at
                if first_ts > position.timestamp_ms:
                    raise BelowRetentionError(
                        f"{tp[0]}[{tp[1]}]: records from {_iso(position.timestamp_ms)} on may already be deleted "
                        f"by retention; the first offset still available is {offset}"
                        + (f" ({_iso(first_ts)})" if first_ts else "")
                        + f". Start at or after it: --from {tp[0]}:{tp[1]}:{offset}, or --from earliest."
                    )
    return resolved


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Range:
    """Offsets [start, end) per partition, checked against what Kafka holds."""

    start: Offsets
    end: Offsets

    @property
    def total(self) -> int:
        return sum(self.end[tp] - self.start[tp] for tp in self.start)

    def spark_json(self, offsets: Offsets) -> dict[str, dict[str, int]]:
        """Offsets in the JSON shape Spark's Kafka source takes: {topic: {partition: offset}}."""
        shaped: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            shaped.setdefault(topic, {})[str(partition)] = offset
        return shaped


def resolve_range(kafka: KafkaPositions, topics: Iterable[str], start: Position, end: Position) -> Range:
    """[start, end) per partition of the topics, or a PositionError that says what is wrong and what to do."""
    marks = kafka.watermarks(topics)
    begin = _at(start, marks, kafka, end=False)
    finish = _at(end, marks, kafka, end=True)
    named = [o for p, o in ((start, begin), (end, finish)) if p.kind == "offsets"]
    partitions = sorted(set.intersection(*(set(o) for o in named)) if named else set(marks.high))
    if named and not partitions:
        raise PositionError("--from and --to name no partition in common: the range is empty")
    for tp in partitions:
        label = f"{tp[0]}[{tp[1]}]"
        if begin[tp] < marks.low[tp]:
            raise BelowRetentionError(
                f"{label}: offset {begin[tp]} was deleted by retention; the first offset still available is "
                f"{marks.low[tp]}. Start at or after it (--from {tp[0]}:{tp[1]}:{marks.low[tp]}, or --from earliest)."
            )
        if finish[tp] > marks.high[tp]:
            raise PositionError(
                f"{label}: offset {finish[tp]} is past the end of the partition (latest is {marks.high[tp]}); "
                "use --to latest, or an offset at or below it"
            )
        if begin[tp] > finish[tp]:
            raise PositionError(f"{label}: the range starts at {begin[tp]}, after its end {finish[tp]}")
    return Range({tp: begin[tp] for tp in partitions}, {tp: finish[tp] for tp in partitions})
