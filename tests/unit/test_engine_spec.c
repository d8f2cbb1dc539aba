/*
 * test_engine_spec.c — speculative decoding in the engine (engine.h) on a
 * fake model that really uses the paged KV pool, as test_engine.c's does:
 * its forward writes (token, position) into each token's KV slot and
 * computes every logits row from the whole context read back through the
 * block table, so a proposal's KV left behind, a wrong computed length or
 * a block released too early changes the output. The model mostly follows
 * a fixed successor table (so the n-gram proposer's guesses often hold)
 * and leaves it where a hash of the whole context says (so they often
 * fail). Checked:
 *  - greedy and seeded sampling: every request's tokens, finish reason and
 *    usage equal plain decoding's, for batches of 1..16 mixed with new
 *    prompts arriving, stop ids, max_tokens, a tiny pool that preempts;
 *  - the acceptance counters and that both outcomes happen;
 *  - the sampling rule statistically: the first verified token's
 *    distribution against plain sampling's (two-sample chi-square over
 *    thousands of seeds), and the same test failing for the deliberately
 *    wrong rule (spec_wrong_accept_test);
 *  - a request's "off" wins over the engine's on, and bad settings are
 *    refused.
 */
#include "testutil.h"

#include "error.h"
#include "kvpool/kvpool.h"
#include "worker/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB   48
#define STOP_ID 0
#define MAX_REQ 4096
#define MAX_OUT 160

/* CYCLE: the successor table, left where a hash of the context says (1 in
 * 5); SUCC: the table always; HASH: the hash always (proposals fail);
 * FIXED: one context-free distribution. */
typedef enum { MODEL_CYCLE, MODEL_SUCC, MODEL_HASH, MODEL_FIXED } model_kind_t;

typedef struct {
    ifd_kvpool_t *pool;
    ifd_kvpool_t *lpool; /* a local-layer pool (window tokens), or NULL */
    int window;
    model_kind_t kind;
    float temp_spread; /* MODEL_CYCLE: the runner-up's logit (0: one-hot greedy rows) */
    int bad;
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

/* The successor the model mostly follows: a cycle through 1..VOCAB-1. */
static int32_t succ(int32_t t)
{
    return 1 + (t * 5 + 3) % (VOCAB - 1);
}

static int fake_forward(void *ctx, const ifd_batch_t *b, float *logits)
{
    fake_t *f = ctx;
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(f->pool, &g);
    const int bs = g.block_size;
    for (int i = 0; i < b->n_tok; i++) {
        float *kv = kv_at(f, (int32_t)(b->slot[i] / bs), (int)(b->slot[i] % bs));
        kv[0] = (float)b->tokens[i];
        kv[1] = (float)b->pos[i];
        if (f->lpool) { /* the local layer's twin */
            kv = kv_in(f->lpool, (int32_t)(b->local_slot[i] / bs), (int)(b->local_slot[i] % bs));
            kv[0] = (float)b->tokens[i];
            kv[1] = (float)b->pos[i];
        }
    }
    for (int r = 0; r < b->n_logits; r++) {
        const int i = b->logit_rows[r];
        const int32_t *table = b->block_tables + (int64_t)b->seq[i] * b->max_blocks;
        uint64_t h = 1469598103934665603ull;
        int32_t last = 0;
        for (int p = 0; p <= b->pos[i]; p++) {
            const float *kv = kv_at(f, table[p / bs], p % bs);
            if ((int)kv[1] != p)
                f->bad++;
            last = (int32_t)kv[0];
            if (f->lpool && p > b->pos[i] - f->window) { /* in the window: its twin holds it */
                const int32_t *lt = b->local_block_tables + (int64_t)b->seq[i] * b->max_blocks;
                const float *lkv = kv_in(f->lpool, lt[p / bs], p % bs);
                if ((int)lkv[1] != p || lkv[0] != kv[0])
                    f->bad++;
            }
            h = (h ^ (uint64_t)last) * 1099511628211ull;
            h ^= h >> 29;
        }
        float *row = logits + (size_t)r * VOCAB;
        if (f->kind == MODEL_FIXED) { /* the same distribution everywhere: p ~ 4, 3, 2, 1 */
            for (int v = 0; v < VOCAB; v++)
                row[v] = v >= 1 && v <= 4 ? logf((float)(5 - v)) : -INFINITY;
            continue;
        }
        const bool jump = f->kind == MODEL_HASH || (f->kind == MODEL_CYCLE && h % 5 == 0);
        const int32_t next = jump ? (int32_t)((h >> 8) % VOCAB) : succ(last);
        for (int v = 0; v < VOCAB; v++)
            row[v] = 0.0f;
        row[next] = 10.0f;
        if (f->temp_spread > 0.0f) /* sampling: a few likely tokens */
            for (int d = 1; d <= 3; d++)
                row[(next + d * 7) % VOCAB] = 10.0f - f->temp_spread * (float)d;
    }
    return 0;
}

typedef struct {
    int32_t out[MAX_REQ][MAX_OUT];
    int n_out[MAX_REQ];
    int finished[MAX_REQ];
    ifd_finish_reason_t reason[MAX_REQ];
    ifd_engine_usage_t usage[MAX_REQ];
} sink_t;

static void on_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    sink_t *s = ctx;
    ck_assert_uint_lt(id, MAX_REQ);
    ck_assert_int_eq(s->finished[id], 0);
    ck_assert_int_lt(s->n_out[id], MAX_OUT);
    s->out[id][s->n_out[id]++] = res->token;
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
} rig_t;

