/*
 * bench/bench_membw.c — the machine's streaming read bandwidth: the figure a
 * memory-bound batch-1 decode is measured against (weight bytes per token ×
 * tok/s ÷ this; bench/cpu_vs_llamacpp.py runs it in the same invocation).
 *
 *   bench_membw [--threads 2] [--mib 1024] [--rounds 7] [--isa avx512|avx2|scalar]
 *
 * A buffer far larger than the last-level cache (1 GiB by default: this
 * machine's L3 is reported as 260 MiB), advised MADV_HUGEPAGE as inferd's
 * weight buffers are and written once (so every page is resident), then
 * summed by --threads dedicated threads, each pinned to its own CPU and
 * streaming its contiguous slice with the widest loads the CPU has (AVX-512:
 * eight independent 64-byte accumulators per iteration, so the loads, not
 * the adds, bound it). Each round starts all threads at a barrier and ends
 * when the last one finishes; the result is the median round ("best_gb_s":
 * the fastest). The kernels' thread pool is timed the same way
 * ("pool_read_gb_s"): the pool lets one thread claim several tasks, so a
 * late-waking worker shows there as a lower figure — the gap between the
 * two is the pool's hand-off cost on a pure stream.
 * Prints one JSON object:
 *   {"bench": "membw", "threads", "mib", "rounds", "isa", "rounds_gb_s": [...],
 *    "read_gb_s", "best_gb_s", "pool_read_gb_s", "checksum"}
 * Exit status: 0, 1 when the buffer or the threads cannot be had, 2 on bad usage.
 */
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cpu/threadpool.h"

typedef enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512 } isa_t;
static const char *const isa_names[] = {"scalar", "avx2", "avx512"};

typedef struct {
    const uint64_t *buf;
    size_t n;           /* uint64 words */
    uint64_t sums[256]; /* one per task, so the reads cannot be optimised away */
    isa_t isa;
    int threads, rounds;
    pthread_barrier_t start, end;
} membw_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint64_t *p, size_t n)
{
    __m512i a[8];
    for (int k = 0; k < 8; k++)
        a[k] = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 8; k++)
            a[k] = _mm512_add_epi64(a[k], _mm512_load_si512((const void *)(p + i + 8 * k)));
    for (int k = 1; k < 8; k++)
        a[0] = _mm512_add_epi64(a[0], a[k]);
    uint64_t s = (uint64_t)_mm512_reduce_add_epi64(a[0]);
    for (; i < n; i++)
        s += p[i];
    return s;
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
    m->sums[t] = m->isa == ISA_AVX512 ? sum_avx512(p, n)
                 : m->isa == ISA_AVX2 ? sum_avx2(p, n)
                                      : sum_plain(p, n);
}

typedef struct {
    membw_t *m;
    int t;
} worker_arg_t;

/* A dedicated thread: pinned to CPU t (of the process's allowed set), one
 * slice per round between the start and end barriers; round -1 warms. */
static void *worker(void *p)
{
    worker_arg_t *w = p;
    membw_t *m = w->m;
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
        for (int c = 0, seen = 0; c < CPU_SETSIZE; c++) {
            if (!CPU_ISSET(c, &allowed) || seen++ != w->t % CPU_COUNT(&allowed))
                continue;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            (void)pthread_setaffinity_np(pthread_self(), sizeof one, &one); /* advice */
            break;
        }
    }
    for (int r = -1; r < m->rounds; r++) {
        pthread_barrier_wait(&m->start);
        task(m, w->t, m->threads);
        pthread_barrier_wait(&m->end);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_isa(const char *s, isa_t *out)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, isa_names[i]) == 0)
            return *out = (isa_t)i, 0;
    return -1;
}

static double pool_median(membw_t *m, size_t bytes, uint64_t *check)
{
    ifd_threadpool_t *tp;
    if (ifd_threadpool_create(&tp, m->threads) != 0)
        return 0;
    double *g = calloc((size_t)m->rounds, sizeof *g);
    ifd_threadpool_run(tp, task, m, m->threads); /* warm */
    for (int r = 0; r < m->rounds; r++) {
        double t0 = now_s();
        ifd_threadpool_run(tp, task, m, m->threads);
        g[r] = (double)bytes / (now_s() - t0) / 1e9;
        for (int t = 0; t < m->threads; t++)
            *check += m->sums[t];
    }
    qsort(g, (size_t)m->rounds, sizeof *g, cmp_double);
    double med = g[m->rounds / 2];
    free(g);
    ifd_threadpool_destroy(tp);
    return med;
}

int main(int argc, char **argv)
{
    int threads = 2, mib = 1024, rounds = 7;
    isa_t isa = __builtin_cpu_supports("avx512f") ? ISA_AVX512
                : __builtin_cpu_supports("avx2")  ? ISA_AVX2
                                                  : ISA_SCALAR;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc && parse_isa(argv[i + 1], &isa) == 0)
            i++;
        else {
            fprintf(stderr, "usage: %s [--threads 2] [--mib 1024] [--rounds 7] "
                            "[--isa avx512|avx2|scalar]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 256 || mib < 1 || mib > 65536 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "bench_membw: --threads 1..256, --mib 1..65536, --rounds 1..1000\n");
        return 2;
    }
    if ((isa == ISA_AVX512 && !__builtin_cpu_supports("avx512f")) ||
        (isa == ISA_AVX2 && !__builtin_cpu_supports("avx2"))) {
        fprintf(stderr, "bench_membw: this CPU has no %s\n", isa_names[isa]);
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
    membw_t m = {.buf = buf, .n = bytes / 8, .isa = isa, .threads = threads, .rounds = rounds};
    pthread_barrier_init(&m.start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&m.end, NULL, (unsigned)threads + 1);
    pthread_t tid[256];
    worker_arg_t args[256];
    for (int t = 0; t < threads; t++) {
        args[t] = (worker_arg_t){&m, t};
        if (pthread_create(&tid[t], NULL, worker, &args[t]) != 0) {
            fprintf(stderr, "bench_membw: cannot start %d threads\n", threads);
            return 1; /* exits with the started ones blocked: nothing to clean */
        }
    }
    double *gbs = calloc((size_t)rounds, sizeof *gbs);
    uint64_t check = 0;
    for (int r = -1; r < rounds; r++) {
        double t0 = now_s();
        pthread_barrier_wait(&m.start);
        pthread_barrier_wait(&m.end);
        double dt = now_s() - t0;
        if (r < 0)
            continue;
        gbs[r] = (double)bytes / dt / 1e9;
        for (int t = 0; t < threads; t++)
            check += m.sums[t];
    }
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    double pool = pool_median(&m, bytes, &check);
    printf("{\"bench\": \"membw\", \"threads\": %d, \"mib\": %d, \"rounds\": %d, \"isa\": \"%s\", "
           "\"rounds_gb_s\": [",
           threads, mib, rounds, isa_names[isa]);
    for (int r = 0; r < rounds; r++)
        printf("%s%.2f", r ? ", " : "", gbs[r]);
    qsort(gbs, (size_t)rounds, sizeof *gbs, cmp_double);
    printf("], \"read_gb_s\": %.2f, \"best_gb_s\": %.2f, \"pool_read_gb_s\": %.2f, "
           "\"checksum\": %llu}\n",
           gbs[rounds / 2], gbs[rounds - 1], pool, (unsigned long long)check);
    free(gbs);
    pthread_barrier_destroy(&m.start);
    pthread_barrier_destroy(&m.end);
    free(buf);
    return 0;
}
