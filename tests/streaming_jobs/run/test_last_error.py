"""What a dead job died of, in one line: written last to its driver's log, read back by `jobs status`."""

from __future__ import annotations

from ground.errors import CdcpipeError
from streaming_jobs.run import control
from streaming_jobs.run.query import one_line

SPARK_WRAPPED = """[STREAM_FAILED] Query [id = 1f, runId = 2e] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] \
An error occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the \
Python Proxy. Return Message: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "/work/streaming_jobs/run/runner.py", line 118, in each_batch
    done, dead = handle_batch(batch, ctx)
delta.exceptions.ConcurrentAppendException: Files were added to the root of the table by a concurrent update.
 SQLSTATE: 39000"""


def test_a_python_error_inside_sparks_wrapping_is_the_line_said() -> None:
    said = one_line(RuntimeError(SPARK_WRAPPED))
    assert said == (
        "delta.exceptions.ConcurrentAppendException: Files were added to the root of the table by a concurrent update."
    )


def test_our_error_is_its_message_on_one_line() -> None:
    assert one_line(CdcpipeError("the contract is broken:\nfix it")) == "the contract is broken: fix it"
    assert one_line(RuntimeError("")) == "RuntimeError"


def test_the_last_error_line_of_a_log_is_what_the_job_died_of() -> None:
    log = ["==== 2026-11-28 10:00:00 starting job x", "job x: metrics on http://127.0.0.1:1/metrics", "error: boom"]
    assert control.last_error([*log, "a shutdown hook's line"]) == "boom"
    # A run after it that was stopped, not killed by an error: no error of an earlier run is its.
    assert control.last_error([*log, "==== 2026-11-28 10:05:00 starting job x", "stopping"]) is None
