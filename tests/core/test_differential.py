"""Differential property tests: the C core against the pure-Python specification.

Every example runs through `python`, `native` and `native-portable` (the C core without
SHA-NI) and all three must agree exactly; the Python side is itself checked against
hashlib and json.dumps where an outside oracle exists.
"""

from __future__ import annotations

import hashlib
import json
import math
from itertools import pairwise
from typing import Any

import ormsgpack
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from tests.core.conftest import Backend, make_backend, require_native

EDGE_SIZES = [0, 1, 2, 31, 32, 33, 55, 56, 63, 64, 65, 119, 120, 127, 128, 129, 1000]

kinds = st.one_of(
    st.sampled_from(["msgpack", "json", "bytes", "bytearray", "null", "pickle", ""]),
    st.text(max_size=12),
    # kind ‖ \0 (after `v` for value blobs) around one 64-byte block, and beyond it, where
    # the C core streams the message on its own instead of pairing it with another
    st.sampled_from(["k" * 61, "k" * 62, "k" * 63, "k" * 64, "é" * 40]),
    st.text(min_size=60, max_size=80),
)
payloads = st.one_of(
    st.binary(max_size=300),
    st.sampled_from([b"", b"\0", b"x" * 1025]),
    st.sampled_from(EDGE_SIZES).map(lambda size: b"p" * size),
)
typed_lists = st.one_of(
    st.lists(st.tuples(kinds, payloads), max_size=100),
    st.tuples(kinds, st.lists(payloads, max_size=100)).map(
        lambda pair: [(pair[0], payload) for payload in pair[1]]
    ),
)


@pytest.fixture(scope="module")
def backends() -> list[Backend]:
    """python, native and native-portable (native ones required in CI, else skipped)."""
    require_native()
    return [make_backend(name) for name in ("python", "native", "native-portable")]


def _same(backends: list[Backend], function: str, *args: Any) -> Any:
    results = [getattr(backend, function)(*args) for backend in backends]
    for backend, result in zip(backends[1:], results[1:], strict=True):
        assert result == results[0], f"{backend.name} disagrees with python on {function}"
    return results[0]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=5000), st.sampled_from(EDGE_SIZES).map(bytes)))
def test_sha256(backends: list[Backend], data: bytes) -> None:
    """Every backend's sha256_hex equals hashlib's on random and boundary-sized buffers."""
    assert _same(backends, "sha256_hex", data) == hashlib.sha256(data).hexdigest()


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(typed=typed_lists)
@example(typed=[("msgpack", b"")] * 64)
@example(typed=[("msgpack", b"a" * n) for n in range(33)])
def test_list_refs(backends: list[Backend], typed: list[tuple[str, bytes]]) -> None:
    """list_refs and chunk_texts agree on every backend, and hash what json.dumps writes."""
    refs = _same(backends, "list_refs", typed)
    texts = _same(backends, "chunk_texts", typed)
    assert texts == [json.dumps(chunk) for chunk in refs.chunks]
    assert [len(chunk) for chunk in refs.chunks] == [
        min(32, len(typed) - start) for start in range(0, len(typed), 32)
    ]
    first = typed[0] if typed else None
    if first is not None:
        kind, payload = first
        expected = hashlib.sha256(kind.encode() + b"\0" + payload).hexdigest()
        assert refs.element_refs[0] == "e-" + expected


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(typed=typed_lists)
def test_value_blob_refs(backends: list[Backend], typed: list[tuple[str, bytes]]) -> None:
    """value_blob_refs agrees on every backend with sha256("v" ‖ kind ‖ \\0 ‖ payload)."""
    refs = _same(backends, "value_blob_refs", typed)
    expected = [
        "b-" + hashlib.sha256(b"v" + kind.encode() + b"\0" + payload).hexdigest()
        for kind, payload in typed
    ]
    assert refs == expected


