/*
 * bench_engine.c — offline serving throughput of the worker engine on the
 * CPU backend: N requests (random prompts of P tokens, O output tokens,
 * ignore_eos) from a closed loop of `concurrency` clients (a new request
 * is added as soon as one finishes, as `infer bench serve -c` does), served
 * with max_seqs = concurrency. For each concurrency and prefill cap it
 * reports output tokens/s, mean step time and tokens per step, time to first
 * token and inter-token latency (mean and percentiles, measured in the token
 * callback), the throughput ratio to concurrency 1, and the rates of the
 * steps that held only prefill (prefill_only_tok_s: prompt tokens/s) or only
 * decodes (decode_only_tok_s: tokens/s of batched decode; with concurrency
 * = requests = B, one prompt and --budget >= B x P, a pure "prefill B
 * prompts, then decode B sequences" run, as bench/cpu_vs_llamacpp.sh uses
 * for pp512, tg128 and batched decode). One JSON object on stdout.
 *
 *   bench_engine [--model PATH] [--requests N] [--prompt P] [--output O]
 *                [--concurrency 1,4,16,64] [--budget B] [--threads T]
 *                [--requests-c1 N1] [--kv-dtype f16|f32|bf16|q8_0|q4_0|fp8]
 *                [--prefill-cap auto,off,N,...] [--weights-dtype auto|f32]
 *                [--backend cpu|cuda|cuda-f32]
 *                [--step-ratio R] [--simulate A,B]
 *                [--spec off,ngram,draft] [--spec-tokens K] [--spec-ngram-min N]
 *                [--spec-ngram-max N] [--draft-model PATH] [--draft-step-tokens N]
 *                [--repeat-period N] [--spec-knee R] [--shared-prompt]
 *
 * --shared-prompt gives every request the same prompt (the first random
 * one): each run first serves it once alone (max_tokens 1, the prefix
 * cache's fill: its prompt blocks are published), then the closed loop's
 * requests find all its full blocks in the prefix cache and prefill only
 * the last block, so B sequences decode over one shared C-token context with
 * one prefill (llama-batched-bench -pps -kvu's setting; the long-context
 * decode benchmark, bench/kv_decode_vs_llamacpp.py --shared-prompt). The
 * pool then holds one prompt and B sequences' own blocks; the run reports
 * cached_tokens (prompt tokens its requests got from the prefix cache) and
 * shared_prefill_s (the fill's time, not in "seconds"); its prefill_only_tok_s
 * is the fill's rate.
 *
 * --spec lists speculative decoding methods to compare (docs/speculative.md;
 * default off): each concurrency and prefill cap runs once per method, the
 * engine's spec setting (k --spec-tokens, default 8; the n-gram proposer's
 * --spec-ngram-min/max, defaults 1 and 4), and `draft` with a draft model
 * (--draft-model PATH, loaded on the same backend; --draft-step-tokens: its
 * catch-up share of a step, 0 the budget) over a private pool of the run's
 * block count. The draft's tokenizer is not checked here (no tokenizer is
 * loaded): a draft of another vocabulary only proposes badly, the tokens
 * stay the model's. Each run reports the verifications, proposed and
 * accepted tokens, and tokens_hash, a hash of every request's output
 * tokens: greedy speculative decoding gives plain decoding's tokens, so
 * every method's runs of one shape print the same hash (a difference is a
 * bug). Random prompts give n-gram proposals little to copy:
 * --repeat-period N makes each prompt a random N-token piece repeated (a
 * copying task, where n-gram proposals hold). With the model as its own
 * draft every proposal is accepted: such a run times the draft path with
 * forced acceptance, not a real draft (label it so). --spec-knee R sets the
 * engine's verification budget (engine.h spec_knee: 0, the default, the
 * backend's; < 0 none); each run reports spec_budget_cut, the proposed
 * tokens it left out.
 *
 * --prefill-cap lists engine prefill_cap settings to compare (engine.h):
 * auto (0, the default: adaptive), off (-1: only the budget) or a fixed cap
 * of prefill tokens per step while sequences decode: the latency/throughput
 * trade-off curve of chunked prefill. --step-ratio sets the adaptive cap's
 * ratio (engine.h step_ratio; default IFD_ENGINE_STEP_RATIO).
 *
 * --simulate A,B replaces the model by a cost model: no weights are loaded, a
 * step of n tokens takes A + B x n ms of virtual time (the clock every timing
 * here reads), logits are zeros. The engine's scheduling is the real one
 * and does not depend on time (a closed loop adds requests when others
 * finish), so steps, tokens per step and the latency distribution in units
 * of step cost are exact; fitted A and B (from the real runs' mean step
 * times) give a curve free of the machine's load.
 *
 * --requests-c1 lets the (slow) concurrency-1 run use fewer requests: its
 * throughput is a rate, so it stays comparable. --kv-dtype defaults to f16,
 * the daemon's default kv_dtype, so the numbers are those of a served model;
 * --weights-dtype likewise defaults to the daemon's auto (backend.h).
 * --backend picks the worker's backend (backend_factory.h; cuda = device 0 of
 * CUDA_VISIBLE_DEVICES): bench/gpu_vs_hf.py drives the CUDA engine with it.
 */
