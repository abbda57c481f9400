"""The job files `tables add` writes: a group's file takes a table in or out and keeps what the user set."""

from __future__ import annotations

from pathlib import Path

from capture import files
from streaming_jobs.jobs.spec import load_file


def test_a_table_joins_a_group_file_and_the_users_policy_and_trigger_stay(tmp_path: Path) -> None:
    made = files.group_file(tmp_path, "shop", ["s.a", 's.B "b"'], ["p.s.a", "p.s.B__b_"], ["mirror"])
    edited = made.text.replace('trigger = "1s"', 'trigger = "5s"') + '\n[on_schema_change]\ncolumn_added = "stop"\n'
    grown = files.regrouped(made.path, edited, ["s.a", 's.B "b"', "s.c"], ["p.s.a", "p.s.B__b_", "p.s.c"])
    assert grown is not None
    grown.path.write_text(grown.text)
    spec = load_file(grown.path)
    assert spec.tables == ("s.a", 's.B "b"', "s.c")
    assert spec.topics == ("p.s.a", "p.s.B__b_", "p.s.c")
    assert (spec.trigger, spec.on_schema_change.column_added) == ("5s", "stop")
    assert grown.text.startswith("# The mirror jobs of 3 tables")
    shrunk = files.regrouped(made.path, grown.text, ["s.c"], ["p.s.c"])
    assert shrunk is not None
    shrunk.path.write_text(shrunk.text)
    assert load_file(shrunk.path).tables == ("s.c",)
    assert load_file(shrunk.path).on_schema_change.column_added == "stop"


def test_lists_edited_by_hand_are_not_rewritten(tmp_path: Path) -> None:
    made = files.group_file(tmp_path, "shop", ["s.a"], ["p.s.a"], ["mirror"])
    by_hand = made.text.replace('tables = [\n    "s.a",\n]', 'tables = ["s.a"]')
    assert files.regrouped(made.path, by_hand, ["s.a", "s.b"], ["p.s.a", "p.s.b"]) is None
