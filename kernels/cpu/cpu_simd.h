/*
 * cpu_simd.h — internal SIMD helpers shared by the CPU kernels (not part of
 * the kernels' API): which instruction set to use, tail masks, horizontal
 * sums and vector exp for AVX2/FMA and AVX-512.
 *
 * Every helper is a static inline function compiled for its own target with
 * __attribute__((target)), so the kernels build without -mavx flags and pick
 * a path at run time; callers must only use a helper after ifd__cpu_isa() said
 * the CPU has it. The vector exp is a Cody-Waite range reduction plus a
 * degree-7 Taylor polynomial: relative error below 2 ulp on [-87, 88], exactly
 * 0 below −87.3 (where expf is denormal or 0), NaN stays NaN, and +inf comes
 * out as a large finite value (inputs are clamped at 88.7).
 *
 * Threading: pure functions, no state beyond ifd_cpu_features()' cache.
 */
#ifndef IFD_CPU_SIMD_H
#define IFD_CPU_SIMD_H

#include "kernels.h"

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define IFD__X86 1
#else
#define IFD__X86 0
#endif

#define IFD__TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#if defined(IFD_AVX512_EMU) && IFD__X86
/* Test build (tests/cpu_emu/avx512_emu.h): the AVX-512 paths on an AVX2 CPU,
 * their intrinsics emulated, their functions compiled for AVX2. */
#include "avx512_emu.h"
#define IFD__TARGET_AVX512     IFD__TARGET_AVX2
#define IFD__TARGET_AVX512VNNI IFD__TARGET_AVX2
#else
#define IFD__TARGET_AVX512     __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))
#define IFD__TARGET_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))
#endif
#define IFD__INLINE static inline __attribute__((always_inline))

typedef enum {
    IFD__ISA_SCALAR = 0,
    IFD__ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    IFD__ISA_AVX512 = 2, /* AVX-512F/BW (+ the above); ifd_cpu_isa_name() says "avx512" */
} ifd__isa_t;

/* The widest path this CPU (capped by $INFERD_CPU) allows. */
static inline ifd__isa_t ifd__cpu_isa(void)
{
#if IFD__X86
    const ifd_cpu_features_t *f = ifd_cpu_features();
    if (f->avx512f && f->avx512bw && f->avx2 && f->fma && f->f16c)
        return IFD__ISA_AVX512;
    if (f->avx2 && f->fma && f->f16c)
        return IFD__ISA_AVX2;
#endif
    return IFD__ISA_SCALAR;
}

#if IFD__X86

/* ---- AVX2 ------------------------------------------------------------------ */

/* Lane mask for the first n (0..8) lanes. */
IFD__TARGET_AVX2 IFD__INLINE __m256i ifd__mask8(int n)
{
    static const int32_t tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(tab + 8 - n));
}

IFD__TARGET_AVX2 IFD__INLINE float ifd__hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

IFD__TARGET_AVX2 IFD__INLINE float ifd__hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

IFD__TARGET_AVX2 IFD__INLINE __m256 ifd__exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 x0 = x;
    __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.72283f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n in two halves so n = 128 (x near 88.7) does not overflow the exponent. */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h = _mm256_srai_epi32(ni, 1);
    __m256 s1 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
    p = _mm256_andnot_ps(zero_mask, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
    return _mm256_blendv_ps(p, x0, _mm256_cmp_ps(x0, x0, _CMP_UNORD_Q)); /* NaN stays NaN */
}

/* ---- AVX-512 --------------------------------------------------------------- */

IFD__TARGET_AVX512 IFD__INLINE __mmask16 ifd__mask16(int n)
{
    return (__mmask16)((1u << n) - 1u);
}

IFD__TARGET_AVX512 IFD__INLINE __m512 ifd__exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __m512 x0 = x;
    __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.72283f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    /* p · 2^n, exact for every n the clamp allows. */
    p = _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
    return _mm512_mask_mov_ps(p, _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q), x0); /* NaN stays */
}

/* x[i] = e^(x[i] − mx) for i < n (x[n..] untouched), returning their sum
 * accumulated in double (two accumulators of 8 lanes): the softmax's
 * exponentials (activations.c). */
IFD__TARGET_AVX512 IFD__INLINE double ifd__exp_sum_avx512(float *x, int n, float mx)
{
    const __m512 mb = _mm512_set1_ps(mx);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = ifd__mask16(n - i < 16 ? n - i : 16);
        __m512 e = ifd__exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), mb));
        e = _mm512_maskz_mov_ps(mk, e);
        _mm512_mask_storeu_ps(x + i, mk, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(
            s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

#endif /* IFD__X86 */

#endif
