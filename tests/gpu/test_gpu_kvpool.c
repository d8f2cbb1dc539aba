/*
 * test_gpu_kvpool.c — KV pool data segments in CUDA device memory
 * (kernels/cuda/kvseg_cuda.h): a worker process creates the segment, writes
 * blocks and publishes them; a second process attaches from the fds and
 * reads them back. With VMM (cuMemCreate + POSIX fd) the second worker runs
 * after the first one has died, while only the "router" (this test process,
 * which never touches CUDA) holds the fd: the memory must survive. The IPC
 * fallback (forced) is checked with both workers alive.
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
#include "kvpool.h"
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
 * router's word before exiting. Exit codes name the failing step. */
static int worker_a(int sock, int meta_fd, bool force_ipc)
{
    ifd_kvpool_params_t want = gparams(IFD_KVSEG_CUDA_VMM);
    want.kind[0] = IFD_KVSEG_HOST; /* do not compare: the provider may fall back */
    ifd_kvpool_t *pool;
    if (ifd_kvpool_attach(meta_fd, NULL, 0, &want, &pool))
        return 10;
    ifd_cuda_kvseg_t *seg;
    if (ifd_cuda_kvseg_create(force_ipc, &seg))
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

/* Worker B: attach with the router's fds, look the prefix up, verify the
 * data, copy-on-write one block on the device and verify the copy. */
static int worker_b(int meta_fd, int data_fd, bool force_ipc)
{
    ifd_kvpool_t *pool;
    if (ifd_kvpool_attach(meta_fd, &data_fd, 1, NULL, &pool))
        return 30;
    ifd_cuda_kvseg_t *seg;
    if (ifd_cuda_kvseg_create(force_ipc, &seg))
        return 31;
    if (ifd_kvpool_bind_segment(pool, 0, ifd_cuda_kvseg_provider(seg)))
        return 32;
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
    ifd_kvpool_destroy(pool);
    ifd_cuda_kvseg_destroy(seg);
    return 0;
}

static int wait_exit(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void run_share(bool force_ipc)
{
    ifd_kvpool_params_t p = gparams(force_ipc ? IFD_KVSEG_CUDA_IPC : IFD_KVSEG_CUDA_VMM);
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
        _exit(worker_a(sv[1], ifd_kvpool_meta_fd(router), force_ipc));
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
        /* Worker A dies; only the router's fd holds the memory now. */
        GK_EQ(write(sv[0], "x", 1), 1);
        GK_EQ(wait_exit(a), 0);
        GK_EQ(ifd_kvpool_reclaim(router, 0), NBLK);
        printf("VMM segment: worker A exited, router holds fd %d\n", fd);
    } else {
        GK_EQ(nfds, 0);
        printf("IPC segment%s: worker A stays alive while B reads\n",
               force_ipc ? " (forced)" : " (VMM unavailable: fallback)");
    }
    pid_t b = fork();
    GK_CHECK(b >= 0, "fork failed");
    if (b == 0)
        _exit(worker_b(ifd_kvpool_meta_fd(router), ifd_kvpool_data_fd(router, 0), force_ipc));
    int bst = wait_exit(b);
    if (!vmm) {
        GK_EQ(write(sv[0], "x", 1), 1);
        GK_EQ(wait_exit(a), 0);
        GK_EQ(ifd_kvpool_reclaim(router, 0), NBLK);
        /* IPC memory died with A: drop its cache. */
        GK_CHECK(ifd_kvpool_invalidate_device(router, 0) >= 0, "invalidate failed");
        int32_t toks[NBLK * BS];
        tokens_of(toks);
        GK_EQ(ifd_kvpool_probe(router, 0, toks, NBLK * BS, NULL, 0), 0);
    }
    GK_CHECK(bst == 0, "worker B failed with %d", bst);
    char err[256];
    GK_CHECK(ifd_kvpool_check(router, err, sizeof err) == 0, "%s", err);
    close(sv[0]);
    ifd_kvpool_destroy(router);
}

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
    printf("vmm: sharing through the fd, surviving the creator\n");
    run_share(false);
    printf("ipc: forced fallback\n");
    run_share(true);
    printf("2 passed, 0 failed\n");
    return 0;
}
