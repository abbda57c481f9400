r"""The table connector's config as `cdcpipe tables` changes it: its include list, its signals, a new one.

Debezium matches each `table.include.list` entry, a regular expression, against the whole `schema.table`,
ignoring case. A table is added as its own escaped entry and removed only as that entry: a table matched
by a broader pattern the user wrote (`public\..*`) is theirs to edit. Entries are split at commas not escaped
(`\\,`, Debezium's RegExSplitter) and trimmed, so a name's comma is escaped and its space written `\\x20`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from psycopg import sql

from capture.config import CaptureSettings
from capture.errors import CaptureError
from connectors import definitions
from connectors.definitions import Definition
from schemas.config import OutboxNames, SchemaSettings

INCLUDE = "table.include.list"
EXCLUDE_COLUMNS = "column.exclude.list"


def patterns(config: dict[str, str], key: str = INCLUDE) -> list[str]:
    """A list's entries (the include list's unless `key` says), in order, as Debezium splits them."""
    parts, start, text = [], 0, config.get(key, "")
    escaped = False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip().replace("\\,", ",") for p in parts if p.strip()]


def listed(entries: list[str]) -> str:
    """`entries` as one list value, each entry's commas escaped."""
    return ",".join(e.replace(",", "\\,") for e in entries)


def entry(table: str) -> str:
    """The include-list entry that names exactly `schema.table` (any name: spaces, commas, dots, non-ASCII)."""
    return re.escape(table).replace("\\ ", "\\x20")


def literal(pattern: str) -> str | None:
    """The one name an entry matches when it is a name escaped (`entry`), else None."""
    name = re.sub(r"\\x20|\\(.)", lambda m: m.group(1) or " ", pattern, flags=re.DOTALL)
    return name if entry(name) == pattern else None


def data_collection(table: str) -> tuple[str, str]:
    """How a snapshot signal names `schema.table`, and the pattern its additional condition matches that by.

    Debezium compiles each name as a regular expression and takes the captured tables it matches (by their
    `schema.table`, unquoted), else the name itself, which it parses as an identifier. An escaped name
    matches its table. A table name with a dot of its own must be quoted (`"s"."a.b"`), or the parse would
    see three parts; the quoted name then matches nothing and is parsed, quotes and all.
    """
    schema, _, name = table.partition(".")
    if "." not in name:
        return entry(table), entry(table)
    quoted = f'"{schema}"."{name}"'
    try:
        re.compile(quoted)
    except re.error as exc:
        raise CaptureError(
            f"{table}: Debezium cannot take a snapshot signal for this name (a dot and {exc.msg} in a regular "
            "expression); rename the table, or snapshot it with a signal of your own"
        ) from exc
    return quoted, entry(quoted)


def captured_by(config: dict[str, str], table: str) -> str | None:
    """The include-list entry that matches `table`, if one does."""
    return next((p for p in patterns(config) if re.fullmatch(p, table, re.IGNORECASE)), None)


def captured_tables(config: dict[str, str], names: OutboxNames) -> list[str]:
    """The tables its include list names exactly (its own heartbeat and signal tables left out)."""
    ours = f"{names.outbox_schema}."
    found = [literal(p) for p in patterns(config)]
    return [t for t in found if t is not None and not t.startswith(ours)]


def notifications_topic(config: dict[str, str]) -> str:
    """Where the connector reports its snapshots' progress: `<topic.prefix>.debezium_notifications`."""
    return f"{config.get('topic.prefix', 'cdcpipe')}.debezium_notifications"


def with_tables(
    config: dict[str, str], tables: list[str], signal: str, generated: dict[str, list[str]] | None = None
) -> dict[str, str]:
    """The config capturing `tables` too (appended to its include list), with its signals and notifications set.

    The signal table takes `tables snapshot`'s requests; the notifications topic (under the connector's own
    topic prefix, whose ACLs it has) carries each snapshot's progress, which `tables list` shows. Each table's
    stored generated columns (`generated`) go into the column exclude list: a snapshot reads them, the stream
    never has them (pgoutput leaves them out), so captured they would be a column that comes and goes.
    """
    included = patterns(config)
    included += [entry(t) for t in tables if captured_by(config, t) is None]
    if captured_by({INCLUDE: listed(included)}, signal) is None:
        included.append(entry(signal))
    excluded = patterns(config, EXCLUDE_COLUMNS)
    excluded += [
        entry(f"{table}.{column}")
        for table, columns in (generated or {}).items()
        for column in columns
        if entry(f"{table}.{column}") not in excluded
    ]
    return {
        **config,
        **({EXCLUDE_COLUMNS: listed(excluded)} if excluded else {}),
        INCLUDE: listed(included),
        "signal.data.collection": signal,
        "notification.enabled.channels": "sink",
        "notification.sink.topic.name": notifications_topic(config),
    }


