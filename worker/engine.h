/*
 * engine.h — the worker's serving engine: iteration-level scheduling with
 * continuous batching, chunked prefill, prefix reuse through the shared KV
 * pool, and preemption by recomputation (vLLM-style).
 *
 * Every ifd_engine_step builds one ragged batch under a token budget
 * (max_batched_tokens): first every running sequence (a decode token, or its
 * next prefill chunk), oldest first, then waiting requests in FCFS order
 * (higher priority first; between clients, see "Fairness") while the budget
 * and max_seqs allow. While any
 * sequence decodes, prefill tokens (chunks of running sequences and new
 * admissions together) are further capped (prefill_cap) so that decodes
 * keep a steady pace. At admission
 * the prefix cache is consulted and matched blocks are neither recomputed
 * nor re-allocated. When a running sequence needs a block and the pool has
 * none, the most recently admitted sequence (of the client running the most:
 * "Fairness") is preempted: its blocks are
 * released and it goes back to the front of the waiting queue, to be
 * recomputed later from its tokens (prompt + what it has generated). Full
 * blocks are published to the prefix cache as soon as their KV is computed.
 *
 * Fairness: every request names its client (ifd_engine_request_t.client).
 * A client's share is max_seqs over the clients with work (a running or
 * waiting request). Admission takes the highest priority first, then the
 * client running the fewest sequences, then FCFS. When a sequence needs a
 * block and the pool has none, the victim is the most recently admitted
 * sequence of the client running the most (it may have been scheduled in
 * this step already: it leaves the step). Before each step, when the engine
 * is full (max_seqs running, or the last admission found no blocks for a
 * client below its share) and the request admission takes next is of a
 * client below its share, the most recently admitted sequence of the client
 * running the most (at least two more; priority no higher than the
 * request's) is preempted for it, one per step. So one client's n: 128
 * cannot keep another's request waiting for a whole generation, nor evict
 * its stream again and again. With one client (every request of the same
 * client, as in every test before clients) each rule is the one above.
 *
 * The model is reached through ifd_engine_model_t (the real model with its
 * KV views, or a fake one in tests). Results leave through callbacks called
 * from inside ifd_engine_step: one token event per sampled token, one finish
 * event per request (after which the engine forgets it).
 *
 * Ownership: requests are copied on ifd_engine_add. The pool and the model
 * adapter are borrowed and must outlive the engine. Threading: one thread
 * (the worker's engine loop) calls everything.
 */
#ifndef IFD_ENGINE_H
#define IFD_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvpool/kvdisk.h"
#include "kvpool/kvhost.h"
#include "kvpool/kvpool.h"
#include "model.h"
#include "proto/wire.h"
#include "spec.h"
#include "sampler.h"

typedef struct ifd_engine ifd_engine_t;

/* What the engine needs from a model. forward has ifd_model_forward's
 * contract; block tables hold LOCAL block ids of the engine's device.
 * forward_sample (optional, NULL = sample every row on the host) has
 * ifd_model_forward_sample's: the engine hands it every sampled row
 * (grammar masks and logprobs included; params NULL only for a grammar row
 * under min_tokens, which the host samples twice when needed) and its
 * prompt-logprob rows as scoring rows, and samples or scores every row the
 * model returns as IFD_MODEL_SAMPLE_ON_HOST itself. */
