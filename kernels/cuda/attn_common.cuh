/*
 * attn_common.cuh — the warp-level core shared by the paged decode and
 * prefill attention kernels (attn_decode.cu, attn_prefill.cu): one
 * FlashAttention-2 step of a warp's 16 query rows over a tile of keys that
 * already sits in shared memory. Internal to kernels/cuda.
 *
 * Data: tiles of 16-bit K, V and Q rows [rows][D] in shared memory, each row
 * D*2 bytes split into 16-byte chunks stored XOR-swizzled (chunk c of row r
 * at slot c ^ (r & 7)), so the eight row addresses of one ldmatrix hit eight
 * different bank groups. Q rows are the warp's 16 rows (the tile pointer
 * must start at a row that is a multiple of 8).
 *
 * Arithmetic: S = Q K^T with mma.m16n8k16 (f32 accumulate), scaled to the
 * log2 domain (scale = softmax scale * log2 e) and masked to -inf where a
 * key is not visible; the online softmax keeps per row a running maximum m
 * and a running sum l (each thread's partial sum over its own columns,
 * reduced across the quad only at the end); P = exp2(S - m) is rounded to
 * the KV dtype and multiplied with V straight from the S accumulators (the
 * C-fragment of S is the A-fragment of P). Rows whose keys are all masked so
 * far keep m = -inf and contribute nothing (no NaN from -inf - -inf).
 *
 * Fragment ownership (g = lane / 4, t = lane % 4): a thread holds rows g and
 * g + 8, and columns 8j + 2t, 8j + 2t + 1 of every 8-column tile j.
 *
 * Quantized K/V (Q8_0, FP8: rows of quants with their scales, cpu_kernels.h
 * ifd_kv_row_bytes) reach the same tiles through kv_chunk: the loaders read
 * 8 quants and their scale into registers, dequantize (x = q · d in f32, the
 * value ifd_cpu_kv_dequant_row gives) and store them as f16, the MMA type of
 * both (f16 keeps 11 bits of the 8-bit quants' products, bf16 only 8).
 */
#ifndef IFD_ATTN_COMMON_CUH
#define IFD_ATTN_COMMON_CUH

#include "cpu/kv_fp8.h"
#include "cuda_prim.cuh"

#include <math.h>

namespace ifd_attn
{

/* The only KV block size the CUDA attention kernels support. */
constexpr int KV_BLOCK = 16;

/* The K/V dtypes the kernels read (template parameter KVT, an ifd_dtype_t):
 * their MMA type, whether the rows are quantized, and the row's bytes. */
template <int KVT> __host__ __device__ constexpr bool kv_bf16()
{
    return KVT == IFD_DTYPE_BF16;
}

template <int KVT> __host__ __device__ constexpr bool kv_quant()
{
    return KVT == IFD_DTYPE_Q8_0 || KVT == IFD_DTYPE_FP8;
}

template <int KVT, int D> __host__ __device__ constexpr int kv_row_bytes()
{
    return KVT == IFD_DTYPE_Q8_0 ? D + D / 16 : KVT == IFD_DTYPE_FP8 ? D + 4 : 2 * D;
}

/* Values 8c .. 8c + 7 of a quantized row (Q8_0 or FP8, head_dim D) as one
 * 16-byte chunk of f16 values: quants and scale loaded into registers (rows
 * are 4-byte aligned), x = q · d in f32, rounded to f16. */
template <int KVT, int D> IFD_DEV uint4 kv_chunk(const unsigned char *row, int c)
{
    const uint32_t w[2] = {*(const uint32_t *)(row + 8 * c), *(const uint32_t *)(row + 8 * c + 4)};
    float d;
    if constexpr (KVT == IFD_DTYPE_Q8_0)
        d = ifd_f16_f32(*(const uint16_t *)(row + D + 2 * (c / 4)));
    else
        d = *(const float *)(row + D);
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint8_t b = (uint8_t)(w[i / 4] >> (8 * (i % 4)));
        const float qv = KVT == IFD_DTYPE_Q8_0 ? (float)(int8_t)b : ifd_fp8_e4m3_to_f32(b);
        x[i] = __fmul_rn(qv, d);
    }
    uint4 r;
    r.x = ifd_pack2<false>(x[0], x[1]);
    r.y = ifd_pack2<false>(x[2], x[3]);
    r.z = ifd_pack2<false>(x[4], x[5]);
    r.w = ifd_pack2<false>(x[6], x[7]);
    return r;
}

