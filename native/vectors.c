/*
 * Vector kernels of the Store's vector index: scores of one query against many
 * vectors, the nearest centroid of many vectors, top-k selection and k-means
 * means. The Python specification is threadloom/core/similarity.py.
 *
 * Float32 sums are kept in eight independent lanes (the portable compiler
 * vectorizes them without reassociating) or, with TL_HW_AVX2, in the kernels
 * of vectors_x86.c; both stay within the tolerance threadloom.h states of the
 * specification's double sums.
 */
#include <math.h>
#include <string.h>

#include "tl_internal.h"

static float tl_dot_portable(const float *a, const float *b, size_t n)
{
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float sum;
    size_t i = 0, j;
    for (; i + 8 <= n; i += 8) {
        for (j = 0; j < 8; j++) {
            lane[j] += a[i + j] * b[i + j];
        }
    }
    sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (; i < n; i++) {
        sum += a[i] * b[i];
    }
    return sum;
}

static float tl_l2sq_portable(const float *a, const float *b, size_t n)
{
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float sum, d;
    size_t i = 0, j;
    for (; i + 8 <= n; i += 8) {
        for (j = 0; j < 8; j++) {
            d = a[i + j] - b[i + j];
            lane[j] += d * d;
        }
    }
    sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (; i < n; i++) {
        d = a[i] - b[i];
        sum += d * d;
    }
    return sum;
}

static float tl_dot(unsigned features, const float *a, const float *b, size_t n)
{
#if TL_HAVE_X86_SIMD
    if (features & TL_HW_AVX2) {
        return tl_dot_avx2(a, b, n);
    }
#endif
    (void)features;
    return tl_dot_portable(a, b, n);
}

static float tl_l2sq(unsigned features, const float *a, const float *b, size_t n)
{
#if TL_HAVE_X86_SIMD
    if (features & TL_HW_AVX2) {
        return tl_l2sq_avx2(a, b, n);
    }
#endif
    (void)features;
    return tl_l2sq_portable(a, b, n);
}

static int tl_metric_ok(int metric)
{
    return metric == TL_COSINE || metric == TL_L2 || metric == TL_INNER_PRODUCT;
}

/* Cosine similarity from a dot product and two squared norms, as the spec rounds it. */
static double tl_cosine(double dot, double qq, double vv)
{
    double c;
    if (qq <= 0.0 || vv <= 0.0) {
        return 0.0;
    }
    c = dot / (sqrt(qq) * sqrt(vv));
    return c > 1.0 ? 1.0 : (c < -1.0 ? -1.0 : c);
}

int tl_vector_scores(const float *query, const float *matrix, size_t count, size_t dims,
                     int metric, unsigned features, double *scores)
{
    size_t i;
    double qq;
    if ((features & ~TL_KNOWN_FEATURES) || !tl_metric_ok(metric) || dims == 0 ||
        query == NULL || (count > 0 && (matrix == NULL || scores == NULL))) {
        return TL_EINVAL;
    }
    qq = tl_dot(features, query, query, dims);
    for (i = 0; i < count; i++) {
        const float *v = matrix + i * dims;
        if (metric == TL_INNER_PRODUCT) {
            scores[i] = tl_dot(features, query, v, dims);
        } else if (metric == TL_L2) {
            scores[i] = -sqrt((double)tl_l2sq(features, query, v, dims));
        } else {
            scores[i] = tl_cosine(tl_dot(features, query, v, dims), qq,
                                  tl_dot(features, v, v, dims));
        }
    }
    return TL_OK;
}

/* How a centroid ranks for the nearest search: its score is dot * scale - bias. */
static void tl_centroid_terms(int metric, double cc, double *scale, double *bias)
{
    *scale = 1.0;
    *bias = 0.0;
    if (metric == TL_L2) {
        *scale = 2.0; /* |v - c|^2 = |v|^2 - 2 v.c + |c|^2, |v|^2 the same for every c */
        *bias = cc;
    } else if (metric == TL_COSINE) {
        *scale = cc > 0.0 ? 1.0 / sqrt(cc) : 0.0; /* |v| is the same for every c */
    }
}

