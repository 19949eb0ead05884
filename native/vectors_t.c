/*
 * The exact scan's tightening between the coarse bound and the int8 one: the low nibbles'
 * top bits of the codes, bit-sliced, dotted with the query for the vectors a coarse bound
 * keeps. The Python specification is threadloom/core/planes.py (`tops`, `tighten`); every
 * double is computed in the same order (ISO C99, no contraction), so the results are
 * equal bit for bit.
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

/* The query's codes dotted with a vector's top bits (tl_vector_tops' layout). */
static int64_t tl_top_dot_portable(const uint8_t *t, const int8_t *even, const int8_t *odd,
                                   size_t width, size_t from)
{
    int64_t total = 0;
    size_t e;
    for (e = from; e < width; e++) {
        size_t row = 2 * (e / 32), at = 32 * (row / 8) + e % 32;
        total += (int32_t)((t[at] >> (row % 8)) & 1) * (int32_t)even[e] +
                 (int32_t)((t[at] >> (row % 8 + 1)) & 1) * (int32_t)odd[e];
    }
    return total;
}

#if TL_HAVE_X86_SIMD
/* The same with AVX2, 64 dims a step (a lane gains at most 4 * 128 a step). */
__attribute__((target("avx2"))) static int64_t tl_top_dot_avx2(const uint8_t *t,
                                                               const int8_t *even,
                                                               const int8_t *odd, size_t width)
{
    const __m256i bit = _mm256_set1_epi8(1);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256(), rows = _mm256_setzero_si256(), sum;
    __m128i half;
    size_t e = 0;
    for (; e + 32 <= width; e += 32) {
        __m256i qe = _mm256_loadu_si256((const __m256i *)(const void *)(even + e));
        __m256i qo = _mm256_loadu_si256((const __m256i *)(const void *)(odd + e));
        if (e % 128 == 0) {
            rows = _mm256_loadu_si256((const __m256i *)(const void *)(t + e / 4));
        }
        sum = _mm256_add_epi16(
            _mm256_maddubs_epi16(_mm256_and_si256(rows, bit), qe),
            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(rows, 1), bit), qo));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(sum, ones));
        rows = _mm256_srli_epi16(rows, 2);
    }
    half = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0x4E));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0xB1));
    return _mm_cvtsi128_si32(half) + tl_top_dot_portable(t, even, odd, width, e);
}
#endif

int64_t tl_vector_tighten(const int8_t *query_split, const double *query_params,
                          const int64_t *raw, const uint8_t *tops, const double *params,
                          const double *tight, size_t count, size_t dims, int metric,
                          unsigned features, double at_least, double below,
                          const double *coarse, double *bounds)
{
    size_t i, width = (dims + 1) / 2, stride = tl_t_stride(width);
    int64_t total, reaching = 0;
    double norm, qs, qn, qr, tiny;
    if (!tl_p_check(features, metric, dims, query_split, query_params) ||
        (count > 0 && (raw == NULL || tops == NULL || params == NULL || tight == NULL ||
                       coarse == NULL || bounds == NULL))) {
        return TL_EINVAL;
    }
    tl_p_query(query_split, width, &total, &norm);
    qs = query_params[0];
    qn = query_params[1];
    qr = query_params[2];
    tiny = (double)dims * ldexp(1.0, -149);
    for (i = 0; i < count; i++) {
        const double *p = params + TL_T_PARAMS * i;
        const uint8_t *t = tops + i * stride;
        double dot, bound;
        int64_t top;
        if (coarse[i] >= below || !(coarse[i] >= at_least)) {
            continue;
        }
#if TL_HAVE_X86_SIMD
        top = (features & TL_HW_AVX2) ? tl_top_dot_avx2(t, query_split, query_split + width, width)
                                      : tl_top_dot_portable(t, query_split, query_split + width,
                                                            width, 0);
#else
        top = tl_top_dot_portable(t, query_split, query_split + width, width, 0);
#endif
        dot = (double)(16 * raw[i] - 128 * total + 8 * top) + 3.5 * (double)total +
              (norm * tight[i]) * TL_T_UP;
        bound = tl_p_bound(metric, (qs * p[0]) * dot +
                                       (qr * p[1] + (qn + qr) * p[2] + TL_T_SLACK * (qn * p[1]) +
                                        tiny),
                           qn, p[1], tiny);
        bounds[i] = bound < coarse[i] ? bound : coarse[i];
        reaching += bounds[i] >= at_least;
    }
    return reaching;
}
