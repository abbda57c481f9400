from __future__ import annotations

import re

import pytest

from streaming_jobs.errors import PositionError
from streaming_jobs.ranges.positions import Position, Range, parse


def test_named_positions() -> None:
    assert parse("earliest") == Position("earliest")
    assert parse(" latest ") == Position("latest")


def test_offsets_per_partition() -> None:
    position = parse("outbox.event.account:0:120,outbox.event.account:1:7")
    assert position.kind == "offsets"
    assert dict(position.offsets) == {("outbox.event.account", 0): 120, ("outbox.event.account", 1): 7}


def test_a_partition_given_twice_is_refused() -> None:
    with pytest.raises(PositionError, match="given twice"):
        parse("t:0:1,t:0:2")


def test_timestamps_need_a_zone_and_dates_are_utc_midnight() -> None:
    assert parse("2026-11-22T03:00:00Z").timestamp_ms == 1795316400000
    assert parse("2026-11-22T04:00:00+01:00").timestamp_ms == 1795316400000
    assert parse("2026-11-22").timestamp_ms == 1795305600000
    with pytest.raises(PositionError, match=re.escape("no time zone: add one, e.g. 2026-11-22T03:00:00Z")):
        parse("2026-11-22T03:00:00")


@pytest.mark.parametrize("text", ["yesterday", "t:0", "t:x:1", "t:0:1,garbage", ""])
def test_anything_else_names_the_forms_there_are(text: str) -> None:
    with pytest.raises(PositionError, match="earliest, latest, an ISO 8601 time"):
        parse(text)


def test_a_range_in_sparks_json_shape() -> None:
    span = Range({("a", 0): 5, ("a", 1): 0, ("b", 0): 2}, {("a", 0): 10, ("a", 1): 4, ("b", 0): 2})
    assert span.total == 9
    assert span.spark_json(span.end) == {"a": {"0": 10, "1": 4}, "b": {"0": 2}}


def test_a_time_before_1970_is_refused_with_the_fix() -> None:
    with pytest.raises(PositionError, match=r"before 1970-01-01T00:00:00Z.*use earliest"):
        parse("1969-12-31T23:59:59Z")
