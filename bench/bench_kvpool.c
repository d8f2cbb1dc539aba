/*
 * bench_kvpool.c — latency of the shared KV pool's hot operations
 * (common/kvpool/kvpool.h), with 1 process and with 4 processes contending for the
 * pool lock. Prints one JSON object.
 *
 *   alloc_free_1    ifd_kvpool_alloc(1 block) + ifd_kvpool_free(1 block)
 *   alloc_free_16   the same with 16 blocks (one request's prompt)
 *   lookup_hit_32   ifd_kvpool_lookup of a 512-token prompt whose 32 blocks
 *                   are all cached (hashing + index walk + 32 refs); the
 *                   unref afterwards is not timed
 *   lookup_miss     ifd_kvpool_lookup of a 512-token prompt not in the cache
 *
 * Each sample times one operation with CLOCK_MONOTONIC (the ~20 ns timer
 * cost is included). Median and p99 over all samples of all processes.
 * With N processes each runs the same loop on its own worker slot, started
 * together; on a machine with fewer cores than processes the p99 shows lock
 * holders being descheduled, not the pool.
 *
 *   bench_kvpool [--quick]
 */
#include "kvpool/kvpool.h"

#include "error.h"
#include "log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BS         16
#define SEQS       128
#define SEQ_BLOCKS 32

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void make_tokens(int32_t *t, int seq, int n)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((uint32_t)(seq * 2654435761u + (unsigned)i * 40503u) % 49152u);
}

/* Runs `iters` samples of operation `op` for worker w into out[]. */
static int run_op(ifd_kvpool_t *pool, int op, int w, int iters, uint32_t *out)
{
    int32_t blocks[SEQ_BLOCKS];
    int32_t toks[SEQ_BLOCKS * BS];
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = 0, t1 = 0;
        int rc = 0;
        switch (op) {
        case 0:
        case 1: {
            int n = op == 0 ? 1 : 16;
            t0 = now_ns();
            rc = ifd_kvpool_alloc(pool, w, 0, n, blocks);
            if (rc == 0)
                rc = ifd_kvpool_free(pool, w, blocks, n);
            t1 = now_ns();
            break;
        }
        case 2: {
            make_tokens(toks, (i * 7 + w) % SEQS, SEQ_BLOCKS * BS);
            t0 = now_ns();
            rc = ifd_kvpool_lookup(pool, w, 0, toks, SEQ_BLOCKS * BS, blocks, SEQ_BLOCKS, NULL);
            t1 = now_ns();
            if (rc != SEQ_BLOCKS)
                return rc < 0 ? rc : IFD_EINTERNAL;
            rc = ifd_kvpool_unref(pool, w, blocks, SEQ_BLOCKS);
            break;
        }
        default: {
            make_tokens(toks, SEQS + 1 + i, SEQ_BLOCKS * BS);
            t0 = now_ns();
            rc = ifd_kvpool_lookup(pool, w, 0, toks, SEQ_BLOCKS * BS, blocks, SEQ_BLOCKS, NULL);
            t1 = now_ns();
            if (rc > 0)
                ifd_kvpool_unref(pool, w, blocks, rc);
            rc = rc < 0 ? rc : 0;
            break;
        }
        }
        if (rc < 0)
            return rc;
        out[i] = (uint32_t)(t1 - t0 > UINT32_MAX ? UINT32_MAX : t1 - t0);
    }
    return 0;
}