typedef struct {
    void *ctx;
    int32_t n_vocab;
    int32_t n_ctx; /* context length limit (prompt + generated) */
    int (*forward)(void *ctx, const ifd_batch_t *b, float *logits);
    /* Sliding-window (local) layers: how many, and the tokens each sees
     * (i - j < window). 0: none. */
    int32_t n_local_layers;
    int32_t sliding_window;
    int (*forward_sample)(void *ctx, const ifd_batch_t *b, const ifd_sample_row_t *rows,
                          int32_t *tokens, float *logits);
    /* Layers in all (0: unknown). When every layer is local (n_local_layers
     * == n_layers, Mistral's window on all layers) and there is no
     * local_pool, the engine releases a sequence's blocks wholly before its
     * next query's window back to the one pool: no layer reads them again.
     * Their block-table entries then read as block 0, which the attention
     * kernels never read (they start at, or zero-fill below, the window). */
    int32_t n_layers;
    /* Width of the model's input embeddings (ifd_batch_t.embd): what an
     * image's rows hold; 0: the model takes no image (requests with images
     * are refused). */
    int32_t n_embd;
    /* The host-RAM tier's copies (kvpool/kvhost.h): block `block`'s (a
     * local id) data — every layer of the pool's K then V block, then with
     * a local-layer pool (local_pool) every layer of it of the block's twin
     * `lblock` (a local id of the local pool; ignored, pass -1, without
     * one), kv_data_bytes in all: the disk tier's file layout — to or from
     * host memory, ordered after the steps before (download waits for
     * them; upload is complete when it returns). NULL when the pool is
     * host memory (a CPU worker): no host tier, and the disk tier reads
     * and writes the pool in place. 0 or a negative error. */
    int (*kv_download)(void *ctx, int32_t block, int32_t lblock, void *dst);
    int (*kv_upload)(void *ctx, int32_t block, int32_t lblock, const void *src);
    size_t kv_data_bytes;
    /* Optional (NULL: kv_download, synchronous, at publish): the same
     * download overlapping the steps. kv_download_async enqueues it into
     * dst — memory of kv_host_alloc (pinned; freed with kv_host_free) —
     * after the steps before, returns at once with a ticket in *ticket;
     * kv_copy_done says whether it has landed (1), not yet (0; wait: blocks
     * until it has) or an error. Until it says 1 the engine neither reads
     * dst nor lets the blocks be written: it keeps a pool reference on the
     * block and its twin (docs/kvpool.md, "Host tier"). */
    int (*kv_download_async)(void *ctx, int32_t block, int32_t lblock, void *dst,
                             uint64_t *ticket);
    int (*kv_copy_done)(void *ctx, uint64_t ticket, bool wait);
    void *(*kv_host_alloc)(void *ctx, size_t bytes);
    void (*kv_host_free)(void *ctx, void *p);
    /* Optional, with the above (NULL: kv_upload, synchronous): a tier hit's
     * upload overlapping the host's work. kv_upload_async enqueues src
     * (kv_host_alloc memory, not to be written until kv_copy_done says 1)
     * into the blocks and returns at once with a ticket; kv_copy_wait makes
     * the model's next forwards wait (on the device) for that ticket's
     * copies: the engine calls it before the first forward that may read
     * the blocks (docs/kvpool.md, "Host tier"). */
    int (*kv_upload_async)(void *ctx, int32_t block, int32_t lblock, const void *src,
                           uint64_t *ticket);
    int (*kv_copy_wait)(void *ctx, uint64_t ticket);
} ifd_engine_model_t;

typedef enum {
    IFD_FINISH_STOP = 0,   /* a stop token */
    IFD_FINISH_LENGTH,     /* max_tokens, or the context limit */
    IFD_FINISH_CANCELLED,  /* ifd_engine_cancel */
    IFD_FINISH_ERROR,      /* the request could not be served (named in the log) */
} ifd_finish_reason_t;

typedef struct {
    int32_t prompt_tokens;
    int32_t completion_tokens; /* generated, including tokens passed as already generated */
    int32_t cached_tokens;     /* prompt tokens served from the prefix cache (first admission) */
    /* IFD_FINISH_ERROR: why, when known (IFD_ETOOBIG: its grammar's next
     * step is over the mask budget, grammar_mask.h); 0 otherwise */
    int error;
} ifd_engine_usage_t;

