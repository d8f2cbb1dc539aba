/*
 * attn_decode.h — paged decode attention on the GPU (attn_decode.cu): one
 * query token per row of a ragged batch, K/V read through block tables from
 * the paged KV pool, grouped-query attention reading each KV head once for
 * all the query heads that share it, and split-K ("flash-decoding") over
 * long contexts with a log-sum-exp merge. See cuda_types.h for the
 * conventions every launcher follows.
 *
 * Semantics: exactly those of ifd_cpu_paged_attention (cpu_kernels.h) for a
 * batch in which every token is computed independently: token t (sequence
 * seq[t], position pos[t]) attends to that sequence's cached positions
 * [max(0, pos[t] - window + 1), pos[t]] (window 0 = unlimited), whose K/V
 * must already be in the pool; query head h uses KV head h / (n_heads /
 * n_kv_heads); a token with seq[t] < 0 is padding and gets a zero output.
 * Prefill chunks can use it too (each token is a "decode" token), but
 * attn_prefill.h is much faster for them.
 *
 * Supported: kv->dtype F16, BF16, Q8_0 or FP8 (read in place, dequantized
 * in registers to f16: the values of ifd_cpu_kv_dequant_row rounded to f16;
 * f32 accumulation; over Q8_0 K the query is quantized to int8 per 32 values
 * as ifd_cpu_paged_attention does, and q.k is an integer dot product per
 * block times the two scales, only V is dequantized), kv->block_size 16,
 * kv->head_dim 64, 128 or 256; any n_heads that is a multiple of
 * n_kv_heads. q and out are f32. Unused slots and blocks of the pool are
 * never read (they may hold NaN).
 */
#ifndef IFD_CUDA_ATTN_DECODE_H
#define IFD_CUDA_ATTN_DECODE_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/*
 * Bytes of device workspace ifd_cuda_paged_decode_attention needs for this
 * shape on the current device (0 when no split is needed) into *bytes.
 * max_ctx is a host-side upper bound of the number of positions any token of
 * the batch attends to (min(pos + 1, window)); it sizes the split-K.
 * Returns 0, IFD_EINVAL, or IFD_ECUDA (device query failed).
 */
int ifd_cuda_paged_decode_workspace(size_t *bytes, int n_tok, int n_heads, int n_kv_heads,
                                    int head_dim, int max_ctx);

/*
 * out[t, h] = softmax_p(scale * q[t, h] . k_p) . v_p over the positions above.
 * kv: the layer's pool regions (device pointers in a host struct, read at
 * the call). workspace: device memory of at least
 * ifd_cuda_paged_decode_workspace(...) bytes for the same arguments (may be
 * NULL when that is 0), owned by the caller, used until the stream passes
 * this launch. If some token attends to more than max_ctx positions the
 * result is still right, only slower.
 * Returns 0, IFD_EINVAL (bad shapes, NULL pointers, misaligned q/out/pool,
 * workspace too small), IFD_ENOTSUP (dtype, block size, head dim), IFD_ECUDA.
 */
int ifd_cuda_paged_decode_attention(
    float *IFD_CUDA_RESTRICT out,                  /* [n_tok, n_heads, head_dim] */
    const float *IFD_CUDA_RESTRICT q,              /* [n_tok, n_heads, head_dim] */
    const ifd_kv_layer_t *kv,                      /* the layer's pool */
    const int32_t *IFD_CUDA_RESTRICT seq,          /* [n_tok] */
    const int32_t *IFD_CUDA_RESTRICT pos,          /* [n_tok] */
    const int32_t *IFD_CUDA_RESTRICT block_tables, /* [n_seqs, max_blocks] */
    int max_blocks, int n_tok, int n_heads, float scale, int window, int max_ctx, void *workspace,
    size_t workspace_bytes, ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