static const char *const op_names[] = {"alloc_free_1", "alloc_free_16", "lookup_hit_32",
                                       "lookup_miss"};

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int iters = quick ? 20000 : 200000;
    ifd_log_set_level(IFD_LOG_WARN);

    /* SmolLM2-135M's KV geometry; the data segment is a sparse memfd that
     * the benchmark never touches. */
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = 30;
    p.n_kv_heads = 3;
    p.head_dim = 64;
    p.dtype = IFD_KV_F16;
    p.block_size = BS;
    p.n_blocks = 16384;
    p.n_workers = 8;
    ifd_kvpool_t *pool;
    int rc = ifd_kvpool_create(&p, &pool);
    if (rc) {
        fprintf(stderr, "bench_kvpool: create: %s\n", ifd_strerror(rc));
        return 1;
    }
    /* Cache SEQS prompts of SEQ_BLOCKS blocks (4096 cached blocks). */
    for (int s = 0; s < SEQS; s++) {
        int32_t toks[SEQ_BLOCKS * BS], blocks[SEQ_BLOCKS];
        make_tokens(toks, s, SEQ_BLOCKS * BS);
        if (ifd_kvpool_alloc(pool, 7, 0, SEQ_BLOCKS, blocks))
            return 1;
        for (int b = 0; b < SEQ_BLOCKS; b++)
            if (ifd_kvpool_publish(pool, 7, blocks[b], b ? blocks[b - 1] : -1, 0, toks + b * BS,
                                   NULL) < 0)
                return 1;
        ifd_kvpool_free(pool, 7, blocks, SEQ_BLOCKS);
    }

    const int procs_list[2] = {1, 4};
    uint32_t *samples = mmap(NULL, (size_t)4 * (size_t)iters * sizeof(uint32_t),
                             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (samples == MAP_FAILED)
        return 1;
    printf("{\n  \"bench\": \"kvpool\",\n  \"quick\": %s,\n", quick ? "true" : "false");
    printf("  \"geometry\": {\"n_layers\": %d, \"n_kv_heads\": %d, \"head_dim\": %d, "
           "\"dtype\": \"f16\", \"block_size\": %d, \"n_blocks\": %lld, \"cached_blocks\": %d},\n",
           p.n_layers, p.n_kv_heads, p.head_dim, p.block_size, (long long)p.n_blocks,
           SEQS * SEQ_BLOCKS);
    printf("  \"cpus\": %ld,\n  \"results\": [\n", sysconf(_SC_NPROCESSORS_ONLN));
    int first = 1;
    for (int op = 0; op < 4; op++) {
        for (int pi = 0; pi < 2; pi++) {
            int nproc = procs_list[pi];
            int n_it = op >= 2 ? iters / 10 : iters;
            /* warm-up */
            if (run_op(pool, op, 0, n_it / 10 + 1, samples))
                return 1;
            uint64_t t0 = now_ns();
            if (nproc == 1) {
                if ((rc = run_op(pool, op, 0, n_it, samples)) != 0) {
                    fprintf(stderr, "bench_kvpool: %s: %s\n", op_names[op], ifd_strerror(rc));
                    return 1;
                }
            } else {
                int go[2];
                if (pipe(go))
                    return 1;
                pid_t pids[4];
                for (int k = 0; k < nproc; k++) {
                    pids[k] = fork();
                    if (pids[k] == 0) {
                        close(go[1]);
                        char c;
                        if (read(go[0], &c, 1) < 0)
                            _exit(2);
                        _exit(run_op(pool, op, k, n_it, samples + (size_t)k * (size_t)n_it) ? 1
                                                                                            : 0);
                    }
                }
                close(go[0]);
                t0 = now_ns();
                close(go[1]); /* EOF releases everyone at once */
                for (int k = 0; k < nproc; k++) {
                    int st;
                    waitpid(pids[k], &st, 0);
                    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        fprintf(stderr, "bench_kvpool: %s: process %d failed\n", op_names[op], k);
                        return 1;
                    }
                }
            }
            double wall = (double)(now_ns() - t0) * 1e-9;
            size_t n = (size_t)n_it * (size_t)nproc;
            qsort(samples, n, sizeof *samples, cmp_u32);
            printf("%s    {\"name\": \"%s\", \"procs\": %d, \"samples\": %zu, "
                   "\"median_ns\": %u, \"p99_ns\": %u, \"max_ns\": %u, \"ops_per_s\": %.0f}",
                   first ? "" : ",\n", op_names[op], nproc, n, samples[n / 2],
                   samples[n * 99 / 100], samples[n - 1], (double)n / wall);
            first = 0;
        }
    }
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    printf("\n  ],\n  \"stats\": {\"total\": %lld, \"free\": %lld, \"in_use\": %lld, "
           "\"cached\": %lld, \"evictions\": %llu, \"repairs\": %llu}\n}\n",
           (long long)s.total, (long long)s.free, (long long)s.in_use, (long long)s.cached,
           (unsigned long long)s.evictions, (unsigned long long)s.repairs);
    munmap(samples, (size_t)4 * (size_t)iters * sizeof(uint32_t));
    ifd_kvpool_destroy(pool);
    return 0;
}
