"""zstd frames without magic number and dictionary id (format 12, engine/format/codec.py)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
import zstandard

from tests.engine._fixtures import copied, documents, dumped, put_values
from threadloom import Saver, Store
from threadloom.engine.checks.verify import verify
from threadloom.engine.format import codec
from threadloom.engine.format.schema import FORMAT_VERSION, TASKKEYS_FORMAT
from threadloom.errors import CorruptionError

FORMAT10 = Path(__file__).resolve().parents[1] / "data" / "format10"
MAGIC = b"\x28\xb5\x2f\xfd"
TEXT = b"".join(b"message %d: the agent read the file and answered. " % i for i in range(40))


def _dictionary() -> codec.Dictionary:
    samples = [TEXT[i : i + 300] + b"%d" % i for i in range(0, len(TEXT) - 300, 7)]
    return codec.Dictionary(9, zstandard.train_dictionary(2048, samples).as_bytes())


def _standard_body(raw: bytes, dictionary: codec.Dictionary) -> bytes:
    """A mode-2 body as format 11 wrote it: a standard frame with magic and dictionary id."""
    compressor = zstandard.ZstdCompressor(
        level=3, dict_data=zstandard.ZstdCompressionDict(dictionary.data)
    )
    return bytes((codec.ZSTD_DICT,)) + codec.varint(9) + compressor.compress(raw)


def test_a_body_framed_with_a_dictionary_is_8_bytes_shorter_and_reads_back() -> None:
    dictionary = _dictionary()
    raw = TEXT[:900]
    body = codec.frame(raw, dictionary)
    old = _standard_body(raw, dictionary)
    assert body[0] == codec.ZSTD_DICT and body[2:6] != MAGIC and old[2:6] == MAGIC
    assert len(body) == len(old) - 8
    for stored in (body, old):
        assert codec.unframe(stored, lambda ident: dictionary, "a body") == raw


def test_frames_without_a_dictionary_drop_the_magic_and_read_either_way() -> None:
    raw = TEXT[:900]
    body = codec.frame(raw, None)
    old = bytes((codec.ZSTD,)) + zstandard.ZstdCompressor(level=3).compress(raw)
    assert body[0] == codec.ZSTD and body[1:5] != MAGIC and len(body) == len(old) - 4
    for stored in (body, old):
        assert codec.unframe(stored, lambda ident: _dictionary(), "a body") == raw
    block = codec.frame_block(raw)
    assert block[1:5] != MAGIC
    old_block = bytes((codec.ZSTD,)) + zstandard.ZstdCompressor(level=1).compress(raw)
    key = codec.block_key(raw)
    for stored in (block, old_block):
        assert codec.unframe_block(stored, key, "a value") == raw
    # A batch framed on two threads (multi_compress_to_buffer) is bare too.
    pieces = [TEXT[i:] + b"%d" % i for i in range(0, 1200, 3)]
    for framed, piece in zip(codec.frame_blocks(pieces), pieces, strict=True):
        assert framed[1:5] != MAGIC
        assert codec.unframe_block(framed, codec.block_key(piece), "a value") == piece


def test_a_delta_drops_the_magic_and_reads_either_way() -> None:
    base = TEXT
    raw = TEXT[:500] + b"an edit" + TEXT[500:]
    ref = "c-" + "ab" * 32
    body = codec.delta(raw, ref, base)
    prefix = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    old = (
        bytes((codec.DELTA,))
        + bytes.fromhex(ref[2:])
        + zstandard.ZstdCompressor(
            level=3, dict_data=prefix, write_checksum=False, write_dict_id=False
        ).compress(raw)
    )
    at = 1 + codec.KEY_SIZE
    assert body[at : at + 4] != MAGIC and old[at : at + 4] == MAGIC
    assert len(body) == len(old) - 4
    for stored in (body, old):
        assert codec.delta_base(stored) == ref
        assert codec.undelta(stored, base, "a chunk") == raw


@pytest.mark.parametrize("cut", [0, 1, 3, 5])
def test_a_truncated_bare_frame_is_damage_not_a_crash(cut: int) -> None:
    dictionary = _dictionary()
    body = codec.frame(TEXT[:900], dictionary)
    with pytest.raises(CorruptionError, match="damaged"):
        codec.unframe(body[: 2 + cut], lambda ident: dictionary, "a body")


BODIES = ("checkpoints", "writes", "vals", "store_items")


def _frames(path: Path, where: str = "", tables: tuple[str, ...] = BODIES) -> dict[str, list[bool]]:
    """Per table, whether each zstd-framed inline body (modes 1, 2 and 5) has the magic."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    found: dict[str, list[bool]] = {}
    try:
        for table in tables:
            for (body,) in conn.execute(f"SELECT body FROM {table} {where}"):
                mode = body[0]
                if mode in (codec.ZSTD, codec.ZSTD_DICT, codec.DELTA):
                    at = {
                        codec.ZSTD: 1,
                        codec.ZSTD_DICT: len(codec.varint(codec.read_varint(body, 1)[0])) + 1,
                        codec.DELTA: 1 + codec.KEY_SIZE,
                    }[mode]
                    found.setdefault(table, []).append(body[at : at + 4] == MAGIC)
    finally:
        conn.close()
    return found


