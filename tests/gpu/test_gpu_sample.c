/*
 * test_gpu_sample.c — ifd_cuda_sample against the CPU sampler
 * (worker/sampler.h): for the same logits, parameters, seed and position
 * every row must yield exactly the token ifd_sampler_sample returns (or -1
 * where the CPU reports IFD_EINVAL). No tolerance: the definition is exact.
 *
 * Rows are drawn with many parameter mixes (greedy, temperature, top-k incl.
 * 1 and V-1, top-p incl. 0, min-p incl. 1, combinations) over logits with
 * different spreads, heavy ties, -inf entries, signed zeros, and rows that
 * must fail (NaN, +inf, all -inf); vocabularies from 1 to 2^20 (the CPU
 * sampler's limit) and several rows per launch, each with its own seed,
 * position and parameters.
 *
 * ifd_cuda_apply_mask against a plain loop over random masks (all-ones,
 * all-zeros and sparse words, rows without a mask, NaN and +inf logits
 * that must survive masking): bit for bit. ifd_cuda_logprobs against
 * ifd_sampler_logprobs (the host path) and a plain reference (a full sort
 * by value then id, a double log-sum-exp): the same token, rank, n_top and
 * top ids in the same order, values within 1e-6 of the host's (1e-4 of the
 * plain reference's exact softmax), -1 exactly where the host refuses the
 * row; tokens given directly and read from a sampling kernel's output.
 */
#include "gpu_test.h"

#include "cuda/cuda_kernels.h"
#include "error.h"
#include "log.h"
#include "sampling_math.h"
#include "worker/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fills a row of logits of a random "kind". */
static void make_row(float *l, int V, int kind)
{
    switch (kind % 8) {
    case 0: /* broad */
        gt_fill_randn(l, V, 1.0f);
        break;
    case 1: /* peaked */
        gt_fill_randn(l, V, 8.0f);
        break;
    case 2: /* many ties: quarter steps */
        for (int i = 0; i < V; i++)
            l[i] = roundf(gt_randn() * 4.0f) / 4.0f;
        break;
    case 3: /* -inf entries and signed zeros */
        for (int i = 0; i < V; i++) {
            int r = (int)gt_rand_int(4);
            l[i] = r == 0 ? -INFINITY : r == 1 ? 0.0f : r == 2 ? -0.0f : gt_randn();
        }
        break;
    case 4: /* all equal */
        for (int i = 0; i < V; i++)
            l[i] = 1.5f;
        break;
    case 5: /* a few dominant tokens over a flat floor */
        for (int i = 0; i < V; i++)
            l[i] = gt_rand_int(50) == 0 ? 10.0f + gt_randn() : -5.0f + 0.01f * gt_randn();
        break;
    case 6: /* huge magnitudes (scaled values may overflow at small T) */
        gt_fill_randn(l, V, 1e30f);
        break;
    default: /* realistic-ish: log-normal-ish spread */
        for (int i = 0; i < V; i++)
            l[i] = 3.0f * gt_randn() - (float)(i % 17);
        break;
    }
}

static ifd_sampling_params_t make_params(int mix, int V)
{
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.seed = gt_rand_u64();
    switch (mix % 12) {
    case 0:
        p.temperature = 0.0f; /* greedy */
        break;
    case 1:
        break; /* plain, T = 1 */
    case 2:
        p.temperature = 0.7f;
        p.top_k = 40;
        break;
    case 3:
        p.top_p = 0.9f;
        break;
    case 4:
        p.min_p = 0.05f;
        p.temperature = 1.3f;
        break;
    case 5:
        p.temperature = 0.8f;
        p.top_k = 50;
        p.top_p = 0.95f;
        p.min_p = 0.02f;
        break;
    case 6:
        p.top_p = 0.0f;
        break;
    case 7:
        p.min_p = 1.0f;
        break;
    case 8:
        p.top_k = 1;
        p.temperature = 2.0f;
        break;
    case 9:
        p.top_k = V > 1 ? V - 1 : 1;
        p.top_p = 0.5f;
        break;
    case 10:
        p.temperature = 1e-5f; /* the smallest non-greedy temperature */
        p.top_p = 0.99f;
        break;
    default:
        p.temperature = gt_rand_uniform(0.1f, 3.0f);
        p.top_k = (int32_t)gt_rand_int(V + 2) - 1;
        p.top_p = gt_rand_uniform(0.0f, 1.0f);
        p.min_p = gt_rand_int(2) ? 0.0f : gt_rand_uniform(0.0f, 0.3f);
        break;
    }
    return p;
}

