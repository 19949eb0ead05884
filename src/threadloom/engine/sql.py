"""Typed helpers over apsw shared by the engine modules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import apsw

#: One result row. apsw's stubs type every column as a union of all SQLite values;
#: the columns of our own tables are known (and checked) where a row is used.
Row = tuple[Any, ...]


def fetchall(
    conn: apsw.Connection,
    sql: str,
    bindings: Sequence[Any] | Mapping[str, Any] | None = None,
) -> list[Row]:
    """Return every row of `conn.execute(sql, bindings)`."""
    return cast("list[Row]", conn.execute(sql, bindings).fetchall())
