"""`cdcpipe tables snapshot`: the connector asked to read tables' rows again (an incremental snapshot)."""

from __future__ import annotations

from capture import connector, postgres
from capture.errors import CaptureError
from capture.plan import (
    Settings,
    Step,
)
from connectors.client import ConnectClient


def plan_snapshot(settings: Settings, tables: list[str], where: str | None, *, stop: bool = False) -> list[Step]:
    """An incremental snapshot of tables the connector captures (`stop`: the end of the one running)."""
    name = settings.capture.capture_connector
    with ConnectClient(settings.connect) as client:
        config = client.config(name)
    if config is None:
        raise CaptureError(f"there is no connector {name}: `cdcpipe tables add {' '.join(tables)}` captures them first")
    for table in tables:
        if connector.captured_by(config, table) is None:
            raise CaptureError(f"{name} does not capture {table}: `cdcpipe tables add {table}` first")
    if config.get("signal.data.collection") != settings.signal_table:
        raise CaptureError(
            f"{name} reads no signals from {settings.signal_table} (signal.data.collection): "
            f"`cdcpipe tables add {' '.join(tables)}` sets it"
        )
    if stop:
        return [snapshot_step(settings, tables, None, stop=True)]
    if where is not None:
        with postgres.connect(settings.schema) as conn:
            for table in tables:
                postgres.check_condition(conn, settings.schema, table, where)
    return [snapshot_step(settings, tables, where)]


def snapshot_step(
    settings: Settings, tables: list[str], where: str | None, *, stop: bool = False, note: str = ""
) -> Step:
    """The step that asks the connector (through the signal table) to snapshot `tables`, or to stop doing so."""

    def request() -> None:
        with postgres.connect(settings.schema) as conn:
            postgres.request_snapshot(conn, settings.names, settings.schema, tables, where, stop=stop)

    if stop:
        return Step("snapshot", ", ".join(tables), "stop", "the rows sent so far stay sent", request)
    detail = "incremental, in chunks, beside the stream" + (f"; rows where {where}" if where else "")
    detail += f"; {note}" if note else ""
    return Step("snapshot", ", ".join(tables), "request", detail, request)
