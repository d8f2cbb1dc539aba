/*
 * test_cuda_step.c — the CUDA backend's step machinery (issue 13, items 2
 * and 3): device sampling, CUDA graphs for decode steps, pinned staging and
 * no allocation in the steady state, the GEMM heuristic cache.
 *
 *  1. Device sampling = host sampling: random logits rows (broad, peaked,
 *     tied, -inf entries) with random parameter sets — greedy, temperature,
 *     top-k, top-p, min-p, repetition / frequency / presence penalties over
 *     random histories, logit bias with repeated ids and -inf — sampled by
 *     ops->sample on the device and by ifd_sampler_sample on the host: the
 *     same token id for every row (no tolerance: the definition is exact),
 *     and -1 exactly where the host reports IFD_EINVAL.
 *  2. Graph replay = eager: two CUDA backends with the same random model and
 *     KV layout, graphs on and off, run the same schedule — a prefill, then
 *     decode steps of 1..8 sequences (buckets 1, 2, 4, 8) whose contexts
 *     grow every step, a prefill in between that reallocates the scratch
 *     (the graphs are recorded again) — and the logits of every step are
 *     compared bit for bit; each (bucket, context bucket) is recorded once
 *     per buffer epoch, every other decode step is a replay.
 *  3. Steady state (emulator only: it counts calls): after a warm-up of the
 *     same decode shapes, more decode steps with device sampling make no
 *     cudaMalloc, no cudaHostAlloc and no cuBLASLt heuristic query.
 *  4. The engine with device sampling = the engine with host sampling:
 *     seeded requests with penalties and logit bias through
 *     ifd_engine_model_from (forward_sample) and through the same adapter
 *     without it: the same token streams. Again with 60 valid ids of 101
 *     (cfg.n_vocab_valid: -inf logits past them) and +100 / +50 biases on
 *     ids 80 and 100: the same streams, no id >= 60.
 *
 * Built for the emulator (test_cuda_step_emu, labels unit + emu) and for a
 * GPU (test_cuda_step, label gpu; case 3 then checks only that the steps
 * run).
 */
#include "gpu_model_test.h"
#include "gpu_test.h"
#include "kvpool/kvparams.h"

#include "error.h"
#include "grammar/grammar_mask.h"
#include "kvpool/kvpool.h"
#include "worker/backend.h"
#include "worker/engine.h"
#include "worker/kvprobe.h"
#include "worker/kvsize.h"
#include "worker/model.h"
#include "worker/sampler.h"
#ifdef IFD_CUDA_EMU
#include "cuda_emu_counters.h"

#include <cuda_runtime_api.h>
#include <sys/types.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BS = 16, NB = 72, MAXB = 8, NSEQ = 8 };

static ifd_model_config_t tiny(void)
{
    return gt_tiny_config(false, 2);
}

static int side_open(gt_side_t *s, const ifd_model_config_t *c, bool graphs)
{
    char err[256] = "";
    ifd_backend_t *be = NULL;
    int rc = ifd_backend_cuda_create(&be, 0, false, err, sizeof err);
    if ((rc = gt_side_open(s, be, rc, err, c, IFD_DTYPE_F16, BS, NB)) == 0)
        ifd_model_set_graphs(s->m, graphs);
    return rc;
}

/* ---- a schedule of steps over NSEQ sequences -------------------------------- */

static int32_t g_tables[NSEQ][MAXB]; /* distinct shuffled blocks */
static int g_len[NSEQ];              /* positions computed per sequence */

static void tables_init(void)
{
    int32_t perm[NB];
    gt_permutation(perm, NB);
    for (int s = 0; s < NSEQ; s++)
        for (int j = 0; j < MAXB; j++)
            g_tables[s][j] = perm[s * MAXB + j];
    memset(g_len, 0, sizeof g_len);
}

typedef struct {
    int n_tok, n_seqs, nl;
    int32_t tok[320], pos[320], seq[320], rows[320];
    int64_t slot[320];
    int32_t bt[NSEQ * MAXB];
} step_t;

/* A step: sequences first..first+n-1 (mod NSEQ), q new tokens each; logits
 * for each sequence's last token. Advances g_len. */
static ifd_batch_t make_step(step_t *st, const ifd_model_config_t *c, int first, int n, int q)
{
    st->n_tok = st->nl = 0;
    st->n_seqs = n;
    for (int k = 0; k < n; k++) {
        int s = (first + k) % NSEQ;
        memcpy(st->bt + k * MAXB, g_tables[s], sizeof g_tables[s]);
        for (int j = 0; j < q; j++) {
            int p = g_len[s] + j, t = st->n_tok++;
            st->tok[t] = (int32_t)((p * 31 + s * 17 + 7) % (int)c->n_vocab);
            st->pos[t] = p;
            st->seq[t] = k;
            st->slot[t] = (int64_t)g_tables[s][p / BS] * BS + p % BS;
        }
        st->rows[st->nl++] = st->n_tok - 1;
        g_len[s] += q;
    }
    return (ifd_batch_t){st->n_tok, st->tok, st->pos, st->seq, st->slot, n,
                         st->bt,    MAXB,    st->nl,  st->rows, NULL,    NULL, NULL, NULL};
}

/* ---- 2. graph replay = eager ------------------------------------------------------ */

static void test_graphs(void)
{
    ifd_model_config_t c = tiny();
    gt_side_t on = {0}, off = {0};
    if (side_open(&on, &c, true) == 0 && side_open(&off, &c, false) == 0) {
        tables_init();
        /* (first, n, q): q > 1 is a prefill (eager on both) */
        static const int sched[][3] = {
            {0, 8, 5}, {0, 1, 1}, {0, 2, 1}, {1, 3, 1}, {0, 4, 1}, {2, 8, 1}, {0, 1, 1},
            {3, 5, 1}, {0, 2, 1}, {1, 7, 1}, {0, 4, 70}, {0, 3, 1}, {4, 8, 1}, {0, 1, 1},
            {5, 2, 1}, {0, 6, 1}, {1, 1, 1}, {2, 4, 1},
        };
        const int n_steps = (int)(sizeof sched / sizeof sched[0]);
        float *la = malloc(sizeof(float) * NSEQ * c.n_vocab);
        float *lb = malloc(sizeof(float) * NSEQ * c.n_vocab);
        int decodes = 0;
        for (int i = 0; i < n_steps && gt_case_failures() == 0; i++) {
            step_t st;
            ifd_batch_t b = make_step(&st, &c, sched[i][0], sched[i][1], sched[i][2]);
            decodes += sched[i][2] == 1;
            int r1 = ifd_model_forward(on.m, &b, on.kv, la);
            int r2 = ifd_model_forward(off.m, &b, off.kv, lb);
            GT_EXPECT(r1 == 0 && r2 == 0, "step %d: %s / %s", i, ifd_strerror(r1),
                      ifd_strerror(r2));
            if (r1 || r2)
                break;
            for (int r = 0; r < b.n_logits; r++) {
                const float *x = la + (size_t)r * c.n_vocab, *y = lb + (size_t)r * c.n_vocab;
                int diff = 0;
                for (uint32_t v = 0; v < c.n_vocab; v++)
                    diff += memcmp(&x[v], &y[v], 4) != 0;
                GT_EXPECT(diff == 0, "step %d (%d seqs, q %d) row %d: %d logits differ "
                          "(graph %g vs eager %g at 0)", i, sched[i][1], sched[i][2], r, diff,
                          (double)x[0], (double)y[0]);
            }
        }
        ifd_model_graph_stats_t gs, ge;
        ifd_model_graph_stats(on.m, &gs);
        ifd_model_graph_stats(off.m, &ge);
        gt_note("graphs on: %llu captures, %llu replays, %llu eager; off: %llu eager",
                (unsigned long long)gs.captures, (unsigned long long)gs.replays,
                (unsigned long long)gs.eager_steps, (unsigned long long)ge.eager_steps);
        /* buckets 1, 2, 4, 8 before the big prefill (which moves the
         * scratch), then 4, 8, 1, 2 again after it */
        GT_EXPECT(gs.captures == 8, "captures %llu, want 8", (unsigned long long)gs.captures);
        GT_EXPECT(gs.replays == (uint64_t)decodes - gs.captures, "replays %llu of %d decodes",
                  (unsigned long long)gs.replays, decodes);
        GT_EXPECT(ge.captures == 0 && ge.replays == 0, "graphs off recorded some");
        free(la);
        free(lb);
    }
    gt_side_close(&on);
    gt_side_close(&off);
}

/* ---- grammar fixtures -------------------------------------------------------------- */

/* A vocabulary of V tokens: 0 a control token, 1 the end token (both without
 * bytes), token i >= 2 the (i - 1)-th string over "abc.x" in bijective
 * base 5 ("a", "b", ..., "aa", "ab", ...): every string once. */