/* One launch of n rows of vocabulary V; bad_rows adds rows that must fail. */
static void sample_batch(int V, int n, int kind0, int mix0, int bad_rows)
{
    float *l = gt_xmalloc((size_t)n * V * 4);
    ifd_cuda_sample_params_t *gp = gt_xmalloc((size_t)n * sizeof *gp);
    ifd_sampling_params_t *cp = gt_xmalloc((size_t)n * sizeof *cp);
    int32_t *want = gt_xmalloc((size_t)n * 4), *got = gt_xmalloc((size_t)n * 4);
    ifd_sampler_t *smp = NULL;
    int rc = ifd_sampler_create(V, &smp);
    GT_EXPECT(rc == 0, "ifd_sampler_create(%d) returned %d", V, rc);
    if (rc)
        return;
    for (int r = 0; r < n; r++) {
        float *row = l + (int64_t)r * V;
        make_row(row, V, kind0 + r);
        if (bad_rows && r == 1)
            row[V / 2] = NAN;
        if (bad_rows && r == 2)
            row[V - 1] = INFINITY;
        if (bad_rows && r == 3)
            for (int i = 0; i < V; i++)
                row[i] = -INFINITY;
        cp[r] = make_params(mix0 + r, V);
        const uint64_t position = gt_rand_u64() >> (gt_rand_int(2) ? 0 : 40);
        gp[r] = (ifd_cuda_sample_params_t){
            .temperature = cp[r].temperature,
            .top_k = cp[r].top_k,
            .top_p = cp[r].top_p,
            .min_p = cp[r].min_p,
            .seed = cp[r].seed,
            .position = position,
        };
        ifd_sample_result_t res;
        rc = ifd_sampler_sample(smp, &cp[r], row, NULL, position, &res);
        want[r] = rc == 0 ? res.token : -1;
    }
    float *dl = gt_dupload(l, (size_t)n * V * 4);
    ifd_cuda_sample_params_t *dp = gt_dupload(gp, (size_t)n * sizeof *gp);
    int32_t *dt = gt_dalloc_poison((size_t)n * 4);
    rc = ifd_cuda_sample(dt, dl, dp, n, V, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_sample returned %d", rc);
    gt_sync();
    gt_download(got, dt, (size_t)n * 4);
    int bad = 0;
    for (int r = 0; r < n; r++) {
        if (got[r] != want[r]) {
            if (bad++ < 5)
                printf("    V=%d row %d (kind %d, T=%g k=%d p=%g min_p=%g): GPU %d, CPU %d\n", V, r,
                       (kind0 + r) % 8, (double)cp[r].temperature, cp[r].top_k, (double)cp[r].top_p,
                       (double)cp[r].min_p, got[r], want[r]);
        }
    }
    GT_EXPECT(bad == 0, "V=%d: %d of %d rows sampled a different token", V, bad, n);
    ifd_sampler_destroy(smp);
    free(l), free(gp), free(cp), free(want), free(got);
    gt_dfree(dl), gt_dfree(dp), gt_dfree(dt);
}

static void test_small_vocab(void)
{
    sample_batch(1, 12, 0, 0, 0);
    sample_batch(2, 24, 3, 5, 0);
    sample_batch(7, 48, 1, 2, 1);
    sample_batch(100, 96, 0, 0, 1);
}

static void test_medium_vocab(void)
{
    const int n = gt_small() ? 24 : 192;
    sample_batch(1000, n, 2, 7, 1);
    sample_batch(gt_small() ? 4099 : 32000, n, 0, 0, 1);
}

static void test_large_vocab(void)
{
    if (gt_small()) {
        sample_batch(20000, 12, 5, 3, 0);
        return;
    }
    sample_batch(151936, 96, 0, 0, 1);
    sample_batch(262144, 24, 3, 1, 0);
    sample_batch(1 << 20, 12, 5, 2, 0);
}

/* Many seeds on one row: the GPU's draws follow the CPU's exactly. */
static void test_many_seeds(void)
{
    const int V = gt_small() ? 500 : 50000, n = gt_small() ? 48 : 512;
    sample_batch(V, n, 0, 11, 0); /* kind 0 rows, random parameter mixes */
}

/* ---- the final soft-cap --------------------------------------------------------- */

static void test_softcap(void)
{
    const int n = gt_small() ? 20000 : 1 << 22;
    float *x = gt_xmalloc((size_t)n * 4), *got = gt_xmalloc((size_t)n * 4);
    for (int i = 0; i < n; i++) {
        const int k = (int)gt_rand_int(10);
        x[i] = k == 0   ? gt_randn() * 1e-4f                        /* tiny: tanh(y) = y */
               : k == 1 ? gt_randn() * 400.0f                       /* saturated */
               : k == 2 ? (float)(i % 7 - 3) * 0x1p-14f             /* around 2^-12 */
               : k == 3 ? (gt_rand_int(2) ? 1.0f : -1.0f) * 273.0f  /* y = 9.1 */
                        : gt_randn() * 30.0f;                       /* the working range */
    }
    x[0] = -INFINITY, x[1] = INFINITY, x[2] = NAN, x[3] = 0.0f, x[4] = -0.0f;
    static const float caps[] = {30.0f, 50.0f, 2.5f};
    float *dx = gt_dalloc((size_t)n * 4);
    for (int c = 0; c < 3; c++) {
        gt_upload(dx, x, (size_t)n * 4);
        int rc = ifd_cuda_softcap(dx, n, caps[c], NULL);
        GT_EXPECT(rc == 0, "ifd_cuda_softcap returned %d", rc);
        gt_sync();
        gt_download(got, dx, (size_t)n * 4);
        int64_t diff = 0;
        double worst = 0.0;
        for (int i = 0; i < n; i++) {
            const float want = ifd_softcap(x[i], caps[c]);
            diff += memcmp(&want, &got[i], 4) != 0;
            if (isfinite(x[i])) { /* against the exact value: a few ulp */
                const double ex = (double)caps[c] * tanh((double)x[i] / (double)caps[c]);
                const double err = fabs((double)want - ex) / fmax(fabs(ex), 1e-30);
                worst = fmax(worst, err);
            }
        }
        GT_EXPECT(diff == 0, "cap %g: %lld values differ from the host's", (double)caps[c],
                  (long long)diff);
        GT_EXPECT(worst < 6e-7, "cap %g: relative error %.3g of c tanh(x / c)",
                  (double)caps[c], worst);
        gt_note("cap %g: largest relative error %.3g", (double)caps[c], worst);
    }
    GT_EXPECT(got[0] == -INFINITY && got[1] == caps[2] && isnan(got[2]) && got[3] == 0.0f &&
                  signbit(got[4]),
              "special values: %g %g %g %g %g", (double)got[0], (double)got[1], (double)got[2],
              (double)got[3], (double)got[4]);
    GT_EXPECT(ifd_cuda_softcap(dx, n, 0.0f, NULL) == IFD_EINVAL, "cap 0 accepted");
    free(x), free(got);
    gt_dfree(dx);
}

/* ---- step 3b: grammar masks ------------------------------------------------ */

static void mask_batch(int V, int n_rows)
{
    const int W = (V + 31) / 32;
    float *l = gt_xmalloc((size_t)n_rows * V * 4), *want = gt_xmalloc((size_t)n_rows * V * 4);
    float *got = gt_xmalloc((size_t)n_rows * V * 4);
    uint32_t *masks = gt_xmalloc((size_t)n_rows * W * 4);
    int32_t *rows = gt_xmalloc((size_t)n_rows * 4);
    int n_masks = 0;
    for (int r = 0; r < n_rows; r++) {
        float *row = l + (size_t)r * V;
        make_row(row, V, r);
        if (r % 5 == 1)
            row[gt_rand_int(V)] = NAN;
        if (r % 5 == 2)
            row[gt_rand_int(V)] = INFINITY;
        if (r % 4 == 3)
            continue; /* no mask */
        uint32_t *m = masks + (size_t)n_masks * W;
        for (int w = 0; w < W; w++) {
            const int kind = (int)gt_rand_int(4);
            m[w] = kind == 0   ? 0xffffffffu
                   : kind == 1 ? 0u
                   : kind == 2 ? (uint32_t)gt_rand_u64()
                               : 1u << gt_rand_int(32);
        }
        rows[n_masks++] = r;
    }
    /* the rows in a shuffled order: the kernel must follow rows[], not j */
    for (int j = n_masks - 1; j > 0; j--) {
        int k = (int)gt_rand_int(j + 1), t = rows[j];
        rows[j] = rows[k], rows[k] = t;
        for (int w = 0; w < W; w++) {
            uint32_t u = masks[(size_t)j * W + w];
            masks[(size_t)j * W + w] = masks[(size_t)k * W + w];
            masks[(size_t)k * W + w] = u;
        }
    }
    memcpy(want, l, (size_t)n_rows * V * 4);
    for (int j = 0; j < n_masks; j++) {
        float *row = want + (size_t)rows[j] * V;
        for (int i = 0; i < V; i++)
            if (!((masks[(size_t)j * W + i / 32] >> (i % 32)) & 1u) && !isnan(row[i]) &&
                row[i] != INFINITY)
                row[i] = -INFINITY;
    }
    float *dl = gt_dupload(l, (size_t)n_rows * V * 4);
    uint32_t *dm = gt_dupload(masks, (size_t)(n_masks ? n_masks : 1) * W * 4);
    int32_t *dr = gt_dupload(rows, (size_t)(n_masks ? n_masks : 1) * 4);
    int rc = ifd_cuda_apply_mask(dl, dm, dr, n_masks, n_rows, V, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_apply_mask returned %d", rc);
    gt_sync();
    gt_download(got, dl, (size_t)n_rows * V * 4);
    int64_t diff = 0;
    for (size_t i = 0; i < (size_t)n_rows * V; i++)
        diff += memcmp(&got[i], &want[i], 4) != 0;
    GT_EXPECT(diff == 0, "V=%d: %lld masked logits differ", V, (long long)diff);
    GT_EXPECT(ifd_cuda_apply_mask(dl, dm, dr, 1, n_rows, 0, NULL) == IFD_EINVAL &&
                  ifd_cuda_apply_mask(NULL, dm, dr, 1, n_rows, V, NULL) == IFD_EINVAL &&
                  ifd_cuda_apply_mask(dl, dm, dr, 0, n_rows, V, NULL) == 0,
              "argument checks");
    free(l), free(want), free(got), free(masks), free(rows);
    gt_dfree(dl), gt_dfree(dm), gt_dfree(dr);
}

static void test_mask(void)
{
    mask_batch(1, 4);
    mask_batch(33, 9);
    mask_batch(1000, 13);
    mask_batch(gt_small() ? 5003 : 151936, gt_small() ? 6 : 24);
}

/* ---- logprobs ----------------------------------------------------------------- */

/* The plain reference: the top n by a sort of every (value, id), ascending
 * id among equal values; logprobs from a double log-sum-exp. */
static double *g_sort_v;
static int cmp_desc(const void *a, const void *b)
{
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_sort_v[i] != g_sort_v[j])
        return g_sort_v[i] > g_sort_v[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

static void lp_reference(const float *x, int V, int32_t tok, int n_top, ifd_sample_result_t *r,
                         int32_t *order, double *lse_out)
{
    double m = -INFINITY, s = 0.0;
    for (int i = 0; i < V; i++)
        m = x[i] > m ? x[i] : m;
    for (int i = 0; i < V; i++)
        s += x[i] == -INFINITY ? 0.0 : exp((double)x[i] - m);
    *lse_out = m == -INFINITY ? INFINITY : m + log(s);
    for (int i = 0; i < V; i++) {
        order[i] = i;
        g_sort_v[i] = x[i] == 0.0f ? 0.0 : (double)x[i]; /* -0 == +0 */
    }
    qsort(order, (size_t)V, sizeof *order, cmp_desc);
    memset(r, 0, sizeof *r);
    r->token = tok;
    r->rank = 0;
    for (int i = 0; i < V; i++)
        r->rank += x[i] >= x[tok];
    r->n_top = n_top < V ? n_top : V;
    for (int j = 0; j < r->n_top; j++)
        r->top_ids[j] = order[j];
}

static int lp_close(float a, float b, float tol)
{
    if (a == b)
        return 1; /* both -inf included */
    return fabsf(a - b) <= tol * (1.0f + fabsf(b));
}

static void logprob_batch(int V, int n, int kind0)
{
    float *l = gt_xmalloc((size_t)n * V * 4);
    ifd_cuda_logprob_req_t *req = gt_xmalloc((size_t)n * sizeof *req);
    int32_t *toks = gt_xmalloc((size_t)n * 4), *order = gt_xmalloc((size_t)V * 4);
    ifd_cuda_logprob_t *got = gt_xmalloc((size_t)n * sizeof *got);
    ifd_sample_result_t *want = gt_xmalloc((size_t)n * sizeof *want);
    int *want_rc = gt_xmalloc((size_t)n * sizeof *want_rc);
    g_sort_v = gt_xmalloc((size_t)V * sizeof *g_sort_v);
    ifd_sampler_t *smp = NULL;
    int rc = ifd_sampler_create(V, &smp);
    GT_EXPECT(rc == 0, "ifd_sampler_create(%d) returned %d", V, rc);
    if (rc)
        return;
    float *dl = gt_dalloc((size_t)n * V * 4);
    for (int r = 0; r < n; r++) {
        float *row = l + (size_t)r * V;
        make_row(row, V, kind0 + r);
        if (r % 7 == 5)
            row[gt_rand_int(V)] = gt_rand_int(2) ? NAN : INFINITY;
        if (r % 11 == 9)
            for (int i = 0; i < V; i++)
                row[i] = -INFINITY;
        toks[r] = r % 6 == 4 ? -1 : (int32_t)gt_rand_int(V); /* -1: a failed draw */
        const int n_top = r % 9 == 0 ? IFD_CUDA_MAX_LOGPROBS : (int)gt_rand_int(21);
        /* half the requests name their token, half read it from toks[] */
        req[r] = (ifd_cuda_logprob_req_t){
            dl + (size_t)r * V, r % 2 ? toks[r] : -1, r, n_top, 0, NULL, NULL};
        if (toks[r] < 0) {
            want_rc[r] = IFD_EINVAL;
            continue;
        }
        want_rc[r] = ifd_sampler_logprobs(smp, row, toks[r], n_top, &want[r]);
    }
    gt_upload(dl, l, (size_t)n * V * 4);
    ifd_cuda_logprob_req_t *dq = gt_dupload(req, (size_t)n * sizeof *req);
    int32_t *dt = gt_dupload(toks, (size_t)n * 4);
    ifd_cuda_logprob_t *dout = gt_dalloc_poison((size_t)n * sizeof *dout);
    rc = ifd_cuda_logprobs(dout, dq, dt, n, V, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_logprobs returned %d", rc);
    gt_sync();
    gt_download(got, dout, (size_t)n * sizeof *got);
    int bad = 0;
    double worst = 0.0;
    for (int r = 0; r < n && bad < 5; r++) {
        const ifd_cuda_logprob_t *g = &got[r];
        if (want_rc[r]) {
            if (g->token != -1)
                bad++, printf("    V=%d row %d: scored (token %d), host refused\n", V, r,
                              g->token);
            continue;
        }
        const ifd_sample_result_t *w = &want[r];
        ifd_sample_result_t ref;
        double lse;
        lp_reference(l + (size_t)r * V, V, toks[r], req[r].n_top, &ref, order, &lse);
        int ok = g->token == w->token && g->rank == w->rank && g->n_top == w->n_top &&
                 lp_close(g->logprob, w->logprob, 1e-6f) && ref.rank == w->rank &&
                 ref.n_top == w->n_top;
        for (int j = 0; ok && j < w->n_top; j++) {
            const float x = l[(size_t)r * V + w->top_ids[j]];
            const float exact = x == -INFINITY ? -INFINITY : (float)((double)x - lse);
            ok = g->top_ids[j] == w->top_ids[j] && ref.top_ids[j] == w->top_ids[j] &&
                 lp_close(g->top_logprobs[j], w->top_logprobs[j], 1e-6f) &&
                 lp_close(g->top_logprobs[j], exact, 1e-4f);
            if (isfinite(exact))
                worst = fmax(worst, fabs((double)g->top_logprobs[j] - exact));
        }
        if (!ok) {
            bad++;
            printf("    V=%d row %d (kind %d, n_top %d): device token %d lp %.9g rank %d n %d "
                   "| host %d %.9g %d %d | ref rank %d\n",
                   V, r, (kind0 + r) % 8, req[r].n_top, g->token, (double)g->logprob, g->rank,
                   g->n_top, w->token, (double)w->logprob, w->rank, w->n_top, ref.rank);
            for (int j = 0; j < w->n_top && j < 6; j++)
                printf("      top %d: device %d %.9g host %d %.9g ref %d\n", j, g->top_ids[j],
                       (double)g->top_logprobs[j], w->top_ids[j], (double)w->top_logprobs[j],
                       ref.top_ids[j]);
        }
    }
    GT_EXPECT(bad == 0, "V=%d: %d rows of %d differ from the host's logprobs", V, bad, n);
    gt_note("V=%d: %d rows, largest |device - exact| of a top logprob %.3g", V, n, worst);
    ifd_sampler_destroy(smp);
    free(l), free(req), free(toks), free(order), free(got), free(want), free(want_rc);
    free(g_sort_v);
    gt_dfree(dl), gt_dfree(dq), gt_dfree(dt), gt_dfree(dout);
}

/* Large top k and logprob_token_ids (entries in the request's `more` room):
 * each row of n against ifd_sampler_logprobs (top k into host room, the
 * same ids and order, values within 1e-6) and the full sort (ids); listed
 * ids against the host's logprob of each id (its top-V answer). ks[r % nk]
 * is a row's k; a negative one means that many listed ids instead (random
 * ids, repeats and the scored token among them). Row kinds cover ties,
 * -inf entries, signed zeros, all equal; some rows hold a NaN / +inf. */
static void logprob_large(int V, int n, const int *ks, int nk, int kind0)
{
    float *l = gt_xmalloc((size_t)n * V * 4);
    ifd_cuda_logprob_req_t *req = gt_xmalloc((size_t)n * sizeof *req);
    int32_t *toks = gt_xmalloc((size_t)n * 4), *order = gt_xmalloc((size_t)V * 4);
    ifd_cuda_logprob_t *got = gt_xmalloc((size_t)n * sizeof *got);
    int32_t *room_id = gt_xmalloc((size_t)V * 4), *want_id = gt_xmalloc((size_t)V * 4);
    float *room_lp = gt_xmalloc((size_t)V * 4), *want_lp = gt_xmalloc((size_t)V * 4);
    float *by_id = gt_xmalloc((size_t)V * 4);
    g_sort_v = gt_xmalloc((size_t)V * sizeof *g_sort_v);
    ifd_sampler_t *smp = NULL;
    int rc = ifd_sampler_create(V, &smp);
    GT_EXPECT(rc == 0, "ifd_sampler_create(%d) returned %d", V, rc);
    if (rc)
        return;
    /* per row: its count of entries, its ids (listed rows), its room offset */
    size_t *off = gt_xmalloc((size_t)n * sizeof *off), total = 0, n_ids_all = 0;
    int *cnt = gt_xmalloc((size_t)n * sizeof *cnt);
    for (int r = 0; r < n; r++) {
        const int kr = ks[r % nk];
        cnt[r] = kr < 0 ? -kr : kr < V ? kr : V;
        off[r] = total;
        total += (size_t)cnt[r];
        n_ids_all += kr < 0 ? (size_t)-kr : 0;
    }
    int32_t *ids = gt_xmalloc((n_ids_all ? n_ids_all : 1) * 4);
    float *dl = gt_dalloc((size_t)n * V * 4);
    ifd_cuda_lp_entry_t *dmore = gt_dalloc_poison((total ? total : 1) * sizeof *dmore);
    int32_t *dids = gt_dalloc((n_ids_all ? n_ids_all : 1) * 4);
    size_t id0 = 0;
    for (int r = 0; r < n; r++) {
        float *row = l + (size_t)r * V;
        make_row(row, V, kind0 + r);
        if (r % 7 == 6)
            row[gt_rand_int(V)] = gt_rand_int(2) ? NAN : INFINITY;
        toks[r] = (int32_t)gt_rand_int(V);
        const int kr = ks[r % nk];
        req[r] = (ifd_cuda_logprob_req_t){dl + (size_t)r * V,
                                          toks[r],
                                          r,
                                          kr < 0 ? 5 : kr,
                                          0,
                                          NULL,
                                          cnt[r] > IFD_CUDA_MAX_LOGPROBS ? dmore + off[r] : NULL};
        if (kr < 0) {
            for (int j = 0; j < -kr; j++)
                ids[id0 + j] = j % 5 == 3 ? toks[r] : (int32_t)gt_rand_int(V);
            req[r].n_ids = -kr;
            req[r].ids = dids + id0;
            id0 += (size_t)-kr;
        }
    }
    gt_upload(dl, l, (size_t)n * V * 4);
    gt_upload(dids, ids, (n_ids_all ? n_ids_all : 1) * 4);
    ifd_cuda_logprob_req_t *dq = gt_dupload(req, (size_t)n * sizeof *req);
    ifd_cuda_logprob_t *dout = gt_dalloc_poison((size_t)n * sizeof *dout);
    rc = ifd_cuda_logprobs(dout, dq, NULL, n, V, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_logprobs returned %d", rc);
    gt_sync();
    gt_download(got, dout, (size_t)n * sizeof *got);
    ifd_cuda_lp_entry_t *more = gt_xmalloc((total ? total : 1) * sizeof *more);
    gt_download(more, dmore, (total ? total : 1) * sizeof *more);
    int bad = 0, checked = 0;
    for (int r = 0; r < n && bad < 5; r++) {
        const ifd_cuda_logprob_t *g = &got[r];
        const float *row = l + (size_t)r * V;
        const int kr = ks[r % nk];
        /* the host: the top k (or all V, for listed ids) into its room */
        ifd_sample_result_t w = {.more_ids = room_id, .more_logprobs = room_lp, .more_cap = V};
        const int hk = kr < 0 ? V : kr;
        int wrc = ifd_sampler_logprobs(smp, row, toks[r], hk, &w);
        if (wrc) {
            if (g->token != -1)
                bad++, printf("    V=%d row %d: scored (token %d), host refused\n", V, r, g->token);
            continue;
        }
        checked++;
        const int32_t *wi = ifd_sample_top_ids(&w);
        const float *wl = ifd_sample_top_logprobs(&w);
        int c = cnt[r];
        if (kr < 0) { /* listed: the host's logprob of each id */
            for (int j = 0; j < w.n_top; j++)
                by_id[wi[j]] = wl[j];
            for (int j = 0; j < c; j++)
                want_id[j] = ids[(size_t)(req[r].ids - dids) + j], want_lp[j] = by_id[want_id[j]];
        } else {
            ifd_sample_result_t ref;
            double lse;
            lp_reference(row, V, toks[r], 0, &ref, order, &lse);
            for (int j = 0; j < c; j++) {
                want_id[j] = wi[j], want_lp[j] = wl[j];
                if (order[j] != wi[j]) { /* the host against the full sort */
                    bad++;
                    printf("    V=%d row %d k %d: host id %d at %d, sort %d\n", V, r, kr, wi[j], j,
                           order[j]);
                    break;
                }
            }
            if (w.n_top != c)
                bad++, printf("    V=%d row %d: host n_top %d, want %d\n", V, r, w.n_top, c);
        }
        int ok = g->token == toks[r] && g->rank == w.rank && g->n_top == c &&
                 lp_close(g->logprob, w.logprob, 1e-6f);
        int jbad = -1;
        for (int j = 0; ok && j < c; j++) {
            const int32_t gi = c > IFD_CUDA_MAX_LOGPROBS ? more[off[r] + j].id : g->top_ids[j];
            const float gl =
                c > IFD_CUDA_MAX_LOGPROBS ? more[off[r] + j].logprob : g->top_logprobs[j];
            ok = gi == want_id[j] && lp_close(gl, want_lp[j], 1e-6f);
            if (!ok)
                jbad = j;
        }
        for (int j = 0; ok && c > IFD_CUDA_MAX_LOGPROBS && j < IFD_CUDA_MAX_LOGPROBS; j++)
            ok = g->top_ids[j] == 0 && g->top_logprobs[j] == 0.0f; /* inline stays zero */
        if (!ok) {
            bad++;
            printf("    V=%d row %d (kind %d, k %d): device token %d lp %.9g rank %d n %d | "
                   "host %d %.9g %d %d; first bad entry %d\n",
                   V, r, (kind0 + r) % 8, kr, g->token, (double)g->logprob, g->rank, g->n_top,
                   toks[r], (double)w.logprob, w.rank, c, jbad);
            if (jbad >= 0)
                printf("      device %d %.9g, host %d %.9g\n",
                       c > IFD_CUDA_MAX_LOGPROBS ? more[off[r] + jbad].id : g->top_ids[jbad],
                       (double)(c > IFD_CUDA_MAX_LOGPROBS ? more[off[r] + jbad].logprob
                                                          : g->top_logprobs[jbad]),
                       want_id[jbad], (double)want_lp[jbad]);
        }
    }
    GT_EXPECT(bad == 0, "V=%d: %d rows of %d differ from the host's large logprobs", V, bad, n);
    GT_EXPECT(bad || checked >= n / 2, "V=%d: only %d rows of %d scored", V, checked, n);
    gt_note("V=%d: %d rows with top k up to %d / listed ids, equal to the host's", V, n, V);
    ifd_sampler_destroy(smp);
    free(l), free(req), free(toks), free(order), free(got), free(room_id), free(want_id);
    free(room_lp), free(want_lp), free(by_id), free(off), free(cnt), free(ids), free(more);
    free(g_sort_v);
    gt_dfree(dl), gt_dfree(dq), gt_dfree(dout), gt_dfree(dmore), gt_dfree(dids);
}

/* Requests the kernel refuses (token -1, nothing written): a large k or
 * id list without room, an id out of range, a negative count. */
static void logprob_refused(void)
{
    const int V = 64;
    float *l = gt_xmalloc((size_t)V * 4);
    gt_fill_randn(l, V, 1.0f);
    int32_t ids[30];
    for (int j = 0; j < 30; j++)
        ids[j] = j;
    ids[7] = V; /* out of range */
    float *dl = gt_dupload(l, (size_t)V * 4);
    int32_t *dids = gt_dupload(ids, sizeof ids);
    ifd_cuda_lp_entry_t *dmore = gt_dalloc(64 * sizeof *dmore);
    ifd_cuda_logprob_req_t req[5] = {
        {dl, 3, 0, 21, 0, NULL, NULL},     /* no room */
        {dl, 3, 0, 0, 25, dids + 1, NULL}, /* no room */
        {dl, 3, 0, 0, 10, dids, NULL},     /* ids[7] out of range */
        {dl, 3, 0, -1, 0, NULL, NULL},     /* negative */
        {dl, 3, 0, 40, 0, NULL, dmore},    /* fine: the control */
    };
    ifd_cuda_logprob_req_t *dq = gt_dupload(req, sizeof req);
    ifd_cuda_logprob_t *dout = gt_dalloc_poison(5 * sizeof *dout), got[5];
    int rc = ifd_cuda_logprobs(dout, dq, NULL, 5, V, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_logprobs returned %d", rc);
    gt_sync();
    gt_download(got, dout, sizeof got);
    for (int r = 0; r < 4; r++)
        GT_EXPECT(got[r].token == -1 && got[r].n_top == 0, "request %d scored (token %d)", r,
                  got[r].token);
    GT_EXPECT(got[4].token == 3 && got[4].n_top == 40, "the control: token %d n_top %d",
              got[4].token, got[4].n_top);
    free(l);
    gt_dfree(dl), gt_dfree(dids), gt_dfree(dmore), gt_dfree(dq), gt_dfree(dout);
}

static void test_logprobs_large(void)
{
    /* k = 21 (the first past the inline 20), 64, 100; boundaries at the
     * vocabulary (V - 1, V, V + 5); listed ids: 3 (inline), 21, 100; then
     * k in the thousands */
    const int ks_small[] = {21, 64, 100, 99, 100 + 5, -3, -21, -100, 20, 50};
    logprob_large(100, 20, ks_small, 10, 0);
    const int V1 = gt_small() ? 1000 : 32000;
    const int ks[] = {21, 64, 100, V1 - 1, V1, V1 + 5, -21, -100, 257, 1000};
    logprob_large(V1, 20, ks, 10, 3);
    /* k past 1024: each thread runs several comparators of a sorting stage */
    const int V2 = gt_small() ? 3001 : 151936;
    const int ks2[] = {2049, V2, -2500, V2 / 2};
    logprob_large(V2, 8, ks2, 4, 1);
    logprob_refused();
}

static void test_logprobs(void)
{
    logprob_batch(1, 6, 0);
    logprob_batch(7, 24, 1);
    logprob_batch(100, 40, 3);
    logprob_batch(gt_small() ? 3001 : 32000, gt_small() ? 24 : 96, 0);
    if (!gt_small())
        logprob_batch(262144, 12, 5);
}

int main(void)
{
    gt_begin("test_gpu_sample");
    ifd_log_set_level(IFD_LOG_ERROR); /* the CPU sampler warns about the bad rows */
    gt_case("small_vocab", test_small_vocab);
    gt_case("medium_vocab", test_medium_vocab);
    gt_case("large_vocab", test_large_vocab);
    gt_case("many_seeds", test_many_seeds);
    gt_case("grammar masks", test_mask);
    gt_case("final soft-cap", test_softcap);
    gt_case("logprobs", test_logprobs);
    gt_case("logprobs: large k and listed ids", test_logprobs_large);
    return gt_end();
}