@st.composite
def cdc_cases(draw: st.DrawFn) -> tuple[bytes, int, int, int]:
    """A buffer and valid sizes, with lengths near 0, min and max drawn often."""
    min_size = draw(st.integers(1, 300))
    avg_size = draw(st.integers(max(8, min_size), 1200))
    max_size = draw(st.integers(avg_size, 4000))
    length = draw(
        st.one_of(
            st.sampled_from([0, 1, min_size, min_size + 1, max_size, max_size + 1]),
            st.integers(0, 20_000),
        )
    )
    seed = draw(st.binary(min_size=1, max_size=8))
    low_entropy = draw(st.booleans())
    if low_entropy:
        data = (seed * (length // len(seed) + 1))[:length]
    else:
        data = b"".join(
            hashlib.sha256(seed + n.to_bytes(4, "big")).digest() for n in range(length // 32 + 1)
        )[:length]
    return data, min_size, avg_size, max_size


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cdc_cases())
def test_cdc_cuts(backends: list[Backend], case: tuple[bytes, int, int, int]) -> None:
    """cdc_cuts agrees on every backend and respects the min/max chunk sizes."""
    data, min_size, avg_size, max_size = case
    cuts = _same(backends[:2], "cdc_cuts", data, min_size, avg_size, max_size)
    assert cuts == sorted(set(cuts))
    assert (cuts[-1] if cuts else 0) == len(data)
    sizes = [end - start for start, end in pairwise([0, *cuts])]
    assert all(min(min_size + 1, max_size) <= size <= max_size for size in sizes[:-1])
    assert all(0 < size <= max_size for size in sizes[-1:])


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cdc_cases())
def test_cdc_blocks(backends: list[Backend], case: tuple[bytes, int, int, int]) -> None:
    """cdc_blocks agrees on every backend (the C core with AVX2, and without: SSE2 or
    scalar): the cuts of cdc_cuts and the BLAKE3 of each block, as the `blake3` package
    computes it (the C core's BLAKE3 is its own code)."""
    import blake3

    data, min_size, avg_size, max_size = case
    cuts, keys = _same(backends, "cdc_blocks", data, min_size, avg_size, max_size)
    assert cuts == backends[0].cdc_cuts(data, min_size, avg_size, max_size)
    blocks = [data[start:end] for start, end in pairwise([0, *cuts])]
    assert keys == [blake3.blake3(block).digest() for block in blocks]


def test_cdc_blocks_at_the_content_store_sizes(backends: list[Backend]) -> None:
    """2 MiB cut at the content store's sizes (blocks of 1-16 KiB, many chunks each, so
    every lane count is used) hashes alike on every backend and as the blake3 package."""
    import blake3

    data = b"".join(hashlib.sha256(n.to_bytes(4, "big")).digest() for n in range(1 << 16))
    cuts, keys = _same(backends, "cdc_blocks", data, 1024, 4096, 16384)
    blocks = [data[start:end] for start, end in pairwise([0, *cuts])]
    assert keys == [blake3.blake3(block).digest() for block in blocks]


def test_blake3_at_every_tree_shape() -> None:
    """The C core's BLAKE3 equals the `blake3` package's around every block, chunk and
    tree boundary (1 to 17 chunks, and a 1 MiB buffer)."""
    import blake3

    c = require_native()
    sizes = sorted(
        {0, 1, 1 << 20, (1 << 20) + 1}
        | {n * 1024 + d for n in range(18) for d in (-65, -64, -63, -1, 0, 1, 63, 64, 65)}
    )
    data = b"".join(hashlib.sha256(n.to_bytes(4, "big")).digest() for n in range(1 << 16))
    out = c.ffi.new("unsigned char[32]")
    for size in (s for s in sizes if s >= 0):
        assert c.lib.tl_blake3_hash(data, size, out) == c.lib.TL_OK
        assert bytes(out) == blake3.blake3(data[:size]).digest(), size
    assert c.lib.tl_blake3_hash(c.ffi.NULL, 1, out) == c.lib.TL_EINVAL


def test_cdc_cuts_huge(backends: list[Backend]) -> None:
    """A 2 MiB buffer cuts the same in both backends, at the default-like sizes."""
    seed = b"huge"
    data = b"".join(hashlib.sha256(seed + n.to_bytes(4, "big")).digest() for n in range(1 << 16))
    cuts = _same(backends[:2], "cdc_cuts", data, 2048, 8192, 65536)
    assert 100 < len(cuts) < 600 and cuts[-1] == len(data)


def test_cdc_cuts_resynchronise(backends: list[Backend]) -> None:
    """Inserting bytes near the start moves only the first cuts; later cuts shift by the
    insertion's length (the point of content-defined chunking)."""
    data = b"".join(hashlib.sha256(n.to_bytes(4, "big")).digest() for n in range(8192))
    for backend in backends[:2]:
        before = backend.cdc_cuts(data, 256, 1024, 8192)
        after = backend.cdc_cuts(b"inserted!" + data, 256, 1024, 8192)
        shifted = {cut + 9 for cut in before[3:]}
        assert shifted <= set(after)


@pytest.mark.parametrize(
    "sizes", [(0, 8, 16), (9, 8, 16), (4, 16, 8), (1, 7, 16), (1, 2**32 + 1, 2**33), (1.5, 8, 9)]
)
def test_cdc_rejects_bad_sizes(backends: list[Backend], sizes: tuple[Any, int, int]) -> None:
    """Sizes outside 1 <= min <= avg <= max, 8 <= avg <= 2**32 raise ValueError everywhere."""
    for backend in backends[:2]:
        with pytest.raises(ValueError):
            backend.cdc_cuts(b"data", *sizes)


def test_cdc_accepts_a_huge_max(backends: list[Backend]) -> None:
    """A max_size beyond any buffer (and beyond size_t) cuts like one of the buffer's length."""
    data = bytes(range(256)) * 64
    _same(backends[:2], "cdc_cuts", data, 16, 64, 2**70)
    assert _same(backends[:2], "cdc_cuts", data, 16, 64, 2**70) == _same(
        backends[:2], "cdc_cuts", data, 16, 64, len(data)
    )


msgpack_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False),
        st.text(max_size=40),
        st.binary(max_size=300),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=20),
        st.dictionaries(st.text(max_size=8), children, max_size=8),
    ),
    max_leaves=60,
)


