"""The chaos soak's verdicts: each read model against the truth in Postgres, as missing / doubled / out of order.

Pure functions over rows (dicts, as delta-rs and psycopg give them), so that the checks themselves are tested
(tests/bench/test_chaos_checks.py) to see each fault they are meant to see.

The captured table's `changes` column counts the updates of its row (the generator adds 1 with every
deposit), so the history of a key must hold exactly the versions 0..changes, in LSN order, one of them current.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """What a read model got wrong. `out_of_order` is None where order cannot show (a sum)."""

    missing: int
    doubled: int
    out_of_order: int | None
    unknown: int = 0  # rows of keys or events that were never committed

    @property
    def clean(self) -> bool:
        return not (self.missing or self.doubled or self.out_of_order or self.unknown)

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)


@dataclass(frozen=True)
class Event:
    """One event the generator committed (or may have: its commit was cut off)."""

    event_id: str
    key: str
    sequence: int  # commit order, across keys


def event_log(expected: set[str], maybe: set[str], rows: Iterable[Row]) -> Verdict:
    """Each committed event exactly once; order is checked in Kafka (`first_copy_order`), not in a log."""
    ids = [str(r["event_id"]) for r in rows]
    present = set(ids)
    return Verdict(
        missing=len(expected - present),
        doubled=len(ids) - len(present),
        out_of_order=0,
        unknown=len(present - expected - maybe),
    )


def first_copy_order(records: Iterable[tuple[int, int, bytes, str]], sequence: Mapping[str, int]) -> int:
    """Pairs of one key's events whose first copies in Kafka are against commit order.

    `records` are (partition, offset, key, event id); copies sent again (delivery is at least once) and
    events the generator does not know are skipped.
    """
    first: dict[bytes, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for _, _, key, event_id in sorted(records, key=lambda r: (r[0], r[1])):
        if event_id in seen or event_id not in sequence:
            continue
        seen.add(event_id)
        first[key].append(sequence[event_id])
    return sum(1 for ks in first.values() for a, b in itertools.pairwise(ks) if b < a)


def latest_state(landed: Iterable[Event], rows: Iterable[Row]) -> Verdict:
    """One row per aggregate, holding the aggregate's last committed event (an older one is out of order)."""
    newest: dict[str, Event] = {}
    for event in landed:
        if event.key not in newest or event.sequence > newest[event.key].sequence:
            newest[event.key] = event
    rows = list(rows)
    per_key = Counter(str(r["aggregate_id"]) for r in rows)
    stale = sum(1 for r in rows if (e := newest.get(str(r["aggregate_id"]))) and e.event_id != str(r["event_id"]))
    return Verdict(
        missing=len(newest.keys() - per_key.keys()),
        doubled=sum(n - 1 for n in per_key.values()),
        out_of_order=stale,
        unknown=len(per_key.keys() - newest.keys()),
    )


def projection(truth: Mapping[str, int], balances: Iterable[Row]) -> Verdict:
    """Each balance equal to Postgres's: short of it, a deposit is missing; over it, one was added twice."""
    got = {str(r["account_id"]): int(r["balance"]) for r in balances}
    return Verdict(
        missing=sum(1 for k, v in truth.items() if got.get(k, 0) < v or k not in got),
        doubled=sum(1 for k, v in truth.items() if got.get(k, v) > v),
        out_of_order=None,  # a sum does not depend on the order it was added in
        unknown=len(got.keys() - truth.keys()),
    )


def mirror(truth: Mapping[str, Row], rows: Iterable[Row], columns: tuple[str, ...]) -> Verdict:
    """The mirror equals the table: a key absent is missing, a row older than the table's is out of order."""
    rows = list(rows)
    per_key = Counter(str(r["id"]) for r in rows)
    stale = sum(1 for r in rows if (t := truth.get(str(r["id"]))) is not None and any(r[c] != t[c] for c in columns))
    return Verdict(
        missing=len(truth.keys() - per_key.keys()),
        doubled=sum(n - 1 for n in per_key.values()),
        out_of_order=stale,
        unknown=len(per_key.keys() - truth.keys()),
    )