static ifd_vocab_t *test_vocab(int V)
{
    char **bytes = calloc((size_t)V, sizeof *bytes);
    uint32_t *lens = calloc((size_t)V, sizeof *lens);
    for (int i = 0; i < V; i++) {
        bytes[i] = calloc(16, 1);
        lens[i] = 0;
        for (int n = i - 1; i >= 2 && n > 0; n /= 5) {
            n--;
            bytes[i][lens[i]++] = "abc.x"[n % 5];
        }
    }
    const int32_t eos = 1;
    ifd_vocab_t *v = NULL;
    GT_EXPECT(ifd_vocab_create(V, (const char *const *)bytes, lens, &eos, 1, &v) == 0, "vocab");
    for (int i = 0; i < V; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    return v;
}

/* a's and b's, maybe a c and more of them, then a full stop: most tokens are
 * masked at every step ("x" never fits), only the end token after the stop */
static const char k_grammar[] = "root ::= [ab]+ (\"c\" [ab]*)? \".\"\n";

static ifd_constraint_t *new_constraint(ifd_gstore_t *st)
{
    ifd_constraint_t *k = NULL;
    char err[256] = "";
    int rc = ifd_constraint_create(st, k_grammar, strlen(k_grammar), &k, err, sizeof err);
    GT_EXPECT(rc == 0, "constraint: %s %s", ifd_strerror(rc), err);
    return k;
}

/* A history the grammar allows (n tokens, each a random allowed one but
 * the end token), or, when `reject`, one whose last token it refuses. */
static size_t grammar_history(ifd_gstore_t *st, int V, int32_t *gen, size_t n, bool reject)
{
    ifd_constraint_t *k = new_constraint(st);
    uint32_t *bits = malloc((size_t)(V + 31) / 32 * 4);
    size_t got = 0;
    for (; k && got < n; got++) {
        if (ifd_constraint_mask(k, gen, got, bits) != 0)
            break;
        int32_t allowed[4096];
        int na = 0;
        for (int i = 2; i < V && na < 4096; i++)
            if ((bits[i / 32] >> (i % 32)) & 1u)
                allowed[na++] = i;
        if (na == 0)
            break; /* complete: only the end token fits */
        gen[got] = allowed[gt_rand_int(na)];
    }
    if (reject && got < n && k && ifd_constraint_mask(k, gen, got, bits) == 0) {
        for (int t = 0; t < 64; t++) { /* a token the grammar refuses here */
            int32_t c = (int32_t)(2 + gt_rand_int(V - 2));
            if (!((bits[c / 32] >> (c % 32)) & 1u)) {
                gen[got++] = c;
                break;
            }
        }
    }
    free(bits);
    ifd_constraint_destroy(k);
    return got;
}

/* Device logprobs = host logprobs: the same token, rank and top ids, the
 * values within float rounding. */
static bool same_logprobs(const ifd_sample_result_t *d, const ifd_sample_result_t *h)
{
    if (d->token != h->token || d->rank != h->rank || d->n_top != h->n_top)
        return false;
    const float tol = 1e-6f;
    if (!(d->logprob == h->logprob || fabsf(d->logprob - h->logprob) <= tol * (1 + fabsf(h->logprob))))
        return false;
    const int32_t *di = ifd_sample_top_ids(d), *hi = ifd_sample_top_ids(h);
    const float *dl = ifd_sample_top_logprobs(d), *hl = ifd_sample_top_logprobs(h);
    for (int j = 0; j < h->n_top; j++)
        if (di[j] != hi[j] || !(dl[j] == hl[j] || fabsf(dl[j] - hl[j]) <= tol * (1 + fabsf(hl[j]))))
            return false;
    return true;
}

/* ---- 1. device sampling = host sampling ------------------------------------------- */

static void make_row(float *l, int V, int kind)
{
    switch (kind % 6) {
    case 0:
        gt_fill_randn(l, V, 1.0f);
        break;
    case 1:
        gt_fill_randn(l, V, 6.0f);
        break;
    case 2: /* ties */
        for (int i = 0; i < V; i++)
            l[i] = roundf(gt_randn() * 4.0f) / 4.0f;
        break;
    case 3: /* -inf entries, signed zeros */
        for (int i = 0; i < V; i++) {
            int r = (int)gt_rand_int(4);
            l[i] = r == 0 ? -INFINITY : r == 1 ? 0.0f : r == 2 ? -0.0f : gt_randn();
        }
        break;
    case 4: /* a few dominant tokens */
        for (int i = 0; i < V; i++)
            l[i] = gt_rand_int(30) == 0 ? 8.0f + gt_randn() : -4.0f + 0.01f * gt_randn();
        break;
    default: /* a row the sampler must refuse, now and then */
        gt_fill_randn(l, V, 2.0f);
        if (gt_rand_int(3) == 0)
            l[gt_rand_int(V)] = gt_rand_int(2) ? NAN : INFINITY;
        else if (gt_rand_int(3) == 0)
            for (int i = 0; i < V; i++)
                l[i] = -INFINITY;
        break;
    }
}

typedef struct {
    ifd_sampling_params_t p, pd; /* pd: the device's (its own constraint) */
    ifd_logit_bias_t bias[8];
    int32_t prompt[48], gen[32];
    ifd_sampler_history_t h;
    uint64_t pos;
    int32_t score; /* >= 0: a scoring row (prompt logprobs) of this token */
    uint32_t *allowed; /* allowed_token_ids' mask (shared by p and pd), or NULL */
} row_params_t;

/* A row's parameters: penalties, bias, and now and then logprobs (either
 * mode), a grammar (st non-NULL; a history it allows, or rejects 1 in 8)
 * and an allowed set (vLLM's allowed_token_ids: a third of the ids, or
 * one), with a grammar or without. */
static void make_params(row_params_t *r, int V, ifd_gstore_t *st)
{
    static const float temps[] = {0.0f, 1.0f, 0.7f, 1.3f, 0.25f};
    static const int32_t ks[] = {0, 0, 1, 5, 40};
    static const float ps[] = {1.0f, 1.0f, 0.9f, 0.5f, 0.0f};
    static const float mins[] = {0.0f, 0.0f, 0.05f, 0.3f};
    static const float reps[] = {1.0f, 1.0f, 1.3f, 0.8f};
    static const float freqs[] = {0.0f, 0.0f, 0.5f, -0.3f};
    static const float pres[] = {0.0f, 0.0f, 0.7f, -0.2f};
    memset(r, 0, sizeof *r);
    r->p = ifd_sampling_default_params();
    r->p.temperature = temps[gt_rand_int(5)];
    r->p.top_k = ks[gt_rand_int(5)];
    if (gt_rand_int(8) == 0)
        r->p.top_k = V - 1;
    r->p.top_p = ps[gt_rand_int(5)];
    r->p.min_p = mins[gt_rand_int(4)];
    r->p.repetition_penalty = reps[gt_rand_int(4)];
    r->p.frequency_penalty = freqs[gt_rand_int(4)];
    r->p.presence_penalty = pres[gt_rand_int(4)];
    r->p.seed = gt_rand_u64();
    int nb = (int)gt_rand_int(9);
    for (int j = 0; j < nb; j++) {
        /* repeated ids (small range), a few -inf, a few big pushes */
        r->bias[j].id = (int32_t)(j > 0 && gt_rand_int(3) == 0 ? r->bias[j - 1].id
                                                               : gt_rand_int(V));
        int k = (int)gt_rand_int(6);
        r->bias[j].bias = k == 0 ? -INFINITY : k == 1 ? 5.0f : gt_rand_uniform(-2.0f, 2.0f);
    }
    r->p.logit_bias = nb ? r->bias : NULL;
    r->p.n_logit_bias = (uint32_t)nb;
    size_t np = (size_t)gt_rand_int(49), ng = (size_t)gt_rand_int(33);
    int span = gt_rand_int(2) ? V : 12; /* repeats when 12 */
    for (size_t j = 0; j < np; j++)
        r->prompt[j] = (int32_t)gt_rand_int(span);
    for (size_t j = 0; j < ng; j++)
        r->gen[j] = (int32_t)gt_rand_int(span);
    r->p.n_logprobs = gt_rand_int(3) == 0 ? (int32_t)gt_rand_int(21) : -1;
    r->p.logprobs_mode = gt_rand_int(2) ? IFD_LOGPROBS_RAW : IFD_LOGPROBS_PROCESSED;
    if (gt_rand_int(4) == 0) {
        int32_t *ids = malloc(sizeof *ids * (size_t)V);
        size_t n = 0;
        bool one = gt_rand_int(4) == 0;
        for (int32_t i = 0; i < V && !(one && n); i++)
            if (gt_rand_int(one ? (uint32_t)V : 3) == 0 || (i == V - 1 && !n))
                ids[n++] = i;
        GT_EXPECT(ifd_sampling_allowed_mask(ids, n, V, &r->allowed) == 0, "allowed mask");
        r->p.allowed = r->allowed;
        free(ids);
    }
    r->pd = r->p;
    if (st && gt_rand_int(3) == 0) {
        ng = grammar_history(st, V, r->gen, (size_t)gt_rand_int(9), gt_rand_int(8) == 0);
        r->p.constraint = new_constraint(st);
        r->pd.constraint = new_constraint(st);
    }
    r->h = (ifd_sampler_history_t){r->prompt, np, r->gen, ng};
    r->pos = np + ng + (uint64_t)gt_rand_int(1000);
    r->score = -1;
}

static void free_params(row_params_t *r)
{
    ifd_constraint_destroy(r->p.constraint);
    ifd_constraint_destroy(r->pd.constraint);
    r->p.constraint = r->pd.constraint = NULL;
    free(r->allowed);
    r->allowed = NULL;
    r->p.allowed = r->pd.allowed = NULL;
}

typedef struct {
    int rows, bad, greedy, masked, allowed, logprobs, raw_modified, scored;
} mix_t;

static void sample_batch(ifd_backend_t *be, ifd_sampler_t *smp, ifd_gstore_t *st, int V, int n,
                         mix_t *mx)
{
    float *l = malloc(sizeof(float) * (size_t)n * V);
    row_params_t *rp = malloc(sizeof *rp * (size_t)n);
    ifd_sample_row_t rows[32];
    int32_t dev[32], host[32];
    ifd_sample_result_t dres[32], hres[32];
    for (int i = 0; i < n; i++) {
        make_row(l + (size_t)i * V, V, (int)gt_rand_int(6));
        make_params(&rp[i], V, st);
        rows[i] = (ifd_sample_row_t){&rp[i].pd, &rp[i].h, rp[i].pos, &dres[i], 0, 0};
        if (i == 3) /* a skipped row keeps its token */
            rows[i] = (ifd_sample_row_t){NULL, NULL, 0, NULL, 0, 0};
        if (i == 5 || i == 9) { /* a scoring row (prompt logprobs) */
            free_params(&rp[i]);
            rp[i].score = (int32_t)gt_rand_int(V);
            rows[i] = (ifd_sample_row_t){NULL, NULL, 0, &dres[i], rp[i].score,
                                         (int32_t)gt_rand_int(21)};
        }
        dev[i] = 12345;
        memset(&dres[i], 0x5a, sizeof dres[i]);
        int rc;
        if (rows[i].params) {
            rc = ifd_sampler_sample(smp, &rp[i].p, l + (size_t)i * V, &rp[i].h, rp[i].pos,
                                    &hres[i]);
            mx->greedy += rp[i].p.temperature < IFD_SAMPLER_GREEDY_TEMP;
            mx->masked += rp[i].p.constraint != NULL;
            mx->allowed += rp[i].p.allowed != NULL;
            mx->logprobs += rp[i].p.n_logprobs >= 0;
            mx->raw_modified += rp[i].p.n_logprobs >= 0 &&
                                rp[i].p.logprobs_mode == IFD_LOGPROBS_RAW &&
                                (rp[i].p.n_logit_bias || rp[i].p.constraint || rp[i].p.allowed);
        } else if (rows[i].result) {
            rc = ifd_sampler_logprobs(smp, l + (size_t)i * V, rows[i].score_token,
                                      rows[i].score_top, &hres[i]);
            mx->scored++;
        } else {
            rc = 0;
        }
        GT_EXPECT(rc == 0 || rc == IFD_EINVAL, "host sampler: %s", ifd_strerror(rc));
        host[i] = rc ? -1 : hres[i].token;
        mx->bad += rc != 0;
    }
    mx->rows += n;
    ifd_act_t a;
    int rc = be->ops->act_alloc(be, &a, IFD_DTYPE_F32, n, V);
    if (rc == 0)
        rc = be->ops->upload(be, a.data, l, sizeof(float) * (size_t)n * V);
    if (rc == 0)
        rc = be->ops->sample(be, dev, &a, rows, n);
    GT_EXPECT(rc == 0, "device sample: %s", ifd_strerror(rc));
    for (int i = 0; i < n && rc == 0; i++) {
        if (!rows[i].params) {
            GT_EXPECT(dev[i] == 12345, "skipped row %d written (%d)", i, dev[i]);
            if (rows[i].result)
                GT_EXPECT(host[i] < 0 ? dres[i].token == -1 : same_logprobs(&dres[i], &hres[i]),
                          "V %d scoring row %d (token %d, top %d): device %d lp %g rank %d, "
                          "host %d lp %g rank %d", V, i, rows[i].score_token, rows[i].score_top,
                          dres[i].token, (double)dres[i].logprob, dres[i].rank, host[i],
                          (double)hres[i].logprob, hres[i].rank);
            continue;
        }
        if (rp[i].p.n_logprobs >= 0)
            GT_EXPECT(host[i] < 0 ? dres[i].token == -1 : same_logprobs(&dres[i], &hres[i]),
                      "V %d row %d: logprobs (n %d, mode %d, grammar %d): device token %d lp %g "
                      "rank %d top0 %d, host %d lp %g rank %d top0 %d",
                      V, i, rp[i].p.n_logprobs, (int)rp[i].p.logprobs_mode,
                      rp[i].p.constraint != NULL, dres[i].token, (double)dres[i].logprob,
                      dres[i].rank, dres[i].top_ids[0], hres[i].token, (double)hres[i].logprob,
                      hres[i].rank, hres[i].top_ids[0]);
        GT_EXPECT(dev[i] == host[i],
                  "V %d row %d: device %d, host %d (T %g k %d p %g min_p %g rep %g freq %g "
                  "pres %g, %u biases, history %zu + %zu, grammar %d, allowed %d)",
                  V, i, dev[i], host[i], (double)rp[i].p.temperature, rp[i].p.top_k,
                  (double)rp[i].p.top_p, (double)rp[i].p.min_p, (double)rp[i].p.repetition_penalty,
                  (double)rp[i].p.frequency_penalty, (double)rp[i].p.presence_penalty,
                  rp[i].p.n_logit_bias, rp[i].h.n_prompt, rp[i].h.n_generated,
                  rp[i].p.constraint != NULL, rp[i].p.allowed != NULL);
    }
    if (a.data)
        be->ops->act_free(be, &a);
    for (int i = 0; i < n; i++)
        free_params(&rp[i]);
    free(l);
    free(rp);
}

static void test_sampling(void)
{
    ifd_backend_t *be = NULL;
    char err[256] = "";
    int rc = ifd_backend_cuda_create(&be, 0, false, err, sizeof err);
    GT_EXPECT(rc == 0, "backend: %s %s", ifd_strerror(rc), err);
    if (rc)
        return;
    static const int vocabs[] = {101, 1000, 3001};
    const int batches = gt_small() ? 4 : 40;
    mix_t mx = {0};
    for (int v = 0; v < 3; v++) {
        ifd_sampler_t *smp = NULL;
        ifd_vocab_t *voc = test_vocab(vocabs[v]);
        ifd_gstore_t *st = NULL;
        GT_EXPECT(voc && ifd_gstore_create(voc, &st) == 0, "grammar store");
        GT_EXPECT(ifd_sampler_create(vocabs[v], &smp) == 0, "sampler");
        for (int b = 0; b < batches && smp && st && gt_case_failures() == 0; b++)
            sample_batch(be, smp, st, vocabs[v], 16, &mx);
        ifd_sampler_destroy(smp);
        ifd_gstore_destroy(st);
        ifd_vocab_destroy(voc);
    }
    gt_note("%d rows (%d greedy, %d with a grammar, %d with an allowed set, %d with logprobs of "
            "which %d raw of a changed row, %d scoring rows, %d refused by both)",
            mx.rows, mx.greedy, mx.masked, mx.allowed, mx.logprobs, mx.raw_modified, mx.scored,
            mx.bad);
    GT_EXPECT(mx.bad > 0 && mx.greedy > 0 && mx.masked > 0 && mx.allowed > 0 && mx.logprobs > 0 &&
                  mx.raw_modified > 0 && mx.scored > 0,
              "the mix lacks refused, greedy, grammar, allowed-set, logprob or scoring rows");
    be->ops->destroy(be);
}

/* ---- 3. steady state ------------------------------------------------------------- */

static void test_steady_state(void)
{
    ifd_model_config_t c = tiny();
    gt_side_t s = {0};
    if (side_open(&s, &c, true) != 0) {
        gt_side_close(&s);
        return;
    }
    tables_init();
    float *lg = malloc(sizeof(float) * NSEQ * c.n_vocab);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.temperature = 0.8f;
    p.top_k = 20;
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.3f;
    const ifd_logit_bias_t bias[2] = {{3, 1.0f}, {7, -INFINITY}};
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    static int32_t hist[NSEQ][128];
    ifd_sampler_history_t h[NSEQ];
    ifd_sample_row_t rows[NSEQ];
    ifd_sampling_params_t pr[NSEQ];
    ifd_sample_result_t res[NSEQ];
    int32_t tok[NSEQ];
    int n_masked = 0;
    ifd_vocab_t *voc = test_vocab((int)c.n_vocab);
    ifd_gstore_t *gst = NULL;
    GT_EXPECT(voc && ifd_gstore_create(voc, &gst) == 0, "grammar store");
    ifd_constraint_t *kc[NSEQ] = {0};
    for (int i = 0; i < NSEQ && gst; i++)
        kc[i] = new_constraint(gst);
    /* warm-up: a prefill, then every bucket once; measured: the same
     * decode shapes again, contexts growing (30 .. 60 positions) */
    static const int sizes[] = {8, 1, 2, 3, 4, 5, 6, 7};
    step_t st;
    ifd_batch_t b = make_step(&st, &c, 0, NSEQ, 20);
#ifdef IFD_CUDA_EMU
    ifd_emu_counters_t cs, c0 = {0}, c1;
    ifd_emu_counters(&cs);
#endif
    int rc = ifd_model_forward(s.m, &b, s.kv, lg);
    GT_EXPECT(rc == 0, "prefill: %s", ifd_strerror(rc));
    for (int round = 0; round < 4 && rc == 0; round++) {
#ifdef IFD_CUDA_EMU
        if (round == 1)
            ifd_emu_counters(&c0);
#endif
        for (int k = 0; k < 8 && rc == 0; k++) {
            const int n = sizes[k];
            b = make_step(&st, &c, k, n, 1);
            for (int i = 0; i < n; i++) {
                int sq = (k + i) % NSEQ;
                for (int j = 0; j < g_len[sq]; j++)
                    hist[sq][j] = (int32_t)((j * 7 + sq) % 16); /* 16 distinct ids at most:
                                                                  * bounded from the start */
                h[i] = (ifd_sampler_history_t){hist[sq], 10, hist[sq] + 10,
                                               (size_t)g_len[sq] - 10};
                /* every third sequence under a grammar ("a" and "b" so far:
                 * ids 2 and 3), every other with logprobs, raw or processed */
                pr[i] = p;
                pr[i].seed = (uint64_t)sq;
                if (sq % 3 == 1) {
                    for (int j = 10; j < g_len[sq]; j++)
                        hist[sq][j] = 2 + j % 2;
                    pr[i].constraint = kc[sq];
                }
                if (sq % 2 == 0) {
                    pr[i].n_logprobs = sq == 0 ? 20 : sq;
                    pr[i].logprobs_mode = sq % 4 ? IFD_LOGPROBS_RAW : IFD_LOGPROBS_PROCESSED;
                }
                rows[i] = (ifd_sample_row_t){&pr[i], &h[i], (uint64_t)g_len[sq], &res[i], 0, 0};
            }
            rc = ifd_model_forward_sample(s.m, &b, s.kv, rows, tok, lg);
            GT_EXPECT(rc == 0, "round %d step %d: %s", round, k, ifd_strerror(rc));
            for (int i = 0; i < n && rc == 0; i++) {
                GT_EXPECT(tok[i] >= 0 && tok[i] < (int32_t)c.n_vocab && tok[i] != 7,
                          "token %d", tok[i]);
                GT_EXPECT(pr[i].n_logprobs < 0 ||
                              (res[i].token == tok[i] && res[i].n_top == pr[i].n_logprobs),
                          "row %d: logprobs of %d (%d alternatives), token %d", i,
                          res[i].token, res[i].n_top, tok[i]);
                n_masked += pr[i].constraint != NULL;
            }
        }
    }
#ifdef IFD_CUDA_EMU
    ifd_emu_counters(&c1);
    gt_note("after warm-up, 24 decode steps: %llu cudaMalloc, %llu cudaHostAlloc, %llu "
            "heuristic queries, %llu graph launches, %llu matmuls",
            (unsigned long long)(c1.mallocs - c0.mallocs),
            (unsigned long long)(c1.host_allocs - c0.host_allocs),
            (unsigned long long)(c1.lt_heuristics - c0.lt_heuristics),
            (unsigned long long)(c1.graph_launches - c0.graph_launches),
            (unsigned long long)(c1.lt_matmuls - c0.lt_matmuls));
    GT_EXPECT(c1.mallocs == c0.mallocs, "%llu cudaMalloc in the steady state",
              (unsigned long long)(c1.mallocs - c0.mallocs));
    GT_EXPECT(c1.host_allocs == c0.host_allocs, "cudaHostAlloc in the steady state");
    GT_EXPECT(c1.lt_heuristics == c0.lt_heuristics, "%llu heuristic queries after warm-up",
              (unsigned long long)(c1.lt_heuristics - c0.lt_heuristics));
    GT_EXPECT(c1.graph_launches - c0.graph_launches == 24, "%llu graph launches, want 24",
              (unsigned long long)(c1.graph_launches - c0.graph_launches));
    /* the heuristic ran once per GEMM shape: the 4 layer projections at
     * the prefill's 160 rows and at buckets 1, 2, 4, 8 (20), the output
     * projection at 8 rows (the prefill's logits, and bucket 8) and 1, 2, 4 */
    GT_EXPECT(c1.lt_heuristics - cs.lt_heuristics == 24, "%llu heuristic queries, want 24",
              (unsigned long long)(c1.lt_heuristics - cs.lt_heuristics));
#endif
    gt_note("%d of the steps' rows under a grammar", n_masked);
    for (int i = 0; i < NSEQ; i++)
        ifd_constraint_destroy(kc[i]);
    ifd_gstore_destroy(gst);
    ifd_vocab_destroy(voc);
    free(lg);
    gt_side_close(&s);
}

/* ---- 4. the engine: device sampling = host sampling ------------------------------- */

#ifdef IFD_CUDA_EMU /* the engine's pool is host memory: the emulator's device memory */
enum { E_REQ = 13, E_OUT = 6, E_PLP = 40, E_BIG = 128 };

typedef struct {
    int32_t out[E_REQ][E_OUT];
    ifd_sample_result_t res[E_REQ][E_OUT];
    int n[E_REQ];
    ifd_sample_result_t plp[E_REQ][E_PLP]; /* [pos] */
    int n_plp[E_REQ];
    /* top alternatives past the inline 20 (the engine's room lives for the
     * call): kept here, the copies' more_* pointing at them */
    int32_t big_ids[E_REQ][E_OUT][E_BIG], pbig_ids[E_REQ][E_PLP][E_BIG];
    float big_lps[E_REQ][E_OUT][E_BIG], pbig_lps[E_REQ][E_PLP][E_BIG];
} e_sink_t;

/* *dst = *src, its alternatives past the inline ones copied to ids / lps. */
static void e_keep(ifd_sample_result_t *dst, const ifd_sample_result_t *src, int32_t *ids,
                   float *lps)
{
    *dst = *src;
    if (src->n_top > IFD_SAMPLER_INLINE_LOGPROBS) {
        const int n = src->n_top < E_BIG ? src->n_top : E_BIG;
        memcpy(ids, src->more_ids, (size_t)n * sizeof *ids);
        memcpy(lps, src->more_logprobs, (size_t)n * sizeof *lps);
        dst->more_ids = ids;
        dst->more_logprobs = lps;
        dst->n_top = n;
    }
}

static void e_on_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    e_sink_t *s = ctx;
    if (s->n[id] < E_OUT) {
        s->out[id][s->n[id]] = res->token;
        e_keep(&s->res[id][s->n[id]], res, s->big_ids[id][s->n[id]], s->big_lps[id][s->n[id]]);
    }
    s->n[id]++;
}

