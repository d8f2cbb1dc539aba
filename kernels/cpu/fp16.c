/*
 * fp16.c — f32 <-> binary16 (f16) and bfloat16 (bf16) conversions, one value
 * at a time (cpu_kernels.h) and in bulk (fp16.h).
 *
 * Invariants: f32 -> 16-bit rounds to nearest, ties to even, on the bit
 * patterns (no dependence on the FPU rounding mode or on FTZ/DAZ); values
 * too large for f16 become ±inf, f16 subnormals are produced and decoded
 * exactly; a NaN stays a NaN (made quiet, top payload bits kept). The bulk
 * paths use F16C (vcvtph2ps / vcvtps2ph with an explicit round-to-nearest
 * immediate) when the CPU has it, and yield the same bits as the scalar
 * code for every non-NaN input (tests/unit/test_dequant.c checks all 65536
 * f16 values and the f16 rounding boundaries).
 */
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fp16.h"
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define IFD__FP16_X86 1
#else
#define IFD__FP16_X86 0
#endif

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ifd_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* Zero or subnormal: mant · 2^-24, exact in f32. */
        float v = (float)mant * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    if (exp == 31) /* inf (mant 0) or NaN (payload kept) */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t ifd_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: quiet it, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u) /* >= 65520 (65504 + half an ulp, tie to even = up): inf */
        return (uint16_t)(sign | 0x7c00u);
    if (x >= 0x38800000u) {
        /* Normal f16 (>= 2^-14): re-bias the exponent (127 -> 15), then round
         * the 13 dropped mantissa bits; a carry moves into the exponent. */
        uint32_t m = x - (112u << 23);
        m += 0xfffu + ((m >> 13) & 1u);
        return (uint16_t)(sign | (m >> 13));
    }
    if (x <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 is a tie, even = 0) */
        return sign;
    /* Subnormal f16: the result is round(|f| · 2^24) as an integer in
     * [0, 0x400]; |f| = mant · 2^(e-150), so shift mant right by 126 - e. */
    uint32_t e = x >> 23;
    uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t r = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r); /* r == 0x400 encodes 2^-14, the smallest normal */
}

float ifd_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16_bits(uint32_t u)
{
    uint16_t nan = (uint16_t)((u >> 16) | 0x40u);
    uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : r;
}

uint16_t ifd_f32_to_bf16(float f)
{
    return f32_to_bf16_bits(f32_bits(f));
}

/* ---- bulk ---------------------------------------------------------------- */

static void f16_to_f32_scalar(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = ifd_f16_to_f32(x[i]);
}

static void f32_to_f16_scalar(uint16_t *restrict y, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = ifd_f32_to_f16(x[i]);
}

#if IFD__FP16_X86
__attribute__((target("avx,f16c"))) static void
f16_to_f32_f16c(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(x + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(x + i + 8));
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(y + i + 8, _mm256_cvtph_ps(b));
    }
    for (; i < n; i++)
        y[i] = ifd_f16_to_f32(x[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *restrict y,
                                                                const float *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(y + i), h);
    }
    for (; i < n; i++)
        y[i] = ifd_f32_to_f16(x[i]);
}

/* bf16 <-> f32 is integer work on the f32 bit patterns; intrinsics load and
 * store through may-alias vector types, so no float/uint32_t punning. */
__attribute__((target("avx2"))) static void bf16_to_f32_avx2(float *restrict y,
                                                             const uint16_t *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++)
        y[i] = ifd_bf16_to_f32(x[i]);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(uint16_t *restrict y,
                                                             const float *restrict x, int64_t n)
{
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i + 8 * k));
            __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
            __m256i rn = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, odd)), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
            __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
            r[k] = _mm256_blendv_epi8(rn, qn, nan);
        }
        /* packus works per 128-bit lane: fix the order with a 64-bit permute. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(y + i), p);
    }
    for (; i < n; i++)
        y[i] = ifd_f32_to_bf16(x[i]);
}
#endif

void ifd_f16_to_f32_n(float *restrict y, const uint16_t *restrict x, int64_t n)
{
#if IFD__FP16_X86
    if (ifd_cpu_features()->f16c) {
        f16_to_f32_f16c(y, x, n);
        return;
    }
#endif
    f16_to_f32_scalar(y, x, n);
}

void ifd_f32_to_f16_n(uint16_t *restrict y, const float *restrict x, int64_t n)
{
#if IFD__FP16_X86
    if (ifd_cpu_features()->f16c) {
        f32_to_f16_f16c(y, x, n);
        return;
    }
#endif
    f32_to_f16_scalar(y, x, n);
}

void ifd_bf16_to_f32_n(float *restrict y, const uint16_t *restrict x, int64_t n)
{
#if IFD__FP16_X86
    if (ifd_cpu_features()->avx2) {
        bf16_to_f32_avx2(y, x, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] = ifd_bf16_to_f32(x[i]);
}

void ifd_f32_to_bf16_n(uint16_t *restrict y, const float *restrict x, int64_t n)
{
#if IFD__FP16_X86
    if (ifd_cpu_features()->avx2) {
        f32_to_bf16_avx2(y, x, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] = ifd_f32_to_bf16(x[i]);
}
