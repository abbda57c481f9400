"""Which Kafka offsets a job's table already holds, written in the same Delta commit that applied them.

Every write of a batch to a job's table carries, in its commit's `userMetadata`, the offset intervals the
table holds after it: `{"cdcpipe": {"applied": {topic: {partition: [[start, end], ...]}}}}` (end exclusive).
It is atomic with the rows (one commit), so after any crash the table's newest such commit tells exactly
which records it holds. A batch, a backfill chunk or a replay first drops the records inside those
intervals: the streaming job, a backfill of the same range, a rewound checkpoint and a replay's catch-up
can each cover any offsets any number of times, and each record is applied once.

Reading it costs one small JSON file (the newest commit of the table's log) and a few existence checks past
Delta's `_last_checkpoint`, read through the lake's own API (a local disk or the object store's), never a
local copy: every writer reads the same log, and writers take turns (streaming_jobs.lake.lease).
Commits without it (the table's creation, a compaction by another tool) are stepped over; a RESTORE
points back at the version it restored, whose intervals are the ones that hold again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming_jobs.errors import StreamingError
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import Partition, TopicIdentity

Interval = tuple[int, int]


LOOK_BACK = 1000  # commits stepped over at most when looking for the newest one with intervals


@dataclass(frozen=True)
class Applied:
    """Sorted, disjoint [start, end) offset intervals per (topic, partition)."""

    intervals: Mapping[Partition, tuple[Interval, ...]] = field(default_factory=dict)
    topics: Mapping[str, TopicIdentity] = field(default_factory=dict)

    def plus(self, ranges: Mapping[Partition, Interval]) -> Applied:
        """These intervals with `ranges` added (merged where they touch or overlap)."""
        merged = {tp: list(spans) for tp, spans in self.intervals.items()}
        for tp, (start, end) in ranges.items():
            if end > start:
                merged.setdefault(tp, []).append((start, end))
        return Applied({tp: _merge(spans) for tp, spans in merged.items()}, self.topics)

    def with_topics(self, topics: Mapping[str, TopicIdentity]) -> Applied:
        """These intervals, of the topics as they are now."""
        return Applied(self.intervals, {**self.topics, **topics})

    def without_topic(self, topic: str) -> Applied:
        """These intervals but the topic's: for a topic deleted and created again, whose offsets start anew."""
        return Applied(
            {tp: spans for tp, spans in self.intervals.items() if tp[0] != topic},
            {t: i for t, i in self.topics.items() if t != topic},
        )

    def covers(self, ranges: Mapping[Partition, Interval]) -> bool:
        """Whether every offset of `ranges` is already applied."""
        return all(
            end <= start or any(s <= start and end <= e for s, e in self.intervals.get(tp, ()))
            for tp, (start, end) in ranges.items()
        )

    def next_missing(self, tp: Partition, offset: int) -> int:
        """The first offset at or after `offset` in this partition that is not applied yet."""
        for start, end in self.intervals.get(tp, ()):
            if start <= offset < end:
                return end  # intervals are merged where they touch: the end is not applied
        return offset

    def metadata(self) -> str:
        applied: dict[str, dict[str, list[list[int]]]] = {}
        for (topic, partition), spans in sorted(self.intervals.items()):
            applied.setdefault(topic, {})[str(partition)] = [[s, e] for s, e in spans]
        ours: dict[str, Any] = {"applied": applied}
        if self.topics:
            ours["topics"] = {t: {"id": i.topic_id, "partitions": i.partitions} for t, i in sorted(self.topics.items())}
        return json.dumps({"cdcpipe": ours}, separators=(",", ":"))

    @classmethod
    def from_metadata(cls, text: str) -> Applied | None:
        """The intervals in a commit's userMetadata, or None when the commit carries none of ours."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        ours = data.get("cdcpipe", {}) if isinstance(data, dict) else {}
        applied = ours.get("applied") if isinstance(ours, dict) else None
        if not isinstance(applied, dict):
            return None
        topics = ours.get("topics") or {}
        return cls(
            {
                (topic, int(partition)): tuple((int(s), int(e)) for s, e in spans)
                for topic, partitions in applied.items()
                for partition, spans in partitions.items()
            },
            {t: TopicIdentity(str(i["id"]), int(i["partitions"])) for t, i in topics.items()},
        )


def _merge(spans: Iterable[Interval]) -> tuple[Interval, ...]:
    out: list[Interval] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def _actions(log: LakePath, version: int) -> list[dict[str, Any]] | None:
    """The actions of one commit, or None when its file is gone (the log was cleaned up below it)."""
    try:
        lines = (log / f"{version:020d}.json").read_text().splitlines()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in lines if line]


def _commit_info(log: LakePath, version: int) -> dict[str, Any] | None:
    actions = _actions(log, version)
    if actions is None:
        return None
    return next((a["commitInfo"] for a in actions if "commitInfo" in a), {})


_KNOWN: dict[str, int] = {}  # the newest version this process last saw of each log, by its URL


def _newest_version(log: LakePath) -> int:
    """The table's newest commit version (-1 if none), without listing the whole log on every batch.

    The log keeps a JSON file per commit for 30 days (thousands a day for a job with a 1 s trigger); Delta's
    `_last_checkpoint` names a recent version, and the newer commits are the files right after it: up to a
    checkpoint interval of them, each an existence check (a HEAD on an object store). So the version found
    last time is the start next time, once its file is seen to still be there (a table deleted and made
    again at the same place starts over): two checks a call, not one per commit since the checkpoint.
    """
    known = _KNOWN.get(log.url)
    if known is not None and (log / f"{known:020d}.json").exists():
        version = known
    else:
        try:
            version = int(json.loads((log / "_last_checkpoint").read_text())["version"])
        except (OSError, ValueError, KeyError, TypeError):
            stems = [n.removesuffix(".json") for n in log.names() if n.endswith(".json")]
            version = max((int(s) for s in stems if s.isdigit()), default=-1)
    while (log / f"{version + 1:020d}.json").exists():
        version += 1
    if version >= 0:
        _KNOWN[log.url] = version
    return version


def newest_version(table: LakePath) -> int:
    """The table's newest commit version; -1 for a table that does not exist yet."""
    return _newest_version(table / "_delta_log")


