"""The short chaos soak: every job kind under every fault at once, checked against Postgres (`make chaos` is long)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench import BENCH
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.stack_lifecycle]

FAULTS = {"relay", "job", "connect", "kafka", "postgres"}
KINDS = {"event_log", "latest_state", "projection", "table_mirror", "table_history"}


@pytest.mark.timeout(1500)
def test_every_kind_matches_postgres_after_every_fault(stack: Stack, tmp_path: Path) -> None:
    if not stack.started_here:
        pytest.skip("the soak stops and starts the stack's services: only a stack this session started")
    results = tmp_path / "chaos.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH / "chaos.py"),
            # One rotation of the five faults (chaos.py finishes a rotation it began), each 1 s after the last had
            # recovered; the load runs all along (each fault takes seconds, the writes go on through it).
            "--minutes",
            "0.1",
            "--rate",
            "50",
            "--every",
            "1",
            "--kafka-down-s",
            "3",
            "--results",
            str(results),
        ],
        env=stack.process_env(),
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    assert results.exists(), f"the soak wrote no result:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    result = json.loads(results.read_text())
    assert {f["fault"] for f in result["faults"]} == FAULTS
    assert set(result["kinds"]) == KINDS
    wrong = {kind: v for kind, v in result["kinds"].items() if any(v.values())}
    assert wrong == {}, f"read models differ from Postgres: {wrong}"
    assert result["out_of_order_in_kafka"] == 0
    assert result["stopped_by_themselves"] == []
    assert result["passed"], run.stdout[-3000:]
    assert run.returncode == 0
