"""Job files: a table group and the jobs it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_jobs.errors import StreamingError
from streaming_jobs.jobs.spec import load_all


def test_a_table_group_names_each_tables_job_as_its_own_file_would(tmp_path: Path) -> None:
    (tmp_path / "shop.toml").write_text(
        'name = "shop"\nkind = "table_group"\nmembers = ["mirror", "history"]\n'
        'tables = ["sales.orders", "sales.Order Lines"]\ntopics = ["p.sales.orders", "p.sales.Order_Lines"]\n'
        '[on_schema_change]\ncolumn_added = "stop"\n'
    )
    jobs = load_all([tmp_path])
    assert sorted(jobs) == [
        "sales_order_lines_history",
        "sales_order_lines_mirror",
        "sales_orders_history",
        "sales_orders_mirror",
        "shop",
    ]
    member = jobs["sales_order_lines_mirror"]
    assert (member.kind, member.topics, member.source_table, member.group) == (
        "table_mirror",
        ("p.sales.Order_Lines",),
        "sales.Order Lines",
        "shop",
    )
    assert member.table == "sales_order_lines_mirror"  # its Delta table and checkpoint: those of its own job
    assert member.on_schema_change.column_added == "stop"


def test_a_table_in_a_group_and_in_a_job_of_its_own_is_refused(tmp_path: Path) -> None:
    (tmp_path / "shop.toml").write_text(
        'name = "shop"\nkind = "table_group"\nmembers = ["mirror"]\ntables = ["sales.orders"]\ntopics = ["p.sales.orders"]\n'
    )
    (tmp_path / "sales_orders_mirror.toml").write_text(
        'name = "sales_orders_mirror"\nkind = "table_mirror"\ntopics = ["p.sales.orders"]\n'
        'table = "sales_orders_mirror"\nsource_table = "sales.orders"\n'
    )
    with pytest.raises(StreamingError, match="a table runs in one job or one group"):
        load_all([tmp_path])


def test_a_group_lists_a_topic_for_each_table(tmp_path: Path) -> None:
    (tmp_path / "shop.toml").write_text(
        'name = "shop"\nkind = "table_group"\nmembers = ["mirror"]\ntables = ["sales.orders", "sales.x"]\n'
        'topics = ["p.sales.orders"]\n'
    )
    with pytest.raises(StreamingError, match="each table's topic in topics"):
        load_all([tmp_path])
