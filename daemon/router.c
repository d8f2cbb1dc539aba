/*
 * router.c — see router.h.
 *
 * Every live sequence has a slot in r->live, found by id through r->ids
 * (common/hash.h), and is in exactly
 * one of: a queue (doubly linked: the resumed queue, resumed ones pushed to
 * its front, or its client's queue, FIFO), a worker's list (dispatched), or
 * "limbo" — taken out of all while its final callbacks run, so that a
 * callback releasing it (or another sequence) never frees memory the
 * caller is still walking. Only ifd__free_seq unlinks a sequence from the
 * hash.
 *
 * Clients (router.h, "Fairness"): each live sequence holds a reference to
 * its client's slot in r->cl (found by id through r->cl_ids), which counts
 * its sequences dispatched in all and per worker (r->cl_on) and holds its
 * queue; the slot is freed with the client's last live sequence.
 *
 * ifd__pump is the only place that dispatches; it is not re-entered (a
 * submit from inside one of its callbacks sets `repump`).
 *
 * Workers are reached only through r->tp (router.h's transport). Their
 * states are read once per choice (ifd__choose fills r->ws), since nothing
 * between that and the send can change them.
 */
#include "router.h"

#include "error.h"
#include "hash.h"
#include "kvpool/kvkey.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ifd_rseq {
    uint64_t id;
    int32_t *tokens; /* prompt then generated */
    uint32_t n_prompt, n_gen, cap;
    /* The request as submitted, the one form it has from the API to the
     * worker: its arrays (stop ids, logit bias, grammar, allowed and
     * logprob ids) are the router's copies; id, tokens and n_generated are
     * filled at each send. */
    ifd_wire_add_t req;
    uint32_t n_plp; /* prompt positions 1 .. n_plp delivered to the owner */
    const ifd_rseq_ops_t *ops;
    void *owner; /* NULL once released */
    int worker;  /* >= 0 while dispatched */
    bool queued;
    bool limbo;
    bool dispatched_once;
    bool cancel_sent;
    uint32_t deaths;            /* workers lost in a row while it made no progress */
    uint64_t progress_at_death; /* n_gen + n_plp when the last one was lost */
    int32_t client;             /* its client's slot in r->cl */
    bool resumed;               /* queued in the resumed queue, not its client's */
    ifd_rseq_t *qprev, *qnext;
    ifd_rseq_t *wprev, *wnext;
    int32_t slot; /* in r->live */
};

/* One client's sequences (router.h, "Fairness"). */
typedef struct {
    uint32_t id;
    int n_live;               /* its live sequences: the slot is free at 0 */
    int inflight;             /* dispatched */
    ifd_rseq_t *qhead, *qtail; /* queued (not resumed), FIFO */
    uint64_t tried;           /* the ifd__next pass that tried it last */
} ifd__client_t;

struct ifd_router {
    ifd_router_params_t p;
    int32_t *eog;
    ifd_rseq_t **live; /* [live_cap]: live sequences by slot, NULL for a free slot */
    int32_t *free_slots, n_free, live_cap;
    ifd_hash_t ids; /* id → slot */
    int n_live;
    ifd_rseq_t *rhead, *rtail; /* resumed sequences: dispatched before any client's */
    int n_queued;              /* resumed and clients' together */
    ifd__client_t *cl;         /* [cl_cap] */
    int *cl_on;                /* [cl_cap * n_workers]: a client's sequences on worker w */
    int32_t *cl_free, n_cl_free, cl_cap;
    ifd_hash_t cl_ids;         /* client id → slot */
    int *n_clients_on;         /* [n_workers]: clients with a sequence on worker w */
    uint64_t pass;             /* ifd__next's passes */
    int n_dispatched;
    int n_workers;
    ifd_router_transport_t tp;
    ifd_router_worker_t *ws; /* [n_workers]: the transport's view, taken by each ifd__choose */
    ifd_rseq_t **whead;      /* per worker */
    int *load;
    uint64_t next_id;
    int rr;
    int block_size;
    int32_t *probe;
    int32_t *lprobe; /* [probe_cap]: local twins, with a local pool */
    uint64_t *lkeys; /* [probe_cap] */
    size_t probe_cap;
    int32_t *pkeys; /* [pkeys_cap]: an image prompt's tokens as the prefix index keys them */
    size_t pkeys_cap;
    int *scores;
    bool stopping;
    bool pumping, repump;
};

static void ifd__pump(ifd_router_t *r);

/* ---- live sequences by id -------------------------------------------------------------- */

static ifd_rseq_t *ifd__find(const ifd_router_t *r, uint64_t id)
{
    uint64_t h = ifd_hash_u64(id);
    uint32_t it = ifd_hash_first(&r->ids, h);
    for (int32_t k; (k = ifd_hash_next(&r->ids, h, &it)) >= 0;)
        if (r->live[k]->id == id)
            return r->live[k];
    return NULL;
}