static void e_on_plp(void *ctx, uint64_t id, int32_t pos, const ifd_sample_result_t *res,
                     int32_t n)
{
    e_sink_t *s = ctx;
    for (int32_t i = 0; i < n; i++)
        if (pos + i < E_PLP)
            e_keep(&s->plp[id][pos + i], &res[i], s->pbig_ids[id][pos + i],
                   s->pbig_lps[id][pos + i]);
    s->n_plp[id] += n;
}

/* The device run's rows whose logprob entries pass the inline 20 (a top k
 * or logprob_token_ids, into the result's more_* room), counted as the
 * engine hands them to the model, and those of them that came back as
 * logits to sample on the host (none should). */
static int (*g_fwd_sample)(void *ctx, const ifd_batch_t *b, const ifd_sample_row_t *rows,
                           int32_t *tokens, float *logits);
static int g_big_rows, g_big_host;

static int e_forward_sample(void *ctx, const ifd_batch_t *b, const ifd_sample_row_t *rows,
                            int32_t *tokens, float *logits)
{
    int rc = g_fwd_sample(ctx, b, rows, tokens, logits);
    for (int i = 0; rc == 0 && i < b->n_logits; i++)
        if (rows[i].result && rows[i].result->more_cap > 0 &&
            (rows[i].params ? rows[i].params->n_logprobs >= 0 : true)) {
            g_big_rows++;
            g_big_host += tokens[i] == IFD_MODEL_SAMPLE_ON_HOST;
        }
    return rc;
}

