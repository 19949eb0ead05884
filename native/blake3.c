/*
 * BLAKE3 (unkeyed, 32-byte output), C99 written from the BLAKE3 specification
 * (O'Connor, Aumasson, Neves, Wilcox-O'Hearn, 2020), one whole buffer per call;
 * and tl_cdc_blocks: a body's content-defined blocks with the BLAKE3 key of
 * each (the content store's), whole chunks of any blocks four at a time with
 * SSE2. The Python package `blake3` is the oracle (tests/core/test_differential.py).
 */
#include <string.h>

#include "threadloom.h"
#include "tl_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#define TL_B3_SSE2 1 /* baseline on x86-64: four chunks at once, one per lane */
#else
#define TL_B3_SSE2 0
#endif

#define TL_B3_BLOCK 64
#define TL_B3_CHUNK 1024
#define TL_B3_PARENT 4u
#define TL_B3_ROOT 8u
/* A tree over at most 2^64 chunks has at most 64 pending subtrees. */
#define TL_B3_STACK 64
const uint32_t tl_b3_iv[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                                     0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};

/* The message words of round r, in G order: the spec's permutation
 * {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8} applied r times. */
const unsigned char tl_b3_sched[7][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
    {3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1},
    {10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
    {12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4},
    {9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
    {11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13},
};

static uint32_t tl_b3_rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }
static uint32_t tl_b3_load(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define TL_B3_G(a, b, c, d, x, y)                                                                  \
    do {                                                                                           \
        s[a] = s[a] + s[b] + (x);                                                                  \
        s[d] = tl_b3_rotr(s[d] ^ s[a], 16);                                                        \
        s[c] = s[c] + s[d];                                                                        \
        s[b] = tl_b3_rotr(s[b] ^ s[c], 12);                                                        \
        s[a] = s[a] + s[b] + (y);                                                                  \
        s[d] = tl_b3_rotr(s[d] ^ s[a], 8);                                                         \
        s[c] = s[c] + s[d];                                                                        \
        s[b] = tl_b3_rotr(s[b] ^ s[c], 7);                                                         \
    } while (0)

/*
 * The compression function: cv (8 words) and one 64-byte block (16 words) at
 * `counter`, `len` bytes of it used, with `flags`. Writes the first 8 output
 * words (the chaining value, or the root hash when flags hold ROOT) to out.
 */
static void tl_b3_compress(const uint32_t cv[8], const uint32_t m[16], uint64_t counter,
                           uint32_t len, uint32_t flags, uint32_t out[8])
{
    uint32_t s[16];
    unsigned r, i;

    memcpy(s, cv, 8 * sizeof(uint32_t));
    memcpy(s + 8, tl_b3_iv, 4 * sizeof(uint32_t));
    s[12] = (uint32_t)counter;
    s[13] = (uint32_t)(counter >> 32);
    s[14] = len;
    s[15] = flags;
    for (r = 0; r < 7; r++) {
        const unsigned char *w = tl_b3_sched[r];
        TL_B3_G(0, 4, 8, 12, m[w[0]], m[w[1]]);
        TL_B3_G(1, 5, 9, 13, m[w[2]], m[w[3]]);
        TL_B3_G(2, 6, 10, 14, m[w[4]], m[w[5]]);
        TL_B3_G(3, 7, 11, 15, m[w[6]], m[w[7]]);
        TL_B3_G(0, 5, 10, 15, m[w[8]], m[w[9]]);
        TL_B3_G(1, 6, 11, 12, m[w[10]], m[w[11]]);
        TL_B3_G(2, 7, 8, 13, m[w[12]], m[w[13]]);
        TL_B3_G(3, 4, 9, 14, m[w[14]], m[w[15]]);
    }
    for (i = 0; i < 8; i++) {
        out[i] = s[i] ^ s[i + 8];
    }
}

#if TL_B3_SSE2
static __m128i tl_b3_rot(__m128i x, int n)
{
    return _mm_or_si128(_mm_srli_epi32(x, n), _mm_slli_epi32(x, 32 - n));
}

#define TL_B3_G4(a, b, c, d, x, y)                                                                 \
    do {                                                                                           \
        v[a] = _mm_add_epi32(_mm_add_epi32(v[a], v[b]), (x));                                      \
        v[d] = tl_b3_rot(_mm_xor_si128(v[d], v[a]), 16);                                           \
        v[c] = _mm_add_epi32(v[c], v[d]);                                                          \
        v[b] = tl_b3_rot(_mm_xor_si128(v[b], v[c]), 12);                                           \
        v[a] = _mm_add_epi32(_mm_add_epi32(v[a], v[b]), (y));                                      \
        v[d] = tl_b3_rot(_mm_xor_si128(v[d], v[a]), 8);                                            \
        v[c] = _mm_add_epi32(v[c], v[d]);                                                          \
        v[b] = tl_b3_rot(_mm_xor_si128(v[b], v[c]), 7);                                            \
    } while (0)

/*
 * The chaining values of four whole chunks (1024 bytes at p[j], chunk index
 * ctr[j]): lane j of every vector is chunk j, the message words transposed
 * from four 16-byte loads per chunk.
 */
static void tl_b3_chunks4(const unsigned char *const p[4], const uint64_t ctr[4],
                          uint32_t *const cvs[4])
{
    __m128i h[8], v[16], m[16], lo, hi;
    uint32_t lanes[4];
    unsigned b, g, r, i, j;

    for (i = 0; i < 8; i++) {
        h[i] = _mm_set1_epi32((int)tl_b3_iv[i]);
    }
    lo = _mm_set_epi32((int)(uint32_t)ctr[3], (int)(uint32_t)ctr[2], (int)(uint32_t)ctr[1],
                       (int)(uint32_t)ctr[0]);
    hi = _mm_set_epi32((int)(uint32_t)(ctr[3] >> 32), (int)(uint32_t)(ctr[2] >> 32),
                       (int)(uint32_t)(ctr[1] >> 32), (int)(uint32_t)(ctr[0] >> 32));
    for (b = 0; b < TL_B3_CHUNK / TL_B3_BLOCK; b++) {
        uint32_t flags = (b == 0 ? TL_B3_CHUNK_START : 0) | (b == 15 ? TL_B3_CHUNK_END : 0);
        for (g = 0; g < 4; g++) {
            size_t at = b * TL_B3_BLOCK + 16 * g;
            __m128i r0 = _mm_loadu_si128((const __m128i *)(p[0] + at));
            __m128i r1 = _mm_loadu_si128((const __m128i *)(p[1] + at));
            __m128i r2 = _mm_loadu_si128((const __m128i *)(p[2] + at));
            __m128i r3 = _mm_loadu_si128((const __m128i *)(p[3] + at));
            __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3);
            __m128i t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);
            m[4 * g] = _mm_unpacklo_epi64(t0, t1);
            m[4 * g + 1] = _mm_unpackhi_epi64(t0, t1);
            m[4 * g + 2] = _mm_unpacklo_epi64(t2, t3);
            m[4 * g + 3] = _mm_unpackhi_epi64(t2, t3);
        }
        for (i = 0; i < 8; i++) {
            v[i] = h[i];
        }
        for (i = 0; i < 4; i++) {
            v[8 + i] = _mm_set1_epi32((int)tl_b3_iv[i]);
        }
        v[12] = lo;
        v[13] = hi;
        v[14] = _mm_set1_epi32(TL_B3_BLOCK);
        v[15] = _mm_set1_epi32((int)flags);
        for (r = 0; r < 7; r++) {
            const unsigned char *w = tl_b3_sched[r];
            TL_B3_G4(0, 4, 8, 12, m[w[0]], m[w[1]]);
            TL_B3_G4(1, 5, 9, 13, m[w[2]], m[w[3]]);
            TL_B3_G4(2, 6, 10, 14, m[w[4]], m[w[5]]);
            TL_B3_G4(3, 7, 11, 15, m[w[6]], m[w[7]]);
            TL_B3_G4(0, 5, 10, 15, m[w[8]], m[w[9]]);
            TL_B3_G4(1, 6, 11, 12, m[w[10]], m[w[11]]);
            TL_B3_G4(2, 7, 8, 13, m[w[12]], m[w[13]]);
            TL_B3_G4(3, 4, 9, 14, m[w[14]], m[w[15]]);
        }
        for (i = 0; i < 8; i++) {
            h[i] = _mm_xor_si128(v[i], v[i + 8]);
        }
    }
    for (i = 0; i < 8; i++) {
        _mm_storeu_si128((__m128i *)lanes, h[i]);
        for (j = 0; j < 4; j++) {
            cvs[j][i] = lanes[j];
        }
    }
}
#endif

