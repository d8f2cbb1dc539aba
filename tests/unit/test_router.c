/*
 * test_router.c — the router's policy (daemon/router.h) against a fake
 * transport: no worker process, no socket, no loop. The fake records every
 * frame the router sends (ADD, CANCEL) and answers the router's questions
 * (which worker is ready, has room, is unresponsive, on which device;
 * whether all failed) from a table the test sets; its kill reports the
 * loss at once, as the supervisor does. Worker events (READY, TOKENS,
 * PROMPT_LOGPROBS, FINISHED, a death) are handed in as the supervisor's
 * callbacks would. The KV pool is a real, small host pool with two devices,
 * so prefix hits are those ifd_kvpool_probe finds.
 *
 * Covered: one ADD frame per dispatch with the sequence's fields; prefix
 * preference (the worker whose device holds the longest cached prefix),
 * use_cache off; route_slack and its boundary (set_slack); load ties (the
 * lowest load, then round robin); queueing while no worker is ready or
 * every one is full, FIFO, dispatch on READY and on FINISHED; unresponsive
 * workers avoided while a responsive one has room; a worker dying with
 * sequences in flight: re-sent elsewhere as prompt + streamed tokens with
 * n_generated, in id order ahead of the queue, the stream continuing with
 * no gap and no duplicate, stale frames of the dead worker ignored, the
 * redispatch metric; sequences already over finished locally (length, EOS,
 * a stop id), released ones freed, failures while stopping; a poison
 * sequence failed after three deaths without progress; every worker failed
 * → the queue fails; a send that fails (worker killed, routed elsewhere) or
 * cannot be encoded (the sequence fails); release and cancellation (queued,
 * dispatched, from inside callbacks); submits from inside callbacks;
 * prompt logprobs across a resumption; the local layers' window scoring;
 * create's and submit's argument checks. Callbacks are counted per
 * sequence (each at most one on_finished, none after a release); the router
 * ends every test with nothing queued or dispatched, and the ASan build
 * (LeakSanitizer, in each forked test) checks that nothing leaks.
 *
 * Every case fails when the rule it covers is broken in router.c (checked
 * by mutating it, one rule at a time: the prefix score, the slack and its
 * bound, the load and round-robin tie-breaks, room and readiness, the
 * resume order and its tokens, the local finishes, the poison count, the
 * queue's failure, cancel, the unresponsive rule, the window scoring, the
 * prompt logprob dedup, the kill on a broken socket).
 */
#include "testutil.h"

#include "daemon/router.h"
#include "error.h"
#include "kvpool/kvpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW   4
#define MAXF   256
#define MAXTOK 64
#define BS     4 /* the pool's block size */
#define EOS    2 /* the model's end-of-generation id */

/* ---- the fake transport ------------------------------------------------------------------ */

typedef struct {
    int type; /* IFD_WIRE_ADD or IFD_WIRE_CANCEL */
    int worker;
    uint64_t id;
    uint32_t n_tokens, n_generated, max_tokens, prompt_logprobs;
    int32_t tokens[MAXTOK];
} frame_t;

typedef struct {
    ifd_router_worker_t w[MAXW];
    int n_workers;
    int send_rc[MAXW]; /* what send answers for worker w (0: taken) */
    bool all_failed;
    frame_t f[MAXF];
    int n_frames;
    int n_send, n_kill, n_worker_calls, n_all_failed_calls;
    int killed[MAXW];
    ifd_router_t *r; /* for kill: the loss is reported at once, as the supervisor does */
} fake_t;

static void fake_worker(void *ctx, int w, ifd_router_worker_t *out)
{
    fake_t *f = ctx;
    ck_assert_int_ge(w, 0);
    ck_assert_int_lt(w, f->n_workers);
    f->n_worker_calls++;
    *out = f->w[w];
}

static int fake_send(void *ctx, int w, const ifd_wire_msg_t *m)
{
    fake_t *f = ctx;
    ck_assert_int_ge(w, 0);
    ck_assert_int_lt(w, f->n_workers);
    f->n_send++;
    if (f->send_rc[w])
        return f->send_rc[w];
    ck_assert_int_lt(f->n_frames, MAXF);
    frame_t *fr = &f->f[f->n_frames++];
    memset(fr, 0, sizeof *fr);
    fr->type = m->type;
    fr->worker = w;
    if (m->type == IFD_WIRE_ADD) {
        const ifd_wire_add_t *a = &m->u.add;
        fr->id = a->id;
        fr->n_tokens = a->n_tokens;
        fr->n_generated = a->n_generated;
        fr->max_tokens = a->max_tokens;
        fr->prompt_logprobs = a->prompt_logprobs;
        ck_assert_uint_le(a->n_tokens, MAXTOK);
        memcpy(fr->tokens, a->tokens, a->n_tokens * sizeof *a->tokens);
    } else {
        ck_assert_int_eq(m->type, IFD_WIRE_CANCEL);
        fr->id = m->u.cancel.id;
    }
    return 0;
}

static void fake_kill(void *ctx, int w, const char *why)
{
    fake_t *f = ctx;
    ck_assert_ptr_nonnull(why);
    f->n_kill++;
    f->killed[w]++;
    f->w[w].ready = false; /* DOWN */
    ifd_router_on_lost(f->r, w);
}

static bool fake_all_failed(void *ctx)
{
    fake_t *f = ctx;
    f->n_all_failed_calls++;
    return f->all_failed;
}

/* ---- the owner: counts every callback of one sequence ------------------------------------ */

typedef struct owner owner_t;
struct owner {
    ifd_router_t *r;
    ifd_rseq_t *s; /* NULL once finished or released */
    int n_token, n_error, n_finished, n_dispatched, n_plp;
    int32_t toks[MAXTOK];
    int err;
    ifd_wire_finished_t fin;
    uint32_t plp_last; /* prompt positions 1 .. plp_last delivered */
    /* what to do from inside a callback */
    bool release_on_token;
    owner_t *release_on_finished; /* releases that sequence from on_finished */
    owner_t *submit_on_dispatch;  /* submits that one from on_dispatched */
    owner_t *submit_on_finished;  /* and that one from on_finished */
};

static void on_token(void *owner, ifd_rseq_t *s, const ifd_wire_token_t *ev)
{
    owner_t *o = owner;
    ck_assert_ptr_eq(s, o->s);
    ck_assert_int_eq(o->n_finished, 0);
    ck_assert_int_lt(o->n_token, MAXTOK);
    o->toks[o->n_token++] = ev->token;
    if (o->release_on_token) {
        ifd_router_release(o->r, s);
        o->s = NULL;
    }
}

static void on_error(void *owner, ifd_rseq_t *s, int code, const char *message)
{
    owner_t *o = owner;
    ck_assert_ptr_eq(s, o->s);
    ck_assert_ptr_nonnull(message);
    ck_assert_int_eq(o->n_finished, 0);
    o->n_error++;
    o->err = code;
}

static int submit(ifd_router_t *r, owner_t *o, const int32_t *prompt, uint32_t n, uint32_t max);

