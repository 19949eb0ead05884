"""Physical framing of one stored body: msgpack, then raw, zstd, zstd with a dictionary,
or a list of content blocks (see docs/FORMAT.md, "Bodies").

Pure functions and small value classes: no SQL here (engine/content/content_store.py
owns the tables).

Invariant: nothing decoded here is returned unless its blake3 digest matches the one
recorded when it was written (`digest` for a whole body, the block key for a block).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Generic, TypeVar

import blake3
import zstandard

from threadloom.errors import CorruptionError

#: Bytes of the blake3 digest stored beside every body (end-to-end check of the msgpack).
DIGEST_SIZE: Final = 16
#: Bytes of a block key: the full blake3 of the block, so sharing needs no collision luck.
KEY_SIZE: Final = 32

RAW: Final = 0
"""Body mode: the msgpack follows as is."""
ZSTD: Final = 1
"""Body mode: a zstd frame without dictionary follows."""
ZSTD_DICT: Final = 2
"""Body mode: a varint dictionary id, then a zstd frame made with that dictionary."""
BLOCKS: Final = 3
"""Body mode: the keys of the content blocks whose concatenation is the msgpack."""
BLOCK_LIST: Final = 4
"""Body mode: the key of one block holding the keys of a BLOCKS body (without the mode
byte): long lists are shared too (a part whose content did not change lists the same)."""
DELTA: Final = 5
"""Body mode (format 10, `c-` chunk documents only): the 32-byte digest of the base
chunk's ref (`c-` + its hex), then a zstd frame made with the base's msgpack as its
raw-content dictionary. The base is another row of the same thread, never a delta."""

_COMPRESS_FROM: Final = 64
_LEVEL: Final = 3
#: The zstd level of content blocks. A block is 1-16 KiB, too short for level 3's
#: longer searches to pay: on blocks cut from 4 MiB of base64 noise, prose and JSON,
#: level 1's output is within 0.7% of level 3's (smaller for prose) for 2-17% less CPU
#: (bench/README.md, "The 20 MiB turn").
BLOCK_LEVEL: Final = 1

T = TypeVar("T")
R = TypeVar("R")


class Pool(Generic[T]):
    """Objects that are costly to build and not thread-safe (zstd contexts), lent one at a time.

    LangGraph checkpoints from short-lived executor threads, so thread-locals would churn.
    """

    def __init__(self, factory: Callable[[], T], keep: int = 16) -> None:
        self._factory = factory
        self._keep = keep
        self._idle: list[T] = []
        self._lock = threading.Lock()

    def run(self, use: Callable[[T], R]) -> R:
        """`use(item)` with an item of the pool: `lend` without a context manager, for the
        hot paths (list pop and append are atomic, so no lock is needed)."""
        try:
            item = self._idle.pop()
        except IndexError:
            item = self._factory()
        try:
            return use(item)
        finally:
            if len(self._idle) < self._keep:
                self._idle.append(item)

    @contextlib.contextmanager
    def lend(self) -> Iterator[T]:
        with self._lock:
            item = self._idle.pop() if self._idle else None
        if item is None:
            item = self._factory()
        try:
            yield item
        finally:
            with self._lock:
                if len(self._idle) < self._keep:
                    self._idle.append(item)


#: The first bytes of a standard zstd frame. Format 12 writes every frame without them
#: (zstd's magicless format) and without a dictionary id (a body names its dictionary
#: itself): 8 bytes less in every body framed with a dictionary, 4 in the others. A
#: magicless frame starts with its header's descriptor byte, whose reserved bit (0x08)
#: is clear, so it never starts with the magic's 0x28: a reader takes either (`_bare`).
_MAGIC: Final = b"\x28\xb5\x2f\xfd"


def _bare_params(level: int) -> zstandard.ZstdCompressionParameters:
    """Parameters of a frame as format 12 writes it: no magic, no dictionary id, no
    checksum (the body's digest checks it), the content size (the decoder sizes its
    output from it)."""
    return zstandard.ZstdCompressionParameters.from_level(
        level,
        format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        write_content_size=True,
        write_checksum=False,
        write_dict_id=False,
    )


def _bare(frame: bytes | memoryview) -> bool:
    """Whether `frame` is a magicless frame (format 12) rather than a standard one."""
    return frame[:4] != _MAGIC


def _decompressor(
    dict_data: zstandard.ZstdCompressionDict | None, bare: bool
) -> zstandard.ZstdDecompressor:
    if bare:
        return zstandard.ZstdDecompressor(
            dict_data=dict_data, format=zstandard.FORMAT_ZSTD1_MAGICLESS
        )
    return zstandard.ZstdDecompressor(dict_data=dict_data)


_plain_compressors = Pool(lambda: zstandard.ZstdCompressor(compression_params=_bare_params(_LEVEL)))
_block_compressors = Pool(
    lambda: zstandard.ZstdCompressor(compression_params=_bare_params(BLOCK_LEVEL))
)
_plain_decompressors = (
    Pool(lambda: _decompressor(None, False)),
    Pool(lambda: _decompressor(None, True)),
)


def _plain_decompress(frame: bytes | memoryview) -> bytes:
    """The content of a frame made without a dictionary, standard or bare."""
    return _plain_decompressors[_bare(frame)].run(lambda d: d.decompress(frame))


class Dictionary:
    """A zstd dictionary trained from a file's own bodies, with pooled contexts for it."""

    def __init__(self, ident: int, data: bytes) -> None:
        self.ident = ident
        self.data = data
        self._dict = zstandard.ZstdCompressionDict(data)
        self._dict.precompute_compress(level=_LEVEL)
        self._header = bytes((ZSTD_DICT,)) + varint(ident)
        params = _bare_params(_LEVEL)
        self._compressors = Pool(
            lambda: zstandard.ZstdCompressor(dict_data=self._dict, compression_params=params)
        )
        self._decompressors = (
            Pool(lambda: _decompressor(self._dict, False)),
            Pool(lambda: _decompressor(self._dict, True)),
        )

    def compress(self, raw: bytes) -> bytes:
        return self._header + self._compressors.run(lambda c: c.compress(raw))

    def decompress(self, frame: bytes | memoryview) -> bytes:
        return self._decompressors[_bare(frame)].run(lambda d: d.decompress(frame))


