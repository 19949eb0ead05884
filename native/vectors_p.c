/*
 * The quantized scan over two 4-bit planes of the int8 codes: a coarse bound
 * of every vector from its high plane (half the bytes of the codes), then the
 * int8 bound of the few vectors a search keeps, from both planes. The Python
 * specification is threadloom/core/planes.py; every double here is computed
 * in the same order (ISO C99, no contraction), so the results are equal bit
 * for bit. A plane byte holds dim 2e in its low nibble, dim 2e + 1 in its
 * high one; the query comes split (even dims, then odd dims) to meet them.
 */
#include <math.h>
#include <stdint.h>

#include "tl_internal.h"

#if TL_HAVE_X86_SIMD
#include <immintrin.h>
#endif

#define TL_P_PARAMS 3
#define TL_P_SLACK 2e-5
/* 2**-60 (similarity.COSINE_TINY). */
#define TL_P_COSINE_TINY (1.0 / 1152921504606846976.0)
/* 1 + 2**-40 (planes.UP). */
#define TL_P_UP (1.0 + 1.0 / 1099511627776.0)

/* sum over e < width of (p[e] & mask) * even[e] + ((p[e] >> 4) & mask) * odd[e]. */
static int64_t tl_nibble_dot_portable(const uint8_t *p, const int8_t *even, const int8_t *odd,
                                      size_t width, int mask)
{
    int64_t total = 0;
    size_t e;
    for (e = 0; e < width; e++) {
        total += (int32_t)(p[e] & mask) * (int32_t)even[e] +
                 (int32_t)((p[e] >> 4) & mask) * (int32_t)odd[e];
    }
    return total;
}

#if TL_HAVE_X86_SIMD
/* The same with AVX2: 64 dims a step; a lane gains at most 4 * 15 * 127 a step, so
 * 8192 steps keep the 8 lanes' sum below 2**31. */
__attribute__((target("avx2"))) static int64_t tl_nibble_dot_avx2(const uint8_t *p,
                                                                   const int8_t *even,
                                                                   const int8_t *odd,
                                                                   size_t width, int bits)
{
    const __m256i mask = _mm256_set1_epi8((char)bits);
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t total = 0;
    size_t e = 0, steps;
    while (e + 32 <= width) {
        __m256i acc = _mm256_setzero_si256();
        __m128i sum;
        for (steps = 0; steps < 8192 && e + 32 <= width; steps++, e += 32) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(p + e));
            __m256i lo = _mm256_and_si256(x, mask);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), mask);
            __m256i qe = _mm256_loadu_si256((const __m256i *)(const void *)(even + e));
            __m256i qo = _mm256_loadu_si256((const __m256i *)(const void *)(odd + e));
            __m256i pairs =
                _mm256_add_epi16(_mm256_maddubs_epi16(lo, qe), _mm256_maddubs_epi16(hi, qo));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
        }
        sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
        sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
        total += _mm_cvtsi128_si32(sum);
    }
    return total + tl_nibble_dot_portable(p + e, even + e, odd + e, width - e, bits);
}
#endif

static int64_t tl_nibble_dot(unsigned features, const uint8_t *p, const int8_t *even,
                             const int8_t *odd, size_t width, int mask)
{
#if TL_HAVE_X86_SIMD
    if (features & TL_HW_AVX2) {
        return tl_nibble_dot_avx2(p, even, odd, width, mask);
    }
#endif
    (void)features;
    return tl_nibble_dot_portable(p, even, odd, width, mask);
}

/* similarity._bound: the score bound from `high` = approx + error. */
TL_INTERNAL double tl_p_bound(int metric, double high, double qn, double vn, double tiny)
{
    double squared;
    if (metric == TL_INNER_PRODUCT) {
        return high;
    }
    if (metric == TL_COSINE) {
        return (qn < TL_P_COSINE_TINY || vn < TL_P_COSINE_TINY) ? 1.0
                                                                : high / (qn * vn) + TL_P_SLACK;
    }
    squared = qn * qn + vn * vn - 2.0 * high;
    return -sqrt(squared > 0.0 ? squared : 0.0) + (TL_P_SLACK * (qn + vn) + sqrt(tiny));
}

/* planes._low: the score's lower bound from `low` = approx - error. */
static double tl_p_low(int metric, double low, double qn, double vn, double tiny)
{
    double squared;
    if (metric == TL_INNER_PRODUCT) {
        return low;
    }
    if (metric == TL_COSINE) {
        return (qn < TL_P_COSINE_TINY || vn < TL_P_COSINE_TINY) ? -1.0
                                                                : low / (qn * vn) - TL_P_SLACK;
    }
    squared = qn * qn + vn * vn - 2.0 * low;
    return -sqrt(squared > 0.0 ? squared : 0.0) - (TL_P_SLACK * (qn + vn) + sqrt(tiny));
}

