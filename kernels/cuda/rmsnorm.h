/*
 * rmsnorm.h — RMSNorm fused with the residual add, on the GPU
 * (kernels/cuda/rmsnorm.cu). See cuda_types.h for the conventions every
 * launcher follows (device pointers, stream order, errors, threading).
 */
#ifndef IFD_CUDA_RMSNORM_H
#define IFD_CUDA_RMSNORM_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/*
 * For each row r:
 *   h = residual[r] + x[r]   (f32; skipped when x is NULL: h = residual[r])
 *   residual[r] = h          (stored back only when x is given)
 *   y[r] = (h * scale) * w', scale = 1 / sqrtf(mean(h^2) + eps),
 *   w' = w, or 1 + w when `gemma` is nonzero (Gemma's RMSNorm weights).
 * Numerics as ifd_cpu_rmsnorm (sum of squares in double, mean and scale in
 * f32, two roundings for the product) so results match it to rounding.
 * y is written as out_dtype (F32, BF16 or F16; round to nearest even).
 * y may be the same buffer as residual when out_dtype is F32; no other
 * overlap is allowed. rows == 0 launches nothing.
 * Returns 0, IFD_EINVAL (rows < 0, dim <= 0, eps < 0, NULL pointers),
 * IFD_ENOTSUP (out_dtype), IFD_ECUDA.
 */
int ifd_cuda_rmsnorm(void *y,                          /* [rows, dim] of out_dtype */
                     float *residual,                  /* [rows, dim], in/out */
                     const float *IFD_CUDA_RESTRICT x, /* [rows, dim] or NULL */
                     const float *IFD_CUDA_RESTRICT w, /* [dim] */
                     int rows, int dim, float eps, int gemma, ifd_dtype_t out_dtype,
                     ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
