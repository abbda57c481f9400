"""What a change of the source's columns means for a job's contract and Delta table, under its policy.

Pure decisions, no Spark and no I/O: `compare` lists what differs between the contract and the shape the
changes carry; `decide` turns that, with the job's `on_schema_change` policy, into the contract's next
version and the Delta table operations, or into a stop (with the message) or a dead-letter reason.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from schemas.pg_types import PgType, json_schema
from schemas.table_contracts import TableContract
from streaming_jobs.jobs.spec import SchemaChangePolicy
from streaming_jobs.schema_change.shapes import Shape
from streaming_jobs.schema_change.types import spark_type, widens

ChangeKind = Literal["added", "dropped", "renamed", "widened", "incompatible"]


@dataclass(frozen=True)
class Change:
    """One way the source's columns differ from the contract."""

    kind: ChangeKind
    column: str
    old: str | None = None  # the Postgres type before (widened, incompatible)
    new: str | None = None  # the Postgres type after (added, widened, incompatible)
    new_name: str | None = None  # renamed

    def __str__(self) -> str:
        return {
            "added": f"column {self.column} ({self.new}) added",
            "dropped": f"column {self.column} dropped",
            "renamed": f"column {self.column} renamed to {self.new_name}",
            "widened": f"column {self.column} widened {self.old} -> {self.new}",
            "incompatible": f"column {self.column} changed {self.old} -> {self.new}, which Delta cannot follow in "
            "place",
        }[self.kind]


@dataclass(frozen=True)
class Operation:
    """One change to the Delta table: add, drop or rename a column, or widen its type."""

    kind: Literal["add", "drop", "rename", "widen", "rewrite"]
    column: str
    type: str | None = None  # a Spark SQL type (add, widen)
    new_name: str | None = None


@dataclass(frozen=True)
class Decision:
    """What follows from a shape: the next contract and table operations, or a stop, or a dead-letter reason."""

    changes: tuple[Change, ...] = ()
    document: Mapping[str, Any] | None = None  # the contract's next version; None: unchanged
    operations: tuple[Operation, ...] = ()
    stop: str | None = None  # the job stops with this message
    dead_letter: str | None = None  # the shape's changes are dead letters with this reason
    notes: tuple[str, ...] = field(default_factory=tuple)  # said in the job's log


def live_columns(contract: TableContract) -> list[str]:
    """The contract's columns the source still has (a dropped column kept in Delta is marked x-dropped)."""
    return [c for c in contract.columns if not contract.schema["properties"][c].get("x-dropped")]


def compare(contract: TableContract, shape: Shape, renames: Mapping[str, str]) -> list[Change]:
    """How `shape` differs from the contract; `renames` (old -> new) pairs a dropped column with an added one."""
    live = live_columns(contract)
    changes: list[Change] = []
    types = contract.types
    for name in live:
        now = renames.get(name, name)
        if now not in shape.names:
            changes.append(Change("dropped", name))
            continue
        if now != name:
            changes.append(Change("renamed", name, new_name=now))
        old, new = types[name], contract.sent_type(name, shape.field(now).pg)
        if old != new:
            compatible = widens(spark_type(old), spark_type(new)) and old.is_array == new.is_array
            if old.is_array and spark_type(old) != spark_type(new):
                compatible = False  # an array's element type is not widened in place
            if not compatible and old.is_array == new.is_array and widens(spark_type(new), spark_type(old)):
                continue  # narrower at the source (int8 -> int4): the contract's wider column holds every value
            changes.append(Change("widened" if compatible else "incompatible", now, str(old), str(new)))
    renamed_to = set(renames.values())
    for f in shape.fields:
        if f.name not in live and f.name not in renamed_to:
            changes.append(Change("added", f.name, new=str(f.pg)))
    return changes


def _action(change: Change, policy: SchemaChangePolicy) -> str:
    return {
        "added": policy.column_added,
        "dropped": policy.column_dropped,
        "renamed": policy.column_renamed,
        "widened": policy.type_widened,
        "incompatible": policy.incompatible,
    }[change.kind]


def _setting(change: Change) -> str:
    return {
        "added": "column_added",
        "dropped": "column_dropped",
        "renamed": "column_renamed",
        "widened": "type_widened",
        "incompatible": "incompatible",
    }[change.kind]


