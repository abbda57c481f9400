"""A job's Kafka topics: they must exist, and be the topics (and partitions) its table's offsets are of.

The cluster creates no topic on first use, so a job whose topic is missing is refused with the fix. A table
records, with the offsets it holds (streaming_jobs.once.applied), each topic's Kafka id and partition count. A
topic deleted and created again numbers its records from 0 under a new id: without the check, its records
would pass for applied ones and be dropped silently. Partitions added to a topic move keys to other
partitions, so a key's events before and after may be applied out of order. Both are refused until the
user says how to go on (`cdcpipe jobs accept-topics`, or a replay).

A job's Kafka credentials reach its executors, where a user's projection runs: a job refuses credentials that may
alter the cluster (a super user's) unless told otherwise, so the per-principal ACLs protect what they say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient  # type: ignore[attr-defined]

from streaming_jobs.config import JobsSettings
from streaming_jobs.errors import MissingTopicsError, StreamingError, TopicChangedError
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake.paths import LakePath
from streaming_jobs.offsets import Partition, TopicIdentity
from streaming_jobs.once import applied


def identities(settings: JobsSettings, job: str, topics: Iterable[str]) -> dict[str, TopicIdentity]:
    """Each topic's Kafka id and partition count; `MissingTopicsError` for topics the cluster lacks."""
    topics = list(topics)
    admin = AdminClient(settings.kafka.client_config())
    found: dict[str, TopicIdentity] = {}
    missing: list[str] = []
    for topic, future in admin.describe_topics(TopicCollection(topics), request_timeout=15).items():
        try:
            described = future.result()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            # A principal without DESCRIBE on a topic is told it is not authorized, whether it exists or not.
            if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                missing.append(topic)
                continue
            raise StreamingError(
                f"cannot describe topic {topic} ({error.str()}); check CDCPIPE_KAFKA_BOOTSTRAP and that the "
                "job's principal may describe it"
            ) from exc
        found[topic] = TopicIdentity(str(described.topic_id), len(described.partitions))
    if missing:
        raise MissingTopicsError(job, [t for t in topics if t in missing])
    return found


def missing(settings: JobsSettings, spec: JobSpec) -> list[str]:
    """The job's topics the cluster does not have."""
    try:
        identities(settings, spec.name, spec.topics)
    except MissingTopicsError as exc:
        return exc.topics
    return []


def check_principal(settings: JobsSettings, job: str) -> str:
    """The job's Kafka principal, refused if it may alter the cluster (a super user, or ALTER on the cluster)."""
    user = f"User:{settings.kafka.kafka_sasl_username}" if settings.kafka.kafka_sasl_username else "its principal"
    if settings.allow_kafka_superuser:
        return f"{user} (not checked: CDCPIPE_ALLOW_KAFKA_SUPERUSER)"
    admin = AdminClient(settings.kafka.client_config())
    try:
        cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=15).result()
    except KafkaException as exc:
        raise StreamingError(
            f"job {job}: cannot describe the Kafka cluster ({exc.args[0].str()}); check CDCPIPE_KAFKA_BOOTSTRAP and "
            "that the broker is up"
        ) from exc
    if AclOperation.ALTER in (cluster.authorized_operations or ()):
        source = settings.jobs_kafka_config or settings.kafka.kafka_config or "the CDCPIPE_KAFKA_* variables"
        raise StreamingError(
            f"job {job}: its Kafka principal ({user}, from {source}) may alter the cluster (a super user, or ALTER "
            "on the cluster): a job's credentials reach its executors, where projections run, and would bypass "
            "every ACL. Nothing was started. Give the jobs their own principal: CDCPIPE_JOBS_KAFKA_CONFIG=<its "
            "client file> (`cdcpipe stack env` names the stack's jobs user's). To run with these credentials "
            "anyway, knowingly: --allow-superuser (CDCPIPE_ALLOW_KAFKA_SUPERUSER=true)"
        )
    return f"{user} (may not alter the cluster)"


def check_topics(settings: JobsSettings, spec: JobSpec, table: LakePath) -> dict[str, TopicIdentity]:
    """The job's topics as they are now; refused if they are not those the table holds offsets of."""
    now = identities(settings, spec.name, spec.topics)
    held = applied.read(table).topics
    for topic, was in sorted(held.items()):
        current = now.get(topic)
        if current is None:
            continue
        if current.topic_id != was.topic_id:
            raise TopicChangedError(
                f"job {spec.name}: topic {topic} was deleted and created again (id {was.topic_id} -> "
                f"{current.topic_id}): its offsets start again at 0, and {table} holds offsets of the old topic, "
                "so the new topic's records would pass for applied ones. Nothing was applied. To read the new "
                f"topic from its start: `cdcpipe jobs accept-topics {spec.name}` (the table forgets the old "
                f"topic's offsets and the job rewinds to the new one's earliest); to rebuild the table from what "
                f"the topics hold now: `cdcpipe jobs replay {spec.name} --swap`"
            )
        if current.partitions != was.partitions:
            raise TopicChangedError(partitions_changed(spec.name, topic, was.partitions, current.partitions))
    return now


def partitions_changed(job: str, topic: str, was: int, now: int) -> str:
    """What to say of a topic whose partition count changed under a job."""
    return (
        f"job {job}: topic {topic} has {now} partitions, {was} when the job's table last wrote. Keys now hash to "
        "other partitions, so a key's events from before and after may be applied out of order. Nothing was "
        "applied. Once the job has applied everything written before the change (or if order across it does "
        f"not matter), `cdcpipe jobs accept-topics {job}` records the new count and the job goes on; to rebuild "
        f"the table instead: `cdcpipe jobs replay {job} --swap`"
    )


def check_partitions(job: str, topics: Mapping[str, TopicIdentity], ranges: Iterable[Partition]) -> None:
    """Refuse a batch that reads a partition added since the job checked its topics (Spark takes new ones)."""
    for topic, partition in ranges:
        known = topics.get(topic)
        if known is not None and partition >= known.partitions:
            raise TopicChangedError(partitions_changed(job, topic, known.partitions, partition + 1))
