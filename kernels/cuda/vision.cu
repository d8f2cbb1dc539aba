/*
 * vision.cu — the ViT encoder's kernels (vision.h).
 *
 * layernorm: one block per row (256 threads). Pass 1 adds x into the
 * residual row (stored back) and sums it in double; pass 2 sums the
 * squared deviations in double; pass 3 writes y. Each element is read and
 * written by the same thread in every pass, which is why y may be the
 * residual itself. Arithmetic as ifd_cpu_layernorm (only the order of the
 * double sums differs), explicitly rounded so nvcc cannot contract it.
 * gelu_tanh, add_rows: grid-stride element loops.
 * avg_pool2d: one thread per output element, the window summed in the
 * CPU's order.
 * dense_attention: a block of 4 warps takes ROWS = 16 query rows of one
 * head (4 per warp); the head's keys and values go through shared memory
 * in tiles of 32 (one key per lane for the scores, one output dimension
 * per lane (and + 32, + 64, + 96) for the values) with an online softmax
 * (running max and sum per row, the accumulator rescaled when the max
 * grows). Grid: (ceil((q1 − q0) / ROWS), heads) over the query rows
 * [q0, q1). A row's arithmetic does not depend on the rows beside it, so a
 * range gives the bits of the whole. A correct tiled kernel, not a tuned
 * one (no tensor cores).
 */
#include "vision.h"

#include "cuda_check.h"
#include "cuda_prim.cuh"

namespace
{

template <int OUT> IFD_DEV void put1(void *o, int64_t i, float v)
{
    if (OUT == IFD_DTYPE_F32)
        ((float *)o)[i] = v;
    else if (OUT == IFD_DTYPE_BF16)
        ((uint16_t *)o)[i] = ifd_f32_bf16(v);
    else
        ((uint16_t *)o)[i] = ifd_f32_f16(v);
}

/* ---- layernorm ------------------------------------------------------------- */

enum { LN_THREADS = 256 };

/* Sum of v over the block; every thread gets the result. */
IFD_DEV double block_sum(double v, double *red /* [32] shared */)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int nwarps = blockDim.x / 32;
    v = ifd_warp_sum_d(v);
    __syncthreads(); /* red is reused by the next call */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    double t = lane < nwarps ? red[lane] : 0.0;
    return ifd_warp_sum_d(t);
}

template <int OUT>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_kernel(void *y, float *res, const float *x, const float *w, const float *b, int dim,
                     float eps)
{
    __shared__ double red[32];
    const int64_t base = (int64_t)blockIdx.x * dim;
    float *r = res + base;
    const int tid = threadIdx.x, nt = blockDim.x;
    double s = 0.0;
    for (int i = tid; i < dim; i += nt) {
        float h = r[i];
        if (x) {
            h = __fadd_rn(h, x[base + i]);
            r[i] = h;
        }
        s += (double)h;
    }
    const double mean = block_sum(s, red) / (double)dim;
    double ss = 0.0;
    for (int i = tid; i < dim; i += nt) {
        const double d = (double)r[i] - mean;
        ss = __dadd_rn(ss, __dmul_rn(d, d));
    }
    ss = block_sum(ss, red);
    const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / (double)dim), eps)));
    const float m = (float)mean;
    for (int i = tid; i < dim; i += nt) {
        const float v = __fmul_rn(__fmul_rn(__fsub_rn(r[i], m), rstd), w[i]);
        put1<OUT>(y, base + i, __fadd_rn(v, b ? b[i] : 0.0f));
    }
}

/* ---- elementwise ----------------------------------------------------------- */

IFD_DEV float gelu1(float g)
{
    const float K = 0.7978845608028654f, A = 0.044715f;
    const float z = __fmul_rn(__fmul_rn(K, g), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(A, g), g)));
    return __fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, z))));
}

template <int OUT>
__global__ void __launch_bounds__(256) gelu_kernel(void *out, const float *x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        put1<OUT>(out, i, gelu1(x[i]));
}

__global__ void __launch_bounds__(256) add_rows_kernel(float *x, const float *t, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], t[i]);
}

__global__ void __launch_bounds__(256)
    avg_pool_kernel(float *out, const float *x, int rows, int side, int k, int ch, float inv)
{
    const int ps = side / k;
    const int64_t total = (int64_t)(rows / k) * ps * ch;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(u % ch);
        const int64_t p = u / ch;
        const int pi = (int)(p / ps), pj = (int)(p % ps);
        float s = 0.0f;
        for (int a = 0; a < k; a++)
            for (int bb = 0; bb < k; bb++)
                s = __fadd_rn(s, x[((int64_t)(pi * k + a) * side + pj * k + bb) * ch + c]);
        out[u] = __fmul_rn(s, inv);
    }
}