static void on_finished(void *owner, ifd_rseq_t *s, const ifd_wire_finished_t *f)
{
    owner_t *o = owner;
    ck_assert_ptr_eq(s, o->s);
    ck_assert_int_eq(o->n_finished, 0);
    o->n_finished++;
    o->fin = *f;
    o->s = NULL;
    if (o->release_on_finished && o->release_on_finished->s) {
        ifd_router_release(o->r, o->release_on_finished->s);
        o->release_on_finished->s = NULL;
    }
    if (o->submit_on_finished) {
        static const int32_t p[] = {60, 61, 62};
        ck_assert_int_eq(submit(o->r, o->submit_on_finished, p, 3, 8), 0);
        o->submit_on_finished = NULL;
    }
}

static void on_dispatched(void *owner, ifd_rseq_t *s)
{
    owner_t *o = owner;
    ck_assert_ptr_eq(s, o->s);
    o->n_dispatched++;
    if (o->submit_on_dispatch) {
        static const int32_t p[] = {40, 41, 42};
        ck_assert_int_eq(submit(o->r, o->submit_on_dispatch, p, 3, 8), 0);
        o->submit_on_dispatch = NULL;
    }
}

static void on_prompt_logprobs(void *owner, ifd_rseq_t *s, const ifd_wire_prompt_logprobs_t *m)
{
    owner_t *o = owner;
    ck_assert_ptr_eq(s, o->s);
    ck_assert_int_eq(o->n_token, 0);            /* all before the first token */
    ck_assert_uint_eq(m->pos, o->plp_last + 1); /* no gap, no repeat */
    ck_assert_uint_ge(m->n_entries, 1);
    for (uint32_t i = 0; i < m->n_entries; i++) /* entries carry their position as token */
        ck_assert_int_eq(m->entries[i].token, (int32_t)(m->pos + i));
    o->plp_last = m->pos + m->n_entries - 1;
    o->n_plp++;
}

static const ifd_rseq_ops_t ops = {on_token, on_error, on_finished, on_dispatched,
                                   on_prompt_logprobs};

static ifd_rseq_params_t params(const int32_t *prompt, uint32_t n, uint32_t max)
{
    ifd_rseq_params_t p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.sampling = ifd_wire_default_sampling();
    p.max_tokens = max;
    p.use_cache = true;
    return p;
}

static int submit_p(ifd_router_t *r, owner_t *o, const ifd_rseq_params_t *p)
{
    o->r = r;
    return ifd_router_submit(r, p, &ops, o, &o->s);
}

static int submit(ifd_router_t *r, owner_t *o, const int32_t *prompt, uint32_t n, uint32_t max)
{
    ifd_rseq_params_t p = params(prompt, n, max);
    return submit_p(r, o, &p);
}

/* ---- the fixture: a two-device host pool, the fake, the router --------------------------- */

typedef struct {
    ifd_kvpool_t *pool, *lpool;
    ifd_metrics_t metrics;
    fake_t fake;
    ifd_router_t *r;
} fix_t;

static ifd_kvpool_params_t pool_params(void)
{
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = 1;
    p.n_kv_heads = 1;
    p.head_dim = 4;
    p.dtype = IFD_KV_F32;
    p.block_size = BS;
    p.n_blocks = 16;
    p.n_devices = 2;
    p.n_workers = 8;
    return p;
}

/* n workers, each READY with room for max_seqs, worker w on device devs[w]
 * (NULL: all on device 0); window > 0 adds a local layers' pool. */
static void fix_init_w(fix_t *x, int n, uint32_t max_seqs, const int *devs, int window)
{
    memset(x, 0, sizeof *x);
    ifd_kvpool_params_t kp = pool_params();
    ck_assert_int_eq(ifd_kvpool_create(&kp, &x->pool), 0);
    if (window > 0)
        ck_assert_int_eq(ifd_kvpool_create(&kp, &x->lpool), 0);
    ifd_metrics_init(&x->metrics);
    x->fake.n_workers = n;
    for (int w = 0; w < n; w++)
        x->fake.w[w] = (ifd_router_worker_t){true, false, max_seqs, devs ? devs[w] : 0};
    static const int32_t eog[] = {EOS};
    ifd_router_params_t rp = {.pool = x->pool,
                              .transport = {.ctx = &x->fake,
                                            .n_workers = n,
                                            .worker = fake_worker,
                                            .send = fake_send,
                                            .kill = fake_kill,
                                            .all_failed = fake_all_failed},
                              .metrics = &x->metrics,
                              .eog_ids = eog,
                              .n_eog_ids = 1,
                              .route_slack = 0,
                              .local_pool = x->lpool,
                              .sliding_window = window};
    ck_assert_int_eq(ifd_router_create(&x->r, &rp), 0);
    x->fake.r = x->r;
}

static void fix_init(fix_t *x, int n, uint32_t max_seqs, const int *devs)
{
    fix_init_w(x, n, max_seqs, devs, 0);
}

/* Every test ends with nothing left in the router. */
static void fix_fini(fix_t *x)
{
    ck_assert_int_eq(ifd_router_queued(x->r), 0);
    ck_assert_int_eq(ifd_router_dispatched(x->r), 0);
    for (int w = 0; w < x->fake.n_workers; w++)
        ck_assert_int_eq(ifd_router_worker_load(x->r, w), 0);
    ifd_router_destroy(x->r);
    ifd_kvpool_destroy(x->lpool);
    ifd_kvpool_destroy(x->pool);
}

static const frame_t *last_frame(const fix_t *x)
{
    ck_assert_int_gt(x->fake.n_frames, 0);
    return &x->fake.f[x->fake.n_frames - 1];
}

/* The ADD frame of sequence id (the last one sent). */
static const frame_t *add_of(const fix_t *x, uint64_t id)
{
    for (int i = x->fake.n_frames - 1; i >= 0; i--)
        if (x->fake.f[i].type == IFD_WIRE_ADD && x->fake.f[i].id == id)
            return &x->fake.f[i];
    ck_abort_msg("no ADD for %llu", (unsigned long long)id);
    return NULL;
}

/* The id the router gave o's sequence: that of its ADD frame. */
static uint64_t id_of(const fix_t *x, const owner_t *o, int worker)
{
    const frame_t *f = last_frame(x);
    ck_assert_int_eq(f->type, IFD_WIRE_ADD);
    ck_assert_int_eq(f->worker, worker);
    ck_assert_int_eq(o->n_dispatched, 1);
    return f->id;
}

static void ev_tokens(fix_t *x, int w, uint64_t id, const int32_t *toks, int n)
{
    ifd_wire_token_t ev[MAXTOK];
    memset(ev, 0, sizeof ev);
    for (int i = 0; i < n; i++) {
        ev[i].id = id;
        ev[i].token = toks[i];
    }
    ifd_wire_msg_t m = {.type = IFD_WIRE_TOKENS};
    m.u.tokens.events = ev;
    m.u.tokens.n_events = (uint32_t)n;
    ifd_router_on_message(x->r, w, &m);
}

