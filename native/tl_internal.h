/*
 * Internal declarations shared by the native sources; not part of the ABI.
 *
 * Symbols here carry the tl_ prefix too, and hidden visibility where the
 * compiler supports it, so the shared object exports only the ABI.
 */
#ifndef THREADLOOM_INTERNAL_H
#define THREADLOOM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "threadloom.h"

#if defined(__GNUC__) && !defined(_WIN32)
#define TL_INTERNAL __attribute__((visibility("hidden")))
#else
#define TL_INTERNAL
#endif

/* The SHA-NI path needs GCC or Clang (target attributes, cpuid.h) on x86. */
#if !defined(TL_NO_X86_SHA) && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define TL_HAVE_X86_SHA 1
#else
#define TL_HAVE_X86_SHA 0
#endif

/* The AVX2 vector kernels need the same (target attributes, cpuid.h, inline xgetbv). */
#if !defined(TL_NO_X86_SIMD) && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define TL_HAVE_X86_SIMD 1
#else
#define TL_HAVE_X86_SIMD 0
#endif

#define TL_KNOWN_FEATURES ((unsigned)TL_HW_SHA | (unsigned)TL_HW_AVX2)

/* The exact scan's shared steps (vectors_p.c): the score bound from `high` = approx +
 * error (similarity._bound), the query's sum of codes and |codes| from its split codes
 * with its params and float32 tiny, and the arguments' check of tl_vector_coarse_bounds. */
TL_INTERNAL double tl_p_bound(int metric, double high, double qn, double vn, double tiny);
TL_INTERNAL void tl_p_query(const int8_t *split, const double *params, size_t dims,
                            int64_t *total, double *norm, double *qs, double *qn, double *qr,
                            double *tiny);
TL_INTERNAL int tl_p_check(unsigned features, int metric, size_t dims, const int8_t *query_split,
                           const double *query_params);

/* Vectors per block in tl_vector_nearest (two stack arrays of this many entries). */
#define TL_NEAREST_BLOCK 32

/* Streaming SHA-256 state; lives on the caller's stack. */
typedef struct tl_sha256_ctx {
    uint32_t state[8];
    uint64_t total;
    unsigned char block[64];
    size_t fill;
    unsigned features;
} tl_sha256_ctx;

TL_INTERNAL extern const uint32_t tl_sha256_k[64];
TL_INTERNAL extern const uint32_t tl_sha256_iv[8];

TL_INTERNAL void tl_store_be32(unsigned char *p, uint32_t v);

/* BLAKE3 of data[0 .. len), 32 bytes to out (blake3.c; no argument checks). */
TL_INTERNAL void tl_blake3(const unsigned char *data, size_t len, unsigned char out[32]);
/* Its IV, the message word order of each of its 7 rounds, and its chunk flags. */
TL_INTERNAL extern const uint32_t tl_b3_iv[8];
TL_INTERNAL extern const unsigned char tl_b3_sched[7][16];
#define TL_B3_CHUNK_START 1u
#define TL_B3_CHUNK_END 2u

/* Compress `nblocks` 64-byte blocks into state, with SHA-NI when features has TL_HW_SHA. */
TL_INTERNAL void tl_sha256_compress(unsigned features, uint32_t state[8],
                                    const unsigned char *data, size_t nblocks);

/* The digest of a finished state as 64 lowercase hex characters. */
TL_INTERNAL void tl_sha256_state_hex(const uint32_t state[8], char hex[64]);

/* `features` must already be validated (no unknown bits). */
TL_INTERNAL void tl_sha256_init(tl_sha256_ctx *ctx, unsigned features);
TL_INTERNAL void tl_sha256_update(tl_sha256_ctx *ctx, const void *data, size_t len);
TL_INTERNAL void tl_sha256_final(tl_sha256_ctx *ctx, unsigned char out[32]);

/* Finish the hash and write it as 64 lowercase hex characters. */
TL_INTERNAL void tl_sha256_final_hex(tl_sha256_ctx *ctx, char hex[64]);

/* The blocks of a message still to compress: runs cur .. count-1, each of whole blocks. */
typedef struct tl_runs {
    const unsigned char *ptr[3];
    size_t blocks[3]; /* > 0 */
    unsigned cur, count;
} tl_runs;

/* One message for tl_sha256_many: the concatenation of four parts (unused: length 0). */
typedef struct tl_msg {
    const unsigned char *part[4];
    size_t len[4];
} tl_msg;

/*
 * Describe message `index` in *msg. tl_sha256_many asks for the messages in
 * order 0, 1, 2, ... and hashes up to two at a time, one per `lane` (0 or 1).
 * Bytes a callback writes to memory of its own for lane L must stay unchanged
 * until the callback is next called for lane L (or tl_sha256_many returns).
 */
typedef void (*tl_msg_fn)(void *ctx, size_t index, unsigned lane, tl_msg *msg);

/*
 * SHA-256 of `count` messages: writes the hex digest of message i to
 * hex[stride*i .. stride*i + 64). Two messages are compressed at once (SHA-NI
 * interleaves their rounds), so the cost is about half of count single hashes.
 */
TL_INTERNAL void tl_sha256_many(size_t count, unsigned features, tl_msg_fn describe, void *ctx,
                                char *hex, size_t stride);

#if TL_HAVE_X86_SHA
/* Compress `nblocks` 64-byte blocks with SHA-NI; only call when TL_HW_SHA is usable. */
TL_INTERNAL void tl_sha256_blocks_x86(uint32_t state[8], const unsigned char *data,
                                      size_t nblocks);
/*
 * Two messages at once: compress the runs left in *a into state_a and those in
 * *b into state_b, a block of each at a time, until one of them has no run
 * left; both are advanced past what was compressed. Both must have a run left.
 */
TL_INTERNAL void tl_sha256_runs2_x86(uint32_t state_a[8], tl_runs *a, uint32_t state_b[8],
                                     tl_runs *b);
TL_INTERNAL unsigned tl_x86_features(void);
#endif

#if TL_HAVE_X86_SIMD
/* TL_HW_AVX2 when the CPU has AVX2 and FMA and the OS saves ymm registers, else 0. */
TL_INTERNAL unsigned tl_x86_simd_features(void);
/* a . b and |a - b|^2 over n floats, with AVX2 + FMA (float32 lanes). */
TL_INTERNAL float tl_dot_avx2(const float *a, const float *b, size_t n);
TL_INTERNAL float tl_l2sq_avx2(const float *a, const float *b, size_t n);
/* dots[j] = c . v_j for `count` vectors of `dims` floats back to back at v. */
TL_INTERNAL void tl_dots_avx2(const float *c, const float *v, size_t count, size_t dims,
                              float *dots);
/* The integer dot product of n int8 codes of a and b, with AVX2. */
TL_INTERNAL int64_t tl_code_dot_avx2(const int8_t *a, const int8_t *b, size_t n);
/* BLAKE3 chaining values of eight whole chunks (1024 bytes at p[j], index ctr[j]). */
TL_INTERNAL void tl_b3_chunks8_avx2(const unsigned char *const p[8], const uint64_t ctr[8],
                                    uint32_t *const cvs[8]);
#endif

/* TL_OK when `batch` satisfies the tl_batch preconditions, else TL_EINVAL. */
TL_INTERNAL int tl_batch_check(const tl_batch *batch);

#endif /* THREADLOOM_INTERNAL_H */
