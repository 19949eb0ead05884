"""Vector similarity: the specification of the C core's vector kernels (native/vectors.c).

Layer: core (no I/O). A vector is `dims` float32 values, little-endian, as the Store keeps
them; a matrix is vectors back to back in one buffer. Scores are similarities, higher is
better, as LangGraph's PostgresStore reports them:

- `cosine`: a.b / (|a| |b|), clamped to [-1, 1]; 0 when either vector is zero;
- `l2`: minus the euclidean distance;
- `inner_product`: a.b.

This module sums in double precision, one term at a time; the C core sums in float32
lanes and stays within `tolerance(...)` of it (for cosine: of vectors whose squared norm
is 0 or a normal float32, `FLOAT32_NORMAL`). Its speed matters only for small data.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Sequence
from operator import mul, sub
from typing import Literal

Buffer = bytes | bytearray | memoryview
Metric = Literal["cosine", "l2", "inner_product"]
METRICS: tuple[Metric, ...] = ("cosine", "l2", "inner_product")

__all__ = [
    "METRICS",
    "Metric",
    "check_metric",
    "chunk_bounds",
    "floats",
    "means",
    "nearest",
    "pack",
    "tolerance",
    "top",
    "vector_scores",
]


def check_metric(metric: str) -> Metric:
    """Return `metric` if it is one of METRICS, else raise ValueError."""
    for known in METRICS:
        if metric == known:
            return known
    raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")


def floats(buffer: Buffer, dims: int) -> array[float]:
    """Return the float32 values of a matrix of `dims`-long vectors (ValueError if ragged)."""
    if dims < 1:
        raise ValueError(f"dims must be at least 1, not {dims}")
    if len(buffer) % (4 * dims):
        raise ValueError(
            f"a buffer of {len(buffer)} bytes does not hold whole vectors of {dims} float32"
        )
    values = array("f")
    values.frombytes(buffer)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def pack(values: Sequence[float]) -> bytes:
    """Return `values` as float32 little-endian bytes (rounded to nearest)."""
    packed = array("f", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _rows(values: array[float], dims: int) -> list[array[float]]:
    return [values[start : start + dims] for start in range(0, len(values), dims)]


def _score(metric: Metric, query: array[float], row: array[float], qq: float) -> float:
    if metric == "inner_product":
        return math.fsum(map(mul, query, row))
    if metric == "l2":
        return -math.sqrt(math.fsum(d * d for d in map(sub, query, row)))
    vv = math.fsum(map(mul, row, row))
    if qq <= 0.0 or vv <= 0.0:
        return 0.0
    cosine = math.fsum(map(mul, query, row)) / (math.sqrt(qq) * math.sqrt(vv))
    return max(-1.0, min(1.0, cosine))


def vector_scores(query: Buffer, matrix: Buffer, dims: int, metric: str) -> array[float]:
    """Return the score of `query` against each vector of `matrix` (an array of doubles).

    Raises:
        ValueError: an unknown metric, or buffers that are not whole vectors (the query
            exactly one).
    """
    checked = check_metric(metric)
    q = floats(query, dims)
    if len(q) != dims:
        raise ValueError(f"the query must be one vector of {dims} float32, not {len(q)} values")
    qq = math.fsum(map(mul, q, q))
    return array("d", [_score(checked, q, row, qq) for row in _rows(floats(matrix, dims), dims)])


def nearest(vectors: Buffer, centroids: Buffer, dims: int, metric: str) -> list[int]:
    """Return, for each vector, the index of the centroid scoring best against it.

    The lowest index wins exact ties. (The C core ranks without the terms every centroid
    shares, so where two centroids' scores are within `tolerance` it may choose the other.)

    Raises:
        ValueError: an unknown metric, ragged buffers, or no centroid.
    """
    checked = check_metric(metric)
    rows = _rows(floats(centroids, dims), dims)
    if not rows:
        raise ValueError("nearest needs at least one centroid")
    chosen = []
    for vector in _rows(floats(vectors, dims), dims):
        qq = math.fsum(map(mul, vector, vector))
        scores = [_score(checked, vector, row, qq) for row in rows]
        chosen.append(scores.index(max(scores)))
    return chosen


def top(scores: Sequence[float], keys: Sequence[int] | None, k: int) -> list[int]:
    """Return the indices of the `k` best scores, best first.

    Order: higher score, then lower key (`keys[i]`, when given), then lower index.

    Raises:
        ValueError: a NaN score (it has no rank), or keys of another length.
    """
    if any(score != score for score in scores):
        raise ValueError("a NaN score has no rank")
    if keys is not None and len(keys) != len(scores):
        raise ValueError(f"{len(keys)} keys for {len(scores)} scores")
    order = range(len(scores))
    if keys is None:
        return sorted(order, key=lambda i: (-scores[i], i))[: max(k, 0)]
    return sorted(order, key=lambda i: (-scores[i], keys[i], i))[: max(k, 0)]


def means(
    vectors: Buffer, assignment: Sequence[int], k: int, dims: int, normalize: bool
) -> tuple[bytes, list[int]]:
    """Return (centroids, counts): the float32 mean of the vectors assigned to each of `k`.

    A centroid without vectors is zeros. With `normalize` each mean is scaled to unit
    length (the spherical k-means of cosine similarity); a zero mean stays zero.

    Raises:
        ValueError: an assignment outside 0..k-1, or one per vector missing.
    """
    rows = _rows(floats(vectors, dims), dims)
    if len(assignment) != len(rows) or k < 1:
        raise ValueError(f"{len(assignment)} assignments for {len(rows)} vectors, k={k}")
    sums = [[0.0] * dims for _ in range(k)]
    counts = [0] * k
    for row, cluster in zip(rows, assignment, strict=True):
        if not 0 <= cluster < k:
            raise ValueError(f"assignment {cluster} is not below k={k}")
        total = sums[cluster]
        for d, value in enumerate(row):
            total[d] += value
        counts[cluster] += 1
    out: list[float] = []
    for total, count in zip(sums, counts, strict=True):
        scale = 1.0 / count if count else 0.0
        if normalize and count:
            norm = math.sqrt(sum(value * value for value in total))
            scale = 1.0 / norm if norm > 0.0 else 0.0
        out.extend(value * scale for value in total)
    return pack(out), counts


def tolerance(metric: str, a: Sequence[float], b: Sequence[float]) -> float:
    """How far the C core's score of a against b may be from this module's (threadloom.h)."""
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(x * x for x in b))
    # float32 products below its smallest subnormal are 0 in the core: an absolute floor
    # (a difference under ~1e-22 squares to nothing, a product under 2**-149 vanishes).
    if check_metric(metric) == "inner_product":
        return 1e-5 * na * nb + len(a) * FLOAT32_TINY
    if metric == "l2":
        return 1e-5 * (na + nb) + math.sqrt(len(a) * FLOAT32_TINY)
    return 1e-5


#: The smallest float32 subnormal, 2**-149: a product below it is 0 in float32.
FLOAT32_TINY = 2.0**-149
#: The smallest normal float32, 2**-126. `cosine` is within `tolerance` for vectors whose
#: squared norm is 0 or at least this: below it float32 squares lose the vector's
#: direction (a vector of norm 1e-19 is scored as a zero vector by the core). Embedding
#: models give norms near 1.
FLOAT32_NORMAL = 2.0**-126


# -- quantized scan (the specification of tl_vector_quantize and tl_vector_bounds) ------------

#: Values per vector `quantize` returns beside the codes: scale, |v|, |v - scale * codes|.
PARAMS = 3
#: Norms below this (2**-60) bound a cosine by 1: the core scores a vector whose float32
#: squared norm is not normal (below 2**-63) as a zero vector (see FLOAT32_NORMAL).
COSINE_TINY = 2.0**-60
#: Relative slack `bounds` adds for the float32 sums of the exact kernels (twice `tolerance`).
BOUND_SLACK = 2e-5


def quantize(matrix: Buffer, dims: int) -> tuple[bytes, array[float]]:
    """Return (codes, params): each vector as `dims` int8 codes and PARAMS doubles.

    Per vector: m = max |v_i|, codes c_i = floor(v_i * (127 / m) + 0.5) (all 0 when m is 0),
    scale = m / 127, then |v| and the residual |v - scale * c|, both summed in double one
    term at a time, in order (the C core sums the same way, so the results are identical).

    Raises:
        ValueError: a buffer that is not whole vectors.
    """
    values = floats(matrix, dims)
    codes = array("b")
    params = array("d")
    for row in _rows(values, dims):
        largest = max(abs(x) for x in row)
        if largest > 0.0:
            inv = 127.0 / largest
            scale = largest / 127.0
            row_codes = [max(-127, min(127, math.floor(x * inv + 0.5))) for x in row]
        else:
            scale = 0.0
            row_codes = [0] * dims
        norm = 0.0
        residual = 0.0
        for x, c in zip(row, row_codes, strict=True):
            norm += x * x
            d = x - scale * c
            residual += d * d
        codes.extend(row_codes)
        params.extend((scale, math.sqrt(norm), math.sqrt(residual)))
    return codes.tobytes(), params


def bounds(
    query_codes: Buffer,
    query_params: Sequence[float],
    codes: Buffer,
    params: Sequence[float],
    dims: int,
    metric: str,
) -> array[float]:
    """Return, for each quantized vector, an upper bound of the exact kernel's score.

    With a = qs * vs * (qc . vc) (the integer dot product of the codes) and the error of
    the approximation e = |q - q'| |v| + (|q| + |q - q'|) |v - v'| plus the float32 slack
    BOUND_SLACK |q| |v| + dims * FLOAT32_TINY: `inner_product` a + e; `cosine` (a + e) /
    (|q| |v|) + BOUND_SLACK (1 when either norm is below COSINE_TINY); `l2` minus the square
    root of max(|q|^2 + |v|^2 - 2 (a + e), 0) plus BOUND_SLACK (|q| + |v|) plus
    sqrt(dims * FLOAT32_TINY). So no vector scores above its bound: a search that ranked
    vectors by their exact scores down to a score above every other vector's bound holds
    the exact top (`engine/items/scan.py`).

    Raises:
        ValueError: an unknown metric, or codes and params of different vector counts.
    """
    checked = check_metric(metric)
    q = array("b")
    q.frombytes(bytes(query_codes))
    v = array("b")
    v.frombytes(bytes(codes))
    count = len(v) // dims if dims > 0 else 0
    if dims < 1 or len(q) != dims or len(v) != count * dims or len(params) != PARAMS * count:
        raise ValueError(f"quantized buffers do not hold whole vectors of {dims} codes")
    if len(query_params) != PARAMS:
        raise ValueError(f"the query needs {PARAMS} params, not {len(query_params)}")
    qs, qn, qr = query_params
    tiny = dims * FLOAT32_TINY
    out = array("d")
    for i in range(count):
        vs, vn, vr = params[PARAMS * i : PARAMS * i + PARAMS]
        dot = sum(map(mul, q, v[i * dims : (i + 1) * dims]))
        approx = (qs * vs) * dot
        high = approx + (qr * vn + (qn + qr) * vr + BOUND_SLACK * (qn * vn) + tiny)
        out.append(_bound(checked, high, qn, vn, tiny))
    return out


def chunk_bounds(
    query_codes: Buffer,
    query_params: Sequence[float],
    chunks: Buffer,
    counts: Sequence[int],
    dims: int,
    metric: str,
) -> tuple[array[int], array[float]]:
    """Return (items, bounds) of every vector of code chunks laid out as the Store keeps
    them (`store_codes`, docs/FORMAT.md): `chunks` holds the bodies back to back, body i of
    `counts[i]` vectors as that many vector ids (int64), items (int64), PARAMS doubles a
    vector and `dims` int8 codes a vector, all little-endian. Each bound is `bounds`'.

    Raises:
        ValueError: an unknown metric, a count below 1, or bodies that do not fill `chunks`.
    """
    check_metric(metric)
    stride = 8 * (2 + PARAMS) + dims
    view = memoryview(chunks).cast("B")
    if dims < 1 or any(count < 1 for count in counts) or sum(counts) * stride != len(view):
        raise ValueError(f"code chunks do not hold {sum(counts)} vectors of {dims} codes")
    items, out = array("q"), array("d")
    at = 0
    for count in counts:
        part, params = array("q"), array("d")
        part.frombytes(view[at + 8 * count : at + 16 * count])
        params.frombytes(view[at + 16 * count : at + 8 * (2 + PARAMS) * count])
        if sys.byteorder == "big":
            part.byteswap()
            params.byteswap()
        items.extend(part)
        codes = view[at + 8 * (2 + PARAMS) * count : at + stride * count]
        out.extend(bounds(query_codes, query_params, codes, params, dims, metric))
        at += stride * count
    return items, out


def _bound(metric: Metric, high: float, qn: float, vn: float, tiny: float) -> float:
    if metric == "inner_product":
        return high
    if metric == "cosine":
        if qn < COSINE_TINY or vn < COSINE_TINY:
            return 1.0
        return high / (qn * vn) + BOUND_SLACK
    squared = qn * qn + vn * vn - 2.0 * high
    return -math.sqrt(max(squared, 0.0)) + (BOUND_SLACK * (qn + vn) + math.sqrt(tiny))
