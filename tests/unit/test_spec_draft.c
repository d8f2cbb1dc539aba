/*
 * test_spec_draft.c — the draft-model proposer (worker/spec_draft.h) on the
 * CPU with tiny random-weight Llamas (deploy/shapes/tiny-llama.json: no
 * model file needed, label unit):
 *  - a proposer that keeps its sequences' states (rollback to the common
 *    prefix, catch-up) proposes exactly what a fresh one proposes for the
 *    same tokens, over 75 batches of 1 to 8 random histories that grow,
 *    lose their tails (rejected proposals) or start afresh (a stale KV
 *    entry or a wrong rollback would change the proposals);
 *  - its proposal with the target as its own draft is the target's own
 *    greedy continuation (the engine's plain decoding of the same tokens);
 *  - through the engine: greedy and seeded tokens equal to plain decoding
 *    with the target as draft (every proposal accepted), another random
 *    model as draft (mostly rejected) and the target over q4_0 K/V, for
 *    1, 4 and 16 sequences at once;
 *  - a draft pool without room proposes nothing and holds nothing; every
 *    state released gives every block back; bad parameters are refused;
 *  - prefix reuse: a repeated prompt's state takes the published blocks and
 *    feeds only the tail it does not share (alone and beside a live state
 *    holding the same blocks), proposing what a fresh proposer proposes; a
 *    block holding an unverified proposal is never published; tokens that
 *    part inside a published block drop it; through the engine a repeated
 *    request's catch-up is the first run's less the hit, same tokens as
 *    plain decoding;
 *  - the draft's prompt prefill spread over the target's prefill steps
 *    (the engine's feed queries): long prompts in a small step budget,
 *    the draft's catch-up per call bounded by its share, plain decoding's
 *    tokens;
 *  - the draft's disk tier: after a "restart" (a new proposer over an
 *    empty pool, the same directory) a repeated request's catch-up is the
 *    first run's less the blocks read back, the same proposals and plain
 *    decoding's tokens; the files are found under the draft's fingerprint
 *    only — never under a target's over the same geometry and identity,
 *    nor another draft's.
 */
#include "testutil.h"

#include "error.h"
#include "kvpool/kvdisk.h"
#include "kvpool/kvparams.h"
#include "kvpool/kvpool.h"
#include "modelfile/shape.h"
#include "worker/backend.h"
#include "worker/engine.h"
#include "worker/model.h"
#include "worker/spec_draft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_SEQ 16
#define N_OUT 24
#define P_MAX 60
/* and N_LONG long prompts (requests N_SEQ..): the spread draft prefill */
#define N_LONG 3
#define N_ALL  (N_SEQ + N_LONG)
#define P_LONG 240

static ifd_backend_t *be;
static ifd_model_t *target, *other;
static int32_t prompts[N_ALL][P_LONG];
static int plen[N_ALL];
static int serve_budget = 64; /* serve()'s max_batched_tokens */

/* A proposer over m with a pool of `blocks` blocks; step: its catch-up
 * tokens per call (0: max_batched_tokens, 64). */
static ifd_spec_draft_t *make_draft_step(ifd_model_t *m, int64_t blocks, ifd_kv_dtype_t kv,
                                         int step)
{
    const ifd_spec_draft_params_t dp = {.n_vocab = 256,
                                        .max_batched_tokens = 64,
                                        .n_blocks = blocks,
                                        .block_size = 16,
                                        .dtype = kv,
                                        .step_tokens = step};
    ifd_spec_draft_t *d = NULL;
    char err[256];
    ck_assert_msg(ifd_spec_draft_create(&d, m, &dp, err, sizeof err) == 0, "%s", err);
    return d;
}

static ifd_spec_draft_t *make_draft(ifd_model_t *m, int64_t blocks, ifd_kv_dtype_t kv)
{
    return make_draft_step(m, blocks, kv, 0);
}

/* ---- the proposer alone ------------------------------------------------------- */

/* Random histories: each a prefix of the previous one for the same slot
 * (as a sequence grows), with now and then a changed tail (a rejected
 * proposal) or a fresh start. */
