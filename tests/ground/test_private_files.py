"""Secrets and service logs are 0600 from the moment they exist, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ground.private_files import open_private_log, write_private


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)  # the worst case: a file would be created 0666
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_a_secret_is_created_0600_and_an_existing_file_brought_to_it(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    write_private(fresh, "s3cret\n")
    assert mode(fresh) == 0o600
    assert fresh.read_text() == "s3cret\n"
    loose = tmp_path / "loose"
    loose.write_text("old, longer text")
    loose.chmod(0o644)
    write_private(loose, "new\n")
    assert mode(loose) == 0o600
    assert loose.read_text() == "new\n"


@pytest.mark.usefixtures("open_umask")
def test_a_log_is_created_0600_and_appended_to(tmp_path: Path) -> None:
    log = tmp_path / "service.log"
    for line in (b"one\n", b"two\n"):
        with os.fdopen(open_private_log(log), "ab") as f:
            f.write(line)
    assert mode(log) == 0o600
    assert log.read_bytes() == b"one\ntwo\n"
