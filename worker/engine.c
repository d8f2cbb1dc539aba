/*
 * engine.c — see engine.h.
 *
 * Sequences live in two arrays of pointers: `running` in admission order
 * (the last one is the first to be preempted, among those of the client
 * running the most) and `waiting` in scheduling
 * order (priority descending, then arrival). Both stay small (max_seqs and
 * the router's queue bound), so plain arrays with memmove are the simplest
 * correct structure. Each sequence names its client's slot in `clients`,
 * whose running / waiting counts ifd__q_insert and ifd__q_remove_at keep
 * (the fairness rules read them: engine.h, "Fairness").
 *
 * Invariants per sequence: blocks[0..n_blocks) cover positions
 * [0, n_blocks * block_size) and hold the KV of positions [0, n_computed)
 * (held from g_first on: with one pool and every layer local, the blocks
 * before the next query's window go back to the pool, all_local);
 * the first n_published blocks are in the prefix cache (read-only). A sequence never writes below
 * n_published * block_size (prefix hits stop at n_tokens - 1, so writes
 * always land in blocks of its own), hence no copy-on-write is needed here.
 *
 * Prompt logprobs: a sequence that owes some (plp_next < n_prompt) takes
 * no prefix hit past position plp_next - 1, so every row it owes is
 * computed; the step lists those rows as extra logit rows before the
 * sequence's sample row (at most IFD_ENGINE_PLP_ROWS in a step), and the
 * backend's batch invariance keeps every other row as it would be.
 *
 * With a local pool (engine.h, local_pool), lblocks[b] is the local-layer
 * twin of blocks[b], held for l_first <= b < n_blocks only (logical
 * indexing: the same b in both tables); l_first never passes the first
 * block the next query's window reads (ifd__local_lo(n_computed)). Twins
 * are published in the local pool as keyed entries under their global
 * twin's key (kvpool.h), so a prefix hit finds the window's twins without
 * the ones before it; below n_lpublished every twin held is published.
 */
#include "engine.h"

#include "error.h"
#include "kvpool/kvkey.h"
#include "log.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint64_t id;
    int32_t *tokens; /* prompt, then generated */
    int32_t n_tokens, cap_tokens;
    int32_t n_prompt;
    int32_t n_gen;
    int32_t n_computed;
    int32_t *blocks;
    int32_t n_blocks, cap_blocks;
    int32_t g_first; /* blocks[b] held for b >= g_first (all_local releases the rest) */
    int32_t n_published;
    bool publish_failed;
    int32_t *lblocks; /* [cap_blocks], local pool only */
    int32_t l_first;
    int32_t n_lpublished;
    bool lpublish_failed;
    ifd_sampling_params_t sampling;
    int err; /* why it ended in error (ifd_engine_usage_t.error), 0 otherwise */
    ifd_logit_bias_t *bias;
    uint32_t *allowed; /* allowed_token_ids' bitmask (sampling.allowed), or NULL */
    int32_t *lp_ids;   /* logprob_token_ids (sampling.lp_ids), or NULL */
    /* Room for its top logprobs past IFD_SAMPLER_INLINE_LOGPROBS (the
     * result's more_*: min(n_logprobs, vocab) each), or NULL */
    int32_t *top_ids;
    float *top_lps;
    int32_t top_cap;
    int32_t *stop_ids;
    int32_t n_stop_ids;
    int32_t max_tokens;
    bool ignore_eos, use_cache, cancelled, admitted_once;
    /* min_tokens: while n_gen < min_tokens, sampling uses min_bias (the
     * request's logit_bias plus -inf for every stop and EOS id) */
    int32_t min_tokens;
    ifd_logit_bias_t *min_bias;
    uint32_t n_min_bias;
    int32_t priority;
    uint32_t client; /* engine.h, "Fairness" */
    int32_t cslot;   /* its client's slot in e->clients */
    uint64_t salt;
    uint64_t arrival;
    int32_t cached_tokens;
    /* disk tier (engine.h, disk): blocks [n_blocks, n_blocks + load_n) are
     * being read in by `load`, started at load_start, until load_deadline
     * (ifd__ms); dhash is the disk chain hash of blocks [0, n_published) */
    ifd_kvdisk_load_t *load;
    void **load_bufs; /* a staged disk tier (kvdisk.h): the load's host buffers, or NULL */
    int32_t load_n;
    double load_start, load_deadline;
    ifd_kvhash_t dhash;
    bool deferred; /* this step's admission passed it over: its load is in flight */
    int kv_lost; /* < 0: a block it holds came from a failed upload (ifd__uploads_failed):
                  * it ends with this error after this step's forward */
    /* prompt logprobs: plp_top -1 off, else the top alternatives asked;
     * plp_next is the next prompt position owed (from 1; done at n_prompt).
     * While some are owed, n_computed <= plp_next - 1 (their rows are
     * always computed, never taken from the prefix cache). */
    int32_t plp_top, plp_next;
    /* speculative decoding (engine.h, spec.h); draft[0..n_draft) this
     * step's proposal */
    ifd_spec_state_t spec;
    int32_t draft[IFD_SPEC_MAX_TOKENS];
    int32_t n_draft;
    void *dseq; /* the drafter's state of this sequence (p.drafter), or NULL */
    /* images (engine.h): copies, their rows in one block; keys: the prefix
     * cache's identity of each token (tokens with image tokens replaced,
     * ifd_kvkey_image), == tokens without images */
    ifd_engine_image_t *images;
    int32_t n_images;
    float *image_rows;
    int32_t *keys;
    /* this step */
    int32_t sched;
    int32_t plp_rows; /* prompt-logprob rows this step (before its sample row) */
    bool sample;
} ifd__seq_t;

/* One client's sequences here (engine.h, "Fairness"). A slot whose counts
 * are both 0 is free: the next client without one takes it. */
typedef struct {
    uint32_t id;
    int32_t running, waiting;
} ifd__client_t;

typedef struct {
    ifd__client_t *v;
    int n, cap;
    int active; /* slots with a running or waiting sequence: the clients with work */
} ifd__clients_t;

typedef struct {
    ifd__seq_t **v;
    int n, cap;
    ifd__clients_t *cl; /* q_insert / q_remove_at count the queue's sequences there, */
    bool running;       /* as running ones, else as waiting ones */
} ifd__queue_t;

/* Downloads in flight to the lower tiers (engine.h, kv_download_async): a
 * published block's copy, its key, and its pool references (block and
 * twin pinned until the copy has landed); or a tier hit's upload
 * (kv_upload_async: block -1, its slot busy, its target up_block and twin
 * up_lblock pinned until its fence has been read: a failed one is
 * withdrawn, ifd__uploads_failed). */
typedef struct {
    ifd_kvhash_t hash, parent; /* the block's chain hash and its parent's (kvdisk.h) */
    uint64_t salt;
    int32_t block, lblock; /* pinned (lblock: -1 without a local pool) */
    int32_t up_block, up_lblock; /* an upload's target (global ids), pinned; -1 */
    uint64_t ticket;
} ifd__copy_t;

/* A tier hit's block whose upload failed: still pinned (block, lblock) until
 * the sequences holding it have been failed. */
typedef struct {
    int32_t block, lblock;
    int err;
} ifd__bad_upload_t;

struct ifd_engine {
    ifd_engine_params_t p;
    int32_t *eos_ids;
    ifd_engine_model_t model;
    ifd_kvpool_t *pool;
    ifd_kvpool_t *lpool; /* p.local_pool */
    bool all_local;      /* one pool, every layer local: blocks before the window are released */
    void *stage;         /* a staged disk tier without a host tier: one block's host copy */
    /* the copies in flight (a ring of copy_slots, FIFO from copy_head;
     * the oldest waited for past it), their tokens [copy_slots * block_size]
     * and pinned host slots [copy_slots * kv_data_bytes]; made on the first copy */
    ifd__copy_t *copies;
    int32_t *copy_tokens;
    uint8_t *copy_mem;
    int copy_slots, copy_head, copy_n;
    bool up_wait;       /* uploads enqueued: the next forward waits for up_ticket */
    uint64_t up_ticket; /* the newest upload's fence */
    bool up_wait_step;  /* this step's forward waited for uploads */
    ifd__bad_upload_t *up_bad; /* failed uploads not yet answered (ifd__uploads_failed) */
    int up_bad_n, up_bad_cap;
    bool copies_off; /* no ring (copy_slots < 0, or it could not be made): synchronous copies */
    ifd_engine_callbacks_t cb;
    int block_size;
    int32_t pool_blocks;        /* blocks on our device */
    uint64_t local_block_bytes; /* K+V bytes of one block in every local layer */
    ifd__queue_t running, waiting;
    ifd__clients_t clients;
    bool kv_starved; /* the last admission found no blocks for a client below its share */
    ifd_sampler_t *sampler;
    uint64_t arrivals;
    /* batch buffers, sized for max_batched_tokens tokens and max_seqs sequences */
    int32_t *b_tokens, *b_pos, *b_seq, *b_rows, *b_tables, *b_ltables;
    int32_t *b_last;      /* ifd_batch_t.kv_last */
    const float **b_embd; /* ifd_batch_t.embd */
    uint64_t *lkeys;      /* admission: the global twins' keys of a hit's window */
    int32_t lkeys_cap;
    int64_t *b_slot, *b_lslot;
    int b_tables_cap;
    float *logits;
    int logits_rows; /* rows e->logits holds: max_seqs, + IFD_ENGINE_PLP_ROWS once needed */
    ifd_sample_result_t *plp_res; /* [IFD_ENGINE_PLP_ROWS], with the larger logits */
    /* room of plp_res past IFD_SAMPLER_INLINE_LOGPROBS: plp_cap entries,
     * grown to the widest chunk (rows x top) asked so far */
    int32_t *plp_ids;
    float *plp_lps;
    size_t plp_cap;
    /* device sampling (model.forward_sample), per sampled row */
    ifd_sample_row_t *s_rows;
    ifd_sampling_params_t *s_params; /* a row's params under min_tokens */
    ifd_sampler_history_t *s_hist;
    int32_t *s_tok;
    ifd_sample_result_t *s_res; /* a device row's logprobs (sampled or prompt rows) */
    ifd__seq_t **sched;
    bool sched_decodes;    /* this step carries decodes (feeds decode_ema) */
    double decode_ema;     /* mean tokens of recent steps with decodes; 0 before the first */
    double prefill_ms_tok; /* recent forward ms per token of prefill-only steps; 0: none yet */
    ifd_engine_stats_t st;
};

static double ifd__ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

ifd_engine_params_t ifd_engine_default_params(void)
{
    ifd_engine_params_t p = {.eos_ids = NULL,
                             .n_eos_ids = 0,
                             .max_batched_tokens = 256,
                             .max_seqs = 64,
                             .prefill_cap = 0,
                             .worker = 0,
                             .device = 0};
    return p;
}

/* ---- queues ---------------------------------------------------------------- */

/* s joins (d 1) or leaves (d -1) queue q: its client's counts follow. */
static void ifd__q_count(ifd__queue_t *q, const ifd__seq_t *s, int d)
{
    ifd__client_t *c = &q->cl->v[s->cslot];
    const bool had = c->running + c->waiting > 0;
    if (q->running)
        c->running += d;
    else
        c->waiting += d;
    IFD_ASSERT(c->running >= 0 && c->waiting >= 0);
    q->cl->active += (int)(c->running + c->waiting > 0) - (int)had;
}

static int ifd__q_insert(ifd__queue_t *q, int at, ifd__seq_t *s)
{
    if (q->n == q->cap) {
        int cap = q->cap ? q->cap * 2 : 16;
        ifd__seq_t **v = realloc(q->v, (size_t)cap * sizeof *v);
        if (!v)
            return IFD_ENOMEM;
        q->v = v;
        q->cap = cap;
    }
    memmove(q->v + at + 1, q->v + at, (size_t)(q->n - at) * sizeof *q->v);
    q->v[at] = s;
    q->n++;
    ifd__q_count(q, s, 1);
    return 0;
}

static void ifd__q_remove_at(ifd__queue_t *q, int at)
{
    ifd__q_count(q, q->v[at], -1);
    memmove(q->v + at, q->v + at + 1, (size_t)(q->n - at - 1) * sizeof *q->v);
    q->n--;
}

/* The slot of client id in cl: its own while it has sequences here, else a
 * free one (or a new one). 0 or IFD_ENOMEM. The caller inserts a sequence
 * of it before anything else looks for a slot. */
static int ifd__client_slot(ifd__clients_t *cl, uint32_t id, int32_t *out)
{
    int free_at = -1;
    for (int i = 0; i < cl->n; i++) {
        const ifd__client_t *c = &cl->v[i];
        if (c->running + c->waiting > 0 && c->id == id) {
            *out = i;
            return 0;
        }
        if (c->running + c->waiting == 0 && free_at < 0)
            free_at = i;
    }
    if (free_at < 0) {
        if (cl->n == cl->cap) {
            int cap = cl->cap ? cl->cap * 2 : 8;
            ifd__client_t *v = realloc(cl->v, (size_t)cap * sizeof *v);
            if (!v)
                return IFD_ENOMEM;
            cl->v = v;
            cl->cap = cap;
        }
        free_at = cl->n++;
    }
    cl->v[free_at] = (ifd__client_t){id, 0, 0};
    *out = free_at;
    return 0;
}

/* Waiting order: higher priority first, then earlier arrival. */
static int ifd__waiting_pos(const ifd__queue_t *q, const ifd__seq_t *s)
{
    int i = 0;
    while (i < q->n && (q->v[i]->priority > s->priority ||
                        (q->v[i]->priority == s->priority && q->v[i]->arrival < s->arrival)))
        i++;
    return i;
}

/* ---- images (engine.h, ifd_engine_image_t) ------------------------------------ */

/* IFD_EINVAL, with the reason formatted into why (n bytes) when why is not
 * NULL. */
__attribute__((format(printf, 3, 4))) static int ifd__why(char *why, size_t n, const char *fmt, ...)
{
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return IFD_EINVAL;
}

/* r's images follow engine.h's rules for this engine: 0, or IFD_EINVAL
 * with the broken rule in why. */
static int ifd__images_check(const ifd_engine_t *e, const ifd_engine_request_t *r, char *why,
                             size_t n)
{
    if (!r->images || r->n_images < 0)
        return ifd__why(why, n, "bad image list");
    if (e->model.n_embd <= 0)
        return ifd__why(why, n, "the model takes no image rows");
    if (r->prompt_logprobs > 0)
        return ifd__why(why, n, "prompt_logprobs with images");
    int32_t end = 0;
    for (int32_t i = 0; i < r->n_images; i++) {
        const ifd_engine_image_t *im = &r->images[i];
        if (im->len > e->p.max_batched_tokens)
            return ifd__why(why, n,
                            "image %d has %d tokens, more than max_batched_tokens (%d): one "
                            "image is prefilled in one step",
                            (int)i, (int)im->len, (int)e->p.max_batched_tokens);
        if (im->start < end || im->len < 1 || im->start > r->n_prompt - im->len)
            return ifd__why(why, n, "image %d is not inside the prompt after the one before",
                            (int)i);
        if (!im->embd)
            return ifd__why(why, n, "image %d has no rows", (int)i);
        end = im->start + im->len;
    }
    return 0;
}

/* Copies r's images (rows included) into s and derives s->keys (cap_tokens,
 * the first len from s->tokens). 0 or IFD_ENOMEM. */
static int ifd__images_copy(const ifd_engine_t *e, ifd__seq_t *s, const ifd_engine_request_t *r,
                            int32_t len)
{
    const size_t E = (size_t)e->model.n_embd;
    size_t rows = 0;
    for (int32_t i = 0; i < r->n_images; i++)
        rows += (size_t)r->images[i].len;
    s->images = malloc((size_t)r->n_images * sizeof *s->images);
    s->image_rows = malloc(rows * E * sizeof(float));
    s->keys = malloc((size_t)s->cap_tokens * sizeof *s->keys);
    if (!s->images || !s->image_rows || !s->keys)
        return IFD_ENOMEM;
    s->n_images = r->n_images;
    memcpy(s->keys, s->tokens, (size_t)len * sizeof *s->keys);
    float *dst = s->image_rows;
    for (int32_t i = 0; i < r->n_images; i++) {
        ifd_engine_image_t *im = &s->images[i];
        *im = r->images[i];
        memcpy(dst, im->embd, (size_t)im->len * E * sizeof(float));
        im->embd = dst;
        dst += (size_t)im->len * E;
        ifd_kvkey_image_span(s->keys, s->tokens, len, im->start, im->len, im->hash);
    }
    return 0;
}

/* The image of s holding position p, or NULL. */
static const ifd_engine_image_t *ifd__image_at(const ifd__seq_t *s, int32_t p)
{
    for (int32_t i = 0; i < s->n_images && s->images[i].start <= p; i++)
        if (p < s->images[i].start + s->images[i].len)
            return &s->images[i];
    return NULL;
}

/* A chunk of n tokens of s from n_computed, fitted to its images: cut before
 * an image it would split, or, when it begins inside or at one it cannot
 * hold, stretched to the image's end when room allows (an image is computed
 * in one step). 0: s cannot run this step. */
static int32_t ifd__image_fit(const ifd__seq_t *s, int32_t n, int32_t room)
{
    const ifd_engine_image_t *im = n > 0 ? ifd__image_at(s, s->n_computed + n - 1) : NULL;
    if (!im || s->n_computed + n == im->start + im->len)
        return n;
    if (im->start > s->n_computed)
        return im->start - s->n_computed;
    const int32_t whole = im->start + im->len - s->n_computed;
    return whole <= room ? whole : 0;
}

/* ---- sequences --------------------------------------------------------------- */

