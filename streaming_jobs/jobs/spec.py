"""Job definitions: one TOML file per streaming job, in the folders of CDCPIPE_JOBS_DIRS (the demo's: examples/jobs).

    name = "accounts_latest"
    kind = "latest_state"                    # event_log | latest_state | projection | table_mirror | table_history
    topics = ["outbox.event.account"]
    table = "accounts_latest"                # a folder under CDCPIPE_LAKE, or an absolute path
    trigger = "1s"                           # a processing-time interval, or "available-now"
    delete_event_types = ["AccountClosed"]   # latest_state: these (and tombstones) delete the row

    [on_schema_change]                       # table kinds; the defaults:
    column_added = "add"                     # add | stop
    column_dropped = "keep"                  # keep | drop | stop
    column_renamed = "rename"                # rename | drop_and_add | stop
    type_widened = "widen"                   # widen | rewrite | stop
    incompatible = "stop"                    # stop | dead_letter

Where a job keeps its things, all derived from its name and table: the Delta table, `<table>_dead_letters`
beside it, and its checkpoint in `<lake>/_checkpoints/<name>`.

A table group runs the mirrors (and histories) of many captured tables in one driver:

    name = "shop_tables"
    kind = "table_group"
    members = ["mirror"]                     # mirror and/or history, for every table
    concurrent_tables = 2                    # tables reading at once (the others wait their turn)
    tables = ["shop.orders", "shop.Invoices"]
    topics = ["cdcpipe.shop.orders", "cdcpipe.shop.Invoices"]   # each table's topic, in the same order

Each table's mirror is the job `tables add` would write for it alone (`shop_orders_mirror`: its name, Delta
table and checkpoint), so a table moves into or out of a group where it stands, nothing lost or repeated.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from streaming_jobs.errors import StreamingError
from streaming_jobs.lake.paths import LakePath, check_lake, is_url

Kind = Literal["event_log", "latest_state", "projection", "table_mirror", "table_history", "table_group"]
TABLE_KINDS = ("table_mirror", "table_history")
GROUP = "table_group"
MEMBER_KINDS = {"mirror": "table_mirror", "history": "table_history"}
TRIGGER = re.compile(r"^(available-now|\d+(ms|s|min))$")
JOB_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# Folders of the lake that belong to cdcpipe itself (`_jobs`, `_checkpoints`, replays' staging).
RESERVED_PREFIX = "_"
# Tables a job keeps beside its own: `<table>_dead_letters`, and `<table>_event_ids` (the ids of the events it
# applied, for the kinds whose table does not keep them; see `sinks.drop_resent`).
DEAD_LETTER_SUFFIX = "_dead_letters"
EVENT_IDS_SUFFIX = "_event_ids"


class SchemaChangePolicy(BaseModel):
    """What a table_mirror or table_history job does when the changes' row shape differs from its contract.

    Every change is said in the job's log and written into the contract (its `x-version` goes up); "stop" ends
    the job with a message naming the change and the ways on, before anything of the batch is written.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    column_added: Literal["add", "stop"] = Field("add", description="add: a new Delta column, filled from then on")
    column_dropped: Literal["keep", "drop", "stop"] = Field(
        "keep", description="keep: the Delta column stays, null from then on; drop: removed from the Delta table"
    )
    column_renamed: Literal["rename", "drop_and_add", "stop"] = Field(
        "rename",
        description="rename: the Delta column is renamed (column mapping), values kept; drop_and_add: a new column "
        "(the old one as column_dropped says). Told from a drop and an add by the source catalog's attnum",
    )
    type_widened: Literal["widen", "rewrite", "stop"] = Field(
        "widen",
        description="widen: Delta type widening in place (int -> bigint, decimal precision up; readers need the "
        "typeWidening feature); rewrite: the table rewritten with the new type, readable by any Delta reader",
    )
    incompatible: Literal["stop", "dead_letter"] = Field(
        "stop", description="a type change Delta cannot follow in place, or a key column changed"
    )


