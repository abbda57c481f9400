"""`emit`: write an event into the outbox inside the application's own transaction."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.types.json import Jsonb

from schemas import compatibility
from schemas.config import OutboxNames
from schemas.contracts import ContractRegistry, default_registry
from schemas.errors import ContractError, ContractViolationError, SchemaError


@cache
def _default_names() -> OutboxNames:
    return OutboxNames.load()


@cache
def _insert(names: OutboxNames) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {} (id, aggregatetype, aggregateid, type, type_version, payload) VALUES (%s, %s, %s, %s, %s, %s)"
    ).format(sql.Identifier(names.outbox_schema, names.outbox_table))


def emit(
    conn: psycopg.Connection[Any],
    aggregate_type: str,
    aggregate_id: str,
    event_type: str,
    payload: Mapping[str, Any] | None,
    *,
    version: int | None = None,
    event_id: uuid.UUID | None = None,
    names: OutboxNames | None = None,
    registry: ContractRegistry | None = None,
) -> uuid.UUID:
    """Validate `payload` against its contract and insert the event; return the event id.

    Nothing is committed here: the event becomes visible when the caller's transaction commits, and
    disappears with it if it rolls back. A payload of None is a tombstone (a read model deletes the key).
    """
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        raise SchemaError(
            "emit() needs the caller's transaction: call it inside `with conn.transaction():`, or on a "
            "connection with autocommit off, so the event commits together with the business rows"
        )
    contracts = registry or default_registry()
    contract = contracts.get(event_type, version)
    broken = contracts.breaks(contract)
    if broken:
        mode = compatibility.mode_of(contract.schema)
        before = contracts.previous(contract)
        raise ContractError(
            f"{event_type} v{contract.version} ({contract.path}) is not {mode} compatible with "
            f"v{before.version if before else '?'}, as it declares: {'; '.join(broken)}. Nothing was written. Make "
            f'v{contract.version} compatible, or declare the break in it ("x-compatibility": "none") once every '
            "reader can take it; `cdcpipe schema check` shows every version"
        )
    if contract.aggregate_type != aggregate_type:
        raise ContractViolationError(
            event_type,
            contract.version,
            "aggregate_type",
            f"{event_type} belongs to aggregate type {contract.aggregate_type!r}, not {aggregate_type!r}",
        )
    if not aggregate_id:
        raise ContractViolationError(event_type, contract.version, "aggregate_id", "must not be empty")
    if payload is not None:
        contract.validate(payload)
    event_id = event_id or uuid.uuid4()
    conn.execute(
        _insert(names or _default_names()),
        (
            event_id,
            aggregate_type,
            aggregate_id,
            event_type,
            contract.version,
            None if payload is None else Jsonb(payload),
        ),
    )
    return event_id
