/*
 * attn_decode.cu — paged decode attention (attn_decode.h).
 *
 * Work split: one block (4 warps) per (token, KV head, group of up to 16
 * query heads, split of the context). The group's query heads are the 16
 * rows of a tensor-core tile (padded with zero rows), so every K/V element
 * is read from global memory once for all of them. A split is a run of
 * `bps` KV blocks (16 positions each); the block's warps take its KV blocks
 * round-robin, each warp streaming its own blocks through a private ring of
 * STAGES shared-memory stages with cp.async (no block-wide barrier in the
 * main loop), masking positions outside [lo, pos] (those rows are
 * zero-filled, never read). The warps' partial softmax states are merged in
 * shared memory; a token with one split writes `out` directly, otherwise
 * each split writes its normalized partial output and log2-sum-exp to the
 * workspace and merge_kernel combines them.
 *
 * Split plan: enough splits that the grid has about 16 blocks per SM, i.e.
 * several waves, so the partial last wave costs little (but at least 8 KV
 * blocks per split, so each warp gets two), computed from the host-side
 * bound max_ctx; the last split of a token absorbs any blocks beyond the
 * plan, so a token longer than max_ctx is still right.
 *
 * Specializations: head_dim 64/128/256 x {bf16, f16, q8_0, fp8}; STAGES 4
 * for 64, else 2. Quantized V and FP8 K are dequantized to f16 on their way
 * into the stage (kv_stage: a synchronous load, not cp.async); over Q8_0 K the
 * query is quantized per 32 values as the CPU kernel does and q·k is an
 * integer MMA per block (q8_tile, kq_stage, scores on a q8_operand; attn_common.cuh).
 * Shared memory: Q tile + 4 warps x STAGES x (K + V) tiles.
 */
#include "attn_decode.h"

#include "attn_common.cuh"
#include "cuda_check.h"

using namespace ifd_attn;

