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

#define TL_KNOWN_FEATURES ((unsigned)TL_HW_SHA)

/* Streaming SHA-256 state; lives on the caller's stack. */
typedef struct tl_sha256_ctx {
    uint32_t state[8];
    uint64_t total;
    unsigned char block[64];
    size_t fill;
    unsigned features;
} tl_sha256_ctx;

TL_INTERNAL extern const uint32_t tl_sha256_k[64];

/* `features` must already be validated (no unknown bits). */
TL_INTERNAL void tl_sha256_init(tl_sha256_ctx *ctx, unsigned features);
TL_INTERNAL void tl_sha256_update(tl_sha256_ctx *ctx, const void *data, size_t len);
TL_INTERNAL void tl_sha256_final(tl_sha256_ctx *ctx, unsigned char out[32]);

/* Finish the hash and write it as 64 lowercase hex characters. */
TL_INTERNAL void tl_sha256_final_hex(tl_sha256_ctx *ctx, char hex[64]);

#if TL_HAVE_X86_SHA
/* Compress `nblocks` 64-byte blocks with SHA-NI; only call when TL_HW_SHA is usable. */
TL_INTERNAL void tl_sha256_blocks_x86(uint32_t state[8], const unsigned char *data,
                                      size_t nblocks);
TL_INTERNAL unsigned tl_x86_features(void);
#endif

/* TL_OK when `batch` satisfies the tl_batch preconditions, else TL_EINVAL. */
TL_INTERNAL int tl_batch_check(const tl_batch *batch);

#endif /* THREADLOOM_INTERNAL_H */