static void ifd__seq_free(ifd__seq_t *s)
{
    if (!s)
        return;
    if (s->keys != s->tokens)
        free(s->keys);
    free(s->tokens);
    free(s->images);
    free(s->image_rows);
    free(s->blocks);
    free(s->lblocks);
    free(s->bias);
    free(s->allowed);
    free(s->lp_ids);
    free(s->top_ids);
    free(s->top_lps);
    free(s->min_bias);
    free(s->stop_ids);
    ifd_constraint_destroy(s->sampling.constraint);
    free(s);
}

/* Frees a staged load's host buffers (one allocation behind the array). */
static void ifd__free_bufs(ifd__seq_t *s)
{
    if (s->load_bufs)
        free(s->load_bufs[0]);
    free(s->load_bufs);
    s->load_bufs = NULL;
}

/* Ends s's disk load, if any, and gives its blocks back unused. */
static void ifd__disk_drop(ifd_engine_t *e, ifd__seq_t *s)
{
    if (!s->load)
        return;
    ifd_kvdisk_load_finish(s->load, false);
    s->load = NULL;
    ifd__free_bufs(s);
    ifd_kvpool_unref(e->pool, e->p.worker, s->blocks + s->n_blocks, s->load_n);
    if (e->lpool)
        ifd_kvpool_unref(e->lpool, e->p.worker, s->lblocks + s->n_blocks, s->load_n);
    s->load_n = 0;
}

static void ifd__seq_release(ifd_engine_t *e, ifd__seq_t *s)
{
    ifd__disk_drop(e, s);
    if (s->n_blocks > s->g_first) {
        int rc = ifd_kvpool_unref(e->pool, e->p.worker, s->blocks + s->g_first,
                                  s->n_blocks - s->g_first);
        if (rc)
            IFD_ERROR("engine: releasing %d blocks of request %llu: %s", s->n_blocks - s->g_first,
                      (unsigned long long)s->id, ifd_strerror(rc));
    }
    if (e->lpool && s->n_blocks > s->l_first) {
        int rc = ifd_kvpool_unref(e->lpool, e->p.worker, s->lblocks + s->l_first,
                                  s->n_blocks - s->l_first);
        if (rc)
            IFD_ERROR("engine: releasing %d local blocks of request %llu: %s",
                      s->n_blocks - s->l_first, (unsigned long long)s->id, ifd_strerror(rc));
    }
    s->n_blocks = 0;
    s->g_first = 0;
    s->n_published = 0;
    s->n_computed = 0;
    s->dhash = (ifd_kvhash_t){0, 0};
    s->l_first = 0;
    s->n_lpublished = 0;
    s->lpublish_failed = false;
    s->n_draft = 0;
    if (s->dseq && e->p.drafter.release)
        e->p.drafter.release(e->p.drafter.ctx, s->dseq);
    s->dseq = NULL;
}

static int ifd__seq_reserve_blocks(ifd__seq_t *s, int32_t n)
{
    if (n <= s->cap_blocks)
        return 0;
    int32_t cap = s->cap_blocks ? s->cap_blocks : 8;
    while (cap < n)
        cap *= 2;
    int32_t *b = realloc(s->blocks, (size_t)cap * sizeof *b);
    if (!b)
        return IFD_ENOMEM;
    s->blocks = b;
    int32_t *lb = realloc(s->lblocks, (size_t)cap * sizeof *lb);
    if (!lb)
        return IFD_ENOMEM;
    s->lblocks = lb;
    s->cap_blocks = cap;
    return 0;
}

static void ifd__finish(ifd_engine_t *e, ifd__seq_t *s, ifd_finish_reason_t reason)
{
    ifd__seq_release(e, s);
    ifd_engine_usage_t u = {s->n_prompt, s->n_gen, s->cached_tokens,
                            reason == IFD_FINISH_ERROR ? s->err : 0};
    e->st.finished++;
    if (e->cb.on_finish)
        e->cb.on_finish(e->cb.ctx, s->id, reason, &u);
    ifd__seq_free(s);
}

/* ---- create / add / cancel ------------------------------------------------- */

int ifd_engine_create(ifd_engine_t **out, const ifd_engine_params_t *p,
                      const ifd_engine_model_t *model, ifd_kvpool_t *pool,
                      const ifd_engine_callbacks_t *cb)
{
    if (!p || p->max_batched_tokens < 1 || p->max_seqs < 1 || !model || !model->forward ||
        model->n_vocab < 1 || !pool || p->n_eos_ids < 0 || (p->n_eos_ids && !p->eos_ids) ||
        ifd_spec_check(&p->spec) != 0 || (p->spec.method == IFD_SPEC_DRAFT && !p->drafter.propose) ||
        p->copy_slots > IFD_ENGINE_COPY_SLOTS_MAX)
        return IFD_EINVAL;
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    if (p->local_pool) {
        ifd_kvpool_params_t lg;
        ifd_kvpool_geometry(p->local_pool, &lg);
        if (lg.block_size != g.block_size || model->sliding_window <= 0 ||
            p->device >= lg.n_devices)
            return IFD_EINVAL;
    }
    if (p->disk && ifd_kvdisk_local_pool(p->disk) != p->local_pool)
        return IFD_EINVAL; /* its files would lack the twins, or hold some for nothing */
    if (p->host && model->kv_download && ifd_kvhost_data_bytes(p->host) != model->kv_data_bytes)
        return IFD_EINVAL;
    if (p->disk && ifd_kvdisk_staged(p->disk) &&
        (!model->kv_download || ifd_kvdisk_data_bytes(p->disk) != model->kv_data_bytes))
        return IFD_EINVAL; /* a staged tier needs the adapter's copies, of its blocks' size */
    ifd_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return IFD_ENOMEM;
    e->p = *p;
    e->running.cl = e->waiting.cl = &e->clients;
    e->running.running = true;
    if (p->n_eos_ids) {
        e->eos_ids = malloc((size_t)p->n_eos_ids * sizeof *e->eos_ids);
        if (!e->eos_ids) {
            free(e);
            return IFD_ENOMEM;
        }
        memcpy(e->eos_ids, p->eos_ids, (size_t)p->n_eos_ids * sizeof *e->eos_ids);
    }
    e->p.eos_ids = e->eos_ids;
    e->model = *model;
    e->pool = pool;
    e->lpool = p->local_pool;
    e->copy_slots = p->copy_slots ? p->copy_slots : IFD_ENGINE_COPY_SLOTS;
    e->copies_off = e->copy_slots < 0; /* no ring: synchronous copies */
    if (p->disk && ifd_kvdisk_staged(p->disk) && !(e->stage = malloc(model->kv_data_bytes))) {
        free(e->eos_ids);
        free(e);
        return IFD_ENOMEM;
    }
    e->all_local = !p->local_pool && model->sliding_window > 0 && model->n_layers > 0 &&
                   model->n_local_layers >= model->n_layers;
    if (cb)
        e->cb = *cb;
    e->block_size = g.block_size;
    e->pool_blocks = (int32_t)g.n_blocks;
    e->local_block_bytes = 2 * ifd_kvpool_block_bytes(&g) *
                           (uint64_t)(model->n_local_layers > 0 ? model->n_local_layers : 0);
    int rc = ifd_sampler_create(model->n_vocab, &e->sampler);
    if (rc) {
        free(e->stage);
        free(e->eos_ids);
        free(e);
        return rc;
    }
    size_t nt = (size_t)p->max_batched_tokens, ns = (size_t)p->max_seqs;
    e->b_tokens = malloc(nt * sizeof(int32_t));
    e->b_pos = malloc(nt * sizeof(int32_t));
    e->b_seq = malloc(nt * sizeof(int32_t));
    e->b_slot = malloc(nt * sizeof(int64_t));
    e->b_lslot = malloc(nt * sizeof(int64_t));
    e->b_last = malloc(nt * sizeof(int32_t));
    e->b_embd = malloc(nt * sizeof *e->b_embd);
    /* logit rows: samples, prompt logprobs, proposals */
    const size_t nr = ns + IFD_ENGINE_PLP_ROWS + IFD_ENGINE_SPEC_ROWS;
    e->b_rows = malloc(nr * sizeof(int32_t));
    e->sched = malloc(ns * sizeof *e->sched);
    e->logits = malloc(ns * (size_t)model->n_vocab * sizeof(float));
    e->logits_rows = (int)ns;
    e->s_rows = malloc(nr * sizeof *e->s_rows);
    e->s_hist = malloc(nr * sizeof *e->s_hist);
    e->s_params = malloc(nr * sizeof *e->s_params);
    e->s_tok = malloc(nr * sizeof *e->s_tok);
    e->s_res = malloc(nr * sizeof *e->s_res);
    if (!e->b_tokens || !e->b_pos || !e->b_seq || !e->b_slot || !e->b_lslot || !e->b_rows ||
        !e->b_last || !e->b_embd || !e->sched || !e->logits || !e->s_rows || !e->s_hist ||
        !e->s_params || !e->s_tok || !e->s_res) {
        ifd_engine_destroy(e);
        return IFD_ENOMEM;
    }
    e->st.max_batched_tokens = p->max_batched_tokens;
    *out = e;
    return 0;
}

static void ifd__copies_poll(ifd_engine_t *e, int wait);
static void ifd__copies_free(ifd_engine_t *e);

void ifd_engine_destroy(ifd_engine_t *e)
{
    if (!e)
        return;
    ifd__copies_poll(e, INT_MAX); /* the tiers get every published block */
    for (int i = 0; i < e->up_bad_n; i++) { /* failed uploads' pins (their holders go below) */
        ifd_kvpool_unref(e->pool, e->p.worker, &e->up_bad[i].block, 1);
        if (e->up_bad[i].lblock >= 0)
            ifd_kvpool_unref(e->lpool, e->p.worker, &e->up_bad[i].lblock, 1);
    }
    free(e->up_bad);
    ifd__copies_free(e);
    for (int i = 0; i < e->running.n; i++) {
        ifd__seq_release(e, e->running.v[i]);
        ifd__seq_free(e->running.v[i]);
    }
    for (int i = 0; i < e->waiting.n; i++) {
        ifd__seq_release(e, e->waiting.v[i]);
        ifd__seq_free(e->waiting.v[i]);
    }
    free(e->running.v);
    free(e->waiting.v);
    free(e->clients.v);
    free(e->stage);
    ifd_sampler_destroy(e->sampler);
    free(e->eos_ids);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_slot);
    free(e->b_lslot);
    free(e->b_last);
    free(e->b_embd);
    free(e->b_rows);
    free(e->b_tables);
    free(e->b_ltables);
    free(e->lkeys);
    free(e->sched);
    free(e->logits);
    free(e->plp_res);
    free(e->plp_ids);
    free(e->plp_lps);
    free(e->s_rows);
    free(e->s_hist);
    free(e->s_params);
    free(e->s_tok);
    free(e->s_res);
    free(e);
}

static ifd__seq_t *ifd__find(const ifd_engine_t *e, uint64_t id, ifd__queue_t **q, int *at)
{
    ifd__queue_t *qs[2] = {(ifd__queue_t *)&e->running, (ifd__queue_t *)&e->waiting};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < qs[k]->n; i++) {
            if (qs[k]->v[i]->id == id) {
                if (q)
                    *q = qs[k];
                if (at)
                    *at = i;
                return qs[k]->v[i];
            }
        }
    }
    return NULL;
}

/* min_tokens: the bias that keeps stop and EOS ids from being sampled. */
static int ifd__min_tokens_init(ifd_engine_t *e, ifd__seq_t *s, int32_t min_tokens)
{
    uint32_t n_eos = s->ignore_eos ? 0 : (uint32_t)e->p.n_eos_ids;
    uint32_t n = s->sampling.n_logit_bias + (uint32_t)s->n_stop_ids + n_eos;
    s->min_tokens = min_tokens;
    if (n == s->sampling.n_logit_bias)
        return 0; /* nothing to suppress */
    s->min_bias = malloc(n * sizeof *s->min_bias);
    if (!s->min_bias)
        return IFD_ENOMEM;
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->sampling.n_logit_bias; i++)
        s->min_bias[k++] = s->sampling.logit_bias[i];
    for (int32_t i = 0; i < s->n_stop_ids; i++)
        s->min_bias[k++] = (ifd_logit_bias_t){s->stop_ids[i], -INFINITY};
    for (uint32_t i = 0; i < n_eos; i++)
        s->min_bias[k++] = (ifd_logit_bias_t){e->p.eos_ids[i], -INFINITY};
    s->n_min_bias = k;
    return 0;
}

/* Samples s's next token from lg: under min_tokens with the suppressing
 * bias first, and without it when that leaves nothing (a grammar that
 * allows only an end token has the last word). */
static int ifd__sample_seq(ifd_engine_t *e, ifd__seq_t *s, const float *lg,
                           const ifd_sampler_history_t *h, ifd_sample_result_t *res)
{
    if (s->n_gen < s->min_tokens && s->min_bias) {
        ifd_sampling_params_t p = s->sampling;
        p.logit_bias = s->min_bias;
        p.n_logit_bias = s->n_min_bias;
        int rc = ifd_sampler_sample(e->sampler, &p, lg, h, (uint64_t)s->n_tokens, res);
        if (rc != IFD_EINVAL || (!s->sampling.constraint && !s->sampling.allowed))
            return rc;
    }
    return ifd_sampler_sample(e->sampler, &s->sampling, lg, h, (uint64_t)s->n_tokens, res);
}

int ifd_engine_check(const ifd_engine_t *e, const ifd_engine_request_t *r, char *why, size_t n)
{
    if (!r || !r->prompt || r->n_prompt < 1 || r->n_generated < 0 ||
        (r->n_generated > 0 && !r->generated) || r->max_tokens < 1 || r->n_stop_ids < 0 ||
        r->prompt_logprobs < 0 || r->prompt_logprobs > 1 + e->model.n_vocab)
        return ifd__why(why, n, "invalid request (tokens, length or sampling parameters)");
    int64_t len = (int64_t)r->n_prompt + r->n_generated;
    if (len >= e->model.n_ctx)
        return ifd__why(why, n, "%lld tokens do not fit the context (%d)", (long long)len,
                        (int)e->model.n_ctx);
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->model.n_vocab)
            return ifd__why(why, n, "prompt token %d is not in the vocabulary", (int)i);
    for (int32_t i = 0; i < r->n_generated; i++)
        if (r->generated[i] < 0 || r->generated[i] >= e->model.n_vocab)
            return ifd__why(why, n, "generated token %d is not in the vocabulary", (int)i);
    ifd_sampling_params_t chk = r->sampling; /* with the logprob ids it will take */
    chk.lp_ids = r->lp_ids;
    chk.n_lp_ids = r->n_lp_ids;
    if (ifd_sampling_params_check(&chk, e->model.n_vocab) != 0)
        return ifd__why(why, n, "invalid sampling parameters");
    return r->n_images ? ifd__images_check(e, r, why, n) : 0;
}

int ifd_engine_add(ifd_engine_t *e, const ifd_engine_request_t *r)
{
    if (ifd_engine_check(e, r, NULL, 0))
        return IFD_EINVAL;
    int64_t len = (int64_t)r->n_prompt + r->n_generated;
    if (ifd__find(e, r->id, NULL, NULL))
        return IFD_EEXIST;
    ifd__seq_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    s->id = r->id;
    s->cap_tokens = (int32_t)len +
                    (r->max_tokens - r->n_generated > 0 ? r->max_tokens - r->n_generated : 0) + 1;
    if (s->cap_tokens > e->model.n_ctx + 1)
        s->cap_tokens = e->model.n_ctx + 1;
    s->tokens = malloc((size_t)s->cap_tokens * sizeof *s->tokens);
    s->sampling = r->sampling;
    s->sampling.constraint = NULL; /* taken over only once the add succeeds */
    s->sampling.allowed = NULL;
    if (r->n_allowed_ids) {
        int arc = r->allowed_ids ? ifd_sampling_allowed_mask(r->allowed_ids, r->n_allowed_ids,
                                                             e->model.n_vocab, &s->allowed)
                                 : IFD_EINVAL;
        if (arc) {
            ifd__seq_free(s);
            return arc == IFD_ENOMEM ? arc : IFD_EINVAL;
        }
        s->sampling.allowed = s->allowed;
    }
    s->sampling.lp_ids = NULL;
    s->sampling.n_lp_ids = 0;
    if (r->n_lp_ids) { /* ranges checked with the sampling parameters above */
        if (!(s->lp_ids = malloc(r->n_lp_ids * sizeof *s->lp_ids))) {
            ifd__seq_free(s);
            return IFD_ENOMEM;
        }
        memcpy(s->lp_ids, r->lp_ids, r->n_lp_ids * sizeof *s->lp_ids);
        s->sampling.lp_ids = s->lp_ids;
        s->sampling.n_lp_ids = r->n_lp_ids;
    }
    /* room for a top k past the inline 20, or for as many logprob_token_ids */
    const int64_t want = r->sampling.n_logprobs < 0                  ? 0
                         : r->n_lp_ids                               ? (int64_t)r->n_lp_ids
                         : r->sampling.n_logprobs < e->model.n_vocab ? r->sampling.n_logprobs
                                                                     : e->model.n_vocab;
    if (want > IFD_SAMPLER_INLINE_LOGPROBS) {
        s->top_cap = (int32_t)want;
        s->top_ids = malloc((size_t)s->top_cap * sizeof *s->top_ids);
        s->top_lps = malloc((size_t)s->top_cap * sizeof *s->top_lps);
        if (!s->top_ids || !s->top_lps) {
            ifd__seq_free(s);
            return IFD_ENOMEM;
        }
    }
    if (r->sampling.n_logit_bias) {
        s->bias = malloc(r->sampling.n_logit_bias * sizeof *s->bias);
        if (s->bias)
            memcpy(s->bias, r->sampling.logit_bias, r->sampling.n_logit_bias * sizeof *s->bias);
        s->sampling.logit_bias = s->bias;
    }
    if (r->n_stop_ids) {
        s->stop_ids = malloc((size_t)r->n_stop_ids * sizeof *s->stop_ids);
        if (s->stop_ids)
            memcpy(s->stop_ids, r->stop_ids, (size_t)r->n_stop_ids * sizeof *s->stop_ids);
    }
    if (!s->tokens || (r->sampling.n_logit_bias && !s->bias) || (r->n_stop_ids && !s->stop_ids)) {
        ifd__seq_free(s);
        return IFD_ENOMEM;
    }
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s->tokens);
    if (r->n_generated)
        memcpy(s->tokens + r->n_prompt, r->generated, (size_t)r->n_generated * sizeof *s->tokens);
    s->keys = s->tokens;
    if (r->n_images && ifd__images_copy(e, s, r, (int32_t)len)) {
        ifd__seq_free(s);
        return IFD_ENOMEM;
    }
    s->n_tokens = (int32_t)len;
    s->n_prompt = r->n_prompt;
    s->n_gen = r->n_generated;
    s->n_stop_ids = r->n_stop_ids;
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->use_cache = r->use_cache;
    s->priority = r->priority;
    s->client = r->client;
    s->salt = r->salt;
    s->plp_top = r->prompt_logprobs - 1;
    s->plp_next = 1;
    s->arrival = e->arrivals++;
    int rc = ifd_spec_resolve(&s->spec, &r->spec, &e->p.spec, s->use_cache,
                              e->p.drafter.propose != NULL);
    if (rc || (r->min_tokens > s->n_gen && (rc = ifd__min_tokens_init(e, s, r->min_tokens)))) {
        ifd__seq_free(s);
        return rc;
    }
    rc = ifd__client_slot(&e->clients, s->client, &s->cslot);
    if (!rc)
        rc = ifd__q_insert(&e->waiting, ifd__waiting_pos(&e->waiting, s), s);
    if (rc) {
        ifd__seq_free(s);
        return rc;
    }
    s->sampling.constraint = r->sampling.constraint;
    return 0;
}

