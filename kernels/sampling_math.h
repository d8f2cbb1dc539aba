/*
 * sampling_math.h — the arithmetic that defines a sampled token bit for bit,
 * shared by the CPU sampler (worker/sampler.c) and the CUDA sampling kernel.
 *
 * The sampler turns scaled logits into integer weights and draws with an
 * integer inverse CDF, so the result does not depend on summation order,
 * thread count, vector width or the platform's libm:
 *
 *   q(x) = ifd_sampling_weight(x), x = s - max(s) <= 0 (float32),
 *          ~= e^x * 2^43, an integer in [0, 2^43]; 0 for x < -30;
 *   Z    = sum of q over the candidates (exact; < 2^63 for vocabularies up
 *          to IFD_SAMPLING_MAX_VOCAB = 2^20);
 *   t    = ifd_sampling_target(seed, position, Z) = floor(u * Z), u the
 *          53-bit uniform of kernels/rng.h at (seed, position, counter 0);
 *   the token is the first candidate, in ascending token id, at which the
 *          running sum of q exceeds t.
 *
 * e^x is computed here with IEEE float32 operations only (Cody-Waite range
 * reduction, a degree-7 Taylor polynomial by Horner, an exact power-of-two
 * scale), never with expf/exp, whose results differ between glibc and CUDA.
 * Every float operation is one correctly rounded add or multiply, with
 * subnormals kept: C callers must be compiled without FMA contraction
 * (-ffp-contract=off, GCC's default in ISO C mode; worker/CMakeLists.txt sets
 * it for sampler.c) and CUDA code without flush-to-zero (no -use_fast_math);
 * the CUDA path spells the operations __fmul_rn/__fadd_rn, which nvcc never
 * fuses. The weight is within 4e-7 relative of e^x * 2^43 (before the final
 * rounding to an integer), far finer than any sampling test can see.
 *
 * The function is branch-free so that loops over a row vectorize (SSE2
 * suffices: float ops, int32 shifts, float-to-double widening).
 * The final logit soft-cap, which comes before all of it, is here too
 * (ifd_softcap, the same way: no tanhf).
 *
 * Header-only, no state: compiles as C11 and as CUDA device code. Thread-safe.
 */
#ifndef IFD_SAMPLING_MATH_H
#define IFD_SAMPLING_MATH_H

#include "rng.h"

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define IFD_SAMPLING_FN static __host__ __device__ __forceinline__
#else
#define IFD_SAMPLING_FN static inline
#endif
/* The _rn intrinsics exist in device code only: nvcc's host pass compiles
 * these functions for the host too, with plain (uncontracted) operations. */
#if defined(__CUDA_ARCH__)
#define IFD__FMUL(a, b) __fmul_rn((a), (b))
#define IFD__FADD(a, b) __fadd_rn((a), (b))
#define IFD__DADD(a, b) __dadd_rn((a), (b))
#define IFD__FDIV(a, b) __fdiv_rn((a), (b))
#else
#define IFD__FMUL(a, b) ((a) * (b))
#define IFD__FADD(a, b) ((a) + (b))
#define IFD__DADD(a, b) ((a) + (b))
#define IFD__FDIV(a, b) ((a) / (b))
#endif

/* Largest vocabulary the integer weights are defined for: 2^20 weights of at
 * most 2^43 sum to less than 2^63. */
#define IFD_SAMPLING_MAX_VOCAB (1 << 20)

/* log2 of the weight of the most probable token: q(0) = 2^43. */
#define IFD_SAMPLING_WEIGHT_BITS 43

/* Below this x = s - max(s) a token's weight is 0 by definition (e^-30 * 2^43
 * is under 1 anyway), so it can never be drawn. */
#define IFD_SAMPLING_X_MIN (-30.0f)

/* The rng.h counter of the token draw; other counters are reserved. */
#define IFD_SAMPLING_COUNTER_DRAW 0

