"""The relay's stalled topics: which aggregate types wait, and when each topic is checked again (no Kafka)."""

from __future__ import annotations

import json

import pytest

from outbox_relay import stalls
from outbox_relay.stalls import Stalls


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    ticking = Clock()
    monkeypatch.setattr(stalls, "time", type("FakeTime", (), {"monotonic": staticmethod(ticking)}))
    return ticking


def test_only_the_stalled_topics_types_wait_and_a_lasting_stall_is_checked_ever_less_often(clock: Clock) -> None:
    held = Stalls(backoff_max_s=4.0)
    assert not held
    assert held.add("t.invoice", "missing", {"invoice"}) is True
    assert held.add("t.refund", "missing", {"refund"}) is True
    assert held.waiting_types() == {"invoice", "refund"}
    assert held.due() == []  # checked again after a moment, not at once
    gaps = []
    for _ in range(5):
        last = clock.now
        while not held.due():
            clock.now += 0.25
        gaps.append(clock.now - last)
        assert held.add("t.invoice", "still missing", set()) is False  # still stalled: the backoff keeps growing
    assert gaps == sorted(gaps)
    assert gaps[-1] == 4.0
    assert held.clear("t.invoice") is not None
    assert held.waiting_types() == {"refund"}
    (only,) = json.loads(held.as_json() or "[]")
    assert only["topic"] == "t.refund"
    assert only["aggregate_types"] == ["refund"]
    held.clear("t.refund")
    assert held.as_json() is None
