"""Which failed tasks are restarted, when, and when no more (connectors.heal; a stand-in for Connect's REST API)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.config import ConnectSettings
from connectors.heal import Healer, transient

REFUSED = (
    "org.apache.kafka.connect.errors.ConnectException: An exception occurred in the change event producer.\n"
    "Caused by: org.postgresql.util.PSQLException: Connection to 127.0.0.1:5432 refused. Check that the hostname "
    "and port are correct and that the postmaster is accepting TCP/IP connections.\n"
    "Caused by: java.net.ConnectException: Connection refused"
)
SHUTTING_DOWN = "io.debezium.DebeziumException: Couldn't obtain encoding\nCaused by: org.postgresql.util.PSQLException: FATAL: the database system is shutting down"
REFUSED_LOGIN = (
    'org.postgresql.util.PSQLException: FATAL: password authentication failed for user "cdcpipe_capture"\n'
    "Caused by: java.net.SocketException: Connection reset"
)
DATA = "io.debezium.DebeziumException: Database error\nCaused by: java.lang.IllegalArgumentException: Column 'gen' not found in result set"


@pytest.mark.parametrize(
    ("trace", "expected"),
    [(REFUSED, True), (SHUTTING_DOWN, True), (REFUSED_LOGIN, False), (DATA, False), (None, False), ("", False)],
    ids=["refused", "shutting down", "a password refused", "a data error", "no trace", "empty"],
)
def test_only_a_fault_of_the_moment_is_transient(trace: str | None, expected: bool) -> None:
    assert transient(trace) is expected


class Connect:
    """Connect's answers: each task's state and trace, and the restarts asked of it."""

    def __init__(self) -> None:
        self.tasks: dict[tuple[str, int], tuple[str, str | None]] = {}
        self.restarts: list[tuple[str, int]] = []

    def expanded(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for (name, task), (state, trace) in self.tasks.items():
            found.setdefault(name, {"status": {"tasks": []}})["status"]["tasks"].append(
                {"id": task, "state": state, "trace": trace}
            )
        return found

    def restart_task(self, name: str, task: int) -> None:
        self.restarts.append((name, task))


def test_a_task_failed_on_a_lost_connection_is_restarted_with_backoff_up_to_the_ceiling() -> None:
    now = [0.0]
    settings = ConnectSettings(heal_restarts_max=3, heal_backoff_s=10, heal_backoff_max_s=15, heal_settled_s=100)
    healer = Healer(settings, clock=lambda: now[0])
    connect = Connect()
    connect.tasks = {("tables", 0): ("FAILED", REFUSED), ("bad", 0): ("FAILED", DATA), ("ok", 0): ("RUNNING", None)}

    def tick_at(t: float) -> list[tuple[str, int]]:
        now[0] = t
        return healer.tick(connect)  # type: ignore[arg-type]

    assert tick_at(0) == [("tables", 0)]  # at once; the data error never
    assert tick_at(5) == []  # 10 s after the first restart
    assert tick_at(10) == [("tables", 0)]
    assert tick_at(20) == []  # then 20 s, capped at 15
    assert tick_at(25) == [("tables", 0)]
    assert healer.tasks[("tables", 0)].exhausted is False
    assert tick_at(1000) == [], "three restarts in a row: the ceiling"
    assert healer.tasks[("tables", 0)].exhausted is True
    assert healer.tasks[("tables", 0)].total == 3
    assert healer.tasks[("bad", 0)].total == 0
    assert "Connection refused" in healer.tasks[("tables", 0)].last_trace  # the deepest cause

    # Mended by hand: once it has run heal_settled_s, a new transient fault gets its restarts again.
    connect.tasks[("tables", 0)] = ("RUNNING", None)
    tick_at(1010)
    tick_at(1110)
    assert healer.tasks[("tables", 0)].exhausted is False
    connect.tasks[("tables", 0)] = ("FAILED", SHUTTING_DOWN)
    assert tick_at(1120) == [("tables", 0)]
    assert healer.tasks[("tables", 0)].total == 4

    # A task that failed again soon after its restart counts on in the same row.
    connect.tasks[("tables", 0)] = ("RUNNING", None)
    tick_at(1125)
    connect.tasks[("tables", 0)] = ("FAILED", REFUSED)
    assert tick_at(1135) == [("tables", 0)]
    assert healer.tasks[("tables", 0)].restarts == 2

    # A connector deleted is forgotten.
    del connect.tasks[("tables", 0)]
    tick_at(1200)
    assert ("tables", 0) not in healer.tasks


def test_no_restart_when_told_none() -> None:
    healer = Healer(ConnectSettings(heal_restarts_max=0))
    connect = Connect()
    connect.tasks = {("tables", 0): ("FAILED", REFUSED)}
    assert healer.tick(connect) == []  # type: ignore[arg-type]
    assert connect.restarts == []
