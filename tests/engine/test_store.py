"""The physical content store (engine/content/content_store.py): shared blocks, their
collection, trained
dictionaries, block-level corruption and the upgrade of a format-1 file.

Oracles: the logical documents (`Saver.documents()`), which must not change whatever the
physical encoding, and the counts of the `blocks` and `dicts` tables read with apsw.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import ormsgpack
import pytest
import zstandard
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from tests.engine.test_durability import config, put
from threadloom import Saver
from threadloom.engine.content import blocks as store_module
from threadloom.engine.format.schema import FORMAT_VERSION
from threadloom.errors import CorruptionError

DATA = Path(__file__).resolve().parents[1] / "data" / "format1"


def text(seed: int, size: int) -> str:
    """`size` characters that do not compress away and differ per seed."""
    import random

    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ,.") for _ in range(size))


def table(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path))
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def live_blocks(path: Path) -> int:
    return int(table(path, "SELECT count(*) FROM blocks WHERE refs > 0")[0][0])


def copies(saver: Saver, needle: str) -> int:
    """How many physical payloads hold `needle` (a stored copy of it)."""
    raw = needle.encode()
    return sum(raw in payload for payload in saver.file.content.payloads())


@pytest.fixture
def quick(saver: Saver) -> Iterator[Saver]:
    saver.checkpoints.grace = 0.0  # collect at once instead of after 60 s
    yield saver


# -- sharing ------------------------------------------------------------------------------


def test_a_prompt_in_many_threads_is_stored_once(saver: Saver) -> None:
    """The same system prompt (4 KB) in 20 threads: its bytes are kept once in the file."""
    prompt = SystemMessage(content=text(1, 4096), id="system")
    for n in range(20):
        human = HumanMessage(content=f"question {n}", id=f"h{n}")
        put(saver, {"messages": [prompt, human]}, thread_id=f"t{n}")
    assert copies(saver, prompt.content[1000:1200]) == 1
    stats = saver.file.content.stats()
    assert stats.block_bytes < 3 * 4096  # not 20 copies
    assert stats.block_refs >= 20


def test_tool_message_in_a_write_and_in_messages_is_stored_once(saver: Saver) -> None:
    """The ToolMessage of a pending write and the same message in `messages` share blocks."""
    result = ToolMessage(content=text(2, 300_000), tool_call_id="c1", id="tool-1")
    first = put(saver, {"messages": [HumanMessage(content="go", id="h")]})
    saver.put_writes(first, [("messages", [result])], "task-1")
    put(
        saver,
        {"messages": [HumanMessage(content="go", id="h"), result]},
        number=2,
        parent=first["configurable"]["checkpoint_id"],
    )
    assert copies(saver, result.content[150_000:150_400]) == 1
    stored = saver.file.content.stats()
    assert stored.block_bytes < 1.1 * 300_000
    got = saver.get_tuple(config())
    assert got is not None and got.checkpoint["channel_values"]["messages"][1] == result


def test_a_large_text_edited_a_little_writes_only_what_changed(saver: Saver) -> None:
    """Each step edits one spot of a 2 MiB text: the new blocks hold a few KiB, not 2 MiB."""
    body = text(3, 2 * 1024 * 1024)
    parent = None
    for step in range(1, 6):
        at = step * 300_000
        body = body[:at] + f"<edit {step}>" + body[at + 10 :]
        stored = put(saver, {"file": body}, number=step, parent=parent)
        parent = stored["configurable"]["checkpoint_id"]
        stats = saver.file.content.stats()
        if step == 1:
            first = stats.block_bytes
        else:
            assert stats.block_bytes - first <= (step - 1) * 64 * 1024
    got = saver.get_tuple(config())
    assert got is not None and got.checkpoint["channel_values"]["file"] == body


def test_copy_thread_shares_blocks_and_counts_them(quick: Saver, db_path: Path) -> None:
    """A copied thread references the same blocks; deleting one copy keeps them alive."""
    big = text(4, 150_000)
    put(quick, {"note": big})
    quick.copy_thread("t", "u")
    assert table(db_path, "SELECT sum(refs) FROM blocks")[0][0] == 2 * live_blocks(db_path)
    quick.delete_thread("t")
    got = quick.get_tuple(config("u"))
    assert got is not None and got.checkpoint["channel_values"]["note"] == big
    quick.delete_thread("u")
    assert table(db_path, "SELECT count(*) FROM blocks")[0][0] == 0


# -- collection ---------------------------------------------------------------------------


def test_blocks_are_collected_when_the_last_thread_goes(quick: Saver, db_path: Path) -> None:
    """Two threads share a value: one delete keeps the blocks, the second sweeps them."""
    big, long = text(5, 40_000), text(9, 200_000)  # a list in the body, a list block
    put(quick, {"note": big, "long": long}, thread_id="a")
    put(quick, {"note": big, "long": long}, thread_id="b")
    assert table(db_path, "SELECT count(*) FROM vals WHERE substr(body, 1, 1) = x'04'")[0][0]
    shared = live_blocks(db_path)
    assert shared > 0
    quick.delete_thread("a")
    assert live_blocks(db_path) == shared
    quick.delete_thread("b")
    assert table(db_path, "SELECT count(*) FROM blocks")[0][0] == 0


def test_released_blocks_wait_for_the_grace_period(saver: Saver, db_path: Path) -> None:
    """With the default 60 s grace a released block stays (readers may still need it)."""
    put(saver, {"note": text(6, 40_000)})
    saver.delete_thread("t")
    rows = table(db_path, "SELECT refs, released IS NOT NULL FROM blocks")
    assert rows and all(refs == 0 and released for refs, released in rows)
    saver.checkpoints.grace = 0.0
    put(saver, {"x": 1}, thread_id="other")
    saver.delete_thread("other")  # any collection sweeps what is past its grace
    assert table(db_path, "SELECT count(*) FROM blocks")[0][0] == 0


def test_prune_collects_blocks_of_pruned_values(quick: Saver, db_path: Path) -> None:
    """keep_latest drops the older big values' blocks and keeps the latest's."""
    parent = None
    for step in range(1, 4):
        stored = put(quick, {"note": text(10 + step, 30_000)}, number=step, parent=parent)
        parent = stored["configurable"]["checkpoint_id"]
    before = live_blocks(db_path)
    quick.prune(["t"])
    after = live_blocks(db_path)
    assert 0 < after < before
    assert table(db_path, "SELECT count(*) FROM blocks WHERE refs <= 0")[0][0] == 0
    got = quick.get_tuple(config())
    assert got is not None and got.checkpoint["channel_values"]["note"] == text(13, 30_000)


def test_replaced_special_write_releases_its_blocks(quick: Saver, db_path: Path) -> None:
    """A special write (an error) replaced by a new one drops the old one's block references."""
    stored = put(quick, {"x": 1})
    quick.put_writes(stored, [("__error__", text(20, 30_000))], "task-1")
    quick.put_writes(stored, [("__error__", text(21, 30_000))], "task-1")
    refs = table(db_path, "SELECT sum(max(refs, 0)) FROM blocks")[0][0]
    rows = table(db_path, "SELECT blocks FROM writes")
    assert refs == sum(r[0] for r in rows)


