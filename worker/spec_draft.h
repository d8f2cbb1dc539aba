/*
 * spec_draft.h — the draft-model proposer of speculative decoding
 * (docs/speculative.md, `--spec draft --draft-model PATH`): a second, smaller
 * model with the target's tokenizer proposes k tokens by k greedy steps, for
 * all the step's speculating sequences in one batch; the engine verifies
 * them as it verifies n-gram proposals (a deterministic proposal: the
 * one-hot rule, so the text is plain decoding's).
 *
 * The draft keeps its own KV in a pool of its own geometry (the draft
 * model's layers and heads), private to the worker (created here, never
 * shared with the router: after a worker crash the draft recomputes its
 * KV from the tokens, which costs a prefill of the draft and changes no
 * token): host memory on a host-memory backend (the CPU), else a device
 * segment made by the draft's backend's provider (the CUDA backend: the
 * target's backend object, so both models share its stream and scratch,
 * and run one after the other), whose fd the pool keeps to itself. Per
 * sequence it holds a block table and the tokens whose KV it has
 * computed; each proposal first brings that KV in step with the
 * sequence's tokens: the longest common prefix stays (the accepted
 * proposals), positions past it are rolled back (rejected ones), and the
 * tokens the draft has not seen are fed (the prompt, the target's
 * corrected token and what arrived while the sequence did not speculate),
 * in forwards of at most max(max_batched_tokens, 64) tokens and at most
 * step_tokens a call, all queries together, in query order. The engine
 * also sends, each step, a feed query (k 0) for every prefilling sequence
 * that will speculate with the draft, its tokens up to the end of the
 * target's prefill chunk of that step: the draft's prompt prefill is
 * spread over the target's prefill steps instead of landing on the first
 * proposal. A proposal whose catch-up the budget leaves unfinished
 * proposes nothing this call and is fed on in the next ones (lagging).
 * A sequence whose proposal the draft's pool cannot
 * hold proposes nothing this step (its KV is given back; it starts again
 * later). Preemption and the end of a sequence release its state
 * (ifd_spec_drafter_t.release).
 *
 * Prefix reuse: the draft's full blocks of a sequence's own tokens (never
 * a block holding an unverified proposal) are published in its pool's
 * prefix index (the chained hash of the token ids, salt 0: the draft's KV
 * depends on the ids alone), and a state with no KV (a sequence's first
 * proposal, or after its release: preemption, no room) starts from the
 * longest published run of its tokens, so a repeated prompt's catch-up
 * feeds only the tail it does not share. Released published blocks stay
 * cached in the draft's pool until an allocation needs their room.
 *
 * Tiers (params disk_dir, host_blocks; docs/speculative.md, "The draft's
 * tiers"): every block the draft publishes anew is offered to a disk tier
 * of the draft's own (kvpool/kvdisk.h: written by its thread, never waited
 * for; a device pool's through a copy to host memory ("Copies" below), which
 * also goes into a host-RAM tier of the draft's own, kvpool/kvhost.h,
 * with host_blocks), whose files
 * carry a fingerprint of the draft pool's geometry, the word "draft" and
 * the caller's disk_identity (the draft model file and the settings that
 * change its K/V): a target's tier (whose identity never starts with it)
 * never reads a draft's file, nor a draft another draft's. A state with no
 * KV kept asks the host tier, then the disk tier, for the blocks past the
 * pool's hit and reads them into fresh blocks (a device pool's uploaded),
 * published as computed ones, before it feeds the rest:
 * after a worker restart (a new proposer, an empty pool) a repeated
 * prompt's catch-up is its unshared tail, as with a warm pool. The read is
 * waited for inside the call (the draft has no admission queue to hide it
 * behind), at most what feeding those tokens would take (disk_ms_per_token,
 * or the draft's measured catch-up rate); what is not read by then is fed.
 *
 * Copies. A device pool's tier copies are asynchronous where the draft's
 * adapter has the ops (engine.h: kv_download_async, kv_upload_async, ...;
 * the CUDA backend's copy stream), through a ring of copy_slots pinned
 * host slots of the proposer's own, made at the first copy, as the
 * engine's ring is (docs/kvpool.md, "Host tier"): a block published anew
 * is pinned (one pool reference) and its download enqueued into a slot;
 * the copies that landed are handed to the host and disk tiers at the
 * start of every call, the oldest waited for when every slot is in flight,
 * all of them before an allocation that found no block gives up (pins may
 * hold the room) and at destroy. A tier hit's data is copied into a slot
 * and its upload enqueued; the first forward after it waits (on the
 * device, kv_copy_wait) for the newest upload's fence. Without the ops, or
 * with copy_slots < 0: the synchronous kv_download / kv_upload.
 *
 * On a device with graphs (CUDA) the draft's one-token-per-sequence steps
 * (its greedy steps, a catch-up of one token a proposing sequence) replay
 * decode graphs as the target's do, in the model's graph set 1
 * (model.h, ifd_model_set_graph_set: the target's are set 0; the call
 * sets 1 around each forward and 0 after it, so a model drafting for
 * itself keeps its own steps in 0); each forward numbers its sequences
 * 0, 1, ... (the model graphs only such steps). The POOL step counts its
 * weights, activations, graphs and pool before sizing the target's
 * (worker/kvprobe.h).
 *
 * Ownership: the draft model is borrowed (it must outlive the proposer);
 * the pool, the tiers and the per-sequence states are the proposer's
 * (params' strings are not kept). Threading: one thread (the engine's);
 * the disk tier does its I/O on a thread of its own (kvdisk.h).
 */