/*
 * The weight of a token whose scaled logit lies x below the maximum (x = s - m
 * in float32, and exactly 0 for s == m), in two steps: the float value v, and
 * its rounding q to an integer. Definition, float32 operations in this order:
 *   keep = x >= -30 (false for NaN); xc = keep ? min(x, 0) : -30;
 *   k  = (xc * INV_LN2 + 0x1.8p23) - 0x1.8p23     (round to nearest even);
 *   r  = (xc - k * LN2_HI) - k * LN2_LO;
 *   P  = 1 + r(1 + r(1/2 + r(1/6 + r(1/24 + r(1/120 + r(1/720 + r/5040))))))
 *        by Horner from the innermost term, constants rounded to float;
 *   v  = keep ? P * 2^(k + 43) : 0   (exact: a power-of-two scale);
 *   q  = the integer nearest v, ties to even ((double)v + 2^52 - 2^52).
 * Exactly q(0) = 2^43, q never exceeds 2^43, and q >= 1 whenever keep.
 * ifd_sampling_weight_value gives v, ifd_sampling_round gives q from v, and
 * ifd_sampling_weight composes them (loops may split the two to vectorize
 * the float part at full width).
 */
IFD_SAMPLING_FN float ifd_sampling_weight_value(float x)
{
    /* Cody-Waite split of ln 2: LN2_HI has 16 significant bits, so
     * k * LN2_HI is exact for |k| <= 44. */
    const float inv_ln2 = 0x1.715476p+0f;
    const float ln2_hi = 0x1.62e4p-1f;
    const float ln2_lo = 0x1.7f7d1cp-20f;
    const float shifter = 0x1.8p23f;
    const int keep = x >= IFD_SAMPLING_X_MIN;
    float xc = x > 0.0f ? 0.0f : x;
    xc = keep ? xc : IFD_SAMPLING_X_MIN;
    float k = IFD__FADD(IFD__FADD(IFD__FMUL(xc, inv_ln2), shifter), -shifter);
    float r = IFD__FADD(xc, -IFD__FMUL(k, ln2_hi));
    r = IFD__FADD(r, -IFD__FMUL(k, ln2_lo));
    float p = 0x1.a01a02p-13f; /* 1/n! rounded to float, n = 7 down to 0 */
    p = IFD__FADD(IFD__FMUL(p, r), 0x1.6c16c2p-10f);
    p = IFD__FADD(IFD__FMUL(p, r), 0x1.111112p-7f);
    p = IFD__FADD(IFD__FMUL(p, r), 0x1.555556p-5f);
    p = IFD__FADD(IFD__FMUL(p, r), 0x1.555556p-3f);
    p = IFD__FADD(IFD__FMUL(p, r), 0x1.0p-1f);
    p = IFD__FADD(IFD__FMUL(p, r), 1.0f);
    p = IFD__FADD(IFD__FMUL(p, r), 1.0f);
    /* k is in [-43, 0], so 2^(k+43) is a normal float built exactly from its
     * exponent bits, and P * 2^(k+43) < 2^44 is exact. */
    uint32_t sbits = (uint32_t)((int32_t)k + IFD_SAMPLING_WEIGHT_BITS + 127) << 23;
    float scale;
    memcpy(&scale, &sbits, sizeof scale);
    float v = IFD__FMUL(p, scale);
    return keep ? v : 0.0f;
}

/* q from v (0 <= v < 2^44): adding 2^52 in double rounds v to an integer
 * held in the low mantissa bits. */
IFD_SAMPLING_FN uint64_t ifd_sampling_round(float v)
{
    double w = IFD__DADD((double)v, 0x1p52);
    uint64_t wbits;
    memcpy(&wbits, &w, sizeof wbits);
    return wbits - 0x4330000000000000ull;
}

IFD_SAMPLING_FN uint64_t ifd_sampling_weight(float x)
{
    return ifd_sampling_round(ifd_sampling_weight_value(x));
}

/* floor(a * b / 2^53) for a < 2^53, exactly. */
IFD_SAMPLING_FN uint64_t ifd__sampling_mulhi53(uint64_t a, uint64_t b)
{
#if defined(__CUDA_ARCH__)
    return __umul64hi(a << 11, b);
#else
    __extension__ typedef unsigned __int128 ifd__u128;
    return (uint64_t)(((ifd__u128)a * b) >> 53);
#endif
}