START_TEST(test_stateful_equals_fresh)
{
    /* a budget no batch reaches: every query proposes each call */
    ifd_spec_draft_t *kept = make_draft_step(other, 512, IFD_KV_F32, 1 << 20);
    enum { SLOTS = 8, LEN = 120 };
    int32_t hist[SLOTS][LEN];
    int32_t n[SLOTS] = {0};
    void *state[SLOTS] = {NULL};
    srand(3);
    for (int round = 0; round < 75; round++) {
        const int nq = 1 + rand() % SLOTS;
        ifd_spec_draft_query_t q[SLOTS], f[SLOTS];
        int32_t out_q[SLOTS][IFD_SPEC_MAX_TOKENS], out_f[SLOTS][IFD_SPEC_MAX_TOKENS];
        for (int i = 0; i < nq; i++) {
            int r = rand() % 10;
            if (n[i] == 0 || r == 0 || n[i] > LEN - 30) { /* a fresh start */
                n[i] = rand() % 20;
                for (int j = 0; j < n[i]; j++)
                    hist[i][j] = rand() % 256;
            } else if (r < 4) { /* a rejected tail: cut back, then new tokens */
                n[i] -= rand() % (n[i] < 5 ? n[i] : 5);
            }
            const int add = 1 + rand() % 6;
            for (int j = 0; j < add; j++)
                hist[i][n[i]++] = rand() % 256;
            const int32_t k = 1 + rand() % 6;
            q[i] = (ifd_spec_draft_query_t){state[i], hist[i], n[i], k, out_q[i], 0};
            f[i] = (ifd_spec_draft_query_t){NULL, hist[i], n[i], k, out_f[i], 0};
        }
        ck_assert_int_eq(ifd_spec_draft_propose(kept, q, nq), 0);
        ifd_spec_draft_t *fresh = make_draft_step(other, 512, IFD_KV_F32, 1 << 20);
        ck_assert_int_eq(ifd_spec_draft_propose(fresh, f, nq), 0);
        for (int i = 0; i < nq; i++) {
            state[i] = q[i].seq;
            ck_assert_int_eq(q[i].n_out, q[i].k);
            ck_assert_int_eq(f[i].n_out, q[i].k);
            for (int j = 0; j < q[i].k; j++)
                ck_assert_msg(out_q[i][j] == out_f[i][j], "round %d seq %d token %d: %d vs %d",
                              round, i, j, out_q[i][j], out_f[i][j]);
            ifd_spec_draft_drafter(fresh).release(fresh, f[i].seq);
        }
        ifd_spec_draft_stats_t st;
        ifd_spec_draft_stats(fresh, &st);
        ck_assert_int_eq(st.blocks_held, 0);
        ifd_spec_draft_destroy(fresh);
    }
    for (int i = 0; i < SLOTS; i++)
        ifd_spec_draft_drafter(kept).release(kept, state[i]);
    ifd_spec_draft_stats_t st;
    ifd_spec_draft_stats(kept, &st);
    ck_assert_int_eq(st.blocks_held, 0);
    ifd_spec_draft_destroy(kept);
}
END_TEST

/* ---- through the engine -------------------------------------------------------- */

typedef struct {
    int32_t out[N_ALL][N_OUT];
    int n_out[N_ALL];
    int finished[N_ALL];
} sink_t;

static void on_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    sink_t *s = ctx;
    if (s->n_out[id] < N_OUT)
        s->out[id][s->n_out[id]] = res->token;
    s->n_out[id]++;
}

static void on_finish(void *ctx, uint64_t id, ifd_finish_reason_t r, const ifd_engine_usage_t *u)
{
    (void)r, (void)u;
    ((sink_t *)ctx)->finished[id]++;
}

/* Requests [first, first + n) in one engine (the draft d, or none); seeded
 * sampling when `sampled`. Returns the engine's counters. */
static ifd_engine_stats_t serve(sink_t *sink, int first, int n, ifd_spec_draft_t *d, bool sampled)
{
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(ifd_model_config(target));
    kp.dtype = IFD_KV_F32;
    kp.n_blocks = 128;
    kp.n_workers = 1;
    ifd_kvpool_t *pool;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &pool), 0);
    ifd_engine_model_t em;
    ck_assert_int_eq(ifd_engine_model_from(&em, target, pool, 0), 0);
    ifd_engine_params_t ep = ifd_engine_default_params();
    ep.max_seqs = n;
    ep.max_batched_tokens = serve_budget;
    if (d) {
        ep.spec = (ifd_spec_params_t){IFD_SPEC_DRAFT, 4, 0, 0};
        ep.drafter = ifd_spec_draft_drafter(d);
    }
    ifd_engine_callbacks_t cb = {sink, on_token, on_finish, NULL};
    ifd_engine_t *eng;
    ck_assert_int_eq(ifd_engine_create(&eng, &ep, &em, pool, &cb), 0);
    for (int i = first; i < first + n; i++) {
        ifd_engine_request_t r;
        memset(&r, 0, sizeof r);
        r.id = (uint64_t)i;
        r.prompt = prompts[i];
        r.n_prompt = plen[i];
        r.sampling = ifd_sampling_default_params();
        r.sampling.temperature = sampled ? 0.9f : 0.0f;
        r.sampling.seed = 100 + (uint64_t)i;
        r.max_tokens = N_OUT;
        r.ignore_eos = true;
        r.use_cache = true;
        ck_assert_int_eq(ifd_engine_add(eng, &r), 0);
    }
    while (!ifd_engine_idle(eng))
        ck_assert_int_ge(ifd_engine_step(eng, NULL), 0);
    ifd_engine_stats_t st;
    ifd_engine_stats(eng, &st);
    ifd_engine_destroy(eng);
    ifd_engine_model_free(&em);
    char err[256];
    ck_assert_msg(ifd_kvpool_check(pool, err, sizeof err) == 0, "%s", err);
    ifd_kvpool_destroy(pool);
    return st;
}

