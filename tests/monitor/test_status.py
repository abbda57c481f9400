"""`cdcpipe status`'s lines from what each part says: the level, the reason, what shows more."""

from __future__ import annotations

from connectors.slots import SlotStatus
from monitor import status
from monitor.readings import Connector, Task, read
from outbox_relay.status import RelayStatus, TopicStall
from schemas.config import OutboxNames
from streaming_jobs.run import cluster, control

NAMES = OutboxNames()


def relay(**changes: object) -> RelayStatus:
    values: dict[str, object] = {
        "leader": None,
        "leader_is_a_stranger": False,
        "stalled_topic": None,
        "stalled_reason": None,
        "stalled_since": None,
        "stalls": [],
        "waiting": 0,
        "oldest_age_s": 0.0,
        "dead_letters": 0,
        "dead_letters_overtaken": 0,
    }
    values.update(changes)
    return RelayStatus(**values)  # type: ignore[arg-type]


def test_the_relay_is_ok_leading_fails_when_nobody_publishes_a_backlog_and_warns_of_dead_letters() -> None:
    [ok] = status._relay(
        relay(leader="cdcpipe-relay:7 (pid 9)", waiting=2), ["cdcpipe-relay:7", "cdcpipe-relay:8"], NAMES
    )
    assert ok.level == status.OK
    assert "1 standby" in ok.says
    [down] = status._relay(relay(waiting=5, oldest_age_s=90), [], NAMES)
    assert (down.level, down.more) == (status.FAIL, "cdcpipe relay run")
    assert "5 events waiting, the oldest 90s old" in down.says
    [idle] = status._relay(relay(), [], NAMES)
    assert idle.level == status.WARN
    lines = list(status._relay(relay(leader="r", dead_letters=3), ["r"], NAMES))
    assert [line.level for line in lines] == [status.OK, status.WARN]
    assert "redrive" in lines[1].more


def test_a_stalled_relay_fails_naming_the_topic() -> None:
    stall = TopicStall(topic="outbox.event.order", reason="no topic", since="now", waiting=4, aggregate_types=["order"])
    [line] = status._relay(relay(leader="r", stalls=[stall], waiting=4), ["r"], NAMES)
    assert line.level == status.FAIL
    assert "STALLED on topic outbox.event.order" in line.says
    # Its events gone since (seen: long after the relay stopped, "0 events waiting"): not a failure.
    over = TopicStall(topic="outbox.event.order", reason="no topic", since="then", waiting=0, aggregate_types=[])
    [line] = status._relay(relay(stalls=[over], stalled_topic="outbox.event.order"), [], NAMES)
    assert line.level != status.FAIL
    assert "STALLED" not in line.says


def test_connectors_fail_on_a_failed_task_warn_when_paused_or_behind_and_an_orphan_slot_is_named() -> None:
    connectors = [
        Connector("tables", "RUNNING", (Task(0, "FAILED", "ConnectException: publication missing"),), "s_tables"),
        Connector("outbox", "PAUSED", (Task(0, "PAUSED", None),), "s_outbox"),
        Connector("behind", "RUNNING", (Task(0, "RUNNING", None),), "s_behind"),
        Connector("fine", "RUNNING", (Task(0, "RUNNING", None),), "s_fine"),
    ]
    slots = [
        SlotStatus("s_tables", "pgoutput", False, 10, 0),
        SlotStatus("s_outbox", "pgoutput", False, 10, 0),
        SlotStatus("s_behind", "pgoutput", True, 5 << 30, 0),
        SlotStatus("s_fine", "pgoutput", True, 1024, 0),
        SlotStatus("s_orphan", "pgoutput", False, 2048, 0),
    ]
    lines = {line.part: line for line in status._connectors(connectors, slots, 1 << 30, slots_read=True)}
    assert lines["connector tables"].level == status.FAIL
    assert "publication missing" in lines["connector tables"].says
    assert "connectors restart tables" in lines["connector tables"].more
    assert lines["connector outbox"].level == status.WARN
    assert lines["connector behind"].level == status.WARN
    assert "5.0 GiB" in lines["connector behind"].says
    assert lines["connector fine"].level == status.OK
    assert lines["slot s_orphan"].level == status.WARN
    assert status.failed(list(lines.values()))
    assert not status.failed([lines["connector fine"]])