#include "error.h"
#include "kernels.h"
#include "kvpool/kvparams.h"
#include "kvpool/kvpool.h"
#include "worker/backend.h"
#include "worker/engine.h"
#include "worker/model.h"
#include "worker/backend_factory.h"
#include "worker/kvprobe.h"
#include "worker/spec_draft.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Virtual time of --simulate (ms); < 0 when measuring for real. */
static double sim_ms = -1, sim_a, sim_b;

static double now_s(void)
{
    if (sim_ms >= 0)
        return sim_ms / 1e3;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define SIM_VOCAB 256

static int sim_forward(void *ctx, const ifd_batch_t *b, float *logits)
{
    (void)ctx;
    sim_ms += sim_a + sim_b * b->n_tok;
    memset(logits, 0, (size_t)b->n_logits * SIM_VOCAB * sizeof *logits);
    return 0;
}

/* Per-run timing: request i was sent at sent[i]; its tokens' gaps go to itl. */
typedef struct {
    long tokens;
    int finished;
    double *sent, *last, *ttft, *itl;
    long n_itl;
    uint64_t *hash; /* per request: FNV-1a over its output tokens */
    long cached;    /* prompt tokens served from the prefix cache, over finished requests */
} count_t;

static void on_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    count_t *c = ctx;
    double t = now_s();
    if (c->last[id] == 0)
        c->ttft[id] = t - c->sent[id];
    else
        c->itl[c->n_itl++] = t - c->last[id];
    c->last[id] = t;
    c->tokens++;
    uint64_t h = c->hash[id];
    for (int i = 0; i < 4; i++)
        h = (h ^ (((uint32_t)res->token >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    c->hash[id] = h;
}

/* Every request's output hash, in request order: the same tokens give the
 * same value whatever the steps' interleaving. */
static uint64_t tokens_hash(const count_t *c, int nr)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < nr; i++)
        h = (h ^ c->hash[i]) * 0x100000001b3ull;
    return h;
}

static void on_finish(void *ctx, uint64_t id, ifd_finish_reason_t r, const ifd_engine_usage_t *u)
{
    (void)id, (void)r;
    ((count_t *)ctx)->finished++;
    if (u)
        ((count_t *)ctx)->cached += u->cached_tokens;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints ,"name":{"mean":…,"p50":…,"p90":…,"p99":…,"max":…} of v[0..n) in ms (sorts v);
 * returns p99 / mean. */
static double print_dist(const char *name, double *v, long n)
{
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += v[i];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
#define PCT(q) (n ? v[(long)((double)(n - 1) * (q) + 0.5)] * 1e3 : 0.0)
    printf(",\"%s\":{\"mean\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}", name,
           n ? sum / (double)n * 1e3 : 0.0, PCT(0.5), PCT(0.9), PCT(0.99), PCT(1.0));
    double ratio = sum > 0 ? PCT(0.99) / (sum / (double)n * 1e3) : 0.0;
#undef PCT
    return ratio;
}

/* "auto" -> 0, "off" -> -1, else a positive count; -2 when bad. */
static int parse_cap(const char *s)
{
    if (strcmp(s, "auto") == 0)
        return 0;
    if (strcmp(s, "off") == 0)
        return -1;
    int v = atoi(s);
    return v > 0 ? v : -2;
}

/* The command line. */
typedef struct {
    const char *model;
    int n_req, n_req_c1, plen, olen, budget, threads;
    char conc_list[256], cap_list[256];
    const char *kv_name;      /* the daemon's default kv_dtype */
    const char *weights_name; /* the daemon's default weights_dtype */
    const char *backend_name;
    double step_ratio; /* 0: the engine's IFD_ENGINE_STEP_RATIO */
    double spec_knee;  /* the engine's spec_knee (0: the backend's; < 0: no budget) */
    ifd_kv_dtype_t kv_dtype;
    ifd_weights_dtype_t weights;
    int caps[16], n_caps;
    int concs[16], n_concs;
    char path[4096]; /* the default model's */
    char spec_list[64];
    ifd_spec_method_t specs[4];
    int n_specs, spec_tokens, ngram_min, ngram_max, draft_step_tokens, repeat_period;
    int shared_prompt; /* --shared-prompt */
    const char *draft_model;
} opts_t;

/* getopt's options into o (and the --simulate globals). 0, or the exit
 * status (2) after saying what is wrong. */
static int parse_opts(int argc, char **argv, opts_t *o)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},    {"requests", required_argument, NULL, 'r'},
        {"prompt", required_argument, NULL, 'p'},   {"output", required_argument, NULL, 'o'},
        {"concurrency", required_argument, NULL, 'c'}, {"budget", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'},  {"requests-c1", required_argument, NULL, '1'},
        {"kv-dtype", required_argument, NULL, 'k'}, {"prefill-cap", required_argument, NULL, 'P'},
        {"simulate", required_argument, NULL, 'S'}, {"weights-dtype", required_argument, NULL, 'w'},
        {"backend", required_argument, NULL, 'B'},
        {"step-ratio", required_argument, NULL, 'R'},
        {"spec", required_argument, NULL, 's'},     {"spec-tokens", required_argument, NULL, 'K'},
        {"spec-ngram-min", required_argument, NULL, 'n'},
        {"spec-ngram-max", required_argument, NULL, 'N'},
        {"draft-model", required_argument, NULL, 'D'},
        {"draft-step-tokens", required_argument, NULL, 'T'},
        {"repeat-period", required_argument, NULL, 'e'},
        {"spec-knee", required_argument, NULL, 'Q'},
        {"shared-prompt", no_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'r': o->n_req = atoi(optarg); break;
        case 'p': o->plen = atoi(optarg); break;
        case 'o': o->olen = atoi(optarg); break;
        case 'c': snprintf(o->conc_list, sizeof o->conc_list, "%s", optarg); break;
        case 'b': o->budget = atoi(optarg); break;
        case 't': o->threads = atoi(optarg); break;
        case '1': o->n_req_c1 = atoi(optarg); break;
        case 'k': o->kv_name = optarg; break;
        case 'w': o->weights_name = optarg; break;
        case 'B': o->backend_name = optarg; break;
        case 'P': snprintf(o->cap_list, sizeof o->cap_list, "%s", optarg); break;
        case 's': snprintf(o->spec_list, sizeof o->spec_list, "%s", optarg); break;
        case 'K': o->spec_tokens = atoi(optarg); break;
        case 'n': o->ngram_min = atoi(optarg); break;
        case 'N': o->ngram_max = atoi(optarg); break;
        case 'D': o->draft_model = optarg; break;
        case 'T': o->draft_step_tokens = atoi(optarg); break;
        case 'e': o->repeat_period = atoi(optarg); break;
        case 'Q': o->spec_knee = atof(optarg); break;
        case 'H': o->shared_prompt = 1; break;
        case 'R':
            if ((o->step_ratio = atof(optarg)) < 1.0) {
                fprintf(stderr, "bench_engine: --step-ratio R: R >= 1\n");
                return 2;
            }
            break;
        case 'S':
            if (sscanf(optarg, "%lf,%lf", &sim_a, &sim_b) != 2 || sim_a < 0 || sim_b < 0) {
                fprintf(stderr, "bench_engine: --simulate A,B: step cost A + B x tokens ms\n");
                return 2;
            }
            sim_ms = 0;
            break;
        default: fprintf(stderr, "bench_engine: bad option\n"); return 2;
        }
    }
    return 0;
}

