"""The 4-bit planes of the exact scan in the C core (native/vectors_p.c): the same
functions as `core.planes`, equal to them bit for bit, checked the same way.

Layer: core. Imported only when the native backend is (`core.__init__`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from threadloom._native import ffi, lib
from threadloom.core._native import _METRICS, FEATURES, _check, _doubles
from threadloom.core.planes import half, split, top_bytes, vectors_in
from threadloom.core.similarity import Buffer, check_metric

__all__ = [
    "NativePlanes",
    "above",
    "coarse_bounds",
    "half",
    "planes",
    "refine",
    "refine_tight",
    "split",
    "tight_bounds",
    "tops",
]


def planes(codes: Buffer, dims: int) -> tuple[bytes, bytes, array[float]]:
    """Return (high, low, spread) of int8 codes (see core.planes.planes)."""
    if dims < 1 or len(codes) % dims:
        raise ValueError(f"codes do not hold whole vectors of {dims} codes")
    count = len(codes) // dims
    high, low = bytearray(count * half(dims)), bytearray(count * half(dims))
    spread = array("d", bytes(8 * count))
    rc = lib.tl_vector_planes(
        ffi.from_buffer("int8_t[]", codes),
        count,
        dims,
        ffi.from_buffer("uint8_t[]", high, require_writable=True),
        ffi.from_buffer("uint8_t[]", low, require_writable=True),
        ffi.from_buffer("double[]", spread, require_writable=True),
    )
    _check(rc, "tl_vector_planes")
    return bytes(high), bytes(low), spread


def tops(codes: Buffer, dims: int) -> tuple[bytes, array[float]]:
    """Return (tops, tight) of int8 codes (see core.planes.tops)."""
    if dims < 1 or len(codes) % dims:
        raise ValueError(f"codes do not hold whole vectors of {dims} codes")
    count = len(codes) // dims
    bits = bytearray(count * top_bytes(dims))
    tight = array("d", bytes(8 * count))
    rc = lib.tl_vector_tops(
        ffi.from_buffer("int8_t[]", codes),
        count,
        dims,
        ffi.from_buffer("uint8_t[]", bits, require_writable=True),
        ffi.from_buffer("double[]", tight, require_writable=True),
    )
    _check(rc, "tl_vector_tops")
    return bytes(bits), tight


def above(values: Sequence[float], at_least: float, cap: int) -> tuple[list[int], int]:
    """The first `cap` indices with values at least `at_least`, and how many there are
    (see core.planes.above)."""
    cap = max(cap, 0)
    out = ffi.new("uint64_t[]", max(cap, 1))
    count = len(values)
    rc = lib.tl_vector_above(
        ffi.from_buffer("double[]", _doubles(values)), count, at_least, out, cap
    )
    found = _check(rc, "tl_vector_above")
    return ffi.unpack(out, min(found, cap)), found


class NativePlanes:
    """`coarse_bounds` and `refine` bound to a set of hardware paths (FEATURES or 0)."""

    def __init__(self, features: int) -> None:
        if features & ~FEATURES:
            raise ValueError(f"features {features:#x} include hardware this CPU lacks")
        self.features = features

    def coarse_bounds(
        self,
        query_split: Buffer,
        query_params: Sequence[float],
        high: Buffer,
        params: Sequence[float],
        spread: Sequence[float],
        dims: int,
        metric: str,
    ) -> tuple[array[float], array[int]]:
        """Return (bounds, raw): upper bounds of the scores (see core.planes.coarse_bounds)."""
        count = vectors_in(query_split, query_params, high, params, dims)
        if len(spread) != count:
            raise ValueError(f"{len(spread)} spreads for {count} vectors")
        vectors = (
            ffi.from_buffer("uint8_t[]", high),
            ffi.from_buffer("double[]", _doubles(params)),
            ffi.from_buffer("double[]", _doubles(spread)),
        )
        return self._bounds("tl_vector_coarse_bounds", query_split, query_params, vectors,
                            count, dims, metric)  # fmt: skip

    def refine_tight(
        self,
        query_split: Buffer,
        query_params: Sequence[float],
        raw: array[int] | memoryview,
        low: Buffer,
        params: Sequence[float],
        dims: int,
        metric: str,
        at_least: float,
        below: float,
        coarse: Sequence[float],
        bounds: array[float] | memoryview,
        lows: array[float] | memoryview,
    ) -> int:
        """`refine` from `tight_bounds`' raw (see core.planes.refine_tight)."""
        return self.refine(query_split, query_params, raw, low, params, dims, metric,
                           at_least, below, coarse, bounds, lows, tight=True)  # fmt: skip

    def refine(
        self,
        query_split: Buffer,
        query_params: Sequence[float],
        raw: array[int] | memoryview,
        low: Buffer,
        params: Sequence[float],
        dims: int,
        metric: str,
        at_least: float,
        below: float,
        coarse: Sequence[float],
        bounds: array[float] | memoryview,
        lows: array[float] | memoryview,
        *,
        tight: bool = False,
    ) -> int:
        """Refine the bounds of the vectors whose coarse bound is in [at_least, below);
        return how many have a bound of at least `at_least` (see core.planes.refine)."""
        code = _METRICS[check_metric(metric)]
        count = vectors_in(query_split, query_params, low, params, dims)
        if len(raw) != count or len(coarse) != count or len(bounds) != count:
            raise ValueError(
                f"the low plane, raw, coarse bounds and bounds of {count} vectors differ"
            )
        if len(lows) != count:
            raise ValueError(f"{len(lows)} lower bounds for {count} vectors")
        kernel = lib.tl_vector_refine_tight if tight else lib.tl_vector_refine
        rc = kernel(
            ffi.from_buffer("int8_t[]", query_split),
            ffi.from_buffer("double[]", _doubles(query_params)),
            ffi.from_buffer("int64_t[]", raw),
            ffi.from_buffer("uint8_t[]", low),
            ffi.from_buffer("double[]", _doubles(params)),
            count,
            dims,
            code,
            self.features,
            at_least,
            below,
            ffi.from_buffer("double[]", _doubles(coarse)),
            ffi.from_buffer("double[]", bounds, require_writable=True),
            ffi.from_buffer("double[]", lows, require_writable=True),
        )
        return _check(rc, "tl_vector_refine")

    def tight_bounds(
        self,
        query_split: Buffer,
        query_params: Sequence[float],
        high: Buffer,
        top_bits: Buffer,
        params: Sequence[float],
        tight: Sequence[float],
        dims: int,
        metric: str,
    ) -> tuple[array[float], array[int]]:
        """Return (bounds, raw): tighter coarse bounds from the high plane and the top bits
        (see core.planes.tight_bounds)."""
        count = vectors_in(query_split, query_params, high, params, dims)
        if len(tight) != count or len(top_bits) != count * top_bytes(dims):
            raise ValueError(f"top bits or their spreads do not hold {count} vectors")
        vectors = (
            ffi.from_buffer("uint8_t[]", high),
            ffi.from_buffer("uint8_t[]", top_bits),
            ffi.from_buffer("double[]", _doubles(params)),
            ffi.from_buffer("double[]", _doubles(tight)),
        )
        return self._bounds("tl_vector_tight_bounds", query_split, query_params, vectors,
                            count, dims, metric)  # fmt: skip

    def _bounds(
        self,
        kernel: str,
        query_split: Buffer,
        query_params: Sequence[float],
        vectors: tuple[Any, ...],
        count: int,
        dims: int,
        metric: str,
    ) -> tuple[array[float], array[int]]:
        """Run a bounds kernel (coarse or tight) over `count` vectors' buffers."""
        code = _METRICS[check_metric(metric)]
        out, raw = array("d", _ZERO) * count, array("q", _NONE) * count
        rc = getattr(lib, kernel)(
            ffi.from_buffer("int8_t[]", query_split),
            ffi.from_buffer("double[]", _doubles(query_params)),
            *vectors,
            count,
            dims,
            code,
            self.features,
            ffi.from_buffer("double[]", out, require_writable=True),
            ffi.from_buffer("int64_t[]", raw, require_writable=True),
        )
        _check(rc, kernel)
        return out, raw


_ZERO, _NONE = array("d", [0.0]), array("q", [0])
_DEFAULT = NativePlanes(FEATURES)
coarse_bounds = _DEFAULT.coarse_bounds
refine = _DEFAULT.refine
tight_bounds = _DEFAULT.tight_bounds
refine_tight = _DEFAULT.refine_tight
