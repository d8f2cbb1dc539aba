/*
 * attn_prefill.h — paged prefill attention on the GPU (attn_prefill.cu):
 * FlashAttention-2-style tiled causal attention for a ragged (varlen) batch
 * of new tokens over the paged KV pool, online softmax with no materialized
 * score matrix, tensor-core MMA. See cuda_types.h for the conventions every
 * launcher follows.
 *
 * The batch: sequence s contributes the q_len[s] = cu_q[s + 1] - cu_q[s]
 * consecutive query rows cu_q[s] .. cu_q[s + 1] - 1 (its new chunk), and its
 * context after the chunk is ctx_len[s] positions, so query i of the chunk
 * sits at position ctx_len[s] - q_len[s] + i. The K/V of all ctx_len[s]
 * positions — the cached prefix and the new chunk — must already be in the
 * pool (write the chunk's first, e.g. with ifd_cuda_rope_kv_write).
 *
 * Semantics: those of ifd_cpu_paged_attention with seq = s, that position
 * and `last` for every query row: a row at position p attends to positions
 * [max(0, p - window + 1), e] (window 0 = unlimited), e = last[row] (NULL:
 * e = p; Gemma 3's image blocks, where a token of an image sees its whole
 * image: e >= p, non-decreasing along a sequence's chunk, and < ctx_len[s]
 * — the K/V must be in the pool); query head h uses KV head h / (n_heads /
 * n_kv_heads). A sequence with q_len 0 is skipped.
 *
 * Supported: kv->dtype F16, BF16, Q8_0 or FP8 (f32 accumulation, P rounded
 * to the 16-bit type before P.V as in FlashAttention; Q8_0/FP8 read in
 * place and dequantized in registers to f16, over Q8_0 K with the query
 * quantized and integer q.k, as attn_decode.h), kv->block_size 16,
 * kv->head_dim 64, 128 or 256; q and out f32. Unused slots and blocks are
 * never read.
 */
#ifndef IFD_CUDA_ATTN_PREFILL_H
#define IFD_CUDA_ATTN_PREFILL_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/*
 * out[r, h] = softmax_p(scale * q[r, h] . k_p) . v_p for every query row r
 * of the batch (rows not covered by cu_q are left untouched).
 * cu_q, ctx_len, last and block_tables are device arrays; max_q_len is a host-side
 * upper bound of q_len[s] (it sizes the grid; rows beyond it would be
 * skipped, so it must hold). n_tok = cu_q[n_seqs] (used for checks only).
 * Returns 0, IFD_EINVAL (bad shapes, NULL or misaligned pointers),
 * IFD_ENOTSUP (dtype, block size, head dim), IFD_ECUDA.
 */
int ifd_cuda_paged_prefill_attention(
    float *IFD_CUDA_RESTRICT out,                  /* [n_tok, n_heads, head_dim] */
    const float *IFD_CUDA_RESTRICT q,              /* [n_tok, n_heads, head_dim] */
    const ifd_kv_layer_t *kv,                      /* the layer's pool */
    const int32_t *IFD_CUDA_RESTRICT cu_q,         /* [n_seqs + 1] */
    const int32_t *IFD_CUDA_RESTRICT ctx_len,      /* [n_seqs] */
    const int32_t *IFD_CUDA_RESTRICT last,         /* [n_tok] or NULL */
    const int32_t *IFD_CUDA_RESTRICT block_tables, /* [n_seqs, max_blocks] */
    int max_blocks, int n_seqs, int n_tok, int max_q_len, int n_heads, float scale, int window,
    ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
