/*
 * generate.h — offline (engine-less) generation for one sequence: prefill
 * the prompt in chunks, then decode token by token, with the KV cache in a
 * private paged pool (common/kvpool) — or, with use_cache off, recomputing
 * the whole context at every step (the KV-caching benchmark's baseline).
 *
 * With local_pool, the model's sliding-window layers keep their K/V in a
 * second private pool that holds only their window (engine.h, local_pool).
 *
 * Ownership: the model and tokenizer are borrowed; the result's token list
 * is owned by the caller (ifd_generate_result_free). Threading: one call at
 * a time per model.
 */
#ifndef IFD_GENERATE_H
#define IFD_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "sampler.h"

/* Called for every generated token, in order. Return non-zero to stop. */
typedef int (*ifd_token_cb)(void *ctx, int32_t token);

typedef struct {
    int n_predict;            /* tokens to generate (>= 1) */
    bool use_cache;           /* false: recompute the whole context every step */
    int prefill_chunk;        /* tokens per prefill forward (default 512) */
    ifd_sampling_params_t sampling;
    const int32_t *stop_ids;  /* generation ends after one of these (not with ignore_eos) */
    size_t n_stop_ids;
    bool ignore_eos;
    FILE *dump_logits;        /* if set: .npy of float32 logits [rows, vocab] */
    int block_size;           /* KV tokens per block; 0: IFD_KVPOOL_DEFAULT_BLOCK_SIZE */
    int kv_dtype;             /* ifd_kv_dtype_t; -1 (default): f32 on the CPU, f16 on a GPU.
                               * q4_0 on a GPU backend: IFD_ENOTSUP (engine.h) */
    /* A model with sliding-window and global layers: the local layers' K/V
     * in a pool of their own (host memory, or on the CUDA backend a device
     * segment of its own), just big enough for the window before a prefill
     * chunk plus the chunk, whose blocks are released as the window moves
     * (what the engine does with a local pool; the oracle tests and
     * test_backend_cuda check it). Ignored for other models. */
    bool local_pool;
    /* Images (Gemma 3; ifd_batch_t.kv_last and .embd over the prompt's
     * positions): kv_last[p] the last position prompt position p attends to
     * and embd[p] its input embedding row (NULL entries: the token's own).
     * A prefill chunk never splits an image (IFD_EINVAL for one longer than
     * prefill_chunk). Both NULL: a text prompt. */
    const int32_t *kv_last;   /* [n_prompt] or NULL */
    const float *const *embd; /* [n_prompt] or NULL */
    ifd_token_cb on_token;
    void *cb_ctx;
} ifd_generate_params_t;

ifd_generate_params_t ifd_generate_default_params(void);

typedef struct {
    int32_t *tokens; /* generated ids (malloc'ed) */
    int n_tokens;
    const char *finish_reason; /* "length", "stop" or "callback" (static) */
    double ttft_ms;            /* start → first token sampled */
    double prefill_ms;
    double decode_ms;          /* after the first token */
    double total_ms;
    int n_logit_rows;          /* rows written to dump_logits */
    int kv_local_pool_blocks;  /* local_pool: the local layers' pool's blocks (0: none) */
    int kv_local_released;     /* local_pool: local blocks released before the end */
} ifd_generate_result_t;

void ifd_generate_result_free(ifd_generate_result_t *r);

/*
 * Generates for prompt[0..n_prompt). With dump_logits, the rows are the
 * logits at every prompt position followed by those at every generated
 * token except the last (row i predicts token i + 1 of prompt+output):
 * n_prompt + n_generated - 1 rows. Returns 0, IFD_EINVAL (empty prompt,
 * prompt + n_predict beyond the model's context), or a model/pool error.
 */
int ifd_generate(ifd_model_t *m, const int32_t *prompt, int n_prompt,
                 const ifd_generate_params_t *p, ifd_generate_result_t *r);

#endif
