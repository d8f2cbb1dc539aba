/*
 * rope_kv.cu — RoPE fused with the KV-pool write (rope_kv.h).
 *
 * One block per token. The token's cos/sin table (n_rot / 2 pairs) is built
 * first in shared memory, computed as ifd_cpu_rope does: theta_scale =
 * powf(base, -2 / n_rot) (on the host, with the host's libm, so it is the
 * CPU's value), t_i = pos * theta_scale^i by repeated float multiplication
 * (thread i repeats the CPU's sequence of products, so t_i is bit-identical),
 * theta_i = freq_scale * (t_i / ff_i). Then the block rotates the q heads
 * in place and the k heads on their way to the pool, and copies v. All
 * float operations are explicitly rounded (no FMA contraction), matching the
 * CPU's arithmetic; only cosf/sinf come from CUDA's libm.
 *
 * Specialization: the pool dtype (F32, F16, BF16). The quantized types
 * (Q8_0, FP8) take a second kernel with the same table and q rotation: a
 * warp per K or V row of the token (the row's scale needs all its values),
 * lane l computing values l, l + 32, ... (the rotated K value of element e
 * from its pair, exactly as above); Q8_0 reduces each 32 values (one
 * lane-step) to its amax with shuffles, FP8 the whole row, and both round
 * with the CPU writer's operations (d = amax / 127, q = roundf(x · (1 / d));
 * s = amax / 448, e4m3(x · (1 / s))), so the bytes equal ifd_cpu_kv_write's.
 *
 * Rotated K (kv_rot.h; Q8_0 with head_dim a multiple of 64): after RoPE the
 * quantized kernel multiplies every run of n = ifd_kv_k_rot values of q and
 * of K by the Walsh-Hadamard matrix before K is quantized, as the CPU
 * backend's ifd_cpu_kv_rotate does: a warp per run (q) or row (K), lane l
 * holding values l + 32 j; strides below 32 pair lanes by shuffles, strides
 * of 32 and more pair a lane's own registers; the same butterflies (low + high,
 * low − high, explicitly rounded) in the same order and the same scale as
 * ifd_kv_fwht, so the bytes still equal the CPU's.
 */
#include "rope_kv.h"

#include "cpu/kv_fp8.h"
#include "cpu/kv_rot.h"
#include "cuda_check.h"
#include "cuda_prim.cuh"