/* The target as its own draft proposes its own greedy continuation. */
START_TEST(test_proposal_is_greedy_continuation)
{
    sink_t *ref = calloc(1, sizeof *ref);
    serve(ref, 0, 4, NULL, false);
    ifd_spec_draft_t *d = make_draft(target, 128, IFD_KV_F32);
    for (int i = 0; i < 4; i++) {
        int32_t hist[P_MAX + N_OUT], out[8];
        memcpy(hist, prompts[i], (size_t)plen[i] * sizeof *hist);
        ifd_spec_draft_query_t q = {NULL, hist, plen[i], 8, out, 0};
        ck_assert_int_eq(ifd_spec_draft_propose(d, &q, 1), 0);
        ck_assert_int_eq(q.n_out, 8);
        for (int j = 0; j < 8; j++)
            ck_assert_int_eq(out[j], ref->out[i][j]);
        ifd_spec_draft_drafter(d).release(d, q.seq);
    }
    ifd_spec_draft_destroy(d);
    free(ref);
}
END_TEST

static void same_as_plain(bool sampled)
{
    sink_t *ref = calloc(1, sizeof *ref);
    for (int i = 0; i < N_SEQ; i++)
        serve(ref, i, 1, NULL, sampled);
    struct {
        ifd_model_t *m;
        ifd_kv_dtype_t kv;
        const char *name;
    } drafts[] = {{target, IFD_KV_F32, "self"},
                  {target, IFD_KV_Q4_0, "self over q4_0 K/V"},
                  {other, IFD_KV_F32, "another model"}};
    const int batches[][2] = {{0, 1}, {1, 1}, {0, 4}, {0, N_SEQ}};
    for (size_t k = 0; k < sizeof drafts / sizeof *drafts; k++) {
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
            ifd_spec_draft_t *d = make_draft(drafts[k].m, 256, drafts[k].kv);
            sink_t *s = calloc(1, sizeof *s);
            const int first = batches[b][0], n = batches[b][1];
            ifd_engine_stats_t st = serve(s, first, n, d, sampled);
            for (int i = first; i < first + n; i++) {
                ck_assert_int_eq(s->finished[i], 1);
                ck_assert_int_eq(s->n_out[i], N_OUT);
                for (int t = 0; t < N_OUT; t++)
                    ck_assert_msg(s->out[i][t] == ref->out[i][t],
                                  "%s draft, %s, batch %d: request %d token %d", drafts[k].name,
                                  sampled ? "seeded" : "greedy", n, i, t);
            }
            ck_assert_uint_gt(st.spec_drafts, 0);
            if (k == 0 && !sampled) /* its own greedy tokens: all stand */
                ck_assert_uint_eq(st.spec_accepted_tokens, st.spec_draft_tokens);
            if (b == 3)
                printf("%s, %s draft, %d sequences: %llu of %llu accepted\n",
                       sampled ? "seeded" : "greedy", drafts[k].name, n,
                       (unsigned long long)st.spec_accepted_tokens,
                       (unsigned long long)st.spec_draft_tokens);
            ifd_spec_draft_stats_t dst;
            ifd_spec_draft_stats(d, &dst);
            ck_assert_int_eq(dst.blocks_held, 0);
            ifd_spec_draft_destroy(d);
            free(s);
        }
    }
    free(ref);
}

START_TEST(test_greedy_same_as_plain)
{
    same_as_plain(false);
}
END_TEST

START_TEST(test_seeded_same_as_plain)
{
    same_as_plain(true);
}
END_TEST

