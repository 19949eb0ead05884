"""A big tool result in a pending write and in the checkpoint that holds it (issue 28):
its blocks are compressed once in the process, stored once in the file, read back intact.

LangGraph puts a node's writes and the next checkpoint at the same time, on two threads;
both bodies are cut into mostly the same blocks. Oracles: the identity of the framed
bytes two `prepare` calls hand out (one compression, shared), the file's blocks and
`verify` report, and the values read back.
"""

from __future__ import annotations

import gc
import random
import threading
from pathlib import Path

import ormsgpack
from langchain_core.messages import HumanMessage, ToolMessage

from tests.engine.test_durability import config, put
from threadloom import Saver
from threadloom.engine.content._framing import Framing
from threadloom.engine.content.blocks import BlockStore, Packed


def text(seed: int, size: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ,.") for _ in range(size))


def bodies(content: BlockStore, value: str) -> tuple[Packed, Packed]:
    """The physical bodies of `value` as a write holds it (a list of one) and as an
    element: the same bytes but for a one-byte header, so mostly the same blocks."""
    first = content.pack({"payload": ormsgpack.packb([value])})
    second = content.pack({"payload": ormsgpack.packb(value)})
    return first, second


def test_blocks_another_writer_compressed_are_taken_not_compressed_again(saver: Saver) -> None:
    """While the first bodies are held, a second `prepare` takes their framed blocks (the
    same bytes objects); once they are dropped, it compresses its own."""
    content = saver.file.content
    first, second = bodies(content, text(1, 300_000))
    content.prepare([first])
    shared = first.pieces.keys() & second.pieces.keys()
    assert len(shared) > 0.9 * len(second.pieces)
    content.prepare([second])
    assert all(second.framed[key] is first.framed[key] for key in shared)
    again = bodies(content, text(1, 300_000))[1]
    del first
    gc.collect()
    content.prepare([again])
    assert all(again.framed[key] is not second.framed[key] for key in shared)
    assert [again.framed[key] for key in shared] == [second.framed[key] for key in shared]


def test_a_failed_compression_leaves_its_waiters_to_compress_their_own(saver: Saver) -> None:
    """A `prepare` that finds blocks offered by a compression that failed (nothing framed,
    done) frames them itself: nothing is lost, nothing waits for ever."""
    content = saver.file.content
    first, second = bodies(content, text(2, 100_000))
    failed = Framing(set(first.pieces))
    failed.done.set()
    first.offered = failed
    content.framings.offer(failed)
    content.prepare([second])
    assert set(second.framed) == set(second.pieces)
    assert all(second.framed[key] for key in second.pieces)


def test_a_write_and_a_checkpoint_put_at_once_store_the_result_once(saver: Saver) -> None:
    """A 2 MiB tool result put as a pending write and in `messages` from two threads at
    the same time: one copy of its blocks, counts exact, both read back intact."""
    result = ToolMessage(content=text(3, 2 * 1024 * 1024), tool_call_id="c1", id="tool-1")
    human = HumanMessage(content="go", id="h")
    first = put(saver, {"messages": [human]})
    parent = first["configurable"]["checkpoint_id"]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(job: object) -> None:
        try:
            start.wait()
            job()  # type: ignore[operator]
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    jobs = [
        lambda: saver.put_writes(first, [("messages", [result])], "task-1"),
        lambda: put(saver, {"messages": [human, result]}, number=2, parent=parent),
    ]
    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    stats = saver.file.content.stats()
    assert stats.block_bytes < 1.05 * len(result.content)
    assert saver.file.content.verify()["problems"] == []
    got = saver.get_tuple(config())
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"][1] == result
    assert got.parent_config is not None
    written = saver.get_tuple(got.parent_config)
    assert written is not None
    assert [w[2] for w in written.pending_writes] == [[result]]


def test_the_parts_of_a_big_result_share_their_extents(saver: Saver, db_path: Path) -> None:
    """The eight 256 KiB parts of a 2 MiB result are linked together: their new blocks
    go back to back into one extent, not one extent per part."""
    import apsw

    result = ToolMessage(content=text(4, 2 * 1024 * 1024), tool_call_id="c1", id="tool-1")
    first = put(saver, {"messages": [HumanMessage(content="go", id="h")]})
    saver.put_writes(first, [("messages", [result])], "task-1")
    conn = apsw.Connection(str(db_path))
    try:
        extents = conn.execute("SELECT count(*), sum(length(body)) FROM extents").fetchall()[0]
    finally:
        conn.close()
    assert extents[0] == 1 and extents[1] > 1024 * 1024
