/*
 * bench/bench_qmatmul.c — quantized matmul (kernels/cpu/qmatmul.h) and the
 * f16/bf16 one (hmatmul.h: types F16, BF16) against the f32 packed one the
 * CPU backend used before, on SmolLM2 / Gemma 3 shapes.
 *
 *   bench_qmatmul [--threads 2] [--rounds 5] [--min-ms 60] [--types Q4_1,Q8_0,...]
 *                 [--shapes small|llama1b|siglip] [--m 512] [--no-f32] [--no-avx2]
 *                 [--clock wall|process] [--ms 1,2,4,8,9,12,16]
 *
 * The machine is shared and noisy, so the two are timed in alternation:
 * each round runs f32 then quantized (each for at least --min-ms) and the
 * result is the median per side plus the median of the per-round ratios.
 * "q" includes quantizing the activations (none for F16/BF16). --shapes
 * llama1b times one Llama-3.2-1B layer's products (q/o 2048×2048, k/v
 * 512×2048, gate/up 8192×2048, down 2048×8192) at --m rows (a prefill
 * chunk; default 512) instead of the small models' shapes at 1 and 512;
 * --shapes siglip one layer of Gemma 3's SigLIP tower (qkv 3456×1152, out
 * 1152×1152, fc1 4304×1152, fc2 1152×4304; the tower runs them at m = 4096
 * patches; bench_vision times the whole encode);
 * --ms times small row counts (speculation's verification steps: k + 1 rows)
 * on every product path at each m instead: SmolLM2-135M's decode products
 * (fused QKV 960×576, o 576×576, fused gate|up 3072×576, down 576×1536, the
 * LM head 49152×576), or with --shapes llama1b the 1B layer's four; the
 * "matmul" entries are then {"type","n","k","m","path","q_ms"};
 * --no-f32 leaves the f32 side out (f32_ms and speedup then 0), --no-avx2
 * the AVX2 path's rounds; --clock process times by the process's CPU time
 * (with --threads 1: a kernel's cost on a loaded machine, where the wall
 * clock counts the time other programs ran). Where the
 * product runs on AVX-512 (VNNI for the quantized types), its AVX2 path is
 * timed in the same rounds too ("q_avx2_ms", and "avx512_vs_avx2" = the
 * median of the rounds' AVX2 ÷ AVX-512 time ratios). Also the cost of one
 * empty thread-pool run (the sync a matmul pays) and of a decode step's worth of
 * them. Prints one JSON object:
 *   {"isa", "threads", "q_path", "clock", "matmul": [{"type","m","n","k","f32_ms","q_ms","speedup",
 *    "q_weights_gb_s"[, "q_avx2_ms", "avx512_vs_avx2"]}...],
 *    "sync": {"run_us", "runs_per_step", "step_us"}}
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_kernels.h"
#include "cpu/hmatmul.h"
#include "cpu/qmatmul.h"
#include "kernels.h"
#include "modelfile/ggml_types.h"

/* --clock process: the process's CPU time instead of the wall clock, for a
 * loaded machine with --threads 1 (time spent descheduled is not counted;
 * with more threads the pool's spinning waits would be) */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t seed = 88172645463325252ull;
static uint64_t rnd(void)
{
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    return seed;
}

static void *xmalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_qmatmul: out of memory\n");
        exit(1);
    }
    return p;
}

/* Random GGUF rows: every byte random, except that no 16-bit slot (so no
 * f16 scale, wherever the type keeps it) is an inf or NaN. */
static void *random_gguf(uint32_t type, int n, int k)
{
    size_t bytes = (size_t)n * (k / ifd_ggml_block_elems(type)) * ifd_ggml_block_bytes(type);
    uint8_t *w = xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)rnd();
    for (size_t i = 0; i + 1 < bytes; i += 2)
        if ((w[i + 1] & 0x7c) == 0x7c)
            w[i + 1] &= 0x3f;
    if (type == IFD_GGML_BF16) /* values of magnitude < 2: no inf/NaN */
        for (size_t i = 0; i + 1 < bytes; i += 2)
            w[i + 1] &= 0xbf;
    return w;
}

static double min_ms = 60;

