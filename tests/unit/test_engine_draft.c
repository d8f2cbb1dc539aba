/*
 * test_engine_draft.c — speculative decoding with a draft model
 * (worker/spec_draft.h, docs/speculative.md) on the default model (label
 * model), on the CPU:
 *  - greedy tokens identical to plain decoding (each request alone, no
 *    speculation) with two drafts: the target itself (same GGUF: every
 *    proposal must stand, which the test asserts — nearly all proposed
 *    tokens accepted) and a different model with the same tokenizer (the
 *    target's shape cut to 2 layers, random weights: its proposals mostly
 *    fail, so rollback, catch-up and re-proposal run all the time);
 *    batches of 1, 5 and 16 sequences (prefill chunks beside
 *    verifications), the oracle's chat-templated prompts and random ones;
 *  - a target pool small enough to preempt and a draft pool too small for
 *    every sequence (proposals dropped, the draft's KV given back): the
 *    same tokens, and every block back in both pools at the end;
 *  - a draft with another tokenizer (Gemma 3 270M's) is refused with a
 *    message naming the difference; the same tokenizer passes.
 */
#include "testutil.h"

#include "error.h"
#include "kvpool/kvparams.h"
#include "kvpool/kvpool.h"
#include "tokenizer/tokenizer.h"
#include "worker/backend.h"
#include "worker/engine.h"
#include "worker/model.h"
#include "worker/spec_draft.h"

#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_REQ    16
#define N_OUT    16
#define N_ORACLE 3

static ifd_backend_t *be;
static ifd_model_t *model, *small_draft;
static char model_path[4096];
static int32_t prompts[N_REQ][200];
static int plen[N_REQ];

typedef struct {
    int32_t out[N_REQ][N_OUT];
    int n_out[N_REQ];
    int finished[N_REQ];
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

/* The oracle's held prompts (chat-templated ids) first, then random ids. */
static void make_prompts(void)
{
    char path[4096];
    const char *src = getenv("INFERD_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/oracle/prompts.json", src ? src : "..");
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    json_t *list = root ? json_object_get(root, "prompts") : NULL;
    if ((int)json_array_size(list) < N_ORACLE) {
        fprintf(stderr, "%s: %s\n", path, root ? "fewer than 3 prompts" : jerr.text);
        exit(1);
    }
    for (int i = 0; i < N_ORACLE; i++) {
        json_t *a = json_object_get(json_array_get(list, (size_t)i), "ids");
        plen[i] = (int)json_array_size(a) < 200 ? (int)json_array_size(a) : 200;
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = (int32_t)json_integer_value(json_array_get(a, (size_t)j));
    }
    json_decref(root);
    srand(7);
    for (int i = N_ORACLE; i < N_REQ; i++) {
        plen[i] = 5 + (i * 29) % 90;
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = (int32_t)(200 + rand() % 40000);
    }
}

static ifd_kvpool_t *make_pool(ifd_model_t *m, int n_blocks)
{
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(ifd_model_config(m));
    kp.dtype = IFD_KV_F32;
    kp.n_blocks = n_blocks;
    kp.n_workers = 1;
    ifd_kvpool_t *pool;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &pool), 0);
    return pool;
}

typedef struct {
    ifd_model_t *draft; /* NULL: no draft model */
    ifd_spec_method_t method;
    int max_seqs, pool_blocks, draft_blocks, budget;
    ifd_kv_dtype_t draft_kv; /* the draft pool's K/V */
} run_t;

/* Requests [first, first + n) greedy in one engine; its counters into st
 * and the draft's into dst (when there is one). */
static void serve(sink_t *sink, int first, int n, const run_t *rp, ifd_engine_stats_t *st,
                  ifd_spec_draft_stats_t *dst)
{
    ifd_kvpool_t *pool = make_pool(model, rp->pool_blocks);
    ifd_engine_model_t em;
    ck_assert_int_eq(ifd_engine_model_from(&em, model, pool, 0), 0);
    ifd_engine_params_t ep = ifd_engine_default_params();
    ep.max_seqs = rp->max_seqs;
    ep.max_batched_tokens = rp->budget;
    ep.spec = (ifd_spec_params_t){rp->method, 4, 0, 0};
    ifd_spec_draft_t *d = NULL;
    char err[512] = "";
    if (rp->draft) {
        const ifd_spec_draft_params_t dp = {.n_vocab = em.n_vocab,
                                            .max_batched_tokens = rp->budget,
                                            .n_blocks = rp->draft_blocks,
                                            .block_size = 16,
                                            .dtype = rp->draft_kv};
        ck_assert_msg(ifd_spec_draft_create(&d, rp->draft, &dp, err, sizeof err) == 0, "%s", err);
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
        r.sampling.temperature = 0.0f;
        r.max_tokens = N_OUT;
        r.ignore_eos = true;
        r.use_cache = true;
        ck_assert_int_eq(ifd_engine_add(eng, &r), 0);
    }
    while (!ifd_engine_idle(eng))
        ck_assert_int_ge(ifd_engine_step(eng, NULL), 0);
    ifd_engine_stats(eng, st);
    ifd_engine_destroy(eng);
    ifd_engine_model_free(&em);
    if (d) {
        ifd_spec_draft_stats(d, dst);
        ck_assert_int_eq(dst->blocks_held, 0); /* every state released */
    }
    ifd_spec_draft_destroy(d);
    ck_assert_msg(ifd_kvpool_check(pool, err, sizeof err) == 0, "%s", err);
    ifd_kvpool_destroy(pool);
}

