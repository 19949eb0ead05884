"""The 4-bit planes of the exact scan: C core and Python specification agree bit for bit.

`vector_planes`, `vector_coarse_bounds` and `vector_refine` (core/planes.py,
native/vectors_p.c) run through `python`, `native` and `native-portable`; every result
must be equal, every coarse bound at least the int8 bound (`similarity.bounds`), every
refined bound equal to it, and the exact score between the lower and the upper bound.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.conftest import require_native
from tests.core.test_quantized import METRICS, cases
from threadloom.core import planes as spec
from threadloom.core import similarity

Kernels = tuple[str, Callable[..., Any], Callable[..., Any], Callable[..., Any]]


@pytest.fixture(scope="module")
def kernels() -> list[Kernels]:
    """(name, planes, coarse_bounds, refine) of python, native and native-portable."""
    require_native()
    from threadloom.core import _native, _native_planes

    full = _native_planes.NativePlanes(_native.FEATURES)
    portable = _native_planes.NativePlanes(0)
    return [
        ("python", spec.planes, spec.coarse_bounds, spec.refine),
        ("native", _native_planes.planes, full.coarse_bounds, full.refine),
        ("native-portable", _native_planes.planes, portable.coarse_bounds, portable.refine),
    ]


def _run(kernel: Kernels, rows: list[list[float]], query: list[float], dims: int, metric: str):  # type: ignore[no-untyped-def]
    _, planes, coarse_bounds, refine = kernel
    codes, params = similarity.quantize(b"".join(similarity.pack(row) for row in rows), dims)
    query_codes, query_params = similarity.quantize(similarity.pack(query), dims)
    high, low, spread = planes(codes, dims)
    split = spec.split(query_codes, dims)
    coarse, raw = coarse_bounds(split, query_params, high, params, spread, dims, metric)
    bounds = array("d", coarse)
    lows = array("d", [7.0] * len(rows))
    refine(split, query_params, raw, low, params, dims, metric, -math.inf, math.inf,
           coarse, bounds, lows)  # fmt: skip
    int8 = similarity.bounds(query_codes, query_params, codes, params, dims, metric)
    return (high, low, list(spread), list(coarse), list(raw), list(bounds), list(lows)), int8


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases(), metric=st.sampled_from(METRICS))
def test_planes_bound_like_the_int8_codes_in_every_backend(
    kernels: list[Kernels], case: tuple[int, list[list[float]], list[float]], metric: str
) -> None:
    """Coarse >= int8 bound == refined bound >= exact score >= lower bound, bit for bit
    the same in every backend (zero, constant and spiky vectors, tiny and huge scales)."""
    dims, rows, query = case
    matrix = b"".join(similarity.pack(row) for row in rows)
    exact = similarity.vector_scores(similarity.pack(query), matrix, dims, metric)
    results = []
    for kernel in kernels:
        found, int8 = _run(kernel, rows, query, dims, metric)
        _, _, _, coarse, _, bounds, lows = found
        assert bounds == list(int8), kernel[0]
        for i, score in enumerate(exact):
            assert coarse[i] >= bounds[i], (kernel[0], metric, i)
            assert lows[i] <= score <= bounds[i], (kernel[0], metric, i, lows[i], score)
        results.append(found)
    for kernel, found in zip(kernels[1:], results[1:], strict=True):
        assert found == results[0], f"{kernel[0]} disagrees with python"


def test_the_planes_hold_the_codes() -> None:
    """16 (h - 8) + l gives back every code; the unused nibble of an odd dims is 0."""
    values = [[1.0, -1.0, 0.5, -0.25, 0.0], [0.0] * 5, [-3.0] * 5]
    codes, _ = similarity.quantize(b"".join(similarity.pack(row) for row in values), 5)
    high, low, spread = spec.planes(codes, 5)
    for i in range(3):
        for j in range(5):
            shift = 4 * (j & 1)
            h = high[3 * i + j // 2] >> shift & 15
            lo = low[3 * i + j // 2] >> shift & 15
            assert 16 * (h - 8) + lo == array("b", codes)[5 * i + j]
        assert high[3 * i + 2] >> 4 == 0 and low[3 * i + 2] >> 4 == 0
    assert spread[1] == 0.5 * math.sqrt(5 * 15**2)  # zero codes: l = 0 in every dim


def test_refine_touches_only_its_range(kernels: list[Kernels]) -> None:
    """Below `at_least` (not refined) and at or above `below` (refined by an earlier
    call) nothing is written."""
    rows = [[float((i * 7 + j) % 5 - 2) for j in range(9)] for i in range(6)]
    query = [0.5] * 9
    for _, planes, coarse_bounds, refine in kernels:
        codes, params = similarity.quantize(b"".join(similarity.pack(r) for r in rows), 9)
        query_codes, query_params = similarity.quantize(similarity.pack(query), 9)
        high, low, spread = planes(codes, 9)
        split = spec.split(query_codes, 9)
        coarse, raw = coarse_bounds(split, query_params, high, params, spread, 9, "cosine")
        ranked = sorted(coarse)
        at_least, below = ranked[2], ranked[4]
        bounds, lows = array("d", [9.0] * 6), array("d", [5.0] * 6)
        refine(split, query_params, raw, low, params, 9, "cosine", at_least, below,
               coarse, bounds, lows)  # fmt: skip
        for i, bound in enumerate(coarse):
            if bound >= below:
                assert (bounds[i], lows[i]) == (9.0, 5.0)
            elif bound >= at_least:
                assert bounds[i] < 9.0 and lows[i] < 5.0
            else:
                assert (bounds[i], lows[i]) == (9.0, 5.0)


def test_bad_buffers_are_refused(kernels: list[Kernels]) -> None:
    """Ragged codes or planes, short params or spreads, an unknown metric: ValueError."""
    codes, params = similarity.quantize(similarity.pack([1.0, 2.0, 3.0]), 3)
    for _, planes, coarse_bounds, refine in kernels:
        high, low, spread = planes(codes, 3)
        split = spec.split(codes, 3)
        with pytest.raises(ValueError):
            planes(codes + b"\0", 3)
        with pytest.raises(ValueError):
            coarse_bounds(split, params, high + b"\0", params, spread, 3, "l2")
        with pytest.raises(ValueError):
            coarse_bounds(split, params, high, params, [], 3, "l2")
        with pytest.raises(ValueError):
            coarse_bounds(split, params, high, params, spread, 3, "dot")
        with pytest.raises(ValueError):
            refine(split, params, array("q", [0, 0]), low, params, 3, "l2", 0.0, 1.0,
                   [0.0], array("d", [0.0]), array("d", [0.0]))  # fmt: skip


def test_above_lists_the_indices_at_least_a_value() -> None:
    """`above` gives the first `cap` indices at or over the value (NaN never) and the
    count of all of them, the same in every backend."""
    require_native()
    from threadloom.core import _native_planes

    values = [0.5, float("nan"), 2.0, 0.5, -1.0, float("inf"), 0.25]
    for above in (spec.above, _native_planes.above):
        assert above(values, 0.5, 10) == ([0, 2, 3, 5], 4)
        assert above(values, 0.5, 2) == ([0, 2], 4)
        assert above(values, -math.inf, 0) == ([], 6)
        assert above([], 0.0, 3) == ([], 0)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases(), metric=st.sampled_from(METRICS))
def test_the_top_bits_bound_between_the_coarse_and_the_int8_bound(
    kernels: list[Kernels], case: tuple[int, list[list[float]], list[float]], metric: str
) -> None:
    """A tight bound (high plane and top bits) is at least the int8 bound, so at least the
    exact score, and refining from its raw gives the int8 bound itself; bit for bit the
    same top bits, bounds, raw and lower bounds in every backend."""
    require_native()
    from threadloom.core import _native, _native_planes

    dims, rows, query = case
    codes, params = similarity.quantize(b"".join(similarity.pack(row) for row in rows), dims)
    query_codes, query_params = similarity.quantize(similarity.pack(query), dims)
    split = spec.split(query_codes, dims)
    high, low, _ = spec.planes(codes, dims)
    int8 = similarity.bounds(query_codes, query_params, codes, params, dims, metric)
    matrix = b"".join(similarity.pack(row) for row in rows)
    exact = similarity.vector_scores(similarity.pack(query), matrix, dims, metric)
    full, portable = (_native_planes.NativePlanes(f) for f in (_native.FEATURES, 0))
    results = []
    for tops, tight_bounds, refine_tight in (
        (spec.tops, spec.tight_bounds, spec.refine_tight),
        (_native_planes.tops, full.tight_bounds, full.refine_tight),
        (_native_planes.tops, portable.tight_bounds, portable.refine_tight),
    ):
        bits, tight = tops(codes, dims)
        bounds, raw = tight_bounds(split, query_params, high, bits, params, tight, dims, metric)
        for i, bound in enumerate(bounds):
            assert bound >= int8[i] and bound >= exact[i], (metric, i, bound, int8[i])
        refined, lows = array("d", bounds), array("d", [7.0] * len(rows))
        refine_tight(split, query_params, raw, low, params, dims, metric, -math.inf, math.inf,
                     bounds, refined, lows)  # fmt: skip
        assert list(refined) == list(int8)
        results.append((bits, list(tight), list(bounds), list(raw), list(lows)))
    assert results[1] == results[0] and results[2] == results[0]


def test_the_top_bits_halve_the_slack_on_uniform_codes() -> None:
    """On random vectors the tight bounds sit closer to the int8 bounds than the coarse
    ones: the gap halves (a test that fails if the top bits were ignored)."""
    rng = random.Random(7)
    dims = 96
    rows = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(40)]
    codes, params = similarity.quantize(b"".join(similarity.pack(row) for row in rows), dims)
    query_codes, query_params = similarity.quantize(
        similarity.pack([rng.gauss(0, 1) for _ in range(dims)]), dims
    )
    split = spec.split(query_codes, dims)
    high, _, spread = spec.planes(codes, dims)
    coarse, _ = spec.coarse_bounds(split, query_params, high, params, spread, dims, "cosine")
    bits, tight = spec.tops(codes, dims)
    tighter, _ = spec.tight_bounds(split, query_params, high, bits, params, tight, dims, "cosine")
    int8 = similarity.bounds(query_codes, query_params, codes, params, dims, "cosine")
    loose = sum(c - b for c, b in zip(coarse, int8, strict=True))
    assert sum(t - b for t, b in zip(tighter, int8, strict=True)) < 0.6 * loose


def test_the_top_bits_are_sliced_by_32_plane_bytes() -> None:
    """Row 2s of a vector's top bits holds plane bytes 32s.. even dims, row 2s + 1 their
    odd dims, 8 rows a block of 32 bytes, the same in every backend (531 dims: 266 plane
    bytes, 9 steps, three blocks, the last one partly used)."""
    require_native()
    from threadloom.core import _native_planes

    dims = 531
    codes, _ = similarity.quantize(
        similarity.pack([float((j * 37) % 23 - 11) for j in range(dims)]), dims
    )
    signed = array("b", codes)
    for tops in (spec.tops, _native_planes.tops):
        bits, tight = tops(codes, dims)
        assert len(bits) == spec.top_bytes(dims) == 96
        for j in range(dims):
            e, row = j // 2, 2 * (j // 64) + (j & 1)
            assert bits[32 * (row // 8) + e % 32] >> (row % 8) & 1 == ((signed[j] + 128) >> 3) & 1
        m = [(c + 128) & 7 for c in signed]
        assert tight[0] == 0.5 * math.sqrt(sum((2 * x - 7) ** 2 for x in m))


def test_above_counts_past_its_blocks_and_its_cap() -> None:
    """Across blocks of 64 values (some with none at or over the value, NaN among them)
    and a cap reached inside a block, `above` lists and counts as the spec does."""
    require_native()
    from threadloom.core import _native_planes

    rng = random.Random(3)
    values = [rng.random() for _ in range(300)]
    values[70], values[200] = float("nan"), float("inf")
    for at_least in (0.0, 0.5, 0.97, 2.0):
        for cap in (0, 1, 5, 64, 400):
            assert _native_planes.above(values, at_least, cap) == spec.above(values, at_least, cap)