typedef void (*run_fn)(void *ctx);

static double time_ms(run_fn fn, void *ctx)
{
    fn(ctx);
    int reps = 0;
    double t0 = now_ms(), t1;
    do {
        fn(ctx);
        reps++;
        t1 = now_ms();
    } while (t1 - t0 < min_ms);
    return (t1 - t0) / reps;
}

typedef struct {
    int m, n, k;
    uint32_t type;
    float *x, *y, *wp;
    void *wq;
    ifd_cpu_qact_t a;
    ifd_threadpool_t *tp;
} job_t;

static void run_f32(void *p)
{
    job_t *j = p;
    ifd_cpu_matmul_packed(j->y, j->x, j->wp, j->m, j->n, j->k, j->tp);
}

static void run_q(void *p)
{
    job_t *j = p;
    if (ifd_cpu_htype_supported(j->type)) {
        ifd_cpu_hmatmul(j->y, j->n, j->x, j->wq, j->type, j->m, j->n, j->k, j->tp);
        return;
    }
    ifd_cpu_quantize_act(&j->a, j->x, j->tp);
    ifd_cpu_qmatmul(j->y, j->n, &j->a, j->wq, j->type, j->n, j->tp);
}

/* The same on the AVX2 path, where the CPU's widest is AVX-512 (VNNI for
 * the quantized types). */
static void run_q_avx2(void *p)
{
    job_t *j = p;
    if (ifd_cpu_htype_supported(j->type)) {
        ifd__cpu_hmatmul_isa(j->y, j->n, j->x, j->wq, j->type, j->m, j->n, j->k, j->tp, 1);
        return;
    }
    ifd__cpu_quantize_act_isa(&j->a, j->x, j->tp, 1);
    ifd__cpu_qmatmul_isa(j->y, j->n, &j->a, j->wq, j->type, j->n, j->tp, 1);
}

static int have_avx512_q; /* ifd__cpu_qmatmul_isa takes path 2 */

/* --ms: the product on a forced path (qmatmul.h: 1 AVX2, 2 AVX-512 VNNI,
 * 3 AMX from 16 rows on; -1 the dispatch's own choice) */
static int forced_isa = -1;

