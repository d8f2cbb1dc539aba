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
 * image prompts probed by their image-aware keys (two pictures behind the
 * same placeholder ids share no prefix), use_cache off; route_slack and its boundary (set_slack);
 * load ties (the lowest load, then round robin); queueing while no worker is ready or every one is
 * full, FIFO, dispatch on READY and on FINISHED; unresponsive workers avoided while a responsive
 * one has room; a worker dying with sequences in flight: re-sent elsewhere as prompt + streamed
 * tokens with n_generated, in id order ahead of the queue, the stream continuing with no gap and no
 * duplicate, stale frames of the dead worker ignored, the redispatch metric; sequences already over
 * finished locally (length, EOS, a stop id), released ones freed, failures while stopping; a poison
 * sequence failed after three deaths without progress; every worker failed
 * → the queue fails; a send that fails (worker killed, routed elsewhere) or
 * cannot be encoded (the sequence fails); release and cancellation (queued,
 * dispatched, from inside callbacks); submits from inside callbacks;
 * prompt logprobs across a resumption; the local layers' window scoring;
 * create's and submit's argument checks; fairness between clients (the
 * next sequence is the client's with the fewest dispatched; a client's
 * share beyond max_seqs, per worker, bounded; client slots freed and taken
 * again).
 *
 * Callbacks are counted per sequence. Every test ends (fix_fini, the
 * checked fixture's teardown) by
 * finishing whatever is still on a worker, then checks that each sequence
 * got exactly one on_finished unless its owner released it (then none),
 * that nothing is left queued or dispatched; the ASan build (LeakSanitizer,
 * in each forked test) checks that nothing leaks.
 *
 * Every case fails when the rule it covers is broken in router.c (checked
 * by mutating it, one rule at a time: the prefix score, the slack and its
 * bound, the load and round-robin tie-breaks, room and readiness, the
 * resume order and its tokens, the local finishes, the poison count, the
 * queue's failure, cancel, the unresponsive rule, the window scoring, the
 * prompt logprob dedup, the kill on a broken socket, the client order, the
 * share beyond max_seqs).
 */
#include "testutil.h"

#include "daemon/router.h"
#include "error.h"
#include "kvpool/kvkey.h"
#include "kvpool/kvpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW   4
#define MAXF   256
#define MAXID  64 /* sequence ids the fake follows (the router counts from 1) */
#define MAXO   16
#define MAXTOK 64
#define BS     4 /* the pool's block size */
#define EOS    2 /* the model's end-of-generation id */

/* ---- the fake transport ------------------------------------------------------------------ */

typedef struct {
    int type; /* IFD_WIRE_ADD or IFD_WIRE_CANCEL */
    int worker;
    uint64_t id;
    uint32_t n_tokens, n_generated, max_tokens, prompt_logprobs, client;
    int32_t tokens[MAXTOK];
    const ifd_wire_image_t *images; /* as sent: the owner's (borrowed) */
    uint32_t n_images;
} frame_t;

typedef struct {
    ifd_router_worker_t w[MAXW];
    int n_workers;
    int send_rc[MAXW]; /* what send answers for worker w (0: taken) */
    bool all_failed;
    frame_t f[MAXF];
    int n_frames;
    int where[MAXID]; /* sequence id → the worker running it, -1 when none */
    int n_send, n_kill, n_all_failed_calls;
    ifd_router_t *r; /* for kill: the loss is reported at once, as the supervisor does */
} fake_t;

static void fake_worker(void *ctx, int w, ifd_router_worker_t *out)
{
    fake_t *f = ctx;
    ck_assert(w >= 0 && w < f->n_workers);
    *out = f->w[w];
}

static void fake_record(fake_t *f, int w, const ifd_wire_msg_t *m)
{
    ck_assert_int_lt(f->n_frames, MAXF);
    frame_t *fr = &f->f[f->n_frames++];
    memset(fr, 0, sizeof *fr);
    fr->type = m->type;
    fr->worker = w;
    if (m->type == IFD_WIRE_CANCEL) {
        fr->id = m->u.cancel.id;
        return;
    }
    ck_assert_int_eq(m->type, IFD_WIRE_ADD);
    const ifd_wire_add_t *a = &m->u.add;
    ck_assert(a->id > 0 && a->id < MAXID && a->n_tokens <= MAXTOK);
    *fr = (frame_t){.type = IFD_WIRE_ADD,
                    .worker = w,
                    .id = a->id,
                    .n_tokens = a->n_tokens,
                    .n_generated = a->n_generated,
                    .max_tokens = a->max_tokens,
                    .prompt_logprobs = a->prompt_logprobs,
                    .client = a->client,
                    .images = a->images,
                    .n_images = a->n_images};
    memcpy(fr->tokens, a->tokens, a->n_tokens * sizeof *a->tokens);
    f->where[a->id] = w;
}

static int fake_send(void *ctx, int w, const ifd_wire_msg_t *m)
{
    fake_t *f = ctx;
    ck_assert(w >= 0 && w < f->n_workers);
    f->n_send++;
    if (f->send_rc[w])
        return f->send_rc[w];
    fake_record(f, w, m);
    return 0;
}

/* Worker w is gone: the supervisor marks it DOWN, then reports the loss. */
static void fake_lose(fake_t *f, int w)
{
    f->w[w].ready = false;
    for (int id = 0; id < MAXID; id++)
        if (f->where[id] == w)
            f->where[id] = -1;
    ifd_router_on_lost(f->r, w);
}

static void fake_kill(void *ctx, int w, const char *why)
{
    fake_t *f = ctx;
    ck_assert_ptr_nonnull(why);
    f->n_kill++;
    fake_lose(f, w);
}

static bool fake_all_failed(void *ctx)
{
    fake_t *f = ctx;
    f->n_all_failed_calls++;
    return f->all_failed;
}

/* ---- the owner: counts every callback of one sequence ------------------------------------ */

typedef struct fix fix_t;
typedef struct owner owner_t;
struct owner {
    fix_t *x;
    ifd_rseq_t *s; /* NULL once finished or released */
    uint64_t id;   /* its ADD frames' (0: never dispatched) */
    bool released;
    int n_token, n_error, n_finished, n_dispatched, n_plp;
    int32_t toks[MAXTOK];
    int err;
    ifd_wire_finished_t fin;
    uint32_t plp_last; /* prompt positions 1 .. plp_last delivered */
    /* what to do from inside a callback */
    bool release_on_token;
    owner_t *release_on_finished; /* releases that sequence from on_finished */
    bool submit_on_dispatch;      /* submits another one from on_dispatched */
    bool submit_on_finished;      /* and from on_finished */
};

struct fix {
    ifd_kvpool_t *pool, *lpool;
    ifd_metrics_t metrics;
    fake_t fake;
    ifd_router_t *r;
    owner_t o[MAXO];
    int n_o;
    owner_t next; /* the actions (release_on_*, submit_on_*) of the next owner */
};

static const int32_t P3[] = {10, 11, 12}; /* the prompt of most sequences */

static owner_t *sub(fix_t *x, const int32_t *prompt, uint32_t n, uint32_t max);

static void release(owner_t *o)
{
    ifd_router_release(o->x->r, o->s);
    o->s = NULL;
    o->released = true;
}

static void on_token(void *owner, ifd_rseq_t *s, const ifd_wire_token_t *ev)
{
    owner_t *o = owner;
    ck_assert(s == o->s && o->n_finished == 0 && o->n_token < MAXTOK);
    o->toks[o->n_token++] = ev->token;
    if (o->release_on_token)
        release(o);
}

static void on_error(void *owner, ifd_rseq_t *s, int code, const char *message)
{
    owner_t *o = owner;
    ck_assert(s == o->s && o->n_finished == 0 && message);
    o->n_error++;
    o->err = code;
}

static void on_finished(void *owner, ifd_rseq_t *s, const ifd_wire_finished_t *f)
{
    owner_t *o = owner;
    ck_assert(s == o->s && o->n_finished == 0);
    o->n_finished++;
    o->fin = *f;
    o->s = NULL;
    if (o->release_on_finished && o->release_on_finished->s)
        release(o->release_on_finished);
    if (o->submit_on_finished)
        sub(o->x, P3, 3, 8);
    o->submit_on_finished = false;
}

static void on_dispatched(void *owner, ifd_rseq_t *s)
{
    owner_t *o = owner;
    ck_assert_ptr_eq(s, o->s);
    o->n_dispatched++;
    /* send comes before on_dispatched: the last frame is its ADD */
    o->id = o->x->fake.f[o->x->fake.n_frames - 1].id;
    if (o->submit_on_dispatch)
        sub(o->x, P3, 3, 8);
    o->submit_on_dispatch = false;
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

static ifd_wire_add_t params(const int32_t *prompt, uint32_t n, uint32_t max)
{
    ifd_wire_add_t p;
    memset(&p, 0, sizeof p);
    p.tokens = prompt;
    p.n_tokens = n;
    p.sampling = ifd_wire_default_sampling();
    p.max_tokens = max;
    p.use_cache = true;
    return p;
}

/* Submits p for a new owner: 0 with the owner in *out, or the router's code. */
static int try_sub(fix_t *x, const ifd_wire_add_t *p, owner_t **out)
{
    ck_assert_int_lt(x->n_o, MAXO);
    owner_t *o = &x->o[x->n_o++]; /* taken first: a callback may submit too */
    *o = x->next;
    memset(&x->next, 0, sizeof x->next);
    o->x = x;
    int rc = ifd_router_submit(x->r, p, &ops, o, &o->s);
    if (rc)
        x->n_o--; /* refused: no callback came */
    *out = o;
    return rc;
}

static owner_t *sub_p(fix_t *x, const ifd_wire_add_t *p)
{
    owner_t *o;
    ck_assert_int_eq(try_sub(x, p, &o), 0);
    return o;
}

static owner_t *sub(fix_t *x, const int32_t *prompt, uint32_t n, uint32_t max)
{
    ifd_wire_add_t p = params(prompt, n, max);
    return sub_p(x, &p);
}

/* A sequence of client c (router.h, "Fairness"). */
static owner_t *sub_c(fix_t *x, uint32_t c)
{
    ifd_wire_add_t p = params(P3, 3, 8);
    p.client = c;
    return sub_p(x, &p);
}

/* ---- the fixture: a two-device host pool, the fake, the router ------------------------------ */

/* The smallest geometry: routing reads only the prefix index. */
static ifd_kvpool_params_t pool_params(void)
{
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = p.n_kv_heads = 1;
    p.head_dim = 4;
    p.block_size = BS;
    p.n_blocks = 16;
    p.n_devices = 2;
    return p;
}

static ifd_router_transport_t fake_transport(fake_t *f, int n_workers)
{
    return (ifd_router_transport_t){f,         n_workers, fake_worker,
                                    fake_send, fake_kill, fake_all_failed};
}

/* The fixture of the running test (each runs in a process of its own):
 * fix_init sets it up, the checked fixture's teardown ends it (fix_fini). */
static fix_t fx;

/* n workers, each READY with room for max_seqs, worker w on device devs[w]
 * (NULL: all on device 0); window > 0 adds a local layers' pool. */
static fix_t *fix_init_w(int n, uint32_t max_seqs, const int *devs, int window)
{
    fix_t *x = &fx;
    memset(x, 0, sizeof *x);
    ifd_kvpool_params_t kp = pool_params();
    ck_assert_int_eq(ifd_kvpool_create(&kp, &x->pool), 0);
    if (window > 0)
        ck_assert_int_eq(ifd_kvpool_create(&kp, &x->lpool), 0);
    ifd_metrics_init(&x->metrics);
    x->fake.n_workers = n;
    for (int w = 0; w < n; w++)
        x->fake.w[w] = (ifd_router_worker_t){true, false, max_seqs, devs ? devs[w] : 0};
    memset(x->fake.where, 0xff, sizeof x->fake.where);
    static const int32_t eog[] = {EOS};
    ifd_router_params_t rp = {.pool = x->pool,
                              .transport = fake_transport(&x->fake, n),
                              .metrics = &x->metrics,
                              .eog_ids = eog,
                              .n_eog_ids = 1,
                              .local_pool = x->lpool,
                              .sliding_window = window};
    ck_assert_int_eq(ifd_router_create(&x->r, &rp), 0);
    x->fake.r = x->r;
    return x;
}

static fix_t *fix_init(int n, uint32_t max_seqs, const int *devs)
{
    return fix_init_w(n, max_seqs, devs, 0);
}

static void finish(owner_t *o, uint32_t reason);

/* Finishes what still runs on a worker (which may dispatch what waits),
 * then checks that every sequence ended once (none that was released) and
 * that nothing is left; frees it all. */
static void fix_fini(fix_t *x)
{
    for (bool again = true; again;) {
        again = false;
        for (int i = 0; i < x->n_o; i++)
            if (x->o[i].id && x->fake.where[x->o[i].id] >= 0) {
                finish(&x->o[i], IFD_WIRE_FINISH_STOP);
                again = true;
            }
    }
    for (int i = 0; i < x->n_o; i++)
        ck_assert_int_eq(x->o[i].n_finished, x->o[i].released ? 0 : 1);
    ck_assert_int_eq(ifd_router_queued(x->r), 0);
    ck_assert_int_eq(ifd_router_dispatched(x->r), 0);
    for (int w = 0; w < x->fake.n_workers; w++)
        ck_assert_int_eq(ifd_router_worker_load(x->r, w), 0);
    ifd_router_destroy(x->r);
    ifd_kvpool_destroy(x->lpool);
    ifd_kvpool_destroy(x->pool);
    x->r = NULL;
}

/* The checked fixture's teardown: ends the test's fixture unless the test
 * did (it runs only after a test that passed). */
static void fix_teardown(void)
{
    if (fx.r)
        fix_fini(&fx);
}

static const frame_t *last_frame(const fix_t *x)
{
    ck_assert_int_gt(x->fake.n_frames, 0);
    return &x->fake.f[x->fake.n_frames - 1];
}

/* The last frame is o's ADD to worker w with n_generated tokens streamed. */
static const frame_t *expect_add(const owner_t *o, int w, uint32_t n_generated)
{
    const frame_t *f = last_frame(o->x);
    ck_assert_int_eq(f->type, IFD_WIRE_ADD);
    ck_assert_uint_eq(f->id, o->id);
    ck_assert_int_eq(f->worker, w);
    ck_assert_uint_eq(f->n_generated, n_generated);
    return f;
}

/* o ended with on_finished(reason), after on_error(err) unless err is 0. */
static void expect_end(const owner_t *o, uint32_t reason, int err)
{
    ck_assert_int_eq(o->n_finished, 1);
    ck_assert_uint_eq(o->fin.reason, reason);
    ck_assert_int_eq(o->n_error, err ? 1 : 0);
    ck_assert_int_eq(o->err, err);
}

/* o has neither ended nor failed. */
static void expect_running(const owner_t *o)
{
    ck_assert_int_eq(o->n_finished + o->n_error, 0);
}

/* ---- worker events -------------------------------------------------------------------------- */

/* A TOKENS frame from worker w for o. */
static void tokens_from(int w, const owner_t *o, const int32_t *toks, int n)
{
    ifd_wire_token_t ev[MAXTOK];
    memset(ev, 0, sizeof ev);
    for (int i = 0; i < n; i++)
        ev[i] = (ifd_wire_token_t){.id = o->id, .token = toks[i]};
    ifd_wire_msg_t m = {.type = IFD_WIRE_TOKENS};
    m.u.tokens.events = ev;
    m.u.tokens.n_events = (uint32_t)n;
    ifd_router_on_message(o->x->r, w, &m);
}

/* The same from the worker running o. */
static void tokens(const owner_t *o, const int32_t *toks, int n)
{
    tokens_from(o->x->fake.where[o->id], o, toks, n);
}

static void finished_from(int w, const owner_t *o, uint32_t reason)
{
    ifd_wire_msg_t m = {.type = IFD_WIRE_FINISHED};
    m.u.finished = (ifd_wire_finished_t){o->id, reason, -1, 0, 0, 0};
    ifd_router_on_message(o->x->r, w, &m);
}

/* FINISHED from the worker running o; the fake forgets it there. */
static void finish(owner_t *o, uint32_t reason)
{
    const int w = o->x->fake.where[o->id];
    ck_assert_int_ge(w, 0);
    o->x->fake.where[o->id] = -1;
    finished_from(w, o, reason);
}

static void ready(fix_t *x, int w)
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
        if (!twin || !twin[i])
            continue;
        uint64_t key;
        ck_assert_int_eq(ifd_kvpool_block_key(x->pool, b[i], &key), 0);
        ck_assert_int_eq(ifd_kvpool_alloc(x->lpool, slot, devs[i], 1, &lb[n_lb]), 0);
        ck_assert_int_eq(
            ifd_kvpool_publish_keyed(x->lpool, slot, lb[n_lb++], key, 0, tokens + i * BS), 0);
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

/* The worker the last ADD went to. */
static int last_worker(const fix_t *x)
{
    ck_assert_int_eq(last_frame(x)->type, IFD_WIRE_ADD);
    return last_frame(x)->worker;
}

/* ---- create / submit --------------------------------------------------------------------- */

START_TEST(test_create_and_submit_checks)
{
    fix_t *x = fix_init(1, 4, NULL);
    /* a transport without one of its callbacks, or without workers, is refused */
    ifd_router_t *r2 = NULL;
    for (int k = 0; k < 4; k++) {
        ifd_router_params_t bad = {.pool = x->pool, .transport = fake_transport(&x->fake, 1)};
        if (k == 0)
            bad.transport.send = NULL;
        else if (k == 1)
            bad.transport.all_failed = NULL;
        else if (k == 2)
            bad.transport.n_workers = 0;
        else
            bad.pool = NULL;
        ck_assert_int_eq(ifd_router_create(&r2, &bad), IFD_EINVAL);
    }
    ck_assert_ptr_null(r2);
    /* an empty prompt, no max_tokens, no prompt, past the wire's limit */
    const ifd_wire_add_t bad[] = {params(P3, 0, 4), params(P3, 3, 0), params(NULL, 3, 4),
                                     params(P3, 3, IFD_WIRE_MAX_TOKENS)};
    owner_t *o;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(try_sub(x, &bad[i], &o), IFD_EINVAL);
    ifd_wire_add_t sp = params(P3, 3, 4);
    ck_assert_int_eq(ifd_router_submit(x->r, &sp, &ops, NULL, &o->s), IFD_EINVAL); /* no owner */
    ck_assert_int_eq(x->fake.n_send, 0);
    ck_assert_int_eq(ifd_router_queued(x->r), 0);
}
END_TEST

START_TEST(test_dispatch_frame)
{
    fix_t *x = fix_init(1, 4, NULL);
    const int32_t p[] = {10, 11, 12, 13, 14}, stop[] = {99};
    ifd_wire_add_t sp = params(p, 5, 7);
    sp.stop_ids = stop;
    sp.n_stop_ids = 1;
    sp.min_tokens = 2;
    const int32_t gw[] = {0x31524749, 1, 2}; /* copied, not read */
    sp.grammar = gw;
    sp.n_grammar = 3;
    owner_t *o = sub_p(x, &sp);
    ck_assert_int_eq(x->fake.n_frames, 1);
    ck_assert_int_eq(o->n_dispatched, 1);
    const frame_t *f = expect_add(o, 0, 0);
    ck_assert(f->id != 0 && f->n_tokens == 5 && f->max_tokens == 7 && f->prompt_logprobs == 0);
    ck_assert_mem_eq(f->tokens, p, sizeof p);
    ck_assert_int_eq(ifd_router_queued(x->r), 0);
    ck_assert_int_eq(ifd_router_dispatched(x->r), 1);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 0), 1);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 5), 0); /* out of range */

    const int32_t t[] = {20, 21};
    tokens(o, t, 2);
    ck_assert_mem_eq(o->toks, t, sizeof t);
    owner_t stranger = {.x = x, .id = o->id + 10}; /* an unknown id: ignored */
    tokens_from(0, &stranger, t, 1);
    ck_assert_int_eq(o->n_token, 2);
    finish(o, IFD_WIRE_FINISH_STOP);
    expect_end(o, IFD_WIRE_FINISH_STOP, 0);
    ck_assert_int_eq(o->n_dispatched, 1);
    ck_assert_int_eq(x->fake.n_kill, 0);
}
END_TEST

