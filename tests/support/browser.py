"""A page opened in a real headless Chromium (Debian's, which `make install` installs), as a person would see it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000"]


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium is missing: `make install` installs Debian's chromium")
    return found


def render(url: str, screenshot: Path | None = None) -> str:
    """The page's DOM once its scripts ran (10 s of its clock), and a screenshot of it at 1300x1000 if asked."""
    dom = subprocess.run(
        [chromium(), *FLAGS, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    if screenshot is not None:
        shot = subprocess.run(
            [chromium(), *FLAGS, "--window-size=1300,1000", f"--screenshot={screenshot}", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert shot.returncode == 0, shot.stderr[-2000:]
    return dom.stdout


def figure(dom: str, figure_id: str) -> dict[str, int]:
    """A chart's `data-series` and `data-points` (what the page drew)."""
    tag = re.search(rf'<figure id="{figure_id}"[^>]*>', dom)
    assert tag is not None, f"no figure {figure_id} on the page"
    return {k: int(v) for k, v in re.findall(r'data-(series|points)="(\d+)"', tag.group(0))}


def worst_first(dom: str) -> list[dict[str, str]]:
    """The rows of the page's worst-first table, in the order drawn: each one's job, lag and parked flag."""
    rows = re.findall(r'<tr data-rank="(\d+)" data-job="([^"]*)" data-lag="([^"]*)" data-parked="([^"]*)"', dom)
    return [{"rank": r, "job": j, "lag": lag, "parked": p} for r, j, lag, p in rows]
