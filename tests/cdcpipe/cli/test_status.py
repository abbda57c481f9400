"""`cdcpipe status --watch`: one screen per interval, each read afresh; Ctrl-C ends it with the last screen's code."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from cdcpipe import cli
from monitor import status as pipeline

# Each screen starts with its time (the clear-screen code before it is left out when not on a terminal).
STAMP = re.compile(r"^\d\d:\d\d:\d\d$", re.MULTILINE)


def test_watch_draws_each_screen_afresh_and_ends_on_ctrl_c_with_the_last_screens_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screens = [
        [pipeline.Line(pipeline.OK, "relay public.outbox", "leading", "")],
        [pipeline.Line(pipeline.FAIL, "relay public.outbox", "no relay is publishing", "cdcpipe relay status")],
    ]
    drawn: list[int] = []
    parts = SimpleNamespace(monitor=SimpleNamespace(prometheus_url="http://127.0.0.1:9090"))
    monkeypatch.setattr(pipeline.Parts, "load", classmethod(lambda cls: parts))

    def lines(_: object) -> list[pipeline.Line]:
        drawn.append(len(drawn))
        return screens[len(drawn) - 1]

    def sleep(seconds: float) -> None:
        assert seconds == 2.5
        if len(drawn) == len(screens):
            raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "lines", lines)
    monkeypatch.setattr("cdcpipe.cli.status.time.sleep", sleep)
    result = CliRunner().invoke(cli.app, ["status", "--watch", "2.5"])
    assert drawn == [0, 1], "each screen read again"
    assert len(STAMP.findall(result.stdout)) == 2
    first, second = STAMP.split(result.stdout)[1:]
    assert "OK   relay public.outbox  leading" in first
    assert "FAIL relay public.outbox  no relay is publishing  (cdcpipe relay status)" in second
    assert "graphs: http://127.0.0.1:9090/consoles/cdcpipe.html" in second
    assert result.exit_code == 1, "the last screen had a FAIL"
