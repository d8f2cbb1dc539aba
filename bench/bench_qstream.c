/*
 * bench/bench_qstream.c — batch-1 decode's matrix products as a stream: the
 * read bandwidth the quantized kernels reach when their weights do not fit
 * in any cache, per type and SIMD path, beside the plain streaming read of
 * bench_membw. The question of issue 30: how much of the memory's speed does
 * a one-row product (x · wᵀ, m = 1) over ggml-quantized weights get.
 *
 *   bench_qstream [--threads 2] [--gib 1.0] [--rounds 5] [--types Q4_K,Q6_K,Q8_0,Q4_0]
 *                 [--m 1] [--prefetch 2048,0,...] [--split TASKS_PER_THREAD]
 *
 * The matrices are one Llama-3.2-1B layer's (q, k, v, o 2048-wide, gate and
 * up 8192 × 2048, down 2048 × 8192), repeated until their packed bytes
 * reach --gib, random quants with sane scales (speed does not depend on the
 * values). A round runs the products of every copy in order (the
 * activations quantized once, as the engine does per projection input) and
 * is timed whole; per type and path the median round gives "gb_s" = packed
 * bytes ÷ time. Paths: "avx2" (the one-group kernel the engine runs below
 * 5 rows on an AVX-512 VNNI CPU) and, where the CPU has AVX-512 VNNI,
 * "avx512" (the two-group kernel forced at every m). --prefetch lists
 * software-prefetch distances in bytes to try (0: none; each a separate
 * result). Prints one JSON object:
 *   {"bench": "qstream", "threads", "m", "gib", "isa", "results":
 *    [{"type", "path", "prefetch", "bytes", "rounds_ms": [...], "ms", "gb_s"}...]}
 * Exit status: 0, 1 on a failed allocation or product, 2 on bad usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/qmatmul.h"
#include "cpu/threadpool.h"
#include "kernels.h"
#include "modelfile/ggml_types.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const struct {
    const char *name;
    uint32_t type;
    int f16_off[2]; /* the block's f16 fields (-1: none) */
} types[] = {
    {"Q4_0", IFD_GGML_Q4_0, {0, -1}}, {"Q8_0", IFD_GGML_Q8_0, {0, -1}},
    {"Q4_K", IFD_GGML_Q4_K, {0, 2}},  {"Q6_K", IFD_GGML_Q6_K, {208, -1}},
    {"Q5_K", IFD_GGML_Q5_K, {0, 2}},  {"Q4_1", IFD_GGML_Q4_1, {0, 2}},
};

/* one Llama-3.2-1B layer: n × k */
static const int layer[][2] = {{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048},
                               {8192, 2048}, {8192, 2048}, {2048, 8192}};
