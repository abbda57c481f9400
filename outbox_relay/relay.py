"""The outbox relay: outbox rows -> Kafka, in the wire format of Debezium's Outbox Event Router.

One batch, in one Postgres transaction:
  1. DELETE the oldest visible rows (by `seq`) RETURNING them: they are locked, and invisible to nobody
     else, until the transaction ends;
  2. produce them to Kafka (idempotent producer, acks=all) and wait until Kafka acknowledged every one;
  3. move rows that can never be published to the dead-letter table, and COMMIT.
A crash before the COMMIT rolls the DELETE back: the rows are sent again (the event id lets consumers drop
the copy); nothing acknowledged-but-lost, nothing lost. If Kafka does not acknowledge, the transaction rolls
back and the batch is retried with backoff.

With a backlog, batches overlap (see `Relay._serve`): the next two are taken while the last ones are produced,
each on a connection of its own, leaving out the rows of the batches still in flight, and produced after them.
Kafka keeps the producer's order, and a batch commits only after the one before it, so per-aggregate order
holds; if one fails, all roll back and are sent again.

Only one relay publishes: the one holding a session advisory lock on the outbox. Others wait as standbys
and take the lock over the moment Postgres ends the leader's session (its process died, or its connection).
The leader sleeps on LISTEN: the outbox's NOTIFY trigger wakes it at commit; the poll interval is a fallback.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psycopg
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]
from psycopg import pq, sql
from psycopg.adapt import Transformer

from outbox_relay.config import RelaySettings
from outbox_relay.errors import KafkaUnavailableError, RelayError
from outbox_relay.metrics import RelayMetrics
from schemas.config import OutboxNames

log = logging.getLogger("cdcpipe.relay")

# The producer refuses anything larger than this itself (librdkafka's message.max.bytes).
PRODUCER_MAX_MESSAGE_BYTES = 1_000_000
# Record overhead beyond key, value and headers (batch and record headers), so the size check is safe.
RECORD_OVERHEAD_BYTES = 256
LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Behind, a pair of batches is being finished, the next pair produced and the pair after it taken: 2 connections each.
TAKE_CONNECTIONS = 6

# Errors after which the same message will never be accepted: the row becomes a dead letter.
PERMANENT_ERRORS = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_EXCEPTION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._INVALID_ARG,
}


class Row(NamedTuple):
    """One outbox row as the relay reads it (a tuple: 2,000 of them are built per full batch)."""

    seq: int
    id: str
    aggregatetype: str
    aggregateid: str
    type: str
    type_version: str
    payload: str | None
    created_epoch: float


@dataclass(frozen=True)
class Refusal:
    """Why rows of an aggregate type can never be published (`kind` labels the metric)."""

    reason: str
    kind: str


@dataclass(frozen=True)
class DeadLetter:
    """A row that goes to the dead-letter table instead of Kafka."""

    row: Row
    reason: str
    kind: str


@dataclass
class _Batch:
    """Rows removed in `conn`'s open transaction and produced to Kafka, until Kafka acknowledged them."""

    conn: psycopg.Connection[Any]
    rows: list[Row]
    began: float
    taken: float
    dead: list[DeadLetter] = field(default_factory=list)
    outstanding: int = 0
    failures: list[tuple[Message, KafkaError]] = field(default_factory=list)
    fatal: bool = False
    open: bool = True

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        self.outstanding -= 1
        if error is not None:
            self.failures.append((message, error))
            self.fatal = self.fatal or error.fatal()

    def roll_back(self) -> None:
        if self.open:
            self.open = False
            self.conn.execute("ROLLBACK")


# A plain DELETE ... RETURNING, sorted by the relay: the server-side ORDER BY needed a CTE that copied the
# batch once more, and cost about 15% of the statement.
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


