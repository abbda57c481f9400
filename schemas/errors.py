"""Errors of the schema stage: the outbox DDL, identifiers and event contracts."""

from __future__ import annotations

from ground.errors import CdcpipeError


class SchemaError(CdcpipeError):
    """The outbox schema could not be applied or read."""


class ContractError(SchemaError):
    """An event contract file is missing or broken."""


class UnknownEventTypeError(ContractError):
    """No contract exists for an event type and version."""


class ContractViolationError(SchemaError):
    """A payload breaks its event contract. `field` is the JSON path of the first problem."""

    def __init__(self, event_type: str, version: int, field: str, problem: str, contract: str = "") -> None:
        # `contract`: the file the contract was read from (the user's folder or the samples), when known.
        super().__init__(
            f"{event_type} v{version}: payload field {field}: {problem}; fix the payload to match "
            f"{contract or f'the contract {event_type}.v{version}.json'} (nothing was written)"
        )
        self.event_type = event_type
        self.version = version
        self.field = field


class TopicError(SchemaError):
    """A topic file is invalid, or the cluster refused to create or configure a topic."""