/* A pool of 2 blocks: a 40-token history has no room (nothing proposed,
 * nothing held); a short one fits. Bad parameters are refused. */
START_TEST(test_no_room_and_bad_params)
{
    ifd_spec_draft_t *d = make_draft(target, 2, IFD_KV_F32);
    int32_t out[4];
    ifd_spec_draft_query_t q = {NULL, prompts[0], 40, 4, out, 0};
    ck_assert_int_ge(plen[0], 40);
    ck_assert_int_eq(ifd_spec_draft_propose(d, &q, 1), 0);
    ck_assert_int_eq(q.n_out, 0);
    ifd_spec_draft_stats_t st;
    ifd_spec_draft_stats(d, &st);
    ck_assert(st.blocks_held == 0 && st.no_room == 1);
    q.n_tokens = 10;
    ck_assert_int_eq(ifd_spec_draft_propose(d, &q, 1), 0);
    ck_assert_int_eq(q.n_out, 4);
    ifd_spec_draft_stats(d, &st);
    ck_assert_int_eq(st.blocks_held, 1);
    ifd_spec_draft_drafter(d).release(d, q.seq);
    ifd_spec_draft_stats(d, &st);
    ck_assert_int_eq(st.blocks_held, 0);
    ck_assert_int_eq(ifd_spec_draft_propose(d, &q, IFD_ENGINE_SPEC_ROWS + 1), IFD_EINVAL);
    ifd_spec_draft_destroy(d);
    char err[256];
    ifd_spec_draft_t *bad = NULL;
    const ifd_spec_draft_params_t zero_blocks = {.n_vocab = 256,
                                                 .max_batched_tokens = 64,
                                                 .n_blocks = 0,
                                                 .block_size = 16,
                                                 .dtype = IFD_KV_F32,
                                                 .step_tokens = 0};
    ck_assert_int_eq(ifd_spec_draft_create(&bad, target, &zero_blocks, err, sizeof err),
                     IFD_EINVAL);
    const ifd_spec_draft_params_t big_vocab = {.n_vocab = 1000,
                                               .max_batched_tokens = 64,
                                               .n_blocks = 8,
                                               .block_size = 16,
                                               .dtype = IFD_KV_F32,
                                               .step_tokens = 0};
    ck_assert_int_eq(ifd_spec_draft_create(&bad, target, &big_vocab, err, sizeof err),
                     IFD_EMISMATCH);
    ck_assert_ptr_null(bad);
}
END_TEST

/* ---- prefix reuse ---------------------------------------------------------------- */

static void check_pool(ifd_spec_draft_t *d)
{
    char err[256];
    ck_assert_msg(ifd_kvpool_check(ifd_spec_draft_pool(d), err, sizeof err) == 0, "%s", err);
}

/* Proposes k tokens for hist[0..n) with state *seq in d and with a fresh
 * proposer: the same tokens. Returns d's catch-up tokens of this call. */
static uint64_t propose_same_as_fresh(ifd_spec_draft_t *d, void **seq, const int32_t *hist,
                                      int32_t n, int32_t k, int32_t *out)
{
    ifd_spec_draft_stats_t a, b;
    ifd_spec_draft_stats(d, &a);
    ifd_spec_draft_query_t q = {*seq, hist, n, k, out, 0};
    ck_assert_int_eq(ifd_spec_draft_propose(d, &q, 1), 0);
    ck_assert_int_eq(q.n_out, k);
    *seq = q.seq;
    ifd_spec_draft_stats(d, &b);
    ifd_spec_draft_t *fresh = make_draft(other, 64, IFD_KV_F32);
    int32_t ref[IFD_SPEC_MAX_TOKENS];
    ifd_spec_draft_query_t f = {NULL, hist, n, k, ref, 0};
    ck_assert_int_eq(ifd_spec_draft_propose(fresh, &f, 1), 0);
    for (int j = 0; j < k; j++)
        ck_assert_msg(out[j] == ref[j], "%d tokens: proposal %d: %d vs fresh %d", n, j, out[j],
                      ref[j]);
    ifd_spec_draft_drafter(fresh).release(fresh, f.seq);
    ifd_spec_draft_destroy(fresh);
    check_pool(d);
    return b.catchup_tokens - a.catchup_tokens;
}

