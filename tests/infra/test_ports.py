"""A port that is taken fails `up` at once, naming the port and the setting to change."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from infra import stack
from infra.config import StackSettings
from infra.errors import PortInUseError


def test_taken_port_is_a_clear_error_not_a_hang(open_tmp: Path) -> None:
    # A home the services' users may enter (pytest's tmp_path, under a 0700 folder, is refused before any port).
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        settings = StackSettings.load(home=open_tmp, pg_port=port)
        started = time.monotonic()
        with pytest.raises(PortInUseError) as raised:
            stack.up(settings, report=lambda _: None)
        assert time.monotonic() - started < 5
    message = str(raised.value)
    assert f"port {port}" in message
    assert "CDCPIPE_PG_PORT" in message
    assert not (open_tmp / "run" / "postgres.pid").exists(), "nothing may start when a port is taken"


def test_a_port_released_a_moment_later_is_waited_for() -> None:
    """A service killed a moment ago may hold its socket briefly after its pid is gone (seen in the chaos test)."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    port = squatter.getsockname()[1]
    threading.Timer(0.5, squatter.close).start()
    assert stack.wait_port_free(port, timeout_s=3.0)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        assert not stack.wait_port_free(held.getsockname()[1], timeout_s=0.3)
