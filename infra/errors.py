"""Errors of the local stack."""

from __future__ import annotations

from ground.errors import CdcpipeError, ConfigError, RetryableError


class StackError(CdcpipeError):
    """A stack operation failed; the message names the service and what to do."""


class PortInUseError(StackError, ConfigError):
    """A port a service needs is taken by a process that is not ours."""

    def __init__(self, service: str, port: int, setting: str) -> None:
        super().__init__(
            f"{service}: port {port} on 127.0.0.1 is already in use by another process. "
            f"Stop that process, or choose a free port with {setting}=<port> (or `{setting.removeprefix('CDCPIPE_').lower()}` "
            f"under [stack] in the settings file)."
        )
        self.service = service
        self.port = port
        self.setting = setting


class NotInstalledError(StackError):
    """Jars, binaries or the virtual environment are missing."""


class ServiceStartError(StackError):
    """A service exited or did not become healthy in time."""


class ServiceNotReadyError(RetryableError, StackError):
    """A health check failed for now; the service may still be starting."""
