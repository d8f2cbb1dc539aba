/*
 * embed.cu — the embedding gather (embed.h).
 *
 * One block per token; the row is copied with the widest access the
 * alignment allows (8 elements of a 16-bit table or 4 of an f32 one per
 * step when dim and the pointers line up; else one). Specializations:
 * table dtype (3) x vector width (2).
 */
#include "embed.h"

#include "cuda_check.h"
#include "cuda_prim.cuh"

namespace
{

template <int T> IFD_DEV float get1(const void *tab, int64_t i)
{
    if (T == IFD_DTYPE_F32)
        return ((const float *)tab)[i];
    if (T == IFD_DTYPE_BF16)
        return ifd_bf16_f32(((const uint16_t *)tab)[i]);
    return ifd_f16_f32(((const uint16_t *)tab)[i]);
}

template <int T, bool VEC>
__global__ void __launch_bounds__(256)
    embed_kernel(float *out, const void *tab, const int32_t *ids, int dim, int vocab, float scale)
{
    const int64_t t = blockIdx.x;
    const int32_t id = ids[t];
    float *o = out + t * dim;
    if (id < 0 || id >= vocab) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            o[i] = NAN;
        return;
    }
    const int64_t base = (int64_t)id * dim;
    if (VEC && T == IFD_DTYPE_F32) {
        const float4 *src = (const float4 *)((const float *)tab + base);
        for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
            float4 x = src[i];
            x.x = __fmul_rn(x.x, scale);
            x.y = __fmul_rn(x.y, scale);
            x.z = __fmul_rn(x.z, scale);
            x.w = __fmul_rn(x.w, scale);
            ((float4 *)o)[i] = x;
        }
    } else if (VEC) {
        const uint4 *src = (const uint4 *)((const uint16_t *)tab + base);
        for (int i = threadIdx.x; i < dim / 8; i += blockDim.x) {
            const uint4 w = src[i];
            const uint32_t p[4] = {w.x, w.y, w.z, w.w};
            float y[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint16_t lo = (uint16_t)(p[j] & 0xffffu), hi = (uint16_t)(p[j] >> 16);
                y[2 * j] =
                    __fmul_rn(T == IFD_DTYPE_BF16 ? ifd_bf16_f32(lo) : ifd_f16_f32(lo), scale);
                y[2 * j + 1] =
                    __fmul_rn(T == IFD_DTYPE_BF16 ? ifd_bf16_f32(hi) : ifd_f16_f32(hi), scale);
            }
            ((float4 *)o)[2 * i] = make_float4(y[0], y[1], y[2], y[3]);
            ((float4 *)o)[2 * i + 1] = make_float4(y[4], y[5], y[6], y[7]);
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            o[i] = __fmul_rn(get1<T>(tab, base + i), scale);
    }
}

template <int T>
int launch(float *out, const void *tab, const int32_t *ids, int n_tok, int dim, int vocab,
           float scale, cudaStream_t stream)
{
    const int per = T == IFD_DTYPE_F32 ? 4 : 8;
    const bool vec = dim % per == 0 && (uintptr_t)tab % 16 == 0 && (uintptr_t)out % 16 == 0;
    void (*kern)(float *, const void *, const int32_t *, int, int, float) =
        vec ? embed_kernel<T, true> : embed_kernel<T, false>;
    IFD_LAUNCH(kern, dim3((unsigned)n_tok), dim3(256), 0, stream, out, tab, ids, dim, vocab, scale);
    IFD_CUDA_CHECK_LAUNCH("embed_kernel");
    return 0;
}

} // namespace

extern "C" int ifd_cuda_embed(float *IFD_CUDA_RESTRICT out, const void *IFD_CUDA_RESTRICT table,
                              const int32_t *IFD_CUDA_RESTRICT ids, int n_tok, int dim, int vocab,
                              ifd_dtype_t table_dtype, float scale, ifd_cuda_stream_t stream)
{
    if (n_tok < 0 || dim <= 0 || vocab <= 0 || !(scale == scale))
        return IFD_EINVAL;
    if (n_tok == 0)
        return 0;
    if (!out || !table || !ids)
        return IFD_EINVAL;
    switch (table_dtype) {
    case IFD_DTYPE_F32:
        return launch<IFD_DTYPE_F32>(out, table, ids, n_tok, dim, vocab, scale, stream);
    case IFD_DTYPE_F16:
        return launch<IFD_DTYPE_F16>(out, table, ids, n_tok, dim, vocab, scale, stream);
    case IFD_DTYPE_BF16:
        return launch<IFD_DTYPE_BF16>(out, table, ids, n_tok, dim, vocab, scale, stream);
    default:
        return IFD_ENOTSUP;
    }
}
