/*
 * attn_prefill.cu — paged prefill attention (attn_prefill.h).
 *
 * Work split: one block (4 warps) per (tile of BM = 64 query rows, sequence,
 * KV head). Grouped-query heads are packed into the rows: row r of a
 * sequence's chunk is query token r / G, query head kvh * G + r % G, so a
 * tile covers 64 / G tokens of all G heads sharing the KV head and every K/V
 * tile is loaded once for all of them. Each warp owns 16 rows.
 *
 * Main loop: K/V tiles of BN keys (4 or 2 pool blocks) from the lowest key
 * any row of the tile sees to the highest (causal end), double-buffered in
 * shared memory with cp.async; keys outside that range are zero-filled, so
 * unused slots are never read. Per tile each warp runs one attn_step
 * (attn_common.cuh), with per-element masking only on tiles that cross one
 * of its rows' causal or window edges, and skips tiles it cannot see.
 * Gemma 3's images (attn_prefill.h, `last`): a row's causal end is its
 * last visible key, its window still starts from its position; every
 * bound above reads the ends of the first and last rows (non-decreasing). Tiles
 * are processed from the heaviest (last) query tile of a sequence first.
 *
 * Specializations: head_dim 64/128/256 x {bf16, f16, q8_0, fp8} (quantized
 * V and FP8 K dequantized to f16 on their way into the tiles, kv_stage; over
 * Q8_0 K the query quantized per 32 values as the CPU kernel does and q·k an
 * integer MMA per block, q8_tile / kq_stage / scores on a q8_operand: attn_common.cuh);
 * BN = 64 keys for
 * head_dim <= 128 and 32 for 256 (register and shared-memory budget).
 * Shared memory: Q tile + 2 x (K + V) tiles = 40 / 80 / 96 KiB.
 */
#include "attn_prefill.h"

#include "attn_common.cuh"
#include "cuda_check.h"

using namespace ifd_attn;

