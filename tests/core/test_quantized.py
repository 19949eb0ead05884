"""The quantized scan's kernels: C core and Python specification agree bit for bit.

`vector_quantize` and `vector_bounds` (core/similarity.py, native/vectors_q.c) run through
`python`, `native` and `native-portable`; every result must be equal, and every bound must
be at least the exact kernel's score (what makes the scan of engine/items/scan.py exact).
"""

from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.conftest import require_native
from threadloom.core import _python, similarity

METRICS = ["cosine", "l2", "inner_product"]
DIMS = [1, 2, 7, 31, 32, 33, 63, 64, 65, 384]

Kernels = tuple[str, Callable[..., Any], Callable[..., Any], Callable[..., Any]]


@pytest.fixture(scope="module")
def kernels() -> list[Kernels]:
    """(name, quantize, bounds, scores) of python, native and native-portable."""
    native = require_native()
    full, portable = native.NativeCore(native.FEATURES), native.NativeCore(0)
    return [
        ("python", _python.vector_quantize, _python.vector_bounds, _python.vector_scores),
        ("native", native.vector_quantize, full.vector_bounds, full.vector_scores),
        ("native-portable", native.vector_quantize, portable.vector_bounds, portable.vector_scores),
    ]


scales = st.sampled_from([1.0, 1e-3, 100.0, 1e-20])


@st.composite
def cases(draw: st.DrawFn) -> tuple[int, list[list[float]], list[float]]:
    dims = draw(st.sampled_from(DIMS))
    count = draw(st.integers(0, 12))
    rng = random.Random(draw(st.integers(0, 2**32)))
    rows = []
    for _ in range(count):
        kind = draw(st.sampled_from(["gauss", "zero", "constant", "spike"]))
        scale = draw(scales)
        if kind == "zero":
            rows.append([0.0] * dims)
        elif kind == "constant":
            rows.append([-scale] * dims)
        elif kind == "spike":
            rows.append([scale if i == 0 else rng.gauss(0, 1e-3) for i in range(dims)])
        else:
            rows.append([rng.gauss(0, scale) for _ in range(dims)])
    query = draw(st.sampled_from([*rows, [rng.gauss(0, 1) for _ in range(dims)]]))
    return dims, rows, query


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases(), metric=st.sampled_from(METRICS))
def test_quantize_and_bounds_agree_and_bound_the_exact_score(
    kernels: list[Kernels], case: tuple[int, list[list[float]], list[float]], metric: str
) -> None:
    """Every backend quantizes and bounds identically, and no exact score exceeds its bound."""
    dims, rows, query = case
    matrix = b"".join(similarity.pack(row) for row in rows)
    blob = similarity.pack(query)
    results = []
    for name, quantize, bounds, scores in kernels:
        codes, params = quantize(matrix, dims)
        query_codes, query_params = quantize(blob, dims)
        found = bounds(query_codes, query_params, codes, params, dims, metric)
        results.append((codes, list(params), list(found)))
        for score, bound in zip(scores(blob, matrix, dims, metric), found, strict=True):
            assert score <= bound, (name, metric, score, bound)
    for name, result in zip([k[0] for k in kernels[1:]], results[1:], strict=True):
        assert result == results[0], f"{name} disagrees with python"


def test_codes_round_to_nearest_and_keep_the_residual() -> None:
    """A vector's codes are floor(v * 127 / max|v| + 0.5), its params scale, norm, residual."""
    codes, params = _python.vector_quantize(similarity.pack([1.0, -0.5, 0.25, 0.0]), 4)
    assert list(codes) == [127, (-63) & 0xFF, 32, 0]  # halves round up
    scale, norm, residual = params
    assert scale == 1.0 / 127
    assert norm == pytest.approx((1 + 0.25 + 0.0625) ** 0.5)
    assert residual == pytest.approx(((-0.5 + 63 / 127) ** 2 + (0.25 - 32 / 127) ** 2) ** 0.5)


