/*
 * spec_draft.c — see spec_draft.h.
 *
 * Invariants per sequence state: tok[0..n_kv) are the tokens whose draft KV
 * sits at positions 0..n_kv in blocks[0..n_blocks) (block b holds positions
 * [b * block_size, (b + 1) * block_size)); blocks are the pool's global ids,
 * each with one reference of the state. blocks[0..n_pub) are published in
 * the pool's prefix index (read-only: shared with other states that found
 * them, cached once the last holder lets go); the rest are the state's own.
 * A call (ifd_spec_draft_propose) first grows blocks to cover every position
 * it will write, so the batch's block tables are built once per call.
 *
 * Prefix reuse. The draft's KV at position p is a function of the token ids
 * 0..p alone (the draft sees no image, adapter or salt; the CPU backend is
 * batch-invariant, and on another backend a different rounding only moves
 * proposals, never the verified text), so its blocks are keyed by the
 * chained hash of the tokens with salt 0, as the target's are. A block is
 * published at the end of a successful call once every position of it lies
 * below the state's KV and n_tokens - 1 (a feed's, k 0: n_tokens): those
 * tokens are the sequence's own (prompt and emitted output, never an
 * unverified proposal, which only ever sits at n_tokens and past), and a
 * later call keeps them all (its tokens extend these, so that a proposal's
 * n_tokens - 1 is at least a feed's n_tokens; the last one is always fed
 * again for its logits), so a published block is never written. A query whose tokens do
 * part below a published block (not the engine's: its tokens only grow
 * until the state is released) drops the blocks from that one on. A state
 * with no KV kept (its first proposal, or after a release) takes the
 * longest published run of its first n_tokens - 1 tokens before feeding the
 * rest.
 *
 * Disk tier. A block published anew (not a duplicate: its file exists) is
 * offered with its chain hash's parent (ifd_kvpool_hash_block over the
 * state's tokens, never the pool's own hash; dhash caches the chain over
 * blocks[0..dhash_n), dhash_n <= n_pub: published tokens never change). A
 * state taking the published run reads the blocks the tier has past it
 * into fresh blocks and publishes them as it goes (each one's parent is
 * the block before it, held and published), so its KV is a longer run of
 * published blocks, as if the pool had held them.
 */
#include "spec_draft.h"

#include "engine.h"
#include "error.h"
#include "kvpool/kvdisk.h"
#include "kvpool/kvhost.h"
#include "kvpool/kvparams.h"
#include "log.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int32_t *tok; /* [cap]: tok[p] the token whose KV is at position p, p < n_kv */
    int32_t n_kv, cap;
    int32_t *blocks;
    int32_t n_blocks, cap_blocks;
    int32_t n_pub;    /* blocks[0..n_pub) published (read-only) */
    bool publish_off; /* publishing failed once (logged): not tried again */
    ifd_kvhash_t dhash; /* the disk chain hash of blocks[0..dhash_n) (the file's comment) */
    int32_t dhash_n;    /* <= n_pub */
} ifd__dseq_t;

/* A tier copy in flight (spec_draft.h, "Copies"): a published block's
 * download (the block pinned by one pool reference until it landed; its
 * chain hash and its parent's, the tiers' key) or a tier hit's upload
 * (block -1: only its slot busy). */
typedef struct {
    ifd_kvhash_t hash, parent;
    int32_t block;
    uint64_t ticket;
} ifd__dcopy_t;

struct ifd_spec_draft {
    ifd_spec_draft_params_t p;
    ifd_kvpool_t *pool;
    ifd_model_t *model;    /* the draft model (borrowed) */
    ifd_engine_model_t em; /* the draft model over its pool */
    int max_tok;           /* tokens per draft forward */
    int step_tokens;       /* catch-up tokens per call (params' step_tokens) */
    /* batch buffers: max_tok tokens, IFD_ENGINE_SPEC_ROWS sequences and logits rows */
    int32_t *b_tokens, *b_pos, *b_seq, *b_rows, *b_tables;
    int32_t *c_tables; /* [b_tables_cap]: the tables of a forward's own sequences (ifd__run) */
    int64_t *b_slot;
    int b_tables_cap;
    int row_q[IFD_ENGINE_SPEC_ROWS]; /* the query of each logits row */
    float *logits;
    ifd_kvdisk_t *disk; /* the draft's disk tier, or NULL */
    ifd_kvhost_t *host; /* the draft's host-RAM tier (a device pool), or NULL */
    bool staged;        /* a device pool: the tiers through host copies (em.kv_download) */
    uint8_t *stage;     /* a block's host copy for the disk tier without a host entry */
    double ms_tok;      /* measured catch-up forward ms per token (0: none yet) */
    /* the tier copies in flight (spec_draft.h, "Copies"): a ring of
     * copy_slots, FIFO from copy_head, their blocks' tokens [copy_slots *
     * block_size] and pinned slots [copy_slots * kv_data_bytes]; made at the
     * first copy */
    ifd__dcopy_t *copies;
    int32_t *copy_tokens;
    uint8_t *copy_mem;
    int copy_slots, copy_head, copy_n;
    bool copies_off;    /* no ring (copy_slots < 0, or no memory): synchronous copies */
    bool up_wait;       /* uploads enqueued: the next forward waits for up_ticket */
    uint64_t up_ticket; /* the newest upload's fence */
    ifd_spec_draft_stats_t st;
};

uint64_t ifd_spec_draft_disk_fingerprint(const ifd_kvpool_t *pool, const char *identity)
{
    char id[8192]; /* an identity is a path and some settings: far less */
    int n = snprintf(id, sizeof id, "draft|%s", identity ? identity : "");
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof id)
        n = (int)sizeof id - 1;
    return ifd_kvdisk_fingerprint(pool, id, (size_t)n);
}

static void ifd__copies_poll(ifd_spec_draft_t *d, int wait);

void ifd_spec_draft_flush(ifd_spec_draft_t *d)
{
    ifd__copies_poll(d, INT_MAX);
}

bool ifd_spec_draft_has_disk(const ifd_spec_draft_t *d)
{
    return d->disk != NULL;
}

bool ifd_spec_draft_has_host(const ifd_spec_draft_t *d)
{
    return d->host != NULL;
}

/* The disk tier (spec_draft.h, "Tiers") over the draft's pool, staged for
 * a device pool; none (one warning) when it cannot start. */
