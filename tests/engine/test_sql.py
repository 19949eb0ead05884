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


def test_insert_values_keeps_within_the_limit_of_bound_values() -> None:
    """Wide rows go in fewer rows a statement when the connection binds fewer values."""
    conn = apsw.Connection(":memory:")
    conn.limit(apsw.SQLITE_LIMIT_VARIABLE_NUMBER, 100)
    columns = ", ".join(f"c{i}" for i in range(30))
    conn.execute(f"CREATE TABLE t({columns})")
    rows = [tuple(range(i, i + 30)) for i in range(50)]
    insert_values(conn, f"INSERT INTO t({columns})", rows)
    assert conn.execute("SELECT * FROM t ORDER BY c0").fetchall() == rows
