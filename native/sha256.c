/*
 * SHA-256 (FIPS 180-4): the portable compression function, the streaming
 * state used by every hashing entry point, and tl_sha256 / tl_cpu_features.
 * The SHA-NI compression functions live in sha256_x86.c, the hashing of many
 * messages two at a time (tl_sha256_many) in sha256_many.c.
 */
#include <string.h>

#include "threadloom.h"
#include "tl_internal.h"

const uint32_t tl_sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u,
};

const uint32_t tl_sha256_iv[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
    0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
};

#define TL_ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static uint32_t tl_load_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

void tl_store_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Portable compression of `nblocks` consecutive 64-byte blocks. */
static void tl_sha256_blocks_portable(uint32_t state[8], const unsigned char *data,
                                      size_t nblocks)
{
    uint32_t w[64];
    while (nblocks--) {
        uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
        uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
        int i;
        for (i = 0; i < 16; i++) {
            w[i] = tl_load_be32(data + 4 * i);
        }
        for (i = 16; i < 64; i++) {
            uint32_t s0 = TL_ROTR(w[i - 15], 7) ^ TL_ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = TL_ROTR(w[i - 2], 17) ^ TL_ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        for (i = 0; i < 64; i++) {
            uint32_t s1 = TL_ROTR(e, 6) ^ TL_ROTR(e, 11) ^ TL_ROTR(e, 25);
            uint32_t ch = (e & f) ^ (~e & g);
            uint32_t t1 = h + s1 + ch + tl_sha256_k[i] + w[i];
            uint32_t s0 = TL_ROTR(a, 2) ^ TL_ROTR(a, 13) ^ TL_ROTR(a, 22);
            uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
            uint32_t t2 = s0 + maj;
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        state[0] += a;
        state[1] += b;
        state[2] += c;
        state[3] += d;
        state[4] += e;
        state[5] += f;
        state[6] += g;
        state[7] += h;
        data += 64;
    }
}

void tl_sha256_compress(unsigned features, uint32_t state[8], const unsigned char *data,
                        size_t nblocks)
{
#if TL_HAVE_X86_SHA
    if (features & TL_HW_SHA) {
        tl_sha256_blocks_x86(state, data, nblocks);
        return;
    }
#endif
    tl_sha256_blocks_portable(state, data, nblocks);
}

static void tl_sha256_blocks(tl_sha256_ctx *ctx, const unsigned char *data, size_t nblocks)
{
    tl_sha256_compress(ctx->features, ctx->state, data, nblocks);
}

void tl_sha256_init(tl_sha256_ctx *ctx, unsigned features)
{
    memcpy(ctx->state, tl_sha256_iv, sizeof ctx->state);
    ctx->total = 0;
    ctx->fill = 0;
    ctx->features = features;
}

void tl_sha256_update(tl_sha256_ctx *ctx, const void *data, size_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    if (len == 0) {
        return; /* p may be NULL */
    }
    ctx->total += (uint64_t)len;
    if (ctx->fill) {
        size_t take = 64 - ctx->fill;
        if (take > len) {
            take = len;
        }
        memcpy(ctx->block + ctx->fill, p, take);
        ctx->fill += take;
        p += take;
        len -= take;
        if (ctx->fill < 64) {
            return;
        }
        tl_sha256_blocks(ctx, ctx->block, 1);
        ctx->fill = 0;
    }
    if (len >= 64) {
        size_t whole = len / 64;
        tl_sha256_blocks(ctx, p, whole);
        p += whole * 64;
        len -= whole * 64;
    }
    if (len) {
        memcpy(ctx->block, p, len);
        ctx->fill = len;
    }
}

void tl_sha256_final(tl_sha256_ctx *ctx, unsigned char out[32])
{
    uint64_t bits = ctx->total * 8u;
    int i;
    ctx->block[ctx->fill++] = 0x80;
    if (ctx->fill > 56) {
        memset(ctx->block + ctx->fill, 0, 64 - ctx->fill);
        tl_sha256_blocks(ctx, ctx->block, 1);
        ctx->fill = 0;
    }
    memset(ctx->block + ctx->fill, 0, 56 - ctx->fill);
    tl_store_be32(ctx->block + 56, (uint32_t)(bits >> 32));
    tl_store_be32(ctx->block + 60, (uint32_t)bits);
    tl_sha256_blocks(ctx, ctx->block, 1);
    for (i = 0; i < 8; i++) {
        tl_store_be32(out + 4 * i, ctx->state[i]);
    }
}

/* "000102...ff": the two hex digits of every byte value. */
static const char tl_hex_pairs[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void tl_sha256_state_hex(const uint32_t state[8], char hex[64])
{
    int i;
    for (i = 0; i < 8; i++) {
        uint32_t word = state[i];
        memcpy(hex + 8 * i, tl_hex_pairs + 2 * (word >> 24), 2);
        memcpy(hex + 8 * i + 2, tl_hex_pairs + 2 * ((word >> 16) & 0xffu), 2);
        memcpy(hex + 8 * i + 4, tl_hex_pairs + 2 * ((word >> 8) & 0xffu), 2);
        memcpy(hex + 8 * i + 6, tl_hex_pairs + 2 * (word & 0xffu), 2);
    }
}

void tl_sha256_final_hex(tl_sha256_ctx *ctx, char hex[64])
{
    unsigned char digest[32];
    tl_sha256_final(ctx, digest);
    tl_sha256_state_hex(ctx->state, hex);
}

unsigned tl_cpu_features(void)
{
    unsigned features = 0;
#if TL_HAVE_X86_SHA
    features |= tl_x86_features();
#endif
#if TL_HAVE_X86_SIMD
    features |= tl_x86_simd_features();
#endif
    return features;
}

int tl_sha256(const unsigned char *data, size_t len, unsigned features, unsigned char *out)
{
    tl_sha256_ctx ctx;
    if ((features & ~TL_KNOWN_FEATURES) || out == NULL || (data == NULL && len > 0)) {
        return TL_EINVAL;
    }
    tl_sha256_init(&ctx, features);
    tl_sha256_update(&ctx, data, len);
    tl_sha256_final(&ctx, out);
    return TL_OK;
}
