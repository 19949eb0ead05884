"""Typed helpers over apsw shared by the engine modules."""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

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


class Transactions(Protocol):
    """What a layer over the file needs of it: a path and scoped transactions."""

    path: str

    def connection(self) -> contextlib.AbstractContextManager[apsw.Connection]: ...

    def read(self) -> contextlib.AbstractContextManager[apsw.Connection]: ...

    def write(self) -> contextlib.AbstractContextManager[apsw.Connection]: ...

    def checkpoints_aside(self) -> contextlib.AbstractContextManager[None]: ...

    def between_checkpoints(self) -> contextlib.AbstractContextManager[None]: ...
