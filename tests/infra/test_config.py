from __future__ import annotations

import pytest

from ground.errors import ConfigError
from infra.config import StackSettings


def test_two_services_on_one_port_are_rejected() -> None:
    with pytest.raises(ConfigError, match="connect_port and kafka_port are both 9092"):
        StackSettings.load(connect_port=9092)


@pytest.mark.parametrize("port", [0, 80, 70000])
def test_port_out_of_range(port: int) -> None:
    with pytest.raises(ConfigError, match="between 1024 and 65535"):
        StackSettings.load(pg_port=port)


@pytest.mark.parametrize("heap", ["768", "lots", "1t"])
def test_heap_needs_a_unit(heap: str) -> None:
    with pytest.raises(ConfigError, match="CDCPIPE_KAFKA_HEAP"):
        StackSettings.load(kafka_heap=heap)


def test_derived_addresses_are_loopback() -> None:
    settings = StackSettings.load(kafka_port=19092, connect_port=18083)
    assert settings.kafka_bootstrap == "127.0.0.1:19092"
    assert settings.connect_url == "http://127.0.0.1:18083"
