/*
 * BLAKE3 with AVX2: the chaining values of eight whole chunks at once, one
 * chunk per 32-bit lane (tl_cdc_blocks calls it when tl_cpu_features()
 * reported TL_HW_AVX2). Only this file's functions carry `target("avx2")`,
 * as vectors_x86.c does. The portable and SSE2 code is in blake3.c.
 */
#include "tl_internal.h"

#if TL_HAVE_X86_SIMD

#include <immintrin.h>

#define TL_AVX2 __attribute__((target("avx2")))

TL_AVX2 static __m256i tl_b3_rot16(__m256i x)
{
    return _mm256_shuffle_epi8(x, _mm256_set_epi8(13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0,
                                                  3, 2, 13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7,
                                                  6, 1, 0, 3, 2));
}

TL_AVX2 static __m256i tl_b3_rot8(__m256i x)
{
    return _mm256_shuffle_epi8(x, _mm256_set_epi8(12, 15, 14, 13, 8, 11, 10, 9, 4, 7, 6, 5, 0, 3,
                                                  2, 1, 12, 15, 14, 13, 8, 11, 10, 9, 4, 7, 6,
                                                  5, 0, 3, 2, 1));
}

TL_AVX2 static __m256i tl_b3_rotn(__m256i x, int n)
{
    return _mm256_or_si256(_mm256_srli_epi32(x, n), _mm256_slli_epi32(x, 32 - n));
}

#define TL_B3_G8(a, b, c, d, x, y)                                                                 \
    do {                                                                                           \
        v[a] = _mm256_add_epi32(_mm256_add_epi32(v[a], v[b]), (x));                                \
        v[d] = tl_b3_rot16(_mm256_xor_si256(v[d], v[a]));                                          \
        v[c] = _mm256_add_epi32(v[c], v[d]);                                                       \
        v[b] = tl_b3_rotn(_mm256_xor_si256(v[b], v[c]), 12);                                       \
        v[a] = _mm256_add_epi32(_mm256_add_epi32(v[a], v[b]), (y));                                \
        v[d] = tl_b3_rot8(_mm256_xor_si256(v[d], v[a]));                                           \
        v[c] = _mm256_add_epi32(v[c], v[d]);                                                       \
        v[b] = tl_b3_rotn(_mm256_xor_si256(v[b], v[c]), 7);                                        \
    } while (0)

/* Words 8h .. 8h+7 of block `b` of the eight chunks, transposed: m[i] lane j = chunk j. */
TL_AVX2 static void tl_b3_load8(const unsigned char *const p[8], size_t at, __m256i m[8])
{
    __m256i r[8], t[8], u[8];
    unsigned j;
    for (j = 0; j < 8; j++) {
        r[j] = _mm256_loadu_si256((const __m256i *)(p[j] + at));
    }
    for (j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_epi32(r[j], r[j + 1]);
        t[j + 1] = _mm256_unpackhi_epi32(r[j], r[j + 1]);
    }
    for (j = 0; j < 8; j += 4) {
        u[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);
        u[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);
        u[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);
        u[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    for (j = 0; j < 4; j++) {
        m[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
        m[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
    }
}

TL_AVX2 void tl_b3_chunks8_avx2(const unsigned char *const p[8], const uint64_t ctr[8],
                                uint32_t *const cvs[8])
{
    __m256i h[8], v[16], m[16], lo, hi;
    uint32_t lanes[8];
    unsigned b, r, i, j;

    for (i = 0; i < 8; i++) {
        h[i] = _mm256_set1_epi32((int)tl_b3_iv[i]);
    }
    lo = _mm256_set_epi32((int)(uint32_t)ctr[7], (int)(uint32_t)ctr[6], (int)(uint32_t)ctr[5],
                          (int)(uint32_t)ctr[4], (int)(uint32_t)ctr[3], (int)(uint32_t)ctr[2],
                          (int)(uint32_t)ctr[1], (int)(uint32_t)ctr[0]);
    hi = _mm256_set_epi32((int)(uint32_t)(ctr[7] >> 32), (int)(uint32_t)(ctr[6] >> 32),
                          (int)(uint32_t)(ctr[5] >> 32), (int)(uint32_t)(ctr[4] >> 32),
                          (int)(uint32_t)(ctr[3] >> 32), (int)(uint32_t)(ctr[2] >> 32),
                          (int)(uint32_t)(ctr[1] >> 32), (int)(uint32_t)(ctr[0] >> 32));
    for (b = 0; b < 16; b++) {
        uint32_t flags = (b == 0 ? TL_B3_CHUNK_START : 0) | (b == 15 ? TL_B3_CHUNK_END : 0);
        tl_b3_load8(p, 64 * b, m);
        tl_b3_load8(p, 64 * b + 32, m + 8);
        for (i = 0; i < 8; i++) {
            v[i] = h[i];
        }
        for (i = 0; i < 4; i++) {
            v[8 + i] = _mm256_set1_epi32((int)tl_b3_iv[i]);
        }
        v[12] = lo;
        v[13] = hi;
        v[14] = _mm256_set1_epi32(64);
        v[15] = _mm256_set1_epi32((int)flags);
        for (r = 0; r < 7; r++) {
            const unsigned char *w = tl_b3_sched[r];
            TL_B3_G8(0, 4, 8, 12, m[w[0]], m[w[1]]);
            TL_B3_G8(1, 5, 9, 13, m[w[2]], m[w[3]]);
            TL_B3_G8(2, 6, 10, 14, m[w[4]], m[w[5]]);
            TL_B3_G8(3, 7, 11, 15, m[w[6]], m[w[7]]);
            TL_B3_G8(0, 5, 10, 15, m[w[8]], m[w[9]]);
            TL_B3_G8(1, 6, 11, 12, m[w[10]], m[w[11]]);
            TL_B3_G8(2, 7, 8, 13, m[w[12]], m[w[13]]);
            TL_B3_G8(3, 4, 9, 14, m[w[14]], m[w[15]]);
        }
        for (i = 0; i < 8; i++) {
            h[i] = _mm256_xor_si256(v[i], v[i + 8]);
        }
    }
    for (i = 0; i < 8; i++) {
        _mm256_storeu_si256((__m256i *)lanes, h[i]);
        for (j = 0; j < 8; j++) {
            cvs[j][i] = lanes[j];
        }
    }
}

#endif