static void ev_finished(fix_t *x, int w, uint64_t id, uint32_t reason)
{
    ifd_wire_msg_t m = {.type = IFD_WIRE_FINISHED};
    m.u.finished = (ifd_wire_finished_t){id, reason, -1, 0, 0, 0};
    ifd_router_on_message(x->r, w, &m);
}

/* Worker w dies: the supervisor marks it DOWN, then reports the loss. */
static void ev_lost(fix_t *x, int w)
{
    x->fake.w[w].ready = false;
    ifd_router_on_lost(x->r, w);
}

static void ev_ready(fix_t *x, int w)
{
    x->fake.w[w].ready = true;
    ifd_router_on_ready(x->r, w);
}

/* Caches tokens' n_blocks leading full blocks in the pool, block i on
 * device devs[i]; with lpool, block i's keyed twin on the same device when
 * twin[i] (twin NULL: none). */
static void cache_prefix(fix_t *x, const int32_t *tokens, int n_blocks, const int *devs,
                         const bool *twin)
{
    const int slot = 7;
    int32_t b[8], lb[8];
    int n_lb = 0;
    ck_assert_int_le(n_blocks, 8);
    for (int i = 0; i < n_blocks; i++) {
        ck_assert_int_eq(ifd_kvpool_alloc(x->pool, slot, devs[i], 1, &b[i]), 0);
        ck_assert_int_eq(
            ifd_kvpool_publish(x->pool, slot, b[i], i ? b[i - 1] : -1, 0, tokens + i * BS, NULL),
            0);
        if (twin && twin[i]) {
            uint64_t key;
            ck_assert_int_eq(ifd_kvpool_block_key(x->pool, b[i], &key), 0);
            ck_assert_int_eq(ifd_kvpool_alloc(x->lpool, slot, devs[i], 1, &lb[n_lb]), 0);
            ck_assert_int_eq(
                ifd_kvpool_publish_keyed(x->lpool, slot, lb[n_lb], key, 0, tokens + i * BS), 0);
            n_lb++;
        }
    }
    ck_assert_int_eq(ifd_kvpool_unref(x->pool, slot, b, n_blocks), 0);
    if (n_lb)
        ck_assert_int_eq(ifd_kvpool_unref(x->lpool, slot, lb, n_lb), 0);
}

/* A prompt of 13 tokens (3 full blocks before the last token) starting at base. */
static void prompt13(int32_t *p, int32_t base)
{
    for (int i = 0; i < 13; i++)
        p[i] = base + i;
}

/* ---- create / submit --------------------------------------------------------------------- */

START_TEST(test_create_and_submit_checks)
{
    fix_t x;
    fix_init(&x, 1, 4, NULL);
    /* a transport without one of its callbacks, or without workers, is refused */
    ifd_router_params_t rp = {.pool = x.pool,
                              .transport = {.ctx = &x.fake,
                                            .n_workers = 1,
                                            .worker = fake_worker,
                                            .send = fake_send,
                                            .kill = fake_kill,
                                            .all_failed = fake_all_failed}};
    ifd_router_t *r2 = NULL;
    ifd_router_params_t bad = rp;
    bad.transport.send = NULL;
    ck_assert_int_eq(ifd_router_create(&r2, &bad), IFD_EINVAL);
    bad = rp;
    bad.transport.all_failed = NULL;
    ck_assert_int_eq(ifd_router_create(&r2, &bad), IFD_EINVAL);
    bad = rp;
    bad.transport.n_workers = 0;
    ck_assert_int_eq(ifd_router_create(&r2, &bad), IFD_EINVAL);
    ck_assert_ptr_null(r2);

    const int32_t p[] = {10, 11, 12};
    owner_t o = {0};
    ifd_rseq_params_t sp = params(p, 0, 4);
    ck_assert_int_eq(submit_p(x.r, &o, &sp), IFD_EINVAL); /* empty prompt */
    sp = params(p, 3, 0);
    ck_assert_int_eq(submit_p(x.r, &o, &sp), IFD_EINVAL); /* max_tokens 0 */
    sp = params(NULL, 3, 4);
    ck_assert_int_eq(submit_p(x.r, &o, &sp), IFD_EINVAL);
    sp = params(p, 3, IFD_WIRE_MAX_TOKENS);
    ck_assert_int_eq(submit_p(x.r, &o, &sp), IFD_EINVAL); /* past the wire's limit */
    sp = params(p, 3, 4);
    ck_assert_int_eq(ifd_router_submit(x.r, &sp, &ops, NULL, &o.s), IFD_EINVAL); /* no owner */
    ck_assert_int_eq(x.fake.n_send, 0);
    ck_assert_int_eq(ifd_router_queued(x.r), 0);
    fix_fini(&x);
}
END_TEST

