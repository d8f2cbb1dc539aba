/*
 * dequant.h — ggml quantized weights to bf16 on the GPU (dequant.cu), used
 * when loading a model whose GEMMs run in bf16. See cuda_types.h for the
 * conventions every launcher follows.
 */
#ifndef IFD_CUDA_DEQUANT_H
#define IFD_CUDA_DEQUANT_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/*
 * Dequantizes n elements of ggml type `type` (ifd_ggml_type_t) at x (packed
 * blocks, as in a GGUF file, any alignment) into bf16 y. Each value is
 * computed in f32 with the same operations in the same order as
 * ifd_cpu_dequantize (no FMA), then rounded to nearest even, so y equals
 * ifd_f32_to_bf16 of the CPU's output bit for bit.
 * Supported: Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, and F16 / F32 (conversion).
 * y must be 16-byte aligned. n must be a multiple of the type's block size.
 * Returns 0, IFD_EINVAL (n, alignment, NULL), IFD_ENOTSUP (type), IFD_ECUDA.
 */
int ifd_cuda_dequantize_bf16(uint16_t *IFD_CUDA_RESTRICT y,   /* [n] bf16 */
                             const void *IFD_CUDA_RESTRICT x, /* n elements of `type` */
                             uint32_t type, int64_t n, ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
