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

#else

/* ISO C forbids an empty translation unit. */
typedef int tl_vectors_x86_unused;

#endif
