"""Errors of the collector and `cdcpipe status`."""

from __future__ import annotations

from ground.errors import CdcpipeError


class MonitorError(CdcpipeError):
    """The collector cannot serve, or `status` cannot read what it must; the message says why and what to do."""
