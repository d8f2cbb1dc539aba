/*
 * avx512_emu.h — the AVX-512 intrinsics of the CPU kernels, emulated on an
 * AVX2 machine, so that the kernels' AVX-512 paths run (and are tested) in
 * CI where no AVX-512 CPU is. Test builds only: kernels/cpu/cpu_simd.h
 * includes it when IFD_AVX512_EMU is defined (the ifd_kernels_avx512emu
 * library, compiled with -mavx2 -mfma -mf16c).
 *
 * SIMDe (Debian's libsimde-dev) provides the intrinsics as portable C over
 * AVX2 halves, under their Intel names ("native aliases"): _mm512_add_ps
 * becomes a macro for simde_mm512_add_ps. Its 0.7.4 lacks a few the kernels
 * use and aliases _mm512_madd_epi16 with the arguments of the masked form;
 * those are defined below, each by its definition in Intel's intrinsics
 * guide (the reductions in the order GCC's avx512fintrin.h adds, so a
 * reduction rounds as it does on the hardware with this compiler). An
 * intrinsic neither provides fails to compile ("target specific option
 * mismatch"): the emulation never falls through to a real AVX-512
 * instruction.
 *
 * The kernels' AVX-512 functions are compiled for the AVX2 target instead
 * (cpu_simd.h), and ifd_cpu_features() reports AVX-512F/BW/VNNI wherever
 * AVX2, FMA and F16C are (kernels.c), capped by $INFERD_CPU as usual.
 */
#ifndef IFD_AVX512_EMU_H
#define IFD_AVX512_EMU_H

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <stdint.h>
#include <string.h>

typedef union {
    simde__m512 v;
    float f[16];
} ifd__emu_ps;

typedef union {
    simde__m512d v;
    double d[8];
} ifd__emu_pd;

typedef union {
    simde__m512i v;
    int32_t i32[16];
} ifd__emu_si;

static inline simde__m512i ifd__emu_madd_epi16(simde__m512i a, simde__m512i b)
{
    return simde_mm512_madd_epi16(a, b);
}
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) ifd__emu_madd_epi16(a, b)

/* Masked lanes are neither read nor written (what makes the tails safe). */
static inline simde__m512 ifd__emu_maskz_loadu_ps(uint16_t k, const void *p)
{
    ifd__emu_ps r;
    for (int i = 0; i < 16; i++) {
        r.f[i] = 0.0f;
        if (k >> i & 1)
            memcpy(&r.f[i], (const char *)p + 4 * i, 4);
    }
    return r.v;
}
#define _mm512_maskz_loadu_ps(k, p) ifd__emu_maskz_loadu_ps(k, p)

static inline void ifd__emu_mask_storeu_ps(void *p, uint16_t k, simde__m512 a)
{
    ifd__emu_ps s = {.v = a};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            memcpy((char *)p + 4 * i, &s.f[i], 4);
}
#define _mm512_mask_storeu_ps(p, k, a) ifd__emu_mask_storeu_ps(p, k, a)

#define _mm512_shuffle_f32x4(a, b, imm) simde_mm512_shuffle_f32x4(a, b, imm)

static inline simde__m512d ifd__emu_cvtps_pd(simde__m256 a)
{
    float f[8];
    memcpy(f, &a, sizeof f);
    ifd__emu_pd r;
    for (int i = 0; i < 8; i++)
        r.d[i] = (double)f[i];
    return r.v;
}
#define _mm512_cvtps_pd(a) ifd__emu_cvtps_pd(a)

/* GCC's order: upper 256 + lower 256, then upper 128 + lower 128, then
 * lanes {2,3} + {0,1}, then lane 1 + lane 0 (avx512fintrin.h). */
#define IFD__EMU_REDUCE(N, x, OP)                                                                  \
    do {                                                                                           \
        for (int w_ = N / 2; w_ >= 2; w_ /= 2)                                                     \
            for (int i_ = 0; i_ < w_; i_++)                                                        \
                x[i_] = OP(x[i_ + w_], x[i_]);                                                     \
        x[0] = OP(x[0], x[1]);                                                                     \
    } while (0)
#define IFD__EMU_ADD(a, b) ((a) + (b))
#define IFD__EMU_MAX(a, b) ((a) > (b) ? (a) : (b))

