/*
 * SHA-256 compression with the x86 SHA extensions (SHA-NI), and the CPUID
 * check that says whether they may be used.
 *
 * Only this file's functions carry `target("sha,sse4.1")`: the rest of the
 * library is compiled for the baseline ISA, so loading it never executes an
 * instruction the CPU lacks; callers reach tl_sha256_blocks_x86 only when
 * tl_cpu_features() reported TL_HW_SHA.
 */
#include "tl_internal.h"

#if TL_HAVE_X86_SHA

#include <cpuid.h>
#include <immintrin.h>

unsigned tl_x86_features(void)
{
    unsigned int eax, ebx, ecx, edx;
    unsigned int ssse3, sse41;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return 0;
    }
    ssse3 = (ecx >> 9) & 1u;
    sse41 = (ecx >> 19) & 1u;
    if (!ssse3 || !sse41) {
        return 0;
    }
    if (__get_cpuid_max(0, NULL) < 7) {
        return 0;
    }
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    return ((ebx >> 29) & 1u) ? (unsigned)TL_HW_SHA : 0u;
}

/* Four rounds with message words `msg` (W[4r .. 4r+3]) and constants K[4r ..]. */
#define TL_ROUNDS4(msg, r)                                                                  \
    do {                                                                                    \
        __m128i m_ = _mm_add_epi32((msg),                                                   \
                                   _mm_loadu_si128((const __m128i *)(tl_sha256_k + 4 * (r)))); \
        s1 = _mm_sha256rnds2_epu32(s1, s0, m_);                                             \
        m_ = _mm_shuffle_epi32(m_, 0x0E);                                                   \
        s0 = _mm_sha256rnds2_epu32(s0, s1, m_);                                             \
    } while (0)

/*
 * Message schedule: a holds W[i-16 .. i-13], b W[i-12 .. i-9], c W[i-8 .. i-5],
 * d W[i-4 .. i-1]; afterwards a holds W[i .. i+3].
 */
#define TL_SCHEDULE(a, b, c, d)                                                    \
    do {                                                                           \
        (a) = _mm_add_epi32(_mm_sha256msg1_epu32((a), (b)), _mm_alignr_epi8((d), (c), 4)); \
        (a) = _mm_sha256msg2_epu32((a), (d));                                      \
    } while (0)

/* ABEF/CDGH state registers from A..H words, and back. */
#define TL_LOAD_STATE(st, s0, s1)                                                  \
    do {                                                                           \
        __m128i t_ = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(st)), 0xB1); \
        (s1) = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)((st) + 4)), 0x1B); \
        (s0) = _mm_alignr_epi8(t_, (s1), 8);                                       \
        (s1) = _mm_blend_epi16((s1), t_, 0xF0);                                    \
    } while (0)
#define TL_STORE_STATE(st, s0, s1)                                                 \
    do {                                                                           \
        __m128i t_ = _mm_shuffle_epi32((s0), 0x1B);                                \
        (s1) = _mm_shuffle_epi32((s1), 0xB1);                                      \
        _mm_storeu_si128((__m128i *)(st), _mm_blend_epi16(t_, (s1), 0xF0));        \
        _mm_storeu_si128((__m128i *)((st) + 4), _mm_alignr_epi8((s1), t_, 8));     \
    } while (0)
#define TL_LOAD_MSG(p, m0, m1, m2, m3)                                                \
    do {                                                                              \
        (m0) = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)((p) + 0)), swap);   \
        (m1) = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)((p) + 16)), swap);  \
        (m2) = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)((p) + 32)), swap);  \
        (m3) = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)((p) + 48)), swap);  \
    } while (0)

__attribute__((target("sha,sse4.1"))) void tl_sha256_blocks_x86(uint32_t state[8],
                                                                const unsigned char *data,
                                                                size_t nblocks)
{
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i s0, s1;

    TL_LOAD_STATE(state, s0, s1);
    while (nblocks--) {
        const __m128i abef = s0, cdgh = s1;
        __m128i m0, m1, m2, m3;
        TL_LOAD_MSG(data, m0, m1, m2, m3);

        TL_ROUNDS4(m0, 0);
        TL_ROUNDS4(m1, 1);
        TL_ROUNDS4(m2, 2);
        TL_ROUNDS4(m3, 3);
        TL_SCHEDULE(m0, m1, m2, m3);
        TL_ROUNDS4(m0, 4);
        TL_SCHEDULE(m1, m2, m3, m0);
        TL_ROUNDS4(m1, 5);
        TL_SCHEDULE(m2, m3, m0, m1);
        TL_ROUNDS4(m2, 6);
        TL_SCHEDULE(m3, m0, m1, m2);
        TL_ROUNDS4(m3, 7);
        TL_SCHEDULE(m0, m1, m2, m3);
        TL_ROUNDS4(m0, 8);
        TL_SCHEDULE(m1, m2, m3, m0);
        TL_ROUNDS4(m1, 9);
        TL_SCHEDULE(m2, m3, m0, m1);
        TL_ROUNDS4(m2, 10);
        TL_SCHEDULE(m3, m0, m1, m2);
        TL_ROUNDS4(m3, 11);
        TL_SCHEDULE(m0, m1, m2, m3);
        TL_ROUNDS4(m0, 12);
        TL_SCHEDULE(m1, m2, m3, m0);
        TL_ROUNDS4(m1, 13);
        TL_SCHEDULE(m2, m3, m0, m1);
        TL_ROUNDS4(m2, 14);
        TL_SCHEDULE(m3, m0, m1, m2);
        TL_ROUNDS4(m3, 15);

        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
        data += 64;
    }
    TL_STORE_STATE(state, s0, s1);
}

