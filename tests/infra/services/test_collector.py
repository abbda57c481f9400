"""Started as root, the collector runs as a user of its own, and is refused where that user cannot run its Python."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.config import StackSettings
from infra.errors import ServiceStartError
from infra.services.collector import Collector

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="started by another user, every service runs as that user")


def venv_from(interpreter: Path, venv: Path) -> list[str]:
    """A virtual environment's python: a link to the interpreter it was made from (as `python -m venv` makes it)."""
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(interpreter)
    return [str(venv / "bin" / "python"), "-m", "monitor.collector"]


def test_an_interpreter_its_user_cannot_run_is_refused_naming_the_fix(open_tmp: Path) -> None:
    closed = open_tmp / "root-like"
    (closed / "bin").mkdir(parents=True)
    closed.chmod(0o700)  # pyenv's interpreter under /root
    (closed / "bin" / "python3.11").touch(mode=0o755)
    command = venv_from(closed / "bin" / "python3.11", open_tmp / "venv")
    collector = Collector(StackSettings.load(home=open_tmp / "home"), command)

    with pytest.raises(ServiceStartError) as refused:
        collector.run_as()

    said = str(refused.value)
    assert f"collector would run as root: its user 'cdcpipe-collector' cannot enter {closed}" in said, said
    assert "make the virtual environment from an interpreter every user may run" in said, said


def test_an_interpreter_every_user_may_run_gives_the_collector_its_own_user(open_tmp: Path) -> None:
    command = venv_from(Path("/usr/bin/env"), open_tmp / "venv")  # any program others may run stands for it
    collector = Collector(StackSettings.load(home=open_tmp / "home"), command)

    assert collector.run_as() == "cdcpipe-collector"