namespace
{

constexpr int NWARPS = 4;
constexpr int MIN_BLOCKS_PER_SPLIT = 8;
/* Thread blocks per SM the split plan aims at: several waves of the 2-4
 * resident blocks, so the last, partial wave costs little. */
constexpr int TARGET_BLOCKS_PER_SM = 16;

struct decode_args {
    float *out;
    const float *q;
    const unsigned char *k;
    const unsigned char *v;
    const int32_t *seq;
    const int32_t *pos;
    const int32_t *bt;
    float *ws_o;   /* [n_tok, n_heads, max_splits, D] */
    float *ws_lse; /* [n_tok, n_heads, max_splits] */
    int max_blocks, n_heads, n_kv, group, head_groups, window, bps, max_splits;
    float scale_log2;
};

__host__ __device__ constexpr int stages_for(int d)
{
    return d == 64 ? 4 : 2;
}

__host__ __device__ constexpr size_t smem_for(int d)
{
    return (size_t)16 * d * 2 + (size_t)NWARPS * stages_for(d) * 2 * 16 * d * 2;
}

/* The KV-block range [b0, b1) of split `split` for a token, or false when
 * the split is empty. Shared by both kernels so they agree. */
IFD_DEV bool split_range(const decode_args &a, int p, int split, int *lo, int *b0, int *b1,
                         int *nsplit)
{
    *lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    const int blo = *lo / KV_BLOCK, bhi = p / KV_BLOCK;
    int ns = (bhi - blo + a.bps) / a.bps;
    ns = ns < a.max_splits ? ns : a.max_splits;
    *nsplit = ns;
    if (split >= ns)
        return false;
    *b0 = blo + split * a.bps;
    *b1 = split == ns - 1 ? bhi + 1 : *b0 + a.bps;
    return true;
}

template <int D, int KVT>
__global__ void __launch_bounds__(NWARPS * 32) decode_kernel(decode_args a)
{
    constexpr bool BF16 = kv_bf16<KVT>();
    constexpr bool QK = kv_qk<KVT>(); /* Q8_0 K: quantized query, integer q·k */
    constexpr int STAGES = stages_for(D);
    constexpr int TILE = 16 * D * 2; /* bytes of a [16][D] 16-bit tile */
    constexpr int CH = D / 8;        /* 16-byte chunks per row */
    IFD_DYN_SMEM(smem);
    unsigned char *sQ = smem;
    unsigned char *sRing = smem + TILE;

    const int tok = blockIdx.x;
    const int kvh = blockIdx.y / a.head_groups, hg = blockIdx.y % a.head_groups;
    const int split = blockIdx.z;
    const int h0 = kvh * a.group + hg * 16;
    const int nh = a.group - hg * 16 < 16 ? a.group - hg * 16 : 16;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const int sq = a.seq[tok];
    if (sq < 0) { /* padding: zero output, written once */
        if (split == 0)
            for (int e = tid; e < nh * D; e += NWARPS * 32)
                a.out[((int64_t)tok * a.n_heads + h0) * D + e] = 0.0f;
        return;
    }
    const int p = a.pos[tok];
    int lo, b0, b1, nsplit;
    if (!split_range(a, p, split, &lo, &b0, &b1, &nsplit))
        return;

    /* Q rows of the group, unscaled, in the KV dtype (over Q8_0 K quantized
     * as the CPU kernel does); zero padding rows. */
    if constexpr (QK) {
        q8_tile<D, 16, NWARPS * 32>(sQ, [&](int r) -> const float * {
            return r < nh ? a.q + ((int64_t)tok * a.n_heads + h0 + r) * D : nullptr;
        });
    } else {
        for (int e = tid; e < 16 * CH; e += NWARPS * 32) {
            const int r = e / CH, c = e % CH;
            uint4 w = make_uint4(0, 0, 0, 0);
            if (r < nh) {
                const float4 *src =
                    (const float4 *)(a.q + ((int64_t)tok * a.n_heads + h0 + r) * D + c * 8);
                w = pack8<BF16>(src[0], src[1]);
            }
            *(uint4 *)(sQ + swz<D>(r, c)) = w;
        }
    }

    unsigned char *ring = sRing + (size_t)warp * STAGES * 2 * TILE;
    const int32_t *btab = a.bt + (int64_t)sq * a.max_blocks;
    /* Stage the K and V rows of KV block b (a logical block of the sequence). */
    auto issue = [&](int b, int stage) {
        unsigned char *dk = ring + (size_t)stage * 2 * TILE, *dv = dk + TILE;
        const int64_t phys = btab[b];
        const int64_t row0 = (phys * a.n_kv + kvh) * KV_BLOCK; /* the block's row of key 0 */
        for (int e = lane; e < 16 * CH; e += 32) {
            const int r = e / CH, c = e % CH;
            const int key = b * KV_BLOCK + r;
            const bool ok = phys >= 0 && key >= lo && key <= p;
            if constexpr (QK)
                kq_stage<D, 16>(dk, a.k, row0 + r, r, c, ok);
            else
                kv_stage<KVT, D>(dk + swz<D>(r, c), a.k, row0 + r, c, ok);
            kv_stage<KVT, D>(dv + swz<D>(r, c), a.v, row0 + r, c, ok);
        }
    };

    warp_state<D> st;
    state_init<D>(st);
    __syncthreads(); /* the Q tile */
    typename q_sel<D, QK>::type qo;
    q_init<D, 16>(qo, sQ, 0);

    const int first = b0 + warp;
    const int nb = first < b1 ? (b1 - first + NWARPS - 1) / NWARPS : 0;
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < nb)
            issue(first + i * NWARPS, i);
        ifd_cp_async_commit();
    }
    for (int i = 0; i < nb; i++) {
        const int pre = i + STAGES - 1;
        if (pre < nb)
            issue(first + pre * NWARPS, pre % STAGES);
        ifd_cp_async_commit();
        ifd_cp_async_wait<STAGES - 1>();
        __syncwarp();
        const int b = first + i * NWARPS;
        const unsigned char *sk = ring + (size_t)(i % STAGES) * 2 * TILE;
        const unsigned char *sv = sk + TILE;
        const int kb = b * KV_BLOCK;
        auto valid = [=](int, int k) { return kb + k >= lo && kb + k <= p; };
        const bool full = kb >= lo && kb + KV_BLOCK - 1 <= p;
        if (full)
            attn_step<D, 2, BF16, false>(st, qo, sk, sv, a.scale_log2, valid);
        else
            attn_step<D, 2, BF16, true>(st, qo, sk, sv, a.scale_log2, valid);
        __syncwarp(); /* the stage is free for the next issue */
    }
    ifd_cp_async_wait<0>();
    state_reduce_l<D>(st);

    /* Merge the warps: O, m, l of every warp into shared memory (over the
     * rings, which no one uses any more). */
    __syncthreads();
    float *mo = (float *)sRing;       /* [NWARPS][16][D] */
    float *mm = mo + NWARPS * 16 * D; /* [NWARPS][16] */
    float *ml = mm + NWARPS * 16;     /* [NWARPS][16] */
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        float *r0 = mo + ((size_t)warp * 16 + g) * D + 8 * n + 2 * t;
        float *r1 = r0 + 8 * D;
        r0[0] = st.o[n][0];
        r0[1] = st.o[n][1];
        r1[0] = st.o[n][2];
        r1[1] = st.o[n][3];
    }
    if (t == 0) {
        mm[warp * 16 + g] = st.m[0];
        mm[warp * 16 + g + 8] = st.m[1];
        ml[warp * 16 + g] = st.l[0];
        ml[warp * 16 + g + 8] = st.l[1];
    }
    __syncthreads();
    for (int e = tid; e < nh * D; e += NWARPS * 32) {
        const int r = e / D, d = e % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NWARPS; w++)
            M = fmaxf(M, mm[w * 16 + r]);
        float L = 0.0f, o = 0.0f;
