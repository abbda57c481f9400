"""The real local stack, started once per session or taken from CDCPIPE_* variables if given; topics of a test's own.

To run the integration tests against a stack that is already up: `eval "$(cdcpipe stack env)"`, then
`pytest`. Without those variables the session starts the stack (Spark cluster included) and stops at the
end whatever it started.

cdcpipe ships no contracts, topic files, job files or connector definitions: the tests choose the demo's, in
`examples/`, as the demo does (a test that means its own folders sets the variables itself).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from connectors.config import ConnectSettings
from demo.run import SAMPLES
from ground.kafka_client import KafkaSettings
from infra.config import StackSettings
from tests.support.kafka import create_topics

log = logging.getLogger(__name__)


def cdcpipe(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real `cdcpipe` command (as a user would), capturing its output."""
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "cdcpipe", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    # Where a long test's time goes (`--log-cli-level=INFO`, or a failure's captured log), as waits.py says its waits.
    log.info("cdcpipe %s: %.1f s", " ".join(args[:3]), time.monotonic() - began)
    return result


def parse_exports(text: str) -> dict[str, str]:
    """`export KEY=VALUE` lines (as `cdcpipe stack env` prints them) into a dict, as a shell evaluates them.

    A double-quoted variable (`PATH=/x:"$PATH"`) is expanded from this process's environment; a single-quoted
    value (how every other value is quoted) is taken as it is.
    """
    import shlex

    values = {}
    for line in text.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            parsed = shlex.split(value)[0] if value else ""
            values[key] = os.path.expandvars(parsed) if '"$' in value else parsed
    return values


# The demo's samples, chosen as the demo chooses them.
EXAMPLE_FOLDERS = SAMPLES
for variable, folder in EXAMPLE_FOLDERS.items():
    os.environ.setdefault(variable, str(folder))


@dataclass(frozen=True)
class Stack:
    """Addresses of the running stack, as the tests see them."""

    env: dict[str, str]
    started_here: bool
    cluster: str | None = None  # the Spark master's URL when the cluster is up

    @classmethod
    def of(cls, env: dict[str, str], started_here: bool) -> Stack:
        """The stack as `env` describes it, with the jobs the tests start in local mode.

        A test that means the cluster submits to `cluster`: side-by-side tests' applications would queue for
        the one worker's cores.
        """
        master = env.get("CDCPIPE_SPARK_MASTER", "")
        return cls(
            env={**env, "CDCPIPE_SPARK_MASTER": "local[2]"},
            started_here=started_here,
            cluster=master if master.startswith("spark://") else None,
        )

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
    def kcat(self) -> str:
        """The kcat `make install` puts on a librdkafka that can do SCRAM with Kafka 4."""
        return str(self.home / "bin" / "kcat")

    def kafka_file(self, user: str = "admin") -> Path:
        """A Kafka user's client file: `stack env` names the admin's, the components' are beside it."""
        return Path(self.env["CDCPIPE_KAFKA_CONFIG"]).with_name(f"{user}.properties")

    def kafka(self, user: str = "admin") -> KafkaSettings:
        """A Kafka user's client settings (the tests' own clients are the operator: admin)."""
        return KafkaSettings.from_file(self.kafka_file(user))

    def kafka_config(self, **extra: object) -> dict[str, Any]:
        """The librdkafka configuration of a client of the tests' own, authenticated as the admin."""
        return self.kafka().client_config(**extra)

    @property
    def connect_url(self) -> str:
        return self.env["CDCPIPE_CONNECT_URL"]

    @property
    def lake(self) -> Path:
        """The stack's local-folder lake (its default lake, CDCPIPE_LAKE, is on the object store)."""
        return Path(self.env["CDCPIPE_LOCAL_LAKE"])

    def connect_settings(self) -> ConnectSettings:
        """The connectors stage's settings for this stack's Connect, with its REST user."""
        return ConnectSettings.load(
            connect_url=self.connect_url,
            pg_dsn=self.pg_dsn,
            connect_user=self.env["CDCPIPE_CONNECT_USER"],
            connect_password_file=Path(self.env["CDCPIPE_CONNECT_PASSWORD_FILE"]),
        )

    def connect_auth(self) -> tuple[str, str]:
        """(user, password) of Connect's REST API, for a test's own HTTP calls."""
        auth = self.connect_settings().basic_auth()
        assert auth is not None
        return auth

    def prometheus(self, query: str) -> list[dict[str, Any]]:
        """The stack's Prometheus's answer to an instant PromQL query: its result vector."""
        response = httpx.get(f"{self.env['CDCPIPE_PROMETHEUS_URL']}/api/v1/query", params={"query": query}, timeout=10)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def prometheus_value(self, query: str) -> float | None:
        """The one value an instant query gives (None: no series)."""
        found = self.prometheus(query)
        assert len(found) <= 1, found
        return float(found[0]["value"][1]) if found else None

    def s3_options(self, **changes: str) -> dict[str, str]:
        """delta-rs's storage options for the stack's object store, as `stack env` exports them."""
        names = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP")
        return {**{k: self.env[k] for k in names}, **changes}

    def s3_lake(self) -> str:
        """A lake of a test's own on the stack's object store (an s3a:// URL under CDCPIPE_S3_LAKE)."""
        return f"{self.env['CDCPIPE_S3_LAKE']}/tests/{uuid.uuid4().hex[:10]}"

    def process_env(self) -> dict[str, str]:
        """The environment for a child process wired to this stack."""
        return {**os.environ, **self.env}


