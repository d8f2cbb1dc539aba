/*
 * vision.h — the kernels of a ViT encoder (SigLIP, worker/vision.c) on the
 * GPU (kernels/cuda/vision.cu): LayerNorm with bias fused with the residual
 * add, gelu (tanh form), a row-table add (position embeddings), 2-D average
 * pooling of a patch grid and dense bidirectional multi-head attention over
 * one sequence. The CPU references are kernels/cpu/vision.c and
 * ifd_cpu_gelu_tanh. See cuda_types.h for the conventions every launcher
 * follows (device pointers, stream order, errors, threading). rows == 0 (or
 * n == 0) launches nothing. Outputs of out_dtype (F32, BF16 or F16) are
 * rounded to nearest even.
 */
#ifndef IFD_CUDA_VISION_H
#define IFD_CUDA_VISION_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/*
 * For each row r: if x: residual[r] += x[r] (stored back); then
 * y[r] = (h − mean) · rstd · w + b (b NULL: + 0), mean and the biased
 * variance of h = residual[r] in double, rstd = 1 / sqrtf(var + eps) in
 * float: ifd_cpu_layernorm's numerics, explicitly rounded. y may be the
 * residual buffer itself (F32, in place); no other overlap.
 * Returns 0, IFD_EINVAL (rows < 0, dim <= 0, eps < 0, NULL pointers),
 * IFD_ENOTSUP (out_dtype), IFD_ECUDA.
 */
int ifd_cuda_layernorm(void *y,                          /* [rows, dim] of out_dtype */
                       float *residual,                  /* [rows, dim], in/out */
                       const float *IFD_CUDA_RESTRICT x, /* [rows, dim] or NULL */
                       const float *IFD_CUDA_RESTRICT w, /* [dim] */
                       const float *IFD_CUDA_RESTRICT b, /* [dim] or NULL */
                       int rows, int dim, float eps, ifd_dtype_t out_dtype,
                       ifd_cuda_stream_t stream);

/* out[i] = gelu_tanh(x[i]) for i < n, ifd_cpu_gelu_tanh's formula
 * (g / (1 + e^(−2z))) explicitly rounded; only expf may differ in the last
 * ulp. out must not overlap x. Returns 0, IFD_EINVAL, IFD_ENOTSUP, IFD_ECUDA. */
int ifd_cuda_gelu_tanh(void *IFD_CUDA_RESTRICT out,      /* [n] of out_dtype */
                       const float *IFD_CUDA_RESTRICT x, /* [n] */
                       int64_t n, ifd_dtype_t out_dtype, ifd_cuda_stream_t stream);

/* x[r, c] += t[r, c] for r < rows, c < cols (f32; exact as the CPU's add).
 * Returns 0, IFD_EINVAL, IFD_ECUDA. */
int ifd_cuda_add_rows(float *IFD_CUDA_RESTRICT x,       /* [rows, cols], in/out */
                      const float *IFD_CUDA_RESTRICT t, /* [rows, cols] */
                      int rows, int cols, ifd_cuda_stream_t stream);

/* out[(pi · side/k + pj), c] = (Σ over the k × k window, row-major, in
 * float) · (1 / k²) for a row-major rows × side grid of `channels`-wide
 * vectors (rows = side: the whole square grid; fewer: a band of it):
 * ifd_cpu_avg_pool2d bit for bit. rows % k and side % k must be 0.
 * Returns 0, IFD_EINVAL, IFD_ECUDA. */
int ifd_cuda_avg_pool2d(float *IFD_CUDA_RESTRICT out,     /* [(rows/k) · (side/k), channels] */
                        const float *IFD_CUDA_RESTRICT x, /* [rows · side, channels] */
                        int rows, int side, int k, int channels, ifd_cuda_stream_t stream);

/* The largest head_dim ifd_cuda_dense_attention takes. */
#define IFD_CUDA_DENSE_MAX_HEAD_DIM 128

/*
 * Dense bidirectional attention of one sequence of n tokens, every head, for
 * the query rows t in [q0, q1) (0 <= q0 <= q1 <= n; other rows of out are
 * untouched; a row's bits do not depend on the range):
 * out[t, h·D + d] = Σ_j softmax_j(scale · q_t · k_j) v_j[d], with q, k, v
 * the head's slices of qkv's rows (Q heads, then K, then V: ld 3·H·D, as
 * ifd_cpu_dense_attention). f32 arithmetic with an online softmax (q
 * pre-multiplied by scale as the CPU does; the sums run in another order,
 * so results agree with the CPU's to rounding, not bit for bit).
 * head_dim <= IFD_CUDA_DENSE_MAX_HEAD_DIM. out must not overlap qkv.
 * Returns 0, IFD_EINVAL, IFD_ENOTSUP (head_dim, out_dtype), IFD_ECUDA.
 */
int ifd_cuda_dense_attention(void *IFD_CUDA_RESTRICT out,        /* [n, H·D] of out_dtype */
                             const float *IFD_CUDA_RESTRICT qkv, /* [n, 3·H·D] */
                             int n, int q0, int q1, int n_heads, int head_dim, float scale,
                             ifd_dtype_t out_dtype, ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