/* ---- routing ----------------------------------------------------------------------------- */

/* The worker whose device holds the longest cached prefix wins over round robin. */
START_TEST(test_prefix_preference)
{
    const int devs[] = {0, 1};
    fix_t *x = fix_init(2, 8, devs);
    int32_t a[13], b[13], e[13];
    prompt13(a, 100);
    prompt13(b, 200);
    prompt13(e, 300);
    const int on1[] = {1, 1, 1}, on0[] = {0, 0}, split[] = {0, 1, 1};
    cache_prefix(x, a, 3, on1, NULL);   /* a's 3 blocks on device 1 */
    cache_prefix(x, b, 2, on0, NULL);   /* b's first 2 on device 0 */
    cache_prefix(x, e, 3, split, NULL); /* e over both: 1 block on 0, 2 on 1 */

    sub(x, a, 13, 4); /* round robin would say 0 */
    ck_assert_int_eq(last_worker(x), 1);
    sub(x, b, 13, 4); /* round robin would say 0 too: loads 0 / 1 */
    ck_assert_int_eq(last_worker(x), 0);
    sub(x, a, 13, 4); /* a again: 1, though loads are 1 / 1 */
    ck_assert_int_eq(last_worker(x), 1);
    ifd_wire_add_t sp = params(a, 13, 4);
    sp.use_cache = false; /* no probe: the least loaded */
    sub_p(x, &sp);
    ck_assert_int_eq(last_worker(x), 0);
    sub(x, e, 13, 4); /* each device scores its own blocks: 2 on 1 > 1 on 0 */
    ck_assert_int_eq(last_worker(x), 1);
}
END_TEST