typedef struct {
    void *ctx;
    /* a sampled token; res carries logprobs when the request asked for them */
    void (*on_token)(void *ctx, uint64_t id, const ifd_sample_result_t *res);
    void (*on_finish)(void *ctx, uint64_t id, ifd_finish_reason_t reason,
                      const ifd_engine_usage_t *usage);
    /* Prompt logprobs (requests with prompt_logprobs; may be NULL): res[i]
     * is the prompt token at position pos + i (res[i].token) with its raw
     * logprob, rank and top alternatives, from the logits of position
     * pos + i - 1. Every position 1 .. n_prompt - 1 comes exactly once, in
     * order, in one or more calls (one per prefill chunk), all before the
     * request's first on_token. res lives for the call. */
    void (*on_prompt_logprobs)(void *ctx, uint64_t id, int32_t pos, const ifd_sample_result_t *res,
                               int32_t n);
} ifd_engine_callbacks_t;

/* Prompt-logprob rows per step at most (all requests together): a prefill
 * chunk of a request that owes prompt logprobs is cut to what is left, so
 * that the logits kept per step stay bounded (max_seqs + this many rows). */
#define IFD_ENGINE_PLP_ROWS 64

/* The adaptive prefill cap (prefill_cap 0). With a step cost affine in its
 * tokens (weights read once, then per-token work), a step of at most RATIO x
 * the mean tokens of decoding steps takes at most RATIO x their mean time:
 * the p99 inter-token latency stays within RATIO x its mean, and in steady
 * state the cap ((RATIO - 1) x decodes + RATIO x the mean prefill per step)
 * always exceeds the prefill the stream of new requests brings. The floor
 * keeps prefill moving when the mean is small (a few decodes). */
#define IFD_ENGINE_STEP_RATIO 1.5
#define IFD_ENGINE_PREFILL_FLOOR 32
#define IFD_ENGINE_STEP_EMA 64 /* steps: weight 1/64 per new step in the mean */
/* A disk read's deadline per token before any prefill was measured: well
 * under a CPU prefill (SmolLM2-135M: ~10 ms a token on the loaded 2-core
 * machine) and well over a read from the page cache (~0.05 ms a token;
 * docs/kvpool.md, "Disk tier"). */
#define IFD_ENGINE_DISK_MS_PER_TOKEN 0.5

/* Speculative decoding (docs/speculative.md). A decoding sequence with
 * speculation on gets up to k proposed tokens from the n-gram proposer
 * (worker/ngram.h) or the draft model (params.drafter, proposing for all
 * the step's speculating sequences in one batch; how many: worker/spec.h,
 * cut per step by the verification budget, spec_knee below)
 * and contributes k + 1 query rows to the step, each with
 * its logits; row i is sampled exactly as plain decoding would sample the
 * token at its position (same processed logits, same counter-based draw),
 * and the proposal's token i is accepted when it equals that sample. For a
 * deterministic proposal this is the standard rejection rule (accept x
 * with probability p(x); on rejection a draw from p without x,
 * renormalized), and the emitted tokens are the very tokens plain decoding
 * emits: greedy or seeded, speculation changes the speed, never the text
 * (given the backend's batch invariance). Accepted tokens are emitted one
 * event each; the KV of rejected positions is dropped (the sequence's
 * computed length, blocks past it released, nothing of it published).
 * With device sampling (forward_sample) a verification's rows come back as
 * logits and are sampled on the host (bit for bit the device's draw).
 * Requests without the KV cache decode plainly. */
/* ifd_engine_params_t.copy_slots' default and bound (the CUDA backend's ring
 * of 64 copy fences: more copies in flight would only wait there) */
#define IFD_ENGINE_COPY_SLOTS 32
#define IFD_ENGINE_COPY_SLOTS_MAX 64
#define IFD_ENGINE_SPEC_ROWS 64 /* proposed tokens per step at most (all sequences) */