/* Requests 0-5: penalties, bias, sampling mixes (2 with logprobs); 6-9:
 * grammars (6 with processed logprobs, 7 under min_tokens: sampled on the
 * host until then), raw logprobs of a biased, penalized row with prompt
 * logprobs (8), and a grammar with raw logprobs (9); 10: 50 top logprobs
 * and prompt logprobs, past the inline 20; 11: 25 logprob_token_ids (with
 * repeats); 12: the whole vocabulary as top logprobs and prompt logprobs,
 * raw, of a biased row (the raw copy). 10-12 are scored on the device. */
static void run_engine(ifd_model_t *m, bool device, e_sink_t *sink, const ifd_logit_bias_t *bias,
                       ifd_gstore_t *gst)
{
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(ifd_model_config(m));
    kp.dtype = IFD_KV_F16;
    kp.n_blocks = 64;
    kp.n_workers = 1;
    ifd_kvpool_t *pool = NULL;
    GT_EXPECT(ifd_kvpool_create(&kp, &pool) == 0, "pool");
    if (!pool)
        return;
    ifd_engine_model_t em;
    GT_EXPECT(ifd_engine_model_from(&em, m, pool, 0) == 0, "adapter");
    GT_EXPECT(em.forward_sample != NULL, "the CUDA backend samples on the device");
    if (!device) {
        em.forward_sample = NULL;
    } else {
        g_fwd_sample = em.forward_sample;
        g_big_rows = g_big_host = 0;
        em.forward_sample = e_forward_sample;
    }
    ifd_engine_params_t ep = ifd_engine_default_params();
    ifd_engine_callbacks_t cb = {sink, e_on_token, NULL, e_on_plp};
    ifd_engine_t *eng = NULL;
    GT_EXPECT(ifd_engine_create(&eng, &ep, &em, pool, &cb) == 0, "engine");
    static int32_t prompts[E_REQ][40];
    for (int i = 0; eng && i < E_REQ; i++) {
        for (int j = 0; j < 40; j++)
            prompts[i][j] = (int32_t)((i * 13 + j * 5) % 40);
        ifd_engine_request_t r;
        memset(&r, 0, sizeof r);
        r.id = (uint64_t)i;
        r.prompt = prompts[i];
        r.n_prompt = i <= 10 ? 8 + 3 * i : 8 + i;
        r.sampling = ifd_sampling_default_params();
        r.sampling.seed = 1000 + (uint64_t)i;
        r.sampling.temperature = i == 0 ? 0.0f : 0.6f + 0.1f * (float)i;
        r.sampling.top_k = i % 2 ? 0 : 30;
        r.sampling.top_p = i == 3 ? 0.8f : 1.0f;
        r.sampling.min_p = i == 4 ? 0.1f : 0.0f;
        r.sampling.repetition_penalty = i >= 2 ? 1.3f : 1.0f;
        r.sampling.frequency_penalty = i == 5 ? 0.4f : 0.0f;
        r.sampling.presence_penalty = i == 1 ? 0.5f : 0.0f;
        r.sampling.logit_bias = i % 3 == 0 ? bias : NULL;
        r.sampling.n_logit_bias = i % 3 == 0 ? 3 : 0;
        r.sampling.n_logprobs = i == 2 ? 3 : -1;
        r.max_tokens = E_OUT;
        r.ignore_eos = true;
        r.use_cache = true;
        static const int32_t stop[1] = {1}; /* the grammar vocabulary's end token */
        if (i == 6 || i == 7 || i == 9) {
            r.sampling.constraint = new_constraint(gst);
            r.stop_ids = stop;
            r.n_stop_ids = 1;
        }
        if (i == 6) {
            r.sampling.n_logprobs = 5;
            r.sampling.logprobs_mode = IFD_LOGPROBS_PROCESSED;
        }
        if (i == 7)
            r.min_tokens = 3;
        if (i == 8) {
            r.sampling.n_logprobs = 20;
            r.sampling.logit_bias = bias;
            r.sampling.n_logit_bias = 3;
            r.prompt_logprobs = 1 + 4;
        }
        if (i == 9)
            r.sampling.n_logprobs = 2;
        if (i == 10) { /* past the inline top 20 */
            r.sampling.n_logprobs = 50;
            r.prompt_logprobs = 1 + 50;
        }
        static int32_t lp_ids[25];
        for (int j = 0; j < 25; j++)
            lp_ids[j] = j % 6 == 5 ? lp_ids[j - 3] : (int32_t)((j * 37 + 11) % 101);
        if (i == 11) { /* logprob_token_ids: these, in this order */
            r.sampling.n_logprobs = 0;
            r.lp_ids = lp_ids;
            r.n_lp_ids = 25;
        }
        if (i == 12) { /* the vocabulary (bias: i % 3 == 0) */
            r.sampling.n_logprobs = 101;
            r.prompt_logprobs = 1 + 101;
        }
        const int arc = ifd_engine_add(eng, &r);
        GT_EXPECT(arc == 0, "add %d: %s", i, ifd_strerror(arc));
        if (arc)
            ifd_constraint_destroy(r.sampling.constraint); /* not taken over */
    }
    while (eng && !ifd_engine_idle(eng)) {
        int rc = ifd_engine_step(eng, NULL);
        GT_EXPECT(rc >= 0, "step: %s", ifd_strerror(rc));
        if (rc < 0)
            break;
    }
    ifd_engine_destroy(eng);
    ifd_engine_model_free(&em);
    ifd_kvpool_destroy(pool);
}

