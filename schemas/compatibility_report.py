"""`cdcpipe schema check`: every event contract version against the one before it, in both directions."""

from __future__ import annotations

from collections.abc import Iterator

from schemas import compatibility
from schemas.contracts import ContractRegistry
from schemas.errors import UnknownEventTypeError


def compatibility_report(registry: ContractRegistry, event_types: list[str] | None) -> Iterator[tuple[str, bool]]:
    """(line, breaks its declared mode) per version with a version before it; unknown types are an error."""
    known = sorted({c.event_type for c in registry})
    for wanted in event_types or []:
        if wanted not in known:
            raise UnknownEventTypeError(f"no contract for event type {wanted!r} (known: {', '.join(known) or 'none'})")
    for contract in registry:
        if event_types and contract.event_type not in event_types:
            continue
        before = registry.previous(contract)
        if before is None:
            continue
        mode = compatibility.mode_of(contract.schema)
        backward = compatibility.problems("backward", before.schema, contract.schema)
        forward = compatibility.problems("forward", before.schema, contract.schema)
        says = ", ".join(
            [
                "backward compatible" if not backward else "NOT backward compatible",
                "forward compatible" if not forward else "NOT forward compatible",
            ]
        )
        breaks = registry.breaks(contract)
        verdict = f"declares {mode}: " + ("BROKEN" if breaks else "ok")
        yield f"{contract.event_type} v{before.version} -> v{contract.version}: {says}; {verdict}", bool(breaks)
        for reason in backward + forward:
            yield f"    {reason}", False
