"""`make demo`'s second half (`cdcpipe demo`) on the test stack: the README's quick start, end to end."""

from __future__ import annotations

import re

import pytest

from tests.support.stack import Stack, cdcpipe

pytestmark = pytest.mark.integration


def test_the_demo_runs_the_whole_pipeline_and_checks_every_balance(stack: Stack) -> None:
    result = cdcpipe("demo", env=stack.process_env(), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"committed 840 events in 840 transactions", out)
    # The demo compares each balance read back with delta-rs against what its transactions committed.
    assert "every balance in Delta equals what was committed (40 accounts" in out
    assert re.search(r"the bad event is in account_balances_dead_letters.*: \$\.amount has the wrong type", out)
    # It stops what it started: the job is not left running.
    lake = next(line for line in out.splitlines() if "tables under " in line).rsplit("tables under ", 1)[1].rstrip(")")
    assert lake.startswith("s3a://"), "the stack's default lake is its object store"
    status = cdcpipe("jobs", "status", "account_balances", env={**stack.process_env(), "CDCPIPE_LAKE": lake})
    assert "not running" in status.stdout, status.stdout + status.stderr
