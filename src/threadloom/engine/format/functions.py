"""The SQL functions every connection to a threadloom file has (the row seals', a
ref's stored key, a task id's), installed on one connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import apsw

from threadloom.engine.format import idkeys, refkeys, seal

#: The scalar functions: name, implementation, number of arguments (-1: any).
_SCALARS: Final[tuple[tuple[str, Callable[..., object], int], ...]] = (
    (seal.SQL_FUNCTION, seal.sql_seal, -1),
    (seal.SQL_XOR, seal.sql_xor, 2),
    (refkeys.SQL_KEY, refkeys.sql_key, 1),
    (idkeys.SQL_KEY, idkeys.sql_key, 1),
    (idkeys.SQL_TEXT, idkeys.sql_text, 1),
)


def install(conn: apsw.Connection) -> None:
    """Register threadloom's SQL functions on `conn`."""
    for name, function, arguments in _SCALARS:
        conn.create_scalar_function(name, function, arguments, deterministic=True)
    conn.create_aggregate_function(seal.SQL_CENSUS, seal.Census)
    conn.create_aggregate_function(seal.SQL_MIX, seal.Mix)
