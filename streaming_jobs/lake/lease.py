"""One writer at a time per Delta table, across processes and machines: a lease held in Postgres.

The streaming job, a backfill, a replay's catch-up, `jobs optimize` and `jobs accept-topics` each hold the
table's lease for the whole read-check-write of a batch (reading which offsets the table holds, then
writing the rest), so two writers never both decide to apply the same records. It is also what makes Delta
safe on S3: Delta's S3 log store (S3SingleDriverLogStore) writes commit N with a plain PUT, so two writers
committing the same version at once would leave only the last one's; the lease keeps our writers' commits
in turn, and only one of them ever computes version N.

The lease is a session-level advisory lock (`pg_advisory_lock`) on a connection of its own: Postgres
releases it when the session ends, so a writer that crashes or is killed hands over at once, and nothing
on the lake (no lock file an object store could not make atomic) has to be cleaned up. The remaining window:
a writer whose Postgres session is cut *during* its commit while it still runs. Its lease is then gone, a
second writer may take it and commit, and the first learns of it when it lets go: it fails loudly
(`LeaseLostError`); a streaming job restarts its query (streaming_jobs.run.runner) and re-reads what the
table holds. Keepalives bound how long Postgres
takes to notice a silent peer.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from cdcpipe.errors import ConfigError
from streaming_jobs.errors import StreamingError
from streaming_jobs.lake.paths import LakePath

log = logging.getLogger(__name__)

NAMESPACE = 0x63647063  # pg_advisory_lock(namespace, key): 'cdpc', apart from the relay's leader locks


class LeaseLostError(StreamingError):
    """The writer's Postgres session ended while it held a table's lease."""


class LeaseUnavailableError(StreamingError):
    """The Postgres of the writer leases cannot be reached: no writer may start a write."""


def lease_key(table: LakePath) -> int:
    """A 32-bit key per table URL (a collision only makes two tables take turns)."""
    return int.from_bytes(hashlib.sha256(table.url.encode()).digest()[:4], "big", signed=True)


def _connect(table: LakePath, holder: str) -> psycopg.Connection[Any]:
    dsn = table.access.lease_dsn if table.access else None
    if not dsn:
        raise ConfigError(
            f"{table}: no Postgres to hold the table's writer lease in; set CDCPIPE_LEASE_PG_DSN "
            "(any role that may connect: advisory locks need no privilege; `cdcpipe stack env` sets the stack's)"
        )
    try:
        return psycopg.connect(
            dsn,
            autocommit=True,
            application_name=f"cdcpipe {holder}"[:63],
            # Postgres notices a writer that went silent (a cut network, a frozen machine) within about 25 s.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
    except psycopg.OperationalError as exc:
        raise LeaseUnavailableError(
            f"cannot reach the Postgres that holds the tables' writer leases (CDCPIPE_LEASE_PG_DSN): {exc}"
        ) from exc


def holder_of(conn: psycopg.Connection[Any], key: int) -> str:
    """Who holds the lease now, as its session named itself ('' when nobody does)."""
    row = conn.execute(
        "SELECT a.application_name, a.client_addr::text FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid AND l.objid = %s::oid",
        (NAMESPACE & 0xFFFFFFFF, key & 0xFFFFFFFF),
    ).fetchone()
    return f"{row[0]} ({row[1] or 'local'})" if row else ""


@dataclass
class _Held:
    """A lease this process holds, and who in it uses it: at most one writer of offsets, and compactions."""

    conn: psycopg.Connection[Any]
    writers: int = 0
    compactions: int = 0


_HELD: dict[int, _Held] = {}  # by lease key
_IDLE: dict[int, psycopg.Connection[Any]] = {}  # the session of a lease this process let go of, kept for the next
_GUARD = threading.Lock()


@contextmanager
def table_lock(table: LakePath, holder: str, *, compaction: bool = False) -> Iterator[None]:
    """Hold the table's writer lease; waits (saying for whom) while another writer has it.

    Within one process, a compaction (which adds no rows and records no offsets: Delta lets it commit beside
    appends) shares the lease with the one writer of offsets there, so a job's micro-batch never waits for
    its own background compaction, while every other process still waits for both. Two writers of offsets
    never share it: each reads which offsets the table holds and then writes the rest.
    """
    key = lease_key(table)
    with _GUARD:
        shared = _HELD.get(key)
        if shared is not None and (compaction or shared.writers == 0):
            _count(shared, compaction, +1)
        else:
            shared = None
    if shared is not None:
        try:
            yield
        finally:
            _let_go(table, holder, key, shared, compaction)
        return
    conn, row = _try_lock(table, holder, key)
    try:
        if not (row and row[0]):
            log.info("waiting for %s's writer lease, held by %s", table, holder_of(conn, key) or "another writer")
            started = time.monotonic()
            conn.execute("SELECT pg_advisory_lock(%s, %s)", (NAMESPACE, key))
            log.info("got %s's writer lease after %.1f s", table, time.monotonic() - started)
    except BaseException:
        conn.close()
        raise
    held = _Held(conn)
    with _GUARD:
        _count(held, compaction, +1)
        _HELD.setdefault(key, held)  # a thread of this process that took it meanwhile keeps its own
    try:
        yield
    finally:
        _let_go(table, holder, key, held, compaction)


def _try_lock(table: LakePath, holder: str, key: int) -> tuple[psycopg.Connection[Any], Any]:
    """A session for the lease (this process's last one for the table, if it is still up) and its try at it.

    A micro-batch a second must not pay a new Postgres session (a TCP and authentication round trip) each time.
    """
    with _GUARD:
        conn = _IDLE.pop(key, None)
    if conn is not None:
        try:
            return conn, _name_and_try(conn, holder, key)
        except psycopg.OperationalError:
            conn.close()  # Postgres restarted, or the session was cut while idle: a new one
    conn = _connect(table, holder)
    try:
        return conn, _name_and_try(conn, holder, key)
    except BaseException:
        conn.close()
        raise


def _name_and_try(conn: psycopg.Connection[Any], holder: str, key: int) -> Any:
    # One round trip: the session names its holder (what a waiter is told) and tries the lock.
    return conn.execute(
        "SELECT pg_try_advisory_lock(%s, %s), set_config('application_name', %s, false)",
        (NAMESPACE, key, f"cdcpipe {holder}"[:63]),
    ).fetchone()


def _count(held: _Held, compaction: bool, step: int) -> None:
    if compaction:
        held.compactions += step
    else:
        held.writers += step


def _let_go(table: LakePath, holder: str, key: int, held: _Held, compaction: bool) -> None:
    """Leave the lease: the last user unlocks it; each checks that it was still held, or says it was lost."""
    with _GUARD:
        _count(held, compaction, -1)
        last = held.writers + held.compactions == 0
        if last and _HELD.get(key) is held:
            del _HELD[key]
    try:
        if last:
            row = held.conn.execute("SELECT pg_advisory_unlock(%s, %s)", (NAMESPACE, key)).fetchone()
        else:
            row = held.conn.execute(
                "SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                "pid = pg_backend_pid() AND classid = %s::oid AND objid = %s::oid",
                (NAMESPACE & 0xFFFFFFFF, key & 0xFFFFFFFF),
            ).fetchone()
    except BaseException as exc:
        if last:
            held.conn.close()
        if isinstance(exc, psycopg.OperationalError):
            raise LeaseLostError(
                f"{table}: the writer lease's Postgres session ended while {holder} held it ({exc}); another "
                "writer may have written meanwhile. Nothing is lost: restart, and the table's applied offsets say "
                "what it holds"
            ) from exc
        raise
    held_to_the_end = bool(row and row[0])
    if last:
        with _GUARD:
            kept = held_to_the_end and _IDLE.setdefault(key, held.conn) is held.conn
        if not kept:
            held.conn.close()
    if not held_to_the_end:
        raise LeaseLostError(f"{table}: {holder} no longer held the writer lease when it let go; restart it")
