/*
 * test_gpu_kvpool.c — KV pool data segments in CUDA device memory
 * (kernels/cuda/kvseg_cuda.h): a worker process creates the segment, writes
 * blocks and publishes them; a second process attaches from the fds and
 * reads them back (a prefix hit with identical bytes, and a device
 * copy-on-write). With VMM (cuMemCreate + POSIX fd) the second worker reads
 * while the first lives, after it exited, and after it was SIGKILLed, while
 * only the "router" (this test process, which never touches CUDA) holds the
 * fd: the memory must survive. The IPC fallback (forced) is read while the
 * creator lives; after the creator is SIGKILLed the second worker must find
 * the memory gone, and the pool rebuilt cleanly (stats.rebuilds, no stale
 * prefix hit, a working fresh segment).
 *
 * Also built for the CUDA emulator (test_gpu_kvpool_emu, IFD_TEST_KVPOOL_EMU;
 * tests/gpu/emu/cuda_emu_vmm.cc emulates VMM and IPC with memfds), with one
 * more case there: a driver that frees a VMM allocation with its creator
 * ($IFD_EMU_VMM_FORGET), which the segment's seal must catch.
 *
 * CUDA is only ever initialised in forked children (a CUDA context does not
 * survive fork), including the device probe. Without a device the test
 * prints "SKIPPED: no CUDA device (<reason>)" and exits 77. A plain C
 * program (no Check), like the other device checks, so it builds where only
 * the CUDA toolkit and the pool's own dependencies are installed. Exit 0 =
 * passed, 1 = failed (with the failing check printed).
 */
#include "cuda/cuda_device.h"
#include "cuda/kvseg_cuda.h"
#include "error.h"
#include "fdpass.h"
#include "kvpool/kvpool.h"
#include "log.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* A failed check ends the program: the later steps depend on it. */
#define GK_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define GK_EQ(a, b) GK_CHECK((a) == (b), "%lld != %lld", (long long)(a), (long long)(b))

#define NL   2
#define NH   2
#define HD   64
#define BS   16
#define NBLK 4

static ifd_kvpool_params_t gparams(ifd_kvseg_kind_t kind)
{
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = NL;
    p.n_kv_heads = NH;
    p.head_dim = HD;
    p.dtype = IFD_KV_F16;
    p.block_size = BS;
    p.n_blocks = 64;
    p.n_workers = 4;
    p.kind[0] = kind;
    p.fingerprint = 42;
    return p;
}

static void tokens_of(int32_t *t)
{
    for (int i = 0; i < NBLK * BS; i++)
        t[i] = 1000 + i * 7;
}

static void pattern(uint16_t *buf, size_t n, int block, int layer, int v)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint16_t)(i * 31u + (unsigned)block * 7919u + (unsigned)layer * 131u +
                            (unsigned)v * 17u);
}

/* Worker A: create and bind the device segment, write and publish NBLK
 * blocks, send the segment fd (VMM) to the router, then wait for the
 * router's word before exiting (or for its SIGKILL). Exit codes name the
 * failing step. */
static int worker_a(int sock, int meta_fd, bool force_ipc)
{
    ifd_kvpool_params_t want = gparams(IFD_KVSEG_CUDA_VMM);
    want.kind[0] = IFD_KVSEG_HOST; /* do not compare: the provider may fall back */
    ifd_kvpool_t *pool;
    if (ifd_kvpool_attach(meta_fd, NULL, 0, &want, &pool))
        return 10;
    ifd_cuda_kvseg_t *seg;
    if (ifd_cuda_kvseg_create(force_ipc, -1, &seg))
        return 11;
    if (ifd_kvpool_bind_segment(pool, 0, ifd_cuda_kvseg_provider(seg)))
        return 12;
    int32_t blocks[NBLK], toks[NBLK * BS];
    tokens_of(toks);
    if (ifd_kvpool_alloc(pool, 0, 0, NBLK, blocks))
        return 13;
    size_t n = (size_t)NH * BS * HD;
    uint16_t *buf = malloc(n * sizeof *buf);
    for (int b = 0; b < NBLK; b++) {
        for (int l = 0; l < NL; l++)
            for (int v = 0; v < 2; v++) {
                pattern(buf, n, b, l, v);
                if (ifd_cuda_kvseg_upload(ifd_kvpool_block_ptr(pool, blocks[b], l, v), buf,
                                          n * sizeof *buf))
                    return 14;
            }
        if (ifd_kvpool_publish(pool, 0, blocks[b], b ? blocks[b - 1] : -1, 0, toks + b * BS,
                               NULL) != 0)
            return 15;
    }
    free(buf);
    int fd = ifd_kvpool_data_fd(pool, 0);
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    char kind = (char)('0' + g.kind[0]);
    if (ifd_fdpass_send(sock, &kind, 1, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0))
        return 16;
    char go;
    if (read(sock, &go, 1) != 1)
        return 17;
    /* Exit without releasing anything: the router reclaims. */
    _exit(0);
}