/* Blocks for a grid-stride loop over n elements. */
unsigned blocks_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b > 65536 ? 65536 : b < 1 ? 1 : b);
}

/* ---- dense attention --------------------------------------------------------- */

enum {
    AT_WARPS = 4,
    AT_RPW = 4,
    AT_ROWS = AT_WARPS * AT_RPW,
    AT_KT = 32,
    AT_DMAX = IFD_CUDA_DENSE_MAX_HEAD_DIM,
    AT_DPL = AT_DMAX / 32
};

template <int OUT>
__global__ void __launch_bounds__(AT_WARPS * 32)
    dense_attn_kernel(void *out, const float *qkv, int n, int q0, int q1, int H, int D, float scale)
{
    __shared__ float ks[AT_KT][AT_DMAX + 1], vs[AT_KT][AT_DMAX], qs[AT_ROWS][AT_DMAX];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int h = blockIdx.y, r0 = q0 + blockIdx.x * AT_ROWS;
    const int64_t width = (int64_t)H * D, ld = 3 * width;
    for (int i = tid; i < AT_ROWS * D; i += blockDim.x) {
        const int rr = i / D, d = i % D, t = r0 + rr;
        qs[rr][d] = t < q1 ? __fmul_rn(qkv[t * ld + (int64_t)h * D + d], scale) : 0.0f;
    }
    float mx[AT_RPW], sum[AT_RPW], acc[AT_RPW][AT_DPL];
#pragma unroll
    for (int q = 0; q < AT_RPW; q++) {
        mx[q] = -INFINITY;
        sum[q] = 0.0f;
#pragma unroll
        for (int e = 0; e < AT_DPL; e++)
            acc[q][e] = 0.0f;
    }
    for (int j0 = 0; j0 < n; j0 += AT_KT) {
        __syncthreads(); /* the previous tile is consumed (and qs written) */
        for (int i = tid; i < AT_KT * D; i += blockDim.x) {
            const int jj = i / D, d = i % D, t = j0 + jj;
            const float *row = qkv + (int64_t)t * ld + (int64_t)h * D + d;
            ks[jj][d] = t < n ? row[width] : 0.0f;
            vs[jj][d] = t < n ? row[2 * width] : 0.0f;
        }
        __syncthreads();
        const bool valid = j0 + lane < n;
#pragma unroll
        for (int q = 0; q < AT_RPW; q++) {
            const int rr = warp * AT_RPW + q;
            float s = 0.0f;
            for (int d = 0; d < D; d++)
                s = __fadd_rn(s, __fmul_rn(qs[rr][d], ks[lane][d]));
            s = valid ? s : -INFINITY;
            const float m_new = fmaxf(mx[q], ifd_warp_max(s));
            const float corr = expf(__fsub_rn(mx[q], m_new));
            const float p = valid ? expf(__fsub_rn(s, m_new)) : 0.0f;
            sum[q] = __fadd_rn(__fmul_rn(sum[q], corr), ifd_warp_sum(p));
            mx[q] = m_new;
#pragma unroll
            for (int e = 0; e < AT_DPL; e++)
                acc[q][e] = __fmul_rn(acc[q][e], corr);
            for (int jj = 0; jj < AT_KT; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
                for (int e = 0; e < AT_DPL; e++) {
                    const int d = lane + 32 * e;
                    if (d < D)
                        acc[q][e] = __fadd_rn(acc[q][e], __fmul_rn(pj, vs[jj][d]));
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < AT_RPW; q++) {
        const int t = r0 + warp * AT_RPW + q;
        if (t >= q1)
            continue;
#pragma unroll
        for (int e = 0; e < AT_DPL; e++) {
            const int d = lane + 32 * e;
            if (d < D)
                put1<OUT>(out, (int64_t)t * width + (int64_t)h * D + d,
                          __fdiv_rn(acc[q][e], sum[q]));
        }
    }
}

} // namespace

extern "C" int ifd_cuda_layernorm(void *y, float *residual, const float *IFD_CUDA_RESTRICT x,
                                  const float *IFD_CUDA_RESTRICT w,
                                  const float *IFD_CUDA_RESTRICT b, int rows, int dim, float eps,
                                  ifd_dtype_t out_dtype, ifd_cuda_stream_t stream)
{
    if (rows < 0 || dim <= 0 || !(eps >= 0.0f) || !y || !residual || !w)
        return IFD_EINVAL;
    void (*kern)(void *, float *, const float *, const float *, const float *, int, float) =
        out_dtype == IFD_DTYPE_F32    ? layernorm_kernel<IFD_DTYPE_F32>
        : out_dtype == IFD_DTYPE_BF16 ? layernorm_kernel<IFD_DTYPE_BF16>
        : out_dtype == IFD_DTYPE_F16  ? layernorm_kernel<IFD_DTYPE_F16>
                                      : nullptr;
    if (!kern)
        return IFD_ENOTSUP;
    if (rows == 0)
        return 0;
    IFD_LAUNCH(kern, dim3((unsigned)rows), dim3(LN_THREADS), 0, (cudaStream_t)stream, y, residual,
               x, w, b, dim, eps);
    IFD_CUDA_CHECK_LAUNCH("layernorm_kernel");
    return 0;
}

extern "C" int ifd_cuda_gelu_tanh(void *IFD_CUDA_RESTRICT out, const float *IFD_CUDA_RESTRICT x,
                                  int64_t n, ifd_dtype_t out_dtype, ifd_cuda_stream_t stream)
{
    if (n < 0 || !out || !x)
        return IFD_EINVAL;
    void (*kern)(void *, const float *, int64_t) =
        out_dtype == IFD_DTYPE_F32    ? gelu_kernel<IFD_DTYPE_F32>
        : out_dtype == IFD_DTYPE_BF16 ? gelu_kernel<IFD_DTYPE_BF16>
        : out_dtype == IFD_DTYPE_F16  ? gelu_kernel<IFD_DTYPE_F16>
                                      : nullptr;
    if (!kern)
        return IFD_ENOTSUP;
    if (n == 0)
        return 0;
    IFD_LAUNCH(kern, dim3(blocks_for(n)), dim3(256), 0, (cudaStream_t)stream, out, x, n);
    IFD_CUDA_CHECK_LAUNCH("gelu_kernel");
    return 0;
}

extern "C" int ifd_cuda_add_rows(float *IFD_CUDA_RESTRICT x, const float *IFD_CUDA_RESTRICT t,
                                 int rows, int cols, ifd_cuda_stream_t stream)
{
    if (rows < 0 || cols <= 0 || !x || !t)
        return IFD_EINVAL;
    const int64_t n = (int64_t)rows * cols;
    if (n == 0)
        return 0;
    IFD_LAUNCH(add_rows_kernel, dim3(blocks_for(n)), dim3(256), 0, (cudaStream_t)stream, x, t, n);
    IFD_CUDA_CHECK_LAUNCH("add_rows_kernel");
    return 0;
}

extern "C" int ifd_cuda_avg_pool2d(float *IFD_CUDA_RESTRICT out, const float *IFD_CUDA_RESTRICT x,
                                   int rows, int side, int k, int channels,
                                   ifd_cuda_stream_t stream)
{
    if (rows <= 0 || side <= 0 || k <= 0 || channels <= 0 || side % k != 0 || rows % k != 0 ||
        !out || !x)
        return IFD_EINVAL;
    const int64_t n = (int64_t)(rows / k) * (side / k) * channels;
    IFD_LAUNCH(avg_pool_kernel, dim3(blocks_for(n)), dim3(256), 0, (cudaStream_t)stream, out, x,
               rows, side, k, channels, 1.0f / (float)(k * k));
    IFD_CUDA_CHECK_LAUNCH("avg_pool_kernel");
    return 0;
}

extern "C" int ifd_cuda_dense_attention(void *IFD_CUDA_RESTRICT out,
                                        const float *IFD_CUDA_RESTRICT qkv, int n, int q0, int q1,
                                        int n_heads, int head_dim, float scale,
                                        ifd_dtype_t out_dtype, ifd_cuda_stream_t stream)
{
    if (n < 0 || n_heads <= 0 || head_dim <= 0 || !out || !qkv || n_heads > 65535 || q0 < 0 ||
        q1 < q0 || q1 > n)
        return IFD_EINVAL;
    if (head_dim > AT_DMAX)
        return IFD_ENOTSUP;
    void (*kern)(void *, const float *, int, int, int, int, int, float) =
        out_dtype == IFD_DTYPE_F32    ? dense_attn_kernel<IFD_DTYPE_F32>
        : out_dtype == IFD_DTYPE_BF16 ? dense_attn_kernel<IFD_DTYPE_BF16>
        : out_dtype == IFD_DTYPE_F16  ? dense_attn_kernel<IFD_DTYPE_F16>
                                      : nullptr;
    if (!kern)
        return IFD_ENOTSUP;
    if (q0 == q1)
        return 0;
    IFD_LAUNCH(kern, dim3((unsigned)((q1 - q0 + AT_ROWS - 1) / AT_ROWS), (unsigned)n_heads),
               dim3(AT_WARPS * 32), 0, (cudaStream_t)stream, out, qkv, n, q0, q1, n_heads, head_dim,
               scale);
    IFD_CUDA_CHECK_LAUNCH("dense_attn_kernel");
    return 0;
}
