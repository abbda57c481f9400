"""The relay's batches: rows taken from the outbox and produced to Kafka, until Kafka acknowledges them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psycopg
from confluent_kafka import KafkaError, Message

from outbox_relay.kafka import RECORD_OVERHEAD_BYTES


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
class Batch:
    """Rows removed in `conn`'s open transaction and produced to Kafka, until Kafka acknowledged them."""

    conn: psycopg.Connection[Any]
    rows: list[Row]
    began: float
    taken: float
    dead: list[DeadLetter] = field(default_factory=list)
    outstanding: int = 0
    failures: list[tuple[Row, Message, KafkaError]] = field(default_factory=list)
    fatal: bool = False
    open: bool = True

    def on_delivery(self, row: Row) -> Callable[[KafkaError | None, Message], None]:
        """The delivery callback of one row's record.

        It names the row itself: librdkafka hands a refused record back without the headers it was sent with.
        """

        def delivered(error: KafkaError | None, message: Message) -> None:
            self.outstanding -= 1
            if error is not None:
                self.failures.append((row, message, error))
                self.fatal = self.fatal or error.fatal()

        return delivered

    def roll_back(self) -> None:
        if self.open:
            self.open = False
            self.conn.execute("ROLLBACK")


def free_connection(conns: list[psycopg.Connection[Any]], in_flight: Sequence[Batch]) -> psycopg.Connection[Any]:
    """The first connection no batch in flight holds a transaction on."""
    return next(c for c in conns if all(batch.conn is not c for batch in in_flight))


def record_bytes(row: Row) -> int:
    """The record's size in Kafka, within RECORD_OVERHEAD_BYTES: UTF-8 bytes, encoding only what is not ASCII."""
    size = RECORD_OVERHEAD_BYTES
    for text in (row.payload or "", row.aggregateid, row.id, row.type, row.type_version):
        size += len(text) if text.isascii() else len(text.encode())
    return size
