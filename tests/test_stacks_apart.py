"""The stacks of tests' own run beside the suite's: no port of one is a port of another, none an ephemeral one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from infra.config import StackSettings
from tests.support.stack import STACKS_APART, ports_apart
from tests.support.timeline import plain

# The most any of them starts: three Kafka nodes and two Connect workers (the cluster's), two Spark workers.
LARGEST: dict[str, Any] = {"kafka_nodes": 3, "connect_workers": 2}
EPHEMERAL_FROM = 32768


def ports(offset: int, home: Path) -> set[int]:
    variables: dict[str, Any] = {k.removeprefix("CDCPIPE_").lower(): int(v) for k, v in ports_apart(offset).items()}
    settings = StackSettings.load(home=home, **LARGEST, **(variables if offset else {}))
    found = {port for _, port in settings.all_ports()}
    return found | {settings.spark_worker_ui_port + n for n in range(2)}


def test_no_two_stacks_share_a_port_and_none_is_ephemeral(tmp_path: Path) -> None:
    stacks = {"suite": ports(0, tmp_path), **{name: ports(offset, tmp_path) for name, offset in STACKS_APART.items()}}
    for name, taken in stacks.items():
        assert max(taken) < EPHEMERAL_FROM, (name, max(taken))
        for other, theirs in stacks.items():
            if other != name:
                assert not taken & theirs, (name, other, sorted(taken & theirs))


def test_a_modules_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    # What a stack of a module's own rests on: pytest-xdist's `--dist loadgroup` sends a group's tests to one worker
    # (on pytest 9.2 it silently stopped, and they ran on every worker at once: pytest-xdist#1386).
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for module in ("a", "b"):
        tests = "".join(
            f"def test_{n}():\n    (Path(__file__).parent / 'ran_{module}{n}').write_text(os.environ['PYTEST_XDIST_WORKER'])\n"
            for n in range(4)
        )
        header = "import os\nfrom pathlib import Path\nimport pytest\npytestmark = pytest.mark.xdist_group('own')\n"
        (tmp_path / f"test_{module}.py").write_text(header + tests)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    workers = {path.read_text() for path in tmp_path.glob("ran_*")}
    assert len(list(tmp_path.glob("ran_*"))) == 8
    assert len(workers) == 1, workers


def test_the_timeline_knows_a_grouped_test_by_its_own_id() -> None:
    # Its past duration (tests/durations.json) is found, so a group starts where its longest test stands.
    assert plain("tests/a.py::test_x@outages") == "tests/a.py::test_x"
    assert plain("tests/a.py::test_x[a@b]") == "tests/a.py::test_x[a@b]"
    assert plain("tests/a.py::test_x[a@b]@own") == "tests/a.py::test_x[a@b]"