@st.composite
def msgpack_buffers(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A msgpack encoding of random values (often an array), sometimes damaged; and
    whether it is intact."""
    value = draw(st.one_of(st.lists(msgpack_values, max_size=70), msgpack_values))
    encoded: bytes = ormsgpack.packb(value)
    damage = draw(st.sampled_from(["none", "none", "truncate", "append", "flip", "random"]))
    if damage == "truncate" and encoded:
        encoded = encoded[: draw(st.integers(0, len(encoded) - 1))]
    elif damage == "append":
        encoded += draw(st.binary(min_size=1, max_size=4))
    elif damage == "flip" and encoded:
        at = draw(st.integers(0, len(encoded) - 1))
        encoded = encoded[:at] + bytes([draw(st.integers(0, 255))]) + encoded[at + 1 :]
    elif damage == "random":
        encoded = draw(st.binary(max_size=64))
    return encoded, damage == "none"


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=msgpack_buffers())
@example(case=(b"\xdc\x00\x00", True))
@example(case=(b"\xdd\xff\xff\xff\xff\x01", False))
@example(case=(b"\x91\xc1", False))
@example(case=(b"\x91\xdf\xff\xff\xff\xff", False))
@example(case=(b"\x92\xd9", False))
@example(case=(b"\x90\x90", False))
@example(case=(b"", False))
def test_array_spans(backends: list[Backend], case: tuple[bytes, bool]) -> None:
    """array_spans agrees on every backend; on an intact array its spans decode to the
    elements."""
    payload, intact = case
    spans = _same(backends[:2], "array_spans", payload)
    if intact and payload[:1] and (0x90 <= payload[0] <= 0x9F or payload[0] in (0xDC, 0xDD)):
        assert spans is not None
    if spans is not None and intact:
        items = ormsgpack.unpackb(payload)
        assert isinstance(items, list) and len(items) == len(spans)
        for (start, end), item in zip(spans, items, strict=True):
            assert ormsgpack.unpackb(payload[start:end]) == item


METRIC_NAMES = ["cosine", "l2", "inner_product"]


@st.composite
def vector_sets(draw: st.DrawFn) -> tuple[int, list[list[float]], list[list[float]]]:
    """dims, a query-like set and a matrix-like set of float32-representable vectors, with
    zero vectors, repeats and dims around the 8- and 32-float lanes drawn often."""
    dims = draw(st.one_of(st.sampled_from([1, 7, 8, 9, 31, 32, 33, 384]), st.integers(1, 70)))
    element = st.floats(-1e3, 1e3, width=32, allow_subnormal=False)
    vector = st.one_of(
        st.lists(element, min_size=dims, max_size=dims),
        st.just([0.0] * dims),
        st.integers(0, 2**32).map(lambda seed: _gauss(seed, dims)),
    )
    return dims, draw(st.lists(vector, min_size=1, max_size=5)), draw(st.lists(vector, max_size=40))


def _normal_or_zero(vector: list[float]) -> bool:
    from threadloom.core import similarity

    squares = math.fsum(x * x for x in similarity.floats(similarity.pack(vector), len(vector)))
    return squares == 0.0 or squares >= similarity.FLOAT32_NORMAL


def _gauss(seed: int, dims: int) -> list[float]:
    import random

    rng = random.Random(seed)
    return [rng.gauss(0, 1) for _ in range(dims)]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=vector_sets(), metric=st.sampled_from(METRIC_NAMES))
@example(case=(1, [[2.0**-126]], [[0.0], [2.0**-126]]), metric="l2")  # squares under 2**-149
@example(case=(1, [[2.0**-126]], [[0.0], [2.0**-126]]), metric="inner_product")
def test_vector_scores(
    backends: list[Backend], case: tuple[int, list[list[float]], list[list[float]]], metric: str
) -> None:
    """vector_scores of every backend is within the stated tolerance of the Python spec, and
    the spec is the metric's textbook formula."""
    from threadloom.core import similarity

    dims, queries, rows = case
    if metric == "cosine":  # the core's contract (similarity.FLOAT32_NORMAL)
        assume(all(_normal_or_zero(v) for v in [*queries, *rows]))
    matrix = b"".join(similarity.pack(row) for row in rows)
    for query in queries:
        blob = similarity.pack(query)
        spec = list(backends[0].vector_scores(blob, matrix, dims, metric))
        assert len(spec) == len(rows)
        q = list(similarity.floats(blob, dims))
        for row, score in zip(rows, spec, strict=True):
            v = list(similarity.floats(similarity.pack(row), dims))
            dot = sum(a * b for a, b in zip(q, v, strict=True))
            if metric == "inner_product":
                assert score == pytest.approx(dot, rel=1e-9, abs=1e-9)
            elif metric == "l2":
                dist = math.sqrt(sum((a - b) ** 2 for a, b in zip(q, v, strict=True)))
                assert score == pytest.approx(-dist, rel=1e-9, abs=1e-9)
            else:
                norms = math.sqrt(sum(a * a for a in q)) * math.sqrt(sum(b * b for b in v))
                assert score == (pytest.approx(dot / norms, abs=1e-9) if norms else 0.0)
        for backend in backends[1:]:
            other = backend.vector_scores(blob, matrix, dims, metric)
            for row, a, b in zip(rows, spec, other, strict=True):
                bound = similarity.tolerance(metric, q, row)
                assert abs(a - b) <= bound, (backend.name, metric, a, b)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=vector_sets(), metric=st.sampled_from(METRIC_NAMES))
