"""A connection borrowed from a `File`'s pool for one operation (`File.connection`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection
from typing import Any, Protocol

import apsw

from threadloom.errors import CorruptionError, ReadOnlyError


class Pool(Protocol):
    """What a borrow needs of its `File` (file.py): the pool and this thread's holding."""

    path: str
    _local: Any
    _pid: int

    def _acquire(self, refresh: bool = True, needs: Collection[str] = ()) -> apsw.Connection: ...

    def _release(self, conn: apsw.Connection) -> None: ...

    def damaged(self, exc: BaseException) -> CorruptionError: ...


class Borrowed(contextlib.AbstractContextManager["apsw.Connection"]):
    """`File.connection()`: a plain class, not a generator (a get is a few microseconds,
    and this is on every one of them)."""

    __slots__ = ("_conn", "_file", "_needs", "_refresh")

    def __init__(self, file: Pool, refresh: bool = True, needs: Collection[str] = ()) -> None:
        self._file, self._refresh, self._needs = file, refresh, needs
        self._conn: apsw.Connection | None = None

    def __enter__(self) -> apsw.Connection:
        file = self._file
        local = file._local
        held: apsw.Connection | None = getattr(local, "held", None)
        if held is not None and getattr(local, "pid", None) == os.getpid():
            return held
        conn = self._conn = file._acquire(self._refresh, self._needs)
        local.held, local.pid = conn, file._pid  # `_acquire` made it this process's pid
        return conn

    def __exit__(self, kind: Any, exc: BaseException | None, trace: Any) -> None:
        conn = self._conn
        if conn is None:  # a nested borrow: the outer one gives the connection back
            return
        self._conn = None
        self._file._local.held = None
        self._file._release(conn)
        if isinstance(exc, apsw.ReadOnlyError):
            # The file or its folder stopped being writable after it was opened.
            raise ReadOnlyError(
                f"{self._file.path!r} cannot be written ({exc}); give this process write "
                "permission on the file and its folder (or work on a copy)"
            ) from exc
        if isinstance(exc, (apsw.CorruptError, apsw.NotADBError, UnicodeDecodeError)):
            # SQLite found a damaged page, or a damaged row holds text that is not UTF-8.
            raise self._file.damaged(exc) from exc
