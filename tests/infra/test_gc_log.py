"""Reading the JVMs' pause logs back (the lines are copied from a real broker's log)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from infra.gc_log import gc_flags, pauses

LOG = """\
[2026-11-22T23:12:00.089+0000][606.166s] GC(327) Pause Young (Normal) (G1 Evacuation Pause) 277M->192M(314M) 11.310ms
[2026-11-22T23:12:00.120+0000][606.197s] GC(328) Concurrent Mark Cycle
[2026-11-22T23:12:02.504+0000][608.581s] GC(328) Pause Remark 174M->174M(332M) 7.748ms
[2026-11-22T23:12:02.530+0000][608.607s] GC(328) Pause Cleanup 175M->175M(332M) 0.267ms
[2026-11-22T23:12:02.611+0000][608.688s] GC(328) Concurrent Mark Cycle 490.838ms
[606.300s][info][gc] GC(329) Pause Young (Normal) (G1 Evacuation Pause) 18M->4M(380M) 4.646ms
[2026-11-22T23:12:04.936+0000][611.014s] GC(330) Garbage Collection (Allocation Rate) 530M(69%)->212M(28%)
"""


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_each_pause_is_read_with_its_start_end_and_kind(tmp_path: Path) -> None:
    log = tmp_path / "kafka-gc.log"
    log.write_text(LOG)
    found = pauses(log)
    # The concurrent phases (which do not stop the application), the line without a wall-clock time and
    # ZGC's cycle summary are not pauses.
    assert [p.kind for p in found] == ["Pause Young (Normal) (G1 Evacuation Pause)", "Pause Remark", "Pause Cleanup"]
    first = found[0]
    assert first.ended == pytest.approx(epoch("2026-11-22T23:12:00.089+00:00"))
    assert first.began == pytest.approx(first.ended - 0.011310)
    assert first.ms == 11.31


def test_only_the_pauses_that_overlap_the_window(tmp_path: Path) -> None:
    log = tmp_path / "kafka-gc.log"
    log.write_text(LOG)
    young_ended = epoch("2026-11-22T23:12:00.089+00:00")
    # A window that starts inside the young pause (it began 11 ms before its line) still holds it.
    assert [p.kind for p in pauses(log, since=young_ended - 0.005, until=young_ended + 1)] == [
        "Pause Young (Normal) (G1 Evacuation Pause)"
    ]
    assert pauses(log, since=young_ended + 0.001, until=epoch("2026-11-22T23:12:02.490+00:00")) == []
    assert len(pauses(log, since=epoch("2026-11-22T23:12:02.400+00:00"))) == 2


def test_no_log_means_no_pauses(tmp_path: Path) -> None:
    assert pauses(tmp_path / "absent.log") == []


def test_the_flags_name_the_file_quoted_with_wall_clock_stamps(tmp_path: Path) -> None:
    (flag,) = gc_flags(tmp_path / "kafka-gc.log")
    assert flag == f'-Xlog:gc:file="{tmp_path / "kafka-gc.log"}":utctime,uptime:filecount=2,filesize=20m'
