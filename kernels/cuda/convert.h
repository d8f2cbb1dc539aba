/*
 * convert.h — f32 activations to a 16-bit (or f32) dtype on the GPU
 * (convert.cu): the CUDA backend turns the attention kernels' f32 output
 * into the bf16 its GEMMs read. See cuda_types.h for the conventions every
 * launcher follows.
 */
#ifndef IFD_CUDA_CONVERT_H
#define IFD_CUDA_CONVERT_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/*
 * out[i] = x[i] as out_dtype (F32: a copy; BF16, F16: round to nearest
 * even, NaN stays NaN), i < n. out must not overlap x.
 * Returns 0, IFD_EINVAL (n < 0, NULL pointers), IFD_ENOTSUP (out_dtype),
 * IFD_ECUDA.
 */
int ifd_cuda_convert_f32(void *IFD_CUDA_RESTRICT out,        /* [n] of out_dtype */
                         const float *IFD_CUDA_RESTRICT x,   /* [n] */
                         int64_t n, ifd_dtype_t out_dtype, ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