/* An image prompt is probed with the image-aware keys the worker's engine
 * publishes (kvpool/kvkey.h): two prompts that differ only by their picture
 * (the same placeholder ids, another hash) share no prefix, and a prefix
 * cached under the raw placeholder ids is not theirs either; the same
 * picture's prompt finds its blocks. */
START_TEST(test_prefix_images)
{
    const int devs[] = {0, 1};
    fix_t *x = fix_init(2, 8, devs);
    ifd_router_set_slack(x->r, 4);
    enum { IMG = 500 };
    static const uint8_t px[12] = {1, 2, 3};
    const ifd_wire_image_t pic_a = {.pos = 1,
                                    .n_tokens = 8,
                                    .hash_lo = 7,
                                    .hash_hi = 70,
                                    .width = 2,
                                    .height = 2,
                                    .pixels = px,
                                    .n_pixels = 12};
    ifd_wire_image_t pic_b = pic_a;
    pic_b.hash_lo = 8; /* another picture, the same tokens */
    int32_t p[13], keys_a[13], keys_b[13];
    prompt13(p, 100);
    for (int i = 1; i < 9; i++)
        p[i] = IMG;
    const uint64_t ha[2] = {7, 70}, hb[2] = {8, 70};
    memcpy(keys_a, p, sizeof p);
    memcpy(keys_b, p, sizeof p);
    ifd_kvkey_image_span(keys_a, p, 13, 1, 8, ha);
    ifd_kvkey_image_span(keys_b, p, 13, 1, 8, hb);
    for (int i = 0; i < 13; i++) { /* image tokens keyed apart, the rest as they are */
        ck_assert(i >= 1 && i < 9 ? keys_a[i] < 0 && keys_a[i] != keys_b[i]
                                  : keys_a[i] == p[i] && keys_b[i] == p[i]);
        ck_assert_int_eq(keys_a[i], i >= 1 && i < 9 ? ifd_kvkey_image(IMG, ha, i - 1) : p[i]);
    }
    const int on1[] = {1, 1, 1};
    cache_prefix(x, keys_a, 3, on1, NULL); /* picture a's prompt as the engine publishes it */
    cache_prefix(x, p, 3, on1, NULL);      /* the raw ids: what a key-blind probe would match */
    x->fake.w[0].ready = false;            /* two fillers (no prefix) on worker 1 */
    sub(x, P3, 3, 4);
    sub(x, P3, 3, 4);
    ready(x, 0);
    ifd_wire_add_t sp = params(p, 13, 4);
    sp.images = &pic_b;
    sp.n_images = 1;
    sub_p(x, &sp); /* picture b: no cached prefix anywhere, the least loaded */
    ck_assert_int_eq(last_worker(x), 0);
    sp.images = &pic_a;
    sub_p(x, &sp); /* picture a: its 3 blocks on device 1 win (loads 1 / 2, slack 4) */
    ck_assert_int_eq(last_worker(x), 1);
    sp.images = &pic_b;
    sub_p(x, &sp); /* b again: still nothing (loads 1 / 3) */
    ck_assert_int_eq(last_worker(x), 0);
}
END_TEST

