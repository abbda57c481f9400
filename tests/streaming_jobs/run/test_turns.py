"""Turns in a table group: only a table whose topic holds records for it reads, the longest waiting first."""

from __future__ import annotations

from streaming_jobs.run.turns import Turns

TOPICS: dict[str, tuple[str, ...]] = {"a": ("t.a",), "b": ("t.b",), "c": ("t.c",)}


def test_an_idle_table_gets_no_turn_and_one_behind_waits_for_a_free_slot() -> None:
    turns = Turns(slots=1, topics=TOPICS, applied={"a": {("t.a", 0): 5}, "b": {("t.b", 0): 3}, "c": {}})
    latest = {("t.a", 0): 5, ("t.b", 0): 7, ("t.c", 0): 0}
    turns.see(latest, now=10.0, members=TOPICS)
    assert turns.waiting == {"b": 10.0}  # a applied everything; c's topic is empty
    assert turns.behind("b", latest) == {("t.b", 0): 4}
    assert turns.take(latest) == ["b"]
    assert turns.running == {"b": {("t.b", 0): 7}}  # its turn reads at least up to what was there
    latest[("t.a", 0)] = 9
    turns.see(latest, now=11.0, members=TOPICS)
    assert turns.take(latest) == []  # the one slot is b's
    assert turns.waiting == {"a": 11.0}


def test_the_longest_waiting_table_reads_first_and_a_turn_ended_moves_its_applied_offsets() -> None:
    turns = Turns(slots=2, topics=dict(TOPICS))
    latest = {("t.a", 0): 1, ("t.b", 0): 1, ("t.b", 1): 2, ("t.c", 0): 1}
    turns.see({("t.c", 0): 1}, now=1.0, members=TOPICS)
    turns.see(latest, now=2.0, members=TOPICS)
    assert turns.take(latest) == ["c", "a"]  # c first seen behind; then by name among equals
    turns.done("a", {("t.a", 0): 3}, whole=True)  # the query read past what the group had seen
    assert turns.applied["a"] == {("t.a", 0): 3}
    turns.see(latest, now=3.0, members=TOPICS)
    assert "a" not in turns.waiting
    assert turns.take(latest) == ["b"]
    turns.done("b", {}, whole=True)  # an available-now run with no report (nothing new): what it was given
    assert turns.applied["b"] == {("t.b", 0): 1, ("t.b", 1): 2}
    assert turns.take(latest) == []


def test_a_turn_stopped_early_counts_only_what_its_batches_reached() -> None:
    turns = Turns(slots=1, topics=dict(TOPICS), applied={"a": {("t.a", 0): 0}})
    latest = {("t.a", 0): 1000}
    turns.see(latest, now=1.0, members=["a"])
    assert turns.take(latest) == ["a"]
    turns.done("a", {("t.a", 0): 500}, whole=False)  # stopped for another table after one capped batch
    assert turns.applied["a"] == {("t.a", 0): 500}
    turns.see(latest, now=2.0, members=["a"])
    assert turns.waiting == {"a": 2.0}  # the rest waits for its next turn


def test_a_new_partition_and_a_parked_table() -> None:
    turns = Turns(slots=3, topics=TOPICS, applied={"a": {("t.a", 0): 4}})
    latest = {("t.a", 0): 4, ("t.a", 1): 2}
    turns.see(latest, now=1.0, members=["a"])
    assert turns.behind("a", latest) == {("t.a", 1): 2}  # a partition the checkpoint never read
    turns.drop("a")
    assert not turns.waiting
    assert turns.take(latest) == []
