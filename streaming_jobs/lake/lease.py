"""One writer at a time per Delta table, across processes and machines: a lease held in Postgres.

The streaming job, a backfill, a replay's catch-up, `jobs optimize` and `jobs accept-topics` each hold the
table's lease for the whole read-check-write of a batch (reading which offsets the table holds, then
writing the rest), so two writers never both decide to apply the same records. It is also what makes Delta
safe on S3: Delta's S3 log store (S3SingleDriverLogStore) writes commit N with a plain PUT, so two writers
committing the same version at once would leave only the last one's; the lease keeps our writers' commits
in turn, and only one of them ever computes version N.

The lease is a session-level advisory lock (`pg_advisory_lock`) on a connection of its own: Postgres
releases it when the session ends, so a writer that crashes or is killed hands over at once, and nothing
on the lake (no lock file an object store could not make atomic) has to be cleaned up.

A writer that neither ends nor works (its host cut off, its process frozen, its machine hung) would keep the
session, and so the lease, for the kernel's two hours: TCP keepalives do not notice a frozen process, whose
kernel still answers them. So the lease's session ends itself after IDLE_TIMEOUT_S without a query
(Postgres' `idle_session_timeout`), and a thread of the holder's process runs one every HEARTBEAT_S: a live
holder keeps its lease through a batch of any length, a silent one loses it within IDLE_TIMEOUT_S, and the
next writer takes over. The writer that was silent learns of it before it commits: `ensure_held` (called
right before a batch's Delta commits) and the release both check that the session still holds the lease,
and fail loudly (`LeaseLostError`) if not; a streaming job then restarts its query (streaming_jobs.run.
runner) and re-reads what the table holds. The window left is the commit itself: a writer frozen between
`ensure_held` and the end of its Delta write, for longer than IDLE_TIMEOUT_S, while another writer commits.
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

from ground.errors import ConfigError
from streaming_jobs.errors import StreamingError
from streaming_jobs.lake.paths import LakePath

log = logging.getLogger(__name__)

NAMESPACE = 0x63647063  # pg_advisory_lock(namespace, key): 'cdpc', apart from the relay's leader locks
IDLE_TIMEOUT_S = 20  # a lease's session ends after this long without a query: a silent holder's lease goes
HEARTBEAT_S = 5.0  # how often a holder's process queries each lease session it holds
LOCK_WAIT_STEP_S = 5  # a waiter says again who holds the lease this often, until the writer's lease_wait_s
# Whether this session holds the advisory lock (namespace, key).
_HOLDS = (
    "SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
    "pid = pg_backend_pid() AND classid = %s::oid AND objid = %s::oid"
)


class LeaseLostError(StreamingError):
    """The writer's Postgres session ended while it held a table's lease."""


class LeaseUnavailableError(StreamingError):
    """The Postgres of the writer leases cannot be reached: no writer may start a write."""


class LeaseWaitError(StreamingError):
    """Another writer held the table's lease for longer than this writer's `lease_wait_s`."""


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
            # This side notices a Postgres that went silent (a cut network) within about 25 s.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            # Postgres ends the session of a holder that went silent: see the module's docstring.
            options=f"-c idle_session_timeout={IDLE_TIMEOUT_S * 1000}",
        )
    except psycopg.OperationalError as exc:
        raise LeaseUnavailableError(
            f"cannot reach the Postgres that holds the tables' writer leases (CDCPIPE_LEASE_PG_DSN): {exc}"
        ) from exc


def holder_of(conn: psycopg.Connection[Any], key: int) -> str:
    """Who holds the lease now: its session's name, host and role ('' when nobody does).

    An advisory lock needs no privilege, so any role that may connect could take a lease: a holder of a role
    other than this writer's (and no superuser) is said to be a stranger, with the fix.
    """
    row = conn.execute(
        "SELECT a.application_name, a.client_addr::text, a.usename, a.pid, a.usename = current_user "
        "OR coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = a.usename), false) "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid AND l.objid = %s::oid",
        (NAMESPACE & 0xFFFFFFFF, key & 0xFFFFFFFF),
    ).fetchone()
    if row is None:
        return ""
    said = f"{row[0] or 'a session'} ({row[1] or 'local'}, pid {row[3]}, role {row[2]})"
    if not row[4]:
        said += (
            f", a STRANGER: not the writers' role; no writer of this table can commit while it holds the lease. End "
            f"that session (pg_terminate_backend({row[3]}) as a superuser)"
        )
    return said


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
            _wait(conn, table, key)
    except BaseException:
        conn.close()
        raise
    held = _Held(conn)
    with _GUARD:
        _count(held, compaction, +1)
        _HELD.setdefault(key, held)  # a thread of this process that took it meanwhile keeps its own
        _start_heartbeat()
    try:
        yield
    finally:
        _let_go(table, holder, key, held, compaction)


def _wait(conn: psycopg.Connection[Any], table: LakePath, key: int) -> None:
    """Queue for the lease, saying who holds it every LOCK_WAIT_STEP_S, until the writer's lease_wait_s is up."""
    limit = table.access.lease_wait_s if table.access else 900.0
    started = time.monotonic()
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{LOCK_WAIT_STEP_S}s",))
    try:
        while True:
            holder = holder_of(conn, key) or "another writer"
            waited = time.monotonic() - started
            if waited >= limit:
                raise LeaseWaitError(
                    f"{table}: waited {waited:.0f} s for the writer lease, held by {holder}: raise lease_wait_s "
                    "(CDCPIPE_LEASE_WAIT_S) if that writer is only slow, or stop it (`cdcpipe jobs status` shows "
                    f"what runs; a writer whose host died loses the lease within {IDLE_TIMEOUT_S} s)"
                )
            log.info("waiting for %s's writer lease, held by %s (%.0f s so far)", table, holder, waited)
            try:
                conn.execute("SELECT pg_advisory_lock(%s, %s)", (NAMESPACE, key))
            except psycopg.errors.LockNotAvailable:
                continue
            log.info("got %s's writer lease after %.1f s", table, time.monotonic() - started)
            return
    finally:
        if not conn.closed:
            conn.execute("SELECT set_config('lock_timeout', '0', false)")