/* `len` (<= 64) bytes as a zero-padded block of 16 little-endian words. */
static void tl_b3_words(const unsigned char *p, size_t len, uint32_t block[16])
{
    unsigned char pad[TL_B3_BLOCK];
    unsigned i;

    if (len < TL_B3_BLOCK) {
        memset(pad, 0, sizeof pad);
        if (len) {
            memcpy(pad, p, len);
        }
        p = pad;
    }
    for (i = 0; i < 16; i++) {
        block[i] = tl_b3_load(p + 4 * i);
    }
}

/*
 * One chunk (1 .. 1024 bytes, or 0 for the empty input) at chunk index
 * `counter`: compresses every block but the last into *cv and leaves the last
 * one's words, length and flags for the caller (a chaining value, or the root).
 */
static void tl_b3_chunk(const unsigned char *p, size_t len, uint64_t counter, uint32_t cv[8],
                        uint32_t last[16], uint32_t *last_len, uint32_t *last_flags)
{
    uint32_t block[16];
    uint32_t start = TL_B3_CHUNK_START;

    memcpy(cv, tl_b3_iv, sizeof tl_b3_iv);
    while (len > TL_B3_BLOCK) {
        tl_b3_words(p, TL_B3_BLOCK, block);
        tl_b3_compress(cv, block, counter, TL_B3_BLOCK, start, cv);
        start = 0;
        p += TL_B3_BLOCK;
        len -= TL_B3_BLOCK;
    }
    tl_b3_words(p, len, last);
    *last_len = (uint32_t)len;
    *last_flags = start | TL_B3_CHUNK_END;
}