typedef struct {
    /* End-of-generation ids of the model (copied): a request stops after one
     * unless it sets ignore_eos. May be NULL/0. */
    const int32_t *eos_ids;
    int32_t n_eos_ids;
    int max_batched_tokens; /* token budget per step (default 256) */
    /* Prefill tokens per step while running sequences decode, so that a new
     * prompt does not stall the streams already generating (their
     * inter-token latency): > 0 a fixed cap; 0 (default) adaptive: the step
     * may hold at most IFD_ENGINE_STEP_RATIO x the recent mean tokens of
     * decoding steps, and never less than the decodes + IFD_ENGINE_PREFILL_FLOOR;
     * < 0 no cap but max_batched_tokens. Steps without decodes always get the
     * whole budget. */
    int prefill_cap;
    /* The adaptive cap's ratio (a step holds at most step_ratio x the mean
     * tokens of decoding steps); 0: IFD_ENGINE_STEP_RATIO. For tuning
     * (bench_engine --step-ratio). */
    double step_ratio;
    int max_seqs;           /* running sequences at most (default 64) */
    int worker;             /* this worker's slot in the pool ledger (default 0) */
    int device;             /* the pool device this engine computes on (default 0) */
    /* The pool of the model's sliding-window (local) layers, or NULL (one
     * pool holds every layer: today's layout, and the only one for models
     * without local layers). Borrowed; same block size and worker slots as
     * the main pool, which then holds the other (global) layers only. A
     * sequence holds local blocks only from the first block its next query's
     * window reaches (the block holding n_computed - window + 1) on: after
     * each step the blocks before it return to this pool (published ones stay
     * cached there). Local blocks are published as keyed entries under their
     * global twins' keys (kvpool.h), and a prefix hit of k blocks needs only
     * the local blocks of the first recomputed token's window; where one is
     * missing the hit is cut below it (docs/models.md, "Gemma 3 local
     * layers"). The model
     * adapter must read local layers through ifd_batch_t.local_block_tables
     * (ifd_engine_model_from_pools). */
    ifd_kvpool_t *local_pool;
    /* The pool's disk tier (kvpool/kvdisk.h), or NULL: every block the engine
     * publishes is offered to it, and an admission whose prefix hit stops
     * short asks it for the blocks after the hit (docs/kvpool.md, "Disk
     * tier"): those found are read into fresh blocks by the tier's thread
     * while the steps go on without the sequence (admission passes it over
     * and admits the requests behind it), which is admitted once they
     * landed or at a deadline — the time recomputing them would take at the
     * measured prefill rate — with what landed by then. The tier's local
     * pool must be local_pool (kvdisk.h: each file holds the local twin),
     * else IFD_EINVAL. An engine whose every layer is local in
     * one pool ignores the tier. The tier outlives the engine. */
    ifd_kvdisk_t *disk;
    /* The host-RAM tier (kvpool/kvhost.h) of a worker whose pool is device
     * memory, or NULL; ignored unless the model adapter has kv_download /
     * kv_upload (data_bytes must be its kv_data_bytes, else IFD_EINVAL).
     * Every block the engine publishes is copied into it (device -> host,
     * at publish: as the disk tier, so that what a later eviction of the
     * pool drops is already there; asynchronously with the adapter's
     * kv_download_async — the block pinned until its copy landed, the
     * entry made then — else synchronously); an admission whose pool hit
     * stops short takes the blocks after the hit that the tier holds,
     * copies each into a fresh block (host -> device) and publishes it,
     * before asking the disk tier for the rest, whose blocks read (staged)
     * go into this tier too (docs/kvpool.md, "Host tier"). With local_pool
     * the copies hold the local twins. Borrowed: outlives the engine. */
    ifd_kvhost_t *host;
    /* Slots of the asynchronous copies' ring (kv_download_async): copies in
     * flight at most, each slot one block's kv_data_bytes of kv_host_alloc
     * (pinned) memory, all made on the first copy; with every slot in flight
     * the oldest copy is waited for. 0: IFD_ENGINE_COPY_SLOTS; < 0: no ring
     * (every copy synchronous, as without the adapter's asynchronous ops);
     * above IFD_ENGINE_COPY_SLOTS_MAX: IFD_EINVAL (the daemon's
     * kv_cache_pin_slots, docs/kvpool.md "Host tier"). */
    int copy_slots;
    /* Speculative decoding for requests that do not choose (method
     * IFD_SPEC_OFF by default; IFD_SPEC_DEFAULT reads as off). */
    ifd_spec_params_t spec;
    /* The verification budget (spec.h ifd_spec_budget, docs/speculative.md
     * "Verification budget"): the rows at which a step stops being bound by
     * reading the weights. Each step verifies only the proposed tokens
     * whose expected acceptance pays for their rows under the cost
     * knee + rows: all the likely ones at batch 1, few or none once the
     * step's rows pass the knee. Which proposals are verified changes,
     * never a token. 0 (the default): the backend's — IFD_SPEC_KNEE_GPU
     * for a model whose pool is device memory (its adapter has
     * kv_download), else IFD_SPEC_KNEE_CPU; < 0: no budget (every proposal
     * the adaptive k allows is verified). */
    double spec_knee;
    /* The draft model proposer (spec.h, worker/spec_draft.h) for method
     * IFD_SPEC_DRAFT, engine-wide or per request; propose NULL: none (a
     * request asking for it is refused, IFD_EINVAL). Borrowed: must outlive
     * the engine. Sequences' states are released through it at preemption
     * and at their end. */
    ifd_spec_drafter_t drafter;
    /* Tests only: a deliberately wrong acceptance rule — a rejected
     * proposal x is accepted anyway when a second, independent draw from
     * the row equals x (x then comes out with probability p + (1 - p)p,
     * the classic bug of not removing x before redrawing), so that the
     * statistical test can show it catches one. */
    bool spec_wrong_accept_test;
} ifd_engine_params_t;

