"""Real schemas captured as a new user captures them; each mirror equal to its table, value for value.

Every common type, serial and composite keys, enums and domains in other schemas, a partitioned table, TOASTed
values.
One schema of tables shaped as real ones, filled before `tables add --schema --group` (the initial snapshot; their mirrors one table group), changed
after it (the stream). Each mirror is read back with delta-rs and compared with Postgres column by column,
each type in the canonical form `CANONICAL` states. The two failures a user met first are in it: a `bigserial`
key (a snapshot names it BIGSERIAL, the stream INT8, as the JDBC driver and pgoutput do) and an enum of another
schema (a snapshot names it `"billing"."inv_status"`, the stream INV_STATUS): neither may make a contract version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.capture import forget, tables, user_env
from tests.support.jobs import drain, read_delta
from tests.support.outbox import Outbox
from tests.support.stack import Stack, cdcpipe
from tests.support.waits import wait_until

pytestmark = pytest.mark.integration


def _text(value: Any) -> Any:
    return None if value is None else str(value)


def _float_list(value: Any) -> Any:
    """A geometric value as its punctuation and its numbers (Debezium writes `{1.0,2.0,3.0}` for `{1,2,3}`)."""
    if value is None:
        return None
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", lambda m: repr(float(m.group(0))), str(value))


def _iso_interval(value: Any) -> Any:
    """An ISO 8601 interval as (years, months, days, hours, minutes, seconds), Postgres' or Debezium's spelling."""
    if value is None:
        return None
    found = re.fullmatch(
        r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?[\d.]+)S)?)?", str(value)
    )
    assert found is not None, value
    *whole, seconds = found.groups()
    return (*(int(p or 0) for p in whole), Decimal(seconds or 0))


# Each column: its type, and the canonical form of a value, as (the Postgres expression read, the Python function
# that makes the Delta value comparable with it).
CANONICAL: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    "ident": ("bigint GENERATED ALWAYS AS IDENTITY", "{c}", lambda v: v),
    "small_s": ("smallserial", "{c}", lambda v: v),
    "m": ("{s}.mood", "{c}::text", lambda v: v),
    "ms": ("{s}.mood[]", "{c}::text[]", lambda v: v),
    "st": ("{b}.inv_status", "{c}::text", lambda v: v),
    "stl": ("{b}.inv_status[]", "{c}::text[]", lambda v: v),
    "d_int": ("{s}.posint", "{c}", lambda v: v),
    "d_num": ("{b}.money2", "{c}", lambda v: v),
    "d_text": ("{b}.email", "{c}", lambda v: v),
    "d_date": ("{b}.due", "{c}", lambda v: v),
    "d_ru": ('{b}."сумма"', "{c}", lambda v: v),
    "t_arr": ("text[]", "{c}", lambda v: v),
    "u_arr": ("uuid[]", "{c}::text[]", lambda v: v),
    "j_arr": ("jsonb[]", "{c}::text[]", lambda v: v),
    "j": ("json", "{c}::text", lambda v: v),
    "jb": ("jsonb", "{c}::text", lambda v: v),
    "tsv": ("tsvector", "{c}::text", lambda v: v),
    "x": ("xml", "{c}::text", lambda v: v),
    "h": ("hstore", "hstore_to_json({c})::text", lambda v: v),
    "mon": ("money", "{c}::numeric::text", lambda v: v),
    "iv": ("interval", "{c}::text", lambda v: v),
    "b1": ("bit(1)", "{c}::text", lambda v: v),
    "b8": ("bit(8)", "{c}::text", lambda v: v),
    "vb": ("varbit", "{c}::text", lambda v: v),
    "r4": ("int4range", "{c}::text", lambda v: v),
    "rts": ("tsrange", "{c}::text", lambda v: v),
    "rd": ("daterange", "{c}::text", lambda v: v),
    "ip": ("inet", "{c}::text", lambda v: v),
    "cid": ("cidr", "{c}::text", lambda v: v),
    "mac": ("macaddr", "{c}::text", lambda v: v),
    "pt": ("point", "{c}::text", _float_list),
    "ln": ("line", "{c}::text", _float_list),
    "ls": ("lseg", "{c}::text", _float_list),
    "bx": ("box", "{c}::text", _float_list),
    "pth": ("path", "{c}::text", _float_list),
    "pg": ("polygon", "{c}::text", _float_list),
    "circ": ("circle", "{c}::text", _float_list),
    "tm": ("time", "(EXTRACT(epoch FROM {c}) * 1000000)::bigint", lambda v: v),
    "ts": ("timestamp", "{c}", lambda v: v),
    "tstz": ("timestamptz", "{c}", lambda v: v),
    "dt": ("date", "{c}", lambda v: v),
    "n12": ("numeric(12,2)", "{c}", lambda v: v),
    "n": ("numeric", "{c}::text", lambda v: v),
    "o": ("oid", "{c}::text", lambda v: v),
    "c3": ("char(3)", "{c}", lambda v: v),
    "qc": ('"char"', "{c}::text", lambda v: v),
    "by": ("bytea", "{c}", lambda v: v),
    "ci": ("citext", "{c}::text", lambda v: v),
    "f4": ("real", "{c}", lambda v: v),
    "f8": ("double precision", "{c}", lambda v: v),
    "bo": ("boolean", "{c}", lambda v: v),
    "u": ("uuid", "{c}::text", lambda v: v),
    # Large enough to be TOASTed (random text does not compress): an update that leaves them alone sends
    # Debezium's placeholder, in each type's form, and the mirror keeps the values.
    "big_t": ("text[]", "{c}", lambda v: v),
    "big_i": ("int4[]", "{c}", lambda v: v),
    "big_h": ("hstore", "hstore_to_json({c})::text", lambda v: v),
    "big_j": ("jsonb", "{c}::text", lambda v: v),
    "big_b": ("bytea", "{c}", lambda v: v),
}
# Postgres writes a hstore's JSON with spaces, Debezium without: compared as JSON.
JSON_TEXT = {"h", "big_h"}
INTERVALS = {"iv"}
# Values of every column. Enum arrays hold no NULL element: Debezium 3.4 sends such an array as null (see
# docs/schema-changes.md); tested apart below.
ROW = {
    "m": "ok",
    "ms": "{sad,happy}",
    "st": "paid",
    "stl": "{draft,sent}",
    "d_int": 7,
    "d_num": "12.34",
    "d_text": "a@b.c",
    "d_date": "2024-02-29",
    "d_ru": "5.5",
    "t_arr": '{a,NULL,"b c"}',
    "u_arr": "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}",
    "j_arr": '{"{\\"a\\": 1}",NULL}',
    "j": '{"x": [1, 2],  "y": null}',
    "jb": '{"k": "v", "n": 1.50}',
    "tsv": "a fat cat",
    "x": "<a>1</a>",
    "h": 'k=>v, n=>NULL, "a b"=>"c,d"',
    "mon": "12.34",
    "iv": "1 year 1 mon 2 days 03:04:05.678901",
    "b1": "1",
    "b8": "00100101",
    "vb": "1100000001",
    "r4": "[1,10)",
    "rts": "[2024-01-01 10:00,2024-01-02 00:00)",
    "rd": "[2024-01-01,2024-02-01)",
    "ip": "192.168.0.1/24",
    "cid": "10.0.0.0/8",
    "mac": "08:00:2b:01:02:03",
    "pt": "(1.5,-2)",
    "ln": "{1,2,3}",
    "ls": "[(0,0),(1,1.25)]",
    "bx": "(1,1),(0,0)",
    "pth": "((0,0),(1,1),(2,0))",
    "pg": "((0,0),(1,1),(2,0))",
    "circ": "<(0,0),2>",
    "tm": "13:14:15.123456",
    "ts": "2024-01-02 03:04:05.123456",
    "tstz": "2024-01-02 03:04:05.123456+01",
    "dt": "2024-01-02",
    "n12": "12345.67",
    "n": "NaN",
    "o": "42",
    "c3": "ab",
    "qc": "x",
    "by": b"\xde\xad\xbe\xef",
    "ci": "MiXeD",
    "f4": 1.5,
    "f8": 2.25,
    "bo": True,
    "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
}
OTHER_VALUES = {"n": ["Infinity", "-Infinity", "1e-20"], "vb": ["0", "110"], "b8": ["10000000"], "iv": ["-3 days"]}


def _ddl(schema: str, billing: str) -> list[str]:
    s, b = sql.Identifier(schema).as_string(None), sql.Identifier(billing).as_string(None)
    columns = ", ".join(f"{name} {kind.format(s=s, b=b)}" for name, (kind, _, _) in CANONICAL.items())
    return [
        "CREATE EXTENSION IF NOT EXISTS hstore",
        "CREATE EXTENSION IF NOT EXISTS citext",
        f"CREATE SCHEMA {s}",
        f"CREATE SCHEMA {b}",
        f"CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy')",
        f"CREATE TYPE {b}.inv_status AS ENUM ('draft', 'sent', 'paid')",
        f"CREATE TYPE {b}.\"Priority\" AS ENUM ('Low', 'High')",
        f"CREATE DOMAIN {s}.posint AS integer CHECK (VALUE > 0)",
        f"CREATE DOMAIN {b}.money2 AS numeric(12,2)",
        f"CREATE DOMAIN {b}.email AS text CHECK (VALUE LIKE '%@%')",
        f"CREATE DOMAIN {b}.due AS date",
        f'CREATE DOMAIN {b}."сумма" AS numeric(10,2)',
        # The two tables a user met first: a bigserial key; an enum of another schema and a composite key.
        f"CREATE TABLE {s}.orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount numeric(12,2))",
        f'CREATE TABLE {s}."Invoices" (region text, "No" int, status {b}.inv_status NOT NULL, prio {b}."Priority", '
        f'total {b}.money2, PRIMARY KEY (region, "No"))',
        f"CREATE TABLE {s}.zoo (id serial PRIMARY KEY, {columns}, gen int GENERATED ALWAYS AS (id * 2) STORED)",
        # Partitioned by range; a partition is attached after `tables add`.
        f"CREATE TABLE {s}.events (id bigint, at date, note text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)",
        f"CREATE TABLE {s}.events_2024 PARTITION OF {s}.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')",
        f"CREATE TABLE {s}.events_2025 PARTITION OF {s}.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')",
        # Any name: spaces, a dot, non-ASCII letters, dashes, capitals, `=`, in the table's name, its key, its columns.
        f'CREATE TABLE {s}.{ODD} ("Line No" int, "a.b" text, "Ünï-Name" text, "x=y" int, "MixedCase" text, '
        f'"sp ace" numeric(5,1), PRIMARY KEY ("Line No", "a.b"))',
    ]


ODD = '"Order Lines.v2"'
ODD_COLUMNS = ("Line No", "a.b", "Ünï-Name", "x=y", "MixedCase", "sp ace")


def _odd_rows(conn: psycopg.Connection[Any], table: sql.Identifier) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    query = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(map(sql.Identifier, ODD_COLUMNS)), table)
    return {(r[0], r[1]): r[2:] for r in conn.execute(query)}


def _insert_zoo(conn: psycopg.Connection[Any], ident: sql.Identifier, row: dict[str, Any]) -> None:
    names = sql.SQL(", ").join(sql.Identifier(c) for c in row)
    values = sql.SQL(", ").join(sql.Placeholder() for _ in row)
    conn.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(ident, names, values), list(row.values()))


def _big(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Values Postgres TOASTs: about 40 KB of random text each."""
    text = conn.execute("SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 1200)").fetchone()
    assert text is not None
    big = str(text[0])
    return {
        "big_t": [big[i : i + 32] for i in range(0, len(big), 32)],
        "big_i": list(range(20_000)),
        "big_h": f'big=>"{big}"',
        "big_j": json.dumps({"big": big}),
        "big_b": big.encode(),
    }


