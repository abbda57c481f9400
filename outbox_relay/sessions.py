"""The relay's Postgres sessions (how it connects, what it checks first) and its retry backoff."""

from __future__ import annotations

import os
from typing import Any

import psycopg

from outbox_relay.config import RelaySettings
from outbox_relay.errors import RelayError
from outbox_relay.sql import check_outbox
from schemas.config import OutboxNames


def connect(settings: RelaySettings) -> psycopg.Connection[Any]:
    """A session of the relay: autocommit, named after its process, keepalives that notice a dead server."""
    conn = psycopg.connect(
        settings.dsn(),
        autocommit=True,
        application_name=f"cdcpipe-relay:{os.getpid()}",
        # The relay's commits only remove rows Kafka already holds. Not waiting for their WAL flush takes
        # a disk sync off every batch; if Postgres crashes before the flush, the removal is lost as a
        # whole and those rows are simply sent again, which at-least-once delivery allows (the event id
        # lets consumers drop the copy). A row can never be lost this way, only resent.
        options="-c synchronous_commit=off",
        connect_timeout=5,
        # Notice a dead server (or a cut network) in about 15s, not the kernel's two hours.
        keepalives_idle=5,
        keepalives_interval=2,
        keepalives_count=5,
    )
    return conn


def check_outbox_usable(conn: psycopg.Connection[Any], names: OutboxNames) -> None:
    """Refuse to start without an outbox, with the fix, rather than fail at the first take."""
    exists, complete = check_outbox(conn, names)
    if not exists:
        raise RelayError(
            f"the outbox table {names.outbox_schema}.{names.outbox_table} does not exist in this database (or "
            "the relay's role may not use its schema): create it with `cdcpipe schema apply`, or point "
            "CDCPIPE_OUTBOX_SCHEMA / CDCPIPE_OUTBOX_TABLE at yours"
        )
    if not complete:
        status = f"{names.outbox_schema}.{names.relay_status_table}"
        raise RelayError(
            f"the outbox {names.outbox_schema}.{names.outbox_table} was made by an older `cdcpipe schema apply`: "
            f"this relay needs {status} with its `stalls` column and the dead letters' `overtaken` column. Run "
            "`cdcpipe schema apply` "
            "again (it only adds what is missing), then start the relay"
        )


class Backoff:
    """Exponential backoff from 0.2s up to a ceiling, reset after a success."""

    def __init__(self, ceiling_s: float) -> None:
        self._ceiling = ceiling_s
        self._next = 0.2

    def reset(self) -> None:
        """Back to the shortest wait, after a success."""
        self._next = 0.2

    def next(self) -> float:
        """The wait before this retry; the next one waits twice as long, up to the ceiling."""
        delay = self._next
        self._next = min(self._next * 2, self._ceiling)
        return delay


def one_line(exc: BaseException) -> str:
    """An error's text on one line (a log line per retry)."""
    return " ".join(str(exc).split())
