/*
 * test_engine.c — the engine's scheduler on a fake model that really uses
 * the paged KV pool: the fake forward writes (token, position) into each
 * token's KV slot and computes every sampled row's logits from the whole
 * context read back through the block table. Any wrong block, slot, prefix
 * hit or lost KV after preemption changes the output, so "batched equals
 * solo" checks the bookkeeping end to end. Deterministic and fast.
 *
 * With a local pool (engine.h, local_pool) the fake also writes every token
 * into its local slot and checks, for each sampled row, that the positions
 * of its window read back through the local table hold that token and
 * position: a local block released too early or a wrong twin counts as bad.
 */
#include "testutil.h"

#include "error.h"
#include "kvpool/kvdisk.h"
#include "kvpool/kvhost.h"
#include "kvpool/kvpool.h"
#include "worker/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOCAB 64
#define STOP_ID 0
#define MAX_REQ 64
#define MAX_OUT 256

typedef struct {
    ifd_kvpool_t *pool;
    ifd_kvpool_t *lpool; /* NULL: one pool */
    int window;          /* of the local layer, with lpool */
    int hash_window;     /* > 0: every layer is local: rows read (and hash) only their window */
    int bad; /* context inconsistencies seen */
    int forwards;
    int image_tokens; /* tokens that came with an embedding row */
    /* asynchronous copies (fake_kv_download_async, fake_kv_upload_async):
     * queued, run only when their ticket is waited for (copy_done's wait or
     * copy_wait) or queried a second time, reading the block (an upload:
     * its source) then, as the emulator's deferred copy stream does */
    struct {
        int32_t block;
        void *dst;
        const void *src; /* an upload's; NULL: a download */
        uint64_t ticket;
        int queries;
    } pend[64];
    int n_pend;
    uint64_t next_ticket, done_upto;
    int uploads_async; /* fake_kv_upload_async's calls */
    /* fail_upload > 0: the fail_upload-th asynchronous upload fails: its
     * copy writes garbage positions into the block and its fence reports
     * IFD_ECUDA (copy_wait, the device's wait, still succeeds) */
    int fail_upload;
    uint64_t failed_ticket; /* + 1; 0: none yet */
} fake_t;

static float *kv_in(ifd_kvpool_t *pool, int32_t local_block, int off)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    float *k = ifd_kvpool_layer_k(pool, 0, 0);
    return k + ((int64_t)local_block * g.block_size + off) * 2;
}

static float *kv_at(fake_t *f, int32_t local_block, int off)
{
    return kv_in(f->pool, local_block, off);
}

static int fake_forward(void *ctx, const ifd_batch_t *b, float *logits)
{
    fake_t *f = ctx;
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(f->pool, &g);
    int bs = g.block_size;
    f->forwards++;
    for (int i = 0; i < b->n_tok; i++) {
        /* images (engine.h): row 0 of an image token's embedding is its
         * position, row 1 what it stores in place of the token; an image
         * whole in the step (ifd_batch_t.kv_last's rule) */
        const float *e = b->embd ? b->embd[i] : NULL;
        if (e && e[0] != (float)b->pos[i])
            f->bad++;
        if (b->kv_last && b->kv_last[i] > b->pos[i] &&
            (i + 1 == b->n_tok || b->seq[i + 1] != b->seq[i] || b->pos[i + 1] != b->pos[i] + 1 ||
             b->kv_last[i + 1] != b->kv_last[i]))
            f->bad++;
        f->image_tokens += e != NULL;
        if (b->slot[i] < 0)
            continue;
        float *kv = kv_at(f, (int32_t)(b->slot[i] / bs), (int)(b->slot[i] % bs));
        kv[0] = e ? e[1] : (float)b->tokens[i];
        kv[1] = (float)b->pos[i];
    }
    if (!f->lpool != !b->local_block_tables)
        f->bad++;
    for (int i = 0; f->lpool && i < b->n_tok; i++) {
        if (b->local_slot[i] < 0)
            continue;
        float *kv = kv_in(f->lpool, (int32_t)(b->local_slot[i] / bs), (int)(b->local_slot[i] % bs));
        kv[0] = b->embd && b->embd[i] ? b->embd[i][1] : (float)b->tokens[i];
        kv[1] = (float)b->pos[i];
    }
    for (int r = 0; r < b->n_logits; r++) {
        int i = b->logit_rows[r];
        const int32_t *table = b->block_tables + (int64_t)b->seq[i] * b->max_blocks;
        uint64_t h = 1469598103934665603ull;
        const int p0 = f->hash_window > 0 && b->pos[i] - f->hash_window + 1 > 0
                           ? b->pos[i] - f->hash_window + 1
                           : 0;
        for (int p = p0; p <= b->pos[i]; p++) {
            float *kv = kv_at(f, table[p / bs], p % bs);
            if ((int)kv[1] != p)
                f->bad++;
            h = (h ^ (uint64_t)(int)kv[0]) * 1099511628211ull;
            h ^= h >> 29;
            const int32_t *lt = f->lpool ? b->local_block_tables + (int64_t)b->seq[i] * b->max_blocks
                                         : NULL;
            if (lt && p > b->pos[i] - f->window) { /* in the window: the twin holds it */
                float *lkv = kv_in(f->lpool, lt[p / bs], p % bs);
                if ((int)lkv[1] != p || lkv[0] != kv[0])
                    f->bad++;
            }
        }
        float *row = logits + (size_t)r * VOCAB;
        for (int v = 0; v < VOCAB; v++)
            row[v] = 0.0f;
        row[h % VOCAB] = 10.0f;
    }
    return 0;
}

typedef struct {
    int32_t out[MAX_REQ][MAX_OUT];
    int n_out[MAX_REQ];
    int finished[MAX_REQ];
    ifd_finish_reason_t reason[MAX_REQ];
    ifd_engine_usage_t usage[MAX_REQ];
    /* prompt logprobs: positions 1 .. plp_n received, in order */
    int plp_n[MAX_REQ];
    int32_t plp_tok[MAX_REQ][400];
    float plp_lp[MAX_REQ][400];
    int32_t plp_rank[MAX_REQ][400], plp_top0[MAX_REQ][400], plp_ntop[MAX_REQ][400];
    int32_t plp_topl[MAX_REQ][400]; /* the last top alternative's id */
    /* the last token's top alternatives: how many, the first's and last's id */
    int32_t tok_ntop[MAX_REQ], tok_top0[MAX_REQ], tok_topl[MAX_REQ];
    int plp_rows_step; /* rows received since the test last cleared it */
} sink_t;

static void on_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    sink_t *s = ctx;
    ck_assert_uint_lt(id, MAX_REQ);
    ck_assert_int_eq(s->finished[id], 0);
    ck_assert_int_lt(s->n_out[id], MAX_OUT);
    s->out[id][s->n_out[id]++] = res->token;
    s->tok_ntop[id] = res->n_top;
    s->tok_top0[id] = res->n_top ? ifd_sample_top_ids(res)[0] : -1;
    s->tok_topl[id] = res->n_top ? ifd_sample_top_ids(res)[res->n_top - 1] : -1;
}

static void on_plp(void *ctx, uint64_t id, int32_t pos, const ifd_sample_result_t *res, int32_t n)
{
    sink_t *s = ctx;
    ck_assert_uint_lt(id, MAX_REQ);
    ck_assert_int_eq(s->finished[id], 0);
    ck_assert_int_eq(s->n_out[id], 0);       /* all before the first token */
    ck_assert_int_eq(pos, s->plp_n[id] + 1); /* in order, each once */
    ck_assert_int_gt(n, 0);
    ck_assert_int_lt(pos + n, 400);
    for (int32_t i = 0; i < n; i++) {
        s->plp_tok[id][pos + i] = res[i].token;
        s->plp_lp[id][pos + i] = res[i].logprob;
        s->plp_rank[id][pos + i] = res[i].rank;
        s->plp_ntop[id][pos + i] = res[i].n_top;
        const int32_t *top = ifd_sample_top_ids(&res[i]);
        s->plp_top0[id][pos + i] = res[i].n_top ? top[0] : -1;
        s->plp_topl[id][pos + i] = res[i].n_top ? top[res[i].n_top - 1] : -1;
    }
    s->plp_n[id] = pos + n - 1;
    s->plp_rows_step += n;
}

static void on_finish(void *ctx, uint64_t id, ifd_finish_reason_t reason,
                      const ifd_engine_usage_t *u)
{
    sink_t *s = ctx;
    s->finished[id]++;
    s->reason[id] = reason;
    s->usage[id] = *u;
}

typedef struct {
    fake_t fake;
    ifd_kvpool_t *pool;
    ifd_engine_t *eng;
    sink_t *sink;
    ifd_kvdisk_t *disk; /* rig_open_two_disk's, or NULL */
} rig_t;

static void rig_open_cap(rig_t *r, int n_blocks, int budget, int max_seqs, int n_ctx,
                         int prefill_cap)
{
    memset(r, 0, sizeof *r);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = 1;
    kp.n_kv_heads = 1;
    kp.head_dim = 2;
    kp.dtype = IFD_KV_F32;
    kp.n_blocks = n_blocks;
    kp.n_workers = 2;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r->pool), 0);
    r->fake.pool = r->pool;
    r->sink = calloc(1, sizeof *r->sink);
    ifd_engine_model_t m = {&r->fake, VOCAB, n_ctx, fake_forward, 0,    0,    NULL, 1, 2,
                            NULL,     NULL,  0,     NULL,         NULL, NULL, NULL, NULL, NULL};
    ifd_engine_params_t ep = ifd_engine_default_params();
    static const int32_t eos[] = {STOP_ID};
    ep.eos_ids = eos;
    ep.n_eos_ids = 1;
    ep.max_batched_tokens = budget;
    ep.max_seqs = max_seqs;
    ep.prefill_cap = prefill_cap;
    ifd_engine_callbacks_t cb = {r->sink, on_token, on_finish, on_plp};
    ck_assert_int_eq(ifd_engine_create(&r->eng, &ep, &m, r->pool, &cb), 0);
}

static void rig_open(rig_t *r, int n_blocks, int budget, int max_seqs, int n_ctx)
{
    rig_open_cap(r, n_blocks, budget, max_seqs, n_ctx, 0);
}

static void rig_check_pool(rig_t *r)
{
    char err[512];
    ck_assert_msg(ifd_kvpool_check(r->pool, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r->fake.bad, 0);
}

static void rig_close(rig_t *r)
{
    ifd_engine_destroy(r->eng);
    ifd_kvdisk_destroy(r->disk); /* writes what is queued, gives the pins back */
    rig_check_pool(r);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(r->pool, &st), 0);
    ck_assert_int_eq(st.in_use, 0); /* nothing leaked */
    ifd_kvpool_destroy(r->pool);
    if (r->fake.lpool) {
        char err[512];
        ck_assert_msg(ifd_kvpool_check(r->fake.lpool, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(ifd_kvpool_stats(r->fake.lpool, &st), 0);
        ck_assert_int_eq(st.in_use, 0); /* nothing leaked in the local pool either */
        ifd_kvpool_destroy(r->fake.lpool);
    }
    free(r->sink);
}

/* An engine over two pools: n_blocks global blocks and n_lblocks local ones
 * of block_size tokens, one local layer of `window` tokens; with a disk
 * tier in disk_dir (NULL: none) whose files hold both twins. */
static void rig_open_two_disk(rig_t *r, int n_blocks, int n_lblocks, int block_size, int window,
                              int budget, int max_seqs, const char *disk_dir)
{
    memset(r, 0, sizeof *r);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = 1;
    kp.n_kv_heads = 1;
    kp.head_dim = 2;
    kp.dtype = IFD_KV_F32;
    kp.block_size = block_size;
    kp.n_blocks = n_blocks;
    kp.n_workers = 2;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r->pool), 0);
    kp.n_blocks = n_lblocks;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r->fake.lpool), 0);
    r->fake.pool = r->pool;
    r->fake.window = window;
    r->sink = calloc(1, sizeof *r->sink);
    ifd_engine_model_t m = {&r->fake, VOCAB, 1024, fake_forward, 1,    window, NULL, 2, 2,
                            NULL,     NULL,  0,    NULL,         NULL, NULL,   NULL, NULL, NULL};
    ifd_engine_params_t ep = ifd_engine_default_params();
    static const int32_t eos[] = {STOP_ID};
    ep.eos_ids = eos;
    ep.n_eos_ids = 1;
    ep.max_batched_tokens = budget;
    ep.max_seqs = max_seqs;
    ep.local_pool = r->fake.lpool;
    if (disk_dir) {
        ifd_kvdisk_params_t dp = ifd_kvdisk_default_params();
        dp.dir = disk_dir, dp.max_bytes = 1 << 24, dp.fingerprint = 78, dp.worker = 0;
        dp.local_pool = r->fake.lpool;
        ck_assert_int_eq(ifd_kvdisk_create(&dp, r->pool, &r->disk), 0);
        ep.disk = r->disk;
    }
    ifd_engine_callbacks_t cb = {r->sink, on_token, on_finish, on_plp};
    ck_assert_int_eq(ifd_engine_create(&r->eng, &ep, &m, r->pool, &cb), 0);
}

