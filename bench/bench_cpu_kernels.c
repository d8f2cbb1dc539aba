/*
 * bench/bench_cpu_kernels.c — throughput of the CPU kernels on SmolLM2-135M
 * shapes.
 *
 *   bench_cpu_kernels [--threads 1,2] [--min-ms 300] [--quick] [--attention-only]
 *                     [--kv-types] [--clock wall|process]
 *
 * For each thread count: matmul through both APIs — ifd_cpu_matmul_f32 on a
 * plain [n, k] weight ("f32") and ifd_cpu_matmul_packed on weights packed once
 * beforehand ("packed", what the CPU backend uses) — at decode (m = 1, bound by
 * streaming the weights), m = 64 and prefill (m = 512) for every projection
 * shape (k=576 → n=576/192/1536, k=1536 → n=576, and the 49152-row output
 * layer at m = 1); paged attention (SmolLM2: 9 query / 3 KV heads, head_dim
 * 64, f32 and f16 KV; Gemma 3 270M: 4 / 1 heads, head_dim 256, f16 KV) for
 * decode batches at contexts 512 and 2048 and a 512-token causal prefill
 * (ms: mean per call, ms_best: the fastest call, for a noisy machine; kv_gb_s: the
 * K/V bytes the call reads over ms); and the cost of one empty thread-pool run.
 * --kv-types: only decode attention per KV type (f16, q8_0, q4_0) at long
 * contexts, for the quantized-query kernels (docs/kvpool.md): one sequence at
 * 4096 and 16384 positions and 16 sequences at 4096, SmolLM2's layer (3 KV
 * heads), one head group of it (1 KV head, 3 query heads) and one head group
 * of Llama-3.2-1B (1 KV head, 4 query heads, head_dim 64); its rows add
 * ns_pos, the time per position of the context (per KV head). Each number is
 * the mean over repetitions filling at least --min-ms. --clock process times
 * by the process's CPU time (CLOCK_PROCESS_CPUTIME_ID) instead of the wall
 * clock: on a loaded machine the wall clock counts the time other programs
 * ran, the CPU time does not (use it with --threads 1 for A/B figures).
 * $INFERD_CPU caps the ISA.
 * Prints one JSON object:
 *   {"isa", "cpus", "clock",
 *    "matmul":[{"api","m","n","k","threads","ms","gflop_s","weights_gb_s"}…],
 *    "attention":[{"shape","kind","batch","ctx","kv_dtype","threads","ms","ms_best",
 *                  "tokens_s","kv_gb_s"[,"ns_pos"]}…],
 *    "threadpool_run_us":[{"threads","us"}…]}
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu/cpu_kernels.h"
#include "kernels.h"

/* --clock process: CLOCK_PROCESS_CPUTIME_ID instead of the wall clock. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static float *rnd_array(int64_t n, uint64_t seed)
{
    float *a = malloc(sizeof(float) * (size_t)n);
    if (!a) {
        fprintf(stderr, "bench_cpu_kernels: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)((seed >> 40) * (1.0 / 16777216.0)) - 0.5f;
    }
    return a;
}

static double min_ms = 300;
static int first_row = 1;

static void sep(void)
{
    printf(first_row ? "\n    " : ",\n    ");
    first_row = 0;
}

/* ---- matmul ------------------------------------------------------------------ */

/* packed: weights pre-packed once (ifd_cpu_matmul_pack, as the CPU backend
 * does at load) and multiplied with ifd_cpu_matmul_packed. */