typedef struct {
    int n_blocks, budget, max_seqs;
    int window; /* > 0: a local-layer pool of n_blocks for a window of this many tokens */
    ifd_spec_params_t spec;
    bool wrong;
    model_kind_t kind;
    float spread;
    double knee; /* the engine's spec_knee (0: the default; < 0: no verification budget) */
} rig_opts_t;

static void rig_open(rig_t *r, const rig_opts_t *o)
{
    memset(r, 0, sizeof *r);
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = 1;
    kp.n_kv_heads = 1;
    kp.head_dim = 2;
    kp.dtype = IFD_KV_F32;
    kp.block_size = 4; /* proposals cross blocks often */
    kp.n_blocks = o->n_blocks;
    kp.n_workers = 2;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &r->pool), 0);
    r->fake.pool = r->pool;
    if (o->window > 0) {
        ck_assert_int_eq(ifd_kvpool_create(&kp, &r->fake.lpool), 0);
        r->fake.window = o->window;
    }
    r->fake.kind = o->kind;
    r->fake.temp_spread = o->spread;
    r->sink = calloc(1, sizeof *r->sink);
    ifd_engine_model_t m = {
        &r->fake, VOCAB, 1024, fake_forward, o->window > 0, o->window, NULL, 1 + (o->window > 0), 0,
        NULL,     NULL,  0,    NULL,         NULL,          NULL,      NULL, NULL, NULL};
    ifd_engine_params_t ep = ifd_engine_default_params();
    static const int32_t eos[] = {STOP_ID};
    ep.eos_ids = eos;
    ep.n_eos_ids = 1;
    ep.max_batched_tokens = o->budget;
    ep.max_seqs = o->max_seqs;
    ep.spec = o->spec;
    ep.spec_wrong_accept_test = o->wrong;
    ep.spec_knee = o->knee;
    ep.local_pool = r->fake.lpool;
    ifd_engine_callbacks_t cb = {r->sink, on_token, on_finish, NULL};
    ck_assert_int_eq(ifd_engine_create(&r->eng, &ep, &m, r->pool, &cb), 0);
}