static void rig_open_two(rig_t *r, int n_blocks, int n_lblocks, int block_size, int window,
                         int budget, int max_seqs)
{
    rig_open_two_disk(r, n_blocks, n_lblocks, block_size, window, budget, max_seqs, NULL);
}

static int run_to_idle(rig_t *r, int max_steps)
{
    int steps = 0;
    while (!ifd_engine_idle(r->eng)) {
        ck_assert_int_ge(ifd_engine_step(r->eng, NULL), 0);
        ck_assert_int_lt(++steps, max_steps);
    }
    return steps;
}

static int32_t prompts[MAX_REQ][400];
static int prompt_len[MAX_REQ];

static void make_prompts(int n, int max_len, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < n; i++) {
        prompt_len[i] = 1 + rand() % max_len;
        for (int j = 0; j < prompt_len[i]; j++)
            prompts[i][j] = 1 + rand() % (VOCAB - 1);
    }
}

static ifd_engine_request_t req(int i, int max_tokens)
{
    ifd_engine_request_t r;
    memset(&r, 0, sizeof r);
    r.id = (uint64_t)i;
    r.prompt = prompts[i];
    r.n_prompt = prompt_len[i];
    r.sampling = ifd_sampling_default_params();
    r.sampling.temperature = 0.0f;
    r.max_tokens = max_tokens;
    r.use_cache = true;
    return r;
}

/* Each request alone in a roomy engine: the reference outputs. */
static void solo_outputs_eos(int n, int max_tokens, bool ignore_eos, sink_t *ref)
{
    for (int i = 0; i < n; i++) {
        rig_t r;
        rig_open(&r, 256, 512, 64, 1024);
        ifd_engine_request_t q = req(i, max_tokens);
        q.ignore_eos = ignore_eos;
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
        run_to_idle(&r, 10000);
        ck_assert_int_eq(r.sink->finished[i], 1);
        ref->n_out[i] = r.sink->n_out[i];
        memcpy(ref->out[i], r.sink->out[i], sizeof ref->out[i]);
        ref->reason[i] = r.sink->reason[i];
        rig_close(&r);
    }
}

static void solo_outputs(int n, int max_tokens, sink_t *ref)
{
    solo_outputs_eos(n, max_tokens, false, ref);
}

static void assert_same(const sink_t *a, const sink_t *b, int n)
{
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(b->finished[i], 1);
        ck_assert_int_eq(a->n_out[i], b->n_out[i]);
        ck_assert_msg(memcmp(a->out[i], b->out[i], (size_t)a->n_out[i] * 4) == 0,
                      "request %d differs", i);
        ck_assert_int_eq(a->reason[i], b->reason[i]);
    }
}

/* The fake model's argmax after tokens[0..p] (its one-hot logit row). */
static int32_t fake_argmax(const int32_t *tokens, int p)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i <= p; i++) {
        h = (h ^ (uint64_t)tokens[i]) * 1099511628211ull;
        h ^= h >> 29;
    }
    return (int32_t)(h % VOCAB);
}

/* Request i's prompt logprobs against the log-softmax of the fake's rows. */
static void check_plp(const sink_t *s, int i, int k)
{
    const double lse = log(exp(10.0) + (VOCAB - 1));
    ck_assert_int_eq(s->plp_n[i], prompt_len[i] - 1);
    for (int p = 1; p < prompt_len[i]; p++) {
        int32_t best = fake_argmax(prompts[i], p - 1);
        bool hit = prompts[i][p] == best;
        ck_assert_int_eq(s->plp_tok[i][p], prompts[i][p]);
        ck_assert_msg(fabs(s->plp_lp[i][p] - (hit ? 10.0 - lse : -lse)) < 1e-4,
                      "request %d position %d: logprob %g", i, p, (double)s->plp_lp[i][p]);
        ck_assert_int_eq(s->plp_rank[i][p], hit ? 1 : VOCAB); /* ties count: 1 + others >= */
        ck_assert_int_eq(s->plp_ntop[i][p], k);
        if (k)
            ck_assert_int_eq(s->plp_top0[i][p], best);
        if (k > 1) /* then the other ids, all equal, ascending */
            ck_assert_int_eq(s->plp_topl[i][p], k - 2 < best ? k - 2 : k - 1);
    }
}

START_TEST(test_prompt_logprobs)
{
    /* long prompts in small chunks, beside requests without: each position
     * once and right, every token stream the same as solo; top k past the
     * sampler's inline 20 (40, the whole vocabulary) for prompts and tokens */
    make_prompts(10, 150, 7);
    for (int i = 0; i < 5; i++)
        prompt_len[i] = 90 + 11 * i;
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(10, 12, ref);
    rig_t r;
    rig_open(&r, 512, 48, 64, 1024);
    for (int i = 0; i < 10; i++) {
        ifd_engine_request_t q = req(i, 12);
        static const int32_t plp_k[5] = {0, 1, 2, 40, VOCAB};
        q.prompt_logprobs = i < 5 ? 1 + plp_k[i] : 0;
        q.sampling.n_logprobs = i == 6 ? 40 : i == 7 ? VOCAB + 9 : -1;
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    int steps = 0;
    while (!ifd_engine_idle(r.eng)) {
        r.sink->plp_rows_step = 0;
        ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
        ck_assert_int_le(r.sink->plp_rows_step, IFD_ENGINE_PLP_ROWS);
        ck_assert_int_lt(++steps, 10000);
    }
    assert_same(ref, r.sink, 10);
    static const int32_t plp_k[5] = {0, 1, 2, 40, VOCAB};
    for (int i = 0; i < 5; i++)
        check_plp(r.sink, i, plp_k[i]);
    for (int i = 6; i < 8; i++) { /* the fake's rows: one id at 10, the rest 0 */
        const int32_t k = i == 6 ? 40 : VOCAB, best = r.sink->tok_top0[i];
        ck_assert_int_eq(r.sink->tok_ntop[i], k);
        ck_assert_int_ge(best, 0);
        ck_assert_int_eq(r.sink->tok_topl[i], k - 2 < best ? k - 2 : k - 1);
    }
    for (int i = 5; i < 10; i++)
        ck_assert_int_eq(r.sink->plp_n[i], 0);
    rig_close(&r);
    free(ref);
}
END_TEST

START_TEST(test_prompt_logprobs_not_from_prefix_cache)
{
    /* the prompt's blocks cached by an earlier request are recomputed for
     * the prompt logprobs (cached_tokens 0), and published for the next */
    make_prompts(1, 10, 3);
    prompt_len[0] = 70;
    rig_t r;
    rig_open(&r, 64, 256, 8, 1024);
    ifd_engine_request_t q = req(0, 4);
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    int32_t first[MAX_OUT];
    memcpy(first, r.sink->out[0], sizeof first);
    memset(r.sink, 0, sizeof *r.sink);
    q.prompt_logprobs = 1 + 2;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[0].cached_tokens, 0);
    check_plp(r.sink, 0, 2);
    ck_assert_int_eq(memcmp(first, r.sink->out[0], 4 * sizeof *first), 0);
    memset(r.sink, 0, sizeof *r.sink);
    q.prompt_logprobs = 0;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    ck_assert_int_ge(r.sink->usage[0].cached_tokens, 64);
    /* out of range */
    q.prompt_logprobs = 2 + VOCAB;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EINVAL);
    rig_close(&r);
}
END_TEST

START_TEST(test_prompt_logprobs_survive_preemption)
{
    /* a pool too small for all: preempted sequences owe the rest of their
     * prompt logprobs, never a repeat, and they come out right */
    make_prompts(8, 10, 11);
    for (int i = 0; i < 8; i++)
        prompt_len[i] = 40 + 5 * i;
    rig_t r;
    rig_open(&r, 24, 32, 8, 1024);
    for (int i = 0; i < 8; i++) {
        ifd_engine_request_t q = req(i, 30);
        q.prompt_logprobs = 1;
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    run_to_idle(&r, 20000);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_gt((int)st.preemptions, 0);
    for (int i = 0; i < 8; i++)
        check_plp(r.sink, i, 0);
    rig_close(&r);
}
END_TEST

START_TEST(test_batched_equals_solo)
{
    make_prompts(32, 120, 1);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(32, 24, ref);
    rig_t r;
    rig_open(&r, 512, 64, 64, 1024);
    for (int i = 0; i < 32; i++) {
        ifd_engine_request_t q = req(i, 24);
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    int steps = run_to_idle(&r, 10000);
    assert_same(ref, r.sink, 32);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_uint_eq(st.finished, 32);
    ck_assert(st.tokens / st.steps > 8); /* real batching happened */
    printf("batched: %d steps, %.1f tokens/step\n", steps, (double)st.tokens / (double)st.steps);
    rig_close(&r);
    free(ref);
}
END_TEST

/* A step fills the token budget with every decode first, then prefill
 * chunks; each step counts once in its step_tokens bucket (vLLM's
 * iteration_tokens_total buckets). */
START_TEST(test_budget_filled_decodes_first_then_chunks)
{
    make_prompts(5, 10, 2);
    prompt_len[4] = 100;
    rig_t r;
    rig_open(&r, 256, 16, 64, 1024);
    for (int i = 0; i < 4; i++) {
        ifd_engine_request_t q = req(i, 50);
        q.ignore_eos = true;
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    /* prefill the 4 short ones until all decode */
    ifd_engine_step_stats_t st;
    for (int k = 0; k < 8; k++)
        ifd_engine_step(r.eng, &st);
    ck_assert_int_eq(st.n_decode_tokens, 4);
    ifd_engine_request_t q = req(4, 5);
    q.ignore_eos = true;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    ifd_engine_stats_t es0, es1;
    ifd_engine_stats(r.eng, &es0);
    ck_assert_int_eq(ifd_engine_step(r.eng, &st), 5);
    ck_assert_int_eq(st.n_tokens, 16); /* budget filled */
    ifd_engine_stats(r.eng, &es1);     /* counted in vLLM's (8, 16] bucket */
    for (int b = 0; b < IFD_WIRE_STEP_BUCKETS; b++)
        ck_assert_uint_eq(es1.step_tokens[b] - es0.step_tokens[b], b == 2);
    ck_assert_int_eq(st.n_decode_tokens, 4); /* every decode first */
    ck_assert_int_eq(st.n_prefill_tokens, 12);
    int chunks = 1;
    while (r.sink->n_out[4] == 0) {
        ifd_engine_step(r.eng, &st);
        chunks++;
    }
    ck_assert_int_ge(chunks, 8); /* 100 tokens in 12-token chunks */
    run_to_idle(&r, 1000);
    ifd_engine_stats(r.eng, &es1); /* every step in one bucket */
    uint64_t counted = 0;
    for (int b = 0; b < IFD_WIRE_STEP_BUCKETS; b++)
        counted += es1.step_tokens[b];
    ck_assert_uint_eq(counted, es1.steps);
    rig_close(&r);
}
END_TEST

/* While sequences decode, prefill per step stays under the cap (fixed or
 * adaptive), decodes are never held back, steps without decodes get the whole
 * budget, and the tokens are those of each request alone. */
START_TEST(test_prefill_cap_keeps_decodes_steady)
{
    static const int caps[] = {8, 0, -1};
    make_prompts(12, 10, 11);
    for (int i = 4; i < 12; i++)
        prompt_len[i] = 150;
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs_eos(12, 40, true, ref);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        rig_t r;
        rig_open_cap(&r, 512, 128, 16, 1024, caps[c]);
        for (int i = 0; i < 4; i++) {
            ifd_engine_request_t q = req(i, 40);
            q.ignore_eos = true;
            ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
        }
        /* no decodes yet: the first step takes every short prompt at once */
        ifd_engine_step_stats_t st;
        ck_assert_int_eq(ifd_engine_step(r.eng, &st), 4);
        ck_assert_int_eq(st.n_decode_tokens, 0);
        for (int i = 4; i < 12; i++) {
            ifd_engine_request_t q = req(i, 40);
            q.ignore_eos = true;
            ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
        }
        int steps = 0, capped = 0;
        while (!ifd_engine_idle(r.eng)) {
            ifd_engine_stats_t es;
            ifd_engine_stats(r.eng, &es);
            ck_assert_int_ge(ifd_engine_step(r.eng, &st), 0);
            ck_assert_int_lt(++steps, 2000);
            if (st.n_decode_tokens == 0)
                continue;
            int n_dec = st.n_tokens - st.n_prefill_tokens; /* one token each */
            if (caps[c] > 0) {
                ck_assert_int_le(st.n_prefill_tokens, caps[c]);
            } else if (caps[c] == 0) {
                int total = (int)(IFD_ENGINE_STEP_RATIO * es.decode_step_tokens + 0.5);
                int lim = total > n_dec + IFD_ENGINE_PREFILL_FLOOR ? total
                                                                 : n_dec + IFD_ENGINE_PREFILL_FLOOR;
                ck_assert_int_le(st.n_tokens, lim);
            }
            capped += st.n_prefill_tokens > 0 && st.n_tokens < 128;
        }
        assert_same(ref, r.sink, 12);
        if (caps[c] >= 0)
            ck_assert_int_gt(capped, 0); /* the cap, not the budget, bounded some steps */
        printf("prefill cap %d: %d steps\n", caps[c], steps);
        rig_close(&r);
    }
    free(ref);
}
END_TEST

START_TEST(test_chunked_prefill_equals_whole)
{
    make_prompts(2, 10, 3);
    prompt_len[0] = 300;
    for (int j = 0; j < 300; j++)
        prompts[0][j] = 1 + (j * 7) % (VOCAB - 1);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(1, 30, ref);
    rig_t r;
    rig_open(&r, 256, 7, 4, 1024); /* odd budget: chunk edges mid-block */
    ifd_engine_request_t q = req(0, 30);
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 10000);
    assert_same(ref, r.sink, 1);
    rig_close(&r);
    free(ref);
}
END_TEST

START_TEST(test_prefix_reuse)
{
    make_prompts(2, 10, 4);
    prompt_len[0] = prompt_len[1] = 64;
    for (int j = 0; j < 64; j++)
        prompts[1][j] = prompts[0][j] = 1 + (j * 5) % (VOCAB - 1);
    rig_t r;
    rig_open(&r, 64, 512, 8, 1024);
    ifd_engine_request_t q = req(0, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[0].cached_tokens, 0);
    q = req(1, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    ifd_engine_step_stats_t st;
    ifd_engine_step(r.eng, &st);
    /* (64 - 1) / 16 = 3 full blocks reused: only 16 tokens prefilled */
    ck_assert_int_eq(st.n_prefill_tokens, 16);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 48);
    ck_assert_int_eq(r.sink->n_out[0], r.sink->n_out[1]);
    ck_assert(memcmp(r.sink->out[0], r.sink->out[1], (size_t)r.sink->n_out[0] * 4) == 0);
    /* a different salt does not see the blocks */
    prompt_len[2] = 64;
    memcpy(prompts[2], prompts[0], 64 * 4);
    q = req(2, 10);
    q.ignore_eos = true;
    q.salt = 99;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[2].cached_tokens, 0);
    ifd_kvpool_stats_t ps;
    ifd_kvpool_stats(r.pool, &ps);
    ck_assert_int_gt(ps.cached, 0);
    rig_close(&r);
}
END_TEST

