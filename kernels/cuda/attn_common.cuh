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
 * ifd_kv_row_bytes): V (both types) and FP8 K reach the same tiles through
 * kv_chunk: the loaders read 8 quants and their scale into registers,
 * dequantize (x = q · d in f32, the value ifd_cpu_kv_dequant_row gives) and
 * store them as f16, the MMA type of both (f16 keeps 11 bits of the 8-bit
 * quants' products, bf16 only 8).
 *
 * Q8_0 K is read as the CPU kernel reads it (attention_q.c): the query is
 * quantized once per row to int8 with one f32 scale per 32 values (q8_quant32,
 * ifd__quant_query's operations and rounding), K's tile keeps the int8 quants
 * and their scales (kq_stage: [NK] int8 rows of D values, q8_pitch bytes
 * apart, then [NK][D/32] f32), and
 * S = Q K^T is, per 32-value block b, an exact integer dot product
 * (mma.m16n8k32.s8) times the two scales, summed over b in order in f32:
 *   s = Σ_b (dq_b · dk_b) · Σ_i qq_i · kq_i      (scores, q8_operand)
 * the CPU's sum in the CPU's order. P·V is unchanged (V dequantized to f16).
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

/* Q8_0 K read with a quantized query (see the header). */
template <int KVT> __host__ __device__ constexpr bool kv_qk()
{
    return KVT == IFD_DTYPE_Q8_0;
}

/* Bytes from one row to the next in the int8 tiles (Q and K over Q8_0 K):
 * D + 16, so the 32-bit fragment loads of 8 rows (word t of a block in row
 * g, scores) fall in 8 different bank groups: a row pitch of D bytes would
 * put rows g and g + 2 (D = 64) or all 8 (D >= 128) on the same banks. */
template <int D> __host__ __device__ constexpr int q8_pitch()
{
    return D + 16;
}

/* Stages chunk c (values 8c .. 8c + 7) of Q8_0 K row `row` into a K tile of
 * NK rows laid out for scores (q8_operand): the 8 int8 quants at byte
 * r·q8_pitch + 8c and, from the chunk that starts a 32-value block, its
 * scale as f32 at float r·(D/32) + c/4 after the NK·q8_pitch quant bytes
 * (NK·(D + 16 + D/8) bytes in all, less than the NK·2D of a 16-bit tile).
 * ok = false: zeros (quants and scale), nothing read. */
template <int D, int NK>
IFD_DEV void kq_stage(unsigned char *tile, const unsigned char *region, int64_t row, int r, int c,
                      bool ok)
{
    constexpr int64_t RB = kv_row_bytes<IFD_DTYPE_Q8_0, D>();
    uint2 w = make_uint2(0, 0);
    float d = 0.0f;
    if (ok) {
        const unsigned char *src = region + row * RB;
        w.x = *(const uint32_t *)(src + 8 * c);
        w.y = *(const uint32_t *)(src + 8 * c + 4);
        if (c % 4 == 0)
            d = ifd_f16_f32(*(const uint16_t *)(src + D + 2 * (c / 4)));
    }
    *(uint2 *)(tile + r * q8_pitch<D>() + 8 * c) = w;
    if (c % 4 == 0)
        ((float *)(tile + NK * q8_pitch<D>()))[r * (D / 32) + c / 4] = d;
}

/* 32 query values x as int8 quants qi[32] and their scale *qd, with the
 * operations of the CPU's ifd__quant_query (attention_q.c), each explicitly
 * rounded: d = amax / 127, q = roundf(x · (1 / d)) (half away from zero),
 * clamped to ±127; a zero block gives d = 0 and zero quants; NaN gives a
 * 0 quant, as there. qi is 4-byte aligned. */
IFD_DEV void q8_quant32(unsigned char *qi, float *qd, const float *x)
{
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        uint32_t u = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float v = roundf(__fmul_rn(x[4 * w + j], id));
            const int qv = v >= -127.0f && v <= 127.0f ? (int)v
                           : v > 0.0f                  ? 127
                           : v < 0.0f                  ? -127
                                                       : 0;
            u |= (uint32_t)(uint8_t)(int8_t)qv << (8 * j);
        }
        *(uint32_t *)(qi + 4 * w) = u;
    }
    *qd = d;
}

/* Quantizes query rows into a Q tile of ROWS rows for scores (q8_operand):
 * int8 quants (ROWS rows of D, q8_pitch bytes apart), then f32 scales
 * [ROWS][D/32]. src(r) gives row r's D values in global memory (16-byte
 * aligned) or NULL for a zero row. All threads of the block take part (one
 * 32-value block each per turn); the caller synchronizes before reading the
 * tile. */