static void assert_same(const sink_t *ref, const sink_t *b, int first, int n, const char *what)
{
    for (int i = first; i < first + n; i++) {
        ck_assert_int_eq(b->finished[i], 1);
        ck_assert_int_eq(b->n_out[i], N_OUT);
        for (int t = 0; t < N_OUT; t++)
            ck_assert_msg(ref->out[i][t] == b->out[i][t], "%s: request %d token %d: %d vs %d", what,
                          i, t, ref->out[i][t], b->out[i][t]);
    }
}

static const run_t PLAIN = {NULL, IFD_SPEC_OFF, 1, 64, 0, 256, IFD_KV_F32};

/* Each request alone without speculation: the reference. */
static sink_t *reference(void)
{
    sink_t *ref = calloc(1, sizeof *ref);
    ifd_engine_stats_t st;
    for (int i = 0; i < N_REQ; i++)
        serve(ref, i, 1, &PLAIN, &st, NULL);
    return ref;
}

/* Batches of 1 (the first 4 alone), 5 and 16 with the draft: the
 * reference's tokens; the totals of the counters into *tot. */
static void batches(const sink_t *ref, ifd_model_t *draft, ifd_kv_dtype_t kv, const char *name,
                    ifd_engine_stats_t *tot)
{
    memset(tot, 0, sizeof *tot);
    const struct {
        int first, n, max_seqs;
    } runs[] = {{0, 1, 1}, {1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {0, 5, 5}, {0, N_REQ, N_REQ}};
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        sink_t *b = calloc(1, sizeof *b);
        const run_t rp = {draft, IFD_SPEC_DRAFT, runs[k].max_seqs, 256, 256, 256, kv};
        ifd_engine_stats_t st;
        ifd_spec_draft_stats_t dst;
        serve(b, runs[k].first, runs[k].n, &rp, &st, &dst);
        char what[96];
        snprintf(what, sizeof what, "%s, batch %d", name, runs[k].n);
        assert_same(ref, b, runs[k].first, runs[k].n, what);
        printf("%s: %llu verifications, %llu of %llu accepted; draft: %llu forwards, %llu "
               "tokens (%llu catch-up)\n",
               what, (unsigned long long)st.spec_drafts,
               (unsigned long long)st.spec_accepted_tokens,
               (unsigned long long)st.spec_draft_tokens, (unsigned long long)dst.forwards,
               (unsigned long long)dst.tokens, (unsigned long long)dst.catchup_tokens);
        ck_assert_uint_gt(st.spec_drafts, 0);
        tot->spec_drafts += st.spec_drafts;
        tot->spec_draft_tokens += st.spec_draft_tokens;
        tot->spec_accepted_tokens += st.spec_accepted_tokens;
        free(b);
    }
}

START_TEST(test_draft_equals_plain)
{
    sink_t *ref = reference();
    ifd_engine_stats_t self, q4, small;
    /* the target as its own draft: every greedy proposal is the target's
     * own next token (batch invariance), so nearly all must stand */
    batches(ref, model, IFD_KV_F32, "draft = target", &self);
    ck_assert_msg(self.spec_accepted_tokens * 100 >= self.spec_draft_tokens * 95,
                  "draft = target accepted %llu of %llu",
                  (unsigned long long)self.spec_accepted_tokens,
                  (unsigned long long)self.spec_draft_tokens);
    /* the target reading its K/V in q4_0: a close draft, whose proposals
     * now and then part from the target's (partial acceptances) */
    batches(ref, model, IFD_KV_Q4_0, "draft = target with q4_0 K/V", &q4);
    ck_assert_uint_gt(q4.spec_accepted_tokens, 0);
    /* another model, the same tokenizer: proposals mostly rejected */
    batches(ref, small_draft, IFD_KV_F32, "2-layer random draft", &small);
    ck_assert_uint_lt(small.spec_accepted_tokens, small.spec_draft_tokens);
    free(ref);
}
END_TEST

/* Preemption in the target's pool, and a draft pool that cannot hold every
 * sequence (some proposals dropped): the same tokens, both pools whole. */
