/*
 * Element boundaries of a msgpack array, without decoding (the Python spec is
 * threadloom.core.msgpack: `skip` and `array_spans`).
 *
 * Every value occupies at least one byte, so a value count larger than the
 * bytes left is rejected at once: the result is the same as scanning to the
 * truncation, and the pending counter can never overflow.
 */
#include "threadloom.h"
#include "tl_internal.h"

#define TL_MP_BAD ((size_t)-1)

/* Big-endian length of `size` (1, 2 or 4) bytes at p. */
static uint64_t tl_mp_length(const unsigned char *p, unsigned size)
{
    uint64_t v = 0;
    unsigned i;
    for (i = 0; i < size; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* Bytes after the first byte of a fixed-size format, or -1 when not fixed. */
static int tl_mp_fixed(unsigned first)
{
    switch (first) {
    case 0xc0: case 0xc2: case 0xc3: return 0;
    case 0xcc: case 0xd0: return 1;
    case 0xcd: case 0xd1: case 0xd4: return 2;
    case 0xd5: return 3;
    case 0xca: case 0xce: case 0xd2: return 4;
    case 0xd6: return 5;
    case 0xcb: case 0xcf: case 0xd3: return 8;
    case 0xd7: return 9;
    case 0xd8: return 17;
    default: return -1;
    }
}

/*
 * Length-prefixed formats: sets *size (bytes of the length) and *extra (the
 * ext type byte) and returns 1 for bin/str/ext, 2 for array16/32 and map16/32
 * (with *extra = values per entry), 0 otherwise.
 */
static int tl_mp_sized(unsigned first, unsigned *size, unsigned *extra)
{
    switch (first) {
    case 0xc4: case 0xd9: *size = 1; *extra = 0; return 1;
    case 0xc5: case 0xda: *size = 2; *extra = 0; return 1;
    case 0xc6: case 0xdb: *size = 4; *extra = 0; return 1;
    case 0xc7: *size = 1; *extra = 1; return 1;
    case 0xc8: *size = 2; *extra = 1; return 1;
    case 0xc9: *size = 4; *extra = 1; return 1;
    case 0xdc: *size = 2; *extra = 1; return 2;
    case 0xdd: *size = 4; *extra = 1; return 2;
    case 0xde: *size = 2; *extra = 2; return 2;
    case 0xdf: *size = 4; *extra = 2; return 2;
    default: return 0;
    }
}

/* Offset just past the value starting at pos, or TL_MP_BAD. */
static size_t tl_mp_skip(const unsigned char *buf, size_t end, size_t pos)
{
    uint64_t pending = 1;
    while (pending) {
        unsigned first, size, extra;
        uint64_t step;
        int fixed, kind;
        if (pos >= end || pending > (uint64_t)(end - pos)) {
            return TL_MP_BAD;
        }
        first = buf[pos];
        pending--;
        if (first <= 0x7f || first >= 0xe0) {
            step = 1;
        } else if (first <= 0x8f) {
            pending += 2u * (first & 0x0fu);
            step = 1;
        } else if (first <= 0x9f) {
            pending += first & 0x0fu;
            step = 1;
        } else if (first <= 0xbf) {
            step = 1u + (first & 0x1fu);
        } else if ((fixed = tl_mp_fixed(first)) >= 0) {
            step = 1u + (unsigned)fixed;
        } else if ((kind = tl_mp_sized(first, &size, &extra)) != 0) {
            uint64_t length;
            if (end - pos < 1u + size) {
                return TL_MP_BAD;
            }
            length = tl_mp_length(buf + pos + 1, size);
            if (kind == 1) {
                step = 1u + size + extra + length;
            } else {
                pending += extra * length;
                step = 1u + size;
            }
        } else {
            return TL_MP_BAD; /* 0xc1, reserved */
        }
        if (step > (uint64_t)(end - pos)) {
            return TL_MP_BAD;
        }
        pos += (size_t)step;
    }
    return pos;
}

int64_t tl_msgpack_array_spans(const unsigned char *data, size_t len, uint64_t *offsets,
                               size_t cap)
{
    uint64_t count, k;
    size_t pos;
    if (data == NULL && len > 0) {
        return TL_EINVAL;
    }
    if (len >= 1 && data[0] >= 0x90 && data[0] <= 0x9f) {
        count = data[0] & 0x0fu;
        pos = 1;
    } else if (len >= 3 && data[0] == 0xdc) {
        count = tl_mp_length(data + 1, 2);
        pos = 3;
    } else if (len >= 5 && data[0] == 0xdd) {
        count = tl_mp_length(data + 1, 4);
        pos = 5;
    } else {
        return TL_ENOTARRAY;
    }
    if (count > (uint64_t)(len - pos)) {
        return TL_ENOTARRAY;
    }
    if (offsets == NULL) {
        return (int64_t)count;
    }
    if ((uint64_t)cap < count + 1) {
        return TL_ENOSPC;
    }
    offsets[0] = pos;
    for (k = 0; k < count; k++) {
        pos = tl_mp_skip(data, len, pos);
        if (pos == TL_MP_BAD) {
            return TL_ENOTARRAY;
        }
        offsets[k + 1] = pos;
    }
    return pos == len ? (int64_t)count : TL_ENOTARRAY;
}
