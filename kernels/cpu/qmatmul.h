/*
 * qmatmul.h — y = x · wᵀ with w kept in its ggml quantized form (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) and x quantized per 32 elements to
 * 8 bits, for the CPU backend: decode reads the file's bytes, not 4-8× as
 * many f32 ones.
 *
 * Weights: ifd_cpu_qweight_pack repacks a GGUF tensor [n, k] once (at model
 * load) into groups of 8 rows whose 32-element blocks are interleaved so
 * that one 256-bit vector holds the same 4 columns of 8 rows (qmatmul.c
 * explains the layout). The packed size is the file's: the legacy types
 * exactly, Q4_K/Q5_K +3% (their 6-bit scales stored as bytes), Q6_K exactly
 * (its 6-bit quants as a nibble and two high bits). The layout does not
 * depend on the ISA.
 *
 * Activations: ifd_cpu_quantize_act turns each row of x into 32-element
 * blocks {d = max|x|/127, q = round(x/d) ∈ [−127, 127], s = Σq, h = Σ of
 * the first 16 q}.
 *
 * Exactness contract: every output y[i][j] is computed by one formula in one
 * order, whatever m, the thread count, the rows around it or the SIMD path:
 * per block b in order, an exact integer dot product isum_b, then
 *   acc = fma(ws_b·dx_b, (float)(isum_b − zp·s_b), acc)
 *   acc = fma(wm_b, dx_b·(float)s_b, acc)          (types with a min)
 * (Q6_K: two half-block terms instead, one per 16-element scale). Scalar,
 * AVX2 and AVX-512 results are therefore bitwise equal, and a row's result
 * does not depend on its batch (the engine's "batched equals alone"). The
 * product picks its path at run time: AVX-512 VNNI (two row groups a
 * vector, vpdpbusd), else AVX2/FMA/F16C, else scalar; AVX-512 CPUs without
 * VNNI (Skylake-SP/X) take the AVX2 path. The activations are quantized by
 * the AVX2 code on both SIMD paths.
 *
 * Threading: ifd_cpu_qmatmul splits the rows of w over the pool (tp may be
 * NULL). Everything else is single-threaded and reentrant. Memory is the
 * caller's: outputs first, no allocation inside.
 */
#ifndef IFD_QMATMUL_H
#define IFD_QMATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "threadpool.h"

/* True for the ggml types ifd_cpu_qmatmul computes on. */
bool ifd_cpu_qtype_supported(uint32_t type);

/* Bytes of the packed form of a [n, k] weight of ggml `type`: > 0, or
 * IFD_EINVAL (n or k ≤ 0, k not a multiple of the type's block) or
 * IFD_ENOTSUP (type). */
int64_t ifd_cpu_qweight_bytes(uint32_t type, int n, int k);

/* Repacks n GGUF rows of k elements of `type` (src: n · k/block blocks,
 * contiguous, as in the file) into dst [ifd_cpu_qweight_bytes]. Rows past n
 * in the last group of 8 are zeros. 0, IFD_EINVAL, IFD_ENOTSUP. */
int ifd_cpu_qweight_pack(void *restrict dst, const void *restrict src, uint32_t type, int n,
                         int k);

/* Row `row` of a packed weight, dequantized into y [k]; the values are
 * bitwise those ifd_cpu_dequantize gives for the source row. For embedding
 * lookups. 0, IFD_EINVAL (row out of range), IFD_ENOTSUP. */
int ifd_cpu_qweight_row(float *restrict y, const void *restrict wq, uint32_t type, int n, int k,
                        int row);

/* Quantized activations [m, k]: views into one caller buffer. */
typedef struct {
    int8_t *q;  /* [m, k] */
    float *d;   /* [m, k/32] block scales */
    int32_t *s; /* [m, k/32] block sums of q */
    int m, k;
    int32_t *h; /* [m, k/32] sums of each block's first 16 q (Q6_K's half-block zero point) */
    float *ds;  /* [m, k/32] d·(float)s, the min term's factor (Q4_1, Q5_1, Q4_K, Q5_K) */
} ifd_cpu_qact_t;

/* Bytes ifd_cpu_qact_init needs for m rows of k (k a multiple of 32), or
 * IFD_EINVAL as a negative number. */
int64_t ifd_cpu_qact_bytes(int m, int k);

/* Lays a->q, a->d, a->s, a->h, a->ds out in mem [ifd_cpu_qact_bytes(m, k)] (64-byte
 * aligned). The views live as long as mem. 0 or IFD_EINVAL. */
int ifd_cpu_qact_init(ifd_cpu_qact_t *a, void *mem, int m, int k);

/* Quantizes x [a->m, a->k] into a, rows split over the pool. Non-finite x
 * give unspecified (but not undefined) results. 0 or IFD_EINVAL. */
int ifd_cpu_quantize_act(ifd_cpu_qact_t *a, const float *restrict x, ifd_threadpool_t *tp);

/* y[i, 0..n) = x[i] · wᵀ for a packed wq [n, xa->k] of `type`, i < xa->m;
 * y's rows are ldy ≥ n floats apart and columns n..ldy are not touched (so
 * the parts of a projection can fill their column ranges of one output).
 * 0, IFD_EINVAL (shapes), IFD_ENOTSUP (type). */
int ifd_cpu_qmatmul(float *restrict y, int64_t ldy, const ifd_cpu_qact_t *xa,
                    const void *restrict wq, uint32_t type, int n, ifd_threadpool_t *tp);

/* For tests and benchmarks: the same with the SIMD path forced
 * (0 scalar, 1 AVX2, 2 AVX-512 VNNI, 3 the same with AMX-INT8 tiles from 9
 * activation rows on (ifd__cpu_qmatmul_set_amx_min_m; 9 to 15 rows as one
 * tile of that many) — the product only, the activations take 0 or ≥ 1;
 * IFD_ENOTSUP when this CPU lacks it). */
int ifd__cpu_quantize_act_isa(ifd_cpu_qact_t *a, const float *restrict x, ifd_threadpool_t *tp,
                              int isa);
int ifd__cpu_qmatmul_isa(float *restrict y, int64_t ldy, const ifd_cpu_qact_t *xa,
                         const void *restrict wq, uint32_t type, int n, ifd_threadpool_t *tp,
                         int isa);

/* For benchmarks: the fewest activation rows for which the AVX-512 path
 * runs its two-group kernel (fewer run the AVX2 kernel; the bits are the
 * same either way); m ≤ 0 restores the CPU's default (5 on AMD, 1
 * elsewhere: qmatmul.c). Process-wide, not synchronized: set it before any
 * product runs. */
void ifd__cpu_qmatmul_set_avx512_min_m(int m);

/* For tests and benchmarks: the fewest activation rows for which the AMX
 * path (3) runs AMX tiles (products of fewer rows than 16 as one tile of
 * that many rows); fewer run the AVX-512 VNNI kernel, with the same bits.
 * m ≤ 0 restores the default (qmatmul.c, QMM_AMX_MIN_M). Process-wide, as
 * above. */
void ifd__cpu_qmatmul_set_amx_min_m(int m);

/* For benchmarks: software prefetch this many bytes ahead of each block the
 * SIMD kernels read (0: none; negative: the default, 2048). Process-wide, as
 * above; x86 only. */
void ifd__cpu_qmatmul_set_prefetch(int bytes);

/* For benchmarks: tasks per pool thread a product is split into (default 1;
 * ≤ 0 restores it). Process-wide, as above. */
void ifd__cpu_qmatmul_set_split(int tasks_per_thread);

#endif
