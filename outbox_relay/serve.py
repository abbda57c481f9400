"""`cdcpipe relay run` (or `python -m outbox_relay`): the relay as a long-running process, its metrics and signals."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from ground.errors import CdcpipeError
from outbox_relay.config import RelaySettings
from outbox_relay.errors import RelayError
from outbox_relay.metrics import RelayMetrics
from outbox_relay.relay import Relay
from schemas.config import OutboxNames

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def serve(settings: RelaySettings, names: OutboxNames, *, log_level: str = "INFO") -> None:
    """Publish until SIGTERM or SIGINT; then the batch in flight finishes and this returns."""
    if log_level.upper() not in LOG_LEVELS:
        raise RelayError(f"{log_level!r} is not a log level: use one of {', '.join(LOG_LEVELS)}")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics = RelayMetrics()
    metrics.serve(settings.metrics_port)
    Relay(settings, names, stop=stop, metrics=metrics).run()


def main() -> int:
    """`python -m outbox_relay`: `cdcpipe relay run` without the command line above it (the demo starts it so)."""
    try:
        serve(RelaySettings.load(), OutboxNames.load())
    except CdcpipeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0