def test_a_part_that_does_not_answer_is_an_error_not_an_exception() -> None:
    def boom() -> int:
        raise ConnectionError("refused\nmore")

    reading = read(boom)
    assert reading.value is None
    assert reading.error == "ConnectionError: refused"


def job(**changes: object) -> control.JobStatus:
    values: dict[str, object] = {
        "name": "orders_mirror",
        "kind": "table_mirror",
        "table": "/lake/orders_mirror",
        "checkpoint": "/lake/_checkpoints/orders_mirror",
        "running": True,
        "pid": 42,
        "last_batch_id": 3,
        "input_rows_per_s": None,
        "processed_rows_per_s": None,
        "batch_duration_ms": None,
        "applied": 10,
        "dead_letters": 0,
        "lag": [],
        "missing_topics": [],
        "log_tail": [],
        "last_error": None,
    }
    values.update(changes)
    return control.JobStatus(**values)  # type: ignore[arg-type]


def test_a_job_without_progress_warns_then_fails_with_why() -> None:
    starved = cluster.parse(
        {
            "cores": 2,
            "coresused": 2,
            "activeapps": [
                {"id": "app-1", "name": "cdcpipe-job-orders_mirror", "cores": 0, "state": "WAITING"},
                {"id": "app-2", "name": "cdcpipe-job-big", "cores": 2, "state": "RUNNING"},
            ],
        }
    ).starved("orders_mirror")
    assert starved is not None
    assert "the workers' 2 cores (2 in use) are held by cdcpipe-job-big (2)" in starved
    assert status._job_line(job(), 42, "more").level == status.OK
    early = status._job_line(job(stalled=starved, running_s=30), 42, "more")
    assert (early.level, early.says.endswith(starved)) == (status.WARN, True)
    late = status._job_line(job(stalled=starved, running_s=control.NO_PROGRESS_S + 1), 42, "more")
    assert late.level == status.FAIL


def test_a_job_is_stalled_by_no_executor_or_by_records_and_no_batch() -> None:
    held = cluster.parse(
        {"cores": 2, "coresused": 1, "activeapps": [{"name": "cdcpipe-job-orders_mirror", "cores": 1}]}
    )
    assert held.starved("orders_mirror") is None
    assert held.starved("not_listed") is None, "not started yet, or gone: the job's own lag speaks for it"
    lag = [control.PartitionLag("t", 0, None, 50, 50)]
    waiting = control._progressing(job(last_batch_id=None, lag=lag), held, 200.0)
    assert waiting.stalled == "no batch done in 200 s with 50 records to read"
    assert waiting.stuck
    assert control._progressing(job(lag=lag), held, 200.0).stalled is None, "a batch done: progressing"
    assert control._progressing(job(last_batch_id=None), None, 200.0).stalled is None, "nothing to read"


def test_the_masters_web_ui_is_the_setting_or_the_masters_host() -> None:
    from streaming_jobs.config import JobsSettings

    given = JobsSettings.load(spark_master="local[2]", spark_master_ui_url="http://m:18080/")
    assert cluster.ui_url(given) is None, "a local master: no cluster to ask"
    derived = JobsSettings.load(spark_master="spark://10.0.0.5:7077", spark_master_ui_url=None)
    assert cluster.ui_url(derived) == "http://10.0.0.5:8080"
    given = JobsSettings.load(spark_master="spark://m:7077", spark_master_ui_url="http://m:18080/")
    assert cluster.ui_url(given) == "http://m:18080"