START_TEST(test_prefix_reuse)
{
    ifd_spec_draft_t *d = make_draft(other, 64, IFD_KV_F32);
    const ifd_spec_drafter_t dr = ifd_spec_draft_drafter(d);
    int32_t hist[80], out[IFD_SPEC_MAX_TOKENS];
    memcpy(hist, prompts[0], 45 * sizeof *hist);
    for (int j = 45; j < 80; j++)
        hist[j] = (j * 37) % 256;
    ifd_spec_draft_stats_t st;
    ifd_kvpool_t *pool = ifd_spec_draft_pool(d);

    /* 30 tokens, k 6: the draft steps write positions 30..34, so block 1
     * ([16, 32)) holds two proposals: only block 0 is published */
    void *a = NULL;
    ck_assert_uint_eq(propose_same_as_fresh(d, &a, hist, 30, 6, out), 30);
    int32_t probe[32];
    memcpy(probe, hist, 30 * sizeof *probe);
    probe[30] = out[0], probe[31] = out[1];
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, probe, 32, NULL, 8), 1);
    ifd_spec_draft_stats(d, &st);
    ck_assert_uint_eq(st.published, 1);
    /* the sequence goes on with its own tokens (the proposals rejected:
     * positions 30.. rolled back): 45 tokens, blocks 0 and 1 published
     * ((45 - 1) / 16), the rest not */
    hist[30] = (out[0] + 1) % 256;
    ck_assert_uint_eq(propose_same_as_fresh(d, &a, hist, 45, 4, out), 15);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, hist, 45, NULL, 8), 2);
    ifd_spec_draft_stats(d, &st);
    ck_assert_uint_eq(st.published, 2);
    ck_assert_uint_eq(st.prefix_hit_tokens, 0);
    dr.release(d, a);

    /* the same prompt and another tail: the two published blocks are taken,
     * only the 20 tokens past them fed */
    void *b = NULL;
    hist[45] = 7, hist[46] = 200;
    ck_assert_uint_eq(propose_same_as_fresh(d, &b, hist, 52, 5, out), 20);
    ifd_spec_draft_stats(d, &st);
    ck_assert_uint_eq(st.prefix_hit_tokens, 32);
    ck_assert_uint_eq(st.published, 3); /* and block 2 ([32, 48) < 51) */
    /* beside it, while b holds them, a third state: three blocks shared */
    void *c = NULL;
    ck_assert_uint_eq(propose_same_as_fresh(d, &c, hist, 60, 3, out), 12);
    ifd_spec_draft_stats(d, &st);
    ck_assert_uint_eq(st.prefix_hit_tokens, 32 + 48);
    ifd_kvpool_stats_t ps;
    ck_assert_int_eq(ifd_kvpool_stats(pool, &ps), 0);
    ck_assert_int_eq(st.blocks_held, 4 + 4); /* positions 0..55 and 0..61 */
    ck_assert_int_eq(ps.in_use, 3 + 1 + 1);
    hist[60] = (out[0] + 1) % 256; /* c's first proposal rejected below */

    /* b's tokens part inside its published block 1 (position 20; not the
     * engine's way, the proposer's contract allows it): blocks 1 and on
     * go, KV from 16 fed again; then at position 5 (no KV left: the
     * index, which holds no block of these tokens, then a whole catch-up) */
    int32_t alt[60];
    memcpy(alt, hist, sizeof alt);
    alt[20] ^= 1;
    ck_assert_uint_eq(propose_same_as_fresh(d, &b, alt, 40, 4, out), 24);
    alt[5] ^= 1;
    ck_assert_uint_eq(propose_same_as_fresh(d, &b, alt, 40, 4, out), 40);
    /* c is untouched by it: its next proposal feeds only its new tokens */
    ck_assert_uint_eq(propose_same_as_fresh(d, &c, hist, 64, 3, out), 4);
    dr.release(d, b);
    dr.release(d, c);
    ifd_spec_draft_stats(d, &st);
    ck_assert_int_eq(st.blocks_held, 0);
    ck_assert_int_eq(ifd_kvpool_stats(pool, &ps), 0);
    ck_assert_int_eq(ps.in_use, 0);
    ck_assert_int_gt(ps.cached, 0); /* published blocks stay cached */
    check_pool(d);
    ifd_spec_draft_destroy(d);
}
END_TEST

/* Through the engine: one request twice with the same proposer (the
 * states released in between): the second run's first catch-up feeds only
 * the prompt's unpublished tail, every later step is the first run's (the
 * same proposals and acceptance), and both give plain decoding's tokens. */
