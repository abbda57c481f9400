"""The relay's SQL: taking a batch (one round trip), dead letters, their redrive, its status row, the backlog.

The leader lock's is in outbox_relay.leader, beside the one rule it serves.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.adapt import Transformer

from outbox_relay.batches import DeadLetter
from schemas.config import OutboxNames

# The backlog gauge counts the rows at the head of the outbox (by seq), up to this many; beyond, it shows
# Postgres's running count of live rows (pg_stat_user_tables.n_live_tup). The age is the oldest head row's.
# Why not count(*): it reads the whole outbox under one snapshot, and while a snapshot is held, the rows the
# relay removes cannot be cleaned up: each take steps over them. Its cost grows with the backlog, so it would
# cost the most exactly while the relay catches up; the head's cost is bounded.
BACKLOG_COUNTED = 100_000


# A plain DELETE ... RETURNING, sorted by the relay: the server-side ORDER BY needed a CTE that copied the
# batch once more.
_RETURNING = sql.SQL(
    "RETURNING seq, id::text, aggregatetype, aggregateid, type, type_version::text, payload::text, "
    "extract(epoch FROM created_at)::float8"
)


@functools.cache
def take_sql(names: OutboxNames) -> sql.Composed:
    """Remove the oldest visible rows, at most %s of them, and return them (in no order: sort by seq).

    `seq = ANY(ARRAY(...))`, not `seq IN (SELECT ...)`: the IN form is a join, and after a drain, when
    autovacuum's statistics say the outbox is empty, Postgres joined by scanning the table once per row
    taken (4 s for 2,000 rows in a test; minutes for the form with the in-flight rows left out). An array of
    keys leaves it no such plan.
    """
    outbox = sql.Identifier(names.outbox_schema, names.outbox_table)
    return sql.SQL(
        "DELETE FROM {outbox} WHERE seq = ANY(ARRAY(SELECT seq FROM {outbox} ORDER BY seq LIMIT %s)) {returning}"
    ).format(outbox=outbox, returning=_RETURNING)


@functools.cache
def take_after_sql(names: OutboxNames) -> sql.Composed:
    """As `take_sql`, leaving out the seqs in %s (the batches in flight on the other connections).

    Only those rows are left out, not every seq below the batch's highest: a row that became visible since
    (a transaction that drew its seq early and committed late) is taken now, before later events of its
    aggregate. Without the exclusion the DELETE would wait on the in-flight batch's row locks. `NOT IN` a
    subquery is a hash lookup per row whatever the statistics say.
    """
    outbox = sql.Identifier(names.outbox_schema, names.outbox_table)
    return sql.SQL(
        "DELETE FROM {outbox} WHERE seq = ANY(ARRAY(SELECT seq FROM {outbox} "
        "WHERE seq NOT IN (SELECT unnest(%s::bigint[])) ORDER BY seq LIMIT %s)) {returning}"
    ).format(outbox=outbox, returning=_RETURNING)


@functools.cache
def take_except_sql(names: OutboxNames) -> sql.Composed:
    """As `take_after_sql`, also leaving out the rows of the aggregate types in %s (their topic is stalled).

    Whole aggregate types wait, so every aggregate's events still leave in order; every other type flows.
    """
    outbox = sql.Identifier(names.outbox_schema, names.outbox_table)
    return sql.SQL(
        "DELETE FROM {outbox} WHERE seq = ANY(ARRAY(SELECT seq FROM {outbox} "
        "WHERE aggregatetype <> ALL(%s::text[]) AND seq NOT IN (SELECT unnest(%s::bigint[])) "
        "ORDER BY seq LIMIT %s)) {returning}"
    ).format(outbox=outbox, returning=_RETURNING)


def take(
    conn: psycopg.Connection[Any],
    names: OutboxNames,
    limit: int,
    in_flight: Iterable[int] = (),
    waiting_types: Iterable[str] = (),
) -> list[tuple[Any, ...]]:
    """BEGIN, and remove at most `limit` rows (`take_sql`), but those in flight or of a waiting aggregate type.

    Leaving out the seqs in `in_flight` is `take_after_sql`; also the aggregate types in `waiting_types` (their
    topic is stalled), `take_except_sql`. The transaction stays open: the caller COMMITs once Kafka holds the rows, or rolls back.

    BEGIN and the DELETE go to Postgres as one query string through libpq's PQexec, which psycopg runs
    without holding Python's GIL. Through a cursor, a thread needs the GIL back after the BEGIN and for each
    chunk of the 2 MB result, and waits for it whenever another thread runs Python (the relay's main thread,
    producing). So the values are literals in the text, merged by psycopg's client-side quoting: the limit,
    and the seqs as one array literal (which also beats psycopg's list dumper, Python per element).

    Not a prepared statement run by EXECUTE: Postgres then stores the DELETE's result twice before sending it.
    """
    seqs = ",".join(map(str, in_flight))
    waiting = sorted(waiting_types)
    statement: sql.Composed
    params: tuple[object, ...]
    if waiting:
        statement, params = take_except_sql(names), (waiting, "{" + seqs + "}", limit)
    elif seqs:
        statement, params = take_after_sql(names), ("{" + seqs + "}", limit)
    else:
        statement, params = take_sql(names), (limit,)
    query = b"BEGIN; " + psycopg.ClientCursor(conn).mogrify(statement, params).encode()
    result = conn.pgconn.exec_(query)
    if result.status != pq.ExecStatus.TUPLES_OK:
        raise _take_failed(conn, result)
    loader = Transformer.from_context(conn)
    loader.set_pgresult(result)
    return loader.load_rows(0, result.ntuples, tuple)


def _take_failed(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> psycopg.Error:
    """The error of a take that failed; its transaction is rolled back if the connection still stands."""
    if conn.pgconn.status != pq.ConnStatus.OK:
        message = result.error_message.decode(errors="replace").strip() or "no message"
        return psycopg.OperationalError(f"the connection was lost while taking a batch: {message}")
    if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
        conn.execute("ROLLBACK")
    return psycopg.errors.error_from_result(result, encoding=conn.info.encoding)


def backlog_sql(names: OutboxNames) -> sql.Composed:
    """(rows at the head of the outbox, age of the oldest of them in seconds, Postgres's count of live rows)."""
    return sql.SQL(
        "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8, "
        "(SELECT pg_catalog.pg_stat_get_live_tuples(c.oid) FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = {schema} AND c.relname = {table}) "
        "FROM (SELECT created_at FROM {outbox} ORDER BY seq LIMIT {counted}) AS head"
    ).format(
        outbox=sql.Identifier(names.outbox_schema, names.outbox_table),
        schema=sql.Literal(names.outbox_schema),
        table=sql.Literal(names.outbox_table),
        counted=sql.Literal(BACKLOG_COUNTED),
    )


def read_backlog_row(row: tuple[Any, ...] | None) -> tuple[int, float]:
    """`backlog_sql`'s row as (rows waiting, age of the oldest in seconds): see `BACKLOG_COUNTED`."""
    if row is None:
        return 0, 0.0
    counted, age, live = int(row[0]), float(row[1]), int(row[2] or 0)
    return (counted if counted < BACKLOG_COUNTED else max(counted, live)), age


def dead_params(dead: DeadLetter) -> tuple[object, ...]:
    """The dead letter's row and reason, in the dead-letter table's column order."""
    r = dead.row
    return (
        r.seq,
        r.id,
        r.aggregatetype,
        r.aggregateid,
        r.type,
        r.type_version,
        r.payload,
        r.created_epoch,
        dead.reason,
    )


def check_outbox(conn: psycopg.Connection[Any], names: OutboxNames) -> tuple[bool, bool]:
    """(the outbox table exists, it has what later versions of `schema apply` add: status `stalls`, `overtaken`)."""
    row = conn.execute(
        "SELECT to_regclass(%s)", (sql.Identifier(names.outbox_schema, names.outbox_table).as_string(conn),)
    ).fetchone()
    if row is None or row[0] is None:
        return False, False
    status = sql.Identifier(names.outbox_schema, names.relay_status_table).as_string(conn)
    dead = sql.Identifier(names.outbox_schema, names.dead_letter_table).as_string(conn)
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL, EXISTS (SELECT FROM pg_catalog.pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attname = 'overtaken' AND NOT attisdropped), "
        "EXISTS (SELECT FROM pg_catalog.pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attname = 'stalls' AND NOT attisdropped)",
        (status, dead, status),
    ).fetchone()
    return True, row is not None and all(row)


def bury_sql(names: OutboxNames) -> sql.Composed:
    """One dead letter into the dead-letter table (parameters: `dead_params`)."""
    return sql.SQL(
        "INSERT INTO {dead} (seq, id, aggregatetype, aggregateid, type, type_version, payload, created_at, reason) "
        "VALUES (%s, %s::uuid, %s, %s, %s, %s::integer, %s::jsonb, to_timestamp(%s), %s)"
    ).format(dead=sql.Identifier(names.outbox_schema, names.dead_letter_table))


def overtake_sql(names: OutboxNames) -> sql.Composed:
    """Marks the dead letters of aggregates a later event of which is published (kinds, ids, seqs as arrays)."""
    return sql.SQL(
        "UPDATE {dead} d SET overtaken = true FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS p(kind, id, seq) "
        "WHERE NOT d.overtaken AND d.aggregatetype = p.kind AND d.aggregateid = p.id AND d.seq < p.seq"
    ).format(dead=sql.Identifier(names.outbox_schema, names.dead_letter_table))


def dead_aggregates_sql(names: OutboxNames) -> sql.Composed:
    """The aggregates with a dead letter no later event of theirs has been published after."""
    return sql.SQL("SELECT DISTINCT aggregatetype, aggregateid FROM {} WHERE NOT overtaken").format(
        sql.Identifier(names.outbox_schema, names.dead_letter_table)
    )


def write_status_sql(names: OutboxNames) -> sql.Composed:
    """The relay's status row (named parameters: topic, reason, since, stalls)."""
    return sql.SQL(
        "INSERT INTO {} AS s (id, stalled_topic, stalled_reason, stalled_since, stalls, updated_at) "
        "VALUES (1, %(topic)s, %(reason)s, %(since)s, %(stalls)s::jsonb, now()) ON CONFLICT (id) DO UPDATE SET "
        "stalled_topic = EXCLUDED.stalled_topic, stalled_reason = EXCLUDED.stalled_reason, "
        "stalled_since = EXCLUDED.stalled_since, stalls = EXCLUDED.stalls, updated_at = now()"
    ).format(sql.Identifier(names.outbox_schema, names.relay_status_table))


def status_row_sql(names: OutboxNames) -> sql.Composed:
    """The relay's status row: the topic it is stalled on, why, since when, and every stall."""
    return sql.SQL("SELECT stalled_topic, stalled_reason, stalled_since, stalls FROM {}").format(
        sql.Identifier(names.outbox_schema, names.relay_status_table)
    )


def dead_count_sql(names: OutboxNames) -> sql.Composed:
    """How many dead letters, and how many of them a later event of their aggregate overtook."""
    return sql.SQL("SELECT count(*), count(*) FILTER (WHERE overtaken) FROM {}").format(
        sql.Identifier(names.outbox_schema, names.dead_letter_table)
    )


def waiting_of_types_sql(names: OutboxNames) -> sql.Composed:
    """How many outbox rows of the aggregate types %s (an array) wait."""
    return sql.SQL("SELECT count(*) FROM {} WHERE aggregatetype = ANY(%s)").format(
        sql.Identifier(names.outbox_schema, names.outbox_table)
    )


def lock_outbox_sql(names: OutboxNames) -> sql.Composed:
    """Keep the relay from taking or adding rows while dead letters go back (it waits; writers wait too)."""
    return sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(
        sql.Identifier(names.outbox_schema, names.outbox_table)
    )


def dead_letters_sql(names: OutboxNames, reason: str | None, aggregate_type: str | None) -> sql.Composed:
    """The dead letters whose reason holds `reason` (any case) and of `aggregate_type`, if given, by seq."""
    where = sql.SQL(" AND ").join(
        [
            sql.SQL("true"),
            *([sql.SQL("strpos(lower(reason), lower({})) > 0").format(sql.Literal(reason))] if reason else []),
            *([sql.SQL("aggregatetype = {}").format(sql.Literal(aggregate_type))] if aggregate_type else []),
        ]
    )
    return sql.SQL(
        "SELECT seq, id::text, aggregatetype, aggregateid, reason, overtaken FROM {} WHERE {} ORDER BY seq"
    ).format(sql.Identifier(names.outbox_schema, names.dead_letter_table), where)


def redrive_sql(names: OutboxNames) -> sql.Composed:
    """Move the dead letters of seq = ANY(%s) back into the outbox, each under its seq; returns the seqs kept."""
    return sql.SQL(
        "WITH back AS (DELETE FROM {dead} WHERE seq = ANY(%s) "
        "RETURNING seq, id, aggregatetype, aggregateid, type, type_version, payload, created_at) "
        "INSERT INTO {outbox} (seq, id, aggregatetype, aggregateid, type, type_version, payload, "
        "created_at) SELECT * FROM back ORDER BY seq RETURNING seq"
    ).format(
        dead=sql.Identifier(names.outbox_schema, names.dead_letter_table),
        outbox=sql.Identifier(names.outbox_schema, names.outbox_table),
    )