#ifndef IFD_SPEC_DRAFT_H
#define IFD_SPEC_DRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/kvpool.h"
#include "model.h"
#include "spec.h"
#include "tokenizer/tokenizer.h"

typedef struct ifd_spec_draft ifd_spec_draft_t;

typedef struct {
    int32_t n_vocab;        /* the target's: proposed ids stay below it */
    int max_batched_tokens; /* draft tokens per forward at most (catch-up chunks); >= 1 */
    int64_t n_blocks;       /* the draft pool's blocks (> 0) */
    int block_size;         /* tokens per block (the target pool's) */
    ifd_kv_dtype_t dtype;   /* the draft pool's K/V type */
    /* catch-up tokens one call feeds at most, all its queries together
     * (the draft's share of an engine step: the engine calls once a step);
     * 0: max_batched_tokens. >= 0 */
    int step_tokens;
    /* The disk tier (above): a directory (created when missing; NULL or "":
     * none), its size bound (> 0 with a dir), the identity string of the
     * draft's K/V (NULL: ""), and a read's deadline per token (0: the
     * draft's measured catch-up ms per token, IFD_ENGINE_DISK_MS_PER_TOKEN
     * before one was measured). A tier that cannot start is one warning
     * and the proposer runs without it. */
    const char *disk_dir;
    uint64_t disk_bytes;
    const char *disk_identity;
    double disk_ms_per_token;
    /* A device pool's host-RAM tier (above): its bound in blocks (of the
     * draft's); 0: none. Ignored for a host-memory pool. */
    int64_t host_blocks;
    /* A device pool's tier copies ("Copies" above): slots of the ring of
     * pinned host memory (one draft block's data each) for asynchronous
     * copies, the engine's copy_slots (kv_cache_pin_slots); 0:
     * IFD_ENGINE_COPY_SLOTS; < 0: no ring, synchronous copies. Above
     * IFD_ENGINE_COPY_SLOTS_MAX: IFD_EINVAL. */
    int copy_slots;
    /* Tests only: a tier hit's asynchronous upload is not waited for before
     * the draft's next forward (the missing fence wait a test must catch). */
    bool skip_copy_wait_test;
} ifd_spec_draft_params_t;

/* A proposer over `draft` and a new private pool of p->n_blocks blocks (host
 * memory, or device memory from the draft's backend's kv_provider). 0;
 * IFD_EINVAL (bad params); IFD_ENOTSUP (a backend with neither, or a K/V
 * type its kernels do not read: q4_0 on CUDA); the pool's and the
 * segment's errors (IFD_ENOMEM: the device is full); IFD_ENOMEM. A
 * one-line reason in err. */