static void rig_close(rig_t *r)
{
    ifd_engine_destroy(r->eng);
    char err[512];
    ck_assert_msg(ifd_kvpool_check(r->pool, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r->fake.bad, 0);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(r->pool, &st), 0);
    ck_assert_int_eq(st.in_use, 0); /* nothing leaked */
    ifd_kvpool_destroy(r->pool);
    if (r->fake.lpool) {
        ck_assert_msg(ifd_kvpool_check(r->fake.lpool, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(ifd_kvpool_stats(r->fake.lpool, &st), 0);
        ck_assert_int_eq(st.in_use, 0);
        ifd_kvpool_destroy(r->fake.lpool);
    }
    free(r->sink);
}

static int32_t prompts[64][200];
static int prompt_len[64];

/* Prompts that repeat stretches of the model's cycle (so proposals exist)
 * with random tokens between. */
static void make_prompts(int n, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < n; i++) {
        int len = 3 + rand() % 120;
        int32_t t = 1 + rand() % (VOCAB - 1);
        for (int j = 0; j < len; j++) {
            t = rand() % 4 == 0 ? 1 + rand() % (VOCAB - 1) : succ(t);
            prompts[i][j] = t;
        }
        prompt_len[i] = len;
    }
}

typedef struct {
    int n;    /* requests */
    int late; /* requests added after this many steps (mixed with decodes) */
    float temperature;
    int32_t stop_id; /* an extra stop id for odd requests; < 0 none */
} work_t;

static ifd_engine_request_t req(int i, const work_t *w)
{
    ifd_engine_request_t r;
    memset(&r, 0, sizeof r);
    r.id = (uint64_t)i;
    r.prompt = prompts[i % 64];
    r.n_prompt = prompt_len[i % 64];
    r.sampling = ifd_sampling_default_params();
    r.sampling.temperature = w->temperature;
    r.sampling.seed = 1000 + (uint64_t)i;
    r.max_tokens = 20 + (i * 37) % 120;
    r.ignore_eos = i % 3 != 0;
    r.use_cache = true;
    if (w->stop_id >= 0 && i % 2) {
        static int32_t stop;
        stop = w->stop_id;
        r.stop_ids = &stop;
        r.n_stop_ids = 1;
    }
    return r;
}

/* Runs the work in a fresh engine; the outputs stay in r's sink. */
static void run(rig_t *r, const rig_opts_t *o, const work_t *w, ifd_engine_stats_t *st)
{
    rig_open(r, o);
    const int early = w->n - w->late;
    for (int i = 0; i < early; i++) {
        ifd_engine_request_t q = req(i, w);
        ck_assert_int_eq(ifd_engine_add(r->eng, &q), 0);
    }
    int steps = 0;
    while (!ifd_engine_idle(r->eng) || steps < 3) {
        if (steps == 3)
            for (int i = early; i < w->n; i++) {
                ifd_engine_request_t q = req(i, w);
                ck_assert_int_eq(ifd_engine_add(r->eng, &q), 0);
            }
        ck_assert_int_ge(ifd_engine_step(r->eng, NULL), 0);
        ck_assert_int_lt(++steps, 100000);
    }
    ifd_engine_stats(r->eng, st);
    ck_assert_int_eq(st->blocks_held, 0);
}

static void assert_same(const sink_t *a, const sink_t *b, int n)
{
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(a->finished[i], 1);
        ck_assert_int_eq(b->finished[i], 1);
        ck_assert_int_eq(a->n_out[i], b->n_out[i]);
        ck_assert_msg(memcmp(a->out[i], b->out[i], (size_t)a->n_out[i] * 4) == 0,
                      "request %d differs", i);
        ck_assert_int_eq(a->reason[i], b->reason[i]);
        ck_assert_int_eq(a->usage[i].completion_tokens, b->usage[i].completion_tokens);
        ck_assert_int_eq(a->usage[i].prompt_tokens, b->usage[i].prompt_tokens);
    }
}

static const ifd_spec_params_t SPEC_ON = {IFD_SPEC_NGRAM, 5, 1, 3};

/* Plain and speculative runs of the same work: the same tokens; the
 * speculative one accepted some proposals and rejected others. Returns its
 * preemptions. */