static void ifd__disk_start(ifd_spec_draft_t *d)
{
    if (d->staged && !(d->stage = malloc(d->em.kv_data_bytes))) {
        IFD_WARN("draft: kv disk tier off: no memory for a block's copy");
        return;
    }
    ifd_kvdisk_params_t kp = ifd_kvdisk_default_params();
    kp.dir = d->p.disk_dir;
    kp.max_bytes = d->p.disk_bytes;
    kp.fingerprint = ifd_spec_draft_disk_fingerprint(d->pool, d->p.disk_identity);
    kp.worker = 0;
    kp.device = 0;
    kp.staged = d->staged;
    int rc = ifd_kvdisk_create(&kp, d->pool, &d->disk);
    if (rc) {
        d->disk = NULL;
        IFD_WARN("draft: kv disk tier off: %s: %s", d->p.disk_dir, ifd_strerror(rc));
        return;
    }
    IFD_INFO("draft: kv disk tier: %s, fingerprint %016llx", d->p.disk_dir,
             (unsigned long long)kp.fingerprint);
}

/* The host-RAM tier of a device pool (params host_blocks); none (one
 * warning) when it cannot start. */
static void ifd__host_start(ifd_spec_draft_t *d)
{
    const ifd_kvhost_params_t hp = {.max_bytes = (uint64_t)d->p.host_blocks * d->em.kv_data_bytes,
                                    .data_bytes = d->em.kv_data_bytes,
                                    .block_size = d->p.block_size,
                                    .pool = d->pool};
    int rc = ifd_kvhost_create(&hp, &d->host);
    if (rc) {
        d->host = NULL;
        IFD_WARN("draft: kv host tier off: %llu bytes for blocks of %zu: %s",
                 (unsigned long long)hp.max_bytes, hp.data_bytes, ifd_strerror(rc));
        return;
    }
    IFD_INFO("draft: kv host tier: %llu bytes at most (%llu blocks)",
             (unsigned long long)hp.max_bytes, (unsigned long long)(hp.max_bytes / hp.data_bytes));
}

/* ---- the tier copies' ring (spec_draft.h, "Copies") ------------------------------ */

static void ifd__copies_free(ifd_spec_draft_t *d)
{
    if (d->copy_mem)
        d->em.kv_host_free(d->em.ctx, d->copy_mem);
    free(d->copies);
    free(d->copy_tokens);
    d->copies = NULL, d->copy_tokens = NULL, d->copy_mem = NULL;
    d->copy_n = d->copy_head = 0;
}

/* Whether the tiers' copies go through the ring: a staged pool (a device's)
 * whose adapter copies asynchronously, with a tier, the ring made (at the
 * first call here; no memory: one warning and synchronous copies after). */
static bool ifd__copies_async(ifd_spec_draft_t *d)
{
    if (!d->staged || d->copies_off || !d->em.kv_download_async || (!d->disk && !d->host))
        return false;
    if (d->copies)
        return true;
    const size_t n = (size_t)d->copy_slots;
    d->copies = calloc(n, sizeof *d->copies);
    d->copy_tokens = malloc(n * (size_t)d->p.block_size * sizeof(int32_t));
    d->copy_mem = d->em.kv_host_alloc(d->em.ctx, n * d->em.kv_data_bytes);
    if (d->copies && d->copy_tokens && d->copy_mem)
        return true;
    IFD_WARN("draft: no memory for %d pinned block copies of %zu bytes: copying synchronously",
             d->copy_slots, d->em.kv_data_bytes);
    ifd__copies_free(d);
    d->copies_off = true;
    return false;
}

/* Hands the copies that have landed to the tiers, oldest first (a
 * download's bytes into a host tier entry made now and offered to the disk
 * tier; its pin given back), waiting for the first `wait` of them (INT_MAX:
 * all); stops at the first one still in flight. */
static void ifd__copies_poll(ifd_spec_draft_t *d, int wait)
{
    const size_t bytes = d->em.kv_data_bytes;
    while (d->copy_n > 0) {
        const int at = d->copy_head;
        ifd__dcopy_t *c = &d->copies[at];
        const int done = d->em.kv_copy_done(d->em.ctx, c->ticket, wait > 0);
        if (done == 0)
            break;
        const int32_t *t = d->copy_tokens + (size_t)at * (size_t)d->p.block_size;
        const uint8_t *data = d->copy_mem + (size_t)at * bytes;
        if (c->block < 0) {
            if (done < 0)
                IFD_WARN("draft: copying a tier hit's block to the device: %s", ifd_strerror(done));
        } else if (done < 0) {
            IFD_WARN("draft: copying block %d to host memory: %s", c->block, ifd_strerror(done));
            if (d->disk)
                ifd_kvpool_tier_add(d->pool, IFD_KVTIER_DROPPED, 1);
        } else {
            void *buf = d->host ? ifd_kvhost_put(d->host, &c->hash, 0, t) : NULL;
            if (buf) {
                memcpy(buf, data, bytes);
                d->st.host_offered++;
            }
            if (d->disk) {
                ifd_kvdisk_offer_data(d->disk, data, &c->parent, 0, t, NULL);
                d->st.disk_offered++;
            }
        }
        if (c->block >= 0)
            ifd_kvpool_unref(d->pool, 0, &c->block, 1);
        d->copy_head = (at + 1) % d->copy_slots;
        d->copy_n--;
        wait = wait > 0 ? wait - 1 : 0;
    }
}

/* The next free slot of the ring (the oldest copy waited for when all are
 * in flight). */
static int ifd__copies_slot(ifd_spec_draft_t *d)
{
    if (d->copy_n == d->copy_slots)
        ifd__copies_poll(d, 1);
    return (d->copy_head + d->copy_n) % d->copy_slots;
}

/* Whether tier hits are uploaded through the ring. */
static bool ifd__uploads_async(ifd_spec_draft_t *d)
{
    return d->em.kv_upload_async && d->em.kv_copy_wait && ifd__copies_async(d);
}

/* A free slot before a host-tier read, so that the landed copies handed to
 * the host tier then cannot evict the entry being read. */
static void ifd__copies_room(ifd_spec_draft_t *d)
{
    if (ifd__uploads_async(d) && d->copy_n == d->copy_slots)
        ifd__copies_poll(d, 1);
}

/* A tier hit's data into pool block blk (a global id): copied into a slot
 * and enqueued on the copy stream, the next forward waiting for it
 * (ifd__uploads_wait); else the synchronous kv_upload. 0 or an error. */
