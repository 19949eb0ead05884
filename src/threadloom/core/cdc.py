"""Content-defined chunking (FastCDC with normalized chunking): the specification.

Layer: core. Cut points depend only on the bytes near them, so an insertion moves the cuts
around it and leaves the others, which is what lets equal content inside different payloads
share blocks. The C core (`tl_cdc_cuts`) computes exactly these cut points, from the same
gear table (GEAR, built here from GEAR_SEED; `native/cdc.c` commits the same 256 words).

The rule, from each chunk start `s` (Xia et al., "FastCDC", USENIX ATC 2016):

- if at most `min_size` bytes remain, they are the last chunk;
- otherwise `fp = 0`, and for offsets `i = min_size, min_size + 1, ...` below
  `min(max_size, remaining)`: `fp = (2 * fp + GEAR[byte]) mod 2**64`; the chunk ends after
  byte `i` at the first `i` where `fp & mask == 0`. The mask is the top `b + 2` bits while
  `i < avg_size`, the top `b - 2` bits from then on (`b = floor(log2(avg_size))`,
  normalization level 2); without such an `i` the chunk is `min(max_size, remaining)` bytes.
"""

from __future__ import annotations

GEAR_SEED = 0x7468726561646C6F
"""splitmix64 seed of the gear table: the ASCII bytes "threadlo"."""

_M64 = (1 << 64) - 1


def _splitmix64(seed: int, count: int) -> tuple[int, ...]:
    state = seed
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        out.append(z ^ (z >> 31))
    return tuple(out)


GEAR: tuple[int, ...] = _splitmix64(GEAR_SEED, 256)
"""The gear table: 256 pseudo-random 64-bit words, one per byte value."""


def check_sizes(min_size: int, avg_size: int, max_size: int) -> None:
    """Raise ValueError unless `1 <= min <= avg <= max` and `8 <= avg <= 2**32` (the sizes)."""
    if not all(isinstance(size, int) for size in (min_size, avg_size, max_size)):
        raise ValueError("chunk sizes must be integers")
    if not 1 <= min_size <= avg_size <= max_size:
        raise ValueError(
            f"chunk sizes must satisfy 1 <= min <= avg <= max, got {min_size}, {avg_size}, "
            f"{max_size}"
        )
    if not 8 <= avg_size <= 1 << 32:
        raise ValueError(f"the average chunk size must be within 8 .. 2**32, got {avg_size}")


def max_cuts(length: int, min_size: int) -> int:
    """Return how many cut points a buffer of `length` bytes can have at most."""
    return length // min_size + 1


def _top_mask(bits: int) -> int:
    return (_M64 << (64 - bits)) & _M64


def _next_cut(
    buf: bytes, start: int, min_size: int, normal: int, end: int, mask_s: int, mask_l: int
) -> int:
    """Return the length of the chunk at `start` (more than `min_size` bytes remain)."""
    gear = GEAR
    fp = 0
    for i in range(start + min_size, start + normal):
        fp = ((fp << 1) + gear[buf[i]]) & _M64
        if not fp & mask_s:
            return i - start + 1
    for i in range(start + normal, start + end):
        fp = ((fp << 1) + gear[buf[i]]) & _M64
        if not fp & mask_l:
            return i - start + 1
    return end


def cdc_cuts(
    data: bytes | bytearray | memoryview, min_size: int, avg_size: int, max_size: int
) -> list[int]:
    """Return the end offset of every content-defined chunk of `data`, in order.

    The last cut is `len(data)`; empty data has no chunk. Every chunk but the last has more
    than `min_size` bytes (exactly `min_size` when `max_size == min_size`) and at most
    `max_size`.

    Raises:
        ValueError: the sizes break `1 <= min <= avg <= max`, `8 <= avg <= 2**32`.
    """
    check_sizes(min_size, avg_size, max_size)
    buf = data if isinstance(data, bytes) else bytes(data)
    bits = avg_size.bit_length() - 1
    mask_s, mask_l = _top_mask(bits + 2), _top_mask(bits - 2)
    cuts = []
    start, length = 0, len(buf)
    while start < length:
        remaining = length - start
        size = remaining
        if remaining > min_size:
            normal, end = min(avg_size, remaining), min(max_size, remaining)
            size = _next_cut(buf, start, min_size, normal, end, mask_s, mask_l)
        start += size
        cuts.append(start)
    return cuts