def test_bad_buffers_are_refused(kernels: list[Kernels]) -> None:
    """Ragged codes, short params or an unknown metric raise ValueError in every backend."""
    one = similarity.pack([1.0, 2.0])
    for _, quantize, bounds, _ in kernels:
        codes, params = quantize(one, 2)
        with pytest.raises(ValueError):
            quantize(one + b"\0", 2)
        with pytest.raises(ValueError):
            bounds(codes, params, codes + b"\0", params, 2, "l2")
        with pytest.raises(ValueError):
            bounds(codes, params, codes, list(params)[:2], 2, "l2")
        with pytest.raises(ValueError):
            bounds(codes, params, codes, params, 2, "dot")


def _chunk_body(quantize: Callable[..., Any], rows: list[list[float]], first: int) -> bytes:
    """A `store_codes` body of `rows` (ids from `first`, items 1000 + id), as the Store
    writes it (little-endian)."""
    dims = len(rows[0])
    codes, params = quantize(b"".join(similarity.pack(row) for row in rows), dims)
    ids = array("q", range(first, first + len(rows)))
    items = array("q", (1000 + i for i in ids))
    params = array("d", params)
    if sys.byteorder == "big":  # pragma: no cover - no big-endian CI
        for part in (ids, items, params):
            part.byteswap()
    return ids.tobytes() + items.tobytes() + params.tobytes() + codes


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    dims=st.sampled_from(DIMS),
    counts=st.lists(st.integers(1, 9), min_size=0, max_size=5),
    metric=st.sampled_from(METRICS),
    seed=st.integers(0, 2**32),
)
def test_chunk_bounds_equal_the_bounds_of_each_chunk(
    kernels: list[Kernels], dims: int, counts: list[int], metric: str, seed: int
) -> None:
    """Bounding chunk bodies back to back in one call gives each vector's item and the very
    bound `vector_bounds` gives it chunk by chunk, in every backend."""
    native = require_native()
    rng = random.Random(seed)
    chunk_bounds = [
        _python.vector_chunk_bounds,
        native.NativeCore(native.FEATURES).vector_chunk_bounds,
        native.NativeCore(0).vector_chunk_bounds,
    ]
    query = [rng.gauss(0, 1) for _ in range(dims)]
    query_codes, query_params = _python.vector_quantize(similarity.pack(query), dims)
    bodies, items, expected = [], [], []
    for at, count in enumerate(counts):
        rows = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(count)]
        bodies.append(_chunk_body(_python.vector_quantize, rows, 100 * at))
        codes, params = _python.vector_quantize(b"".join(similarity.pack(r) for r in rows), dims)
        expected += _python.vector_bounds(query_codes, query_params, codes, params, dims, metric)
        items += [1000 + 100 * at + i for i in range(count)]
    for kernel in chunk_bounds:
        got_items, got = kernel(query_codes, query_params, b"".join(bodies), counts, dims, metric)
        assert (list(got_items), list(got)) == (items, expected)


def test_chunk_bounds_refuse_bodies_that_do_not_fill_the_buffer() -> None:
    """A count that does not match the bytes, a zero count or an unknown metric raise
    ValueError in every backend, and the C core reads nothing past the buffer."""
    native = require_native()
    body = _chunk_body(_python.vector_quantize, [[1.0, 2.0], [0.5, -1.0]], 0)
    query_codes, query_params = _python.vector_quantize(similarity.pack([1.0, 0.0]), 2)
    for kernel in (_python.vector_chunk_bounds, native.vector_chunk_bounds):
        for chunks, counts, metric in [
            (body, [3], "l2"),
            (body[:-1], [2], "l2"),
            (body + body, [2, 1], "l2"),
            (body + body, [2, 2, 0], "l2"),
            (body, [2], "dot"),
        ]:
            with pytest.raises(ValueError):
                kernel(query_codes, query_params, chunks, counts, 2, metric)
