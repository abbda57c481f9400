r"""Column names as Spark and Delta take them: any name a Postgres column can have.

Spark parses a column reference given as a string (`a.b` is field `b` of `a`), so a contract's names are
always referred to quoted. Delta stores a column whose name holds one of ` ,;{}()\n\t=` only in a table with
column mapping by name, which such a table is created with (or switched to, for a column added later).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812

MAPPING = "delta.columnMapping.mode"
# Characters Delta refuses in a column name of a table without column mapping (SchemaUtils.checkFieldNames).
UNMAPPED_FORBIDDEN = frozenset(" ,;{}()\n\t=")


def quoted(name: str) -> str:
    """`name` as one identifier in a Spark SQL expression."""
    return "`" + name.replace("`", "``") + "`"


def column(name: str) -> Column:
    """The column called `name`, whatever its characters."""
    return F.col(quoted(name))


def need_mapping(names: Iterable[str]) -> bool:
    """Whether a Delta table with these columns needs column mapping by name."""
    return any(UNMAPPED_FORBIDDEN.intersection(name) for name in names)
