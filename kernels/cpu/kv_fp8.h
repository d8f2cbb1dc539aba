/*
 * kv_fp8.h — the fp8 e4m3 code of the KV pool's FP8 rows, shared by the CPU
 * kernels (attention.c: the writer and the dequantizer that are the GPU's
 * reference) and the CUDA kernels (rope_kv.cu, attn_common.cuh), so both
 * sides round and decode with the same integer operations.
 *
 * e4m3 is OCP's "E4M3FN" (NVIDIA's __nv_fp8_e4m3): sign, 4 exponent bits
 * (bias 7), 3 mantissa bits, no infinities, S.1111.111 is NaN, largest
 * finite 448, smallest subnormal 2^-9. Encoding rounds to nearest even and
 * saturates to ±448 (a row is scaled so that its largest magnitude maps to
 * 448, and a quotient may land a rounding step above it).
 *
 * Header-only, pure functions, no state: callable from any thread, from C
 * and from CUDA device code (IFD_FP8_FN).
 */
#ifndef IFD_KV_FP8_H
#define IFD_KV_FP8_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define IFD_FP8_FN static __host__ __device__ __forceinline__
#else
#define IFD_FP8_FN static inline
#endif

#define IFD_FP8_E4M3_MAX 448.0f

/* The e4m3 code of x: round to nearest even, saturating to ±448; NaN stays
 * NaN (0x7f with x's sign). */
IFD_FP8_FN uint8_t ifd_fp8_e4m3_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u)
        return (uint8_t)(sign | 0x7fu);
    if (u >= 0x43e80000u) /* |x| >= 464: past the tie between 448 and 480 */
        return (uint8_t)(sign | 0x7eu);
    if (u < 0x3c800000u) { /* |x| < 2^-6: subnormal, steps of 2^-9 */
        const int e = (int)(u >> 23) - 127;
        if (e < -11) /* |x| < 2^-11 < half a step (f32 subnormals included) */
            return sign;
        const uint32_t mant = (u & 0x7fffffu) | 0x800000u; /* |x| = mant · 2^(e − 23) */
        const int sh = 14 - e;                             /* 21..25 */
        const uint32_t m = (mant + (1u << (sh - 1)) - 1u + ((mant >> sh) & 1u)) >> sh;
        return (uint8_t)(sign | m); /* m = 8 is 2^-6, the smallest normal */
    }
    /* Normal: keep 3 of the 23 mantissa bits, rounding to nearest even; a
     * carry moves into the exponent. Rebias 127 → 7. */
    const uint32_t r = (u + 0x7ffffu + ((u >> 20) & 1u)) >> 20;
    return (uint8_t)(sign | (r - ((127u - 7u) << 3)));
}

/* The value of e4m3 code b (exact in f32). */
IFD_FP8_FN float ifd_fp8_e4m3_to_f32(uint8_t b)
{
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if ((b & 0x7fu) == 0x7fu) {
        const uint32_t nan = 0x7fc00000u;
        memcpy(&v, &nan, 4);
    } else if (e) {
        const uint32_t u = (e + 120u) << 23 | m << 20;
        memcpy(&v, &u, 4);
    } else {
        v = (float)m * 0.001953125f; /* m · 2^-9 */
    }
    return (b & 0x80u) ? -v : v;
}

#endif