def digest(raw: bytes | memoryview) -> bytes:
    """Return the truncated blake3 digest recorded beside every body."""
    return blake3.blake3(raw).digest(length=DIGEST_SIZE)


def block_key(raw: bytes | memoryview) -> bytes:
    """Return the key of a content block: its full blake3 digest."""
    return blake3.blake3(raw).digest()


def varint(value: int) -> bytes:
    """LEB128 encoding of a non-negative integer."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(body: bytes | memoryview, at: int) -> tuple[int, int]:
    """Decode a LEB128 integer at `at`; return (value, offset after it)."""
    value = shift = 0
    while True:
        byte = body[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def frame(raw: bytes, dictionary: Dictionary | None) -> bytes:
    """Frame `raw` inline: zstd (with `dictionary` when given) if that is smaller, else raw."""
    if len(raw) >= _COMPRESS_FROM:
        if dictionary is not None:
            squeezed = dictionary.compress(raw)
        else:
            squeezed = bytes((ZSTD,)) + _plain_compressors.run(lambda c: c.compress(raw))
        if len(squeezed) <= len(raw):
            return squeezed
    return bytes((RAW,)) + raw


#: Blocks framed in one call above this many bytes in all are split over two threads.
_PARALLEL_FROM: Final = 1024 * 1024
_helper: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_helper_lock = threading.Lock()


def _second_thread() -> concurrent.futures.ThreadPoolExecutor:
    """One worker thread for the process (made again after a fork, whose threads are gone)."""
    global _helper
    with _helper_lock:
        if _helper is None or _helper[0] != os.getpid():
            _helper = (
                os.getpid(),
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="threadloom-zstd"),
            )
        return _helper[1]


def _frame_all(pieces: Sequence[bytes | memoryview]) -> list[bytes]:
    with _block_compressors.lend() as compressor:
        out = []
        for raw in pieces:
            squeezed = compressor.compress(raw)
            out.append(
                bytes((ZSTD,)) + squeezed if len(squeezed) < len(raw) else bytes((RAW,)) + raw
            )
        return out


def frame_blocks(pieces: Sequence[bytes | memoryview]) -> list[bytes]:
    """`frame_block` of each piece; a large batch is compressed on two threads.

    With python-zstandard's C backend, in one call that compresses every piece on two
    threads of its own with the GIL released once (`multi_compress_to_buffer`): a loop
    of one call per 4 KiB block releases and takes the GIL back 5,000 times for 20 MiB,
    and each time waits for whichever Python thread holds it (LangGraph runs the pending
    writes and the checkpoint of a big tool result on two threads at once). Elsewhere
    the batch is split between this thread and one helper thread.
    """
    if len(pieces) < 2 or sum(map(len, pieces)) < _PARALLEL_FROM:
        return _frame_all(pieces)
    if all(pieces):
        with _block_compressors.lend() as compressor:
            many = getattr(compressor, "multi_compress_to_buffer", None)
            squeezed = many(pieces, threads=2) if many is not None else None
        if squeezed is not None:
            return [
                _ZSTD + segment if len(segment) < len(raw) else _RAW + raw
                for raw, segment in zip(pieces, squeezed, strict=True)
            ]
    half = len(pieces) // 2
    later = _second_thread().submit(_frame_all, pieces[half:])
    return _frame_all(pieces[:half]) + later.result()


_ZSTD: Final = bytes((ZSTD,))
_RAW: Final = bytes((RAW,))


def frame_block(raw: bytes | memoryview) -> bytes:
    """Frame one content block: zstd without dictionary if smaller, else raw.

    Blocks never use a dictionary: they are shared and kept for as long as anything
    references them, while dictionaries are retrained and retired.
    """
    squeezed = _block_compressors.run(lambda c: c.compress(raw))
    if len(squeezed) < len(raw):
        return bytes((ZSTD,)) + squeezed
    return bytes((RAW,)) + bytes(raw)


def unframe(body: bytes, dictionaries: Callable[[int], Dictionary], name: str) -> bytes:
    """Return the msgpack of an inline body (mode RAW, ZSTD or ZSTD_DICT).

    Args:
        body: the stored body.
        dictionaries: returns the dictionary of an id (may raise).
        name: how to name the document in an error.

    Raises:
        CorruptionError: bad header or bad zstd frame.
    """
    try:
        mode = body[0]
        if mode == ZSTD:
            return _plain_decompress(memoryview(body)[1:])
        if mode == RAW:
            return body[1:]
        if mode == ZSTD_DICT:
            ident, start = read_varint(body, 1)
            return dictionaries(ident).decompress(memoryview(body)[start:])
        raise ValueError(f"unknown body mode {mode}")
    except (IndexError, ValueError, zstandard.ZstdError) as exc:
        raise CorruptionError(
            f"{name} is damaged ({exc}); restore the file from a backup"
        ) from None


#: What frames DELTA bodies against one base (`delta_compressor`).
DeltaCompressor = zstandard.ZstdCompressor


def delta_compressor(base_raw: bytes) -> DeltaCompressor:
    """A compressor of DELTA frames against a base chunk's msgpack `base_raw`.

    Making one costs about twice what it then takes to compress a chunk (the dictionary
    is loaded into a new context): a caller framing several versions against one base
    keeps it (`delta`'s `compressor`). Not thread-safe: one user at a time. It holds
    100-160 KiB once used (`memory_size()`).
    """
    prefix = zstandard.ZstdCompressionDict(base_raw, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(dict_data=prefix, compression_params=_bare_params(_LEVEL))


def delta(
    raw: bytes,
    base_ref: str,
    base_raw: bytes,
    compressor: DeltaCompressor | None = None,
) -> bytes:
    """Frame `raw` (a `c-` chunk's msgpack) as a DELTA of the chunk `base_ref` holding
    `base_raw`: the entries they share cost a few bytes of zstd matches.

    Args:
        compressor: `delta_compressor(base_raw)`, kept from an earlier call (the same
            bytes come out: each frame is compressed on its own); None makes one.
    """
    if compressor is None:
        compressor = delta_compressor(base_raw)
    return bytes((DELTA,)) + bytes.fromhex(base_ref[2:]) + compressor.compress(raw)


def delta_base(body: bytes | memoryview) -> str:
    """The ref of the base chunk a DELTA body names."""
    return "c-" + bytes(body[1 : 1 + KEY_SIZE]).hex()


def undelta(body: bytes, base_raw: bytes, name: str) -> bytes:
    """Return the msgpack of a DELTA body, given its base's msgpack.

    Raises:
        CorruptionError: a bad frame (a wrong base reads as a digest mismatch later).
    """
    try:
        prefix = zstandard.ZstdCompressionDict(base_raw, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        frame = memoryview(body)[1 + KEY_SIZE :]
        return _decompressor(prefix, _bare(frame)).decompress(frame)
    except (IndexError, ValueError, zstandard.ZstdError) as exc:
        raise CorruptionError(
            f"{name} is damaged ({exc}); restore the file from a backup"
        ) from None


def unframe_block(body: bytes, key: bytes, name: str) -> bytes:
    """Return the bytes of a stored block, checked against its key.

    Raises:
        CorruptionError: bad header, bad frame or a digest that is not the key.
    """
    try:
        mode = body[0]
        if mode == ZSTD:
            raw = _plain_decompress(memoryview(body)[1:])
        elif mode == RAW:
            raw = body[1:]
        else:
            raise ValueError(f"unknown block mode {mode}")
    except (IndexError, ValueError, zstandard.ZstdError) as exc:
        raise CorruptionError(
            f"block {key.hex()[:16]} of {name} is damaged ({exc}); restore the file from a backup"
        ) from None
    if block_key(raw) != key:
        raise CorruptionError(
            f"block {key.hex()[:16]} of {name} is damaged (blake3 mismatch); "
            "restore the file from a backup"
        )
    return raw


def block_keys(body: bytes, start: int = 1) -> list[bytes]:
    """Return the block keys of a BLOCKS body (or, with `start=0`, of a list block)."""
    if (len(body) - start) % KEY_SIZE:
        raise ValueError("block list length is not a multiple of the key size")
    return [body[i : i + KEY_SIZE] for i in range(start, len(body), KEY_SIZE)]


def check(raw: bytes, expected: bytes, name: str) -> None:
    """Raise CorruptionError unless `raw` has the recorded digest."""
    if digest(raw) != bytes(expected):
        raise CorruptionError(
            f"{name} is damaged (blake3 mismatch: its body, its digest or a column that "
            "identifies it changed); restore the file from a backup"
        )
