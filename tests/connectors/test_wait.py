"""`connectors apply` waits until what it changed runs, against a stand-in Connect (the real one: integration tests)."""

from __future__ import annotations

import httpx
import pytest

from connectors import commands
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.errors import ConnectError

DENIED = (
    "org.apache.kafka.connect.errors.ConnectException: org.apache.kafka.common.errors.TopicAuthorizationException: "
    "Not authorized to access topics: [mine.cdcpipe.debezium_heartbeat]\n\tat org.apache.kafka.connect.Foo(Foo.java:1)"
)


class Clock:
    """Time that passes only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def connect(states: list[tuple[float, str, str | None]], clock: Clock) -> ConnectClient:
    """A Connect whose one task is in the state of the last (from time, state, trace) reached."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/config"):
            return httpx.Response(200, json={"connector.class": "FileStreamSource", "name": "mine"})
        state, trace = next((s, t) for since, s, t in reversed(states) if clock.now >= since)
        if state == "UNKNOWN":  # created, not started by a worker yet: Connect has no status for it
            return httpx.Response(404, json={"error_code": 404, "message": "No status found for connector mine"})
        task = {"id": 0, "state": state, "worker_id": "w:8083", **({"trace": trace} if trace else {})}
        return httpx.Response(200, json={"connector": {"state": "RUNNING", "worker_id": "w:8083"}, "tasks": [task]})

    return ConnectClient(ConnectSettings.load(), transport=httpx.MockTransport(handler))


def wait(states: list[tuple[float, str, str | None]], timeout_s: float = 120) -> Clock:
    clock = Clock()
    commands.wait_running(
        connect(states, clock), ConnectSettings.load(), ["mine"], timeout_s=timeout_s, clock=clock, sleep=clock.sleep
    )
    return clock


@pytest.mark.parametrize("starts", [0, 3])
def test_a_task_that_stays_running_is_done_after_the_steady_time(starts: float) -> None:
    clock = wait([(0, "UNASSIGNED", None), (starts, "RUNNING", None)])
    assert starts + commands.STEADY_S <= clock.now <= starts + commands.STEADY_S + 1


def test_a_task_that_fails_after_it_ran_names_the_cause_and_the_fix() -> None:
    with pytest.raises(ConnectError) as failed:
        wait([(0, "RUNNING", None), (5, "FAILED", DENIED)])
    said = str(failed.value)
    assert said.startswith("connector mine: task 0 FAILED: org.apache.kafka.connect.errors.ConnectException")
    assert "Connect may not write topic(s) mine.cdcpipe.debezium_heartbeat" in said
    assert "CDCPIPE_TOPICS_DIR" in said
    assert "\tat " not in said  # one line, not the stack


def test_connects_own_wording_of_a_topic_it_may_not_describe_gets_the_same_fix() -> None:
    trace = (
        "org.apache.kafka.connect.errors.ConnectException: Not authorized to describe topic(s) "
        "'mine.public.orders' on the brokers 127.0.0.1:9092."
    )
    with pytest.raises(ConnectError, match=r"Connect may not write topic\(s\) mine\.public\.orders: declare them"):
        wait([(0, "FAILED", trace)])


def test_a_task_that_never_runs_is_reported_with_its_state_when_the_wait_ends() -> None:
    with pytest.raises(ConnectError, match=r"not RUNNING within 30s: mine RUNNING, tasks \['UNASSIGNED'\]"):
        wait([(0, "UNASSIGNED", None)], timeout_s=30)


def test_a_connector_connect_has_no_status_for_yet_is_waited_for() -> None:
    clock = wait([(0, "UNKNOWN", None), (2, "RUNNING", None)])
    assert 2 + commands.STEADY_S <= clock.now <= 2 + commands.STEADY_S + 1


def test_a_connector_no_worker_starts_is_named_when_the_wait_ends() -> None:
    with pytest.raises(ConnectError, match=r"not RUNNING within 30s: mine not started by any worker yet"):
        wait([(0, "UNKNOWN", None)], timeout_s=30)
