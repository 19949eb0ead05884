/*
 * threadloom native core: the ABI.
 *
 * Plain C99. The pure-Python modules under src/threadloom/core/ are the
 * specification; every function here returns exactly what its Python twin
 * returns (golden vectors and differential tests hold the two together).
 *
 * Conventions shared by every function below:
 *   - Every symbol starts with `tl_`. There is no mutable global state, so every
 *     function is reentrant and may run concurrently on any number of threads,
 *     as long as two calls never write the same output buffer and no input
 *     buffer is modified during a call.
 *   - The caller owns every buffer, input and output; nothing is allocated on
 *     the heap, nothing is retained after a call returns.
 *   - Hex output is lowercase ASCII and NOT NUL-terminated.
 *   - `features` selects hardware paths: pass the value `tl_cpu_features()`
 *     returned on this machine (cache it: it runs CPUID, which costs
 *     microseconds in a virtual machine), or 0 to force the portable code.
 *     Passing a bit `tl_cpu_features()` did not return is undefined behaviour
 *     (an illegal instruction). Unknown bits make a function return TL_EINVAL.
 *   - Errors are negative return values; on error the contents of output
 *     buffers are unspecified.
 *
 * The section between the CDEF markers is also the cffi cdef (native/build.py),
 * so it holds only declarations cffi can parse: no macros, no attributes.
 */
#ifndef THREADLOOM_H
#define THREADLOOM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF-BEGIN */

enum {
    TL_OK = 0,
    TL_ENOTARRAY = -1, /* tl_msgpack_array_spans: not exactly one msgpack array */
    TL_EINVAL = -2,    /* an argument breaks a checked precondition */
    TL_ENOSPC = -3     /* an output buffer is too small */
};

enum {
    TL_HW_SHA = 1,      /* x86 SHA extensions (SHA-NI) with SSSE3 and SSE4.1 */
    TL_HW_AVX2 = 2,     /* x86 AVX2 and FMA, with ymm state saved by the OS (vector kernels) */
    TL_CHUNK_SIZE = 32, /* element refs per chunk (SPEC §1.1 CHUNK_SIZE) */
    TL_REF_STRIDE = 67  /* bytes per ref in a refs buffer: `e-`/`c-`/`b-`, 64 hex, '\n' */
};

/*
 * A batch of N typed payloads (LangGraph's `(kind, payload)`), as two
 * concatenated byte buffers and the length of each element's part of them:
 * element i's payload is the payload_lengths[i] bytes of `payloads` that
 * follow those of elements 0 .. i-1, and its kind likewise the kind_lengths[i]
 * bytes of `kinds`; when kind_lengths is NULL every element has the same kind,
 * all of kinds[0 .. kinds_len). The lengths must not add up to more than their
 * buffer (checked: TL_EINVAL). payload_lengths may be NULL only when N is 0, a
 * buffer pointer only when its length is 0. Kinds are hashed as given (UTF-8
 * in the protocol).
 */
typedef struct tl_batch {
    size_t count;
    const unsigned char *kinds;
    size_t kinds_len;
    const uint64_t *kind_lengths;
    const unsigned char *payloads;
    size_t payloads_len;
    const uint64_t *payload_lengths;
} tl_batch;

/*
 * Return the TL_HW_* bits usable on this CPU by this build (0 when the build
 * has no hardware path or the CPU lacks it).
 * Cost: one or two CPUID instructions (about 3 microseconds in a VM): call it
 * once per process and pass the result to the functions below.
 * Thread safety: any thread, any time.
 */
unsigned tl_cpu_features(void);

/*
 * SHA-256 of one buffer: out[0..32) = sha256(data[0..len)).
 * Preconditions: data readable for len bytes (NULL allowed when len == 0);
 * out writable for 32 bytes; features as described in the header comment.
 * Returns TL_OK, or TL_EINVAL for unknown feature bits or a NULL pointer.
 * Complexity: O(len), one pass, no allocation. Thread safety: reentrant.
 */
int tl_sha256(const unsigned char *data, size_t len, unsigned features, unsigned char *out);