/* Worker B, when the memory survived: attach with the router's fds, look
 * the prefix up, verify the data, copy-on-write one block on the device and
 * verify the copy. */
static int worker_b_reads(ifd_kvpool_t *pool)
{
    int32_t toks[NBLK * BS], got[NBLK];
    tokens_of(toks);
    if (ifd_kvpool_lookup(pool, 1, 0, toks, NBLK * BS, got, NBLK, NULL) != NBLK)
        return 33;
    size_t n = (size_t)NH * BS * HD;
    uint16_t *want = malloc(n * sizeof *want), *buf = malloc(n * sizeof *buf);
    for (int b = 0; b < NBLK; b++)
        for (int l = 0; l < NL; l++)
            for (int v = 0; v < 2; v++) {
                pattern(want, n, b, l, v);
                if (ifd_cuda_kvseg_download(buf, ifd_kvpool_block_ptr(pool, got[b], l, v),
                                            n * sizeof *buf))
                    return 34;
                if (memcmp(want, buf, n * sizeof *buf) != 0)
                    return 35;
            }
    int32_t c = got[NBLK - 1];
    if (ifd_kvpool_cow(pool, 1, &c) != 1)
        return 36;
    pattern(want, n, NBLK - 1, 1, 1);
    if (ifd_cuda_kvseg_download(buf, ifd_kvpool_block_ptr(pool, c, 1, true), n * sizeof *buf) ||
        memcmp(want, buf, n * sizeof *buf) != 0)
        return 37;
    free(want);
    free(buf);
    if (ifd_kvpool_unref(pool, 1, got, NBLK - 1) || ifd_kvpool_unref(pool, 1, &c, 1))
        return 38;
    return 0;
}

/* Worker B, when the memory was lost: the pool must have been rebuilt (no
 * prefix hit, a rebuild counted) and the fresh segment must work. */
static int worker_b_rebuilt(ifd_kvpool_t *pool)
{
    ifd_kvpool_stats_t st;
    if (ifd_kvpool_stats(pool, &st) || st.rebuilds != 1)
        return 40;
    int32_t toks[NBLK * BS], got[NBLK], blk;
    tokens_of(toks);
    if (ifd_kvpool_lookup(pool, 1, 0, toks, NBLK * BS, got, NBLK, NULL) != 0)
        return 41;
    if (ifd_kvpool_alloc(pool, 1, 0, 1, &blk))
        return 42;
    size_t n = (size_t)NH * BS * HD;
    uint16_t *want = malloc(n * sizeof *want), *buf = malloc(n * sizeof *buf);
    pattern(want, n, 99, 1, 0);
    if (ifd_cuda_kvseg_upload(ifd_kvpool_block_ptr(pool, blk, 1, false), want, n * sizeof *want) ||
        ifd_cuda_kvseg_download(buf, ifd_kvpool_block_ptr(pool, blk, 1, false), n * sizeof *buf) ||
        memcmp(want, buf, n * sizeof *buf) != 0)
        return 43;
    free(want);
    free(buf);
    if (ifd_kvpool_publish(pool, 1, blk, -1, 0, toks, NULL) != 0 ||
        ifd_kvpool_unref(pool, 1, &blk, 1))
        return 44;
    return 0;
}

static int worker_b(int meta_fd, int data_fd, bool force_ipc, bool expect_lost)
{
    ifd_kvpool_t *pool;
    if (ifd_kvpool_attach(meta_fd, &data_fd, 1, NULL, &pool))
        return 30;
    ifd_cuda_kvseg_t *seg;
    if (ifd_cuda_kvseg_create(force_ipc, -1, &seg))
        return 31;
    if (ifd_kvpool_bind_segment(pool, 0, ifd_cuda_kvseg_provider(seg)))
        return 32;
    int rc = expect_lost ? worker_b_rebuilt(pool) : worker_b_reads(pool);
    ifd_kvpool_destroy(pool);
    ifd_cuda_kvseg_destroy(seg);
    return rc;
}

