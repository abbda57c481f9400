"""The event log's memory of the ids its table holds: what it answers, what it forgets, when it must read again."""

from __future__ import annotations

import pytest

from streaming_jobs.once.event_ids import CHUNK, EventIds, Record, split

P0 = ("t", 0)
P1 = ("t", 1)


def records(tp: tuple[str, int], first: int, ids: list[str]) -> list[Record]:
    return [(tp, first + i, event_id) for i, event_id in enumerate(ids)]


def test_split_keeps_the_first_copy_in_kafka_order_and_drops_what_the_table_holds() -> None:
    batch = [(P1, 3, "a"), (P0, 9, "a"), (P0, 4, "b"), (P0, 5, "c"), (P1, 1, "d"), (P0, 6, "b")]
    chosen = split(batch, held={"c"})
    assert chosen.keep == [(P0, 4, "b"), (P0, 9, "a"), (P1, 1, "d")]
    assert sorted(chosen.drop) == [(P0, 5, "c"), (P0, 6, "b"), (P1, 3, "a")]


def test_a_loaded_memory_answers_only_at_its_version_and_within_its_floors() -> None:
    memory = EventIds(lookback=10)
    ranges = {P0: (20, 25)}
    assert not memory.answers(7, ranges)  # never loaded
    memory.load(7, memory.floors(ranges), records(P0, 10, ["a", "b"]))
    assert memory.answers(7, ranges)
    assert not memory.answers(8, ranges), "another commit since the load: the table may hold ids it has not seen"
    assert not memory.answers(7, {P0: (19, 25)}), "a batch starting earlier needs ids below the floor"
    assert not memory.answers(7, {P0: (20, 25), P1: (0, 5)}), "a partition it never loaded"
    assert memory.suspects(["a", "x", "b"]) == {"a", "b"}


def test_appended_ids_are_remembered_and_those_out_of_the_look_back_forgotten() -> None:
    memory = EventIds(lookback=10)
    memory.load(0, memory.floors({P0: (0, 5)}), [])
    memory.appended(1, {P0: (0, 5)}, records(P0, 0, ["a", "b", "c", "d", "e"]))
    assert memory.answers(1, {P0: (5, 10)})
    assert memory.suspects(["a", "e", "z"]) == {"a", "e"}
    memory.appended(2, {P0: (5, 12)}, records(P0, 5, ["f", "g", "h", "i", "j", "k", "l"]))
    # The next batch starts at 12 and looks back to offset 2: the chunk of offsets 0-4 is still needed.
    assert memory.suspects(["a", "f"]) == {"a", "f"}
    memory.appended(3, {P0: (12, 16)}, records(P0, 12, ["m", "n", "o", "p"]))
    # Now it looks back to offset 6: offsets 0-4 are forgotten; 5-11 stay (one chunk, partly needed).
    assert memory.suspects(["a", "e", "f", "l", "p"]) == {"f", "l", "p"}
    assert memory.size() == 11
    assert memory.answers(3, {P0: (16, 20)})


def test_an_id_held_twice_stays_remembered_when_its_older_copy_is_forgotten() -> None:
    memory = EventIds(lookback=4)
    memory.load(0, memory.floors({P0: (0, 2)}), [])
    memory.appended(1, {P0: (0, 2)}, records(P0, 0, ["a", "b"]))
    memory.appended(2, {P0: (2, 4)}, records(P0, 2, ["c", "d"]))
    memory.appended(3, {P0: (4, 6)}, records(P0, 4, ["a", "e"]))  # a copy beyond an earlier look-back
    memory.appended(4, {P0: (6, 8)}, records(P0, 6, ["f", "g"]))  # offsets 0-1 leave the look-back
    assert memory.suspects(["a", "b"]) == {"a"}


def test_a_load_is_forgotten_chunk_by_chunk_not_all_at_once() -> None:
    memory = EventIds(lookback=CHUNK)
    loaded = records(P0, 0, [f"id-{i}" for i in range(2 * CHUNK)])
    memory.load(0, memory.floors({P0: (2 * CHUNK, 2 * CHUNK + 1)}), loaded)
    memory.appended(1, {P0: (2 * CHUNK, 2 * CHUNK + 1)}, records(P0, 2 * CHUNK, ["new"]))
    # The look-back now starts at CHUNK + 1: the first chunk is gone, the second (partly needed) is kept.
    assert memory.size() == CHUNK + 1
    assert memory.suspects(["id-0", f"id-{CHUNK}", "new"]) == {f"id-{CHUNK}", "new"}


def test_after_forget_or_a_batch_it_did_not_answer_it_reads_the_table_again() -> None:
    memory = EventIds(lookback=10)
    memory.load(0, memory.floors({P0: (0, 5)}), [])
    memory.forget()
    assert not memory.answers(0, {P0: (0, 5)})
    memory.appended(1, {P0: (0, 5)}, records(P0, 0, ["a"]))
    assert not memory.answers(1, {P0: (5, 10)}), "built on nothing: it must be loaded first"
    assert memory.suspects(["a"]) == set()


def test_a_look_back_of_zero_is_not_a_memory() -> None:
    with pytest.raises(ValueError, match="look-back of at least one record"):
        EventIds(lookback=0)


def test_the_memory_moves_past_commits_that_change_no_rows_but_never_back_or_from_nothing() -> None:
    memory = EventIds(lookback=10)
    memory.advance(5)
    assert memory.version is None, "a memory never loaded must be read from the table"
    memory.load(3, {("t", 0): 0}, [(("t", 0), 1, "a")])
    memory.advance(5)
    assert memory.version == 5
    assert memory.answers(5, {("t", 0): (10, 12)})
    memory.advance(4)
    assert memory.version == 5
