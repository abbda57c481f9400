"""Where the local stack keeps its jars, data, logs and pid files."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
HOME_VARIABLE = "CDCPIPE_HOME"


def default_home() -> Path:
    """`$CDCPIPE_HOME`, or `.stack/` in the checkout (infra/install.py installs the jars there too)."""
    return Path(os.environ.get(HOME_VARIABLE, REPO_ROOT / ".stack")).resolve()