# -- integrity ----------------------------------------------------------------------------


def test_a_damaged_block_is_detected_and_named(db_path: Path) -> None:
    """One flipped byte in a block raises CorruptionError naming the block and the value."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, {"note": text(7, 40_000)})
    conn = apsw.Connection(str(db_path))
    key, extent, offset, length = conn.execute(
        "SELECT key, extent, offset, length FROM blocks LIMIT 1"
    ).fetchall()[0]
    body = conn.execute("SELECT body FROM extents WHERE id = ?", (extent,)).fetchall()[0][0]
    damaged = bytearray(body)
    damaged[offset + length // 2] ^= 0x01
    conn.execute("UPDATE extents SET body = ? WHERE id = ?", (bytes(damaged), extent))
    conn.close()
    with Saver.from_conn_string(str(db_path)) as saver, pytest.raises(CorruptionError) as raised:
        saver.get_tuple(config())
    assert bytes(key).hex()[:16] in str(raised.value)
    assert "value b-" in str(raised.value)


def test_a_missing_block_is_corruption_not_an_empty_value(db_path: Path) -> None:
    """A block row deleted behind the saver's back is reported, never read as less data."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, {"note": text(8, 40_000)})
    conn = apsw.Connection(str(db_path))
    conn.execute("DELETE FROM blocks WHERE id = (SELECT min(id) FROM blocks)")
    conn.close()
    with (
        Saver.from_conn_string(str(db_path)) as saver,
        pytest.raises(CorruptionError, match="does not hold"),
    ):
        saver.get_tuple(config())


# -- dictionaries -------------------------------------------------------------------------


