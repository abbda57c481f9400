"""Errors of the streaming stage."""

from __future__ import annotations

from dataclasses import dataclass

from ground.errors import CdcpipeError


@dataclass(frozen=True)
class Gap:
    """Offsets [first, first_available) of one partition: needed by the job, deleted by retention."""

    topic: str
    partition: int
    first: int
    first_available: int


class StreamingError(CdcpipeError):
    """A streaming job or its Spark session could not do what was asked."""


class SparkJarsMissingError(StreamingError):
    """The Kafka source or Delta jars are not installed where the session looks for them."""


class ContractPatternError(StreamingError):
    """A contract's `pattern` is one Java's regex (which Spark checks with) cannot compile."""


class KafkaUnreachableError(StreamingError):
    """Kafka did not answer a request for partitions or offsets."""

    def __init__(self, bootstrap: str, reason: str) -> None:
        super().__init__(f"cannot read topics or offsets from Kafka at {bootstrap}: {reason}")


class ReduceError(StreamingError):
    """A worker could not read its partition's range."""


class MissingTopicsError(StreamingError):
    """A job reads topics the cluster does not have; it is refused rather than left to die in Spark."""

    def __init__(self, job: str, topics: list[str]) -> None:
        self.topics = topics
        super().__init__(
            f"job {job} reads {', '.join(topics)}, which the cluster does not have (it creates no topic on first "
            "use), or which the job's principal may not DESCRIBE (Kafka answers both alike): declare each in a "
            "topic file (in CDCPIPE_TOPICS_DIR) with the jobs' principal among its `consumers` and run "
            "`cdcpipe topics apply`, then submit again"
        )


class TopicChangedError(StreamingError):
    """A topic is not the one (or has not the partitions) the job's table holds offsets of."""


class DataLossError(StreamingError):
    """The job would have to skip records that retention deleted; it does not start."""

    def __init__(self, job: str, gaps: list[Gap], checkpoint: str) -> None:
        lines = [
            f"  {g.topic}[{g.partition}]: offsets {g.first}..{g.first_available - 1} are gone "
            f"({g.first_available - g.first} records); the first offset still available is {g.first_available}"
            for g in gaps
        ]
        super().__init__(
            f"job {job} cannot resume without skipping records retention deleted before it read them:\n"
            + "\n".join(lines)
            + "\nNothing was skipped: the job did not start. To proceed, either rebuild from what is retained "
            f"(`cdcpipe jobs replay {job} --swap`: a new table from the earliest retained offsets; the old one and "
            f"{checkpoint} stay as they are), or restore the missing records into the topic. Raise the topic's "
            "retention.ms so a stopped job has time to come back."
        )
        self.gaps = gaps


class PositionError(StreamingError):
    """A SPEC that does not parse, or a range Kafka cannot serve as asked."""


class BelowRetentionError(PositionError):
    """The range starts at offsets that retention already deleted."""


class SchemaChangeError(StreamingError):
    """The source table's columns changed in a way the job's on_schema_change policy says to stop on."""


class PoisonCeilingError(StreamingError):
    """So many records in a row failed the write on their values that the job, not the records, is at fault."""