/* n_valid > 0: the model's logits of ids >= n_valid are -inf (a tokenizer
 * smaller than the vocabulary, model.h), and the bias pushes such ids. */
static void engine_sampling(uint32_t n_valid)
{
    ifd_model_config_t c = tiny();
    c.n_vocab_valid = n_valid;
    /* with ids past the valid ones, a final soft-cap too (tight: the tiny
     * model's logits span a few units), applied on the device */
    c.final_logit_softcap = n_valid ? 1.5f : 0.0f;
    const ifd_logit_bias_t bias[3] = {{5, 2.0f}, {5, 0.5f}, {9, -INFINITY}};
    const ifd_logit_bias_t past[3] = {{80, 100.0f}, {5, 2.0f}, {100, 50.0f}};
    gt_side_t s = {0};
    ifd_vocab_t *voc = test_vocab((int)c.n_vocab);
    ifd_gstore_t *gst = NULL;
    GT_EXPECT(voc && ifd_gstore_create(voc, &gst) == 0, "grammar store");
    if (gst && side_open(&s, &c, true) == 0) {
        static e_sink_t dev, host;
        memset(&dev, 0, sizeof dev);
        memset(&host, 0, sizeof host);
        run_engine(s.m, true, &dev, n_valid ? past : bias, gst);
        run_engine(s.m, false, &host, n_valid ? past : bias, gst);
        int n_lp = 0;
        for (int i = 0; i < E_REQ; i++) {
            const bool grammar = i == 6 || i == 7 || i == 9; /* may stop early */
            GT_EXPECT(dev.n[i] == host.n[i] && (grammar ? dev.n[i] >= 1 : dev.n[i] == E_OUT),
                      "request %d: %d / %d tokens", i, dev.n[i], host.n[i]);
            for (int t = 0; t < dev.n[i] && t < E_OUT; t++) {
                GT_EXPECT(dev.out[i][t] == host.out[i][t], "request %d token %d: device %d, "
                          "host %d", i, t, dev.out[i][t], host.out[i][t]);
                if (i == 2 || i == 6 || i == 8 || i == 9 || i >= 10) {
                    const int want_top = i == 10 ? 50 : i == 11 ? 25 : i == 12 ? 101 : -1;
                    GT_EXPECT(want_top < 0 || dev.res[i][t].n_top == want_top,
                              "request %d: %d top, want %d", i, dev.res[i][t].n_top, want_top);
                    n_lp++;
                    GT_EXPECT(same_logprobs(&dev.res[i][t], &host.res[i][t]),
                              "request %d token %d: logprobs differ (device %d %g rank %d, host "
                              "%d %g rank %d)", i, t, dev.res[i][t].token,
                              (double)dev.res[i][t].logprob, dev.res[i][t].rank,
                              host.res[i][t].token, (double)host.res[i][t].logprob,
                              host.res[i][t].rank);
                }
                GT_EXPECT(!n_valid || (dev.out[i][t] >= 0 && dev.out[i][t] < (int)n_valid),
                          "request %d token %d: id %d past the %u valid ones", i, t,
                          dev.out[i][t], n_valid);
            }
        }
        /* prompt logprobs: positions 1 .. n_prompt - 1 of request 8 */
        const int np8 = 8 + 3 * 8;
        GT_EXPECT(dev.n_plp[8] == np8 - 1 && host.n_plp[8] == np8 - 1,
                  "prompt logprobs: %d / %d rows", dev.n_plp[8], host.n_plp[8]);
        for (int p = 1; p < np8 && p < E_PLP; p++)
            GT_EXPECT(same_logprobs(&dev.plp[8][p], &host.plp[8][p]),
                      "prompt logprob %d: device %d %g rank %d, host %d %g rank %d", p,
                      dev.plp[8][p].token, (double)dev.plp[8][p].logprob, dev.plp[8][p].rank,
                      host.plp[8][p].token, (double)host.plp[8][p].logprob, host.plp[8][p].rank);
        /* request 10's 50 prompt alternatives and request 12's 101 (the
         * vocabulary): scored on the device, as the host-only run scores them */
        const int np10 = 8 + 3 * 10;
        GT_EXPECT(dev.n_plp[10] == np10 - 1 && host.n_plp[10] == np10 - 1,
                  "prompt logprobs (k 50): %d / %d rows", dev.n_plp[10], host.n_plp[10]);
        for (int p = 1; p < np10 && p < E_PLP; p++)
            GT_EXPECT(dev.plp[10][p].n_top == 50 &&
                          same_logprobs(&dev.plp[10][p], &host.plp[10][p]),
                      "prompt logprob %d (k 50): device %d top, host %d", p, dev.plp[10][p].n_top,
                      host.plp[10][p].n_top);
        const int np12 = 8 + 12;
        GT_EXPECT(dev.n_plp[12] == np12 - 1 && host.n_plp[12] == np12 - 1,
                  "prompt logprobs (k V): %d / %d rows", dev.n_plp[12], host.n_plp[12]);
        for (int p = 1; p < np12 && p < E_PLP; p++)
            GT_EXPECT(dev.plp[12][p].n_top == 101 &&
                          same_logprobs(&dev.plp[12][p], &host.plp[12][p]),
                      "prompt logprob %d (k V): device %d top, host %d", p, dev.plp[12][p].n_top,
                      host.plp[12][p].n_top);
        /* rows past the inline 20: request 10's, 11's and 12's tokens and
         * the prompt rows of 10 and 12, all scored on the device */
        const int want_big = 3 * E_OUT + (np10 - 1) + (np12 - 1);
        GT_EXPECT(g_big_rows >= want_big && g_big_host == 0,
                  "rows past the inline logprobs: %d on the device (want %d), %d to the host",
                  g_big_rows - g_big_host, want_big, g_big_host);
        gt_note("%d sampled tokens with logprobs and %d prompt logprob rows compared; %d rows "
                "with more than 20 entries scored on the device",
                n_lp, np8 - 1 + np10 - 1 + np12 - 1, g_big_rows);
    }
    gt_side_close(&s);
    ifd_gstore_destroy(gst);
    ifd_vocab_destroy(voc);
}