int ifd_engine_cancel(ifd_engine_t *e, uint64_t id)
{
    ifd__seq_t *s = ifd__find(e, id, NULL, NULL);
    if (!s)
        return IFD_ENOTFOUND;
    s->cancelled = true;
    return 0;
}

bool ifd_engine_idle(const ifd_engine_t *e)
{
    return e->running.n == 0 && e->waiting.n == 0 && e->copy_n == 0;
}

/* ---- scheduling ------------------------------------------------------------ */

/* Preempts running[at]: its blocks go back to the pool (published ones stay
 * cached and may serve it again) and it returns to the front of the waiting
 * queue among its priority. */
static int ifd__preempt(ifd_engine_t *e, int at)
{
    ifd__seq_t *s = e->running.v[at];
    ifd__q_remove_at(&e->running, at);
    ifd__seq_release(e, s);
    e->st.preemptions++;
    IFD_DEBUG("engine: preempted request %llu (%d tokens)", (unsigned long long)s->id, s->n_tokens);
    /* ahead of every waiting request of the same priority */
    int i = 0;
    while (i < e->waiting.n && e->waiting.v[i]->priority > s->priority)
        i++;
    return ifd__q_insert(&e->waiting, i, s);
}

/* Blocks needed to hold positions [0, n). */
static int32_t ifd__blocks_for(const ifd_engine_t *e, int32_t n)
{
    return (n + e->block_size - 1) / e->block_size;
}

/* The first block a query at position q reads in local layers. */
static int32_t ifd__local_lo(const ifd_engine_t *e, int32_t q)
{
    int32_t lo = q - e->model.sliding_window + 1;
    return lo > 0 ? lo / e->block_size : 0;
}

/* Grows s's blocks to cover `upto` positions (and, with a local pool, its
 * local twins from the window of the query at n_computed on: a sequence
 * that recomputes from an earlier position gets back the twins it
 * released). All or nothing: 0 or IFD_ENOBLOCKS/IFD_ENOMEM. */
static int ifd__grow_once(ifd_engine_t *e, ifd__seq_t *s, int32_t upto)
{
    int32_t need = ifd__blocks_for(e, upto);
    int32_t lo = e->lpool ? ifd__local_lo(e, s->n_computed) : 0;
    if (need <= s->n_blocks && (!e->lpool || lo >= s->l_first))
        return 0;
    if (need < s->n_blocks)
        need = s->n_blocks;
    int rc = ifd__seq_reserve_blocks(s, need);
    if (rc)
        return rc;
    const int32_t n_new = need - s->n_blocks;
    if (n_new > 0 &&
        (rc = ifd_kvpool_alloc(e->pool, e->p.worker, e->p.device, n_new, s->blocks + s->n_blocks)))
        return rc;
    if (e->lpool) {
        const int32_t n_back = lo < s->l_first ? s->l_first - lo : 0;
        rc = n_back ? ifd_kvpool_alloc(e->lpool, e->p.worker, e->p.device, n_back, s->lblocks + lo)
                    : 0;
        if (rc == 0 && n_new > 0 &&
            (rc = ifd_kvpool_alloc(e->lpool, e->p.worker, e->p.device, n_new,
                                   s->lblocks + s->n_blocks)) &&
            n_back)
            ifd_kvpool_unref(e->lpool, e->p.worker, s->lblocks + lo, n_back);
        if (rc) {
            if (n_new > 0)
                ifd_kvpool_unref(e->pool, e->p.worker, s->blocks + s->n_blocks, n_new);
            return rc;
        }
        if (n_back) {
            /* recomputed twins are new blocks: republishing starts again there */
            s->l_first = lo;
            if (s->n_lpublished > lo)
                s->n_lpublished = lo;
        }
    }
    s->n_blocks = need;
    return 0;
}

/* ifd__grow; a pool whose free blocks are pinned by copies in flight gets
 * them back (the copies waited for) before anyone is preempted. */
static int ifd__grow(ifd_engine_t *e, ifd__seq_t *s, int32_t upto)
{
    int rc = ifd__grow_once(e, s, upto);
    if (rc == IFD_ENOBLOCKS && e->copy_n > 0) {
        ifd__copies_poll(e, INT_MAX);
        rc = ifd__grow_once(e, s, upto);
    }
    return rc;
}

/* All layers local, one pool: returns the blocks no query of s reads any
 * more to the pool, but the last published one, which the next block to be
 * published names as its parent (a window narrower than a block would
 * otherwise end s's publishing). s recomputes nothing below n_computed
 * (use_cache: the caller's condition), so they are never needed again. */
static void ifd__release_global(ifd_engine_t *e, ifd__seq_t *s)
{
    int32_t first_live = ifd__local_lo(e, s->n_computed);
    if (first_live > s->n_blocks)
        first_live = s->n_blocks;
    const int32_t parent = s->n_published > 0 ? s->n_published - 1 : 0;
    if (!s->publish_failed && first_live > parent)
        first_live = parent;
    if (first_live <= s->g_first)
        return;
    int rc =
        ifd_kvpool_unref(e->pool, e->p.worker, s->blocks + s->g_first, first_live - s->g_first);
    if (rc)
        IFD_ERROR("engine: releasing blocks %d..%d of request %llu: %s", s->g_first, first_live - 1,
                  (unsigned long long)s->id, ifd_strerror(rc));
    s->g_first = first_live;
}

/* Returns what no query of s reads any more: its local twins to the local
 * pool, or with every layer local its blocks to the one pool. */
static void ifd__release_window(ifd_engine_t *e, ifd__seq_t *s)
{
    if (e->all_local) {
        ifd__release_global(e, s);
        return;
    }
    if (!e->lpool)
        return;
    int32_t first_live = ifd__local_lo(e, s->n_computed);
    if (first_live > s->n_blocks)
        first_live = s->n_blocks;
    if (first_live <= s->l_first)
        return;
    int rc =
        ifd_kvpool_unref(e->lpool, e->p.worker, s->lblocks + s->l_first, first_live - s->l_first);
    if (rc)
        IFD_ERROR("engine: releasing local blocks %d..%d of request %llu: %s", s->l_first,
                  first_live - 1, (unsigned long long)s->id, ifd_strerror(rc));
    s->l_first = first_live;
}

/* Tokens s wants computed this step. */
static int32_t ifd__want(const ifd__seq_t *s)
{
    return s->n_tokens - s->n_computed;
}

/* s computes one generated token this step (anything else is prefill). */
static bool ifd__decoding(const ifd__seq_t *s)
{
    return ifd__want(s) == 1 && s->n_computed >= s->n_prompt;
}

/* s still owes prompt logprobs. */
static bool ifd__plp_owed(const ifd__seq_t *s)
{
    return s->plp_top >= 0 && s->plp_next < s->n_prompt;
}

/* Prompt-logprob rows of positions [from, from + n): positions p with
 * plp_next - 1 <= p <= n_prompt - 2 (row p scores the token at p + 1). */
static int32_t ifd__plp_rows(const ifd__seq_t *s, int32_t from, int32_t n)
{
    if (!ifd__plp_owed(s))
        return 0;
    int32_t lo = from > s->plp_next - 1 ? from : s->plp_next - 1;
    int32_t hi = from + n - 1 < s->n_prompt - 2 ? from + n - 1 : s->n_prompt - 2;
    return hi >= lo ? hi - lo + 1 : 0;
}

/* Cuts a chunk of n tokens of s so that its prompt-logprob rows fit the
 * step's *plp_left, and takes them from it. 0: s cannot run this step. */
static int32_t ifd__plp_fit(const ifd__seq_t *s, int32_t n, int *plp_left)
{
    if (!ifd__plp_owed(s))
        return n;
    if (n > *plp_left) /* rows <= tokens */
        n = *plp_left;
    *plp_left -= ifd__plp_rows(s, s->n_computed, n);
    return n > 0 ? n : 0;
}

/* Drops the local twins held in lblocks[from, to) (entries < 0 are none). */
/*
 * The local twins a global prefix hit of k blocks (s->blocks[0..k), held)
 * needs: those the window of the first recomputed query reads, looked up by
 * their global twins' keys and cut below a missing one
 * (ifd_kvpool_window_run). Returns the usable k (0: none) with
 * lblocks[l_first, k) held, or a negative error (nothing held).
 */
static int ifd__local_hit(ifd_engine_t *e, ifd__seq_t *s, int32_t k)
{
    if (k > e->lkeys_cap) {
        uint64_t *t = realloc(e->lkeys, (size_t)k * sizeof *t);
        if (!t)
            return IFD_ENOMEM;
        e->lkeys = t;
        e->lkeys_cap = k;
    }
    return ifd_kvpool_window_run(e->pool, e->lpool, e->p.worker, e->p.device,
                                 e->model.sliding_window, s->salt, s->keys, s->blocks, k,
                                 s->lblocks, e->lkeys, &s->l_first);
}

/* The prompt tokens an admission found cached, counted once per request. */
static void ifd__admit_account(ifd_engine_t *e, ifd__seq_t *s)
{
    if (s->admitted_once)
        return;
    s->cached_tokens = s->n_computed < s->n_prompt ? s->n_computed : s->n_prompt;
    e->st.cached_prompt_tokens += (uint64_t)s->cached_tokens;
    e->st.prompt_tokens += (uint64_t)s->n_prompt;
}

/* With every layer local (one pool whose blocks before the window are
 * released) the tier is off: a hit there is a chain from block 0 in the
 * pool, which disk blocks after a released head cannot extend. */
static bool ifd__disk_on(const ifd_engine_t *e)
{
    return e->p.disk && !e->all_local;
}

/* The disk tier goes through host copies (a device pool, kvdisk.h staged). */
static bool ifd__disk_staged(const ifd_engine_t *e)
{
    return ifd__disk_on(e) && ifd_kvdisk_staged(e->p.disk);
}

static ifd_kvhash_t ifd__disk_chain(const ifd_engine_t *e, const ifd__seq_t *s, int32_t n);
static int32_t ifd__local_twin(const ifd_engine_t *e, const ifd__seq_t *s, int32_t b);

/* The host tier is on when the model can copy blocks to and from it
 * (engine.h, kv_download: a device pool; with a local-layer pool the
 * copies hold the twins too). */
static bool ifd__host_on(const ifd_engine_t *e)
{
    return e->p.host && e->model.kv_download && e->model.kv_upload && !e->all_local;
}

/* The local pool's local id of twin lblock (a pool id), -1 for none. */
static int32_t ifd__ltwin_local(const ifd_engine_t *e, int32_t lblock)
{
    return e->lpool && lblock >= 0 ? ifd_kvpool_block_local(e->lpool, lblock) : -1;
}

/* Copies block `block` (device) and, with a local pool, its twin lblock
 * into buf (kv_data_bytes). A block without its twin (-1) there is not
 * copied: its data would be half of it. */
static bool ifd__download(ifd_engine_t *e, int32_t block, int32_t lblock, void *buf)
{
    if (e->lpool && lblock < 0)
        return false;
    int rc = e->model.kv_download(e->model.ctx, ifd_kvpool_block_local(e->pool, block),
                                  ifd__ltwin_local(e, lblock), buf);
    if (rc)
        IFD_WARN("engine: copying block %d to host memory: %s", block, ifd_strerror(rc));
    return rc == 0;
}

/* Copies just-published block `block` (chain hash *hash; local twin
 * lblock or -1) into the host tier: its copy there, or NULL (no memory,
 * no twin; a failed copy forgets the entry, counted as dropped). */
static const void *ifd__host_put(ifd_engine_t *e, int32_t block, int32_t lblock,
                                 const ifd_kvhash_t *hash, uint64_t salt, const int32_t *tokens)
{
    void *buf = ifd_kvhost_put(e->p.host, hash, salt, tokens);
    if (buf && !ifd__download(e, block, lblock, buf)) {
        ifd_kvhost_forget(e->p.host, hash);
        ifd_kvpool_tier_add(e->pool, IFD_KVTIER_HOST_DROPPED, 1);
        buf = NULL;
    }
    return buf;
}

/* A lost copy: counted by the tiers that would have had it. */
static void ifd__copy_dropped(ifd_engine_t *e)
{
    if (ifd__host_on(e))
        ifd_kvpool_tier_add(e->pool, IFD_KVTIER_HOST_DROPPED, 1);
    if (ifd__disk_staged(e))
        ifd_kvpool_tier_add(e->pool, IFD_KVTIER_DROPPED, 1);
}

static void ifd__copies_free(ifd_engine_t *e)
{
    IFD_ASSERT(e->copy_n == 0);
    if (e->copy_mem)
        e->model.kv_host_free(e->model.ctx, e->copy_mem);
    free(e->copies);
    free(e->copy_tokens);
    e->copies = NULL, e->copy_tokens = NULL, e->copy_mem = NULL;
}

/* The copies' ring and its pinned slots. False: no memory (the copies are
 * then synchronous). */
static bool ifd__copies_alloc(ifd_engine_t *e)
{
    const size_t n = (size_t)e->copy_slots;
    e->copies = calloc(n, sizeof *e->copies);
    e->copy_tokens = malloc(n * (size_t)e->block_size * sizeof(int32_t));
    e->copy_mem = e->model.kv_host_alloc(e->model.ctx, n * e->model.kv_data_bytes);
    if (e->copies && e->copy_tokens && e->copy_mem)
        return true;
    IFD_WARN("engine: no memory for %d pinned block copies of %zu bytes: copying synchronously",
             e->copy_slots, e->model.kv_data_bytes);
    ifd__copies_free(e);
    e->copies_off = true; /* said once */
    return false;
}

/* Whether published blocks go to the tiers through asynchronous copies. */
static bool ifd__copies_async(const ifd_engine_t *e)
{
    return e->model.kv_download_async && !e->copies_off && (ifd__host_on(e) || ifd__disk_staged(e));
}

/* An upload's fence has been read (done 1, or < 0: it failed). Landed: its
 * pins go. Failed: the block's bytes are unknown, so it leaves the prefix
 * cache at once (ifd_kvpool_unpublish, and its twin: no later lookup, here or
 * in another worker, finds it or the blocks chained after it), and it is
 * kept pinned on e->up_bad until ifd__uploads_failed has failed the
 * sequences that hold it (not here: a poll may run inside the scheduler). */
static void ifd__upload_landed(ifd_engine_t *e, const ifd__copy_t *c, int done)
{
    if (c->up_block < 0)
        return;
    if (done < 0) {
        IFD_ERROR("engine: copying a tier hit's block %d to the device: %s", c->up_block,
                  ifd_strerror(done));
        ifd_kvpool_unpublish(e->pool, e->p.worker, c->up_block);
        if (c->up_lblock >= 0)
            ifd_kvpool_unpublish(e->lpool, e->p.worker, c->up_lblock);
        if (e->up_bad_n == e->up_bad_cap) {
            const int cap = e->up_bad_cap ? 2 * e->up_bad_cap : 8;
            ifd__bad_upload_t *v = realloc(e->up_bad, (size_t)cap * sizeof *v);
            if (v)
                e->up_bad = v, e->up_bad_cap = cap;
        }
        if (e->up_bad_n < e->up_bad_cap) {
            e->up_bad[e->up_bad_n++] = (ifd__bad_upload_t){c->up_block, c->up_lblock, done};
            return;
        }
        IFD_ERROR("engine: no memory to fail the sequences holding block %d", c->up_block);
    }
    ifd_kvpool_unref(e->pool, e->p.worker, &c->up_block, 1);
    if (c->up_lblock >= 0)
        ifd_kvpool_unref(e->lpool, e->p.worker, &c->up_lblock, 1);
}

/* Hands the copies that have landed to the tiers, oldest first, and gives
 * their pins back; stops at the first one still in flight, waiting for the
 * first `wait` of them (INT_MAX: all). The host tier takes the bytes (its
 * entry made now), the disk tier a copy of them (ifd_kvdisk_offer_data). */
