"""Whose turn it is in a table group's driver: a table's query runs only while its topic holds records for it.

A hundred tables that each keep a streaming query running cost a trigger each per second when nothing changes
(the driver at half a core, idle), and when they all change, a hundred batches at once exhaust the driver's
memory and only queue behind each other on a few cores. So the group reads the latest stable offsets of all
its topics at once, each tick, and gives a turn to the tables whose topics hold records past what they
applied: the one waiting longest first, at most `slots` at a time. A turn runs the table's own query, from
its own checkpoint, with the group's trigger; it ends (the query stopped between two batches) once the table
has had a batch and another table waits, or once its topic has brought nothing for a while. A busy table with
no one waiting thus keeps its query, as a job of its own would; an idle one costs nothing.

Pure bookkeeping, no Kafka and no Spark: the group's loop (streaming_jobs.run.group) feeds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from streaming_jobs.offsets import Offsets

# A turn with no records for this long ends, another table waiting or not: an idle query costs a trigger a second.
QUIET_S = 30.0
# A turn that has read nothing for this long gives its slot to a table waiting (records came, but not for it).
YIELD_S = 5.0


def turn_over(*, others_waiting: bool, batches: int, quiet_s: float) -> bool:
    """Whether a running turn ends now, between two batches.

    `batches`: the batches it completed in this turn; `quiet_s`: seconds since its topic last brought records
    (or since the turn began). With a table waiting, a turn ends after a batch, or once quiet for YIELD_S; with
    none, a busy table keeps its query (as a job of its own would) and only a quiet one ends, after QUIET_S.
    """
    if others_waiting and (batches > 0 or quiet_s >= YIELD_S):
        return True
    return quiet_s >= QUIET_S


@dataclass
class Turns:
    """Each member's applied offsets, who waits for a turn (since when), who has one, at most `slots` at once."""

    slots: int
    topics: dict[str, tuple[str, ...]]  # per member, the topics it reads
    applied: dict[str, Offsets] = field(default_factory=dict)  # how far each member's checkpoint got, as last known
    waiting: dict[str, float] = field(default_factory=dict)  # member -> when it was first seen behind
    running: dict[str, Offsets] = field(default_factory=dict)  # member -> the offsets its turn reads up to, at least

    def lags(self, latest: Offsets, members: Iterable[str]) -> dict[str, dict[tuple[str, int], int]]:
        """Per member, per partition of its topics, the records past what it applied (0 where none).

        One pass over `latest`, then each member's own partitions: a group's tick does this for a hundred
        tables over hundreds of partitions, where a scan of every partition per table costs a hundred times more.
        """
        by_topic: dict[str, list[tuple[tuple[str, int], int]]] = {}
        for tp, end in latest.items():
            by_topic.setdefault(tp[0], []).append((tp, end))
        lags: dict[str, dict[tuple[str, int], int]] = {}
        for member in members:
            applied = self.applied.get(member, {})
            lags[member] = {
                tp: max(0, end - applied.get(tp, 0))
                for topic in self.topics[member]
                for tp, end in by_topic.get(topic, ())
            }
        return lags

    def behind(self, member: str, latest: Offsets) -> dict[tuple[str, int], int]:
        """Per partition of the member's topics, the records past what it applied (only those with some)."""
        return {tp: lag for tp, lag in self.lags(latest, [member])[member].items() if lag}

    def see(self, lags: dict[str, dict[tuple[str, int], int]], now: float) -> None:
        """The members' lags read (`lags`): each not in a turn and behind waits, from now if not already."""
        for member, lag in lags.items():
            if member not in self.running and member not in self.waiting and any(lag.values()):
                self.waiting[member] = now

    def take(self, latest: Offsets) -> list[str]:
        """The members whose turn starts now: the longest waiting first, as many as there are free slots."""
        free = self.slots - len(self.running)
        chosen = sorted(self.waiting, key=lambda m: (self.waiting[m], m))[: max(0, free)]
        for member in chosen:
            del self.waiting[member]
            self.running[member] = {tp: end for tp, end in latest.items() if tp[0] in self.topics[member]}
        return chosen

    def done(self, member: str, reached: Offsets, *, whole: bool) -> None:
        """A member's turn ended well: it applied up to `reached` (where its last batch ended).

        `whole`: the turn read everything its topics held when it began (an available-now run that ended by
        itself), which counts as applied too, even where no batch reported it. A turn stopped early (another
        table waiting) applied what it reported, no more: the rest waits for its next turn.
        """
        target = self.running.pop(member, {})
        applied = self.applied.setdefault(member, {})
        for tp, offset in [*(target.items() if whole else ()), *reached.items()]:
            applied[tp] = max(applied.get(tp, 0), offset)

    def drop(self, member: str) -> None:
        """A member parked (or gone): no turn for it any more."""
        self.running.pop(member, None)
        self.waiting.pop(member, None)
