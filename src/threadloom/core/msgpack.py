"""Byte spans of the elements of a msgpack array, without decoding them.

A msgpack array is a header followed by its elements' encodings, each exactly
what encoding the element alone gives. Serializing a list once and cutting it
here is therefore equivalent to serializing each element, at one encoder call.
Pure function; this Python version is the specification of any native one.
"""

from __future__ import annotations

import struct

# Fixed-size formats: first byte -> bytes after it.
_FIXED = {
    0xC0: 0,
    0xC2: 0,
    0xC3: 0,
    0xCA: 4,
    0xCB: 8,
    0xCC: 1,
    0xCD: 2,
    0xCE: 4,
    0xCF: 8,
    0xD0: 1,
    0xD1: 2,
    0xD2: 4,
    0xD3: 8,
    0xD4: 2,
    0xD5: 3,
    0xD6: 5,
    0xD7: 9,
    0xD8: 17,
}
# Length-prefixed blobs: first byte -> (length bytes, extra bytes after the length).
_SIZED = {
    0xC4: (1, 0),
    0xC5: (2, 0),
    0xC6: (4, 0),
    0xD9: (1, 0),
    0xDA: (2, 0),
    0xDB: (4, 0),
    0xC7: (1, 1),
    0xC8: (2, 1),
    0xC9: (4, 1),
}
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


def _length(buf: bytes, pos: int, size: int) -> int:
    if size == 1:
        return buf[pos]
    return int(struct.unpack_from(">H" if size == 2 else ">I", buf, pos)[0])


def skip(buf: bytes, pos: int) -> int:
    """Return the offset just past the msgpack value that starts at `pos`.

    Raises:
        ValueError: the bytes are not well-formed msgpack (reserved byte or truncated).
    """
    pending = 1
    end = len(buf)
    while pending:
        if pos >= end:
            raise ValueError("truncated msgpack")
        first = buf[pos]
        pending -= 1
        if first <= 0x7F or first >= 0xE0:
            pos += 1
        elif first <= 0x8F:
            pending += 2 * (first & 0x0F)
            pos += 1
        elif first <= 0x9F:
            pending += first & 0x0F
            pos += 1
        elif first <= 0xBF:
            pos += 1 + (first & 0x1F)
        elif first in _FIXED:
            pos += 1 + _FIXED[first]
        elif first in _SIZED:
            size, extra = _SIZED[first]
            pos += 1 + size + extra + _length(buf, pos + 1, size)
        elif first in _CONTAINERS:
            size, per = _CONTAINERS[first]
            pending += per * _length(buf, pos + 1, size)
            pos += 1 + size
        else:
            raise ValueError(f"reserved msgpack byte 0x{first:02x} at {pos}")
    if pos > end:
        raise ValueError("truncated msgpack")
    return pos


def array_spans(payload: bytes) -> list[tuple[int, int]] | None:
    """Return `(start, end)` of each element of the msgpack array `payload`.

    Returns None when `payload` is not exactly one msgpack array.
    """
    if not payload:
        return None
    first = payload[0]
    if 0x90 <= first <= 0x9F:
        count, pos = first & 0x0F, 1
    elif first == 0xDC and len(payload) >= 3:
        count, pos = _length(payload, 1, 2), 3
    elif first == 0xDD and len(payload) >= 5:
        count, pos = _length(payload, 1, 4), 5
    else:
        return None
    spans = []
    try:
        for _ in range(count):
            end = skip(payload, pos)
            spans.append((pos, end))
            pos = end
    except (ValueError, IndexError, struct.error):
        return None
    return spans if pos == len(payload) else None