START_TEST(test_engine_repeated_prompt)
{
    sink_t *ref = calloc(1, sizeof *ref), *r1 = calloc(1, sizeof *r1), *r2 = calloc(1, sizeof *r2);
    serve(ref, 0, 1, NULL, false);
    ifd_spec_draft_t *d = make_draft(other, 64, IFD_KV_F32);
    ifd_spec_draft_stats_t s0, s1, s2;
    ifd_spec_draft_stats(d, &s0);
    ifd_engine_stats_t e1 = serve(r1, 0, 1, d, false);
    ifd_spec_draft_stats(d, &s1);
    ifd_engine_stats_t e2 = serve(r2, 0, 1, d, false);
    ifd_spec_draft_stats(d, &s2);
    for (int t = 0; t < N_OUT; t++) {
        ck_assert_int_eq(r1->out[0][t], ref->out[0][t]);
        ck_assert_int_eq(r2->out[0][t], ref->out[0][t]);
    }
    ck_assert_uint_eq(s1.prefix_hit_tokens, 0);
    /* the second run's first proposal (45 prompt tokens + 1) looks up its
     * first 45 tokens: two full blocks, published by the first run */
    const uint64_t hit = s2.prefix_hit_tokens - s1.prefix_hit_tokens;
    ck_assert_uint_eq(hit, 32);
    ck_assert_uint_eq(s2.catchup_tokens - s1.catchup_tokens,
                      s1.catchup_tokens - s0.catchup_tokens - hit);
    ck_assert_uint_eq(e2.spec_draft_tokens, e1.spec_draft_tokens);
    ck_assert_uint_eq(e2.spec_accepted_tokens, e1.spec_accepted_tokens);
    ck_assert_int_eq(s2.blocks_held, 0);
    check_pool(d);
    ifd_spec_draft_destroy(d);
    free(ref), free(r1), free(r2);
}
END_TEST

/* ---- the draft's prefill spread over the target's ------------------------------- */

/* Long prompts (240, 210 and 180 tokens) with a step budget of 32 tokens:
 * the target prefills them in chunks over many steps, and the engine feeds
 * the draft the same chunks as they are scheduled (feed queries). With the
 * draft's catch-up budget equal to the target's (32) the draft keeps pace:
 * every prompt token is fed during the prefill, no call feeds more than
 * 32, no proposal waits for its catch-up. With half of it (16) or a
 * quarter (8: the daemon's draft_step_tokens, a smaller draft's share) the
 * draft lags: proposals wait (lagging) while it catches up 16 (8) tokens a
 * step, and still no call feeds more than that. Alone and three at once,
 * greedy and seeded: plain decoding's tokens every time, every draft
 * block given back. (Before the feeds, the first proposal of each request
 * fed its whole prompt in one call: max_call_catchup 240.) */
static void prefill_spread(bool sampled)
{
    sink_t *ref = calloc(1, sizeof *ref);
    serve_budget = 32;
    for (int i = N_SEQ; i < N_ALL; i++)
        serve(ref, i, 1, NULL, sampled);
    const int shares[] = {0, 16, 8}; /* 0: the budget itself (32) */
    const int batches[][2] = {{N_SEQ, 1}, {N_SEQ, N_LONG}};
    for (size_t k = 0; k < sizeof shares / sizeof *shares; k++) {
        for (size_t b = 0; b < 2; b++) {
            const ifd_spec_draft_params_t dp = {.n_vocab = 256,
                                                .max_batched_tokens = 32,
                                                .n_blocks = 128,
                                                .block_size = 16,
                                                .dtype = IFD_KV_F32,
                                                .step_tokens = shares[k]};
            ifd_spec_draft_t *d = NULL;
            char err[256];
            ck_assert_msg(ifd_spec_draft_create(&d, other, &dp, err, sizeof err) == 0, "%s", err);
            sink_t *s = calloc(1, sizeof *s);
            const int first = batches[b][0], n = batches[b][1];
            ifd_engine_stats_t st = serve(s, first, n, d, sampled);
            int prompt = 0;
            for (int i = first; i < first + n; i++) {
                prompt += plen[i];
                ck_assert_int_eq(s->finished[i], 1);
                for (int t = 0; t < N_OUT; t++)
                    ck_assert_msg(s->out[i][t] == ref->out[i][t],
                                  "share %d, %d at once, %s: request %d token %d", shares[k], n,
                                  sampled ? "seeded" : "greedy", i, t);
            }
            ifd_spec_draft_stats_t ds;
            ifd_spec_draft_stats(d, &ds);
            printf("draft prefill spread, share %d, %d at once, %s: %llu of %d prompt tokens fed "
                   "during the prefill, at most %llu catch-up tokens a call, %llu proposals "
                   "waiting, %llu verifications\n",
                   shares[k] ? shares[k] : 32, n, sampled ? "seeded" : "greedy",
                   (unsigned long long)ds.feed_tokens, prompt,
                   (unsigned long long)ds.max_call_catchup, (unsigned long long)ds.lagging,
                   (unsigned long long)st.spec_drafts);
            fflush(stdout);
            /* a share of 8 feeds 64 tokens during the 240-token prefill, then 8 a
             * step while the sequence grows by one: its first proposal would come
             * at output token 25 (240 + t <= 64 + 8t), past N_OUT. A share too
             * small for the prompts delays proposals; it never changes a token. */
            if (shares[k] == 0 || shares[k] >= 16)
                ck_assert_uint_gt(st.spec_drafts, 0);
            ck_assert_int_eq(ds.blocks_held, 0);
            check_pool(d);
            if (k == 0) { /* in step with the target's prefill */
                ck_assert_uint_eq(ds.feed_tokens, (uint64_t)prompt);
                ck_assert_uint_le(ds.max_call_catchup, 32);
                ck_assert_uint_eq(ds.lagging, 0);
            } else { /* a half or a quarter: behind, spread all the same */
                ck_assert_uint_gt(ds.feed_tokens, 0);
                ck_assert_uint_lt(ds.feed_tokens, (uint64_t)prompt);
                ck_assert_uint_le(ds.max_call_catchup, (uint64_t)shares[k]);
                ck_assert_uint_gt(ds.lagging, 0);
            }
            ifd_spec_draft_destroy(d);
            free(s);
        }
    }
    serve_budget = 64;
    free(ref);
}