int tl_vector_planes(const int8_t *codes, size_t count, size_t dims, uint8_t *high,
                     uint8_t *low, double *spread)
{
    size_t i, j, width = (dims + 1) / 2;
    if (dims == 0 || (count > 0 && (codes == NULL || high == NULL || low == NULL ||
                                    spread == NULL))) {
        return TL_EINVAL;
    }
    for (i = 0; i < count; i++) {
        const int8_t *c = codes + i * dims;
        uint8_t *h = high + i * width, *l = low + i * width;
        int64_t total = 0;
        for (j = 0; j < width; j++) {
            unsigned u0 = (unsigned)((int)c[2 * j] + 128) & 255u;
            unsigned u1 = 2 * j + 1 < dims ? (unsigned)((int)c[2 * j + 1] + 128) & 255u : 0u;
            int d0 = 2 * (int)(u0 & 15u) - 15, d1 = 2 * (int)(u1 & 15u) - 15;
            h[j] = (uint8_t)((u0 >> 4) | ((u1 >> 4) << 4));
            l[j] = (uint8_t)((u0 & 15u) | ((u1 & 15u) << 4));
            total += d0 * d0 + (2 * j + 1 < dims ? d1 * d1 : 0);
        }
        spread[i] = 0.5 * sqrt((double)total);
    }
    return TL_OK;
}

/* The query's sum of codes and |codes| (planes._query), its three params (scale, norm,
 * residual) and similarity.FLOAT32_TINY for `dims`. */
TL_INTERNAL void tl_p_query(const int8_t *split, const double *params, size_t dims,
                            int64_t *total, double *norm, double *qs, double *qn, double *qr,
                            double *tiny)
{
    int64_t sum = 0, squares = 0;
    size_t e, width = (dims + 1) / 2;
    for (e = 0; e < 2 * width; e++) {
        sum += split[e];
        squares += (int64_t)split[e] * split[e];
    }
    *total = sum;
    *norm = sqrt((double)squares);
    *qs = params[0];
    *qn = params[1];
    *qr = params[2];
    *tiny = (double)dims * ldexp(1.0, -149);
}

TL_INTERNAL int tl_p_check(unsigned features, int metric, size_t dims, const int8_t *query_split,
                      const double *query_params)
{
    return (features & ~TL_KNOWN_FEATURES) == 0 &&
           (metric == TL_COSINE || metric == TL_L2 || metric == TL_INNER_PRODUCT) && dims > 0 &&
           query_split != NULL && query_params != NULL;
}

int tl_vector_coarse_bounds(const int8_t *query_split, const double *query_params,
                            const uint8_t *high, const double *params, const double *spread,
                            size_t count, size_t dims, int metric, unsigned features,
                            double *bounds, int64_t *raw)
{
    size_t i, width = (dims + 1) / 2;
    int64_t total;
    double norm, qs, qn, qr, tiny;
    if (!tl_p_check(features, metric, dims, query_split, query_params) ||
        (count > 0 &&
         (high == NULL || params == NULL || spread == NULL || bounds == NULL || raw == NULL))) {
        return TL_EINVAL;
    }
    tl_p_query(query_split, query_params, dims, &total, &norm, &qs, &qn, &qr, &tiny);
    for (i = 0; i < count; i++) {
        const double *p = params + TL_P_PARAMS * i;
        double vs = p[0], vn = p[1], vr = p[2];
        int64_t dot_high =
            tl_nibble_dot(features, high + i * width, query_split, query_split + width, width,
                          15);
        double dot = (double)(16 * dot_high - 128 * total) + 7.5 * (double)total +
                     (norm * spread[i]) * TL_P_UP;
        double approx = (qs * vs) * dot;
        double sum = approx + (qr * vn + (qn + qr) * vr + TL_P_SLACK * (qn * vn) + tiny);
        bounds[i] = tl_p_bound(metric, sum, qn, vn, tiny);
        raw[i] = dot_high;
    }
    return TL_OK;
}

int64_t tl_vector_above(const double *values, size_t count, double at_least, uint64_t *out,
                        size_t cap)
{
    size_t i, j;
    int64_t found = 0;
    if (count > INT64_MAX || (count > 0 && values == NULL) || (cap > 0 && out == NULL)) {
        return TL_EINVAL;
    }
    /* Blocks of 64 are counted first (a loop the compiler vectorizes: the values at least
     * at_least are few), and only a block with some is walked for their indices. */
    for (i = 0; i < count; i += 64) {
        size_t end = count - i < 64 ? count : i + 64;
        int64_t hits = 0;
        for (j = i; j < end; j++) {
            hits += values[j] >= at_least;
        }
        if (hits == 0 || (size_t)found >= cap) {
            found += hits;
            continue;
        }
        for (j = i; j < end; j++) {
            if (values[j] >= at_least) {
                if ((size_t)found < cap) {
                    out[found] = j;
                }
                found++;
            }
        }
    }
    return found;
}