/*
 * Protocol refs of one list value (SPEC §3.1, §3.2, §4.2 step 3), in one call.
 *
 * For the N elements of `batch` and their C = ceil(N / 32) chunks, writes
 * N + C + 1 refs to `refs`, one per TL_REF_STRIDE (67) bytes: ref k is
 * refs[67*k .. 67*k+66), a two-letter prefix and 64 lowercase hex digits, and
 * refs[67*k+66] is '\n'. In order:
 *   k < N       `e-` sha256(kind_k ‖ \0 ‖ payload_k)                 (element refs)
 *   N + j       `c-` sha256(text_j) for chunk j, the 32 consecutive   (chunk refs)
 *               entries from element 32*j on (the last chunk shorter),
 *               text_j = json.dumps([["e-<hex>", <payload length>], ...])
 *   N + C       `b-` sha256("l" ‖ json.dumps(["c-<hex>", ...]))        (the list blob)
 * so the first 67*(N+C+1) - 1 bytes are the refs joined by '\n'.
 * JSON text is Python's json.dumps with default separators: `, ` and no
 * spaces inside brackets, e.g. `[["e-<64 hex>", 6], ["e-<64 hex>", 1027]]`.
 * N = 0 gives no chunk and hashes `l[]`.
 *
 * Optional output: when chunk_text is not NULL, the chunk texts are written
 * back to back into chunk_text[0 .. chunk_text_cap) and chunk_text_offsets
 * (C + 1 entries) receives their boundaries, text j being
 * chunk_text[offsets[j] .. offsets[j+1]). tl_refs_text_capacity(N) is always
 * enough; a smaller chunk_text_cap that cannot hold the exact texts gives
 * TL_ENOSPC before anything is hashed. When chunk_text is NULL, chunk_text_cap
 * and chunk_text_offsets are ignored.
 *
 * Preconditions: batch valid (see tl_batch); refs writable for 67*(N+C+1) bytes.
 * Returns TL_OK, TL_EINVAL (bad batch or flags, NULL refs) or TL_ENOSPC.
 * Complexity: O(total kind + payload bytes + N), two messages hashed at once;
 * no allocation (chunk texts are built in two 3 KiB stack buffers when
 * chunk_text is NULL). Thread safety: reentrant.
 */
int tl_refs(const tl_batch *batch, unsigned features, char *refs, char *chunk_text,
            size_t chunk_text_cap, uint64_t *chunk_text_offsets);

/*
 * Upper bound of the chunk text bytes tl_refs writes for `count` elements:
 * 94 per element (an entry with a 20-digit length and its separator) plus 2
 * per chunk. Returns 0 when the bound would overflow size_t.
 * Complexity: O(1). Thread safety: reentrant.
 */
size_t tl_refs_text_capacity(size_t count);

/*
 * Value-blob refs of many typed payloads (SPEC §3.1 `b-`, domain `v`): ref i,
 * at refs[67*i .. 67*i+66) followed by '\n' (the TL_REF_STRIDE layout of
 * tl_refs), is `b-` sha256("v" ‖ kind_i ‖ \0 ‖ payload_i).
 * Preconditions: batch valid; refs writable for 67*N bytes.
 * Returns TL_OK or TL_EINVAL. Complexity: O(total bytes + N), two messages
 * hashed at once; no allocation. Thread safety: reentrant.
 */
int tl_value_blob_refs(const tl_batch *batch, unsigned features, char *refs);

/*
 * Content-defined chunking (FastCDC: gear hash, cut-point skipping,
 * normalized chunking level 2) of data[0 .. len): writes the end offset of
 * every chunk, in order, to cuts[0 .. count) and returns count. The last cut
 * is len; an empty buffer has no chunks (returns 0).
 *
 * Chunk rule, from each chunk start s: if len - s <= min_size the rest is one
 * chunk. Otherwise fp = 0 and, for offsets i = min_size, min_size + 1, ... below
 * min(max_size, len - s): fp = 2*fp + GEAR[data[s + i]] (mod 2^64); the chunk
 * ends after byte i at the first i where fp AND mask == 0, where mask is the
 * top b+2 bits of fp while i < avg_size and the top b-2 bits from avg_size on,
 * b = floor(log2(avg_size)); without such an i the chunk is
 * min(max_size, len - s) bytes. Every chunk but the last has more than
 * min_size bytes (exactly min_size when max_size == min_size) and at most
 * max_size, so there are at most len / min_size + 1 chunks.
 *
 * Preconditions: data readable for len bytes (NULL allowed when len == 0);
 * 1 <= min_size <= avg_size <= max_size; 8 <= avg_size <= 2^32 (checked:
 * TL_EINVAL); cuts writable for cap entries (TL_ENOSPC when more cuts exist;
 * len / min_size + 1 entries always suffice).
 * Complexity: O(len) with a two-operation inner loop; bytes within min_size of
 * a chunk start are skipped, not hashed. No allocation. Thread safety: reentrant.
 */
int64_t tl_cdc_cuts(const unsigned char *data, size_t len, size_t min_size, size_t avg_size,
                    size_t max_size, uint64_t *cuts, size_t cap);

