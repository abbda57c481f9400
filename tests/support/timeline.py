"""When each test ran and on which worker, in the JSON-lines file `CDCPIPE_TEST_TIMELINE` names.

`tests.suite` says from it how well the parallel run was balanced: a long test that starts late leaves the other
workers idle at the end. So the longest tests run first (`tests/durations.json`, seconds of a past run; one not in
it is taken as short), and the suite hands each worker its next test only when it needs one: the greedy order
that keeps the end of the run short. `python -m tests.support.timeline TIMELINE` rewrites the file from a run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

VARIABLE = "CDCPIPE_TEST_TIMELINE"
DURATIONS = Path(__file__).parents[1] / "durations.json"
_started: dict[str, float] = {}
_file: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    # The process that runs the tests takes the variable out of its environment, so a pytest a test starts in a
    # subprocess records nothing here. An xdist controller runs none: its workers, started later, inherit it.
    controller = not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"
    path = os.environ.get(VARIABLE) if controller else os.environ.pop(VARIABLE, None)
    if path and not controller:
        _file.append(Path(path))


def plain(nodeid: str) -> str:
    """A test's id without the `@group` that `--dist loadgroup` appends to one marked `xdist_group`.

    As xdist reads it: an `@` after the last `]`, so a parameter holding an `@` is not taken for a group.
    """
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (by higher-scoped fixtures), which would undo it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The same order in every worker (xdist refuses workers whose collections differ): a stable sort of one file.
    # A group goes to its worker whole, where its longest test stands in this order.
    expected = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    items.sort(key=lambda item: -expected.get(plain(item.nodeid), 0))


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _started[nodeid] = time.time()


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if not _file or nodeid not in _started:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = json.dumps({"test": plain(nodeid), "worker": worker, "start": _started.pop(nodeid), "end": time.time()})
    with _file[0].open("a") as out:  # one short write per test: lines of several workers never interleave
        out.write(line + "\n")


def summary(path: Path) -> str:
    """Each worker's busy seconds, and how long the workers stood idle while the last ones finished."""
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not runs:
        return "timeline: no test recorded"
    began, ended = min(r["start"] for r in runs), max(r["end"] for r in runs)
    last: dict[str, float] = {}
    busy: dict[str, float] = {}
    for r in runs:
        last[r["worker"]] = max(last.get(r["worker"], 0.0), r["end"])
        busy[r["worker"]] = busy.get(r["worker"], 0.0) + r["end"] - r["start"]
    idle = sum(ended - t for t in last.values())
    tail = sorted(runs, key=lambda r: r["end"])[-3:]
    return (
        f"timeline: {ended - began:.0f}s wall; busy "
        + ", ".join(f"{w} {s:.0f}s" for w, s in sorted(busy.items()))
        + f"; {idle:.0f} worker-seconds idle at the end; the last to finish: "
        + ", ".join(
            f"{r['test'].split('::')[-1][:60]} ({r['end'] - r['start']:.0f}s, from +{r['start'] - began:.0f}s)"
            for r in tail
        )
    )


def main() -> None:
    """Rewrite tests/durations.json from a run's timeline: each test that took over 10 s, in seconds."""
    runs = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
    durations = {r["test"]: round(r["end"] - r["start"]) for r in runs if r["end"] - r["start"] > 10}
    ordered = dict(sorted(durations.items(), key=lambda kv: (-kv[1], kv[0])))
    DURATIONS.write_text(json.dumps(ordered, indent=0) + "\n")
    print(f"wrote {DURATIONS}: {len(ordered)} tests")


if __name__ == "__main__":
    main()
