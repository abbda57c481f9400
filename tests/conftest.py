"""Session fixtures: the real local stack, started once, or taken from CDCPIPE_* variables if given.

To run the integration tests against a stack that is already up: `eval "$(cdcpipe stack env)"`, then
`pytest`. Without those variables the session starts the stack (Spark cluster included) and stops at the
end whatever it started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def cdcpipe(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real `cdcpipe` command (as a user would), capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "cdcpipe", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def parse_exports(text: str) -> dict[str, str]:
    """`export KEY=VALUE` lines (as `cdcpipe stack env` prints them) into a dict."""
    import shlex

    values = {}
    for line in text.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            values[key] = shlex.split(value)[0] if value else ""
    return values


@dataclass(frozen=True)
class Stack:
    """Addresses of the running stack, as the tests see them."""

    env: dict[str, str]
    started_here: bool

    @property
    def home(self) -> Path:
        return Path(self.env["CDCPIPE_HOME"])

    @property
    def pg_dsn(self) -> str:
        return self.env["CDCPIPE_PG_DSN"]

    @property
    def kafka_bootstrap(self) -> str:
        return self.env["CDCPIPE_KAFKA_BOOTSTRAP"]

    @property
    def connect_url(self) -> str:
        return self.env["CDCPIPE_CONNECT_URL"]

    @property
    def lake(self) -> Path:
        return Path(self.env["CDCPIPE_LAKE"])

    @property
    def spark_master_url(self) -> str | None:
        return self.env.get("CDCPIPE_SPARK_MASTER_URL")

    def process_env(self) -> dict[str, str]:
        """The environment for a child process wired to this stack."""
        return {**os.environ, **self.env}


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    given = os.environ.get("CDCPIPE_KAFKA_BOOTSTRAP")
    if given:
        missing = [v for v in ("CDCPIPE_PG_DSN", "CDCPIPE_CONNECT_URL", "CDCPIPE_HOME") if not os.environ.get(v)]
        if missing:
            pytest.fail(f'CDCPIPE_KAFKA_BOOTSTRAP is set but {missing} are not: eval "$(cdcpipe stack env)" sets all')
        keys = [k for k in os.environ if k.startswith("CDCPIPE_") or k == "PGPASSFILE"]
        yield Stack(env={k: os.environ[k] for k in keys}, started_here=False)
        return
    up = cdcpipe("stack", "up", "--spark-cluster")
    if up.returncode != 0:
        pytest.fail(f"`cdcpipe stack up` failed:\n{up.stdout}\n{up.stderr}")
    sys.stderr.write(f"\n{up.stdout}")
    started_here = "healthy after" in up.stdout
    exports = cdcpipe("stack", "env")
    assert exports.returncode == 0, exports.stderr
    try:
        yield Stack(env=parse_exports(exports.stdout), started_here=started_here)
    finally:
        if started_here:
            down = cdcpipe("stack", "down")
            sys.stderr.write(f"\n{down.stdout}{down.stderr}")


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (Kafka creates it on first produce)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:120]
    return f"test.{name}.{uuid.uuid4().hex[:8]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that restart the shared stack run last, so no other test sees it go down."""
    items.sort(key=lambda item: item.get_closest_marker("stack_lifecycle") is not None)