static void ifd__copies_poll(ifd_engine_t *e, int wait)
{
    const size_t bytes = e->model.kv_data_bytes;
    while (e->copy_n > 0) {
        const int at = e->copy_head;
        ifd__copy_t *c = &e->copies[at];
        int done = e->model.kv_copy_done(e->model.ctx, c->ticket, wait > 0);
        if (done == 0)
            break;
        const int32_t *t = e->copy_tokens + (size_t)at * (size_t)e->block_size;
        const uint8_t *data = e->copy_mem + (size_t)at * bytes;
        if (c->block < 0) { /* an upload: its slot is free again */
            ifd__upload_landed(e, c, done);
            e->copy_head = (at + 1) % e->copy_slots;
            e->copy_n--;
            wait = wait > 0 ? wait - 1 : 0;
            continue;
        }
        if (done < 0) {
            IFD_WARN("engine: copying block %d to host memory: %s", c->block, ifd_strerror(done));
            ifd__copy_dropped(e);
        } else {
            void *buf = ifd__host_on(e) ? ifd_kvhost_put(e->p.host, &c->hash, c->salt, t) : NULL;
            if (buf)
                memcpy(buf, data, bytes);
            if (ifd__disk_staged(e))
                ifd_kvdisk_offer_data(e->p.disk, data, &c->parent, c->salt, t, NULL);
        }
        ifd_kvpool_unref(e->pool, e->p.worker, &c->block, 1);
        if (c->lblock >= 0)
            ifd_kvpool_unref(e->lpool, e->p.worker, &c->lblock, 1);
        e->copy_head = (at + 1) % e->copy_slots;
        e->copy_n--;
        wait = wait > 0 ? wait - 1 : 0;
    }
}

/* Whether tier hits' uploads go through the ring (engine.h, kv_upload_async). */
static bool ifd__uploads_async(ifd_engine_t *e)
{
    return e->model.kv_upload_async && ifd__copies_async(e) && (e->copies || ifd__copies_alloc(e));
}

/* A free slot in the ring for an upload (the oldest copy waited for when
 * all are in flight): called before a host-tier read, so that the copies
 * handed to the tier then cannot evict the entry being read. */
static void ifd__copies_room(ifd_engine_t *e)
{
    if (ifd__uploads_async(e) && e->copy_n == e->copy_slots)
        ifd__copies_poll(e, 1);
}

/* A tier hit's data into pool block gblock (twin glblock or -1; global ids,
 * both held by the caller): with the adapter's kv_upload_async, copied into
 * a ring slot and enqueued on the copy stream, the next forward waiting for
 * it (ifd__uploads_wait), the blocks pinned until its fence is read
 * (ifd__upload_landed); else kv_upload. 0 or an error. */
static int ifd__upload(ifd_engine_t *e, int32_t gblock, int32_t glblock, const void *data)
{
    const int32_t block = ifd_kvpool_block_local(e->pool, gblock);
    const int32_t lblock = glblock >= 0 ? ifd__ltwin_local(e, glblock) : -1;
    if (!ifd__uploads_async(e))
        return e->model.kv_upload(e->model.ctx, block, lblock, data);
    ifd__copies_room(e);
    const int at = (e->copy_head + e->copy_n) % e->copy_slots;
    uint8_t *slot = e->copy_mem + (size_t)at * e->model.kv_data_bytes;
    memcpy(slot, data, e->model.kv_data_bytes);
    ifd__copy_t *c = &e->copies[at];
    *c = (ifd__copy_t){.block = -1, .lblock = -1, .up_block = -1, .up_lblock = -1};
    int rc = e->model.kv_upload_async(e->model.ctx, block, lblock, slot, &c->ticket);
    if (rc)
        return rc;
    if (ifd_kvpool_ref(e->pool, e->p.worker, &gblock, 1) == 0) {
        c->up_block = gblock;
        if (glblock >= 0 && ifd_kvpool_ref(e->lpool, e->p.worker, &glblock, 1) == 0)
            c->up_lblock = glblock;
    }
    e->copy_n++;
    e->up_ticket = c->ticket;
    e->up_wait = true;
    return 0;
}

/* Before a forward: the device waits for the uploads enqueued since the
 * last one (the copy stream's fences complete in order: the newest covers
 * them all). */
static int ifd__uploads_wait(ifd_engine_t *e)
{
    if (!e->up_wait)
        return 0;
    e->up_wait = false;
    e->up_wait_step = true;
    return e->model.kv_copy_wait(e->model.ctx, e->up_ticket);
}

/* Starts the copy of just-published block `block` (twin lblock, chain hash
 * *hash after *parent, salt, tokens t) for the tiers: pins the block and
 * its twin, enqueues the download into a pinned slot (the oldest copy
 * waited for when all are in flight). False: no ring (the caller copies
 * synchronously); a block that cannot be copied is counted as dropped. */
static bool ifd__copy_start(ifd_engine_t *e, int32_t block, int32_t lblock,
                            const ifd_kvhash_t *hash, const ifd_kvhash_t *parent, uint64_t salt,
                            const int32_t *t)
{
    if (!e->copies && !ifd__copies_alloc(e))
        return false;
    if (e->lpool && lblock < 0) {
        ifd__copy_dropped(e); /* its data would be half of it */
        return true;
    }
    if (e->copy_n == e->copy_slots)
        ifd__copies_poll(e, 1);
    const int at = (e->copy_head + e->copy_n) % e->copy_slots;
    ifd__copy_t *c = &e->copies[at];
    *c = (ifd__copy_t){*hash, *parent, salt, block, e->lpool ? lblock : -1, -1, -1, 0};
    if (ifd_kvpool_ref(e->pool, e->p.worker, &c->block, 1) != 0) {
        ifd__copy_dropped(e);
        return true;
    }
    if (c->lblock >= 0 && ifd_kvpool_ref(e->lpool, e->p.worker, &c->lblock, 1) != 0) {
        ifd_kvpool_unref(e->pool, e->p.worker, &c->block, 1);
        ifd__copy_dropped(e);
        return true;
    }
    int rc = e->model.kv_download_async(
        e->model.ctx, ifd_kvpool_block_local(e->pool, block), ifd__ltwin_local(e, c->lblock),
        e->copy_mem + (size_t)at * e->model.kv_data_bytes, &c->ticket);
    if (rc) {
        IFD_WARN("engine: copying block %d to host memory: %s", block, ifd_strerror(rc));
        ifd_kvpool_unref(e->pool, e->p.worker, &c->block, 1);
        if (c->lblock >= 0)
            ifd_kvpool_unref(e->lpool, e->p.worker, &c->lblock, 1);
        ifd__copy_dropped(e);
        return true;
    }
    memcpy(e->copy_tokens + (size_t)at * (size_t)e->block_size, t,
           (size_t)e->block_size * sizeof *t);
    e->copy_n++;
    return true;
}

/* The lower tiers' share of publishing s's block b (tokens t; pool rc 0:
 * new, 1: a duplicate, whose copies exist already): the host tier's copy,
 * the disk tier's file (from the pool's memory, or staged from that copy or
 * e->stage), and s->dhash advanced past b. */
static void ifd__tiers_publish(ifd_engine_t *e, ifd__seq_t *s, int32_t b, const int32_t *t, int rc)
{
    const ifd_kvhash_t parent = s->dhash;
    if (ifd__disk_on(e) || ifd__host_on(e))
        s->dhash = ifd_kvpool_hash_block(&parent, s->salt, t, e->block_size);
    if (rc != 0)
        return;
    const int32_t twin = ifd__local_twin(e, s, b); /* held: published in this step */
    if (ifd__copies_async(e) &&
        ifd__copy_start(e, s->blocks[b], twin, &s->dhash, &parent, s->salt, t))
        return; /* the tiers take it when it has landed (ifd__copies_poll) */
    const void *data =
        ifd__host_on(e) ? ifd__host_put(e, s->blocks[b], twin, &s->dhash, s->salt, t) : NULL;
    if (ifd__disk_staged(e)) {
        if (!data && ifd__download(e, s->blocks[b], twin, e->stage))
            data = e->stage;
        if (data)
            ifd_kvdisk_offer_data(e->p.disk, data, &parent, s->salt, t, NULL);
        else
            ifd_kvpool_tier_add(e->pool, IFD_KVTIER_DROPPED, 1);
    } else if (ifd__disk_on(e)) {
        ifd_kvdisk_offer(e->p.disk, s->blocks[b], twin, &parent, s->salt, t, NULL);
    }
}

static void ifd__local_publish_loaded(ifd_engine_t *e, ifd__seq_t *s, int32_t at);

/* One block of s at b from the host tier's copy `data`: a fresh block (and,
 * with a local pool, a fresh twin behind s->lblocks[b]), both uploaded,
 * the global one published (the twin is published by the caller, as a
 * disk read's). False, nothing held: no room, or a failed copy. */
static bool ifd__host_take(ifd_engine_t *e, ifd__seq_t *s, int32_t b, const int32_t *t,
                           const void *data)
{
    int32_t blk, lblk = -1;
    if (ifd_kvpool_alloc(e->pool, e->p.worker, e->p.device, 1, &blk))
        return false;
    if (e->lpool && ifd_kvpool_alloc(e->lpool, e->p.worker, e->p.device, 1, &lblk)) {
        ifd_kvpool_unref(e->pool, e->p.worker, &blk, 1);
        return false;
    }
    int32_t parent = b > 0 ? s->blocks[b - 1] : -1;
    if (ifd__upload(e, blk, lblk, data) ||
        ifd_kvpool_publish(e->pool, e->p.worker, blk, parent, s->salt, t, NULL) < 0) {
        ifd_kvpool_unref(e->pool, e->p.worker, &blk, 1);
        if (lblk >= 0)
            ifd_kvpool_unref(e->lpool, e->p.worker, &lblk, 1);
        return false;
    }
    s->blocks[b] = blk;
    if (e->lpool)
        s->lblocks[b] = lblk;
    return true;
}

/* After the pool's hit (s->n_blocks blocks, held): the blocks after it (up
 * to max_blocks) that the host tier holds, each copied into a fresh block
 * and published, extending the hit; stops at the first missing one, a
 * full pool or a failed copy (the rest is for the disk tier or
 * recomputed). With a local pool the copies hold the twins: they go into
 * fresh local blocks, published as keyed entries like a disk read's, and
 * only those the next query's window reads stay held. s->dhash is left at
 * the hit's end. */
static void ifd__host_fill(ifd_engine_t *e, ifd__seq_t *s, int32_t max_blocks)
{
    int32_t b0 = s->n_blocks, b = b0;
    ifd_kvhash_t h = ifd__disk_chain(e, s, b0);
    for (; b < max_blocks; b++) {
        const int32_t *t = s->keys + (int64_t)b * e->block_size;
        ifd_kvhash_t next = ifd_kvpool_hash_block(&h, s->salt, t, e->block_size);
        ifd__copies_room(e); /* before the read: a landing copy may evict from the tier */
        const void *data = ifd_kvhost_get(e->p.host, &next, s->salt, t);
        if (!data || !ifd__host_take(e, s, b, t, data))
            break;
        h = next;
    }
    if (max_blocks > b0)
        ifd_kvhost_count_query(e->p.host, (int64_t)(max_blocks - b0) * e->block_size, b == b0);
    s->n_blocks = s->n_published = b;
    s->n_computed = b * e->block_size;
    s->dhash = h;
    if (e->lpool && b > b0) {
        ifd__local_publish_loaded(e, s, b0);
        ifd__release_window(e, s); /* twins before the next query's window */
    }
}

/* The disk chain hash of s's first n blocks (kvdisk.h), over its prefix-cache keys (image
 * tokens by their image's hash, as the pool's). */
static ifd_kvhash_t ifd__disk_chain(const ifd_engine_t *e, const ifd__seq_t *s, int32_t n)
{
    ifd_kvhash_t h = {0, 0};
    for (int32_t b = 0; b < n; b++)
        h = ifd_kvpool_hash_block(&h, s->salt, s->keys + (int64_t)b * e->block_size, e->block_size);
    return h;
}

/* A block read from disk (staged: its host copy `data`, just uploaded and
 * published; chain hash *hash) into the host tier too, so that its next
 * eviction from the pool is a host hit, not another read. */
static void ifd__host_promote(ifd_engine_t *e, const ifd_kvhash_t *hash, uint64_t salt,
                              const int32_t *t, const void *data)
{
    void *buf = ifd_kvhost_put(e->p.host, hash, salt, t);
    if (buf)
        memcpy(buf, data, e->model.kv_data_bytes);
}

/* A staged disk tier's load of n blocks (tokens t on) into host buffers,
 * copied into their pool blocks when they land (ifd__disk_landed). */