namespace
{

constexpr int THREADS = 256;
constexpr int MAX_HEAD_DIM = 1024;

struct rope_args {
    float *q;
    const float *k;
    const float *v;
    void *kc;
    void *vc;
    const int32_t *pos;
    const int64_t *slot;
    const float *ff;
    int64_t q_ld, k_ld, v_ld;
    int n_heads, n_kv, hd, bs, n_rot, neox;
    float theta_scale, freq_scale;
    int krot;        /* ifd_kv_k_rot: 0, or the Walsh-Hadamard size for q and K */
    float rot_scale; /* ifd_kv_rot_scale(krot) */
};

template <int KVT> IFD_DEV void put(void *base, int64_t i, float x)
{
    if (KVT == IFD_DTYPE_F32)
        ((float *)base)[i] = x;
    else if (KVT == IFD_DTYPE_BF16)
        ((uint16_t *)base)[i] = ifd_f32_bf16(x);
    else
        ((uint16_t *)base)[i] = ifd_f32_f16(x);
}

/* Element indices of pair i in a head (NORM: adjacent; NEOX: halves). */
IFD_DEV void pair_idx(int i, int half, int neox, int *i0, int *i1)
{
    *i0 = neox ? i : 2 * i;
    *i1 = neox ? i + half : 2 * i + 1;
}

/* The token's cos/sin table (see the file comment). */
IFD_DEV void rope_table(const rope_args &a, int64_t t, float *cs, float *sn)
{
    for (int i = threadIdx.x; i < a.n_rot / 2; i += THREADS) {
        float theta = (float)a.pos[t];
        for (int j = 0; j < i; j++)
            theta = __fmul_rn(theta, a.theta_scale);
        const float ff = a.ff ? a.ff[i] : 1.0f;
        const float th = __fmul_rn(a.freq_scale, __fdiv_rn(theta, ff));
        cs[i] = cosf(th);
        sn[i] = sinf(th);
    }
}

/* Element e of a K head kh after the rotation (the pair formulas above). */
IFD_DEV float rot_elem(const rope_args &a, const float *kh, int e, const float *cs, const float *sn)
{
    if (e >= a.n_rot)
        return kh[e];
    const int half = a.n_rot / 2;
    const bool first = a.neox ? e < half : (e & 1) == 0;
    const int i = a.neox ? (first ? e : e - half) : e >> 1;
    int i0, i1;
    pair_idx(i, half, a.neox, &i0, &i1);
    const float x0 = kh[i0], x1 = kh[i1];
    return first ? __fsub_rn(__fmul_rn(x0, cs[i]), __fmul_rn(x1, sn[i]))
                 : __fadd_rn(__fmul_rn(x0, sn[i]), __fmul_rn(x1, cs[i]));
}

template <int KVT> __global__ void __launch_bounds__(THREADS) rope_kv_kernel(rope_args a)
{
    __shared__ float cs[MAX_HEAD_DIM / 2], sn[MAX_HEAD_DIM / 2];
    const int64_t t = blockIdx.x;
    const int tid = threadIdx.x;
    const int half = a.n_rot / 2, hd = a.hd;

    rope_table(a, t, cs, sn);
    __syncthreads();

    /* q, in place. */
    float *qt = a.q + t * a.q_ld;
    for (int j = tid; j < a.n_heads * half; j += THREADS) {
        const int h = j / half, i = j % half;
        int i0, i1;
        pair_idx(i, half, a.neox, &i0, &i1);
        float *qh = qt + (int64_t)h * hd;
        const float x0 = qh[i0], x1 = qh[i1];
        qh[i0] = __fsub_rn(__fmul_rn(x0, cs[i]), __fmul_rn(x1, sn[i]));
        qh[i1] = __fadd_rn(__fmul_rn(x0, sn[i]), __fmul_rn(x1, cs[i]));
    }

    const int64_t slot = a.slot[t];
    if (slot < 0)
        return;
    const int64_t blk = slot / a.bs, off = slot % a.bs;
    const float *kt = a.k + t * a.k_ld, *vt = a.v + t * a.v_ld;
    /* Element index of (kv head h, dim 0) of this token in the pool. */
    auto dst = [&](int h) { return ((blk * a.n_kv + h) * a.bs + off) * (int64_t)hd; };

    for (int j = tid; j < a.n_kv * half; j += THREADS) {
        const int h = j / half, i = j % half;
        int i0, i1;
        pair_idx(i, half, a.neox, &i0, &i1);
        const float *kh = kt + (int64_t)h * hd;
        const float x0 = kh[i0], x1 = kh[i1];
        const int64_t d = dst(h);
        put<KVT>(a.kc, d + i0, __fsub_rn(__fmul_rn(x0, cs[i]), __fmul_rn(x1, sn[i])));
        put<KVT>(a.kc, d + i1, __fadd_rn(__fmul_rn(x0, sn[i]), __fmul_rn(x1, cs[i])));
    }
    const int pass = hd - a.n_rot; /* dims n_rot.. are copied unrotated */
    for (int j = tid; j < a.n_kv * pass; j += THREADS) {
        const int h = j / pass, e = a.n_rot + j % pass;
        put<KVT>(a.kc, dst(h) + e, kt[(int64_t)h * hd + e]);
    }
    for (int j = tid; j < a.n_kv * hd; j += THREADS) {
        const int h = j / hd, e = j % hd;
        put<KVT>(a.vc, dst(h) + e, vt[(int64_t)h * hd + e]);
    }
}

constexpr int MAX_J = MAX_HEAD_DIM / 32; /* values per lane of a row */

/* The warp's ifd_kv_fwht over runs of n values (n a power of two, 64 ≤ n ≤
 * 32 · nj) of a row whose value 32 j + lane is this lane's x[j] (j < nj):
 * stride h < 32 pairs lane l with lane l ^ h, stride h ≥ 32 pairs x[j] with
 * x[j ^ (h / 32)]; the low element becomes low + high, the high one
 * low − high, as on the CPU. */
IFD_DEV void warp_fwht(float *x, int nj, int n, float scale, int lane)
{
    for (int h = 1; h < n; h <<= 1) {
        if (h < 32) {
            for (int j = 0; j < nj; j++) {
                const float o = __shfl_xor_sync(0xffffffffu, x[j], h);
                x[j] = (lane & h) ? __fsub_rn(o, x[j]) : __fadd_rn(x[j], o);
            }
        } else {
            const int hj = h >> 5;
            for (int j = 0; j < nj; j++)
                if (!(j & hj)) {
                    const float lo = x[j], hi = x[j + hj];
                    x[j] = __fadd_rn(lo, hi);
                    x[j + hj] = __fsub_rn(lo, hi);
                }
        }
    }
    for (int j = 0; j < nj; j++)
        x[j] = __fmul_rn(x[j], scale);
}

template <int KVT> __global__ void __launch_bounds__(THREADS) rope_kv_quant_kernel(rope_args a)
{
    __shared__ float cs[MAX_HEAD_DIM / 2], sn[MAX_HEAD_DIM / 2];
    const int64_t t = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int half = a.n_rot / 2, hd = a.hd;
    rope_table(a, t, cs, sn);
    __syncthreads();

    float *qt = a.q + t * a.q_ld;
    for (int j = tid; j < a.n_heads * half; j += THREADS) {
        const int h = j / half, i = j % half;
        int i0, i1;
        pair_idx(i, half, a.neox, &i0, &i1);
        float *qh = qt + (int64_t)h * hd;
        const float x0 = qh[i0], x1 = qh[i1];
        qh[i0] = __fsub_rn(__fmul_rn(x0, cs[i]), __fmul_rn(x1, sn[i]));
        qh[i1] = __fadd_rn(__fmul_rn(x0, sn[i]), __fmul_rn(x1, cs[i]));
    }
    if (a.krot) { /* q into K's rotated basis: a warp per run of krot values */
        __syncthreads();
        const int nj = a.krot / 32;
        for (int r = warp; r < a.n_heads * (hd / a.krot); r += THREADS / 32) {
            float *qr = qt + (int64_t)r * a.krot;
            float x[MAX_J];
            for (int j = 0; j < nj; j++)
                x[j] = qr[32 * j + lane];
            warp_fwht(x, nj, a.krot, a.rot_scale, lane);
            for (int j = 0; j < nj; j++)
                qr[32 * j + lane] = x[j];
        }
    }

    const int64_t slot = a.slot[t];
    if (slot < 0)
        return;
    const int64_t blk = slot / a.bs, off = slot % a.bs;
    const int64_t rb = KVT == IFD_DTYPE_Q8_0 ? hd + hd / 16 : hd + 4; /* ifd_kv_row_bytes */
    /* Rows 0..n_kv-1: K heads (rotated), n_kv..2 n_kv - 1: V heads. */
    for (int r = warp; r < 2 * a.n_kv; r += THREADS / 32) {
        const bool is_k = r < a.n_kv;
        const int h = is_k ? r : r - a.n_kv;
        const float *src = (is_k ? a.k + t * a.k_ld : a.v + t * a.v_ld) + (int64_t)h * hd;
        unsigned char *row =
            (unsigned char *)(is_k ? a.kc : a.vc) + ((blk * a.n_kv + h) * a.bs + off) * rb;
        auto val = [&](int e) { return is_k ? rot_elem(a, src, e, cs, sn) : src[e]; };
        if (KVT == IFD_DTYPE_Q8_0) {
            auto quant = [&](int b, float x) {
                const float d = __fdiv_rn(ifd_warp_max(fabsf(x)), 127.0f);
                const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
                row[32 * b + lane] = (unsigned char)(int8_t)roundf(__fmul_rn(x, id));
                if (lane == 0)
                    ((uint16_t *)(row + hd))[b] = ifd_f32_f16(d);
            };
            if (is_k && a.krot) {
                float x[MAX_J];
                for (int b = 0; b < hd / 32; b++)
                    x[b] = val(32 * b + lane);
                warp_fwht(x, hd / 32, a.krot, a.rot_scale, lane);
                for (int b = 0; b < hd / 32; b++)
                    quant(b, x[b]);
            } else {
                for (int b = 0; b < hd / 32; b++)
                    quant(b, val(32 * b + lane));
            }
        } else {
            float amax = 0.0f;
            for (int e = lane; e < hd; e += 32)
                amax = fmaxf(amax, fabsf(val(e)));
            const float sc = __fdiv_rn(ifd_warp_max(amax), IFD_FP8_E4M3_MAX);
            const float is = sc != 0.0f ? __fdiv_rn(1.0f, sc) : 0.0f;
            for (int e = lane; e < hd; e += 32)
                row[e] = ifd_fp8_e4m3_from_f32(__fmul_rn(val(e), is));
            if (lane == 0)
                *(float *)(row + hd) = sc;
        }
    }
}

} // namespace

