"""A port that is taken fails `up` at once, naming the port and the setting to change."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from infra import stack
from infra.config import StackSettings
from infra.errors import PortInUseError


def test_taken_port_is_a_clear_error_not_a_hang(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        settings = StackSettings.load(home=tmp_path, pg_port=port)
        started = time.monotonic()
        with pytest.raises(PortInUseError) as raised:
            stack.up(settings, report=lambda _: None)
        assert time.monotonic() - started < 5
    message = str(raised.value)
    assert f"port {port}" in message
    assert "CDCPIPE_PG_PORT" in message
    assert not (tmp_path / "run" / "postgres.pid").exists(), "nothing may start when a port is taken"