def test_a_format_10_file_reads_its_old_frames_writes_bare_ones_and_compact_renews_all(
    tmp_path: Path,
) -> None:
    """The format-10 fixture (tests/data/format10/make.py) holds standard frames only:
    after the upgrade they read as before, new rows are bare, and a training (as `compact`
    runs) re-encodes the old whole bodies bare, smaller, with the same documents."""
    path = copied(FORMAT10, tmp_path)
    old = _frames(path)
    assert all(all(kinds) for kinds in old.values())
    assert {"checkpoints", "writes", "vals"} <= set(old)
    expected = dumped(FORMAT10)
    with Saver.from_conn_string(str(path)) as saver:
        assert documents(saver) == expected
        for n in range(3):
            put_values(saver, "new", {"messages": [TEXT.decode() + str(n)], "n": n})
        assert verify(saver.file).sound
        written = documents(saver)
    with Store.from_conn_string(str(path)) as store:
        store.put(("grace", "facts"), "coffee", {"text": "no coffee " + TEXT.decode()})
        assert store.get(("grace", "facts"), "tea").value == {"text": "likes green tea"}  # type: ignore[union-attr]
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
        assert FORMAT_VERSION >= TASKKEYS_FORMAT
        (thread,) = conn.execute("SELECT id FROM threads WHERE thread_id = 'new'").fetchone()
    finally:
        conn.close()
    fresh = _frames(path, f"WHERE thread = {thread}", BODIES[:3])
    assert fresh["vals"] and fresh["checkpoints"]
    assert not any(any(kinds) for kinds in fresh.values())
    assert not any(_frames(path, "WHERE key = 'coffee'", BODIES[3:]).get("store_items", []))
    size_before = _inline_bytes(path)
    with Saver.from_conn_string(str(path)) as saver:
        assert saver.file.content.train(force=True) is not None
        assert documents(saver) == written
        assert verify(saver.file).sound
        for thread_id in ("alpha", "beta", "gamma", "delta", "parts", "new"):
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            assert saver.get_tuple(config) is not None, thread_id
    # Every whole body is bare; the chunk deltas keep their frames (a training re-encodes
    # whole bodies only: a delta is 4 bytes longer than it would be now).
    left = {t: sum(k) for t, k in _frames(path).items()}
    assert left == {"checkpoints": 0, "writes": 0, "vals": 41, "store_items": 0}, left
    assert _inline_bytes(path) < size_before


def _inline_bytes(path: Path) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return sum(
            conn.execute(f"SELECT total(length(body)) FROM {t} WHERE blocks = 0").fetchall()[0][0]
            for t in ("checkpoints", "writes", "vals")
        )
    finally:
        conn.close()