ifd_engine_params_t ifd_engine_default_params(void);

/* One image of a request (Gemma 3; docs/vision.md): prompt positions
 * start .. start + len - 1 are its soft tokens (the placeholder id). Their
 * input embeddings are embd's rows (len x the model's n_embd floats, used as
 * they are: no embedding scale, as transformers), they attend to each other
 * both ways (ifd_batch_t.kv_last), a prefill chunk never splits them (so
 * len <= max_batched_tokens), and the prefix cache knows each by (token id,
 * hash, index): two images share cached KV only when their hashes are
 * equal. */
typedef struct {
    int32_t start, len;
    uint64_t hash[2];  /* the image's content hash (128 bits) */
    const float *embd; /* [len, n_embd] */
} ifd_engine_image_t;

typedef struct {
    uint64_t id;                 /* unique among live requests */
    const int32_t *prompt;       /* [n_prompt], n_prompt >= 1 */
    int32_t n_prompt;
    const int32_t *generated;    /* tokens already streamed (resumption), may be NULL */
    int32_t n_generated;
    ifd_sampling_params_t sampling; /* logit_bias is copied; the engine owns
                                       the constraint once the add succeeds */
    const int32_t *stop_ids;     /* end generation after one of these (even with ignore_eos) */
    int32_t n_stop_ids;
    int32_t max_tokens;          /* total generated tokens, including n_generated; >= 1 */
    bool ignore_eos;             /* do not stop at the engine's eos_ids */
    bool use_cache;              /* false: recompute the whole context every step */
    int32_t priority;            /* higher runs first; FCFS among equals */
    uint32_t client;             /* who sent it ("Fairness" above); only compared */
    uint64_t salt;               /* prefix-cache namespace (adapter, tenant) */
    /* vLLM's min_tokens: until this many tokens are generated (n_generated
     * included), eos_ids (unless ignore_eos) and stop_ids get a -inf logit
     * bias; 0 off. A grammar that allows only those tokens wins (the step
     * is sampled without the suppression rather than failing). */
    int32_t min_tokens;
    /* vLLM's prompt_logprobs: 0 off; 1 + k (k <= vocab): every prompt
     * token's logprob, rank and k top alternatives are reported
     * (on_prompt_logprobs); k past IFD_SAMPLER_INLINE_LOGPROBS is scored on
     * the host from the rows' logits (the device's top k stops there), in
     * engine-owned room of rows x k entries. The rows are computed, not taken from
     * the prefix cache: the lookup stops before the first position owed
     * (the blocks computed are still published). Batch-invariant: the other
     * rows of the step are unchanged (backend.h). */
    int32_t prompt_logprobs;
    /* vLLM's allowed_token_ids: every draw among these ids only (each in
     * [0, vocab), else IFD_EINVAL); NULL / 0: no restriction. Copied (as
     * the sampler's bitmask, ifd_sampling_params_t.allowed). With
     * min_tokens, a set of only stop and EOS ids wins as a grammar does. */
    const int32_t *allowed_ids;
    uint32_t n_allowed_ids;
    /* vLLM's logprob_token_ids: with sampling.n_logprobs >= 0, each token's
     * "top" logprobs are these ids' (<= IFD_SAMPLER_MAX_LP_IDS, each in
     * [0, vocab), else IFD_EINVAL); copied. Sampled on the host (the device
     * sampler returns top k only). */
    const int32_t *lp_ids;
    uint32_t n_lp_ids;
    /* Speculative decoding: method IFD_SPEC_DEFAULT (zeroed) follows the
     * engine; IFD_SPEC_OFF turns it off; IFD_SPEC_NGRAM or IFD_SPEC_DRAFT
     * (only with a drafter, else IFD_EINVAL) turn it on, with the engine's
     * k and n-gram bounds where a field is 0. */
    ifd_spec_params_t spec;
    /* Images in the prompt, in position order, disjoint, each inside the
     * prompt with 1 <= len <= max_batched_tokens (else IFD_EINVAL, as for a
     * model with n_embd 0 or a request with prompt_logprobs); copied, rows
     * included. */
    const ifd_engine_image_t *images;
    int32_t n_images;
} ifd_engine_request_t;