static int ifd__disk_load_staged(ifd_engine_t *e, ifd__seq_t *s, const int32_t *t, int n)
{
    const size_t bytes = e->model.kv_data_bytes;
    s->load_bufs = calloc((size_t)n, sizeof *s->load_bufs);
    uint8_t *mem = s->load_bufs ? malloc((size_t)n * bytes) : NULL;
    if (!mem) {
        free(s->load_bufs);
        s->load_bufs = NULL;
        return IFD_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        s->load_bufs[i] = mem + (size_t)i * bytes;
    int rc =
        ifd_kvdisk_load_start_staged(e->p.disk, &s->dhash, s->salt, t, n, s->load_bufs, &s->load);
    if (rc)
        ifd__free_bufs(s);
    return rc;
}

/* After the pool's hit (s->n_blocks blocks, held): when the disk tier has
 * files for the blocks after it (up to max_blocks), allocates fresh blocks
 * for them behind s->blocks[n_blocks] (and their local twins behind
 * s->lblocks[n_blocks]: every file holds both) and starts reading them in
 * (s->load), with the deadline recomputing them would take. Nothing found,
 * no room or no memory: nothing started (the blocks are recomputed). */
static void ifd__disk_start(ifd_engine_t *e, ifd__seq_t *s, int32_t max_blocks)
{
    s->dhash = ifd__disk_chain(e, s, s->n_blocks);
    int32_t want = max_blocks - s->n_blocks;
    if (want <= 0)
        return;
    const int32_t *t = s->keys + (int64_t)s->n_blocks * e->block_size;
    int n = ifd_kvdisk_probe(e->p.disk, &s->dhash, s->salt, t, want);
    int32_t *gb = s->blocks + s->n_blocks, *lb = e->lpool ? s->lblocks + s->n_blocks : NULL;
    if (n <= 0 || ifd_kvpool_alloc(e->pool, e->p.worker, e->p.device, n, gb))
        return;
    if (lb && ifd_kvpool_alloc(e->lpool, e->p.worker, e->p.device, n, lb)) {
        ifd_kvpool_unref(e->pool, e->p.worker, gb, n);
        return;
    }
    int rc = ifd__disk_staged(e)
                 ? ifd__disk_load_staged(e, s, t, n)
                 : ifd_kvdisk_load_start(e->p.disk, &s->dhash, s->salt, t, n, gb, lb, &s->load);
    if (rc) {
        ifd_kvpool_unref(e->pool, e->p.worker, gb, n);
        if (lb)
            ifd_kvpool_unref(e->lpool, e->p.worker, lb, n);
        return;
    }
    s->load_n = n;
    double ms_tok = e->prefill_ms_tok > 0 ? e->prefill_ms_tok : IFD_ENGINE_DISK_MS_PER_TOKEN;
    s->load_start = ifd__ms();
    s->load_deadline = s->load_start + ms_tok * n * e->block_size;
}

/* The local twins read with blocks [at, n_blocks) as keyed entries under
 * their global twins' keys (as ifd__publish does for computed ones). */
static void ifd__local_publish_loaded(ifd_engine_t *e, ifd__seq_t *s, int32_t at)
{
    for (int32_t b = at; b < s->n_blocks && !s->lpublish_failed; b++) {
        uint64_t key = 0;
        int rc = ifd_kvpool_block_key(e->pool, s->blocks[b], &key);
        if (rc == 0)
            rc = ifd_kvpool_publish_keyed(e->lpool, e->p.worker, s->lblocks[b], key, s->salt,
                                          s->keys + (int64_t)b * e->block_size);
        if (rc < 0) {
            IFD_WARN("engine: publishing local block %d of request %llu: %s", b,
                     (unsigned long long)s->id, ifd_strerror(rc));
            s->lpublish_failed = true;
        }
    }
    if (!s->lpublish_failed)
        s->n_lpublished = s->n_blocks;
}

/* Whether s's disk load is over: done, or past its deadline (never
 * waits: ifd__schedule_waiting sleeps when nothing else runs). Then publishes the blocks that
 * landed after the pool's hit (with a local pool their twins too, as keyed
 * entries, keeping only those the next query's window reads), gives back
 * the others, and counts the admission's cached tokens. False: still
 * reading, the step goes on without s. */
static bool ifd__disk_landed(ifd_engine_t *e, ifd__seq_t *s)
{
    bool done = ifd_kvdisk_load_wait(s->load, 0);
    if (!done && ifd__ms() < s->load_deadline)
        return false;
    int ok = ifd_kvdisk_load_finish(s->load, !done);
    s->load = NULL;
    IFD_DEBUG("engine: request %llu: %d of %d blocks from disk in %.1f ms (deadline %.1f ms)",
              (unsigned long long)s->id, ok, s->load_n, ifd__ms() - s->load_start,
              s->load_deadline - s->load_start);
    int32_t at = s->n_blocks, i = 0;
    for (; i < ok; i++) {
        int32_t b = at + i;
        int32_t parent = b > 0 ? s->blocks[b - 1] : -1;
        if (s->load_bufs &&
            ifd__upload(e, s->blocks[b], e->lpool ? s->lblocks[b] : -1, s->load_bufs[i]))
            break; /* staged: host -> device first (the twin with it) */
        if (ifd_kvpool_publish(e->pool, e->p.worker, s->blocks[b], parent, s->salt,
                               s->keys + (int64_t)b * e->block_size, NULL) < 0)
            break;
        s->dhash = ifd_kvpool_hash_block(&s->dhash, s->salt, s->keys + (int64_t)b * e->block_size,
                                         e->block_size);
        if (s->load_bufs && ifd__host_on(e))
            ifd__host_promote(e, &s->dhash, s->salt, s->keys + (int64_t)b * e->block_size,
                              s->load_bufs[i]);
    }
    ifd__free_bufs(s);
    if (i < s->load_n) {
        ifd_kvpool_unref(e->pool, e->p.worker, s->blocks + at + i, s->load_n - i);
        if (e->lpool)
            ifd_kvpool_unref(e->lpool, e->p.worker, s->lblocks + at + i, s->load_n - i);
    }
    s->load_n = 0;
    s->n_blocks = s->n_published = at + i;
    s->n_computed = s->n_blocks * e->block_size;
    if (e->lpool) {
        ifd__local_publish_loaded(e, s, at);
        ifd__release_window(e, s); /* twins before the next query's window */
    }
    ifd__admit_account(e, s);
    return true;
}

/* Admission: consult the prefix cache (use_cache only), never past the
 * first prompt position whose logprob is owed. */
static int ifd__admit_lookup(ifd_engine_t *e, ifd__seq_t *s)
{
    if (!s->use_cache)
        return 0;
    int32_t n_match = s->n_tokens - 1;
    if (ifd__plp_owed(s) && n_match > s->plp_next - 1)
        n_match = s->plp_next - 1;
    int32_t max_blocks = n_match / e->block_size;
    if (max_blocks <= 0)
        return 0;
    int rc = ifd__seq_reserve_blocks(s, max_blocks);
    if (rc)
        return rc;
    int got = ifd_kvpool_lookup(e->pool, e->p.worker, s->salt, s->keys, n_match, s->blocks,
                                max_blocks, NULL);
    if (got < 0)
        return got;
    /* blocks on another device cannot be read by this engine's kernels */
    int keep = 0;
    while (keep < got && ifd_kvpool_block_device(e->pool, s->blocks[keep]) == e->p.device)
        keep++;
    if (e->lpool) {
        s->l_first = 0;
        if (keep > 0 && (keep = ifd__local_hit(e, s, keep)) < 0) {
            ifd_kvpool_unref(e->pool, e->p.worker, s->blocks, got);
            return keep;
        }
        s->n_lpublished = keep;
    }
    if (keep < got)
        ifd_kvpool_unref(e->pool, e->p.worker, s->blocks + keep, got - keep);
    s->n_blocks = keep;
    s->n_published = keep;
    s->n_computed = keep * e->block_size;
    s->g_first = 0;
    if (e->all_local)
        ifd__release_global(e, s); /* the hit's blocks before the first query's window */
    if (ifd__host_on(e))
        ifd__host_fill(e, s, max_blocks);
    if (ifd__disk_on(e))
        ifd__disk_start(e, s, max_blocks);
    if (!s->load)
        ifd__admit_account(e, s);
    return 0;
}

/* Prefill tokens this step may carry when n_dec running sequences want a
 * decode token (engine.h, prefill_cap). */
static int ifd__prefill_allowance(const ifd_engine_t *e, int n_dec)
{
    int left = e->p.max_batched_tokens - n_dec;
    if (n_dec == 0 || e->p.prefill_cap < 0)
        return left;
    int cap = e->p.prefill_cap;
    if (cap == 0) {
        const double ratio = e->p.step_ratio > 0 ? e->p.step_ratio : IFD_ENGINE_STEP_RATIO;
        int total = (int)(ratio * e->decode_ema + 0.5);
        cap = total - n_dec > IFD_ENGINE_PREFILL_FLOOR ? total - n_dec : IFD_ENGINE_PREFILL_FLOOR;
    }
    return cap < left ? cap : left;
}

/* ---- fairness (engine.h, "Fairness") ---------------------------------------- */

/* Sequences s's client runs. */
static int32_t ifd__runs(const ifd_engine_t *e, const ifd__seq_t *s)
{
    return e->clients.v[s->cslot].running;
}

/* s's client runs fewer than its share: max_seqs over the clients with work. */
static bool ifd__below_share(const ifd_engine_t *e, const ifd__seq_t *s)
{
    return (int64_t)ifd__runs(e, s) * e->clients.active < e->p.max_seqs;
}

/* The waiting request admission takes next: among those of the highest
 * priority, the first of the client running the fewest sequences (so FCFS
 * among a client's own, and among clients running as many). With one
 * client, the first in the queue. Those this step passed over (deferred:
 * their prefix is being read from disk) do not count; -1 when all were. */
static int ifd__admit_pick(const ifd_engine_t *e)
{
    int best = 0;
    while (best < e->waiting.n && e->waiting.v[best]->deferred)
        best++;
    if (best == e->waiting.n)
        return -1;
    if (e->clients.active < 2)
        return best;
    const int32_t prio = e->waiting.v[best]->priority;
    for (int i = best + 1; i < e->waiting.n && e->waiting.v[i]->priority == prio; i++)
        if (!e->waiting.v[i]->deferred &&
            ifd__runs(e, e->waiting.v[i]) < ifd__runs(e, e->waiting.v[best]))
            best = i;
    return best;
}

/* The running sequence to preempt when one needs a block and the pool has
 * none: the most recently admitted of the client running the most (ties:
 * of the one among them admitted last). With one client running, the most
 * recently admitted of all, as before clients were counted. */
static int ifd__victim(const ifd_engine_t *e)
{
    int best = e->running.n - 1;
    for (int j = best - 1; e->clients.active > 1 && j >= 0; j--)
        if (ifd__runs(e, e->running.v[j]) > ifd__runs(e, e->running.v[best]))
            best = j;
    return best;
}

/* Before a step: when the engine is full — max_seqs sequences run, or the
 * last admission found no blocks for a client below its share — and the
 * request admission takes next belongs to a client below its share, the
 * client running the most gives it a place: its most recently admitted
 * sequence of no higher priority than the request is preempted, provided
 * that client runs at least two more than the request's (after the move it
 * still runs as many, so no move undoes another). One per step: a burst of
 * requests takes its share over a few steps. */
static void ifd__rebalance(ifd_engine_t *e, ifd_engine_step_stats_t *st)
{
    const bool starved = e->kv_starved;
    e->kv_starved = false;
    if (e->clients.active < 2 || e->waiting.n == 0 || e->running.n == 0 ||
        (e->running.n < e->p.max_seqs && !starved))
        return;
    const int at = ifd__admit_pick(e);
    if (at < 0)
        return;
    const ifd__seq_t *s = e->waiting.v[at];
    const ifd__seq_t *top = e->running.v[ifd__victim(e)];
    if (!ifd__below_share(e, s) || ifd__runs(e, top) < ifd__runs(e, s) + 2)
        return;
    for (int v = e->running.n - 1; v >= 0; v--) {
        const ifd__seq_t *r = e->running.v[v];
        if (r->cslot == top->cslot && r->priority <= s->priority) {
            IFD_DEBUG("engine: request %llu (client %u, %d running) makes room for %llu "
                      "(client %u, %d running)",
                      (unsigned long long)r->id, r->client, ifd__runs(e, r),
                      (unsigned long long)s->id, s->client, ifd__runs(e, s));
            ifd__preempt(e, v);
            st->n_preempted++;
            return;
        }
    }
}

/* ---- scheduling a step -------------------------------------------------------- */

/* What is left of the step ifd__schedule fills. */
typedef struct {
    int budget;       /* tokens */
    int prefill_left; /* prefill tokens (engine.h, prefill_cap) */
    int plp_left;     /* prompt-logprob rows */
    int spec_left;    /* proposed tokens (IFD_ENGINE_SPEC_ROWS) */
    int n_sched;      /* sequences in e->sched */
} ifd__plan_t;

/* Takes v out of this step again (a fairness victim that came before the
 * sequence needing its blocks): what it took goes back to the plan. A
 * sequence the step skipped is in no e->sched entry: nothing to undo. */
static void ifd__unschedule(ifd_engine_t *e, ifd__plan_t *pl, ifd__seq_t *v)
{
    for (int k = 0; k < pl->n_sched; k++) {
        if (e->sched[k] != v)
            continue;
        memmove(e->sched + k, e->sched + k + 1, (size_t)(pl->n_sched - k - 1) * sizeof *e->sched);
        pl->n_sched--;
        pl->budget += v->sched;
        if (!ifd__decoding(v))
            pl->prefill_left += v->sched;
        pl->plp_left += ifd__plp_rows(v, v->n_computed, v->sched);
        v->sched = 0;
        return;
    }
}

/* Cancelled requests finish first, so their blocks are free for everyone else. */
static void ifd__finish_cancelled(ifd_engine_t *e)
{
    ifd__queue_t *qs[2] = {&e->running, &e->waiting};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < qs[k]->n;) {
            ifd__seq_t *s = qs[k]->v[i];
            if (s->cancelled) {
                ifd__q_remove_at(qs[k], i);
                ifd__finish(e, s, IFD_FINISH_CANCELLED);
            } else {
                i++;
            }
        }
    }
}

/* How many tokens decoding sequence s may propose this step, at most
 * `room` (engine.h, speculative decoding): none that could not all be
 * emitted (max_tokens, the context, the token array). */
static int32_t ifd__spec_limit(const ifd_engine_t *e, const ifd__seq_t *s, int room)
{
    int32_t lim = room;
    const int32_t left[3] = {s->max_tokens - s->n_gen - 1, s->cap_tokens - s->n_tokens - 1,
                             e->model.n_ctx - s->n_tokens - 1};
    for (int i = 0; i < 3; i++)
        lim = left[i] < lim ? left[i] : lim;
    return lim;
}

/* 1. Running sequences, oldest first: a decode token or the next prefill
 * chunk each, preempting (ifd__victim) when the pool has no block left. */
static void ifd__schedule_running(ifd_engine_t *e, ifd__plan_t *pl, ifd_engine_step_stats_t *st)
{
    for (int i = 0; i < e->running.n && pl->budget > 0;) {
        ifd__seq_t *s = e->running.v[i];
        int32_t n = ifd__want(s);
        bool prefill = !ifd__decoding(s);
        if (prefill && n > pl->prefill_left)
            n = pl->prefill_left;
        if (n > pl->budget)
            n = pl->budget;
        if (n > 0)
            n = ifd__plp_fit(s, n, &pl->plp_left);
        if (n > 0)
            n = ifd__image_fit(s, n, pl->budget);
        if (n <= 0) { /* a prefill chunk over the cap (or its image): next step */
            i++;
            continue;
        }
        int rc;
        while ((rc = ifd__grow(e, s, s->n_computed + n)) == IFD_ENOBLOCKS) {
            int victim = ifd__victim(e);
            if (victim == i) {
                if (e->running.n == 1 && e->waiting.n == 0 && pl->n_sched == 0) {
                    IFD_WARN("engine: request %llu cannot grow: the KV pool is full",
                             (unsigned long long)s->id);
                    ifd__q_remove_at(&e->running, i);
                    ifd__finish(e, s, IFD_FINISH_LENGTH);
                } else {
                    ifd__preempt(e, i);
                    st->n_preempted++;
                }
                goto next_running;
            }
            if (victim < i) { /* only another client's: s runs fewer (ifd__victim) */
                ifd__unschedule(e, pl, e->running.v[victim]);
                i--;
            }
            ifd__preempt(e, victim);
            st->n_preempted++;
        }
        if (rc) {
            IFD_ERROR("engine: request %llu: %s", (unsigned long long)s->id, ifd_strerror(rc));
            ifd__q_remove_at(&e->running, i);
            ifd__finish(e, s, IFD_FINISH_ERROR);
            continue;
        }
        s->sched = n;
        s->sample = s->n_computed + n == s->n_tokens;
        e->sched[pl->n_sched++] = s;
        pl->budget -= n;
        if (prefill)
            pl->prefill_left -= n;
        i++;
    next_running:;
    }
}

/* Admissions of one pass (ifd__admit_pick's order) while the budget, the
 * prefill cap and max_seqs allow. A request whose prefix is still being
 * read from disk is passed over (deferred) and those behind it go on:
 * its read never holds them up. */
static void ifd__admit_waiting(ifd_engine_t *e, ifd__plan_t *pl)
{
    int at;
    while (pl->budget > 0 && pl->prefill_left > 0 && e->running.n < e->p.max_seqs &&
           (at = ifd__admit_pick(e)) >= 0) {
        ifd__seq_t *s = e->waiting.v[at];
        if (ifd__blocks_for(e, s->n_tokens + 1) > e->pool_blocks) {
            IFD_WARN("engine: request %llu needs %d blocks, the pool has %d",
                     (unsigned long long)s->id, ifd__blocks_for(e, s->n_tokens + 1),
                     e->pool_blocks);
            ifd__q_remove_at(&e->waiting, at);
            ifd__finish(e, s, IFD_FINISH_ERROR);
            continue;
        }
        if (ifd__plp_owed(s) && pl->plp_left <= 0)
            break; /* its prompt rows wait for the next step */
        int rc = s->load ? 0 : ifd__admit_lookup(e, s);
        if (rc) {
            ifd__q_remove_at(&e->waiting, at);
            ifd__finish(e, s, IFD_FINISH_ERROR);
            continue;
        }
        if (s->load && !ifd__disk_landed(e, s)) {
            s->deferred = true; /* its prefix is on its way from disk: a later step admits it */
            continue;
        }
        int32_t n = ifd__want(s);
        if (n > pl->budget)
            n = pl->budget;
        if (n > pl->prefill_left)
            n = pl->prefill_left;
        n = ifd__plp_fit(s, n, &pl->plp_left); /* >= 1: plp_left > 0 */
        if ((n = ifd__image_fit(s, n, pl->budget)) == 0) {
            ifd__seq_release(e, s); /* its image waits for a step with room */
            break;
        }
        rc = ifd__grow(e, s, s->n_computed + n);
        if (rc == IFD_ENOBLOCKS) {
            ifd__seq_release(e, s); /* give back the prefix hits; try again later */
            /* a client below its share: the next step makes room (ifd__rebalance) */
            e->kv_starved = e->clients.active > 1 && ifd__below_share(e, s);
            break;
        }
        if (rc) {
            ifd__q_remove_at(&e->waiting, at);
            ifd__finish(e, s, IFD_FINISH_ERROR);
            continue;
        }
        s->admitted_once = true;
        ifd__q_remove_at(&e->waiting, at);
        if ((rc = ifd__q_insert(&e->running, e->running.n, s))) {
            ifd__finish(e, s, IFD_FINISH_ERROR);
            continue;
        }
        s->sched = n;
        s->sample = s->n_computed + n == s->n_tokens;
        e->sched[pl->n_sched++] = s;
        pl->budget -= n;
        pl->prefill_left -= n;
    }
}

/* The draft model's proposals for the queries of ifd__schedule_spec, in
 * one call (one batch across the sequences): into each s->draft. A failed
 * call proposes nothing (logged; the step goes on without). */
static void ifd__spec_draft(ifd_engine_t *e, ifd__seq_t **qs, ifd_spec_draft_query_t *q, int n)
{
    if (n == 0)
        return;
    int rc = e->p.drafter.propose(e->p.drafter.ctx, q, n);
    if (rc)
        IFD_WARN("engine: the draft model's proposals failed: %s", ifd_strerror(rc));
    for (int i = 0; i < n; i++) {
        qs[i]->dseq = q[i].seq;
        qs[i]->n_draft = rc ? 0 : q[i].n_out;
    }
}

/* 2. Waiting requests. When the step would have nothing to run but reads
 * in flight, it sleeps on the one due first (up to its deadline) instead
 * of spinning, then admits again. */
static void ifd__schedule_waiting(ifd_engine_t *e, ifd__plan_t *pl)
{
    ifd__admit_waiting(e, pl);
    ifd__seq_t *first = NULL;
    for (int i = 0; i < e->waiting.n; i++) {
        ifd__seq_t *s = e->waiting.v[i];
        if (s->deferred && (!first || s->load_deadline < first->load_deadline))
            first = s;
    }
    if (first && pl->n_sched == 0 && e->running.n == 0) {
        ifd_kvdisk_load_wait(first->load, fmax(first->load_deadline - ifd__ms(), 0));
        for (int i = 0; i < e->waiting.n; i++)
            e->waiting.v[i]->deferred = false;
        ifd__admit_waiting(e, pl);
    }
    for (int i = 0; i < e->waiting.n; i++)
        e->waiting.v[i]->deferred = false;
}

/* The verification budget (engine.h spec_knee, spec.h ifd_spec_budget):
 * the proposals of the step's decoding sequences qs[0..n) (s->n_draft for
 * n-gram ones; want[i], the tokens to ask the draft model for, for draft
 * ones) cut to what pays for its rows beside the step's other rows, and
 * to the step's room (budget, IFD_ENGINE_SPEC_ROWS), the best first. */