def postgres_rows(conn: psycopg.Connection[Any], ident: sql.Identifier) -> dict[int, dict[str, Any]]:
    conn.execute("SET intervalstyle = 'iso_8601'")
    exprs = [
        sql.SQL(expr.replace("{c}", "{}")).format(sql.Identifier(name)) for name, (_, expr, _) in CANONICAL.items()
    ]
    query = sql.SQL("SELECT id, {} FROM {}").format(sql.SQL(", ").join(exprs), ident)
    rows = {}
    for row in conn.execute(query):
        rows[row[0]] = {name: _canonical(name, value, True) for name, value in zip(CANONICAL, row[1:], strict=True)}
    return rows


def _canonical(name: str, value: Any, postgres: bool) -> Any:
    if value is None:
        return None
    if not postgres:
        value = CANONICAL[name][2](value)
    if name in JSON_TEXT:
        return json.loads(value)
    if name in INTERVALS:
        return _iso_interval(value)
    if name in ("u_arr",):
        return [_text(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    if CANONICAL[name][2] is _float_list and postgres:
        return _float_list(value)
    return value


def delta_rows(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(r["id"]): {name: _canonical(name, r[name], False) for name in CANONICAL} for r in rows}


def _differences(truth: dict[int, dict[str, Any]], mirror: dict[int, dict[str, Any]]) -> list[str]:
    found = [f"row {k}: only in Postgres" for k in truth.keys() - mirror.keys()]
    found += [f"row {k}: only in the mirror" for k in mirror.keys() - truth.keys()]
    for key in truth.keys() & mirror.keys():
        for column, value in truth[key].items():
            if mirror[key][column] != value:
                found.append(f"row {key} column {column}: Postgres {value!r}, mirror {mirror[key][column]!r}")
    return found


def _snapshot_line(env: dict[str, str], table: str) -> str:
    listed = tables("list", env=env).splitlines()
    return next(line for line in listed[listed.index(table) :] if line.startswith("  snapshot"))


@pytest.mark.timeout(1500)  # about 5 minutes alone; twice that beside two others on a slow machine
def test_a_schema_of_real_tables_is_mirrored_value_for_value(stack: Stack, outbox: Outbox, tmp_path: Path) -> None:
    env = user_env(stack, outbox, tmp_path)
    schema, billing = f"shop_{outbox.tag}", f"billing_{outbox.tag}"
    zoo, events = sql.Identifier(schema, "zoo"), sql.Identifier(schema, "events")
    odd = sql.Identifier(schema, "Order Lines.v2")
    lake = env["CDCPIPE_LAKE"]
    slug = schema.lower()
    with psycopg.connect(outbox.dsn, autocommit=True) as conn:
        for statement in _ddl(schema, billing):
            conn.execute(statement)
        # Rows held before the capture: the initial snapshot reads them.
        conn.execute(
            sql.SQL("INSERT INTO {} (customer, amount) VALUES ('a', 1.5), ('b', 2)").format(
                sql.Identifier(schema, "orders")
            )
        )
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES ('eu', 1, 'draft', 'Low', 10.5), ('us', 1, 'sent', 'High', 99.99)").format(
                sql.Identifier(schema, "Invoices")
            )
        )
        _insert_zoo(conn, zoo, ROW)
        conn.execute(sql.SQL("INSERT INTO {} DEFAULT VALUES").format(zoo))  # every column null
        _insert_zoo(conn, zoo, {**ROW, **_big(conn)})
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, DATE '2024-01-01' + g * 3, 'e' || g FROM generate_series(1, 200) g"
            ).format(events)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 'k.' || g, 'ü' || g, g, 'M' || g, g / 2.0 FROM generate_series(1, 5) g"
            ).format(odd)
        )
    try:
        # A partition alone is refused, and says what to capture instead.
        refused = cdcpipe("tables", "add", f"{schema}.events_2024", "--mirror", env=env)
        assert refused.returncode != 0
        assert f"is a partition of {schema}.events" in refused.stdout + refused.stderr, refused.stderr

        # The schema's mirrors in one table group (one driver); the zoo's history a job of its own.
        group = f"{slug}_mirrors"
        said = tables("add", "--schema", schema, "--mirror", "--group", group, env=env)
        assert f"{schema}.events_2024" not in said, said  # a partition is not a table of its own
        said = tables("add", f"{schema}.zoo", "--history", env=env)
        contracts = Path(env["CDCPIPE_TABLE_CONTRACT_DIRS"].split(":")[0])
        zoo_contract = json.loads((contracts / f"{schema}.zoo.json").read_text())
        assert "gen" not in zoo_contract["properties"]  # a stored generated column is not captured (docs say why)

        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            # Changes after the capture: the stream.
            conn.execute(sql.SQL("INSERT INTO {} (customer) VALUES ('c')").format(sql.Identifier(schema, "orders")))
            conn.execute(sql.SQL("UPDATE {} SET amount = 7 WHERE id = 1").format(sql.Identifier(schema, "orders")))
            conn.execute(
                sql.SQL("""UPDATE {} SET status = 'paid', prio = NULL WHERE region = 'eu'""").format(
                    sql.Identifier(schema, "Invoices")
                )
            )
            _insert_zoo(conn, zoo, ROW)
            for column, values in OTHER_VALUES.items():
                for value in values:
                    _insert_zoo(conn, zoo, {column: value})
            _insert_zoo(conn, zoo, {**ROW, **_big(conn)})
            # Updates that leave the TOASTed values alone: Debezium sends its placeholder for each.
            conn.execute(sql.SQL("UPDATE {} SET m = 'sad', n = '1.5' WHERE big_t IS NOT NULL").format(zoo))
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = 2").format(zoo))
            # A partition attached after `tables add`, rows moved across partitions, a delete.
            conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')").format(
                    sql.Identifier(schema, "events_2026"), events
                )
            )
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1000, '2026-03-01', 'new partition')").format(events))
            conn.execute(
                sql.SQL("UPDATE {} SET note = 'moved', at = at + 365 WHERE id % 10 = 0 AND id < 1000").format(events)
            )
            conn.execute(sql.SQL("DELETE FROM {} WHERE id % 7 = 0").format(events))
            conn.execute(sql.SQL('UPDATE {} SET "Ünï-Name" = \'ä-ö\', "x=y" = NULL WHERE "Line No" = 2').format(odd))
            conn.execute(sql.SQL('DELETE FROM {} WHERE "Line No" = 3').format(odd))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (9, 'k.9', 'ß', 9, 'M9', 4.5)").format(odd))

        def compare() -> None:
            with psycopg.connect(outbox.dsn, autocommit=True) as conn:
                truth = postgres_rows(conn, zoo)
                orders = {
                    r[0]: (r[1], r[2])
                    for r in conn.execute(
                        sql.SQL("SELECT id, customer, amount FROM {}").format(sql.Identifier(schema, "orders"))
                    )
                }
                invoices = {
                    (r[0], r[1]): (r[2], r[3], r[4])
                    for r in conn.execute(
                        sql.SQL('SELECT region, "No", status::text, prio::text, total FROM {}').format(
                            sql.Identifier(schema, "Invoices")
                        )
                    )
                }
                happened = {
                    (r[0], r[1]): r[2] for r in conn.execute(sql.SQL("SELECT id, at, note FROM {}").format(events))
                }
                odd_rows = _odd_rows(conn, odd)
            mirror = delta_rows(read_delta(stack, f"{lake}/{slug}_zoo_mirror"))
            differences = _differences(truth, mirror)
            assert not differences, "the mirror differs:\n" + "\n".join(d[:300] for d in differences)
            history = [r for r in read_delta(stack, f"{lake}/{slug}_zoo_history") if r["is_current"]]
            differences = _differences(truth, delta_rows(history))
            assert not differences, "the history's current versions differ:\n" + "\n".join(d[:300] for d in differences)
            got = {r["id"]: (r["customer"], r["amount"]) for r in read_delta(stack, f"{lake}/{slug}_orders_mirror")}
            assert got == orders
            got_invoices = {
                (r["region"], r["No"]): (r["status"], r["prio"], r["total"])
                for r in read_delta(stack, f"{lake}/{slug}_invoices_mirror")
            }
            assert got_invoices == invoices
            got_events = {(r["id"], r["at"]): r["note"] for r in read_delta(stack, f"{lake}/{slug}_events_mirror")}
            assert got_events == happened
            got_odd = {
                (r["Line No"], r["a.b"]): tuple(r[c] for c in ODD_COLUMNS[2:])
                for r in read_delta(stack, f"{lake}/{slug}_order_lines_v2_mirror")
            }
            assert got_odd == odd_rows

        jobs = [group, f"{slug}_zoo_history"]
        for job in jobs:
            drain(job, env)
        compare()

        # An incremental snapshot (DBLog chunks, beside the stream) of every type, and of a table whose name has a
        # dot (its signal names it quoted): the same values again, and no new version of an unchanged row.
        zoo_name, odd_name = f"{schema}.zoo", f"{schema}.Order Lines.v2"
        refused = cdcpipe("tables", "snapshot", zoo_name, "--where", "no_such_column = 1", env=env)
        assert refused.returncode != 0
        assert "no_such_column" in refused.stderr, refused.stderr
        # A condition that would end the query and run another statement is refused as one, nothing run.
        smuggled = cdcpipe("tables", "snapshot", zoo_name, "--where", "true); DROP TABLE zoo; --", env=env)
        assert smuggled.returncode != 0
        assert "cannot insert multiple commands" in smuggled.stderr, smuggled.stderr
        before = {t: _snapshot_line(env, t) for t in (zoo_name, odd_name)}
        tables("snapshot", zoo_name, "--where", "id > 1 OR m IS NULL", env=env)  # an OR: parenthesised
        tables("snapshot", odd_name, env=env)
        for table in (zoo_name, odd_name):
            wait_until(
                lambda t=table: _snapshot_line(env, t) != before[t] and "completed" in _snapshot_line(env, t),
                180,
                f"the incremental snapshot of {table} to complete",
            )
        history_versions = len(read_delta(stack, f"{lake}/{slug}_zoo_history"))
        for job in jobs:
            drain(job, env)
        compare()
        assert len(read_delta(stack, f"{lake}/{slug}_zoo_history")) == history_versions
        # A running snapshot can be stopped: the signal is taken, the connector runs on.
        assert "snapshot   " in tables("snapshot", zoo_name, "--stop", env=env)
        with psycopg.connect(outbox.dsn, autocommit=True) as conn:
            kinds = [r[0] for r in conn.execute(f"SELECT type FROM {outbox.names.outbox_schema}.debezium_signal")]
        assert "stop-snapshot" in kinds
        assert f"{env['CDCPIPE_CAPTURE_CONNECTOR']} RUNNING" in tables("list", env=env)

        # Two spellings of one type are never a change: every contract is still its first version.
        for path in contracts.iterdir():
            assert json.loads(path.read_text())["x-version"] == 1, path
    finally:
        forget(outbox, env, schema, billing)