START_TEST(test_dispatch_frame)
{
    fix_t x;
    fix_init(&x, 1, 4, NULL);
    const int32_t p[] = {10, 11, 12, 13, 14};
    const int32_t stop[] = {99};
    owner_t o = {0};
    ifd_rseq_params_t sp = params(p, 5, 7);
    sp.stop_ids = stop;
    sp.n_stop_ids = 1;
    sp.min_tokens = 2;
    sp.grammar = "root ::= \"a\"";
    ck_assert_int_eq(submit_p(x.r, &o, &sp), 0);
    ck_assert_ptr_nonnull(o.s);
    ck_assert_int_eq(x.fake.n_frames, 1);
    const frame_t *f = last_frame(&x);
    ck_assert_int_eq(f->type, IFD_WIRE_ADD);
    ck_assert_int_eq(f->worker, 0);
    ck_assert_uint_ne(f->id, 0);
    ck_assert_uint_eq(f->n_tokens, 5);
    ck_assert_uint_eq(f->n_generated, 0);
    ck_assert_uint_eq(f->max_tokens, 7);
    ck_assert_uint_eq(f->prompt_logprobs, 0);
    ck_assert_mem_eq(f->tokens, p, sizeof p);
    ck_assert_int_eq(o.n_dispatched, 1);
    ck_assert_int_eq(ifd_router_queued(x.r), 0);
    ck_assert_int_eq(ifd_router_dispatched(x.r), 1);
    ck_assert_int_eq(ifd_router_worker_load(x.r, 0), 1);
    ck_assert_int_eq(ifd_router_worker_load(x.r, 5), 0); /* out of range */

    const int32_t t[] = {20, 21};
    ev_tokens(&x, 0, f->id, t, 2);
    ck_assert_int_eq(o.n_token, 2);
    ck_assert_int_eq(o.toks[0], 20);
    ck_assert_int_eq(o.toks[1], 21);
    ev_tokens(&x, 0, f->id + 100, t, 1); /* an unknown id: ignored */
    ck_assert_int_eq(o.n_token, 2);
    ev_finished(&x, 0, f->id, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(o.n_finished, 1);
    ck_assert_int_eq(o.n_error, 0);
    ck_assert_uint_eq(o.fin.reason, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(o.n_dispatched, 1);
    ck_assert_int_eq(x.fake.n_kill, 0);
    fix_fini(&x);
}
END_TEST

/* ---- routing ----------------------------------------------------------------------------- */

/* The worker whose device holds the longest cached prefix wins over round robin. */
START_TEST(test_prefix_preference)
{
    const int devs[] = {0, 1};
    fix_t x;
    fix_init(&x, 2, 8, devs);
    int32_t a[13], b[13];
    prompt13(a, 100);
    prompt13(b, 200);
    const int on1[] = {1, 1, 1};
    cache_prefix(&x, a, 3, on1, NULL); /* a's 3 blocks on device 1 */
    const int on0[] = {0, 0};
    cache_prefix(&x, b, 2, on0, NULL); /* b's first 2 on device 0 */

    owner_t oa = {0}, ob = {0}, oc = {0}, od = {0};
    ck_assert_int_eq(submit(x.r, &oa, a, 13, 4), 0); /* round robin would say 0 */
    uint64_t ida = id_of(&x, &oa, 1);
    ck_assert_int_eq(submit(x.r, &ob, b, 13, 4), 0); /* round robin would say 0 too: loads 0 / 1 */
    uint64_t idb = id_of(&x, &ob, 0);
    ck_assert_int_eq(submit(x.r, &oc, a, 13, 4), 0); /* a again: 1, though loads are 1 / 1 */
    uint64_t idc = id_of(&x, &oc, 1);
    /* use_cache off: no probe, the least loaded (0) */
    ifd_rseq_params_t sp = params(a, 13, 4);
    sp.use_cache = false;
    ck_assert_int_eq(submit_p(x.r, &od, &sp), 0);
    uint64_t idd = id_of(&x, &od, 0);

    /* a prefix split over devices: each scores its own blocks (2 on 1 > 1 on 0) */
    int32_t e[13];
    prompt13(e, 300);
    const int split[] = {0, 1, 1};
    cache_prefix(&x, e, 3, split, NULL);
    owner_t oe = {0};
    ck_assert_int_eq(submit(x.r, &oe, e, 13, 4), 0);
    uint64_t ide = id_of(&x, &oe, 1);

    ev_finished(&x, 1, ida, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 0, idb, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 1, idc, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 0, idd, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 1, ide, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(oa.n_finished + ob.n_finished + oc.n_finished + od.n_finished + oe.n_finished,
                     5);
    fix_fini(&x);
}
END_TEST

/* The prefix holder wins while its load is at most route_slack above the least loaded one. */
START_TEST(test_route_slack)
{
    const int devs[] = {0, 1};
    fix_t x;
    fix_init(&x, 2, 8, devs);
    int32_t a[13];
    prompt13(a, 100);
    const int on1[] = {1, 1, 1};
    cache_prefix(&x, a, 3, on1, NULL);

    /* two fillers (no prefix) on worker 1 while worker 0 is not ready */
    x.fake.w[0].ready = false;
    const int32_t q[] = {50, 51};
    owner_t f1 = {0}, f2 = {0};
    ck_assert_int_eq(submit(x.r, &f1, q, 2, 4), 0);
    uint64_t id1 = id_of(&x, &f1, 1);
    ck_assert_int_eq(submit(x.r, &f2, q, 2, 4), 0);
    uint64_t id2 = id_of(&x, &f2, 1);
    ev_ready(&x, 0);
    ck_assert_int_eq(ifd_router_worker_load(x.r, 1), 2);

    owner_t o[4] = {{0}};
    /* slack 1: 2 > 0 + 1, the least loaded wins */
    ifd_router_set_slack(x.r, 1);
    ck_assert_int_eq(submit(x.r, &o[0], a, 13, 4), 0);
    uint64_t i0 = id_of(&x, &o[0], 0);
    /* slack 2: loads 1 / 2, 2 <= 1 + 2: the prefix holder */
    ifd_router_set_slack(x.r, 2);
    ck_assert_int_eq(submit(x.r, &o[1], a, 13, 4), 0);
    uint64_t i1 = id_of(&x, &o[1], 1);
    /* slack 2, loads 1 / 3: exactly at the bound, still the holder */
    ck_assert_int_eq(submit(x.r, &o[2], a, 13, 4), 0);
    uint64_t i2 = id_of(&x, &o[2], 1);
    /* loads 1 / 4: past it */
    ck_assert_int_eq(submit(x.r, &o[3], a, 13, 4), 0);
    uint64_t i3 = id_of(&x, &o[3], 0);

    ev_finished(&x, 1, id1, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 1, id2, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 0, i0, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 1, i1, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 1, i2, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 0, i3, IFD_WIRE_FINISH_STOP);
    fix_fini(&x);
}
END_TEST

/* Equal scores: the lowest load, and among equal loads round robin. */
START_TEST(test_load_ties)
{
    fix_t x;
    fix_init(&x, 3, 8, NULL); /* one device: every prefix scores alike */
    int32_t a[13];
    prompt13(a, 100);
    const int on0[] = {0, 0, 0};
    cache_prefix(&x, a, 3, on0, NULL);
    owner_t o[6] = {{0}};
    uint64_t id[6];
    /* round robin over idle workers: 0, 1, 2, then 0 again */
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(submit(x.r, &o[i], a, 13, 4), 0);
        id[i] = id_of(&x, &o[i], i % 3);
    }
    /* loads 2 / 1 / 1: worker 1 finishes → 2 / 0 / 1, the next goes to 1 */
    ev_finished(&x, 1, id[1], IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(submit(x.r, &o[4], a, 13, 4), 0);
    id[4] = id_of(&x, &o[4], 1);
    /* loads 2 / 1 / 1, round robin from 2: 2 */
    ck_assert_int_eq(submit(x.r, &o[5], a, 13, 4), 0);
    id[5] = id_of(&x, &o[5], 2);
    ev_finished(&x, 0, id[0], IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 2, id[2], IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 0, id[3], IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 1, id[4], IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 2, id[5], IFD_WIRE_FINISH_STOP);
    fix_fini(&x);
}
END_TEST

/* ---- queueing ---------------------------------------------------------------------------- */

START_TEST(test_queue_until_ready_and_room)
{
    fix_t x;
    fix_init(&x, 1, 1, NULL);
    x.fake.w[0].ready = false;
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 4), 0);
    ck_assert_int_eq(submit(x.r, &b, p, 3, 4), 0);
    ck_assert_int_eq(submit(x.r, &c, p, 3, 4), 0);
    ck_assert_int_eq(x.fake.n_frames, 0); /* nobody ready */
    ck_assert_int_eq(ifd_router_queued(x.r), 3);
    ck_assert_int_eq(a.n_dispatched + b.n_dispatched + c.n_dispatched, 0);
    /* READY: one room (max_seqs 1), the first in line */
    ev_ready(&x, 0);
    ck_assert_int_eq(x.fake.n_frames, 1);
    uint64_t ia = id_of(&x, &a, 0);
    ck_assert_int_eq(ifd_router_queued(x.r), 2);
    ck_assert_int_eq(b.n_dispatched + c.n_dispatched, 0);
    /* a FINISHED frees the room: FIFO, b then c */
    ev_finished(&x, 0, ia, IFD_WIRE_FINISH_LENGTH);
    ck_assert_int_eq(a.n_finished, 1);
    ck_assert_uint_eq(a.fin.reason, IFD_WIRE_FINISH_LENGTH);
    uint64_t ib = id_of(&x, &b, 0);
    ck_assert_uint_gt(ib, ia);
    ck_assert_int_eq(c.n_dispatched, 0);
    ev_finished(&x, 0, ib, IFD_WIRE_FINISH_STOP);
    uint64_t ic = id_of(&x, &c, 0);
    ck_assert_uint_gt(ic, ib);
    ev_finished(&x, 0, ic, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(x.fake.n_frames, 3);
    ck_assert_int_eq(a.n_finished + b.n_finished + c.n_finished, 3);
    fix_fini(&x);
}
END_TEST

/* An unresponsive worker gets nothing while a responsive one has room, and
 * everything once none does. */
START_TEST(test_unresponsive_avoided)
{
    fix_t x;
    fix_init(&x, 2, 1, NULL);
    x.fake.w[0].unresponsive = true;
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 4), 0); /* round robin says 0: avoided */
    uint64_t ia = id_of(&x, &a, 1);
    ck_assert_int_eq(submit(x.r, &b, p, 3, 4), 0); /* 1 is full: 0 after all */
    uint64_t ib = id_of(&x, &b, 0);
    ck_assert_int_eq(submit(x.r, &c, p, 3, 4), 0); /* both full */
    ck_assert_int_eq(ifd_router_queued(x.r), 1);
    ev_finished(&x, 1, ia, IFD_WIRE_FINISH_STOP);
    uint64_t ic = id_of(&x, &c, 1);
    ev_finished(&x, 0, ib, IFD_WIRE_FINISH_STOP);
    ev_finished(&x, 1, ic, IFD_WIRE_FINISH_STOP);
    fix_fini(&x);
}
END_TEST