/* The prefix holder wins while its load is at most route_slack above the least loaded one. */
START_TEST(test_route_slack)
{
    const int devs[] = {0, 1};
    fix_t *x = fix_init(2, 8, devs);
    int32_t a[13];
    prompt13(a, 100);
    const int on1[] = {1, 1, 1};
    cache_prefix(x, a, 3, on1, NULL);
    x->fake.w[0].ready = false; /* two fillers (no prefix) on worker 1 */
    sub(x, P3, 3, 4);
    sub(x, P3, 3, 4);
    ready(x, 0);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 1), 2);
    /* slack: the loads before the submit, and where it goes */
    const struct {
        int slack, load0, load1, pick;
    } step[] = {
        {1, 0, 2, 0}, /* 2 > 0 + 1: the least loaded */
        {2, 1, 2, 1}, /* 2 <= 1 + 2: the prefix holder */
        {2, 1, 3, 1}, /* exactly at the bound: still the holder */
        {2, 1, 4, 0}, /* past it */
    };
    for (size_t i = 0; i < sizeof step / sizeof step[0]; i++) {
        ifd_router_set_slack(x->r, step[i].slack);
        ck_assert_int_eq(ifd_router_worker_load(x->r, 0), step[i].load0);
        ck_assert_int_eq(ifd_router_worker_load(x->r, 1), step[i].load1);
        sub(x, a, 13, 4);
        ck_assert_int_eq(last_worker(x), step[i].pick);
    }
}
END_TEST