/* An engine whose pool has a disk tier in dir (engine.h, disk): a daemon
 * started on that directory. */
static ifd_kvdisk_t *rig_open_disk(rig_t *r, const char *dir, int n_blocks)
{
    memset(r, 0, sizeof *r);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = 1, kp.n_kv_heads = 1, kp.head_dim = 2, kp.dtype = IFD_KV_F32;
    kp.n_blocks = n_blocks, kp.n_workers = 2;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r->pool), 0);
    r->fake.pool = r->pool;
    r->sink = calloc(1, sizeof *r->sink);
    ifd_kvdisk_params_t dp = ifd_kvdisk_default_params();
    dp.dir = dir, dp.max_bytes = 1 << 24, dp.fingerprint = 77, dp.worker = 0;
    ifd_kvdisk_t *disk = NULL;
    ck_assert_int_eq(ifd_kvdisk_create(&dp, r->pool, &disk), 0);
    ifd_engine_model_t m = {&r->fake, VOCAB, 1024, fake_forward, 0,    0,    NULL, 1, 0,
                            NULL,     NULL,  0,    NULL,         NULL, NULL, NULL, NULL, NULL};
    ifd_engine_params_t ep = ifd_engine_default_params();
    static const int32_t eos[] = {STOP_ID};
    ep.eos_ids = eos, ep.n_eos_ids = 1, ep.max_batched_tokens = 32, ep.max_seqs = 8;
    ep.disk = disk;
    ifd_engine_callbacks_t cb = {r->sink, on_token, on_finish, on_plp};
    ck_assert_int_eq(ifd_engine_create(&r->eng, &ep, &m, r->pool, &cb), 0);
    return disk;
}

static void rig_close_disk(rig_t *r, ifd_kvdisk_t *disk)
{
    ifd_engine_destroy(r->eng);
    r->eng = NULL;
    ifd_kvdisk_destroy(disk); /* writes what is queued, gives the pins back */
    rig_check_pool(r);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(r->pool, &st), 0);
    ck_assert_int_eq(st.in_use, 0);
    ifd_kvpool_destroy(r->pool);
    free(r->sink);
}

/* The adapter's copies (engine.h, kv_download / kv_upload) over the fake's
 * pool, standing for a device pool: one layer's K then V block (no local
 * pool here: lblock is -1). */
static int fake_kv_download(void *ctx, int32_t block, int32_t lblock, void *dst)
{
    fake_t *f = ctx;
    ck_assert_int_eq(lblock, -1);
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(f->pool, &g);
    const uint64_t bb = ifd_kvpool_block_bytes(&g);
    memcpy(dst, (uint8_t *)ifd_kvpool_layer_k(f->pool, 0, 0) + block * bb, bb);
    memcpy((uint8_t *)dst + bb, (uint8_t *)ifd_kvpool_layer_v(f->pool, 0, 0) + block * bb, bb);
    return 0;
}

static int fake_kv_upload(void *ctx, int32_t block, int32_t lblock, const void *src)
{
    fake_t *f = ctx;
    ck_assert_int_eq(lblock, -1);
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(f->pool, &g);
    const uint64_t bb = ifd_kvpool_block_bytes(&g);
    memcpy((uint8_t *)ifd_kvpool_layer_k(f->pool, 0, 0) + block * bb, src, bb);
    memcpy((uint8_t *)ifd_kvpool_layer_v(f->pool, 0, 0) + block * bb, (const uint8_t *)src + bb,
           bb);
    return 0;
}

static int fake_kv_download_async(void *ctx, int32_t block, int32_t lblock, void *dst,
                                  uint64_t *ticket)
{
    fake_t *f = ctx;
    ck_assert_int_eq(lblock, -1);
    ck_assert_int_lt(f->n_pend, 64);
    f->pend[f->n_pend].block = block;
    f->pend[f->n_pend].dst = dst;
    f->pend[f->n_pend].src = NULL;
    f->pend[f->n_pend].queries = 0;
    f->pend[f->n_pend++].ticket = *ticket = f->next_ticket++;
    return 0;
}

static int fake_kv_copy_done(void *ctx, uint64_t ticket, bool wait)
{
    fake_t *f = ctx;
    ck_assert_uint_lt(ticket, f->next_ticket);
    if (ticket < f->done_upto)
        return ticket + 1 == f->failed_ticket ? IFD_ECUDA : 1;
    ck_assert_int_gt(f->n_pend, 0);
    int k = 0;
    while (k < f->n_pend && f->pend[k].ticket != ticket)
        k++;
    ck_assert_int_lt(k, f->n_pend);
    if (!wait && f->pend[k].queries++ == 0)
        return 0;
    for (int i = 0; i <= k; i++) /* in order: the copies before it land first */
        if (f->pend[i].src && f->pend[i].ticket + 1 == f->failed_ticket) {
            for (int off = 0; off < 16; off++) /* a failed copy: garbage */
                kv_at(f, f->pend[i].block, off)[1] = -7.0f;
        } else if (f->pend[i].src) {
            fake_kv_upload(f, f->pend[i].block, -1, f->pend[i].src);
        } else {
            fake_kv_download(f, f->pend[i].block, -1, f->pend[i].dst);
        }
    memmove(f->pend, f->pend + k + 1, (size_t)(f->n_pend - k - 1) * sizeof f->pend[0]);
    f->n_pend -= k + 1;
    f->done_upto = ticket + 1;
    return ticket + 1 == f->failed_ticket ? IFD_ECUDA : 1;
}

static int fake_kv_upload_async(void *ctx, int32_t block, int32_t lblock, const void *src,
                                uint64_t *ticket)
{
    fake_t *f = ctx;
    ck_assert_int_eq(lblock, -1);
    ck_assert_int_lt(f->n_pend, 64);
    f->pend[f->n_pend].block = block;
    f->pend[f->n_pend].dst = NULL;
    f->pend[f->n_pend].src = src;
    f->pend[f->n_pend].queries = 0;
    f->pend[f->n_pend++].ticket = *ticket = f->next_ticket++;
    if (++f->uploads_async == f->fail_upload)
        f->failed_ticket = *ticket + 1;
    return 0;
}

/* The forwards after it see what the copies up to ticket wrote: the fake's
 * forward runs on the host at once, so they are run now. */
static int fake_kv_copy_wait(void *ctx, uint64_t ticket)
{
    fake_t *f = ctx;
    if (ticket >= f->done_upto)
        fake_kv_copy_done(ctx, ticket, true); /* a failed copy is seen by its fence only */
    return 0;
}

static void *fake_host_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return malloc(bytes);
}

static void fake_host_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

/* Whether rig_open_tiers' model copies asynchronously (engine.h,
 * kv_download_async): the fake's deferred copies. */
static bool rig_async;

/* An engine whose model copies blocks (a "device" pool) with a host tier of
 * host_blocks blocks (0: none) and a staged disk tier in dir (NULL: none). */
static void rig_open_tiers(rig_t *r, int n_blocks, int host_blocks, const char *dir,
                           ifd_kvhost_t **host)
{
    memset(r, 0, sizeof *r);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = 1, kp.n_kv_heads = 1, kp.head_dim = 2, kp.dtype = IFD_KV_F32;
    kp.n_blocks = n_blocks, kp.n_workers = 2;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r->pool), 0);
    r->fake.pool = r->pool;
    r->sink = calloc(1, sizeof *r->sink);
    const size_t data = 2 * ifd_kvpool_block_bytes(&kp);
    *host = NULL;
    ifd_kvhost_params_t hp = {host_blocks * data, data, kp.block_size, r->pool};
    if (host_blocks)
        ck_assert_int_eq(ifd_kvhost_create(&hp, host), 0);
    if (dir) {
        ifd_kvdisk_params_t dp = ifd_kvdisk_default_params();
        dp.dir = dir, dp.max_bytes = 1 << 24, dp.fingerprint = 78, dp.staged = true;
        ck_assert_int_eq(ifd_kvdisk_create(&dp, r->pool, &r->disk), 0);
    }
    ifd_engine_model_t m = {
        &r->fake,         VOCAB,          1024, fake_forward, 0,    0,    NULL, 1, 0,
        fake_kv_download, fake_kv_upload, data, NULL,         NULL, NULL, NULL, NULL, NULL};
    if (rig_async) {
        m.kv_download_async = fake_kv_download_async;
        m.kv_copy_done = fake_kv_copy_done;
        m.kv_host_alloc = fake_host_alloc;
        m.kv_host_free = fake_host_free;
        m.kv_upload_async = fake_kv_upload_async;
        m.kv_copy_wait = fake_kv_copy_wait;
    }
    ifd_engine_params_t ep = ifd_engine_default_params();
    static const int32_t eos[] = {STOP_ID};
    ep.eos_ids = eos, ep.n_eos_ids = 1, ep.max_batched_tokens = 32, ep.max_seqs = 8;
    ep.host = *host, ep.disk = r->disk;
    ifd_engine_callbacks_t cb = {r->sink, on_token, on_finish, on_plp};
    ck_assert_int_eq(ifd_engine_create(&r->eng, &ep, &m, r->pool, &cb), 0);
}

static void serve_one(rig_t *r, int i, const sink_t *ref)
{
    ifd_engine_request_t q = req(i, 4);
    q.ignore_eos = true;
    ck_assert_int_eq(ifd_engine_add(r->eng, &q), 0);
    run_to_idle(r, 1000);
    ck_assert_int_eq(r->fake.bad, 0);
    ck_assert_int_eq(r->sink->n_out[i], ref->n_out[i]);
    ck_assert(memcmp(r->sink->out[i], ref->out[i], (size_t)ref->n_out[i] * 4) == 0);
}

/*
 * The host tier and the staged disk tier of a device pool (docs/kvpool.md,
 * "Host tier"), on the fake whose outputs read every context slot: in a pool
 * of 8 blocks, request 0's 6 prompt blocks are evicted but the first by
 * request 3 (100 other tokens); request 1 (the same 96 tokens first) gets
 * block 0 from the pool and 1..5 copied back from the host tier; with a host
 * tier of one block and a staged disk tier, a "restart" (a new pool on the
 * directory) reads all 6 from disk. Every output equals the solo run's.
 */
static void host_and_staged_disk_tiers(bool async)
{
    rig_async = async;
    make_prompts(4, 10, 8);
    for (int i = 0; i < 4; i++) {
        prompt_len[i] = 100;
        for (int j = 0; j < 100; j++)
            prompts[i][j] = i == 3 ? 1 + (j * 11 + 3) % (VOCAB - 1) : 1 + (j * 7) % (VOCAB - 1);
        if (i < 3)
            prompts[i][96] = 1 + i; /* the last tokens differ */
    }
    static sink_t ref;
    solo_outputs_eos(4, 4, true, &ref);
    rig_t r;
    ifd_kvhost_t *host;
    rig_open_tiers(&r, 8, 64, NULL, &host);
    serve_one(&r, 0, &ref);
    serve_one(&r, 3, &ref);
    serve_one(&r, 1, &ref);
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 96);
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(r.pool, ctr);
    /* asynchronous, request 0's blocks are pinned until their copies land,
     * and the pins given back later change the pool's eviction order:
     * request 3 evicts block 0 too, and all 6 come from the host tier */
    const uint64_t host_hits = async ? 6 : 5;
    ck_assert_uint_eq(ctr[IFD_KVTIER_HOST_HIT_BLOCKS], host_hits);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HOST_HIT_TOKENS], 16 * host_hits);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HOST_WRITES], 12); /* requests 0 and 3; 1's were copies */
    ck_assert_int_eq(r.fake.uploads_async, async ? 6 : 0); /* the hits' uploads, deferred */
    ifd_engine_destroy(r.eng);
    ifd_kvhost_destroy(host);
    r.eng = NULL;
    rig_close(&r);

    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/test_engine_staged.%d.XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    rig_open_tiers(&r, 16, 1, dir, &host);
    serve_one(&r, 0, &ref);
    ifd_kvpool_tier_get(r.pool, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HOST_EVICTED], 5); /* a tier of one block */
    ifd_engine_destroy(r.eng);
    ifd_kvhost_destroy(host);
    r.eng = NULL;
    rig_close(&r);                         /* writes the queued files */
    rig_open_tiers(&r, 16, 0, dir, &host); /* the restart */
    serve_one(&r, 2, &ref);
    ck_assert_int_eq(r.sink->usage[2].cached_tokens, 96);
    ifd_kvpool_tier_get(r.pool, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HIT_BLOCKS], 6);
    ck_assert_int_eq(r.fake.uploads_async, async ? 6 : 0);
    ck_assert_int_eq(r.fake.n_pend, 0); /* every copy landed before its engine went */
    rig_close(&r);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    rig_async = false;
}