class JobSpec(BaseModel):
    """One streaming job as declared in its file."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # The folder of the file it was read from: a projection's module is looked for there first.
    _file: Path | None = PrivateAttr(None)
    # The group a table job runs in (None: a job of its own).
    _group: str | None = PrivateAttr(None)

    name: str = Field(pattern=JOB_NAME.pattern, description="lower case, digits, '_' and '-'")
    kind: Kind
    topics: tuple[str, ...] = Field(min_length=1)
    table: str = Field(min_length=1)
    trigger: str = "1s"
    delete_event_types: tuple[str, ...] = ()
    projection: str | None = Field(
        None, description="module:function, for kind = projection; the module may sit beside the job file"
    )
    source_table: str | None = Field(
        None, description="schema.table whose row contract (CDCPIPE_TABLE_CONTRACT_DIRS) the table kinds parse with"
    )
    on_schema_change: SchemaChangePolicy = Field(
        default_factory=SchemaChangePolicy, description="table kinds: what a change of the source's columns does"
    )
    max_offsets_per_trigger: int = Field(
        500_000,
        ge=0,
        description="cap on records per micro-batch, so a new job on a long topic does not read it whole in its "
        "first batch (0: no cap)",
    )
    optimize_every: int = Field(
        100,
        ge=0,
        description="compact the tables every N micro-batches, and first drop the event ids past the look-back "
        "(0: never)",
    )
    vacuum_every_hours: float = Field(
        24.0,
        ge=0,
        description="delete the data files no table version of the last vacuum_retain_hours needs, this often (at "
        "a compaction; 0: never): a deleted row's bytes stay until then",
    )
    vacuum_retain_hours: float = Field(
        168.0,
        ge=0,
        description="how old a table version may still be read (time travel, a slow reader) after a vacuum: "
        "Delta's 7 days by default; a reader longer than this may find a file gone",
    )
    max_poison_in_a_row: int = Field(
        20,
        ge=0,
        description="stop the job when this many records in a row fail the write on their values: a projection or "
        "kind that fails on every record is an error of the job, to fix, not poison to dead-letter (0: never stop)",
    )
    dedupe_lookback_records: int = Field(
        100_000,
        ge=0,
        description="how many records back, per partition, a resent event id (table kinds: key and LSN) is looked for (0: all)",
    )
    tables: tuple[str, ...] = Field((), description="table_group: the captured tables (schema.table) it runs")
    members: tuple[Literal["mirror", "history"], ...] = Field(
        (), description="table_group: the jobs it runs for each table: mirror and/or history"
    )
    concurrent_tables: int = Field(
        2,
        ge=1,
        description="table_group: how many of its tables read at once (each reads while its topic holds records "
        "for it; the others wait their turn, the longest waiting first); about the cores the group's driver has",
    )

    @model_validator(mode="before")
    @classmethod
    def _group_table(cls, data: object) -> object:
        # A group writes no table of its own: its folder name is its name (where its checkpoint keeps its state).
        if isinstance(data, dict) and data.get("kind") == GROUP and "table" not in data and "name" in data:
            return {**data, "table": data["name"]}
        return data

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        if is_url(value):
            return check_lake(value)  # a table of its own elsewhere on an object store
        parts = Path(value).parts
        if ".." in parts:
            raise ValueError(f"table {value!r} climbs out of its folder with '..': name a folder under the lake")
        if not [p for p in parts if p not in ("/", ".")]:
            raise ValueError(f"table {value!r} is the lake (or the file system's) root: name a folder under it")
        if not Path(value).is_absolute() and parts[0].startswith(RESERVED_PREFIX):
            raise ValueError(f"table {value!r}: folders of the lake starting with '_' are cdcpipe's own")
        return value

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, value: str) -> str:
        if not TRIGGER.match(value):
            raise ValueError("a trigger is an interval such as 500ms, 1s or 5min, or available-now")
        return value

    @model_validator(mode="after")
    def _kind_fits(self) -> JobSpec:
        if self.kind == "projection" and not (self.projection and ":" in self.projection):
            raise ValueError('a projection job names its function: projection = "package.module:function"')
        if self.kind != "projection" and self.projection:
            raise ValueError(f"projection is only for kind = projection, not {self.kind}")
        if self.kind in TABLE_KINDS and not self.source_table:
            raise ValueError(f'a {self.kind} job names its table: source_table = "public.accounts"')
        if self.kind not in TABLE_KINDS and self.source_table:
            raise ValueError(f"source_table is only for the table kinds, not {self.kind}")
        if "on_schema_change" in self.model_fields_set and self.kind not in (*TABLE_KINDS, GROUP):
            raise ValueError(f"on_schema_change is only for the table kinds, not {self.kind}")
        if self.delete_event_types and self.kind != "latest_state":
            raise ValueError("delete_event_types is only for kind = latest_state")
        if self.kind == GROUP:
            if not self.tables or not self.members or len(self.tables) != len(self.topics):
                raise ValueError(
                    "a table_group lists its tables, each table's topic in topics (in the same order), and its "
                    'members (["mirror"], ["history"] or both)'
                )
            if len(set(self.tables)) != len(self.tables):
                raise ValueError("a table_group lists each table once")
        elif self.tables or self.members or "concurrent_tables" in self.model_fields_set:
            raise ValueError(f"tables, members and concurrent_tables are only for kind = table_group, not {self.kind}")
        return self

    @property
    def group(self) -> str | None:
        """The group this table job runs in, if it is one's member."""
        return self._group

    def member_jobs(self) -> list[JobSpec]:
        """A group's jobs: for each table, each member kind, the job `tables add` would write for it alone."""
        jobs = []
        for table, topic in zip(self.tables, self.topics, strict=True):
            for what in self.members:
                name = table_job_name(table, what)
                member = JobSpec(
                    name=name,
                    kind=MEMBER_KINDS[what],
                    topics=(topic,),
                    table=name,
                    trigger=self.trigger,
                    source_table=table,
                    on_schema_change=self.on_schema_change,
                    max_offsets_per_trigger=self.max_offsets_per_trigger,
                    optimize_every=self.optimize_every,
                    vacuum_every_hours=self.vacuum_every_hours,
                    vacuum_retain_hours=self.vacuum_retain_hours,
                    max_poison_in_a_row=self.max_poison_in_a_row,
                    dedupe_lookback_records=self.dedupe_lookback_records,
                )
                member._file, member._group = self._file, self.name
                jobs.append(member)
        return jobs

    def processing_time(self, trigger: str | None = None) -> str:
        """A `1s`-style trigger in the words Spark parses (`1 seconds`)."""
        match = re.fullmatch(r"(\d+)(ms|s|min)", trigger or self.trigger)
        if match is None:
            raise StreamingError(f"job {self.name}: {trigger or self.trigger!r} is not a processing-time interval")
        unit = {"ms": "milliseconds", "s": "seconds", "min": "minutes"}[match[2]]
        return f"{match[1]} {unit}"

    def processing_seconds(self, trigger: str | None = None) -> float:
        """A `1s`-style trigger in seconds."""
        amount, unit = self.processing_time(trigger).split()
        return int(amount) * {"milliseconds": 0.001, "seconds": 1.0, "minutes": 60.0}[unit]

    @property
    def folder(self) -> Path | None:
        """The folder of the job file it was read from (None when made in code)."""
        return self._file.parent if self._file else None

    @property
    def file(self) -> Path | None:
        """The job file it was read from (None when made in code): what the commands name."""
        return self._file

    def table_path(self, lake: LakePath) -> LakePath:
        return lake.place(self.table)

    def checkpoint_path(self, lake: LakePath) -> LakePath:
        return lake / "_checkpoints" / self.name


