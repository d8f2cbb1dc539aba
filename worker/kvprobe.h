/*
 * kvprobe.h — the measured half of `inferd-worker --kv-probe` (worker_cli.c):
 * what a GPU worker's steps take beyond the weights, found by running them.
 *
 * After the weights are loaded, ifd_kvprobe_warmup runs on a scratch KV cache
 * (a few blocks per layer, allocated on the model's backend, freed before it
 * returns) the steps the serving engine can run at its largest, and reads the
 * device's free memory (the caller's `mem` callback: cudaMemGetInfo) between
 * them:
 *
 *  1. mixed prefill steps of n tokens in min(max_seqs, n - 1) sequences (one
 *     long run, the others one token each, a logits row each, sampled on the
 *     device where the backend can, and at n = max_batched_tokens up to
 *     IFD_ENGINE_PLP_ROWS prompt logprob rows of the run and up to
 *     spec_rows verification rows after them, downloaded: the most logits
 *     rows an engine step asks for) for n growing by 3/2 from 16 up to
 *     max_batched_tokens: every activation buffer, the logits rows, cuBLASLt's
 *     per-shape state and the backend's grown-out-of scratch, which it keeps
 *     (backend_cuda.c: a graph may still use it), retired the way the worst
 *     growth order retires it;
 *  2. decode steps of every batch bucket up to min(max_seqs,
 *     max_batched_tokens) sequences at max_ctx (one sequence at that
 *     context, the others at position 0), with graphs off: the block tables
 *     and the split-K workspace at the largest context; then one more at the
 *     largest batch whose every row asks for 20 raw logprobs of a row that a
 *     logit bias and a penalty change, with a history of min(max_ctx, V)
 *     distinct ids: the device sampler's per-row buffers at their largest
 *     (the raw copy is V floats a row, the penalties' id table 8 bytes an
 *     id; grammar masks, V/8 bytes a row, are left to the margin);
 *  3. decode steps of every batch bucket at every context bucket up to
 *     max_ctx with graphs on, each twice (recorded, replayed): every decode
 *     graph the worker can record (model.c: one per batch bucket and context
 *     bucket, the context buckets being powers of two from 256).
 *
 * A model whose sliding-window layers the daemon keeps in a pool of their
 * own (ifd_kvpool_model_params_split) gets local block tables in every step
 * (the same ids as the global ones), as the serving worker's steps have:
 * the buffers for them and graphs recorded with them are what is measured.
 *
 * Speculative decoding (engine.h): a request may turn it on on any daemon
 * (`"speculative": true`), and a step then carries up to
 * IFD_ENGINE_SPEC_ROWS verification rows beside its sample and prompt
 * logprob rows (downloaded: the host samples them). spec_rows asks step 1's
 * largest prefill to bring them (the worker's POOL step and --kv-probe
 * pass IFD_ENGINE_SPEC_ROWS): without them the first such step grows the
 * logits buffers (the model's rows round up to a power of two) out of
 * memory the pool was given.
 *
 * A draft model's warm-up (params.draft, ifd_kvprobe_draft_params) skips
 * step 2's sampling step (its rows are downloaded) and records step 3's
 * graphs in the draft's set of graph keys (model.h,
 * ifd_model_set_graph_set: 1, as spec_draft.c's steps replay them, up to
 * its bucket of min(max_seqs, IFD_ENGINE_SPEC_ROWS) sequences); its
 * largest prefill has one row per sequence (no
 * prompt logprob nor verification rows: a draft's forward asks for one
 * row per proposing sequence, at most min(max_seqs, IFD_ENGINE_SPEC_ROWS)).
 *
 * activation_bytes is what 1 and 2 took, graph_bytes what 3 took (both as
 * the device's free memory fell, so the CUDA runtime's own allocations —
 * lazily loaded kernels, cuBLASLt's state, graph memory — count with
 * ours). What the warm-up does not run is left to ifd_kvsize_margin
 * (kvsize.h).
 *
 * The scratch KV's contents are garbage (positions far beyond what was
 * written read block 0 again): only the sizes matter; the logits are thrown
 * away. Cost: about 3 × max_batched_tokens prefill tokens, 2 decode steps
 * per (batch bucket, context bucket) pair and one per batch bucket, plus one (on the
 * CPU emulator, seconds for a tiny model: tests keep max_seqs and the
 * context small).
 *
 * Ownership: borrows the model for the call (its buffers stay grown, as the
 * serving worker's would). Threading: the model's thread.
 */
#ifndef IFD_KVPROBE_H
#define IFD_KVPROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/kvpool.h"
#include "model.h"

