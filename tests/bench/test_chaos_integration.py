"""The short chaos soak on a cluster: every job kind under load through the faults, checked against Postgres.

Three Kafka nodes (three replicas, two in sync) and two Connect workers in one group: a stack of its own, in a
home of its own and on ports of its own (each of the suite's + 20,000), so it runs beside the other tests instead of
after them. One rotation of the faults a cluster meets most: the busiest partition's leader SIGKILLed and left
down, the Connect worker running the task SIGKILLed and left down (the other takes the task), the leading relay, a
job's driver and Postgres killed; nothing restarted by hand; an event log and a table group (a mirror and a
history) checked against Postgres. `make chaos-cluster` is the long soak with every fault (a node down past the
relay's delivery timeout, the whole Kafka cluster restarted, a Spark worker under the jobs' executors); `make
chaos` on one node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.bench import BENCH
from tests.support.stack import Stack, apart_env, cdcpipe, parse_exports
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration

FAULTS = ("relay", "job", "postgres", "connect", "leader")
# One job per source: the event log on the relay's topic, the table group (mirror and history) on Debezium's. The
# latest state and the projection read the event topic as the event log does (`make chaos-cluster` runs them too).
KINDS = {"event_log", "table_mirror", "table_history"}


@pytest.mark.timeout(1800)
def test_every_kind_matches_postgres_after_every_fault_of_a_cluster(stack: Stack, tmp_path: Path) -> None:
    # Nothing of the suite's stack: the cluster's own variables come from its `stack env` (chaos.py reads them).
    # `stack up --cluster`'s Kafka and Connect (its Spark cluster left out: these jobs run in their drivers).
    env = apart_env(stack, "cluster", CDCPIPE_KAFKA_NODES="3", CDCPIPE_CONNECT_WORKERS="2")
    results = tmp_path / "chaos.json"
    try:
        up = cdcpipe("stack", "up", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        for node in ("kafka", "kafka-2", "kafka-3", "connect", "connect-2"):
            assert any(line.startswith(f"{node} ") for line in up.stdout.splitlines()), up.stdout
        cluster = parse_exports(cdcpipe("stack", "env", env=env).stdout)
        assert len(cluster["CDCPIPE_KAFKA_BOOTSTRAP"].split(",")) == 3, cluster["CDCPIPE_KAFKA_BOOTSTRAP"]
        assert len(cluster["CDCPIPE_CONNECT_URL"].split(",")) == 2, cluster["CDCPIPE_CONNECT_URL"]

        def scraped() -> dict[str, int]:
            query = {"query": 'count by (job) (up{job=~"kafka|connect"} == 1)'}
            answer = httpx.get(f"{cluster['CDCPIPE_PROMETHEUS_URL']}/api/v1/query", params=query, timeout=10).json()
            return {r["metric"]["job"]: int(r["value"][1]) for r in answer["data"]["result"]}

        # Every node and worker is a target of its own: one that dies is `up == 0` (CdcpipeScrapeTargetDown).
        wait_until(lambda: scraped() == {"kafka": 3, "connect": 2}, 60, "Prometheus to scrape 3 nodes and 2 workers")
        # The replication bench, which needs a cluster, runs here (its figures: `python bench/replication_bench.py`).
        bench = subprocess.run(
            [
                *(sys.executable, str(BENCH / "replication_bench.py"), "--events", "500", "--rounds", "1"),
                # Its latency part is jobs_bench's (the bench smoke runs that); two more drivers here would cost
                # the suite more than they prove (tests/bench/test_replication_bench.py checks what it adds).
                *("--latency-seconds", "0"),
                *("--results", str(tmp_path / "replication.json")),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert bench.returncode == 0, bench.stderr[-3000:]
        drains = json.loads((tmp_path / "replication.json").read_text())["drains"]
        assert {d["received"] for runs in drains.values() for d in runs} == {500}, drains
        run = subprocess.run(
            [
                sys.executable,
                str(BENCH / "chaos.py"),
                # One rotation of the five faults (chaos.py finishes a rotation it began), each 1 s after the last had
                # recovered; the load (5 deposits a second) runs all along. The dead node and worker stay down to the
                # end (`--keep-down`).
                "--minutes",
                "0.1",
                "--rate",
                "5",
                "--every",
                "1",
                "--keep-down",
                "--drivers",
                "event_log,tables",
                "--faults",
                ",".join(FAULTS),
                "--results",
                str(results),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=1400,
            check=False,
        )
    finally:
        cdcpipe("stack", "down", "--purge", env=env)
    assert results.exists(), f"the soak wrote no result:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    result = json.loads(results.read_text())
    faults = {f["fault"]: f for f in result["faults"]}
    assert set(faults) == set(FAULTS), result["faults"]
    assert faults["leader"]["node"].startswith("kafka"), faults["leader"]
    # The Connect group's other worker took the task (chaos.py fails the run if it did not within 120 s).
    assert "task_moved_s" in faults["connect"], faults["connect"]
    assert set(result["kinds"]) == KINDS
    wrong = {kind: v for kind, v in result["kinds"].items() if any(v.values())}
    assert wrong == {}, f"read models differ from Postgres: {wrong}"
    assert result["out_of_order_in_kafka"] == 0
    # Every deposit's latency, from its commit to its row in the event log, falls in the warm-up, before the faults
    # or in one fault's window (the figures themselves are `make chaos-cluster`'s, not a test's).
    latency = result["event_latency"]
    measured = sum(latency[part]["events"] for part in ("warm_up", "before_faults"))
    measured += sum(f["event_latency"]["events"] for f in result["faults"])
    assert measured == result["deposits_committed"] > 0, latency
    assert result["stopped_by_themselves"] == []
    assert result["passed"], run.stdout[-3000:]
    assert run.returncode == 0