static uint64_t check_equal(rig_opts_t o, const work_t *w)
{
    rig_t plain, spec;
    ifd_engine_stats_t sp, ss;
    o.spec = (ifd_spec_params_t){IFD_SPEC_OFF, 0, 0, 0};
    run(&plain, &o, w, &sp);
    o.spec = SPEC_ON;
    run(&spec, &o, w, &ss);
    assert_same(plain.sink, spec.sink, w->n);
    ck_assert_uint_eq(sp.spec_drafts, 0);
    ck_assert_uint_gt(ss.spec_drafts, 0);
    ck_assert_uint_gt(ss.spec_accepted_tokens, 0);
    ck_assert_uint_lt(ss.spec_accepted_tokens, ss.spec_draft_tokens); /* some rejected */
    ck_assert_uint_eq(ss.spec_accepted_per_pos[0] >= ss.spec_accepted_per_pos[1], 1);
    ck_assert_uint_lt(ss.steps, sp.steps); /* it paid */
    fprintf(stderr,
            "n %d T %.1f: drafts %llu, proposed %llu, accepted %llu, steps %llu vs %llu, "
            "preemptions %llu\n",
            w->n, (double)w->temperature, (unsigned long long)ss.spec_drafts,
            (unsigned long long)ss.spec_draft_tokens, (unsigned long long)ss.spec_accepted_tokens,
            (unsigned long long)ss.steps, (unsigned long long)sp.steps,
            (unsigned long long)ss.preemptions);
    rig_close(&plain);
    rig_close(&spec);
    return ss.preemptions;
}

START_TEST(test_greedy_equals_plain)
{
    make_prompts(64, 7);
    const int sizes[] = {1, 2, 5, 16};
    for (int k = 0; k < 4; k++) {
        rig_opts_t o = {.n_blocks = 2048, .budget = 64, .max_seqs = 16, .kind = MODEL_CYCLE};
        work_t w = {.n = sizes[k], .late = sizes[k] / 2, .temperature = 0.0f, .stop_id = 9};
        check_equal(o, &w);
    }
}
END_TEST

START_TEST(test_sampled_equals_plain)
{
    make_prompts(64, 11);
    const int sizes[] = {1, 4, 16};
    for (int k = 0; k < 3; k++) {
        rig_opts_t o = {
            .n_blocks = 2048, .budget = 64, .max_seqs = 16, .kind = MODEL_CYCLE, .spread = 1.5f};
        work_t w = {.n = sizes[k], .late = sizes[k] / 2, .temperature = 0.8f, .stop_id = 9};
        check_equal(o, &w);
    }
}
END_TEST

/* A pool too small for everyone: sequences are preempted mid-speculation
 * and recomputed; proposals that find no block are dropped. */
START_TEST(test_tiny_pool_equals_plain)
{
    make_prompts(64, 13);
    rig_opts_t o = {.n_blocks = 90, .budget = 48, .max_seqs = 16, .kind = MODEL_CYCLE};
    work_t w = {.n = 16, .late = 4, .temperature = 0.0f, .stop_id = -1};
    ck_assert_uint_gt(check_equal(o, &w), 0);
}
END_TEST

/* A small budget: proposals are cut to what the step has left. */
START_TEST(test_small_budget_equals_plain)
{
    make_prompts(64, 17);
    rig_opts_t o = {
        .n_blocks = 2048, .budget = 12, .max_seqs = 8, .kind = MODEL_CYCLE, .spread = 2.0f};
    work_t w = {.n = 8, .late = 3, .temperature = 1.0f, .stop_id = 9};
    check_equal(o, &w);
}
END_TEST

/* With a local-layer pool (Gemma 3's layout) and a window of 10 tokens
 * (prompts and outputs run far past it): twins released as windows move,
 * grown back for proposals and released with rejected positions. */
START_TEST(test_local_pool_equals_plain)
{
    make_prompts(64, 23);
    rig_opts_t o = {.n_blocks = 2048,
                    .budget = 64,
                    .max_seqs = 16,
                    .kind = MODEL_CYCLE,
                    .window = 10,
                    .spread = 1.0f};
    work_t w = {.n = 12, .late = 5, .temperature = 0.6f, .stop_id = 9};
    check_equal(o, &w);
    o.n_blocks = 120; /* and preempting */
    w.temperature = 0.0f;
    ck_assert_uint_gt(check_equal(o, &w), 0);
}
END_TEST

/* k follows acceptance (spec.h, ifd_spec_adapt): where proposals keep
 * failing the sequence soon stops proposing (a probe now and then), where
 * they hold it proposes k tokens a step; the tokens are plain decoding's. */
