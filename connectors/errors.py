"""Errors of the connectors stage (Kafka Connect and Debezium)."""

from __future__ import annotations

from ground.errors import CdcpipeError, RetryableError


class ConnectError(CdcpipeError):
    """Kafka Connect refused a request, or a connector definition is wrong."""


class ConnectUnavailableError(RetryableError, ConnectError):
    """The Connect worker does not answer (down, starting, or a network problem)."""


class RebalanceInProgressError(RetryableError, ConnectError):
    """Connect answered 409: the workers are rebalancing; the same request succeeds a moment later."""


class ConnectAuthError(ConnectError):
    """Connect's REST API refused the credentials given, or wanted some and got none (401/403)."""


class ConnectorNotFoundError(ConnectError):
    """No connector of that name exists on the Connect cluster."""


class DefinitionError(ConnectError):
    """A connector definition file is malformed, or Connect's validation rejected fields of it.

    `problems` maps each offending field to what is wrong with it.
    """

    def __init__(self, source: str, problems: dict[str, list[str]]) -> None:
        lines = [f"  {field}: {'; '.join(errors)}" for field, errors in sorted(problems.items())]
        super().__init__(f"{source}: {len(problems)} field(s) rejected:\n" + "\n".join(lines))
        self.source = source
        self.problems = problems