def chat(saver: Saver, thread: str, turns: int) -> None:
    messages: list[Any] = []
    parent = None
    for turn in range(1, turns + 1):
        messages = [
            *messages,
            HumanMessage(content=text(100 + turn, 300), id=f"{thread}-{turn}-h"),
            AIMessage(content=text(200 + turn, 400), id=f"{thread}-{turn}-a"),
        ]
        stored = put(
            saver, {"messages": list(messages)}, thread_id=thread, number=turn, parent=parent
        )
        saver.put_writes(stored, [("messages", [messages[-1]])], f"task-{turn}")
        parent = stored["configurable"]["checkpoint_id"]


def test_a_dictionary_is_trained_from_the_file_and_documents_do_not_change(
    db_path: Path,
) -> None:
    """Past the first threshold the file holds a dictionary, small bodies use it, and the
    logical documents are the same bytes as before the training."""
    with Saver.from_conn_string(str(db_path)) as saver:
        chat(saver, "t", 6)
        before = saver.documents()
        assert table(db_path, "SELECT count(*) FROM dicts")[0][0] == 0
        chat(saver, "u", 60)
        assert table(db_path, "SELECT count(*) FROM dicts")[0][0] == 1
        modes = table(db_path, "SELECT substr(body, 1, 1), count(*) FROM vals GROUP BY 1")
        assert dict(modes).get(b"\x02", 0) > 100
        assert ormsgpack.packb(saver.documents("t")) == ormsgpack.packb(before)
    with Saver.from_conn_string(str(db_path)) as reopened:
        assert ormsgpack.packb(reopened.documents("t")) == ormsgpack.packb(before)


def test_a_few_small_bodies_still_train_a_dictionary(db_path: Path) -> None:
    """A forced training of a file holding a few small bodies (a dictionary smaller than
    the trainer's fixed segment size) still makes a dictionary, as zstd's own search did."""
    with Saver.from_conn_string(str(db_path)) as saver:
        for n in range(1, 13):
            put(saver, {"note": f"step {n} " + text(n, 60)}, thread_id=f"t{n}", number=n)
        assert saver.file.content.train(force=True) is not None
        assert table(db_path, "SELECT count(*) FROM dicts")[0][0] == 1


def test_writers_holding_a_retired_dictionary_pack_again(db_path: Path) -> None:
    """Another saver on the file retrains and retires the dictionary in use: the next puts
    must not store bodies naming the retired dictionary. (In one process both savers
    share the content store; the test below holds the same for a private File, as
    another process has.)"""
    with Saver.from_conn_string(str(db_path)) as first:
        chat(first, "t", 4)
        assert first.file.content.train(force=True) is not None
        with Saver.from_conn_string(str(db_path)) as second:
            held = second.file.content.current
            assert held is not None
            assert first.file.content.train(force=True) != held.ident
            assert list(first.file.content._dicts) == [first.file.content.current.ident]
            chat(second, "u", 3)
    held_id = held.ident
    rows = table(db_path, "SELECT body FROM vals") + table(db_path, "SELECT body FROM writes")
    assert not any(body[:1] == b"\x02" and body[1] == held_id for (body,) in rows)
    with Saver.from_conn_string(str(db_path)) as reader:
        assert len(reader.documents("u")) > 0
        assert reader.get_tuple(config("u")) is not None


# -- upgrade ------------------------------------------------------------------------------


def expected_documents() -> list[Any]:
    raw = zstandard.ZstdDecompressor().decompress((DATA / "documents.msgpack.zst").read_bytes())
    return list(ormsgpack.unpackb(raw))


def test_a_format_1_file_upgrades_and_keeps_every_document(tmp_path: Path) -> None:
    """A file written by threadloom 0.1 (format 1) opens, migrates, reads the same documents,
    then its first write trains a dictionary that re-encodes the old rows (large ones into
    blocks) and the documents are still byte-identical."""
    path = tmp_path / "old.db"
    shutil.copy(DATA / "format1.db", path)
    assert table(path, "PRAGMA user_version")[0][0] == 1
    wanted = ormsgpack.packb(expected_documents())
    with Saver.from_conn_string(str(path)) as saver:
        assert table(path, "PRAGMA user_version")[0][0] == FORMAT_VERSION
        assert ormsgpack.packb([list(d) for d in saver.documents()]) == wanted
        head = saver.get_tuple(config("alpha"))
        assert head is not None and len(head.checkpoint["channel_values"]["messages"]) == 1 + 3 * 16
        assert table(path, "SELECT count(*) FROM dicts")[0][0] == 0
        # The thread goes on: the first write after the upgrade trains the dictionary.
        put(saver, {"step": 99}, thread_id="gamma")
        assert table(path, "SELECT count(*) FROM dicts")[0][0] == 1
        assert table(path, "SELECT count(*) FROM vals WHERE blocks > 0")[0][0] > 0
        legacy = table(path, "SELECT count(*) FROM vals WHERE substr(body, 1, 1) = x'01'")
        assert legacy[0][0] == 0
        assert (
            ormsgpack.packb([list(d) for d in saver.documents() if d[2]["thread_id"] != "gamma"])
            == wanted
        )
    with Saver.from_conn_string(str(path)) as reopened:
        head = reopened.get_tuple(config("beta"))
        assert head is not None and head.checkpoint["channel_values"]["step"] == 16


