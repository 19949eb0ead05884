"""The native backend: cffi wrappers over the C core (`native/threadloom.h`).

Layer: core. Each function returns exactly what its twin in `core._python` (the
specification) returns; one C call per function call, whatever the number of elements.
Importing this module raises ImportError when the extension `threadloom._native` was not
built. The C functions release the GIL (cffi's default); every buffer they read is an
immutable bytes object or an exported buffer that stays referenced for the call.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from threadloom._native import ffi, lib
from threadloom.core._python import CHUNK_SIZE, Buffer, ListRefs, Typed
from threadloom.core.cdc import check_sizes
from threadloom.core.similarity import PARAMS, check_metric
from threadloom.core.similarity import Buffer as VectorBuffer

NAME = "native"
FEATURES: int = lib.tl_cpu_features()
"""Hardware paths this CPU offers (TL_HW_* bits), read once; `NativeCore(0)` is portable C."""

_alloc = ffi.new_allocator(should_clear_after_alloc=False)
_STRIDE: int = lib.TL_REF_STRIDE
"""Bytes per ref in the refs buffers the C core fills: two-letter prefix, 64 hex, newline."""


def _check(rc: int, function: str) -> int:
    if rc == lib.TL_EINVAL:
        raise ValueError(f"{function}: invalid arguments")
    if rc < 0:
        raise RuntimeError(f"{function} failed with code {rc} (a bug in threadloom)")
    return rc


class _Batch:
    """A `tl_batch` over typed payloads, holding every buffer it points into.

    Attributes:
        c: the `tl_batch *`.
        count: the number of elements.
        lengths: `len(payload)` of each element, in order.
    """

    def __init__(self, typed: Sequence[Typed]) -> None:
        count = len(typed)
        kind = typed[0][0] if count else ""
        # The common case, one kind for all, takes one pass and no kind array (kind_lengths
        # NULL): keep the payloads of that kind, and fall back when some were left out.
        payloads = [payload for other, payload in typed if other == kind]
        if len(payloads) == count:
            kind_blob = kind.encode()
            kind_lengths = ffi.NULL
        else:
            payloads = [payload for _, payload in typed]
            encoded = [other.encode() for other, _ in typed]
            kind_blob = b"".join(encoded)
            kind_lengths = ffi.from_buffer("uint64_t[]", array("Q", map(len, encoded)))
        self.lengths = lengths = list(map(len, payloads))
        payload_blob = b"".join(payloads)
        kinds = ffi.from_buffer("unsigned char[]", kind_blob)
        blob = ffi.from_buffer("unsigned char[]", payload_blob)
        payload_lengths = ffi.from_buffer("uint64_t[]", array("Q", lengths))
        self.keep = (kinds, kind_lengths, blob, payload_lengths)
        fields = (count, kinds, len(kind_blob), kind_lengths, blob, len(blob), payload_lengths)
        self.c = ffi.new("tl_batch *", fields)
        self.count = count
        self.chunk_count = -(-count // CHUNK_SIZE)


def _ref_lines(refs: Any, count: int) -> list[str]:
    """Split `count` refs in the TL_REF_STRIDE layout (`x-<hex>\\n` each) into strings."""
    if not count:
        return []
    text: str = ffi.unpack(refs, _STRIDE * count - 1).decode("ascii")
    return text.split("\n")


_METRICS = {"cosine": lib.TL_COSINE, "l2": lib.TL_L2, "inner_product": lib.TL_INNER_PRODUCT}


def _float_count(buffer: VectorBuffer, dims: int) -> int:
    """The number of `dims`-long float32 vectors in `buffer` (the spec's checks and errors)."""
    if dims < 1:
        raise ValueError(f"dims must be at least 1, not {dims}")
    if len(buffer) % (4 * dims):
        raise ValueError(
            f"a buffer of {len(buffer)} bytes does not hold whole vectors of {dims} float32"
        )
    return len(buffer) // (4 * dims)


def _floats(buffer: VectorBuffer) -> Any:
    """A `float *` over little-endian float32 bytes (copied into host order on big-endian)."""
    if sys.byteorder == "big":  # pragma: no cover - no big-endian CI
        values = array("f")
        values.frombytes(buffer)
        values.byteswap()
        return ffi.from_buffer("float[]", values)
    return ffi.from_buffer("float[]", buffer)


class NativeCore:
    """The hashing and vector functions of the C core, bound to a set of hardware paths.

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
        count, chunk_count = batch.count, batch.chunk_count
        refs = _alloc("char[]", _STRIDE * (count + chunk_count + 1))
        rc = lib.tl_refs(batch.c, self.features, refs, ffi.NULL, 0, ffi.NULL)
        _check(rc, "tl_refs")
        # Every ref of the list comes back as one text, `e-...` x count, `c-...` x chunks, then
        # `b-...`, newline-separated: one decode and one split make all the strings.
        element_refs = _ref_lines(refs, count + chunk_count + 1)
        list_ref = element_refs.pop()
        chunk_refs = element_refs[count:]
        del element_refs[count:]
        entries: list[list[str | int]] = [
            [ref, length] for ref, length in zip(element_refs, batch.lengths, strict=True)
        ]
        chunks = [entries[i : i + CHUNK_SIZE] for i in range(0, count, CHUNK_SIZE)]
        return ListRefs(element_refs, chunks, chunk_refs, list_ref)

    def cdc_blocks(
        self, data: Buffer, min_size: int, avg_size: int, max_size: int
    ) -> tuple[list[int], list[bytes]]:
        """Return the cuts of `data` and the BLAKE3 digest of each block, in one C call."""
        buf, length, max_size, cap = _cdc_args(data, min_size, avg_size, max_size)
        cuts = _alloc("uint64_t[]", cap)
        keys = _alloc("unsigned char[]", 32 * cap)
        rc = lib.tl_cdc_blocks(
            buf, length, min_size, avg_size, max_size, self.features, cuts, cap, keys
        )
        count = _check(rc, "tl_cdc_blocks")
        digests = ffi.buffer(keys, 32 * count)[:]
        return ffi.unpack(cuts, count), [digests[at : at + 32] for at in range(0, 32 * count, 32)]

    def chunk_texts(self, typed: Sequence[Typed]) -> list[str]:
        """Return the JSON text of each chunk of `typed`, as the C core builds and hashes it."""
        batch = _Batch(typed)
        capacity = lib.tl_refs_text_capacity(batch.count)
        text = _alloc("char[]", capacity + 1)
        offsets = _alloc("uint64_t[]", batch.chunk_count + 1)
        refs = _alloc("char[]", _STRIDE * (batch.count + batch.chunk_count + 1))
        rc = lib.tl_refs(batch.c, self.features, refs, text, capacity, offsets)
        _check(rc, "tl_refs")
        bounds = ffi.unpack(offsets, batch.chunk_count + 1)
        whole = ffi.buffer(text, bounds[-1])[:].decode("ascii")
        return [whole[start:end] for start, end in pairwise(bounds)]

    def value_blob_refs(self, typed: Sequence[Typed]) -> list[str]:
        """Return the value-blob `b-` ref of each typed payload (one C call)."""
        batch = _Batch(typed)
        refs = _alloc("char[]", _STRIDE * batch.count + 1)
        _check(lib.tl_value_blob_refs(batch.c, self.features, refs), "tl_value_blob_refs")
        return _ref_lines(refs, batch.count)

    def vector_scores(
        self, query: VectorBuffer, matrix: VectorBuffer, dims: int, metric: str
    ) -> array[float]:
        """Return the score of `query` against each vector of `matrix` (see core.similarity)."""
        code = _METRICS[check_metric(metric)]
        if _float_count(query, dims) != 1 or len(query) != 4 * dims:
            raise ValueError(
                f"the query must be one vector of {dims} float32, not {len(query) // 4} values"
            )
        count = _float_count(matrix, dims)
        scores = array("d", bytes(8 * count))
        out = ffi.from_buffer("double[]", scores, require_writable=True)
        rc = lib.tl_vector_scores(
            _floats(query), _floats(matrix), count, dims, code, self.features, out
        )
        _check(rc, "tl_vector_scores")
        return scores

    def vector_nearest(
        self, vectors: VectorBuffer, centroids: VectorBuffer, dims: int, metric: str
    ) -> list[int]:
        """Return the index of the best-scoring centroid for each vector (see core.similarity)."""
        code = _METRICS[check_metric(metric)]
        count, k = _float_count(vectors, dims), _float_count(centroids, dims)
        if not k:
            raise ValueError("nearest needs at least one centroid")
        chosen = array("I", bytes(4 * count))
        out = ffi.from_buffer("uint32_t[]", chosen, require_writable=True)
        rc = lib.tl_vector_nearest(
            _floats(vectors), count, _floats(centroids), k, dims, code, self.features, out
        )
        _check(rc, "tl_vector_nearest")
        return chosen.tolist()

    def vector_bounds(
        self,
        query_codes: VectorBuffer,
        query_params: Sequence[float],
        codes: VectorBuffer,
        params: Sequence[float],
        dims: int,
        metric: str,
    ) -> array[float]:
        """Return an upper bound of each vector's exact score (see core.similarity.bounds)."""
        return _vector_bounds(self.features, query_codes, query_params, codes, params, dims, metric)

    def vector_chunk_bounds(
        self,
        query_codes: VectorBuffer,
        query_params: Sequence[float],
        chunks: VectorBuffer,
        counts: Sequence[int],
        dims: int,
        metric: str,
    ) -> tuple[array[int], array[float]]:
        """Return (items, bounds) of every vector of code chunks (see
        core.similarity.chunk_bounds; one C call for all of them)."""
        code = _METRICS[check_metric(metric)]
        if dims < 1 or len(query_codes) != dims or len(query_params) != PARAMS:
            raise ValueError(f"the query needs {dims} codes and {PARAMS} params")
        if any(count < 1 for count in counts):
            raise ValueError(f"code chunks do not hold {sum(counts)} vectors of {dims} codes")
        typed = counts if isinstance(counts, array) and counts.typecode == "Q" else None
        sizes = typed if typed is not None else array("Q", counts)
        total = sum(sizes)
        items = array("q", bytes(8 * total))
        bounds = array("d", bytes(8 * total))
        data = ffi.from_buffer("unsigned char[]", chunks)
        rc = lib.tl_vector_chunk_bounds(
            ffi.from_buffer("int8_t[]", query_codes),
            ffi.from_buffer("double[]", _doubles(query_params)),
            data,
            len(data),
            ffi.from_buffer("uint64_t[]", sizes),
            len(sizes),
            dims,
            code,
            self.features,
            ffi.from_buffer("int64_t[]", items, require_writable=True),
            ffi.from_buffer("double[]", bounds, require_writable=True),
        )
        if rc == lib.TL_EINVAL:
            raise ValueError(f"code chunks do not hold {total} vectors of {dims} codes")
        _check(rc, "tl_vector_chunk_bounds")
        return items, bounds


_DEFAULT = NativeCore(FEATURES)
sha256_hex = _DEFAULT.sha256_hex
list_refs = _DEFAULT.list_refs
cdc_blocks = _DEFAULT.cdc_blocks
chunk_texts = _DEFAULT.chunk_texts
value_blob_refs = _DEFAULT.value_blob_refs
vector_scores = _DEFAULT.vector_scores
vector_nearest = _DEFAULT.vector_nearest
vector_bounds = _DEFAULT.vector_bounds
vector_chunk_bounds = _DEFAULT.vector_chunk_bounds


def vector_top(scores: Sequence[float], keys: Sequence[int] | None, k: int) -> list[int]:
    """Return the indices of the `k` best scores, best first (see core.similarity.top)."""
    count = len(scores)
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} scores")
    k = max(0, min(k, count))
    values = scores if isinstance(scores, array) and scores.typecode == "d" else array("d", scores)
    if keys is None:
        key_buffer = ffi.NULL
    else:
        typed = keys if isinstance(keys, array) and keys.typecode == "q" else array("q", keys)
        key_buffer = ffi.from_buffer("int64_t[]", typed)
    top = _alloc("uint64_t[]", max(k, 1))
    rc = lib.tl_vector_top(ffi.from_buffer("double[]", values), key_buffer, count, k, top)
    if rc == lib.TL_EINVAL:
        raise ValueError("a NaN score has no rank")
    return ffi.unpack(top, _check(rc, "tl_vector_top"))  # type: ignore[no-any-return]


