"""`cdcpipe status`: the whole pipeline on one screen (monitor)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import typer

from monitor import status as pipeline

COLORS = {pipeline.OK: typer.colors.GREEN, pipeline.WARN: typer.colors.YELLOW, pipeline.FAIL: typer.colors.RED}


def status(
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    watch: float = typer.Option(0.0, "--watch", help="draw the screen again every this many seconds (Ctrl-C ends)"),
) -> None:
    """Relay, connectors and their slots, jobs, the stack: each OK, WARN or FAIL with why and what shows more.

    Exits 1 when any line is FAIL (the last screen's, with --watch).
    """
    parts = pipeline.Parts.load()
    while True:
        found = pipeline.lines(parts)
        if as_json:
            typer.echo(
                json.dumps({"failed": pipeline.failed(found), "lines": [asdict(line) for line in found]}, indent=2)
            )
        else:
            if watch:
                typer.echo("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S"), nl=True)
            width = max((len(line.part) for line in found), default=0)
            for line in found:
                level = typer.style(f"{line.level:<4}", fg=COLORS[line.level], bold=True)
                more = f"  ({line.more})" if line.more and line.level != pipeline.OK else ""
                typer.echo(f"{level} {line.part:<{width}}  {line.says}{more}")
            if parts.monitor.prometheus_url:
                url = parts.monitor.prometheus_url
                typer.echo(f"graphs: {url}/consoles/cdcpipe.html   alerts: {url}/alerts")
        if not watch:
            break
        try:
            time.sleep(watch)
        except KeyboardInterrupt:
            break
    if pipeline.failed(found):
        raise typer.Exit(1)