/* The options' values checked and the lists split. 0 or 2. */
static int check_opts(opts_t *o)
{
    if (!o->model) {
        ifd_default_model_path(o->path, sizeof o->path);
        o->model = o->path;
    }
    if (ifd_kv_dtype_parse(o->kv_name, &o->kv_dtype) != 0) {
        fprintf(stderr,
                "bench_engine: --kv-dtype '%s': expected f32, f16, bf16, q8_0, q4_0 or fp8\n",
                o->kv_name);
        return 2;
    }
    if (ifd_weights_dtype_parse(o->weights_name, &o->weights) != 0) {
        fprintf(stderr, "bench_engine: --weights-dtype '%s': expected auto or f32\n",
                o->weights_name);
        return 2;
    }
    if (o->n_req < 1 || o->plen < 1 || o->olen < 1 || o->budget < 1) {
        fprintf(stderr, "bench_engine: sizes must be positive\n");
        return 2;
    }
    for (char *tok = strtok(o->cap_list, ","); tok && o->n_caps < 16; tok = strtok(NULL, ",")) {
        if ((o->caps[o->n_caps++] = parse_cap(tok)) < -1) {
            fprintf(stderr, "bench_engine: --prefill-cap '%s': expected auto, off or N > 0\n",
                    tok);
            return 2;
        }
    }
    for (char *tok = strtok(o->conc_list, ","); tok && o->n_concs < 16; tok = strtok(NULL, ","))
        if (atoi(tok) >= 1)
            o->concs[o->n_concs++] = atoi(tok);
    bool draft = false;
    for (char *tok = strtok(o->spec_list, ","); tok && o->n_specs < 4; tok = strtok(NULL, ",")) {
        ifd_spec_method_t m = !strcmp(tok, "off")     ? IFD_SPEC_OFF
                              : !strcmp(tok, "ngram") ? IFD_SPEC_NGRAM
                              : !strcmp(tok, "draft") ? IFD_SPEC_DRAFT
                                                      : 0;
        if (!m) {
            fprintf(stderr, "bench_engine: --spec '%s': expected off, ngram or draft\n", tok);
            return 2;
        }
        draft |= m == IFD_SPEC_DRAFT;
        o->specs[o->n_specs++] = m;
    }
    if (o->spec_tokens < 1 || o->spec_tokens > IFD_SPEC_MAX_TOKENS || o->ngram_min < 1 ||
        o->ngram_max < o->ngram_min || o->ngram_max > IFD_NGRAM_MAX_N ||
        o->draft_step_tokens < 0 || o->repeat_period < 0) {
        fprintf(stderr, "bench_engine: --spec-tokens 1..%d, --spec-ngram-min <= --spec-ngram-max "
                        "<= %d, --draft-step-tokens and --repeat-period >= 0\n",
                IFD_SPEC_MAX_TOKENS, IFD_NGRAM_MAX_N);
        return 2;
    }
    if (draft != (o->draft_model != NULL)) {
        fprintf(stderr, "bench_engine: --spec draft and --draft-model PATH go together\n");
        return 2;
    }
    if (draft && sim_ms >= 0) {
        fprintf(stderr, "bench_engine: --spec draft needs a model (not --simulate)\n");
        return 2;
    }
    return 0;
}

