"""The int8 codes split into two 4-bit planes: a coarse scan over half the bytes, then the
exact int8 bound of the few vectors it keeps (the specification of native/vectors_p.c).

Layer: core (no I/O). A code c of `similarity.quantize` (-127..127) is c = 16 (h - 8) + l
with the nibbles h = (c + 128) >> 4 and l = (c + 128) & 15. `planes` stores each vector's
h and l in two planes of `half(dims)` bytes: byte e holds dim 2e in its low nibble and dim
2e + 1 in its high one (0 past the last dim). With the query's codes Q:

- `coarse_bounds` reads the high plane only: Q.c = 16 (Q.h - 8 sum Q) + 7.5 sum Q +
  Q.(l - 7.5), and Q.(l - 7.5) <= |Q| |l - 7.5| (the vector's `spread`), so the dot it
  puts into `similarity.bounds`'s formula is at least the codes' dot: each coarse bound is
  at least the int8 bound of the same vector, so at least its exact score;
- `refine` computes, for the vectors whose coarse bound is in [at_least, below), the int8
  bound itself from the high nibbles' dot (`coarse_bounds` returns it) and the low plane
  (equal bit for bit to `similarity.bounds`) and a lower bound by the same error terms
  (what a search uses to know it refined enough);
- `tight_bounds` is `coarse_bounds` with the low nibbles' top bits t = l >> 3 (`tops`: a
  bit per dim, bit-sliced) read as well: with m = l & 7, Q.l = 8 Q.t + 3.5 sum Q +
  Q.(m - 3.5) <= 8 Q.t + 3.5 sum Q + |Q| |m - 3.5| (`tight`), half the slack (on uniform
  data a tenth as many vectors then reach the top's least score and need the low plane),
  for a third more bytes streamed (at 384 dims: 192 + 64 bytes of planes and top bits
  a vector instead of 192).

Every double is computed in the C core's order, so both backends agree bit for bit.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import MutableSequence, Sequence

from threadloom.core.similarity import (
    BOUND_SLACK,
    COSINE_TINY,
    FLOAT32_TINY,
    PARAMS,
    Buffer,
    Metric,
    _bound,
    check_metric,
)

__all__ = [
    "UP",
    "above",
    "coarse_bounds",
    "half",
    "planes",
    "refine",
    "refine_tight",
    "split",
    "tight_bounds",
    "tops",
    "vectors_in",
]

#: 1 + 2**-40: the coarse dot's Cauchy-Schwarz term is rounded up by it (it covers the
#: rounding of the two square roots and their product, so the bound stays sound).
UP = 1.0 + 2.0**-40


def half(dims: int) -> int:
    """Bytes of one vector in one plane: ceil(dims / 2)."""
    return (dims + 1) // 2


def planes(codes: Buffer, dims: int) -> tuple[bytes, bytes, array[float]]:
    """Return (high, low, spread) of int8 codes: the two planes and, per vector,
    |l - 7.5| = sqrt(sum (2 l - 15)^2) / 2 over its `dims` low nibbles.

    Raises:
        ValueError: codes that are not whole vectors of `dims`.
    """
    raw = bytes(codes)
    if dims < 1 or len(raw) % dims:
        raise ValueError(f"codes do not hold whole vectors of {dims} codes")
    high, low = bytearray(), bytearray()
    spread = array("d")
    for start in range(0, len(raw), dims):
        shifted = [(c + 128) & 0xFF for c in raw[start : start + dims]]
        hs = [u >> 4 for u in shifted] + [0] * (dims & 1)
        ls = [u & 15 for u in shifted] + [0] * (dims & 1)
        high.extend(hs[e] | hs[e + 1] << 4 for e in range(0, len(hs), 2))
        low.extend(ls[e] | ls[e + 1] << 4 for e in range(0, len(ls), 2))
        spread.append(0.5 * math.sqrt(sum((2 * u - 15) ** 2 for u in ls[:dims])))
    return bytes(high), bytes(low), spread


def top_bytes(dims: int) -> int:
    """Bytes of one vector's top bits (`tops`): 32 per 256 dims, rounded up."""
    return 32 * ((half(dims) + 127) // 128)


def tops(codes: Buffer, dims: int) -> tuple[bytes, array[float]]:
    """Return (tops, tight) of int8 codes: per vector its low nibbles' top bits
    t = ((c + 128) >> 3) & 1 in `top_bytes(dims)` bytes (row 2s: the even dims of plane
    bytes 32s..32s + 31, row 2s + 1: their odd dims; row r is bit r % 8 of byte e % 32 of
    block r // 8) and |m - 3.5| = sqrt(sum (2 m - 7)^2) / 2 over its m = (c + 128) & 7.

    Raises:
        ValueError: codes that are not whole vectors of `dims`.
    """
    raw = bytes(codes)
    if dims < 1 or len(raw) % dims:
        raise ValueError(f"codes do not hold whole vectors of {dims} codes")
    bits = bytearray()
    tight = array("d")
    for start in range(0, len(raw), dims):
        block = bytearray(top_bytes(dims))
        total = 0
        for j, c in enumerate(raw[start : start + dims]):
            u = (c + 128) & 0xFF
            e, row = j // 2, 2 * (j // 64) + (j & 1)
            block[32 * (row // 8) + e % 32] |= (u >> 3 & 1) << row % 8
            total += (2 * (u & 7) - 7) ** 2
        bits.extend(block)
        tight.append(0.5 * math.sqrt(total))
    return bytes(bits), tight


def tight_bounds(
    query_split: Buffer,
    query_params: Sequence[float],
    high: Buffer,
    top_bits: Buffer,
    params: Sequence[float],
    tight: Sequence[float],
    dims: int,
    metric: str,
) -> tuple[array[float], array[int]]:
    """`coarse_bounds`, tighter: raw = Q.(2 h + t) from the high plane and the top bits
    (`tops`), the codes' dot bounded by 8 raw - 128 sum Q + 3.5 sum Q + |Q| tight, at
    least `similarity.bounds` (`refine_tight` refines from this raw).

    Raises:
        ValueError: an unknown metric, or buffers of different vector counts.
    """
    checked = check_metric(metric)
    count = vectors_in(query_split, query_params, high, params, dims)
    stride = top_bytes(dims)
    if len(tight) != count or len(top_bits) != count * stride:
        raise ValueError(f"top bits or their spreads do not hold {count} vectors")
    even, odd, total, norm = _query(query_split, dims)
    qs, qn, qr = query_params
    tiny = dims * FLOAT32_TINY
    width = half(dims)
    plane, bits = bytes(high), bytes(top_bits)
    out, raws = array("d"), array("q")
    for i in range(count):
        vs, vn, vr = params[PARAMS * i : PARAMS * i + PARAMS]
        raw = 2 * _nibble_dot(plane, width * i, even, odd)
        for e in range(width):
            at, row = stride * i + 32 * (e // 128) + e % 32, 2 * (e // 32) % 8
            raw += (bits[at] >> row & 1) * even[e] + (bits[at] >> (row + 1) & 1) * odd[e]
        raws.append(raw)
        dot = float(8 * raw - 128 * total) + 3.5 * total + (norm * tight[i]) * UP
        approx = (qs * vs) * dot
        high_sum = approx + (qr * vn + (qn + qr) * vr + BOUND_SLACK * (qn * vn) + tiny)
        out.append(_bound(checked, high_sum, qn, vn, tiny))
    return out, raws


def split(query_codes: Buffer, dims: int) -> bytes:
    """The query's codes of even dims, then of odd dims (0 after them when `dims` is odd):
    the order the planes' nibbles meet them in."""
    raw = bytes(query_codes)
    if dims < 1 or len(raw) != dims:
        raise ValueError(f"the query needs {dims} codes, not {len(raw)}")
    return raw[0::2] + raw[1::2] + b"\0" * (dims & 1)


def coarse_bounds(
    query_split: Buffer,
    query_params: Sequence[float],
    high: Buffer,
    params: Sequence[float],
    spread: Sequence[float],
    dims: int,
    metric: str,
) -> tuple[array[float], array[int]]:
    """Return (bounds, raw): an upper bound of each vector's exact score from its high
    plane, at least `similarity.bounds` of its codes (see the module's docstring), and
    the integer dot product of its high nibbles with the query's codes.

    Raises:
        ValueError: an unknown metric, or buffers of different vector counts.
    """
    checked = check_metric(metric)
    count = vectors_in(query_split, query_params, high, params, dims)
    if len(spread) != count:
        raise ValueError(f"{len(spread)} spreads for {count} vectors")
    even, odd, total, norm = _query(query_split, dims)
    qs, qn, qr = query_params
    tiny = dims * FLOAT32_TINY
    width = half(dims)
    plane = bytes(high)
    out, raws = array("d"), array("q")
    for i in range(count):
        vs, vn, vr = params[PARAMS * i : PARAMS * i + PARAMS]
        raw = _nibble_dot(plane, width * i, even, odd)
        raws.append(raw)
        dot = float(16 * raw - 128 * total) + 7.5 * total + (norm * spread[i]) * UP
        approx = (qs * vs) * dot
        high_sum = approx + (qr * vn + (qn + qr) * vr + BOUND_SLACK * (qn * vn) + tiny)
        out.append(_bound(checked, high_sum, qn, vn, tiny))
    return out, raws


def refine_tight(
    query_split: Buffer,
    query_params: Sequence[float],
    raw: Sequence[int],
    low: Buffer,
    params: Sequence[float],
    dims: int,
    metric: str,
    at_least: float,
    below: float,
    coarse: Sequence[float],
    bounds: MutableSequence[float],
    lows: MutableSequence[float],
) -> int:
    """`refine` from `tight_bounds`' raw = Q.(2 h + t): the codes' dot is
    8 raw - 128 sum Q + Q.m, m = l & 7 from the low plane (the same bounds bit for bit)."""
    return refine(query_split, query_params, raw, low, params, dims, metric, at_least, below,
                  coarse, bounds, lows, tight=True)  # fmt: skip


def refine(
    query_split: Buffer,
    query_params: Sequence[float],
    raw: Sequence[int],
    low: Buffer,
    params: Sequence[float],
    dims: int,
    metric: str,
    at_least: float,
    below: float,
    coarse: Sequence[float],
    bounds: MutableSequence[float],
    lows: MutableSequence[float],
    *,
    tight: bool = False,
) -> int:
    """For each vector i whose coarse[i] is in [at_least, below): bounds[i] = its int8
    bound (`similarity.bounds`), from raw[i] (`coarse_bounds`) and its low plane, and
    lows[i] = a lower bound of its exact score; nothing changes for the others (below
    at_least: not refined; at or above `below`: refined before). Returns how many
    vectors it refined have a bound of at least `at_least`.

    Raises:
        ValueError: an unknown metric, or buffers of different vector counts.
    """
    checked = check_metric(metric)
    count = vectors_in(query_split, query_params, low, params, dims)
    if len(raw) != count or len(coarse) != count or len(bounds) != count:
        raise ValueError(f"the low plane, raw, coarse bounds and bounds of {count} vectors differ")
    if len(lows) != count:
        raise ValueError(f"{len(lows)} lower bounds for {count} vectors")
    even, odd, total, _ = _query(query_split, dims)
    qs, qn, qr = query_params
    tiny = dims * FLOAT32_TINY
    width = half(dims)
    lowp = bytes(low)
    reaching = 0
    for i in range(count):
        if coarse[i] >= below:
            continue
        if not coarse[i] >= at_least:
            continue
        vs, vn, vr = params[PARAMS * i : PARAMS * i + PARAMS]
        low_dot = _nibble_dot(lowp, width * i, even, odd, 7 if tight else 15)
        dot = (8 if tight else 16) * raw[i] - 128 * total + low_dot
        approx = (qs * vs) * float(dot)
        error = qr * vn + (qn + qr) * vr + BOUND_SLACK * (qn * vn) + tiny
        bounds[i] = _bound(checked, approx + error, qn, vn, tiny)
        lows[i] = _low(checked, approx - error, qn, vn, tiny)
        reaching += bounds[i] >= at_least
    return reaching


def above(values: Sequence[float], at_least: float, cap: int) -> tuple[list[int], int]:
    """The first `cap` indices i (ascending) with values[i] >= at_least, and how many such
    indices there are in all."""
    found = [i for i, value in enumerate(values) if value >= at_least]
    return found[: max(cap, 0)], len(found)


def _low(metric: Metric, low: float, qn: float, vn: float, tiny: float) -> float:
    if metric == "inner_product":
        return low
    if metric == "cosine":
        if qn < COSINE_TINY or vn < COSINE_TINY:
            return -1.0
        return low / (qn * vn) - BOUND_SLACK
    squared = qn * qn + vn * vn - 2.0 * low
    return -math.sqrt(max(squared, 0.0)) - (BOUND_SLACK * (qn + vn) + math.sqrt(tiny))


def vectors_in(
    query_split: Buffer,
    query_params: Sequence[float],
    high: Buffer,
    params: Sequence[float],
    dims: int,
) -> int:
    """How many vectors a plane holds, its arguments checked as every backend checks them
    (ValueError: planes, params or a query that do not fit `dims`)."""
    width = half(dims) if dims > 0 else 1
    count = len(high) // width
    if dims < 1 or len(query_split) != 2 * width or len(high) != count * width:
        raise ValueError(f"planes do not hold whole vectors of {dims} codes")
    if len(params) != PARAMS * count:
        raise ValueError(f"{len(params)} params for {count} vectors")
    if len(query_params) != PARAMS:
        raise ValueError(f"the query needs {PARAMS} params, not {len(query_params)}")
    return count


def _query(query_split: Buffer, dims: int) -> tuple[list[int], list[int], int, float]:
    """(even codes, odd codes, sum Q, |Q|) of a split query."""
    codes = [c - 256 if c > 127 else c for c in bytes(query_split)]
    width = half(dims)
    return (
        codes[:width],
        codes[width:],
        sum(codes),
        math.sqrt(float(sum(c * c for c in codes))),
    )


def _nibble_dot(plane: bytes, start: int, even: list[int], odd: list[int], mask: int = 15) -> int:
    total = 0
    for e, byte in enumerate(plane[start : start + len(even)]):
        total += (byte & mask) * even[e] + (byte >> 4 & mask) * odd[e]
    return total