START_TEST(test_host_and_staged_disk_tiers)
{
    host_and_staged_disk_tiers(false);
}
END_TEST

/* The same with the copies asynchronous and deferred (engine.h,
 * kv_download_async, kv_upload_async): a copy read before it landed, a
 * block written before its copy ran, or a forward before a hit's upload
 * ran (no kv_copy_wait), would change an output. */
START_TEST(test_host_and_staged_disk_tiers_async)
{
    host_and_staged_disk_tiers(true);
}
END_TEST

/* A tier hit whose upload fails (its fence reports an error; docs/kvpool.md
 * "Host tier", item 5): the request that took it ends with that error and
 * no token computed from the block's unknown bytes, the block leaves the
 * prefix cache, and the next request with the same prefix gets correct
 * outputs (the pool's blocks before it, the host tier's good copy after). */
START_TEST(test_failed_upload)
{
    rig_async = true;
    make_prompts(4, 10, 8);
    for (int i = 0; i < 4; i++) {
        prompt_len[i] = 100;
        for (int j = 0; j < 100; j++)
            prompts[i][j] = i == 3 ? 1 + (j * 11 + 3) % (VOCAB - 1) : 1 + (j * 7) % (VOCAB - 1);
        if (i < 3)
            prompts[i][96] = 1 + i;
    }
    static sink_t ref;
    solo_outputs_eos(4, 4, true, &ref);
    rig_t r;
    ifd_kvhost_t *host;
    rig_open_tiers(&r, 8, 64, NULL, &host);
    serve_one(&r, 0, &ref);
    serve_one(&r, 3, &ref); /* request 0's blocks evicted to the host tier */
    r.fake.fail_upload = 3; /* the third of request 1's 6 host-hit uploads */
    ifd_engine_request_t q = req(1, 4);
    q.ignore_eos = true;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.fake.uploads_async, 6);
    ck_assert_int_ne(r.fake.failed_ticket, 0);
    ck_assert_int_eq(r.sink->finished[1], 1);
    ck_assert_int_eq(r.sink->reason[1], IFD_FINISH_ERROR);
    ck_assert_int_eq(r.sink->usage[1].error, IFD_ECUDA);
    ck_assert_int_eq(r.sink->n_out[1], 0); /* nothing sampled from the garbage */
    ck_assert_int_gt(r.fake.bad, 0);       /* (the forward did read it) */
    r.fake.bad = 0;
    char err[256];
    ck_assert_msg(ifd_kvpool_check(r.pool, err, sizeof err) == 0, "%s", err);
    /* the same prefix again: the two blocks before the failed one from the
     * pool, the rest from the host tier, uploaded again, correctly */
    serve_one(&r, 2, &ref); /* the solo run's tokens, no bad slot read */
    ck_assert_int_eq(r.sink->usage[2].cached_tokens, 96);
    ck_assert_int_eq(r.fake.uploads_async, 6 + 4);
    ck_assert_msg(ifd_kvpool_check(r.pool, err, sizeof err) == 0, "%s", err);
    ifd_engine_destroy(r.eng);
    ifd_kvhost_destroy(host);
    r.eng = NULL;
    rig_close(&r);
    rig_async = false;
}
END_TEST

/* The prefix of a request served before a "restart" comes back from disk:
 * the same tokens, its blocks counted as cached; a damaged file costs only
 * the blocks from it on; a disk hit waits while another sequence runs. */
START_TEST(test_disk_tier_across_restarts)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/test_engine_disk.%d.XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    make_prompts(4, 10, 8);
    for (int i = 0; i < 4; i++) {
        prompt_len[i] = 100;
        for (int j = 0; j < 96; j++)
            prompts[i][j] = 1 + (j * 7) % (VOCAB - 1);
        prompts[i][96] = 1 + i; /* the last tokens differ */
    }
    prompt_len[3] = 40; /* the long-running request of the third part: other tokens */
    for (int j = 0; j < 40; j++)
        prompts[3][j] = 1 + (j * 11 + 3) % (VOCAB - 1);
    rig_t r;
    ifd_kvdisk_t *disk = rig_open_disk(&r, dir, 64);
    ifd_engine_request_t q = req(0, 60);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[0].cached_tokens, 0);
    rig_close_disk(&r, disk);
    static sink_t ref, got;
    solo_outputs_eos(4, 60, true, &ref); /* each prompt alone, no cache */

    /* restart: a new pool, the same directory */
    disk = rig_open_disk(&r, dir, 64);
    q = req(1, 60);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 96); /* 6 blocks of 16 from disk */
    ck_assert_int_eq(r.fake.bad, 0);
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(r.pool, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HIT_BLOCKS], 6);
    got = *r.sink;
    rig_close_disk(&r, disk);
    ck_assert_int_eq(got.n_out[1], ref.n_out[1]);
    ck_assert(memcmp(got.out[1], ref.out[1], (size_t)ref.n_out[1] * 4) == 0);

    /* damage block 3's file: blocks 0..2 from disk, the rest recomputed */
    ifd_kvhash_t h = {0, 0};
    for (int b = 0; b < 4; b++)
        h = ifd_kvpool_hash_block(&h, 0, prompts[2] + b * 16, 16);
    char name[64], path[160];
    ifd_kvdisk_file_name(77, &h, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(truncate(path, 100), 0);
    disk = rig_open_disk(&r, dir, 64);
    /* a long request runs first: the disk hit's admission waits on the read meanwhile */
    q = req(3, 60);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    ifd_engine_step(r.eng, NULL);
    q = req(2, 60);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.fake.bad, 0);
    got = *r.sink;
    ifd_kvpool_tier_get(r.pool, ctr);
    /* the read's deadline is what the fake model's measured (tiny) prefill would take:
     * the 3 good blocks, or fewer when cut (then counted as a slow read) */
    const int cached = r.sink->usage[2].cached_tokens;
    ck_assert_msg(
        cached == 48 || (cached % 16 == 0 && cached < 48 && ctr[IFD_KVTIER_SLOW_READS] == 1),
        "cached %d, slow reads %llu", cached, (unsigned long long)ctr[IFD_KVTIER_SLOW_READS]);
    if (cached == 48) /* the read went on to the damaged file */
        ck_assert_uint_eq(ctr[IFD_KVTIER_BAD_FILES], 1);
    rig_close_disk(&r, disk);
    ck_assert_int_eq(got.n_out[2], ref.n_out[2]);
    ck_assert(memcmp(got.out[2], ref.out[2], (size_t)ref.n_out[2] * 4) == 0);
    ck_assert_int_eq(got.n_out[3], ref.n_out[3]);
    ck_assert(memcmp(got.out[3], ref.out[3], (size_t)ref.n_out[3] * 4) == 0);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- images (engine.h, ifd_engine_image_t) ----------------------------------- */

/* Request i of prompts[] with image [start, start + len) of content `tag`:
 * its rows are (position, tag + index), its hash (tag, 0). */
static ifd_engine_image_t image_rows(float *rows, int start, int len, int tag)
{
    for (int j = 0; j < len; j++)
        rows[2 * j] = (float)(start + j), rows[2 * j + 1] = (float)(tag + j);
    return (ifd_engine_image_t){start, len, {(uint64_t)tag, 0}, rows};
}

/* What request i gives alone on a fresh engine (budget 24) with its image. */
static void image_solo(int i, const ifd_engine_image_t *im, sink_t *ref)
{
    rig_t r;
    rig_open(&r, 64, 24, 8, 1024);
    ifd_engine_request_t q = req(i, 10);
    q.ignore_eos = true;
    q.images = im;
    q.n_images = 1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    rig_check_pool(&r);
    ck_assert_int_eq(r.fake.image_tokens, im->len);
    ref->n_out[i] = r.sink->n_out[i];
    memcpy(ref->out[i], r.sink->out[i], sizeof ref->out[i]);
    rig_close(&r);
}

/* Chunks cut around images (budget 24, an image of 20 at 36..55); the same
 * image reuses cached KV (a hit of 48 ends inside it: the next chunk takes
 * the rest of it), another image with the same tokens does not (keys by
 * hash): only the text blocks before it are a hit, and its output is its
 * own (what it gives alone). */
START_TEST(test_images_chunks_and_prefix_keys)
{
    prompt_len[0] = prompt_len[1] = prompt_len[2] = 64;
    for (int j = 0; j < 64; j++)
        prompts[0][j] = prompts[1][j] = prompts[2][j] = 1 + (j * 7) % (VOCAB - 1);
    static float rows_a[40], rows_b[40], rows_a2[40];
    const ifd_engine_image_t a = image_rows(rows_a, 36, 20, 100);
    const ifd_engine_image_t a2 = image_rows(rows_a2, 36, 20, 100); /* the same image again */
    const ifd_engine_image_t b = image_rows(rows_b, 36, 20, 300);
    sink_t *ref = calloc(1, sizeof *ref);
    image_solo(0, &a, ref);
    image_solo(2, &b, ref);
    /* the images change the outputs (their KV holds their content) */
    ck_assert(memcmp(ref->out[0], ref->out[2], sizeof ref->out[0]) != 0);

    rig_t r;
    rig_open(&r, 64, 24, 8, 1024);
    ifd_engine_request_t q = req(0, 10);
    q.ignore_eos = true;
    q.images = &a;
    q.n_images = 1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    ifd_engine_step_stats_t st;
    ck_assert_int_eq(ifd_engine_step(r.eng, &st), 1);
    ck_assert_int_eq(st.n_prefill_tokens, 24);
    ck_assert_int_eq(ifd_engine_step(r.eng, &st), 1);
    ck_assert_int_eq(st.n_prefill_tokens, 12); /* cut before the image */
    ck_assert_int_eq(ifd_engine_step(r.eng, &st), 1);
    ck_assert_int_eq(st.n_prefill_tokens, 24); /* the image whole, then text */
    run_to_idle(&r, 1000);
    q = req(1, 10);
    q.ignore_eos = true;
    q.images = &a2;
    q.n_images = 1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 48);
    q = req(2, 10);
    q.ignore_eos = true;
    q.images = &b;
    q.n_images = 1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[2].cached_tokens, 32); /* the text blocks 0 and 1 */
    rig_check_pool(&r);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(r.sink->n_out[i], 10);
    ck_assert(memcmp(r.sink->out[0], ref->out[0], sizeof ref->out[0]) == 0);
    ck_assert(memcmp(r.sink->out[1], ref->out[0], sizeof ref->out[0]) == 0);
    ck_assert(memcmp(r.sink->out[2], ref->out[2], sizeof ref->out[2]) == 0);
    rig_check_pool(&r);
    free(ref);
    rig_close(&r);
}
END_TEST

/* The same with the local layers' own pool (window 20): their twins are
 * published and found under the image-aware keys too. */
START_TEST(test_images_local_pool_prefix_keys)
{
    prompt_len[0] = prompt_len[1] = prompt_len[2] = 64;
    for (int j = 0; j < 64; j++)
        prompts[0][j] = prompts[1][j] = prompts[2][j] = 1 + (j * 11) % (VOCAB - 1);
    static float rows_a[40], rows_b[40];
    const ifd_engine_image_t a = image_rows(rows_a, 36, 20, 500);
    const ifd_engine_image_t b = image_rows(rows_b, 36, 20, 700);
    sink_t *ref = calloc(1, sizeof *ref);
    image_solo(0, &a, ref);
    image_solo(2, &b, ref);
    rig_t r;
    rig_open_two(&r, 64, 64, 16, 20, 24, 8);
    const ifd_engine_image_t *im[3] = {&a, &a, &b};
    for (int i = 0; i < 3; i++) {
        ifd_engine_request_t q = req(i, 10);
        q.ignore_eos = true;
        q.images = im[i];
        q.n_images = 1;
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
        run_to_idle(&r, 1000);
    }
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 48);
    ck_assert_int_eq(r.sink->usage[2].cached_tokens, 32);
    rig_check_pool(&r);
    char err[512];
    ck_assert_msg(ifd_kvpool_check(r.fake.lpool, err, sizeof err) == 0, "%s", err);
    ck_assert(memcmp(r.sink->out[0], ref->out[0], sizeof ref->out[0]) == 0);
    ck_assert(memcmp(r.sink->out[1], ref->out[0], sizeof ref->out[0]) == 0);
    ck_assert(memcmp(r.sink->out[2], ref->out[2], sizeof ref->out[2]) == 0);
    free(ref);
    rig_close(&r);
}
END_TEST