static int ifd__live_add(ifd_router_t *r, ifd_rseq_t *s)
{
    if (!r->n_free) {
        int32_t cap = r->live_cap ? 2 * r->live_cap : 256;
        ifd_rseq_t **l = realloc(r->live, (size_t)cap * sizeof *l);
        if (!l)
            return IFD_ENOMEM;
        r->live = l;
        int32_t *f = realloc(r->free_slots, (size_t)cap * sizeof *f);
        if (!f)
            return IFD_ENOMEM;
        r->free_slots = f;
        for (int32_t k = cap - 1; k >= r->live_cap; k--) {
            r->live[k] = NULL;
            r->free_slots[r->n_free++] = k;
        }
        r->live_cap = cap;
    }
    int32_t k = r->free_slots[r->n_free - 1];
    if (ifd_hash_insert(&r->ids, ifd_hash_u64(s->id), k))
        return IFD_ENOMEM;
    r->n_free--;
    r->live[k] = s;
    s->slot = k;
    r->n_live++;
    return 0;
}

/* Frees a sequence's memory (not its links). */
static void ifd__seq_free_mem(ifd_rseq_t *s)
{
    free(s->tokens);
    free((void *)s->req.stop_ids);
    free((void *)s->req.grammar);
    free((void *)s->req.sampling.logit_bias);
    free((void *)s->req.allowed_ids);
    free((void *)s->req.lp_ids);
    free(s);
}

/* ---- clients ---------------------------------------------------------------------------- */

/* Client c's sequences dispatched to worker w. */
static int *ifd__on(const ifd_router_t *r, int32_t c, int w)
{
    return &r->cl_on[(size_t)c * (size_t)r->n_workers + (size_t)w];
}

/* Grows the client table by doubling (all or nothing for the caller: a
 * partial growth leaves cl_cap as it was). 0 or IFD_ENOMEM. */