#pragma unroll
        for (int w = 0; w < NWARPS; w++) {
            const float mw = mm[w * 16 + r];
            const float f = mw == -INFINITY ? 0.0f : exp2f(mw - M);
            L += ml[w * 16 + r] * f;
            o += mo[((size_t)w * 16 + r) * D + d] * f;
        }
        const float res = L > 0.0f ? o / L : 0.0f;
        const int64_t row = (int64_t)tok * a.n_heads + h0 + r;
        if (nsplit == 1) {
            a.out[row * D + d] = res;
        } else {
            a.ws_o[(row * a.max_splits + split) * D + d] = res;
            if (d == 0)
                a.ws_lse[row * a.max_splits + split] = L > 0.0f ? M + log2f(L) : -INFINITY;
        }
    }
}

/* Combines the splits of tokens that have more than one. Block (token, head). */
template <int D> __global__ void __launch_bounds__(64) merge_kernel(decode_args a)
{
    const int tok = blockIdx.x, h = blockIdx.y;
    const int sq = a.seq[tok];
    if (sq < 0)
        return;
    int lo, b0, b1, nsplit;
    split_range(a, a.pos[tok], 0, &lo, &b0, &b1, &nsplit);
    if (nsplit <= 1)
        return;
    const int64_t row = (int64_t)tok * a.n_heads + h;
    const float *lse = a.ws_lse + row * a.max_splits;
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++)
        M = fmaxf(M, lse[s]);
    float L = 0.0f;
    for (int s = 0; s < nsplit; s++)
        L += lse[s] == -INFINITY ? 0.0f : exp2f(lse[s] - M);
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < nsplit; s++)
            if (lse[s] != -INFINITY)
                o += exp2f(lse[s] - M) * a.ws_o[(row * a.max_splits + s) * D + d];
        a.out[row * D + d] = o * inv;
    }
}

struct plan_t {
    int bps, max_splits, head_groups;
};

int make_plan(int n_tok, int n_heads, int n_kv, int max_ctx, plan_t *pl)
{
    int dev = 0, sms = 0;
    IFD_CUDA_CHECK(cudaGetDevice(&dev));
    IFD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int group = n_heads / n_kv;
    pl->head_groups = (group + 15) / 16;
    /* KV blocks a run of max_ctx positions can touch (it may start mid-block). */
    const int64_t max_nblk = max_ctx <= 1 ? 1 : ((int64_t)max_ctx + 14) / KV_BLOCK + 1;
    const int64_t base = (int64_t)n_tok * n_kv * pl->head_groups;
    int64_t want = (TARGET_BLOCKS_PER_SM * (int64_t)sms + base - 1) / base;
    want = want < 1 ? 1 : want > max_nblk ? max_nblk : want;
    int64_t bps = (max_nblk + want - 1) / want;
    bps = bps < MIN_BLOCKS_PER_SPLIT ? MIN_BLOCKS_PER_SPLIT : bps;
    pl->bps = (int)bps;
    pl->max_splits = (int)((max_nblk + bps - 1) / bps);
    return 0;
}

size_t workspace_bytes(const plan_t &pl, int n_tok, int n_heads, int head_dim)
{
    if (pl.max_splits <= 1)
        return 0;
    return (size_t)n_tok * n_heads * pl.max_splits * ((size_t)head_dim + 1) * sizeof(float);
}

int check_shape(int n_tok, int n_heads, int n_kv, int head_dim, int max_ctx)
{
    if (n_tok < 0 || n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0 || max_ctx < 0)
        return IFD_EINVAL;
    if (head_dim != 64 && head_dim != 128 && head_dim != 256)
        return IFD_ENOTSUP;
    return 0;
}

template <int D, int KVT> int launch(const decode_args &a, int n_tok, cudaStream_t stream)
{
    const size_t smem = smem_for(D);
    void (*kern)(decode_args) = decode_kernel<D, KVT>;
    IFD_CUDA_CHECK(cudaFuncSetAttribute((const void *)kern,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)n_tok, (unsigned)(a.n_kv * a.head_groups), (unsigned)a.max_splits);
    IFD_LAUNCH(kern, grid, dim3(NWARPS * 32), smem, stream, a);
    IFD_CUDA_CHECK_LAUNCH("decode_kernel");
    if (a.max_splits > 1) {
        void (*mk)(decode_args) = merge_kernel<D>;
        IFD_LAUNCH(mk, dim3((unsigned)n_tok, (unsigned)a.n_heads), dim3(64), 0, stream, a);
        IFD_CUDA_CHECK_LAUNCH("merge_kernel");
    }
    return 0;
}

