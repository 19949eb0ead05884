"""The SQL functions every connection to a threadloom file has (the row seals', a
ref's stored key, a task id's), installed on one connection."""

from __future__ import annotations

import apsw

from threadloom.engine.format import idkeys, refkeys, seal


def install(conn: apsw.Connection) -> None:
    """Register threadloom's SQL functions on `conn`."""
    conn.create_scalar_function(
        seal.SQL_FUNCTION,
        seal.sql_seal,  # type: ignore[arg-type]  # apsw's stubs type blobs as Any
        -1,
        deterministic=True,
    )
    conn.create_aggregate_function(seal.SQL_CENSUS, seal.Census)
    conn.create_aggregate_function(seal.SQL_MIX, seal.Mix)
    conn.create_scalar_function(
        seal.SQL_XOR,
        seal.sql_xor,  # type: ignore[arg-type]
        2,
        deterministic=True,
    )
    conn.create_scalar_function(
        refkeys.SQL_KEY,
        refkeys.sql_key,  # type: ignore[arg-type]
        1,
        deterministic=True,
    )
    conn.create_scalar_function(
        idkeys.SQL_KEY,
        idkeys.sql_key,  # type: ignore[arg-type]
        1,
        deterministic=True,
    )
    conn.create_scalar_function(
        idkeys.SQL_TEXT,
        idkeys.sql_text,  # type: ignore[arg-type]
        1,
        deterministic=True,
    )