static int ifd__upload(ifd_spec_draft_t *d, int32_t blk, const void *data)
{
    const int32_t local = ifd_kvpool_block_local(d->pool, blk);
    if (!ifd__uploads_async(d))
        return d->em.kv_upload(d->em.ctx, local, -1, data);
    const int at = ifd__copies_slot(d);
    uint8_t *slot = d->copy_mem + (size_t)at * d->em.kv_data_bytes;
    memcpy(slot, data, d->em.kv_data_bytes);
    ifd__dcopy_t *c = &d->copies[at];
    *c = (ifd__dcopy_t){.block = -1};
    int rc = d->em.kv_upload_async(d->em.ctx, local, -1, slot, &c->ticket);
    if (rc)
        return rc;
    d->copy_n++;
    d->up_ticket = c->ticket;
    d->up_wait = true;
    d->st.async_uploads++;
    return 0;
}

/* Before a forward: the device waits for the uploads enqueued since the
 * last one (the copy stream's fences complete in order: the newest covers
 * them all). */
static int ifd__uploads_wait(ifd_spec_draft_t *d)
{
    if (!d->up_wait)
        return 0;
    d->up_wait = false;
#ifdef IFD_TEST_HOOKS
    if (d->p.skip_copy_wait_test)
        return 0;
#endif
    d->st.upload_waits++;
    return d->em.kv_copy_wait(d->em.ctx, d->up_ticket);
}

/* Starts the download of just-published block blk (chain hash *h after
 * *parent, tokens t) for the tiers: pinned, enqueued into a slot. False:
 * no ring (the caller copies synchronously); a block that cannot be copied
 * is counted as dropped. */
static bool ifd__copy_start(ifd_spec_draft_t *d, int32_t blk, const ifd_kvhash_t *h,
                            const ifd_kvhash_t *parent, const int32_t *t)
{
    if (!ifd__copies_async(d))
        return false;
    const int at = ifd__copies_slot(d);
    ifd__dcopy_t *c = &d->copies[at];
    *c = (ifd__dcopy_t){*h, *parent, blk, 0};
    int rc = ifd_kvpool_ref(d->pool, 0, &c->block, 1);
    if (!rc) {
        rc = d->em.kv_download_async(d->em.ctx, ifd_kvpool_block_local(d->pool, blk), -1,
                                     d->copy_mem + (size_t)at * d->em.kv_data_bytes, &c->ticket);
        if (rc)
            ifd_kvpool_unref(d->pool, 0, &c->block, 1);
    }
    if (rc) {
        IFD_WARN("draft: copying block %d to host memory: %s", blk, ifd_strerror(rc));
        if (d->disk)
            ifd_kvpool_tier_add(d->pool, IFD_KVTIER_DROPPED, 1);
        return true;
    }
    memcpy(d->copy_tokens + (size_t)at * (size_t)d->p.block_size, t,
           (size_t)d->p.block_size * sizeof *t);
    d->copy_n++;
    d->st.async_downloads++;
    return true;
}

/* ifd_kvpool_alloc of n blocks of the draft's pool; when none is free and
 * copies are in flight (their pins may hold the room), after waiting for
 * them all. */
static int ifd__alloc(ifd_spec_draft_t *d, int32_t n, int32_t *out)
{
    int rc = ifd_kvpool_alloc(d->pool, 0, 0, n, out);
    if (rc == IFD_ENOBLOCKS && d->copy_n > 0) {
        ifd__copies_poll(d, INT_MAX);
        rc = ifd_kvpool_alloc(d->pool, 0, 0, n, out);
    }
    return rc;
}

int ifd_spec_draft_create(ifd_spec_draft_t **out, ifd_model_t *draft,
                          const ifd_spec_draft_params_t *p, char *err, size_t errlen)
{
    *out = NULL;
    if (!draft || !p || p->n_vocab < 1 || p->max_batched_tokens < 1 || p->n_blocks < 1 ||
        p->block_size < 1 || p->step_tokens < 0 || !(p->disk_ms_per_token >= 0) ||
        p->copy_slots > IFD_ENGINE_COPY_SLOTS_MAX) {
        snprintf(err, errlen, "draft model: bad parameters");
        return IFD_EINVAL;
    }
    ifd_backend_t *be = ifd_model_backend(draft);
    const bool device = !be->ops->host_memory;
    if (device && !be->ops->kv_provider) {
        snprintf(err, errlen,
                 "the draft model's KV pool needs host memory or a device segment, "
                 "which the %s backend cannot make",
                 be->ops->name);
        return IFD_ENOTSUP;
    }
    const ifd_model_config_t *cfg = ifd_model_config(draft);
    if ((int32_t)cfg->n_vocab < p->n_vocab) {
        snprintf(err, errlen, "the draft model has %u vocabulary rows, the target %d", cfg->n_vocab,
                 p->n_vocab);
        return IFD_EMISMATCH;
    }
    ifd_spec_draft_t *d = calloc(1, sizeof *d);
    if (!d)
        return IFD_ENOMEM;
    d->p = *p;
    d->copy_slots = p->copy_slots ? p->copy_slots : IFD_ENGINE_COPY_SLOTS;
    d->copies_off = d->copy_slots < 0;
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(cfg);
    kp.dtype = p->dtype;
    kp.block_size = p->block_size;
    kp.n_blocks = p->n_blocks;
    kp.n_workers = 1;
    /* device memory: bound through the backend's provider by
     * ifd_engine_model_from below (private: its fd never leaves the worker) */
    kp.kind[0] = device ? IFD_KVSEG_CUDA_VMM : IFD_KVSEG_HOST;
    int rc = ifd_kvpool_create(&kp, &d->pool);
    if (rc) {
        snprintf(err, errlen, "cannot create the draft model's KV pool (%lld blocks): %s",
                 (long long)p->n_blocks, ifd_strerror(rc));
        goto fail;
    }
    if ((rc = ifd_engine_model_from(&d->em, draft, d->pool, 0))) {
        snprintf(err, errlen,
                 "the draft model's KV pool (%lld blocks of %s K/V on the %s "
                 "backend): %s",
                 (long long)p->n_blocks, ifd_kv_dtype_name(p->dtype), be->ops->name,
                 ifd_strerror(rc));
        goto fail;
    }
    d->model = draft;
    d->max_tok =
        p->max_batched_tokens > IFD_ENGINE_SPEC_ROWS ? p->max_batched_tokens : IFD_ENGINE_SPEC_ROWS;
    d->step_tokens = p->step_tokens > 0 ? p->step_tokens : p->max_batched_tokens;
    /* a device pool reaches its tiers through host copies */
    d->staged = device && d->em.kv_download && d->em.kv_upload;
    if (p->disk_dir && *p->disk_dir) {
        if (device && !d->staged)
            IFD_WARN("draft: no disk tier: the %s backend cannot copy the draft's blocks",
                     be->ops->name);
        else
            ifd__disk_start(d);
    }
    if (p->host_blocks > 0 && d->staged)
        ifd__host_start(d);
    d->p.disk_dir = d->p.disk_identity = NULL; /* the caller's: not kept */
    const size_t nt = (size_t)d->max_tok, nr = IFD_ENGINE_SPEC_ROWS;
    d->b_tokens = malloc(nt * sizeof *d->b_tokens);
    d->b_pos = malloc(nt * sizeof *d->b_pos);
    d->b_seq = malloc(nt * sizeof *d->b_seq);
    d->b_slot = malloc(nt * sizeof *d->b_slot);
    d->b_rows = malloc(nr * sizeof *d->b_rows);
    d->logits = malloc(nr * (size_t)d->em.n_vocab * sizeof *d->logits);
    if (!d->b_tokens || !d->b_pos || !d->b_seq || !d->b_slot || !d->b_rows || !d->logits) {
        rc = IFD_ENOMEM;
        snprintf(err, errlen, "draft model: out of memory");
        goto fail;
    }
    *out = d;
    return 0;
fail:
    ifd_spec_draft_destroy(d);
    return rc;
}