/* A reduction `name` of the N lanes (field F of union U) of a vector V. */
#define IFD__EMU_REDUCER(name, T, V, U, F, N, OP)                                                  \
    static inline T ifd__emu_##name(V a)                                                           \
    {                                                                                              \
        U s = {.v = a};                                                                            \
        IFD__EMU_REDUCE(N, s.F, OP);                                                               \
        return s.F[0];                                                                             \
    }
IFD__EMU_REDUCER(reduce_add_ps, float, simde__m512, ifd__emu_ps, f, 16, IFD__EMU_ADD)
IFD__EMU_REDUCER(reduce_max_ps, float, simde__m512, ifd__emu_ps, f, 16, IFD__EMU_MAX)
IFD__EMU_REDUCER(reduce_add_pd, double, simde__m512d, ifd__emu_pd, d, 8, IFD__EMU_ADD)
#define _mm512_reduce_add_ps(a) ifd__emu_reduce_add_ps(a)
#define _mm512_reduce_max_ps(a) ifd__emu_reduce_max_ps(a)
#define _mm512_reduce_add_pd(a) ifd__emu_reduce_add_pd(a)

static inline float ifd__emu_cvtss_f32(simde__m512 a)
{
    ifd__emu_ps s = {.v = a};
    return s.f[0];
}
#define _mm512_cvtss_f32(a) ifd__emu_cvtss_f32(a)

/* 16 halves → 16 floats: the two 128-bit halves through F16C. */
static inline simde__m512 ifd__emu_cvtph_ps(simde__m256i a)
{
    ifd__emu_ps r;
    __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(a));
    __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
    memcpy(&r.f[0], &lo, 32);
    memcpy(&r.f[8], &hi, 32);
    return r.v;
}
#define _mm512_cvtph_ps(a) ifd__emu_cvtph_ps(a)

/* 16 narrow integers of a vector V, sign- or zero-extended to int32. */
#define IFD__EMU_WIDEN(name, V, T)                                                                 \
    static inline simde__m512i ifd__emu_##name(V a)                                                \
    {                                                                                              \
        T b[16];                                                                                   \
        memcpy(b, &a, sizeof b);                                                                   \
        ifd__emu_si r;                                                                             \
        for (int i = 0; i < 16; i++)                                                               \
            r.i32[i] = b[i];                                                                       \
        return r.v;                                                                                \
    }
IFD__EMU_WIDEN(cvtepu16_epi32, simde__m256i, uint16_t)
IFD__EMU_WIDEN(cvtepi8_epi32, __m128i, int8_t)
IFD__EMU_WIDEN(cvtepu8_epi32, __m128i, uint8_t)
#define _mm512_cvtepu16_epi32(a) ifd__emu_cvtepu16_epi32(a)
#define _mm512_cvtepi8_epi32(a)  ifd__emu_cvtepi8_epi32(a)
#define _mm512_cvtepu8_epi32(a)  ifd__emu_cvtepu8_epi32(a)

/* int32 → f32, rounded to nearest as (float) does. */
/* vpgatherdd: lane i = the int32 at base + vindex[i]·scale. */
static inline simde__m512i ifd__emu_i32gather_epi32(simde__m512i vindex, const void *base,
                                                    int scale)
{
    int32_t idx[16], r[16];
    memcpy(idx, &vindex, sizeof idx);
    for (int i = 0; i < 16; i++)
        memcpy(&r[i], (const char *)base + (int64_t)idx[i] * scale, 4);
    simde__m512i x;
    memcpy(&x, r, sizeof x);
    return x;
}
#undef _mm512_i32gather_epi32
#define _mm512_i32gather_epi32(vindex, base, scale) ifd__emu_i32gather_epi32(vindex, base, scale)

static inline simde__m512 ifd__emu_cvtepi32_ps(simde__m512i a)
{
    ifd__emu_si s = {.v = a};
    ifd__emu_ps r;
    for (int i = 0; i < 16; i++)
        r.f[i] = (float)s.i32[i];
    return r.v;
}
#define _mm512_cvtepi32_ps(a) ifd__emu_cvtepi32_ps(a)

#endif