int tl_vector_nearest(const float *vectors, size_t count, const float *centroids, size_t k,
                      size_t dims, int metric, unsigned features, uint32_t *nearest)
{
    double best[TL_NEAREST_BLOCK];
    float dots[TL_NEAREST_BLOCK];
    size_t start, c, j;
    if ((features & ~TL_KNOWN_FEATURES) || !tl_metric_ok(metric) || dims == 0 || k == 0 ||
        k > UINT32_MAX || centroids == NULL ||
        (count > 0 && (vectors == NULL || nearest == NULL))) {
        return TL_EINVAL;
    }
    /* Blocks of vectors against every centroid: the block stays in L1 while the
       centroids stream past it, and each centroid's norm is computed once per block. */
    for (start = 0; start < count; start += TL_NEAREST_BLOCK) {
        size_t block = count - start < TL_NEAREST_BLOCK ? count - start : TL_NEAREST_BLOCK;
        const float *first = vectors + start * dims;
        for (c = 0; c < k; c++) {
            const float *centroid = centroids + c * dims;
            double scale, bias;
            tl_centroid_terms(metric, tl_dot(features, centroid, centroid, dims), &scale, &bias);
#if TL_HAVE_X86_SIMD
            if (features & TL_HW_AVX2) {
                tl_dots_avx2(centroid, first, block, dims, dots);
            } else
#endif
            {
                for (j = 0; j < block; j++) {
                    dots[j] = tl_dot_portable(centroid, first + j * dims, dims);
                }
            }
            for (j = 0; j < block; j++) {
                double score = (double)dots[j] * scale - bias;
                if (c == 0 || score > best[j]) {
                    best[j] = score;
                    nearest[start + j] = (uint32_t)c;
                }
            }
        }
    }
    return TL_OK;
}

/* True when entry a ranks after entry b: lower score, then higher key, then higher index. */
static int tl_after(const double *scores, const int64_t *keys, uint64_t a, uint64_t b)
{
    if (scores[a] != scores[b]) {
        return scores[a] < scores[b];
    }
    if (keys != NULL && keys[a] != keys[b]) {
        return keys[a] > keys[b];
    }
    return a > b;
}

/* Restore the heap below `root` in heap[0 .. size): the entry ranking last on top. */
static void tl_sift_down(uint64_t *heap, size_t size, size_t root, const double *scores,
                         const int64_t *keys)
{
    for (;;) {
        size_t child = 2 * root + 1, last = root;
        uint64_t swap;
        if (child < size && tl_after(scores, keys, heap[child], heap[last])) {
            last = child;
        }
        if (child + 1 < size && tl_after(scores, keys, heap[child + 1], heap[last])) {
            last = child + 1;
        }
        if (last == root) {
            return;
        }
        swap = heap[root];
        heap[root] = heap[last];
        heap[last] = swap;
        root = last;
    }
}

int64_t tl_vector_top(const double *scores, const int64_t *keys, size_t count, size_t k,
                      uint64_t *top)
{
    size_t size = 0, i;
    if (count > INT64_MAX || (count > 0 && scores == NULL) || (k > 0 && count > 0 && top == NULL)) {
        return TL_EINVAL;
    }
    if (k > count) {
        k = count;
    }
    if (k == 0) {
        return 0;
    }
    for (i = 0; i < count; i++) {
        if (scores[i] != scores[i]) {
            return TL_EINVAL; /* NaN has no rank */
        }
        if (size < k) {
            top[size++] = i;
            if (size == k) {
                size_t node = k / 2;
                while (node-- > 0) {
                    tl_sift_down(top, k, node, scores, keys);
                }
            }
        } else if (tl_after(scores, keys, top[0], i)) {
            top[0] = i;
            tl_sift_down(top, k, 0, scores, keys);
        }
    }
    /* Heap sort in place: the entry ranking last goes to the end each time. */
    for (size = k; size > 1; size--) {
        uint64_t swap = top[0];
        top[0] = top[size - 1];
        top[size - 1] = swap;
        tl_sift_down(top, size - 1, 0, scores, keys);
    }
    return (int64_t)k;
}

int tl_vector_means(const float *vectors, size_t count, const uint32_t *assignment, size_t k,
                    size_t dims, int normalize, double *sums, float *means, uint64_t *counts)
{
    size_t i, d;
    if (dims == 0 || k == 0 || sums == NULL || means == NULL || counts == NULL ||
        (count > 0 && (vectors == NULL || assignment == NULL))) {
        return TL_EINVAL;
    }
    memset(sums, 0, k * dims * sizeof *sums);
    memset(counts, 0, k * sizeof *counts);
    for (i = 0; i < count; i++) {
        uint32_t c = assignment[i];
        const float *v = vectors + i * dims;
        double *sum;
        if (c >= k) {
            return TL_EINVAL;
        }
        sum = sums + (size_t)c * dims;
        for (d = 0; d < dims; d++) {
            sum[d] += v[d];
        }
        counts[c]++;
    }
    for (i = 0; i < k; i++) {
        double *sum = sums + i * dims, scale = counts[i] ? 1.0 / (double)counts[i] : 0.0;
        if (normalize && counts[i]) {
            double norm = 0.0;
            for (d = 0; d < dims; d++) {
                norm += sum[d] * sum[d];
            }
            scale = norm > 0.0 ? 1.0 / sqrt(norm) : 0.0;
        }
        for (d = 0; d < dims; d++) {
            means[i * dims + d] = (float)(sum[d] * scale);
        }
    }
    return TL_OK;
}