static void bench_matmul(int m, int n, int k, int packed, ifd_threadpool_t *tp)
{
    float *x = rnd_array((int64_t)m * k, 1), *w = rnd_array((int64_t)n * k, 2);
    float *y = malloc(sizeof(float) * (size_t)m * n), *wp = NULL;
    if (packed) {
        int64_t nf = ifd_cpu_matmul_packed_floats(n, k);
        wp = aligned_alloc(64, ((size_t)nf * sizeof(float) + 63) / 64 * 64);
        ifd_cpu_matmul_pack(wp, w, n, k);
    }
    int reps = 0;
    double t0 = 0, t1;
    for (int warm = 1;; warm = 0) {
        if (packed)
            ifd_cpu_matmul_packed(y, x, wp, m, n, k, tp);
        else
            ifd_cpu_matmul_f32(y, x, w, m, n, k, tp);
        t1 = now_ms();
        if (warm) {
            t0 = t1;
            continue;
        }
        reps++;
        if (t1 - t0 >= min_ms)
            break;
    }
    const double ms = (t1 - t0) / reps;
    sep();
    printf("{\"api\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"threads\": %d, \"ms\": %.4f, "
           "\"gflop_s\": %.2f, \"weights_gb_s\": %.2f}",
           packed ? "packed" : "f32", m, n, k, ifd_threadpool_size(tp), ms,
           2.0 * m * n * k / ms / 1e6, 4.0 * n * k / ms / 1e6);
    fflush(stdout);
    free(x), free(w), free(y), free(wp);
}

/* ---- attention --------------------------------------------------------------- */

enum { BS = 16 };

/* Attention shapes: query heads, KV heads, head_dim. */
typedef struct {
    const char *name;
    int nh, nkv, hd;
} att_shape_t;

static const att_shape_t SMOLLM2 = {"smollm2", 9, 3, 64}, GEMMA3 = {"gemma3", 4, 1, 256};
static const att_shape_t SMOLLM2_GROUP = {"smollm2_group", 3, 1, 64};
static const att_shape_t LLAMA1B_GROUP = {"llama1b_group", 4, 1, 64};
static const char *const KV_NAMES[] = {"f32", "f16", "bf16", "q8_0", "q4_0"}; /* by ifd_dtype_t */

/* batch sequences of ctx tokens each; decode = the last token of each,
 * prefill = all ctx tokens of one sequence. */
static void bench_attention(const att_shape_t *sh, const char *kind, int batch, int ctx,
                            ifd_dtype_t dt, ifd_threadpool_t *tp)
{
    const int NH = sh->nh, NKV = sh->nkv, HD = sh->hd;
    const int blocks_per_seq = (ctx + BS - 1) / BS;
    const int n_blocks = blocks_per_seq * batch;
    const int64_t rows = (int64_t)n_blocks * NKV * BS;
    ifd_kv_layer_t kv = {.dtype = dt, .block_size = BS, .n_kv_heads = NKV, .head_dim = HD};
    kv.k = malloc((size_t)(ifd_kv_row_bytes(dt, HD) * rows));
    kv.v = malloc((size_t)(ifd_kv_row_bytes(dt, HD) * rows));
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)n_blocks);
    if (!kv.k || !kv.v || !bt) {
        fprintf(stderr, "bench_cpu_kernels: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < n_blocks; i++) /* interleaved, as a busy pool hands them out */
        bt[i] = (i % batch) * blocks_per_seq + i / batch;
    /* Fill the cache through kv_write, one sequence at a time. */
    float *kr = rnd_array((int64_t)ctx * NKV * HD, 3), *vr = rnd_array((int64_t)ctx * NKV * HD, 4);
    int64_t *slot = malloc(sizeof(int64_t) * (size_t)ctx);
    for (int s = 0; s < batch; s++) {
        for (int p = 0; p < ctx; p++)
            slot[p] = (int64_t)bt[s * blocks_per_seq + p / BS] * BS + p % BS;
        ifd_cpu_kv_write(&kv, kr, vr, slot, ctx);
    }
    const int prefill = strcmp(kind, "prefill") == 0;
    const int n_tok = prefill ? ctx : batch;
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)n_tok),
            *pos = malloc(sizeof(int32_t) * (size_t)n_tok);
    for (int t = 0; t < n_tok; t++) {
        seq[t] = prefill ? 0 : t;
        pos[t] = prefill ? t : ctx - 1;
    }
    float *q = rnd_array((int64_t)n_tok * NH * HD, 5);
    float *out = malloc(sizeof(float) * (size_t)n_tok * NH * HD);
    const float scale = 1.0f / sqrtf((float)HD);
    ifd_cpu_paged_attention(out, q, &kv, seq, pos, NULL, bt, blocks_per_seq, n_tok, NH, scale, 0,
                            tp);
    int reps = 0;
    double t0 = now_ms(), t1 = t0, best = 1e30;
    do {
        const double c0 = t1;
        ifd_cpu_paged_attention(out, q, &kv, seq, pos, NULL, bt, blocks_per_seq, n_tok, NH, scale,
                                0, tp);
        reps++;
        t1 = now_ms();
        best = t1 - c0 < best ? t1 - c0 : best;
    } while (t1 - t0 < min_ms);
    const double ms = (t1 - t0) / reps;
    /* K and V rows every call reads: each sequence's ctx positions, all KV heads. */
    const double kv_bytes = 2.0 * (double)ifd_kv_row_bytes(dt, HD) * NKV * ctx * batch;
    sep();
    printf("{\"shape\": \"%s\", \"kind\": \"%s\", \"batch\": %d, \"ctx\": %d, "
           "\"kv_dtype\": \"%s\", \"threads\": %d, \"ms\": %.4f, \"ms_best\": %.4f, "
           "\"tokens_s\": %.1f, \"kv_gb_s\": %.2f",
           sh->name, kind, batch, ctx, KV_NAMES[dt],
           ifd_threadpool_size(tp), ms, best, n_tok / ms * 1e3, kv_bytes / ms * 1e-6);
    if (!prefill) /* per position and KV head of every sequence */
        printf(", \"ns_pos\": %.2f", ms * 1e6 / ((double)ctx * batch * NKV));
    printf("}");
    fflush(stdout);
    free(kv.k), free(kv.v), free(bt), free(kr), free(vr), free(slot), free(seq), free(pos), free(q),
        free(out);
}