static void test_engine_sampling(void)
{
    engine_sampling(0);
}

static void test_engine_vocab_valid(void)
{
    engine_sampling(60);
}

/* ---- 5. buffers for the largest bucket >= max_seqs -------------------------------- */

/* The device memory a prefill of 2 sequences and 3 decode steps of them
 * take (cudaMemGetInfo: the emulator counts what the process holds), with
 * ifd_model_set_max_seqs(max_seqs) (0: not called); the decode logits into
 * lg [3][2][V]. */
static size_t step_bytes(int max_seqs, float *lg)
{
    ifd_model_config_t c = tiny();
    gt_side_t s = {0};
    size_t used = 0;
    if (side_open(&s, &c, true) == 0) {
        if (max_seqs)
            ifd_model_set_max_seqs(s.m, max_seqs);
        tables_init();
        size_t f0 = 0, f1 = 0, tot = 0;
        cudaMemGetInfo(&f0, &tot);
        step_t st;
        ifd_batch_t b = make_step(&st, &c, 0, 2, 5);
        int rc = ifd_model_forward(s.m, &b, s.kv, lg);
        for (int k = 0; k < 3 && rc == 0; k++) {
            b = make_step(&st, &c, 0, 2, 1);
            rc = ifd_model_forward(s.m, &b, s.kv, lg + (size_t)k * 2 * c.n_vocab);
        }
        GT_EXPECT(rc == 0, "steps: %s", ifd_strerror(rc));
        cudaMemGetInfo(&f1, &tot);
        used = f0 > f1 ? f0 - f1 : 0;
    }
    gt_side_close(&s);
    return used;
}

static void test_max_seqs_buffers(void)
{
    const ifd_model_config_t c = tiny();
    float *la = malloc(sizeof(float) * 6 * c.n_vocab), *lb = malloc(sizeof(float) * 6 * c.n_vocab);
    const size_t all = step_bytes(0, la), two = step_bytes(2, lb);
    gt_note("decode buffers: %zu bytes for 256 rows, %zu with max_seqs 2", all, two);
    /* at least the logits (f32) and the final-norm inputs (2 x f32 E) of
     * 256 - 16 rows (16: the smallest capacity) */
    const size_t saved = (size_t)(256 - 16) * (c.n_vocab + 2 * c.n_embd) * 4;
    GT_EXPECT(all >= two + saved, "max_seqs 2 saves %zd bytes, want >= %zu",
              (ssize_t)(all - two), saved);
    GT_EXPECT(memcmp(la, lb, sizeof(float) * 6 * c.n_vocab) == 0,
              "the logits depend on the buffer sizes");
    free(la);
    free(lb);
}

/* ---- 6. the pool probe's warm-up grows the device sampler ------------------------- */

static int free_mem(void *ctx, uint64_t *out)
{
    (void)ctx;
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess)
        return IFD_ECUDA;
    *out = f;
    return 0;
}

/* Opens a side for c (graphs on) and runs the probe's warm-up on it
 * (max_batched_tokens 16, max_seqs 4, context 64), then resets the step
 * tables. 0 (with *r filled), or non-zero with the side closed. */
static int probe_side(gt_side_t *s, const ifd_model_config_t *c, ifd_kvprobe_result_t *r)
{
    if (side_open(s, c, true) != 0) {
        gt_side_close(s);
        return -1;
    }
    const ifd_kvprobe_params_t wp = {.max_batched_tokens = 16, .max_seqs = 4, .max_ctx = 64,
                                     .block_size = BS, .kv_dtype = IFD_KV_F16};
    char err[256] = "";
    int rc = ifd_kvprobe_warmup(s->m, &wp, free_mem, NULL, r, err, sizeof err);
    GT_EXPECT(rc == 0, "warm-up: %s", err);
    tables_init();
    return 0;
}

/* After ifd_kvprobe_warmup (max_seqs 4), a decode step of 4 sequences whose
 * every row asks for 20 raw logprobs of a row that a bias and the penalties
 * change allocates nothing: what the pool is sized after includes the
 * sampler's raw copies (4 rows of V floats), which it would otherwise
 * cudaMalloc from memory the pool was given. */
static void test_probe_grows_sampler(void)
{
    ifd_model_config_t c = tiny();
    gt_side_t s = {0};
    ifd_kvprobe_result_t r;
    if (probe_side(&s, &c, &r) != 0)
        return;
    int rc = gt_case_failures() ? IFD_EINVAL : 0;
    float *lg = malloc(sizeof(float) * 4 * c.n_vocab);
    step_t st;
    ifd_batch_t b = make_step(&st, &c, 0, 4, 3);
    if (rc == 0 && (rc = ifd_model_forward(s.m, &b, s.kv, lg)) != 0)
        GT_EXPECT(0, "prefill: %s", ifd_strerror(rc));
    ifd_sampling_params_t p = ifd_sampling_default_params();
    const ifd_logit_bias_t bias = {5, 2.0f};
    p.logit_bias = &bias;
    p.n_logit_bias = 1;
    p.presence_penalty = 0.4f;
    p.n_logprobs = 20;
    p.logprobs_mode = IFD_LOGPROBS_RAW;
    static const int32_t ids[] = {1, 2, 3, 4, 5, 6};
    const ifd_sampler_history_t h = {ids, 3, ids + 3, 3};
    ifd_sample_row_t rows[4];
    ifd_sample_result_t res[4];
    int32_t tok[4];
    for (int i = 0; i < 4; i++)
        rows[i] = (ifd_sample_row_t){&p, &h, 3, &res[i], 0, 0};
    ifd_emu_counters_t c0, c1;
    ifd_emu_counters(&c0);
    b = make_step(&st, &c, 0, 4, 1);
    if (rc == 0)
        rc = ifd_model_forward_sample(s.m, &b, s.kv, rows, tok, lg);
    ifd_emu_counters(&c1);
    GT_EXPECT(rc == 0, "decode: %s", ifd_strerror(rc));
    for (int i = 0; i < 4 && rc == 0; i++)
        GT_EXPECT(res[i].token == tok[i] && res[i].n_top == 20, "row %d: %d top of token %d",
                  i, res[i].n_top, res[i].token);
    GT_EXPECT(c1.mallocs == c0.mallocs, "%llu cudaMalloc after the warm-up",
              (unsigned long long)(c1.mallocs - c0.mallocs));
    gt_note("warm-up: activations %llu bytes, %d graphs",
            (unsigned long long)r.activation_bytes, r.n_graphs);
    free(lg);
    gt_side_close(&s);
}

/* A model with sliding-window layers, whose local layers the daemon keeps in
 * a pool of their own: the probe's warm-up brings local tables, as the
 * serving worker's steps do, so what it measured is what serves — a prefill
 * and a decode step with local tables after it allocate nothing (without
 * them in the warm-up, the first such step reallocates every batch buffer).
 * Its graphs are not replayed: they were recorded over the warm-up's
 * scratch KV, and a serving step records its own at the same cost. */