/* Four rounds of lane a (state a0/a1) and of lane b (b0/b1), interleaved. */
#define TL_ROUNDS4_X2(ma, mb, r)                                                      \
    do {                                                                              \
        const __m128i k_ = _mm_loadu_si128((const __m128i *)(tl_sha256_k + 4 * (r))); \
        __m128i x_ = _mm_add_epi32((ma), k_), y_ = _mm_add_epi32((mb), k_);           \
        a1 = _mm_sha256rnds2_epu32(a1, a0, x_);                                       \
        b1 = _mm_sha256rnds2_epu32(b1, b0, y_);                                       \
        a0 = _mm_sha256rnds2_epu32(a0, a1, _mm_shuffle_epi32(x_, 0x0E));              \
        b0 = _mm_sha256rnds2_epu32(b0, b1, _mm_shuffle_epi32(y_, 0x0E));              \
    } while (0)
#define TL_STEP_X2(a, b, c, d, e, f, g, h, r) \
    do {                                      \
        TL_SCHEDULE(a, b, c, d);              \
        TL_SCHEDULE(e, f, g, h);              \
        TL_ROUNDS4_X2(a, e, r);               \
    } while (0)

/*
 * The rounds of one SHA-NI chain wait on the latency of sha256rnds2, so a
 * second, independent chain fills the gaps (about 1.8x the throughput of one
 * chain on Zen 3). The states stay in registers from run to run.
 */
__attribute__((target("sha,sse4.1"))) void tl_sha256_runs2_x86(uint32_t state_a[8], tl_runs *a,
                                                               uint32_t state_b[8], tl_runs *b)
{
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    const unsigned char *data_a = a->ptr[a->cur], *data_b = b->ptr[b->cur];
    size_t left_a = a->blocks[a->cur], left_b = b->blocks[b->cur];
    __m128i a0, a1, b0, b1;

    TL_LOAD_STATE(state_a, a0, a1);
    TL_LOAD_STATE(state_b, b0, b1);
    for (;;) {
        size_t n = left_a < left_b ? left_a : left_b;
        left_a -= n;
        left_b -= n;
        while (n--) {
            const __m128i abef_a = a0, cdgh_a = a1, abef_b = b0, cdgh_b = b1;
            __m128i p0, p1, p2, p3, q0, q1, q2, q3;
            TL_LOAD_MSG(data_a, p0, p1, p2, p3);
            TL_LOAD_MSG(data_b, q0, q1, q2, q3);
            TL_ROUNDS4_X2(p0, q0, 0);
            TL_ROUNDS4_X2(p1, q1, 1);
            TL_ROUNDS4_X2(p2, q2, 2);
            TL_ROUNDS4_X2(p3, q3, 3);
            TL_STEP_X2(p0, p1, p2, p3, q0, q1, q2, q3, 4);
            TL_STEP_X2(p1, p2, p3, p0, q1, q2, q3, q0, 5);
            TL_STEP_X2(p2, p3, p0, p1, q2, q3, q0, q1, 6);
            TL_STEP_X2(p3, p0, p1, p2, q3, q0, q1, q2, 7);
            TL_STEP_X2(p0, p1, p2, p3, q0, q1, q2, q3, 8);
            TL_STEP_X2(p1, p2, p3, p0, q1, q2, q3, q0, 9);
            TL_STEP_X2(p2, p3, p0, p1, q2, q3, q0, q1, 10);
            TL_STEP_X2(p3, p0, p1, p2, q3, q0, q1, q2, 11);
            TL_STEP_X2(p0, p1, p2, p3, q0, q1, q2, q3, 12);
            TL_STEP_X2(p1, p2, p3, p0, q1, q2, q3, q0, 13);
            TL_STEP_X2(p2, p3, p0, p1, q2, q3, q0, q1, 14);
            TL_STEP_X2(p3, p0, p1, p2, q3, q0, q1, q2, 15);
            a0 = _mm_add_epi32(a0, abef_a);
            a1 = _mm_add_epi32(a1, cdgh_a);
            b0 = _mm_add_epi32(b0, abef_b);
            b1 = _mm_add_epi32(b1, cdgh_b);
            data_a += 64;
            data_b += 64;
        }
        if (left_a == 0 && ++a->cur < a->count) {
            data_a = a->ptr[a->cur];
            left_a = a->blocks[a->cur];
        }
        if (left_b == 0 && ++b->cur < b->count) {
            data_b = b->ptr[b->cur];
            left_b = b->blocks[b->cur];
        }
        if (left_a == 0 || left_b == 0) {
            break;
        }
    }
    if (left_a > 0) {
        a->ptr[a->cur] = data_a;
        a->blocks[a->cur] = left_a;
    }
    if (left_b > 0) {
        b->ptr[b->cur] = data_b;
        b->blocks[b->cur] = left_b;
    }
    TL_STORE_STATE(state_a, a0, a1);
    TL_STORE_STATE(state_b, b0, b1);
}

#else

/* ISO C forbids an empty translation unit. */
typedef int tl_sha256_x86_unused;

#endif
