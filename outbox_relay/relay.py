"""The outbox relay: outbox rows -> Kafka, in the wire format of Debezium's Outbox Event Router.

One batch, in one Postgres transaction:
  1. DELETE the oldest visible rows (by `seq`) RETURNING them: they are locked, and invisible to nobody
     else, until the transaction ends;
  2. produce them to Kafka (idempotent producer, acks=all) and wait until Kafka acknowledged every one;
  3. move rows that can never be published to the dead-letter table, and COMMIT.
A crash before the COMMIT rolls the DELETE back: the rows are sent again (the event id lets consumers drop
the copy); nothing acknowledged-but-lost, nothing lost. If Kafka does not acknowledge, the transaction rolls
back and the batch is retried with backoff.

With a backlog, batches overlap (see `Relay._serve`): each is taken on a connection of its own, leaving out
the rows of the batches still in flight, and produced after them. Kafka keeps the producer's order, and a
batch commits only after the one before it, so per-aggregate order holds; if one fails, all roll back and
are sent again.

Only one relay publishes: the one holding a session advisory lock on the outbox. Others wait as standbys
and take the lock over the moment Postgres ends the leader's session (its process died, or its connection).
The leader sleeps on LISTEN: the outbox's NOTIFY trigger wakes it at commit; the poll interval is a fallback.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from psycopg import sql

from outbox_relay import leader, sessions
from outbox_relay.backlog import BacklogProbe
from outbox_relay.batches import Batch, DeadLetter, Refusal, Row, free_connection, record_bytes
from outbox_relay.config import RelaySettings
from outbox_relay.errors import KafkaUnavailableError, PublishStalledError
from outbox_relay.kafka import (
    PERMANENT_ERRORS,
    SIZE_ERRORS,
    STALLING_ERRORS,
    producer_config,
    stall_cause,
)
from outbox_relay.metrics import RelayMetrics
from outbox_relay.sql import (
    bury_sql,
    dead_aggregates_sql,
    dead_params,
    overtake_sql,
    take,
    write_status_sql,
)
from outbox_relay.stalls import Stalls
from outbox_relay.topics import TopicTargets
from outbox_relay.wakeups import Wakeups
from schemas.config import OutboxNames

log = logging.getLogger("cdcpipe.relay")


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
        self._topics = TopicTargets(
            settings,
            AdminClient(settings.kafka.client_config(logger=log)),
        )
        # Aggregates with a dead letter no later event of theirs has been published after yet.
        self._dead_aggregates: set[tuple[str, str]] = set()
        self._stalls = Stalls(settings.backoff_max_s)
        self._bury = bury_sql(names)
        self._overtake = overtake_sql(names)
        self._status = write_status_sql(names)

    # --- the loop ---------------------------------------------------------------------------------------

    def run(self) -> None:
        """Be the leader (or wait to become it) and publish until stopped; survive Postgres outages."""
        backoff = sessions.Backoff(self.settings.backoff_max_s)
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
                    self._dead_aggregates = self._read_dead_aggregates(conn)
                    self._write_status(conn)  # what this relay knows now; a stall is said again at once if it holds
                    with self._connect() as first, self._connect() as second, self._connect() as third:
                        self._serve(conn, [first, second, third])
            except psycopg.OperationalError as exc:
                self.metrics.errors.labels("postgres").inc()
                delay = backoff.next()
                log.warning(
                    "postgres unreachable or connection lost (%s); retrying in %.1fs", sessions.one_line(exc), delay
                )
                self.stop.wait(delay)
            finally:
                self.metrics.leader.set(0)
        remaining = self._producer.flush(self.settings.delivery_timeout_s)
        log.info("relay stopped%s", f" ({remaining} messages unacknowledged)" if remaining else "")

    def _connect(self) -> psycopg.Connection[Any]:
        return sessions.connect(self.settings)

    def _check_outbox(self, conn: psycopg.Connection[Any]) -> None:
        sessions.check_outbox_usable(conn, self.names)

    def _read_dead_aggregates(self, conn: psycopg.Connection[Any]) -> set[tuple[str, str]]:
        rows = conn.execute(dead_aggregates_sql(self.names)).fetchall()
        return {(str(kind), str(aggregate)) for kind, aggregate in rows}

    def _lead(self, conn: psycopg.Connection[Any]) -> bool:
        """Wait until this relay holds the outbox's leader lock; False if stopped first."""
        if not leader.wait_for_lock(conn, self.names, self.stop, self.settings.standby_retry_s):
            return False
        self.metrics.leader.set(1)
        return True

    def _serve(self, lead: psycopg.Connection[Any], conns: list[psycopg.Connection[Any]]) -> None:
        """Publish batches until stopped. `lead` holds the leader lock and LISTENs; batches are taken on `conns`.

        Caught up, one batch at a time: take, produce, wait for Kafka, commit, sleep until a NOTIFY. Behind
        (a full batch), three overlap: as soon as batch N+1 is taken, a thread takes batch N+2 on the third
        connection, while the main thread produces batch N+1 and finishes batch N (Kafka's acknowledgement,
        the COMMIT). Postgres spends most of a batch's time in its DELETE, during which the relay would
        otherwise only wait.

        No batch is taken on `lead`: a take goes through libpq directly (see `take`), and notifications that
        arrived meanwhile would wait in libpq's queue, unseen by psycopg's `notifies()` until the next one.
        Busy or not, `lead`'s notifications are read at every take and every wait (see `Wakeups`).
        """
        lead.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.names.notify_channel)))
        wakeups = Wakeups(lead, self.stop)
        kafka_backoff = sessions.Backoff(self.settings.backoff_max_s)
        backlog = BacklogProbe(self.settings, self.names, self.metrics, stop_when=self.stop)
        backlog.start()
        in_flight: deque[Batch] = deque()  # produced, not yet committed; oldest first
        ahead: Future[Batch | None] | None = None  # the next take, running on the taker thread
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="cdcpipe-relay-take") as taker:
                while not self.stop.is_set():
                    try:
                        if ahead is not None:
                            batch, ahead = ahead.result(), None
                        else:
                            self._check_stalls(wakeups)
                            wakeups.before_take()
                            batch = self._take(free_connection(conns, in_flight), in_flight, self._waiting())
                        if batch is not None:
                            in_flight.append(batch)
                            if len(batch.rows) == self.settings.batch_size:
                                # Before producing: Postgres removes the next batch while this one is produced.
                                wakeups.before_take()
                                ahead = taker.submit(
                                    self._take, free_connection(conns, in_flight), list(in_flight), self._waiting()
                                )
                            self._produce(batch)
                        # The newest batch stays in flight only while the next one is being taken.
                        while len(in_flight) > (1 if ahead is not None else 0):
                            self._finish(in_flight[0], wakeups)
                            in_flight.popleft()
                        kafka_backoff.reset()
                    except KafkaUnavailableError as exc:
                        waiting = (
                            self._types_of(exc.topic, in_flight, ahead)
                            if isinstance(exc, PublishStalledError)
                            else set()
                        )
                        self._roll_back(ahead, in_flight)
                        ahead = None
                        if isinstance(exc, PublishStalledError) and waiting:
                            # Only the events of that topic wait; the next take leaves them out, the rest flows.
                            self._stall(conns[0], exc, waiting)
                            log.error(
                                "%s. The events of aggregate types %s wait for it; every other topic keeps flowing",
                                exc,
                                sorted(waiting),
                            )
                            continue
                        delay = kafka_backoff.next()
                        if isinstance(exc, PublishStalledError):
                            log.error("%s. Nothing leaves the outbox meanwhile; retrying in %.1fs", exc, delay)
                        else:
                            self.metrics.errors.labels("kafka").inc()
                            log.warning("%s; the batch stays in the outbox, retrying in %.1fs", exc, delay)
                        wakeups.pause(delay)
                        continue
                    if ahead is None:
                        wakeups.sleep(self.settings.poll_interval_s)
                # Stopping: what Kafka has is finished; a batch taken but not yet produced goes back.
                self._roll_back(ahead, deque())
                ahead = None
                while in_flight:
                    self._finish(in_flight[0], wakeups)
                    in_flight.popleft()
        finally:
            backlog.stop()

    def _types_of(self, topic: str, in_flight: Sequence[Batch], ahead: Future[Batch | None] | None) -> set[str]:
        """The aggregate types of the batches in hand (the taker's too) whose events go to `topic`."""
        batches = [*in_flight, *([taken] if ahead is not None and (taken := ahead.result()) else [])]
        kinds = {row.aggregatetype for batch in batches for row in batch.rows}
        return {kind for kind in kinds if self.settings.topic_for(kind) == topic}

    def _waiting(self) -> frozenset[str]:
        """The aggregate types a take must leave in the outbox now: their topic is stalled."""
        return self._stalls.waiting_types()

    def _stall(self, conn: psycopg.Connection[Any], exc: PublishStalledError, waiting: set[str]) -> None:
        """Hold `waiting` back; say where everybody looks: the metric, and the status row `relay status` reads."""
        self.metrics.errors.labels("stalled").inc()
        self.metrics.stalled.labels(exc.topic).set(1)
        self._topics.forget(exc.topic)
        self._stalls.add(exc.topic, exc.cause, waiting)
        self._write_status(conn)

    def _check_stalls(self, wakeups: Wakeups) -> None:
        """Check each stalled topic again when its backoff says so; take its events again once Kafka would."""
        for topic in self._stalls.due():
            wakeups.read()  # a metadata request may take seconds: the leader's session hears from it meanwhile
            try:
                self._topics.check(topic)
                self._topics.max_record_bytes(topic)
            except PublishStalledError as exc:
                self._stalls.add(topic, exc.cause, set())
                continue
            except KafkaUnavailableError:
                continue  # Kafka itself: the batches say so; the topic is checked again later
            self._stalls.clear(topic)
            self.metrics.stalled.remove(topic)
            log.info("publishing to %s resumed: its events leave again, oldest first", topic)
            # On a connection of its own: the batch connections may hold batches in flight, or the taker's.
            with self._connect() as conn:
                self._write_status(conn)

    def _write_status(self, conn: psycopg.Connection[Any]) -> None:
        """The status row: every stalled topic (`stalls`), the first of them also in the columns older tools read."""
        first = next(iter(self._stalls), None)
        conn.execute(
            self._status,
            {
                "topic": first.topic if first else None,
                "reason": first.reason if first else None,
                "since": first.since if first else None,
                "stalls": self._stalls.as_json(),
            },
        )

    def _roll_back(self, ahead: Future[Batch | None] | None, in_flight: deque[Batch]) -> None:
        """Put every batch not committed back into the outbox (once the taker is done with its own)."""
        taken = ahead.result() if ahead is not None else None
        if taken is not None:
            taken.roll_back()
        while in_flight:
            in_flight.popleft().roll_back()

    # --- one batch ---------------------------------------------------------------------------------------

    def _take(self, conn: psycopg.Connection[Any], in_flight: Sequence[Batch], waiting: frozenset[str]) -> Batch | None:
        """Open a transaction on `conn` and remove the next rows, but those in flight or of a `waiting` type.

        None if there are none. Runs on the taker thread too: it touches only `conn` and its arguments.
        """
        began = time.perf_counter()
        seqs = [row.seq for batch in in_flight for row in batch.rows]
        taken = take(conn, self.names, self.settings.batch_size, seqs, waiting)
        rows = sorted(map(Row._make, taken))  # seq first, unique
        if not rows:
            conn.execute("COMMIT")
            return None
        return Batch(conn, rows, began, time.perf_counter())

    def _produce(self, batch: Batch) -> None:
        """Hand every row to the producer; rows that can never be published become the batch's dead letters.

        Every topic the batch needs is checked before the first record is produced: a topic that cannot take
        records yet (missing, or an ACL lacking) stalls the whole batch, and none of it is sent twice.
        """
        targets = {kind: self._topics.target(kind) for kind in {row.aggregatetype for row in batch.rows}}
        producer = self._producer
        rechecked: set[str] = set()
        for row in batch.rows:
            target = targets[row.aggregatetype]
            if isinstance(target, Refusal):
                batch.dead.append(DeadLetter(row, target.reason, target.kind))
                continue
            topic, limit = target
            size = record_bytes(row)
            if size > limit and row.aggregatetype not in rechecked:
                # The limit may have been raised since it was read (to let a redriven record through).
                rechecked.add(row.aggregatetype)
                limit = self._topics.max_record_bytes(topic)
                targets[row.aggregatetype] = self._topics.remember(row.aggregatetype, (topic, limit))
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
                        topic,
                        value=row.payload,
                        key=row.aggregateid,
                        headers=headers,
                        on_delivery=batch.on_delivery(row),
                    )
                    batch.outstanding += 1
                    break
                except BufferError:
                    producer.poll(0.05)  # the local queue is full: let deliveries drain it
                except KafkaException as exc:
                    error: KafkaError = exc.args[0]
                    if error.fatal():
                        # An idempotent producer in a fatal state refuses everything from now on.
                        self._producer = self._new_producer()
                        raise KafkaUnavailableError(
                            f"the producer hit a fatal error ({error.name()}: {error.str()}) and was replaced"
                        ) from exc
                    if error.code() in STALLING_ERRORS:
                        self._topics.forget(topic)
                        raise PublishStalledError(topic, stall_cause(topic, error)) from exc
                    # Refused here, by the producer itself: this record alone, so a size error is its own.
                    if error.code() not in PERMANENT_ERRORS | SIZE_ERRORS:
                        raise KafkaUnavailableError(f"Kafka refused a record for now: {error.name()}") from exc
                    batch.dead.append(DeadLetter(row, f"Kafka refused the record: {error}", "refused"))
                    break

    def _finish(self, batch: Batch, wakeups: Wakeups) -> None:
        """Wait until Kafka acknowledged the batch, bury its dead letters and COMMIT the removal."""
        deadline = time.monotonic() + self.settings.delivery_timeout_s + 5
        while batch.outstanding > 0 and not batch.fatal:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._producer.poll(min(left, 1.0))
            wakeups.read()
        rows = batch.rows
        if batch.fatal:
            # An idempotent producer in a fatal state refuses everything from now on: start a fresh one.
            self._producer = self._new_producer()
            raise KafkaUnavailableError("the producer hit a fatal error and was replaced")
        if batch.outstanding > 0:
            raise KafkaUnavailableError(f"Kafka did not acknowledge {batch.outstanding} of {len(rows)} records in time")
        acked_at = time.time()
        stalled = [(m, e) for _, m, e in batch.failures if e.code() in STALLING_ERRORS]
        if stalled:
            message, error = stalled[0]
            self._topics.forget(str(message.topic()))
            raise PublishStalledError(str(message.topic()), stall_cause(str(message.topic()), error))
        too_large = {str(m.topic()) for _, m, e in batch.failures if e.code() in SIZE_ERRORS}
        if too_large:
            for topic in too_large:
                self._topics.forget(topic)
            raise KafkaUnavailableError(
                f"Kafka refused records of {sorted(too_large)} as too large: reading the topics' "
                "max.message.bytes again, the batch is retried and only records above it become dead letters"
            )
        retry = [(m, e) for _, m, e in batch.failures if e.code() not in PERMANENT_ERRORS]
        if retry:
            message, error = retry[0]
            raise KafkaUnavailableError(
                f"{len(retry)} of {len(rows)} records not acknowledged "
                f"(first: {message.topic()}: {error.name()}: {error.str()})"
            )
        dead = batch.dead
        for row, _, error in batch.failures:
            dead.append(DeadLetter(row, f"Kafka rejected the record: {error.name()}: {error.str()}", "rejected"))
        acked = time.perf_counter()
        if dead:
            with batch.conn.cursor() as cur:
                cur.executemany(self._bury, [dead_params(d) for d in dead])
            self._dead_aggregates.update((d.row.aggregatetype, d.row.aggregateid) for d in dead)
        if self._dead_aggregates:
            self._mark_overtaken(batch, dead)
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

    def _mark_overtaken(self, batch: Batch, dead: list[DeadLetter]) -> None:
        """Mark the dead letters of aggregates this batch publishes a later event of (see `relay redrive`).

        Runs in the batch's transaction, so a dead letter is marked exactly when the later event is published.
        """
        dead_seqs = {d.row.seq for d in dead}
        later: dict[tuple[str, str], int] = {}
        for row in batch.rows:
            key = (row.aggregatetype, row.aggregateid)
            if key in self._dead_aggregates and row.seq not in dead_seqs:
                later[key] = row.seq  # rows are in seq order: the last one is the latest
        if not later:
            return
        kinds, ids, seqs = zip(*((k, i, s) for (k, i), s in later.items()), strict=True)
        batch.conn.execute(self._overtake, (list(kinds), list(ids), list(seqs)))
        # Their dead letters up to now are marked; a later one is added back when it is buried.
        self._dead_aggregates.difference_update(later)

    def _new_producer(self) -> Producer:
        return Producer({**producer_config(self.settings), "logger": log})