START_TEST(test_k_adapts)
{
    static int32_t prompt[40];
    int32_t t = 1;
    for (int j = 0; j < 40; j++)
        prompt[j] = t = succ(t);
    const model_kind_t kinds[2] = {MODEL_HASH, MODEL_SUCC};
    for (int m = 0; m < 2; m++) {
        ifd_engine_stats_t st[2];
        int32_t out[2][150];
        for (int on = 0; on < 2; on++) {
            rig_opts_t o = {.n_blocks = 256, .budget = 64, .max_seqs = 4, .kind = kinds[m]};
            o.spec = on ? (ifd_spec_params_t){IFD_SPEC_NGRAM, 4, 1, 3}
                        : (ifd_spec_params_t){IFD_SPEC_OFF, 0, 0, 0};
            rig_t r;
            rig_open(&r, &o);
            ifd_engine_request_t q;
            memset(&q, 0, sizeof q);
            q.prompt = prompt;
            q.n_prompt = 40;
            q.sampling = ifd_sampling_default_params();
            q.sampling.temperature = 0.0f;
            q.max_tokens = 150;
            q.ignore_eos = true;
            q.use_cache = true;
            ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
            while (!ifd_engine_idle(r.eng))
                ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
            ifd_engine_stats(r.eng, &st[on]);
            ck_assert_int_eq(r.sink->n_out[0], 150);
            memcpy(out[on], r.sink->out[0], sizeof out[on]);
            rig_close(&r);
        }
        ck_assert_int_eq(memcmp(out[0], out[1], sizeof out[0]), 0);
        fprintf(stderr, "%s: %llu verifications, %llu proposed, %llu accepted, %llu steps\n",
                m ? "successor" : "hash", (unsigned long long)st[1].spec_drafts,
                (unsigned long long)st[1].spec_draft_tokens,
                (unsigned long long)st[1].spec_accepted_tokens, (unsigned long long)st[1].steps);
        if (kinds[m] == MODEL_HASH) { /* 150 decodes, a handful of verifications */
            ck_assert_uint_lt(st[1].spec_drafts, 20);
            ck_assert_uint_gt(st[1].spec_drafts, 0);
        } else { /* every proposal holds: 4 a step, 5 tokens a step */
            ck_assert_uint_eq(st[1].spec_accepted_tokens, st[1].spec_draft_tokens);
            ck_assert_uint_ge(st[1].spec_draft_tokens, 4 * st[1].spec_drafts - 8);
            ck_assert_uint_lt(st[1].steps, 40);
        }
    }
}
END_TEST

/* Runs requests ids[0..n) (prompts[] i, greedy, max_tokens out) together in
 * one engine; the outputs stay in r's sink, the counters in *st. */
static void run_ids(rig_t *r, const rig_opts_t *o, const int *ids, int n, int out,
                    ifd_engine_stats_t *st)
{
    rig_open(r, o);
    for (int i = 0; i < n; i++) {
        ifd_engine_request_t q;
        memset(&q, 0, sizeof q);
        q.id = (uint64_t)i;
        q.prompt = prompts[ids[i]];
        q.n_prompt = prompt_len[ids[i]];
        q.sampling = ifd_sampling_default_params();
        q.sampling.temperature = 0.0f;
        q.max_tokens = out;
        q.ignore_eos = true;
        q.use_cache = true;
        ck_assert_int_eq(ifd_engine_add(r->eng, &q), 0);
    }
    while (!ifd_engine_idle(r->eng))
        ck_assert_int_ge(ifd_engine_step(r->eng, NULL), 0);
    ifd_engine_stats(r->eng, st);
}

/* Several sequences speculating in one step (no verification budget, room
 * for every proposal): each proposes, verifies and accepts exactly what it
 * does alone — rows, offsets, per-sequence histories and proposals do not
 * mix — so the step's counters are the sum of the requests' run alone,
 * position by position, and the tokens are each one's alone. Eight copies
 * of one prompt (the bench's --streams 8: identical histories) and eight
 * different prompts. */