def without_tables(config: dict[str, str], tables: list[str]) -> dict[str, str]:
    """The config no longer capturing `tables`; CaptureError if a broader pattern of the user's matches one."""
    drop = {entry(t).lower() for t in tables}
    kept = [p for p in patterns(config) if p.lower() not in drop]
    for table in tables:
        broader = captured_by({INCLUDE: listed(kept)}, table)
        if broader is not None:
            raise CaptureError(
                f"{table} is also captured by the include-list pattern {broader!r} of the connector's "
                f"{INCLUDE}: edit that pattern in its definition and `cdcpipe connectors apply` it"
            )
    columns = [
        p
        for p in patterns(config, EXCLUDE_COLUMNS)
        if not any(p.lower().startswith(entry(t).lower() + "\\.") for t in tables)
    ]
    config = {k: v for k, v in config.items() if k != EXCLUDE_COLUMNS}
    return {**config, **({EXCLUDE_COLUMNS: listed(columns)} if columns else {}), INCLUDE: listed(kept)}


def new_config(
    capture: CaptureSettings,
    schema: SchemaSettings,
    names: OutboxNames,
    tables: list[str],
    generated: dict[str, list[str]] | None = None,
) -> dict[str, str]:
    """A table connector in the shape every table job reads (JSON with schemas, decimals as text, types kept).

    Its database settings are references the Connect worker resolves from its own environment (the stack's
    worker has CDCPIPE_PG_* and CDCPIPE_DEBEZIUM_PASSWORD); a worker elsewhere needs them set, or a
    definition of yours in CDCPIPE_CONNECTORS_DIR.
    """
    heartbeat = f"{names.outbox_schema}.{schema.heartbeat_table}"
    signal = f"{names.outbox_schema}.{schema.signal_table}"
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": "${env:CDCPIPE_PG_HOST}",
        "database.port": "${env:CDCPIPE_PG_PORT}",
        "database.dbname": "${env:CDCPIPE_PG_DATABASE}",
        "database.user": schema.debezium_role,
        "database.password": "${env:CDCPIPE_DEBEZIUM_PASSWORD}",
        "topic.prefix": capture.capture_topic_prefix,
        "slot.name": capture.slot,
        "publication.name": schema.tables_publication,
        "publication.autocreate.mode": "disabled",
        INCLUDE: entry(heartbeat),
        "snapshot.mode": "initial",
        "heartbeat.interval.ms": "10000",
        # Debezium runs it: the table's name quoted by psycopg, as every identifier of ours is.
        "heartbeat.action.query": sql.SQL(
            "INSERT INTO {} (id, beat) VALUES (2, now()) ON CONFLICT (id) DO UPDATE SET beat = EXCLUDED.beat"
        )
        .format(sql.Identifier(names.outbox_schema, schema.heartbeat_table))
        .as_string(None),
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        "decimal.handling.mode": "string",
        "time.precision.mode": "adaptive_time_microseconds",
        "topic.creation.default.partitions": "-1",
        "topic.creation.default.replication.factor": "-1",
        "column.propagate.source.type": ".*",
        # ISO 8601: a month stays a month (numeric mode counts one as 30.4375 days, which no value round-trips).
        "interval.handling.mode": "string",
        "binary.handling.mode": "bytes",
        # Geometric types and any other Debezium has no converter for: sent as their text (in bytes), not left out.
        "include.unknown.datatypes": "true",
    }
    return with_tables(config, tables, signal, generated)


def definition_file(folder: Path, name: str) -> Path | None:
    """The file of `folder` that defines connector `name`, if one does."""
    if not folder.is_dir():
        return None
    for path in sorted(p for p in folder.iterdir() if p.suffix in definitions.SUFFIXES):
        if any(d.name == name for d in definitions.load(path)):
            return path
    return None


def write_definition(folder: Path, name: str, config: dict[str, str]) -> Path:
    """Keep the definition of `name` in `folder` in step with `config` (its file rewritten, or a new JSON file)."""
    path = definition_file(folder, name) or folder / f"{name}.json"
    document = {"name": name, "config": config}
    folder.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(document, indent=2) + "\n")
    else:
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def as_definition(name: str, config: dict[str, str], source: Path) -> Definition:
    """A definition for `connectors.commands.apply_definitions`, checked as a file's would be."""
    return definitions.Definition(name=name, config=config, source=source)
