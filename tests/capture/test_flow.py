"""Which connector writes a topic, and how a stopped one is said beside a job's lag."""

from __future__ import annotations

from capture.flow import Source, writes

TABLES = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "topic.prefix": "shop",
    "table.include.list": "public\\.orders,sales\\..*",
}
OUTBOX = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "topic.prefix": "events",
    "table.include.list": "cdcpipe\\.outbox",
    "transforms": "oversized, outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.route.topic.replacement": "cdcpipe.${routedByValue}.events",
}


def test_a_table_connector_writes_the_topics_of_the_tables_it_captures() -> None:
    assert writes(TABLES, "shop.public.orders")
    assert writes(TABLES, "shop.sales.refunds")
    assert not writes(TABLES, "shop.public.customers")
    assert not writes(TABLES, "other.public.orders")


def test_an_outbox_connector_writes_the_topics_its_route_names() -> None:
    assert writes(OUTBOX, "cdcpipe.account.events")
    assert not writes(OUTBOX, "cdcpipe.account.other")
    assert not writes(OUTBOX, "shop.public.orders")
    default_route = {k: v for k, v in OUTBOX.items() if k != "transforms.outbox.route.topic.replacement"}
    assert writes(default_route, "outbox.event.account")


def test_a_connector_that_does_not_run_is_a_warning_that_says_lag_0_is_not_caught_up() -> None:
    running = Source("shop.public.orders", "tables", "RUNNING", ("RUNNING",), ())
    assert running.flowing
    assert running.line() == "shop.public.orders <- connector tables: RUNNING, tasks RUNNING"
    failed = Source("shop.public.orders", "tables", "RUNNING", ("FAILED",), ("Connect may not write topic(s) x",))
    assert not failed.flowing
    assert failed.line().startswith("WARNING shop.public.orders <- connector tables: RUNNING, tasks FAILED")
    assert "a lag of 0 is not caught up" in failed.line()
    assert failed.line().endswith("Connect may not write topic(s) x")
    paused = Source("t", "tables", "PAUSED", ("PAUSED",), ())
    assert "`cdcpipe connectors status tables` says why" in paused.line()
