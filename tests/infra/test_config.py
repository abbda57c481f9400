from __future__ import annotations

from pathlib import Path

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


def test_a_cluster_lists_every_node_and_keeps_three_replicas_two_in_sync(tmp_path: Path) -> None:
    settings = StackSettings.load(home=tmp_path, kafka_nodes=3, connect_workers=2)
    assert settings.kafka_bootstrap == "127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292"
    assert settings.connect_url == "http://127.0.0.1:8083,http://127.0.0.1:8183"
    assert (settings.replicas, settings.min_insync) == (3, 2)
    assert (StackSettings.load(home=tmp_path).replicas, StackSettings.load(home=tmp_path).min_insync) == (1, 1)


def test_a_further_nodes_port_taken_by_another_service_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"connect_port and kafka_port#2 are both 9192"):
        StackSettings.load(home=tmp_path, kafka_nodes=3, connect_port=9192)
    with pytest.raises(ConfigError, match=r"connect_metrics_port#4 is 65605: past 65535"):
        StackSettings.load(home=tmp_path, connect_workers=4, connect_metrics_port=65305)


def test_the_stack_keeps_the_node_counts_it_was_made_with(tmp_path: Path) -> None:
    StackSettings.load(home=tmp_path, kafka_nodes=3, connect_workers=2).record_topology()
    later = StackSettings.load(home=tmp_path)  # `stack status`, `stack env`: no flag given
    assert (later.kafka_nodes, later.connect_workers) == (3, 2)
    assert StackSettings.load(home=tmp_path, kafka_nodes=3).connect_workers == 2
    with pytest.raises(ConfigError, match=r"was made with kafka_nodes=3, and 1 is asked.*stack down --purge"):
        StackSettings.load(home=tmp_path, kafka_nodes=1)


def test_a_stack_made_before_the_counts_were_kept_is_one_nodes(tmp_path: Path) -> None:
    (tmp_path / "state" / "kafka").mkdir(parents=True)
    (tmp_path / "state" / "kafka" / "meta.properties").write_text("node.id=1\n")
    assert StackSettings.load(home=tmp_path).kafka_nodes == 1
    with pytest.raises(ConfigError, match=r"was made with kafka_nodes=1, and 3 is asked"):
        StackSettings.load(home=tmp_path, kafka_nodes=3)