/* r refused by ifd_engine_add, and ifd_engine_check's reason containing why. */
static void refused_for(ifd_engine_t *e, const ifd_engine_request_t *r, const char *why)
{
    char msg[256] = "";
    ck_assert_int_eq(ifd_engine_add(e, r), IFD_EINVAL);
    ck_assert_int_eq(ifd_engine_check(e, r, msg, sizeof msg), IFD_EINVAL);
    ck_assert_msg(strstr(msg, why), "'%s' lacks '%s'", msg, why);
}

/* Images are refused where engine.h says (IFD_EINVAL at add), and
 * ifd_engine_check names each rule. */
START_TEST(test_images_refused)
{
    make_prompts(1, 10, 5);
    prompt_len[0] = 40;
    for (int j = 0; j < 40; j++)
        prompts[0][j] = 1 + j % (VOCAB - 1);
    static float rows[2 * 25], rows2[2 * 2];
    rig_t r;
    rig_open(&r, 64, 24, 8, 1024);
    ifd_engine_request_t q = req(0, 4);
    ifd_engine_image_t im[2] = {image_rows(rows, 5, 25, 1), image_rows(rows2, 30, 2, 1)};
    q.images = im;
    q.n_images = 1; /* longer than max_batched_tokens: never schedulable */
    refused_for(r.eng, &q, "image 0 has 25 tokens, more than max_batched_tokens (24)");
    im[0].len = 10;
    im[1].start = 14; /* overlapping */
    q.n_images = 2;
    refused_for(r.eng, &q, "image 1 is not inside the prompt after the one before");
    im[1].start = 39; /* past the prompt */
    refused_for(r.eng, &q, "image 1 is not inside the prompt");
    im[1].start = 30;
    im[1].embd = NULL;
    refused_for(r.eng, &q, "image 1 has no rows");
    im[1].embd = rows2;
    q.prompt_logprobs = 1;
    refused_for(r.eng, &q, "prompt_logprobs with images");
    ck_assert_int_eq(ifd_engine_check(r.eng, &q, NULL, 0), IFD_EINVAL);
    q.prompt_logprobs = 0;
    ck_assert_int_eq(ifd_engine_check(r.eng, &q, NULL, 0), 0);
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    rig_check_pool(&r);
    ck_assert_int_eq(r.fake.image_tokens, 12);
    rig_close(&r);
}
END_TEST

/* A request whose prefix is being read from a slow disk (the test hook:
 * 40 ms before each file) does not hold up the requests behind it: the
 * next one is admitted in the same step and decodes while the read goes
 * on; the read is cut at its deadline and both give the tokens they give
 * alone. */
START_TEST(test_disk_read_does_not_block_admission)
{
#ifndef IFD_TEST_HOOKS
    printf("SKIPPED: test_disk_read_does_not_block_admission needs -DINFERD_TEST_HOOKS=ON\n");
#else
    char dir[80];
    snprintf(dir, sizeof dir, "/tmp/test_engine_disk_overlap.%d.XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    make_prompts(3, 10, 9);
    prompt_len[0] = prompt_len[1] = 330; /* 20 blocks of 16 shared, then 10 tokens each */
    for (int j = 0; j < 330; j++)
        prompts[1][j] = prompts[0][j] = 1 + (j * 13 + 5) % (VOCAB - 1);
    prompts[1][325] = prompts[0][325] % (VOCAB - 1) + 1;
    static sink_t ref;
    solo_outputs_eos(3, 30, true, &ref);
    rig_t r;
    ifd_kvdisk_t *disk = rig_open_disk(&r, dir, 64);
    ifd_engine_request_t q = req(0, 30);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    rig_close_disk(&r, disk);

    /* restart on a slow disk: 20 files take >= 800 ms, the deadline (no
     * prefill measured yet) is 0.5 ms x 320 tokens = 160 ms */
    setenv("INFERD_TEST_KVDISK_READ_MS", "40", 1);
    disk = rig_open_disk(&r, dir, 64);
    unsetenv("INFERD_TEST_KVDISK_READ_MS");
    q = req(1, 30);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    q = req(2, 30);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    ifd_engine_step_stats_t st;
    ck_assert_int_eq(ifd_engine_step(r.eng, &st), 1);
    /* request 1 passed over (its read in flight), request 2 prefilled and sampled */
    ck_assert_int_eq(st.n_prefill_tokens, prompt_len[2]);
    ck_assert_int_eq(r.sink->n_out[1], 0);
    ck_assert_int_eq(r.sink->n_out[2], 1);
    int steps = 0;
    while (r.sink->n_out[1] == 0) {
        ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
        ck_assert_int_lt(++steps, 100000);
    }
    ck_assert_int_gt(r.sink->n_out[2], 1); /* it decoded meanwhile */
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.fake.bad, 0);
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(r.pool, ctr);
    const int cached = r.sink->usage[1].cached_tokens;
    ck_assert_msg(cached % 16 == 0 && cached < 320, "cached %d", cached);
    ck_assert_uint_eq(ctr[IFD_KVTIER_SLOW_READS], 1);
    ck_assert_uint_eq(ctr[IFD_KVTIER_BAD_FILES], 0);
    static sink_t got;
    got = *r.sink;
    rig_close_disk(&r, disk);
    for (int i = 1; i < 3; i++) {
        ck_assert_int_eq(got.n_out[i], ref.n_out[i]);
        ck_assert(memcmp(got.out[i], ref.out[i], (size_t)ref.n_out[i] * 4) == 0);
    }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
#endif
}
END_TEST

START_TEST(test_tiny_pool_preempts_and_completes_all)
{
    make_prompts(12, 40, 5);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(12, 40, ref);
    rig_t r;
    rig_open(&r, 12, 64, 16, 1024); /* 12 blocks of 16 tokens for 12 requests */
    for (int i = 0; i < 12; i++) {
        ifd_engine_request_t q = req(i, 40);
        ifd_engine_add(r.eng, &q);
    }
    run_to_idle(&r, 100000);
    assert_same(ref, r.sink, 12);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_uint_gt(st.preemptions, 0);
    printf("tiny pool: %llu preemptions\n", (unsigned long long)st.preemptions);
    rig_close(&r);
    free(ref);
}
END_TEST

START_TEST(test_cancel_in_every_state)
{
    make_prompts(4, 10, 6);
    prompt_len[1] = 200; /* will be mid-prefill */
    rig_t r;
    rig_open(&r, 128, 32, 2, 1024); /* max_seqs 2: request 3 stays waiting */
    for (int i = 0; i < 4; i++) {
        ifd_engine_request_t q = req(i, 100);
        q.ignore_eos = true;
        ifd_engine_add(r.eng, &q);
    }
    for (int k = 0; k < 3; k++)
        ifd_engine_step(r.eng, NULL);
    ck_assert_int_gt(r.sink->n_out[0], 0);  /* 0 decoding */
    ck_assert_int_eq(r.sink->n_out[1], 0);  /* 1 prefilling */
    ck_assert_int_eq(ifd_engine_cancel(r.eng, 0), 0);
    ck_assert_int_eq(ifd_engine_cancel(r.eng, 1), 0);
    ck_assert_int_eq(ifd_engine_cancel(r.eng, 3), 0);
    ck_assert_int_eq(ifd_engine_cancel(r.eng, 77), IFD_ENOTFOUND);
    run_to_idle(&r, 1000);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(r.sink->finished[i], 1);
    ck_assert_int_eq(r.sink->reason[0], IFD_FINISH_CANCELLED);
    ck_assert_int_eq(r.sink->reason[1], IFD_FINISH_CANCELLED);
    ck_assert_int_eq(r.sink->reason[3], IFD_FINISH_CANCELLED);
    ck_assert_int_eq(r.sink->n_out[3], 0);
    ck_assert_int_eq(r.sink->reason[2], IFD_FINISH_LENGTH);
    ck_assert_int_eq(r.sink->n_out[2], 100);
    rig_close(&r);
}
END_TEST

/* Admission by priority (engine.h: higher runs first, FCFS among equals —
 * the worker flips the wire's "lower first" sign, worker/serve.c): with room
 * for one running sequence, requests queued together run one after the
 * other in priority order, whatever their arrival. */
START_TEST(test_priority_orders_admission)
{
    make_prompts(4, 10, 8);
    rig_t r;
    rig_open(&r, 64, 64, 1, 1024); /* max_seqs 1: one at a time */
    static const int32_t prio[4] = {0, 5, -3, 5};
    for (int i = 0; i < 4; i++) {
        ifd_engine_request_t q = req(i, 4);
        q.ignore_eos = true;
        q.priority = prio[i];
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    int order[4], n_done = 0, steps = 0;
    while (!ifd_engine_idle(r.eng)) {
        ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
        ck_assert_int_lt(++steps, 1000);
        int started = 0; /* tokens out and not finished: the one running */
        for (int i = 0; i < 4; i++) {
            if (r.sink->n_out[i] > 0 && !r.sink->finished[i])
                started++;
            bool seen = false;
            for (int j = 0; j < n_done; j++)
                seen |= order[j] == i;
            if (r.sink->finished[i] && !seen)
                order[n_done++] = i;
        }
        ck_assert_int_le(started, 1);
    }
    ck_assert_int_eq(n_done, 4);
    /* 1 and 3 (priority 5, 1 first by arrival), then 0 (0), then 2 (-3) */
    static const int want[4] = {1, 3, 0, 2};
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(order[i] == want[i], "finished %d-th: request %d, want %d", i, order[i],
                      want[i]);
        ck_assert_int_eq(r.sink->reason[want[i]], IFD_FINISH_LENGTH);
        ck_assert_int_eq(r.sink->n_out[want[i]], 4);
    }
    rig_close(&r);
}
END_TEST

START_TEST(test_finish_reasons_and_errors)
{
    make_prompts(4, 10, 7);
    rig_t r;
    rig_open(&r, 8, 64, 8, 40); /* context of 40 tokens, 8 blocks */
    ifd_engine_request_t q = req(0, 1000);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->reason[0], IFD_FINISH_LENGTH);
    ck_assert_int_eq(prompt_len[0] + r.sink->n_out[0], 40);
    /* max_tokens */
    q = req(1, 3);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->n_out[1], 3);
    /* a stop token ends with "stop" and is the last token, even with ignore_eos */
    q = req(2, 200);
    q.ignore_eos = true;
    int32_t stops[VOCAB];
    for (int v = 0; v < VOCAB; v++)
        stops[v] = v;
    q.stop_ids = stops;
    q.n_stop_ids = VOCAB;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->reason[2], IFD_FINISH_STOP);
    ck_assert_int_eq(r.sink->n_out[2], 1);
    /* invalid requests */
    q = req(3, 5);
    q.n_prompt = 0;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EINVAL);
    q = req(3, 5);
    q.n_prompt = 40;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EINVAL); /* no room to generate */
    q = req(3, 5);
    q.sampling.temperature = -1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EINVAL);
    q = req(3, 5);
    int32_t badtok = VOCAB;
    q.prompt = &badtok;
    q.n_prompt = 1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EINVAL);
    q = req(3, 5);
    ifd_engine_add(r.eng, &q);
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EEXIST);
    run_to_idle(&r, 1000);
    rig_close(&r);
}
END_TEST

START_TEST(test_min_tokens)
{
    /* every token but the last is a stop id: min_tokens forces that one until it is
     * reached, then the first stop ends the sequence; EOS (STOP_ID) likewise */
    make_prompts(3, 10, 11);
    rig_t r;
    rig_open(&r, 64, 64, 8, 200);
    int32_t stops[VOCAB - 1];
    for (int v = 0; v < VOCAB - 1; v++)
        stops[v] = v;
    ifd_engine_request_t q = req(0, 100);
    q.stop_ids = stops;
    q.n_stop_ids = VOCAB - 1;
    q.min_tokens = 6;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    /* without min_tokens the same request stops at once */
    q = req(1, 100);
    q.stop_ids = stops;
    q.n_stop_ids = VOCAB - 1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    /* resumed with 4 tokens generated: only 2 more are forced */
    int32_t gen[4] = {VOCAB - 1, VOCAB - 1, VOCAB - 1, VOCAB - 1};
    q = req(2, 100);
    q.stop_ids = stops;
    q.n_stop_ids = VOCAB - 1;
    q.generated = gen;
    q.n_generated = 4;
    q.min_tokens = 6;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    ck_assert_int_ge(r.sink->n_out[0], 7);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(r.sink->out[0][i], VOCAB - 1);
    ck_assert_int_eq(r.sink->reason[0], IFD_FINISH_STOP);
    ck_assert_int_lt(r.sink->out[0][r.sink->n_out[0] - 1], VOCAB - 1);
    ck_assert_int_eq(r.sink->n_out[1], 1);
    ck_assert_int_ge(r.sink->n_out[2], 3);
    ck_assert_int_eq(r.sink->out[2][0], VOCAB - 1);
    ck_assert_int_eq(r.sink->out[2][1], VOCAB - 1);
    rig_close(&r);
}
END_TEST