static void ifd__spec_budget(ifd_engine_t *e, const ifd__plan_t *pl, ifd__seq_t **qs, int32_t *want,
                             int n)
{
    if (n == 0)
        return;
    ifd_spec_cand_t c[IFD_ENGINE_SPEC_ROWS];
    for (int i = 0; i < n; i++) {
        c[i] = (ifd_spec_cand_t){.n = want[i]};
        c[i].p = ifd_spec_rate(&qs[i]->spec, &c[i].p1);
    }
    /* 0: the backend's (a device pool has kv_download: engine.h) */
    const double knee = e->p.spec_knee != 0    ? e->p.spec_knee
                        : e->model.kv_download ? IFD_SPEC_KNEE_GPU
                                               : IFD_SPEC_KNEE_CPU;
    const int room = pl->budget < pl->spec_left ? pl->budget : pl->spec_left;
    ifd_spec_budget(c, n, e->p.max_batched_tokens - pl->budget, knee, room);
    for (int i = 0; i < n; i++) {
        e->st.spec_budget_cut += (uint64_t)(want[i] - c[i].keep);
        want[i] = c[i].keep;
        if (qs[i]->spec.method != IFD_SPEC_DRAFT)
            qs[i]->n_draft = c[i].keep; /* the proposal's first keep tokens */
    }
}

/* 3. Proposals (engine.h, speculative decoding) for the decoding
 * sequences of the step, from what decodes, prefill and admissions left:
 * the budget and the free blocks, cut by the verification budget
 * (ifd__spec_budget). n-gram proposals are made in place, the draft
 * model's for all its sequences at once (their lengths reserved first),
 * in the same call as the feeds of its prefilling sequences. A proposal
 * the pool cannot hold is dropped: it never preempts, nor takes a block
 * or a token another sequence of the step needed. */
static void ifd__schedule_spec(ifd_engine_t *e, ifd__plan_t *pl)
{
    ifd__seq_t *qs[IFD_ENGINE_SPEC_ROWS], *cs[IFD_ENGINE_SPEC_ROWS];
    ifd_spec_draft_query_t q[IFD_ENGINE_SPEC_ROWS];
    int32_t want[IFD_ENGINE_SPEC_ROWS];
    /* every decoding sequence's proposal within its own limits and the
     * step's room; ifd__spec_budget then keeps the best of them within the
     * room, so that sequences scheduled late are not crowded out */
    const int room = pl->budget < pl->spec_left ? pl->budget : pl->spec_left;
    int nq = 0, nc = 0;
    for (int k = 0; k < pl->n_sched && room > 0 && nc < IFD_ENGINE_SPEC_ROWS; k++) {
        ifd__seq_t *s = e->sched[k];
        if (!ifd__decoding(s))
            continue;
        const int32_t lim = ifd__spec_limit(e, s, room);
        int32_t w;
        if (s->spec.method != IFD_SPEC_DRAFT)
            w = s->n_draft = ifd_spec_propose(&s->spec, s->tokens, s->n_tokens, lim, s->draft);
        else
            w = ifd_spec_want(&s->spec, lim);
        if (w > 0) {
            cs[nc] = s;
            want[nc++] = w;
        }
    }
    ifd__spec_budget(e, pl, cs, want, nc);
    for (int i = 0; i < nc; i++) {
        ifd__seq_t *s = cs[i];
        if (s->spec.method == IFD_SPEC_DRAFT && want[i] > 0) {
            qs[nq] = s;
            q[nq++] =
                (ifd_spec_draft_query_t){s->dseq, s->tokens, s->n_tokens, want[i], s->draft, 0};
        }
    }
    /* then a feed for each prefilling sequence that will speculate with the
     * draft: its tokens up to the end of this step's chunk, so that the
     * draft's prompt prefill keeps pace with the target's instead of
     * landing on the first proposal (spec_draft.h) */
    for (int k = 0; k < pl->n_sched && e->p.drafter.propose && nq < IFD_ENGINE_SPEC_ROWS; k++) {
        ifd__seq_t *s = e->sched[k];
        if (ifd__decoding(s) || s->spec.method != IFD_SPEC_DRAFT || s->max_tokens - s->n_gen < 2)
            continue;
        qs[nq] = s;
        q[nq++] =
            (ifd_spec_draft_query_t){s->dseq, s->tokens, s->n_computed + s->sched, 0, s->draft, 0};
    }
    ifd__spec_draft(e, qs, q, nq);
    for (int k = 0; k < pl->n_sched; k++) {
        ifd__seq_t *s = e->sched[k];
        if (s->n_draft == 0 || !ifd__decoding(s))
            continue;
        if (ifd__grow(e, s, s->n_computed + 1 + s->n_draft) != 0) {
            s->n_draft = 0;
            continue;
        }
        s->sched += s->n_draft;
        pl->budget -= s->n_draft;
        pl->spec_left -= s->n_draft;
    }
}

/* Fills e->sched with the sequences of this step. Returns how many. */
static int ifd__schedule(ifd_engine_t *e, ifd_engine_step_stats_t *st)
{
    ifd__finish_cancelled(e);
    ifd__rebalance(e, st);
    /* Prefill (chunks of running sequences, then admissions) shares what
     * the cap leaves beside the decodes. */
    int n_dec = 0;
    for (int i = 0; i < e->running.n; i++)
        n_dec += ifd__decoding(e->running.v[i]);
    ifd__plan_t pl = {.budget = e->p.max_batched_tokens,
                      .prefill_left = ifd__prefill_allowance(e, n_dec),
                      .plp_left = IFD_ENGINE_PLP_ROWS,
                      .spec_left = IFD_ENGINE_SPEC_ROWS,
                      .n_sched = 0};
    e->sched_decodes = n_dec > 0;
    ifd__schedule_running(e, &pl, st);
    ifd__schedule_waiting(e, &pl);
    ifd__schedule_spec(e, &pl);
    return pl.n_sched;
}

/* ---- one step ---------------------------------------------------------------- */

/* Block b's local twin while s holds it, else -1 (or without a local pool). */
static int32_t ifd__local_twin(const ifd_engine_t *e, const ifd__seq_t *s, int32_t b)
{
    return e->lpool && b >= s->l_first && b < s->n_blocks ? s->lblocks[b] : -1;
}

static void ifd__publish(ifd_engine_t *e, ifd__seq_t *s)
{
    while (!s->publish_failed && (s->n_published + 1) * e->block_size <= s->n_computed) {
        int b = s->n_published;
        int32_t parent = b > 0 ? s->blocks[b - 1] : -1;
        const int32_t *t = s->keys + (int64_t)b * e->block_size; /* image tokens by hash */
        int rc = ifd_kvpool_publish(e->pool, e->p.worker, s->blocks[b], parent, s->salt, t, NULL);
        if (rc < 0) {
            IFD_WARN("engine: publishing block %d of request %llu: %s", b,
                     (unsigned long long)s->id, ifd_strerror(rc));
            s->publish_failed = true;
            return;
        }
        /* a duplicate (rc 1) has its file already, or its twin is queued */
        ifd__tiers_publish(e, s, b, t, rc);
        s->n_published++;
    }
    /* local twins (those still held: a twin released before its block was
     * published had nothing to serve) as keyed entries under their global
     * twin's key, so a later hit finds its window's twins on their own */
    while (e->lpool && !s->lpublish_failed && s->n_lpublished < s->n_published) {
        int b = s->n_lpublished;
        uint64_t key = 0;
        int rc = b < s->l_first ? 0 : ifd_kvpool_block_key(e->pool, s->blocks[b], &key);
        if (rc == 0 && b >= s->l_first)
            rc = ifd_kvpool_publish_keyed(e->lpool, e->p.worker, s->lblocks[b], key, s->salt,
                                          s->keys + (int64_t)b * e->block_size);
        if (rc < 0) {
            IFD_WARN("engine: publishing local block %d of request %llu: %s", b,
                     (unsigned long long)s->id, ifd_strerror(rc));
            s->lpublish_failed = true;
            return;
        }
        s->n_lpublished++;
    }
}

static bool ifd__is_stop(const ifd_engine_t *e, const ifd__seq_t *s, int32_t tok)
{
    for (int32_t i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == tok)
            return true;
    for (int32_t i = 0; i < e->p.n_eos_ids && !s->ignore_eos; i++)
        if (e->p.eos_ids[i] == tok)
            return true;
    return false;
}

static int ifd__plp_dev_room(ifd_engine_t *e, int n_sched);

/* The forward pass of the step's batch: with device sampling where the
 * model offers it (e->s_tok[row] = the token, or IFD_MODEL_SAMPLE_ON_HOST
 * for rows whose logits came back; e->s_res[row] = the logprobs of a
 * device row that asked for them, prompt-logprob rows included — any top
 * k and logprob_token_ids, entries past the inline ones in the sequence's
 * room or, for prompt rows, in e->plp_ids / plp_lps), else logits for
 * every row. Grammar rows go to the device too (their masks are
 * computed there from the same constraint; allowed sets too), except under
 * min_tokens, where the host retries without the suppressing bias when the
 * grammar or the allowed set allows nothing else (ifd__sample_seq), which
 * needs the logits, and the rows of a verification, sampled on the host one
 * after the other. */
static int ifd__forward(ifd_engine_t *e, const ifd_batch_t *b, int n_sched)
{
    int wrc = ifd__uploads_wait(e);
    if (wrc)
        return wrc;
    if (!e->model.forward_sample) {
        for (int r = 0; r < b->n_logits; r++)
            e->s_tok[r] = IFD_MODEL_SAMPLE_ON_HOST;
        return e->model.forward(e->model.ctx, b, e->logits);
    }
    int rc = ifd__plp_dev_room(e, n_sched);
    if (rc)
        return rc;
    int r = 0;
    size_t plp_off = 0;
    const int32_t V = e->model.n_vocab;
    for (int k = 0; k < n_sched; k++) {
        ifd__seq_t *s = e->sched[k];
        /* prompt logprobs: scored on the device, a top k past the inline
         * one into this step's share of e->plp_ids / plp_lps */
        const int32_t pk = s->plp_top < V ? s->plp_top : V;
        for (int32_t i = 0; i < s->plp_rows; i++, r++) {
            e->s_hist[r] = (ifd_sampler_history_t){NULL, 0, NULL, 0};
            e->s_rows[r] = (ifd_sample_row_t){
                NULL, &e->s_hist[r], 0, &e->s_res[r], s->tokens[s->plp_next + i], s->plp_top};
            e->s_res[r] = (ifd_sample_result_t){0};
            if (pk > IFD_SAMPLER_INLINE_LOGPROBS) {
                e->s_res[r].more_ids = e->plp_ids + plp_off;
                e->s_res[r].more_logprobs = e->plp_lps + plp_off;
                e->s_res[r].more_cap = pk;
                plp_off += (size_t)pk;
            }
        }
        if (!s->sample)
            continue;
        /* a verification's rows come back as logits and are sampled here,
         * in order, each with the history grown by the tokens before it
         * (ifd__spec_after_forward): the host's draw is the device's bit for
         * bit (sampler.h), so the tokens are the same */
        for (int32_t i = 0; s->n_draft && i <= s->n_draft; i++, r++) {
            e->s_hist[r] = (ifd_sampler_history_t){NULL, 0, NULL, 0};
            e->s_rows[r] = (ifd_sample_row_t){NULL, &e->s_hist[r], 0, NULL, 0, 0};
        }
        if (s->n_draft)
            continue;
        /* the history as it will be at sampling: nothing changes it before */
        e->s_hist[r] =
            (ifd_sampler_history_t){s->tokens, (size_t)s->n_prompt, s->tokens + s->n_prompt,
                                    (size_t)(s->n_tokens - s->n_prompt)};
        const bool min_bias = s->n_gen < s->min_tokens && s->min_bias;
        /* any top k and logprob_token_ids on the device too, into the
         * sequence's room (sized at admission) */
        const bool host = (s->sampling.constraint || s->sampling.allowed) && min_bias;
        e->s_res[r] = (ifd_sample_result_t){
            .more_ids = s->top_ids, .more_logprobs = s->top_lps, .more_cap = s->top_cap};
        e->s_params[r] = s->sampling;
        if (min_bias) { /* as ifd__sample_seq */
            e->s_params[r].logit_bias = s->min_bias;
            e->s_params[r].n_logit_bias = s->n_min_bias;
        }
        e->s_rows[r] = (ifd_sample_row_t){host ? NULL : &e->s_params[r],
                                          &e->s_hist[r],
                                          (uint64_t)s->n_tokens,
                                          host ? NULL : &e->s_res[r],
                                          0,
                                          0};
        r++;
    }
    return e->model.forward_sample(e->model.ctx, b, e->s_rows, e->s_tok, e->logits);
}

/* e->plp_ids / plp_lps grown to hold `need` entries each (kept on failure). */
static int ifd__plp_grow(ifd_engine_t *e, size_t need)
{
    if (need <= e->plp_cap)
        return 0;
    int32_t *ids = realloc(e->plp_ids, need * sizeof *ids);
    if (ids)
        e->plp_ids = ids;
    float *lps = ids ? realloc(e->plp_lps, need * sizeof *lps) : NULL;
    if (!ids || !lps)
        return IFD_ENOMEM;
    e->plp_lps = lps;
    e->plp_cap = need;
    return 0;
}

/* Room for the device-scored prompt-logprob rows of this step whose top k
 * passes the inline one: e->plp_ids / plp_lps grown to the sum over the
 * scheduled sequences of rows x min(top, vocab) (each gets its share in
 * ifd__forward). The host path's ifd__plp_room shares these arrays; a step
 * uses one or the other. */
static int ifd__plp_dev_room(ifd_engine_t *e, int n_sched)
{
    size_t need = 0;
    const int32_t V = e->model.n_vocab;
    for (int k = 0; k < n_sched; k++) {
        const ifd__seq_t *s = e->sched[k];
        const int32_t pk = s->plp_top < V ? s->plp_top : V;
        if (s->plp_rows > 0 && pk > IFD_SAMPLER_INLINE_LOGPROBS)
            need += (size_t)s->plp_rows * (size_t)pk;
    }
    return ifd__plp_grow(e, need);
}

/* The logits for a step of `rows` rows (prompt-logprob and proposal rows
 * beside the sample rows), and the results of prompt-logprob rows when
 * `plp`: grown to the most a step can hold once needed (max_seqs +
 * IFD_ENGINE_PLP_ROWS + IFD_ENGINE_SPEC_ROWS), so a steady state never
 * reallocates and a worker that never speculates nor scores its prompts
 * keeps max_seqs rows. */
static int ifd__logits_reserve(ifd_engine_t *e, int rows, bool plp)
{
    if (e->logits_rows < rows) {
        rows = e->p.max_seqs + IFD_ENGINE_PLP_ROWS + IFD_ENGINE_SPEC_ROWS;
        float *lg = realloc(e->logits, (size_t)rows * (size_t)e->model.n_vocab * sizeof *lg);
        if (!lg)
            return IFD_ENOMEM;
        e->logits = lg;
        e->logits_rows = rows;
    }
    if (plp && !e->plp_res && !(e->plp_res = malloc(IFD_ENGINE_PLP_ROWS * sizeof *e->plp_res)))
        return IFD_ENOMEM;
    return 0;
}

/* Room for the top alternatives past IFD_SAMPLER_INLINE_LOGPROBS of s's
 * prompt-logprob rows of this step, in e->plp_res[i].more_* (grown to the
 * widest chunk asked so far: rows x min(top, vocab) entries). */
static int ifd__plp_room(ifd_engine_t *e, const ifd__seq_t *s)
{
    const int32_t k = s->plp_top < e->model.n_vocab ? s->plp_top : e->model.n_vocab;
    int rc = ifd__plp_grow(e, (size_t)s->plp_rows * (size_t)k);
    if (rc)
        return rc;
    for (int32_t i = 0; i < s->plp_rows; i++)
        e->plp_res[i] = (ifd_sample_result_t){.more_ids = e->plp_ids + (size_t)i * (size_t)k,
                                              .more_logprobs = e->plp_lps + (size_t)i * (size_t)k,
                                              .more_cap = k};
    return 0;
}

/* s's prompt-logprob rows of this step (lg: the first of them, row: its
 * index among the step's logits rows) to its owner: scored on the device
 * (e->s_res) or here from the logits. IFD_EINVAL for a row the sampler
 * refuses (NaN / +inf). */
static int ifd__emit_plp(ifd_engine_t *e, ifd__seq_t *s, const float *lg, int row)
{
    const size_t V = (size_t)e->model.n_vocab;
    const int32_t pos = s->plp_next;
    const bool dev = e->model.forward_sample && e->s_tok[row] != IFD_MODEL_SAMPLE_ON_HOST;
    ifd_sample_result_t *res = dev ? e->s_res + row : e->plp_res;
    if (!dev && s->plp_top > IFD_SAMPLER_INLINE_LOGPROBS) {
        int rc = ifd__plp_room(e, s);
        if (rc)
            return rc;
    }
    for (int32_t i = 0; i < s->plp_rows; i++) {
        int rc = dev ? (res[i].token < 0 ? IFD_EINVAL : 0)
                     : ifd_sampler_logprobs(e->sampler, lg + (size_t)i * V, s->tokens[pos + i],
                                            s->plp_top, &res[i]);
        if (rc) {
            IFD_ERROR("engine: prompt logprobs of request %llu at %d: %s",
                      (unsigned long long)s->id, pos + i, ifd_strerror(rc));
            return rc;
        }
    }
    s->plp_next += s->plp_rows;
    if (e->cb.on_prompt_logprobs)
        e->cb.on_prompt_logprobs(e->cb.ctx, s->id, pos, res, s->plp_rows);
    return 0;
}

/* Grows the batch's block tables (global and local alike) to n_sched rows of
 * max_blocks; they are kept, so a steady state never reallocates. */
static int ifd__tables_reserve(ifd_engine_t *e, int n_sched, int max_blocks)
{
    if (n_sched * max_blocks <= e->b_tables_cap)
        return 0;
    int cap = n_sched * max_blocks * 2;
    int32_t *t = realloc(e->b_tables, (size_t)cap * sizeof *t);
    if (!t)
        return IFD_ENOMEM;
    e->b_tables = t;
    t = realloc(e->b_ltables, (size_t)cap * sizeof *t);
    if (!t)
        return IFD_ENOMEM;
    e->b_ltables = t;
    e->b_tables_cap = cap;
    return 0;
}

