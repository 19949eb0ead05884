"""The native backend: cffi wrappers over the C core (`native/threadloom.h`).

Layer: core. Each function returns exactly what its twin in `core._python` (the
specification) returns; one C call per function call, whatever the number of elements.
Importing this module raises ImportError when the extension `threadloom._native` was not
built. The C functions release the GIL (cffi's default); every buffer they read is an
immutable bytes object or an exported buffer that stays referenced for the call.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate, pairwise
from typing import Any

from threadloom._native import ffi, lib
from threadloom.core._python import CHUNK_SIZE, Buffer, ListRefs, Typed
from threadloom.core.cdc import check_sizes

NAME = "native"
FEATURES: int = lib.tl_cpu_features()
"""Hardware paths this CPU offers (TL_HW_* bits), read once; `NativeCore(0)` is portable C."""

_alloc = ffi.new_allocator(should_clear_after_alloc=False)


def _check(rc: int, function: str) -> int:
    if rc == lib.TL_EINVAL:
        raise ValueError(f"{function}: invalid arguments")
    if rc < 0:
        raise RuntimeError(f"{function} failed with code {rc} (a bug in threadloom)")
    return rc


def _offsets(lengths: Any) -> array[int]:
    return array("Q", accumulate(lengths, initial=0))


class _Batch:
    """A `tl_batch` over typed payloads, holding every buffer it points into."""

    def __init__(self, typed: Sequence[Typed]) -> None:
        count = len(typed)
        kinds = [kind for kind, _ in typed]
        self.payloads = [payload for _, payload in typed]
        if count and kinds.count(kinds[0]) == count:  # the common case: one kind for all
            kind = kinds[0].encode()
            kind_blob = kind * count
            step = len(kind)
            kind_offsets = (
                array("Q", range(0, step * count + 1, step)) if step else _offsets([0] * count)
            )
        else:
            encoded = [kind.encode() for kind in kinds]
            kind_blob = b"".join(encoded)
            kind_offsets = _offsets(map(len, encoded))
        payload_blob = b"".join(self.payloads)
        self.lengths = list(map(len, self.payloads))
        payload_offsets = _offsets(self.lengths)
        self.keep = (
            ffi.from_buffer("unsigned char[]", kind_blob),
            ffi.from_buffer("uint64_t[]", kind_offsets),
            ffi.from_buffer("unsigned char[]", payload_blob),
            ffi.from_buffer("uint64_t[]", payload_offsets),
        )
        self.c = ffi.new("tl_batch *")
        self.c.count = count
        self.c.kinds, self.c.kind_offsets, self.c.payloads, self.c.payload_offsets = self.keep
        self.c.kinds_len = len(kind_blob)
        self.c.payloads_len = len(payload_blob)
        self.count = count
        self.chunk_count = -(-count // CHUNK_SIZE)


def _hex_refs(prefix: str, hex_buffer: Any, count: int) -> list[str]:
    text = ffi.buffer(hex_buffer, 64 * count)[:].decode("ascii")
    return [prefix + text[i : i + 64] for i in range(0, 64 * count, 64)]


class NativeCore:
    """The hashing functions of the C core, bound to a set of hardware paths.

    Args:
        features: TL_HW_* bits the C code may use: FEATURES (what this CPU offers, the
            default backend) or 0 (the portable C code, which tests compare too).
    """

    def __init__(self, features: int) -> None:
        if features & ~FEATURES:
            raise ValueError(f"features {features:#x} include hardware this CPU lacks")
        self.features = features

    def sha256_hex(self, data: Buffer) -> str:
        """Return the lowercase hex SHA-256 of `data`."""
        buf = ffi.from_buffer("unsigned char[]", data)
        out = _alloc("unsigned char[32]")
        _check(lib.tl_sha256(buf, len(buf), self.features, out), "tl_sha256")
        return bytes(ffi.buffer(out)).hex()

    def list_refs(self, typed: Sequence[Typed]) -> ListRefs:
        """Return the element, chunk and list-blob refs of a list of typed payloads (one C call)."""
        batch = _Batch(typed)
        count = batch.count
        element_hex = _alloc("char[]", 64 * count + 1)
        chunk_hex = _alloc("char[]", 64 * batch.chunk_count + 1)
        list_hex = _alloc("char[64]")
        # The element refs come back through the chunk texts, `[["e-<hex>", <len>], ...]`
        # back to back: splitting the whole text on `"` once yields every `e-<hex>` string,
        # already prefixed, at the odd positions (refs and integers hold no quote).
        capacity = lib.tl_refs_text_capacity(count)
        text = _alloc("char[]", capacity + 1)
        bounds = _alloc("uint64_t[]", batch.chunk_count + 1)
        rc = lib.tl_refs(
            batch.c, self.features, element_hex, chunk_hex, list_hex, text, capacity, bounds
        )
        _check(rc, "tl_refs")
        element_refs = (
            ffi.buffer(text, bounds[batch.chunk_count])[:].decode("ascii").split('"')[1::2]
        )
        entries: list[list[str | int]] = list(
            map(list, zip(element_refs, batch.lengths, strict=True))
        )
        chunks = [entries[i : i + CHUNK_SIZE] for i in range(0, count, CHUNK_SIZE)]
        chunk_refs = _hex_refs("c-", chunk_hex, batch.chunk_count)
        list_ref = "b-" + ffi.buffer(list_hex)[:].decode()
        return ListRefs(element_refs, chunks, chunk_refs, list_ref)

    def chunk_texts(self, typed: Sequence[Typed]) -> list[str]:
        """Return the JSON text of each chunk of `typed`, as the C core builds and hashes it."""
        batch = _Batch(typed)
        capacity = lib.tl_refs_text_capacity(batch.count)
        text = _alloc("char[]", capacity + 1)
        offsets = _alloc("uint64_t[]", batch.chunk_count + 1)
        element_hex = _alloc("char[]", 64 * batch.count + 1)
        chunk_hex = _alloc("char[]", 64 * batch.chunk_count + 1)
        list_hex = _alloc("char[64]")
        rc = lib.tl_refs(
            batch.c, self.features, element_hex, chunk_hex, list_hex, text, capacity, offsets
        )
        _check(rc, "tl_refs")
        bounds = ffi.unpack(offsets, batch.chunk_count + 1)
        whole = ffi.buffer(text, bounds[-1])[:].decode("ascii")
        return [whole[start:end] for start, end in pairwise(bounds)]

    def value_blob_refs(self, typed: Sequence[Typed]) -> list[str]:
        """Return the value-blob `b-` ref of each typed payload (one C call)."""
        batch = _Batch(typed)
        blob_hex = _alloc("char[]", 64 * batch.count + 1)
        _check(lib.tl_value_blob_refs(batch.c, self.features, blob_hex), "tl_value_blob_refs")
        return _hex_refs("b-", blob_hex, batch.count)


_DEFAULT = NativeCore(FEATURES)
sha256_hex = _DEFAULT.sha256_hex
list_refs = _DEFAULT.list_refs
chunk_texts = _DEFAULT.chunk_texts
value_blob_refs = _DEFAULT.value_blob_refs


def cdc_cuts(data: Buffer, min_size: int, avg_size: int, max_size: int) -> list[int]:
    """Return the end offset of every content-defined chunk of `data` (see `core.cdc`)."""
    check_sizes(min_size, avg_size, max_size)
    buf = ffi.from_buffer("unsigned char[]", data)
    length = len(buf)
    # A max_size beyond the data cuts like the data's length; clamping keeps it in size_t.
    max_size = min(max_size, max(avg_size, length))
    cap = length // min_size + 1
    cuts = _alloc("uint64_t[]", cap)
    count = _check(lib.tl_cdc_cuts(buf, length, min_size, avg_size, max_size, cuts, cap), "cdc")
    return ffi.unpack(cuts, count)  # type: ignore[no-any-return]


def array_spans(payload: Buffer) -> list[tuple[int, int]] | None:
    """Return `(start, end)` of each element of the msgpack array `payload`, or None."""
    buf = ffi.from_buffer("unsigned char[]", payload)
    count = lib.tl_msgpack_array_spans(buf, len(buf), ffi.NULL, 0)
    if count == lib.TL_ENOTARRAY:
        return None
    offsets = _alloc("uint64_t[]", _check(count, "tl_msgpack_array_spans") + 1)
    count = lib.tl_msgpack_array_spans(buf, len(buf), offsets, count + 1)
    if count == lib.TL_ENOTARRAY:
        return None
    bounds = ffi.unpack(offsets, _check(count, "tl_msgpack_array_spans") + 1)
    return list(pairwise(bounds))
