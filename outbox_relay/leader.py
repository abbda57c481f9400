"""One relay publishes per outbox: a Postgres advisory lock, held by its session, elects it.

The lock dies with the session, so a relay that crashes or loses its connection hands over at once; a
standby waits, trying again every `standby_retry_s`.

A leader that neither ends nor works (its process frozen, its host hung or cut off) would keep its session,
and the lock, for the kernel's two hours: TCP keepalives do not notice a frozen process, whose kernel still
answers them. So once it leads, the session ends itself after IDLE_TIMEOUT_S without a query (Postgres'
`idle_session_timeout`), and the leader queries it at least every HEARTBEAT_S (outbox_relay.wakeups, at every
take and every wait): a live leader keeps the lock, a silent one loses it within IDLE_TIMEOUT_S and a standby
takes over. Woken, the old leader finds its session gone at its next query and becomes a standby. Rows it had
sent but not yet deleted are sent again by the new leader: a resend, which delivery at least once allows.

An advisory lock needs no privilege: any role that may connect could take this one and keep every relay
waiting. Its holder's role is checked instead (`holder`): a relay's role may delete from the outbox, and a
holder whose role may not is named, with the fix, by every standby (once), `relay status` and `cdcpipe status`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from schemas.config import OutboxNames

log = logging.getLogger("cdcpipe.relay")

IDLE_TIMEOUT_S = 20  # a leader's session ends after this long without a query: a frozen leader's lock goes
HEARTBEAT_S = 5.0  # a leader queries its session at least this often


# The lock's two keys (pg_locks shows each as an unsigned oid): cdcpipe's relays, and the outbox.
NAMESPACE = "cdcpipe.relay"


def lock_key(names: OutboxNames) -> str:
    """The outbox's own key, as `hashtext` takes it."""
    return f"{names.outbox_schema}.{names.outbox_table}"


@dataclass(frozen=True)
class Holder:
    """The session holding an outbox's leader lock."""

    pid: int
    role: str
    application: str
    client: str | None
    relay: bool  # its role may delete from the outbox, as a relay's must; False: a stranger holds the lock

    def said(self) -> str:
        where = f", from {self.client}" if self.client else ""
        return f"{self.application or 'a session'} (pid {self.pid}, role {self.role}{where})"

    def stranger(self, outbox: str) -> str:
        """What to say of a holder that is no relay, and the fix (a message, not a query)."""
        return (
            f"the leader lock of {outbox} is held by {self.said()}, whose role may not remove the outbox's rows: no "
            f"relay publishes while it holds it. End that session (pg_terminate_backend({self.pid}) as a superuser) "
            f"and keep role {self.role} from taking it again"
        )


def holder(conn: psycopg.Connection[Any], names: OutboxNames) -> Holder | None:
    """Who holds the outbox's leader lock now (None: nobody)."""
    row = conn.execute(
        "SELECT a.pid, a.usename, a.application_name, host(a.client_addr), "
        "coalesce(pg_catalog.has_table_privilege(a.usesysid, pg_catalog.to_regclass(%s), 'DELETE'), false) "
        "FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a USING (pid) "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
        "AND l.classid::bigint = (pg_catalog.hashtext(%s)::bigint & 4294967295) "
        "AND l.objid::bigint = (pg_catalog.hashtext(%s)::bigint & 4294967295)",
        (
            sql.Identifier(names.outbox_schema, names.outbox_table).as_string(conn),
            NAMESPACE,
            lock_key(names),
        ),
    ).fetchone()
    return Holder(int(row[0]), str(row[1]), str(row[2] or ""), row[3], bool(row[4])) if row else None


def wait_for_lock(conn: psycopg.Connection[Any], names: OutboxNames, stop: threading.Event, retry_s: float) -> bool:
    """Block until this session holds the outbox's leader lock (True), or `stop` is set first (False)."""
    key, said = lock_key(names), None
    while not stop.is_set():
        row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))", (NAMESPACE, key)).fetchone()
        if row and row[0]:
            conn.execute("SELECT set_config('idle_session_timeout', %s, false)", (f"{IDLE_TIMEOUT_S}s",))
            log.info("leader for %s: publishing", key)
            return True
        found = holder(conn, names)
        if found is not None and not found.relay and said != found.pid:
            log.error("standby for %s: %s", key, found.stranger(key))
            said = found.pid
        elif said is None:
            log.info("standby for %s: another relay is publishing; taking over when it stops", key)
            said = 0
        stop.wait(retry_s)
    return False
