"""The benchmarks are scripts, not a package: their tests load them by path, or run them as a user would."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.support.spark_host import spark_run
from tests.support.stack import Stack

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_module(name: str) -> ModuleType:
    """Import bench/<name>.py as a module (and its siblings, as the script itself would)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_bench(
    stack: Stack,
    tmp_path: Path,
    name: str,
    args: list[str],
    env: dict[str, str] | None = None,
    shared_driver: bool = False,
) -> None:
    """Run bench/<name>.py to its end, its results into tmp_path (CDCPIPE_BENCH_RESULTS).

    `shared_driver`: on this test process's Spark driver (tests.support.spark_host), for a bench whose figures
    leave its session's start out; else a process of its own, as a user runs it.
    """
    env = {**stack.process_env(), "CDCPIPE_BENCH_RESULTS": str(tmp_path), **(env or {})}
    script = str(BENCH / f"{name}.py")
    if shared_driver:
        result = spark_run(script, args, env, timeout=900)
    else:
        result = subprocess.run(
            [sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=900, check=False
        )
    assert result.returncode == 0, result.stderr[-3000:]


def results(tmp_path: Path, file: str) -> dict[str, Any]:
    """The JSON a bench wrote into tmp_path."""
    found: dict[str, Any] = json.loads((tmp_path / file).read_text())
    return found
