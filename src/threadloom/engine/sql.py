"""Typed helpers over apsw shared by the engine modules."""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

import apsw

from threadloom.errors import EngineError

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


T = TypeVar("T")


def fetch(
    conn: apsw.Connection,
    shape: Any,
    sql: str,
    bindings: Sequence[Any] | Mapping[str, Any] | None = None,
) -> list[Any]:
    """Return the rows of a query as named tuples of `shape` (a NamedTuple class)."""
    make = shape._make
    return [make(row) for row in conn.execute(sql, bindings)]


def ids(values: Iterable[Any]) -> Any:
    """Bind a sequence of str, bytes or int as a SQLite carray (one query, not one per id)."""
    items = tuple(values)
    if items and isinstance(items[0], int):
        return apsw.carray(array("q", items))
    return apsw.carray(items if items else ("",))


def vacuum(conn: apsw.Connection, path: str) -> None:
    """Run VACUUM on `conn` (the file rewritten without free pages, its b-trees dense).
    It needs free disk space about the file's size (the copy, then the WAL).

    Raises:
        EngineError: another connection kept the file busy (VACUUM needs it to itself),
            the disk was full, or SQLite failed otherwise; the file is as it was.
    """
    try:
        conn.execute("VACUUM")
    except apsw.BusyError as exc:
        raise EngineError(
            f"cannot VACUUM {path!r} while another connection uses it ({exc}); "
            "stop the other processes and run `threadloom compact` on it again"
        ) from exc
    except apsw.FullError as exc:
        raise EngineError(
            f"cannot VACUUM {path!r}: the disk is full ({exc}); VACUUM needs free space "
            "about the file's size: free some and run `threadloom compact` on it"
        ) from exc
    except apsw.Error as exc:
        raise EngineError(f"VACUUM of {path!r} failed: {exc}") from exc


#: Most rows one multi-row INSERT binds (`insert_values`).
VALUES_ROWS = 256


def insert_values(
    conn: apsw.Connection, head: str, rows: Sequence[Sequence[Any]], tail: str = ""
) -> list[Row]:
    """Run `head VALUES (?, ...), (?, ...) tail` over `rows`, many rows per statement, and
    return what the statements return (a `tail` RETURNING clause: in no promised order).

    One statement per row (`executemany`) pays the statement's start and end for every
    row: on `store_items`, whose AUTOINCREMENT reads and writes `sqlite_sequence` at each
    statement's end, 500 rows took 3x the time of these few statements. A batch goes in
    groups of powers of two (256, 128, ... rows), so at most nine statement texts per
    `head` reach the connection's statement cache.
    """
    if not rows:
        return []
    width = len(rows[0])
    one = "(" + ",".join("?" * width) + ")"
    # Within the connection's limit of bound values (32,766 unless SQLite was built lower).
    most = VALUES_ROWS
    while most > 1 and most * width > conn.limit(apsw.SQLITE_LIMIT_VARIABLE_NUMBER):
        most //= 2
    out: list[Row] = []
    at = 0
    while at < len(rows):
        size = most
        while size > len(rows) - at:
            size //= 2
        group = rows[at : at + size]
        at += size
        sql = f"{head} VALUES {','.join([one] * size)}{tail}"
        out.extend(conn.execute(sql, [value for row in group for value in row]))
    return out


class Transactions(Protocol):
    """What a layer over the file needs of it: a path and scoped transactions."""

    path: str

    def connection(self) -> contextlib.AbstractContextManager[apsw.Connection]: ...

    def read(self) -> contextlib.AbstractContextManager[apsw.Connection]: ...

    def write(self) -> contextlib.AbstractContextManager[apsw.Connection]: ...

    def checkpoints_aside(self) -> contextlib.AbstractContextManager[None]: ...

    def between_checkpoints(self) -> contextlib.AbstractContextManager[None]: ...