OWNED_VARIABLE = "CDCPIPE_TEST_STACK_OWNED"


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    given = os.environ.get("CDCPIPE_KAFKA_BOOTSTRAP")
    if given:
        missing = [
            v
            for v in ("CDCPIPE_PG_DSN", "CDCPIPE_CONNECT_URL", "CDCPIPE_HOME", "CDCPIPE_KAFKA_CONFIG")
            if not os.environ.get(v)
        ]
        if missing:
            pytest.fail(f'CDCPIPE_KAFKA_BOOTSTRAP is set but {missing} are not: eval "$(cdcpipe stack env)" sets all')
        keys = [k for k in os.environ if k.startswith(("CDCPIPE_", "AWS_")) or k == "PGPASSFILE"]
        # `python -m tests.suite` (make test) marks a stack it started as the session's own. No test stops or
        # crashes a service of it (those that do have stacks of their own: `stack_of_its_own`).
        yield Stack.of({k: os.environ[k] for k in keys}, started_here=os.environ.get(OWNED_VARIABLE) == "1")
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(
            'tests in parallel share one stack: start it first (`python -m tests.suite`, or `eval "$(cdcpipe stack env)"`)'
        )
    up = cdcpipe("stack", "up", "--spark-cluster", "--workers", "2")
    if up.returncode != 0:
        pytest.fail(f"`cdcpipe stack up` failed:\n{up.stdout}\n{up.stderr}")
    sys.stderr.write(f"\n{up.stdout}")
    started_here = "healthy after" in up.stdout
    exports = cdcpipe("stack", "env")
    assert exports.returncode == 0, exports.stderr
    env = parse_exports(exports.stdout)
    # libpq (psycopg, psql) in this process finds the password where `stack env` says, like any tool.
    os.environ["PGPASSFILE"] = env["PGPASSFILE"]
    try:
        yield Stack.of(env, started_here=started_here)
    finally:
        if started_here:
            down = cdcpipe("stack", "down")
            sys.stderr.write(f"\n{down.stdout}{down.stderr}")


# Each stack of a test's own beside the suite's: its folder under the suite's home, and the offset of its ports
# from the suite's (the defaults, all below 10,000). Each below the kernel's ephemeral ports (32768 on), and no
# port of one stack a port of another (tests/test_stacks_apart.py).
STACKS_APART = {"lifecycle": 10000, "outages": 12000, "cluster": 20000}


def ports_apart(offset: int) -> dict[str, str]:
    """The variables that put each listener of a stack on its default port + `offset`."""
    return {
        f"CDCPIPE_{name.upper()}": str(field.default + offset)
        for name, field in StackSettings.model_fields.items()
        if name.endswith("_port") and field.default
    }