def take(
    conn: psycopg.Connection[Any], names: OutboxNames, limit: int, in_flight: Iterable[int] = ()
) -> list[tuple[Any, ...]]:
    """BEGIN, and remove at most `limit` rows (`take_sql`), leaving out the seqs in `in_flight` (`take_after_sql`).

    The transaction stays open: the caller COMMITs once Kafka holds the rows, or rolls back.

    BEGIN and the DELETE go to Postgres as one query string through libpq's PQexec, which psycopg runs
    without holding Python's GIL. Through a cursor, a thread needs the GIL back after the BEGIN and for each
    chunk of the 2 MB result, and waits for it whenever another thread runs Python (the relay's main thread,
    producing): 3-4 ms for the BEGIN alone, in a 20 ms DELETE. So the values are literals in the text, merged
    by psycopg's client-side quoting: the limit, and the seqs as one array literal (which also beats psycopg's
    list dumper: 2 ms in Python for the 4,000 seqs of two batches).

    Not a prepared statement run by EXECUTE: Postgres then stores the DELETE's result twice before sending it,
    and serial takes ran 7-10% slower. Planning the literal statement costs about 0.1 ms.
    """
    seqs = _array_literal(in_flight)
    statement, params = (take_after_sql(names), (seqs, limit)) if seqs != "{}" else (take_sql(names), (limit,))
    return _begin_and_remove(conn, statement, params)


@functools.cache
def plan_sql(names: OutboxNames) -> sql.Composed:
    """The seqs of the oldest visible rows but those in %(in_flight)s, at most twice %(limit)s, as two array literals.

    The first holds the older %(limit)s seqs, the second the rest ('{}' if none). `NOT IN` a subquery and
    `ARRAY(...)`, as in `take_after_sql`, so no statistics can turn it into a join. `OFFSET 0` keeps Postgres
    from pulling the subquery up, which would scan the outbox once for each half.
    """
    outbox = sql.Identifier(names.outbox_schema, names.outbox_table)
    return sql.SQL(
        "SELECT s[1:%(limit)s]::text, s[%(limit)s + 1:]::text FROM (SELECT ARRAY(SELECT seq FROM {outbox} "
        "WHERE seq NOT IN (SELECT unnest(%(in_flight)s::bigint[])) ORDER BY seq LIMIT 2 * %(limit)s) AS s "
        "OFFSET 0) AS plan"
    ).format(outbox=outbox)


@functools.cache
def remove_sql(names: OutboxNames) -> sql.Composed:
    """Remove the rows whose seqs are in the array literal %s and return them (in no order)."""
    outbox = sql.Identifier(names.outbox_schema, names.outbox_table)
    return sql.SQL("DELETE FROM {outbox} WHERE seq = ANY(%s::bigint[]) {returning}").format(
        outbox=outbox, returning=_RETURNING
    )