static int ifd__clients_grow(ifd_router_t *r)
{
    int32_t cap = r->cl_cap ? 2 * r->cl_cap : 8;
    ifd__client_t *c = realloc(r->cl, (size_t)cap * sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    r->cl = c;
    int *on = realloc(r->cl_on, (size_t)cap * (size_t)r->n_workers * sizeof *on);
    if (!on)
        return IFD_ENOMEM;
    r->cl_on = on;
    int32_t *f = realloc(r->cl_free, (size_t)cap * sizeof *f);
    if (!f)
        return IFD_ENOMEM;
    r->cl_free = f;
    memset(r->cl + r->cl_cap, 0, (size_t)(cap - r->cl_cap) * sizeof *r->cl);
    for (int32_t k = cap - 1; k >= r->cl_cap; k--)
        r->cl_free[r->n_cl_free++] = k;
    r->cl_cap = cap;
    return 0;
}

/* A reference to client id's slot for a new live sequence (a new slot for a
 * client without one). 0 with *out set, or IFD_ENOMEM. */
static int ifd__client_ref(ifd_router_t *r, uint32_t id, int32_t *out)
{
    const uint64_t h = ifd_hash_u64(id);
    uint32_t it = ifd_hash_first(&r->cl_ids, h);
    for (int32_t k; (k = ifd_hash_next(&r->cl_ids, h, &it)) >= 0;) {
        if (r->cl[k].id == id) {
            r->cl[k].n_live++;
            *out = k;
            return 0;
        }
    }
    if (!r->n_cl_free && ifd__clients_grow(r))
        return IFD_ENOMEM;
    int32_t k = r->cl_free[r->n_cl_free - 1];
    if (ifd_hash_insert(&r->cl_ids, h, k))
        return IFD_ENOMEM;
    r->n_cl_free--;
    r->cl[k] = (ifd__client_t){.id = id, .n_live = 1};
    memset(ifd__on(r, k, 0), 0, (size_t)r->n_workers * sizeof(int));
    *out = k;
    return 0;
}

/* Drops a live sequence's reference; the last frees the slot. */
static void ifd__client_unref(ifd_router_t *r, int32_t k)
{
    ifd__client_t *c = &r->cl[k];
    IFD_ASSERT(c->n_live > 0);
    if (--c->n_live)
        return;
    IFD_ASSERT(c->inflight == 0 && !c->qhead);
    int found = ifd_hash_remove(&r->cl_ids, ifd_hash_u64(c->id), k);
    IFD_ASSERT(found == 0);
    r->cl_free[r->n_cl_free++] = k;
}

static void ifd__free_seq(ifd_router_t *r, ifd_rseq_t *s)
{
    int found = ifd_hash_remove(&r->ids, ifd_hash_u64(s->id), s->slot);
    IFD_ASSERT(found == 0);
    r->live[s->slot] = NULL;
    r->free_slots[r->n_free++] = s->slot;
    r->n_live--;
    ifd__client_unref(r, s->client);
    ifd__seq_free_mem(s);
}

/* ---- lists ---------------------------------------------------------------------------- */

static void ifd__q_unlink(ifd_router_t *r, ifd_rseq_t *s)
{
    IFD_ASSERT(s->queued);
    ifd__client_t *c = &r->cl[s->client];
    ifd_rseq_t **head = s->resumed ? &r->rhead : &c->qhead;
    ifd_rseq_t **tail = s->resumed ? &r->rtail : &c->qtail;
    if (s->qprev)
        s->qprev->qnext = s->qnext;
    else
        *head = s->qnext;
    if (s->qnext)
        s->qnext->qprev = s->qprev;
    else
        *tail = s->qprev;
    s->qprev = s->qnext = NULL;
    s->queued = false;
    s->resumed = false;
    r->n_queued--;
}

/* Queues s: resumed, at the front of the resumed queue; else at the back of
 * its client's. */
static void ifd__q_push(ifd_router_t *r, ifd_rseq_t *s, bool resumed)
{
    s->queued = true;
    s->resumed = resumed;
    if (resumed) {
        s->qprev = NULL;
        s->qnext = r->rhead;
        if (r->rhead)
            r->rhead->qprev = s;
        else
            r->rtail = s;
        r->rhead = s;
    } else {
        ifd__client_t *c = &r->cl[s->client];
        s->qnext = NULL;
        s->qprev = c->qtail;
        if (c->qtail)
            c->qtail->qnext = s;
        else
            c->qhead = s;
        c->qtail = s;
    }
    r->n_queued++;
}

/* A queued sequence, or NULL when none is. */
static ifd_rseq_t *ifd__q_any(const ifd_router_t *r)
{
    if (r->rhead)
        return r->rhead;
    for (int32_t k = 0; k < r->cl_cap; k++)
        if (r->cl[k].n_live && r->cl[k].qhead)
            return r->cl[k].qhead;
    return NULL;
}

static void ifd__w_unlink(ifd_router_t *r, ifd_rseq_t *s)
{
    int w = s->worker;
    IFD_ASSERT(w >= 0);
    if (s->wprev)
        s->wprev->wnext = s->wnext;
    else
        r->whead[w] = s->wnext;
    if (s->wnext)
        s->wnext->wprev = s->wprev;
    s->wprev = s->wnext = NULL;
    s->worker = -1;
    r->load[w]--;
    r->n_dispatched--;
    r->cl[s->client].inflight--;
    if (--*ifd__on(r, s->client, w) == 0)
        r->n_clients_on[w]--;
}

static void ifd__w_link(ifd_router_t *r, ifd_rseq_t *s, int w)
{
    s->worker = w;
    s->wprev = NULL;
    s->wnext = r->whead[w];
    if (r->whead[w])
        r->whead[w]->wprev = s;
    r->whead[w] = s;
    r->load[w]++;
    r->n_dispatched++;
    r->cl[s->client].inflight++;
    if ((*ifd__on(r, s->client, w))++ == 0)
        r->n_clients_on[w]++;
}

/* ---- create / destroy ----------------------------------------------------------------- */

int ifd_router_create(ifd_router_t **out, const ifd_router_params_t *p)
{
    const ifd_router_transport_t *tp = &p->transport;
    if (!p->pool || tp->n_workers < 1 || !tp->worker || !tp->send || !tp->kill || !tp->all_failed)
        return IFD_EINVAL;
    ifd_router_t *r = calloc(1, sizeof *r);
    if (!r)
        return IFD_ENOMEM;
    r->p = *p;
    r->tp = *tp;
    r->n_workers = tp->n_workers;
    r->whead = calloc((size_t)r->n_workers, sizeof *r->whead);
    r->load = calloc((size_t)r->n_workers, sizeof *r->load);
    r->scores = calloc((size_t)r->n_workers, sizeof *r->scores);
    r->ws = calloc((size_t)r->n_workers, sizeof *r->ws);
    r->n_clients_on = calloc((size_t)r->n_workers, sizeof *r->n_clients_on);
    r->eog = p->n_eog_ids ? malloc(p->n_eog_ids * sizeof *r->eog) : NULL;
    if (ifd_hash_init(&r->ids, 256) || ifd_hash_init(&r->cl_ids, 8) || !r->whead || !r->load ||
        !r->scores || !r->ws || !r->n_clients_on || (p->n_eog_ids && !r->eog)) {
        ifd_router_destroy(r);
        return IFD_ENOMEM;
    }
    if (p->n_eog_ids)
        memcpy(r->eog, p->eog_ids, p->n_eog_ids * sizeof *r->eog);
    r->p.eog_ids = r->eog;
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(p->pool, &g);
    r->block_size = g.block_size > 0 ? g.block_size : 16;
    r->next_id = 1;
    *out = r;
    return 0;
}

void ifd_router_destroy(ifd_router_t *r)
{
    if (!r)
        return;
    for (int32_t k = 0; k < r->live_cap; k++) {
        ifd_rseq_t *s = r->live[k];
        if (s)
            ifd__seq_free_mem(s);
    }
    free(r->live);
    free(r->free_slots);
    ifd_hash_close(&r->ids);
    free(r->cl);
    free(r->cl_on);
    free(r->cl_free);
    ifd_hash_close(&r->cl_ids);
    free(r->n_clients_on);
    free(r->whead);
    free(r->load);
    free(r->scores);
    free(r->ws);
    free(r->eog);
    free(r->probe);
    free(r->lprobe);
    free(r->pkeys);
    free(r->lkeys);
    free(r);
}

void ifd_router_set_slack(ifd_router_t *r, int route_slack)
{
    r->p.route_slack = route_slack;
}

/* ---- submit / release --------------------------------------------------------------------- */

/* A copy of n bytes at p (malloc), NULL for none; *oom set when it fails. */
static void *ifd__dup(const void *p, size_t n, bool *oom)
{
    void *d = n ? malloc(n) : NULL;
    if (d)
        memcpy(d, p, n);
    *oom |= n && !d;
    return d;
}

/* Copies what the request points to into s->req (caller: the request is checked). */
static int ifd__seq_copy_req(ifd_rseq_t *s, const ifd_wire_add_t *p)
{
    bool oom = false;
    s->req = *p;
    s->req.tokens = NULL;
    s->req.sampling.logit_bias = ifd__dup(
        p->sampling.logit_bias, p->sampling.n_logit_bias * sizeof *p->sampling.logit_bias, &oom);
    s->req.stop_ids = ifd__dup(p->stop_ids, p->n_stop_ids * sizeof *p->stop_ids, &oom);
    s->req.grammar = ifd__dup(p->grammar, p->n_grammar * sizeof *p->grammar, &oom);
    s->req.allowed_ids = ifd__dup(p->allowed_ids, p->n_allowed_ids * sizeof *p->allowed_ids, &oom);
    s->req.lp_ids = ifd__dup(p->lp_ids, p->n_lp_ids * sizeof *p->lp_ids, &oom);
    return oom ? IFD_ENOMEM : 0;
}

int ifd_router_submit(ifd_router_t *r, const ifd_wire_add_t *p, const ifd_rseq_ops_t *ops,
                      void *owner, ifd_rseq_t **out)
{
    if (!p->tokens || p->n_tokens < 1 || p->n_generated != 0 || p->max_tokens < 1 ||
        p->n_images > IFD_WIRE_MAX_IMAGES || (p->n_images && !p->images) ||
        (uint64_t)p->n_tokens + p->max_tokens > IFD_WIRE_MAX_TOKENS || !ops || !owner)
        return IFD_EINVAL;
    ifd_rseq_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    s->cap = p->n_tokens + (p->max_tokens < 64 ? p->max_tokens : 64);
    s->tokens = malloc(s->cap * sizeof *s->tokens);
    if (ifd__seq_copy_req(s, p) || !s->tokens) {
        ifd__seq_free_mem(s);
        return IFD_ENOMEM;
    }
    memcpy(s->tokens, p->tokens, p->n_tokens * sizeof *s->tokens);
    s->n_prompt = p->n_tokens;
    s->ops = ops;
    s->owner = owner;
    s->worker = -1;
    if (ifd__client_ref(r, p->client, &s->client)) {
        ifd__seq_free_mem(s);
        return IFD_ENOMEM;
    }
    s->id = r->next_id++;
    if (ifd__live_add(r, s)) {
        ifd__client_unref(r, s->client);
        ifd__seq_free_mem(s);
        return IFD_ENOMEM;
    }
    ifd__q_push(r, s, false);
    *out = s;
    ifd__pump(r);
    return 0;
}

void ifd_router_release(ifd_router_t *r, ifd_rseq_t *s)
{
    if (!s)
        return;
    s->owner = NULL;
    if (s->limbo)
        return; /* freed by whoever put it in limbo */
    if (s->worker >= 0) {
        if (!s->cancel_sent) {
            s->cancel_sent = true;
            ifd_wire_msg_t m = {.type = IFD_WIRE_CANCEL};
            m.u.cancel.id = s->id;
            if (r->tp.send(r->tp.ctx, s->worker, &m) != 0)
                IFD_DEBUG("router: cancel of %llu not sent (worker gone)",
                          (unsigned long long)s->id);
        }
        return; /* freed when FINISHED comes (or the worker dies) */
    }
    if (s->queued)
        ifd__q_unlink(r, s);
    ifd__free_seq(r, s);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

/* Worker w can take one more sequence of client c now (r->ws as
 * ifd__choose took it). over false: it runs fewer than its max_seqs. over
 * true (asked when no worker has room so): beyond max_seqs, while c has
 * fewer there than its share — max_seqs over the clients with a sequence
 * there, c counted — and at most twice max_seqs in all: the engine then
 * makes room for c's sequence by preempting one of the client running the
 * most (engine.h, "Fairness"). With one client on w, never. */
static bool ifd__has_room(const ifd_router_t *r, int w, int32_t c, bool over)
{
    const uint64_t max = r->ws[w].max_seqs;
    if (!r->ws[w].ready)
        return false;
    if (!over)
        return (uint64_t)r->load[w] < max;
    const int on = *ifd__on(r, c, w);
    const int n_cl = r->n_clients_on[w] + (on == 0);
    return n_cl >= 2 && (uint64_t)on * (uint64_t)n_cl < max && (uint64_t)r->load[w] < 2 * max;
}

/* True when some worker with room (as ifd__has_room(…, c, over)) answers its
 * pings: then the unresponsive ones (missed pings, /health "degraded") get
 * no new sequence. With none healthy, unresponsive ones still do, so a slow
 * machine is not idled; sequences already on a worker stay there
 * (docs/reliability.md). */
static bool ifd__avoid_unresponsive(const ifd_router_t *r, int32_t c, bool over)
{
    for (int w = 0; w < r->n_workers; w++)
        if (ifd__has_room(r, w, c, over) && !r->ws[w].unresponsive)
            return true;
    return false;
}

/* The first n tokens of s as the prefix index knows them (kvkey.h): its
 * tokens, or for a prompt with images a copy with each image's tokens
 * replaced by their keys (in r->pkeys), as the worker's engine publishes
 * them — else two prompts that differ only by their picture would score as
 * one prefix. NULL when the copy cannot be allocated (no prefix scored). */
static const int32_t *ifd__probe_keys(ifd_router_t *r, const ifd_rseq_t *s, uint32_t n)
{
    if (s->req.n_images == 0)
        return s->tokens;
    if (n > r->pkeys_cap) {
        int32_t *k = realloc(r->pkeys, (size_t)n * sizeof *k);
        if (!k)
            return NULL;
        r->pkeys = k;
        r->pkeys_cap = n;
    }
    memcpy(r->pkeys, s->tokens, (size_t)n * sizeof *r->pkeys);
    for (uint32_t i = 0; i < s->req.n_images; i++) {
        const ifd_wire_image_t *im = &s->req.images[i];
        const uint64_t hash[2] = {im->hash_lo, im->hash_hi};
        if (im->pos < n)
            ifd_kvkey_image_span(r->pkeys, s->tokens, (int32_t)n, (int32_t)im->pos,
                                 (int32_t)(im->n_tokens < n - im->pos ? im->n_tokens : n - im->pos),
                                 hash);
    }
    return r->pkeys;
}

/* With a local pool: scores each candidate device with the run of the
 * probe's got blocks its engine could use (the leading run on the device,
 * cut to the local twins of its window), keys the tokens as the index does.
 * Returns 0: nothing left for the caller's per-block count. */
static int ifd__score_local(ifd_router_t *r, const int32_t *keys, int got)
{
    for (int w = 0; w < r->n_workers; w++) {
        if (r->scores[w] != 0) /* not a candidate, or its device scored already */
            continue;
        const int dev = r->ws[w].kv_device;
        int k = 0;
        while (k < got && ifd_kvpool_block_device(r->p.pool, r->probe[k]) == dev)
            k++;
        k = ifd_kvpool_window_run(r->p.pool, r->p.local_pool, -1, dev, r->p.sliding_window, 0, keys,
                                  r->probe, k, r->lprobe, r->lkeys, NULL);
        for (int v = w; k > 0 && v < r->n_workers; v++)
            if (r->scores[v] == 0 && r->ws[v].kv_device == dev)
                r->scores[v] = k;
    }
    return 0;
}

/* Adds to each candidate's score (r->scores[w] >= 0) the blocks of s's
 * cached prefix (the probe's run, which may span devices) that lie on its
 * worker's device; with a local pool, the run its engine could use there
 * (ifd__score_local). */
static void ifd__score_prefix(ifd_router_t *r, const ifd_rseq_t *s)
{
    uint32_t n_tok = s->n_prompt + s->n_gen;
    int max_blocks = n_tok > 1 ? (int)((n_tok - 1) / (uint32_t)r->block_size) : 0;
    if (max_blocks > 0 && s->req.use_cache) {
        if ((size_t)max_blocks > r->probe_cap) {
            int32_t *pb = realloc(r->probe, (size_t)max_blocks * sizeof *pb);
            int32_t *lb = pb ? realloc(r->lprobe, (size_t)max_blocks * sizeof *lb) : NULL;
            uint64_t *lk = lb ? realloc(r->lkeys, (size_t)max_blocks * sizeof *lk) : NULL;
            if (pb)
                r->probe = pb;
            if (lb)
                r->lprobe = lb;
            if (lk) {
                r->lkeys = lk;
                r->probe_cap = (size_t)max_blocks;
            }
        }
        const int32_t *keys = ifd__probe_keys(r, s, n_tok);
        if ((size_t)max_blocks <= r->probe_cap && keys) {
            int got = ifd_kvpool_probe(r->p.pool, 0, keys, (int)n_tok - 1, r->probe, max_blocks);
            if (r->p.local_pool && r->p.sliding_window > 0)
                got = ifd__score_local(r, keys, got);
            for (int b = 0; b < got; b++) {
                int dev = ifd_kvpool_block_device(r->p.pool, r->probe[b]);
                for (int w = 0; w < r->n_workers; w++)
                    if (r->scores[w] >= 0 && r->ws[w].kv_device == dev)
                        r->scores[w]++;
            }
        }
    }
}

/* The worker for s, or -1 when none has room. Asks the transport for every
 * worker's state once, here: nothing below calls out. */
static int ifd__choose(ifd_router_t *r, ifd_rseq_t *s)
{
    int n_cand = 0, only = -1;
    for (int w = 0; w < r->n_workers; w++)
        r->tp.worker(r->tp.ctx, w, &r->ws[w]);
    /* room below max_seqs first; only without any, a client's share beyond it */
    for (int over = 0; over < 2 && n_cand == 0; over++) {
        bool avoid = ifd__avoid_unresponsive(r, s->client, over);
        for (int w = 0; w < r->n_workers; w++) {
            r->scores[w] = -1;
            if (!ifd__has_room(r, w, s->client, over) || (avoid && r->ws[w].unresponsive))
                continue;
            r->scores[w] = 0;
            n_cand++;
            only = w;
        }
    }
    if (n_cand <= 1)
        return only;
    /* prefix-aware: count the cached leading blocks on each worker's device */
    ifd__score_prefix(r, s);
    int least = -1, best = -1;
    for (int k = 0; k < r->n_workers; k++) {
        int w = (r->rr + k) % r->n_workers;
        if (r->scores[w] < 0)
            continue;
        if (least < 0 || r->load[w] < r->load[least])
            least = w;
        if (best < 0 || r->scores[w] > r->scores[best] ||
            (r->scores[w] == r->scores[best] && r->load[w] < r->load[best]))
            best = w;
    }
    int pick = least;
    if (best >= 0 && r->scores[best] > 0 && r->load[best] <= r->load[least] + r->p.route_slack)
        pick = best;
    r->rr = (pick + 1) % r->n_workers;
    return pick;
}

static int ifd__send_add(ifd_router_t *r, ifd_rseq_t *s, int w)
{
    ifd_wire_msg_t m = {.type = IFD_WIRE_ADD};
    ifd_wire_add_t *a = &m.u.add;
    *a = s->req;
    a->id = s->id;
    a->tokens = s->tokens;
    a->n_tokens = s->n_prompt + s->n_gen;
    a->n_generated = s->n_gen;
    /* a resumed sequence asks again only while some are missing */
    a->prompt_logprobs = s->n_plp + 1 < s->n_prompt ? s->req.prompt_logprobs : 0;
    return r->tp.send(r->tp.ctx, w, &m);
}

/* The next sequence to dispatch and its worker (router.h, "Fairness"): the
 * first resumed one; else the first queued one of the client with the
 * fewest sequences dispatched (ties: the one that came first). A candidate
 * no worker has room for gives way to the next client. false: none can go. */
static bool ifd__next(ifd_router_t *r, ifd_rseq_t **out, int *w)
{
    if (r->rhead && (*w = ifd__choose(r, r->rhead)) >= 0) {
        *out = r->rhead;
        return true;
    }
    r->pass++;
    for (;;) {
        int32_t best = -1;
        for (int32_t k = 0; k < r->cl_cap; k++) {
            const ifd__client_t *c = &r->cl[k];
            if (!c->n_live || !c->qhead || c->tried == r->pass)
                continue;
            const ifd__client_t *b = best >= 0 ? &r->cl[best] : NULL;
            if (!b || c->inflight < b->inflight ||
                (c->inflight == b->inflight && c->qhead->id < b->qhead->id))
                best = k;
        }
        if (best < 0)
            return false;
        r->cl[best].tried = r->pass;
        if ((*w = ifd__choose(r, r->cl[best].qhead)) >= 0) {
            *out = r->cl[best].qhead;
            return true;
        }
    }
}

static void ifd__pump(ifd_router_t *r)
{
    if (r->pumping) {
        r->repump = true;
        return;
    }
    r->pumping = true;
    do {
        r->repump = false;
        ifd_rseq_t *s;
        int w;
        while (ifd__next(r, &s, &w)) {
            int rc = ifd__send_add(r, s, w);
            if (rc == IFD_EINVAL) {
                /* cannot be encoded: fail it rather than loop */
                ifd__q_unlink(r, s);
                s->limbo = true;
                ifd_wire_finished_t f = {s->id, IFD_WIRE_FINISH_ERROR, -1, s->n_prompt, s->n_gen,
                                         0};
                if (s->owner && s->ops->on_error)
                    s->ops->on_error(s->owner, s, IFD_EINVAL, "the request could not be sent");
                if (s->owner)
                    s->ops->on_finished(s->owner, s, &f);
                ifd__free_seq(r, s);
                continue;
            }
            if (rc) {
                IFD_WARN("router: worker %d cannot take requests: %s", w, ifd_strerror(rc));
                r->tp.kill(r->tp.ctx, w, "its socket failed");
                continue; /* it is no longer READY */
            }
            ifd__q_unlink(r, s);
            ifd__w_link(r, s, w);
            if (!s->dispatched_once) {
                s->dispatched_once = true;
                if (s->owner && s->ops->on_dispatched)
                    s->ops->on_dispatched(s->owner, s);
            }
        }
    } while (r->repump);
    r->pumping = false;
}

/* ---- worker events -------------------------------------------------------------------------- */

void ifd_router_on_ready(ifd_router_t *r, int w)
{
    (void)w;
    ifd__pump(r);
}

static int ifd__append(ifd_rseq_t *s, int32_t tok)
{
    uint32_t n = s->n_prompt + s->n_gen;
    if (n == s->cap) {
        uint32_t cap = s->cap * 2;
        int32_t *t = realloc(s->tokens, cap * sizeof *t);
        if (!t)
            return IFD_ENOMEM;
        s->tokens = t;
        s->cap = cap;
    }
    s->tokens[n] = tok;
    s->n_gen++;
    return 0;
}

/* Finishes a sequence taken out of every list (limbo) and frees it. */
static void ifd__finish(ifd_router_t *r, ifd_rseq_t *s, const ifd_wire_finished_t *f, int err,
                        const char *msg)
{
    s->limbo = true;
    if (err && s->owner && s->ops->on_error)
        s->ops->on_error(s->owner, s, err, msg);
    if (s->owner)
        s->ops->on_finished(s->owner, s, f);
    ifd__free_seq(r, s);
}

void ifd_router_on_message(ifd_router_t *r, int w, const ifd_wire_msg_t *m)
{
    switch (m->type) {
    case IFD_WIRE_TOKENS:
        for (uint32_t i = 0; i < m->u.tokens.n_events; i++) {
            const ifd_wire_token_t *ev = &m->u.tokens.events[i];
            ifd_rseq_t *s = ifd__find(r, ev->id);
            if (!s || s->worker != w || s->limbo)
                continue;
            if (ifd__append(s, ev->token)) {
                IFD_ERROR("router: out of memory for tokens of %llu", (unsigned long long)s->id);
                continue;
            }
            if (s->owner && s->ops->on_token)
                s->ops->on_token(s->owner, s, ev);
        }
        break;
    case IFD_WIRE_PROMPT_LOGPROBS: {
        const ifd_wire_prompt_logprobs_t *p = &m->u.prompt_logprobs;
        ifd_rseq_t *s = ifd__find(r, p->id);
        if (!s || s->worker != w || s->limbo || !s->req.prompt_logprobs)
            break;
        /* keep what continues the positions held; drop repeats (a
         * resumption recomputes from 1) and anything past the prompt */
        uint64_t first = p->pos, last = (uint64_t)p->pos + p->n_entries - 1;
        if (last > s->n_prompt - 1)
            last = s->n_prompt - 1;
        if (first > (uint64_t)s->n_plp + 1) {
            IFD_WARN("router: prompt logprobs of %llu from %u, expected %u: dropped",
                     (unsigned long long)s->id, p->pos, s->n_plp + 1);
            break;
        }
        if (first <= s->n_plp)
            IFD_DEBUG("router: prompt logprobs %u..%u of %llu came again (resumed): dropped",
                      p->pos, (unsigned)(last < s->n_plp ? last : s->n_plp),
                      (unsigned long long)s->id);
        if (last <= s->n_plp)
            break;
        ifd_wire_prompt_logprobs_t v = *p;
        uint32_t skip = s->n_plp + 1 - p->pos;
        v.pos = s->n_plp + 1;
        v.entries = p->entries + skip;
        v.n_entries = (uint32_t)(last - v.pos + 1);
        s->n_plp = (uint32_t)last;
        if (s->owner && s->ops->on_prompt_logprobs)
            s->ops->on_prompt_logprobs(s->owner, s, &v);
        break;
    }
    case IFD_WIRE_ERROR: {
        ifd_rseq_t *s = ifd__find(r, m->u.error.id);
        if (s && s->worker == w && s->owner && s->ops->on_error)
            s->ops->on_error(s->owner, s, m->u.error.code,
                             m->u.error.message ? m->u.error.message : "worker error");
        break;
    }
    case IFD_WIRE_FINISHED: {
        ifd_rseq_t *s = ifd__find(r, m->u.finished.id);
        if (!s || s->worker != w || s->limbo)
            break;
        ifd__w_unlink(r, s);
        ifd__finish(r, s, &m->u.finished, 0, NULL);
        ifd__pump(r);
        break;
    }
    default:
        break;
    }
}

static bool ifd__has(const int32_t *v, uint32_t n, int32_t x)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

static int ifd__cmp_id(const void *a, const void *b)
{
    uint64_t x = (*(ifd_rseq_t *const *)a)->id, y = (*(ifd_rseq_t *const *)b)->id;
    return x < y ? -1 : x > y;
}

/* A sequence whose worker died: counts the deaths in a row with no new
 * token or prompt logprob in between. IFD__POISON_DEATHS of them mean the
 * sequence itself most likely kills its worker (a poison request), and
 * resuming it again would take every worker down with it in turn. */
enum { IFD__POISON_DEATHS = 3 };

static bool ifd__poisoned(ifd_rseq_t *s)
{
    const uint64_t progress = (uint64_t)s->n_gen + s->n_plp;
    s->deaths = s->deaths && progress == s->progress_at_death ? s->deaths + 1 : 1;
    s->progress_at_death = progress;
    return s->deaths >= IFD__POISON_DEATHS;
}

void ifd_router_on_lost(ifd_router_t *r, int w)
{
    int n = r->load[w];
    if (n == 0) {
        ifd__pump(r);
        return;
    }
    ifd_rseq_t **v = malloc((size_t)n * sizeof *v);
    int k = 0;
    while (r->whead[w]) {
        ifd_rseq_t *s = r->whead[w];
        ifd__w_unlink(r, s);
        s->limbo = true;
        s->cancel_sent = false;
        if (v)
            v[k++] = s;
        else
            ifd__finish(
                r, s,
                &(ifd_wire_finished_t){s->id, IFD_WIRE_FINISH_ERROR, -1, s->n_prompt, s->n_gen, 0},
                IFD_ENOMEM, "out of memory");
    }
    if (v)
        qsort(v, (size_t)k, sizeof *v, ifd__cmp_id);
    int resumed = 0;
    /* finish what is over, collect the rest in id order */
    for (int i = 0; i < k; i++) {
        ifd_rseq_t *s = v[i];
        ifd_wire_finished_t f = {s->id, IFD_WIRE_FINISH_ERROR, -1, s->n_prompt, s->n_gen, 0};
        int32_t last = s->n_gen ? s->tokens[s->n_prompt + s->n_gen - 1] : -1;
        if (!s->owner) {
            ifd__free_seq(r, s);
            v[i] = NULL;
        } else if (s->n_gen >= s->req.max_tokens) {
            f.reason = IFD_WIRE_FINISH_LENGTH;
            ifd__finish(r, s, &f, 0, NULL);
            v[i] = NULL;
        } else if (s->n_gen && (ifd__has(s->req.stop_ids, s->req.n_stop_ids, last) ||
                                (!s->req.ignore_eos && ifd__has(r->eog, r->p.n_eog_ids, last)))) {
            f.reason = IFD_WIRE_FINISH_STOP;
            f.stop_token = last;
            ifd__finish(r, s, &f, 0, NULL);
            v[i] = NULL;
        } else if (r->stopping) {
            ifd__finish(r, s, &f, IFD_ECLOSED, "the server is shutting down");
            v[i] = NULL;
        } else if (ifd__poisoned(s)) {
            IFD_ERROR("router: sequence %llu was on %d workers that died in a row without "
                      "progress: failing it instead of resuming it",
                      (unsigned long long)s->id, (int)s->deaths);
            char msg[128];
            snprintf(msg, sizeof msg,
                     "the worker serving this request died %d times in a row while it made no "
                     "progress; it is not retried",
                     IFD__POISON_DEATHS);
            ifd__finish(r, s, &f, IFD_EINTERNAL, msg);
            v[i] = NULL;
        }
    }
    /* requeue at the front, keeping their order; owners may have released
     * some of them from inside the callbacks above */
    for (int i = k - 1; i >= 0; i--) {
        ifd_rseq_t *s = v[i];
        if (!s)
            continue;
        s->limbo = false;
        if (!s->owner) {
            ifd__free_seq(r, s);
            continue;
        }
        ifd__q_push(r, s, true);
        resumed++;
    }
    free(v);
    if (resumed) {
        IFD_WARN("router: resuming %d sequences of worker %d elsewhere", resumed, w);
        if (r->p.metrics)
            r->p.metrics->worker_redispatched += (uint64_t)resumed;
    }
    ifd_router_on_failed(r); /* fails the queue if nobody is left */
    ifd__pump(r);
}

void ifd_router_on_failed(ifd_router_t *r)
{
    if (!r->tp.all_failed(r->tp.ctx))
        return;
    for (ifd_rseq_t *s; (s = ifd__q_any(r));) {
        ifd__q_unlink(r, s);
        ifd_wire_finished_t f = {s->id, IFD_WIRE_FINISH_ERROR, -1, s->n_prompt, s->n_gen, 0};
        ifd__finish(r, s, &f, IFD_ENODEV, "no worker is available (crash loop)");
    }
}

void ifd_router_stopping(ifd_router_t *r)
{
    r->stopping = true;
}

int ifd_router_queued(const ifd_router_t *r)
{
    return r->n_queued;
}

int ifd_router_dispatched(const ifd_router_t *r)
{
    return r->n_dispatched;
}

int ifd_router_worker_load(const ifd_router_t *r, int w)
{
    return w >= 0 && w < r->n_workers ? r->load[w] : 0;
}
