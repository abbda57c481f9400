"""A record a batch fails on (a poison) is dead-lettered with its coordinates; the rest applies, the job goes on.

Without this a job fails on the same batch after every restart: the offsets never move past the poison.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.jobs import BALANCES, Event, deposit, make_job, opened, send
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

BIG = 2**63 - 100  # a valid 64-bit amount; the second deposit to the same account overflows its balance


def test_a_projection_overflow_dead_letters_the_record_it_fails_on(stack: Stack, topic: str, tmp_path: Path) -> None:
    job = make_job(stack, tmp_path, "projection", [topic], projection=BALANCES)
    send(
        stack,
        topic,
        [
            ("a", "AccountOpened", opened("a"), None),
            ("b", "AccountOpened", opened("b"), None),
            ("c", "AccountOpened", opened("c"), None),
            ("a", "MoneyDeposited", deposit("a", 10), None),
            ("c", "MoneyDeposited", deposit("c", BIG), None),
            ("b", "MoneyDeposited", deposit("b", 5), None),
            ("c", "MoneyDeposited", deposit("c", 200), None),  # offset 6: c's balance would pass 2**63 - 1
            ("a", "MoneyDeposited", deposit("a", 1), None),
        ],
    )
    job.run()
    assert {r["account_id"]: r["balance"] for r in job.table()} == {"a": 11, "b": 5, "c": BIG}
    (dead,) = job.table("_dead_letters")
    assert dead["kafka_offset"] == 6
    assert dead["topic"] == topic
    assert "ARITHMETIC_OVERFLOW" in str(dead["error"])
    assert isinstance(dead["value"], bytes)
    assert json.loads(dead["value"])["amount"] == 200
    # The job is not stuck on it: the next run applies what comes next, and nothing twice.
    send(stack, topic, [("a", "MoneyDeposited", deposit("a", 4), None)])
    job.run()
    assert {r["account_id"]: r["balance"] for r in job.table()} == {"a": 15, "b": 5, "c": BIG}
    assert len(job.table("_dead_letters")) == 1


def test_a_contract_pattern_java_cannot_compile_is_refused_when_the_job_starts(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    # Python's re accepts a (?P<name>...) group; Java's regex, which Spark's rlike uses, does not.
    (contracts / "Tagged.v1.json").write_text(
        json.dumps(
            {
                "x-aggregate-type": "tag",
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": "^(?P<code>[A-Z]{3})$"}},
            }
        )
    )
    send(stack, topic, [("t", "Tagged", json.dumps({"code": "ABC"}), None)])
    job = make_job(stack, tmp_path, "event_log", [topic], env={"CDCPIPE_CONTRACT_DIRS": str(contracts)})
    run = job.run(check=False)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Tagged v1" in run.stderr
    assert "$.code" in run.stderr
    assert "not a Java regular expression" in run.stderr
    assert "Traceback" not in run.stderr


def test_records_failing_in_a_row_past_the_ceiling_stop_the_job_naming_the_error_and_the_setting(
    stack: Stack, topic: str, tmp_path: Path
) -> None:
    """Every deposit to c overflows: past `max_poison_in_a_row` that is the job's error, not the records'."""
    job = make_job(
        stack,
        tmp_path,
        "projection",
        [topic],
        projection=BALANCES,
        max_poison_in_a_row=3,
    )
    overflowing: list[Event] = [("c", "MoneyDeposited", deposit("c", BIG), None) for _ in range(5)]  # offsets 2..6
    send(stack, topic, [("c", "AccountOpened", opened("c"), None), ("c", "MoneyDeposited", deposit("c", BIG), None)])
    send(stack, topic, overflowing)
    stopped = job.run(check=False)
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    said = stopped.stderr.strip().splitlines()[-1]
    assert said.startswith("error: job "), said
    assert "3 records in a row failed the projection write" in said
    assert "ARITHMETIC_OVERFLOW" in said
    assert "max_poison_in_a_row in the job file (now 3" in said
    dead = sorted(int(str(r["kafka_offset"])) for r in job.table("_dead_letters"))
    assert dead == [2, 3], "the third is not dead-lettered: it is applied once the job is fixed"
    # Told to go on (0: never stop), the job dead-letters the rest, each once, and moves past them.
    (job.folder / f"{job.name}.toml").write_text(
        (job.folder / f"{job.name}.toml").read_text().replace("max_poison_in_a_row = 3", "max_poison_in_a_row = 0")
    )
    job.run()
    assert sorted(int(str(r["kafka_offset"])) for r in job.table("_dead_letters")) == list(range(2, 7))
    assert {r["account_id"]: r["balance"] for r in job.table()} == {"c": BIG}