void ifd_spec_draft_destroy(ifd_spec_draft_t *d)
{
    if (!d)
        return;
    ifd__copies_poll(d, INT_MAX); /* the copies in flight to the tiers, their pins back */
    ifd__copies_free(d);
    ifd_kvdisk_destroy(d->disk); /* writes what is queued, gives its pins back */
    ifd_kvhost_destroy(d->host); /* before the pool its gauges are in */
    free(d->stage);
    if (d->em.ctx)
        ifd_engine_model_free(&d->em);
    ifd_kvpool_destroy(d->pool);
    free(d->b_tokens);
    free(d->b_pos);
    free(d->b_seq);
    free(d->b_slot);
    free(d->b_rows);
    free(d->b_tables);
    free(d->c_tables);
    free(d->logits);
    free(d);
}

/* Gives back blocks[from..n_blocks) (published ones stay cached for other
 * sequences) and cuts the kept tokens to what the blocks left hold. */
static void ifd__dseq_truncate(ifd_spec_draft_t *d, ifd__dseq_t *s, int32_t from)
{
    if (from < s->n_blocks) {
        int rc = ifd_kvpool_unref(d->pool, 0, s->blocks + from, s->n_blocks - from);
        if (rc)
            IFD_ERROR("draft: releasing %d blocks: %s", s->n_blocks - from, ifd_strerror(rc));
        d->st.blocks_held -= s->n_blocks - from;
        s->n_blocks = from;
    }
    if (s->n_pub > s->n_blocks)
        s->n_pub = s->n_blocks;
    if (s->dhash_n > s->n_pub)
        s->dhash_n = 0;
    if (s->n_kv > s->n_blocks * d->p.block_size)
        s->n_kv = s->n_blocks * d->p.block_size;
}

static void ifd__dseq_release(ifd_spec_draft_t *d, ifd__dseq_t *s)
{
    ifd__dseq_truncate(d, s, 0);
}

static void ifd__release_cb(void *ctx, void *seq)
{
    ifd__dseq_t *s = seq;
    if (!s)
        return;
    ifd__dseq_release(ctx, s);
    free(s->tok);
    free(s->blocks);
    free(s);
}

static int ifd__propose_cb(void *ctx, ifd_spec_draft_query_t *q, int n)
{
    return ifd_spec_draft_propose(ctx, q, n);
}

ifd_spec_drafter_t ifd_spec_draft_drafter(ifd_spec_draft_t *d)
{
    return (ifd_spec_drafter_t){d, ifd__propose_cb, ifd__release_cb};
}

void ifd_spec_draft_stats(const ifd_spec_draft_t *d, ifd_spec_draft_stats_t *out)
{
    *out = d->st;
}

ifd_kvpool_t *ifd_spec_draft_pool(const ifd_spec_draft_t *d)
{
    return d->pool;
}

/* Grows s's arrays to hold the tokens of positions [0, n) and the ids of
 * the blocks covering them (no block is allocated). 0 or IFD_ENOMEM. */
static int ifd__dseq_grow(ifd_spec_draft_t *d, ifd__dseq_t *s, int32_t n)
{
    if (n > s->cap) {
        int32_t cap = s->cap ? s->cap : 64;
        while (cap < n)
            cap *= 2;
        int32_t *t = realloc(s->tok, (size_t)cap * sizeof *t);
        if (!t)
            return IFD_ENOMEM;
        s->tok = t;
        s->cap = cap;
    }
    const int32_t need = (n + d->p.block_size - 1) / d->p.block_size;
    if (need > s->cap_blocks) {
        int32_t *b = realloc(s->blocks, (size_t)need * 2 * sizeof *b);
        if (!b)
            return IFD_ENOMEM;
        s->blocks = b;
        s->cap_blocks = need * 2;
    }
    return 0;
}

/* Grows s to hold the tokens of positions [0, n) and the blocks covering
 * them. 0, IFD_ENOBLOCKS (s keeps what it had) or IFD_ENOMEM. */
static int ifd__dseq_reserve(ifd_spec_draft_t *d, ifd__dseq_t *s, int32_t n)
{
    int rc = ifd__dseq_grow(d, s, n);
    if (rc)
        return rc;
    const int32_t need = (n + d->p.block_size - 1) / d->p.block_size;
    if (need <= s->n_blocks)
        return 0;
    rc = ifd__alloc(d, need - s->n_blocks, s->blocks + s->n_blocks);
    if (rc)
        return rc;
    d->st.blocks_held += need - s->n_blocks;
    s->n_blocks = need;
    return 0;
}

/* The positions of q's tokens whose KV a call may keep or take: all of a
 * feed (k 0), all but the last of a proposal (its last token is always fed:
 * its logits give the first proposal). */
static int32_t ifd__keep(const ifd_spec_draft_query_t *q)
{
    return q->k > 0 ? q->n_tokens - 1 : q->n_tokens;
}

/* The disk chain hash of s's first n blocks (n <= n_pub), from dhash on
 * when it covers no more than them. */