/* Scheduled sequence k's part of the ragged batch: row k of the block
 * tables, a token per scheduled position from *n_tok on (its proposal's
 * after its last token), and its logits rows from *n_rows on (the
 * prompt-logprob rows it owes, then its sample row, or with a proposal its
 * last token's row and one per proposed token); both counts advance. */
static void ifd__batch_seq(ifd_engine_t *e, int k, int max_blocks, int *n_tok, int *n_rows,
                           ifd_engine_step_stats_t *st)
{
    ifd__seq_t *s = e->sched[k];
    int32_t *row = e->b_tables + (int64_t)k * max_blocks;
    int32_t *lrow = e->b_ltables + (int64_t)k * max_blocks;
    for (int32_t b = 0; b < max_blocks; b++)
        row[b] = b >= s->g_first && b < s->n_blocks
                     ? ifd_kvpool_block_local(e->pool, s->blocks[b])
                     : 0; /* released (all_local): before the window, never read */
    /* released twins read as block 0: before the window, never read */
    for (int32_t b = 0; e->lpool && b < max_blocks; b++)
        lrow[b] = b >= s->l_first && b < s->n_blocks
                      ? ifd_kvpool_block_local(e->lpool, s->lblocks[b])
                      : 0;
    IFD_ASSERT(!s->plp_rows || s->n_computed <= s->plp_next - 1);
    for (int32_t j = 0; j < s->sched; j++) {
        int32_t p = s->n_computed + j;
        if (s->plp_rows && p >= s->plp_next - 1 && p <= s->n_prompt - 2)
            e->b_rows[(*n_rows)++] = *n_tok; /* row p scores the prompt token at p + 1 */
        if (s->sample && j >= s->sched - 1 - s->n_draft)
            e->b_rows[(*n_rows)++] = *n_tok;
        e->b_tokens[*n_tok] = p < s->n_tokens ? s->tokens[p] : s->draft[p - s->n_tokens];
        e->b_pos[*n_tok] = p;
        e->b_seq[*n_tok] = k;
        const ifd_engine_image_t *im = ifd__image_at(s, p);
        e->b_last[*n_tok] = im ? im->start + im->len - 1 : p;
        e->b_embd[*n_tok] =
            im ? im->embd + (size_t)(p - im->start) * (size_t)e->model.n_embd : NULL;
        e->b_slot[*n_tok] = (int64_t)row[p / e->block_size] * e->block_size + p % e->block_size;
        if (e->lpool)
            e->b_lslot[*n_tok] =
                (int64_t)lrow[p / e->block_size] * e->block_size + p % e->block_size;
        (*n_tok)++;
    }
    if (s->n_computed < s->n_prompt)
        st->n_prefill_tokens += s->sched;
    else
        st->n_decode_tokens += s->sched;
}

/* This step's ragged batch over e->sched[0..n_sched), in e's batch buffers
 * (grown here: the tables to the longest block list, the logits for prompt
 * logprob rows). 0 or IFD_ENOMEM. */
static int ifd__batch_build(ifd_engine_t *e, int n_sched, ifd_engine_step_stats_t *st,
                            ifd_batch_t *batch)
{
    int rc;
    int max_blocks = 1;
    for (int k = 0; k < n_sched; k++)
        if (e->sched[k]->n_blocks > max_blocks)
            max_blocks = e->sched[k]->n_blocks;
    if ((rc = ifd__tables_reserve(e, n_sched, max_blocks)))
        return rc;
    int n_tok = 0, n_rows = 0, n_plp = 0;
    for (int k = 0; k < n_sched; k++) {
        ifd__seq_t *s = e->sched[k];
        s->plp_rows = ifd__plp_rows(s, s->n_computed, s->sched);
        n_plp += s->plp_rows;
        n_rows += s->plp_rows + (s->sample ? 1 + s->n_draft : 0);
    }
    if ((n_plp || n_rows > e->logits_rows) && (rc = ifd__logits_reserve(e, n_rows, n_plp > 0)))
        return rc;
    n_rows = 0;
    bool images = false;
    for (int k = 0; k < n_sched; k++) {
        ifd__batch_seq(e, k, max_blocks, &n_tok, &n_rows, st);
        images |= e->sched[k]->n_images > 0 && e->sched[k]->n_computed < e->sched[k]->n_prompt;
    }
    *batch = (ifd_batch_t){
        .n_tok = n_tok,
        .tokens = e->b_tokens,
        .pos = e->b_pos,
        .seq = e->b_seq,
        .slot = e->b_slot,
        .n_seqs = n_sched,
        .block_tables = e->b_tables,
        .max_blocks = max_blocks,
        .n_logits = n_rows,
        .logit_rows = e->b_rows,
        .local_block_tables = e->lpool ? e->b_ltables : NULL,
        .local_slot = e->lpool ? e->b_lslot : NULL,
        .kv_last = images ? e->b_last : NULL,
        .embd = images ? e->b_embd : NULL,
    };
    return 0;
}

/* A failed forward: every scheduled sequence still queued finishes with an
 * error (its KV of this step may be half written). */
static void ifd__fail_scheduled(ifd_engine_t *e, int n_sched)
{
    for (int k = 0; k < n_sched; k++) {
        int at = 0;
        ifd__queue_t *q = NULL;
        if (ifd__find(e, e->sched[k]->id, &q, &at)) {
            ifd__q_remove_at(q, at);
            ifd__finish(e, e->sched[k], IFD_FINISH_ERROR);
        }
    }
}

/* Answers the failed uploads ifd__upload_landed recorded: every sequence of
 * this engine holding one of their blocks (or twins) ends with the copy's
 * error — one of the n_sched scheduled this step after its forward
 * (kv_lost, ifd__seq_after_forward: no token sampled from it), any other at
 * once — and the pins go. The blocks already left the prefix cache. */
static void ifd__uploads_failed(ifd_engine_t *e, int n_sched)
{
    if (e->up_bad_n == 0)
        return;
    ifd__queue_t *qs[2] = {&e->running, &e->waiting};
    for (int qi = 0; qi < 2; qi++)
        for (int at = qs[qi]->n - 1; at >= 0; at--) {
            ifd__seq_t *s = qs[qi]->v[at];
            int err = 0;
            for (int i = 0; i < e->up_bad_n && !err; i++)
                for (int32_t b = 0; b < s->n_blocks && !err; b++)
                    if (s->blocks[b] == e->up_bad[i].block ||
                        (e->lpool && e->up_bad[i].lblock >= 0 && s->lblocks &&
                         s->lblocks[b] == e->up_bad[i].lblock))
                        err = e->up_bad[i].err;
            if (!err)
                continue;
            IFD_ERROR("engine: request %llu: a block of its context failed to copy to the device",
                      (unsigned long long)s->id);
            bool scheduled = false;
            for (int k = 0; k < n_sched && !scheduled; k++)
                scheduled = e->sched[k] == s;
            if (scheduled) {
                s->kv_lost = err;
            } else {
                s->err = err;
                ifd__q_remove_at(qs[qi], at);
                ifd__finish(e, s, IFD_FINISH_ERROR);
            }
        }
    for (int i = 0; i < e->up_bad_n; i++) {
        ifd_kvpool_unref(e->pool, e->p.worker, &e->up_bad[i].block, 1);
        if (e->up_bad[i].lblock >= 0)
            ifd_kvpool_unref(e->lpool, e->p.worker, &e->up_bad[i].lblock, 1);
    }
    e->up_bad_n = 0;
}

/* s, scheduled this step and so queued, leaves its queue and finishes. */
static void ifd__finish_queued(ifd_engine_t *e, ifd__seq_t *s, ifd_finish_reason_t reason)
{
    int at = 0;
    ifd__queue_t *q = NULL;
    IFD_ASSERT(ifd__find(e, s->id, &q, &at) == s);
    ifd__q_remove_at(q, at);
    ifd__finish(e, s, reason);
}

/* The token of s's sample row `row`: sampled here from its logits, or the
 * device's (with its logprobs when the request asked for them). 0, or an
 * error for a row the sampler refuses (IFD_EINVAL: NaN / +inf logits). */
static int ifd__take_sample(ifd_engine_t *e, ifd__seq_t *s, int row, ifd_sample_result_t *res)
{
    const float *lg = e->logits + (size_t)row * (size_t)e->model.n_vocab;
    ifd_sampler_history_t h = {s->tokens, (size_t)s->n_prompt, s->tokens + s->n_prompt,
                               (size_t)(s->n_tokens - s->n_prompt)};
    const int32_t dev_tok = e->s_tok[row];
    if (dev_tok == IFD_MODEL_SAMPLE_ON_HOST) {
        *res = (ifd_sample_result_t){
            .more_ids = s->top_ids, .more_logprobs = s->top_lps, .more_cap = s->top_cap};
        return ifd__sample_seq(e, s, lg, &h, res);
    }
    if (s->sampling.n_logprobs >= 0) { /* sampled on the device, with logprobs */
        *res = e->s_res[row];
        return dev_tok < 0 || res->token != dev_tok ? IFD_EINVAL : 0;
    }
    /* sampled on the device: the token only */
    memset(res, 0, sizeof *res);
    res->token = dev_tok;
    return dev_tok < 0 ? IFD_EINVAL : 0;
}

/* Appends s's sampled token and reports it. Returns the finish reason it
 * brings (a stop token, max_tokens, the context, the token array), or -1. */
static int ifd__emit(ifd_engine_t *e, ifd__seq_t *s, const ifd_sample_result_t *res)
{
    if (s->keys != s->tokens)
        s->keys[s->n_tokens] = res->token;
    s->tokens[s->n_tokens++] = res->token;
    s->n_gen++;
    if (e->cb.on_token)
        e->cb.on_token(e->cb.ctx, s->id, res);
    if (ifd__is_stop(e, s, res->token))
        return IFD_FINISH_STOP;
    if (s->n_gen >= s->max_tokens || s->n_tokens >= e->model.n_ctx || s->n_tokens >= s->cap_tokens)
        return IFD_FINISH_LENGTH;
    return -1;
}

/* Tests only (engine.h, spec_wrong_accept_test): the rejected proposal x
 * of row `row` stands anyway when a second draw, at a counter plain
 * sampling never uses, equals it. */
static int ifd__spec_wrong_accept(ifd_engine_t *e, ifd__seq_t *s, int row, int32_t x,
                                  ifd_sample_result_t *res)
{
    const float *lg = e->logits + (size_t)row * (size_t)e->model.n_vocab;
    ifd_sampler_history_t h = {s->tokens, (size_t)s->n_prompt, s->tokens + s->n_prompt,
                               (size_t)(s->n_tokens - s->n_prompt)};
    ifd_sample_result_t again = {
        .more_ids = s->top_ids, .more_logprobs = s->top_lps, .more_cap = s->top_cap};
    int rc = ifd_sampler_sample(e->sampler, &s->sampling, lg, &h,
                                (uint64_t)s->n_tokens | (1ull << 62), &again);
    if (rc == 0 && again.token == x)
        res->token = x;
    return rc;
}

/* The blocks of a speculating sequence past what its tokens need (KV of
 * rejected proposals) go back to the pools; none of them was published
 * (publishing stops at n_computed). */
static void ifd__spec_shrink(ifd_engine_t *e, ifd__seq_t *s)
{
    const int32_t keep = ifd__blocks_for(e, s->n_tokens);
    if (keep >= s->n_blocks)
        return;
    IFD_ASSERT(s->n_published <= keep && s->g_first <= keep && (!e->lpool || s->l_first <= keep));
    int rc = ifd_kvpool_unref(e->pool, e->p.worker, s->blocks + keep, s->n_blocks - keep);
    if (rc == 0 && e->lpool)
        rc = ifd_kvpool_unref(e->lpool, e->p.worker, s->lblocks + keep, s->n_blocks - keep);
    if (rc)
        IFD_ERROR("engine: releasing proposal blocks of request %llu: %s",
                  (unsigned long long)s->id, ifd_strerror(rc));
    s->n_blocks = keep;
}

/* After the forward, speculating sequence s (engine.h, speculative
 * decoding): its rows *row .. *row + n_draft are sampled in order, each
 * exactly as plain decoding samples that position (ifd__take_sample, the
 * history grown by the tokens before it); proposed token i stands while it
 * equals row i's sample, and the first sample that differs, or the one of
 * the row after the last proposal, is one more token. Every token is
 * emitted and checked for a stop as plain decoding does, so a stop or a
 * limit cuts acceptance exactly. Then the computed length is what the
 * emitted tokens vouch for (the KV of positions whose input stood), the
 * full blocks of it are published and the rest is dropped. */
static void ifd__spec_after_forward(ifd_engine_t *e, ifd__seq_t *s, int *row)
{
    const int32_t nd = s->n_draft;
    const int end = *row + nd + 1;
    int32_t acc = 0;
    int fin = -1, src = 0;
    for (int32_t i = 0; i <= nd && fin < 0; i++) {
        ifd_sample_result_t res;
        src = ifd__take_sample(e, s, *row + i, &res);
        if (!src && i < nd && res.token != s->draft[i] && e->p.spec_wrong_accept_test)
            src = ifd__spec_wrong_accept(e, s, *row + i, s->draft[i], &res);
        if (src) {
            IFD_ERROR("engine: sampling request %llu: %s", (unsigned long long)s->id,
                      ifd_strerror(src));
            s->err = src;
            fin = IFD_FINISH_ERROR;
            break;
        }
        const bool stands = i < nd && res.token == s->draft[i];
        acc += stands;
        fin = ifd__emit(e, s, &res);
        s->n_computed = s->n_tokens - 1; /* the KV of every input that stood */
        if (!stands)
            break;
    }
    *row = end;
    s->n_draft = 0;
    e->st.spec_drafts++;
    e->st.spec_draft_tokens += (uint64_t)nd;
    e->st.spec_accepted_tokens += (uint64_t)acc;
    for (int32_t i = 0; i < acc; i++)
        e->st.spec_accepted_per_pos[i]++;
    ifd_spec_adapt(&s->spec, nd, acc);
    ifd__publish(e, s);
    ifd__release_window(e, s);
    ifd__spec_shrink(e, s);
    if (fin >= 0)
        ifd__finish_queued(e, s, (ifd_finish_reason_t)fin);
}

/* After the forward, scheduled sequence s from logits row *row on: advance
 * its computed count, publish its full blocks, emit its prompt logprobs,
 * release what fell out of its window, then take its sampled token and
 * finish it at a stop or a limit. *row advances past s's rows. */
static void ifd__seq_after_forward(ifd_engine_t *e, ifd__seq_t *s, int *row)
{
    if (s->kv_lost) { /* its context read a block whose upload failed: no token from it */
        *row += s->n_draft ? s->n_draft + 1 : s->plp_rows + s->sample;
        s->err = s->kv_lost;
        ifd__finish_queued(e, s, IFD_FINISH_ERROR);
        return;
    }
    if (s->n_draft) {
        ifd__spec_after_forward(e, s, row);
        return;
    }
    s->n_computed += s->sched;
    if (s->use_cache)
        ifd__publish(e, s);
    if (s->plp_rows) {
        int prc = ifd__emit_plp(e, s, e->logits + (size_t)*row * (size_t)e->model.n_vocab, *row);
        *row += s->plp_rows;
        if (prc) {
            *row += s->sample; /* its sample row is skipped */
            ifd__finish_queued(e, s, IFD_FINISH_ERROR);
            return;
        }
    }
    if (s->use_cache) /* without the cache it recomputes from 0 */
        ifd__release_window(e, s);
    if (!s->sample)
        return;
    ifd_sample_result_t res;
    int src = ifd__take_sample(e, s, (*row)++, &res);
    int at = 0;
    ifd__queue_t *q = NULL;
    IFD_ASSERT(ifd__find(e, s->id, &q, &at) == s);
    if (src) {
        IFD_ERROR("engine: sampling request %llu: %s", (unsigned long long)s->id,
                  ifd_strerror(src));
        s->err = src;
        ifd__q_remove_at(q, at);
        ifd__finish(e, s, IFD_FINISH_ERROR);
        return;
    }
    if (!s->use_cache)
        s->n_computed = 0; /* recompute everything next step */
    const int fin = ifd__emit(e, s, &res);
    if (fin >= 0) {
        ifd__q_remove_at(q, at);
        ifd__finish(e, s, (ifd_finish_reason_t)fin);
    }
}

/* The step's timings and counts into st and the engine's totals; a step
 * with decodes feeds the decode-size average the prefill cap adapts to. */
static void ifd__step_account(ifd_engine_t *e, ifd_engine_step_stats_t *st, int n_sched, int n_tok,
                              double t0, double t1, double t2, double t3)
{
    st->n_seqs = n_sched;
    st->n_tokens = n_tok;
    st->schedule_ms = t1 - t0;
    st->forward_ms = t2 - t1;
    st->sample_ms = t3 - t2;
    if (!e->sched_decodes && st->n_prefill_tokens > 0) {
        const double ms_tok = st->forward_ms / n_tok, old = e->prefill_ms_tok;
        e->prefill_ms_tok = old == 0 ? ms_tok : old + (ms_tok - old) / IFD_ENGINE_STEP_EMA;
    }
    if (e->sched_decodes)
        e->decode_ema = e->decode_ema == 0
                            ? (double)n_tok
                            : e->decode_ema + ((double)n_tok - e->decode_ema) / IFD_ENGINE_STEP_EMA;
    static const int step_bounds[] = {IFD_WIRE_STEP_TOKEN_BOUNDS};
    int b = 0;
    while (b < IFD_WIRE_STEP_BUCKETS - 1 && n_tok > step_bounds[b])
        b++;
    e->st.step_tokens[b]++;
    e->st.steps++;
    e->st.tokens += (uint64_t)n_tok;
    e->st.prefill_tokens += (uint64_t)st->n_prefill_tokens;
    e->st.decode_tokens += (uint64_t)st->n_decode_tokens;
    e->st.schedule_ms += st->schedule_ms;
    e->st.forward_ms += st->forward_ms;
    e->st.sample_ms += st->sample_ms;
}

