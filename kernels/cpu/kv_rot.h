/*
 * kv_rot.h — the rotated basis of quantized K: for the GGML block types
 * (Q8_0, Q4_0) with a head_dim that is a multiple of 64, the pool's K rows
 * hold H·k instead of k, and the queries are rotated alike (H·q), where H is
 * the orthonormal Walsh-Hadamard matrix of size n (the largest power of two
 * dividing head_dim, applied to each run of n values of a head). H is
 * orthonormal, so (H·q)·(H·k) = q·k: the attention kernels are unchanged,
 * only what is rounded differs. The rotation spreads RoPE'd K's few large
 * channels over all n values, so a 32-value block no longer shares its
 * scale with an outlier: against the float64 oracle it halves the K error
 * of q8_0 and q4_0 (docs/kvpool.md, "Rotated K"). It is llama.cpp's
 * attn_rot_k (src/llama-kv-cache.cpp: the same condition and size), which
 * is where the gap to llama.cpp's quantized K came from.
 *
 * Applied by the backends' RoPE+KV write after RoPE (the CPU backend with
 * ifd_cpu_kv_rotate, rope_kv.cu in its quantized kernel, with the same
 * butterflies in the same order and the same scale, so both write the same
 * bytes). FP8 rows are not rotated (one scale per row and 3 mantissa bits
 * per value: a rotation does not change their error), nor V.
 *
 * Header-only, pure functions, no state: callable from any thread, from C
 * and from CUDA host code (the device side is rope_kv.cu's warp version).
 */
#ifndef IFD_KV_ROT_H
#define IFD_KV_ROT_H

#include <math.h>

#if defined(__CUDACC__)
#define IFD_KVROT_FN static __host__ __device__ __forceinline__
#else
#define IFD_KVROT_FN static inline
#endif

/* The rotation size of K rows of pool dtype `dtype` (an ifd_dtype_t code:
 * Q8_0 = 3, Q4_0 = 4) and `head_dim`: the largest power of two n ≥ 64 that
 * divides head_dim, or 0 (no rotation: another dtype, or head_dim not a
 * multiple of 64). */
IFD_KVROT_FN int ifd_kv_k_rot(int dtype, int head_dim)
{
    if ((dtype != 3 && dtype != 4) || head_dim <= 0 || head_dim % 64 != 0)
        return 0;
    int n = 64;
    while (head_dim % (2 * n) == 0)
        n *= 2;
    return n;
}

/* The scale of the size-n transform, 1/√n in f32 (exact for 64, 256, 1024).
 * Computed on the host for both sides (sqrtf and the division are correctly
 * rounded), so the CPU and CUDA writers multiply by the same float. */
static inline float ifd_kv_rot_scale(int n)
{
    return 1.0f / sqrtf((float)n);
}

/* In place, x[0..n) := H·x[0..n): butterflies (a, b) → (a + b, a − b) over
 * strides 1, 2, 4, …, n/2 in that order, then × scale. H is symmetric and
 * H·H = I: applying it twice gives x back (to rounding). */
static inline void ifd_kv_fwht(float *x, int n, float scale)
{
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    for (int j = 0; j < n; j++)
        x[j] *= scale;
}

#endif /* IFD_KV_ROT_H */