/* Candidates gathered before they are refined, and how far ahead their memory is asked
 * for: the refined vectors are scattered, so each would otherwise wait for DRAM. */
#define TL_P_BLOCK 64
#define TL_P_AHEAD 12

#if defined(__GNUC__)
#define TL_P_PREFETCH(p) __builtin_prefetch((const void *)(p))
#else
#define TL_P_PREFETCH(p) ((void)(p))
#endif

static void tl_p_prefetch(const uint8_t *low, const double *params, const int64_t *raw,
                          size_t i, size_t width)
{
    size_t line;
    for (line = 0; line < width; line += 64) {
        TL_P_PREFETCH(low + i * width + line);
    }
    TL_P_PREFETCH(params + TL_P_PARAMS * i);
    TL_P_PREFETCH(raw + i);
}

/* tl_vector_refine (tight 0: raw = Q.h, dot = 16 raw + Q.l - 128 sum Q) and
 * tl_vector_refine_tight (tight 1: raw = Q.(2 h + t), dot = 8 raw + Q.(l & 7) - 128 sum Q). */
static int64_t tl_p_refine(const int8_t *query_split, const double *query_params,
                           const int64_t *raw, const uint8_t *low, const double *params,
                           size_t count, size_t dims, int metric, unsigned features,
                           double at_least, double below, const double *coarse, double *bounds,
                           double *lows, int tight)
{
    size_t i, k, n, width = (dims + 1) / 2, block[TL_P_BLOCK];
    int64_t total, reaching = 0;
    double norm, qs, qn, qr, tiny;
    if (!tl_p_check(features, metric, dims, query_split, query_params) ||
        (count > 0 && (raw == NULL || low == NULL || params == NULL || coarse == NULL ||
                       bounds == NULL || lows == NULL))) {
        return TL_EINVAL;
    }
    tl_p_query(query_split, query_params, dims, &total, &norm, &qs, &qn, &qr, &tiny);
    i = 0;
    while (i < count) {
        for (n = 0; i < count && n < TL_P_BLOCK; i++) {
            if (coarse[i] >= below) {
                continue;
            }
            if (!(coarse[i] >= at_least)) {
                continue;
            }
            if (n < TL_P_AHEAD) {
                tl_p_prefetch(low, params, raw, i, width);
            }
            block[n++] = i;
        }
        for (k = 0; k < n; k++) {
            size_t j = block[k];
            const double *p = params + TL_P_PARAMS * j;
            double vs = p[0], vn = p[1], vr = p[2], approx, error;
            int64_t dot;
            if (k + TL_P_AHEAD < n) {
                tl_p_prefetch(low, params, raw, block[k + TL_P_AHEAD], width);
            }
            dot = (tight ? 8 : 16) * raw[j] - 128 * total +
                  tl_nibble_dot(features, low + j * width, query_split, query_split + width,
                                width, tight ? 7 : 15);
            approx = (qs * vs) * (double)dot;
            error = qr * vn + (qn + qr) * vr + TL_P_SLACK * (qn * vn) + tiny;
            bounds[j] = tl_p_bound(metric, approx + error, qn, vn, tiny);
            lows[j] = tl_p_low(metric, approx - error, qn, vn, tiny);
            reaching += bounds[j] >= at_least;
        }
    }
    return reaching;
}

int64_t tl_vector_refine(const int8_t *query_split, const double *query_params,
                         const int64_t *raw, const uint8_t *low, const double *params,
                         size_t count, size_t dims, int metric, unsigned features,
                         double at_least, double below, const double *coarse, double *bounds,
                         double *lows)
{
    return tl_p_refine(query_split, query_params, raw, low, params, count, dims, metric,
                       features, at_least, below, coarse, bounds, lows, 0);
}

int64_t tl_vector_refine_tight(const int8_t *query_split, const double *query_params,
                               const int64_t *raw, const uint8_t *low, const double *params,
                               size_t count, size_t dims, int metric, unsigned features,
                               double at_least, double below, const double *coarse,
                               double *bounds, double *lows)
{
    return tl_p_refine(query_split, query_params, raw, low, params, count, dims, metric,
                       features, at_least, below, coarse, bounds, lows, 1);
}