START_TEST(test_prefill_spread_greedy)
{
    prefill_spread(false);
}
END_TEST

START_TEST(test_prefill_spread_seeded)
{
    prefill_spread(true);
}
END_TEST

/* ---- the draft's disk tier ------------------------------------------------------ */

/* A proposer over m with a disk tier in dir under `identity`; reads never
 * cut short (a deadline of a second a token: the test's tokens come back
 * whatever the machine's load). */
static ifd_spec_draft_t *make_draft_disk(ifd_model_t *m, const char *dir, const char *identity)
{
    ifd_spec_draft_params_t dp = {.n_vocab = 256,
                                  .max_batched_tokens = 64,
                                  .n_blocks = 64,
                                  .block_size = 16,
                                  .dtype = IFD_KV_F32,
                                  .step_tokens = 0};
    dp.disk_dir = dir;
    dp.disk_bytes = 1 << 26;
    dp.disk_identity = identity;
    dp.disk_ms_per_token = 1000;
    ifd_spec_draft_t *d = NULL;
    char err[256];
    ck_assert_msg(ifd_spec_draft_create(&d, m, &dp, err, sizeof err) == 0, "%s", err);
    ck_assert(ifd_spec_draft_has_disk(d));
    return d;
}

/* How many of prompt 0's first two blocks a tier of fingerprint fp over
 * pool finds in dir. */
static int probe_dir(ifd_kvpool_t *pool, const char *dir, uint64_t fp)
{
    ifd_kvdisk_params_t kp = ifd_kvdisk_default_params();
    kp.dir = dir, kp.max_bytes = 1 << 26, kp.fingerprint = fp;
    ifd_kvdisk_t *t = NULL;
    ck_assert_int_eq(ifd_kvdisk_create(&kp, pool, &t), 0);
    const ifd_kvhash_t root = {0, 0};
    int n = ifd_kvdisk_probe(t, &root, 0, prompts[0], 2);
    ifd_kvdisk_destroy(t);
    return n;
}

/* One request served with a draft whose tier writes its published blocks;
 * then a "restart": a new proposer (an empty pool) on the same directory.
 * Its first catch-up reads the prompt's two full blocks back (45 tokens:
 * blocks [0, 32)) and feeds the rest: the first run's catch-up less 32,
 * with no pool hit; the same proposals, acceptance and tokens as plain
 * decoding. The files: found by the draft's fingerprint, never by a
 * target's over the same geometry (the target and the draft here share
 * the tiny shape) and identity, nor by another draft's. */