/* Submits from inside callbacks: from on_dispatched (inside the dispatch
 * loop) it is dispatched at once; from the on_finished of a sequence a dead
 * worker had finished, it queues behind the dead worker's resumed ones. */
START_TEST(test_submit_from_callback)
{
    fix_t x;
    fix_init(&x, 2, 4, NULL);
    x.fake.w[1].ready = false;
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0}, c = {0}, d = {0};
    a.submit_on_dispatch = &b;
    ck_assert_int_eq(submit(x.r, &a, p, 3, 1), 0);
    ck_assert_int_eq(x.fake.n_frames, 2);
    ck_assert_int_eq(b.n_dispatched, 1);
    ck_assert_int_eq(ifd_router_queued(x.r), 0);
    uint64_t ia = x.fake.f[0].id, ib = x.fake.f[1].id;
    /* a reached max_tokens: when worker 0 dies it is finished there, and
     * its on_finished submits c; b is resumed, ahead of c */
    const int32_t t[] = {20};
    ev_tokens(&x, 0, ia, t, 1);
    a.submit_on_finished = &c;
    ev_lost(&x, 0);
    ck_assert_int_eq(a.n_finished, 1);
    ck_assert_int_eq(ifd_router_queued(x.r), 2);
    x.fake.w[1].max_seqs = 1;
    ev_ready(&x, 1);
    ck_assert_uint_eq(last_frame(&x)->id, ib);
    ck_assert_int_eq(c.n_dispatched, 0);
    b.submit_on_finished = &d;
    ev_finished(&x, 1, ib, IFD_WIRE_FINISH_STOP); /* c's turn; d queues behind it */
    uint64_t ic = id_of(&x, &c, 1);
    ck_assert_int_eq(ifd_router_queued(x.r), 1);
    ev_finished(&x, 1, ic, IFD_WIRE_FINISH_STOP);
    uint64_t id = id_of(&x, &d, 1);
    ev_finished(&x, 1, id, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(b.n_finished + c.n_finished + d.n_finished, 3);
    fix_fini(&x);
}
END_TEST

/* ---- a worker dies ----------------------------------------------------------------------- */

/* Its sequences go to another worker as prompt + streamed tokens, and the
 * owner's stream continues with no gap and no duplicate. */
START_TEST(test_worker_dies_resume)
{
    fix_t x;
    fix_init(&x, 2, 4, NULL);
    x.fake.w[1].ready = false;
    const int32_t p[] = {10, 11, 12, 13};
    owner_t a = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 4, 10), 0);
    uint64_t id = id_of(&x, &a, 0);
    const int32_t t1[] = {20, 21, 22};
    ev_tokens(&x, 0, id, t1, 3);
    ck_assert_int_eq(a.n_token, 3);

    x.fake.w[1].ready = true; /* ready before the loss: the resume goes straight there */
    ev_lost(&x, 0);
    ck_assert_int_eq(x.fake.n_frames, 2);
    const frame_t *f = last_frame(&x);
    ck_assert_int_eq(f->type, IFD_WIRE_ADD);
    ck_assert_int_eq(f->worker, 1);
    ck_assert_uint_eq(f->id, id); /* the same sequence */
    ck_assert_uint_eq(f->n_tokens, 7);
    ck_assert_uint_eq(f->n_generated, 3);
    ck_assert_uint_eq(f->max_tokens, 10);
    const int32_t want[] = {10, 11, 12, 13, 20, 21, 22};
    ck_assert_mem_eq(f->tokens, want, sizeof want);
    ck_assert_int_eq(a.n_dispatched, 1); /* on_dispatched the first time only */
    ck_assert_int_eq(a.n_error + a.n_finished, 0);
    ck_assert_uint_eq(x.metrics.worker_redispatched, 1);
    ck_assert_int_eq(ifd_router_worker_load(x.r, 0), 0);
    ck_assert_int_eq(ifd_router_worker_load(x.r, 1), 1);

    /* the dead worker's late frames are not its any more */
    const int32_t stale[] = {66};
    ev_tokens(&x, 0, id, stale, 1);
    ev_finished(&x, 0, id, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(a.n_token, 3);
    ck_assert_int_eq(a.n_finished, 0);
    /* the new one continues the stream */
    const int32_t t2[] = {23, EOS};
    ev_tokens(&x, 1, id, t2, 2);
    ev_finished(&x, 1, id, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(a.n_token, 5);
    const int32_t all[] = {20, 21, 22, 23, EOS};
    ck_assert_mem_eq(a.toks, all, sizeof all);
    ck_assert_int_eq(a.n_finished, 1);
    ck_assert_int_eq(a.n_error, 0);
    fix_fini(&x);
}
END_TEST

/* Several sequences in flight go back to the front of the queue in id order,
 * ahead of those that were waiting. */
START_TEST(test_resume_order)
{
    fix_t x;
    fix_init(&x, 2, 2, NULL);
    x.fake.w[1].ready = false;
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 8), 0);
    ck_assert_int_eq(submit(x.r, &b, p, 3, 8), 0);
    ck_assert_int_eq(submit(x.r, &c, p, 3, 8), 0); /* worker 0 full */
    ck_assert_int_eq(ifd_router_queued(x.r), 1);
    uint64_t ia = x.fake.f[0].id, ib = x.fake.f[1].id;
    ck_assert_uint_lt(ia, ib);
    ev_lost(&x, 0); /* nobody ready: all three wait */
    ck_assert_int_eq(ifd_router_queued(x.r), 3);
    ck_assert_int_eq(ifd_router_dispatched(x.r), 0);
    ck_assert_uint_eq(x.metrics.worker_redispatched, 2);
    x.fake.w[1].max_seqs = 1;
    ev_ready(&x, 1);
    ck_assert_uint_eq(last_frame(&x)->id, ia);
    ev_finished(&x, 1, ia, IFD_WIRE_FINISH_STOP);
    ck_assert_uint_eq(last_frame(&x)->id, ib);
    ev_finished(&x, 1, ib, IFD_WIRE_FINISH_STOP);
    uint64_t ic = last_frame(&x)->id;
    ck_assert_uint_gt(ic, ib);
    ck_assert_int_eq(c.n_dispatched, 1);
    ev_finished(&x, 1, ic, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(a.n_finished + b.n_finished + c.n_finished, 3);
    ck_assert_int_eq(a.n_dispatched + b.n_dispatched, 2);
    fix_fini(&x);
}
END_TEST