def ensure_held(table: LakePath, holder: str) -> None:
    """Right before a commit: fail (`LeaseLostError`) unless this process still holds the table's lease."""
    key = lease_key(table)
    with _GUARD:
        held = _HELD.get(key)
    if held is None:
        raise LeaseLostError(f"{table}: {holder} is about to commit without holding the writer lease")
    try:
        row = held.conn.execute(_HOLDS, (NAMESPACE & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
    except psycopg.OperationalError as exc:
        raise LeaseLostError(
            f"{table}: the writer lease's Postgres session ended before {holder} committed ({_first(exc)}); "
            "nothing was committed. Restart it: the table's applied offsets say what it holds"
        ) from exc
    if not (row and row[0]):
        raise LeaseLostError(f"{table}: {holder} no longer holds the writer lease; nothing was committed")


def _first(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


_heartbeat: threading.Thread | None = None


def _start_heartbeat() -> None:
    """Start (once per process, under _GUARD) the thread that keeps this process's lease sessions from idling out."""
    global _heartbeat
    if _heartbeat is None or not _heartbeat.is_alive():
        _heartbeat = threading.Thread(target=_beat, name="cdcpipe-lease-heartbeat", daemon=True)
        _heartbeat.start()


def _beat() -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        with _GUARD:
            sessions = [held.conn for held in _HELD.values()]
        for conn in sessions:
            if conn.closed:
                continue  # let go of meanwhile
            try:
                conn.execute("SELECT 1")
            except psycopg.Error as exc:  # lost: the holder's ensure_held or release says so, where it matters
                log.warning("a writer lease's Postgres session failed its heartbeat: %s", _first(exc))


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
            row = held.conn.execute(_HOLDS, (NAMESPACE & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
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