START_TEST(test_disk_tier_across_restarts)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/test_spec_draft_disk.%d.XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *id = "tiny other, seed 8";
    sink_t *ref = calloc(1, sizeof *ref), *r1 = calloc(1, sizeof *r1), *r2 = calloc(1, sizeof *r2);
    serve(ref, 0, 1, NULL, false);

    ifd_spec_draft_t *d = make_draft_disk(other, dir, id);
    ifd_engine_stats_t e1 = serve(r1, 0, 1, d, false);
    ifd_spec_draft_stats_t s1, s2;
    ifd_spec_draft_stats(d, &s1);
    ck_assert_uint_ge(s1.disk_offered, 2);
    ck_assert_uint_eq(s1.disk_offered, s1.published);
    ck_assert_uint_eq(s1.disk_hit_tokens, 0);
    ifd_spec_draft_destroy(d); /* writes what is queued */

    d = make_draft_disk(other, dir, id); /* the restart */
    ifd_engine_stats_t e2 = serve(r2, 0, 1, d, false);
    ifd_spec_draft_stats(d, &s2);
    for (int t = 0; t < N_OUT; t++) {
        ck_assert_int_eq(r1->out[0][t], ref->out[0][t]);
        ck_assert_int_eq(r2->out[0][t], ref->out[0][t]);
    }
    printf("draft disk tier: first run %llu catch-up tokens, after the restart %llu (%llu read "
           "back)\n",
           (unsigned long long)s1.catchup_tokens, (unsigned long long)s2.catchup_tokens,
           (unsigned long long)s2.disk_hit_tokens);
    ck_assert_uint_eq(s2.prefix_hit_tokens, 0);
    ck_assert_uint_eq(s2.disk_hit_tokens, 32);
    ck_assert_uint_eq(s2.catchup_tokens, s1.catchup_tokens - 32);
    ck_assert_uint_eq(e2.spec_draft_tokens, e1.spec_draft_tokens);
    ck_assert_uint_eq(e2.spec_accepted_tokens, e1.spec_accepted_tokens);
    ck_assert_int_eq(s2.blocks_held, 0);
    /* the blocks read back are not offered again; those past them are (anew in this pool) */
    ck_assert_uint_eq(s2.disk_offered, s1.disk_offered - 2);
    check_pool(d);
    ifd_spec_draft_destroy(d);

    /* the files and their keys: a pool of the target's geometry (equal to the draft's) */
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(ifd_model_config(target));
    kp.dtype = IFD_KV_F32, kp.n_blocks = 8, kp.n_workers = 1;
    ifd_kvpool_t *pool;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &pool), 0);
    const uint64_t fp_draft = ifd_spec_draft_disk_fingerprint(pool, id);
    const uint64_t fp_target = ifd_kvdisk_fingerprint(pool, id, strlen(id));
    ck_assert_uint_ne(fp_draft, fp_target);
    ck_assert_int_eq(probe_dir(pool, dir, fp_draft), 2);
    ck_assert_int_eq(probe_dir(pool, dir, fp_target), 0);
    ck_assert_int_eq(probe_dir(pool, dir, ifd_spec_draft_disk_fingerprint(pool, "another")), 0);
    ifd_kvpool_destroy(pool);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    free(ref), free(r1), free(r2);
}
END_TEST

int main(void)
{
    char path[4096], err[512] = "";
    const char *src = getenv("INFERD_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/deploy/shapes/tiny-llama.json", src ? src : "..");
    ifd_model_config_t cfg;
    if (ifd_shape_load(&cfg, path, err, sizeof err) || ifd_backend_cpu_create(&be, 1) ||
        ifd_model_load_random(&target, &cfg, 7, be, err, sizeof err) ||
        ifd_model_load_random(&other, &cfg, 8, be, err, sizeof err)) {
        fprintf(stderr, "cannot make the tiny models: %s\n", err);
        return 1;
    }
    /* one compute thread: the cases run in forked children (ifd_test_run), which
     * must not inherit a pool's threads (they would not exist there; LeakSanitizer
     * reports "thread not suspended" at every child's exit) */
    srand(42);
    for (int i = 0; i < N_ALL; i++) {
        plen[i] = i == 0 ? 45 : i < N_SEQ ? 3 + (i * 13) % (P_MAX - 3) : P_LONG - 30 * (i - N_SEQ);
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = rand() % 256;
    }
    Suite *s = suite_create("spec_draft");
    ifd_test_case(s, "tiny", 300,
                  IFD_TESTS(test_stateful_equals_fresh, test_proposal_is_greedy_continuation,
                            test_greedy_same_as_plain, test_seeded_same_as_plain,
                            test_no_room_and_bad_params, test_prefix_reuse,
                            test_engine_repeated_prompt, test_prefill_spread_greedy,
                            test_prefill_spread_seeded, test_disk_tier_across_restarts));
    return ifd_test_run(s);
}