/* What the dead worker's last token already ended is finished locally; a
 * released sequence is freed; one released from another's callback too
 * (victim: its id is lower than its releaser's, so it has passed the first
 * checks when it is released). */
START_TEST(test_lost_finishes_what_is_over)
{
    fix_t x;
    fix_init(&x, 2, 8, NULL);
    x.fake.w[1].ready = false;
    const int32_t p[] = {10, 11, 12};
    const int32_t stop[] = {7};
    owner_t len = {0}, eos = {0}, noeos = {0}, stp = {0}, rel = {0}, victim = {0};
    ck_assert_int_eq(submit(x.r, &victim, p, 3, 8), 0);
    ck_assert_int_eq(submit(x.r, &len, p, 3, 2), 0);
    ck_assert_int_eq(submit(x.r, &eos, p, 3, 8), 0);
    ifd_rseq_params_t sp = params(p, 3, 8);
    sp.ignore_eos = true;
    ck_assert_int_eq(submit_p(x.r, &noeos, &sp), 0);
    sp = params(p, 3, 8);
    sp.stop_ids = stop;
    sp.n_stop_ids = 1;
    ck_assert_int_eq(submit_p(x.r, &stp, &sp), 0);
    ck_assert_int_eq(submit(x.r, &rel, p, 3, 8), 0);
    ck_assert_int_eq(x.fake.n_frames, 6);
    /* the ADD frames, in submit order */
    const uint64_t ilen = x.fake.f[1].id, ieos = x.fake.f[2].id, inoeos = x.fake.f[3].id;
    const uint64_t istp = x.fake.f[4].id, irel = x.fake.f[5].id;
    const int32_t t2[] = {30, 31}, te[] = {EOS}, ts[] = {7};
    ev_tokens(&x, 0, ilen, t2, 2); /* max_tokens reached */
    ev_tokens(&x, 0, ieos, te, 1);
    ev_tokens(&x, 0, inoeos, te, 1); /* EOS, but ignore_eos */
    ev_tokens(&x, 0, istp, ts, 1);
    ifd_router_release(x.r, rel.s); /* CANCEL sent; the worker dies before FINISHED */
    rel.s = NULL;
    ck_assert_int_eq(last_frame(&x)->type, IFD_WIRE_CANCEL);
    ck_assert_uint_eq(last_frame(&x)->id, irel);
    stp.release_on_finished = &victim; /* victim would have been resumed */
    int frames = x.fake.n_frames;

    x.fake.w[1].ready = true;
    ev_lost(&x, 0);
    ck_assert_int_eq(len.n_finished, 1);
    ck_assert_uint_eq(len.fin.reason, IFD_WIRE_FINISH_LENGTH);
    ck_assert_int_eq(eos.n_finished, 1);
    ck_assert_uint_eq(eos.fin.reason, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(eos.fin.stop_token, EOS);
    ck_assert_int_eq(stp.n_finished, 1);
    ck_assert_uint_eq(stp.fin.reason, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(stp.fin.stop_token, 7);
    ck_assert_int_eq(len.n_error + eos.n_error + stp.n_error, 0);
    ck_assert_int_eq(rel.n_finished + rel.n_error + victim.n_finished + victim.n_error, 0);
    /* only the ignore_eos one is resumed */
    ck_assert_int_eq(x.fake.n_frames, frames + 1);
    ck_assert_uint_eq(last_frame(&x)->id, inoeos);
    ck_assert_int_eq(last_frame(&x)->worker, 1);
    ck_assert_uint_eq(last_frame(&x)->n_generated, 1);
    ck_assert_uint_eq(x.metrics.worker_redispatched, 1);
    ck_assert_int_eq(ifd_router_dispatched(x.r), 1);
    ev_finished(&x, 1, inoeos, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(noeos.n_finished, 1);
    fix_fini(&x);
}
END_TEST

/* While stopping, a dead worker's sequences fail instead of moving. */
START_TEST(test_lost_while_stopping)
{
    fix_t x;
    fix_init(&x, 2, 8, NULL);
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 8), 0);
    ifd_router_stopping(x.r);
    ev_lost(&x, 0);
    ck_assert_int_eq(a.n_error, 1);
    ck_assert_int_eq(a.err, IFD_ECLOSED);
    ck_assert_int_eq(a.n_finished, 1);
    ck_assert_uint_eq(a.fin.reason, IFD_WIRE_FINISH_ERROR);
    ck_assert_int_eq(x.fake.n_frames, 1);
    ck_assert_uint_eq(x.metrics.worker_redispatched, 0);
    fix_fini(&x);
}
END_TEST

/* A sequence on three workers that died in a row without progress fails;
 * progress between deaths starts the count again. */
START_TEST(test_poison_sequence)
{
    fix_t x;
    fix_init(&x, 2, 8, NULL);
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 16), 0);
    uint64_t ia = id_of(&x, &a, 0);
    ev_lost(&x, 0); /* 1 */
    ck_assert_int_eq(last_frame(&x)->worker, 1);
    x.fake.w[0].ready = true;
    ev_lost(&x, 1); /* 2 */
    ck_assert_int_eq(last_frame(&x)->worker, 0);
    x.fake.w[1].ready = true;
    ck_assert_int_eq(a.n_error + a.n_finished, 0);
    ev_lost(&x, 0); /* 3: failed, not resumed */
    ck_assert_int_eq(a.n_error, 1);
    ck_assert_int_eq(a.err, IFD_EINTERNAL);
    ck_assert_int_eq(a.n_finished, 1);
    ck_assert_uint_eq(a.fin.reason, IFD_WIRE_FINISH_ERROR);
    ck_assert_int_eq(x.fake.n_frames, 3);
    ck_assert_uint_eq(add_of(&x, ia)->worker, 0);

    /* with a token between the deaths it is resumed every time */
    x.fake.w[0].ready = true;
    ck_assert_int_eq(submit(x.r, &b, p, 3, 16), 0);
    uint64_t ib = last_frame(&x)->id;
    int w = last_frame(&x)->worker;
    for (int d = 0; d < 4; d++) {
        const int32_t t[] = {40 + d};
        ev_tokens(&x, w, ib, t, 1);
        x.fake.w[1 - w].ready = true;
        ev_lost(&x, w);
        ck_assert_int_eq(b.n_error + b.n_finished, 0);
        ck_assert_uint_eq(last_frame(&x)->id, ib);
        ck_assert_int_eq(last_frame(&x)->worker, 1 - w);
        ck_assert_uint_eq(last_frame(&x)->n_generated, (uint32_t)d + 1);
        w = 1 - w;
    }
    ev_finished(&x, w, ib, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(b.n_finished, 1);
    ck_assert_int_eq(b.n_token, 4);
    fix_fini(&x);
}
END_TEST