def test_training_thresholds_double_and_stop(db_path: Path) -> None:
    """Automatic retraining happens at doubling thresholds and stops at LAST_TRAINING."""
    with Saver.from_conn_string(str(db_path)) as saver:
        content = saver.file.content
        chat(saver, "t", 40)
        due = dict(table(db_path, "SELECT key, value FROM meta"))["dict_next"]
        written = dict(table(db_path, "SELECT key, value FROM meta"))["inline_bytes"]
        assert due > store_module.FIRST_TRAINING
        assert written < due <= 2 * written + store_module.FIRST_TRAINING
        assert content.train() is None  # not due


def test_a_scope_opened_after_a_retraining_does_not_use_the_retired_dictionary(
    db_path: Path,
) -> None:
    """The file's content store read its dictionary before another process retrained; a
    scope opened afterwards knows the new epoch but must still not write the old one."""
    from threadloom.engine.checkpoint_store import CheckpointStore
    from threadloom.engine.file import File
    from threadloom.langgraph.tuples import serialization

    with Saver.from_conn_string(str(db_path)) as first:
        chat(first, "t", 4)
        first.file.content.train(force=True)
        # A private File stands for another process: its own pool and content store.
        second = File(db_path)
        try:
            assert second is not first.file
            held = second.content.current
            assert held is not None
            first.file.content.train(force=True)
            late = CheckpointStore(
                second, namespace=first.namespace, agent_id="late", serialization=serialization()
            )
            late.writer.put(
                config("v"), put_checkpoint(), {"source": "loop", "step": 1, "parents": {}}
            )
        finally:
            second.close()
    rows = table(db_path, "SELECT body FROM vals") + table(db_path, "SELECT body FROM checkpoints")
    assert not any(body[:1] == b"\x02" and body[1] == held.ident for (body,) in rows)


def schema_growth(tmp_path: Path) -> int:
    """Bytes an empty file at the current format, every feature's tables made (as an
    upgraded file has them), holds beyond an empty format-1 file."""
    from threadloom.engine.file import File
    from threadloom.engine.format import features
    from threadloom.engine.format.schema import MIGRATIONS

    old = tmp_path / "empty1.db"
    conn = apsw.Connection(str(old))
    conn.execute(MIGRATIONS[0])
    conn.execute("VACUUM")
    conn.close()
    new = File(tmp_path / "empty.db")
    with new.write() as c:
        for feature in features.ALL:
            new.ensure(c, feature)
    with new.connection() as c:
        c.execute("VACUUM")
    new.close()
    return (tmp_path / "empty.db").stat().st_size - old.stat().st_size


def put_checkpoint() -> dict[str, Any]:
    from tests.engine.test_durability import checkpoint

    return checkpoint({"note": text(30, 2000), "other": text(31, 1500)})


# -- command line -------------------------------------------------------------------------


