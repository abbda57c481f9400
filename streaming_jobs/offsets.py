"""The vocabulary of Kafka positions every part of a job shares, and the one place they are read from Kafka.

A partition is (topic, number); offsets are per partition. `KafkaPositions` reads partitions, watermarks and
offsets-for-time with the admin API; `TopicIdentity` tells a topic from one deleted and created again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from ground.kafka_client import KafkaSettings, unreachable_reason
from streaming_jobs.errors import KafkaUnreachableError, PositionError

Partition = tuple[str, int]
Offsets = dict[Partition, int]
Found = tuple[int, int]  # an offset and the timestamp (ms) of the record there


@dataclass(frozen=True)
class TopicIdentity:
    """Which topic a table's offsets are of, and how many partitions it had.

    Kafka gives a topic deleted and created again a new id: the same name then numbers other records.
    """

    topic_id: str
    partitions: int


@dataclass(frozen=True)
class Watermarks:
    """Per partition: the first offset retention keeps (low) and the next offset to be written (high)."""

    low: Offsets
    high: Offsets


class KafkaPositions:
    """Partitions, watermarks and offsets-for-time, from Kafka's admin API: the one place they are read.

    No consumer and no group: `AdminClient.list_offsets`, with `read_committed` isolation, so the latest
    offset is the last stable one, which is where the jobs' `read_committed` Kafka source stops too.
    """

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 10) -> None:
        self.timeout_s = timeout_s
        self.bootstrap = kafka.kafka_bootstrap
        self.admin = AdminClient(kafka.client_config())

    def __enter__(self) -> KafkaPositions:
        return self

    def __exit__(self, *_: object) -> None:
        return None  # the admin client has nothing to close

    def partitions(self, topics: Iterable[str], *, missing_ok: bool = False) -> list[Partition]:
        """Every partition of the topics; a topic that does not exist is an error unless `missing_ok`."""
        try:
            metadata = self.admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise KafkaUnreachableError(self.bootstrap, unreachable_reason(self.admin, exc)) from exc
        found: list[Partition] = []
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                if missing_ok:
                    continue
                raise PositionError(f"topic {topic} does not exist on the broker; nothing to read from it")
            found += [(topic, p) for p in sorted(meta.partitions)]
        return found

    def watermarks(self, topics: Iterable[str], *, missing_ok: bool = False) -> Watermarks:
        tps = self.partitions(topics, missing_ok=missing_ok)
        low = {tp: offset for tp, (offset, _) in self._list(tps, OffsetSpec.earliest()).items()}  # type: ignore[no-untyped-call]
        return Watermarks(low, self.latest(tps))

    def latest(self, partitions: list[Partition]) -> Offsets:
        """Per partition the next offset to be written, the last stable one (the jobs' sources stop there too)."""
        return {tp: offset for tp, (offset, _) in self._list(partitions, OffsetSpec.latest()).items()}  # type: ignore[no-untyped-call]

    def offsets_for_time(self, partitions: Iterable[Partition], timestamp_ms: int) -> dict[Partition, Found | None]:
        """Per partition the first record at or after the time: (offset, its timestamp); None where none is."""
        found = self._list(list(partitions), OffsetSpec.for_timestamp(timestamp_ms))
        return {tp: (offset, ts) if offset >= 0 else None for tp, (offset, ts) in found.items()}

    def _list(self, partitions: list[Partition], spec: OffsetSpec) -> dict[Partition, Found]:
        if not partitions:
            return {}
        asked = {TopicPartition(t, p): spec for t, p in partitions}
        try:
            futures = self.admin.list_offsets(
                asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self.timeout_s
            )
            return {(tp.topic, tp.partition): (f.result().offset, f.result().timestamp) for tp, f in futures.items()}
        except KafkaException as exc:
            raise KafkaUnreachableError(self.bootstrap, unreachable_reason(self.admin, exc)) from exc
