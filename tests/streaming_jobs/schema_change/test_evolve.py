"""What a change of the source's columns means under each on_schema_change policy (no Spark, no I/O)."""

from __future__ import annotations

from pathlib import Path

from schemas.pg_types import PgType
from schemas.table_contracts import TableContract, from_document
from streaming_jobs.jobs.spec import SchemaChangePolicy
from streaming_jobs.schema_change.evolve import Decision, Operation, compare, decide
from streaming_jobs.schema_change.shapes import Field, Shape


def contract() -> TableContract:
    document = {
        "x-primary-key": ["id"],
        "x-version": 3,
        "type": "object",
        "required": ["id", "qty"],
        "properties": {
            "id": {"type": "integer", "x-pg-type": "int4", "x-attnum": 1},
            "name": {"type": ["string", "null"], "x-pg-type": "text", "x-attnum": 2},
            "qty": {"type": "integer", "x-pg-type": "int4", "x-attnum": 3},
        },
    }
    return from_document("public.t", document, Path("/contracts/public.t.json"))


def shape(**columns: str) -> Shape:
    return Shape(tuple(Field(n, "string", None, PgType.parse(t)) for n, t in columns.items()), described=True)


def run(policy: SchemaChangePolicy, renames: dict[str, str] | None = None, /, **columns: str) -> Decision:
    return decide("j", contract(), shape(**columns), policy, renames or {}, {"email": 4})


SAME = {"id": "int4", "name": "text", "qty": "int4"}


def test_the_same_shape_changes_nothing() -> None:
    assert compare(contract(), shape(**SAME), {}) == []
    assert run(SchemaChangePolicy(), **SAME).document is None


def test_an_added_column_is_added_to_the_table_and_the_contract() -> None:
    decision = run(SchemaChangePolicy(), **SAME, email="varchar(40)")
    assert [str(c) for c in decision.changes] == ["column email (varchar(40)) added"]
    assert decision.operations == (Operation("add", "email", "string"),)
    assert decision.document is not None
    assert decision.document["properties"]["email"] == {
        "type": ["string", "null"],
        "x-pg-type": "varchar(40)",
        "x-attnum": 4,
    }
    assert decision.document["x-version"] == 4
    # The version it replaces stays in the file: a replay's new table starts from the one its oldest changes have.
    evolved = from_document("public.t", decision.document, Path("/contracts/public.t.json"))
    assert [c.version for c in evolved.earlier()] == [3]
    assert evolved.earlier()[0].columns == ["id", "name", "qty"]


def test_a_dropped_column_is_kept_or_dropped_as_the_policy_says() -> None:
    kept = run(SchemaChangePolicy(), id="int4", qty="int4")
    assert kept.operations == ()
    assert kept.document is not None
    assert kept.document["properties"]["name"]["x-dropped"] is True
    dropped = run(SchemaChangePolicy(column_dropped="drop"), id="int4", qty="int4")
    assert dropped.operations == (Operation("drop", "name"),)
    assert dropped.document is not None
    assert "name" not in dropped.document["properties"]


def test_a_rename_is_renamed_or_read_as_drop_and_add() -> None:
    renamed = run(SchemaChangePolicy(), {"name": "full_name"}, id="int4", full_name="text", qty="int4")
    assert [str(c) for c in renamed.changes] == ["column name renamed to full_name"]
    assert renamed.operations == (Operation("rename", "name", new_name="full_name"),)
    assert renamed.document is not None
    assert list(renamed.document["properties"]) == ["id", "full_name", "qty"]  # in place, attnum kept
    assert renamed.document["properties"]["full_name"]["x-attnum"] == 2
    apart = run(
        SchemaChangePolicy(column_renamed="drop_and_add"),
        {"name": "full_name"},
        id="int4",
        full_name="text",
        qty="int4",
    )
    assert sorted(c.kind for c in apart.changes) == ["added", "dropped"]


def test_widening_widens_in_place_or_rewrites() -> None:
    widened = run(SchemaChangePolicy(), id="int4", name="text", qty="int8")
    assert widened.operations == (Operation("widen", "qty", "bigint"),)
    rewritten = run(SchemaChangePolicy(type_widened="rewrite"), id="int4", name="text", qty="int8")
    assert rewritten.operations == (Operation("rewrite", "qty", "bigint"),)
    same_in_delta = run(SchemaChangePolicy(), id="int4", name="varchar(80)", qty="int4")
    assert same_in_delta.operations == ()  # a longer varchar is a string in Delta as before
    assert same_in_delta.document is not None
    assert same_in_delta.document["properties"]["name"]["x-pg-type"] == "varchar(80)"


def test_an_incompatible_change_stops_with_the_ways_on_or_is_dead_lettered() -> None:
    stopped = run(SchemaChangePolicy(), id="int4", name="int4", qty="int4")
    assert stopped.stop is not None
    assert "column name changed text -> int4" in stopped.stop
    assert 'on_schema_change.incompatible = "stop"' in stopped.stop
    assert "cdcpipe schema tables import public.t" in stopped.stop
    assert "cdcpipe jobs replay j --swap" in stopped.stop
    set_aside = run(SchemaChangePolicy(incompatible="dead_letter"), id="int4", name="int4", qty="int4")
    assert set_aside.stop is None
    assert set_aside.dead_letter is not None
    assert "column name changed text -> int4" in set_aside.dead_letter


def test_each_stop_setting_stops_and_names_itself() -> None:
    assert 'column_added = "stop"' in (run(SchemaChangePolicy(column_added="stop"), **SAME, x="text").stop or "")
    assert 'column_dropped = "stop"' in (
        run(SchemaChangePolicy(column_dropped="stop"), id="int4", qty="int4").stop or ""
    )
    assert 'type_widened = "stop"' in (
        run(SchemaChangePolicy(type_widened="stop"), id="int4", name="text", qty="int8").stop or ""
    )


def test_a_change_of_the_key_always_stops() -> None:
    decision = run(SchemaChangePolicy(incompatible="dead_letter"), id="text", name="text", qty="int4")
    assert decision.stop is not None
    assert "the key ['id'] changed" in decision.stop


def test_a_narrower_source_type_goes_on_with_the_wider_column() -> None:
    """int4 -> int2 (or a contract that says int8 where the table has int4): every value fits the Delta column."""
    assert compare(contract(), shape(id="int4", name="text", qty="int2"), {}) == []
    assert run(SchemaChangePolicy(), id="int4", name="text", qty="int2").stop is None


def test_a_column_added_back_starts_empty_and_its_old_values_move_aside() -> None:
    kept = run(SchemaChangePolicy(), id="int4", qty="int4")  # name dropped (kept)
    assert kept.document is not None
    dropped = from_document("public.t", kept.document, Path("/contracts/public.t.json"))
    back = decide("j", dropped, shape(id="int4", qty="int4", name="int8"), SchemaChangePolicy(), {}, {"name": 5})
    assert back.operations == (
        Operation("rename", "name", new_name="name__dropped_v4"),
        Operation("add", "name", "bigint"),
    )
    assert back.document is not None
    properties = back.document["properties"]
    assert properties["name__dropped_v4"]["x-dropped"] is True
    assert properties["name"]["x-pg-type"] == "int8"
    assert "x-dropped" not in properties["name"]