/* Equal scores: the lowest load, and among equal loads round robin. */
START_TEST(test_load_ties)
{
    fix_t *x = fix_init(3, 8, NULL); /* one device: every prefix scores alike */
    int32_t a[13];
    prompt13(a, 100);
    const int on0[] = {0, 0, 0};
    cache_prefix(x, a, 3, on0, NULL);
    /* round robin over idle workers: 0, 1, 2, then 0 again */
    owner_t *o[4];
    for (int i = 0; i < 4; i++) {
        o[i] = sub(x, a, 13, 4);
        ck_assert_int_eq(last_worker(x), i % 3);
    }
    /* loads 2 / 1 / 1: worker 1 finishes → 2 / 0 / 1, the next goes to 1 */
    finish(o[1], IFD_WIRE_FINISH_STOP);
    sub(x, a, 13, 4);
    ck_assert_int_eq(last_worker(x), 1);
    /* loads 2 / 1 / 1, round robin from 2: 2 */
    sub(x, a, 13, 4);
    ck_assert_int_eq(last_worker(x), 2);
}
END_TEST

/* ---- queueing ---------------------------------------------------------------------------- */

START_TEST(test_queue_until_ready_and_room)
{
    fix_t *x = fix_init(1, 1, NULL);
    x->fake.w[0].ready = false;
    owner_t *o[3];
    for (int i = 0; i < 3; i++)
        o[i] = sub(x, P3, 3, 4);
    ck_assert_int_eq(x->fake.n_frames, 0); /* nobody ready */
    ck_assert_int_eq(ifd_router_queued(x->r), 3);
    /* READY: one room (max_seqs 1), the first in line */
    ready(x, 0);
    expect_add(o[0], 0, 0);
    ck_assert_int_eq(ifd_router_queued(x->r), 2);
    /* each FINISHED frees the room for the next, in order */
    for (int i = 1; i < 3; i++) {
        ck_assert_int_eq(o[i]->n_dispatched, 0);
        finish(o[i - 1], IFD_WIRE_FINISH_LENGTH);
        expect_end(o[i - 1], IFD_WIRE_FINISH_LENGTH, 0);
        expect_add(o[i], 0, 0);
        ck_assert_uint_gt(o[i]->id, o[i - 1]->id);
    }
    ck_assert_int_eq(x->fake.n_frames, 3);
}
END_TEST

/* An unresponsive worker gets nothing while a responsive one has room, and
 * everything once none does. */
START_TEST(test_unresponsive_avoided)
{
    fix_t *x = fix_init(2, 1, NULL);
    x->fake.w[0].unresponsive = true;
    owner_t *a = sub(x, P3, 3, 4); /* round robin says 0: avoided */
    expect_add(a, 1, 0);
    owner_t *b = sub(x, P3, 3, 4); /* 1 is full: 0 after all */
    expect_add(b, 0, 0);
    owner_t *c = sub(x, P3, 3, 4); /* both full */
    ck_assert_int_eq(ifd_router_queued(x->r), 1);
    finish(a, IFD_WIRE_FINISH_STOP);
    expect_add(c, 1, 0);
}
END_TEST

/* Submits from inside callbacks: from on_dispatched (inside the dispatch
 * loop) it is dispatched at once; from the on_finished of a sequence a dead
 * worker had finished, it queues behind the dead worker's resumed ones. */
START_TEST(test_submit_from_callback)
{
    fix_t *x = fix_init(2, 4, NULL);
    x->fake.w[1].ready = false;
    x->next.submit_on_dispatch = true;
    owner_t *a = sub(x, P3, 3, 1);
    ck_assert_int_eq(x->n_o, 2);
    owner_t *b = &x->o[1];
    expect_add(b, 0, 0);
    ck_assert_int_eq(ifd_router_queued(x->r), 0);
    /* a reached max_tokens: when worker 0 dies it is finished there, and
     * its on_finished submits c; b is resumed, ahead of c */
    const int32_t t[] = {20};
    tokens(a, t, 1);
    a->submit_on_finished = true;
    fake_lose(&x->fake, 0);
    expect_end(a, IFD_WIRE_FINISH_LENGTH, 0);
    ck_assert_int_eq(ifd_router_queued(x->r), 2);
    x->fake.w[1].max_seqs = 1;
    ready(x, 1);
    expect_add(b, 1, 0);
    owner_t *c = &x->o[2];
    ck_assert_int_eq(c->n_dispatched, 0);
    b->submit_on_finished = true;
    finish(b, IFD_WIRE_FINISH_STOP); /* c's turn; d queues behind it */
    expect_add(c, 1, 0);
    ck_assert_int_eq(ifd_router_queued(x->r), 1);
}
END_TEST

/* ---- a worker dies ----------------------------------------------------------------------- */

/* Its sequences go to another worker as prompt + streamed tokens, and the
 * owner's stream continues with no gap and no duplicate. */
START_TEST(test_worker_dies_resume)
{
    fix_t *x = fix_init(2, 4, NULL);
    x->fake.w[1].ready = false;
    const int32_t p[] = {10, 11, 12, 13}, t1[] = {20, 21, 22}, t2[] = {23, EOS};
    owner_t *a = sub(x, p, 4, 10);
    tokens(a, t1, 3);
    ck_assert_int_eq(a->n_token, 3);

    x->fake.w[1].ready = true; /* ready before the loss: the resume goes straight there */
    fake_lose(&x->fake, 0);
    ck_assert_int_eq(x->fake.n_frames, 2);
    const frame_t *f = expect_add(a, 1, 3); /* the same id */
    ck_assert_uint_eq(f->n_tokens, 7);
    ck_assert_uint_eq(f->max_tokens, 10);
    const int32_t want[] = {10, 11, 12, 13, 20, 21, 22};
    ck_assert_mem_eq(f->tokens, want, sizeof want);
    ck_assert_int_eq(a->n_dispatched, 1); /* on_dispatched the first time only */
    expect_running(a);
    ck_assert_uint_eq(x->metrics.worker_redispatched, 1);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 0), 0);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 1), 1);

    /* the dead worker's late frames are not its any more */
    const int32_t stale[] = {66};
    tokens_from(0, a, stale, 1);
    finished_from(0, a, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(a->n_token, 3);
    expect_running(a);
    /* the new one continues the stream */
    tokens(a, t2, 2);
    finish(a, IFD_WIRE_FINISH_STOP);
    const int32_t all[] = {20, 21, 22, 23, EOS};
    ck_assert_int_eq(a->n_token, 5);
    ck_assert_mem_eq(a->toks, all, sizeof all);
    expect_end(a, IFD_WIRE_FINISH_STOP, 0);
}
END_TEST

/* A request's pictures go with its ADD, and again with the ADD that resumes
 * it after a worker's death (router.h: borrowed, never copied); more than
 * the wire takes, or none behind a count, is refused. */
