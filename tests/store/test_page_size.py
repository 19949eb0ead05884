"""The page size of a Store's new file: sized for its vector rows, and only when new.

The choice rests on arithmetic of SQLite's cell layout (`page_size_for`); here SQLite
itself stores the rows in both page sizes, so a wrong sum shows as a wrong choice.
"""

from __future__ import annotations

import asyncio
import random
import struct
from pathlib import Path
from typing import Any

import apsw
import pytest

from threadloom import AsyncStore, Saver, Store
from threadloom.engine.file import File
from threadloom.engine.items import page_size_for
from threadloom.errors import EngineError


def _page_size(path: Path) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute("PRAGMA page_size").fetchall()[0][0])
    finally:
        conn.close()


def _stored_bytes(folder: Path, dims: int, page: int, rows: int = 240) -> int:
    """Pages x page size SQLite takes for `rows` store_vectors-like rows of `dims`."""
    path = folder / f"rows-{dims}-{page}.db"
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={page}")
    conn.execute(
        "CREATE TABLE v(id INTEGER PRIMARY KEY, item INTEGER NOT NULL, field TEXT NOT NULL, "
        "vector BLOB NOT NULL) STRICT"
    )
    rng = random.Random(dims)
    with conn:
        for i in range(rows):
            vector = struct.pack(f"<{dims}f", *(rng.uniform(-1, 1) for _ in range(dims)))
            conn.execute(
                "INSERT INTO v(id, item, field, vector) VALUES (?, ?, ?, ?)",
                ((7 << 32) + i, 50_000 + i, "$.text", vector),
            )
    try:
        used = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'v'").fetchall()
    except apsw.SQLError:  # an SQLite built without dbstat (apsw's own build has it)
        pytest.skip("this SQLite has no dbstat table to measure pages with")
    finally:
        conn.close()
    return int(used[0][0])


@pytest.mark.parametrize("dims", [64, 256, 300, 384, 512, 600, 768, 1024, 1536])
def test_the_chosen_page_size_stores_vector_rows_in_fewer_bytes(tmp_path: Path, dims: int) -> None:
    """8 KiB pages are chosen only where SQLite stores the rows in clearly fewer bytes
    (at least 10% measured), and never where they would save 20% or more."""
    small, large = _stored_bytes(tmp_path, dims, 4096), _stored_bytes(tmp_path, dims, 8192)
    if page_size_for(dims) == 8192:
        assert large <= 0.9 * small, (dims, small, large)
    else:
        assert large > 0.8 * small, (dims, small, large)


def test_the_usual_sizes_choose_as_documented() -> None:
    assert [page_size_for(dims) for dims in (256, 384, 512, 768, 1024, 1536, 3072)] == [
        4096,
        8192,
        8192,
        4096,
        4096,
        4096,
        4096,
    ]


def _index(dims: int) -> Any:
    return {"dims": dims, "embed": lambda texts: [[1.0] * dims for _ in texts]}


def test_a_store_with_384_dim_vectors_makes_its_file_with_8_kib_pages(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with Store.from_conn_string(str(path), index=_index(384)) as store:
        store.put(("a",), "k", {"text": "hello"})
        assert store.search(("a",), query="hello")[0].key == "k"
    assert _page_size(path) == 8192
    with Store.from_conn_string(str(path)) as store:  # reopened without an index
        assert store.get(("a",), "k") is not None


def test_an_async_store_makes_its_file_with_8_kib_pages_too(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"

    async def used() -> None:
        async with AsyncStore.from_conn_string(str(path), index=_index(512)) as store:
            await store.aput(("a",), "k", {"text": "hello"})

    asyncio.run(used())
    assert _page_size(path) == 8192


@pytest.mark.parametrize("dims", [None, 768, 256, 64])
def test_other_stores_and_savers_keep_4_kib_pages(tmp_path: Path, dims: int | None) -> None:
    path = tmp_path / "memory.db"
    with Store.from_conn_string(str(path), index=None if dims is None else _index(dims)) as store:
        store.put(("a",), "k", {"text": "hello"})
    assert _page_size(path) == 4096
    saved = tmp_path / "saver.db"
    with Saver.from_conn_string(str(saved)):
        pass
    assert _page_size(saved) == 4096


def test_an_existing_file_keeps_its_page_size(tmp_path: Path) -> None:
    """A file a Saver made is used as it is by a Store whose vectors would choose 8 KiB."""
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)):
        pass
    before = path.read_bytes()[:100]
    with Store.from_conn_string(str(path), index=_index(384)) as store:
        store.put(("a",), "k", {"text": "hello"})
    assert _page_size(path) == 4096
    assert path.read_bytes()[16:18] == before[16:18]  # the header's page size field


@pytest.mark.parametrize("bad", [1000, 256, 131072, 0, -4096])
def test_a_page_size_that_sqlite_cannot_take_is_refused(tmp_path: Path, bad: int) -> None:
    path = tmp_path / "memory.db"
    with pytest.raises(EngineError, match="power of two from 512 to 65536"):
        File(path, page_size=bad)
    assert not path.exists()
