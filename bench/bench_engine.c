/*
 * bench_engine.c — offline serving throughput of the worker engine on the
 * CPU backend: N requests (random prompts of ~P tokens, O output tokens,
 * ignore_eos), all queued at once, served with max_seqs = concurrency.
 * For each concurrency it reports output tokens/s, mean step time and mean
 * tokens per step, and the throughput ratio to concurrency 1. One JSON
 * object on stdout.
 *
 *   bench_engine [--model PATH] [--requests N] [--prompt P] [--output O]
 *                [--concurrency 1,4,16,64] [--budget B] [--threads T]
 *                [--requests-c1 N1] [--kv-dtype f16|f32|bf16]
 *
 * --requests-c1 lets the (slow) concurrency-1 run use fewer requests: its
 * throughput is a rate, so it stays comparable. --kv-dtype defaults to f16,
 * the daemon's default kv_dtype, so the numbers are those of a served model.
 */
#include "backend.h"
#include "engine.h"
#include "error.h"
#include "kernels.h"
#include "kvpool.h"
#include "model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct {
    long tokens;
    int finished;
} count_t;

static void on_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    (void)id, (void)res;
    ((count_t *)ctx)->tokens++;
}

static void on_finish(void *ctx, uint64_t id, ifd_finish_reason_t r, const ifd_engine_usage_t *u)
{
    (void)id, (void)r, (void)u;
    ((count_t *)ctx)->finished++;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int n_req = 64, n_req_c1 = 0, plen = 128, olen = 128, budget = 256, threads = 0;
    char conc_list[256] = "1,4,16,64";
    const char *kv_name = "f16"; /* the daemon's default kv_dtype */
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},    {"requests", required_argument, NULL, 'r'},
        {"prompt", required_argument, NULL, 'p'},   {"output", required_argument, NULL, 'o'},
        {"concurrency", required_argument, NULL, 'c'}, {"budget", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'},  {"requests-c1", required_argument, NULL, '1'},
        {"kv-dtype", required_argument, NULL, 'k'}, {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'r': n_req = atoi(optarg); break;
        case 'p': plen = atoi(optarg); break;
        case 'o': olen = atoi(optarg); break;
        case 'c': snprintf(conc_list, sizeof conc_list, "%s", optarg); break;
        case 'b': budget = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case '1': n_req_c1 = atoi(optarg); break;
        case 'k': kv_name = optarg; break;
        default: fprintf(stderr, "bench_engine: bad option\n"); return 2;
        }
    }
    char path[4096];
    if (!model) {
        ifd_default_model_path(path, sizeof path);
        model = path;
    }
    ifd_kv_dtype_t kv_dtype;
    if (ifd_kv_dtype_parse(kv_name, &kv_dtype) != 0) {
        fprintf(stderr, "bench_engine: --kv-dtype '%s': expected f32, f16 or bf16\n", kv_name);
        return 2;
    }
    if (n_req < 1 || plen < 1 || olen < 1 || budget < 1) {
        fprintf(stderr, "bench_engine: sizes must be positive\n");
        return 2;
    }
    char err[1024] = "";
    ifd_backend_t *be;
    ifd_model_t *m;
    if (ifd_backend_cpu_create(&be, threads) || ifd_model_load(&m, model, be, err, sizeof err)) {
        fprintf(stderr, "bench_engine: %s\n", err);
        return 1;
    }
    const ifd_model_config_t *cfg = ifd_model_config(m);
    int32_t *prompts = malloc((size_t)n_req * (size_t)plen * sizeof *prompts);
    srand(1234);
    for (long i = 0; i < (long)n_req * plen; i++)
        prompts[i] = 100 + rand() % ((int)cfg->n_vocab - 200);

    printf("{\"bench\":\"engine\",\"model\":\"%s\",\"isa\":\"%s\",\"threads\":%d,"
           "\"kv_dtype\":\"%s\",\"prompt_tokens\":%d,\"output_tokens\":%d,\"budget\":%d,"
           "\"runs\":[",
           cfg->name, ifd_cpu_isa_name(), threads ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN),
           kv_name, plen, olen, budget);
    double base = 0;
    int first = 1;
    for (char *tok = strtok(conc_list, ","); tok; tok = strtok(NULL, ",")) {
        int conc = atoi(tok);
        if (conc < 1)
            continue;
        int nr = conc == 1 && n_req_c1 > 0 ? n_req_c1 : n_req;
        ifd_kvpool_params_t kp = ifd_model_kvpool_params(cfg);
        kp.dtype = kv_dtype;
        kp.n_blocks = (int64_t)conc * ((plen + olen) / kp.block_size + 2) + 16;
        kp.n_workers = 1;
        ifd_kvpool_t *pool;
        ifd_engine_model_t em;
        ifd_engine_t *eng;
        count_t cnt = {0, 0};
        ifd_engine_params_t ep = ifd_engine_default_params();
        ep.max_seqs = conc;
        ep.max_batched_tokens = budget > conc ? budget : conc;
        ifd_engine_callbacks_t cb = {&cnt, on_token, on_finish};
        if (ifd_kvpool_create(&kp, &pool) || ifd_engine_model_from(&em, m, pool, 0) ||
            ifd_engine_create(&eng, &ep, &em, pool, &cb)) {
            fprintf(stderr, "bench_engine: setup failed\n");
            return 1;
        }
        for (int i = 0; i < nr; i++) {
            ifd_engine_request_t r;
            memset(&r, 0, sizeof r);
            r.id = (uint64_t)i;
            r.prompt = prompts + (size_t)i * (size_t)plen;
            r.n_prompt = plen;
            r.sampling = ifd_sampling_default_params();
            r.sampling.temperature = 0.0f;
            r.max_tokens = olen;
            r.ignore_eos = true;
            r.use_cache = true;
            if (ifd_engine_add(eng, &r)) {
                fprintf(stderr, "bench_engine: add failed\n");
                return 1;
            }
        }
        double t0 = now_s();
        while (!ifd_engine_idle(eng)) {
            int rc = ifd_engine_step(eng, NULL);
            if (rc < 0) {
                fprintf(stderr, "bench_engine: step failed: %s\n", ifd_strerror(rc));
                return 1;
            }
        }
        double dt = now_s() - t0;
        ifd_engine_stats_t st;
        ifd_engine_stats(eng, &st);
        double tps = (double)cnt.tokens / dt;
        if (conc == 1 || base == 0)
            base = conc == 1 ? tps : base;
        fprintf(stderr, "bench_engine: concurrency %d: %d requests, %.1f s, %.1f output tok/s\n",
                conc, nr, dt, tps);
        printf("%s{\"concurrency\":%d,\"requests\":%d,\"seconds\":%.2f,\"output_tokens\":%ld,"
               "\"output_tok_s\":%.2f,\"steps\":%llu,\"mean_step_ms\":%.2f,"
               "\"tokens_per_step\":%.1f,\"forward_ms\":%.0f,\"sample_ms\":%.0f,"
               "\"schedule_ms\":%.0f,\"ratio_to_c1\":%.2f}",
               first ? "" : ",", conc, nr, dt, cnt.tokens, tps, (unsigned long long)st.steps,
               st.steps ? dt * 1e3 / (double)st.steps : 0.0,
               st.steps ? (double)st.tokens / (double)st.steps : 0.0, st.forward_ms, st.sample_ms,
               st.schedule_ms, base > 0 ? tps / base : 0.0);
        fflush(stdout);
        first = 0;
        ifd_engine_destroy(eng);
        ifd_engine_model_free(&em);
        ifd_kvpool_destroy(pool);
    }
    printf("]}\n");
    free(prompts);
    ifd_model_destroy(m);
    be->ops->destroy(be);
    return 0;
}