START_TEST(test_batched_acceptance_equals_alone)
{
    make_prompts(64, 29);
    const int same[8] = {3, 3, 3, 3, 3, 3, 3, 3}, diff[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int *sets[2] = {same, diff};
    for (int k = 0; k < 2; k++) {
        rig_opts_t o = {.n_blocks = 2048,
                        .budget = 1024,
                        .max_seqs = 8,
                        .kind = MODEL_CYCLE,
                        .spec = {IFD_SPEC_NGRAM, 6, 1, 3},
                        .knee = -1};
        ifd_engine_stats_t all, one, sum;
        memset(&sum, 0, sizeof sum);
        rig_t r;
        run_ids(&r, &o, sets[k], 8, 96, &all);
        for (int i = 0; i < 8; i++) {
            rig_t a;
            run_ids(&a, &o, sets[k] + i, 1, 96, &one);
            ck_assert_int_eq(a.sink->n_out[0], 96);
            ck_assert_int_eq(r.sink->n_out[i], 96);
            ck_assert_msg(memcmp(a.sink->out[0], r.sink->out[i], 96 * 4) == 0,
                          "request %d differs batched", i);
            sum.spec_drafts += one.spec_drafts;
            sum.spec_draft_tokens += one.spec_draft_tokens;
            sum.spec_accepted_tokens += one.spec_accepted_tokens;
            for (int j = 0; j < IFD_SPEC_MAX_TOKENS; j++)
                sum.spec_accepted_per_pos[j] += one.spec_accepted_per_pos[j];
            rig_close(&a);
        }
        fprintf(stderr,
                "%s prompts: batched %llu verifications, %llu proposed, %llu accepted; "
                "alone %llu, %llu, %llu\n",
                k ? "different" : "identical", (unsigned long long)all.spec_drafts,
                (unsigned long long)all.spec_draft_tokens,
                (unsigned long long)all.spec_accepted_tokens, (unsigned long long)sum.spec_drafts,
                (unsigned long long)sum.spec_draft_tokens,
                (unsigned long long)sum.spec_accepted_tokens);
        ck_assert_uint_gt(sum.spec_accepted_tokens, 0);
        ck_assert_uint_eq(all.spec_drafts, sum.spec_drafts);
        ck_assert_uint_eq(all.spec_draft_tokens, sum.spec_draft_tokens);
        ck_assert_uint_eq(all.spec_accepted_tokens, sum.spec_accepted_tokens);
        ck_assert_int_eq(memcmp(all.spec_accepted_per_pos, sum.spec_accepted_per_pos,
                                sizeof sum.spec_accepted_per_pos),
                         0);
        ck_assert_uint_lt(all.steps, 96 + 2); /* they ran together */
        rig_close(&r);
    }
}
END_TEST

/* The verification budget (engine.h spec_knee) in the engine: 16 greedy
 * sequences decoding together (a step of 16 rows, past the knee) where
 * every proposal fails (MODEL_HASH) verify far fewer proposed tokens than
 * without the budget, and where every proposal holds (MODEL_SUCC) still
 * verify most of them; at batch 1 the budget leaves every proposal of the
 * holding model alone. The tokens are plain decoding's every way. */
START_TEST(test_budget_in_engine)
{
    static int32_t prompt[40];
    int32_t t = 1;
    for (int j = 0; j < 40; j++)
        prompt[j] = t = succ(t);
    for (int m = 0; m < 2; m++) {
        for (int n = 1; n <= 16; n += 15) {
            ifd_engine_stats_t st[3];
            int32_t out[3][16][64];
            for (int v = 0; v < 3; v++) { /* plain, budget off, the default budget */
                rig_opts_t o = {.n_blocks = 2048,
                                .budget = 512,
                                .max_seqs = 16,
                                .kind = m ? MODEL_SUCC : MODEL_HASH,
                                .knee = v == 1 ? -1 : 0};
                o.spec = v ? (ifd_spec_params_t){IFD_SPEC_NGRAM, 4, 1, 3}
                           : (ifd_spec_params_t){IFD_SPEC_OFF, 0, 0, 0};
                rig_t r;
                rig_open(&r, &o);
                for (int i = 0; i < n; i++) {
                    ifd_engine_request_t q;
                    memset(&q, 0, sizeof q);
                    q.id = (uint64_t)i;
                    q.prompt = prompt + i % 8; /* different histories */
                    q.n_prompt = 32;
                    q.sampling = ifd_sampling_default_params();
                    q.sampling.temperature = 0.0f;
                    q.max_tokens = 64;
                    q.ignore_eos = true;
                    q.use_cache = true;
                    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
                }
                while (!ifd_engine_idle(r.eng))
                    ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
                ifd_engine_stats(r.eng, &st[v]);
                for (int i = 0; i < n; i++) {
                    ck_assert_int_eq(r.sink->n_out[i], 64);
                    memcpy(out[v][i], r.sink->out[i], sizeof out[v][i]);
                }
                rig_close(&r);
            }
            ck_assert_int_eq(memcmp(out[0], out[1], (size_t)n * sizeof out[0][0]), 0);
            ck_assert_int_eq(memcmp(out[0], out[2], (size_t)n * sizeof out[0][0]), 0);
            fprintf(stderr,
                    "%s, %d sequences: budget off %llu proposed (%llu accepted), on %llu "
                    "(%llu accepted, %llu cut)\n",
                    m ? "successor" : "hash", n, (unsigned long long)st[1].spec_draft_tokens,
                    (unsigned long long)st[1].spec_accepted_tokens,
                    (unsigned long long)st[2].spec_draft_tokens,
                    (unsigned long long)st[2].spec_accepted_tokens,
                    (unsigned long long)st[2].spec_budget_cut);
            ck_assert_uint_eq(st[1].spec_budget_cut, 0);
            if (m == 0 && n == 16) { /* failing proposals in a full step: stand down at once */
                ck_assert_uint_gt(st[1].spec_draft_tokens, 0);
                ck_assert_uint_le(st[2].spec_draft_tokens * 2, st[1].spec_draft_tokens);
            } else if (m == 1 && n == 16) { /* holding ones: most still verified, and it pays */
                ck_assert_uint_ge(st[2].spec_accepted_tokens * 2, st[1].spec_accepted_tokens);
                ck_assert_uint_lt(st[2].steps, st[0].steps);
            } else if (m == 1) { /* batch 1: nothing cut where proposals hold */
                ck_assert_uint_eq(st[2].spec_draft_tokens, st[1].spec_draft_tokens);
            }
        }
    }
}
END_TEST

/* The first verified token (the second generated: the first comes from
 * the prefill, without a proposal) of n seeded requests whose prompt makes
 * every first token propose its successor; counts per token into c. */
static void first_verified(bool spec, bool wrong, uint64_t seed0, int n, long *c,
                           ifd_engine_stats_t *st)
{
    static int32_t prompt[16];
    for (int j = 0; j < 16; j++)
        prompt[j] = 1 + j % 4; /* 1..4 four times: every token 1..4 is followed by another */
    /* no verification budget: every proposal is verified, 64 at once */
    rig_opts_t o = {.n_blocks = 4096,
                    .budget = 256,
                    .max_seqs = 64,
                    .kind = MODEL_FIXED,
                    .wrong = wrong,
                    .knee = -1};
    o.spec = spec ? (ifd_spec_params_t){IFD_SPEC_NGRAM, 1, 1, 1}
                  : (ifd_spec_params_t){IFD_SPEC_OFF, 0, 0, 0};
    rig_t r;
    rig_open(&r, &o);
    for (int i = 0; i < n; i++) {
        ifd_engine_request_t q;
        memset(&q, 0, sizeof q);
        q.id = (uint64_t)i;
        q.prompt = prompt;
        q.n_prompt = 16;
        q.sampling = ifd_sampling_default_params();
        q.sampling.seed = seed0 + (uint64_t)i;
        q.max_tokens = 3; /* room for a 1-token proposal at the second token */
        q.ignore_eos = true;
        q.use_cache = true;
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    }
    while (!ifd_engine_idle(r.eng))
        ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
    ifd_engine_stats(r.eng, st);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(r.sink->n_out[i], 3);
        c[r.sink->out[i][1]]++;
    }
    rig_close(&r);
}