int ifd_spec_draft_create(ifd_spec_draft_t **out, ifd_model_t *draft,
                          const ifd_spec_draft_params_t *p, char *err, size_t errlen);
/* Releases the pool and every state left. NULL is a no-op. Destroy the
 * engine using it first. */
void ifd_spec_draft_destroy(ifd_spec_draft_t *d);

/* The engine's interface over d (engine params `drafter`). */
ifd_spec_drafter_t ifd_spec_draft_drafter(ifd_spec_draft_t *d);

/* Proposes for q[0..n) (ifd_spec_drafter_t.propose's contract). */
int ifd_spec_draft_propose(ifd_spec_draft_t *d, ifd_spec_draft_query_t *q, int n);

/* The fingerprint of the draft's disk tier over `pool` (its geometry) and
 * `identity` (NULL: ""; its first 8,000 bytes count): ifd_kvdisk_fingerprint
 * of "draft|" + identity, so never a target tier's (kvdisk.h). Pure. */
uint64_t ifd_spec_draft_disk_fingerprint(const ifd_kvpool_t *pool, const char *identity);

/* Waits for the tier copies in flight ("Copies" above) and hands them to
 * the tiers (their pins back): what the engine does when a step leaves it
 * idle, so that a request's blocks are in the tiers once it is done. The
 * worker calls it then; tests before reading the tiers' counters. */
void ifd_spec_draft_flush(ifd_spec_draft_t *d);

/* Whether d has a disk tier (params disk_dir, started), a host tier
 * (params host_blocks, a device pool). */
bool ifd_spec_draft_has_disk(const ifd_spec_draft_t *d);
bool ifd_spec_draft_has_host(const ifd_spec_draft_t *d);

/* Counters: draft forward passes and the tokens they fed (catch-up and
 * draft steps), the positions rolled back (draft KV past what the target
 * kept: rejected proposals), the tokens whose KV a state took from the
 * prefix index instead of feeding them (prefix_hit_tokens) and the blocks
 * it published there, the blocks the states hold now; of the catch-up,
 * the tokens fed by feed queries (k 0: the target's prefill, feed_tokens)
 * and the most one call fed (max_call_catchup, <= step_tokens), and the
 * proposals a call skipped because the budget left their catch-up
 * unfinished (lagging); with the tiers, the blocks offered to each
 * (disk_offered, host_offered: a ring's copies once landed) and the tokens a state read back from
 * each instead of feeding them (disk_hit_tokens, host_hit_tokens; not in prefix_hit_tokens), for
 * tests and logs. */
typedef struct {
    uint64_t forwards, tokens, catchup_tokens, no_room, rolled_back;
    uint64_t prefix_hit_tokens, published;
    int64_t blocks_held;
    uint64_t feed_tokens, max_call_catchup, lagging;
    uint64_t disk_offered, disk_hit_tokens, host_offered, host_hit_tokens;
    /* a device pool's copies through the ring ("Copies" above): downloads of
     * published blocks and uploads of tier hits enqueued, and the forwards
     * that waited for uploads (kv_copy_wait) */
    uint64_t async_downloads, async_uploads, upload_waits;
} ifd_spec_draft_stats_t;
void ifd_spec_draft_stats(const ifd_spec_draft_t *d, ifd_spec_draft_stats_t *out);

/* The draft's private pool (borrowed: d's), for tests (ifd_kvpool_check,
 * ifd_kvpool_probe of what was published) and stats. Not to be changed. */
ifd_kvpool_t *ifd_spec_draft_pool(const ifd_spec_draft_t *d);

/* 0 when the draft's tokenizer is the target's (the same vocabulary size,
 * every token's text and type, the BOS/EOS/EOT/UNK/PAD ids and the
 * end-of-generation ids); else IFD_EMISMATCH with the first difference in
 * err. Any thread. */
int ifd_spec_draft_check_tokenizers(const ifd_tokenizer_t *target, const ifd_tokenizer_t *draft,
                                    char *err, size_t errlen);

#endif