def take_two(
    first: psycopg.Connection[Any],
    second: psycopg.Connection[Any],
    names: OutboxNames,
    limit: int,
    in_flight: Iterable[int],
    helper: Executor,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Remove the next twice `limit` rows but the seqs in `in_flight`, in two halves on two connections at once.

    Returns (older half, newer half): every seq of the first is below every seq of the second, so producing
    the first, then the second, keeps seq order. A half that removed rows leaves its transaction open, as
    `take` does; one that removed none, or failed, leaves none. If either fails, both roll back.

    Why two: Postgres spends most of a batch's time in its DELETE, half of it turning the jsonb payloads
    into text, on one core. Two DELETEs use both of a small machine's cores: with Postgres alone, 155k-176k
    rows/s against 115k-121k on one connection (`bench/relay_bench.py`). They cannot share the work by
    themselves: two takes of "the oldest rows" would wait on each other's row locks. So the seqs are read
    first (an index-only scan, a few milliseconds), then each connection removes its half by seq. Both halves come from the plan's single snapshot: a late commit
    that it missed (a lower seq) is taken by the next take, and cannot have a later event of its aggregate
    in either half, since the outbox trigger makes a writer of that aggregate wait for the late commit
    before drawing its seq.
    """
    params = {"in_flight": _array_literal(in_flight), "limit": limit}
    plan = first.pgconn.exec_(psycopg.ClientCursor(first).mogrify(plan_sql(names), params).encode())
    if plan.status != pq.ExecStatus.TUPLES_OK:
        raise _take_failed(first, plan)
    older, newer = (plan.get_value(0, column) or b"{}" for column in (0, 1))
    if older == b"{}":
        return [], []
    later = helper.submit(_remove_half, second, names, newer.decode()) if newer != b"{}" else None
    try:
        older_rows = _remove_half(first, names, older.decode())
    except BaseException:
        if later is not None and later.exception() is None and later.result():
            second.execute("ROLLBACK")
        raise
    try:
        newer_rows = later.result() if later is not None else []
    except BaseException:
        if older_rows:
            first.execute("ROLLBACK")
        raise
    return older_rows, newer_rows


def _remove_half(conn: psycopg.Connection[Any], names: OutboxNames, seqs: str) -> list[tuple[Any, ...]]:
    """BEGIN and remove the rows of `seqs` (an array literal); a transaction stays open only if rows were removed."""
    rows = _begin_and_remove(conn, remove_sql(names), (seqs,))
    if not rows:
        conn.execute("ROLLBACK")
    return rows


def _begin_and_remove(conn: psycopg.Connection[Any], statement: sql.Composed, params: Any) -> list[tuple[Any, ...]]:
    """BEGIN and run `statement` (a DELETE ... RETURNING) in one PQexec: see `take` for why."""
    query = b"BEGIN; " + psycopg.ClientCursor(conn).mogrify(statement, params).encode()
    result = conn.pgconn.exec_(query)
    if result.status != pq.ExecStatus.TUPLES_OK:
        raise _take_failed(conn, result)
    loader = Transformer.from_context(conn)
    loader.set_pgresult(result)
    return loader.load_rows(0, result.ntuples, tuple)


def _array_literal(seqs: Iterable[int]) -> str:
    """Postgres's text form of a bigint array: cheaper than psycopg's list dumper for thousands of seqs."""
    return "{" + ",".join(map(str, seqs)) + "}"


def _take_failed(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> psycopg.Error:
    """The error of a take that failed; its transaction is rolled back if the connection still stands."""
    if conn.pgconn.status != pq.ConnStatus.OK:
        message = result.error_message.decode(errors="replace").strip() or "no message"
        return psycopg.OperationalError(f"the connection was lost while taking a batch: {message}")
    if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
        conn.execute("ROLLBACK")
    return psycopg.errors.error_from_result(result, encoding=conn.info.encoding)


def producer_config(settings: RelaySettings) -> dict[str, str | int | float | bool]:
    """The relay's producer: idempotent, acks=all, so a retried send can neither duplicate nor reorder."""
    return {
        "bootstrap.servers": settings.kafka_bootstrap,
        "client.id": f"cdcpipe-relay-{os.getpid()}",
        "enable.idempotence": True,
        "acks": "all",
        # The Java client's partitioner (librdkafka's own default hashes keys differently): an aggregate lands in
        # the partition Debezium's Connect worker puts it in, so switching publishers keeps its order.
        "partitioner": "murmur2_random",
        "linger.ms": settings.linger_ms,
        "message.timeout.ms": int(settings.delivery_timeout_s * 1000),
        "message.max.bytes": PRODUCER_MAX_MESSAGE_BYTES,
        "queue.buffering.max.messages": max(100_000, 2 * settings.batch_size),
        # librdkafka leaves Nagle's algorithm on (the Java client turns it off): a small produce request could
        # wait behind the broker's delayed ACK, milliseconds added to a batch that is waiting for its ack.
        "socket.nagle.disable": True,
    }


class Relay:
    """The leader loop. `run()` returns when `stop` is set; the batch in flight is finished first."""

    def __init__(
        self,
        settings: RelaySettings,
        names: OutboxNames,
        *,
        stop: threading.Event | None = None,
        metrics: RelayMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.names = names
        self.stop = stop or threading.Event()
        self.metrics = metrics or RelayMetrics()
        self._producer = self._new_producer()
        self._admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap, "logger": log})  # type: ignore[dict-item]
        self._topic_limits: dict[str, tuple[str, int] | Refusal] = {}
        outbox = sql.Identifier(names.outbox_schema, names.outbox_table)
        dead = sql.Identifier(names.outbox_schema, names.dead_letter_table)
        self._bury = sql.SQL(
            "INSERT INTO {dead} (seq, id, aggregatetype, aggregateid, type, type_version, payload, created_at, reason) "
            "VALUES (%s, %s::uuid, %s, %s, %s, %s::integer, %s::jsonb, to_timestamp(%s), %s)"
        ).format(dead=dead)
        self._backlog = sql.SQL(
            "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 FROM {}"
        ).format(outbox)
        self._lock_key = f"{names.outbox_schema}.{names.outbox_table}"

    # --- the loop ---------------------------------------------------------------------------------------

    def run(self) -> None:
        """Be the leader (or wait to become it) and publish until stopped; survive Postgres outages."""
        backoff = _Backoff(self.settings.backoff_max_s)
        # Everything made so far (modules, settings, the producer) lives as long as the process. Frozen, the
        # collector's full passes no longer walk it: such a pass was a pause of its own, paid by whichever
        # events were in flight.
        gc.collect()
        gc.freeze()
        while not self.stop.is_set():
            try:
                with self._connect() as conn:
                    self._check_outbox(conn)
                    if not self._lead(conn):
                        break
                    backoff.reset()
                    with ExitStack() as takers:
                        self._serve(conn, [takers.enter_context(self._connect()) for _ in range(TAKE_CONNECTIONS)])
            except psycopg.OperationalError as exc:
                self.metrics.errors.labels("postgres").inc()
                delay = backoff.next()
                log.warning("postgres unreachable or connection lost (%s); retrying in %.1fs", _one_line(exc), delay)
                self.stop.wait(delay)
            finally:
                self.metrics.leader.set(0)
        remaining = self._producer.flush(self.settings.delivery_timeout_s)
        log.info("relay stopped%s", f" ({remaining} messages unacknowledged)" if remaining else "")

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self.settings.pg_dsn.get_secret_value(),
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

    def _check_outbox(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse to start without an outbox, with the fix, rather than fail at the first take."""
        names = self.names
        row = conn.execute(
            "SELECT to_regclass(%s)", (sql.Identifier(names.outbox_schema, names.outbox_table).as_string(conn),)
        ).fetchone()
        if row is None or row[0] is None:
            raise RelayError(
                f"the outbox table {names.outbox_schema}.{names.outbox_table} does not exist in this database (or "
                "the relay's role may not use its schema): create it with `cdcpipe schema apply`, or point "
                "CDCPIPE_OUTBOX_SCHEMA / CDCPIPE_OUTBOX_TABLE at yours"
            )

    def _lead(self, conn: psycopg.Connection[Any]) -> bool:
        """Wait until this relay holds the outbox's leader lock; False if stopped first."""
        announced = False
        while not self.stop.is_set():
            row = conn.execute(
                "SELECT pg_try_advisory_lock(hashtext('cdcpipe.relay'), hashtext(%s))", (self._lock_key,)
            ).fetchone()
            if row and row[0]:
                log.info("leader for %s: publishing", self._lock_key)
                self.metrics.leader.set(1)
                return True
            if not announced:
                log.info("standby for %s: another relay is publishing; taking over when it stops", self._lock_key)
                announced = True
            self.stop.wait(self.settings.standby_retry_s)
        return False

    def _serve(self, lead: psycopg.Connection[Any], conns: list[psycopg.Connection[Any]]) -> None:
        """Publish batches until stopped. `lead` holds the leader lock and LISTENs; batches are taken on `conns`.

        Caught up, one batch at a time: take, produce, wait for Kafka, commit, sleep until a NOTIFY. Behind
        (a full batch), batches go two by two, and three pairs overlap: as soon as pair N+1 is taken, a thread
        takes pair N+2 (`take_two`, on two more connections), while the main thread produces pair N+1 and
        finishes pair N (Kafka's acknowledgement, the COMMITs). Postgres spends most of a batch's time in its
        DELETE, during which the relay would otherwise only wait.

        No batch is taken on `lead`: a take goes through libpq directly (see `take`), and notifications that
        arrived meanwhile would wait in libpq's queue, unseen by psycopg's `notifies()` until the next one.
        """
        lead.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.names.notify_channel)))
        kafka_backoff = _Backoff(self.settings.backoff_max_s)
        backlog = _BacklogProbe(self, stop_when=self.stop)
        backlog.start()
        in_flight: deque[_Batch] = deque()  # produced, not yet committed; oldest first
        ahead: Future[list[_Batch]] | None = None  # the next pair, being taken on the taker thread
        try:
            with (
                ThreadPoolExecutor(1, thread_name_prefix="cdcpipe-relay-take") as taker,
                ThreadPoolExecutor(1, thread_name_prefix="cdcpipe-relay-take-newer") as helper,
            ):
                while not self.stop.is_set():
                    try:
                        if ahead is not None:
                            taken, ahead = ahead.result(), None
                        else:
                            taken = self._take(_free(conns, in_flight, 1)[0], in_flight)
                        in_flight.extend(taken)
                        if taken and len(taken[-1].rows) == self.settings.batch_size:
                            # Before producing: Postgres removes the next pair while these are produced.
                            ahead = taker.submit(self._take_two, _free(conns, in_flight, 2), list(in_flight), helper)
                        for batch in taken:
                            self._produce(batch)
                        # The newest batches stay in flight only while the next ones are being taken.
                        while len(in_flight) > (len(taken) if ahead is not None else 0):
                            self._finish(in_flight[0])
                            in_flight.popleft()
                        kafka_backoff.reset()
                    except KafkaUnavailableError as exc:
                        self._roll_back(ahead, in_flight)
                        ahead = None
                        self.metrics.errors.labels("kafka").inc()
                        delay = kafka_backoff.next()
                        log.warning("%s; the batch stays in the outbox, retrying in %.1fs", exc, delay)
                        self.stop.wait(delay)
                        continue
                    if ahead is None:
                        self._sleep_until_rows(lead)
                # Stopping: what Kafka has is finished; a batch taken but not yet produced goes back.
                self._roll_back(ahead, deque())
                ahead = None
                while in_flight:
                    self._finish(in_flight[0])
                    in_flight.popleft()
        finally:
            backlog.stop()

    def _roll_back(self, ahead: Future[list[_Batch]] | None, in_flight: deque[_Batch]) -> None:
        """Put every batch not committed back into the outbox (once the taker is done with its own)."""
        for taken in ahead.result() if ahead is not None else []:
            taken.roll_back()
        while in_flight:
            in_flight.popleft().roll_back()

    def _sleep_until_rows(self, conn: psycopg.Connection[Any]) -> None:
        """Block on LISTEN until a NOTIFY (a commit into the outbox), the fallback interval, or stop.

        psycopg keeps notifications that arrived during a batch and yields them first, so a commit that
        happened while the relay was busy wakes it at once instead of being missed. One wake-up is enough
        for all of them.
        """
        deadline = time.monotonic() + self.settings.poll_interval_s
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # Slices of at most 0.5s, so a stop request is seen promptly.
            for _ in conn.notifies(timeout=min(left, 0.5), stop_after=1):
                break
            else:
                continue
            # The notifications queued behind this one (a commit each, while the last batch ran) announce
            # rows the next take gets anyway: left queued, each would wake the relay for an empty take.
            for _ in conn.notifies(timeout=0):
                pass
            return

    # --- one batch ---------------------------------------------------------------------------------------

    def _take(self, conn: psycopg.Connection[Any], in_flight: Sequence[_Batch]) -> list[_Batch]:
        """Open a transaction on `conn` and remove the next rows, but those in flight; [] if there are none."""
        began = time.perf_counter()
        rows = take(conn, self.names, self.settings.batch_size, _seqs(in_flight))
        if not rows:
            conn.execute("COMMIT")
            return []
        return [_Batch(conn, sorted(map(Row._make, rows)), began, time.perf_counter())]  # seq first, unique

    def _take_two(
        self, conns: Sequence[psycopg.Connection[Any]], in_flight: Sequence[_Batch], helper: Executor
    ) -> list[_Batch]:
        """As `_take`, two batches at once (`take_two`), oldest first.

        Runs on the taker thread: it touches only `conns` and its arguments.
        """
        first, second = conns
        began = time.perf_counter()
        halves = take_two(first, second, self.names, self.settings.batch_size, _seqs(in_flight), helper)
        taken = time.perf_counter()
        return [
            _Batch(conn, sorted(map(Row._make, rows)), began, taken)
            for conn, rows in zip((first, second), halves, strict=True)
            if rows
        ]

    def _produce(self, batch: _Batch) -> None:
        """Hand every row to the producer; rows that can never be published become the batch's dead letters."""
        producer = self._producer
        for row in batch.rows:
            target = self._topic_limits.get(row.aggregatetype) or self._resolve_topic(row.aggregatetype)
            if isinstance(target, Refusal):
                batch.dead.append(DeadLetter(row, target.reason, target.kind))
                continue
            topic, limit = target
            size = _record_bytes(row)
            if size > limit:
                batch.dead.append(
                    DeadLetter(
                        row,
                        f"record of about {size} bytes exceeds the {limit} bytes topic {topic} accepts "
                        "(max.message.bytes); shrink the payload or raise the topic's limit",
                        "too_large",
                    )
                )
                continue
            headers: list[tuple[str, str | bytes | None]] = [
                ("id", row.id),
                ("eventType", row.type),
                ("eventVersion", row.type_version),
            ]
            while True:
                try:
                    producer.produce(
                        topic, value=row.payload, key=row.aggregateid, headers=headers, on_delivery=batch.delivered
                    )
                    batch.outstanding += 1
                    break
                except BufferError:
                    producer.poll(0.05)  # the local queue is full: let deliveries drain it
                except KafkaException as exc:
                    batch.dead.append(DeadLetter(row, f"Kafka refused the record: {exc.args[0]}", "refused"))
                    break

    def _finish(self, batch: _Batch) -> None:
        """Wait until Kafka acknowledged the batch, bury its dead letters and COMMIT the removal."""
        deadline = time.monotonic() + self.settings.delivery_timeout_s + 5
        while batch.outstanding > 0 and not batch.fatal:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._producer.poll(min(left, 1.0))
        rows = batch.rows
        if batch.fatal:
            # An idempotent producer in a fatal state refuses everything from now on: start a fresh one.
            self._producer = self._new_producer()
            raise KafkaUnavailableError("the producer hit a fatal error and was replaced")
        if batch.outstanding > 0:
            raise KafkaUnavailableError(f"Kafka did not acknowledge {batch.outstanding} of {len(rows)} records in time")
        acked_at = time.time()
        retry = [(m, e) for m, e in batch.failures if e.code() not in PERMANENT_ERRORS]
        if retry:
            message, error = retry[0]
            raise KafkaUnavailableError(
                f"{len(retry)} of {len(rows)} records not acknowledged "
                f"(first: {message.topic()}: {error.name()}: {error.str()})"
            )
        dead = batch.dead
        if batch.failures:
            by_id = {row.id.encode(): row for row in rows}
            for message, error in batch.failures:
                event_id = dict(message.headers() or [])["id"]
                assert isinstance(event_id, bytes)  # noqa: S101 - the relay set it as bytes
                dead.append(
                    DeadLetter(by_id[event_id], f"Kafka rejected the record: {error.name()}: {error.str()}", "rejected")
                )
        acked = time.perf_counter()
        if dead:
            with batch.conn.cursor() as cur:
                cur.executemany(self._bury, [_dead_params(d) for d in dead])
        batch.open = False
        batch.conn.execute("COMMIT")
        committed = time.perf_counter()
        stage = self.metrics.stage_seconds
        stage.labels("take").observe(batch.taken - batch.began)
        stage.labels("ack").observe(acked - batch.taken)
        stage.labels("commit").observe(committed - acked)
        self.metrics.batches.inc()
        self.metrics.batch_size.observe(len(rows))
        self.metrics.published.inc(len(rows) - len(dead))
        dead_seqs = {d.row.seq for d in dead}
        self.metrics.publish_latency.observe_many(
            [acked_at - row.created_epoch for row in rows if row.seq not in dead_seqs]
        )
        for d in dead:
            self.metrics.dead_letters.labels(d.kind).inc()
            log.error("dead letter: outbox seq %d (event %s): %s", d.row.seq, d.row.id, d.reason)

    def _resolve_topic(self, aggregate_type: str) -> tuple[str, int] | Refusal:
        """The topic of an aggregate type and the largest record it takes; or why it can have none."""
        allowed = self.settings.allowed_aggregate_types
        topic = self.settings.topic_for(aggregate_type)
        result: tuple[str, int] | Refusal
        if allowed and aggregate_type not in allowed:
            result = Refusal(
                f"aggregate type {aggregate_type!r} is not in CDCPIPE_ALLOWED_AGGREGATE_TYPES "
                f"({sorted(allowed)}); add it there to publish these events",
                "not_allowed",
            )
        elif not LEGAL_TOPIC.fullmatch(topic):
            result = Refusal(
                f"aggregate type {aggregate_type!r} gives the topic name {topic!r}, which Kafka "
                "does not allow (letters, digits, '.', '_', '-'; at most 249)",
                "bad_topic",
            )
        else:
            result = (topic, self._max_record_bytes(topic))
        self._topic_limits[aggregate_type] = result
        return result

    def _max_record_bytes(self, topic: str) -> int:
        """The topic's max.message.bytes (the broker's default for a topic not created yet)."""
        resources = [ConfigResource(ResourceType.TOPIC, topic), ConfigResource(ResourceType.BROKER, "1")]
        limit = PRODUCER_MAX_MESSAGE_BYTES
        for resource, key in zip(resources, ("max.message.bytes", "message.max.bytes"), strict=True):
            try:
                configs = self._admin.describe_configs([resource], request_timeout=10)[resource].result()
            except KafkaException:
                continue  # no such topic yet (Kafka creates it on first produce): try the broker's default
            if key in configs:
                return min(limit, int(configs[key].value))
        return limit

    def _new_producer(self) -> Producer:
        return Producer({**producer_config(self.settings), "logger": log})

    def read_backlog(self, conn: psycopg.Connection[Any]) -> tuple[int, float]:
        row = conn.execute(self._backlog).fetchone()
        return (int(row[0]), float(row[1])) if row else (0, 0.0)