def test_doctor_reports_sharing_and_compact_shrinks_an_upgraded_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`doctor --db` reads a file without upgrading it; `compact` upgrades, re-encodes and
    VACUUMs it, keeping every document; both refuse a missing file with exit status 1."""
    import json

    from threadloom.cli import main

    path = tmp_path / "old.db"
    shutil.copy(DATA / "format1.db", path)
    assert main(["doctor", "--json", "--db", str(path)]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["file_format"] == 1 and before["threads"] == 2
    assert table(path, "PRAGMA user_version")[0][0] == 1
    assert main(["compact", "--db", str(path)]) == 0
    capsys.readouterr()
    assert main(["doctor", "--json", "--db", str(path)]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["file_format"] == FORMAT_VERSION
    # The tables added since format 1 (the Store's among them) are empty here: their
    # pages are the schema's growth, not content.
    assert after["file_bytes"] - schema_growth(tmp_path) < before["file_bytes"]
    assert after["block_sharing"] > 1 and after["dictionary"] is not None
    with Saver.from_conn_string(str(path)) as saver:
        assert ormsgpack.packb([list(d) for d in saver.documents()]) == ormsgpack.packb(
            expected_documents()
        )
    assert main(["compact", "--db", str(tmp_path / "missing.db")]) == 1
    assert "is not a file" in capsys.readouterr().err


def test_extents_go_with_their_last_block_and_compact_repacks_the_rest(
    quick: Saver, db_path: Path
) -> None:
    """Blocks live back to back in extents: an extent is deleted with its last block, a
    mostly dead one is rewritten by compact, and what is left reads back intact."""
    keep, drop = text(40, 60_000), text(41, 140_000)
    put(quick, {"a": keep + drop}, thread_id="both")  # one body: one extent
    put(quick, {"a": keep}, thread_id="kept")  # shares the blocks of `keep`
    first = table(db_path, "SELECT min(id) FROM extents")[0][0]
    quick.delete_thread("both")
    # `drop`'s blocks are gone; the first extent stays for `keep`'s, mostly dead now.
    live, stored = table(
        db_path,
        "SELECT total(b.length), length(e.body) FROM extents e JOIN blocks b ON b.extent = e.id "
        f"WHERE e.id = {first}",
    )[0]
    assert 0 < live < 0.75 * stored
    quick.file.content.compact()
    for live, stored in table(
        db_path,
        "SELECT total(b.length), length(e.body) FROM extents e JOIN blocks b ON b.extent = e.id "
        "GROUP BY e.id",
    ):
        assert live == stored
    got = quick.get_tuple(config("kept"))
    assert got is not None and got.checkpoint["channel_values"]["a"] == keep
    quick.delete_thread("kept")
    assert table(db_path, "SELECT count(*) FROM extents")[0][0] == 0


def test_a_missing_extent_is_corruption(db_path: Path) -> None:
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, {"note": text(42, 40_000)})
    conn = apsw.Connection(str(db_path))
    conn.execute("DELETE FROM extents")
    conn.close()
    with (
        Saver.from_conn_string(str(db_path)) as saver,
        pytest.raises(CorruptionError, match="extent"),
    ):
        saver.get_tuple(config())


# -- verify -------------------------------------------------------------------------------


def test_three_processes_sharing_blocks_keep_the_counts_exact(
    db_path: Path, tmp_path: Path
) -> None:
    """Three processes write the same large values into their threads while deleting and
    pruning threads (no grace): every block count stays equal to what the rows list."""
    from tests.engine.test_durability import child, finish

    steps, size = 60, 30_000
    go = tmp_path / "go"
    Saver(db_path).close()
    procs = [
        child("share", str(db_path), f"p{i}", str(steps), str(size), str(go)) for i in range(3)
    ]
    go.touch()
    for proc in procs:
        assert finish(proc, timeout=180).split()[-1] == str(steps - 1)
    with Saver.from_conn_string(str(db_path)) as saver:
        report = saver.file.content.verify()
        assert report["problems"] == []
        assert report["leaks"] == []
        assert report["blocks"] > 0
        for thread in saver.checkpoints.scope.thread_ids():
            assert saver.get_tuple(config(thread)) is not None


def test_verify_names_what_is_wrong(quick: Saver, db_path: Path) -> None:
    """A lowered count is a problem, a raised one a leak, a damaged block a problem."""
    put(quick, {"note": text(50, 200_000)})
    assert quick.file.content.verify()["problems"] == []
    conn = apsw.Connection(str(db_path))
    conn.execute("UPDATE blocks SET refs = refs - 1 WHERE id = (SELECT min(id) FROM blocks)")
    conn.execute("UPDATE blocks SET refs = refs + 1 WHERE id = (SELECT max(id) FROM blocks)")
    conn.execute("UPDATE extents SET live = live + 1")
    conn.close()
    report = quick.file.content.verify()
    assert any("counts 0 references, rows hold 1" in p for p in report["problems"])
    assert any("counts 2 references, rows hold 1" in p for p in report["leaks"])
    assert any("live blocks" in p for p in report["problems"])
    from threadloom.cli import main

    assert main(["verify", "--db", str(db_path)]) == 3


def test_blocks_framed_in_a_batch_equal_blocks_framed_one_by_one() -> None:
    """frame_blocks (two threads past 1 MiB) frames every block exactly as frame_block does,
    in order, compressible or not."""
    import os as _os

    from threadloom.engine.format.codec import frame_block, frame_blocks

    pieces = [_os.urandom(4096) if i % 3 else bytes(4096) for i in range(400)]
    assert sum(map(len, pieces)) > 1024 * 1024
    assert frame_blocks(pieces) == [frame_block(p) for p in pieces]
    assert frame_blocks(pieces[:3]) == [frame_block(p) for p in pieces[:3]]
    assert frame_blocks([]) == []
