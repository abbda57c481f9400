"""Job files: a table group and the jobs it names."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
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


@pytest.mark.parametrize("what", ["submit", "stop"])
def test_a_groups_table_is_not_started_or_stopped_alone(tmp_path: Path, what: str) -> None:
    from streaming_jobs.config import JobsSettings
    from streaming_jobs.run import control

    (tmp_path / "shop.toml").write_text(
        'name = "shop"\nkind = "table_group"\nmembers = ["mirror"]\ntables = ["sales.orders"]\ntopics = ["p.sales.orders"]\n'
    )
    settings = JobsSettings.load(jobs_dirs=[tmp_path], run_dir=tmp_path / "run")
    act: Callable[[], object] = partial(control.stop, settings, "sales_orders_mirror")
    if what == "submit":
        act = partial(control.submit, settings, "sales_orders_mirror", master=None, trigger=None)
    with pytest.raises(StreamingError, match=f"runs in the table group shop .*`cdcpipe jobs {what} shop`"):
        act()
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir()), "nothing was started"


def test_a_range_command_works_on_one_table_of_a_group(tmp_path: Path) -> None:
    from streaming_jobs.jobs.spec import one_job

    (tmp_path / "shop.toml").write_text(
        'name = "shop"\nkind = "table_group"\nmembers = ["mirror"]\ntables = ["sales.orders", "sales.x"]\n'
        'topics = ["p.sales.orders", "p.sales.x"]\n'
    )
    (tmp_path / "both.toml").write_text(
        'name = "both"\nkind = "table_group"\nmembers = ["mirror", "history"]\ntables = ["sales.y"]\n'
        'topics = ["p.sales.y"]\n'
    )
    assert one_job("shop", [tmp_path], "sales.x").name == "sales_x_mirror"
    assert one_job("sales_x_mirror", [tmp_path]).group == "shop"  # the table's job, named itself
    with pytest.raises(StreamingError, match=r"table group \(.*\): name one of its tables with --table \(sales.orders"):
        one_job("shop", [tmp_path])
    with pytest.raises(StreamingError, match=r"has no table 'sales.z'; its tables: sales.orders, sales.x"):
        one_job("shop", [tmp_path], "sales.z")
    with pytest.raises(StreamingError, match=r"runs 2 jobs of sales.y: .*sales_y_mirror or sales_y_history"):
        one_job("both", [tmp_path], "sales.y")
    with pytest.raises(StreamingError, match="is a table_mirror, not a table group; leave --table out"):
        one_job("sales_x_mirror", [tmp_path], "sales.x")
