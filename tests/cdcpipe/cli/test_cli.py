"""Every command answers bad arguments (and an unreachable service) with its stage's error and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cdcpipe import cli
from ground.errors import CdcpipeError
from infra.config import StackSettings
from tests.support.stack import EXAMPLE_FOLDERS

# Nothing listens on port 9 here: each service is refused at once, as when the stack is down.
UNREACHABLE = {
    "CDCPIPE_PG_DSN": "postgresql://nobody@127.0.0.1:9/none",
    "CDCPIPE_CONNECT_URL": "http://127.0.0.1:9",
    "CDCPIPE_KAFKA_BOOTSTRAP": "127.0.0.1:9",
}

CASES = [
    (["jobs", "submit", "../x"], "is not a job name"),
    (["jobs", "submit", "no_such_job"], "no job named 'no_such_job'"),
    (["jobs", "status", "/etc"], "is not a job name"),
    (["jobs", "stop", "/etc"], "is not a job name"),
    (["jobs", "optimize", "no_such_job"], "no job named"),
    (["jobs", "accept-topics", "../x"], "is not a job name"),
    (["jobs", "rewind", "account_events", "--to", "yesterday"], "is not a position"),
    (["jobs", "rewind", "account_events", "--to", "1960-01-01T00:00:00Z"], "before 1970"),
    (["jobs", "status", "account_events"], "cannot read topics or offsets from Kafka"),
    (["jobs", "backfill", "account_events", "--from", "1960-01-01"], "before 1970"),
    (["jobs", "backfill", "account_events", "--from", "earliest", "--to", "soon"], "is not a position"),
    (["jobs", "backfill", "account_events", "--from", "earliest", "--chunk-size", "0"], "greater than or equal to 1"),
    (["jobs", "replay", "no_such_job"], "no job named"),
    (["connectors", "apply", "/no/such/file.json"], "no such file"),
    (["connectors", "status", "a/b"], "is not a connector name"),
    (["connectors", "offsets", "reset"], "usage: cdcpipe connectors offsets"),
    (["connectors", "offsets", "reset", "a", "b"], "usage: cdcpipe connectors offsets"),
    (["connectors", "list"], "does not answer"),
    (["connectors", "drop-slot", "some_slot", "--yes"], "does not answer"),
    (["relay", "run", "--log-level", "LOUD"], "is not a log level"),
    (["relay", "status"], "cannot connect to Postgres"),
    (["relay", "redrive", "--dry-run"], "cannot connect to Postgres"),
    (["schema", "apply"], "cannot connect to Postgres"),
    (["topics", "apply", "--dry-run"], "cannot read Kafka's topics"),
    (["stack", "up", "--no-such-option"], "No such option"),
]


@pytest.mark.parametrize(("args", "says"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_arguments_get_the_stages_error_not_a_traceback(
    args: list[str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unreachable_stack(monkeypatch, {k: str(v) for k, v in EXAMPLE_FOLDERS.items()})
    assert says in _error_of(args)


# cdcpipe ships no job, topic or connector files: without folders of the user's, each command says what to set.
UNSET = [
    (["jobs", "submit", "account_events"], "no job folder is set; set CDCPIPE_JOBS_DIRS"),
    (["jobs", "status", "account_events"], "no job folder is set; set CDCPIPE_JOBS_DIRS"),
    (["topics", "apply"], "no topic files: set CDCPIPE_TOPICS_DIR"),
    (["connectors", "apply"], "set CDCPIPE_CONNECTORS_DIR"),
]


@pytest.mark.parametrize(("args", "says"), UNSET, ids=[" ".join(a) for a, _ in UNSET])
def test_without_folders_of_the_users_a_command_names_the_variable_to_set(
    args: list[str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unreachable_stack(monkeypatch, {})
    assert says in _error_of(args)


def _unreachable_stack(monkeypatch: pytest.MonkeyPatch, extra: dict[str, str]) -> None:
    """Every service refuses at once, and nothing of a running stack leaks in (make test exports its variables)."""
    for key in [k for k in os.environ if k.startswith("CDCPIPE_") or k == "PGPASSFILE"]:
        monkeypatch.delenv(key)
    for key, value in {**UNREACHABLE, **extra}.items():
        monkeypatch.setenv(key, value)


def _error_of(args: list[str]) -> str:
    result = CliRunner().invoke(cli.app, args, env={"COLUMNS": "200"})  # a usage error's panel is not cut
    assert result.exit_code != 0
    if isinstance(result.exception, CdcpipeError):
        return str(result.exception)  # main() prints it as `error: ...` and exits 2
    assert isinstance(result.exception, SystemExit), f"a traceback: {result.exception!r}"
    return result.output  # a usage error, with the option named


def test_main_prints_a_stage_error_as_a_message_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["cdcpipe", "jobs", "stop", "../x"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: '../x' is not a job name")
    assert "Traceback" not in err


def test_the_settings_reference_in_the_docs_is_the_one_help_shows() -> None:
    """docs/configuration.md's table is rendered from the models `--help` reads: `make docs` after a change."""
    from cdcpipe.cli import reference

    page = reference.PAGE.read_text()
    assert reference.page_with_reference(page) == page, "docs/configuration.md is stale: run `make docs`"
    for model in reference.MODELS:
        for variable, _, _ in model.describe():
            assert f"`{variable}`" in page


def test_jobs_submit_help_says_where_the_log_is() -> None:
    """The driver's pid file and log are in the run folder (CDCPIPE_RUN_DIR), not in the lake."""
    result = CliRunner().invoke(cli.app, ["jobs", "submit", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "CDCPIPE_RUN_DIR/NAME.pid, NAME.log" in result.output
    assert "_jobs/" not in result.output


def test_stack_up_cluster_asks_for_three_nodes_two_connect_workers_and_the_spark_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from infra import stack as local_stack

    asked: dict[str, object] = {}

    def up(settings: StackSettings, *, spark_cluster: bool, **_: object) -> list[object]:
        asked.update(nodes=settings.kafka_nodes, workers=settings.connect_workers, spark=settings.spark_workers)
        asked["spark_cluster"] = spark_cluster
        return []

    monkeypatch.setenv("CDCPIPE_HOME", str(tmp_path))
    monkeypatch.setattr(local_stack, "up", up)
    result = CliRunner().invoke(cli.app, ["stack", "up", "--cluster"])
    assert result.exit_code == 0, result.output
    assert asked == {"nodes": 3, "workers": 2, "spark": 2, "spark_cluster": True}


@pytest.mark.parametrize("group", ["jobs", "stack", "topics", "schema"])
def test_a_groups_command_starts_without_the_heavy_clients_it_does_not_use(group: str) -> None:
    # Scripts, the collector's checks and the tests run `cdcpipe` thousands of times: pyarrow (with numpy) was a
    # third of `jobs status`'s start, imported by the lake's paths whether a file was read or not.
    probe = (
        "import sys; from cdcpipe.cli import build; build(sys.argv[1]); "
        "print(' '.join(m for m in ('pyarrow', 'numpy', 'pyspark', 'deltalake') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe, group], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", f"`cdcpipe {group}` imports {done.stdout.strip()}"