namespace
{

constexpr int BM = 64;
constexpr int NWARPS = 4;

struct prefill_args {
    float *out;
    const float *q;
    const unsigned char *k;
    const unsigned char *v;
    const int32_t *cu_q;
    const int32_t *ctx;
    const int32_t *last; /* [n_tok] or NULL */
    const int32_t *bt;
    int max_blocks, n_heads, n_kv, group, window;
    float scale_log2;
};

__host__ __device__ constexpr int bn_for(int d)
{
    return d == 256 ? 32 : 64;
}

__host__ __device__ constexpr size_t smem_for(int d)
{
    return (size_t)BM * d * 2 + (size_t)4 * bn_for(d) * d * 2;
}

template <int D, int KVT>
__global__ void __launch_bounds__(NWARPS * 32) prefill_kernel(prefill_args a)
{
    constexpr bool BF16 = kv_bf16<KVT>();
    constexpr bool QK = kv_qk<KVT>(); /* Q8_0 K: quantized query, integer q·k */
    constexpr int BN = bn_for(D);
    constexpr int CH = D / 8; /* 16-byte chunks per row */
    constexpr int TILE = BN * D * 2; /* bytes of a [BN][D] 16-bit tile */
    IFD_DYN_SMEM(smem);
    unsigned char *sQ = smem;
    unsigned char *sK = smem + BM * D * 2; /* [2][BN][D] */
    unsigned char *sV = sK + 2 * TILE;     /* [2][BN][D] */

    const int s = blockIdx.y, kvh = blockIdx.z;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int q0 = a.cu_q[s], qlen = a.cu_q[s + 1] - q0;
    const int G = a.group;
    const int rows = qlen * G;
    const int r0 = tile * BM;
    if (r0 >= rows)
        return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int pos0 = a.ctx[s] - qlen; /* position of the chunk's first token */
    const int W = a.window;
    const int r_last = r0 + BM - 1 < rows - 1 ? r0 + BM - 1 : rows - 1;
    /* the last key a row sees: its position, or its image's last one
     * (non-decreasing along the chunk, so the tile's last row has the
     * highest) */
    auto end_of = [&](int row) { return a.last ? a.last[q0 + row / G] : pos0 + row / G; };
    const int key_hi = end_of(r_last);
    const int key_lo = W > 0 && pos0 + r0 / G - W + 1 > 0 ? pos0 + r0 / G - W + 1 : 0;

    /* Q rows, unscaled, in the KV dtype (over Q8_0 K quantized as the CPU
     * kernel does); zero rows past the chunk. */
    if constexpr (QK) {
        q8_tile<D, BM, NWARPS * 32>(sQ, [&](int r) -> const float * {
            const int row = r0 + r;
            if (row >= rows)
                return nullptr;
            return a.q + ((int64_t)(q0 + row / G) * a.n_heads + kvh * G + row % G) * D;
        });
    } else {
        for (int e = tid; e < BM * CH; e += NWARPS * 32) {
            const int r = e / CH, c = e % CH, row = r0 + r;
            uint4 w = make_uint4(0, 0, 0, 0);
            if (row < rows) {
                const int64_t qi = (int64_t)(q0 + row / G) * a.n_heads + kvh * G + row % G;
                const float4 *src = (const float4 *)(a.q + qi * D + c * 8);
                w = pack8<BF16>(src[0], src[1]);
            }
            *(uint4 *)(sQ + swz<D>(r, c)) = w;
        }
    }

    const int32_t *btab = a.bt + (int64_t)s * a.max_blocks;
    auto issue = [&](int kt, int buf) {
        unsigned char *dk = sK + buf * TILE, *dv = sV + buf * TILE;
        for (int e = tid; e < BN * CH; e += NWARPS * 32) {
            const int r = e / CH, c = e % CH;
            const int key = kt * BN + r;
            bool ok = key >= key_lo && key <= key_hi;
            int64_t row = 0;
            if (ok) {
                const int64_t phys = btab[key / KV_BLOCK];
                ok = phys >= 0;
                row = (phys * a.n_kv + kvh) * KV_BLOCK + key % KV_BLOCK;
            }
            if constexpr (QK)
                kq_stage<D, BN>(dk, a.k, row, r, c, ok);
            else
                kv_stage<KVT, D>(dk + swz<D>(r, c), a.k, row, c, ok);
            kv_stage<KVT, D>(dv + swz<D>(r, c), a.v, row, c, ok);
        }
    };

    /* This warp's rows, tokens and visible keys. */
    const int wr0 = r0 + warp * 16;
    const bool active = wr0 < rows;
    const int wr1 = wr0 + 15 < rows - 1 ? wr0 + 15 : rows - 1;
    const int wp_first = pos0 + wr0 / G, wp_last = pos0 + wr1 / G;
    const int wlo = W > 0 && wp_first - W + 1 > 0 ? wp_first - W + 1 : 0;
    const int we_first = active ? end_of(wr0) : 0, we_last = active ? end_of(wr1) : 0;
    /* the two rows this lane masks (g and g + 8 of the warp's 16):
     * position and last visible key */
    const int ra = wr0 + (lane >> 2) < rows - 1 ? wr0 + (lane >> 2) : rows - 1;
    const int rb = wr0 + (lane >> 2) + 8 < rows - 1 ? wr0 + (lane >> 2) + 8 : rows - 1;
    const int pa = pos0 + ra / G, pb = pos0 + rb / G;
    const int ea = active ? end_of(ra) : 0, eb = active ? end_of(rb) : 0;

    warp_state<D> st;
    state_init<D>(st);
    __syncthreads(); /* the Q tile */
    typename q_sel<D, QK>::type qo;
    q_init<D, BM>(qo, sQ, warp * 16);
    const int kt0 = key_lo / BN, kt1 = key_hi / BN;
    issue(kt0, 0);
    ifd_cp_async_commit();
    for (int kt = kt0; kt <= kt1; kt++) {
        const int buf = (kt - kt0) & 1;
        if (kt < kt1)
            issue(kt + 1, buf ^ 1);
        ifd_cp_async_commit();
        ifd_cp_async_wait<1>();
        __syncthreads();
        const int k_first = kt * BN, k_last = kt * BN + BN - 1;
        if (active && k_first <= we_last && k_last >= wlo) {
            /* Every key visible to every row: up to the first row's last
             * visible key and inside the last row's window. */
            const bool full = k_last <= we_first && (W == 0 || k_first >= wp_last - W + 1);
            auto valid = [=](int r, int k) {
                /* r is this lane's row g or g + 8 */
                const int p = r < 8 ? pa : pb, e = r < 8 ? ea : eb, key = k_first + k;
                return key <= e && (W == 0 || key > p - W);
            };
            const unsigned char *tk = sK + buf * TILE, *tv = sV + buf * TILE;
            if (full)
                attn_step<D, BN / 8, BF16, false>(st, qo, tk, tv, a.scale_log2, valid);
            else
                attn_step<D, BN / 8, BF16, true>(st, qo, tk, tv, a.scale_log2, valid);
        }
        __syncthreads(); /* the buffer is free for the next prefetch */
    }
    ifd_cp_async_wait<0>();
    if (!active)
        return;
    state_reduce_l<D>(st);

    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = wr0 + g + half * 8;
        if (row >= rows)
            continue;
        const float inv = st.l[half] > 0.0f ? 1.0f / st.l[half] : 0.0f;
        const int64_t qi = (int64_t)(q0 + row / G) * a.n_heads + kvh * G + row % G;
        float *dst = a.out + qi * D + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            float2 v2;
            v2.x = st.o[n][2 * half] * inv;
            v2.y = st.o[n][2 * half + 1] * inv;
            *(float2 *)(dst + 8 * n) = v2;
        }
    }
}