def test_vector_nearest(
    backends: list[Backend], case: tuple[int, list[list[float]], list[list[float]]], metric: str
) -> None:
    """Every backend's nearest centroid scores within tolerance of the best centroid (the spec
    takes the exact best, lowest index on ties)."""
    from threadloom.core import similarity

    dims, centroids, rows = case
    cents = b"".join(similarity.pack(c) for c in centroids)
    matrix = b"".join(similarity.pack(row) for row in rows)
    for backend in backends:
        chosen = backend.vector_nearest(matrix, cents, dims, metric)
        assert len(chosen) == len(rows) and all(0 <= c < len(centroids) for c in chosen)
        for row, choice in zip(rows, chosen, strict=True):
            scores = list(backends[0].vector_scores(similarity.pack(row), cents, dims, metric))
            if backend.name == "python":
                assert choice == scores.index(max(scores))
            else:
                worst = max(similarity.tolerance(metric, row, c) for c in centroids)
                assert scores[choice] >= max(scores) - 2 * worst - 1e-9


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    scores=st.lists(st.sampled_from([0.0, -1.0, 1.5, 2.0]) | st.floats(-10, 10), max_size=80),
    keyed=st.booleans(),
    k=st.integers(0, 90),
)
def test_vector_top(backends: list[Backend], scores: list[float], keyed: bool, k: int) -> None:
    """vector_top is the same on every backend: the k best by (score desc, key, index)."""
    from array import array

    keys = [int(s * 7) % 5 for s in scores] if keyed else None
    top = _same(backends, "vector_top", array("d", scores), keys, k)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], keys[i] if keys else 0, i))
    assert top == order[:k]


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=vector_sets(), normalize=st.booleans(), data=st.data())
def test_vector_means(
    backends: list[Backend],
    case: tuple[int, list[list[float]], list[list[float]]],
    normalize: bool,
    data: st.DataObject,
) -> None:
    """vector_means agrees on every backend (double sums in the same order, then float32)."""
    from threadloom.core import similarity

    dims, _, rows = case
    k = data.draw(st.integers(1, 6))
    assignment = data.draw(st.lists(st.integers(0, k - 1), min_size=len(rows), max_size=len(rows)))
    matrix = b"".join(similarity.pack(row) for row in rows)
    means, counts = _same(backends, "vector_means", matrix, assignment, k, dims, normalize)
    assert counts == [assignment.count(c) for c in range(k)]
    assert len(means) == 4 * k * dims


def test_vector_functions_refuse_bad_arguments(backends: list[Backend]) -> None:
    """Unknown metrics, ragged buffers, a query of the wrong length, no centroid, NaN scores
    and assignments past k raise ValueError on every backend."""
    from threadloom.core import similarity

    one = similarity.pack([1.0, 2.0])
    for backend in backends:
        with pytest.raises(ValueError, match="metric"):
            backend.vector_scores(one, one, 2, "dot")
        with pytest.raises(ValueError, match="whole vectors"):
            backend.vector_scores(one, one + b"\0", 2, "l2")
        with pytest.raises(ValueError, match="one vector"):
            backend.vector_scores(one + one, one, 2, "l2")
        with pytest.raises(ValueError, match="centroid"):
            backend.vector_nearest(one, b"", 2, "l2")
        with pytest.raises(ValueError, match="NaN"):
            backend.vector_top([1.0, math.nan], None, 1)
        with pytest.raises(ValueError):
            backend.vector_means(one, [3], 2, 2, False)