typedef struct {
    int max_batched_tokens; /* tokens in one engine step, >= 1 */
    int max_seqs;           /* sequences in one step, >= 1 */
    int max_ctx;            /* the longest context a sequence reaches, >= 1 */
    int block_size;         /* the pool's tokens per block */
    ifd_kv_dtype_t kv_dtype;
    /* a draft model's steps (spec_draft.h): every logits row downloaded
     * (no device sampling, so no step 2b); step 3's graphs in the draft's
     * set (model.h, ifd_model_set_graph_set) */
    bool draft;
    /* verification rows a step may carry (speculative decoding, above):
     * IFD_ENGINE_SPEC_ROWS for a serving worker; at most
     * IFD_SPEC_MAX_TOKENS x max_seqs count; 0: none; a draft's: none */
    int spec_rows;
    /* the router's max_logprobs (-1: the vocabulary; 0: OpenAI's 20): past
     * IFD_SAMPLER_INLINE_LOGPROBS, step 2c asks min(it, vocabulary)
     * alternatives of every row of the largest prefill (its sampled rows
     * and its prompt-logprob rows), so that the device sampler's download
     * buffer (8 bytes an alternative) is grown before the memory is read;
     * none in a draft's warm-up */
    int64_t max_logprobs;
} ifd_kvprobe_params_t;

/* The device's free memory now, in *free_bytes. 0, or an error code. */
typedef int (*ifd_kvprobe_mem_cb)(void *ctx, uint64_t *free_bytes);

typedef struct {
    uint64_t free_before;      /* free memory after the weights (before the scratch KV) */
    uint64_t free_after;       /* free memory after the warm-up, the scratch KV freed */
    uint64_t activation_bytes; /* steps 1 and 2 */
    uint64_t graph_bytes;      /* step 3 */
    uint64_t kv_scratch_bytes; /* the scratch KV cache (not counted in either) */
    int n_graphs;              /* graphs step 3 recorded */
    int prefill_steps, decode_steps;
} ifd_kvprobe_result_t;

/* Runs the warm-up on m's backend. 0 with *out filled, or the first failing
 * step's error with a one-line reason in err ("a warm-up step of 256 tokens
 * failed: out of memory"). */
int ifd_kvprobe_warmup(ifd_model_t *m, const ifd_kvprobe_params_t *p, ifd_kvprobe_mem_cb mem,
                       void *mem_ctx, ifd_kvprobe_result_t *out, char *err, size_t errlen);

/* The whole sizing (`inferd-worker --kv-probe`, and the POOL step of a
 * GPU worker's start, serve.c): the warm-up above, then the KV blocks that
 * fit in fraction × total − (total − free after the warm-up) − margin
 * (kvsize.h), each block holding every layer's K and V in p->kv_dtype.
 * Both callers share it, so the probe's JSON and the worker's POOL_SIZE
 * give the same count for the same inputs. */
/* With a draft model (speculative decoding, worker/spec_draft.h: loaded
 * beside the model, its weights already in the free memory measured), its
 * warm-up follows the model's, at the draft's limits
 * (ifd_kvprobe_draft_params: steps of max(max_batched_tokens,
 * IFD_ENGINE_SPEC_ROWS) tokens in up to min(max_seqs, IFD_ENGINE_SPEC_ROWS)
 * sequences (one logits row per speculating sequence), its decode graphs
 * recorded), so its activations and graphs count too (the margin grows
 * with both models' graph bytes); and since the draft's private pool
 * has the target pool's block count, every block costs the model's block
 * plus the draft's: n_blocks = what fits of both, and usable_bytes the
 * model's share (what is left for the model's pools once the draft's
 * n_blocks blocks are set aside: the router splits it as before). */
typedef struct {
    ifd_kvprobe_params_t warm;
    double fraction;      /* gpu_memory_fraction, (0, 1] */
    uint64_t total_bytes; /* the device's memory (cudaMemGetInfo's total) */
    ifd_model_t *draft;   /* the draft model on the same device, or NULL */
} ifd_kvprobe_size_params_t;

/* The draft's warm-up limits for the model's (see above). */
ifd_kvprobe_params_t ifd_kvprobe_draft_params(const ifd_kvprobe_params_t *model);

typedef struct {
    ifd_kvprobe_result_t warm;
    uint64_t total_bytes, free_bytes; /* free_bytes: warm.free_after */
    uint64_t weight_bytes;            /* ifd_model_weight_bytes */
    uint64_t margin_bytes;            /* ifd_kvsize_margin of the measured bytes */
    uint64_t block_bytes;             /* one block of every layer, K and V */
    uint64_t usable_bytes;            /* fraction × total − in use − margin, or 0 */
    int64_t n_blocks;                 /* usable_bytes / block_bytes */
    /* the draft's (0 without one): its warm-up, weights and block; then
     * usable_bytes is the model's share, n_blocks of both */
    ifd_kvprobe_result_t draft_warm;
    uint64_t draft_weight_bytes, draft_block_bytes;
} ifd_kvprobe_size_t;

/* 0 with *out filled and n_blocks >= 1; the warm-up's error; or IFD_ENOMEM
 * when no block fits, with err saying what took the memory ("no KV block
 * fits: 0.90 of 1024 MiB minus ...", naming the draft's part with one;
 * the draft's warm-up failing: its error, the line starting "the draft
 * model's warm-up"). *out is filled as far as it got
 * (also on IFD_ENOMEM, for the probe's JSON). */
int ifd_kvprobe_size(ifd_model_t *m, const ifd_kvprobe_size_params_t *p, ifd_kvprobe_mem_cb mem,
                     void *mem_ctx, ifd_kvprobe_size_t *out, char *err, size_t errlen);

#endif