START_TEST(test_images_resent)
{
    fix_t *x = fix_init(2, 4, NULL);
    x->fake.w[1].ready = false;
    static const uint8_t px[12] = {1, 2, 3};
    const ifd_wire_image_t pics[2] = {{.pos = 1,
                                       .n_tokens = 1,
                                       .hash_lo = 7,
                                       .width = 2,
                                       .height = 2,
                                       .pixels = px,
                                       .n_pixels = 12},
                                      {.pos = 2,
                                       .n_tokens = 1,
                                       .hash_lo = 8,
                                       .width = 2,
                                       .height = 2,
                                       .pixels = px,
                                       .n_pixels = 12}};
    const int32_t p[] = {10, 11, 12, 13}, t1[] = {20};
    ifd_wire_add_t sp = params(p, 4, 10);
    sp.images = pics;
    sp.n_images = 2;
    owner_t *a = sub_p(x, &sp);
    const frame_t *f = expect_add(a, 0, 0);
    ck_assert_ptr_eq(f->images, pics);
    ck_assert_uint_eq(f->n_images, 2);
    tokens(a, t1, 1);
    x->fake.w[1].ready = true;
    fake_lose(&x->fake, 0);
    f = expect_add(a, 1, 1); /* resumed elsewhere: the same pictures again */
    ck_assert_ptr_eq(f->images, pics);
    ck_assert_uint_eq(f->n_images, 2);
    finish(a, IFD_WIRE_FINISH_STOP);
    owner_t *o;
    sp.n_images = IFD_WIRE_MAX_IMAGES + 1;
    ck_assert_int_eq(try_sub(x, &sp, &o), IFD_EINVAL);
    sp.n_images = 1;
    sp.images = NULL;
    ck_assert_int_eq(try_sub(x, &sp, &o), IFD_EINVAL);
}
END_TEST

/* Several sequences in flight go back to the front of the queue in id order,
 * ahead of those that were waiting. */
START_TEST(test_resume_order)
{
    fix_t *x = fix_init(2, 2, NULL);
    x->fake.w[1].ready = false;
    owner_t *o[3];
    o[0] = sub(x, P3, 3, 8);
    o[1] = sub(x, P3, 3, 8);
    o[2] = sub(x, P3, 3, 8); /* waits: worker 0 is full */
    ck_assert_int_eq(ifd_router_queued(x->r), 1);
    ck_assert_uint_lt(o[0]->id, o[1]->id);
    fake_lose(&x->fake, 0); /* nobody ready: all three wait */
    ck_assert_int_eq(ifd_router_queued(x->r), 3);
    ck_assert_int_eq(ifd_router_dispatched(x->r), 0);
    ck_assert_uint_eq(x->metrics.worker_redispatched, 2);
    x->fake.w[1].max_seqs = 1;
    ready(x, 1);
    expect_add(o[0], 1, 0);
    finish(o[0], IFD_WIRE_FINISH_STOP);
    expect_add(o[1], 1, 0);
    finish(o[1], IFD_WIRE_FINISH_STOP);
    expect_add(o[2], 1, 0);
    ck_assert_uint_gt(o[2]->id, o[1]->id);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(o[i]->n_dispatched, 1);
}
END_TEST

/* What the dead worker's last token already ended is finished locally; a
 * released sequence is freed; one released from another's callback too
 * (victim: its id is lower than its releaser's, so it has passed the first
 * checks when it is released). */
START_TEST(test_lost_finishes_what_is_over)
{
    fix_t *x = fix_init(2, 8, NULL);
    x->fake.w[1].ready = false;
    const int32_t stop[] = {7}, t2[] = {30, 31}, te[] = {EOS}, ts[] = {7};
    owner_t *victim = sub(x, P3, 3, 8);
    owner_t *len = sub(x, P3, 3, 2);
    owner_t *eos = sub(x, P3, 3, 8);
    ifd_wire_add_t sp = params(P3, 3, 8);
    sp.ignore_eos = true;
    owner_t *noeos = sub_p(x, &sp);
    sp = params(P3, 3, 8);
    sp.stop_ids = stop;
    sp.n_stop_ids = 1;
    owner_t *stp = sub_p(x, &sp);
    owner_t *rel = sub(x, P3, 3, 8);
    tokens(len, t2, 2); /* max_tokens reached */
    tokens(eos, te, 1);
    tokens(noeos, te, 1); /* EOS, but ignore_eos */
    tokens(stp, ts, 1);
    release(rel); /* CANCEL sent; the worker dies before FINISHED */
    ck_assert_int_eq(last_frame(x)->type, IFD_WIRE_CANCEL);
    ck_assert_uint_eq(last_frame(x)->id, rel->id);
    stp->release_on_finished = victim; /* victim would have been resumed */
    const int frames = x->fake.n_frames;

    x->fake.w[1].ready = true;
    fake_lose(&x->fake, 0);
    expect_end(len, IFD_WIRE_FINISH_LENGTH, 0);
    expect_end(eos, IFD_WIRE_FINISH_STOP, 0);
    ck_assert_int_eq(eos->fin.stop_token, EOS);
    expect_end(stp, IFD_WIRE_FINISH_STOP, 0);
    ck_assert_int_eq(stp->fin.stop_token, 7);
    ck_assert_int_eq(rel->n_error + victim->n_error, 0);
    /* only the ignore_eos one is resumed */
    ck_assert_int_eq(x->fake.n_frames, frames + 1);
    expect_add(noeos, 1, 1);
    ck_assert_uint_eq(x->metrics.worker_redispatched, 1);
    ck_assert_int_eq(ifd_router_dispatched(x->r), 1);
}
END_TEST

/* While stopping, a dead worker's sequences fail instead of moving. */
START_TEST(test_lost_while_stopping)
{
    fix_t *x = fix_init(2, 8, NULL);
    owner_t *a = sub(x, P3, 3, 8);
    ifd_router_stopping(x->r);
    fake_lose(&x->fake, 0);
    expect_end(a, IFD_WIRE_FINISH_ERROR, IFD_ECLOSED);
    ck_assert_int_eq(x->fake.n_frames, 1);
    ck_assert_uint_eq(x->metrics.worker_redispatched, 0);
}
END_TEST

/* A sequence on three workers that died in a row without progress fails;
 * progress between deaths starts the count again. */
