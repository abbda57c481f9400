"""The stack's generated secrets: made once, whole, 0600, however many commands ask for one at the same moment."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path
from typing import Any

from infra.config import StackSettings
from infra.stack_secrets import secret


def _first_use(home: str, start: Any, said: Any) -> None:
    start.wait()
    said.put(secret(StackSettings.load(home=Path(home)), "racing"))


def test_processes_making_a_secret_at_once_all_read_one_whole_value(tmp_path: Path) -> None:
    """Many commands on a fresh stack ask for the same secret at the same moment: one value, never a part."""
    context = multiprocessing.get_context("fork")
    start, said = context.Event(), context.Queue()
    racers = [context.Process(target=_first_use, args=(str(tmp_path), start, said)) for _ in range(12)]
    for racer in racers:
        racer.start()
    start.set()
    values = {said.get(timeout=60) for _ in racers}
    for racer in racers:
        racer.join(timeout=60)
    held = (tmp_path / "state" / "secrets" / "racing").read_text().strip()
    assert values == {held}, values
    assert len(held) >= 32
    assert stat.S_IMODE((tmp_path / "state" / "secrets" / "racing").stat().st_mode) == 0o600
    assert [p.name for p in (tmp_path / "state" / "secrets").iterdir()] == ["racing"], "no draft left behind"