/* allowed_token_ids: every sampled id (temperature 1, a seed per request)
 * is in the set; with min_tokens, a set of only stop ids still ends the
 * sequence (as a grammar would); an id past the vocabulary is refused. */
START_TEST(test_allowed_ids)
{
    make_prompts(3, 10, 12);
    rig_t r;
    rig_open(&r, 64, 64, 8, 200);
    static const int32_t allowed[] = {7, 40, 63};
    for (int i = 0; i < 2; i++) {
        ifd_engine_request_t q = req(i, 30);
        q.sampling.temperature = 1.0f;
        q.sampling.seed = 99 + (uint64_t)i;
        q.ignore_eos = true;
        q.allowed_ids = allowed;
        q.n_allowed_ids = 3;
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    int32_t stop = 7;
    ifd_engine_request_t q = req(2, 30);
    q.allowed_ids = &stop;
    q.n_allowed_ids = 1;
    q.stop_ids = &stop;
    q.n_stop_ids = 1;
    q.min_tokens = 5;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    run_to_idle(&r, 1000);
    bool seen[VOCAB] = {false};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(r.sink->n_out[i], 30);
        for (int k = 0; k < 30; k++) {
            int32_t t = r.sink->out[i][k];
            ck_assert_msg(t == 7 || t == 40 || t == 63, "request %d token %d: %d", i, k, t);
            seen[t] = true;
        }
    }
    ck_assert(seen[7] + seen[40] + seen[63] >= 2); /* drawn, not one constant */
    ck_assert_int_eq(r.sink->n_out[2], 1);
    ck_assert_int_eq(r.sink->out[2][0], 7);
    ck_assert_int_eq(r.sink->reason[2], IFD_FINISH_STOP);
    int32_t past = VOCAB;
    q = req(3, 5);
    q.prompt = prompts[0];
    q.n_prompt = prompt_len[0];
    q.allowed_ids = &past;
    q.n_allowed_ids = 1;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EINVAL);
    rig_close(&r);
}
END_TEST

START_TEST(test_request_larger_than_pool_errors)
{
    make_prompts(1, 10, 8);
    prompt_len[0] = 100;
    rig_t r;
    rig_open(&r, 4, 64, 8, 1024); /* 64 tokens of KV in all */
    ifd_engine_request_t q = req(0, 5);
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 100);
    ck_assert_int_eq(r.sink->reason[0], IFD_FINISH_ERROR);
    rig_close(&r);
}
END_TEST

START_TEST(test_no_cache_mode_same_tokens)
{
    make_prompts(3, 50, 9);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(3, 20, ref);
    rig_t r;
    rig_open(&r, 128, 32, 8, 1024);
    for (int i = 0; i < 3; i++) {
        ifd_engine_request_t q = req(i, 20);
        q.use_cache = false;
        ifd_engine_add(r.eng, &q);
    }
    run_to_idle(&r, 10000);
    assert_same(ref, r.sink, 3);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_uint_eq(st.cached_prompt_tokens, 0);
    rig_close(&r);
    free(ref);
}
END_TEST

/* Sliding-window stats: with block size 4 and a window of 6, a sequence
 * whose next query is at position q no longer reads blocks b < (q - 5) / 4
 * in its local layers; a block shared through the prefix cache counts only
 * when it is dead for every running holder. */
START_TEST(test_window_dead_blocks)
{
    rig_t r;
    memset(&r, 0, sizeof r);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = 1;
    kp.n_kv_heads = 1;
    kp.head_dim = 2;
    kp.dtype = IFD_KV_F32;
    kp.block_size = 4;
    kp.n_blocks = 64;
    kp.n_workers = 2;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r.pool), 0);
    r.fake.pool = r.pool;
    r.sink = calloc(1, sizeof *r.sink);
    ifd_engine_model_t m = {&r.fake, VOCAB, 1024, fake_forward, 3,    6,    NULL, 4, 0,
                            NULL,    NULL,  0,    NULL,         NULL, NULL, NULL, NULL, NULL};
    ifd_engine_params_t ep = ifd_engine_default_params();
    ifd_engine_callbacks_t cb = {r.sink, on_token, on_finish, NULL};
    ck_assert_int_eq(ifd_engine_create(&r.eng, &ep, &m, r.pool, &cb), 0);
    const uint64_t per_block = 3 * 2 * ifd_kvpool_block_bytes(&kp); /* 3 layers, K and V */

    prompt_len[0] = 21;
    prompt_len[1] = 17; /* A's first 17 tokens: hits A's first 4 blocks */
    for (int j = 0; j < 21; j++)
        prompts[0][j] = prompts[1][j] = 1 + j % (VOCAB - 1);
    ifd_engine_request_t a = req(0, 50), b = req(1, 50);
    a.ignore_eos = b.ignore_eos = true;
    ck_assert_int_eq(ifd_engine_add(r.eng, &a), 0);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.window_dead_blocks, 0); /* nothing held yet */

    ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1); /* prefill: next query at 21 */
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.blocks_held, 6);
    ck_assert_int_eq(st.window_dead_blocks, 4); /* positions 0..15; 16..21 are in the window */
    ck_assert_uint_eq(st.window_dead_bytes, 4 * per_block);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1); /* next query at 24: still 4 */
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.window_dead_blocks, 4);
    ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1); /* at 25: block 4 (16..19) is out */
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.window_dead_blocks, 5);

    /* B shares blocks 0..3 and queries at 17 next: its window needs block 3 */
    ck_assert_int_eq(ifd_engine_add(r.eng, &b), 0);
    ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 2);
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.window_dead_blocks, 4); /* 0, 1, 2 (both) and 4 (A's own) */
    ck_assert_uint_eq(st.window_dead_bytes, 4 * per_block);

    ifd_engine_cancel(r.eng, 0);
    ifd_engine_cancel(r.eng, 1);
    run_to_idle(&r, 100);
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.window_dead_blocks, 0);
    ck_assert_int_eq(r.fake.bad, 0);
    rig_close(&r);
}
END_TEST

/* A model without local layers never reports any. */
START_TEST(test_window_dead_blocks_none_without_window)
{
    rig_t r;
    rig_open(&r, 64, 512, 8, 1024);
    prompt_len[0] = 300;
    for (int j = 0; j < 300; j++)
        prompts[0][j] = 1 + j % (VOCAB - 1);
    ifd_engine_request_t a = req(0, 4);
    a.ignore_eos = true;
    ck_assert_int_eq(ifd_engine_add(r.eng, &a), 0);
    ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_gt(st.blocks_held, 0);
    ck_assert_int_eq(st.window_dead_blocks, 0);
    ck_assert_uint_eq(st.window_dead_bytes, 0);
    run_to_idle(&r, 100);
    rig_close(&r);
}
END_TEST

START_TEST(test_resume_with_generated_tokens)
{
    make_prompts(1, 30, 10);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(1, 20, ref);
    ck_assert_int_ge(ref->n_out[0], 6);
    rig_t r;
    rig_open(&r, 64, 64, 8, 1024);
    ifd_engine_request_t q = req(0, 20);
    q.generated = ref->out[0];
    q.n_generated = 5;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->n_out[0], ref->n_out[0] - 5);
    ck_assert(memcmp(r.sink->out[0], ref->out[0] + 5, (size_t)r.sink->n_out[0] * 4) == 0);
    ck_assert_int_eq(r.sink->usage[0].completion_tokens, ref->n_out[0]);
    rig_close(&r);
    free(ref);
}
END_TEST

/* Two pools, many requests batched (chunked prefill, decodes, prefix hits
 * between equal prompts): the same tokens as alone in one pool, every
 * window read right, and the local pool holds only the windows. */
START_TEST(test_local_pool_batched_equals_solo)
{
    make_prompts(24, 120, 11);
    for (int j = 0; j < 60; j++) /* 3 and 4 share a prefix: hits in both pools */
        prompts[4][j] = prompts[3][j];
    if (prompt_len[3] < 70)
        prompt_len[3] = 70;
    prompt_len[4] = 90;
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(24, 24, ref);
    rig_t r;
    rig_open_two(&r, 512, 128, 4, 6, 64, 64);
    for (int i = 0; i < 24; i++) {
        ifd_engine_request_t q = req(i, 24);
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    int64_t max_local = 0, max_global = 0;
    while (!ifd_engine_idle(r.eng)) {
        ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
        ifd_engine_stats_t st;
        ifd_engine_stats(r.eng, &st);
        max_local = st.local_blocks_held > max_local ? st.local_blocks_held : max_local;
        max_global = st.blocks_held > max_global ? st.blocks_held : max_global;
        ck_assert_int_eq(st.window_dead_blocks, 0);
    }
    assert_same(ref, r.sink, 24);
    ck_assert_int_eq(r.fake.bad, 0);
    printf("local pool: at most %lld local blocks held, %lld global\n", (long long)max_local,
           (long long)max_global);
    ck_assert_int_lt(max_local * 2, max_global);
    rig_close(&r);
    free(ref);
}
END_TEST

/* Local twins leave as the window moves: block size 4, window 6, a query
 * at q reads blocks from (q - 5) / 4 on. */
START_TEST(test_local_blocks_freed_as_sequences_advance)
{
    rig_t r;
    rig_open_two(&r, 64, 64, 4, 6, 256, 8);
    prompt_len[0] = 21;
    for (int j = 0; j < 21; j++)
        prompts[0][j] = 1 + j % (VOCAB - 1);
    ifd_engine_request_t a = req(0, 50);
    a.ignore_eos = true;
    ck_assert_int_eq(ifd_engine_add(r.eng, &a), 0);
    ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1); /* prefill: next query at 21 */
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.blocks_held, 6);
    ck_assert_int_eq(st.local_blocks_held, 2); /* blocks 4 and 5 (16..23) */
    ck_assert_int_eq(st.local_released_blocks, 4);
    ifd_kvpool_params_t kp;
    ifd_kvpool_geometry(r.fake.lpool, &kp);
    ck_assert_uint_eq(st.local_released_bytes, 4 * 2 * ifd_kvpool_block_bytes(&kp));
    ck_assert_int_eq(st.window_dead_blocks, 0);
    ifd_kvpool_stats_t ps;
    ifd_kvpool_stats(r.fake.lpool, &ps);
    ck_assert_int_eq(ps.in_use, 2);
    ck_assert_int_eq(ps.cached, 4); /* published: they may serve a prefix hit */
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1); /* next query at 25 */
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.blocks_held, 7);
    ck_assert_int_eq(st.local_blocks_held, 2); /* 5 and 6 */
    ck_assert_int_eq(st.local_released_blocks, 5);
    ck_assert_int_eq(r.fake.bad, 0);
    ifd_engine_cancel(r.eng, 0);
    run_to_idle(&r, 100);
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.local_blocks_held, 0);
    ck_assert_int_eq(st.local_released_blocks, 0);
    rig_close(&r);
}
END_TEST

/* A prefix hit needs the window before its first recomputed token in the
 * local pool: served while the twins are cached, cut to nothing once they
 * are evicted — and the tokens never change. */
START_TEST(test_local_prefix_hit_truncated_without_window)
{
    make_prompts(3, 10, 12);
    prompt_len[0] = prompt_len[1] = prompt_len[2] = 40;
    for (int j = 0; j < 40; j++)
        prompts[2][j] = prompts[1][j] = prompts[0][j] = 1 + (j * 7) % (VOCAB - 1);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(1, 10, ref);
    rig_t r;
    rig_open_two(&r, 64, 16, 4, 6, 256, 8);
    ifd_engine_request_t q = req(0, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[0].cached_tokens, 0);
    /* both pools cache the chain: (40 - 1) / 4 = 9 blocks reused */
    q = req(1, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    ifd_engine_step_stats_t sst;
    ifd_engine_step(r.eng, &sst);
    ck_assert_int_eq(sst.n_prefill_tokens, 4);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.local_blocks_held, 2); /* the hit kept only its window's twins */
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 36);
    /* evict the local twins (another worker takes the whole local pool):
     * the global blocks are all still cached, yet no hit is usable */
    ifd_kvpool_stats_t ps;
    ifd_kvpool_stats(r.fake.lpool, &ps);
    ck_assert_int_gt(ps.cached, 0);
    ck_assert_int_eq(ps.in_use, 0);
    int32_t grab[16];
    const int n_grab = (int)ps.total;
    ck_assert_int_eq(ifd_kvpool_alloc(r.fake.lpool, 1, 0, n_grab, grab), 0);
    ck_assert_int_eq(ifd_kvpool_free(r.fake.lpool, 1, grab, n_grab), 0);
    q = req(2, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    ifd_engine_step(r.eng, &sst);
    ck_assert_int_eq(sst.n_prefill_tokens, 40);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[2].cached_tokens, 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(r.sink->n_out[i], ref->n_out[0]);
        ck_assert(memcmp(r.sink->out[i], ref->out[0], (size_t)ref->n_out[0] * 4) == 0);
    }
    rig_close(&r);
    free(ref);
}
END_TEST

/* Leaves in the local pool's cache only the twins of the blocks b < n of
 * toks' cached global chain whose bit is set in `keep`: those are looked up
 * by their keys and released again (the most recently used), then every
 * other cached block is evicted. Returns how many of them were cached. */