/* What every run shares: the model (NULL with --simulate), the prompts and
 * the timing buffers, and the concurrency-1 throughputs. */
typedef struct {
    const opts_t *o;
    ifd_backend_t *be;
    ifd_model_t *m;
    ifd_model_t *draft; /* --draft-model, or NULL */
    const ifd_model_config_t *cfg;
    int32_t *prompts;
    count_t cnt;
    double base[4][16]; /* concurrency-1 throughput per method and prefill cap */
    int first;
} bench_t;

/* One run's step rates: steps of only prefill, of only decodes. */
typedef struct {
    double pf_s, dec_s;
    long pf_tok, dec_tok;
} rates_t;

/* The closed loop: keeps conc requests in flight until nr have finished,
 * stepping the engine. 0 or 1 (said why). */
static int closed_loop(bench_t *b, ifd_engine_t *eng, int conc, int nr, rates_t *rt)
{
    const opts_t *o = b->o;
    count_t *cnt = &b->cnt;
    int sent = 0;
    while (sent < nr || !ifd_engine_idle(eng)) {
        /* closed loop: keep conc requests in flight */
        while (sent < nr && sent - cnt->finished < conc) {
            ifd_engine_request_t r;
            memset(&r, 0, sizeof r);
            r.id = (uint64_t)sent;
            r.prompt = b->prompts + (size_t)sent * (size_t)o->plen;
            r.n_prompt = o->plen;
            r.sampling = ifd_sampling_default_params();
            r.sampling.temperature = 0.0f;
            r.max_tokens = o->olen;
            r.ignore_eos = true;
            r.use_cache = true;
            if (ifd_engine_add(eng, &r)) {
                fprintf(stderr, "bench_engine: add failed\n");
                return 1;
            }
            cnt->sent[sent++] = now_s();
        }
        ifd_engine_step_stats_t ss;
        double ts = now_s();
        int rc = ifd_engine_step(eng, &ss);
        ts = now_s() - ts;
        if (ss.n_decode_tokens == 0 && ss.n_prefill_tokens > 0)
            rt->pf_s += ts, rt->pf_tok += ss.n_prefill_tokens;
        else if (ss.n_prefill_tokens == 0 && ss.n_decode_tokens > 0)
            rt->dec_s += ts, rt->dec_tok += ss.n_decode_tokens;
        if (rc < 0) {
            fprintf(stderr, "bench_engine: step failed: %s\n", ifd_strerror(rc));
            return 1;
        }
    }
    return 0;
}