/* Stages chunk c of K/V row `row` (byte offset in the region; ok = false:
 * zeros, nothing read) into the tile slot dst: cp.async for 16-bit rows,
 * a dequantizing load for quantized ones. */
template <int KVT, int D>
IFD_DEV void kv_stage(unsigned char *dst, const unsigned char *region, int64_t row, int c, bool ok)
{
    constexpr int64_t RB = kv_row_bytes<KVT, D>();
    if constexpr (kv_quant<KVT>()) {
        *(uint4 *)dst = ok ? kv_chunk<KVT, D>(region + row * RB, c) : make_uint4(0, 0, 0, 0);
    } else {
        ifd_cp_async16(dst, region + (ok ? row * RB + c * 16 : 0), ok);
    }
}

/* Byte offset of 16-byte chunk c of row r in a swizzled [rows][D] b16 tile. */
template <int D> IFD_DEV int swz(int r, int c)
{
    return r * (D * 2) + ((c ^ (r & 7)) << 4);
}

/* A warp's running state for its 16 rows. */
template <int D> struct warp_state {
    float o[D / 8][4]; /* O accumulators, C-fragments of 8-column tiles */
    float m[2];        /* running max of rows g, g + 8 (log2 domain) */
    float l[2];        /* this thread's partial running sums */
};

template <int D> IFD_DEV void state_init(warp_state<D> &st)
{
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        st.o[n][0] = st.o[n][1] = st.o[n][2] = st.o[n][3] = 0.0f;
    st.m[0] = st.m[1] = -INFINITY;
    st.l[0] = st.l[1] = 0.0f;
}

/* The warp's Q operand (A-fragments of its 16 rows): loaded into registers
 * once when head_dim <= 128, read from shared memory at every step for 256,
 * where the registers are needed for the O accumulators. */
template <int D> struct q_operand {
    static constexpr bool REG = D <= 128;
    uint32_t f[REG ? D / 16 : 1][4];
    const unsigned char *s; /* the warp's 16 Q rows in shared memory */
};

template <int D> IFD_DEV void q_load(q_operand<D> &q, const unsigned char *sQ)
{
    const int lane = threadIdx.x & 31;
    q.s = sQ;
    if constexpr (q_operand<D>::REG) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
            ifd_ldsm_x4(q.f[kk], sQ + swz<D>(lane & 15, 2 * kk + (lane >> 4)));
    }
}

/* Q's A-fragment for dims 16kk .. 16kk + 15. */
template <int D> IFD_DEV void q_frag(const q_operand<D> &q, int kk, uint32_t a[4])
{
    if constexpr (q_operand<D>::REG) {
        a[0] = q.f[kk][0];
        a[1] = q.f[kk][1];
        a[2] = q.f[kk][2];
        a[3] = q.f[kk][3];
    } else {
        const int lane = threadIdx.x & 31;
        ifd_ldsm_x4(a, q.s + swz<D>(lane & 15, 2 * kk + (lane >> 4)));
    }
}

/* Completes l: the sum over the quad's four threads. */
template <int D> IFD_DEV void state_reduce_l(warp_state<D> &st)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 1);
        st.l[r] += __shfl_xor_sync(0xffffffffu, st.l[r], 2);
    }
}

/*
 * One step over NK = 8 * NT keys (NT even): q = the warp's 16 Q rows,
 * sK / sV = [NK][D] tiles. With MASK, valid(r, k) says whether local row r
 * (0..15) may see local key k (0..NK-1); without it every key is visible.
 * Keys whose K/V rows were zero-filled must be masked.
 */