START_TEST(test_poison_sequence)
{
    fix_t *x = fix_init(2, 8, NULL);
    owner_t *a = sub(x, P3, 3, 16);
    for (int death = 1; death <= 3; death++) {
        const int w = x->fake.where[a->id];
        x->fake.w[1 - w].ready = true;
        expect_running(a);
        fake_lose(&x->fake, w);
        if (death < 3)
            expect_add(a, 1 - w, 0);
    }
    expect_end(a, IFD_WIRE_FINISH_ERROR, IFD_EINTERNAL); /* failed, not resumed */
    ck_assert_int_eq(x->fake.n_frames, 3);

    /* with a token between the deaths it is resumed every time */
    x->fake.w[0].ready = true;
    owner_t *b = sub(x, P3, 3, 16);
    for (int d = 0; d < 4; d++) {
        const int32_t t[] = {40 + d};
        const int w = x->fake.where[b->id];
        tokens(b, t, 1);
        x->fake.w[1 - w].ready = true;
        fake_lose(&x->fake, w);
        expect_running(b);
        expect_add(b, 1 - w, (uint32_t)d + 1);
    }
    finish(b, IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(b->n_token, 4);
}
END_TEST

/* Every worker failed: the queue fails, and so do a dead worker's sequences. */
START_TEST(test_all_failed)
{
    fix_t *x = fix_init(1, 8, NULL);
    owner_t *o[3];
    o[0] = sub(x, P3, 3, 8); /* dispatched */
    x->fake.w[0].ready = false;
    o[1] = sub(x, P3, 3, 8);
    o[2] = sub(x, P3, 3, 8);
    /* a worker reached FAILED but another could still serve: nothing happens */
    ifd_router_on_failed(x->r);
    ck_assert_int_eq(x->fake.n_all_failed_calls, 1);
    ck_assert_int_eq(ifd_router_queued(x->r), 2);
    expect_running(o[1]);
    /* the worker dies into FAILED: o[0]'s resume and the queue all fail */
    x->fake.all_failed = true;
    fake_lose(&x->fake, 0);
    for (int i = 0; i < 3; i++)
        expect_end(o[i], IFD_WIRE_FINISH_ERROR, IFD_ENODEV);
    ck_assert_int_eq(x->fake.n_frames, 1);
    /* a submit now waits (a FAILED worker is retried later) until on_failed */
    owner_t *d = sub(x, P3, 3, 8);
    ck_assert_int_eq(ifd_router_queued(x->r), 1);
    ifd_router_on_failed(x->r);
    expect_end(d, IFD_WIRE_FINISH_ERROR, IFD_ENODEV);
}
END_TEST

/* ---- sending fails ----------------------------------------------------------------------- */

START_TEST(test_send_fails)
{
    fix_t *x = fix_init(2, 8, NULL);
    /* worker 0's socket is broken: killed, and the sequence goes to 1 */
    x->fake.send_rc[0] = IFD_ECLOSED;
    owner_t *a = sub(x, P3, 3, 8);
    ck_assert_int_eq(x->fake.n_kill, 1);
    ck_assert(!x->fake.w[0].ready);
    expect_add(a, 1, 0);
    expect_running(a);
    /* a frame that cannot be encoded fails its sequence, and only it */
    x->fake.send_rc[1] = IFD_EINVAL;
    owner_t *b = sub(x, P3, 3, 8);
    expect_end(b, IFD_WIRE_FINISH_ERROR, IFD_EINVAL);
    ck_assert_int_eq(b->n_dispatched, 0);
    ck_assert_int_eq(x->fake.n_kill, 1);
    ck_assert_int_eq(ifd_router_queued(x->r), 0);
    x->fake.send_rc[1] = 0;
}
END_TEST

/* ---- release / cancel -------------------------------------------------------------------- */

START_TEST(test_release_and_cancel)
{
    fix_t *x = fix_init(1, 1, NULL);
    owner_t *a = sub(x, P3, 3, 8);
    owner_t *b = sub(x, P3, 3, 8); /* queued */
    owner_t *c = sub(x, P3, 3, 8); /* queued */
    /* a queued one is gone at once, with no frame */
    release(b);
    ck_assert_int_eq(ifd_router_queued(x->r), 1);
    ck_assert_int_eq(x->fake.n_frames, 1);
    ifd_router_release(x->r, NULL); /* nothing */
    /* a dispatched one: CANCEL to its worker, no callback from now on, and
     * its room is held until FINISHED */
    release(a);
    const frame_t *f = last_frame(x);
    ck_assert(f->type == IFD_WIRE_CANCEL && f->id == a->id && f->worker == 0);
    const int32_t t[] = {20}, t3[] = {21, 22, 23};
    tokens(a, t, 1);
    ck_assert_int_eq(a->n_token, 0);
    ck_assert_int_eq(ifd_router_dispatched(x->r), 1);
    ck_assert_int_eq(c->n_dispatched, 0);
    finish(a, IFD_WIRE_FINISH_CANCELLED);
    expect_add(c, 0, 0); /* its room went to c */
    /* released from inside on_token: one CANCEL, no more tokens */
    c->release_on_token = true;
    tokens(c, t3, 3);
    ck_assert_int_eq(c->n_token, 1);
    f = last_frame(x);
    ck_assert(f->type == IFD_WIRE_CANCEL && f->id == c->id && x->fake.n_frames == 4);
    /* the worker dies before its FINISHED: freed, not resumed */
    fake_lose(&x->fake, 0);
    ck_assert_int_eq(x->fake.n_frames, 4);
    ck_assert_int_eq(a->n_error + c->n_error, 0);
    ck_assert_int_eq(b->n_dispatched, 0);
}
END_TEST

/* Destroy frees what is still queued or dispatched, without callbacks. */
START_TEST(test_destroy_with_sequences)
{
    fix_t *x = fix_init(1, 1, NULL);
    owner_t *a = sub(x, P3, 3, 8);
    owner_t *b = sub(x, P3, 3, 8);
    ck_assert_int_eq(ifd_router_dispatched(x->r), 1);
    ck_assert_int_eq(ifd_router_queued(x->r), 1);
    ifd_router_destroy(x->r);
    x->r = NULL; /* no fix_fini: the router is gone */
    ck_assert_int_eq(a->n_finished + b->n_finished + a->n_error + b->n_error, 0);
    ifd_kvpool_destroy(x->pool);
}
END_TEST

/* ---- prompt logprobs --------------------------------------------------------------------- */

/* PROMPT_LOGPROBS for o from worker w: positions pos .. pos + n - 1. */
static void plp_from(int w, const owner_t *o, uint32_t pos, uint32_t n)
{
    ifd_wire_plp_t e[16];
    memset(e, 0, sizeof e);
    for (uint32_t i = 0; i < n; i++)
        e[i].token = (int32_t)(pos + i);
    ifd_wire_msg_t m = {.type = IFD_WIRE_PROMPT_LOGPROBS};
    m.u.prompt_logprobs = (ifd_wire_prompt_logprobs_t){o->id, pos, e, n};
    ifd_router_on_message(o->x->r, w, &m);
}

/* Every prompt position reaches the owner once, in order, across a resumption. */
START_TEST(test_prompt_logprobs_resume)
{
    fix_t *x = fix_init(2, 8, NULL);
    const int32_t p[] = {10, 11, 12, 13, 14, 15, 16, 17};
    ifd_wire_add_t sp = params(p, 8, 4);
    sp.prompt_logprobs = 1;
    owner_t *a = sub_p(x, &sp);
    ck_assert_uint_eq(expect_add(a, 0, 0)->prompt_logprobs, 1);
    /* from worker: positions sent, then the last one the owner holds */
    const struct {
        int w;
        uint32_t pos, n, plp_last;
    } step[] = {
        {0, 1, 3, 3}, /* 1 .. 3 */
        {0, 6, 2, 3}, /* a gap: dropped */
        {1, 1, 5, 5}, /* resumed on 1, recomputed from 1: 4 and 5 are new */
        {1, 6, 4, 7}, /* past the prompt: cut at 7 */
        {0, 1, 7, 7}, /* resumed on 0: nothing new */
    };
    for (size_t i = 0; i < sizeof step / sizeof step[0]; i++) {
        if (step[i].w != x->fake.where[a->id]) {
            const int dead = x->fake.where[a->id];
            x->fake.w[step[i].w].ready = true;
            fake_lose(&x->fake, dead);
            /* asked again only while some are missing */
            ck_assert_uint_eq(expect_add(a, step[i].w, 0)->prompt_logprobs,
                              a->plp_last + 1 < 8 ? 1 : 0);
        }
        plp_from(step[i].w, a, step[i].pos, step[i].n);
        ck_assert_uint_eq(a->plp_last, step[i].plp_last);
    }
    ck_assert_int_eq(a->n_plp, 3);
}
END_TEST

/* ---- the local layers' window ------------------------------------------------------------ */

/* Puts n fillers (no prefix) on worker w of two, the other one held not
 * ready meanwhile. */
static void fill(fix_t *x, int w, int n)
{
    x->fake.w[1 - w].ready = false;
    for (int i = 0; i < n; i++) {
        sub(x, P3, 3, 4);
        ck_assert_int_eq(last_worker(x), w);
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
    fix_t *x = fix_init_w(2, 8, wdev, BS);
    ifd_router_set_slack(x->r, 1);
    int32_t a[13];
    prompt13(a, 100);
    cache_prefix(x, a, 3, devs, twins);
    fill(x, 0, load0);
    fill(x, 1, load1);
    sub(x, a, 13, 4);
    const int pick = last_worker(x);
    fix_fini(x);
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

/* ---- fairness between clients ------------------------------------------------------------- */

/* Client 1 fills the worker (max_seqs 4) and queues four more; client 2's
 * first two go out at once, beyond max_seqs (its share there: 4 over 2
 * clients; the engine makes room), its third waits. Then each room below
 * max_seqs goes to the client with fewer sequences dispatched, FIFO within
 * a client — not to the sequence queued first. Before the share, client 2
 * waited behind all of client 1's. */
START_TEST(test_fair_other_client_goes_next)
{
    fix_t *x = fix_init(1, 4, NULL);
    owner_t *a[8], *b[3];
    for (int i = 0; i < 8; i++)
        a[i] = sub_c(x, 1);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 0), 4);
    for (int i = 0; i < 3; i++)
        b[i] = sub_c(x, 2);
    expect_add(b[1], 0, 0);
    ck_assert_uint_eq(last_frame(x)->client, 2);
    ck_assert_int_eq(b[0]->n_dispatched, 1);
    ck_assert_int_eq(b[2]->n_dispatched, 0); /* past its share */
    ck_assert_int_eq(ifd_router_worker_load(x->r, 0), 6);
    ck_assert_int_eq(ifd_router_queued(x->r), 5);
    /* below max_seqs again only after three of client 1's end: its next
     * (client 1 has 1 dispatched, client 2 has 2) */
    finish(a[0], IFD_WIRE_FINISH_STOP);
    finish(a[1], IFD_WIRE_FINISH_STOP);
    ck_assert_int_eq(x->fake.n_frames, 6);
    finish(a[2], IFD_WIRE_FINISH_STOP);
    expect_add(a[4], 0, 0);
    /* client 2 now has fewer dispatched (1 against 2): its third goes
     * before client 1's sixth, queued long before it */
    finish(b[0], IFD_WIRE_FINISH_STOP);
    expect_add(b[2], 0, 0);
    finish(a[3], IFD_WIRE_FINISH_STOP);
    expect_add(a[5], 0, 0);
}
END_TEST

/* The share beyond max_seqs is per worker: client 2's first goes to one of
 * the two full workers, its second to the other, its third waits. */
START_TEST(test_fair_share_per_worker)
{
    fix_t *x = fix_init(2, 2, NULL);
    for (int i = 0; i < 6; i++)
        sub_c(x, 1);
    ck_assert_int_eq(ifd_router_queued(x->r), 2);
    owner_t *b0 = sub_c(x, 2), *b1 = sub_c(x, 2), *b2 = sub_c(x, 2);
    ck_assert_int_eq(b0->n_dispatched + b1->n_dispatched, 2);
    ck_assert_int_ne(x->fake.where[b0->id], x->fake.where[b1->id]);
    ck_assert_int_eq(b2->n_dispatched, 0);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 0), 3);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 1), 3);
}
END_TEST

