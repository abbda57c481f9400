"""The topics publishing is stalled on, and the aggregate types whose events wait for each.

A topic that cannot take records (missing, since auto-creation is off; or an ACL the relay lacks) holds only its
own events: the aggregate types that go to it are left out of every take (`outbox_relay.sql.take_except_sql`),
so each aggregate's events still leave in order, and every other topic keeps flowing. One team emitting a new
event type before its topic is declared holds up that type, not the company's outbox. Each stalled topic is
checked again with backoff; once Kafka would take its records, its types are taken again, oldest first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass
class Stall:
    """One topic that cannot take records, why, since when, and the aggregate types waiting for it."""

    topic: str
    reason: str
    since: datetime
    aggregate_types: set[str] = field(default_factory=set)


class Stalls:
    """The relay's stalled topics (used by its main thread only), and when to check them again."""

    def __init__(self, backoff_max_s: float) -> None:
        self._stalls: dict[str, Stall] = {}
        self._backoff_max_s = backoff_max_s
        self._delay = 0.0
        self._next_check = 0.0

    def __bool__(self) -> bool:
        return bool(self._stalls)

    def __iter__(self) -> Iterator[Stall]:
        return iter(list(self._stalls.values()))

    def waiting_types(self) -> frozenset[str]:
        """The aggregate types no take may remove now."""
        return frozenset(kind for stall in self._stalls.values() for kind in stall.aggregate_types)

    def add(self, topic: str, reason: str, aggregate_types: set[str]) -> bool:
        """Hold `aggregate_types` back for `topic`; True when the topic was not stalled before."""
        stall = self._stalls.get(topic)
        new = stall is None
        if stall is None:
            stall = self._stalls[topic] = Stall(topic, reason, datetime.now(UTC))
            self._delay = 0.5  # a new stall is checked again soon; a lasting one ever less often (`due`)
            self._next_check = time.monotonic() + self._delay
        stall.reason = reason
        stall.aggregate_types |= aggregate_types
        return new

    def due(self) -> list[str]:
        """The stalled topics to check again now (none before the backoff says so)."""
        if not self._stalls or time.monotonic() < self._next_check:
            return []
        self._delay = min(self._backoff_max_s, max(0.5, self._delay * 2))
        self._next_check = time.monotonic() + self._delay
        return sorted(self._stalls)

    def clear(self, topic: str) -> Stall | None:
        return self._stalls.pop(topic, None)

    def as_json(self) -> str | None:
        """Every stall, as the status row's `stalls` column holds them (None: none)."""
        if not self._stalls:
            return None
        return json.dumps(
            [
                {
                    "topic": s.topic,
                    "reason": s.reason,
                    "since": s.since.isoformat(),
                    "aggregate_types": sorted(s.aggregate_types),
                }
                for s in self._stalls.values()
            ]
        )