template <int D> int launch_dt(const decode_args &a, int n_tok, int dt, cudaStream_t stream)
{
    switch (dt) {
    case IFD_DTYPE_BF16:
        return launch<D, IFD_DTYPE_BF16>(a, n_tok, stream);
    case IFD_DTYPE_F16:
        return launch<D, IFD_DTYPE_F16>(a, n_tok, stream);
    case IFD_DTYPE_Q8_0:
        return launch<D, IFD_DTYPE_Q8_0>(a, n_tok, stream);
    case IFD_DTYPE_FP8:
        return launch<D, IFD_DTYPE_FP8>(a, n_tok, stream);
    default:
        return IFD_ENOTSUP;
    }
}

bool dtype_ok(int dt)
{
    return dt == IFD_DTYPE_BF16 || dt == IFD_DTYPE_F16 || dt == IFD_DTYPE_Q8_0 ||
           dt == IFD_DTYPE_FP8;
}

} // namespace

extern "C" int ifd_cuda_paged_decode_workspace(size_t *bytes, int n_tok, int n_heads,
                                               int n_kv_heads, int head_dim, int max_ctx)
{
    if (!bytes)
        return IFD_EINVAL;
    *bytes = 0;
    int rc = check_shape(n_tok, n_heads, n_kv_heads, head_dim, max_ctx);
    if (rc || n_tok == 0)
        return rc;
    plan_t pl;
    rc = make_plan(n_tok, n_heads, n_kv_heads, max_ctx, &pl);
    if (rc)
        return rc;
    *bytes = workspace_bytes(pl, n_tok, n_heads, head_dim);
    return 0;
}

extern "C" int
ifd_cuda_paged_decode_attention(float *IFD_CUDA_RESTRICT out, const float *IFD_CUDA_RESTRICT q,
                                const ifd_kv_layer_t *kv, const int32_t *IFD_CUDA_RESTRICT seq,
                                const int32_t *IFD_CUDA_RESTRICT pos,
                                const int32_t *IFD_CUDA_RESTRICT block_tables, int max_blocks,
                                int n_tok, int n_heads, float scale, int window, int max_ctx,
                                void *workspace, size_t ws_bytes, ifd_cuda_stream_t stream)
{
    if (!kv)
        return IFD_EINVAL;
    int rc = check_shape(n_tok, n_heads, kv->n_kv_heads, kv->head_dim, max_ctx);
    if (rc)
        return rc;
    if (kv->block_size != KV_BLOCK || !dtype_ok(kv->dtype))
        return IFD_ENOTSUP;
    if (window < 0 || max_blocks <= 0 || !(scale == scale))
        return IFD_EINVAL;
    if (n_tok == 0)
        return 0;
    if (!out || !q || !kv->k || !kv->v || !seq || !pos || !block_tables)
        return IFD_EINVAL;
    if (((uintptr_t)q | (uintptr_t)kv->k | (uintptr_t)kv->v) % 16 != 0)
        return IFD_EINVAL;
    plan_t pl;
    rc = make_plan(n_tok, n_heads, kv->n_kv_heads, max_ctx, &pl);
    if (rc)
        return rc;
    const size_t need = workspace_bytes(pl, n_tok, n_heads, kv->head_dim);
    if (need > ws_bytes || (need && !workspace))
        return IFD_EINVAL;

    decode_args a;
    a.out = out;
    a.q = q;
    a.k = (const unsigned char *)kv->k;
    a.v = (const unsigned char *)kv->v;
    a.seq = seq;
    a.pos = pos;
    a.bt = block_tables;
    a.ws_o = (float *)workspace;
    a.ws_lse = need ? a.ws_o + (size_t)n_tok * n_heads * pl.max_splits * kv->head_dim : nullptr;
    a.max_blocks = max_blocks;
    a.n_heads = n_heads;
    a.n_kv = kv->n_kv_heads;
    a.group = n_heads / kv->n_kv_heads;
    a.head_groups = pl.head_groups;
    a.window = window;
    a.bps = pl.bps;
    a.max_splits = pl.max_splits;
    a.scale_log2 = scale * 1.4426950408889634f;

    switch (kv->head_dim) {
    case 64:
        return launch_dt<64>(a, n_tok, kv->dtype, stream);
    case 128:
        return launch_dt<128>(a, n_tok, kv->dtype, stream);
    case 256:
        return launch_dt<256>(a, n_tok, kv->dtype, stream);
    default:
        return IFD_ENOTSUP;
    }
}
