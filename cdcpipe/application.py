"""What an application calls: `emit` an event into the outbox, in the application's own transaction.

    from cdcpipe.application import emit, ContractViolationError

    with psycopg.connect(dsn) as conn:  # autocommit off: one transaction
        conn.execute("UPDATE accounts SET balance = balance + 250 WHERE id = %s", ("acc-1",))
        emit(conn, "account", "acc-1", "MoneyDeposited", {"account_id": "acc-1", "amount": 250, "currency": "EUR"})

`emit` checks the payload against the event's contract (`<EventType>.v<N>.json` in a folder of
`CDCPIPE_CONTRACT_DIRS`) and writes nothing if it breaks it; the event commits with the business rows, or not at
all. This module and `cdcpipe.projection` are cdcpipe's public API: what they name keeps its meaning across
releases; every other module may change without notice.
"""

from __future__ import annotations

from schemas.emit import emit
from schemas.errors import ContractError, ContractViolationError, SchemaError

__all__ = ["ContractError", "ContractViolationError", "SchemaError", "emit"]