static void test_probe_local_tables(void)
{
    ifd_model_config_t c = gt_tiny_config(true, 2);
    gt_side_t s = {0};
    ifd_kvprobe_result_t r;
    if (probe_side(&s, &c, &r) != 0)
        return;
    int rc = gt_case_failures() ? IFD_EINVAL : 0;
    float *lg = malloc(sizeof(float) * 4 * c.n_vocab);
    ifd_emu_counters_t c0, c1;
    ifd_emu_counters(&c0);
    step_t st;
    for (int q = 3; q >= 1 && rc == 0; q -= 2) { /* a prefill of 3 tokens each, a decode */
        ifd_batch_t b = make_step(&st, &c, 0, 4, q);
        b.local_block_tables = b.block_tables; /* the same ids: a valid local pool */
        b.local_slot = b.slot;
        rc = ifd_model_forward(s.m, &b, s.kv, lg);
        GT_EXPECT(rc == 0, "step of %d tokens each: %s", q, ifd_strerror(rc));
    }
    ifd_emu_counters(&c1);
    GT_EXPECT(c1.mallocs == c0.mallocs, "%llu cudaMalloc after the warm-up",
              (unsigned long long)(c1.mallocs - c0.mallocs));
    free(lg);
    gt_side_close(&s);
}

/* Speculative decoding's verification rows (kvprobe.h, spec_rows): after
 * the warm-up (max_batched_tokens 144, max_seqs 8, context 128), the step
 * with the most logits rows the engine can make — a prefill chunk of 70
 * tokens with 64 prompt-logprob rows beside 7 decodes, 4 of them verifying
 * 16 proposals each (17 rows each, downloaded: 136 rows in all) — allocates
 * nothing when the warm-up brought IFD_ENGINE_SPEC_ROWS verification rows;
 * without them (72 rows at most: the model's logits buffers of 128 rows)
 * the same step cudaMallocs from memory the pool was given. */
static void test_probe_spec_rows(void)
{
    ifd_model_config_t c = tiny();
    static const int q_of[NSEQ] = {70, 17, 17, 17, 17, 1, 1, 1};
    float *lg = malloc(sizeof(float) * 140 * c.n_vocab);
    for (int with = 1; with >= 0 && gt_case_failures() == 0; with--) {
        gt_side_t s = {0};
        if (side_open(&s, &c, true) != 0) {
            gt_side_close(&s);
            break;
        }
        const ifd_kvprobe_params_t wp = {.max_batched_tokens = 144,
                                         .max_seqs = NSEQ,
                                         .max_ctx = MAXB * BS,
                                         .block_size = BS,
                                         .kv_dtype = IFD_KV_F16,
                                         .spec_rows = with ? IFD_ENGINE_SPEC_ROWS : 0};
        ifd_kvprobe_result_t r;
        char err[256] = "";
        int rc = ifd_kvprobe_warmup(s.m, &wp, free_mem, NULL, &r, err, sizeof err);
        GT_EXPECT(rc == 0, "warm-up: %s", err);
        tables_init();
        step_t st;
        ifd_batch_t b = make_step(&st, &c, 0, NSEQ, 40); /* every sequence's first 40 */
        if (rc == 0 && (rc = ifd_model_forward(s.m, &b, s.kv, lg)) != 0)
            GT_EXPECT(0, "prefill: %s", ifd_strerror(rc));
        ifd_sampling_params_t sp = ifd_sampling_default_params();
        ifd_sample_row_t rows[140];
        int32_t tok[140];
        st.n_tok = st.nl = 0;
        for (int k = 0; k < NSEQ; k++) {
            for (int j = 0; j < q_of[k]; j++) {
                const int p = g_len[k] + j, t = st.n_tok++;
                st.tok[t] = (int32_t)((p * 31 + k * 17 + 7) % (int)c.n_vocab);
                st.pos[t] = p;
                st.seq[t] = k;
                st.slot[t] = (int64_t)g_tables[k][p / BS] * BS + p % BS;
                const bool verify = k > 0 && q_of[k] > 1, last = j == q_of[k] - 1;
                if (verify || last || (k == 0 && j < IFD_ENGINE_PLP_ROWS)) {
                    /* device-sampled: a plain decode's row and the chunk's last */
                    rows[st.nl] = (ifd_sample_row_t){.params = last && !verify ? &sp : NULL};
                    st.rows[st.nl++] = t;
                }
            }
            g_len[k] += q_of[k];
        }
        GT_EXPECT(st.nl == 136 && st.n_tok == 141, "%d rows, %d tokens", st.nl, st.n_tok);
        b.n_tok = st.n_tok;
        b.n_logits = st.nl;
        ifd_emu_counters_t c0, c1;
        ifd_emu_counters(&c0);
        if (rc == 0)
            rc = ifd_model_forward_sample(s.m, &b, s.kv, rows, tok, lg);
        ifd_emu_counters(&c1);
        GT_EXPECT(rc == 0, "the verification step: %s", ifd_strerror(rc));
        if (with)
            GT_EXPECT(c1.mallocs == c0.mallocs, "%llu cudaMalloc after the warm-up",
                      (unsigned long long)(c1.mallocs - c0.mallocs));
        else /* the test can fail: this step does need the rows */
            GT_EXPECT(c1.mallocs > c0.mallocs, "no cudaMalloc without the verification rows");
        gt_note("warm-up %s verification rows: activations %llu bytes; the step: %llu cudaMalloc",
                with ? "with" : "without", (unsigned long long)r.activation_bytes,
                (unsigned long long)(c1.mallocs - c0.mallocs));
        gt_side_close(&s);
    }
    free(lg);
}

/* The router's max_logprobs (kvprobe.h, step 2c): after a warm-up told
 * max_logprobs -1 (the vocabulary; max_batched_tokens 16, max_seqs 4), the
 * step that downloads the most alternatives — a prefill chunk of 13 tokens
 * whose first 12 rows score the next token with the vocabulary's
 * alternatives (prompt logprobs) beside 3 decodes sampling with as many
 * (16 rows of V entries) — allocates nothing, and every row comes back
 * whole; warmed up for the default (20) alternatives, the same step
 * cudaMallocs its download buffer (the test can fail). */