/*
 * The draw target for a total weight Z > 0: floor(u * Z) with
 * u = (ifd_rng_u64(seed, position, IFD_SAMPLING_COUNTER_DRAW) >> 11) / 2^53,
 * computed exactly in integers; always < Z.
 */
IFD_SAMPLING_FN uint64_t ifd_sampling_target(uint64_t seed, uint64_t position, uint64_t total)
{
    uint64_t r = ifd_rng_u64(seed, position, IFD_SAMPLING_COUNTER_DRAW) >> 11;
    return ifd__sampling_mulhi53(r, total);
}

/*
 * The final logit soft-cap (Gemma 2 style): c * tanh(x / c), -inf kept
 * (an id past the tokenizer's), NaN kept, +inf -> c. Part of the logits
 * that define a sampled token, so it is defined here with IEEE float32
 * operations only, for the host (model.c) and the device (sample.cu) to
 * compute the same bits — libm's tanhf and CUDA's differ in the last bit.
 * With y = x / c and a = |y|: a >= 9.1 gives 1 (tanh is within 2^-25 of
 * it); a < 2^-12 gives a; otherwise tanh(a) = -e / (2 + e) with
 * e = expm1(-2a), computed as 2^k * (1 + p) - 1 (or p when k = 0) with
 * k = round(-2a / ln 2), r = -2a - k ln 2 by Cody-Waite, and
 * p = expm1(r) by a degree-8 Taylor polynomial (|r| <= 0.35: truncation
 * below 1e-9 relative). Within a few ulp of tanh; sign restored from y.
 */
IFD_SAMPLING_FN float ifd_softcap(float x, float cap)
{
    if (x != x || x < -0x1.fffffep127f) /* NaN, -inf */
        return x;
    const float y = IFD__FDIV(x, cap);
    uint32_t yb;
    memcpy(&yb, &y, sizeof yb);
    const uint32_t sign = yb & 0x80000000u, ab = yb & 0x7fffffffu;
    float a;
    memcpy(&a, &ab, sizeof a);
    float t;
    if (!(a < 9.1f)) {
        t = 1.0f;
    } else if (a < 0x1p-12f) {
        t = a;
    } else {
        const float inv_ln2 = 0x1.715476p+0f;
        const float ln2_hi = 0x1.62e4p-1f;
        const float ln2_lo = 0x1.7f7d1cp-20f;
        const float shifter = 0x1.8p23f;
        const float u = IFD__FMUL(-2.0f, a);
        const float k = IFD__FADD(IFD__FADD(IFD__FMUL(u, inv_ln2), shifter), -shifter);
        float r = IFD__FADD(u, -IFD__FMUL(k, ln2_hi));
        r = IFD__FADD(r, -IFD__FMUL(k, ln2_lo));
        float q = 0x1.a01a02p-16f; /* 1/8!, then 1/7! ... 1/2!, rounded to float */
        q = IFD__FADD(IFD__FMUL(q, r), 0x1.a01a02p-13f);
        q = IFD__FADD(IFD__FMUL(q, r), 0x1.6c16c2p-10f);
        q = IFD__FADD(IFD__FMUL(q, r), 0x1.111112p-7f);
        q = IFD__FADD(IFD__FMUL(q, r), 0x1.555556p-5f);
        q = IFD__FADD(IFD__FMUL(q, r), 0x1.555556p-3f);
        q = IFD__FADD(IFD__FMUL(q, r), 0x1.0p-1f);
        const float p = IFD__FADD(r, IFD__FMUL(IFD__FMUL(r, r), q));
        float e = p;
        if (k != 0.0f) { /* k in [-27, -1]: 2^k a normal float, built exactly */
            const uint32_t sbits = (uint32_t)((int32_t)k + 127) << 23;
            float scale;
            memcpy(&scale, &sbits, sizeof scale);
            e = IFD__FADD(IFD__FMUL(scale, IFD__FADD(1.0f, p)), -1.0f);
        }
        t = IFD__FDIV(-e, IFD__FADD(2.0f, e));
    }
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    tb |= sign;
    memcpy(&t, &tb, sizeof t);
    return IFD__FMUL(cap, t);
}

#endif