int ifd_engine_step(ifd_engine_t *e, ifd_engine_step_stats_t *st_out)
{
    ifd_engine_step_stats_t st;
    memset(&st, 0, sizeof st);
    double t0 = ifd__ms();
    ifd__copies_poll(e, 0); /* what the last steps' copies brought */
    ifd__uploads_failed(e, 0);
    int n_sched = ifd__schedule(e, &st);
    if (n_sched == 0) {
        if (e->running.n == 0 && e->waiting.n == 0)
            ifd__copies_poll(e, INT_MAX); /* nothing else to do: engine.h, ifd_engine_idle */
        if (st_out)
            *st_out = st;
        return 0;
    }
    ifd_batch_t batch;
    int rc = ifd__batch_build(e, n_sched, &st, &batch);
    if (rc)
        return rc;
    double t1 = ifd__ms();
    rc = ifd__forward(e, &batch, n_sched);
    double t2 = ifd__ms();
    if (rc) {
        IFD_ERROR("engine: forward of %d tokens failed: %s", batch.n_tok, ifd_strerror(rc));
        ifd__fail_scheduled(e, n_sched);
        return rc;
    }
    if (e->up_wait_step) { /* the forward waited for uploads: read their fences before
                            * anything computed from them is sampled */
        e->up_wait_step = false;
        ifd__copies_poll(e, 0);
        ifd__uploads_failed(e, n_sched);
    }
    /* advance, publish, sample, finish */
    int row = 0;
    for (int k = 0; k < n_sched; k++)
        ifd__seq_after_forward(e, e->sched[k], &row);
    if (e->running.n == 0 && e->waiting.n == 0)
        ifd__copies_poll(e, INT_MAX); /* going idle: the tiers have every block before the
                                       * last request's end is reported (no next step) */
    double t3 = ifd__ms();
    ifd__step_account(e, &st, n_sched, batch.n_tok, t0, t1, t2, t3);
    if (st_out)
        *st_out = st;
    return n_sched;
}

static int ifd__cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Blocks held by running sequences that lie wholly before every holder's
 * window. A sequence's next query is at n_computed and later ones only
 * move right, so its block b is dead for local layers once its last
 * position (b + 1) * bs - 1 is below n_computed - window + 1. A block
 * shared through the prefix cache counts only when dead for every running
 * holder: entries (block << 1 | live) sorted, a block's last entry tells.
 * With a local pool "dead" is "its twin released" (b < l_first). */
static int64_t ifd__window_dead_blocks(const ifd_engine_t *e)
{
    const int32_t w = e->model.sliding_window;
    if (w <= 0 || (e->model.n_local_layers <= 0 && !e->lpool))
        return 0;
    int64_t n = 0;
    for (int i = 0; i < e->running.n; i++)
        n += e->running.v[i]->n_blocks;
    if (n == 0)
        return 0;
    int64_t *ent = malloc((size_t)n * sizeof *ent);
    if (!ent)
        return 0;
    int64_t k = 0;
    for (int i = 0; i < e->running.n; i++) {
        const ifd__seq_t *s = e->running.v[i];
        /* all_local: the entries before g_first name blocks s released (a
         * block reused since by a running sequence counts as held: a lower
         * bound) */
        int64_t dead = e->lpool       ? s->l_first
                       : e->all_local ? s->g_first
                                      : ifd__local_lo(e, s->n_computed);
        for (int32_t b = 0; b < s->n_blocks; b++)
            ent[k++] = (int64_t)s->blocks[b] * 2 + (b >= dead);
    }
    qsort(ent, (size_t)n, sizeof *ent, ifd__cmp_i64);
    int64_t out = 0;
    for (int64_t i = 0; i < n; i++)
        if ((i + 1 == n || ent[i + 1] >> 1 != ent[i] >> 1) && !(ent[i] & 1))
            out++;
    free(ent);
    return out;
}

void ifd_engine_stats(const ifd_engine_t *e, ifd_engine_stats_t *out)
{
    *out = e->st;
    out->decode_step_tokens = e->decode_ema;
    out->running = e->running.n;
    out->waiting = e->waiting.n;
    int64_t held = 0;
    for (int i = 0; i < e->running.n; i++)
        held += e->running.v[i]->n_blocks - e->running.v[i]->g_first;
    out->blocks_held = held;
    const int64_t dead = ifd__window_dead_blocks(e);
    if (e->lpool) {
        int64_t lheld = 0;
        for (int i = 0; i < e->running.n; i++)
            lheld += e->running.v[i]->n_blocks - e->running.v[i]->l_first;
        out->local_blocks_held = lheld;
        out->local_released_blocks = dead;
        out->local_released_bytes = (uint64_t)dead * e->local_block_bytes;
    } else if (e->all_local) {
        out->local_released_blocks = dead;
        out->local_released_bytes = (uint64_t)dead * e->local_block_bytes;
    } else {
        out->window_dead_blocks = dead;
        out->window_dead_bytes = (uint64_t)dead * e->local_block_bytes;
    }
}

/* ---- the real model's adapter ------------------------------------------------ */

typedef struct {
    ifd_model_t *m;
    ifd_kv_layer_t *kv;
    /* The host tier's copies (kv_download / kv_upload): the model's layers
     * in the disk file's order — the pool's layers, then the local pool's
     * (each in model order) — the first n_copy_global of them in the pool */
    uint32_t *copy_order;
    uint32_t n_copy_global;
    uint64_t block_bytes; /* one layer's K (or V) block, in either pool */
} ifd__model_ctx_t;

/* Layer i (file order) of block's data: its K and V block in the pool of
 * its layer (block for the pool's layers, lblock for the local pool's). */
static void ifd__copy_layer(const ifd__model_ctx_t *c, uint32_t i, int32_t block, int32_t lblock,
                            uint8_t **k, uint8_t **v)
{
    const ifd_kv_layer_t *kv = &c->kv[c->copy_order[i]];
    const uint64_t at = (uint64_t)(i < c->n_copy_global ? block : lblock) * c->block_bytes;
    *k = (uint8_t *)kv->k + at;
    *v = (uint8_t *)kv->v + at;
}

/* A block's K/V (and its local twin's) into dst, layer by layer, K then V,
 * each piece copied by `out` (the backend's download or download_async). */
static int ifd__model_kv_out(ifd__model_ctx_t *c, int32_t block, int32_t lblock, void *dst,
                             int (*out)(ifd_backend_t *, void *, const void *, size_t))
{
    ifd_backend_t *be = ifd_model_backend(c->m);
    const uint32_t n = ifd_model_config(c->m)->n_layer;
    const size_t bb = c->block_bytes;
    if (c->n_copy_global < n && lblock < 0)
        return IFD_EINVAL; /* a local pool's twin is part of the data */
    uint8_t *d = dst;
    for (uint32_t i = 0; i < n; i++, d += 2 * bb) {
        uint8_t *k, *v;
        ifd__copy_layer(c, i, block, lblock, &k, &v);
        int rc = out(be, d, k, bb);
        if (!rc)
            rc = out(be, d + bb, v, bb);
        if (rc)
            return rc;
    }
    return 0;
}

/* engine.h, kv_download: layer by layer, K then V (the local twin's after
 * the pool's layers), through the backend's synchronous download (ordered
 * after the stream's steps). */
static int ifd__model_kv_download(void *ctx, int32_t block, int32_t lblock, void *dst)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    return ifd__model_kv_out(c, block, lblock, dst, be->ops->download);
}

/* engine.h, kv_download_async: the same copies on the backend's copy
 * stream, then one fence (the ticket) behind them. */
static int ifd__model_kv_download_async(void *ctx, int32_t block, int32_t lblock, void *dst,
                                        uint64_t *ticket)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    int rc = ifd__model_kv_out(c, block, lblock, dst, be->ops->download_async);
    if (rc) {
        uint64_t t;
        (void)be->ops->copy_fence(be, &t); /* ends the batch: the next one joins again */
        return rc;
    }
    return be->ops->copy_fence(be, ticket);
}

static int ifd__model_kv_copy_done(void *ctx, uint64_t ticket, bool wait)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    return be->ops->copy_done(be, ticket, wait);
}

static void *ifd__model_kv_host_alloc(void *ctx, size_t bytes)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    void *p = NULL;
    return be->ops->host_alloc(be, bytes, &p) == 0 ? p : NULL;
}

static void ifd__model_kv_host_free(void *ctx, void *p)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    be->ops->host_free(be, p);
}

/* engine.h, kv_upload_async: the inverse of kv_download_async. */
static int ifd__model_kv_upload_async(void *ctx, int32_t block, int32_t lblock, const void *src,
                                      uint64_t *ticket)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    const uint32_t n = ifd_model_config(c->m)->n_layer;
    const size_t bb = c->block_bytes;
    if (c->n_copy_global < n && lblock < 0)
        return IFD_EINVAL;
    const uint8_t *d = src;
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++, d += 2 * bb) {
        uint8_t *k, *v;
        ifd__copy_layer(c, i, block, lblock, &k, &v);
        rc = be->ops->upload_async(be, k, d, bb);
        if (!rc)
            rc = be->ops->upload_async(be, v, d + bb, bb);
    }
    uint64_t t;
    int frc = be->ops->copy_fence(be, rc ? &t : ticket); /* ends the batch either way */
    return rc ? rc : frc;
}

static int ifd__model_kv_copy_wait(void *ctx, uint64_t ticket)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    return be->ops->copy_wait(be, ticket);
}

/* engine.h, kv_upload: the inverse, then a sync (src may go after it). */
static int ifd__model_kv_upload(void *ctx, int32_t block, int32_t lblock, const void *src)
{
    ifd__model_ctx_t *c = ctx;
    ifd_backend_t *be = ifd_model_backend(c->m);
    const uint32_t n = ifd_model_config(c->m)->n_layer;
    const size_t bb = c->block_bytes;
    if (c->n_copy_global < n && lblock < 0)
        return IFD_EINVAL;
    const uint8_t *d = src;
    for (uint32_t i = 0; i < n; i++, d += 2 * bb) {
        uint8_t *k, *v;
        ifd__copy_layer(c, i, block, lblock, &k, &v);
        int rc = be->ops->upload(be, k, d, bb);
        if (!rc)
            rc = be->ops->upload(be, v, d + bb, bb);
        if (rc)
            return rc;
    }
    return be->ops->sync(be);
}

static int ifd__model_forward(void *ctx, const ifd_batch_t *b, float *logits)
{
    ifd__model_ctx_t *c = ctx;
    return ifd_model_forward(c->m, b, c->kv, logits);
}

static int ifd__model_forward_sample(void *ctx, const ifd_batch_t *b, const ifd_sample_row_t *rows,
                                     int32_t *tokens, float *logits)
{
    ifd__model_ctx_t *c = ctx;
    return ifd_model_forward_sample(c->m, b, c->kv, rows, tokens, logits);
}

/* Maps device dev's segment of `pool` in this process when it is device
 * memory (engine.h, ifd_engine_model_from). */
static int ifd__bind_pool(ifd_model_t *m, ifd_kvpool_t *pool, int dev)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    if (g.kind[dev] == IFD_KVSEG_HOST || ifd_kvpool_layer_k(pool, dev, 0))
        return 0;
    /* A device segment: map it (import, or create and record) through the
     * backend's provider, so the K/V live in the pool's memory. */
    ifd_backend_t *be = ifd_model_backend(m);
    const ifd_kvseg_provider_t *prov = be->ops->kv_provider ? be->ops->kv_provider(be) : NULL;
    if (!prov) {
        IFD_ERROR("engine: the KV pool's device %d is device memory, which the %s backend "
                  "cannot map",
                  dev, be->ops->name);
        return IFD_ENODEV;
    }
    return ifd_kvpool_bind_segment(pool, dev, prov);
}

int ifd_engine_model_from(ifd_engine_model_t *out, ifd_model_t *m, ifd_kvpool_t *pool, int dev)
{
    return ifd_engine_model_from_pools(out, m, pool, NULL, dev);
}

int ifd_engine_model_from_pools(ifd_engine_model_t *out, ifd_model_t *m, ifd_kvpool_t *pool,
                                ifd_kvpool_t *local_pool, int dev)
{
    const ifd_model_config_t *cfg = ifd_model_config(m);
    ifd_kvpool_params_t g, lg;
    ifd_kvpool_geometry(pool, &g);
    const int n_local = ifd_model_n_local_layers(cfg);
    const int n_global = (int)cfg->n_layer - (local_pool ? n_local : 0);
    if (g.n_layers != n_global || g.n_kv_heads != (int)cfg->n_head_kv ||
        g.head_dim != (int)cfg->head_dim)
        return IFD_EMISMATCH;
    if (ifd_kv_dtype_quantized(g.dtype) && !ifd_model_backend(m)->ops->host_memory &&
        !ifd_kv_dtype_gpu(g.dtype)) {
        IFD_ERROR("engine: %s K/V is CPU only; the %s backend reads f16, bf16, q8_0 or fp8",
                  ifd_kv_dtype_name(g.dtype), ifd_model_backend(m)->ops->name);
        return IFD_ENOTSUP;
    }
    if (dev < 0 || dev >= g.n_devices)
        return IFD_EINVAL;
    if (local_pool) {
        ifd_kvpool_geometry(local_pool, &lg);
        if (n_local == 0 || lg.n_layers != n_local || lg.n_kv_heads != g.n_kv_heads ||
            lg.head_dim != g.head_dim || lg.dtype != g.dtype || lg.block_size != g.block_size)
            return IFD_EMISMATCH;
        if (dev >= lg.n_devices || lg.kind[dev] != g.kind[dev])
            return IFD_EINVAL; /* both pools in the same kind of memory */
    }
    int rc = ifd__bind_pool(m, pool, dev);
    if (!rc && local_pool)
        rc = ifd__bind_pool(m, local_pool, dev); /* a device segment of its own */
    if (rc)
        return rc;
    ifd__model_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    c->m = m;
    c->kv = calloc(cfg->n_layer, sizeof *c->kv);
    c->copy_order = calloc(cfg->n_layer, sizeof *c->copy_order);
    if (!c->kv || !c->copy_order) {
        free(c->kv);
        free(c->copy_order);
        free(c);
        return IFD_ENOMEM;
    }
    /* layer l's index in its pool: global and local layers each in order */
    int gi = 0, li = 0;
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        const bool in_local = local_pool && cfg->sliding_window > 0 && cfg->layer_is_local[l];
        ifd_kvpool_t *p = in_local ? local_pool : pool;
        const int pl = in_local ? li++ : gi++;
        c->copy_order[in_local ? (uint32_t)(n_global + pl) : (uint32_t)pl] = l;
        c->kv[l].k = ifd_kvpool_layer_k(p, dev, pl);
        c->kv[l].v = ifd_kvpool_layer_v(p, dev, pl);
        c->kv[l].dtype = (ifd_dtype_t)g.dtype;
        c->kv[l].block_size = g.block_size;
        c->kv[l].n_kv_heads = g.n_kv_heads;
        c->kv[l].head_dim = g.head_dim;
        if (!c->kv[l].k || !c->kv[l].v) {
            free(c->kv);
            free(c->copy_order);
            free(c);
            return IFD_ENODEV;
        }
    }
    IFD_ASSERT(gi == n_global && li == (local_pool ? n_local : 0));
    c->n_copy_global = (uint32_t)n_global;
    out->ctx = c;
    out->n_vocab = (int32_t)cfg->n_vocab;
    out->n_ctx = (int32_t)cfg->n_ctx_train;
    out->forward = ifd__model_forward;
    out->n_local_layers = n_local;
    out->sliding_window = (int32_t)cfg->sliding_window;
    out->n_layers = (int32_t)cfg->n_layer;
    out->n_embd = (int32_t)cfg->n_embd;
    /* sampling on the device where the backend can (the CPU backend cannot) */
    out->forward_sample = ifd_model_backend(m)->ops->sample ? ifd__model_forward_sample : NULL;
    /* the host tier's copies: a device pool (with its local pool's twins:
     * both pools share K/V geometry and dtype, checked above) */
    c->block_bytes = ifd_kvpool_block_bytes(&g);
    const bool tiered = !ifd_model_backend(m)->ops->host_memory;
    out->kv_download = tiered ? ifd__model_kv_download : NULL;
    out->kv_upload = tiered ? ifd__model_kv_upload : NULL;
    out->kv_data_bytes = 2 * (size_t)c->block_bytes * cfg->n_layer;
    const ifd_backend_ops_t *ops = ifd_model_backend(m)->ops;
    const bool async = tiered && ops->download_async && ops->copy_fence && ops->copy_done &&
                       ops->host_alloc && ops->host_free;
    out->kv_download_async = async ? ifd__model_kv_download_async : NULL;
    out->kv_copy_done = async ? ifd__model_kv_copy_done : NULL;
    out->kv_host_alloc = async ? ifd__model_kv_host_alloc : NULL;
    out->kv_host_free = async ? ifd__model_kv_host_free : NULL;
    const bool up = async && ops->upload_async && ops->copy_wait;
    out->kv_upload_async = up ? ifd__model_kv_upload_async : NULL;
    out->kv_copy_wait = up ? ifd__model_kv_copy_wait : NULL;
    return 0;
}

void ifd_engine_model_free(ifd_engine_model_t *em)
{
    ifd__model_ctx_t *c = em->ctx;
    if (c) {
        free(c->kv);
        free(c->copy_order);
        free(c);
    }
    em->ctx = NULL;
}
