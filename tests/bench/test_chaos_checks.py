"""The chaos soak's checks see each fault they are meant to see (and nothing on a clean read model)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.support.bench import load_bench_module

checks: Any = load_bench_module("chaos_checks")
Event = checks.Event

EVENTS = [Event("e1", "a", 1), Event("e2", "b", 2), Event("e3", "a", 3)]
TABLE = {"a": {"id": "a", "balance": 30, "changes": 2}, "b": {"id": "b", "balance": 5, "changes": 1}}


def counts(verdict: Any) -> tuple[int, int, int | None, int]:
    return verdict.missing, verdict.doubled, verdict.out_of_order, verdict.unknown


def test_event_log() -> None:
    expected = {"e1", "e2", "e3"}
    rows = [{"event_id": e} for e in ("e1", "e2", "e3")]
    assert checks.event_log(expected, set(), rows).clean
    assert counts(checks.event_log(expected, set(), rows[:2] + rows[:1])) == (1, 1, 0, 0)
    assert counts(checks.event_log(expected, {"m"}, [*rows, {"event_id": "m"}, {"event_id": "x"}])) == (0, 0, 0, 1)


def test_first_copy_order_skips_copies_sent_again() -> None:
    sequence = {"e1": 1, "e3": 3}
    in_order = [(0, 0, b"a", "e1"), (0, 1, b"a", "e3"), (0, 2, b"a", "e1")]
    assert checks.first_copy_order(in_order, sequence) == 0
    assert checks.first_copy_order([(0, 0, b"a", "e3"), (0, 1, b"a", "e1")], sequence) == 1


def test_latest_state() -> None:
    rows = [{"aggregate_id": "a", "event_id": "e3"}, {"aggregate_id": "b", "event_id": "e2"}]
    assert checks.latest_state(EVENTS, rows).clean
    stale = [{"aggregate_id": "a", "event_id": "e1"}]
    assert counts(checks.latest_state(EVENTS, stale)) == (1, 0, 1, 0)
    assert counts(checks.latest_state(EVENTS, [*rows, rows[0], {"aggregate_id": "z", "event_id": "q"}])) == (
        0,
        1,
        0,
        1,
    )


def test_projection() -> None:
    truth = {"a": 30, "b": 5}
    assert checks.projection(truth, [{"account_id": "a", "balance": 30}, {"account_id": "b", "balance": 5}]).clean
    verdict = checks.projection(truth, [{"account_id": "a", "balance": 60}])
    assert counts(verdict) == (1, 1, None, 0)
    assert not verdict.clean


def test_mirror() -> None:
    rows = [dict(r) for r in TABLE.values()]
    assert checks.mirror(TABLE, rows, ("balance", "changes")).clean
    older = [{"id": "a", "balance": 10, "changes": 1}, rows[1], rows[1]]
    assert counts(checks.mirror(TABLE, older, ("balance", "changes"))) == (0, 1, 1, 0)
    assert counts(checks.mirror(TABLE, [rows[0]], ("balance", "changes"))) == (1, 0, 0, 0)


def version(key: str, changes: int, lsn: int, current: bool) -> dict[str, Any]:
    return {"id": key, "changes": changes, "_lsn": lsn, "is_current": current, "valid_from": datetime.now()}


def test_history() -> None:
    clean = [version("a", 0, 1, False), version("a", 1, 5, False), version("a", 2, 9, True)]
    clean += [version("b", 0, 1, False), version("b", 1, 3, True)]
    assert checks.history(TABLE, clean).clean
    # a change missing, one applied twice (a second current row), and a version number out of LSN order
    broken = [version("a", 0, 1, False), version("a", 2, 9, True), version("a", 2, 11, True)]
    broken += [version("b", 1, 1, False), version("b", 0, 3, True)]
    assert counts(checks.history(TABLE, broken)) == (1, 1, 3, 0)
    assert counts(checks.history(TABLE, [*clean, version("a", 3, 12, False), version("z", 0, 1, True)])) == (
        0,
        0,
        1,
        2,
    )


def test_latency_around_faults() -> None:
    # One event a second, 1 s from commit to lake, but those committed in the 4 s after the fault at 10 (held, all
    # landing at 15.5: their latency falls as the backlog drains), and one late event after the second fault.
    landed = [(float(t), 1.0) for t in range(20) if not 10 <= t < 14]
    landed += [(10.0, 5.5), (11.0, 4.5), (12.0, 3.5), (13.0, 2.5), (18.5, 9.0)]
    around = checks.latency_around_faults(landed, [10.0, 16.0], end=20.0)
    assert around["bound_s"] == 3.0  # 3x the run's median, 1 s
    assert around["before_faults"] == {"events": 10, "p50_s": 1.0, "p99_s": 1.0, "max_s": 1.0}
    first, second = around["faults"]
    assert first["events"] == 6  # 10 to 15: four delayed, two on time
    assert (first["p50_s"], first["max_s"]) == (2.5, 5.5)  # nearest rank: the 3rd of 6
    assert first["recovered_s"] == 5.5  # the event of 11 (4.5 s) landed at 15.5, the last over the bound
    assert second["events"] == 5  # 16, 17, 18, 18.5, 19
    assert second["recovered_s"] == 11.5  # landed at 27.5
    assert checks.latency_around_faults([(1.0, 1.0)], [], end=2.0)["faults"] == []
    quiet = checks.latency_around_faults([], [5.0], end=9.0)
    assert quiet["faults"] == [{"events": 0, "p50_s": None, "p99_s": None, "max_s": None, "recovered_s": 0.0}]


def test_the_baseline_leaves_out_the_warm_ups_events() -> None:
    # Committed while the job's driver started (5 s late each), then one event a second at 1 s: a fault at 10 whose
    # events land 4 s late is over 3x the steady median (3 s), where the warm-up's would have hidden it (bound 15 s).
    landed = [(float(t), 5.0) for t in range(6)] + [(float(t), 1.0) for t in range(6, 10)]
    landed += [(10.0, 4.0), (11.0, 1.0)]
    steady = checks.latency_around_faults(landed, [10.0], end=12.0, steady_from=6.0)
    assert steady["bound_s"] == 3.0
    assert steady["before_faults"]["events"] == 4
    assert steady["warm_up"] == {"events": 6, "p50_s": 5.0, "p99_s": 5.0, "max_s": 5.0}  # counted, apart
    counted = steady["warm_up"]["events"] + steady["before_faults"]["events"] + steady["faults"][0]["events"]
    assert counted == len(landed)
    assert steady["faults"][0]["recovered_s"] == 4.0
    warm = checks.latency_around_faults(landed, [10.0], end=12.0)
    assert warm["bound_s"] == 15.0
    assert warm["faults"][0]["recovered_s"] == 0.0
    assert warm["warm_up"]["events"] == 0