/* --shared-prompt: serves the shared prompt (request 0's) once, one token,
 * so that its full blocks are published before the closed loop; its steps
 * count into rt's prefill rate. 0 or 1. */
static int fill_prefix(bench_t *b, ifd_engine_t *eng, rates_t *rt)
{
    ifd_engine_request_t r;
    memset(&r, 0, sizeof r);
    r.id = 0;
    r.prompt = b->prompts;
    r.n_prompt = b->o->plen;
    r.sampling = ifd_sampling_default_params();
    r.sampling.temperature = 0.0f;
    r.max_tokens = 1;
    r.ignore_eos = true;
    r.use_cache = true;
    b->cnt.sent[0] = now_s();
    if (ifd_engine_add(eng, &r)) {
        fprintf(stderr, "bench_engine: add failed\n");
        return 1;
    }
    while (!ifd_engine_idle(eng)) {
        ifd_engine_step_stats_t ss;
        double ts = now_s();
        const int rc = ifd_engine_step(eng, &ss);
        ts = now_s() - ts;
        if (ss.n_decode_tokens == 0 && ss.n_prefill_tokens > 0)
            rt->pf_s += ts, rt->pf_tok += ss.n_prefill_tokens;
        if (rc < 0) {
            fprintf(stderr, "bench_engine: step failed: %s\n", ifd_strerror(rc));
            return 1;
        }
    }
    return 0;
}

/* One run's JSON object (and its line on stderr). */
static const char *spec_name(ifd_spec_method_t m)
{
    return m == IFD_SPEC_NGRAM ? "ngram" : m == IFD_SPEC_DRAFT ? "draft" : "off";
}