template <int D, int ROWS, int NTHREADS, class Src> IFD_DEV void q8_tile(unsigned char *sQ, Src src)
{
    float *qd = (float *)(sQ + ROWS * q8_pitch<D>());
    for (int e = threadIdx.x; e < ROWS * (D / 32); e += NTHREADS) {
        const int r = e / (D / 32), b = e % (D / 32);
        const float *row = src(r);
        float x[32];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 v = row ? ((const float4 *)(row + 32 * b))[j] : make_float4(0, 0, 0, 0);
            x[4 * j] = v.x, x[4 * j + 1] = v.y, x[4 * j + 2] = v.z, x[4 * j + 3] = v.w;
        }
        q8_quant32(sQ + r * q8_pitch<D>() + 32 * b, qd + e, x);
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

/* The warp's quantized Q (Q8_0 K): its 16 rows' int8 quants (row r at
 * qi + r·q8_pitch) and scales (qd[r·(D/32) + b]) in a tile made by q8_tile. */
template <int D> struct q8_operand {
    const unsigned char *qi;
    const float *qd;
};

/* The warp's Q operand type: q8_operand over Q8_0 K (QK), else q_operand. */
template <int D, bool QK> struct q_sel {
    using type = q_operand<D>;
};
template <int D> struct q_sel<D, true> {
    using type = q8_operand<D>;
};

/* The operand of rows row0 .. row0 + 15 (a multiple of 8) of a Q tile of
 * ROWS rows: a swizzled 16-bit tile (q_load), or a q8_tile. */
template <int D, int ROWS> IFD_DEV void q_init(q_operand<D> &q, const unsigned char *sQ, int row0)
{
    q_load<D>(q, sQ + row0 * D * 2);
}

template <int D, int ROWS> IFD_DEV void q_init(q8_operand<D> &q, const unsigned char *sQ, int row0)
{
    q.qi = sQ + row0 * q8_pitch<D>();
    q.qd = (const float *)(sQ + ROWS * q8_pitch<D>()) + row0 * (D / 32);
}

/* S = Q K^T for 16-bit tiles: f16/bf16 MMA, f32 accumulation. */
template <int D, int NT, bool BF16>
IFD_DEV void scores(float s[NT][4], const q_operand<D> &q, const unsigned char *sK)
{
    const int lane = threadIdx.x & 31, mi = lane >> 3;
    /* K's B-fragments: matrix mi holds keys 16jj + (mi >> 1) * 8 .. + 7 at
     * chunk 2kk + (mi & 1); (r0, r1) serve key tile 2jj, (r2, r3) key tile
     * 2jj + 1. */
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
}

/* S = Q K^T for Q8_0 K (a kq_stage tile of 8·NT rows) and a quantized Q:
 * per 32-value block b one integer MMA per 8 keys, then
 * s += (dq_b · dk_b) · dot_b in f32, blocks in order — the CPU's
 * ifd__chunk_qscalar sum. Fragments read straight from the row-major int8
 * tiles (a row's block is 32 bytes: words t and t + 4 of it). */
template <int D, int NT, bool BF16>
IFD_DEV void scores(float s[NT][4], const q8_operand<D> &q, const unsigned char *sK)
{
    constexpr int NB = D / 32;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int PQ = q8_pitch<D>();
    const float *kd = (const float *)(sK + 8 * NT * PQ);
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const unsigned char *q0 = q.qi + g * PQ + 32 * b + 4 * t, *q1 = q0 + 8 * PQ;
        const uint32_t a[4] = {*(const uint32_t *)q0, *(const uint32_t *)q1,
                               *(const uint32_t *)(q0 + 16), *(const uint32_t *)(q1 + 16)};
        const float dq0 = q.qd[g * NB + b], dq1 = q.qd[(g + 8) * NB + b];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const unsigned char *k0 = sK + (8 * j + g) * PQ + 32 * b + 4 * t;
            const uint32_t bf[2] = {*(const uint32_t *)k0, *(const uint32_t *)(k0 + 16)};
            int32_t c[4] = {0, 0, 0, 0};
            ifd_mma_16832_s8(c, a, bf);
            const float dk0 = kd[(8 * j + 2 * t) * NB + b], dk1 = kd[(8 * j + 2 * t + 1) * NB + b];
            s[j][0] = __fadd_rn(s[j][0], __fmul_rn(__fmul_rn(dq0, dk0), (float)c[0]));
            s[j][1] = __fadd_rn(s[j][1], __fmul_rn(__fmul_rn(dq0, dk1), (float)c[1]));
            s[j][2] = __fadd_rn(s[j][2], __fmul_rn(__fmul_rn(dq1, dk0), (float)c[2]));
            s[j][3] = __fadd_rn(s[j][3], __fmul_rn(__fmul_rn(dq1, dk1), (float)c[3]));
        }
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
 * One step over NK = 8 * NT keys (NT even): q = the warp's 16 Q rows
 * (q_operand<D> with a 16-bit [NK][D] K tile, or q8_operand<D> with a
 * kq_stage Q8_0 K tile), sV = a [NK][D] 16-bit tile. With MASK, valid(r, k)
 * says whether local row r (0..15) may see local key k (0..NK-1); without it
 * every key is visible. Keys whose K/V rows were zero-filled must be masked.
 */
template <int D, int NT, bool BF16, bool MASK, class QOp, class Valid>
IFD_DEV void attn_step(warp_state<D> &st, const QOp &q, const unsigned char *sK,
                       const unsigned char *sV, float scale_log2, Valid valid)
{
    static_assert(NT % 2 == 0, "keys come in 16-key steps");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, mi = lane >> 3;
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    scores<D, NT, BF16>(s, q, sK);

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