def vector_means(
    vectors: VectorBuffer, assignment: Sequence[int], k: int, dims: int, normalize: bool
) -> tuple[bytes, list[int]]:
    """Return (centroids, counts) of a k-means update (see core.similarity.means)."""
    count = _float_count(vectors, dims)
    if len(assignment) != count or k < 1:
        raise ValueError(f"{len(assignment)} assignments for {count} vectors, k={k}")
    if any(not 0 <= cluster < k for cluster in assignment):
        raise ValueError(f"an assignment is not below k={k}")
    chosen = assignment if isinstance(assignment, array) else array("I", assignment)
    sums = _alloc("double[]", k * dims)
    means = _alloc("float[]", k * dims)
    counts = _alloc("uint64_t[]", k)
    rc = lib.tl_vector_means(
        _floats(vectors),
        count,
        ffi.from_buffer("uint32_t[]", chosen),
        k,
        dims,
        int(normalize),
        sums,
        means,
        counts,
    )
    _check(rc, "tl_vector_means")
    packed = array("f")
    packed.frombytes(ffi.buffer(means))
    if sys.byteorder == "big":  # pragma: no cover - no big-endian CI
        packed.byteswap()
    return packed.tobytes(), ffi.unpack(counts, k)


def _cdc_args(
    data: Buffer, min_size: int, avg_size: int, max_size: int
) -> tuple[Any, int, int, int]:
    """The checked arguments of a CDC call: the buffer, its length, the max size clamped
    (a max_size beyond the data cuts like the data's length; clamping keeps it in
    size_t) and the most chunks it can cut."""
    check_sizes(min_size, avg_size, max_size)
    buf = ffi.from_buffer("unsigned char[]", data)
    length = len(buf)
    return buf, length, min(max_size, max(avg_size, length)), length // min_size + 1