/*
 * Element boundaries of a msgpack array without decoding it (the Python
 * spec is threadloom.core.msgpack.array_spans).
 * When data[0 .. len) is exactly one msgpack array of n well-formed values
 * (fixarray, array16 or array32 header), writes offsets[0] = the header size
 * and offsets[k + 1] = the end of element k, then returns n; element k spans
 * data[offsets[k] .. offsets[k+1]).
 * Returns TL_ENOTARRAY when data is not exactly one such array (other header,
 * truncated, reserved byte 0xc1, trailing bytes), including a header that
 * declares more elements than bytes follow it.
 * Sizing: with offsets == NULL the function only reads the header and returns
 * its n (or TL_ENOTARRAY) in O(1); allocate n + 1 entries and call again.
 * TL_ENOSPC when cap < n + 1 (checked before any element is scanned);
 * TL_EINVAL for a NULL data pointer with len > 0.
 * Complexity: O(len), iterative (nesting depth costs no stack). No allocation.
 * Thread safety: reentrant.
 */
int64_t tl_msgpack_array_spans(const unsigned char *data, size_t len, uint64_t *offsets,
                               size_t cap);

/*
 * Vector kernels (the Store's vector index; Python spec threadloom.core.similarity).
 *
 * Vectors are `dims` IEEE float32 values in host order, a matrix is `count`
 * vectors back to back; every float pointer must be 4-byte aligned. Scores
 * are "higher is better" similarities:
 *   TL_COSINE          a.b / (|a| |b|), clamped to [-1, 1]; 0 when either is zero
 *   TL_L2              -|a - b| (minus the euclidean distance)
 *   TL_INNER_PRODUCT   a.b
 * Sums run in float32 lanes (the spec sums in double): a score is within
 * 1e-5 * |a| |b| of the spec's for TL_INNER_PRODUCT, within 1e-5 for
 * TL_COSINE, and within 1e-5 * (|a| + |b|) for TL_L2, when no partial sum
 * overflows float32. Non-finite inputs give non-finite or meaningless scores.
 */
enum {
    TL_COSINE = 0,
    TL_L2 = 1,
    TL_INNER_PRODUCT = 2
};

/*
 * scores[i] = similarity(query, matrix row i) for i < count, per `metric`.
 * Preconditions: dims >= 1; query readable for dims floats; matrix for
 * count * dims; scores writable for count doubles (matrix and scores may be
 * NULL when count is 0); metric one of TL_COSINE, TL_L2, TL_INNER_PRODUCT.
 * Returns TL_OK, or TL_EINVAL for a bad metric, feature bits or pointer.
 * Complexity: O(count * dims), no allocation. Thread safety: reentrant.
 */
int tl_vector_scores(const float *query, const float *matrix, size_t count, size_t dims,
                     int metric, unsigned features, double *scores);

/*
 * nearest[i] = the index j < k of the centroid that scores best against
 * vector i (the similarity of tl_vector_scores), the lowest j among exact
 * ties. Ranked without the terms all centroids share (|v| for TL_COSINE and
 * TL_L2), so between two centroids whose scores differ by less than the
 * stated tolerance either may be chosen.
 * Preconditions: dims >= 1; 1 <= k <= UINT32_MAX; vectors readable for
 * count * dims floats, centroids for k * dims; nearest writable for count
 * entries (vectors and nearest may be NULL when count is 0).
 * Returns TL_OK or TL_EINVAL. Complexity: O(count * k * dims), vectors taken
 * in blocks of 32 against every centroid; 384 bytes of stack, no allocation.
 * Thread safety: reentrant.
 */
int tl_vector_nearest(const float *vectors, size_t count, const float *centroids, size_t k,
                      size_t dims, int metric, unsigned features, uint32_t *nearest);

/*
 * Writes to top[0 .. m), m = min(k, count), the indices of the m best of
 * scores[0 .. count), best first: higher score first, then lower keys[i]
 * (when keys is not NULL), then lower index. Returns m.
 * Preconditions: scores readable for count doubles, keys NULL or readable for
 * count int64s, top writable for m entries (any may be NULL when m is 0).
 * Returns TL_EINVAL for a NaN score (no order) or a NULL pointer.
 * Complexity: O(count log m) (a heap in `top`), no allocation.
 * Thread safety: reentrant.
 */
int64_t tl_vector_top(const double *scores, const int64_t *keys, size_t count, size_t k,
                      uint64_t *top);

