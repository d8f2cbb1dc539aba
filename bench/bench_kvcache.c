/*
 * bench_kvcache.c — the KV-caching experiment, on the CPU backend:
 *
 *  1. the same chat prompt, 256 new tokens, greedy, with the KV cache and
 *     without it (recomputing the whole context at every token), 3
 *     repetitions each: median latency, tokens/s, speedup;
 *  2. prefill and decode tokens/s for a 512-token prompt and 128 generated
 *     tokens at batch 1.
 *
 * Prints one JSON object on stdout. Usage:
 *   bench_kvcache [--model PATH] [--n N] [--reps R] [--threads T]
 * (defaults: the default model, 256, 3, all CPUs).
 */
#include "chat/chat_template.h"
#include "error.h"
#include "kernels.h"
#include "tokenizer/tokenizer.h"
#include "worker/backend.h"
#include "worker/generate.h"
#include "worker/model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int n_new = 256, reps = 3, threads = 0;
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"n", required_argument, NULL, 'n'},
        {"reps", required_argument, NULL, 'r'},  {"threads", required_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "m:n:r:t:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'n': n_new = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: bench_kvcache [--model PATH] [--n N] [--reps R] [--threads T]\n");
            return 2;
        }
    }
    char path[4096];
    if (!model) {
        ifd_default_model_path(path, sizeof path);
        model = path;
    }
    if (n_new < 2 || reps < 1) {
        fprintf(stderr, "bench_kvcache: --n must be >= 2 and --reps >= 1\n");
        return 2;
    }
    char err[1024] = "";
    ifd_chat_params_t chat_params = ifd_chat_default_params();
    ifd_backend_t *be;
    ifd_model_t *m;
    ifd_tokenizer_t *tok;
    ifd_chat_template_t *tpl;
    if (ifd_backend_cpu_create(&be, threads) ||
        ifd_model_load(&m, model, be, err, sizeof err) ||
        ifd_tokenizer_create_source(&tok, ifd_model_source(m), err, sizeof err) ||
        ifd_chat_template_create(&tpl, tok, &chat_params, err, sizeof err)) {
        fprintf(stderr, "bench_kvcache: %s\n", err);
        return 1;
    }
    /* 1. cache on/off on the same chat prompt */
    ifd_chat_msg_t msg = {"user", "Explain paged attention in one paragraph."};
    ifd_chat_prompt_t cp;
    ifd_tokens_t prompt = {0};
    if (ifd_chat_render(tpl, &msg, 1, true, &cp) || ifd_chat_tokenize(tpl, tok, &cp, &prompt)) {
        fprintf(stderr, "bench_kvcache: cannot build the prompt\n");
        return 1;
    }
    ifd_chat_prompt_free(&cp);
    double lat[2][64];
    int n_out[2] = {0, 0};
    bool same_tokens = true;
    int32_t *first = NULL;
    for (int mode = 0; mode < 2; mode++) {
        for (int r = 0; r < reps && r < 64; r++) {
            ifd_generate_params_t gp = ifd_generate_default_params();
            gp.n_predict = n_new;
            gp.ignore_eos = true;
            gp.use_cache = mode == 0;
            ifd_generate_result_t res;
            int rc = ifd_generate(m, prompt.ids, (int)prompt.n, &gp, &res);
            if (rc) {
                fprintf(stderr, "bench_kvcache: generate: %s\n", ifd_strerror(rc));
                return 1;
            }
            lat[mode][r] = res.total_ms;
            n_out[mode] = res.n_tokens;
            if (!first) {
                first = malloc((size_t)res.n_tokens * sizeof *first);
                memcpy(first, res.tokens, (size_t)res.n_tokens * sizeof *first);
            } else if (memcmp(first, res.tokens, (size_t)res.n_tokens * sizeof *first) != 0) {
                same_tokens = false;
            }
            fprintf(stderr, "bench_kvcache: %s cache, rep %d: %.1f ms\n", mode ? "without" : "with",
                    r + 1, res.total_ms);
            ifd_generate_result_free(&res);
        }
    }
    double med_on = median(lat[0], reps), med_off = median(lat[1], reps);

    /* 2. prefill 512 / decode 128 at batch 1 (raw tokens cycling through the vocabulary) */
    int32_t long_prompt[512];
    for (int i = 0; i < 512; i++)
        long_prompt[i] = (int32_t)(1000 + (i * 37) % 20000);
    ifd_generate_params_t gp = ifd_generate_default_params();
    gp.n_predict = 128;
    gp.ignore_eos = true;
    ifd_generate_result_t res;
    if (ifd_generate(m, long_prompt, 512, &gp, &res)) {
        fprintf(stderr, "bench_kvcache: prefill/decode run failed\n");
        return 1;
    }
    printf("{\"bench\":\"kvcache\",\"model\":\"%s\",\"backend\":\"cpu\",\"isa\":\"%s\","
           "\"threads\":%d,\"prompt_tokens\":%zu,\"new_tokens\":%d,\"reps\":%d,"
           "\"with_cache_ms\":%.1f,\"without_cache_ms\":%.1f,"
           "\"with_cache_tok_s\":%.2f,\"without_cache_tok_s\":%.2f,\"speedup\":%.2f,"
           "\"same_tokens\":%s,"
           "\"prefill512_tok_s\":%.1f,\"decode128_tok_s\":%.2f}\n",
           ifd_model_config(m)->name, ifd_cpu_isa_name(), threads ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN),
           prompt.n, n_new, reps, med_on, med_off, n_out[0] / (med_on / 1e3),
           n_out[1] / (med_off / 1e3), med_off / med_on, same_tokens ? "true" : "false",
           512 / (res.prefill_ms / 1e3), (res.n_tokens - 1) / (res.decode_ms / 1e3));
    ifd_generate_result_free(&res);
    free(first);
    ifd_tokens_free(&prompt);
    ifd_chat_template_destroy(tpl);
    ifd_tokenizer_destroy(tok);
    ifd_model_destroy(m);
    be->ops->destroy(be);
    return 0;
}