template <int D, int KVT>
int launch(const prefill_args &a, int n_seqs, int max_q_len, cudaStream_t stream)
{
    const size_t smem = smem_for(D);
    void (*kern)(prefill_args) = prefill_kernel<D, KVT>;
    IFD_CUDA_CHECK(cudaFuncSetAttribute((const void *)kern,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t tiles = ((int64_t)max_q_len * a.group + BM - 1) / BM;
    if (tiles > 0x7fffffff)
        return IFD_EINVAL;
    const dim3 grid((unsigned)tiles, (unsigned)n_seqs, (unsigned)a.n_kv);
    IFD_LAUNCH(kern, grid, dim3(NWARPS * 32), smem, stream, a);
    IFD_CUDA_CHECK_LAUNCH("prefill_kernel");
    return 0;
}

template <int D>
int launch_dt(const prefill_args &a, int n_seqs, int max_q_len, int dt, cudaStream_t stream)
{
    switch (dt) {
    case IFD_DTYPE_BF16:
        return launch<D, IFD_DTYPE_BF16>(a, n_seqs, max_q_len, stream);
    case IFD_DTYPE_F16:
        return launch<D, IFD_DTYPE_F16>(a, n_seqs, max_q_len, stream);
    case IFD_DTYPE_Q8_0:
        return launch<D, IFD_DTYPE_Q8_0>(a, n_seqs, max_q_len, stream);
    case IFD_DTYPE_FP8:
        return launch<D, IFD_DTYPE_FP8>(a, n_seqs, max_q_len, stream);
    default:
        return IFD_ENOTSUP;
    }
}

} // namespace

extern "C" int ifd_cuda_paged_prefill_attention(
    float *IFD_CUDA_RESTRICT out, const float *IFD_CUDA_RESTRICT q, const ifd_kv_layer_t *kv,
    const int32_t *IFD_CUDA_RESTRICT cu_q, const int32_t *IFD_CUDA_RESTRICT ctx_len,
    const int32_t *IFD_CUDA_RESTRICT last, const int32_t *IFD_CUDA_RESTRICT block_tables,
    int max_blocks, int n_seqs, int n_tok, int max_q_len, int n_heads, float scale, int window,
    ifd_cuda_stream_t stream)
{
    if (!kv || n_seqs < 0 || n_tok < 0 || max_q_len < 0 || n_heads <= 0 || window < 0 ||
        max_blocks <= 0 || kv->n_kv_heads <= 0 || n_heads % kv->n_kv_heads != 0 ||
        !(scale == scale))
        return IFD_EINVAL;
    if (kv->head_dim != 64 && kv->head_dim != 128 && kv->head_dim != 256)
        return IFD_ENOTSUP;
    if (kv->block_size != KV_BLOCK || (kv->dtype != IFD_DTYPE_BF16 && kv->dtype != IFD_DTYPE_F16 &&
                                       kv->dtype != IFD_DTYPE_Q8_0 && kv->dtype != IFD_DTYPE_FP8))
        return IFD_ENOTSUP;
    if (n_seqs == 0 || n_tok == 0 || max_q_len == 0)
        return 0;
    if (n_seqs > 65535)
        return IFD_EINVAL;
    if (!out || !q || !kv->k || !kv->v || !cu_q || !ctx_len || !block_tables)
        return IFD_EINVAL;
    if (((uintptr_t)q | (uintptr_t)out | (uintptr_t)kv->k | (uintptr_t)kv->v) % 16 != 0)
        return IFD_EINVAL;

    prefill_args a;
    a.out = out;
    a.q = q;
    a.k = (const unsigned char *)kv->k;
    a.v = (const unsigned char *)kv->v;
    a.cu_q = cu_q;
    a.ctx = ctx_len;
    a.last = last;
    a.bt = block_tables;
    a.max_blocks = max_blocks;
    a.n_heads = n_heads;
    a.n_kv = kv->n_kv_heads;
    a.group = n_heads / kv->n_kv_heads;
    a.window = window;
    a.scale_log2 = scale * 1.4426950408889634f;

    switch (kv->head_dim) {
    case 64:
        return launch_dt<64>(a, n_seqs, max_q_len, kv->dtype, stream);
    case 128:
        return launch_dt<128>(a, n_seqs, max_q_len, kv->dtype, stream);
    case 256:
        return launch_dt<256>(a, n_seqs, max_q_len, kv->dtype, stream);
    default:
        return IFD_ENOTSUP;
    }
}
