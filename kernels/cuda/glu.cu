/*
 * glu.cu — SwiGLU / tanh-GeGLU with the gate/up split (glu.h).
 *
 * Element-wise: a grid-stride loop over rows x n_ff, four elements per
 * step (float4 loads of gate and up, one packed store) when n_ff % 4 == 0
 * and the pointers allow, else one. The formulas repeat the CPU reference's
 * float operations in order with explicitly rounded intrinsics, so nvcc
 * cannot contract them into FMAs.
 *
 * Specializations: activation (2) x output dtype (3) x vector width (2).
 */
#include "glu.h"

#include "cuda_check.h"
#include "cuda_prim.cuh"

namespace
{

template <int ACT> IFD_DEV float act1(float g, float u)
{
    float a;
    if (ACT == IFD_GLU_SWIGLU) {
        a = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
    } else {
        const float K = 0.7978845608028654f, A = 0.044715f;
        const float z = __fmul_rn(__fmul_rn(K, g), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(A, g), g)));
        a = __fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, z))));
    }
    return __fmul_rn(a, u);
}

template <int OUT> IFD_DEV void put1(void *o, int64_t i, float x)
{
    if (OUT == IFD_DTYPE_F32)
        ((float *)o)[i] = x;
    else if (OUT == IFD_DTYPE_BF16)
        ((uint16_t *)o)[i] = ifd_f32_bf16(x);
    else
        ((uint16_t *)o)[i] = ifd_f32_f16(x);
}

template <int ACT, int OUT, bool VEC>
__global__ void __launch_bounds__(256) glu_kernel(void *out, const float *gu, int rows, int n_ff)
{
    const int per = VEC ? 4 : 1;
    const int64_t units = (int64_t)rows * (n_ff / per);
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = u / (n_ff / per), i = (u % (n_ff / per)) * per;
        const float *g = gu + r * 2 * n_ff + i, *up = g + n_ff;
        const int64_t o = r * n_ff + i;
        if (VEC) {
            const float4 gv = *(const float4 *)g, uv = *(const float4 *)up;
            float4 y;
            y.x = act1<ACT>(gv.x, uv.x);
            y.y = act1<ACT>(gv.y, uv.y);
            y.z = act1<ACT>(gv.z, uv.z);
            y.w = act1<ACT>(gv.w, uv.w);
            if (OUT == IFD_DTYPE_F32) {
                *(float4 *)((float *)out + o) = y;
            } else {
                const bool bf = OUT == IFD_DTYPE_BF16;
                uint2 p;
                p.x = bf ? ifd_pack2<true>(y.x, y.y) : ifd_pack2<false>(y.x, y.y);
                p.y = bf ? ifd_pack2<true>(y.z, y.w) : ifd_pack2<false>(y.z, y.w);
                *(uint2 *)((uint16_t *)out + o) = p;
            }
        } else {
            put1<OUT>(out, o, act1<ACT>(g[0], up[0]));
        }
    }
}

template <int ACT, int OUT>
int launch(void *out, const float *gu, int rows, int n_ff, cudaStream_t stream)
{
    const size_t osz = OUT == IFD_DTYPE_F32 ? 4 : 2;
    const bool vec = n_ff % 4 == 0 && (uintptr_t)gu % 16 == 0 && (uintptr_t)out % (4 * osz) == 0;
    const int64_t units = (int64_t)rows * (vec ? n_ff / 4 : n_ff);
    int64_t blocks = (units + 255) / 256;
    blocks = blocks > 65536 ? 65536 : blocks < 1 ? 1 : blocks;
    void (*kern)(void *, const float *, int, int) =
        vec ? glu_kernel<ACT, OUT, true> : glu_kernel<ACT, OUT, false>;
    IFD_LAUNCH(kern, dim3((unsigned)blocks), dim3(256), 0, stream, out, gu, rows, n_ff);
    IFD_CUDA_CHECK_LAUNCH("glu_kernel");
    return 0;
}

template <int ACT>
int launch_out(void *out, const float *gu, int rows, int n_ff, ifd_dtype_t t, cudaStream_t s)
{
    switch (t) {
    case IFD_DTYPE_F32:
        return launch<ACT, IFD_DTYPE_F32>(out, gu, rows, n_ff, s);
    case IFD_DTYPE_BF16:
        return launch<ACT, IFD_DTYPE_BF16>(out, gu, rows, n_ff, s);
    case IFD_DTYPE_F16:
        return launch<ACT, IFD_DTYPE_F16>(out, gu, rows, n_ff, s);
    default:
        return IFD_ENOTSUP;
    }
}

} // namespace

extern "C" int ifd_cuda_glu(void *IFD_CUDA_RESTRICT out, const float *IFD_CUDA_RESTRICT gate_up,
                            int rows, int n_ff, ifd_glu_t act, ifd_dtype_t out_dtype,
                            ifd_cuda_stream_t stream)
{
    if (rows < 0 || n_ff <= 0)
        return IFD_EINVAL;
    if (rows == 0)
        return 0;
    if (!out || !gate_up)
        return IFD_EINVAL;
    switch (act) {
    case IFD_GLU_SWIGLU:
        return launch_out<IFD_GLU_SWIGLU>(out, gate_up, rows, n_ff, out_dtype, stream);
    case IFD_GLU_GEGLU_TANH:
        return launch_out<IFD_GLU_GEGLU_TANH>(out, gate_up, rows, n_ff, out_dtype, stream);
    default:
        return IFD_ENOTSUP;
    }
}