START_TEST(test_draft_small_pools)
{
    sink_t *ref = reference();
    const run_t tight[] = {{model, IFD_SPEC_DRAFT, N_REQ, 16, 256, 128, IFD_KV_F32},
                           {model, IFD_SPEC_DRAFT, N_REQ, 256, 12, 128, IFD_KV_Q4_0},
                           {small_draft, IFD_SPEC_DRAFT, N_REQ, 16, 12, 128, IFD_KV_F32}};
    for (size_t k = 0; k < sizeof tight / sizeof *tight; k++) {
        sink_t *b = calloc(1, sizeof *b);
        ifd_engine_stats_t st;
        ifd_spec_draft_stats_t dst;
        serve(b, 0, N_REQ, &tight[k], &st, &dst);
        char what[64];
        snprintf(what, sizeof what, "tight pools %zu", k);
        assert_same(ref, b, 0, N_REQ, what);
        printf("%s: %llu preemptions, %llu verifications, %llu proposals without room\n", what,
               (unsigned long long)st.preemptions, (unsigned long long)st.spec_drafts,
               (unsigned long long)dst.no_room);
        if (tight[k].pool_blocks < 64)
            ck_assert_uint_gt(st.preemptions, 0);
        if (tight[k].draft_blocks < 64)
            ck_assert_uint_gt(dst.no_room, 0);
        free(b);
    }
    free(ref);
}
END_TEST

/* A request asking for the draft of an engine without one is refused; an
 * engine set to the draft method needs a drafter. */
START_TEST(test_draft_needs_drafter)
{
    ifd_kvpool_t *pool = make_pool(model, 16);
    ifd_engine_model_t em;
    ck_assert_int_eq(ifd_engine_model_from(&em, model, pool, 0), 0);
    ifd_engine_params_t ep = ifd_engine_default_params();
    ep.spec = (ifd_spec_params_t){IFD_SPEC_DRAFT, 4, 0, 0};
    ifd_engine_t *eng;
    ck_assert_int_eq(ifd_engine_create(&eng, &ep, &em, pool, NULL), IFD_EINVAL);
    ep.spec.method = IFD_SPEC_NGRAM;
    ck_assert_int_eq(ifd_engine_create(&eng, &ep, &em, pool, NULL), 0);
    ifd_engine_request_t r;
    memset(&r, 0, sizeof r);
    r.id = 1;
    r.prompt = prompts[0];
    r.n_prompt = plen[0];
    r.sampling = ifd_sampling_default_params();
    r.max_tokens = 4;
    r.use_cache = true;
    r.spec.method = IFD_SPEC_DRAFT;
    ck_assert_int_eq(ifd_engine_add(eng, &r), IFD_EINVAL);
    ifd_engine_destroy(eng);
    ifd_engine_model_free(&em);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_other_tokenizer_refused)
{
    char gemma[4096], dir[4096], err[512];
    snprintf(dir, sizeof dir, "%s", model_path);
    snprintf(gemma, sizeof gemma, "%s/gemma-3-270m-q4_k_m.gguf", dirname(dir));
    ifd_tokenizer_t *a = NULL, *b = NULL, *g = NULL;
    ck_assert_int_eq(ifd_tokenizer_create_path(&a, model_path, err, sizeof err), 0);
    ck_assert_int_eq(ifd_tokenizer_create_path(&b, model_path, err, sizeof err), 0);
    ck_assert_int_eq(ifd_spec_draft_check_tokenizers(a, b, err, sizeof err), 0);
    if (access(gemma, R_OK) != 0) {
        printf("%s not found: the other-tokenizer case is skipped (deploy/fetch-model.sh "
               "gemma3)\n",
               gemma);
    } else {
        ck_assert_int_eq(ifd_tokenizer_create_path(&g, gemma, err, sizeof err), 0);
        err[0] = '\0';
        ck_assert_int_eq(ifd_spec_draft_check_tokenizers(a, g, err, sizeof err), IFD_EMISMATCH);
        printf("Gemma 3 as SmolLM2's draft: %s\n", err);
        ck_assert_ptr_nonnull(strstr(err, "the same tokenizer"));
        ck_assert_int_eq(ifd_spec_draft_check_tokenizers(g, a, err, sizeof err), IFD_EMISMATCH);
    }
    ifd_tokenizer_destroy(a);
    ifd_tokenizer_destroy(b);
    ifd_tokenizer_destroy(g);
}
END_TEST

int main(void)
{
    char err[512] = "";
    if (!ifd_test_model_path(model_path, sizeof model_path))
        ifd_test_skip("default model not found at %s (run deploy/fetch-model.sh)", model_path);
    if (ifd_backend_cpu_create(&be, 0) || ifd_model_load(&model, model_path, be, err, sizeof err)) {
        fprintf(stderr, "cannot load %s: %s\n", model_path, err);
        return 1;
    }
    /* the draft: the target's shape cut to 2 layers, random weights */
    ifd_model_config_t cfg = *ifd_model_config(model);
    cfg.n_layer = 2;
    cfg.has_rope_freqs = false;
    if (ifd_model_load_random(&small_draft, &cfg, 11, be, err, sizeof err)) {
        fprintf(stderr, "cannot make the 2-layer draft: %s\n", err);
        return 1;
    }
    make_prompts();
    Suite *s = suite_create("engine_draft");
    TCase *tc = tcase_create("smollm2");
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, test_draft_equals_plain);
    tcase_add_test(tc, test_draft_small_pools);
    tcase_add_test(tc, test_draft_needs_drafter);
    tcase_add_test(tc, test_other_tokenizer_refused);
    suite_add_tcase(s, tc);
    /* no fork (as test_engine_model): the model and its compute threads are made
     * once here, and a forked child would not have the pool's threads */
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
