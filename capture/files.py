"""The files `cdcpipe tables add` writes into the user's folders: a topic file and job files.

They are the user's from then on, versioned with the rest: `topics apply` and `jobs submit` read them as
they read any other. A topic or job already declared anywhere in those folders is left as it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from capture.config import CaptureSettings
from schemas.topics import TopicSpec
from streaming_jobs.jobs.spec import table_job_name

JOB_KINDS = {"mirror": "table_mirror", "history": "table_history"}
# Kafka's topic names: Debezium puts `_` for any other character (each UTF-16 unit) and cuts at 249.
TOPIC_CHARACTERS = re.compile(r"[A-Za-z0-9._-]")
MAX_TOPIC = 249


@dataclass(frozen=True)
class File:
    """A file to write, and what it declares."""

    path: Path
    text: str


def topic_of(prefix: str, table: str) -> str:
    """Debezium's topic for a table: `<topic.prefix>.<schema>.<table>`, sanitised as Debezium does.

    (`AbstractTopicNamingStrategy.sanitizedTopicName`: `Bücher` is `B_cher`, an emoji two underscores.)
    """
    name = f"{prefix}.{table}"
    units = name.encode("utf-16-le")
    chars = [units[i : i + 2].decode("utf-16-le", errors="replace") for i in range(0, len(units), 2)]
    sanitised = "".join(c if TOPIC_CHARACTERS.fullmatch(c) else "_" for c in chars)[:MAX_TOPIC]
    return {".": "_", "..": "__"}.get(sanitised, sanitised)


def toml_string(value: str) -> str:
    """`value` as a TOML basic string (JSON's escapes are TOML's): any name, quotes and all."""
    return json.dumps(value, ensure_ascii=False)


def one_line(value: str) -> str:
    """`value` fit for a comment: a name with a line break in it is shown escaped."""
    return value if value.isprintable() else json.dumps(value, ensure_ascii=False)


def topic_spec(capture: CaptureSettings, topic: str) -> TopicSpec:
    """A captured table's topic as `tables add` declares it."""
    return TopicSpec(
        name=topic,
        partitions=capture.capture_partitions,
        replication_factor=-1,
        config={"retention.ms": str(capture.capture_retention_ms), "cleanup.policy": "delete"},
        producers=(capture.capture_connect_principal,),
        consumers=(capture.capture_jobs_principal,),
    )


def topic_file(folder: Path, connector: str, table: str, spec: TopicSpec) -> File:
    """One captured table's topic, with the ACLs of the connector (writes) and the jobs (read)."""
    text = f"""# Row changes of {one_line(table)}, written by the Debezium connector {connector} (`cdcpipe tables add`).
# Keys are the rows' primary keys: one row, one partition, in commit order.
{_topic_entry(spec)}"""
    return File(folder / f"{spec.name}.toml", text)


def connector_topics(
    capture: CaptureSettings, prefix: str, own_tables: list[str], notifications: str
) -> list[TopicSpec]:
    """The topics the connector writes besides its tables', each by name: Connect writes them and creates none.

    Its heartbeat topic, its snapshots' notifications, and the change events of its own heartbeat and signal
    tables (`own_tables`). Nobody needs to read them but the CLI, whose principal administers the cluster.
    """
    names = [f"__debezium-heartbeat.{prefix}", notifications, *(topic_of(prefix, table) for table in own_tables)]
    config = {"retention.ms": str(capture.capture_retention_ms), "cleanup.policy": "delete"}
    return [TopicSpec(n, 1, -1, config=config, producers=(capture.capture_connect_principal,)) for n in names]


def connector_file(folder: Path, connector: str, specs: list[TopicSpec]) -> File:
    """The connector's own topics, in a topic file named after it."""
    text = f"""# Topics the Debezium connector {connector} writes besides its tables' (`cdcpipe tables add`): its
# heartbeat topic, its snapshots' notifications, and the change events of its heartbeat and signal tables.
{"".join(_topic_entry(s) for s in specs)}"""
    return File(folder / f"{connector}.toml", text)


def _topic_entry(spec: TopicSpec) -> str:
    config = "\n".join(f"{toml_string(k)} = {toml_string(v)}" for k, v in spec.config.items())
    return f"""
[[topic]]
name = {toml_string(spec.name)}
partitions = {spec.partitions}
replication_factor = {spec.replication_factor}
producers = {_list(spec.producers)}
consumers = {_list(spec.consumers)}

[topic.config]
{config}
"""


def job_name(table: str, what: str) -> str:
    """`orders_mirror` for public.orders, `sales_orders_mirror` for sales.orders: a group names its tables' jobs so."""
    return table_job_name(table, what)


def job_file(folder: Path, table: str, what: str, topic: str) -> File:
    """A mirror or history job of `table`, reading its topic."""
    name = job_name(table, what)
    described = {
        "mirror": f"A copy of {one_line(table)}, kept current from its change events (SCD type 1).",
        "history": f"Every version of every row of {one_line(table)}, with valid_from / valid_to / is_current (SCD type 2).",
    }[what]
    text = f"""# {described}
# Written by `cdcpipe tables add`; yours to change.
name = "{name}"
kind = "{JOB_KINDS[what]}"
topics = [{toml_string(topic)}]
table = "{name}"
trigger = "1s"
source_table = {toml_string(table)}
"""
    return File(folder / f"{name}.toml", text)


def group_file(folder: Path, name: str, tables: list[str], topics: list[str], members: list[str]) -> File:
    """A table group: the mirrors (histories) of `tables` in one driver, each table's job as `job_file` would be."""
    listed = "\n".join(f"    {toml_string(t)}," for t in tables)
    read = "\n".join(f"    {toml_string(t)}," for t in topics)
    text = f"""# The {" and ".join(members)} jobs of {len(tables)} tables in one Spark driver (a table group).
# Written by `cdcpipe tables add` (--group {name}); yours to change. Each table's job is named, and keeps its
# Delta table and checkpoint, as its own job file would (`<schema>_<table>_mirror`).
name = "{name}"
kind = "table_group"
members = {_list(tuple(members))}
trigger = "1s"
concurrent_tables = 2   # tables reading at once (each while its topic holds changes for it); the others wait
tables = [
{listed}
]
topics = [
{read}
]
"""
    return File(folder / f"{name}.toml", text)


def regrouped(file: Path, text: str, tables: list[str], topics: list[str]) -> File | None:
    """A group's file with other tables, everything else in it as it is (a policy or a trigger set by hand kept).

    None when its `tables` and `topics` are not in the form `group_file` writes them (edited by hand).
    """
    for key, values in (("tables", tables), ("topics", topics)):
        block = f"{key} = [\n" + "".join(f"    {toml_string(v)},\n" for v in values) + "]"
        parts = re.split(rf"(?m)^{key} = \[\n(?:    .*,\n)*\]$", text)
        if len(parts) != 2:
            return None
        text = block.join(parts)
    text = re.sub(r"(?m)^(# The .* jobs of )\d+( tables? )", rf"\g<1>{len(tables)}\g<2>", text, count=1)
    return File(file, text)


def _list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(toml_string(v) for v in values) + "]"
