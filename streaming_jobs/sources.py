"""A job's Kafka topics must exist before it starts: the cluster creates none on first use."""

from __future__ import annotations

from schemas.topics import missing_topics
from streaming_jobs.config import SparkSettings
from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs import JobSpec


class MissingTopicsError(StreamingError):
    """A job reads topics the cluster does not have; it is refused rather than left to die in Spark."""

    def __init__(self, job: str, topics: list[str]) -> None:
        self.topics = topics
        super().__init__(
            f"job {job} reads {', '.join(topics)}, which the cluster does not have (it creates no topic on first "
            "use): declare each in a topic file (schemas/topics/*.toml) and run `cdcpipe topics apply`, then "
            "submit again"
        )


def missing(settings: SparkSettings, spec: JobSpec) -> list[str]:
    """The job's topics the cluster does not have."""
    return missing_topics({"bootstrap.servers": settings.kafka_bootstrap}, spec.topics)


def require_topics(settings: SparkSettings, spec: JobSpec) -> None:
    """Refuse a job whose topics do not all exist, naming them and the command that creates them."""
    absent = missing(settings, spec)
    if absent:
        raise MissingTopicsError(spec.name, absent)
