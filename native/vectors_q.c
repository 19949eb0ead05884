/*
 * The quantized scan of the Store's exact vector search: int8 codes of float32
 * vectors and, for one query, an upper bound of every vector's exact score.
 * The Python specification is threadloom/core/similarity.py (quantize, bounds);
 * every double here is computed in the same order, so the results are equal
 * bit for bit (the build is ISO C99: no contraction into fused multiply-adds).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tl_internal.h"

#define TL_PARAMS 3
#define TL_BOUND_SLACK 2e-5
/* 2**-60 (similarity.COSINE_TINY): below it a cosine is bounded by 1. */
#define TL_COSINE_TINY (1.0 / 1152921504606846976.0)

int tl_vector_quantize(const float *vectors, size_t count, size_t dims, int8_t *codes,
                       double *params)
{
    size_t i, j;
    if (dims == 0 || (count > 0 && (vectors == NULL || codes == NULL || params == NULL))) {
        return TL_EINVAL;
    }
    for (i = 0; i < count; i++) {
        const float *v = vectors + i * dims;
        int8_t *c = codes + i * dims;
        double largest = 0.0, inv = 0.0, scale = 0.0, norm = 0.0, residual = 0.0, d;
        for (j = 0; j < dims; j++) {
            d = fabs((double)v[j]);
            if (d > largest) {
                largest = d;
            }
        }
        if (largest > 0.0) {
            inv = 127.0 / largest;
            scale = largest / 127.0;
        }
        for (j = 0; j < dims; j++) {
            double x = (double)v[j];
            double r = largest > 0.0 ? floor(x * inv + 0.5) : 0.0;
            if (r > 127.0) {
                r = 127.0;
            } else if (r < -127.0) {
                r = -127.0;
            }
            c[j] = (int8_t)r;
            norm += x * x;
            d = x - scale * r;
            residual += d * d;
        }
        params[TL_PARAMS * i] = scale;
        params[TL_PARAMS * i + 1] = sqrt(norm);
        params[TL_PARAMS * i + 2] = sqrt(residual);
    }
    return TL_OK;
}

/* The integer dot product of two code vectors: 32-bit lanes over blocks the
 * compiler vectorizes, summed into 64 bits every 65536 terms (no overflow). */
static int64_t tl_code_dot_portable(const int8_t *a, const int8_t *b, size_t n)
{
    int64_t total = 0;
    size_t start = 0, i, end;
    while (start < n) {
        int32_t lane = 0;
        end = n - start > 65536 ? start + 65536 : n;
        for (i = start; i < end; i++) {
            lane += (int32_t)a[i] * (int32_t)b[i];
        }
        total += lane;
        start = end;
    }
    return total;
}

static int64_t tl_code_dot(unsigned features, const int8_t *a, const int8_t *b, size_t n)
{
#if TL_HAVE_X86_SIMD
    if (features & TL_HW_AVX2) {
        return tl_code_dot_avx2(a, b, n);
    }
#endif
    (void)features;
    return tl_code_dot_portable(a, b, n);
}

/* The bound of one vector (similarity.bounds): its code dot product with the query's,
 * scaled, plus the error terms; `tiny` is dims * FLOAT32_TINY. */
static double tl_bound_one(int metric, double qs, double qn, double qr, double tiny,
                           double dot, double vs, double vn, double vr)
{
    double approx = (qs * vs) * dot;
    double high = approx + (qr * vn + (qn + qr) * vr + TL_BOUND_SLACK * (qn * vn) + tiny);
    double squared;
    if (metric == TL_INNER_PRODUCT) {
        return high;
    }
    if (metric == TL_COSINE) {
        return (qn < TL_COSINE_TINY || vn < TL_COSINE_TINY) ? 1.0
                                                            : high / (qn * vn) + TL_BOUND_SLACK;
    }
    squared = qn * qn + vn * vn - 2.0 * high;
    return -sqrt(squared > 0.0 ? squared : 0.0) + (TL_BOUND_SLACK * (qn + vn) + sqrt(tiny));
}

static int tl_bounds_args_ok(const int8_t *query_codes, const double *query_params,
                             size_t dims, int metric, unsigned features)
{
    return !(features & ~TL_KNOWN_FEATURES) &&
           (metric == TL_COSINE || metric == TL_L2 || metric == TL_INNER_PRODUCT) && dims > 0 &&
           query_codes != NULL && query_params != NULL;
}

int tl_vector_bounds(const int8_t *query_codes, const double *query_params, const int8_t *codes,
                     const double *params, size_t count, size_t dims, int metric,
                     unsigned features, double *bounds)
{
    size_t i;
    double qs, qn, qr, tiny;
    if (!tl_bounds_args_ok(query_codes, query_params, dims, metric, features) ||
        (count > 0 && (codes == NULL || params == NULL || bounds == NULL))) {
        return TL_EINVAL;
    }
    qs = query_params[0];
    qn = query_params[1];
    qr = query_params[2];
    tiny = (double)dims * ldexp(1.0, -149); /* similarity.FLOAT32_TINY, exactly */
    for (i = 0; i < count; i++) {
        const double *p = params + TL_PARAMS * i;
        double dot = (double)tl_code_dot(features, query_codes, codes + i * dims, dims);
        bounds[i] = tl_bound_one(metric, qs, qn, qr, tiny, dot, p[0], p[1], p[2]);
    }
    return TL_OK;
}

/* A little-endian 64-bit word at p (any alignment, any host byte order). */
static uint64_t tl_le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

static double tl_le_double(const unsigned char *p)
{
    uint64_t bits = tl_le64(p);
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

int tl_vector_chunk_bounds(const int8_t *query_codes, const double *query_params,
                           const unsigned char *chunks, size_t size, const uint64_t *counts,
                           size_t chunk_count, size_t dims, int metric, unsigned features,
                           int64_t *items, double *bounds)
{
    size_t c, i, at = 0, out = 0, stride = 5 * 8 + dims;
    double qs, qn, qr, tiny;
    if (!tl_bounds_args_ok(query_codes, query_params, dims, metric, features) ||
        (chunk_count > 0 && counts == NULL)) {
        return TL_EINVAL;
    }
    for (c = 0; c < chunk_count; c++) { /* every body whole before anything is read */
        if (counts[c] == 0 || counts[c] > (size - at) / stride) {
            return TL_EINVAL;
        }
        at += (size_t)counts[c] * stride;
    }
    if (at != size || (size > 0 && (chunks == NULL || items == NULL || bounds == NULL))) {
        return TL_EINVAL;
    }
    qs = query_params[0];
    qn = query_params[1];
    qr = query_params[2];
    tiny = (double)dims * ldexp(1.0, -149);
    at = 0;
    for (c = 0; c < chunk_count; c++) {
        size_t count = (size_t)counts[c];
        const unsigned char *body = chunks + at;
        const unsigned char *item = body + 8 * count, *param = body + 16 * count;
        const int8_t *codes = (const int8_t *)(body + 40 * count);
        for (i = 0; i < count; i++) {
            const unsigned char *p = param + 24 * i;
            double dot = (double)tl_code_dot(features, query_codes, codes + i * dims, dims);
            items[out] = (int64_t)tl_le64(item + 8 * i);
            bounds[out] = tl_bound_one(metric, qs, qn, qr, tiny, dot, tl_le_double(p),
                                       tl_le_double(p + 8), tl_le_double(p + 16));
            out++;
        }
        at += count * stride;
    }
    return TL_OK;
}
