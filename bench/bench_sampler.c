/*
 * bench_sampler.c — microseconds per sampled token of the CPU sampler
 * (worker/sampler.h) at the vocabulary sizes of SmolLM2 (49152) and Gemma 3
 * (262144), for the common settings. Prints one JSON object.
 *
 * Logits are synthetic: Gaussian with standard deviation 3 plus a few
 * strong tokens, roughly the shape of a language model's output row. Each
 * configuration runs for at least 0.3 s after a warm-up; the median of 5
 * such runs is reported. Time is the thread's CPU time (single-threaded
 * code; on a shared machine wall time would mostly measure the neighbours).
 *
 *   bench_sampler [--quick] [--only CONFIG]
 *     --quick: one short run per configuration; --only: just that one.
 */
#include "worker/sampler.h"

#include "error.h"
#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static double gauss(void)
{
    double u = uniform(), v = uniform();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

typedef struct {
    const char *name;
    ifd_sampling_params_t p;
    size_t history; /* prompt and generated tokens, each */
} config_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_sampler [--quick] [--only CONFIG]\n");
            return 2;
        }
    }
    const int32_t vocabs[] = {49152, 262144};
    config_t cfg[8];
    int nc = 0;
    ifd_sampling_params_t d = ifd_sampling_default_params();
    d.seed = 42;
    cfg[nc] = (config_t){"greedy", d, 0};
    cfg[nc++].p.temperature = 0.0f;
    cfg[nc] = (config_t){"temperature_1", d, 0};
    nc++;
    cfg[nc] = (config_t){"temperature_0.7_top_k_50", d, 0};
    cfg[nc].p.temperature = 0.7f;
    cfg[nc++].p.top_k = 50;
    cfg[nc] = (config_t){"top_p_0.9", d, 0};
    cfg[nc++].p.top_p = 0.9f;
    cfg[nc] = (config_t){"min_p_0.05", d, 0};
    cfg[nc++].p.min_p = 0.05f;
    cfg[nc] = (config_t){"top_p_0.9_logprobs_5", d, 0};
    cfg[nc].p.top_p = 0.9f;
    cfg[nc++].p.n_logprobs = 5;
    cfg[nc] = (config_t){"top_p_0.9_penalties_history_2048", d, 2048};
    cfg[nc].p.top_p = 0.9f;
    cfg[nc].p.repetition_penalty = 1.1f;
    cfg[nc].p.frequency_penalty = 0.5f;
    cfg[nc++].p.presence_penalty = 0.5f;

    printf("{\n  \"benchmark\": \"sampler\",\n  \"unit\": \"us_per_token\",\n"
           "  \"clock\": \"thread_cpu_time\",\n  \"row_kernels\": \"%s\",\n  \"results\": [",
           ifd_cpu_features()->avx2 ? "avx2" : "baseline");
    int first = 1;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++) {
        int32_t V = vocabs[vi];
        /* A few rows, so the branch predictor cannot learn one. */
        enum { ROWS = 8 };
        float *rows = malloc((size_t)V * ROWS * sizeof *rows);
        int32_t *hist = malloc(2 * 2048 * sizeof *hist);
        ifd_sampler_t *s = NULL;
        if (!rows || !hist || ifd_sampler_create(V, &s)) {
            fprintf(stderr, "bench_sampler: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < (size_t)V * ROWS; i++)
            rows[i] = (float)(3.0 * gauss());
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < 4; j++)
                rows[(size_t)r * V + (size_t)(uniform() * V)] = 14.0f + 2.0f * (float)j;
        for (int i = 0; i < 2 * 2048; i++)
            hist[i] = (int32_t)(uniform() * V);

        for (int c = 0; c < nc; c++) {
            if (only && strcmp(only, cfg[c].name) != 0)
                continue;
            ifd_sampler_history_t h = {hist, cfg[c].history, hist + 2048, cfg[c].history};
            double runs[5];
            int nruns = quick ? 1 : 5;
            double min_time = quick ? 0.05 : 0.3;
            uint64_t pos = 0;
            for (int w = 0; w < 20; w++) {
                ifd_sample_result_t out;
                ifd_sampler_sample(s, &cfg[c].p, rows + (size_t)(w % ROWS) * V, &h, pos++, &out);
            }
            for (int r = 0; r < nruns; r++) {
                long iters = 0;
                double t0 = now_s(), t;
                do {
                    for (int k = 0; k < 16; k++, iters++) {
                        ifd_sample_result_t out;
                        int err = ifd_sampler_sample(
                            s, &cfg[c].p, rows + (size_t)(iters % ROWS) * V, &h, pos++, &out);
                        if (err) {
                            fprintf(stderr, "bench_sampler: %s\n", ifd_strerror(err));
                            return 1;
                        }
                    }
                    t = now_s() - t0;
                } while (t < min_time);
                runs[r] = 1e6 * t / (double)iters;
            }
            qsort(runs, (size_t)nruns, sizeof *runs, cmp_double);
            printf("%s\n    {\"vocab\": %d, \"config\": \"%s\", \"us_per_token\": %.2f}",
                   first ? "" : ",", V, cfg[c].name, runs[nruns / 2]);
            first = 0;
            fflush(stdout);
        }
        ifd_sampler_destroy(s);
        free(rows);
        free(hist);
    }
    printf("\n  ]\n}\n");
    return 0;
}
