"""A batch's row shapes met with the job's contract: the Delta table and the contract follow, or the job stops.

Runs inside the batch, under the table's writer lease, before anything of the batch is written. The shapes
are found with one small aggregation (a hash of each change's schema); a shape seen before in this process
costs nothing more. A new shape is compared with the contract (streaming_jobs.schema_change.evolve); what
follows is applied to the Delta table first, then written into the contract file. Both steps check what is
already there, so a job that dies between them, or another job on the same contract, applies nothing twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache

import psycopg
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import StructType

from schemas import table_contracts
from schemas.catalog import read_columns
from schemas.errors import ContractError
from schemas.table_contracts import TableContract, load_table_contract
from streaming_jobs.errors import SchemaChangeError
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.schema_change.columns import MAPPING, need_mapping, quoted
from streaming_jobs.schema_change.evolve import Decision, Operation, compare, decide, live_columns
from streaming_jobs.schema_change.shapes import Shape, contract_shape, parse_shape

log = logging.getLogger(__name__)

CONTRACT_COPY = "_cdcpipe_contract.json"
SHAPE = "_shape"
PAYLOAD = "_payload"
_SCHEMA_TEXT = "_schema_text"
_ENVELOPE = '{"schema":'
_PAYLOAD = ',"payload":'
# Each schema text met in this process, by its hash (`_shape`): a batch carries the text of a shape not in here
# only. Never pruned, so a hash known when a batch is read is known when it is planned: a process meets few
# shapes (one per version of each table its jobs read).
_TEXTS: dict[int, str] = {}
_first_met = False  # whether `meet_first` has read a first record in this process


def _cut_schema(value: Column) -> Column:
    """The schema's text of an enveloped record (`value` as a string); null for a bare change."""
    return F.when(
        value.startswith(_ENVELOPE), F.substring_index(value, _PAYLOAD, 1).substr(len(_ENVELOPE) + 1, 1 << 30)
    )


def meet_first(records: DataFrame) -> None:
    """Meet the shape of the batch's first record (a tiny read) when this process has met none yet.

    So a first batch's records take `slim`'s byte comparison, not the text walk a record of an unmet shape costs.
    """
    global _first_met  # once per process, like _TEXTS
    if _TEXTS or _first_met:
        return  # once a first record is seen: a topic of bare changes would pay this read at every batch
    text = _cut_schema(F.col("value").cast("string"))
    row = (
        records.where(F.col("value").isNotNull()).select(text.alias("t")).limit(1).select("t", F.xxhash64("t")).first()
    )
    if row is None:
        return  # no change in this batch: the next one tries
    _first_met = True
    if row[0] is not None:
        _TEXTS.setdefault(int(row[1]), str(row[0]))


def slim(records: DataFrame) -> DataFrame:
    """The Kafka records as the table kinds read them: the change without its schema, and the schema's hash.

    Columns: `raw_key`, the Kafka coordinates, `_payload` (the change's JSON: the envelope's payload, or the
    bare value), `_shape` (a hash of the schema's text; null without one) and `_schema_text`, set only on a
    record of a shape this process has not met. A change's schema is most of its bytes (a 7 KB schema for a
    1.3 KB change is common) and the same in every change of a shape, so a batch cached this way holds about
    a sixth of what it read.

    The JSON converter writes `{"schema":{...},"payload":{...}}`, the schema first. A record of a shape met
    before starts with that shape's head (`{"schema":` + its text + `,"payload":`): found by comparing bytes,
    its payload cut at a known byte. Only a record no head matches has its schema cut out as text (a walk
    character by character, several times the cost of reading the record) and hashed.
    """
    value = F.col("value")
    names = ["raw_key", "topic", "partition", "offset", "timestamp"]
    known: Column = F.lit(None).cast("long")
    start: Column = F.lit(None).cast("int")
    # A copy (made in one step, under the GIL): a table group's other queries add shapes from their threads.
    for shape_hash, schema in dict(_TEXTS).items():  # each wraps the ones met before: the newest is tried first
        head = (_ENVELOPE + schema + _PAYLOAD).encode()
        known = F.when(F.startswith(value, F.lit(bytearray(head))), F.lit(shape_hash)).otherwise(known)
        start = F.when(F.col("_known") == F.lit(shape_hash), F.lit(len(head) + 1)).otherwise(start)
    # One projection per step: Spark keeps a costly column that the next uses twice apart, computed once.
    matched = records.select(F.col("key").alias("raw_key"), "topic", "partition", "offset", "timestamp", value)
    matched = matched.select("*", known.alias("_known")).select("*", start.alias("_start"))
    text = F.when(F.col("_known").isNull(), value.cast("string"))
    enveloped = matched.select("*", text.alias("_text")).select(
        "*",
        _cut_schema(F.col("_text")).alias(_SCHEMA_TEXT),
    )
    # An unmatched change's payload: after its schema text and `,"payload":`, up to the closing brace.
    after = F.length(_SCHEMA_TEXT) + F.lit(len(_ENVELOPE) + len(_PAYLOAD) + 1)
    unmatched_payload = F.when(
        F.col(_SCHEMA_TEXT).isNotNull(), F.col("_text").substr(after, F.length("_text") - after)
    ).otherwise(F.col("_text"))
    known_payload = F.substring(value, F.col("_start"), F.length(value) - F.col("_start")).cast("string")
    return enveloped.select(
        *names,
        F.when(F.col("_known").isNotNull(), known_payload).otherwise(unmatched_payload).alias(PAYLOAD),
        F.coalesce(F.col("_known"), F.when(F.col(_SCHEMA_TEXT).isNotNull(), F.xxhash64(_SCHEMA_TEXT))).alias(SHAPE),
        F.col(_SCHEMA_TEXT),
    )


