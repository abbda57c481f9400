"""The public API is two small modules; the examples (what users copy) import nothing of cdcpipe's but them."""

from __future__ import annotations

import ast
from pathlib import Path

from cdcpipe import application, projection
from streaming_jobs.once.context import EVENT_COLUMNS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# cdcpipe's own packages: an example may import from these only through the public modules.
OURS = {"cdcpipe", "ground", "infra", "schemas", "outbox_relay", "connectors", "streaming_jobs", "demo", "capture"}
PUBLIC = {"cdcpipe.application", "cdcpipe.projection"}


def test_the_examples_import_only_the_public_modules_of_cdcpipe() -> None:
    found = {}
    for path in sorted(EXAMPLES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in OURS or name.split(".")[0] == "monitor":
                    found[f"{path.relative_to(EXAMPLES)}: {name}"] = name in PUBLIC
    assert found, "no example imports cdcpipe at all: this test would prove nothing"
    assert all(found.values()), [where for where, public in found.items() if not public]


def test_each_public_module_names_what_it_offers_and_says_what_it_is() -> None:
    assert set(application.__all__) == {"emit", "ContractError", "ContractViolationError", "SchemaError"}
    assert set(projection.__all__) == {"Batch"}
    assert {"spark", "table", "job", "batch_id"} <= set(projection.Batch.__dataclass_fields__)
    for name in EVENT_COLUMNS:
        assert f"`{name}`" in (projection.__doc__ or ""), f"the columns a projection receives: {name} unsaid"
