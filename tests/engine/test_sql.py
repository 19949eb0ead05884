"""The engine's SQL helpers: multi-row inserts bind every row exactly once."""

from __future__ import annotations

import apsw
import pytest

from threadloom.engine.sql import VALUES_ROWS, insert_values


@pytest.mark.parametrize("count", [0, 1, 3, VALUES_ROWS, VALUES_ROWS + 1, 700])
def test_insert_values_writes_each_row_once(count: int) -> None:
    """Every row goes in once with its own values, whatever the count, and RETURNING
    gives one row per row inserted."""
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY AUTOINCREMENT, a TEXT, b BLOB)")
    rows = [(f"a{i}", bytes([i % 256]) * (i % 5)) for i in range(count)]
    made = insert_values(conn, "INSERT INTO t(a, b)", rows, " RETURNING a, id")
    assert sorted(a for a, _ in made) == sorted(a for a, _ in rows)
    assert conn.execute("SELECT a, b FROM t ORDER BY id").fetchall() == rows