int ifd_engine_create(ifd_engine_t **out, const ifd_engine_params_t *p,
                      const ifd_engine_model_t *model, ifd_kvpool_t *pool,
                      const ifd_engine_callbacks_t *cb);
/* Releases every block the engine still holds. NULL is a no-op. */
void ifd_engine_destroy(ifd_engine_t *e);

/* Queues a request. 0; IFD_EINVAL (bad request: empty prompt, bad sampling
 * or speculation parameters, a prompt longer than the context); IFD_EEXIST (duplicate id);
 * IFD_ENOMEM. A request that cannot fit the pool even alone finishes with
 * IFD_FINISH_ERROR at its first scheduling. */
int ifd_engine_add(ifd_engine_t *e, const ifd_engine_request_t *r);
/* ifd_engine_add's checks of r alone (no id, no memory): 0, or IFD_EINVAL
 * with the first broken rule, for the client, in why (n bytes; why may be
 * NULL), e.g. an image longer than max_batched_tokens. */
int ifd_engine_check(const ifd_engine_t *e, const ifd_engine_request_t *r, char *why, size_t n);

/* Cancels a queued or running request: it finishes with
 * IFD_FINISH_CANCELLED at the start of the next step (its blocks return to
 * the pool then). 0 or IFD_ENOTFOUND. */
int ifd_engine_cancel(ifd_engine_t *e, uint64_t id);

typedef struct {
    int n_seqs;         /* sequences in the batch */
    int n_tokens;       /* tokens in the batch */
    int n_prefill_tokens;
    int n_decode_tokens;
    int n_preempted;    /* preemptions during scheduling */
    double schedule_ms, forward_ms, sample_ms;
} ifd_engine_step_stats_t;

/* Runs one step (schedule, forward, sample, finish). Returns the number of
 * sequences that ran (0 when idle), or a negative error (the model failed:
 * every request in the batch is finished with IFD_FINISH_ERROR). */
int ifd_engine_step(ifd_engine_t *e, ifd_engine_step_stats_t *st);

/* No request queued or running, and no copy to the tiers in flight (a
 * step with nothing to run waits for those: engine.h, kv_download_async). */
bool ifd_engine_idle(const ifd_engine_t *e);

