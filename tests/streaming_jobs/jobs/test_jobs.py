"""Job files: a job's table stays inside the lake and is its own; a job name is never a path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs.spec import check_name, load_all


def declare(folder: Path, name: str, table: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\nkind = "event_log"\ntopics = ["t"]\ntable = "{table}"\n')
    return path


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("../elsewhere", "climbs out of its folder"),
        ("a/../../b", "climbs out of its folder"),
        (".", "root"),
        ("/", "root"),
        ("_checkpoints", "cdcpipe's own"),
        ("_jobs/x", "cdcpipe's own"),
    ],
)
def test_a_table_outside_the_lake_or_on_its_own_folders_is_refused(tmp_path: Path, table: str, says: str) -> None:
    path = declare(tmp_path, "j", table)
    with pytest.raises(StreamingError, match=says) as caught:
        load_all([tmp_path])
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("other", ["out", "./out", "out/inner", "out_dead_letters"])
def test_two_jobs_never_write_one_table(tmp_path: Path, other: str) -> None:
    declare(tmp_path, "a", "out")
    declare(tmp_path, "b", other)
    with pytest.raises(StreamingError, match="give each job a table of its own"):
        load_all([tmp_path])


def test_tables_side_by_side_are_fine(tmp_path: Path) -> None:
    declare(tmp_path, "a", "out")
    declare(tmp_path, "b", "outer")
    declare(tmp_path, "c", "nested/out")
    assert set(load_all([tmp_path])) == {"a", "b", "c"}


@pytest.mark.parametrize("name", ["../x", "/srv/job", "a/b", "Job", ""])
def test_a_job_name_is_never_a_path(name: str) -> None:
    with pytest.raises(StreamingError, match="is not a job name"):
        check_name(name)


def test_a_jobs_batches_are_bounded_unless_it_says_otherwise(tmp_path: Path) -> None:
    declare(tmp_path, "j", "out")
    assert load_all([tmp_path])["j"].max_offsets_per_trigger == 500_000


def test_the_commands_that_read_a_job_do_not_load_spark() -> None:
    """`jobs list|status|stop` answer in a moment: they must not import pyspark (a JVM's worth of modules)."""
    code = "import sys, cdcpipe.cli, streaming_jobs.run.control; print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