@dataclass(frozen=True)
class Observed:
    """What a batch's changes carry: their shapes, and the fields of their Kafka keys.

    `shapes`: (hash, schema text; None, None without a schema), oldest first. `keys`: each set of fields the
    changes' Kafka keys have: the source's primary key, as Debezium keys a change.
    """

    shapes: list[tuple[int | None, str | None]]
    keys: frozenset[tuple[str, ...]]


def observed(records: DataFrame) -> Observed:
    """The batch's shapes and key field sets (`records`: `slim`), in the one aggregation the batch pays for them."""
    key_fields = F.array_join(F.array_sort(F.json_object_keys(F.col("raw_key").cast("string"))), ",")
    rows = (
        records.where(F.col(PAYLOAD).isNotNull())
        .groupBy(SHAPE)
        .agg(
            F.first(_SCHEMA_TEXT, ignorenulls=True).alias(_SCHEMA_TEXT),
            F.min("offset").alias("first"),
            F.collect_set(key_fields).alias("keys"),
        )
        .orderBy("first")
        .collect()
    )
    shapes: list[tuple[int | None, str | None]] = []
    for r in rows:
        shape, text = r[SHAPE], r[_SCHEMA_TEXT]
        if shape is not None and text is not None:
            _TEXTS.setdefault(shape, text)
        shapes.append((shape, None if shape is None else _TEXTS[shape]))
    keys = frozenset(tuple(k.split(",")) for r in rows for k in r["keys"] if k)
    return Observed(shapes, keys)


@cache
def _parsed(text: str) -> Shape:
    return parse_shape(text)


@dataclass(frozen=True)
class Plan:
    """How the changes of one shape are read: the shape, and a dead-letter reason when they are set aside.

    `names` maps a column of the contract the batch is written with to the shape's field holding it, for a
    shape older than a rename later in the same batch.
    """

    shape: Shape
    dead_letter: str | None = None
    names: Mapping[str, str] = field(default_factory=dict)

    def source(self, column: str) -> str | None:
        """The shape's field of a contract column (None: the shape has no such column)."""
        name = self.names.get(column, column)
        return name if name in self.shape.names else None


def _catalog(dsn: str | None, table: str) -> dict[str, int]:
    """The source table's live columns and their attnums now; empty without the catalog (said in the log)."""
    if not dsn:
        return {}
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            # By the table's exact name (not to_regclass, which folds public.MyOrders to public.myorders).
            return {c.name: c.attnum for c in read_columns(conn, table)[0]}
    except (psycopg.Error, ContractError) as exc:
        log.warning("schema change of %s: cannot read the source catalog (%s): renames read as drop + add", table, exc)
        return {}


def renames_from(contract: TableContract, shape: Shape, attnums: Mapping[str, int]) -> dict[str, str]:
    """Contract columns the shape no longer has whose attnum the catalog now gives to a column it gained.

    Postgres keeps a column's attnum through RENAME COLUMN; a dropped column's number is never reused.
    """
    live = live_columns(contract)
    gained = set(shape.names) - set(live)
    by_number = {num: name for name, num in attnums.items()}
    found = {}
    for column in live:
        number = contract.attnum(column)
        if column not in shape.names and number is not None and by_number.get(number) in gained:
            found[column] = by_number[number]
    return found