/* Every worker failed: the queue fails, and so do a dead worker's sequences. */
START_TEST(test_all_failed)
{
    fix_t x;
    fix_init(&x, 1, 8, NULL);
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 8), 0); /* dispatched */
    x.fake.w[0].ready = false;
    ck_assert_int_eq(submit(x.r, &b, p, 3, 8), 0);
    ck_assert_int_eq(submit(x.r, &c, p, 3, 8), 0);
    /* a worker reached FAILED but another could still serve: nothing happens */
    int calls = x.fake.n_all_failed_calls;
    ifd_router_on_failed(x.r);
    ck_assert_int_eq(x.fake.n_all_failed_calls, calls + 1);
    ck_assert_int_eq(ifd_router_queued(x.r), 2);
    ck_assert_int_eq(b.n_finished, 0);
    /* the worker dies into FAILED: a's resume and the queue all fail */
    x.fake.all_failed = true;
    ev_lost(&x, 0);
    owner_t *all[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(all[i]->n_error, 1);
        ck_assert_int_eq(all[i]->err, IFD_ENODEV);
        ck_assert_int_eq(all[i]->n_finished, 1);
        ck_assert_uint_eq(all[i]->fin.reason, IFD_WIRE_FINISH_ERROR);
    }
    ck_assert_int_eq(x.fake.n_frames, 1);
    /* a submit now waits (a FAILED worker is retried later) until on_failed */
    owner_t d = {0};
    ck_assert_int_eq(submit(x.r, &d, p, 3, 8), 0);
    ck_assert_int_eq(ifd_router_queued(x.r), 1);
    ifd_router_on_failed(x.r);
    ck_assert_int_eq(d.err, IFD_ENODEV);
    ck_assert_int_eq(d.n_finished, 1);
    fix_fini(&x);
}
END_TEST

/* ---- sending fails ----------------------------------------------------------------------- */

START_TEST(test_send_fails)
{
    fix_t x;
    fix_init(&x, 2, 8, NULL);
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0};
    /* worker 0's socket is broken: killed, and the sequence goes to 1 */
    x.fake.send_rc[0] = IFD_ECLOSED;
    ck_assert_int_eq(submit(x.r, &a, p, 3, 8), 0);
    ck_assert_int_eq(x.fake.n_kill, 1);
    ck_assert_int_eq(x.fake.killed[0], 1);
    uint64_t ia = id_of(&x, &a, 1);
    ck_assert_int_eq(a.n_error, 0);
    /* a frame that cannot be encoded fails its sequence, and only it */
    x.fake.send_rc[1] = IFD_EINVAL;
    ck_assert_int_eq(submit(x.r, &b, p, 3, 8), 0);
    ck_assert_int_eq(b.n_error, 1);
    ck_assert_int_eq(b.err, IFD_EINVAL);
    ck_assert_int_eq(b.n_finished, 1);
    ck_assert_uint_eq(b.fin.reason, IFD_WIRE_FINISH_ERROR);
    ck_assert_int_eq(b.n_dispatched, 0);
    ck_assert_int_eq(x.fake.n_kill, 1);
    ck_assert_int_eq(ifd_router_queued(x.r), 0);
    x.fake.send_rc[1] = 0;
    ev_finished(&x, 1, ia, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(a.n_finished, 1);
    fix_fini(&x);
}
END_TEST

/* ---- release / cancel -------------------------------------------------------------------- */

START_TEST(test_release_and_cancel)
{
    fix_t x;
    fix_init(&x, 1, 1, NULL);
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 8), 0);
    uint64_t ia = id_of(&x, &a, 0);
    ck_assert_int_eq(submit(x.r, &b, p, 3, 8), 0); /* queued */
    ck_assert_int_eq(submit(x.r, &c, p, 3, 8), 0); /* queued */
    /* a queued one is gone at once, with no frame */
    ifd_router_release(x.r, b.s);
    b.s = NULL;
    ck_assert_int_eq(ifd_router_queued(x.r), 1);
    ck_assert_int_eq(x.fake.n_frames, 1);
    ifd_router_release(x.r, NULL); /* nothing */
    /* a dispatched one: CANCEL to its worker, no callback from now on, and
     * its room is held until FINISHED */
    ifd_router_release(x.r, a.s);
    a.s = NULL;
    ck_assert_int_eq(x.fake.n_frames, 2);
    ck_assert_int_eq(last_frame(&x)->type, IFD_WIRE_CANCEL);
    ck_assert_uint_eq(last_frame(&x)->id, ia);
    ck_assert_int_eq(last_frame(&x)->worker, 0);
    const int32_t t[] = {20};
    ev_tokens(&x, 0, ia, t, 1);
    ck_assert_int_eq(a.n_token, 0);
    ck_assert_int_eq(ifd_router_dispatched(x.r), 1);
    ck_assert_int_eq(c.n_dispatched, 0);
    ev_finished(&x, 0, ia, IFD_WIRE_FINISH_CANCELLED);
    ck_assert_int_eq(a.n_finished, 0);
    /* its room went to c */
    uint64_t ic = id_of(&x, &c, 0);
    /* released from inside on_token: one CANCEL, no more tokens */
    c.release_on_token = true;
    const int32_t t2[] = {21, 22, 23};
    ev_tokens(&x, 0, ic, t2, 3);
    ck_assert_int_eq(c.n_token, 1);
    ck_assert_int_eq(last_frame(&x)->type, IFD_WIRE_CANCEL);
    ck_assert_uint_eq(last_frame(&x)->id, ic);
    ck_assert_int_eq(x.fake.n_frames, 4);
    /* the worker dies before its FINISHED: freed, not resumed */
    ev_lost(&x, 0);
    ck_assert_int_eq(x.fake.n_frames, 4);
    ck_assert_int_eq(c.n_finished + c.n_error, 0);
    ck_assert_int_eq(a.n_dispatched + b.n_dispatched + c.n_dispatched, 2);
    fix_fini(&x);
}
END_TEST