/*
 * The k-means update: counts[c] = how many i < count have assignment[i] == c,
 * and means[c] = the mean of those vectors (double sums rounded to float32),
 * scaled to unit length when `normalize` is non-zero; a centroid without
 * vectors gets zeros (and so does a zero sum when normalizing).
 * Preconditions: dims >= 1, k >= 1; vectors readable for count * dims floats
 * (NULL when count is 0), assignment for count entries each below k (checked);
 * sums writable for k * dims doubles (scratch), means for k * dims floats,
 * counts for k entries. Returns TL_OK or TL_EINVAL.
 * Complexity: O((count + k) * dims), no allocation. Thread safety: reentrant.
 */
int tl_vector_means(const float *vectors, size_t count, const uint32_t *assignment, size_t k,
                    size_t dims, int normalize, double *sums, float *means, uint64_t *counts);

/*
 * Quantize `count` vectors of `dims` float32 (the Python spec: similarity.quantize):
 * codes[i*dims + j] = floor(v_j * 127 / max|v| + 0.5) clamped to [-127, 127] (0 for a
 * zero vector); params[3*i..3*i+2] = max|v| / 127, |v|, |v - scale * codes| (doubles
 * summed in order, so equal to the spec bit for bit).
 * Preconditions: dims >= 1; vectors readable for count * dims floats, codes writable
 * for count * dims bytes, params for 3 * count doubles (all may be NULL when count is 0).
 * Returns TL_OK or TL_EINVAL. Complexity: O(count * dims), no allocation.
 * Thread safety: reentrant.
 */
int tl_vector_quantize(const float *vectors, size_t count, size_t dims, int8_t *codes,
                       double *params);

/*
 * bounds[i] = an upper bound of the exact score (tl_vector_scores, per `metric`) of the
 * query against vector i, from the int8 codes and params of tl_vector_quantize (the
 * query's too): the formula of similarity.bounds, equal to it bit for bit.
 * Preconditions: dims >= 1; query_codes readable for dims bytes, query_params for 3
 * doubles; codes for count * dims bytes, params for 3 * count doubles, bounds writable
 * for count doubles (those three may be NULL when count is 0).
 * `features`: TL_HW_AVX2 for the AVX2 integer kernel (the result is the same).
 * Returns TL_OK or TL_EINVAL. Complexity: O(count * dims) integer multiply-adds, no
 * allocation. Thread safety: reentrant.
 */
int tl_vector_bounds(const int8_t *query_codes, const double *query_params, const int8_t *codes,
                     const double *params, size_t count, size_t dims, int metric,
                     unsigned features, double *bounds);

/*
 * tl_vector_bounds over code chunks as the Store keeps them (docs/FORMAT.md, store_codes):
 * `chunks` holds chunk_count bodies back to back, body c of counts[c] vectors laid out as
 * counts[c] vector ids (int64), then as many items (int64), 3 params (double) a vector,
 * and dims int8 codes a vector, all little-endian (any alignment). For the j-th vector of
 * all the chunks in order, items[j] = its item and bounds[j] = its bound, exactly
 * tl_vector_bounds' value.
 * Preconditions: dims >= 1; query as for tl_vector_bounds; chunks readable for size bytes,
 * counts for chunk_count entries (each >= 1) whose bodies fill `size` exactly (checked
 * first: TL_EINVAL); items and bounds writable for the sum of counts.
 * Returns TL_OK or TL_EINVAL. Complexity: O(size), no allocation. Reentrant.
 */
int tl_vector_chunk_bounds(const int8_t *query_codes, const double *query_params,
                           const unsigned char *chunks, size_t size, const uint64_t *counts,
                           size_t chunk_count, size_t dims, int metric, unsigned features,
                           int64_t *items, double *bounds);

/* The int8 codes as two 4-bit planes (spec: planes.planes): with u = code + 128, byte e of a
 * vector's plane holds dim 2e's nibble low, dim 2e + 1's high (0 past the last dim); high:
 * u >> 4, low: u & 15; spread[i] = sqrt(sum (2 (u & 15) - 15)^2) / 2. codes readable for
 * count * dims bytes, high and low writable for count * ((dims + 1) / 2), spread for count. */
int tl_vector_planes(const int8_t *codes, size_t count, size_t dims, uint8_t *high,
                     uint8_t *low, double *spread);

/*
 * bounds[i] = an upper bound of vector i's score from its high plane alone (spec:
 * planes.coarse_bounds), at least tl_vector_bounds'; raw[i] = its high nibbles' dot with the
 * query's codes. query_split: the query's codes of even dims, then of odd dims, (dims + 1)
 * / 2 bytes each (0 last when dims is odd); query_params: its 3 params. high as
 * tl_vector_planes writes it, params 3 * count doubles, spread count; bounds, raw count.
 * `features`: TL_HW_AVX2 for the AVX2 kernel (the same results). */