static void test_probe_logprobs(void)
{
    ifd_model_config_t c = tiny();
    const int32_t V = (int32_t)c.n_vocab;
    enum { ROWS = 16 };
    float *lg = malloc(sizeof(float) * ROWS * (size_t)V);
    int32_t *more_ids = malloc(sizeof(int32_t) * ROWS * (size_t)V);
    float *more_lps = malloc(sizeof(float) * ROWS * (size_t)V);
    for (int with = 1; with >= 0 && gt_case_failures() == 0; with--) {
        gt_side_t s = {0};
        if (side_open(&s, &c, true) != 0) {
            gt_side_close(&s);
            break;
        }
        const ifd_kvprobe_params_t wp = {.max_batched_tokens = ROWS,
                                         .max_seqs = 4,
                                         .max_ctx = 64,
                                         .block_size = BS,
                                         .kv_dtype = IFD_KV_F16,
                                         .max_logprobs = with ? -1 : 0};
        ifd_kvprobe_result_t r;
        char err[256] = "";
        int rc = ifd_kvprobe_warmup(s.m, &wp, free_mem, NULL, &r, err, sizeof err);
        GT_EXPECT(rc == 0, "warm-up: %s", err);
        tables_init();
        step_t st;
        ifd_batch_t b = make_step(&st, &c, 1, 3, 4); /* sequences 1-3: 4 tokens each */
        if (rc == 0 && (rc = ifd_model_forward(s.m, &b, s.kv, lg)) != 0)
            GT_EXPECT(0, "prefill: %s", ifd_strerror(rc));
        ifd_sampling_params_t sp = ifd_sampling_default_params();
        sp.temperature = 0.0f;
        sp.n_logprobs = V;
        ifd_sample_row_t rows[ROWS];
        ifd_sample_result_t res[ROWS];
        int32_t tok[ROWS];
        st.n_tok = st.nl = 0;
        st.n_seqs = 4;
        for (int k = 0; k < 4; k++) {
            memcpy(st.bt + k * MAXB, g_tables[k], sizeof g_tables[k]);
            const int q = k == 0 ? 13 : 1;
            for (int j = 0; j < q; j++) {
                const int p = g_len[k] + j, t = st.n_tok++;
                st.tok[t] = (int32_t)((p * 31 + k * 17 + 7) % (int)V);
                st.pos[t] = p;
                st.seq[t] = k;
                st.slot[t] = (int64_t)g_tables[k][p / BS] * BS + p % BS;
                const int i = st.nl;
                res[i] = (ifd_sample_result_t){.more_ids = more_ids + (size_t)i * V,
                                               .more_logprobs = more_lps + (size_t)i * V,
                                               .more_cap = V};
                if (j == q - 1)
                    rows[i] = (ifd_sample_row_t){.params = &sp, .result = &res[i]};
                else /* a prompt row: the next token's logprob and V alternatives */
                    rows[i] = (ifd_sample_row_t){.result = &res[i], .score_top = V};
                st.rows[st.nl++] = t;
            }
            g_len[k] += q;
        }
        for (int i = 0; i < 12; i++)
            rows[i].score_token = st.tok[i + 1];
        b = (ifd_batch_t){st.n_tok, st.tok, st.pos,  st.seq, st.slot, 4,    st.bt,
                          MAXB,     st.nl,  st.rows, NULL,   NULL,    NULL, NULL};
        GT_EXPECT(st.nl == ROWS && st.n_tok == ROWS, "%d rows, %d tokens", st.nl, st.n_tok);
        ifd_emu_counters_t c0, c1;
        ifd_emu_counters(&c0);
        if (rc == 0)
            rc = ifd_model_forward_sample(s.m, &b, s.kv, rows, tok, lg);
        ifd_emu_counters(&c1);
        GT_EXPECT(rc == 0, "the step: %s", ifd_strerror(rc));
        if (with)
            GT_EXPECT(c1.mallocs == c0.mallocs, "%llu cudaMalloc after the warm-up",
                      (unsigned long long)(c1.mallocs - c0.mallocs));
        else
            GT_EXPECT(c1.mallocs > c0.mallocs, "no cudaMalloc without step 2c");
        /* every row came back whole: its token, then the vocabulary once, most
         * probable first (device = host on such rows: test_engine_sampling) */
        char *seen = malloc((size_t)V);
        for (int i = 0; i < ROWS && rc == 0 && seen && gt_case_failures() == 0; i++) {
            const int32_t t = rows[i].params ? tok[i] : rows[i].score_token;
            GT_EXPECT(res[i].n_top == V && res[i].token == t, "row %d: %d of token %d (want %d)", i,
                      res[i].n_top, res[i].token, t);
            memset(seen, 0, (size_t)V);
            for (int e = 0; e < V && gt_case_failures() == 0; e++) {
                const int32_t id = res[i].more_ids[e];
                GT_EXPECT(id >= 0 && id < V && !seen[id] && res[i].more_logprobs[e] <= 0 &&
                              (e == 0 || res[i].more_logprobs[e] <= res[i].more_logprobs[e - 1]),
                          "row %d entry %d: id %d logprob %g", i, e, id, res[i].more_logprobs[e]);
                if (id >= 0 && id < V)
                    seen[id] = 1;
            }
        }
        free(seen);
        gt_note("warm-up %s max_logprobs -1: the step's cudaMalloc %llu", with ? "with" : "without",
                (unsigned long long)(c1.mallocs - c0.mallocs));
        gt_side_close(&s);
    }
    free(lg);
    free(more_ids);
    free(more_lps);
}

/* The POOL step with a draft model (speculative decoding, kvprobe.h): the
 * draft's warm-up runs at its limits and records its decode graphs (in
 * the draft's set of keys), each block costs
 * the model's K/V plus the draft's, and the model's share of the usable
 * bytes leaves room for the draft's blocks; at a fraction where the model
 * alone gets a block, the model with its draft gets none and the error
 * names the draft. */
static void test_probe_counts_draft(void)
{
    ifd_model_config_t c = tiny(), dc = tiny();
    dc.n_head_kv = 1;
    gt_side_t s = {0};
    if (side_open(&s, &c, true) != 0) {
        gt_side_close(&s);
        return;
    }
    char err[768] = "";
    ifd_model_t *draft = NULL;
    int rc = ifd_model_load_random(&draft, &dc, 11, s.be, err, sizeof err);
    GT_EXPECT(rc == 0, "draft: %s", err);
    size_t f = 0, t = 0;
    GT_EXPECT(cudaMemGetInfo(&f, &t) == cudaSuccess, "cudaMemGetInfo");
    ifd_kvprobe_size_params_t sp = {.warm = {.max_batched_tokens = 16,
                                             .max_seqs = 4,
                                             .max_ctx = 64,
                                             .block_size = BS,
                                             .kv_dtype = IFD_KV_F16},
                                    .fraction = 0.5,
                                    .total_bytes = t};
    ifd_kvprobe_size_t a, b;
    if (rc == 0 && (rc = ifd_kvprobe_size(s.m, &sp, free_mem, NULL, &a, err, sizeof err)))
        GT_EXPECT(0, "probe: %s", err);
    sp.draft = draft;
    if (rc == 0 && (rc = ifd_kvprobe_size(s.m, &sp, free_mem, NULL, &b, err, sizeof err)))
        GT_EXPECT(0, "probe with the draft: %s", err);
    if (rc == 0) {
        /* f16: 2 layers x K and V x 16 positions x heads x 64 dims x 2 bytes */
        GT_EXPECT(b.block_bytes == 2u * 2 * BS * 2 * 64 * 2 &&
                      b.draft_block_bytes == 2u * 2 * BS * 1 * 64 * 2,
                  "block bytes %llu + %llu", (unsigned long long)b.block_bytes,
                  (unsigned long long)b.draft_block_bytes);
        /* the draft's decode graphs recorded: its buckets up to 4
         * sequences (1, 2, 4) at the context bucket of 64 (256) */
        GT_EXPECT(b.draft_warm.prefill_steps > 0 && b.draft_warm.n_graphs == 3 &&
                      b.draft_warm.activation_bytes > 0,
                  "draft warm-up: %d prefill steps, %d graphs (the model's %d, alone %d), %llu "
                  "activation bytes, %llu graph bytes",
                  b.draft_warm.prefill_steps, b.draft_warm.n_graphs, b.warm.n_graphs,
                  a.warm.n_graphs, (unsigned long long)b.draft_warm.activation_bytes,
                  (unsigned long long)b.draft_warm.graph_bytes);
        GT_EXPECT(b.draft_weight_bytes == ifd_model_weight_bytes(draft), "draft weights");
        GT_EXPECT(b.n_blocks > 0 && b.n_blocks < a.n_blocks &&
                      b.usable_bytes >= (uint64_t)b.n_blocks * b.block_bytes &&
                      b.usable_bytes + (uint64_t)b.n_blocks * b.draft_block_bytes <=
                          a.usable_bytes + b.block_bytes + b.draft_block_bytes,
                  "blocks %lld alone, %lld with the draft (usable %llu, %llu)",
                  (long long)a.n_blocks, (long long)b.n_blocks, (unsigned long long)a.usable_bytes,
                  (unsigned long long)b.usable_bytes);
        gt_note("probe: %lld blocks alone, %lld with the draft (its activations %llu bytes)",
                (long long)a.n_blocks, (long long)b.n_blocks,
                (unsigned long long)b.draft_warm.activation_bytes);
        /* room for 1.2 of the model's blocks past what both use and the
         * margin of a warm-up that finds every buffer grown (the next one):
         * one model block would fit, not one of both */
        const uint64_t m0 = ifd_kvsize_margin(t, 0);
        sp.fraction =
            ((double)(t - b.free_bytes) + (double)m0 + 1.2 * (double)b.block_bytes) / (double)t;
        GT_EXPECT(ifd_kvsize_blocks(t, b.free_bytes, sp.fraction, m0, b.block_bytes) == 1,
                  "a model block fits at %.6f", sp.fraction);
        err[0] = '\0';
        rc = ifd_kvprobe_size(s.m, &sp, free_mem, NULL, &b, err, sizeof err);
        GT_EXPECT(rc == IFD_ENOMEM && b.n_blocks == 0 && strstr(err, "no KV block fits") &&
                      strstr(err, "draft model"),
                  "with the draft: %d, %lld blocks: %s", rc, (long long)b.n_blocks, err);
    }
    ifd_model_destroy(draft);
    gt_side_close(&s);
}
#endif

int main(void)
{
    gt_begin("test_cuda_step");
    gt_case("device sampling = host sampling (penalties, bias, seeded draws)", test_sampling);
    gt_case("graph replay of decode steps = eager, logits bit for bit", test_graphs);
    gt_case("steady state: no allocation, no heuristic query, graph replays", test_steady_state);
#ifdef IFD_CUDA_EMU
    gt_case("engine: device sampling = host sampling", test_engine_sampling);
    gt_case("engine: ids past n_vocab_valid never sampled, device = host", test_engine_vocab_valid);
    gt_case("decode buffers sized for the bucket of max_seqs", test_max_seqs_buffers);
    gt_case("the pool probe's warm-up grows the device sampler", test_probe_grows_sampler);
    gt_case("the pool probe's warm-up brings local tables (Gemma 3)", test_probe_local_tables);
    gt_case("the pool probe counts a draft model's warm-up and pool", test_probe_counts_draft);
    gt_case("the pool probe's warm-up brings verification rows", test_probe_spec_rows);
    gt_case("the pool probe's warm-up grows the logprobs download for max_logprobs",
            test_probe_logprobs);
#endif
    return gt_end();
}