def decide(
    job: str,
    contract: TableContract,
    shape: Shape,
    policy: SchemaChangePolicy,
    renames: Mapping[str, str],
    attnums: Mapping[str, int],
) -> Decision:
    """The contract's next version and the Delta operations for `shape`, or a stop, or a dead-letter reason.

    `attnums` are the source catalog's column numbers (empty without the catalog): kept in the contract so a
    later rename can be told from a drop and an add.
    """
    if policy.column_renamed == "drop_and_add":
        renames = {}
    changes = compare(contract, shape, renames)
    if not changes:
        return Decision()
    where = f"job {job}: table {contract.table} ({contract.path})"
    key_hit = [c for c in changes if c.column in contract.primary_key and c.kind in ("dropped", "incompatible")]
    stops = [c for c in changes if _action(c, policy) == "stop"]
    if key_hit or stops:
        said = "; ".join(str(c) for c in changes)
        why = (
            f"the key {list(contract.primary_key)} changed ({'; '.join(map(str, key_hit))}): a mirror and a history "
            "key on it"
            if key_hit
            else ", ".join(f'on_schema_change.{_setting(c)} = "{_action(c, policy)}"' for c in stops)
        )
        return Decision(
            tuple(changes),
            stop=f"{where}: the source's columns changed: {said}. Stopped by {why}; nothing of this batch was "
            "written. To go on: change that setting in the job's file and start the job again; or bring the "
            f"contract up to date (`cdcpipe schema tables import {contract.table}`) and rebuild the table with "
            f"`cdcpipe jobs replay {job} --swap`.",
        )
    incompatible = [c for c in changes if c.kind == "incompatible"]
    if incompatible:
        return Decision(
            tuple(changes),
            dead_letter=f"schema change: {'; '.join(map(str, incompatible))} (on_schema_change.incompatible = "
            f'"dead_letter"): update the contract (`cdcpipe schema tables import {contract.table}`), rebuild with '
            f"`cdcpipe jobs replay {job} --swap`",
        )
    document = copy.deepcopy(dict(contract.schema))
    properties: dict[str, Any] = document["properties"]
    required: list[str] = list(document.get("required", []))
    operations: list[Operation] = []
    for change in changes:
        if change.kind == "added":
            f = shape.field(change.column)
            rules = json_schema(f.pg, True, list(f.enum) if f.enum else None)
            if change.column in attnums:
                rules["x-attnum"] = attnums[change.column]
            if change.column in properties:
                # Dropped earlier and kept, now added again: a new column at the source, NULL in every row it
                # has, maybe of another type. The kept values move aside (a history keeps what the rows held),
                # and the column starts empty, as the source's did.
                kept = f"{change.column}__dropped_v{contract.version}"
                properties = {kept if k == change.column else k: v for k, v in properties.items()}
                operations.append(Operation("rename", change.column, new_name=kept))
            properties[change.column] = rules
            operations.append(Operation("add", change.column, spark_type(f.pg).simpleString()))
        elif change.kind == "dropped":
            if policy.column_dropped == "drop":
                del properties[change.column]
                operations.append(Operation("drop", change.column))
            else:
                properties[change.column] = {**_nullable(properties[change.column]), "x-dropped": True}
            required = [r for r in required if r != change.column]
        elif change.kind == "renamed":
            new_name = change.new_name or change.column
            properties = {new_name if k == change.column else k: v for k, v in properties.items()}
            required = [new_name if r == change.column else r for r in required]
            document["x-primary-key"] = [new_name if k == change.column else k for k in document["x-primary-key"]]
            operations.append(Operation("rename", change.column, new_name=new_name))
        elif change.kind == "widened":
            f = shape.field(change.column)
            old = properties[change.column]
            nullable = "null" in (old.get("type") if isinstance(old.get("type"), list) else [])
            rules = json_schema(f.pg, nullable, list(f.enum) if f.enum else None)
            properties[change.column] = {**rules, **({"x-attnum": old["x-attnum"]} if "x-attnum" in old else {})}
            if spark_type(PgType.parse(change.old or "text")) != spark_type(f.pg):
                how: Literal["widen", "rewrite"] = "rewrite" if policy.type_widened == "rewrite" else "widen"
                operations.append(Operation(how, change.column, spark_type(f.pg).simpleString()))
    document["properties"], document["required"] = properties, required
    return Decision(tuple(changes), contract.next_version(document), tuple(operations))


def _nullable(rules: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(rules)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    return out
