"""The stack's JVMs log each garbage-collection pause; this reads those logs back.

A broker that stops for a pause holds every acknowledgement and every fetch for its length, so a latency
benchmark that cannot see the pauses cannot say where its tail came from. The lines are HotSpot's unified
logging (`-Xlog:gc:file=...:utctime,uptime`), for example:

    [2026-11-22T23:12:00.089+0000][606.166s] GC(327) Pause Young (Normal) (G1 Evacuation Pause) 277M->192M(314M) 11.310ms
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

# Concurrent collectors (ZGC, Shenandoah) log their phases too; only the lines that stop the application
# carry "Pause" and end with their length.
_PAUSE = re.compile(
    r"^\[(?P<at>[^\]]+)\]\[[^\]]*\] GC\(\d+\) (?P<kind>Pause .*?)(?: \d+M->\d+M\(\d+M\))? (?P<ms>[\d.]+)ms$"
)


@dataclass(frozen=True)
class Pause:
    """One stop-the-world pause: when it ended (epoch seconds), how long it lasted and what kind it was."""

    ended: float
    ms: float
    kind: str

    @property
    def began(self) -> float:
        return self.ended - self.ms / 1000


def log_file(logs: Path, service: str) -> Path:
    """Where a service's JVM writes its pauses.

    A folder of the service's own, which its JVM (maybe run as a system user of its own) may write and rotate files
    in. One folder for all, handed to each service in turn, left the JVMs started before the last unable to rotate
    their files, and a Kafka node starting beside another unable to open its file at all.
    """
    return logs / "gc" / service / f"{service}.log"


def gc_flags(log_file: Path) -> list[str]:
    """The JVM flags that write every pause to `log_file` (two files of 20 MB at most, then rotated)."""
    return [f'-Xlog:gc:file="{log_file}":utctime,uptime:filecount=2,filesize=20m']


def pauses(log_file: Path, since: float = 0.0, until: float = float("inf")) -> list[Pause]:
    """The pauses in `log_file` that overlap [since, until] (epoch seconds); none if there is no log.

    HotSpot stamps a line when the pause ends, so it began its length earlier.
    """
    if not log_file.exists():
        return []
    found = []
    for line in log_file.read_text(errors="replace").splitlines():
        match = _PAUSE.match(line.strip())
        if match is None:
            continue
        try:
            ended = datetime.strptime(match["at"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
        except ValueError:
            continue  # a line written with other decorators: not ours to guess at
        pause = Pause(ended, float(match["ms"]), match["kind"])
        if pause.ended >= since and pause.began <= until:
            found.append(pause)
    return found
