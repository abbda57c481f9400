"""A table of a running group set aside by a command: read by the group's driver each tick, a dead setter's ignored."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from streaming_jobs.config import JobsSettings
from streaming_jobs.run.control import aside_folder, set_aside


def test_a_table_is_aside_while_its_setter_runs_and_a_dead_setters_mark_is_ignored(tmp_path: Path) -> None:
    settings = JobsSettings.load(run_dir=tmp_path)
    assert set_aside(settings, "store") == set()  # no folder yet
    folder = aside_folder(settings, "store")
    folder.mkdir()
    (folder / "s_category_mirror").write_text(f"{os.getpid()}\n")
    dead = subprocess.Popen(["true"])  # a setter that has ended: its pid runs no more
    dead.wait()
    (folder / "s_film_mirror").write_text(f"{dead.pid}\n")
    (folder / "s_garbled_mirror").write_text("not a pid")
    assert set_aside(settings, "store") == {"s_category_mirror"}