def table_job_name(table: str, what: str) -> str:
    """`orders_mirror` for public.orders, `sales_orders_mirror` for sales.orders (job names are lower case)."""
    schema, _, name = table.partition(".")
    base = name if schema == "public" else f"{schema}_{name}"
    slug = re.sub(r"[^a-z0-9_]+", "_", base.lower()).strip("_")
    return f"{slug if slug[:1].isalpha() else 't_' + slug}_{what}"


def load_file(path: Path) -> JobSpec:
    """One job file, validated; errors name the file and each bad field."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise StreamingError(f"{path}: cannot read the job definition ({exc})") from exc
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors())
        raise StreamingError(f"{path}: invalid job definition: {problems}") from exc
    spec._file = path.resolve()
    return spec


def load_all(folders: list[Path]) -> dict[str, JobSpec]:
    """Every job in these folders, by name, a group's member jobs too; two files may not declare one name."""
    jobs: dict[str, JobSpec] = {}
    sources: dict[str, Path] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.toml")):
            spec = load_file(path)
            for job in [spec, *(spec.member_jobs() if spec.kind == GROUP else [])]:
                if job.name in jobs:
                    also = f" (a table of group {job.group})" if job.group else ""
                    raise StreamingError(
                        f"{path}: job {job.name!r}{also} is already declared in {sources[job.name]}: a table runs in "
                        "one job or one group, not both; remove one of them"
                    )
                jobs[job.name], sources[job.name] = job, path
    _tables_apart(jobs, sources)
    return jobs