def history(truth: Mapping[str, Row], rows: Iterable[Row]) -> Verdict:
    """Versions 0..changes of each key, each once, in LSN order, the last (only the last) current.

    A key without exactly one current row, or whose current row is not its newest version, counts as out
    of order too: a reader asking for the current state would get a wrong or doubled answer.
    """
    versions: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        versions[str(r["id"])].append(r)
    missing = doubled = out_of_order = unknown = 0
    for key, t in truth.items():
        mine = sorted(versions.get(key, []), key=lambda r: int(r["_lsn"]))
        numbers = [int(r["changes"]) for r in mine]
        missing += len(set(range(int(t["changes"]) + 1)) - set(numbers))
        doubled += len(numbers) - len(set(numbers))
        out_of_order += sum(1 for a, b in itertools.pairwise(numbers) if b < a)
        unknown += sum(1 for n in set(numbers) if n > int(t["changes"]))
        current = [r for r in mine if r["is_current"]]
        if mine and (len(current) != 1 or int(current[0]["changes"]) != max(numbers)):
            out_of_order += 1
    return Verdict(
        missing=missing,
        doubled=doubled,
        out_of_order=out_of_order,
        unknown=unknown + len(versions.keys() - truth.keys()),
    )


def _stats(latencies: list[float]) -> dict[str, Any]:
    """Events, median, p99 and max (nearest rank) of latencies in seconds; None for a window with no event."""
    ranked = sorted(latencies)
    if not ranked:
        return {"events": 0, "p50_s": None, "p99_s": None, "max_s": None}

    def rank(p: int) -> float:
        return round(ranked[max(0, math.ceil(len(ranked) * p / 100) - 1)], 2)

    return {"events": len(ranked), "p50_s": rank(50), "p99_s": rank(99), "max_s": round(ranked[-1], 2)}


def latency_around_faults(
    landed: Iterable[tuple[float, float]],
    faults_at: list[float],
    end: float,
    floor_s: float = 2.0,
    steady_from: float | None = None,
) -> dict[str, Any]:
    """Commit-to-lake latency before the first fault and in each fault's window, and how long each took to recover.

    `landed`: (commit time, latency) of each event in seconds (commit times epoch, as `faults_at` and `end`). A
    fault's window runs from it to the next fault (the last one's to `end`). The bound is 3x the median latency
    before the first fault (of the whole run if none came before; at least `floor_s`): `recovered_s` is from the
    fault until the last event of its window over the bound landed, after which every event of the window landed
    within it (0: none was over). `steady_from`: the baseline counts only events committed from then on; those
    committed while a job's driver started and read its first backlog measure the start, and would set the bound
    so high that no fault's stall passed it. They are reported apart (`warm_up`): every event committed before
    `end` falls in exactly one of `warm_up`, `before_faults` and the fault windows.
    """
    events = sorted(landed)
    first = faults_at[0] if faults_at else math.inf
    since = -math.inf if steady_from is None else steady_from
    before = [latency for at, latency in events if since <= at < first]
    median = _stats(before or [latency for _, latency in events])["p50_s"] or 0.0
    bound = max(floor_s, 3 * median)
    edges = [*faults_at, end]
    windows = []
    for start, stop in itertools.pairwise(edges):
        inside = [(at, latency) for at, latency in events if start <= at < stop]
        late = [at + latency for at, latency in inside if latency > bound]
        windows.append(
            {**_stats([lat for _, lat in inside]), "recovered_s": round(max(late) - start, 1) if late else 0.0}
        )
    warm_up = [latency for at, latency in events if at < min(since, first)]
    return {"bound_s": round(bound, 2), "warm_up": _stats(warm_up), "before_faults": _stats(before), "faults": windows}