enum { NMAT = sizeof layer / sizeof layer[0] };

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* A packed random weight [n, k] of type t (index into types). */
static void *make(int t, int n, int k)
{
    const uint32_t type = types[t].type;
    const size_t bb = ifd_ggml_block_bytes(type), nblk = (size_t)n * (k / ifd_ggml_block_elems(type));
    uint8_t *src = malloc(nblk * bb);
    int64_t bytes = ifd_cpu_qweight_bytes(type, n, k);
    void *dst = bytes > 0 ? aligned_alloc(64, ((size_t)bytes + 63) & ~(size_t)63) : NULL;
    if (!src || !dst) {
        free(src), free(dst);
        return NULL;
    }
    for (size_t i = 0; i + 8 <= nblk * bb; i += 8) {
        uint64_t v = next();
        memcpy(src + i, &v, 8);
    }
    for (size_t b = 0; b < nblk; b++)
        for (int f = 0; f < 2; f++)
            if (types[t].f16_off[f] >= 0) {
                uint16_t h = 0x2C00; /* 1/16 */
                memcpy(src + b * bb + types[t].f16_off[f], &h, 2);
            }
    if (ifd_cpu_qweight_pack(dst, src, type, n, k) != 0) {
        free(src), free(dst);
        return NULL;
    }
    free(src);
    return dst;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = 2, rounds = 5, m = 1;
    double gib = 1.0;
    const char *want = "Q4_K,Q6_K,Q8_0,Q4_0";
    int pf[16] = {2048}, npf = 1; /* the kernels' default */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--gib") == 0 && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc)
            want = argv[++i];
        else if (strcmp(argv[i], "--m") == 0 && i + 1 < argc)
            m = atoi(argv[++i]);
        else if (strcmp(argv[i], "--split") == 0 && i + 1 < argc)
            ifd__cpu_qmatmul_set_split(atoi(argv[++i]));
        else if (strcmp(argv[i], "--prefetch") == 0 && i + 1 < argc) {
            npf = 0;
            for (char *p = argv[++i]; *p && npf < 16; p += strspn(p, ","))
                pf[npf++] = (int)strtol(p, &p, 10);
        }
        else {
            fprintf(stderr, "usage: %s [--threads 2] [--gib 1.0] [--rounds 5] "
                            "[--types Q4_K,Q6_K,Q8_0,Q4_0] [--m 1]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 256 || rounds < 1 || rounds > 100 || gib <= 0 || gib > 64 ||
        m < 1 || m > 64) {
        fprintf(stderr, "bench_qstream: --threads 1..256, --rounds 1..100, --gib (0, 64], --m 1..64\n");
        return 2;
    }
    ifd_threadpool_t *tp;
    if (ifd_threadpool_create(&tp, threads) != 0)
        return 1;
    const int avx512 = ifd_cpu_features()->avx512vnni;
    /* activations: one buffer per distinct k (2048, 8192) */
    ifd_cpu_qact_t act[2];
    float *y = aligned_alloc(64, (size_t)m * 8192 * sizeof(float));
    for (int a = 0; a < 2; a++) {
        int k = a ? 8192 : 2048;
        float *x = malloc((size_t)m * k * sizeof(float));
        void *mem = aligned_alloc(64, ((size_t)ifd_cpu_qact_bytes(m, k) + 63) & ~(size_t)63);
        if (!x || !mem || !y || ifd_cpu_qact_init(&act[a], mem, m, k) != 0)
            return 1;
        for (int i = 0; i < m * k; i++)
            x[i] = (float)((int64_t)(next() % 2001) - 1000) / 1000.0f;
        ifd_cpu_quantize_act(&act[a], x, tp);
        free(x);
    }
    printf("{\"bench\": \"qstream\", \"threads\": %d, \"m\": %d, \"gib\": %.2f, \"isa\": \"%s\", "
           "\"results\": [",
           threads, m, gib, avx512 ? "avx512vnni" : "avx2");
    int first = 1;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (!strstr(want, types[t].name))
            continue;
        int64_t layer_bytes = 0;
        for (int j = 0; j < NMAT; j++)
            layer_bytes += ifd_cpu_qweight_bytes(types[t].type, layer[j][0], layer[j][1]);
        int copies = (int)(gib * (double)(1ull << 30) / (double)layer_bytes) + 1;
        void **w = calloc((size_t)copies * NMAT, sizeof *w);
        for (int c = 0; c < copies * NMAT; c++)
            if (!(w[c] = make((int)t, layer[c % NMAT][0], layer[c % NMAT][1]))) {
                fprintf(stderr, "bench_qstream: cannot allocate the weights\n");
                return 1;
            }
        for (int run = 0; run < (avx512 ? 2 : 1) * npf; run++) {
            const int path = 1 + run / npf, dist = pf[run % npf];
            ifd__cpu_qmatmul_set_avx512_min_m(path == 2 ? 1 : 1 << 30);
            ifd__cpu_qmatmul_set_prefetch(dist);
            double *ms = calloc((size_t)rounds, sizeof *ms);
            for (int r = -1; r < rounds; r++) { /* round -1 warms */
                double t0 = now_ms();
                for (int c = 0; c < copies * NMAT; c++) {
                    int n = layer[c % NMAT][0], k = layer[c % NMAT][1];
                    if (ifd__cpu_qmatmul_isa(y, n, &act[k == 8192], w[c], types[t].type, n, tp,
                                             path) != 0)
                        return 1;
                }
                if (r >= 0)
                    ms[r] = now_ms() - t0;
            }
            printf("%s{\"type\": \"%s\", \"path\": \"%s\", \"prefetch\": %d, \"bytes\": %lld, "
                   "\"rounds_ms\": [",
                   first ? "" : ", ", types[t].name, path == 2 ? "avx512" : "avx2", dist,
                   (long long)(layer_bytes * copies));
            first = 0;
            for (int r = 0; r < rounds; r++)
                printf("%s%.1f", r ? ", " : "", ms[r]);
            qsort(ms, (size_t)rounds, sizeof *ms, cmp_double);
            printf("], \"ms\": %.1f, \"gb_s\": %.2f}", ms[rounds / 2],
                   (double)(layer_bytes * copies) / ms[rounds / 2] / 1e6);
            fflush(stdout);
            free(ms);
        }
        ifd__cpu_qmatmul_set_avx512_min_m(0);
        ifd__cpu_qmatmul_set_prefetch(-1);
        for (int c = 0; c < copies * NMAT; c++)
            free(w[c]);
        free(w);
    }
    printf("]}\n");
    ifd_threadpool_destroy(tp);
    return 0;
}