extern "C" int ifd_cuda_rope_kv_write(float *q, const ifd_kv_layer_t *kv,
                                      const float *IFD_CUDA_RESTRICT k,
                                      const float *IFD_CUDA_RESTRICT v,
                                      const int32_t *IFD_CUDA_RESTRICT pos,
                                      const int64_t *IFD_CUDA_RESTRICT slot, int n_tok, int n_heads,
                                      int64_t q_ld, int64_t k_ld, int64_t v_ld,
                                      const ifd_cuda_rope_t *rope, ifd_cuda_stream_t stream)
{
    if (!kv || !rope || n_tok < 0 || n_heads <= 0 || kv->n_kv_heads <= 0 || kv->head_dim <= 0 ||
        kv->block_size <= 0)
        return IFD_EINVAL;
    const int hd = kv->head_dim;
    if (rope->n_rot <= 0 || rope->n_rot % 2 != 0 || rope->n_rot > hd || !(rope->base > 0.0f) ||
        !(rope->freq_scale == rope->freq_scale))
        return IFD_EINVAL;
    if (q_ld < (int64_t)n_heads * hd || k_ld < (int64_t)kv->n_kv_heads * hd ||
        v_ld < (int64_t)kv->n_kv_heads * hd)
        return IFD_EINVAL;
    if (rope->mode != IFD_ROPE_NORM && rope->mode != IFD_ROPE_NEOX)
        return IFD_ENOTSUP;
    if (hd > MAX_HEAD_DIM ||
        ((kv->dtype == IFD_DTYPE_Q8_0 || kv->dtype == IFD_DTYPE_FP8) && hd % 32 != 0))
        return IFD_ENOTSUP;
    if (n_tok == 0)
        return 0;
    if (!q || !k || !v || !pos || !slot || !kv->k || !kv->v)
        return IFD_EINVAL;

    rope_args a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.kc = kv->k;
    a.vc = kv->v;
    a.pos = pos;
    a.slot = slot;
    a.ff = rope->freq_factors;
    a.q_ld = q_ld;
    a.k_ld = k_ld;
    a.v_ld = v_ld;
    a.n_heads = n_heads;
    a.n_kv = kv->n_kv_heads;
    a.hd = hd;
    a.bs = kv->block_size;
    a.n_rot = rope->n_rot;
    a.neox = rope->mode == IFD_ROPE_NEOX;
    a.theta_scale = powf(rope->base, -2.0f / (float)rope->n_rot); /* as ifd_cpu_rope */
    a.freq_scale = rope->freq_scale;
    a.krot = ifd_kv_k_rot(kv->dtype, hd);
    a.rot_scale = a.krot ? ifd_kv_rot_scale(a.krot) : 1.0f;

    void (*kern)(rope_args);
    switch (kv->dtype) {
    case IFD_DTYPE_F32:
        kern = rope_kv_kernel<IFD_DTYPE_F32>;
        break;
    case IFD_DTYPE_F16:
        kern = rope_kv_kernel<IFD_DTYPE_F16>;
        break;
    case IFD_DTYPE_BF16:
        kern = rope_kv_kernel<IFD_DTYPE_BF16>;
        break;
    case IFD_DTYPE_Q8_0:
        kern = rope_kv_quant_kernel<IFD_DTYPE_Q8_0>;
        break;
    case IFD_DTYPE_FP8:
        kern = rope_kv_quant_kernel<IFD_DTYPE_FP8>;
        break;
    default:
        return IFD_ENOTSUP;
    }
    IFD_LAUNCH(kern, dim3((unsigned)n_tok), dim3(THREADS), 0, stream, a);
    IFD_CUDA_CHECK_LAUNCH("rope_kv_kernel");
    return 0;
}