def _apply_operations(spark: SparkSession, table: LakePath, operations: tuple[Operation, ...]) -> None:
    """Each operation the Delta table does not show yet (a table not made yet gets the new columns at creation)."""
    if not operations or not DeltaTable.isDeltaTable(spark, str(table)):
        return
    name = f"delta.`{table}`"
    delta = DeltaTable.forPath(spark, str(table))
    schema: StructType = delta.toDF().schema
    columns = {f.name: f.dataType.simpleString() for f in schema.fields}
    detail = delta.detail().select("properties", "partitionColumns").first()
    props: Mapping[str, str] = detail[0] if detail else {}
    partitioned_by: list[str] = list(detail[1]) if detail else []
    renames = any(op.kind in ("drop", "rename") for op in operations)
    odd_names = need_mapping(op.new_name or op.column for op in operations if op.kind in ("add", "rename"))
    if (renames or odd_names) and props.get(MAPPING) != "name":
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{MAPPING}' = 'name')")
    if any(op.kind == "widen" for op in operations) and props.get("delta.enableTypeWidening") != "true":
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    for op in operations:
        column = quoted(op.column)
        # `columns` follows each operation: a column moved aside (renamed) and then added again by the same name.
        if op.kind == "add" and op.column not in columns:
            spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({column} {op.type})")
            columns[op.column] = op.type or ""
        elif op.kind == "drop" and op.column in columns:
            spark.sql(f"ALTER TABLE {name} DROP COLUMN {column}")
            del columns[op.column]
        elif op.kind == "rename" and op.column in columns and op.new_name not in columns:
            spark.sql(f"ALTER TABLE {name} RENAME COLUMN {column} TO {quoted(op.new_name or op.column)}")
            columns[op.new_name or op.column] = columns.pop(op.column)
        elif op.kind == "widen" and columns.get(op.column) != op.type:
            spark.sql(f"ALTER TABLE {name} ALTER COLUMN {column} TYPE {op.type}")
    rewrites = [op for op in operations if op.kind == "rewrite" and columns.get(op.column) != op.type]
    if rewrites:
        # Every file rewritten once, with the new types: a table any Delta reader reads, at the cost of a copy.
        # Its commit carries no applied offsets, so the ones before it still say what the table holds.
        rows = spark.read.format("delta").load(str(table))
        for op in rewrites:
            rows = rows.withColumn(op.column, F.col(quoted(op.column)).cast(op.type or "string"))
        # `partitionBy` again: an overwrite that may change the schema sets the partitioning it is given, none
        # if none (a history partitioned by `is_current` would lose its pruning, streaming_jobs.sinks.scd).
        (
            rows.write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .partitionBy(*partitioned_by)
            .save(str(table))
        )


def reconcile(
    spark: SparkSession,
    job: JobSpec,
    table: LakePath,
    contract: TableContract,
    seen: Observed,
    source_dsn: Callable[[], str | None],
    own: bool = True,
) -> tuple[TableContract, dict[int | None, Plan]]:
    """The contract the batch is written with, and how each shape's changes are read.

    Shapes are taken oldest first, each against the contract as the ones before it left it. A table that
    has no contract of its own yet (`own` False: a new table, a replay's) starts at the contract version its
    oldest changes have, when the contract file kept it: a replay walks the changes again, not backwards.
    Raises SchemaChangeError when the policy says stop, or when the changes are keyed on other columns than the
    contract's primary key.
    """
    plans: dict[int | None, Plan] = {}
    renamed: list[tuple[int | None, Mapping[str, str]]] = []  # each evolution's renames, after the shapes seen so far
    keys = {tuple(sorted(contract.primary_key))}  # the key under each contract version the batch goes through
    for shape_hash, text in seen.shapes:
        shape = contract_shape(contract) if text is None else _parsed(text)
        if not shape.described:
            plans[shape_hash] = Plan(shape)
            continue
        if not own:
            own = True  # only the oldest shape chooses where a new table starts
            contract = _version_of(contract, shape)
        decision = _decide(job, contract, shape, source_dsn)
        if decision.stop:
            raise SchemaChangeError(decision.stop)
        if decision.dead_letter:
            plans[shape_hash] = Plan(shape, decision.dead_letter)
            continue
        if decision.document is not None:
            log.warning(
                "job %s: table %s changed at the source: %s; contract v%d -> v%d",
                job.name,
                contract.table,
                "; ".join(map(str, decision.changes)),
                contract.version,
                decision.document["x-version"],
            )
            _apply_operations(spark, table, decision.operations)
            contract = _save(job, table, contract, decision)
            keys.add(tuple(sorted(contract.primary_key)))
            renamed.append(
                (shape_hash, {c.column: c.new_name or c.column for c in decision.changes if c.kind == "renamed"})
            )
        plans[shape_hash] = Plan(shape)
    _check_key(job, contract, seen.keys - keys)
    return contract, {h: replace(p, names=_names_now(h, list(plans), renamed)) for h, p in plans.items()}


