"""Formatting the broker's log folder with the real Kafka storage tool."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from infra.config import StackSettings
from infra.services import kafka
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

# Its URL-safe base64 form starts with "-" (0xF8 = 111110.., 62 is "-" in that alphabet): the storage tool
# would read such a cluster id after `-t` as an option of its own.
DASH_FIRST = uuid.UUID(bytes=b"\xf8" + bytes(15))
SECOND = uuid.UUID(bytes=b"\x10" + bytes(15))


def test_a_cluster_id_that_would_start_with_a_dash_is_drawn_again(
    stack: Stack, open_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = iter([DASH_FIRST, SECOND])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(drawn))
    home = open_tmp / "home"
    home.mkdir()
    (home / "lib").symlink_to(stack.home / "lib")
    broker = kafka.Kafka(StackSettings(home=home))

    broker.prepare()

    meta = dict(
        line.split("=", 1) for line in (broker.data_dir / "meta.properties").read_text().splitlines() if "=" in line
    )
    assert meta["cluster.id"] == base64.urlsafe_b64encode(SECOND.bytes).decode().rstrip("=")
    assert (broker.data_dir / kafka.SECURED_MARK).exists()