def cdc_cuts(data: Buffer, min_size: int, avg_size: int, max_size: int) -> list[int]:
    """Return the end offset of every content-defined chunk of `data` (see `core.cdc`)."""
    buf, length, max_size, cap = _cdc_args(data, min_size, avg_size, max_size)
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


def vector_quantize(matrix: VectorBuffer, dims: int) -> tuple[bytes, array[float]]:
    """Return (codes, params) of each vector (see core.similarity.quantize; one C call)."""
    count = _float_count(matrix, dims)
    codes = bytearray(count * dims)
    params = array("d", bytes(8 * PARAMS * count))
    rc = lib.tl_vector_quantize(
        _floats(matrix),
        count,
        dims,
        ffi.from_buffer("int8_t[]", codes, require_writable=True),
        ffi.from_buffer("double[]", params, require_writable=True),
    )
    _check(rc, "tl_vector_quantize")
    return bytes(codes), params


def _vector_bounds(
    features: int,
    query_codes: VectorBuffer,
    query_params: Sequence[float],
    codes: VectorBuffer,
    params: Sequence[float],
    dims: int,
    metric: str,
) -> array[float]:
    """Return an upper bound of each vector's exact score (see core.similarity.bounds)."""
    code = _METRICS[check_metric(metric)]
    count = len(codes) // dims if dims > 0 else 0
    if dims < 1 or len(query_codes) != dims or len(codes) != count * dims:
        raise ValueError(f"quantized buffers do not hold whole vectors of {dims} codes")
    if len(params) != PARAMS * count:
        raise ValueError(f"quantized buffers do not hold whole vectors of {dims} codes")
    if len(query_params) != PARAMS:
        raise ValueError(f"the query needs {PARAMS} params, not {len(query_params)}")
    query_typed = _doubles(query_params)
    typed = _doubles(params)
    out = array("d", bytes(8 * count))
    rc = lib.tl_vector_bounds(
        ffi.from_buffer("int8_t[]", query_codes),
        ffi.from_buffer("double[]", query_typed),
        ffi.from_buffer("int8_t[]", codes),
        ffi.from_buffer("double[]", typed),
        count,
        dims,
        code,
        features,
        ffi.from_buffer("double[]", out, require_writable=True),
    )
    _check(rc, "tl_vector_bounds")
    return out


def _doubles(values: Sequence[float]) -> array[float] | memoryview:
    """The doubles as a buffer C can read: an array or a contiguous view of doubles as it
    is (a slice of the exact scan's params, `engine/items/scan.py`), anything else copied."""
    if isinstance(values, array) and values.typecode == "d":
        return values
    if isinstance(values, memoryview) and values.format == "d" and values.c_contiguous:
        return values
    return array("d", values)
