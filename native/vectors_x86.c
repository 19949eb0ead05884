/*
 * AVX2 + FMA kernels for vectors.c, and the CPUID check that says whether
 * they may be used (TL_HW_AVX2).
 *
 * Only this file's functions carry `target("avx2,fma")`, as sha256_x86.c does
 * for SHA-NI: callers reach them only when tl_cpu_features() reported
 * TL_HW_AVX2. Loads are unaligned (any 4-byte aligned float buffer will do).
 */
#include "tl_internal.h"

#if TL_HAVE_X86_SIMD

#include <cpuid.h>
#include <immintrin.h>

unsigned tl_x86_simd_features(void)
{
    unsigned int eax, ebx, ecx, edx, xcr0_lo, xcr0_hi;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return 0;
    }
    /* FMA (bit 12), OSXSAVE (27) and AVX (28); then the OS must save ymm state. */
    if (((ecx >> 12) & 1u) == 0 || ((ecx >> 27) & 1u) == 0 || ((ecx >> 28) & 1u) == 0) {
        return 0;
    }
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 6u) != 6u || __get_cpuid_max(0, NULL) < 7) {
        return 0;
    }
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    return ((ebx >> 5) & 1u) ? (unsigned)TL_HW_AVX2 : 0u;
}

__attribute__((target("avx2,fma"))) static float tl_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) float tl_dot_avx2(const float *a, const float *b, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    size_t i = 0;
    float sum;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    }
    sum = tl_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) {
        sum += a[i] * b[i];
    }
    return sum;
}

__attribute__((target("avx2,fma"))) float tl_l2sq_avx2(const float *a, const float *b, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    size_t i = 0;
    float sum, d;
    for (; i + 16 <= n; i += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
        s0 = _mm256_fmadd_ps(d0, d0, s0);
        s1 = _mm256_fmadd_ps(d1, d1, s1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
        s0 = _mm256_fmadd_ps(d0, d0, s0);
    }
    sum = tl_hsum(_mm256_add_ps(s0, s1));
    for (; i < n; i++) {
        d = a[i] - b[i];
        sum += d * d;
    }
    return sum;
}

/* dots[j] = c . v_j for the `count` vectors back to back at `v`, four at a time. */
__attribute__((target("avx2,fma"))) void tl_dots_avx2(const float *c, const float *v,
                                                      size_t count, size_t dims, float *dots)
{
    size_t j = 0, i;
    for (; j + 4 <= count; j += 4) {
        const float *v0 = v + j * dims, *v1 = v0 + dims, *v2 = v1 + dims, *v3 = v2 + dims;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
        float t0, t1, t2, t3;
        for (i = 0; i + 8 <= dims; i += 8) {
            __m256 x = _mm256_loadu_ps(c + i);
            s0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v0 + i), s0);
            s1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v1 + i), s1);
            s2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v2 + i), s2);
            s3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(v3 + i), s3);
        }
        t0 = tl_hsum(s0);
        t1 = tl_hsum(s1);
        t2 = tl_hsum(s2);
        t3 = tl_hsum(s3);
        for (; i < dims; i++) {
            t0 += c[i] * v0[i];
            t1 += c[i] * v1[i];
            t2 += c[i] * v2[i];
            t3 += c[i] * v3[i];
        }
        dots[j] = t0;
        dots[j + 1] = t1;
        dots[j + 2] = t2;
        dots[j + 3] = t3;
    }
    for (; j < count; j++) {
        dots[j] = tl_dot_avx2(c, v + j * dims, dims);
    }
}

/* The integer dot product of two int8 code vectors (vectors_q.c): |a_i| times b_i with
 * a_i's sign (maddubs: u8 x s8, pairs summed in 16 bits, at most 2 * 127 * 127, no
 * saturation since codes are within [-127, 127]), widened in pairs into eight 32-bit
 * lanes and moved into 64 bits every 8192 steps of 32 codes (a lane gains at most
 * 4 * 127 * 127 a step, so it cannot overflow). */
__attribute__((target("avx2,fma"))) int64_t tl_code_dot_avx2(const int8_t *a, const int8_t *b,
                                                             size_t n)
{
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t total = 0;
    size_t i = 0, steps;
    int32_t lanes[8];
    int j;
    while (i + 32 <= n) {
        __m256i acc = _mm256_setzero_si256();
        for (steps = 0; steps < 8192 && i + 32 <= n; steps++, i += 32) {
            __m256i va = _mm256_loadu_si256((const __m256i *)(const void *)(a + i));
            __m256i vb = _mm256_loadu_si256((const __m256i *)(const void *)(b + i));
            __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(va), _mm256_sign_epi8(vb, va));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
        }
        _mm256_storeu_si256((__m256i *)(void *)lanes, acc);
        for (j = 0; j < 8; j++) {
            total += lanes[j];
        }
    }
    for (; i < n; i++) {
        total += (int32_t)a[i] * (int32_t)b[i];
    }
    return total;
}

#else

/* ISO C forbids an empty translation unit. */
typedef int tl_vectors_x86_unused;

#endif
