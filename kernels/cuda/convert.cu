/*
 * convert.cu — f32 → F32/BF16/F16 element-wise (convert.h).
 *
 * A grid-stride loop, one element per step; the rounding is cuda_prim.cuh's
 * (round to nearest even, the CPU's ifd_f32_to_bf16 / ifd_f32_to_f16).
 * Specializations: output dtype (3).
 */
#include "convert.h"

#include "cuda_check.h"
#include "cuda_prim.cuh"

namespace
{

template <int OUT>
__global__ void __launch_bounds__(256) convert_kernel(void *out, const float *x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (OUT == IFD_DTYPE_F32)
            ((float *)out)[i] = x[i];
        else if (OUT == IFD_DTYPE_BF16)
            ((uint16_t *)out)[i] = ifd_f32_bf16(x[i]);
        else
            ((uint16_t *)out)[i] = ifd_f32_f16(x[i]);
    }
}

template <int OUT> int launch(void *out, const float *x, int64_t n, cudaStream_t stream)
{
    int64_t blocks = (n + 255) / 256;
    blocks = blocks > 65536 ? 65536 : blocks < 1 ? 1 : blocks;
    IFD_LAUNCH(convert_kernel<OUT>, dim3((unsigned)blocks), dim3(256), 0, stream, out, x, n);
    IFD_CUDA_CHECK_LAUNCH("convert_kernel");
    return 0;
}

} // namespace

extern "C" int ifd_cuda_convert_f32(void *IFD_CUDA_RESTRICT out, const float *IFD_CUDA_RESTRICT x,
                                    int64_t n, ifd_dtype_t out_dtype, ifd_cuda_stream_t stream)
{
    if (n < 0)
        return IFD_EINVAL;
    if (n == 0)
        return 0;
    if (!out || !x)
        return IFD_EINVAL;
    switch (out_dtype) {
    case IFD_DTYPE_F32:
        return launch<IFD_DTYPE_F32>(out, x, n, stream);
    case IFD_DTYPE_BF16:
        return launch<IFD_DTYPE_BF16>(out, x, n, stream);
    case IFD_DTYPE_F16:
        return launch<IFD_DTYPE_F16>(out, x, n, stream);
    default:
        return IFD_ENOTSUP;
    }
}
