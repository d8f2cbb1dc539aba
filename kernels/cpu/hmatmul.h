/*
 * hmatmul.h — y = x · wᵀ with w kept in 16 bits (f16 or bf16: GGUF F16/BF16
 * files and the bf16 safetensors of most HF checkpoints), x and y in f32,
 * f32 accumulation, for the CPU backend: such a weight takes the file's
 * bytes in memory and decode reads half of what an f32 copy would.
 *
 * Weights: ifd_cpu_hweight_pack copies a [n, k] matrix of 16-bit values once
 * (at model load) into panels of 16 rows, each panel [k][16] (element p of
 * row j0 + j at panel[p·16 + j]; the rows past n in the last panel are
 * zeros). The bits are copied, not converted, so the layout serves both
 * formats; the format is an argument of the product. The packed size is the
 * file's (rounded up to 16 rows).
 *
 * Exactness contract: every output y[i][j] is, for each k-block of kc
 * columns in order (kc depends on k only: equal blocks of at most 384,
 * multiples of 16, as ifd_cpu_matmul_packed's), one fma chain
 *   acc = fma(x[i][p], w[j][p], acc)   for p in the block, from acc = 0,
 * added into y (y = acc for the first block, then y = y + acc). The same
 * operations in the scalar, AVX2 and AVX-512 paths, whatever m, the thread
 * count or the rows around it, so a row's result is bitwise independent of
 * its batch and of the path; on an AVX2 machine (16-row f32 panels) it is
 * also bitwise the result of ifd_cpu_matmul_packed on the weights converted
 * to f32 (the conversion is exact).
 *
 * Threading: ifd_cpu_hmatmul splits the panels over the pool (tp may be
 * NULL); everything else is single-threaded and reentrant. Memory is the
 * caller's: outputs first, no allocation inside.
 */
#ifndef IFD_HMATMUL_H
#define IFD_HMATMUL_H

#include <stdbool.h>
#include <stdint.h>

#include "threadpool.h"

/* True for IFD_GGML_F16 and IFD_GGML_BF16. */
bool ifd_cpu_htype_supported(uint32_t type);

/* 16-bit elements of the packed form of a [n, k] weight, or IFD_EINVAL
 * (n or k ≤ 0) as a negative number. */
int64_t ifd_cpu_hweight_elems(int n, int k);

/* Repacks src [n, k] (16-bit values, row-major as in the file) into dst
 * [ifd_cpu_hweight_elems(n, k)]. 0 or IFD_EINVAL. */
int ifd_cpu_hweight_pack(uint16_t *restrict dst, const uint16_t *restrict src, int n, int k);

/* Row `row` of a packed weight of `type`, converted to f32 into y [k]
 * (exactly). For embedding lookups. 0, IFD_EINVAL, IFD_ENOTSUP (type). */
int ifd_cpu_hweight_row(float *restrict y, const uint16_t *restrict wp, uint32_t type, int n,
                        int k, int row);

/* y[i, 0..n) = x[i] · wᵀ for i < m, x [m, k] f32 rows, wp the packed [n, k]
 * weight of `type`; y's rows are ldy ≥ n floats apart and columns n..ldy
 * are not touched. 0, IFD_EINVAL (shapes), IFD_ENOTSUP (type). */
int ifd_cpu_hmatmul(float *restrict y, int64_t ldy, const float *restrict x,
                    const uint16_t *restrict wp, uint32_t type, int m, int n, int k,
                    ifd_threadpool_t *tp);

/* For tests and benchmarks: the same with the path forced (0 scalar,
 * 1 AVX2, 2 AVX-512; IFD_ENOTSUP when this CPU lacks it). */
int ifd__cpu_hmatmul_isa(float *restrict y, int64_t ldy, const float *restrict x,
                         const uint16_t *restrict wp, uint32_t type, int m, int n, int k,
                         ifd_threadpool_t *tp, int isa);

#endif
