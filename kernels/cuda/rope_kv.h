/*
 * rope_kv.h — rotary position embedding fused with writing K and V into
 * their KV-pool slots, on the GPU (rope_kv.cu). See cuda_types.h for the
 * conventions every launcher follows.
 */
#ifndef IFD_CUDA_ROPE_KV_H
#define IFD_CUDA_ROPE_KV_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/* The rotation: as ifd_cpu_rope's parameters. */
typedef struct {
    int n_rot;                 /* rotated dims per head: even, <= head_dim */
    float base;                /* theta base, > 0 (10000, 500000, ...) */
    float freq_scale;          /* 1 = none (linear scaling otherwise) */
    const float *freq_factors; /* [n_rot / 2] DEVICE array, or NULL */
    ifd_rope_mode_t mode;      /* IFD_ROPE_NORM or IFD_ROPE_NEOX */
} ifd_cuda_rope_t;

/*
 * For each token t (position pos[t]):
 *  - rotates the first n_rot dims of every query head of q[t] in place;
 *  - rotates the K heads of k[t] the same way and writes them, with the V
 *    heads of v[t] unchanged, into slot[t] of the layer's pool (slot =
 *    block * block_size + offset, layout [block][kv_head][token][row],
 *    converted to kv->dtype with round to nearest even, or quantized as
 *    ifd_cpu_kv_write does for Q8_0 and FP8); slot[t] < 0 is a
 *    padding token: nothing is written for it (its q is still rotated);
 *  - for Q8_0 with head_dim a multiple of 64, then multiplies q and K by
 *    the Walsh-Hadamard matrix before K is quantized (cpu/kv_rot.h: the
 *    basis quantized K is kept in; ifd_cpu_kv_rotate).
 * Angles and rotation follow ifd_cpu_rope exactly (the same float
 * operations in the same order; only cosf/sinf may differ in the last ulp),
 * so q matches ifd_cpu_rope (+ ifd_cpu_kv_rotate) and the pool matches
 * ifd_cpu_rope + ifd_cpu_kv_rotate + ifd_cpu_kv_write.
 * Rows are strided: q[t] starts at q + t * q_ld (q_ld >=
 * n_heads * head_dim), k[t] at k + t * k_ld, v[t] at v + t * v_ld (>=
 * n_kv_heads * head_dim), so a fused QKV projection output can be passed as
 * three views of one buffer. Slots must be distinct.
 * Supported: kv->dtype F32, F16, BF16, Q8_0 and FP8 (head_dim a multiple
 * of 32; the bytes equal ifd_cpu_kv_write's where cosf/sinf agree with the
 * host's); any block_size and head_dim <= 1024.
 * Returns 0, IFD_EINVAL (bad shapes/parameters, NULL pointers),
 * IFD_ENOTSUP (mode, dtype, head_dim), IFD_ECUDA.
 */
int ifd_cuda_rope_kv_write(float *q,                              /* [n_tok, q_ld], in/out */
                           const ifd_kv_layer_t *kv,              /* device regions */
                           const float *IFD_CUDA_RESTRICT k,      /* [n_tok, k_ld] */
                           const float *IFD_CUDA_RESTRICT v,      /* [n_tok, v_ld] */
                           const int32_t *IFD_CUDA_RESTRICT pos,  /* [n_tok] */
                           const int64_t *IFD_CUDA_RESTRICT slot, /* [n_tok] */
                           int n_tok, int n_heads, int64_t q_ld, int64_t k_ld, int64_t v_ld,
                           const ifd_cuda_rope_t *rope, ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
