"""Turns in a table group: only a table whose topic holds records for it reads, the longest waiting first."""

from __future__ import annotations

from streaming_jobs.run.turns import QUIET_S, YIELD_S, Turns, turn_over

TOPICS: dict[str, tuple[str, ...]] = {"a": ("t.a",), "b": ("t.b",), "c": ("t.c",)}


def test_an_idle_table_gets_no_turn_and_one_behind_waits_for_a_free_slot() -> None:
    turns = Turns(slots=1, topics=TOPICS, applied={"a": {("t.a", 0): 5}, "b": {("t.b", 0): 3}, "c": {}})
    latest = {("t.a", 0): 5, ("t.b", 0): 7, ("t.c", 0): 0}
    turns.see(turns.lags(latest, TOPICS), now=10.0)
    assert turns.waiting == {"b": 10.0}  # a applied everything; c's topic is empty
    assert turns.behind("b", latest) == {("t.b", 0): 4}
    assert turns.take(latest) == ["b"]
    assert turns.running == {"b": {("t.b", 0): 7}}  # its turn reads at least up to what was there
    latest[("t.a", 0)] = 9
    turns.see(turns.lags(latest, TOPICS), now=11.0)
    assert turns.take(latest) == []  # the one slot is b's
    assert turns.waiting == {"a": 11.0}


def test_the_longest_waiting_table_reads_first_and_a_turn_ended_moves_its_applied_offsets() -> None:
    turns = Turns(slots=2, topics=dict(TOPICS))
    latest = {("t.a", 0): 1, ("t.b", 0): 1, ("t.b", 1): 2, ("t.c", 0): 1}
    turns.see(turns.lags({("t.c", 0): 1}, TOPICS), now=1.0)
    turns.see(turns.lags(latest, TOPICS), now=2.0)
    assert turns.take(latest) == ["c", "a"]  # c first seen behind; then by name among equals
    turns.done("a", {("t.a", 0): 3}, whole=True)  # the query read past what the group had seen
    assert turns.applied["a"] == {("t.a", 0): 3}
    turns.see(turns.lags(latest, TOPICS), now=3.0)
    assert "a" not in turns.waiting
    assert turns.take(latest) == ["b"]
    turns.done("b", {}, whole=True)  # an available-now run with no report (nothing new): what it was given
    assert turns.applied["b"] == {("t.b", 0): 1, ("t.b", 1): 2}
    assert turns.take(latest) == []


def test_a_turn_stopped_early_counts_only_what_its_batches_reached() -> None:
    turns = Turns(slots=1, topics=dict(TOPICS), applied={"a": {("t.a", 0): 0}})
    latest = {("t.a", 0): 1000}
    turns.see(turns.lags(latest, ["a"]), now=1.0)
    assert turns.take(latest) == ["a"]
    turns.done("a", {("t.a", 0): 500}, whole=False)  # stopped for another table after one capped batch
    assert turns.applied["a"] == {("t.a", 0): 500}
    turns.see(turns.lags(latest, ["a"]), now=2.0)
    assert turns.waiting == {"a": 2.0}  # the rest waits for its next turn


def test_a_new_partition_and_a_parked_table() -> None:
    turns = Turns(slots=3, topics=TOPICS, applied={"a": {("t.a", 0): 4}})
    latest = {("t.a", 0): 4, ("t.a", 1): 2}
    turns.see(turns.lags(latest, ["a"]), now=1.0)
    assert turns.behind("a", latest) == {("t.a", 1): 2}  # a partition the checkpoint never read
    turns.drop("a")
    assert not turns.waiting
    assert turns.take(latest) == []


def test_lags_cover_every_partition_of_a_members_topics_with_zero_where_nothing_waits() -> None:
    turns = Turns(slots=1, topics={"a": ("t.a", "t.x"), "b": ("t.b",)}, applied={"a": {("t.a", 0): 5, ("t.x", 0): 9}})
    latest = {("t.a", 0): 5, ("t.a", 1): 3, ("t.x", 0): 7, ("t.b", 0): 2, ("t.other", 0): 50}
    assert turns.lags(latest, ["a", "b"]) == {
        "a": {("t.a", 0): 0, ("t.a", 1): 3, ("t.x", 0): 0},  # applied past the end (a recreated topic): no lag
        "b": {("t.b", 0): 2},
    }


def test_a_turn_ends_after_a_batch_when_another_waits_and_otherwise_only_once_quiet() -> None:
    assert not turn_over(others_waiting=False, batches=40, quiet_s=0.0)  # busy, nobody waiting: keeps its query
    assert turn_over(others_waiting=False, batches=0, quiet_s=QUIET_S)  # idle: its query is stopped
    assert not turn_over(others_waiting=False, batches=3, quiet_s=QUIET_S - 1)
    assert turn_over(others_waiting=True, batches=1, quiet_s=0.0)  # a batch done and a table waits
    assert not turn_over(others_waiting=True, batches=0, quiet_s=YIELD_S - 1)  # its first batch still running
    assert turn_over(others_waiting=True, batches=0, quiet_s=YIELD_S)  # records came, none for it: yields