static int wait_exit(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* How a case ends worker A and what worker B must find. */
typedef struct {
    const char *name;
    bool force_ipc;
    bool a_alive; /* A lives on while B reads (else it is gone first) */
    bool kill_a;  /* A is SIGKILLed (else it exits when told) */
    bool lost;    /* B must find the memory gone and the pool rebuilt */
    const char *b_env; /* an environment variable set for B only, or NULL */
} share_case_t;

static void run_share(const share_case_t *c)
{
    printf("%s\n", c->name);
    ifd_kvpool_params_t p = gparams(c->force_ipc ? IFD_KVSEG_CUDA_IPC : IFD_KVSEG_CUDA_VMM);
    ifd_kvpool_t *router;
    GK_EQ(ifd_kvpool_create(&p, &router), 0);
    GK_CHECK(ifd_kvpool_layer_k(router, 0, 0) == NULL,
             "router mapped device memory"); /* the router maps no device memory */
    int sv[2];
    GK_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    pid_t a = fork();
    GK_CHECK(a >= 0, "fork failed");
    if (a == 0) {
        close(sv[0]);
        _exit(worker_a(sv[1], ifd_kvpool_meta_fd(router), c->force_ipc));
    }
    close(sv[1]);
    char kind = 0;
    size_t len;
    int fd = -1, nfds = 0;
    int rc = ifd_fdpass_recv(sv[0], &kind, 1, &len, &fd, 1, &nfds);
    if (rc != 0) {
        int st = wait_exit(a);
        GK_CHECK(0, "worker A failed: recv %d, exit %d", rc, st);
    }
    bool vmm = kind == '0' + IFD_KVSEG_CUDA_VMM;
    if (vmm) {
        GK_EQ(nfds, 1);
        GK_EQ(ifd_kvpool_adopt_fd(router, 0, fd), 0);
    } else {
        GK_EQ(nfds, 0);
        if (!c->force_ipc)
            printf("  (VMM unavailable: the provider fell back to IPC)\n");
    }
    bool lost = c->lost || (!vmm && !c->a_alive);
    if (!c->a_alive) {
        /* Worker A dies; for VMM only the router's fd holds the memory now. */
        if (c->kill_a)
            GK_EQ(kill(a, SIGKILL), 0);
        else
            GK_EQ(write(sv[0], "x", 1), 1);
        GK_EQ(wait_exit(a), c->kill_a ? 128 + SIGKILL : 0);
        GK_EQ(ifd_kvpool_reclaim(router, 0), NBLK);
    }
    pid_t b = fork();
    GK_CHECK(b >= 0, "fork failed");
    if (b == 0) {
        if (c->b_env)
            putenv((char *)c->b_env);
        _exit(worker_b(ifd_kvpool_meta_fd(router), ifd_kvpool_data_fd(router, 0), c->force_ipc,
                       lost));
    }
    int bst = wait_exit(b);
    if (c->a_alive) {
        GK_EQ(write(sv[0], "x", 1), 1);
        GK_EQ(wait_exit(a), 0);
        GK_EQ(ifd_kvpool_reclaim(router, 0), NBLK);
    }
    GK_CHECK(bst == 0, "worker B failed with %d", bst);
    ifd_kvpool_stats_t st;
    GK_EQ(ifd_kvpool_stats(router, &st), 0);
    GK_EQ(st.rebuilds, lost ? 1 : 0);
    if (!vmm && c->a_alive) {
        /* IPC memory died with A: the router drops its cache. */
        GK_CHECK(ifd_kvpool_invalidate_device(router, 0) >= 0, "invalidate failed");
        int32_t toks[NBLK * BS];
        tokens_of(toks);
        GK_EQ(ifd_kvpool_probe(router, 0, toks, NBLK * BS, NULL, 0), 0);
    }
    char err[256];
    GK_CHECK(ifd_kvpool_check(router, err, sizeof err) == 0, "%s", err);
    close(sv[0]);
    ifd_kvpool_destroy(router);
}

static const share_case_t k_cases[] = {
    {"vmm: a second worker reads while the first lives", false, true, false, false, NULL},
    {"vmm: the creator exits, the router's fd keeps the memory", false, false, false, false,
     NULL},
    {"vmm: the creator is SIGKILLed, a new worker finds its prefixes", false, false, true, false,
     NULL},
    {"ipc (forced): a second worker reads while the first lives", true, true, false, false, NULL},
    {"ipc (forced): the creator is SIGKILLed: detected, pool rebuilt", true, false, true, true,
     NULL},
#ifdef IFD_TEST_KVPOOL_EMU
    /* Emulator only: a driver that frees the memory with its creator. */
    {"vmm, forgetful driver: the seal catches the lost memory, pool rebuilt", false, false, true,
     true, "IFD_EMU_VMM_FORGET=1"},
#endif
};

int main(void)
{
    /* Probe in a child: CUDA must not be initialised before the forks. */
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        char err[200] = "";
        int n = 0;
        int rc = ifd_cuda_device_count(&n, err, sizeof err);
        (void)!write(pfd[1], err, strlen(err) + 1);
        _exit(rc == 0 ? 0 : 77);
    }
    close(pfd[1]);
    char why[200] = "";
    ssize_t got = read(pfd[0], why, sizeof why - 1);
    why[got > 0 ? got : 0] = '\0';
    close(pfd[0]);
    if (wait_exit(pid) != 0) {
        fprintf(stderr, "SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    ifd_log_set_level(IFD_LOG_WARN);
    int n = (int)(sizeof k_cases / sizeof k_cases[0]);
    for (int i = 0; i < n; i++)
        run_share(&k_cases[i]);
    printf("%d passed, 0 failed\n", n);
    return 0;
}
