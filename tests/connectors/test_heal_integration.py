"""A Debezium task failed by Postgres gone across its start is restarted by the stack's collector, no command typed.

Postgres here is reached through a TCP proxy of the test's own, so that only this connector loses it: the
shared stack's Postgres stays up for the tests beside it.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.connectors import connect_client, outbox_connector, wait_state, write_definition
from tests.support.kafka import create_topics, read_topics
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


class Proxy:
    """127.0.0.1:`port` forwarded to `target` while up; down, the port refuses and every open connection is cut."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for s in self._open:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
                s.close()
        self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: down
            server = socket.create_connection(self.target)
            self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def proxy(stack: Stack) -> Iterator[Proxy]:
    found = re.search(r"@([^:/]+):(\d+)/", stack.pg_dsn)
    assert found, stack.pg_dsn
    proxied = Proxy((found.group(1), int(found.group(2))))
    proxied.up()
    yield proxied
    proxied.down()


def restarts(stack: Stack, connector: str) -> float:
    """The collector's count of its restarts of the connector's task, as the stack's Prometheus has it."""
    found = stack.prometheus(f'cdcpipe_connect_task_auto_restarts_total{{connector="{connector}", task="0"}}')
    return float(found[0]["value"][1]) if found else 0.0


def test_a_task_failed_with_postgres_gone_at_its_start_is_restarted_until_it_runs(
    stack: Stack, outbox: Outbox, proxy: Proxy, tmp_path: Path
) -> None:
    name = f"test-{outbox.tag}"
    definition = outbox_connector(outbox, **{"database.hostname": "127.0.0.1", "database.port": str(proxy.port)})
    applied = cdcpipe("connectors", "apply", str(write_definition(tmp_path, definition)), env=stack.process_env())
    assert applied.returncode == 0, applied.stdout + applied.stderr
    topic = f"test.{outbox.tag}.debezium.account"
    create_topics(stack.kafka_config(), [topic])
    try:
        wait_state(stack, name, "RUNNING")
        # Postgres gone (for this connector), and the task restarted meanwhile: its start fails, for good.
        proxy.down()
        with connect_client(stack) as client:
            client.restart_task(name, 0)

            def failed() -> bool:
                return any(t["state"] == "FAILED" for t in client.status(name)["tasks"])

            wait_until(failed, 60, "the task to fail at its start")
            trace = client.status(name)["tasks"][0].get("trace", "")
            assert f"Connection to 127.0.0.1:{proxy.port} refused" in trace, trace
            # Restarted while Postgres is still gone: its start fails again, either for good (restarted again,
            # later each time) or as Debezium retries by itself (the task RUNNING, retrying every 10 s).
            wait_until(lambda: restarts(stack, name) >= 1, 60, "the collector to restart the task")
            # Postgres back: the next restart takes, and what the application writes arrives. No command typed.
            proxy.up()
            wait_state(stack, name, "RUNNING", timeout_s=120)
        outbox.insert([("account", "acc-1", "AccountOpened", {"account_id": "acc-1"})])
        assert len(read_topics(stack.kafka_config(), [topic], 1, timeout_s=90)) == 1
        status = cdcpipe("connectors", "status", name, env=stack.process_env())
        assert "FAILED" not in status.stdout, status.stdout
    finally:
        cdcpipe("connectors", "delete", name, "--drop-slot", "--yes", env=stack.process_env())