static ifd_kvhash_t ifd__dseq_chain(const ifd_spec_draft_t *d, ifd__dseq_t *s, int32_t n)
{
    const int32_t bs = d->p.block_size;
    if (s->dhash_n > n) {
        s->dhash_n = 0;
        s->dhash = (ifd_kvhash_t){0, 0};
    }
    if (s->dhash_n == 0)
        s->dhash = (ifd_kvhash_t){0, 0};
    for (; s->dhash_n < n; s->dhash_n++)
        s->dhash = ifd_kvpool_hash_block(&s->dhash, 0, s->tok + (int64_t)s->dhash_n * bs, bs);
    return s->dhash;
}

static double ifd__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A block of s read back from a tier goes in at b (its tokens t, copied
 * into s): published after the block before it; s's KV grows by a block. */
static void ifd__dseq_took(ifd_spec_draft_t *d, ifd__dseq_t *s, int32_t b, const int32_t *t)
{
    const int32_t bs = d->p.block_size;
    memcpy(s->tok + (int64_t)b * bs, t, (size_t)bs * sizeof *s->tok);
    s->n_blocks = s->n_pub = b + 1;
    s->n_kv = s->n_blocks * bs;
    d->st.blocks_held++;
}

/* Uploads a host copy into block blk (a device pool) and publishes it as
 * s's block b (tokens t). False: a failed copy or publish (blk untouched:
 * the caller gives it back). */
static bool ifd__dseq_put(ifd_spec_draft_t *d, ifd__dseq_t *s, int32_t b, int32_t blk,
                          const int32_t *t, const void *data)
{
    if (data && ifd__upload(d, blk, data) != 0)
        return false;
    return ifd_kvpool_publish(d->pool, 0, blk, b > 0 ? s->blocks[b - 1] : -1, 0, t, NULL) >= 0;
}

/* After the pool's hit (s's blocks, all published): the blocks past it, up
 * to max, that the host tier holds (a device pool), each uploaded into a
 * fresh block and published; stops at the first missing one, a full pool
 * or a failed copy. */
static void ifd__dseq_host_fill(ifd_spec_draft_t *d, ifd__dseq_t *s, const int32_t *tokens,
                                int32_t max)
{
    const int32_t bs = d->p.block_size, b0 = s->n_blocks;
    if (!d->host || b0 >= max)
        return;
    ifd_kvhash_t h = ifd__dseq_chain(d, s, b0);
    int32_t b = b0;
    for (; b < max; b++) {
        const int32_t *t = tokens + (int64_t)b * bs;
        const ifd_kvhash_t next = ifd_kvpool_hash_block(&h, 0, t, bs);
        ifd__copies_room(d); /* before the read: nothing is put in the tier after it */
        const void *data = ifd_kvhost_get(d->host, &next, 0, t);
        int32_t blk;
        int rc = data ? ifd_kvpool_alloc(d->pool, 0, 0, 1, &blk) : IFD_ENOTFOUND;
        if (rc == IFD_ENOBLOCKS && d->copy_n > 0) {
            /* the copies' pins may hold the room; handing them over fills
             * the host tier, which may evict the entry: read it again */
            ifd__copies_poll(d, INT_MAX);
            data = ifd_kvhost_get(d->host, &next, 0, t);
            rc = data ? ifd_kvpool_alloc(d->pool, 0, 0, 1, &blk) : IFD_ENOTFOUND;
        }
        if (rc)
            break;
        if (!ifd__dseq_put(d, s, b, blk, t, data)) {
            ifd_kvpool_unref(d->pool, 0, &blk, 1);
            break;
        }
        s->blocks[b] = blk;
        ifd__dseq_took(d, s, b, t);
        h = next;
    }
    ifd_kvhost_count_query(d->host, (int64_t)(max - b0) * bs, b == b0);
    s->dhash = h;
    s->dhash_n = b;
    d->st.host_hit_tokens += (uint64_t)(b - b0) * (uint64_t)bs;
}

/* Starts reading n blocks after *parent (tokens t on) into gb (a host
 * pool's, in place) or, staged, into host buffers *bufs (malloc'ed here:
 * the caller frees them, and *bufs, after the load). 0 or an error. */
