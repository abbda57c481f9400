"""Which of a batch's event ids an event log already holds, remembered by the job between micro-batches.

A publisher sends an event again only as it restarts, so the copy follows its original in the same
partition, within the last `dedupe_lookback_records` records. Reading the ids of those records from the
table is a Spark scan on every micro-batch: about a third of the time of a 15,000-event batch here, for a
check that almost never finds anything. So a streaming job keeps a 64-bit hash of each of those ids in
memory: the ones it loaded from the table once, plus the ones each of its own batches appends. The ids
that fall out of the look-back are dropped.

The table stays the truth. Two rules keep the memory from ever dropping an event the table does not hold,
or from keeping one it does:
- a batch id whose hash is remembered (a resend, or a hash collision) is looked up in the table; only an
  id found there is dropped;
- the memory answers only at the table version its job's own last commit made, or at a later one reached by
  commits that change no rows (a compaction). After any other commit (a backfill or replay beside the job, a
  skipped write), it is read again from the table: for a look-back of 100,000 records a partition, a scan
  that takes seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from streaming_jobs.offsets import Partition
from streaming_jobs.once.applied import Interval

Record = tuple[Partition, int, str]  # (topic, partition), offset, event id


@dataclass(frozen=True)
class Split:
    """A batch's valid records: the ones to append (first copy of each id the table lacks) and the others."""

    keep: list[Record]
    drop: list[Record]


def split(records: Iterable[Record], held: set[str]) -> Split:
    """The first copy, in Kafka order, of each event id that is not in `held`; every other record is dropped."""
    keep: list[Record] = []
    drop: list[Record] = []
    seen = set(held)
    # Kafka order across partitions is by partition, then offset, as the window this replaces ordered it.
    for record in sorted(records, key=lambda r: (r[0][1], r[1], r[0][0])):
        if record[2] in seen:
            drop.append(record)
        else:
            seen.add(record[2])
            keep.append(record)
    return Split(keep, drop)


CHUNK = 10_000  # ids are forgotten in chunks of at most this many records of a partition


class EventIds:
    """Hashes of the event ids a table holds at or above a floor offset of each partition, at one table version.

    About 100 bytes per id: 10 MB per partition at the default look-back of 100,000 records.
    """

    def __init__(self, lookback: int) -> None:
        if lookback <= 0:
            raise ValueError("an event-id memory needs a look-back of at least one record per partition")
        self.lookback = lookback
        self._version: int | None = None  # the table version the memory is true for; None: read the table
        self._floor: dict[Partition, int] = {}  # every id the table holds at or above this offset is remembered
        # hash -> how many remembered records have it: an id can be in the table twice (a copy that came
        # after the look-back), and forgetting the older must not forget the newer.
        self._hashes: dict[Partition, dict[int, int]] = {}
        # What each load or batch added, per partition, in chunks with their highest offset: a chunk is
        # forgotten whole once that is below the floor.
        self._chunks: dict[Partition, deque[tuple[int, list[int]]]] = {}

    @property
    def version(self) -> int | None:
        """The table version the memory is true for (None: it must be read from the table)."""
        return self._version

    def advance(self, version: int) -> None:
        """The commits up to `version` changed no rows (a compaction): the memory is true there too."""
        if self._version is not None:
            self._version = max(self._version, version)

    def answers(self, version: int, ranges: Mapping[Partition, Interval]) -> bool:
        """Whether the memory knows every id the table holds in the look-back of `ranges`, at `version`."""
        return self._version == version and all(
            tp in self._floor and self._floor[tp] <= start - self.lookback for tp, (start, _) in ranges.items()
        )

    def floors(self, ranges: Mapping[Partition, Interval]) -> dict[Partition, int]:
        """The lowest offset of each partition whose ids a batch over `ranges` must know."""
        return {tp: start - self.lookback for tp, (start, _) in ranges.items()}

    def load(self, version: int, floors: Mapping[Partition, int], records: Iterable[Record]) -> None:
        """Replace the memory with the table's ids at or above `floors` (read from the table at `version`)."""
        self._floor = dict(floors)
        self._hashes = {tp: {} for tp in floors}
        self._chunks = {tp: deque() for tp in floors}
        self._add(records)
        self._version = version

    def suspects(self, ids: Iterable[str]) -> set[str]:
        """The ids whose hash is remembered: the table may hold them (a hash collision may say so wrongly)."""
        ids = list(ids)
        # A set comprehension per partition's hashes: a batch's few thousand ids at C speed, not a generator each.
        return {i for hashes in self._hashes.values() for i in ids if hash(i) in hashes}

    def appended(self, version: int, ranges: Mapping[Partition, Interval], records: Iterable[Record]) -> None:
        """The job's own commit at `version` added `records`: remember them, forget what left the look-back."""
        if self._version is None or any(tp not in self._floor for tp in ranges):
            self.forget()  # it did not answer for this batch: nothing to build on
            return
        self._add(records)
        for tp, (_, end) in ranges.items():
            # The next batch starts at `end`: it needs the ids from end - lookback on.
            floor = self._floor[tp] = max(self._floor[tp], end - self.lookback)
            chunks, counts = self._chunks[tp], self._hashes[tp]
            while chunks and chunks[0][0] < floor:
                for h in chunks.popleft()[1]:
                    if counts[h] == 1:
                        del counts[h]
                    else:
                        counts[h] -= 1
        self._version = version

    def forget(self) -> None:
        """The table changed in a way the memory did not see: read it again before answering."""
        self._version = None
        self._floor, self._hashes, self._chunks = {}, {}, {}

    def size(self) -> int:
        """How many records the memory holds an id of."""
        return sum(sum(counts.values()) for counts in self._hashes.values())

    def _add(self, records: Iterable[Record]) -> None:
        by_partition: dict[Partition, list[tuple[int, str]]] = {}
        for tp, offset, event_id in records:
            by_partition.setdefault(tp, []).append((offset, event_id))
        for tp, rows in by_partition.items():
            rows.sort()
            counts = self._hashes.setdefault(tp, {})
            chunks = self._chunks.setdefault(tp, deque())
            for first in range(0, len(rows), CHUNK):
                chunk = rows[first : first + CHUNK]
                hashes = [hash(event_id) for _, event_id in chunk]
                for h in hashes:
                    counts[h] = counts.get(h, 0) + 1
                chunks.append((chunk[-1][0], hashes))