template <int D, int NT, bool BF16, bool MASK, class Valid>
IFD_DEV void attn_step(warp_state<D> &st, const q_operand<D> &q, const unsigned char *sK,
                       const unsigned char *sV, float scale_log2, Valid valid)
{
    static_assert(NT % 2 == 0, "keys come in 16-key steps");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, mi = lane >> 3;
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;

        /* S = Q K^T. K's B-fragments: matrix mi holds keys 16jj + (mi >> 1) * 8
         * .. + 7 at chunk 2kk + (mi & 1); (r0, r1) serve key tile 2jj, (r2, r3)
         * key tile 2jj + 1. */
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        q_frag<D>(q, kk, a);
#pragma unroll
        for (int jj = 0; jj < NT / 2; jj++) {
            uint32_t b[4];
            ifd_ldsm_x4(b, sK + swz<D>(16 * jj + (mi >> 1) * 8 + (lane & 7), 2 * kk + (mi & 1)));
            ifd_mma_16816<BF16>(s[2 * jj], a, b);
            ifd_mma_16816<BF16>(s[2 * jj + 1], a, b + 2);
        }
    }

    /* Scale, mask, row maxima. */
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v = s[j][i] * scale_log2;
            if (MASK && !valid(g + (i >> 1) * 8, 8 * j + 2 * t + (i & 1)))
                v = -INFINITY;
            s[j][i] = v;
            mx[i >> 1] = fmaxf(mx[i >> 1], v);
        }
    }
    float mu[2], corr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mnew = fmaxf(st.m[r], mx[r]);
        mu[r] = mnew == -INFINITY ? 0.0f : mnew;
        corr[r] = exp2f(st.m[r] - mu[r]);
        st.m[r] = mnew;
    }

    /* P = exp2(S - m); running sums; rescale O. */
    float ls[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float p = exp2f(s[j][i] - mu[i >> 1]);
            s[j][i] = p;
            ls[i >> 1] += p;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++)
        st.l[r] = st.l[r] * corr[r] + ls[r];
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        st.o[n][0] *= corr[0];
        st.o[n][1] *= corr[0];
        st.o[n][2] *= corr[1];
        st.o[n][3] *= corr[1];
    }

    /* O += P V. V's B-fragments by ldmatrix.trans: matrix mi holds keys
     * 16ks + (mi & 1) * 8 .. + 7 at chunk 2dd + (mi >> 1); (r0, r1) serve
     * column tile 2dd, (r2, r3) column tile 2dd + 1. */
#pragma unroll
    for (int ks = 0; ks < NT / 2; ks++) {
        uint32_t pa[4];
        pa[0] = ifd_pack2<BF16>(s[2 * ks][0], s[2 * ks][1]);
        pa[1] = ifd_pack2<BF16>(s[2 * ks][2], s[2 * ks][3]);
        pa[2] = ifd_pack2<BF16>(s[2 * ks + 1][0], s[2 * ks + 1][1]);
        pa[3] = ifd_pack2<BF16>(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
        for (int dd = 0; dd < D / 16; dd++) {
            uint32_t b[4];
            ifd_ldsm_x4_trans(b,
                              sV + swz<D>(16 * ks + (mi & 1) * 8 + (lane & 7), 2 * dd + (mi >> 1)));
            ifd_mma_16816<BF16>(st.o[2 * dd], pa, b);
            ifd_mma_16816<BF16>(st.o[2 * dd + 1], pa, b + 2);
        }
    }
}

/* Eight floats as one 16-byte chunk of 16-bit values (in order). */
template <bool BF16> IFD_DEV uint4 pack8(float4 x0, float4 x1)
{
    uint4 w;
    w.x = ifd_pack2<BF16>(x0.x, x0.y);
    w.y = ifd_pack2<BF16>(x0.z, x0.w);
    w.z = ifd_pack2<BF16>(x1.x, x1.y);
    w.w = ifd_pack2<BF16>(x1.z, x1.w);
    return w;
}

} // namespace ifd_attn

#endif
