/*
 * The exact scan's tighter coarse pass: the high plane and the low nibbles' top bits of
 * the codes (bit-sliced) dotted with the query in one pass. The Python specification is
 * threadloom/core/planes.py (`tops`, `tight_bounds`); every double is computed in the same
 * order (ISO C99, no contraction), so the results are equal bit for bit.
 */
#include <math.h>
#include <stdint.h>

#include "tl_internal.h"

#if TL_HAVE_X86_SIMD
#include <immintrin.h>
#endif

#define TL_T_PARAMS 3
#define TL_T_SLACK 2e-5
/* 1 + 2**-40 (planes.UP). */
#define TL_T_UP (1.0 + 1.0 / 1099511627776.0)

/* Bytes of a vector's top bits: 32 per 128 plane bytes (256 dims). */
static size_t tl_t_stride(size_t width)
{
    return 32 * ((width + 127) / 128);
}

int tl_vector_tops(const int8_t *codes, size_t count, size_t dims, uint8_t *tops, double *tight)
{
    size_t i, j, width = (dims + 1) / 2, stride = tl_t_stride(width);
    if (dims == 0 || (count > 0 && (codes == NULL || tops == NULL || tight == NULL))) {
        return TL_EINVAL;
    }
    for (i = 0; i < count; i++) {
        const int8_t *c = codes + i * dims;
        uint8_t *t = tops + i * stride;
        int64_t total = 0;
        for (j = 0; j < stride; j++) {
            t[j] = 0;
        }
        for (j = 0; j < dims; j++) {
            unsigned u = (unsigned)((int)c[j] + 128) & 255u;
            size_t e = j / 2, row = 2 * (e / 32) + (j & 1);
            int d = 2 * (int)(u & 7u) - 7;
            t[32 * (row / 8) + e % 32] |= (uint8_t)(((u >> 3) & 1u) << (row % 8));
            total += d * d;
        }
        tight[i] = 0.5 * sqrt((double)total);
    }
    return TL_OK;
}

/* The query's codes dotted with 2 h + t of one vector, from plane byte `from` on (h: its
 * high plane, t: its top bits). */
static int64_t tl_tight_dot_portable(const uint8_t *h, const uint8_t *t, const int8_t *even,
                                     const int8_t *odd, size_t width, size_t from)
{
    int64_t total = 0;
    size_t e;
    for (e = from; e < width; e++) {
        size_t row = 2 * (e / 32), at = 32 * (row / 8) + e % 32;
        total += (int32_t)(2 * (h[e] & 15) + ((t[at] >> (row % 8)) & 1)) * (int32_t)even[e] +
                 (int32_t)(2 * (h[e] >> 4) + ((t[at] >> (row % 8 + 1)) & 1)) * (int32_t)odd[e];
    }
    return total;
}

#if TL_HAVE_X86_SIMD
/* The same with AVX2, 64 dims a step: 2 h + t (at most 31) built in each byte, one maddubs
 * per half (a lane gains at most 4 * 31 * 128 a step: 8192 steps keep it below 2**31). */
__attribute__((target("avx2"))) static int64_t tl_tight_dot_avx2(const uint8_t *h,
                                                                 const uint8_t *t,
                                                                 const int8_t *even,
                                                                 const int8_t *odd,
                                                                 size_t width)
{
    const __m256i twice = _mm256_set1_epi8(30), bit = _mm256_set1_epi8(1);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i rows = _mm256_setzero_si256();
    int64_t total = 0;
    size_t e = 0, steps;
    while (e + 32 <= width) {
        __m256i acc = _mm256_setzero_si256();
        __m128i sum;
        for (steps = 0; steps < 8192 && e + 32 <= width; steps++, e += 32) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(h + e));
            __m256i qe = _mm256_loadu_si256((const __m256i *)(const void *)(even + e));
            __m256i qo = _mm256_loadu_si256((const __m256i *)(const void *)(odd + e));
            __m256i lo, hi;
            if (e % 128 == 0) {
                rows = _mm256_loadu_si256((const __m256i *)(const void *)(t + e / 4));
            }
            lo = _mm256_or_si256(_mm256_and_si256(_mm256_add_epi8(x, x), twice),
                                 _mm256_and_si256(rows, bit));
            hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x, 3), twice),
                                 _mm256_and_si256(_mm256_srli_epi16(rows, 1), bit));
            rows = _mm256_srli_epi16(rows, 2);
            acc = _mm256_add_epi32(
                acc, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, qe),
                                                        _mm256_maddubs_epi16(hi, qo)),
                                       ones));
        }
        sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
        sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
        total += _mm_cvtsi128_si32(sum);
    }
    return total + tl_tight_dot_portable(h, t, even, odd, width, e);
}
#endif

int tl_vector_tight_bounds(const int8_t *query_split, const double *query_params,
                           const uint8_t *high, const uint8_t *tops, const double *params,
                           const double *tight, size_t count, size_t dims, int metric,
                           unsigned features, double *bounds, int64_t *raw)
{
    size_t i, width = (dims + 1) / 2, stride = tl_t_stride(width);
    int64_t total;
    double norm, qs, qn, qr, tiny;
    if (!tl_p_check(features, metric, dims, query_split, query_params) ||
        (count > 0 && (high == NULL || tops == NULL || params == NULL || tight == NULL ||
                       bounds == NULL || raw == NULL))) {
        return TL_EINVAL;
    }
    tl_p_query(query_split, query_params, dims, &total, &norm, &qs, &qn, &qr, &tiny);
    for (i = 0; i < count; i++) {
        const double *p = params + TL_T_PARAMS * i;
        const uint8_t *h = high + i * width, *t = tops + i * stride;
        int64_t dot2;
        double dot;
#if TL_HAVE_X86_SIMD
        dot2 = (features & TL_HW_AVX2)
                   ? tl_tight_dot_avx2(h, t, query_split, query_split + width, width)
                   : tl_tight_dot_portable(h, t, query_split, query_split + width, width, 0);
#else
        dot2 = tl_tight_dot_portable(h, t, query_split, query_split + width, width, 0);
#endif
        dot = (double)(8 * dot2 - 128 * total) + 3.5 * (double)total +
              (norm * tight[i]) * TL_T_UP;
        bounds[i] = tl_p_bound(metric,
                               (qs * p[0]) * dot + (qr * p[1] + (qn + qr) * p[2] +
                                                    TL_T_SLACK * (qn * p[1]) + tiny),
                               qn, p[1], tiny);
        raw[i] = dot2;
    }
    return TL_OK;
}