/* Twelve clients of one sequence each on one worker (max_seqs 4): four
 * below max_seqs, four more beyond it (each client is below its share),
 * four wait — at most twice max_seqs. Every client's slot is freed with its
 * sequence and taken again later (the fixture checks that all ended). */
START_TEST(test_fair_many_clients)
{
    fix_t *x = fix_init(1, 4, NULL);
    owner_t *o[12];
    for (int i = 0; i < 12; i++)
        o[i] = sub_c(x, 100 + (uint32_t)i);
    ck_assert_int_eq(ifd_router_worker_load(x->r, 0), 8);
    ck_assert_int_eq(ifd_router_queued(x->r), 4);
    for (int i = 0; i < 12; i++) {
        ck_assert_int_eq(o[i]->n_dispatched, 1);
        finish(o[i], IFD_WIRE_FINISH_STOP);
    }
    ck_assert_int_eq(ifd_router_dispatched(x->r), 0);
    owner_t *again = sub_c(x, 103);
    expect_add(again, 0, 0);
    ck_assert_uint_eq(last_frame(x)->client, 103);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("router");
    TCase *tc = tcase_create("router");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, NULL, fix_teardown);
    tcase_add_test(tc, test_create_and_submit_checks);
    tcase_add_test(tc, test_dispatch_frame);
    tcase_add_test(tc, test_prefix_preference);
    tcase_add_test(tc, test_prefix_images);
    tcase_add_test(tc, test_route_slack);
    tcase_add_test(tc, test_load_ties);
    tcase_add_test(tc, test_queue_until_ready_and_room);
    tcase_add_test(tc, test_unresponsive_avoided);
    tcase_add_test(tc, test_submit_from_callback);
    tcase_add_test(tc, test_worker_dies_resume);
    tcase_add_test(tc, test_images_resent);
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
    tcase_add_test(tc, test_fair_other_client_goes_next);
    tcase_add_test(tc, test_fair_share_per_worker);
    tcase_add_test(tc, test_fair_many_clients);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