def _tables_apart(jobs: dict[str, JobSpec], sources: dict[str, Path]) -> None:
    """Two jobs never write one table: not the same folder, one inside the other, or one's dead letters."""
    lake = LakePath("/lake")  # any root: relative tables are compared under the same one
    claimed: dict[Path, str] = {}
    for name, spec in jobs.items():
        table = Path(os.path.normpath(str(spec.table_path(lake)).replace("://", "/")))
        beside = [table.with_name(table.name + suffix) for suffix in (DEAD_LETTER_SUFFIX, EVENT_IDS_SUFFIX)]
        for path in (table, *beside):
            for other_path, other in claimed.items():
                if other != name and (path == other_path or path in other_path.parents or other_path in path.parents):
                    raise StreamingError(
                        f"{sources[name]}: job {name!r} writes {spec.table!r}, where job {other!r} "
                        f"({sources[other]}) writes its tables: give each job a table of its own"
                    )
            claimed[path] = name


def check_name(name: str) -> str:
    """A job name as typed on the command line: a name, never a path."""
    if not JOB_NAME.match(name):
        raise StreamingError(
            f"{name!r} is not a job name (lower case letters, digits, '_' and '-', starting with a letter); "
            "`cdcpipe jobs list` shows the jobs"
        )
    return name


def find(name: str, folders: list[Path]) -> JobSpec:
    """The job called `name`, or an error listing the jobs there are."""
    check_name(name)
    return pick(name, load_all(folders) if folders else {}, folders)


def one_job(name: str, folders: list[Path], table: str | None = None) -> JobSpec:
    """The job a range command (backfill, replay, rewind, accept-topics) works on: `name`, or a group's table's.

    A group is many jobs: one of its tables is named (`table`), or the table's job itself.
    """
    spec = find(name, folders)
    if table is None:
        if spec.kind == GROUP:
            raise StreamingError(
                f"job {name} is a table group ({spec.file}): name one of its tables with --table ("
                f"{', '.join(spec.tables)}), or that table's job (`cdcpipe jobs status {name}` lists them)"
            )
        return spec
    if spec.kind != GROUP:
        raise StreamingError(f"--table {table}: job {name} is a {spec.kind}, not a table group; leave --table out")
    jobs = [m for m in spec.member_jobs() if m.source_table == table]
    if not jobs:
        raise StreamingError(f"table group {name} has no table {table!r}; its tables: {', '.join(spec.tables)}")
    if len(jobs) > 1:
        raise StreamingError(
            f"table group {name} runs {len(jobs)} jobs of {table}: name the one to work on "
            f"({' or '.join(j.name for j in jobs)}) instead of the group"
        )
    return jobs[0]


def pick(name: str, jobs: dict[str, JobSpec], folders: list[Path]) -> JobSpec:
    """The job called `name` among those `load_all` read from these folders, or an error listing them."""
    check_name(name)
    if not folders:
        raise StreamingError(
            f"no job named {name!r}: no job folder is set; set CDCPIPE_JOBS_DIRS to your folder(s) of job files "
            "(colon-separated; examples/jobs holds the demo's)"
        )
    if name not in jobs:
        known = ", ".join(sorted(jobs)) or "none"
        raise StreamingError(
            f"no job named {name!r} in {':'.join(map(str, folders))} (known: {known}); add a .toml file there"
        )
    return jobs[name]
