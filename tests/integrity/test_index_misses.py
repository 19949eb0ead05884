"""A checkpoint a damaged index hides is an error, never "no such checkpoint".

A byte changed in one key of the checkpoints' unique index (its thread number) leaves
that key out of order: a seek for the checkpoint misses it, while the walk over the
thread's range of the index still returns it (SQLite trusts the range for the columns it
seeks on), so the namespace's census matched and `get_tuple` of that checkpoint id
returned None (the issue). The read now checks a miss against the ids that walk returns
and raises.
"""

from __future__ import annotations

from pathlib import Path

import apsw
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver
from threadloom.errors import ThreadloomError

THREADS, CHECKPOINTS = 3, 12


def _build(path: Path) -> list[tuple[int, str, str]]:
    saver = Saver(str(path))
    try:
        for t in range(THREADS):
            config = {"configurable": {"thread_id": f"thread-{t}", "checkpoint_ns": ""}}
            for step in range(CHECKPOINTS):
                config = saver.put(config, empty_checkpoint(), {"step": step}, {})
    finally:
        saver.close()
    conn = apsw.Connection(str(path))
    try:
        return [
            (int(row), str(thread_id), str(checkpoint_id))
            for row, thread_id, checkpoint_id in conn.execute(
                "SELECT c.thread, t.thread_id, c.checkpoint_id FROM checkpoints c "
                "JOIN threads t ON t.id = c.thread ORDER BY c.thread, c.checkpoint_id"
            )
        ]
    finally:
        conn.close()


def _leaf_pages(path: Path, name: str = "sqlite_autoindex_checkpoints_1") -> list[int]:
    conn = apsw.Connection(str(path))
    try:
        return [
            int(page)
            for (page,) in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (name,)
            )
        ]
    finally:
        conn.close()


def test_a_misplaced_index_key_never_hides_a_checkpoint(tmp_path: Path) -> None:
    """Each checkpoint's index key gets another thread number: reading it by id raises
    (never None), and every other checkpoint reads as it was or raises."""
    original = tmp_path / "original.db"
    ids = _build(original)
    data = original.read_bytes()
    page_size = 4096
    pages = _leaf_pages(original)
    assert pages, "the fixture's index has leaf pages"
    damaged_cases = 0
    for row, _thread, checkpoint_id in ids:
        if row < 2:
            continue  # SQLite stores the integers 0 and 1 in the record header alone
        needle = checkpoint_id.encode()
        offsets = [
            found
            for page in pages
            if (found := data.find(needle, (page - 1) * page_size, page * page_size)) >= 0
        ]
        assert len(offsets) == 1, "the id is in exactly one index leaf"
        # The key is (thread, checkpoint_ns = '', checkpoint_id, rowid): the byte before
        # the id is the thread number (a one-byte integer; the empty ns takes no byte).
        at = offsets[0] - 1
        assert data[at] == row
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        copy = tmp_path / f"damaged-{checkpoint_id}.db"
        copy.write_bytes(bytes(damaged))
        damaged_cases += 1
        saver = Saver(str(copy), readonly=True)
        try:
            for _, other_thread, other_id in ids:
                config = {
                    "configurable": {
                        "thread_id": other_thread,
                        "checkpoint_ns": "",
                        "checkpoint_id": other_id,
                    }
                }
                try:
                    found = saver.get_tuple(config)
                except ThreadloomError:
                    continue
                assert other_id != checkpoint_id, f"{checkpoint_id} read past its damage"
                assert found is not None, f"{other_id} read as absent with {checkpoint_id} damaged"
                assert found.config["configurable"]["checkpoint_id"] == other_id
        finally:
            saver.close()
        copy.unlink()
    assert damaged_cases == (THREADS - 1) * CHECKPOINTS


def test_a_sealed_column_of_another_type_is_damage(tmp_path: Path) -> None:
    """A record header byte that turns a checkpoint's id from text into a blob in its
    index key (reads take the id from the index; STRICT tables check types on write, not
    on read) is a ThreadloomError naming damage, not a TypeError from the seal."""
    original = tmp_path / "original.db"
    ids = _build(original)
    data = original.read_bytes()
    page = _leaf_pages(original)[0]
    # In a key's record header: checkpoint_ns '' (serial type 13), then the 36-character
    # checkpoint_id (serial type 85, "U"); 84 is a 36-byte blob.
    at = data.find(b"\rU", (page - 1) * 4096, page * 4096) + 1
    assert at > 0
    damaged = bytearray(data)
    damaged[at] = 84
    copy = tmp_path / "damaged.db"
    copy.write_bytes(bytes(damaged))
    saver = Saver(str(copy), readonly=True)
    errors = 0
    try:
        for _, thread_id, checkpoint_id in ids:
            config = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
            try:
                found = saver.get_tuple(config)
            except ThreadloomError:
                errors += 1
                continue
            assert found is not None
        for thread in {thread_id for _, thread_id, _ in ids}:
            try:
                list(saver.list({"configurable": {"thread_id": thread}}))
            except ThreadloomError:
                errors += 1
    finally:
        saver.close()
    assert errors
