"""Refuse to resume a job whose next offsets Kafka's retention already deleted: loud, before any work.

Spark's `failOnDataLoss=true` stops a running query on the same condition; this check runs at start so the
message can say exactly which offsets are gone and what the user can do, and nothing is half-applied.
"""

from __future__ import annotations

from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import DataLossError, Gap
from streaming_jobs.jobs.locations import Location
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.offsets import KafkaPositions
from streaming_jobs.once.checkpoints import committed_offsets


def gaps(settings: JobsSettings, where: Location) -> list[Gap]:
    """Partitions where the checkpoint's next offset is below the earliest offset Kafka still has."""
    reached = committed_offsets(where.checkpoint)
    if not reached and where.starting_offsets:
        # A rewind's or replay's new checkpoint: where it was told to start.
        reached = {(t, int(p)): o for t, parts in where.starting_offsets.items() for p, o in parts.items()}
    if not reached:
        return []  # a new checkpoint starts at the earliest retained offset: nothing can be skipped
    with KafkaPositions(settings.kafka) as kafka:
        low = kafka.watermarks(sorted({topic for topic, _ in reached}), missing_ok=True).low
    found = [
        Gap(topic, partition, offset, low[(topic, partition)])
        for (topic, partition), offset in sorted(reached.items())
        if (topic, partition) in low and offset < low[(topic, partition)]
    ]
    return found


def check(settings: JobsSettings, spec: JobSpec, where: Location) -> None:
    """Raise DataLossError naming every gap, if there is one."""
    found = gaps(settings, where)
    if found:
        raise DataLossError(spec.name, found, str(where.checkpoint))
