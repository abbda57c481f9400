"""Whether one version of an event contract can read what another accepts: a schema registry's modes, on JSON Schema.

A reader schema R can read what a writer schema W accepts when every document valid under W is valid under
R. The modes are a schema registry's (each new version against the one before it):

| mode (`x-compatibility` in the new version) | holds when | so |
|---|---|---|
| `backward` (the default) | v(N) reads what v(N-1) accepts | upgrade readers (jobs) first |
| `forward` | v(N-1) reads what v(N) accepts | upgrade writers (emit) first |
| `full` | both | either order |
| `none` | nothing is checked | a breaking change, declared as such |

Checked: types (an integer is a number), properties and `additionalProperties: false` (a closed schema refuses
what the other may send; a property added to an open writer's schema may already be sent with any value),
`required`, `enum`, `const`, `format`, `pattern`, string lengths, numeric bounds, array items; recursively.
Keywords not in that list (`oneOf`, `$ref`, ...) are compared as equal or not at all: any difference there
is reported as one the check cannot prove compatible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

Mode = Literal["backward", "forward", "full", "none"]
MODES: tuple[Mode, ...] = ("backward", "forward", "full", "none")
_KNOWN = {
    "type",
    "properties",
    "additionalProperties",
    "required",
    "enum",
    "const",
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "items",
    "minItems",
    "maxItems",
    # Annotations: they change no document's validity.
    "$schema",
    "$id",
    "title",
    "description",
    "examples",
    "default",
    "deprecated",
}


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    return set(kind) if isinstance(kind, list) else {kind}


def cannot_read(reader: Mapping[str, Any], writer: Mapping[str, Any], path: str = "$") -> list[str]:
    """Why `reader` may refuse a document `writer` accepts, one line per reason (none: it reads them all)."""
    found: list[str] = []
    r_types, w_types = _types(reader), _types(writer)
    if r_types is not None:
        accepted = r_types | ({"integer"} if "number" in r_types else set())
        if w_types is None:
            found.append(f"{path}: the reader requires type {sorted(r_types)}, the writer allows any type")
        elif w_types - accepted:
            found.append(
                f"{path}: the writer allows type {sorted(w_types - accepted)}, the reader only {sorted(r_types)}"
            )
    for word in ("enum", "const"):
        if word in reader:
            r_values = reader[word] if word == "enum" else [reader[word]]
            w_values = writer.get("enum", [writer["const"]] if "const" in writer else None)
            if w_values is None or any(v not in r_values for v in w_values):
                found.append(f"{path}: the reader allows only {r_values}, the writer {w_values or 'any value'}")
    for word in ("format", "pattern"):
        if word in reader and reader.get(word) != writer.get(word):
            found.append(f"{path}: {word} {reader[word]!r} in the reader, {writer.get(word)!r} in the writer")
    found += _bounds(reader, writer, path)
    if "properties" in reader or "properties" in writer or "additionalProperties" in reader:
        found += _objects(reader, writer, path)
    if "items" in reader:
        found += cannot_read(reader["items"], writer.get("items", {}), f"{path}[]")
    for word in sorted((set(reader) | set(writer)) - _KNOWN):
        if not word.startswith("x-") and reader.get(word) != writer.get(word):
            found.append(f"{path}: {word} differs, which this check cannot prove compatible")
    return found


def _bounds(reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> list[str]:
    found = []
    lower_bounds = ("minLength", "minimum", "exclusiveMinimum", "minItems")
    upper_bounds = ("maxLength", "maximum", "exclusiveMaximum", "maxItems")
    for word in (*lower_bounds, *upper_bounds):
        if word not in reader:
            continue
        r, w = reader[word], writer.get(word)
        tighter = w is None or (r > w if word in lower_bounds else r < w)
        if tighter:
            found.append(f"{path}: {word} {r} in the reader, {'none' if w is None else w} in the writer")
    return found


def _objects(reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> list[str]:
    found = []
    r_props: Mapping[str, Any] = reader.get("properties", {})
    w_props: Mapping[str, Any] = writer.get("properties", {})
    r_closed = reader.get("additionalProperties") is False
    w_closed = writer.get("additionalProperties") is False
    for name, rules in w_props.items():
        if name in r_props:
            found += cannot_read(r_props[name], rules, f"{path}.{name}")
        elif r_closed:
            found.append(f"{path}.{name}: the writer may send it, the reader allows no such field")
    for name, rules in r_props.items():
        if name not in w_props and not w_closed and cannot_read(rules, {}, f"{path}.{name}"):
            found.append(
                f"{path}.{name}: the writer's schema is open (no additionalProperties: false), so it may already "
                "send this field with any value; the reader constrains it"
            )
    if r_closed and not w_closed:
        found.append(f"{path}: the reader allows no other fields, the writer's schema is open")
    w_required = set(writer.get("required", []))
    for name in reader.get("required", []):
        if name not in w_required:
            found.append(f"{path}.{name}: required by the reader, not by the writer")
    return found


def problems(mode: Mode, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why `new` breaks `mode` against `old` (none: compatible), each line saying which direction fails."""
    found = []
    if mode in ("backward", "full"):
        found += [f"backward: {p}" for p in cannot_read(new, old)]
    if mode in ("forward", "full"):
        found += [f"forward: {p}" for p in cannot_read(old, new)]
    return found


def mode_of(schema: Mapping[str, Any]) -> Mode:
    """The compatibility a contract version declares with the one before it (`x-compatibility`, default backward)."""
    mode = schema.get("x-compatibility", "backward")
    if mode not in MODES:
        raise ValueError(f'"x-compatibility": {mode!r} is not one of {", ".join(MODES)}')
    return mode  # type: ignore[no-any-return]
