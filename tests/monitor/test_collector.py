"""The collector when the parts it reads do not answer: each says so in `cdcpipe_collector_source_up`, no scrape fails."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from connectors.config import ConnectSettings
from monitor.collector import PipelineCollector
from monitor.config import MonitorSettings
from schemas.config import OutboxNames
from streaming_jobs.config import JobsSettings

# Nothing listens on port 9 here: refused at once, as a stopped Connect or Postgres is.
DOWN_DSN = "postgresql://cdcpipe_monitor@127.0.0.1:9/cdcpipe"
DOWN_URL = "http://127.0.0.1:9"


def scrape(collector: PipelineCollector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    samples = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_connect_and_postgres_down_are_reported_as_down_and_the_jobs_still_read(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "gone.pid").write_text("999999999\n")  # a job submitted and not stopped, whose driver died
    collector = PipelineCollector(
        MonitorSettings(monitor_pg_dsn=DOWN_DSN, monitor_timeout_s=2),
        ConnectSettings(connect_url=DOWN_URL),
        OutboxNames(),
        JobsSettings(run_dir=run, metrics_targets_dir=tmp_path / "targets"),
    )
    for _ in range(2):  # a second scrape after the first's errors (each logged once) answers the same
        samples = scrape(collector)
        assert samples['cdcpipe_collector_source_up{source="connect"}'] == 0
        assert samples['cdcpipe_collector_source_up{source="postgres"}'] == 0
        assert samples['cdcpipe_collector_source_up{source="jobs"}'] == 1
        assert samples['cdcpipe_job_driver_running{job="gone"}'] == 0
        assert not any(name.startswith(("cdcpipe_connect_", "cdcpipe_pg_", "cdcpipe_outbox_")) for name in samples)


def test_scrapes_serve_the_last_reading_and_never_a_stale_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    collector = PipelineCollector(
        MonitorSettings(monitor_pg_dsn=DOWN_DSN, monitor_timeout_s=1, read_every_s=2),
        ConnectSettings(connect_url=DOWN_URL),
        OutboxNames(),
        JobsSettings(run_dir=tmp_path / "run", metrics_targets_dir=tmp_path / "targets"),
    )
    reads: list[float] = []
    read = collector._read

    def counted() -> Iterator[Metric]:
        reads.append(time.monotonic())
        return read()

    monkeypatch.setattr(collector, "_read", counted)
    for _ in range(5):  # however many scrapes: one read (the first scrape's, before the reader's)
        samples = scrape(collector)
    assert len(reads) == 1
    assert samples['cdcpipe_collector_source_up{source="connect"}'] == 0
    assert 0 <= samples["cdcpipe_collector_reading_age_seconds"] < 2
    collector.refresh()  # what the reader thread does every read_every_s
    assert len(reads) == 2
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 3 * 2 + 1 + 1)  # three reads and a timeout later
    assert scrape(collector) == {}, "a stale reading is not served: the alerts on absent series fire"


def test_an_error_the_healer_did_not_expect_is_logged_and_the_next_turn_heals_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    collector = PipelineCollector(
        MonitorSettings(monitor_pg_dsn=DOWN_DSN, monitor_timeout_s=1),
        ConnectSettings(connect_url=DOWN_URL),
        OutboxNames(),
        JobsSettings(run_dir=tmp_path / "run", metrics_targets_dir=tmp_path / "targets"),
    )
    turns: list[int] = []

    def tick(_: object) -> None:
        turns.append(len(turns))
        if len(turns) == 1:
            raise ValueError("an answer it did not expect")

    monkeypatch.setattr(collector.healer, "tick", tick)
    collector.heal()  # the healer thread's turn: it must not end the thread
    collector.heal()
    assert turns == [0, 1]
    assert "heal: failed" in caplog.text
    assert "an answer it did not expect" in caplog.text