int tl_vector_coarse_bounds(const int8_t *query_split, const double *query_params,
                            const uint8_t *high, const double *params, const double *spread,
                            size_t count, size_t dims, int metric, unsigned features,
                            double *bounds, int64_t *raw);

/* The first `cap` indices i of values[i] >= at_least (NaN never), ascending, to out (spec:
 * planes.above); returns how many there are (also past cap), or TL_EINVAL. */
int64_t tl_vector_above(const double *values, size_t count, double at_least, uint64_t *out,
                        size_t cap);

/* For each vector i with at_least <= coarse[i] < below: bounds[i] = tl_vector_bounds' bound
 * (from raw and the low plane, bit for bit) and lows[i] = a lower bound of its score by the
 * same error terms; nothing written for the others (spec: planes.refine). Buffers as
 * tl_vector_coarse_bounds'. Returns how many it refined have a bound of at least at_least. */
int64_t tl_vector_refine(const int8_t *query_split, const double *query_params,
                         const int64_t *raw, const uint8_t *low, const double *params,
                         size_t count, size_t dims, int metric, unsigned features,
                         double at_least, double below, const double *coarse, double *bounds,
                         double *lows);

/* The codes' top bits t = (u >> 3) & 1 (spec: planes.tops), 32 * ((dims + 255) / 256)
 * bytes a vector, bit-sliced: row 2s holds the even dims of plane bytes 32s..32s + 31, row
 * 2s + 1 their odd ones, row r bit r % 8 of byte e % 32 of block r / 8; tight[i] =
 * sqrt(sum (2 (u & 7) - 7)^2) / 2 (so code = 16 (h - 8) + 8 t + (u & 7)). */
int tl_vector_tops(const int8_t *codes, size_t count, size_t dims, uint8_t *tops,
                   double *tight);

/* tl_vector_coarse_bounds, tighter (spec: planes.tight_bounds): raw[i] = Q.(2 h + t) from
 * the high plane and the top bits, the dot bounded by 8 raw[i] - 128 sum Q + 3.5 sum Q +
 * |Q| tight[i]; tops and tight as tl_vector_tops'. These seven: TL_EINVAL on a bad
 * argument, O(count * dims), no allocation, reentrant. */
int tl_vector_tight_bounds(const int8_t *query_split, const double *query_params,
                           const uint8_t *high, const uint8_t *tops, const double *params,
                           const double *tight, size_t count, size_t dims, int metric,
                           unsigned features, double *bounds, int64_t *raw);

/* tl_vector_refine from tl_vector_tight_bounds' raw: dot 8 raw + Q.(l & 7) - 128 sum Q. */
int64_t tl_vector_refine_tight(const int8_t *query_split, const double *query_params,
                               const int64_t *raw, const uint8_t *low, const double *params,
                               size_t count, size_t dims, int metric, unsigned features,
                               double at_least, double below, const double *coarse,
                               double *bounds, double *lows);

/*
 * BLAKE3 of one buffer: the unkeyed hash, its default 32-byte output (the
 * content store's block keys; the Python package `blake3` is the oracle).
 * Preconditions: data readable for len bytes (NULL allowed when len == 0); out
 * writable for 32 bytes (checked: TL_EINVAL for NULL).
 * Complexity: O(len), portable scalar code (about 1 GB/s), 2 KiB of stack. No
 * allocation. Thread safety: reentrant.
 */
int tl_blake3_hash(const unsigned char *data, size_t len, unsigned char *out);

/*
 * The content-defined blocks of data and the BLAKE3 hash of each, in one call:
 * cuts exactly as tl_cdc_cuts (same arguments, same preconditions and
 * errors), and keys[32*i .. 32*i + 32) = tl_blake3_hash of block i, the bytes
 * from the previous cut (0 for the first) to cuts[i]. keys is writable for
 * 32 * cap bytes (NULL only when data is empty: TL_EINVAL otherwise).
 * `features`: TL_HW_AVX2 hashes eight whole chunks (of any blocks) at once;
 * without it, four with SSE2 on x86-64, else one.
 * Returns the number of blocks or a negative error.
 * Complexity: O(len): the chunking pass, then one hash pass. No allocation,
 * about 5 KiB of stack. Thread safety: reentrant.
 */
int64_t tl_cdc_blocks(const unsigned char *data, size_t len, size_t min_size, size_t avg_size,
                      size_t max_size, unsigned features, uint64_t *cuts, size_t cap,
                      unsigned char *keys);

/* CDEF-END */

#ifdef __cplusplus
}
#endif

#endif /* THREADLOOM_H */
