"""A job's waits while Kafka fails its query: 5 s, doubling to 30 s, until the ceiling; Kafka answering ends it."""

from __future__ import annotations

from streaming_jobs.run.outage import Outage, is_kafka_trouble


def test_the_waits_double_up_to_thirty_seconds_until_the_ceiling() -> None:
    outage = Outage(ceiling_s=100)
    waits = [outage.wait(now) for now in (1000, 1005, 1015, 1035, 1065, 1095)]
    assert waits == [5, 10, 20, 30, 30, 30]
    assert outage.lasted(1095) == 95
    assert outage.wait(1101) is None, "past the ceiling the job stops"


def test_kafka_answering_ends_the_outage_and_the_next_starts_afresh() -> None:
    outage = Outage(ceiling_s=100)
    for now in (0, 5, 15, 35, 65):
        outage.wait(now)
    outage.over()
    assert outage.lasted(500) == 0
    assert outage.wait(500) == 5
    assert outage.wait(599) == 10, "measured from the new outage's first failure, not the old one's"


def test_only_a_passing_fault_of_kafka_is_waited_out() -> None:
    text = "Caused by: org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment."
    assert is_kafka_trouble(text)
    assert not is_kafka_trouble("org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized")
    assert not is_kafka_trouble("org.apache.kafka.common.errors.SaslAuthenticationException: bad password")
    assert not is_kafka_trouble("java.lang.IllegalStateException: Cannot fetch offset 4 (failOnDataLoss)")