static int local_keep_only(rig_t *r, const int32_t *toks, int n, unsigned keep)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(r->pool, &g);
    int32_t gb[32], lb[32], grab[64];
    uint64_t keys[32];
    ck_assert_int_le(n, 32);
    ck_assert_int_eq(ifd_kvpool_probe(r->pool, 0, toks, n * g.block_size, gb, n), n);
    for (int b = 0; b < n; b++)
        if (keep >> b & 1)
            ck_assert_int_eq(ifd_kvpool_block_key(r->pool, gb[b], &keys[b]), 0);
        else
            keys[b] = UINT64_MAX; /* matches nothing */
    int found = ifd_kvpool_lookup_keyed(r->fake.lpool, 1, 0, toks, keys, n, lb);
    ck_assert_int_ge(found, 0);
    for (int b = 0; b < n; b++)
        if (lb[b] >= 0)
            ck_assert_int_eq(ifd_kvpool_unref(r->fake.lpool, 1, lb + b, 1), 0);
    ifd_kvpool_stats_t ps;
    ifd_kvpool_stats(r->fake.lpool, &ps);
    const int n_evict = (int)(ps.free + ps.cached) - found;
    ck_assert_int_le(n_evict, 64);
    ck_assert_int_eq(ifd_kvpool_alloc(r->fake.lpool, 1, 0, n_evict, grab), 0);
    ck_assert_int_eq(ifd_kvpool_free(r->fake.lpool, 1, grab, n_evict), 0);
    ifd_kvpool_stats(r->fake.lpool, &ps);
    ck_assert_int_eq(ps.cached, found);
    return found;
}

/* A hit of k blocks needs only the twins of its window, blocks
 * (k * bs - window + 1) / bs .. k - 1, found by their global twins' keys: it
 * survives the eviction of every twin before them (the chain's head, which
 * leaves first as the window moves), and where one of the window's twins
 * is gone the hit ends below it, at the longest prefix whose own window is
 * there. The tokens are those of recomputing everything. Block size 4,
 * window 6, a 40-token prompt: a hit of up to (40 - 1) / 4 = 9 blocks. */
START_TEST(test_local_prefix_hit_needs_only_its_window)
{
    prompt_len[0] = 40;
    for (int j = 0; j < 40; j++)
        prompts[0][j] = 1 + (j * 11) % (VOCAB - 1);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(1, 10, ref);
    prompt_len[1] = 40;
    memcpy(prompts[1], prompts[0], 40 * sizeof(int32_t));
    /* cases: the twins of blocks 0..9 kept cached, and the hit they allow */
    static const struct {
        unsigned keep;
        int hit;
    } cases[] = {
        {0x180, 9}, /* 7 and 8 only, the window of 9 blocks: the head 0..6 is gone */
        {0x2ff, 8}, /* all but 8: 8 blocks, whose window is 6 and 7 */
        {0x37f, 7}, /* all but 7: 9 and 8 blocks need it, 7 blocks need 5 and 6 */
        {0x2bf, 6}, /* all but 8 and 6: cut twice, to 8 blocks, then to 6 (4 and 5) */
        {0x300, 0}, /* 8 and 9 only: cut down to nothing, recomputed */
    };
    for (int c = 0; c < 5; c++) {
        rig_t r;
        rig_open_two(&r, 64, 16, 4, 6, 256, 8);
        ifd_engine_request_t q = req(0, 10);
        q.ignore_eos = true;
        ifd_engine_add(r.eng, &q);
        run_to_idle(&r, 1000);
        ck_assert_int_eq(local_keep_only(&r, prompts[0], 10, cases[c].keep),
                         __builtin_popcount(cases[c].keep));
        ifd_kvpool_stats_t before, after;
        ifd_kvpool_stats(r.fake.lpool, &before);
        q = req(1, 10);
        q.ignore_eos = true;
        ifd_engine_add(r.eng, &q);
        ifd_engine_step_stats_t sst;
        ifd_engine_step(r.eng, &sst);
        ck_assert_msg(sst.n_prefill_tokens == 40 - 4 * cases[c].hit, "case %d: %d prefilled", c,
                      sst.n_prefill_tokens);
        ifd_engine_stats_t st;
        ifd_engine_stats(r.eng, &st);
        ck_assert_int_eq(st.local_blocks_held, 2); /* the window of the query at 40 */
        ck_assert_int_eq(st.local_released_blocks, 8);
        ifd_kvpool_stats(r.fake.lpool, &after);
        ck_assert_int_eq(after.in_use, 2); /* no other twin kept */
        run_to_idle(&r, 1000);
        ck_assert_int_eq(r.sink->usage[1].cached_tokens, 4 * cases[c].hit);
        for (int i = 0; i < 2; i++) {
            ck_assert_int_eq(r.sink->n_out[i], ref->n_out[0]);
            ck_assert_msg(memcmp(r.sink->out[i], ref->out[0], (size_t)ref->n_out[0] * 4) == 0,
                          "case %d: request %d differs", c, i);
        }
        rig_close(&r);
    }
    free(ref);
}
END_TEST

/* A model with a local pool (window 6, block size 4) gets the disk tier:
 * every file holds the block's local twin too. After a restart the prefix
 * comes back from disk with the window's twins (the fake checks each
 * sampled row's window through the local table: a wrong or missing twin
 * counts as bad), only those twins stay held, and the tokens are solo's. */
START_TEST(test_disk_tier_local_pool)
{
    char dir[80];
    snprintf(dir, sizeof dir, "/tmp/test_engine_disk_local.%d.XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    prompt_len[0] = prompt_len[1] = 100;
    for (int j = 0; j < 100; j++)
        prompts[1][j] = prompts[0][j] = 1 + (j * 11) % (VOCAB - 1);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs_eos(1, 10, true, ref);
    rig_t r;
    rig_open_two_disk(&r, 64, 64, 4, 6, 256, 8, dir);
    ifd_engine_request_t q = req(0, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[0].cached_tokens, 0);
    rig_close(&r);

    /* restart: new pools, the same directory */
    rig_open_two_disk(&r, 64, 64, 4, 6, 256, 8, dir);
    q = req(1, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    ifd_engine_step_stats_t sst;
    ifd_engine_step(r.eng, &sst);
    /* (100 - 1) / 4 = 24 blocks from disk, alone: the engine waits on the read */
    ck_assert_int_eq(sst.n_prefill_tokens, 4);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.local_blocks_held, 2); /* the window of the query at 100 */
    ifd_kvpool_stats_t lst;
    ifd_kvpool_stats(r.fake.lpool, &lst);
    ck_assert_int_eq(lst.in_use, 2); /* the other twins read went back (cached) */
    ck_assert_int_eq(lst.cached, 23);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 96);
    ck_assert_int_eq(r.fake.bad, 0);
    ck_assert_int_eq(r.sink->n_out[1], ref->n_out[0]);
    ck_assert(memcmp(r.sink->out[1], ref->out[0], (size_t)ref->n_out[0] * 4) == 0);
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(r.pool, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HIT_BLOCKS], 24);
    /* the twins read are keyed entries: the same prompt again finds its
     * window in the local pool, no disk needed (a pool hit) */
    prompt_len[2] = 100;
    memcpy(prompts[2], prompts[0], 100 * sizeof(int32_t));
    q = req(2, 10);
    q.ignore_eos = true;
    ifd_engine_add(r.eng, &q);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[2].cached_tokens, 96);
    ck_assert(memcmp(r.sink->out[2], ref->out[0], (size_t)ref->n_out[0] * 4) == 0);
    ifd_kvpool_tier_get(r.pool, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HIT_BLOCKS], 24);
    /* a tier without the local pool: an engine with one refuses it */
    ifd_kvdisk_params_t dp = ifd_kvdisk_default_params();
    dp.dir = dir, dp.max_bytes = 1 << 24, dp.fingerprint = 78;
    ifd_kvdisk_t *plain = NULL;
    ck_assert_int_eq(ifd_kvdisk_create(&dp, r.pool, &plain), 0);
    ifd_engine_params_t ep = ifd_engine_default_params();
    ep.local_pool = r.fake.lpool, ep.disk = plain;
    ifd_engine_model_t m = {&r.fake, VOCAB, 1024, fake_forward, 1,    6,    NULL, 2, 0,
                            NULL,    NULL,  0,    NULL,         NULL, NULL, NULL, NULL, NULL};
    ifd_engine_t *e2 = NULL;
    ck_assert_int_eq(ifd_engine_create(&e2, &ep, &m, r.pool, NULL), IFD_EINVAL);
    ifd_kvdisk_destroy(plain);
    rig_close(&r);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    free(ref);
}
END_TEST

/* One pool whose every layer is local (window 6, block size 4): n_layers 1
 * releases the blocks before each sequence's window to the pool; n_layers
 * 2 (one of them global) keeps them. The fake reads and hashes only each
 * row's window, so both give the same tokens, and a block released too
 * early reads as block 0: a wrong position, counted as bad. */
static void rig_open_all_local(rig_t *r, int n_blocks, int n_layers, int budget, int max_seqs)
{
    memset(r, 0, sizeof *r);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = 1;
    kp.n_kv_heads = 1;
    kp.head_dim = 2;
    kp.dtype = IFD_KV_F32;
    kp.block_size = 4;
    kp.n_blocks = n_blocks;
    kp.n_workers = 2;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r->pool), 0);
    r->fake.pool = r->pool;
    r->fake.hash_window = 6;
    r->sink = calloc(1, sizeof *r->sink);
    ifd_engine_model_t m = {&r->fake, VOCAB, 1024, fake_forward, 1,    6,    NULL, n_layers, 0,
                            NULL,     NULL,  0,    NULL,         NULL, NULL, NULL, NULL, NULL};
    ifd_engine_params_t ep = ifd_engine_default_params();
    static const int32_t eos[] = {STOP_ID};
    ep.eos_ids = eos;
    ep.n_eos_ids = 1;
    ep.max_batched_tokens = budget;
    ep.max_seqs = max_seqs;
    ifd_engine_callbacks_t cb = {r->sink, on_token, on_finish, on_plp};
    ck_assert_int_eq(ifd_engine_create(&r->eng, &ep, &m, r->pool, &cb), 0);
}

/* The counts, step by step: a query at q reads blocks from (q - 5) / 4 on,
 * and the last published block stays held as the next one's parent. */
START_TEST(test_all_local_releases_blocks)
{
    rig_t r;
    rig_open_all_local(&r, 64, 1, 256, 8);
    ifd_kvpool_params_t kp;
    ifd_kvpool_geometry(r.pool, &kp);
    const uint64_t per_block = 2 * ifd_kvpool_block_bytes(&kp); /* 1 layer, K and V */
    prompt_len[0] = 21;
    prompt_len[1] = 17; /* A's first 17 tokens: hits A's first 4 blocks */
    for (int j = 0; j < 21; j++)
        prompts[0][j] = prompts[1][j] = 1 + j % (VOCAB - 1);
    ifd_engine_request_t a = req(0, 50), b = req(1, 50);
    a.ignore_eos = b.ignore_eos = true;
    ck_assert_int_eq(ifd_engine_add(r.eng, &a), 0);
    ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1); /* prefill: next query at 21 */
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.blocks_held, 2); /* 4 and 5 (16..23); 0..3 went back */
    ck_assert_int_eq(st.local_released_blocks, 4);
    ck_assert_uint_eq(st.local_released_bytes, 4 * per_block);
    ck_assert_int_eq(st.window_dead_blocks, 0);
    ck_assert_int_eq(st.local_blocks_held, 0);
    ifd_kvpool_stats_t ps;
    ifd_kvpool_stats(r.pool, &ps);
    ck_assert_int_eq(ps.in_use, 2);
    ck_assert_int_eq(ps.cached, 4); /* published: they may serve a prefix hit */
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 1); /* next query at 25 */
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.blocks_held, 2); /* 5 and 6 */
    ck_assert_int_eq(st.local_released_blocks, 5);

    /* B hits A's blocks 0..3 (cached), computes position 16 and queries at
     * 17 next: it keeps 3 and its own 4; 0..2 are released by both, 3 by A
     * only (still held: not counted) */
    ck_assert_int_eq(ifd_engine_add(r.eng, &b), 0);
    ck_assert_int_eq(ifd_engine_step(r.eng, NULL), 2);
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.blocks_held, 2 + 2);       /* A: 5, 6; B: 3, 4 */
    ck_assert_int_eq(st.local_released_blocks, 4); /* 0, 1, 2 (both) and A's 4 */
    ck_assert_uint_eq(st.local_released_bytes, 4 * per_block);
    ifd_kvpool_stats(r.pool, &ps);
    ck_assert_int_eq(ps.in_use, st.blocks_held);
    ck_assert_int_eq(r.fake.bad, 0);
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->usage[1].cached_tokens, 16);
    ifd_engine_stats(r.eng, &st);
    ck_assert_int_eq(st.blocks_held, 0);
    ck_assert_int_eq(st.local_released_blocks, 0);
    ck_assert_int_eq(r.fake.bad, 0);
    rig_close(&r);
}
END_TEST

/* Many requests batched (chunked prefill, decodes, prefix hits; with the
 * release in a pool of 36 blocks, where every released block is soon reused
 * and the cached ones evicted): the same tokens with the release as without
 * it, and fewer than half the blocks held. */