static int ifd__disk_load(ifd_spec_draft_t *d, const ifd_kvhash_t *parent, const int32_t *t, int n,
                          const int32_t *gb, void ***bufs, ifd_kvdisk_load_t **l)
{
    *bufs = NULL;
    if (!d->staged)
        return ifd_kvdisk_load_start(d->disk, parent, 0, t, n, gb, NULL, l);
    const size_t bytes = d->em.kv_data_bytes;
    void **b = calloc((size_t)n, sizeof *b);
    uint8_t *mem = b ? malloc((size_t)n * bytes) : NULL;
    if (!mem) {
        free(b);
        return IFD_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        b[i] = mem + (size_t)i * bytes;
    int rc = ifd_kvdisk_load_start_staged(d->disk, parent, 0, t, n, b, l);
    if (rc) {
        free(mem);
        free(b);
        return rc;
    }
    *bufs = b;
    return 0;
}

/* After the pool's and the host tier's hits (s's blocks, all published):
 * the blocks past them, up to max, that the disk tier has files for, read
 * into fresh blocks (staged: into host buffers, then uploaded; and put in
 * the host tier, so that the next eviction is a host hit) and published
 * (tokens: the query's), waited for at most what feeding them would take;
 * what did not land by then is fed as usual. */
static void ifd__dseq_disk_fill(ifd_spec_draft_t *d, ifd__dseq_t *s, const int32_t *tokens,
                                int32_t max)
{
    const int32_t bs = d->p.block_size, b0 = s->n_blocks;
    if (!d->disk || b0 >= max)
        return;
    const ifd_kvhash_t parent = ifd__dseq_chain(d, s, b0);
    const int32_t *t = tokens + (int64_t)b0 * bs;
    int n = ifd_kvdisk_probe(d->disk, &parent, 0, t, max - b0);
    int32_t *gb = s->blocks + b0;
    if (n <= 0 || ifd__alloc(d, n, gb) != 0)
        return;
    ifd_kvdisk_load_t *l = NULL;
    void **bufs = NULL;
    if (ifd__disk_load(d, &parent, t, n, gb, &bufs, &l) != 0) {
        ifd_kvpool_unref(d->pool, 0, gb, n);
        return;
    }
    const double ms_tok = d->p.disk_ms_per_token > 0 ? d->p.disk_ms_per_token
                          : d->ms_tok > 0            ? d->ms_tok
                                                     : IFD_ENGINE_DISK_MS_PER_TOKEN;
    const bool done = ifd_kvdisk_load_wait(l, ms_tok * n * bs);
    const int ok = ifd_kvdisk_load_finish(l, !done);
    ifd_kvhash_t h = parent;
    int i = 0;
    for (; i < ok; i++) {
        const int32_t b = b0 + i, *tb = tokens + (int64_t)b * bs;
        if (!ifd__dseq_put(d, s, b, s->blocks[b], tb, bufs ? bufs[i] : NULL))
            break;
        ifd__dseq_took(d, s, b, tb);
        h = ifd_kvpool_hash_block(&h, 0, tb, bs);
        void *hb = bufs && d->host ? ifd_kvhost_put(d->host, &h, 0, tb) : NULL;
        if (hb)
            memcpy(hb, bufs[i], d->em.kv_data_bytes);
    }
    if (i < n)
        ifd_kvpool_unref(d->pool, 0, gb + i, n - i);
    if (bufs) {
        free(bufs[0]);
        free(bufs);
    }
    s->dhash = h;
    s->dhash_n = b0 + i;
    d->st.disk_hit_tokens += (uint64_t)i * (uint64_t)bs;
}

/* A state with no KV kept takes the longest published run of blocks that
 * starts its first ifd__keep tokens, then what the disk tier holds past
 * it; its own blocks go back first (every position of them would be
 * written again). */
static void ifd__dseq_reuse(ifd_spec_draft_t *d, ifd__dseq_t *s, const ifd_spec_draft_query_t *q)
{
    ifd__dseq_release(d, s);
    const int32_t bs = d->p.block_size, keep = ifd__keep(q), max = keep / bs;
    if (max < 1 || ifd__dseq_grow(d, s, max * bs) != 0)
        return;
    int got = ifd_kvpool_lookup(d->pool, 0, 0, q->tokens, keep, s->blocks, max, NULL);
    if (got < 0) {
        IFD_WARN("draft: prefix lookup of %d tokens: %s", keep, ifd_strerror(got));
        got = 0;
    }
    s->n_blocks = s->n_pub = got;
    s->n_kv = got * bs;
    s->dhash_n = 0;
    memcpy(s->tok, q->tokens, (size_t)s->n_kv * sizeof *s->tok);
    d->st.blocks_held += got;
    d->st.prefix_hit_tokens += (uint64_t)s->n_kv;
    ifd__dseq_host_fill(d, s, q->tokens, max);
    ifd__dseq_disk_fill(d, s, q->tokens, max);
}

/* The tiers' share of publishing s's block b anew: a host pool's block
 * offered to the disk tier in place; a device pool's copied once to host
 * memory (into its host tier entry, else the stage), offered from there. */
static void ifd__tiers_offer(ifd_spec_draft_t *d, ifd__dseq_t *s, int32_t b)
{
    if (!d->disk && !d->host)
        return;
    const int32_t bs = d->p.block_size, *t = s->tok + (int64_t)b * bs;
    const ifd_kvhash_t parent = ifd__dseq_chain(d, s, b);
    if (!d->staged) {
        ifd_kvdisk_offer(d->disk, s->blocks[b], -1, &parent, 0, t, NULL);
        d->st.disk_offered++;
        return;
    }
    const ifd_kvhash_t h = ifd_kvpool_hash_block(&parent, 0, t, bs);
    if (ifd__copy_start(d, s->blocks[b], &h, &parent, t))
        return; /* the tiers take it when it has landed (ifd__copies_poll) */
    void *buf = d->host ? ifd_kvhost_put(d->host, &h, 0, t) : NULL;
    void *dst = buf ? buf : d->stage;
    if (!dst)
        return; /* no disk tier, and the host tier had no memory (counted) */
    int rc = d->em.kv_download(d->em.ctx, ifd_kvpool_block_local(d->pool, s->blocks[b]), -1, dst);
    if (rc) {
        IFD_WARN("draft: copying block %d to host memory: %s", s->blocks[b], ifd_strerror(rc));
        if (buf)
            ifd_kvhost_forget(d->host, &h);
        return;
    }
    if (buf)
        d->st.host_offered++;
    if (d->disk) {
        ifd_kvdisk_offer_data(d->disk, dst, &parent, 0, t, NULL);
        d->st.disk_offered++;
    }
}

/* Publishes the full blocks of q's state that lie below both its KV and
 * ifd__keep (the file's comment: its own tokens, never written again),
 * after a call that fed it (s->tok[0..n_kv) are q->tokens' up to keep). */
static void ifd__dseq_publish(ifd_spec_draft_t *d, const ifd_spec_draft_query_t *q)
{
    ifd__dseq_t *s = q->seq;
    const int32_t keep = ifd__keep(q), bs = d->p.block_size;
    const int32_t full = (s->n_kv < keep ? s->n_kv : keep) / bs;
    IFD_ASSERT(full <= s->n_blocks);
    while (!s->publish_off && s->n_pub < full) {
        const int32_t b = s->n_pub, parent = b > 0 ? s->blocks[b - 1] : -1;
        int rc =
            ifd_kvpool_publish(d->pool, 0, s->blocks[b], parent, 0, s->tok + (int64_t)b * bs, NULL);
        if (rc < 0) {
            IFD_WARN("draft: publishing block %d: %s (no more from this sequence)", b,
                     ifd_strerror(rc));
            s->publish_off = true;
            return;
        }
        s->n_pub++;
        d->st.published++;
        if (rc == 0) /* new: the tiers' copies are to be made (a duplicate's exist) */
            ifd__tiers_offer(d, s, b);
    }
}

/* Brings query q's state in step with its tokens: creates it at the first
 * call, keeps the KV of the longest common prefix (up to ifd__keep; and not
 * inside a published block past it: that one is read-only, so it goes) and
 * takes the published prefix when nothing is kept. Blocks are reserved
 * later (ifd__plan), once the call's budget says what it feeds. false when
 * the sequence cannot take part (no state, past the draft's context). */
static bool ifd__sync(ifd_spec_draft_t *d, ifd_spec_draft_query_t *q)
{
    ifd__dseq_t *s = q->seq;
    if (q->n_tokens < 1 || q->k < 0 || q->n_tokens + q->k > d->em.n_ctx)
        return false;
    if (!s && !(s = q->seq = calloc(1, sizeof *s)))
        return false;
    int32_t m = 0;
    const int32_t keep = ifd__keep(q), lim = s->n_kv < keep ? s->n_kv : keep;
    while (m < lim && s->tok[m] == q->tokens[m])
        m++;
    const int32_t had = s->n_kv;
    s->n_kv = m; /* positions past it: rejected proposals, rolled back */
    if (m < s->n_pub * d->p.block_size)
        ifd__dseq_truncate(d, s, m / d->p.block_size);
    d->st.rolled_back += (uint64_t)(had - s->n_kv);
    if (s->n_kv == 0)
        ifd__dseq_reuse(d, s, q);
    return true;
}

/* The call's catch-up budget (ifd_spec_draft_params_t.step_tokens) shared
 * in query order: to[i] is the position q[i] is fed up to, prop[i] whether
 * it proposes (fed to its last token: its k - 1 draft steps follow). The
 * blocks for every position written are reserved here; a query without
 * room drops out (its KV given back, its share back to the budget). */
static void ifd__plan(ifd_spec_draft_t *d, ifd_spec_draft_query_t *q, bool *on, int n, int32_t *to,
                      bool *prop)
{
    int64_t left = d->step_tokens;
    for (int i = 0; i < n; i++) {
        prop[i] = false;
        if (!on[i])
            continue;
        ifd__dseq_t *s = q[i].seq;
        const int64_t need = q[i].n_tokens - s->n_kv, take = need < left ? need : left;
        to[i] = s->n_kv + (int32_t)take;
        prop[i] = q[i].k > 0 && to[i] == q[i].n_tokens;
        if (ifd__dseq_reserve(d, s, prop[i] ? q[i].n_tokens + q[i].k - 1 : to[i]) != 0) {
            ifd__dseq_release(d, s);
            d->st.no_room++;
            on[i] = prop[i] = false;
            continue;
        }
        left -= take;
        if (q[i].k > 0 && !prop[i])
            d->st.lagging++; /* its catch-up goes on next call */
    }
}

/* The greedy token of a logits row: the first maximum among the target's
 * ids (NaN never wins). */
static int32_t ifd__argmax(const float *lg, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (lg[i] > lg[best] || lg[best] != lg[best])
            best = i;
    return best;
}

/* Appends token `tok` of query qi at its next position to the batch. */
static void ifd__batch_add(ifd_spec_draft_t *d, int qi, ifd__dseq_t *s, int max_blocks, int32_t tok,
                           int *n_tok)
{
    const int32_t p = s->n_kv;
    const int32_t *row = d->b_tables + (int64_t)qi * max_blocks;
    d->b_tokens[*n_tok] = tok;
    d->b_pos[*n_tok] = p;
    d->b_seq[*n_tok] = qi;
    d->b_slot[*n_tok] = (int64_t)row[p / d->p.block_size] * d->p.block_size + p % d->p.block_size;
    s->tok[s->n_kv++] = tok;
    (*n_tok)++;
}

/* Runs the batch of n_tok tokens and n_rows logits rows over the queries'
 * tables; each row's greedy token becomes its query's next proposal. The
 * batch's sequences are renumbered 0, 1, ... in the order they come (the
 * queries' order: their tokens are contiguous) with their tables alone, so
 * that a step of one token per sequence is a decode step the model pads
 * to a bucket and replays as a graph on a backend with graphs (model.c),
 * in the model's draft set of graphs (1: never the target's). */
static int ifd__run(ifd_spec_draft_t *d, ifd_spec_draft_query_t *q, int max_blocks, int n_tok,
                    int n_rows)
{
    int n_seqs = 0, last = -1;
    for (int t = 0; t < n_tok; t++) {
        if (d->b_seq[t] != last) {
            last = d->b_seq[t];
            memcpy(d->c_tables + (int64_t)n_seqs * max_blocks,
                   d->b_tables + (int64_t)last * max_blocks,
                   (size_t)max_blocks * sizeof *d->c_tables);
            n_seqs++;
        }
        d->b_seq[t] = n_seqs - 1;
    }
    const ifd_batch_t b = {.n_tok = n_tok,
                           .tokens = d->b_tokens,
                           .pos = d->b_pos,
                           .seq = d->b_seq,
                           .slot = d->b_slot,
                           .n_seqs = n_seqs,
                           .block_tables = d->c_tables,
                           .max_blocks = max_blocks,
                           .n_logits = n_rows,
                           .logit_rows = d->b_rows};
    int rc = ifd__uploads_wait(d); /* tier hits' blocks uploaded before they are read */
    if (rc)
        return rc;
    ifd_model_set_graph_set(d->model, 1);
    const double t0 = d->disk ? ifd__now_ms() : 0;
    rc = d->em.forward(d->em.ctx, &b, d->logits);
    ifd_model_set_graph_set(d->model, 0); /* the model's own forwards, if it drafts for itself */
    if (rc)
        return rc;
    if (d->disk && n_tok >= d->p.block_size) { /* a catch-up's rate: a disk read's deadline */
        const double ms = (ifd__now_ms() - t0) / n_tok;
        d->ms_tok = d->ms_tok == 0 ? ms : d->ms_tok + (ms - d->ms_tok) / 8;
    }
    d->st.forwards++;
    d->st.tokens += (uint64_t)n_tok;
    for (int r = 0; r < n_rows; r++) {
        ifd_spec_draft_query_t *qq = &q[d->row_q[r]];
        qq->out[qq->n_out++] =
            ifd__argmax(d->logits + (size_t)r * (size_t)d->em.n_vocab, d->p.n_vocab);
    }
    return 0;
}

/* Feeds every active query the tokens its draft KV lacks up to to[i], in
 * forwards of at most max_tok tokens; the chunk that reaches a proposing
 * query's last token gives its first proposal. */
static int ifd__catch_up(ifd_spec_draft_t *d, ifd_spec_draft_query_t *q, const bool *on,
                         const int32_t *to, const bool *prop, int n, int max_blocks)
{
    uint64_t fed = 0;
    for (;;) {
        int n_tok = 0, n_rows = 0;
        for (int i = 0; i < n && n_tok < d->max_tok; i++) {
            ifd__dseq_t *s = q[i].seq;
            if (!on[i] || s->n_kv >= to[i])
                continue;
            const int from = n_tok;
            while (s->n_kv < to[i] && n_tok < d->max_tok)
                ifd__batch_add(d, i, s, max_blocks, q[i].tokens[s->n_kv], &n_tok);
            if (q[i].k == 0)
                d->st.feed_tokens += (uint64_t)(n_tok - from);
            if (prop[i] && s->n_kv == q[i].n_tokens) {
                d->row_q[n_rows] = i;
                d->b_rows[n_rows++] = n_tok - 1;
            }
        }
        if (n_tok == 0)
            break;
        d->st.catchup_tokens += (uint64_t)n_tok;
        fed += (uint64_t)n_tok;
        int rc = ifd__run(d, q, max_blocks, n_tok, n_rows);
        if (rc)
            return rc;
    }
    if (fed > d->st.max_call_catchup)
        d->st.max_call_catchup = fed;
    return 0;
}

/* The block tables of the n queries (after ifd__sync: they do not change
 * during the call), in local ids; max_blocks into *mb. */
static int ifd__tables(ifd_spec_draft_t *d, ifd_spec_draft_query_t *q, const bool *on, int n,
                       int *mb)
{
    int max_blocks = 1;
    for (int i = 0; i < n; i++)
        if (on[i] && ((ifd__dseq_t *)q[i].seq)->n_blocks > max_blocks)
            max_blocks = ((ifd__dseq_t *)q[i].seq)->n_blocks;
    if (n * max_blocks > d->b_tables_cap) {
        const size_t cap = (size_t)n * (size_t)max_blocks * 2;
        int32_t *t = realloc(d->b_tables, cap * sizeof *t);
        if (t)
            d->b_tables = t;
        int32_t *c = t ? realloc(d->c_tables, cap * sizeof *c) : NULL;
        if (!c)
            return IFD_ENOMEM;
        d->c_tables = c;
        d->b_tables_cap = (int)cap;
    }
    for (int i = 0; i < n; i++) {
        const ifd__dseq_t *s = q[i].seq;
        int32_t *row = d->b_tables + (int64_t)i * max_blocks;
        for (int b = 0; b < max_blocks; b++)
            row[b] = on[i] && b < s->n_blocks ? ifd_kvpool_block_local(d->pool, s->blocks[b]) : 0;
    }
    *mb = max_blocks;
    return 0;
}

int ifd_spec_draft_propose(ifd_spec_draft_t *d, ifd_spec_draft_query_t *q, int n)
{
    if (n < 0 || n > IFD_ENGINE_SPEC_ROWS)
        return IFD_EINVAL;
    bool on[IFD_ENGINE_SPEC_ROWS], prop[IFD_ENGINE_SPEC_ROWS];
    int32_t to[IFD_ENGINE_SPEC_ROWS];
    ifd__copies_poll(d, 0); /* the tier copies that landed since the last call */
    for (int i = 0; i < n; i++) {
        q[i].n_out = 0;
        on[i] = ifd__sync(d, &q[i]);
    }
    ifd__plan(d, q, on, n, to, prop);
    int max_blocks = 1, rc = ifd__tables(d, q, on, n, &max_blocks);
    if (!rc)
        rc = ifd__catch_up(d, q, on, to, prop, n, max_blocks);
    /* then one greedy step per proposed token but the first, all queries together */
    for (bool more = true; !rc && more;) {
        int n_tok = 0;
        more = false;
        for (int i = 0; i < n; i++) {
            if (!prop[i] || q[i].n_out < 1 || q[i].n_out >= q[i].k)
                continue;
            d->row_q[n_tok] = i;
            d->b_rows[n_tok] = n_tok;
            ifd__batch_add(d, i, q[i].seq, max_blocks, q[i].out[q[i].n_out - 1], &n_tok);
            more = true;
        }
        if (more)
            rc = ifd__run(d, q, max_blocks, n_tok, n_tok);
    }
    if (rc) { /* the KV written by this call is not to be trusted: start again */
        for (int i = 0; i < n; i++) {
            if (q[i].seq)
                ifd__dseq_release(d, q[i].seq);
            q[i].n_out = 0;
        }
        return rc;
    }
    for (int i = 0; i < n; i++)
        if (on[i])
            ifd__dseq_publish(d, &q[i]);
    return 0;
}

/* ---- the tokenizer check ------------------------------------------------------ */

int ifd_spec_draft_check_tokenizers(const ifd_tokenizer_t *target, const ifd_tokenizer_t *draft,
                                    char *err, size_t errlen)
{
    const int32_t n = ifd_tokenizer_n_vocab(target);
    if (ifd_tokenizer_n_vocab(draft) != n) {
        snprintf(err, errlen,
                 "the draft model's tokenizer has %d tokens, the model's %d: a "
                 "draft model needs the same tokenizer",
                 ifd_tokenizer_n_vocab(draft), n);
        return IFD_EMISMATCH;
    }
    static const char *const names[] = {"BOS", "EOS", "EOT", "UNK", "PAD"};
    ifd_token_t (*const ids[])(const ifd_tokenizer_t *) = {ifd_tokenizer_bos, ifd_tokenizer_eos,
                                                           ifd_tokenizer_eot, ifd_tokenizer_unk,
                                                           ifd_tokenizer_pad};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        if (ids[i](target) != ids[i](draft)) {
            snprintf(err, errlen,
                     "the draft model's tokenizer has %s id %d, the model's %d: a "
                     "draft model needs the same tokenizer",
                     names[i], (int)ids[i](draft), (int)ids[i](target));
            return IFD_EMISMATCH;
        }
    }
    const ifd_token_t *ea, *eb;
    size_t na = ifd_tokenizer_eog_ids(target, &ea), nb = ifd_tokenizer_eog_ids(draft, &eb);
    if (na != nb || (na && memcmp(ea, eb, na * sizeof *ea) != 0)) {
        snprintf(err, errlen,
                 "the draft model's tokenizer has other end-of-generation ids: a "
                 "draft model needs the same tokenizer");
        return IFD_EMISMATCH;
    }
    for (int32_t id = 0; id < n; id++) {
        size_t la = 0, lb = 0;
        const char *ta = ifd_tokenizer_token_text(target, id, &la);
        const char *tb = ifd_tokenizer_token_text(draft, id, &lb);
        if (la != lb || (la && memcmp(ta, tb, la) != 0) ||
            ifd_tokenizer_token_type(target, id) != ifd_tokenizer_token_type(draft, id)) {
            snprintf(err, errlen,
                     "the draft model's token %d is '%.*s', the model's '%.*s': a "
                     "draft model needs the same tokenizer",
                     id, (int)(lb < 40 ? lb : 40), tb ? tb : "", (int)(la < 40 ? la : 40),
                     ta ? ta : "");
            return IFD_EMISMATCH;
        }
    }
    return 0;
}