/* The parent node's block: the two children's chaining values. */
static void tl_b3_pair(const uint32_t left[8], const uint32_t right[8], uint32_t block[16])
{
    memcpy(block, left, 8 * sizeof(uint32_t));
    memcpy(block + 8, right, 8 * sizeof(uint32_t));
}

/* The 8 output words as 32 little-endian bytes. */
static void tl_b3_bytes(const uint32_t root[8], unsigned char out[32])
{
    unsigned i;
    for (i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)root[i];
        out[4 * i + 1] = (unsigned char)(root[i] >> 8);
        out[4 * i + 2] = (unsigned char)(root[i] >> 16);
        out[4 * i + 3] = (unsigned char)(root[i] >> 24);
    }
}

/*
 * The root of a tree whose last chunk's chaining value is `last` and whose
 * other chunks' subtrees are stack[0 .. depth) (depth >= 1), oldest first.
 */
static void tl_b3_close(uint32_t (*stack)[8], unsigned depth, uint32_t last[8],
                        unsigned char out[32])
{
    uint32_t block[16], root[8];
    for (;;) {
        tl_b3_pair(stack[--depth], last, block);
        if (depth == 0) {
            tl_b3_compress(tl_b3_iv, block, 0, TL_B3_BLOCK, TL_B3_PARENT | TL_B3_ROOT, root);
            tl_b3_bytes(root, out);
            return;
        }
        tl_b3_compress(tl_b3_iv, block, 0, TL_B3_BLOCK, TL_B3_PARENT, last);
    }
}

/* Push a chunk's chaining value: merged first with the subtrees that chunk number
 * `chunk` (counting from 1) completes, one per trailing zero bit. */
static void tl_b3_push(uint32_t (*stack)[8], unsigned *depth, uint32_t cv[8], uint64_t chunk)
{
    uint32_t block[16];
    for (; (chunk & 1) == 0; chunk >>= 1) {
        tl_b3_pair(stack[--*depth], cv, block);
        tl_b3_compress(tl_b3_iv, block, 0, TL_B3_BLOCK, TL_B3_PARENT, cv);
    }
    memcpy(stack[(*depth)++], cv, 8 * sizeof(uint32_t));
}

/* One buffer, streamed chunk by chunk (scalar): any length, no buffer. */
TL_INTERNAL void tl_blake3(const unsigned char *data, size_t len, unsigned char out[32])
{
    uint32_t stack[TL_B3_STACK][8], cv[8], block[16], root[8], last_len, flags;
    uint64_t chunk = 0;
    unsigned depth = 0;

    while (len > TL_B3_CHUNK) {
        tl_b3_chunk(data, TL_B3_CHUNK, chunk, cv, block, &last_len, &flags);
        tl_b3_compress(cv, block, chunk, last_len, flags, cv);
        tl_b3_push(stack, &depth, cv, ++chunk);
        data += TL_B3_CHUNK;
        len -= TL_B3_CHUNK;
    }
    tl_b3_chunk(data, len, chunk, cv, block, &last_len, &flags);
    if (depth == 0) { /* one chunk: its last block is the root */
        tl_b3_compress(cv, block, chunk, last_len, flags | TL_B3_ROOT, root);
        tl_b3_bytes(root, out);
        return;
    }
    tl_b3_compress(cv, block, chunk, last_len, flags, cv);
    tl_b3_close(stack, depth, cv, out);
}

