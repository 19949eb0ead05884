"""The vectors a write or a query gives the index, checked and packed (engine layer, no SQL).

A vector is `dims` numbers, each a finite float32 no larger than `largest(dims)` (so a dot
product of two, or a squared norm, stays within float32: the C kernels add in float32),
stored as float32 little-endian bytes. `pack_one` checks one vector in Python and names
what is wrong; `pack_many` checks a batch's vectors at once with the native core (one
kernel call, `core.vector_quantize`, whose codes the exact scan keeps too) and only falls
back to `pack_one` for a batch that fails, so a put's error names the same vector and
problem whichever way it was checked.
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Sequence
from typing import Final

from threadloom import core
from threadloom.core.similarity import PARAMS, pack
from threadloom.errors import InvalidValueError

#: The largest finite float32.
_FLOAT32_MAX: Final = 3.4028234663852886e38

#: Items' vectors as a write gives them: (item, [(field path, embedding), ...]) each.
Entries = Sequence[tuple[int, Sequence[tuple[str, Sequence[float]]]]]


def largest(dims: int) -> float:
    """The largest component a vector of `dims` may have."""
    return math.sqrt(_FLOAT32_MAX / dims) / 2


def pack_one(values: Sequence[float], dims: int, what: str) -> bytes:
    """One vector as stored, checked (`what` names it in the error).

    Raises:
        InvalidValueError: not a sequence of `dims` numbers, a value that is not a finite
            float32, or a component above `largest(dims)`.
    """
    if isinstance(values, (str, bytes, bytearray)):
        raise InvalidValueError(f"{what} must be a sequence of floats, not {type(values).__name__}")
    if len(values) != dims:
        raise InvalidValueError(f"{what} has {len(values)} dimensions, expected {dims}")
    try:
        packed = array("f", values)
    except TypeError as error:
        raise InvalidValueError(f"{what} must hold only numbers ({error})") from None
    if not all(map(math.isfinite, packed)):
        raise InvalidValueError(f"{what} holds a value that is not a finite float32 (NaN, inf)")
    bound = largest(dims)
    if packed and max(map(abs, packed)) > bound:
        raise InvalidValueError(
            f"{what} has a component above {bound:.3g}: its products would "
            "overflow float32; scale it down (embeddings are usually normalized)"
        )
    return pack(packed)


def pack_many(
    entries: Entries, dims: int
) -> tuple[list[tuple[int, str, bytes]], bytes, tuple[bytes, array[float]] | None]:
    """The vectors of `entries` checked and packed: (item, field, blob) each, in order,
    the matrix of them all, and its quantization (`core.vector_quantize`: codes, params)
    when the check made one (the native core).

    With the native core a batch is checked in one kernel call: the norm of each vector
    (summed in double from its float32 values, so a NaN or an inf carries through, and
    never below its largest component) must be finite and at most `largest(dims)`. A
    batch that fails it is decided vector by vector (`pack_one`, which names the first
    bad vector; a long vector of small components passes there). The pure-Python core
    checks vector by vector from the start (its quantization is slower than that).

    Raises:
        InvalidValueError: a field given twice for one item, or a vector `pack_one` refuses.
    """
    native = core.backend() == "native"
    shape = struct.Struct(f"<{dims}f")
    flat: list[tuple[int, str, bytes]] = []
    for item, vectors in entries:
        fields = [field for field, _ in vectors]
        if len(set(fields)) != len(fields):
            raise InvalidValueError(f"a field is given twice among {fields}")
        for field, given in vectors:
            if not native or isinstance(given, (str, bytes, bytearray)):
                flat.append((item, field, pack_one(given, dims, _named(field))))
                continue
            if type(given) is array and given.typecode == "f" and len(given) == dims:
                # float32 already (the embedding cache's): a copy of its bytes, checked
                # below with the rest.
                flat.append((item, field, pack(given)))
                continue
            try:
                # 4x faster than array("f", given) on a list of floats; the values are
                # checked below, all at once.
                blob = shape.pack(*given)
            except (struct.error, TypeError, OverflowError):
                blob = pack_one(given, dims, _named(field))  # raises, naming the problem
            flat.append((item, field, blob))
    matrix = b"".join(blob for _, _, blob in flat)
    if not native or not flat:
        return flat, matrix, None
    quantized = core.vector_quantize(matrix, dims)
    norms = quantized[1][1::PARAMS]
    if not all(map(math.isfinite, norms)) or max(norms) > largest(dims):
        for _, vectors in entries:
            for field, given in vectors:
                pack_one(given, dims, _named(field))
    return flat, matrix, quantized


def _named(field: str) -> str:
    return f"the vector of field {field!r}"


#: SQLite's default page size, and the larger one a Store's new file may take instead.
_SMALL_PAGE, _LARGE_PAGE = 4096, 8192
#: The share of a vector row's bytes larger pages must save to be chosen.
_WORTH: Final = 0.85
#: Bytes of a `store_vectors` row besides the vector (its record header, item and field).
_ROW_EXTRA: Final = 17


def page_size_for(dims: int) -> int:
    """The page size a new file of a Store with `dims`-dim vectors is made with: 8 KiB
    when, by SQLite's cell rules, it stores a `store_vectors` row in at least 15% fewer
    bytes than 4 KiB does (335 to 402 and 505 to 675 dims; the estimate's row overhead
    is typical, so a dim or two at each edge may fall either way).

    Vector rows are most of such a file, and SQLite packs whole rows into a page: at 384
    dims (1.5 KiB rows) a 4 KiB page holds two and leaves a quarter empty, an 8 KiB one
    holds five; at 512, one against three. At 256, 768 or 1,536 dims the gain is small
    or none, and 4 KiB keeps the small tables' pages and each write's log small.
    """
    payload = 4 * dims + _ROW_EXTRA
    large = _row_bytes(payload, _LARGE_PAGE) <= _WORTH * _row_bytes(payload, _SMALL_PAGE)
    return _LARGE_PAGE if large else _SMALL_PAGE


def _row_bytes(payload: int, page: int) -> float:
    """Bytes of the file a table row of `payload` bytes takes, pages of `page` bytes:
    SQLite's leaf cell rules (a cell beyond `page - 35` bytes keeps a local part and
    spills the rest to overflow pages of `page - 4` bytes)."""
    most, least = page - 35, (page - 12) * 32 // 255 - 23
    local, spilled = payload, 0
    if payload > most:
        local = least + (payload - least) % (page - 4)
        if local > most:
            local = least
        spilled = -(-(payload - local) // (page - 4))
    cell = local + 6 + (4 if spilled else 0) + 2  # header varints, overflow link, pointer
    return spilled * page + page / ((page - 8) // cell)