static void print_run(bench_t *b, ifd_engine_t *eng, ifd_spec_draft_t *d, int si, int conc,
                      int cap, int ki, int nr, double dt, const rates_t *rt, double fill_s)
{
    count_t *cnt = &b->cnt;
    ifd_engine_stats_t st;
    ifd_engine_stats(eng, &st);
    double tps = (double)cnt->tokens / dt;
    double *base = &b->base[si][ki];
    if (conc == 1 && *base == 0)
        *base = tps;
    const ifd_spec_method_t m = b->o->specs[si];
    fprintf(stderr,
            "bench_engine: concurrency %d, prefill cap %d, spec %s: %d requests, %.1f s, "
            "%.1f output tok/s\n",
            conc, cap, spec_name(m), nr, dt, tps);
    char cap_name[16];
    snprintf(cap_name, sizeof cap_name, "%d", cap);
    printf("%s{\"concurrency\":%d,\"prefill_cap\":\"%s\",\"requests\":%d,"
           "\"seconds\":%.2f,\"output_tokens\":%ld,"
           "\"output_tok_s\":%.2f,\"steps\":%llu,\"mean_step_ms\":%.2f,"
           "\"tokens_per_step\":%.1f,\"forward_ms\":%.0f,\"sample_ms\":%.0f,"
           "\"schedule_ms\":%.0f,\"ratio_to_c1\":%.2f,"
           "\"prefill_only_tok_s\":%.1f,\"decode_only_tok_s\":%.2f",
           b->first ? "" : ",", conc, cap == 0 ? "auto" : cap < 0 ? "off" : cap_name, nr, dt,
           cnt->tokens, tps, (unsigned long long)st.steps,
           st.steps ? dt * 1e3 / (double)st.steps : 0.0,
           st.steps ? (double)st.tokens / (double)st.steps : 0.0, st.forward_ms, st.sample_ms,
           st.schedule_ms, *base > 0 ? tps / *base : 0.0,
           rt->pf_s > 0 ? (double)rt->pf_tok / rt->pf_s : 0.0,
           rt->dec_s > 0 ? (double)rt->dec_tok / rt->dec_s : 0.0);
    printf(",\"spec\":\"%s\",\"spec_drafts\":%llu,\"spec_draft_tokens\":%llu,"
           "\"spec_accepted_tokens\":%llu,\"spec_budget_cut\":%llu,\"acceptance\":%.3f,"
           "\"tokens_hash\":\"%016llx\"",
           spec_name(m), (unsigned long long)st.spec_drafts,
           (unsigned long long)st.spec_draft_tokens, (unsigned long long)st.spec_accepted_tokens,
           (unsigned long long)st.spec_budget_cut,
           st.spec_draft_tokens ? (double)st.spec_accepted_tokens / (double)st.spec_draft_tokens
                                : 0.0,
           (unsigned long long)tokens_hash(cnt, nr));
    if (d) {
        ifd_spec_draft_stats_t ds;
        ifd_spec_draft_stats(d, &ds);
        printf(",\"draft_forwards\":%llu,\"draft_tokens\":%llu,\"draft_catchup_tokens\":%llu",
               (unsigned long long)ds.forwards, (unsigned long long)ds.tokens,
               (unsigned long long)ds.catchup_tokens);
    }
    if (b->o->shared_prompt)
        printf(",\"cached_tokens\":%ld,\"shared_prefill_s\":%.2f", cnt->cached, fill_s);
    print_dist("ttft_ms", cnt->ttft, nr);
    printf(",\"itl_p99_over_mean\":%.2f}", print_dist("itl_ms", cnt->itl, cnt->n_itl));
    fflush(stdout);
    b->first = 0;
}

/* One run: concurrency concs[ci] with prefill cap caps[ki] and spec method
 * specs[si], on a fresh pool and engine (and draft pool). 0 or 1. */