/* ---- thread pool ------------------------------------------------------------- */

static void noop(void *ctx, int task, int n_tasks)
{
    (void)ctx, (void)task, (void)n_tasks;
}

static void bench_pool(ifd_threadpool_t *tp)
{
    int reps = 0;
    double t0 = now_ms(), t1;
    do {
        for (int i = 0; i < 1000; i++)
            ifd_threadpool_run(tp, noop, NULL, 2 * ifd_threadpool_size(tp));
        reps += 1000;
        t1 = now_ms();
    } while (t1 - t0 < min_ms);
    sep();
    printf("{\"threads\": %d, \"us\": %.3f}", ifd_threadpool_size(tp), (t1 - t0) * 1e3 / reps);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int threads[8] = {1, 2}, n_threads = 2, quick = 0, attention_only = 0, kv_types = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_threads = 0;
            for (char *p = argv[++i]; *p && n_threads < 8;) {
                threads[n_threads++] = (int)strtol(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (strcmp(argv[i], "--min-ms") == 0 && i + 1 < argc) {
            min_ms = atof(argv[++i]);
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--attention-only") == 0) {
            attention_only = 1;
        } else if (strcmp(argv[i], "--kv-types") == 0) {
            kv_types = attention_only = 1;
        } else if (strcmp(argv[i], "--clock") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "wall") == 0 || strcmp(argv[i + 1], "process") == 0)) {
            bench_clock =
                strcmp(argv[++i], "process") == 0 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
        } else {
            fprintf(stderr,
                    "usage: %s [--threads 1,2] [--min-ms 300] [--quick] [--attention-only] "
                    "[--kv-types] [--clock wall|process]\n",
                    argv[0]);
            return 2;
        }
    }
    ifd_threadpool_t *pools[8];
    for (int i = 0; i < n_threads; i++)
        if (ifd_threadpool_create(&pools[i], threads[i]) != 0) {
            fprintf(stderr, "bench_cpu_kernels: cannot create a pool of %d threads\n", threads[i]);
            return 1;
        }
    static const int shapes[][2] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}};
    printf("{\"isa\": \"%s\", \"cpus\": %ld, \"clock\": \"%s\",\n  \"matmul\": [",
           ifd_cpu_isa_name(), sysconf(_SC_NPROCESSORS_ONLN),
           bench_clock == CLOCK_MONOTONIC ? "wall" : "process");
    for (int t = 0; t < n_threads && !attention_only; t++)
        for (int packed = 0; packed < 2; packed++) {
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                bench_matmul(1, shapes[s][0], shapes[s][1], packed, pools[t]);
            bench_matmul(1, 49152, 576, packed, pools[t]);
            if (!quick)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                    bench_matmul(64, shapes[s][0], shapes[s][1], packed, pools[t]);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                bench_matmul(512, shapes[s][0], shapes[s][1], packed, pools[t]);
        }
    printf("\n  ],\n  \"attention\": [");
    first_row = 1;
    static const ifd_dtype_t kv_dts[] = {IFD_DTYPE_F16, IFD_DTYPE_Q8_0, IFD_DTYPE_Q4_0};
    for (int t = 0; t < n_threads && kv_types; t++)
        for (int d = 0; d < 3; d++) {
            bench_attention(&SMOLLM2_GROUP, "decode", 1, 4096, kv_dts[d], pools[t]);
            bench_attention(&SMOLLM2_GROUP, "decode", 1, 16384, kv_dts[d], pools[t]);
            bench_attention(&LLAMA1B_GROUP, "decode", 1, 4096, kv_dts[d], pools[t]);
            bench_attention(&LLAMA1B_GROUP, "decode", 1, 16384, kv_dts[d], pools[t]);
            bench_attention(&SMOLLM2, "decode", 1, 4096, kv_dts[d], pools[t]);
            bench_attention(&SMOLLM2, "decode", 1, 16384, kv_dts[d], pools[t]);
            if (!quick)
                bench_attention(&SMOLLM2, "decode", 16, 4096, kv_dts[d], pools[t]);
        }
    for (int t = 0; t < n_threads && !kv_types; t++) {
        bench_attention(&SMOLLM2, "decode", 1, 512, IFD_DTYPE_F32, pools[t]);
        bench_attention(&SMOLLM2, "decode", 1, 512, IFD_DTYPE_F16, pools[t]);
        bench_attention(&SMOLLM2, "decode", 8, 512, IFD_DTYPE_F32, pools[t]);
        bench_attention(&SMOLLM2, "decode", 8, 2048, IFD_DTYPE_F32, pools[t]);
        bench_attention(&SMOLLM2, "decode", 8, 2048, IFD_DTYPE_F16, pools[t]);
        bench_attention(&SMOLLM2, "decode", 8, 2048, IFD_DTYPE_Q8_0, pools[t]);
        bench_attention(&SMOLLM2, "decode", 8, 2048, IFD_DTYPE_Q4_0, pools[t]);
        bench_attention(&SMOLLM2, "prefill", 1, 512, IFD_DTYPE_F32, pools[t]);
        bench_attention(&GEMMA3, "decode", 1, 512, IFD_DTYPE_F16, pools[t]);
        bench_attention(&GEMMA3, "decode", 1, 2048, IFD_DTYPE_F16, pools[t]);
        bench_attention(&GEMMA3, "decode", 4, 512, IFD_DTYPE_F16, pools[t]);
        if (!quick) {
            bench_attention(&SMOLLM2, "prefill", 1, 512, IFD_DTYPE_F16, pools[t]);
            bench_attention(&GEMMA3, "prefill", 1, 512, IFD_DTYPE_F16, pools[t]);
        }
    }
    printf("\n  ],\n  \"threadpool_run_us\": [");
    first_row = 1;
    for (int t = 0; t < n_threads && !kv_types; t++)
        bench_pool(pools[t]);
    printf("\n  ]\n}\n");
    for (int i = 0; i < n_threads; i++)
        ifd_threadpool_destroy(pools[i]);
    return 0;
}