/* Destroy frees what is still queued or dispatched, without callbacks. */
START_TEST(test_destroy_with_sequences)
{
    fix_t x;
    fix_init(&x, 1, 1, NULL);
    const int32_t p[] = {10, 11, 12};
    owner_t a = {0}, b = {0};
    ck_assert_int_eq(submit(x.r, &a, p, 3, 8), 0);
    ck_assert_int_eq(submit(x.r, &b, p, 3, 8), 0);
    ck_assert_int_eq(ifd_router_dispatched(x.r), 1);
    ck_assert_int_eq(ifd_router_queued(x.r), 1);
    ifd_router_destroy(x.r);
    ck_assert_int_eq(a.n_finished + b.n_finished + a.n_error + b.n_error, 0);
    ifd_kvpool_destroy(x.pool);
}
END_TEST

/* ---- prompt logprobs --------------------------------------------------------------------- */

static void ev_plp(fix_t *x, int w, uint64_t id, uint32_t pos, uint32_t n)
{
    ifd_wire_plp_t e[16];
    memset(e, 0, sizeof e);
    for (uint32_t i = 0; i < n; i++)
        e[i].token = (int32_t)(pos + i);
    ifd_wire_msg_t m = {.type = IFD_WIRE_PROMPT_LOGPROBS};
    m.u.prompt_logprobs = (ifd_wire_prompt_logprobs_t){id, pos, e, n};
    ifd_router_on_message(x->r, w, &m);
}

/* Every prompt position reaches the owner once, in order, across a resumption. */
START_TEST(test_prompt_logprobs_resume)
{
    fix_t x;
    fix_init(&x, 2, 8, NULL);
    const int32_t p[] = {10, 11, 12, 13, 14, 15, 16, 17};
    owner_t a = {0};
    ifd_rseq_params_t sp = params(p, 8, 4);
    sp.prompt_logprobs = 1;
    ck_assert_int_eq(submit_p(x.r, &a, &sp), 0);
    uint64_t id = id_of(&x, &a, 0);
    ck_assert_uint_eq(last_frame(&x)->prompt_logprobs, 1);
    ev_plp(&x, 0, id, 1, 3);
    ck_assert_uint_eq(a.plp_last, 3);
    ev_plp(&x, 0, id, 6, 2); /* a gap: dropped */
    ck_assert_uint_eq(a.plp_last, 3);
    ev_lost(&x, 0);
    ck_assert_uint_eq(last_frame(&x)->prompt_logprobs, 1); /* 4 .. 7 still missing */
    ck_assert_int_eq(last_frame(&x)->worker, 1);
    ev_plp(&x, 1, id, 1, 5); /* recomputed from 1: 4 and 5 are new */
    ck_assert_uint_eq(a.plp_last, 5);
    ev_plp(&x, 1, id, 6, 4); /* past the prompt: cut at 7 */
    ck_assert_uint_eq(a.plp_last, 7);
    ck_assert_int_eq(a.n_plp, 3);
    x.fake.w[0].ready = true;
    ev_lost(&x, 1);
    ck_assert_uint_eq(last_frame(&x)->prompt_logprobs, 0); /* all delivered: not asked again */
    ev_plp(&x, 0, id, 1, 7);
    ck_assert_int_eq(a.n_plp, 3);
    ev_finished(&x, 0, id, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(a.n_finished, 1);
    fix_fini(&x);
}
END_TEST

/* ---- the local layers' window ------------------------------------------------------------ */

/* Puts `n` fillers (no prefix) on worker w of two, the other one held not
 * ready meanwhile; returns their ids in ids[]. */
static void fill(fix_t *x, int w, int n, owner_t *o, uint64_t *ids)
{
    static const int32_t q[] = {50, 51};
    x->fake.w[1 - w].ready = false;
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(submit(x->r, &o[i], q, 2, 4), 0);
        ids[i] = id_of(x, &o[i], w);
    }
    x->fake.w[1 - w].ready = true;
}

/* Two workers on devices 0 and 1, window BS (a hit of k blocks needs the
 * twin of block k - 1), route_slack 1, loads load0 / load1 from fillers; a
 * 13-token prompt whose 3 blocks are cached on devices devs[], block i's
 * twin when twins[i]. Returns the worker the prompt goes to. */
static int local_pick(const int *devs, const bool *twins, int load0, int load1)
{
    const int wdev[] = {0, 1};
    fix_t x;
    fix_init_w(&x, 2, 8, wdev, BS);
    ifd_router_set_slack(x.r, 1);
    int32_t a[13];
    prompt13(a, 100);
    cache_prefix(&x, a, 3, devs, twins);
    owner_t f[4] = {{0}}, o = {0};
    uint64_t ids[4];
    fill(&x, 0, load0, f, ids);
    fill(&x, 1, load1, f + load0, ids + load0);
    ck_assert_int_eq(submit(x.r, &o, a, 13, 4), 0);
    const int pick = last_frame(&x)->worker;
    ev_finished(&x, pick, last_frame(&x)->id, IFD_WIRE_FINISH_STOP);
    for (int i = 0; i < load0 + load1; i++)
        ev_finished(&x, i < load0 ? 0 : 1, ids[i], IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(o.n_finished, 1);
    fix_fini(&x);
    return pick;
}

/* With a local layers' pool, a device scores only the leading run on it that
 * its window's twins allow, as the engine's admission would use it. */
START_TEST(test_local_window_scoring)
{
    const bool all[] = {true, true, true}, first[] = {true, false, false};
    const bool none[] = {false, false, false};
    const int split[] = {0, 1, 1}, on1[] = {1, 1, 1};
    /* block 0 on device 0, blocks 1 and 2 on device 1: counted per block
     * device 1 would win (2 to 1), but its leading run is empty; device 0's
     * is 1 block with its twin, within the slack of the idle worker 1 */
    ck_assert_int_eq(local_pick(split, all, 1, 0), 0);
    /* all on device 1, only block 0's twin: the hit is cut to 1 block,
     * still a hit: worker 1 within the slack */
    ck_assert_int_eq(local_pick(on1, first, 0, 1), 1);
    /* all on device 1, no twin: no usable hit, the least loaded */
    ck_assert_int_eq(local_pick(on1, none, 0, 1), 0);
    /* every twin there: the full hit */
    ck_assert_int_eq(local_pick(on1, all, 0, 1), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("router");
    TCase *tc = tcase_create("router");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_create_and_submit_checks);
    tcase_add_test(tc, test_dispatch_frame);
    tcase_add_test(tc, test_prefix_preference);
    tcase_add_test(tc, test_route_slack);
    tcase_add_test(tc, test_load_ties);
    tcase_add_test(tc, test_queue_until_ready_and_room);
    tcase_add_test(tc, test_unresponsive_avoided);
    tcase_add_test(tc, test_submit_from_callback);
    tcase_add_test(tc, test_worker_dies_resume);
    tcase_add_test(tc, test_resume_order);
    tcase_add_test(tc, test_lost_finishes_what_is_over);
    tcase_add_test(tc, test_lost_while_stopping);
    tcase_add_test(tc, test_poison_sequence);
    tcase_add_test(tc, test_all_failed);
    tcase_add_test(tc, test_send_fails);
    tcase_add_test(tc, test_release_and_cancel);
    tcase_add_test(tc, test_destroy_with_sequences);
    tcase_add_test(tc, test_prompt_logprobs_resume);
    tcase_add_test(tc, test_local_window_scoring);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