def _free(
    conns: list[psycopg.Connection[Any]], in_flight: Sequence[_Batch], count: int
) -> list[psycopg.Connection[Any]]:
    """The first `count` connections no batch in flight holds a transaction on."""
    free = [c for c in conns if all(batch.conn is not c for batch in in_flight)][:count]
    assert len(free) == count, "more batches in flight than TAKE_CONNECTIONS allows"  # noqa: S101 - a bug, not input
    return free


def _seqs(batches: Sequence[_Batch]) -> list[int]:
    return [row.seq for batch in batches for row in batch.rows]


def _record_bytes(row: Row) -> int:
    """The record's size in Kafka, within RECORD_OVERHEAD_BYTES: UTF-8 bytes, encoding only what is not ASCII."""
    size = RECORD_OVERHEAD_BYTES
    for text in (row.payload or "", row.aggregateid, row.id, row.type, row.type_version):
        size += len(text) if text.isascii() else len(text.encode())
    return size


def _dead_params(dead: DeadLetter) -> tuple[object, ...]:
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


class _BacklogProbe(threading.Thread):
    """Reads the backlog on a connection of its own, so a slow count never delays a batch."""

    def __init__(self, relay: Relay, stop_when: threading.Event) -> None:
        super().__init__(name="cdcpipe-relay-backlog", daemon=True)
        self._relay = relay
        self._halt = threading.Event()
        self._outer = stop_when

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        interval = self._relay.settings.backlog_interval_s
        conn: psycopg.Connection[Any] | None = None
        while not self._halt.is_set() and not self._outer.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self._relay.settings.pg_dsn.get_secret_value(),
                        autocommit=True,
                        application_name="cdcpipe-relay-backlog",
                        connect_timeout=5,
                    )
                count, age = self._relay.read_backlog(conn)
                self._relay.metrics.backlog.set(count)
                self._relay.metrics.backlog_age.set(age)
            except psycopg.Error:
                conn = None  # the main loop reports outages; here they only pause the gauge
            self._halt.wait(interval)
        if conn is not None:
            conn.close()


class _Backoff:
    """Exponential backoff from 0.2s up to a ceiling, reset after a success."""

    def __init__(self, ceiling_s: float) -> None:
        self._ceiling = ceiling_s
        self._next = 0.2

    def reset(self) -> None:
        self._next = 0.2

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._ceiling)
        return delay


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
