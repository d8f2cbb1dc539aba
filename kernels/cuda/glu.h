/*
 * glu.h — gated activations fused with the gate/up split, on the GPU
 * (glu.cu): SwiGLU and GeGLU (tanh form). See cuda_types.h for the
 * conventions every launcher follows.
 */
#ifndef IFD_CUDA_GLU_H
#define IFD_CUDA_GLU_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/* ifd_glu_t (SwiGLU, GeGLU tanh) is cpu_kernels.h's. */

/*
 * out[r, i] = act(gate_up[r, i]) * gate_up[r, n_ff + i]: each input row is a
 * fused gate|up projection output (gate first). The arithmetic is that of
 * ifd_cpu_swiglu / ifd_cpu_geglu_tanh's scalar path (gelu through
 * g / (1 + e^(-2z)), z = sqrt(2/pi) g (1 + 0.044715 g^2)), explicitly
 * rounded; only expf may differ in the last ulp. out is written as out_dtype
 * (F32, BF16 or F16, round to nearest even) and must not overlap gate_up.
 * Returns 0, IFD_EINVAL, IFD_ENOTSUP (act, out_dtype), IFD_ECUDA.
 */
int ifd_cuda_glu(void *IFD_CUDA_RESTRICT out,            /* [rows, n_ff] of out_dtype */
                 const float *IFD_CUDA_RESTRICT gate_up, /* [rows, 2 * n_ff] */
                 int rows, int n_ff, ifd_glu_t act, ifd_dtype_t out_dtype,
                 ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
