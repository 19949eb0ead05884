"""Physical encoding of one stored body: msgpack, zstandard, blake3.

Invariant: `unpack` never returns data whose blake3 digest differs from the one
recorded at `pack` time; a damaged body raises CorruptionError naming the document.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import blake3
import ormsgpack
import zstandard

from threadloom.errors import CorruptionError

DIGEST_SIZE = 16
_COMPRESS_FROM = 96
_RAW = 0
_ZSTD = 1
_pool: list[tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]] = []
_pool_lock = threading.Lock()


@contextlib.contextmanager
def _codecs() -> Iterator[tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]]:
    # zstd contexts are costly to create and not thread-safe: borrow one from a pool
    # (LangGraph checkpoints from short-lived executor threads, so thread-locals churn).
    with _pool_lock:
        codecs = _pool.pop() if _pool else None
    if codecs is None:
        codecs = (zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor())
    try:
        yield codecs
    finally:
        with _pool_lock:
            if len(_pool) < 16:
                _pool.append(codecs)


def digest(raw: bytes) -> bytes:
    """Return the truncated blake3 digest recorded beside every body."""
    return blake3.blake3(raw).digest(length=DIGEST_SIZE)


def pack(value: Any) -> tuple[bytes, bytes]:
    """Encode `value` (msgpack types: maps, lists, str, bytes, ints, None) to (body, digest)."""
    raw = ormsgpack.packb(value)
    if len(raw) >= _COMPRESS_FROM:
        with _codecs() as (compressor, _):
            squeezed = compressor.compress(raw)
        if len(squeezed) < len(raw):
            return bytes((_ZSTD,)) + squeezed, digest(raw)
    return bytes((_RAW,)) + raw, digest(raw)


def unpack(body: bytes, expected: bytes, name: str) -> Any:
    """Decode a body written by `pack`, checking its digest.

    Args:
        body: stored bytes.
        expected: digest stored beside them.
        name: how to name the document in an error.

    Raises:
        CorruptionError: the body is damaged (bad header, bad zstd frame or digest mismatch).
    """
    try:
        mode = body[0]
        if mode == _ZSTD:
            with _codecs() as (_, decompressor):
                raw = decompressor.decompress(body[1:])
        elif mode == _RAW:
            raw = bytes(body[1:])
        else:
            raise ValueError(f"unknown body mode {mode}")
    except (IndexError, ValueError, zstandard.ZstdError) as exc:
        raise CorruptionError(
            f"{name} is damaged ({exc}); restore the file from a backup"
        ) from None
    if digest(raw) != bytes(expected):
        raise CorruptionError(
            f"{name} is damaged (blake3 mismatch); restore the file from a backup"
        )
    return ormsgpack.unpackb(raw)