START_TEST(test_all_local_same_tokens_with_release)
{
    const int n = getenv("INFERD_TEST_SANITIZED") ? 8 : 20; /* fewer under ASan+UBSan */
    make_prompts(n, 90, 21);
    for (int j = 0; j < 50; j++) /* 3 and 4 share a prefix: hits */
        prompts[4][j] = prompts[3][j];
    if (prompt_len[3] < 60)
        prompt_len[3] = 60;
    prompt_len[4] = 80;
    sink_t *ref = NULL;
    int64_t max_held[2] = {0, 0};
    uint64_t released_seen = 0;
    for (int with = 0; with < 2; with++) {
        rig_t r;
        rig_open_all_local(&r, with ? 36 : 512, with ? 1 : 2, 32, 16);
        for (int i = 0; i < n; i++) {
            ifd_engine_request_t q = req(i, 30);
            ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
        }
        while (!ifd_engine_idle(r.eng)) {
            ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
            ifd_engine_stats_t st;
            ifd_engine_stats(r.eng, &st);
            if (st.blocks_held > max_held[with])
                max_held[with] = st.blocks_held;
            if (with)
                released_seen += (uint64_t)st.local_released_blocks;
        }
        ck_assert_int_eq(r.fake.bad, 0);
        if (!with) {
            ref = r.sink;
            r.sink = calloc(1, sizeof *r.sink);
        } else {
            assert_same(ref, r.sink, n);
        }
        rig_close(&r);
    }
    printf("all local: at most %lld blocks held with the release, %lld without\n",
           (long long)max_held[1], (long long)max_held[0]);
    ck_assert_uint_gt(released_seen, 0);
    ck_assert_int_lt(max_held[1] * 2, max_held[0]);
    free(ref);
}
END_TEST

/* A local pool too small for every window at once: preemption, and all
 * requests still finish with their tokens. */
START_TEST(test_local_pool_tiny_preempts_and_completes_all)
{
    make_prompts(12, 40, 13);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs(12, 40, ref);
    rig_t r;
    rig_open_two(&r, 256, 14, 4, 6, 64, 16);
    for (int i = 0; i < 12; i++) {
        ifd_engine_request_t q = req(i, 40);
        ifd_engine_add(r.eng, &q);
    }
    run_to_idle(&r, 100000);
    assert_same(ref, r.sink, 12);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_uint_gt(st.preemptions, 0);
    ck_assert_int_eq(r.fake.bad, 0);
    rig_close(&r);
    free(ref);
}
END_TEST

/* ---- fairness between clients (engine.h, "Fairness") ------------------------------------- */

/* Adds request i of client c (ignore_eos, priority prio). */
static void add_client(rig_t *r, int i, int max_tokens, uint32_t c, int32_t prio)
{
    ifd_engine_request_t q = req(i, max_tokens);
    q.ignore_eos = true;
    q.client = c;
    q.priority = prio;
    ck_assert_int_eq(ifd_engine_add(r->eng, &q), 0);
}

/* n prompts of up to 10 tokens (seed), what each makes alone in max_tokens
 * (ignore_eos; returned, for assert_same), and an engine of n_blocks blocks
 * and max_seqs in r. */
static sink_t *fair_open(rig_t *r, int n, int max_tokens, unsigned seed, int n_blocks,
                         int max_seqs)
{
    make_prompts(n, 10, seed);
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs_eos(n, max_tokens, true, ref);
    rig_open(r, n_blocks, 64, max_seqs, 1024);
    return ref;
}

static uint64_t preemptions(const rig_t *r)
{
    ifd_engine_stats_t st;
    ifd_engine_stats(r->eng, &st);
    return st.preemptions;
}

/* Steps once and counts, per client, the requests that got a token in it
 * (client[i] names request i's client; 0 < n <= MAX_REQ). */
static void step_counting(rig_t *r, const uint32_t *client, int n, int per_client[3])
{
    int before[MAX_REQ];
    memcpy(before, r->sink->n_out, sizeof before);
    ck_assert_int_ge(ifd_engine_step(r->eng, NULL), 0);
    per_client[0] = per_client[1] = per_client[2] = 0;
    for (int i = 0; i < n; i++)
        if (r->sink->n_out[i] > before[i])
            per_client[client[i]]++;
}

/* Client 1's flood: requests 0 .. n1 - 1 of max_tokens, then `steps` steps
 * (per: the last one's counts). */
static void flood(rig_t *r, int n1, int max_tokens, uint32_t *client, int steps, int per[3])
{
    for (int i = 0; i < n1; i++)
        add_client(r, i, max_tokens, client[i] = 1, 0);
    for (int k = 0; k < steps; k++)
        step_counting(r, client, n1, per);
}

/* One client's flood (12 requests, max_seqs 4) does not keep another's
 * requests waiting: the first two of client 2's three start at once, one
 * per step, each taking the place of client 1's most recently admitted
 * (its share: 4 over 2 clients); the third waits while client 2 runs its
 * share. Every output is the one the request gets alone. Before the share,
 * client 2 waited for the 12 to finish. */
START_TEST(test_fair_other_client_admitted_at_once)
{
    enum { N1 = 12, N = 15 };
    uint32_t client[N];
    rig_t r;
    sink_t *ref = fair_open(&r, N, 40, 21, 256, 4);
    int per[3];
    flood(&r, N1, 40, client, 3, per);
    ck_assert_int_eq(per[1], 4); /* client 1 fills max_seqs */
    for (int i = N1; i < N; i++)
        add_client(&r, i, 40, client[i] = 2, 0);
    step_counting(&r, client, N, per);
    ck_assert_msg(per[2] == 1 && per[1] == 3, "first step: client 1 %d, client 2 %d", per[1],
                  per[2]);
    step_counting(&r, client, N, per);
    ck_assert_msg(per[2] == 2 && per[1] == 2, "second step: client 1 %d, client 2 %d", per[1],
                  per[2]);
    ck_assert_int_gt(r.sink->n_out[N1], 0);
    ck_assert_int_gt(r.sink->n_out[N1 + 1], 0);
    for (int k = 0; k < 20; k++) { /* the shares hold while both have work */
        step_counting(&r, client, N, per);
        ck_assert_msg(per[1] == 2 && per[2] == 2, "step %d: client 1 %d, client 2 %d", k, per[1],
                      per[2]);
    }
    ck_assert_int_eq(r.sink->n_out[N1 + 2], 0); /* beyond client 2's share: waits */
    ck_assert_uint_eq(preemptions(&r), 2);      /* one per place given */
    run_to_idle(&r, 10000);
    assert_same(ref, r.sink, N);
    rig_close(&r);
    free(ref);
}
END_TEST

/* The share never preempts a sequence of a higher priority than the
 * request it would make room for: client 2's request of priority 0 waits
 * for one of client 1's four of priority 5 to finish. */
START_TEST(test_fair_share_respects_priority)
{
    make_prompts(5, 10, 22);
    rig_t r;
    rig_open(&r, 256, 64, 4, 1024);
    uint32_t client[5] = {1, 1, 1, 1, 2};
    for (int i = 0; i < 5; i++)
        add_client(&r, i, i < 4 ? 20 : 5, client[i], i < 4 ? 5 : 0);
    int per[3];
    while (!r.sink->finished[0]) {
        ck_assert_int_eq(r.sink->n_out[4], 0);
        step_counting(&r, client, 5, per);
    }
    run_to_idle(&r, 1000);
    ck_assert_int_eq(r.sink->n_out[4], 5);
    ck_assert_uint_eq(preemptions(&r), 0);
    rig_close(&r);
}
END_TEST

/* A pool too small for client 1's six requests preempts client 1's, not
 * client 2's request admitted after them (before the share it was the most
 * recently admitted, so the first evicted whenever the pool ran out): from
 * its first token to its last, client 2's request gets one in every step.
 * Its victims can be sequences scheduled earlier in the same step (they
 * leave the step); every output is still the one each request gets alone. */
START_TEST(test_fair_preemption_spares_the_smaller_client)
{
    enum { N1 = 6, N = 7 };
    uint32_t client[N];
    rig_t r; /* 16 blocks of 16 tokens: 3 of the 7 at full length */
    sink_t *ref = fair_open(&r, N, 60, 23, 16, 8);
    int per[3];
    flood(&r, N1, 60, client, 2, per);
    add_client(&r, N1, 60, client[N1] = 2, 0);
    int steps = 0;
    while (!r.sink->finished[N1]) {
        int had = r.sink->n_out[N1];
        step_counting(&r, client, N, per);
        ck_assert_msg(had == 0 || r.sink->n_out[N1] == had + 1,
                      "client 2's stream stalled at token %d (step %d)", had, steps);
        ck_assert_int_lt(++steps, 1000);
    }
    const uint64_t n_pre = preemptions(&r);
    ck_assert_uint_gt(n_pre, 0);
    run_to_idle(&r, 100000);
    assert_same(ref, r.sink, N);
    printf("fair preemption: %llu preemptions, client 2 done in %d steps\n",
           (unsigned long long)n_pre, steps);
    rig_close(&r);
    free(ref);
}
END_TEST

/* The victim can come before the sequence that needs its blocks, scheduled
 * already in this step: client 1's three requests of 15 prompt tokens run a
 * step before client 2's one of 16, so all four need their second block in
 * the same step, client 2's last, when a pool of 7 blocks has 3 left.
 * Client 2's request takes client 1's third (which leaves the step)
 * instead of preempting itself; it never stalls, and every output is the
 * one each request gets alone. */
START_TEST(test_fair_victim_leaves_the_step)
{
    enum { N = 4 };
    uint32_t client[N] = {1, 1, 1, 2};
    make_prompts(N, 10, 24);
    for (int i = 0; i < N; i++)
        prompt_len[i] = i < 3 ? 15 : 16;
    sink_t *ref = calloc(1, sizeof *ref);
    solo_outputs_eos(N, 20, true, ref);
    rig_t r;
    rig_open(&r, 7, 64, 8, 1024);
    int per[3], steps = 0;
    for (int i = 0; i < N; i++) {
        add_client(&r, i, 20, client[i], 0);
        if (i == 2)
            step_counting(&r, client, N, per);
    }
    while (!r.sink->finished[3]) {
        int had = r.sink->n_out[3];
        step_counting(&r, client, N, per);
        ck_assert_msg(r.sink->n_out[3] == had + 1, "client 2's stream stalled at token %d", had);
        ck_assert_int_lt(++steps, 100);
    }
    ck_assert_uint_gt(preemptions(&r), 0);
    run_to_idle(&r, 10000);
    assert_same(ref, r.sink, N);
    rig_close(&r);
    free(ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("scheduler");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_batched_equals_solo);
    tcase_add_test(tc, test_prompt_logprobs);
    tcase_add_test(tc, test_prompt_logprobs_not_from_prefix_cache);
    tcase_add_test(tc, test_prompt_logprobs_survive_preemption);
    tcase_add_test(tc, test_budget_filled_decodes_first_then_chunks);
    tcase_add_test(tc, test_prefill_cap_keeps_decodes_steady);
    tcase_add_test(tc, test_chunked_prefill_equals_whole);
    tcase_add_test(tc, test_prefix_reuse);
    tcase_add_test(tc, test_disk_tier_across_restarts);
    tcase_add_test(tc, test_host_and_staged_disk_tiers);
    tcase_add_test(tc, test_host_and_staged_disk_tiers_async);
    tcase_add_test(tc, test_failed_upload);
    tcase_add_test(tc, test_images_chunks_and_prefix_keys);
    tcase_add_test(tc, test_images_local_pool_prefix_keys);
    tcase_add_test(tc, test_images_refused);
    tcase_add_test(tc, test_disk_read_does_not_block_admission);
    tcase_add_test(tc, test_tiny_pool_preempts_and_completes_all);
    tcase_add_test(tc, test_cancel_in_every_state);
    tcase_add_test(tc, test_priority_orders_admission);
    tcase_add_test(tc, test_finish_reasons_and_errors);
    tcase_add_test(tc, test_min_tokens);
    tcase_add_test(tc, test_allowed_ids);
    tcase_add_test(tc, test_request_larger_than_pool_errors);
    tcase_add_test(tc, test_no_cache_mode_same_tokens);
    tcase_add_test(tc, test_resume_with_generated_tokens);
    tcase_add_test(tc, test_window_dead_blocks);
    tcase_add_test(tc, test_window_dead_blocks_none_without_window);
    tcase_add_test(tc, test_local_pool_batched_equals_solo);
    tcase_add_test(tc, test_local_blocks_freed_as_sequences_advance);
    tcase_add_test(tc, test_local_prefix_hit_truncated_without_window);
    tcase_add_test(tc, test_local_prefix_hit_needs_only_its_window);
    tcase_add_test(tc, test_disk_tier_local_pool);
    tcase_add_test(tc, test_local_pool_tiny_preempts_and_completes_all);
    tcase_add_test(tc, test_all_local_releases_blocks);
    tcase_add_test(tc, test_all_local_same_tokens_with_release);
    tcase_add_test(tc, test_fair_other_client_admitted_at_once);
    tcase_add_test(tc, test_fair_share_respects_priority);
    tcase_add_test(tc, test_fair_preemption_spares_the_smaller_client);
    tcase_add_test(tc, test_fair_victim_leaves_the_step);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