def data_changes(table: LakePath, after: int, upto: int) -> int | None:
    """How many commits in (after, upto] add rows or remove them otherwise than by a DELETE; None if unreadable.

    A compaction's commits change no row. A DELETE (the trim of ids past the look-back, streaming_jobs.run
    .maintenance, or one by hand) only removes rows: a memory of what the table holds then holds more, never
    less, and a remembered id is looked up in the table before a record is dropped for it.
    """
    log = table / "_delta_log"
    changed = 0
    for version in range(after + 1, upto + 1):
        actions = _actions(log, version)
        if actions is None:
            return None
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("operation") == "DELETE":
            continue
        if any(a[kind].get("dataChange", True) for a in actions for kind in ("add", "remove") if kind in a):
            changed += 1
    return changed


def commit_with(table: LakePath, after: int, metadata: str) -> list[dict[str, Any]]:
    """The actions of the first commit after version `after` whose userMetadata is `metadata` (none: no such one)."""
    log = table / "_delta_log"
    for version in range(after + 1, _newest_version(log) + 1):
        actions = _actions(log, version) or []
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("userMetadata") == metadata:
            return actions
    return []


def read(table: LakePath, *, unknown_is_none: bool = False, version: int | None = None) -> Applied:
    """The intervals the table holds now (none for a table that does not exist yet).

    `version`: the table's newest version, when the caller has just found it (`newest_version`): on an object
    store each look for it is requests.

    `unknown_is_none`: a table none of whose readable commits carries intervals holds none, rather than being
    an error; for a table whose commits only lately carry them (`<table>_event_ids`, see
    streaming_jobs.once.resent), where holding none costs a repeated id, never a lost or doubled row.
    """
    log = table / "_delta_log"
    version = _newest_version(log) if version is None else version
    for _ in range(LOOK_BACK):
        if version < 0:
            return Applied()
        info = _commit_info(log, version)
        if info is None:
            break  # the log was cleaned up below this version
        found = Applied.from_metadata(info.get("userMetadata") or "")
        if found is not None:
            return found
        restored = (info.get("operationParameters") or {}).get("version")
        if info.get("operation") == "RESTORE" and restored is not None:
            version = int(restored)
        else:
            version -= 1
    if unknown_is_none:
        return Applied()
    raise StreamingError(
        f"{table}: cannot tell which offsets the table holds: no commit among the newest {LOOK_BACK} readable "
        "ones carries cdcpipe's applied intervals. Rebuild it with `cdcpipe jobs replay JOB --swap`."
    )
