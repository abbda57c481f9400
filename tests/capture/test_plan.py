"""The pure parts of `cdcpipe tables`: include-list arithmetic, the files it writes, snapshot notifications."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from capture import connector, files, plan, postgres, progress
from capture.config import CaptureSettings
from capture.errors import CaptureError
from schemas import topics
from schemas.config import OutboxNames, SchemaSettings
from streaming_jobs.jobs.spec import load_all

SIGNAL = "cdcpipe.debezium_signal"


def test_a_table_is_added_once_with_the_signal_table_and_removed_as_its_own_entry() -> None:
    config = {connector.INCLUDE: "public\\.accounts,cdcpipe\\.debezium_heartbeat", "topic.prefix": "shop"}
    added = connector.with_tables(config, ["public.orders", "public.accounts"], SIGNAL)
    assert connector.patterns(added) == [
        "public\\.accounts",
        "cdcpipe\\.debezium_heartbeat",
        "public\\.orders",
        "cdcpipe\\.debezium_signal",
    ]
    assert added["signal.data.collection"] == SIGNAL
    assert added["notification.sink.topic.name"] == "shop.debezium_notifications"
    assert connector.with_tables(added, ["public.orders"], SIGNAL) == added  # twice: no change
    assert connector.captured_tables(added, OutboxNames.load()) == ["public.accounts", "public.orders"]
    removed = connector.without_tables(added, ["public.orders"])
    assert "public\\.orders" not in connector.patterns(removed)
    assert connector.captured_by(removed, "public.accounts") == "public\\.accounts"


def test_a_table_matched_by_a_pattern_of_the_users_is_theirs_to_remove() -> None:
    config = {connector.INCLUDE: "public\\..*"}
    assert connector.captured_by(config, "PUBLIC.Orders") == "public\\..*"  # Debezium ignores case
    assert connector.patterns(connector.with_tables(config, ["public.orders"], SIGNAL)) == [
        "public\\..*",
        "cdcpipe\\.debezium_signal",
    ]
    with pytest.raises(CaptureError, match=r"also captured by the include-list pattern 'public\\\\\.\.\*'"):
        connector.without_tables(config, ["public.orders"])


def test_a_new_connector_captures_the_tables_with_the_settings_every_table_job_reads() -> None:
    config = connector.new_config(CaptureSettings.load(), SchemaSettings.load(), OutboxNames.load(), ["sales.orders"])
    assert connector.captured_by(config, "sales.orders")
    assert config["value.converter.schemas.enable"] == "true"
    assert config["decimal.handling.mode"] == "string"
    assert config["publication.autocreate.mode"] == "disabled"
    assert "cdcpipe.debezium_heartbeat" in config["heartbeat.action.query"].replace('"', "")


def test_the_files_written_are_what_topics_apply_and_the_jobs_read(tmp_path: Path) -> None:
    capture = CaptureSettings.load()
    spec = files.topic_spec(capture, "shop.sales.orders")
    own = files.connector_topics(capture, "shop", ["cdcpipe.debezium_heartbeat", "cdcpipe.Sïgnal"], "shop.notes")
    files_written = [
        files.topic_file(tmp_path / "topics", "tables", "sales.orders", spec),
        files.connector_file(tmp_path / "topics", "tables", own),
        files.job_file(tmp_path / "jobs", "sales.orders", "mirror", "shop.sales.orders"),
        files.job_file(tmp_path / "jobs", "sales.Order Lines", "history", "shop.sales.Order Lines"),
    ]
    for file in files_written:
        file.path.parent.mkdir(exist_ok=True)
        file.path.write_text(file.text)
    declared = topics.load(tmp_path / "topics")
    assert [(t.name, t.partitions, t.config) for t in declared.topics if t.name == spec.name] == [
        (spec.name, 6, spec.config)
    ]
    # Every topic by name, no grant on a prefix: Connect writes (and creates none), the jobs read the table's.
    assert declared.prefixes == []
    assert sorted(t.name for t in declared.topics) == sorted(
        [spec.name, "__debezium-heartbeat.shop", "shop.notes", "shop.cdcpipe.debezium_heartbeat", "shop.cdcpipe.S_gnal"]
    )
    assert {t.producers for t in declared.topics} == {("User:connect",)}
    assert {t.name: t.consumers for t in declared.topics if t.consumers} == {spec.name: ("User:jobs",)}
    jobs = load_all([tmp_path / "jobs"])
    assert sorted(jobs) == ["sales_order_lines_history", "sales_orders_mirror"]
    assert jobs["sales_orders_mirror"].kind == "table_mirror"
    assert jobs["sales_orders_mirror"].source_table == "sales.orders"
    assert tomllib.loads(files_written[2].text)["topics"] == ["shop.sales.orders"]


def test_snapshot_notifications_say_where_each_tables_snapshot_is() -> None:
    def note(kind: str, data: dict[str, str], at: int = 1_795_000_000_000) -> bytes:
        payload = {"aggregate_type": "Incremental Snapshot", "type": kind, "additional_data": data, "timestamp": at}
        return json.dumps({"schema": {}, "payload": payload}).encode()

    started = note("STARTED", {"data_collections": "public.orders,public.refunds"})
    chunk = note(
        "IN_PROGRESS",
        {
            "data_collections": "public.orders,public.refunds",
            "current_collection_in_progress": "public.orders",
            "last_processed_key": "1024",
            "maximum_key": "5000",
        },
    )
    scanned = note(
        "TABLE_SCAN_COMPLETED",
        {"scanned_collection": "public.orders", "total_rows_scanned": "4990", "status": "SUCCEEDED"},
    )
    completed = note("COMPLETED", {}, at=1_795_000_060_000)
    assert {t: p.line() for t, p in progress.fold([started, chunk]).items()} == {
        "public.orders": "incremental snapshot in progress (at key 1024 of 5000) at 2026-11-18 11:06:40 UTC",
        "public.refunds": "incremental snapshot started at 2026-11-18 11:06:40 UTC",
    }
    assert progress.fold([started, chunk, scanned])["public.orders"].line() == (
        "incremental snapshot table scan completed (4990 rows, succeeded) at 2026-11-18 11:06:40 UTC"
    )
    assert {t: p.state for t, p in progress.fold([started, chunk, scanned, completed]).items()} == {
        "public.orders": "COMPLETED",
        "public.refunds": "COMPLETED",
    }
    # A table's own dot is kept; a `db.` before the schema is matched past.
    dotted = note("TABLE_SCAN_COMPLETED", {"scanned_collection": "shop.Order Lines.v2", "total_rows_scanned": "5"})
    prefixed = note("TABLE_SCAN_COMPLETED", {"scanned_collection": "db.public.refunds", "total_rows_scanned": "7"})
    found = progress.fold([dotted, prefixed])
    assert progress.of(found, "shop.Order Lines.v2") == found["shop.Order Lines.v2"]
    assert progress.of(found, "public.refunds") == found["db.public.refunds"]
    other = json.dumps({"payload": {"aggregate_type": "Other", "type": "COMPLETED"}}).encode()
    assert progress.fold([b"not json", None, other]) == {}


def test_generated_columns_go_into_the_column_exclude_list_and_out_with_their_table() -> None:
    config = {connector.INCLUDE: "public\\.accounts"}
    added = connector.with_tables(config, ["sales.zoo"], "cdcpipe.signal", {"sales.zoo": ["gen", "total ex"]})
    assert added[connector.EXCLUDE_COLUMNS] == "sales\\.zoo\\.gen,sales\\.zoo\\.total\\x20ex"
    again = connector.with_tables(added, ["sales.zoo"], "cdcpipe.signal", {"sales.zoo": ["gen"]})
    assert again == added  # run twice, changed once
    removed = connector.without_tables(again, ["sales.zoo"])
    assert connector.EXCLUDE_COLUMNS not in removed
    assert "sales\\.zoo" not in removed[connector.INCLUDE]


ODD_NAMES = [
    "public.orders",
    "sales.Order Lines",
    "x.a,b",
    "x.trailing ",
    " x.leading",
    'x.quote"d',
    "x.Bücher-ä.dot",
    "x.back\\",
    "x.line\nbreak",
]


@pytest.mark.parametrize("table", ODD_NAMES)
def test_any_table_name_is_an_include_list_entry_debezium_splits_back_and_matches(table: str) -> None:
    added = connector.with_tables(
        connector.new_config(*_settings(), []), ["public.first", table, "public.last"], SIGNAL
    )
    entries = connector.patterns(added)
    assert connector.literal(connector.entry(table)) == table
    assert connector.captured_by(added, table) == connector.entry(table)
    assert connector.captured_tables(added, OutboxNames.load()) == ["public.first", table, "public.last"]
    removed = connector.without_tables(added, [table])
    assert connector.captured_tables(removed, OutboxNames.load()) == ["public.first", "public.last"]
    assert len(entries) == len(connector.patterns(removed)) + 1


@pytest.mark.parametrize("table", ODD_NAMES)
def test_a_topic_and_a_job_file_for_any_table_name(tmp_path: Path, table: str) -> None:
    topic = files.topic_of("shop", table)
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in topic)
    spec = files.topic_spec(CaptureSettings.load(), topic)
    for file in (
        files.topic_file(tmp_path / "topics", "tables", table, spec),
        files.job_file(tmp_path / "jobs", table, "mirror", topic),
    ):
        file.path.parent.mkdir(exist_ok=True)
        file.path.write_text(file.text)
    assert [t.name for t in topics.load(tmp_path / "topics").topics] == [topic]
    (job,) = load_all([tmp_path / "jobs"]).values()
    assert (job.source_table, job.topics) == (table, (topic,))


def test_topic_names_are_sanitised_as_debezium_does() -> None:
    assert files.topic_of("shop", "sales.Order Lines") == "shop.sales.Order_Lines"
    assert files.topic_of("shop", "x.Bücher") == "shop.x.B_cher"
    assert files.topic_of("shop", "x.\U0001f600") == "shop.x.__"  # one UTF-16 unit, one underscore
    assert len(files.topic_of("shop", "x." + "a" * 300)) == files.MAX_TOPIC


def test_a_snapshot_signal_names_a_dotted_table_quoted_and_any_other_escaped() -> None:
    assert connector.data_collection("sales.Order Lines") == ("sales\\.Order\\x20Lines", "sales\\.Order\\x20Lines")
    assert connector.data_collection("x.a.b") == ('"x"."a.b"', '"x"\\."a\\.b"')
    with pytest.raises(CaptureError, match="rename the table"):
        connector.data_collection("x.a.(b")


def _settings() -> tuple[CaptureSettings, SchemaSettings, OutboxNames]:
    return CaptureSettings.load(), SchemaSettings.load(), OutboxNames.load()


def test_a_connector_of_another_name_gets_its_own_slot_and_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    default = plan.Settings.load()
    assert (default.capture.slot, default.schema.tables_publication) == ("cdcpipe_tables", "cdcpipe_tables")
    monkeypatch.setenv("CDCPIPE_CAPTURE_CONNECTOR", "crm-Tables")
    other = plan.Settings.load()
    assert (other.capture.slot, other.schema.tables_publication) == ("crm_tables", "crm_tables")
    config = connector.new_config(other.capture, other.schema, other.names, ["public.orders"])
    assert (config["slot.name"], config["publication.name"]) == ("crm_tables", "crm_tables")
    monkeypatch.setenv("CDCPIPE_CAPTURE_SLOT", "mine")
    monkeypatch.setenv("CDCPIPE_TABLES_PUBLICATION", "my_pub")
    chosen = plan.Settings.load()
    assert (chosen.capture.slot, chosen.schema.tables_publication) == ("mine", "my_pub")


def test_a_snapshot_of_a_hundred_tables_is_signalled_in_as_many_signals_as_the_data_column_needs() -> None:
    tables = [f"sales.table_with_a_long_name_{i:03}" for i in range(100)]
    groups = postgres._fitting(tables, "updated_at > now() - interval '1 day'")
    assert len(groups) > 1
    assert [t for g in groups for t in g] == tables
    for group in groups:
        assert len(json.dumps(postgres._signal_data(group, "updated_at > now() - interval '1 day'"))) <= 2048
    with pytest.raises(CaptureError, match="shorten the --where"):
        postgres._fitting(["public.orders"], "x = '" + "y" * 3000 + "'")