/* Two-sample chi-square (homogeneity) of counts a and b over VOCAB
 * categories; returns the statistic, *df its degrees of freedom. */
static double chi2_two(const long *a, const long *b, long na, long nb, int *df)
{
    double stat = 0;
    *df = -1;
    for (int v = 0; v < VOCAB; v++) {
        const double tot = (double)(a[v] + b[v]);
        if (tot == 0)
            continue;
        const double ea = tot * (double)na / (double)(na + nb), eb = tot - ea;
        stat += (a[v] - ea) * (a[v] - ea) / ea + (b[v] - eb) * (b[v] - eb) / eb;
        (*df)++;
    }
    return stat;
}

/* The 0.999 quantile of chi-square with df degrees of freedom
 * (Wilson-Hilferty), as test_sampler.c bounds its cases. */
static double chi2_q999(int df)
{
    const double z = 3.0902, k = df;
    const double t = 1.0 - 2.0 / (9.0 * k) + z * sqrt(2.0 / (9.0 * k));
    return k * t * t * t;
}

START_TEST(test_sampling_rule_chi_square)
{
    const int n = 4000; /* the wrong rule's shift: a noncentrality near 60 on 3 df */
    long *plain = calloc(VOCAB, sizeof *plain), *spec = calloc(VOCAB, sizeof *spec),
         *wrong = calloc(VOCAB, sizeof *wrong), *same = calloc(VOCAB, sizeof *same);
    ifd_engine_stats_t st;
    first_verified(false, false, 1u << 20, n, plain, &st); /* other seeds than the spec runs */
    first_verified(true, false, 0, n, spec, &st);
    ck_assert_uint_eq(st.spec_drafts, (uint64_t)n); /* every second token was a verification */
    first_verified(true, true, 0, n, wrong, &st);
    first_verified(false, false, 0, n, same, &st);
    int df;
    const double ok = chi2_two(spec, plain, n, n, &df), q = chi2_q999(df);
    fprintf(stderr, "chi-square spec vs plain: %.2f (df %d, 0.999 quantile %.2f)\n", ok, df, q);
    ck_assert_msg(ok < q, "speculative sampling's distribution differs: %.2f >= %.2f", ok, q);
    const double bad = chi2_two(wrong, plain, n, n, &df);
    fprintf(stderr, "chi-square wrong rule vs plain: %.2f (df %d, 0.999 quantile %.2f)\n", bad, df,
            chi2_q999(df));
    ck_assert_msg(bad >= chi2_q999(df), "the wrong rule went unnoticed: %.2f", bad);
    /* and per seed: the very tokens plain sampling drew with the same seeds */
    ck_assert_int_eq(memcmp(spec, same, VOCAB * sizeof *spec), 0);
    free(plain);
    free(spec);
    free(wrong);
    free(same);
}
END_TEST

