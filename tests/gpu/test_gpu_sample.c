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
 */
#include "gpu_test.h"

#include "cuda/cuda_kernels.h"
#include "error.h"
#include "log.h"
#include "sampler.h"

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

int main(void)
{
    gt_begin("test_gpu_sample");
    ifd_log_set_level(IFD_LOG_ERROR); /* the CPU sampler warns about the bad rows */
    gt_case("small_vocab", test_small_vocab);
    gt_case("medium_vocab", test_medium_vocab);
    gt_case("large_vocab", test_large_vocab);
    gt_case("many_seeds", test_many_seeds);
    return gt_end();
}
