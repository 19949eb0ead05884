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

__attribute__((target("sha,sse4.1"))) void tl_sha256_blocks_x86(uint32_t state[8],
                                                                const unsigned char *data,
                                                                size_t nblocks)
{
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp, s0, s1;

    /* state is A..H; the instructions want ABEF and CDGH. */
    tmp = _mm_loadu_si128((const __m128i *)(state + 0));
    s1 = _mm_loadu_si128((const __m128i *)(state + 4));
    tmp = _mm_shuffle_epi32(tmp, 0xB1);
    s1 = _mm_shuffle_epi32(s1, 0x1B);
    s0 = _mm_alignr_epi8(tmp, s1, 8);
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);

    while (nblocks--) {
        const __m128i abef = s0, cdgh = s1;
        __m128i m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 0)), swap);
        __m128i m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16)), swap);
        __m128i m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 32)), swap);
        __m128i m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 48)), swap);

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

    /* ABEF / CDGH back to A..H. */
    tmp = _mm_shuffle_epi32(s0, 0x1B);
    s1 = _mm_shuffle_epi32(s1, 0xB1);
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);
    s1 = _mm_alignr_epi8(s1, tmp, 8);
    _mm_storeu_si128((__m128i *)(state + 0), s0);
    _mm_storeu_si128((__m128i *)(state + 4), s1);
}

#else

/* ISO C forbids an empty translation unit. */
typedef int tl_sha256_x86_unused;

#endif