START_TEST(test_request_off_and_bad_settings)
{
    make_prompts(64, 19);
    rig_opts_t o = {
        .n_blocks = 512, .budget = 64, .max_seqs = 8, .kind = MODEL_CYCLE, .spec = SPEC_ON};
    rig_t r;
    rig_open(&r, &o);
    work_t w = {.n = 1, .late = 0, .temperature = 0.0f, .stop_id = -1};
    ifd_engine_request_t q = req(0, &w);
    q.spec.method = IFD_SPEC_OFF;
    ck_assert_int_eq(ifd_engine_add(r.eng, &q), 0);
    while (!ifd_engine_idle(r.eng))
        ck_assert_int_ge(ifd_engine_step(r.eng, NULL), 0);
    ifd_engine_stats_t st;
    ifd_engine_stats(r.eng, &st);
    ck_assert_uint_eq(st.spec_drafts, 0);
    const ifd_spec_params_t bad[] = {{3, 0, 0, 0},
                                     {IFD_SPEC_NGRAM, IFD_SPEC_MAX_TOKENS + 1, 0, 0},
                                     {IFD_SPEC_NGRAM, -1, 0, 0},
                                     {IFD_SPEC_NGRAM, 2, 3, 2},
                                     {IFD_SPEC_NGRAM, 2, 0, IFD_NGRAM_MAX_N + 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        q.id = 10 + i;
        q.spec = bad[i];
        ck_assert_int_eq(ifd_engine_add(r.eng, &q), IFD_EINVAL);
    }
    rig_close(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine_spec");
    ifd_test_case(s, "spec", 120,
                  IFD_TESTS(test_greedy_equals_plain, test_sampled_equals_plain,
                            test_tiny_pool_equals_plain, test_small_budget_equals_plain,
                            test_local_pool_equals_plain, test_k_adapts,
                            test_batched_acceptance_equals_alone, test_budget_in_engine,
                            test_sampling_rule_chi_square, test_request_off_and_bad_settings));
    return ifd_test_run(s);
}
