/*
 * rmsnorm.cu — RMSNorm fused with the residual add (rmsnorm.h).
 *
 * One block per row. Pass 1 adds x into the residual row (stored back) and
 * accumulates the sum of squares in double; a block reduction gives the
 * mean; pass 2 re-reads the row and writes y. Each element is read and
 * written by the same thread in both passes, which is why y may be the
 * residual buffer itself (F32). The arithmetic mirrors ifd_cpu_rmsnorm with
 * explicitly rounded operations (no FMA contraction), so only the order of
 * the double-precision sum differs from the CPU.
 *
 * Specializations: the output dtype (F32/BF16/F16) and a float4 path taken
 * when dim % 4 == 0 and the pointers are 16-byte aligned (8 for 16-bit y).
 */
#include "cuda_check.h"
#include "cuda_prim.cuh"
#include "rmsnorm.h"

namespace
{

enum { OUT_F32 = 0, OUT_BF16 = 1, OUT_F16 = 2 };

template <int OUT> IFD_DEV void store1(void *y, int64_t i, float v)
{
    if (OUT == OUT_F32)
        ((float *)y)[i] = v;
    else if (OUT == OUT_BF16)
        ((uint16_t *)y)[i] = ifd_f32_bf16(v);
    else
        ((uint16_t *)y)[i] = ifd_f32_f16(v);
}

template <int OUT> IFD_DEV void store4(void *y, int64_t i, float4 v)
{
    if (OUT == OUT_F32) {
        *(float4 *)((float *)y + i) = v;
    } else {
        const bool bf = OUT == OUT_BF16;
        uint2 p;
        p.x = bf ? ifd_pack2<true>(v.x, v.y) : ifd_pack2<false>(v.x, v.y);
        p.y = bf ? ifd_pack2<true>(v.z, v.w) : ifd_pack2<false>(v.z, v.w);
        *(uint2 *)((uint16_t *)y + i) = p;
    }
}

/* Sum of v over the block; every thread gets the result. */
IFD_DEV double block_sum(double v, double *red /* [32] shared */)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int nwarps = blockDim.x / 32;
    v = ifd_warp_sum_d(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    double t = lane < nwarps ? red[lane] : 0.0;
    t = ifd_warp_sum_d(t);
    return t;
}

template <int OUT, bool VEC>
__global__ void __launch_bounds__(1024)
    rmsnorm_kernel(void *y, float *res, const float *x, const float *w, int dim, float eps,
                   int gemma)
{
    __shared__ double red[32];
    const int64_t base = (int64_t)blockIdx.x * dim;
    float *r = res + base;
    const float *xr = x ? x + base : nullptr;
    const int tid = threadIdx.x, nt = blockDim.x;

    double ss = 0.0;
    if (VEC) {
        for (int i = tid * 4; i < dim; i += nt * 4) {
            float4 h = *(const float4 *)(r + i);
            if (xr) {
                const float4 a = *(const float4 *)(xr + i);
                h.x = __fadd_rn(h.x, a.x);
                h.y = __fadd_rn(h.y, a.y);
                h.z = __fadd_rn(h.z, a.z);
                h.w = __fadd_rn(h.w, a.w);
                *(float4 *)(r + i) = h;
            }
            /* float * float is exact in double: contraction cannot change it. */
            ss += (double)h.x * (double)h.x;
            ss += (double)h.y * (double)h.y;
            ss += (double)h.z * (double)h.z;
            ss += (double)h.w * (double)h.w;
        }
    } else {
        for (int i = tid; i < dim; i += nt) {
            float h = r[i];
            if (xr) {
                h = __fadd_rn(h, xr[i]);
                r[i] = h;
            }
            ss += (double)h * (double)h;
        }
    }
    ss = block_sum(ss, red);
    const float mean = (float)(ss / (double)dim);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));

    if (VEC) {
        for (int i = tid * 4; i < dim; i += nt * 4) {
            const float4 h = *(const float4 *)(r + i);
            float4 wv = *(const float4 *)(w + i);
            if (gemma) {
                wv.x = __fadd_rn(1.0f, wv.x);
                wv.y = __fadd_rn(1.0f, wv.y);
                wv.z = __fadd_rn(1.0f, wv.z);
                wv.w = __fadd_rn(1.0f, wv.w);
            }
            float4 o;
            o.x = __fmul_rn(__fmul_rn(h.x, scale), wv.x);
            o.y = __fmul_rn(__fmul_rn(h.y, scale), wv.y);
            o.z = __fmul_rn(__fmul_rn(h.z, scale), wv.z);
            o.w = __fmul_rn(__fmul_rn(h.w, scale), wv.w);
            store4<OUT>(y, base + i, o);
        }
    } else {
        for (int i = tid; i < dim; i += nt) {
            const float wi = gemma ? __fadd_rn(1.0f, w[i]) : w[i];
            store1<OUT>(y, base + i, __fmul_rn(__fmul_rn(r[i], scale), wi));
        }
    }
}

template <int OUT>
int launch(void *y, float *res, const float *x, const float *w, int rows, int dim, float eps,
           int gemma, cudaStream_t stream)
{
    const size_t ysz = OUT == OUT_F32 ? 4 : 2;
    const bool vec = dim % 4 == 0 && ((uintptr_t)res % 16) == 0 && ((uintptr_t)w % 16) == 0 &&
                     (!x || ((uintptr_t)x % 16) == 0) && ((uintptr_t)y % (4 * ysz)) == 0;
    const int units = vec ? dim / 4 : dim;
    int threads = (units + 31) / 32 * 32;
    threads = threads < 64 ? 64 : threads > 1024 ? 1024 : threads;
    void (*kern)(void *, float *, const float *, const float *, int, float, int) =
        vec ? rmsnorm_kernel<OUT, true> : rmsnorm_kernel<OUT, false>;
    IFD_LAUNCH(kern, dim3((unsigned)rows), dim3((unsigned)threads), 0, stream, y, res, x, w, dim,
               eps, gemma);
    IFD_CUDA_CHECK_LAUNCH("rmsnorm_kernel");
    return 0;
}

} // namespace

extern "C" int ifd_cuda_rmsnorm(void *y, float *residual, const float *IFD_CUDA_RESTRICT x,
                                const float *IFD_CUDA_RESTRICT w, int rows, int dim, float eps,
                                int gemma, ifd_dtype_t out_dtype, ifd_cuda_stream_t stream)
{
    if (rows < 0 || dim <= 0 || !(eps >= 0.0f) || !y || !residual || !w)
        return IFD_EINVAL;
    if (rows == 0)
        return 0;
    switch (out_dtype) {
    case IFD_DTYPE_F32:
        return launch<OUT_F32>(y, residual, x, w, rows, dim, eps, gemma, stream);
    case IFD_DTYPE_BF16:
        return launch<OUT_BF16>(y, residual, x, w, rows, dim, eps, gemma, stream);
    case IFD_DTYPE_F16:
        return launch<OUT_F16>(y, residual, x, w, rows, dim, eps, gemma, stream);
    default:
        return IFD_ENOTSUP;
    }
}