static void run_q_isa(void *p)
{
    job_t *j = p;
    ifd__cpu_quantize_act_isa(&j->a, j->x, j->tp, 1);
    if (forced_isa < 0)
        ifd_cpu_qmatmul(j->y, j->n, &j->a, j->wq, j->type, j->n, j->tp);
    else
        ifd__cpu_qmatmul_isa(j->y, j->n, &j->a, j->wq, j->type, j->n, j->tp, forced_isa);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int first = 1;
static int no_f32, no_avx2;

static void bench(uint32_t type, int m, int n, int k, int rounds, ifd_threadpool_t *tp)
{
    job_t j = {.m = m, .n = n, .k = k, .type = type, .tp = tp};
    j.x = xmalloc(sizeof(float) * (size_t)m * k);
    for (int64_t i = 0; i < (int64_t)m * k; i++)
        j.x[i] = (float)(rnd() >> 40) / 16777216.0f - 0.5f;
    j.y = xmalloc(sizeof(float) * (size_t)m * n);
    void *src = random_gguf(type, n, k);
    float *w = NULL;
    if (!no_f32) {
        w = xmalloc(sizeof(float) * (size_t)n * k);
        ifd_cpu_dequantize(w, src, type, (int64_t)n * k);
        j.wp = xmalloc(sizeof(float) * (size_t)ifd_cpu_matmul_packed_floats(n, k));
        ifd_cpu_matmul_pack(j.wp, w, n, k);
    }
    const bool h = ifd_cpu_htype_supported(type);
    int64_t qb = h ? 2 * ifd_cpu_hweight_elems(n, k) : ifd_cpu_qweight_bytes(type, n, k);
    j.wq = xmalloc((size_t)qb);
    if (h)
        ifd_cpu_hweight_pack(j.wq, src, n, k);
    else
        ifd_cpu_qweight_pack(j.wq, src, type, n, k);
    void *amem = NULL; /* no activation quantization for F16/BF16 (k need not be one of 32) */
    if (!h) {
        amem = xmalloc((size_t)ifd_cpu_qact_bytes(m, k));
        ifd_cpu_qact_init(&j.a, amem, m, k);
    }
    double tf[32], tq[32], ratio[32], t2[32], r2[32];
    if (rounds > 32)
        rounds = 32;
    const bool vs_avx2 =
        !no_avx2 && (h ? strcmp(ifd_cpu_isa_name(), "avx512") == 0 : have_avx512_q);
    for (int r = 0; r < rounds; r++) {
        tf[r] = no_f32 ? 0.0 : time_ms(run_f32, &j);
        tq[r] = time_ms(run_q, &j);
        ratio[r] = tf[r] / tq[r];
        if (vs_avx2) {
            t2[r] = time_ms(run_q_avx2, &j);
            r2[r] = t2[r] / tq[r];
        }
    }
    qsort(tf, rounds, sizeof(double), cmp_d);
    qsort(tq, rounds, sizeof(double), cmp_d);
    qsort(ratio, rounds, sizeof(double), cmp_d);
    printf(first ? "\n    " : ",\n    ");
    first = 0;
    printf("{\"type\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"f32_ms\": %.4f, \"q_ms\": %.4f, "
           "\"speedup\": %.3f, \"q_weights_gb_s\": %.2f",
           ifd_ggml_type_name(type), m, n, k, tf[rounds / 2], tq[rounds / 2], ratio[rounds / 2],
           (double)qb / tq[rounds / 2] / 1e6);
    if (vs_avx2) {
        qsort(t2, rounds, sizeof(double), cmp_d);
        qsort(r2, rounds, sizeof(double), cmp_d);
        printf(", \"q_avx2_ms\": %.4f, \"avx512_vs_avx2\": %.3f", t2[rounds / 2], r2[rounds / 2]);
    }
    printf("}");
    fflush(stdout);
    free(j.x), free(j.y), free(src), free(w), free(j.wp), free(j.wq), free(amem);
}

/* --ms: one quantized product at every m of the list on every path this CPU
 * has (and the dispatch's own choice, "auto"; "amx": AMX tiles at every m,
 * ifd__cpu_qmatmul_set_amx_min_m(1)), the paths alternated within each
 * round: {"type","n","k","m","path","q_ms"} lines, medians of the rounds. */
static void bench_paths(uint32_t type, const int *ms, int n_ms, int n, int k, int rounds,
                        ifd_threadpool_t *tp)
{
    int m_max = 1;
    for (int i = 0; i < n_ms; i++)
        m_max = ms[i] > m_max ? ms[i] : m_max;
    void *src = random_gguf(type, n, k);
    void *wq = xmalloc((size_t)ifd_cpu_qweight_bytes(type, n, k));
    ifd_cpu_qweight_pack(wq, src, type, n, k);
    float *x = xmalloc(sizeof(float) * (size_t)m_max * k);
    float *y = xmalloc(sizeof(float) * (size_t)m_max * n);
    for (int64_t i = 0; i < (int64_t)m_max * k; i++)
        x[i] = (float)(rnd() >> 40) / 16777216.0f - 0.5f;
    void *amem = xmalloc((size_t)ifd_cpu_qact_bytes(m_max, k));
    static const int isas[] = {-1, 1, 2, 3};
    static const char *names[] = {"auto", "avx2", "avx512vnni", "amx"};
    if (rounds > 32)
        rounds = 32;
    for (int mi = 0; mi < n_ms; mi++) {
        job_t j = {.m = ms[mi], .n = n, .k = k, .type = type, .tp = tp, .x = x, .y = y, .wq = wq};
        ifd_cpu_qact_init(&j.a, amem, ms[mi], k);
        double t[4][32];
        int have[4];
        for (int p = 0; p < 4; p++) { /* a path this CPU lacks answers IFD_ENOTSUP */
            ifd__cpu_quantize_act_isa(&j.a, x, tp, 1);
            have[p] = isas[p] < 0 ||
                      ifd__cpu_qmatmul_isa(y, n, &j.a, wq, type, n, tp, isas[p]) == 0;
        }
        for (int r = 0; r < rounds; r++)
            for (int p = 0; p < 4; p++) {
                const int pp = r % 2 ? 3 - p : p;
                if (!have[pp])
                    continue;
                forced_isa = isas[pp];
                ifd__cpu_qmatmul_set_amx_min_m(isas[pp] == 3 ? 1 : 0);
                t[pp][r] = time_ms(run_q_isa, &j);
                ifd__cpu_qmatmul_set_amx_min_m(0);
            }
        for (int p = 0; p < 4; p++) {
            if (!have[p])
                continue;
            qsort(t[p], rounds, sizeof(double), cmp_d);
            printf(first ? "\n    " : ",\n    ");
            first = 0;
            printf("{\"type\": \"%s\", \"n\": %d, \"k\": %d, \"m\": %d, \"path\": \"%s\", "
                   "\"q_ms\": %.5f}",
                   ifd_ggml_type_name(type), n, k, ms[mi], names[p], t[p][rounds / 2]);
        }
    }
    fflush(stdout);
    free(src), free(wq), free(x), free(y), free(amem);
}

static void noop(void *ctx, int task, int n_tasks)
{
    (void)ctx, (void)task, (void)n_tasks;
}

/* Whether the comma-separated list holds name as a whole item ("BF16" does not hold "F16"). */
static int list_has(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p++)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int threads = 2, rounds = 5;
    const char *types = "Q4_1,Q8_0,Q4_K,Q5_0,Q6_K", *shape_set = "small";
    int m_big = 512;
    const char *ms_list = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--min-ms") == 0 && i + 1 < argc)
            min_ms = atof(argv[++i]);
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc)
            types = argv[++i];
        else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc)
            shape_set = argv[++i];
        else if (strcmp(argv[i], "--m") == 0 && i + 1 < argc)
            m_big = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc)
            ms_list = argv[++i];
        else if (strcmp(argv[i], "--no-f32") == 0)
            no_f32 = 1;
        else if (strcmp(argv[i], "--no-avx2") == 0)
            no_avx2 = 1;
        else if (strcmp(argv[i], "--clock") == 0 && i + 1 < argc &&
                 (strcmp(argv[i + 1], "wall") == 0 || strcmp(argv[i + 1], "process") == 0))
            bench_clock =
                strcmp(argv[++i], "process") == 0 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
        else {
            fprintf(stderr,
                    "usage: %s [--threads 2] [--rounds 5] [--min-ms 60] [--types ...] "
                    "[--shapes small|llama1b|siglip] [--m 512] [--ms 1,2,...] [--no-f32] "
                    "[--no-avx2] [--clock wall|process]\n",
                    argv[0]);
            return 2;
        }
    }
    ifd_threadpool_t *tp;
    if (ifd_threadpool_create(&tp, threads) != 0)
        return 1;
    {
        /* probe: an AVX-512 VNNI product path on this CPU? (1 row, 8 × 32 Q8_0) */
        static uint8_t wq[8 * 34];
        static int8_t q[32];
        static float d[1], y[8];
        static int32_t sx[1], sh[1];
        ifd_cpu_qact_t a = {q, d, sx, 1, 32, sh, d};
        have_avx512_q = ifd__cpu_qmatmul_isa(y, 8, &a, wq, IFD_GGML_Q8_0, 8, NULL, 2) == 0;
    }
    printf("{\"isa\": \"%s\", \"threads\": %d, \"q_path\": \"%s\", \"clock\": \"%s\",\n"
           "  \"matmul\": [",
           ifd_cpu_isa_name(), threads, have_avx512_q ? "avx512vnni" : "avx2-or-scalar",
           bench_clock == CLOCK_MONOTONIC ? "wall" : "process");
    static const uint32_t all[] = {IFD_GGML_Q4_0, IFD_GGML_Q4_1, IFD_GGML_Q5_0, IFD_GGML_Q5_1,
                                   IFD_GGML_Q8_0, IFD_GGML_Q4_K, IFD_GGML_Q5_K, IFD_GGML_Q6_K,
                                   IFD_GGML_F16,  IFD_GGML_BF16};
    if (strcmp(shape_set, "small") != 0 && strcmp(shape_set, "llama1b") != 0 &&
        strcmp(shape_set, "siglip") != 0) {
        fprintf(stderr, "bench_qmatmul: --shapes small, llama1b or siglip\n");
        return 2;
    }
    if (m_big < 1 || m_big > 8192) {
        fprintf(stderr, "bench_qmatmul: --m 1..8192\n");
        return 2;
    }
    const int big = strcmp(shape_set, "llama1b") == 0, siglip = strcmp(shape_set, "siglip") == 0;
    int ms[32], n_ms = 0;
    for (const char *p = ms_list; p && *p && n_ms < 32;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 8192) {
            fprintf(stderr, "bench_qmatmul: --ms takes a list of 1..8192\n");
            return 2;
        }
        ms[n_ms++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    /* SmolLM2 (k 576 / 1536) and Gemma 3 270M (k 640 / 1024 / 2048) shapes */
    static const int shapes[][2] = {{1536, 576}, {576, 1536}, {2048, 640}, {640, 2048}};
    /* one Llama-3.2-1B layer: q and o, k and v, gate and up, down */
    static const int shapes_1b[][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
    /* --ms with the small shapes: one SmolLM2-135M layer as the CPU backend runs
     * it (the fused QKV 960×576, o 576×576, the fused gate|up 3072×576, down
     * 576×1536) and its output layer 49152×576 */
    static const int shapes_smol[][2] = {{960, 576}, {576, 576}, {3072, 576}, {576, 1536},
                                         {49152, 576}};
    /* one layer of Gemma 3's SigLIP tower: qkv, out, fc1, fc2 */
    static const int shapes_siglip[][2] = {{3456, 1152}, {1152, 1152}, {4304, 1152}, {1152, 4304}};
    for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
        const char *name = ifd_ggml_type_name(all[t]);
        if (!list_has(types, name))
            continue;
        const int qk = (int)ifd_ggml_block_elems(all[t]);
        if (n_ms) { /* the products of a decode step: the small model's or the 1B layer's */
            if (ifd_cpu_htype_supported(all[t]))
                continue;
            const int(*sh)[2] = big ? shapes_1b : shapes_smol;
            const size_t nsh = big ? 4 : sizeof shapes_smol / sizeof shapes_smol[0];
            for (size_t s = 0; s < nsh; s++)
                if (sh[s][1] % qk == 0)
                    bench_paths(all[t], ms, n_ms, sh[s][0], sh[s][1], rounds, tp);
            continue;
        }
        if (big || siglip) {
            const int(*sh)[2] = big ? shapes_1b : shapes_siglip;
            for (size_t s = 0; s < 4; s++)
                if (sh[s][1] % qk == 0)
                    bench(all[t], m_big, sh[s][0], sh[s][1], rounds, tp);
            continue;
        }
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (shapes[s][1] % qk)
                continue;
            bench(all[t], 1, shapes[s][0], shapes[s][1], rounds, tp);
            bench(all[t], 512, shapes[s][0], shapes[s][1], rounds, tp);
        }
        if (576 % qk == 0)
            bench(all[t], 1, 49152, 576, rounds, tp); /* SmolLM2's output layer */
        if (640 % qk == 0)
            bench(all[t], 1, 262144, 640, rounds, tp); /* Gemma 3's (tied) output layer */
    }
    /* sync: an empty run of the pool, and a decode step's worth (SmolLM2 on
     * the fused backend: 30 layers × (QKV, attention, O, gate|up, down) +
     * the LM head = 151 runs; a batch-1 activation quantization adds none,
     * it runs inline below 64K elements) */
    int reps = 0;
    double t0 = now_ms(), t1;
    do {
        for (int i = 0; i < 1000; i++)
            ifd_threadpool_run(tp, noop, NULL, threads);
        reps += 1000;
        t1 = now_ms();
    } while (t1 - t0 < 200);
    const double us = (t1 - t0) * 1e3 / reps;
    const int runs = 30 * 5 + 1;
    printf("\n  ],\n  \"sync\": {\"run_us\": %.3f, \"runs_per_step\": %d, \"step_us\": %.1f}\n}\n",
           us, runs, us * runs);
    ifd_threadpool_destroy(tp);
    return 0;
}
