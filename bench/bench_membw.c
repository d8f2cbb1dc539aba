/*
 * bench/bench_membw.c — the machine's streaming read bandwidth: the figure a
 * memory-bound batch-1 decode is measured against (weight bytes per token ×
 * tok/s ÷ this; bench/cpu_vs_llamacpp.py runs it in the same invocation).
 *
 *   bench_membw [--threads 2] [--mib 256] [--rounds 7]
 *
 * A buffer far larger than the last-level cache, advised MADV_HUGEPAGE as
 * inferd's weight buffers are and written once (so every page is resident),
 * then summed by --threads threads on the kernels' thread pool,
 * each over its contiguous slice, with 256-bit loads where the CPU has AVX2
 * (four independent accumulators, so the loads, not the adds, bound it).
 * Each round times one pass over the whole buffer; the result is the median
 * round ("best_gb_s": the fastest). Prints one JSON object:
 *   {"bench": "membw", "threads", "mib", "rounds", "avx2", "rounds_gb_s": [...],
 *    "read_gb_s", "best_gb_s", "checksum"}
 * Exit status: 0, 1 when the buffer cannot be had, 2 on bad usage.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cpu/threadpool.h"

typedef struct {
    const uint64_t *buf;
    size_t n;           /* uint64 words */
    uint64_t sums[256]; /* one per task, so the reads cannot be optimised away */
    int avx2;
} membw_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n)
{
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(p + i + 4)));
        c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(p + i + 8)));
        d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a);
    uint64_t s = l[0] + l[1] + l[2] + l[3];
    for (; i < n; i++)
        s += p[i];
    return s;
}

static uint64_t sum_plain(const uint64_t *p, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
    for (; i < n; i++)
        s0 += p[i];
    return s0 + s1 + s2 + s3;
}

static void task(void *ctx, int t, int n_tasks)
{
    membw_t *m = ctx;
    /* slices of whole 64-byte lines */
    size_t lines = m->n / 8, lo = lines * (size_t)t / n_tasks, hi = lines * (size_t)(t + 1) / n_tasks;
    const uint64_t *p = m->buf + lo * 8;
    size_t n = (hi - lo) * 8;
    m->sums[t] = m->avx2 ? sum_avx2(p, n) : sum_plain(p, n);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = 2, mib = 256, rounds = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads 2] [--mib 256] [--rounds 7]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 256 || mib < 1 || mib > 65536 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "bench_membw: --threads 1..256, --mib 1..65536, --rounds 1..1000\n");
        return 2;
    }
    const size_t bytes = (size_t)mib << 20;
    uint64_t *buf = aligned_alloc(2u << 20, bytes);
    if (!buf) {
        fprintf(stderr, "bench_membw: cannot allocate %d MiB\n", mib);
        return 1;
    }
    (void)madvise(buf, bytes, MADV_HUGEPAGE); /* advice only: a kernel without THP ignores it */
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < bytes / 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = x;
    }
    ifd_threadpool_t *tp;
    if (ifd_threadpool_create(&tp, threads) != 0) {
        fprintf(stderr, "bench_membw: cannot start %d threads\n", threads);
        free(buf);
        return 1;
    }
    membw_t m = {.buf = buf, .n = bytes / 8, .avx2 = __builtin_cpu_supports("avx2")};
    double *gbs = calloc((size_t)rounds, sizeof *gbs);
    uint64_t check = 0;
    ifd_threadpool_run(tp, task, &m, threads); /* warm: the pool's threads, the TLB */
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        ifd_threadpool_run(tp, task, &m, threads);
        double dt = now_s() - t0;
        gbs[r] = (double)bytes / dt / 1e9;
        for (int t = 0; t < threads; t++)
            check += m.sums[t];
    }
    printf("{\"bench\": \"membw\", \"threads\": %d, \"mib\": %d, \"rounds\": %d, \"avx2\": %s, "
           "\"rounds_gb_s\": [",
           threads, mib, rounds, m.avx2 ? "true" : "false");
    for (int r = 0; r < rounds; r++)
        printf("%s%.2f", r ? ", " : "", gbs[r]);
    qsort(gbs, (size_t)rounds, sizeof *gbs, cmp_double);
    printf("], \"read_gb_s\": %.2f, \"best_gb_s\": %.2f, \"checksum\": %llu}\n",
           gbs[rounds / 2], gbs[rounds - 1], (unsigned long long)check);
    free(gbs);
    ifd_threadpool_destroy(tp);
    free(buf);
    return 0;
}