static int run_one(bench_t *b, int si, int ci, int ki)
{
    const opts_t *o = b->o;
    int conc = o->concs[ci], cap = o->caps[ki];
    int nr = conc == 1 && o->n_req_c1 > 0 ? o->n_req_c1 : o->n_req;
    int max_req = o->n_req > o->n_req_c1 ? o->n_req : o->n_req_c1;
    ifd_kvpool_params_t kp;
    if (b->cfg) {
        kp = ifd_kvpool_model_params(b->cfg);
    } else { /* the fake model keeps nothing in it: a small geometry */
        kp = ifd_kvpool_default_params();
        kp.n_layers = 1, kp.n_kv_heads = 1, kp.head_dim = 2;
    }
    kp.dtype = o->kv_dtype;
    kp.n_blocks = (int64_t)conc * ((o->plen + o->olen) / kp.block_size + 2) + 16;
    if (o->shared_prompt) /* one prompt, then each sequence's last prompt block and its output */
        kp.n_blocks = (int64_t)(o->plen / kp.block_size + 2) +
                      (int64_t)conc * ((kp.block_size + o->olen) / kp.block_size + 2) + 16;
    kp.n_workers = 1;
    if (b->be && !b->be->ops->host_memory) /* a GPU backend reads its KV in device memory */
        kp.kind[0] = IFD_KVSEG_CUDA_VMM;
    ifd_kvpool_t *pool;
    ifd_engine_model_t em;
    ifd_engine_t *eng;
    b->cnt.tokens = 0, b->cnt.finished = 0, b->cnt.n_itl = 0;
    memset(b->cnt.last, 0, (size_t)max_req * sizeof(double));
    memset(b->cnt.hash, 0, (size_t)max_req * sizeof(uint64_t));
    ifd_engine_params_t ep = ifd_engine_default_params();
    ep.max_seqs = conc;
    ep.max_batched_tokens = o->budget > conc ? o->budget : conc;
    ep.prefill_cap = cap;
    ep.step_ratio = o->step_ratio;
    ep.spec = (ifd_spec_params_t){o->specs[si], o->spec_tokens, o->ngram_min, o->ngram_max};
    ep.spec_knee = o->spec_knee; /* 0: the backend's (engine.h) */
    ifd_engine_callbacks_t cb = {&b->cnt, on_token, on_finish, NULL};
    ifd_engine_model_t sim = {NULL, SIM_VOCAB, 1 << 20, sim_forward, 0,    0,    NULL, 0,
                              0,    NULL,      NULL,    0,           NULL, NULL, NULL, NULL,
                              NULL, NULL};
    if (!b->cfg)
        em = sim;
    if (ifd_kvpool_create(&kp, &pool) ||
        (b->cfg && ifd_engine_model_from(&em, b->m, pool, 0))) {
        fprintf(stderr, "bench_engine: setup failed\n");
        return 1;
    }
    ifd_spec_draft_t *d = NULL;
    if (o->specs[si] == IFD_SPEC_DRAFT) {
        const ifd_spec_draft_params_t dp = {.n_vocab = em.n_vocab,
                                            .max_batched_tokens = ep.max_batched_tokens,
                                            .n_blocks = kp.n_blocks,
                                            .block_size = kp.block_size,
                                            .dtype = kp.dtype,
                                            .step_tokens = o->draft_step_tokens};
        const ifd_kvprobe_params_t mp = {.max_seqs = conc};
        ifd_model_set_max_seqs(b->draft, ifd_kvprobe_draft_params(&mp).max_seqs);
        char err[512] = "";
        if (ifd_spec_draft_create(&d, b->draft, &dp, err, sizeof err)) {
            fprintf(stderr, "bench_engine: %s\n", err);
            return 1;
        }
        ep.drafter = ifd_spec_draft_drafter(d);
    }
    if (ifd_engine_create(&eng, &ep, &em, pool, &cb)) {
        fprintf(stderr, "bench_engine: setup failed\n");
        return 1;
    }
    rates_t rt = {0};
    double fill_s = 0;
    if (o->shared_prompt) { /* the shared prompt served once: its blocks published */
        fill_s = now_s();
        if (fill_prefix(b, eng, &rt))
            return 1;
        fill_s = now_s() - fill_s;
        b->cnt.tokens = 0, b->cnt.finished = 0, b->cnt.n_itl = 0, b->cnt.cached = 0;
        memset(b->cnt.last, 0, (size_t)max_req * sizeof(double));
        memset(b->cnt.hash, 0, (size_t)max_req * sizeof(uint64_t));
    }
    double t0 = now_s();
    if (closed_loop(b, eng, conc, nr, &rt))
        return 1;
    print_run(b, eng, d, si, conc, cap, ki, nr, now_s() - t0, &rt, fill_s);
    ifd_engine_destroy(eng);
    ifd_spec_draft_destroy(d); /* after the engine that used it */
    if (b->cfg)
        ifd_engine_model_free(&em);
    ifd_kvpool_destroy(pool);
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.n_req = 64, .plen = 128, .olen = 128, .budget = 256,
                .conc_list = "1,4,16,64", .cap_list = "auto", .kv_name = "f16",
                .weights_name = "auto", .backend_name = "cpu", .spec_list = "off",
                .spec_tokens = IFD_SPEC_DEFAULT_TOKENS, .ngram_min = 1, .ngram_max = 4};
    int status;
    if ((status = parse_opts(argc, argv, &o)) || (status = check_opts(&o)))
        return status;
    char err[1024] = "";
    bench_t b = {.o = &o, .first = 1};
    char name[160] = "simulated";
    int n_vocab = SIM_VOCAB;
    if (sim_ms < 0) {
        if (ifd_backend_factory_create(&b.be, o.backend_name, o.threads, o.weights, err,
                                       sizeof err) ||
            ifd_model_load(&b.m, o.model, b.be, err, sizeof err)) {
            fprintf(stderr, "bench_engine: %s\n", err);
            return 1;
        }
        if (o.draft_model && ifd_model_load(&b.draft, o.draft_model, b.be, err, sizeof err)) {
            fprintf(stderr, "bench_engine: the draft model: %s\n", err);
            return 1;
        }
        b.cfg = ifd_model_config(b.m);
        snprintf(name, sizeof name, "%s", b.cfg->name);
        n_vocab = (int)b.cfg->n_vocab;
    } else {
        snprintf(name, sizeof name, "simulated %g + %g ms/token", sim_a, sim_b);
    }
    int max_req = o.n_req > o.n_req_c1 ? o.n_req : o.n_req_c1;
    b.prompts = malloc((size_t)max_req * (size_t)o.plen * sizeof *b.prompts);
    srand(1234);
    for (long i = 0; i < (long)max_req * o.plen; i++) {
        const long at = i % o.plen; /* with a period: the prompt's first piece again */
        b.prompts[i] = o.repeat_period && at >= o.repeat_period
                           ? b.prompts[i - at + at % o.repeat_period]
                           : 100 + rand() % (n_vocab - 200 > 1 ? n_vocab - 200 : 1);
    }
    for (long i = o.plen; o.shared_prompt && i < (long)max_req * o.plen; i++)
        b.prompts[i] = b.prompts[i % o.plen]; /* every request: the first prompt */

    printf("{\"bench\":\"engine\",\"model\":\"%s\",\"backend\":\"%s\",\"isa\":\"%s\","
           "\"threads\":%d,"
           "\"kv_dtype\":\"%s\",\"weights_dtype\":\"%s\",\"weight_bytes\":%llu,"
           "\"prompt_tokens\":%d,\"output_tokens\":%d,\"budget\":%d,\"step_ratio\":%.2f,"
           "\"repeat_period\":%d,\"shared_prompt\":%s,\"spec_tokens\":%d,\"spec_ngram_min\":%d,"
           "\"spec_ngram_max\":%d,\"draft_model\":\"%s\",\"runs\":[",
           name, sim_ms < 0 ? o.backend_name : "none", sim_ms < 0 ? ifd_cpu_isa_name() : "none",
           o.threads ? o.threads : (int)sysconf(_SC_NPROCESSORS_ONLN), o.kv_name,
           o.weights_name, (unsigned long long)(b.m ? ifd_model_weight_bytes(b.m) : 0), o.plen,
           o.olen, o.budget, o.step_ratio > 0 ? o.step_ratio : IFD_ENGINE_STEP_RATIO,
           o.repeat_period, o.shared_prompt ? "true" : "false", o.spec_tokens, o.ngram_min,
           o.ngram_max,
           b.draft ? ifd_model_config(b.draft)->name : "");
    b.cnt.sent = calloc((size_t)max_req, sizeof(double));
    b.cnt.last = calloc((size_t)max_req, sizeof(double));
    b.cnt.ttft = calloc((size_t)max_req, sizeof(double));
    b.cnt.itl = calloc((size_t)max_req * (size_t)o.olen, sizeof(double));
    b.cnt.hash = calloc((size_t)max_req, sizeof(uint64_t));
    for (int si = 0; si < o.n_specs; si++)
        for (int ci = 0; ci < o.n_concs; ci++)
            for (int ki = 0; ki < o.n_caps; ki++)
                if (run_one(&b, si, ci, ki))
                    return 1;
    free(b.cnt.hash);
    free(b.cnt.sent);
    free(b.cnt.last);
    free(b.cnt.ttft);
    free(b.cnt.itl);
    printf("]}\n");
    free(b.prompts);
    ifd_model_destroy(b.draft);
    ifd_model_destroy(b.m);
    if (b.be)
        b.be->ops->destroy(b.be);
    return 0;
}