def apart_env(suite: Stack, name: str, **variables: str) -> dict[str, str]:
    """The environment of `cdcpipe stack ...` for a stack of its own beside the suite's: nothing of the suite's stack.

    Its home is `<suite home>/<name>` (the jars and tools `make install` put beside the suite's stack shared by
    links), its ports the suite's + `STACKS_APART[name]`; `variables` add to it (`CDCPIPE_KAFKA_NODES`, ...).
    """
    home = suite.home / name
    home.mkdir(exist_ok=True)
    for shared in ("lib", "bin"):
        if not (home / shared).exists():
            (home / shared).symlink_to(suite.home / shared)
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("CDCPIPE_", "AWS_")) and k != "PGPASSFILE"}
    return {**kept, "CDCPIPE_HOME": str(home), **ports_apart(STACKS_APART[name]), **variables}


@contextlib.contextmanager
def stack_of_its_own(suite: Stack, name: str, spark_cluster: bool) -> Iterator[Stack]:
    """A stack for tests that stop, crash and restart its services, up beside the suite's and purged after.

    Such tests ran alone after all the others on the suite's stack (no other test could see it go down); on a
    stack of their own they run beside them. While it is up, this process's environment describes it instead of
    the suite's (libpq's PGPASSFILE, the settings `StackSettings.load()` reads): its tests run one after another
    on one worker (mark their module `xdist_group`), and no other test runs in that worker meanwhile.
    """
    env = apart_env(suite, name)
    up = cdcpipe("stack", "up", *(["--spark-cluster", "--workers", "2"] if spark_cluster else []), env=env)
    try:
        if up.returncode != 0:
            pytest.fail(f"a stack of its own in {env['CDCPIPE_HOME']} did not start:\n{up.stdout}\n{up.stderr}")
        exports = {}
        for which, variables in (("own", env), ("suite", suite.process_env())):
            said = cdcpipe("stack", "env", env=variables)
            assert said.returncode == 0, f"`stack env` of the {which} stack failed: {said.stderr}"
            exports[which] = parse_exports(said.stdout)
        own = {**exports["own"], "CDCPIPE_HOME": env["CDCPIPE_HOME"], **ports_apart(STACKS_APART[name])}
        suites = exports["suite"]
        with pytest.MonkeyPatch.context() as patch:
            for key in suites:
                if key != "PATH":
                    patch.delenv(key, raising=False)
            for key, value in own.items():
                patch.setenv(key, value)
            yield Stack.of(own, started_here=True)
    finally:
        cdcpipe("stack", "down", "--purge", env=env)


@pytest.fixture
def cluster_path(stack: Stack) -> Iterator[Path]:
    """A folder of its own under the stack's lake, for a test whose executors run on the Spark cluster.

    Started as root, the cluster's executors run as the service user and may write only where the stack shared
    with them (its lake), as on a real cluster; a pytest tmp_path (0700, root's) is closed to them.
    """
    path = stack.lake / "tests" / uuid.uuid4().hex[:10]
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder of the test's own that the services' users may enter: a stack home for a service to start from.

    Started as root, a Java service refuses a home its user cannot enter; pytest's tmp_path is under a 0700 folder.
    """
    path = Path(tempfile.mkdtemp())  # under /tmp, which anyone may enter
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses, not created: for a test that creates it its own way."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:120]
    return f"test.{name}.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(stack: Stack, topic_name: str) -> str:
    """A topic of one partition no other test uses, created first (the stack's Kafka creates none on use)."""
    create_topics(stack.kafka_config(), [topic_name])
    return topic_name


# The slowest tests, by folder, slowest first (as `make test --durations=0` measured them): started first, they
# do not end the run alone on one worker while the others have nothing left; the unit tests fill the gaps last.
LONG_FIRST = (
    "tests/streaming_jobs/schema_change/",
    "tests/capture/",
    "tests/bench/",
    "tests/streaming_jobs/lake/",
    "tests/connectors/",
    "tests/streaming_jobs/",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long ones first, the unit tests last."""

    def order(item: pytest.Item) -> tuple[bool, int]:
        rank = next((i for i, folder in enumerate(LONG_FIRST) if item.nodeid.startswith(folder)), len(LONG_FIRST))
        return (item.get_closest_marker("integration") is None, rank)

    items.sort(key=order)