typedef struct {
    int32_t running;
    int32_t waiting;
    uint64_t steps;
    uint64_t tokens;          /* batched tokens over all steps */
    /* steps by batched tokens, in IFD_WIRE_STEP_TOKEN_BOUNDS' buckets (vLLM's
     * vllm:iteration_tokens_total; the STATS frame carries them) */
    uint64_t step_tokens[IFD_WIRE_STEP_BUCKETS];
    uint64_t prefill_tokens;
    uint64_t decode_tokens;
    uint64_t cached_prompt_tokens; /* prompt tokens skipped thanks to the prefix cache */
    uint64_t prompt_tokens;        /* prompt tokens admitted */
    uint64_t preemptions;
    uint64_t finished;
    int64_t blocks_held;      /* blocks this engine holds now */
    /* One pool (no local_pool): of those, the blocks wholly before the window
     * of every running sequence holding them: no local layer reads their K/V
     * again, but a block spans all layers, so that K/V stays allocated;
     * window_dead_bytes (blocks x local layers x K and V) is what per-layer
     * release would free. 0 without local layers or with a local pool (and
     * on out-of-memory: it is a lower bound). */
    int64_t window_dead_blocks;
    uint64_t window_dead_bytes;
    /* With a local pool: held blocks whose local-layer twin no running holder
     * holds any more (released to the local pool), and that K/V's bytes:
     * the memory the local pool saves over one pool of every layer. With one
     * pool and every layer local: blocks running sequences released (before
     * their windows; a block shared through the prefix cache counts once
     * every running holder released it), and their bytes (every layer's K
     * and V); window_dead_* are then 0. 0 otherwise. local_blocks_held:
     * local-pool blocks held now (summed over sequences, as blocks_held). */
    int64_t local_released_blocks;
    uint64_t local_released_bytes;
    int64_t local_blocks_held;
    double forward_ms, sample_ms, schedule_ms; /* totals */
    int32_t max_batched_tokens;
    double decode_step_tokens; /* recent mean tokens of steps with decodes (adaptive cap) */
    /* Speculative decoding (vLLM's spec_decode counters): verifications
     * with at least one proposed token, the tokens proposed, those
     * accepted, and per position i how many verifications accepted the
     * proposal's token i. */
    uint64_t spec_drafts;
    uint64_t spec_draft_tokens;
    uint64_t spec_accepted_tokens;
    uint64_t spec_accepted_per_pos[IFD_SPEC_MAX_TOKENS];
    /* tokens proposed (or wanted from the draft model) that the verification
     * budget left out (spec_knee, ifd_spec_budget) */
    uint64_t spec_budget_cut;
} ifd_engine_stats_t;

void ifd_engine_stats(const ifd_engine_t *e, ifd_engine_stats_t *out);

/* An engine model adapter over a loaded model and a pool device: fills the
 * per-layer KV views from the pool. When device dev's segment is device
 * memory (IFD_KVSEG_CUDA_*) not mapped in this process yet, it is bound
 * first through the model's backend (ops->kv_provider,
 * ifd_kvpool_bind_segment: imported when it exists — an fd from the router
 * or an IPC handle — else created; the caller then hands
 * ifd_kvpool_data_fd(pool, dev) to the router). IFD_EMISMATCH (geometry),
 * IFD_ENODEV (a backend that cannot map it), IFD_ENOTSUP (q4_0 K/V on a
 * backend without host memory: the CUDA kernels read f16, bf16, q8_0 and
 * fp8, ifd_kv_dtype_gpu), or the bind's error.
 * *out_ctx must be freed with ifd_engine_model_free. */
int ifd_engine_model_from(ifd_engine_model_t *out, ifd_model_t *m, ifd_kvpool_t *pool, int dev);
/* The same over two pools: `pool` holds the model's global layers and
 * `local_pool` its sliding-window ones (ifd_kvpool_model_params_split's
 * geometries, the same segment kind on device dev: both HOST, or both
 * device memory, each bound as ifd_engine_model_from says — so a GPU worker
 * hands the router both pools' data fds); local_pool NULL is
 * ifd_engine_model_from. The engine must then get the same local_pool in
 * its params. */
int ifd_engine_model_from_pools(ifd_engine_model_t *out, ifd_model_t *m, ifd_kvpool_t *pool,
                                ifd_kvpool_t *local_pool, int dev);
void ifd_engine_model_free(ifd_engine_model_t *em);

#endif