int tl_blake3_hash(const unsigned char *data, size_t len, unsigned char *out)
{
    if ((data == NULL && len > 0) || out == NULL) {
        return TL_EINVAL;
    }
    tl_blake3(data, len, out);
    return TL_OK;
}

/* The root of the tree over `count` (>= 2) chunk chaining values, in order. */
static void tl_b3_root(uint32_t (*cvs)[8], size_t count, unsigned char out[32])
{
    uint32_t stack[TL_B3_STACK][8], last[8];
    unsigned depth = 0;
    size_t chunk;

    memcpy(last, cvs[0], sizeof last);
    for (chunk = 1; chunk < count; chunk++) {
        tl_b3_push(stack, &depth, last, chunk);
        memcpy(last, cvs[chunk], sizeof last);
    }
    tl_b3_close(stack, depth, last, out);
}

#define TL_B3_GROUP 64 /* chunk chaining values one pass of tl_cdc_blocks keeps */

int64_t tl_cdc_blocks(const unsigned char *data, size_t len, size_t min_size, size_t avg_size,
                      size_t max_size, unsigned features, uint64_t *cuts, size_t cap,
                      unsigned char *keys)
{
    int64_t count = tl_cdc_cuts(data, len, min_size, avg_size, max_size, cuts, cap);
    uint32_t cvs[TL_B3_GROUP][8], block[16], last_len, flags;
    const unsigned char *at[TL_B3_GROUP];
    uint64_t ctr[TL_B3_GROUP];
    uint32_t *dst[TL_B3_GROUP];
    int64_t first = 0;

    if (count < 0) {
        return count;
    }
    if ((keys == NULL && count > 0) || (features & ~TL_KNOWN_FEATURES)) {
        return TL_EINVAL;
    }
    /* Groups of consecutive blocks: the whole chunks of all of them are hashed four
     * at a time, whatever block they belong to; then each block's tree. A block of
     * one chunk, or of more chunks than a group holds, is hashed on its own. */
    while (first < count) {
        size_t slots = 0, queued = 0, q;
        int64_t end = first, b;
        for (; end < count; end++) {
            size_t from = end ? (size_t)cuts[end - 1] : 0, size = (size_t)cuts[end] - from;
            size_t chunks = (size + TL_B3_CHUNK - 1) / TL_B3_CHUNK, c;
            if (chunks < 2 || chunks > TL_B3_GROUP) {
                if (end == first) {
                    tl_blake3(data + from, size, keys + 32 * (size_t)end);
                    end++;
                }
                break;
            }
            if (slots + chunks > TL_B3_GROUP) {
                break;
            }
            for (c = 0; c < chunks; c++) {
                const unsigned char *p = data + from + c * TL_B3_CHUNK;
                if (c + 1 < chunks || size % TL_B3_CHUNK == 0) {
                    at[queued] = p;
                    ctr[queued] = c;
                    dst[queued++] = cvs[slots + c];
                } else { /* the partial last chunk */
                    tl_b3_chunk(p, size - c * TL_B3_CHUNK, c, cvs[slots + c], block, &last_len,
                                &flags);
                    tl_b3_compress(cvs[slots + c], block, c, last_len, flags, cvs[slots + c]);
                }
            }
            slots += chunks;
        }
        for (q = 0; q < queued; q++) {
#if TL_HAVE_X86_SIMD
            if ((features & TL_HW_AVX2) && q + 8 <= queued) {
                tl_b3_chunks8_avx2(at + q, ctr + q, dst + q);
                q += 7;
                continue;
            }
#endif
#if TL_B3_SSE2
            if (q + 4 <= queued) {
                tl_b3_chunks4(at + q, ctr + q, dst + q);
                q += 3;
                continue;
            }
#endif
            tl_b3_chunk(at[q], TL_B3_CHUNK, ctr[q], dst[q], block, &last_len, &flags);
            tl_b3_compress(dst[q], block, ctr[q], last_len, flags, dst[q]);
        }
        for (slots = 0, b = first; b < end; b++) {
            size_t from = b ? (size_t)cuts[b - 1] : 0, size = (size_t)cuts[b] - from;
            size_t chunks = (size + TL_B3_CHUNK - 1) / TL_B3_CHUNK;
            if (chunks >= 2 && chunks <= TL_B3_GROUP) { /* else hashed above */
                tl_b3_root(cvs + slots, chunks, keys + 32 * (size_t)b);
                slots += chunks;
            }
        }
        first = end;
    }
    return count;
}