def _check_key(job: JobSpec, contract: TableContract, other: frozenset[tuple[str, ...]]) -> None:
    """Stop when changes are keyed on other columns than the contract's key: the source's primary key changed.

    A mirror would merge them on the old key (rows collapsing) and a history would version them on it.
    """
    if not other:
        return
    seen = "; ".join(str(list(k)) for k in sorted(other))
    raise SchemaChangeError(
        f"job {job.name}: table {contract.table} ({contract.path}): the source's primary key changed: changes now "
        f"come keyed on {seen}, the contract's key is {list(contract.primary_key)}. Stopped; nothing of this batch "
        f"was written. A mirror and a history key on it: bring the contract up to date (`cdcpipe schema tables "
        f"import {contract.table}`) and rebuild the table with `cdcpipe jobs replay {job.name} --swap`."
    )


def _version_of(contract: TableContract, shape: Shape) -> TableContract:
    """The newest version of the contract whose columns are the shape's (the contract itself if none is)."""
    if not compare(contract, shape, {}):
        return contract
    for earlier in reversed(contract.earlier()):
        if not compare(earlier, shape, {}):
            log.warning(
                "table %s: a new table starts at contract v%d, the version of its oldest changes (now v%d)",
                contract.table,
                earlier.version,
                contract.version,
            )
            return earlier
    return contract


def _names_now(
    shape_hash: int | None, order: list[int | None], renamed: list[tuple[int | None, Mapping[str, str]]]
) -> dict[str, str]:
    """Final column -> this shape's field, through the renames decided at the shapes after this one."""
    after = order[order.index(shape_hash) + 1 :]
    names: dict[str, str] = {}  # current name -> the field's name in this shape
    for at, renames in renamed:
        if at in after:
            for old, new in renames.items():
                names[new] = names.pop(old, old)
    return names


def _decide(job: JobSpec, contract: TableContract, shape: Shape, source_dsn_of: Callable[[], str | None]) -> Decision:
    plain = decide(job.name, contract, shape, job.on_schema_change, {}, {})
    if not plain.changes:
        return plain
    # Only a shape that differs asks the catalog: for renames, and for the numbers of added columns.
    source_dsn = source_dsn_of()
    attnums = _catalog(source_dsn, contract.table)
    renames = renames_from(contract, shape, attnums)
    gone = [c.column for c in plain.changes if c.kind == "dropped"]
    if gone and not renames and not source_dsn and any(c.kind == "added" for c in plain.changes):
        log.warning(
            "job %s: %s lost %s and gained columns: without the source catalog (CDCPIPE_SOURCE_PG_DSN) a rename "
            "cannot be told from a drop and an add, so it is read as drop + add",
            job.name,
            contract.table,
            ", ".join(gone),
        )
    return decide(job.name, contract, shape, job.on_schema_change, renames, attnums)


def table_contract(table: LakePath, source_table: str) -> tuple[TableContract, bool]:
    """The contract this job's table is written with, and whether it is the table's own.

    Two jobs of one source table (a mirror and a history) each evolve their own table; each keeps the
    contract its table follows in the table's folder (`_cdcpipe_contract.json`, hidden from Delta), so one
    job evolving the shared file does not make the other skip the change its own table still needs. A table
    without one (new, or a replay's) starts from the contract file.
    """
    shared = load_table_contract(source_table)
    try:
        document = json.loads((table / CONTRACT_COPY).read_text())
    except FileNotFoundError:
        return shared, False
    return table_contracts.from_document(source_table, document, shared.path), True


def keep_copy(table: LakePath, contract: TableContract) -> None:
    """Write the table's own copy of its contract, once, when the table is first written."""
    copy = table / CONTRACT_COPY
    if not copy.exists():
        copy.write_text(json.dumps(contract.schema, indent=1))


def _save(job: JobSpec, table: LakePath, contract: TableContract, decision: Decision) -> TableContract:
    """The contract's next version, checked first: the table's copy, then the contract file (unless read-only).

    A document that is not a contract is never written: the job stops, both files as they were.
    """
    document = decision.document or contract.schema
    try:
        evolved = table_contracts.from_document(contract.table, document, contract.path)
    except ContractError as exc:
        said = "; ".join(map(str, decision.changes))
        raise SchemaChangeError(
            f"job {job.name}: table {contract.table}: the source's columns changed ({said}), and the contract "
            f"that follows is not one ({exc}). Stopped before writing it: {contract.path} stays at "
            f"v{contract.version} and nothing of this batch was written. This is a cdcpipe defect in naming a "
            "type: report it with this message; to go on, write the contract from the catalog "
            f"(`cdcpipe schema tables import {contract.table}`) and rebuild with `cdcpipe jobs replay {job.name} "
            "--swap`."
        ) from exc
    (table / CONTRACT_COPY).write_text(json.dumps(document, indent=1))
    try:
        table_contracts.save(contract, document)
    except OSError as exc:
        log.warning(
            "cannot write the evolved contract %s (%s): the job goes on with its table's copy; run "
            "`cdcpipe schema tables import %s` to bring the file up to date",
            contract.path,
            exc,
            contract.table,
        )
    return evolved
