"""Errors of `cdcpipe tables`."""

from __future__ import annotations

from ground.errors import CdcpipeError


class CaptureError(CdcpipeError):
    """A table cannot be captured (or released) as asked; the message says why and what to do."""
