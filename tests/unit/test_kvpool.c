/*
 * test_kvpool.c — the shared KV block pool (common/kvpool/kvpool.h) and the fd
 * passing helper (common/fdpass.h).
 *
 * Every operation on its own; the invariants (ifd_kvpool_check) after every
 * step of a random operation sequence checked against a model of who holds
 * what; hash collisions (forced with a 4-bit hash) never returning wrong
 * blocks; EOWNERDEAD repair after a process dies holding the lock, at every
 * crash point inside the critical sections; a multi-process stress test
 * (forked workers attaching from fds received over SCM_RIGHTS, random
 * alloc/ref/unref/publish/lookup/cow, a data pattern written into every
 * block and verified before it is released) and a crash test that SIGKILLs
 * workers at random moments (one of them always while it holds the lock),
 * reclaims them, restarts them, and finally checks that no block leaked;
 * the stress operations again from threads of one process; device segments
 * through a provider (a host memfd posing as device memory): import with the
 * seal intact, a wiped VMM segment or a dead IPC creator detected and the
 * device's pool rebuilt.
 *
 * `test_kvpool --repeat N` (the slow-labelled test_kvpool_repeat) runs the
 * stress and crash tests N times in a row.
 */
#include "testutil.h"

#include "error.h"
#include "fdpass.h"
#include "kvpool/kvpool.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int ifd__repeat = 1;

/* ---- helpers ------------------------------------------------------------------------------ */

#define NL 2 /* layers */
#define NH 2 /* kv heads */
#define HD 4 /* head dim */
#define BS 4 /* tokens per block */
#define NW 8 /* worker slots */

static ifd_kvpool_params_t small_params(int64_t n_blocks)
{
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = NL;
    p.n_kv_heads = NH;
    p.head_dim = HD;
    p.dtype = IFD_KV_F32;
    p.block_size = BS;
    p.n_blocks = n_blocks;
    p.n_workers = NW;
    p.fingerprint = 0x1234abcd5678ef00ULL;
    return p;
}

static ifd_kvpool_t *make_pool(int64_t n_blocks)
{
    ifd_kvpool_params_t p = small_params(n_blocks);
    ifd_kvpool_t *pool = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    return pool;
}

static void assert_ok(ifd_kvpool_t *pool)
{
    char err[256];
    int rc = ifd_kvpool_check(pool, err, sizeof err);
    ck_assert_msg(rc == 0, "invariant broken: %s", err);
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Fills every layer's K and V of block b with words derived from seed. */
static void fill_block(ifd_kvpool_t *pool, int32_t b, uint64_t seed)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    size_t words = ifd_kvpool_block_bytes(&g) / 4;
    for (int l = 0; l < g.n_layers; l++)
        for (int v = 0; v < 2; v++) {
            uint32_t *d = ifd_kvpool_block_ptr(pool, b, l, v);
            for (size_t i = 0; i < words; i++)
                d[i] = (uint32_t)mix64(seed ^ ((uint64_t)l << 40) ^ ((uint64_t)v << 39) ^ i);
        }
}

/* 1 when block b holds exactly fill_block(seed)'s pattern. */
static int block_has(ifd_kvpool_t *pool, int32_t b, uint64_t seed)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    size_t words = ifd_kvpool_block_bytes(&g) / 4;
    for (int l = 0; l < g.n_layers; l++)
        for (int v = 0; v < 2; v++) {
            const uint32_t *d = ifd_kvpool_block_ptr(pool, b, l, v);
            for (size_t i = 0; i < words; i++)
                if (d[i] != (uint32_t)mix64(seed ^ ((uint64_t)l << 40) ^ ((uint64_t)v << 39) ^ i))
                    return 0;
        }
    return 1;
}

static uint64_t hash_seed(ifd_kvhash_t h)
{
    return mix64(h.lo ^ mix64(h.hi + 1));
}

/* Publishes blocks[0..n) as the cache for tokens (n full blocks), filling
 * each with the pattern of its chain hash first. */
static void publish_seq(ifd_kvpool_t *pool, int w, const int32_t *blocks, int n,
                        const int32_t *tokens, uint64_t salt)
{
    ifd_kvhash_t h = {0, 0};
    for (int i = 0; i < n; i++) {
        h = ifd_kvpool_hash_block(&h, salt, tokens + i * BS, BS);
        fill_block(pool, blocks[i], hash_seed(h));
        ifd_kvhash_t got;
        int rc = ifd_kvpool_publish(pool, w, blocks[i], i ? blocks[i - 1] : -1, salt,
                                    tokens + i * BS, &got);
        ck_assert_int_ge(rc, 0);
        ck_assert(got.lo == h.lo && got.hi == h.hi);
    }
}

/* ---- create / attach ------------------------------------------------------------------------ */

START_TEST(test_dtype_names)
{
    ifd_kv_dtype_t t = IFD_KV_F32;
    ck_assert_int_eq(ifd_kv_dtype_parse("f16", &t), 0);
    ck_assert_int_eq(t, IFD_KV_F16);
    ck_assert_int_eq(ifd_kv_dtype_parse("bf16", &t), 0);
    ck_assert_int_eq(t, IFD_KV_BF16);
    ck_assert_int_eq(ifd_kv_dtype_parse("q8_0", &t), 0);
    ck_assert_int_eq(t, IFD_KV_Q8_0);
    ck_assert_int_eq(ifd_kv_dtype_parse("q4_0", &t), 0);
    ck_assert_int_eq(t, IFD_KV_Q4_0);
    ck_assert_str_eq(ifd_kv_dtype_name(IFD_KV_Q4_0), "q4_0");
    ck_assert_str_eq(ifd_kv_dtype_name(IFD_KV_BF16), "bf16");
    ck_assert_int_eq(ifd_kv_dtype_parse("fp8", &t), 0);
    ck_assert_int_eq(t, IFD_KV_FP8);
    ck_assert_str_eq(ifd_kv_dtype_name(IFD_KV_FP8), "fp8");
    ck_assert_str_eq(ifd_kv_dtype_name((ifd_kv_dtype_t)6), "?");
    ck_assert(ifd_kv_dtype_quantized(IFD_KV_Q8_0) && ifd_kv_dtype_quantized(IFD_KV_Q4_0) &&
              ifd_kv_dtype_quantized(IFD_KV_FP8));
    ck_assert(!ifd_kv_dtype_quantized(IFD_KV_F16) && !ifd_kv_dtype_quantized(IFD_KV_F32));
    /* the types the CUDA kernels read: f16, bf16, q8_0, fp8 */
    for (int i = 0; i <= 6; i++)
        ck_assert(ifd_kv_dtype_gpu((ifd_kv_dtype_t)i) == (i == 1 || i == 2 || i == 3 || i == 5));
    ck_assert_int_eq(ifd_kv_dtype_parse("f32", &t), 0);
    ck_assert_int_eq(t, IFD_KV_F32);
    ck_assert_int_eq(ifd_kv_dtype_parse("q8", &t), IFD_EINVAL);
    ck_assert_int_eq(ifd_kv_dtype_parse("F16", &t), IFD_EINVAL);
    ck_assert_int_eq(ifd_kv_dtype_parse("", &t), IFD_EINVAL);
    ck_assert_int_eq(ifd_kv_dtype_parse(NULL, &t), IFD_EINVAL);
    ck_assert_int_eq(t, IFD_KV_F32); /* untouched on failure */
}
END_TEST

START_TEST(test_params_and_geometry)
{
    ifd_kvpool_params_t d = ifd_kvpool_default_params();
    ck_assert_int_eq(d.block_size, 16);
    ck_assert_int_eq(d.n_devices, 1);
    ck_assert_int_eq(d.kind[0], IFD_KVSEG_HOST);
    ck_assert_int_eq(IFD_KV_F32, 0);
    ck_assert_int_eq(IFD_KV_F16, 1);
    ck_assert_int_eq(IFD_KV_BF16, 2);
    ck_assert_int_eq(IFD_KV_Q8_0, 3);
    ck_assert_int_eq(IFD_KV_Q4_0, 4);
    ck_assert_int_eq(IFD_KV_FP8, 5);
    /* row sizes: the kernels' ifd_kv_row_bytes gives the same (test_cpu_attention) */
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_F32, 64), 256);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_F16, 64), 128);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_BF16, 64), 128);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_Q8_0, 64), 68);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_Q4_0, 64), 36);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_Q8_0, 256), 272);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_Q4_0, 256), 144);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_Q8_0, 48), 0);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_Q4_0, 0), 0);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_FP8, 64), 68);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_FP8, 256), 260);
    ck_assert_uint_eq(ifd_kvpool_row_bytes(IFD_KV_FP8, 48), 0);

    ifd_kvpool_params_t p = small_params(0);
    ck_assert_uint_eq(ifd_kvpool_block_bytes(&p), NH * BS * HD * 4);
    p.bytes_budget = 10 * 2 * NL * ifd_kvpool_block_bytes(&p) + 7;
    ifd_kvpool_t *pool = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    ck_assert_int_eq(ifd_kvpool_n_blocks(pool), 10);
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    ck_assert_int_eq(g.n_layers, NL);
    ck_assert_int_eq(g.n_kv_heads, NH);
    ck_assert_int_eq(g.head_dim, HD);
    ck_assert_int_eq(g.dtype, IFD_KV_F32);
    ck_assert_int_eq(g.block_size, BS);
    ck_assert_int_eq(g.n_blocks, 10);
    ck_assert_int_eq(g.n_workers, NW);
    ck_assert_uint_eq(g.fingerprint, p.fingerprint);
    ck_assert_uint_eq(ifd_kvpool_segment_bytes(pool), 10 * 2 * NL * (uint64_t)(NH * BS * HD * 4));
    ck_assert_int_ge(ifd_kvpool_meta_fd(pool), 0);
    ck_assert_int_ge(ifd_kvpool_data_fd(pool, 0), 0);
    ck_assert_int_eq(ifd_kvpool_data_fd(pool, 1), -1);
    ifd_kvpool_stats_t s;
    ck_assert_int_eq(ifd_kvpool_stats(pool, &s), 0);
    ck_assert_int_eq(s.total, 10);
    ck_assert_int_eq(s.free, 10);
    ck_assert_int_eq(s.in_use + s.cached, 0);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);

    /* a q8_0 pool: the scales inside each block */
    p = small_params(0);
    p.head_dim = 64;
    p.dtype = IFD_KV_Q8_0;
    ck_assert_uint_eq(ifd_kvpool_block_bytes(&p), NH * BS * 68);
    p.bytes_budget = 3 * 2 * NL * ifd_kvpool_block_bytes(&p);
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    ck_assert_int_eq(ifd_kvpool_n_blocks(pool), 3);
    ck_assert_uint_eq(ifd_kvpool_segment_bytes(pool), 3 * 2 * NL * (uint64_t)(NH * BS * 68));
    ifd_kvpool_destroy(pool);

    ifd_kvpool_params_t bad[7];
    for (int i = 0; i < 7; i++)
        bad[i] = small_params(8);
    bad[0].n_layers = 0;
    bad[1].dtype = (ifd_kv_dtype_t)7;
    bad[2].block_size = IFD_KVPOOL_MAX_BLOCK_SIZE + 1;
    bad[3].n_blocks = 0; /* and no budget */
    bad[4].n_workers = 0;
    bad[5].n_devices = IFD_KVPOOL_MAX_DEVICES + 1;
    bad[6].dtype = IFD_KV_Q4_0; /* head dim 4: not a multiple of 32 */
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(ifd_kvpool_create(&bad[i], &pool), IFD_EINVAL);
        ck_assert_ptr_null(pool);
    }
    ifd_kvpool_destroy(NULL);
}
END_TEST

START_TEST(test_attach_checks_everything)
{
    ifd_kvpool_t *pool = make_pool(16);
    int meta = ifd_kvpool_meta_fd(pool), data = ifd_kvpool_data_fd(pool, 0);
    ifd_kvpool_params_t want = small_params(0);
    ifd_kvpool_t *a = NULL;
    ck_assert_int_eq(ifd_kvpool_attach(meta, &data, 1, &want, &a), 0);
    ck_assert_int_eq(ifd_kvpool_n_blocks(a), 16);
    /* Both handles see the same blocks and data. */
    int32_t b;
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 1, &b), 0);
    fill_block(pool, b, 99);
    ck_assert(block_has(a, b, 99));
    ck_assert_int_eq(ifd_kvpool_refs_of(a, 0, b), 1);
    ck_assert_int_eq(ifd_kvpool_free(a, 0, &b, 1), 0);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, b), 0);
    ifd_kvpool_destroy(a);
    ck_assert_int_eq(ifd_kvpool_attach(meta, NULL, 0, NULL, &a), 0);
    ck_assert_ptr_null(ifd_kvpool_layer_k(a, 0, 0)); /* data not mapped here */
    ifd_kvpool_destroy(a);

    ifd_kvpool_params_t m[7];
    for (int i = 0; i < 7; i++)
        m[i] = small_params(0);
    m[0].n_layers++;
    m[1].n_kv_heads++;
    m[2].head_dim *= 2;
    m[3].dtype = IFD_KV_F16;
    m[4].block_size = 16;
    m[5].fingerprint ^= 1;
    m[6].n_blocks = 17;
    for (int i = 0; i < 7; i++) {
        a = (ifd_kvpool_t *)1;
        ck_assert_int_eq(ifd_kvpool_attach(meta, &data, 1, &m[i], &a), IFD_EMISMATCH);
        ck_assert_ptr_null(a);
    }
    /* Not a pool: bad magic; wrong version. */
    int junk = memfd_create("junk", MFD_CLOEXEC);
    ck_assert_int_ge(junk, 0);
    ck_assert_int_eq(ftruncate(junk, 1 << 16), 0);
    ck_assert_int_eq(ifd_kvpool_attach(junk, NULL, 0, NULL, &a), IFD_EFORMAT);
    close(junk);
    uint32_t *hdr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, meta, 0);
    ck_assert_ptr_ne(hdr, MAP_FAILED);
    hdr[2] = 99; /* version sits after the 8-byte magic */
    ck_assert_int_eq(ifd_kvpool_attach(meta, NULL, 0, NULL, &a), IFD_EVERSION);
    hdr[2] = IFD_KVPOOL_VERSION;
    munmap(hdr, 4096);
    /* A data segment that is too small. */
    int small = memfd_create("small", MFD_CLOEXEC);
    ck_assert_int_eq(ftruncate(small, 4096), 0);
    ck_assert_int_eq(ifd_kvpool_attach(meta, &small, 1, NULL, &a), IFD_EFORMAT);
    close(small);
    ck_assert_int_eq(ifd_kvpool_attach(-1, NULL, 0, NULL, &a), IFD_EINVAL);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_fdpass_and_attach_in_child)
{
    ifd_kvpool_t *pool = make_pool(32);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    int32_t blocks[4];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 4, blocks), 0);
    for (int i = 0; i < 4; i++)
        fill_block(pool, blocks[i], 1000 + (uint64_t)i);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(sv[0]);
        char msg[16];
        size_t len;
        int fds[4], nfds;
        if (ifd_fdpass_recv(sv[1], msg, sizeof msg, &len, fds, 4, &nfds) != 0 || nfds != 2 ||
            len != 5 || memcmp(msg, "pool", 5) != 0)
            _exit(10);
        ifd_kvpool_params_t want = small_params(0);
        ifd_kvpool_t *a;
        if (ifd_kvpool_attach(fds[0], &fds[1], 1, &want, &a) != 0)
            _exit(11);
        close(fds[0]);
        close(fds[1]);
        for (int i = 0; i < 4; i++)
            if (!block_has(a, blocks[i], 1000 + (uint64_t)i))
                _exit(12);
        int32_t mine[2];
        if (ifd_kvpool_alloc(a, 2, 0, 2, mine) != 0)
            _exit(13);
        fill_block(a, mine[0], 7);
        fill_block(a, mine[1], 8);
        if (ifd_fdpass_send(sv[1], mine, sizeof mine, NULL, 0) != 0)
            _exit(14);
        ifd_kvpool_destroy(a);
        _exit(0);
    }
    close(sv[1]);
    int fds[2] = {ifd_kvpool_meta_fd(pool), ifd_kvpool_data_fd(pool, 0)};
    ck_assert_int_eq(ifd_fdpass_send(sv[0], "pool", 5, fds, 2), 0);
    int32_t theirs[2];
    size_t len;
    int nfds;
    ck_assert_int_eq(ifd_fdpass_recv(sv[0], theirs, sizeof theirs, &len, NULL, 0, &nfds), 0);
    ck_assert_uint_eq(len, sizeof theirs);
    ck_assert_int_eq(nfds, 0);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    ck_assert(block_has(pool, theirs[0], 7));
    ck_assert(block_has(pool, theirs[1], 8));
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 2, theirs[0]), 1);
    /* The child is gone: its references are reclaimed exactly. */
    ck_assert_int_eq(ifd_kvpool_reclaim(pool, 2), 2);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 1, blocks[0]), 1);
    assert_ok(pool);
    /* Peer closed. */
    char c;
    ck_assert_int_eq(ifd_fdpass_recv(sv[0], &c, 1, &len, NULL, 0, &nfds), IFD_ECLOSED);
    ck_assert_int_eq(ifd_fdpass_send(sv[0], "", 0, NULL, 0), IFD_EINVAL);
    close(sv[0]);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_fdpass_too_many_fds_closes_them)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    int fds[3] = {p[0], p[1], p[0]};
    ck_assert_int_eq(ifd_fdpass_send(sv[0], "x", 1, fds, 3), 0);
    char c;
    size_t len;
    int got[2], n;
    ck_assert_int_eq(ifd_fdpass_recv(sv[1], &c, 1, &len, got, 2, &n), IFD_ETRUNC);
    ck_assert_int_eq(n, 0);
    close(p[0]);
    close(p[1]);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* ---- layout -----------------------------------------------------------------------------------
 */

START_TEST(test_layout_contract)
{
    ifd_kvpool_params_t p = small_params(8);
    p.n_devices = 2;
    p.dtype = IFD_KV_BF16;
    ifd_kvpool_t *pool = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    uint64_t bb = ifd_kvpool_block_bytes(&p);
    ck_assert_uint_eq(bb, NH * BS * HD * 2);
    ck_assert_int_eq(ifd_kvpool_n_blocks(pool), 16);
    for (int dev = 0; dev < 2; dev++) {
        char *k0 = ifd_kvpool_layer_k(pool, dev, 0);
        ck_assert_ptr_nonnull(k0);
        for (int l = 0; l < NL; l++) {
            char *k = ifd_kvpool_layer_k(pool, dev, l), *v = ifd_kvpool_layer_v(pool, dev, l);
            /* [layer][K|V][block]...: K, then V, each n_blocks * block_bytes. */
            ck_assert_ptr_eq(k, k0 + (uint64_t)(2 * l) * 8 * bb);
            ck_assert_ptr_eq(v, k + 8 * bb);
            for (int32_t b = 0; b < 8; b++) {
                int32_t g = dev * 8 + b;
                ck_assert_int_eq(ifd_kvpool_block_device(pool, g), dev);
                ck_assert_int_eq(ifd_kvpool_block_local(pool, g), b);
                ck_assert_ptr_eq(ifd_kvpool_block_ptr(pool, g, l, false), k + b * bb);
                ck_assert_ptr_eq(ifd_kvpool_block_ptr(pool, g, l, true), v + b * bb);
            }
        }
        ck_assert_ptr_null(ifd_kvpool_layer_k(pool, dev, NL));
    }
    ck_assert_ptr_null(ifd_kvpool_layer_k(pool, 2, 0));
    ck_assert_ptr_null(ifd_kvpool_block_ptr(pool, 16, 0, false));
    ck_assert_ptr_null(ifd_kvpool_block_ptr(pool, -1, 0, false));
    ck_assert_int_eq(ifd_kvpool_block_device(pool, 16), -1);
    /* Allocation is per device. */
    int32_t b[8];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 1, 8, b), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(ifd_kvpool_block_device(pool, b[i]), 1);
    int32_t x;
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 1, 1, &x), IFD_ENOBLOCKS);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 1, &x), 0);
    ck_assert_int_eq(ifd_kvpool_block_device(pool, x), 0);
    ifd_kvpool_stats_t s;
    ck_assert_int_eq(ifd_kvpool_device_stats(pool, 1, &s), 0);
    ck_assert_int_eq(s.total, 8);
    ck_assert_int_eq(s.in_use, 8);
    ck_assert_int_eq(ifd_kvpool_device_stats(pool, 0, &s), 0);
    ck_assert_int_eq(s.in_use, 1);
    ck_assert_int_eq(s.free, 7);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_hugepages_fall_back)
{
    ifd_kvpool_params_t p = small_params(64);
    p.hugepages = true;
    ifd_kvpool_t *pool = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    int32_t b;
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 1, &b), 0);
    fill_block(pool, b, 5);
    ifd_kvpool_t *a;
    int data = ifd_kvpool_data_fd(pool, 0);
    ck_assert_int_eq(ifd_kvpool_attach(ifd_kvpool_meta_fd(pool), &data, 1, NULL, &a), 0);
    ck_assert(block_has(a, b, 5));
    ifd_kvpool_destroy(a);
    ifd_kvpool_destroy(pool);
}
END_TEST

/* ---- blocks -------------------------------------------------------------------------------------
 */

START_TEST(test_alloc_all_or_nothing_ref_unref)
{
    ifd_kvpool_t *pool = make_pool(8);
    int32_t a[8], b[8];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 5, a), 0);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, a[i]), 1);
        for (int j = 0; j < i; j++)
            ck_assert_int_ne(a[i], a[j]);
    }
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 4, b), IFD_ENOBLOCKS);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.in_use, 5);
    ck_assert_int_eq(s.free, 3);
    ck_assert_uint_eq(s.alloc_failures, 1);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 3, b), 0);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 0, NULL), 0);
    /* ref by another worker; the same block twice in one call. */
    int32_t twice[3] = {a[0], a[0], a[1]};
    ck_assert_int_eq(ifd_kvpool_ref(pool, 2, twice, 3), 0);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 2, a[0]), 2);
    assert_ok(pool);
    /* unref more than held: nothing changes. */
    int32_t thrice[3] = {a[1], a[1], a[0]};
    ck_assert_int_eq(ifd_kvpool_unref(pool, 2, thrice, 3), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 2, a[1]), 1);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 2, a[0]), 2);
    assert_ok(pool);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 2, twice, 3), 0);
    /* Releasing worker 0's blocks frees them (none published). */
    ck_assert_int_eq(ifd_kvpool_free(pool, 0, a, 5), 0);
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.free, 5);
    ck_assert_int_eq(s.in_use, 3);
    /* ref of a free block, bad ids and workers. */
    ck_assert_int_eq(ifd_kvpool_ref(pool, 0, a, 1), IFD_EINVAL);
    int32_t bad = 8;
    ck_assert_int_eq(ifd_kvpool_ref(pool, 0, &bad, 1), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 0, &bad, 1), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, NW, 0, 1, a), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 1, 1, a), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, -1, 0, 1, a), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, 9), -1);
    ck_assert_int_eq(ifd_kvpool_free(pool, 1, b, 3), 0);
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.free, 8);
    ck_assert_uint_eq(s.allocs, 8);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_cow)
{
    ifd_kvpool_t *pool = make_pool(8);
    int32_t b;
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 1, &b), 0);
    fill_block(pool, b, 42);
    /* Sole owner, unpublished: write in place. */
    int32_t x = b;
    ck_assert_int_eq(ifd_kvpool_cow(pool, 0, &x), 0);
    ck_assert_int_eq(x, b);
    /* Shared with a fork (n > 1): the writer gets a copy. */
    ck_assert_int_eq(ifd_kvpool_ref(pool, 0, &b, 1), 0);
    x = b;
    ck_assert_int_eq(ifd_kvpool_cow(pool, 0, &x), 1);
    ck_assert_int_ne(x, b);
    ck_assert(block_has(pool, x, 42));
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, b), 1);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, x), 1);
    fill_block(pool, x, 43);
    ck_assert(block_has(pool, b, 42));
    /* Published: even the sole owner copies, the cache stays intact. */
    int32_t toks[BS] = {1, 2, 3, 4};
    ck_assert_int_eq(ifd_kvpool_publish(pool, 0, b, -1, 0, toks, NULL), 0);
    int32_t y = b;
    ck_assert_int_eq(ifd_kvpool_cow(pool, 0, &y), 1);
    ck_assert(block_has(pool, y, 42));
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_uint_eq(s.cows, 2);
    ck_assert_int_eq(s.cached, 1); /* b, released by the cow */
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, b), 0);
    /* Not held: refused. */
    int32_t z = b;
    ck_assert_int_eq(ifd_kvpool_cow(pool, 1, &z), IFD_EINVAL);
    /* Full pool with nothing evictable. */
    int32_t rest[5];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 5, rest), 0);
    ck_assert_int_eq(ifd_kvpool_ref(pool, 1, &y, 1), 0);
    z = y;
    ck_assert_int_eq(ifd_kvpool_cow(pool, 1, &z), 1); /* evicts b */
    ck_assert_int_eq(ifd_kvpool_ref(pool, 1, &x, 1), 0);
    int32_t w = x;
    ck_assert_int_eq(ifd_kvpool_cow(pool, 1, &w), IFD_ENOBLOCKS);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

/* ---- prefix cache -------------------------------------------------------------------------------
 */

START_TEST(test_publish_lookup_chain)
{
    ifd_kvpool_t *pool = make_pool(32);
    int32_t toks[6 * BS];
    for (int i = 0; i < 6 * BS; i++)
        toks[i] = 100 + i;
    int32_t seq[6];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 6, seq), 0);
    publish_seq(pool, 0, seq, 6, toks, 0);
    ifd_kvpool_stats_t s;
    /* Errors: already published, not held, parent not held/published. */
    ck_assert_int_eq(ifd_kvpool_publish(pool, 0, seq[0], -1, 0, toks, NULL), IFD_EINVAL);
    int32_t other;
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 1, &other), 0);
    ck_assert_int_eq(ifd_kvpool_publish(pool, 0, other, -1, 0, toks, NULL), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_publish(pool, 1, other, seq[0], 0, toks, NULL), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_publish(pool, 1, other, other, 0, toks, NULL), IFD_EINVAL);

    /* Full hit with worker 1, refs taken, hashes returned. */
    int32_t got[8];
    ifd_kvhash_t hs[8];
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks, 6 * BS + 3, got, 8, hs), 6);
    ifd_kvhash_t h = {0, 0};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(got[i], seq[i]);
        ck_assert_int_eq(ifd_kvpool_refs_of(pool, 1, seq[i]), 1);
        h = ifd_kvpool_hash_block(&h, 0, toks + i * BS, BS);
        ck_assert(hs[i].lo == h.lo && hs[i].hi == h.hi);
        ck_assert(block_has(pool, got[i], hash_seed(h)));
    }
    ck_assert_int_eq(ifd_kvpool_unref(pool, 1, got, 6), 0);
    /* max_blocks caps; a partial block does not count; a changed token
     * in block 3 stops the match there. */
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks, 6 * BS, got, 2, NULL), 2);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 1, got, 2), 0);
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks, 3 * BS - 1, got, 8, NULL), 2);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 1, got, 2), 0);
    int32_t changed[6 * BS];
    memcpy(changed, toks, sizeof toks);
    changed[3 * BS + 2] = 7;
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, changed, 6 * BS, got, 8, NULL), 3);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 1, got, 3), 0);
    /* Another salt sees nothing; neither does a sequence starting elsewhere. */
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 77, toks, 6 * BS, got, 8, NULL), 0);
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks + BS, 5 * BS, got, 8, NULL), 0);
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks, 0, got, 8, NULL), 0);
    /* Probe: no refs, no stats. */
    ifd_kvpool_stats(pool, &s);
    uint64_t lookups = s.lookups;
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks, 6 * BS, NULL, 0), 6);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks, 6 * BS, got, 4), 4);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 1, seq[0]), 0);
    ifd_kvpool_stats(pool, &s);
    ck_assert_uint_eq(s.lookups, lookups);
    ck_assert_uint_eq(s.lookups, 7);
    ck_assert_uint_eq(s.hit_blocks, 6 + 2 + 2 + 3);
    ck_assert_uint_eq(s.miss_blocks, 0 + 4 + 0 + 3 + 6 + 5 + 0);
    /* Releasing the sequence caches it: nothing free, all cached. */
    ck_assert_int_eq(ifd_kvpool_free(pool, 0, seq, 6), 0);
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.cached, 6);
    ck_assert_int_eq(s.in_use, 1);
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 2, 0, toks, 6 * BS, got, 8, NULL), 6);
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.cached, 0);
    ck_assert_int_eq(s.in_use, 7);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

/* ifd_kvpool_unpublish: a held block leaves the cache, and the blocks
 * chained after it can no longer be found; when let go it is free, not
 * cached; only its holder may, once. */
START_TEST(test_unpublish)
{
    ifd_kvpool_t *pool = make_pool(16);
    int32_t toks[4 * BS];
    for (int i = 0; i < 4 * BS; i++)
        toks[i] = 300 + i;
    int32_t seq[4], got[4];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 4, seq), 0);
    publish_seq(pool, 0, seq, 4, toks, 0);
    ck_assert_int_eq(ifd_kvpool_unpublish(pool, 1, seq[2]), IFD_EINVAL); /* not held by 1 */
    ck_assert_int_eq(ifd_kvpool_unpublish(pool, 0, -1), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_unpublish(pool, 0, seq[2]), 1);
    ck_assert_int_eq(ifd_kvpool_unpublish(pool, 0, seq[2]), 0); /* once */
    assert_ok(pool);
    /* held by 0 still: a lookup by worker 1 stops before it */
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks, 4 * BS + 1, got, 4, NULL), 2);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 1, got, 2), 0);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 0, seq, 4), 0);
    assert_ok(pool);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(pool, &st), 0);
    ck_assert_int_eq(st.free, 16 - 3); /* seq[2] free; 0, 1 and the orphan 3 cached */
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks, 4 * BS + 1, got, 4, NULL), 2);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 1, got, 2), 0);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_duplicates_and_twins)
{
    ifd_kvpool_t *pool = make_pool(16);
    int32_t toks[3 * BS];
    for (int i = 0; i < 3 * BS; i++)
        toks[i] = i * 3;
    /* Two workers compute the same prefix at the same time. */
    int32_t a[3], b[3];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 3, a), 0);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 3, b), 0);
    publish_seq(pool, 0, a, 3, toks, 5);
    for (int i = 0; i < 3; i++) {
        fill_block(pool, b[i], 0); /* content irrelevant here */
        ck_assert_int_eq(
            ifd_kvpool_publish(pool, 1, b[i], i ? b[i - 1] : -1, 5, toks + i * BS, NULL), 1);
    }
    int32_t got[3];
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 2, 5, toks, 3 * BS, got, 3, NULL), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(got[i], a[i]);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 2, got, 3), 0);
    /* a is released and evicted; b, released later, takes its place. */
    ck_assert_int_eq(ifd_kvpool_free(pool, 0, a, 3), 0);
    int32_t fill[13];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 3, 0, 13, fill), 0); /* 10 free + 3 evicted */
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_uint_eq(s.evictions, 3);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 5, toks, 3 * BS, NULL, 0), 0);
    ck_assert_int_eq(ifd_kvpool_free(pool, 1, b, 3), 0);
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 2, 5, toks, 3 * BS, got, 3, NULL), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(got[i], b[i]);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

/* Keyed entries: a second pool's twins of a chain, each found on its own
 * under its first-pool twin's key — after the entries before it were
 * evicted, never under another key, salt or tokens, never after the keyed
 * block was reused, never through a weak hash. */
START_TEST(test_keyed_entries)
{
    ifd_kvpool_t *gp = make_pool(16), *lp = make_pool(8);
    int32_t toks[6 * BS];
    for (int i = 0; i < 6 * BS; i++)
        toks[i] = 300 + i;
    int32_t g[6], l[6], got[6];
    uint64_t keys[6];
    ck_assert_int_eq(ifd_kvpool_alloc(gp, 0, 0, 6, g), 0);
    publish_seq(gp, 0, g, 6, toks, 3);
    ck_assert_int_eq(ifd_kvpool_alloc(lp, 0, 0, 6, l), 0);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(ifd_kvpool_block_key(gp, g[i], &keys[i]), 0);
        fill_block(lp, l[i], keys[i]);
        ck_assert_int_eq(ifd_kvpool_publish_keyed(lp, 0, l[i], keys[i], 3, toks + i * BS), 0);
    }
    for (int i = 1; i < 6; i++)
        ck_assert(keys[i] != keys[0]);
    assert_ok(lp);
    /* errors: published already, not held, a keyed parent, a keyed block's key */
    ck_assert_int_eq(ifd_kvpool_publish_keyed(lp, 0, l[0], keys[0], 3, toks), IFD_EINVAL);
    int32_t other[2];
    ck_assert_int_eq(ifd_kvpool_alloc(lp, 1, 0, 2, other), 0);
    ck_assert_int_eq(ifd_kvpool_publish_keyed(lp, 0, other[0], keys[0], 3, toks), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_publish(lp, 0, l[1], l[0], 3, toks + BS, NULL), IFD_EINVAL);
    uint64_t k;
    ck_assert_int_eq(ifd_kvpool_block_key(lp, l[0], &k), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_block_key(lp, other[0], &k), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_free(lp, 1, other, 2), 0);
    /* chained lookups never see keyed entries */
    ck_assert_int_eq(ifd_kvpool_probe(lp, 3, toks, 6 * BS, NULL, 0), 0);

    /* release the twins and evict the first three (LRU: released last to
     * first, so touch 3..5 to make them the most recent) */
    ck_assert_int_eq(ifd_kvpool_free(lp, 0, l, 6), 0);
    ck_assert_int_eq(ifd_kvpool_lookup_keyed(lp, 1, 3, toks + 3 * BS, keys + 3, 3, got), 3);
    ck_assert_int_eq(ifd_kvpool_unref(lp, 1, got, 3), 0);
    int32_t grab[5];
    ck_assert_int_eq(ifd_kvpool_alloc(lp, 2, 0, 5, grab), 0); /* 2 free + 3 evicted */
    ifd_kvpool_stats_t st;
    ifd_kvpool_stats(lp, &st);
    ck_assert_uint_eq(st.evictions, 3);
    uint64_t lookups = st.lookups, hits = st.hit_blocks, misses = st.miss_blocks;
    ck_assert_int_eq(ifd_kvpool_lookup_keyed(lp, 1, 3, toks, keys, 6, got), 3);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(got[i], i < 3 ? -1 : l[i]);
        if (i >= 3) {
            ck_assert(block_has(lp, got[i], keys[i]));
            ck_assert_int_eq(ifd_kvpool_refs_of(lp, 1, got[i]), 1);
        }
    }
    ifd_kvpool_stats(lp, &st);
    ck_assert_uint_eq(st.lookups, lookups + 1);
    ck_assert_uint_eq(st.hit_blocks, hits + 3);
    ck_assert_uint_eq(st.miss_blocks, misses + 3);
    ck_assert_int_eq(ifd_kvpool_unref(lp, 1, got + 3, 3), 0);
    /* probe: no references, no stats */
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, toks + 3 * BS, keys + 3, 3, got), 3);
    ck_assert_int_eq(ifd_kvpool_refs_of(lp, 1, got[0]), 0);
    ifd_kvpool_stats(lp, &st);
    ck_assert_uint_eq(st.lookups, lookups + 1);
    /* another key, salt or tokens, or the no-key value: misses */
    uint64_t wrong[3] = {keys[4], keys[3], UINT64_MAX};
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, toks + 3 * BS, wrong, 3, got), 0);
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 4, toks + 3 * BS, keys + 3, 3, got), 0);
    int32_t changed[3 * BS];
    memcpy(changed, toks + 3 * BS, sizeof changed);
    changed[BS + 1]++;
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, changed, keys + 3, 3, got), 2);
    ck_assert_int_eq(got[1], -1);
    ck_assert_int_eq(ifd_kvpool_lookup_keyed(lp, NW, 3, toks, keys, 1, got), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_lookup_keyed(lp, 1, 3, NULL, keys, 1, got), IFD_EINVAL);

    /* a duplicate under the same key waits, and takes the place of the
     * indexed one once that one is evicted */
    int32_t dup;
    ck_assert_int_eq(ifd_kvpool_alloc(lp, 1, 0, 1, &dup), 0); /* evicts l[5], released first */
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, toks + 5 * BS, keys + 5, 1, got), 0);
    ck_assert_int_eq(ifd_kvpool_free(lp, 2, grab, 5), 0);
    ck_assert_int_eq(ifd_kvpool_lookup_keyed(lp, 2, 3, toks + 4 * BS, keys + 4, 1, got), 1);
    int32_t dup2;
    ck_assert_int_eq(ifd_kvpool_alloc(lp, 1, 0, 1, &dup2), 0);
    ck_assert_int_eq(ifd_kvpool_publish_keyed(lp, 1, dup2, keys[4], 3, toks + 4 * BS), 1);
    ck_assert_int_eq(ifd_kvpool_unref(lp, 2, got, 1), 0); /* l[4] cached again */
    ck_assert_int_eq(ifd_kvpool_free(lp, 1, &dup, 1), 0);
    int32_t all[7];
    ck_assert_int_eq(ifd_kvpool_alloc(lp, 2, 0, 7, all), 0); /* 5 free, l[3] and l[4] */
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, toks + 4 * BS, keys + 4, 1, got), 0);
    ck_assert_int_eq(ifd_kvpool_free(lp, 1, &dup2, 1), 0);
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, toks + 4 * BS, keys + 4, 1, got), 1);
    ck_assert_int_eq(got[0], dup2);
    ck_assert_int_eq(ifd_kvpool_free(lp, 2, all, 7), 0);
    assert_ok(lp);

    /* the key of a reused block names new content: the old entry is dead */
    ck_assert_int_eq(ifd_kvpool_free(gp, 0, g, 6), 0);
    int32_t gall[16];
    ck_assert_int_eq(ifd_kvpool_alloc(gp, 0, 0, 16, gall), 0);
    for (int i = 0; i < 16; i++)
        if (gall[i] == g[4]) {
            ck_assert_int_eq(ifd_kvpool_publish(gp, 0, gall[i], -1, 3, toks + 4 * BS, NULL), 0);
            ck_assert_int_eq(ifd_kvpool_block_key(gp, gall[i], &k), 0);
            ck_assert(k != keys[4]);
        }
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, toks + 4 * BS, &k, 1, got), 0);
    ck_assert_int_eq(ifd_kvpool_probe_keyed(lp, 3, toks + 4 * BS, keys + 4, 1, got), 1);
    ck_assert_int_eq(ifd_kvpool_free(gp, 0, gall, 16), 0);
    assert_ok(gp);
    ifd_kvpool_destroy(gp);
    ifd_kvpool_destroy(lp);

    /* a 3-bit hash: every entry collides, lookups still return exact ones */
    lp = make_pool(64);
    ifd__kvpool_weaken_hash(lp, 3);
    enum { NK = 48 };
    int32_t kt[NK * BS], kb[NK], kg[NK];
    uint64_t kk[NK];
    /* keys repeat over other tokens and tokens over other keys: only both
     * together name an entry */
    for (int i = 0; i < NK; i++) {
        kk[i] = (uint64_t)(i % 7);
        for (int j = 0; j < BS; j++)
            kt[i * BS + j] = i / 7 + j;
    }
    ck_assert_int_eq(ifd_kvpool_alloc(lp, 0, 0, NK, kb), 0);
    for (int i = 0; i < NK; i++) {
        fill_block(lp, kb[i], mix64((uint64_t)i + 1));
        ck_assert_int_eq(ifd_kvpool_publish_keyed(lp, 0, kb[i], kk[i], 0, kt + i * BS), 0);
    }
    ck_assert_int_eq(ifd_kvpool_free(lp, 0, kb, NK), 0);
    ck_assert_int_eq(ifd_kvpool_lookup_keyed(lp, 1, 0, kt, kk, NK, kg), NK);
    for (int i = 0; i < NK; i++)
        ck_assert_msg(block_has(lp, kg[i], mix64((uint64_t)i + 1)), "entry %d: wrong KV", i);
    ck_assert_int_eq(ifd_kvpool_unref(lp, 1, kg, NK), 0);
    assert_ok(lp);
    ifd_kvpool_destroy(lp);
}
END_TEST

/* ifd_kvpool_window_run: a hit of k blocks needs the twins of the window
 * of the query at k * bs (block size 4, window 6: blocks (4k - 5) / 4 ..
 * k - 1), cut below a missing one; a worker holds exactly the returned
 * window's twins; another device's twins count as missing. */
START_TEST(test_window_run)
{
    ifd_kvpool_t *gp = make_pool(16);
    int32_t toks[10 * BS], g[10];
    for (int i = 0; i < 10 * BS; i++)
        toks[i] = 500 + i;
    ck_assert_int_eq(ifd_kvpool_alloc(gp, 0, 0, 10, g), 0);
    publish_seq(gp, 0, g, 10, toks, 0);
    static const struct {
        unsigned twins; /* blocks whose keyed twin is published */
        int hit, lo;
    } cases[] = {
        {0x3ff, 9, 7}, /* all: the window of 9 blocks is 7, 8 */
        {0x180, 9, 7}, /* 7 and 8 only: enough */
        {0x2ff, 8, 6}, /* 8 missing: 8 blocks (6, 7) */
        {0x2bf, 6, 4}, /* 8 and 6 missing: cut twice */
        {0x300, 0, 0}, /* 8 and 9 only: nothing usable */
    };
    for (int c = 0; c < 5; c++) {
        ifd_kvpool_t *lp = make_pool(16);
        int32_t l[10], tw[10];
        uint64_t keys[10];
        ck_assert_int_eq(ifd_kvpool_alloc(lp, 0, 0, 10, l), 0);
        for (int b = 0; b < 10; b++) {
            uint64_t k;
            ck_assert_int_eq(ifd_kvpool_block_key(gp, g[b], &k), 0);
            if (cases[c].twins >> b & 1)
                ck_assert_int_eq(ifd_kvpool_publish_keyed(lp, 0, l[b], k, 0, toks + b * BS), 0);
        }
        ck_assert_int_eq(ifd_kvpool_free(lp, 0, l, 10), 0);
        int32_t lo = -1;
        ck_assert_int_eq(ifd_kvpool_window_run(gp, lp, -1, 0, 6, 0, toks, g, 9, tw, keys, &lo),
                         cases[c].hit);
        ck_assert_int_eq(lo, cases[c].lo);
        for (int b = lo; b < cases[c].hit; b++)
            ck_assert_int_eq(tw[b], l[b]);
        ifd_kvpool_stats_t st;
        ifd_kvpool_stats(lp, &st);
        ck_assert_int_eq(st.in_use, 0); /* a probe */
        ck_assert_int_eq(ifd_kvpool_window_run(gp, lp, 1, 0, 6, 0, toks, g, 9, tw, keys, &lo),
                         cases[c].hit);
        for (int b = 0; b < 10; b++)
            ck_assert_int_eq(ifd_kvpool_refs_of(lp, 1, l[b]), b >= cases[c].lo && b < cases[c].hit);
        ck_assert_int_eq(ifd_kvpool_reclaim(lp, 1), cases[c].hit - cases[c].lo);
        /* another device's twins: none usable; another salt: none */
        ck_assert_int_eq(ifd_kvpool_window_run(gp, lp, -1, 1, 6, 0, toks, g, 9, tw, keys, NULL), 0);
        ck_assert_int_eq(ifd_kvpool_window_run(gp, lp, -1, 0, 6, 5, toks, g, 9, tw, keys, NULL), 0);
        assert_ok(lp);
        ifd_kvpool_destroy(lp);
    }
    ck_assert_int_eq(ifd_kvpool_window_run(gp, gp, -1, 0, 0, 0, toks, g, 9, g, NULL, NULL),
                     IFD_EINVAL);
    ck_assert_int_eq(ifd_kvpool_free(gp, 0, g, 10), 0);
    assert_ok(gp);
    ifd_kvpool_destroy(gp);
}
END_TEST

START_TEST(test_collisions_never_return_wrong_kv)
{
    /* With 3-bit hashes nearly every block collides with others: lookups
     * must still return exactly the blocks published for these tokens. */
    ifd_kvpool_t *pool = make_pool(256);
    ifd__kvpool_weaken_hash(pool, 3);
    uint64_t r = 12345;
    enum { NSEQ = 40, LEN = 5 };
    int32_t toks[NSEQ][LEN * BS];
    for (int s = 0; s < NSEQ; s++) {
        for (int i = 0; i < LEN * BS; i++)
            toks[s][i] = (int32_t)(rnd(&r) % 3); /* tiny vocabulary: shared prefixes */
        int32_t blocks[LEN];
        int m = ifd_kvpool_lookup(pool, 0, 0, toks[s], LEN * BS, blocks, LEN, NULL);
        ck_assert_int_ge(m, 0);
        /* Verify what was found, then compute and publish the rest. */
        ifd_kvhash_t h = {0, 0};
        for (int i = 0; i < LEN; i++) {
            ifd_kvhash_t full = ifd_kvpool_hash_block(&h, 0, toks[s] + i * BS, BS);
            /* the pattern is keyed by the full-strength chain: a block found
             * through a weak-hash collision with other tokens would fail here */
            if (i < m)
                ck_assert_msg(block_has(pool, blocks[i], hash_seed(full)),
                              "seq %d block %d: wrong KV", s, i);
            h = full;
        }
        ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, LEN - m, blocks + m), 0);
        h = (ifd_kvhash_t){0, 0};
        for (int i = 0; i < LEN; i++) {
            h = ifd_kvpool_hash_block(&h, 0, toks[s] + i * BS, BS);
            if (i >= m) {
                fill_block(pool, blocks[i], hash_seed(h));
                ck_assert_int_ge(ifd_kvpool_publish(pool, 0, blocks[i], i ? blocks[i - 1] : -1, 0,
                                                    toks[s] + i * BS, NULL),
                                 0);
            }
        }
        ck_assert_int_eq(ifd_kvpool_unref(pool, 0, blocks, LEN), 0);
        assert_ok(pool);
    }
    /* Every sequence is found in full, with the right data. */
    for (int s = 0; s < NSEQ; s++) {
        int32_t blocks[LEN];
        ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks[s], LEN * BS, blocks, LEN, NULL), LEN);
        ifd_kvhash_t h = {0, 0};
        for (int i = 0; i < LEN; i++) {
            h = ifd_kvpool_hash_block(&h, 0, toks[s] + i * BS, BS);
            ck_assert(block_has(pool, blocks[i], hash_seed(h)));
        }
        ck_assert_int_eq(ifd_kvpool_unref(pool, 1, blocks, LEN), 0);
    }
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_lru_eviction_order)
{
    ifd_kvpool_t *pool = make_pool(8);
    int32_t toks[4][2 * BS];
    int32_t seq[4][2];
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < 2 * BS; i++)
            toks[s][i] = s * 1000 + i;
        ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 2, seq[s]), 0);
        publish_seq(pool, 0, seq[s], 2, toks[s], 0);
    }
    /* Release in order 0..3, then touch 0 again: LRU order 1, 2, 3, 0. */
    for (int s = 0; s < 4; s++)
        ck_assert_int_eq(ifd_kvpool_free(pool, 0, seq[s], 2), 0);
    int32_t got[2];
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 1, 0, toks[0], 2 * BS, got, 2, NULL), 2);
    ck_assert_int_eq(ifd_kvpool_unref(pool, 1, got, 2), 0);
    /* Hold sequence 2: never evicted. */
    ck_assert_int_eq(ifd_kvpool_lookup(pool, 2, 0, toks[2], 2 * BS, got, 2, NULL), 2);
    /* Need 3 blocks: evicts the two of seq 1 (tail block first), then
     * seq 3's tail. */
    int32_t n3[3];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 3, 0, 3, n3), 0);
    ck_assert_int_eq(n3[0], seq[1][1]);
    ck_assert_int_eq(n3[1], seq[1][0]);
    ck_assert_int_eq(n3[2], seq[3][1]);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks[1], 2 * BS, NULL, 0), 0);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks[3], 2 * BS, NULL, 0), 1);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks[0], 2 * BS, NULL, 0), 2);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks[2], 2 * BS, NULL, 0), 2);
    /* 3 more: seq 3's head, then seq 0 (2); seq 2 is held: 4th fails. */
    int32_t more[4];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 3, 0, 4, more), IFD_ENOBLOCKS);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 3, 0, 3, more), 0);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks[2], 2 * BS, NULL, 0), 2);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_uint_eq(s.evictions, 6);
    ck_assert_int_eq(s.cached + s.free, 0);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_reclaim_exact)
{
    ifd_kvpool_t *pool = make_pool(16);
    int32_t toks[2 * BS] = {9, 8, 7, 6, 5, 4, 3, 2};
    int32_t a[2], b[3];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 2, a), 0);
    publish_seq(pool, 0, a, 2, toks, 0);
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 3, b), 0);
    int32_t r[3] = {a[0], a[0], a[1]};
    ck_assert_int_eq(ifd_kvpool_ref(pool, 1, r, 3), 0);
    ck_assert_int_eq(ifd_kvpool_reclaim(pool, 1), 6);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, a[0]), 1);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 1, a[0]), 0);
    ck_assert_int_eq(ifd_kvpool_reclaim(pool, 1), 0);
    ck_assert_int_eq(ifd_kvpool_reclaim(pool, 0), 2);
    ck_assert_int_eq(ifd_kvpool_reclaim(pool, NW), IFD_EINVAL);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.cached, 2); /* the dead worker's published prefix survives */
    ck_assert_int_eq(s.free, 14);
    ck_assert_uint_eq(s.reclaims, 3);
    ck_assert_uint_eq(s.reclaimed_refs, 8);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks, 2 * BS, NULL, 0), 2);
    /* invalidate_device drops the cache of a device. */
    ck_assert_int_eq(ifd_kvpool_invalidate_device(pool, 0), 2);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks, 2 * BS, NULL, 0), 0);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

/* ---- random operations against a model
 * ----------------------------------------------------------- */

START_TEST(test_random_ops_invariants)
{
    enum { NB = 24, NWK = 4, STEPS = 3000, MAXH = 64 };
    ifd_kvpool_t *pool = make_pool(NB);
    /* The model: the multiset of blocks each worker holds. */
    int32_t held[NWK][MAXH];
    int nheld[NWK] = {0};
    uint64_t r = 777;
    int32_t toks[8][4 * BS];
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 4 * BS; i++)
            toks[s][i] = (int32_t)(s < 4 ? i : (s * 31 + i) % 5);
    for (int step = 0; step < STEPS; step++) {
        int w = (int)(rnd(&r) % NWK);
        int op = (int)(rnd(&r) % 6);
        if (op == 0 && nheld[w] < MAXH - 4) { /* alloc */
            int n = 1 + (int)(rnd(&r) % 4);
            int32_t out[4];
            int rc = ifd_kvpool_alloc(pool, w, 0, n, out);
            ck_assert(rc == 0 || rc == IFD_ENOBLOCKS);
            if (rc == 0)
                for (int i = 0; i < n; i++)
                    held[w][nheld[w]++] = out[i];
        } else if (op == 1 && nheld[w] > 0) { /* unref one or a run */
            int i = (int)(rnd(&r) % (uint64_t)nheld[w]);
            int n = 1 + (int)(rnd(&r) % (uint64_t)(nheld[w] - i));
            ck_assert_int_eq(ifd_kvpool_unref(pool, w, held[w] + i, n), 0);
            memmove(held[w] + i, held[w] + i + n, (size_t)(nheld[w] - i - n) * sizeof(int32_t));
            nheld[w] -= n;
        } else if (op == 2 && nheld[w] < MAXH - 1) { /* ref someone's block */
            int o = (int)(rnd(&r) % NWK);
            if (nheld[o] > 0) {
                int32_t b = held[o][rnd(&r) % (uint64_t)nheld[o]];
                ck_assert_int_eq(ifd_kvpool_ref(pool, w, &b, 1), 0);
                held[w][nheld[w]++] = b;
            }
        } else if (op == 3 && nheld[w] < MAXH - 4) { /* lookup + publish a sequence */
            int s = (int)(rnd(&r) % 8);
            int32_t blocks[4];
            int m = ifd_kvpool_lookup(pool, w, 0, toks[s], 4 * BS, blocks, 4, NULL);
            ck_assert_int_ge(m, 0);
            for (int i = 0; i < m; i++)
                held[w][nheld[w]++] = blocks[i];
            if (m < 4 && ifd_kvpool_alloc(pool, w, 0, 4 - m, blocks + m) == 0) {
                for (int i = m; i < 4; i++) {
                    held[w][nheld[w]++] = blocks[i];
                    ck_assert_int_ge(ifd_kvpool_publish(pool, w, blocks[i], i ? blocks[i - 1] : -1,
                                                        0, toks[s] + i * BS, NULL),
                                     0);
                }
            }
        } else if (op == 4 && nheld[w] > 0) { /* cow */
            int i = (int)(rnd(&r) % (uint64_t)nheld[w]);
            int32_t b = held[w][i];
            int rc = ifd_kvpool_cow(pool, w, &b);
            ck_assert(rc == 0 || rc == 1 || rc == IFD_ENOBLOCKS);
            held[w][i] = b;
        } else if (op == 5 && rnd(&r) % 20 == 0) { /* the worker dies */
            ck_assert_int_eq(ifd_kvpool_reclaim(pool, w), nheld[w]);
            nheld[w] = 0;
        }
        /* The ledger agrees with the model. */
        for (int ww = 0; ww < NWK; ww++)
            for (int i = 0; i < nheld[ww]; i++) {
                int c = 0;
                for (int j = 0; j < nheld[ww]; j++)
                    c += held[ww][j] == held[ww][i];
                ck_assert_int_eq(ifd_kvpool_refs_of(pool, ww, held[ww][i]), c);
            }
        assert_ok(pool);
    }
    for (int w = 0; w < NWK; w++)
        ck_assert_int_eq(ifd_kvpool_reclaim(pool, w), nheld[w]);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.in_use, 0);
    ck_assert_int_eq(s.free + s.cached, NB);
    ck_assert_uint_gt(s.hit_blocks, 0);
    ck_assert_uint_gt(s.evictions, 0);
    ck_assert_uint_gt(s.cows, 0);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

/* ---- crash safety -----------------------------------------------------------------------------
 */

static int wait_child(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return st;
}

START_TEST(test_eownerdead_repair)
{
    ifd_kvpool_t *pool = make_pool(16);
    int32_t toks[2 * BS] = {1, 1, 2, 2, 3, 3, 4, 4};
    int32_t a[2], b[3];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 2, a), 0);
    publish_seq(pool, 0, a, 2, toks, 0);
    ck_assert_int_eq(ifd_kvpool_free(pool, 0, a, 2), 0); /* cached */
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 1, 0, 3, b), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        ifd__kvpool_lock(pool);
        ifd__kvpool_scramble(pool);
        raise(SIGKILL);
        _exit(1);
    }
    int st = wait_child(pid);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ck_assert_uint_eq(ifd__kvpool_repairs(pool), 0);
    assert_ok(pool); /* the first locker repairs */
    ck_assert_uint_eq(ifd__kvpool_repairs(pool), 1);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.in_use, 3);
    ck_assert_int_eq(s.cached, 2);
    ck_assert_int_eq(s.free, 11);
    ck_assert_uint_eq(s.repairs, 1);
    ck_assert_int_eq(ifd_kvpool_probe(pool, 0, toks, 2 * BS, NULL, 0), 2);
    ck_assert_int_eq(ifd_kvpool_refs_of(pool, 1, b[2]), 1);
    /* Dying holding the lock without touching anything repairs too. */
    pid = fork();
    if (pid == 0) {
        ifd__kvpool_lock(pool);
        raise(SIGKILL);
        _exit(1);
    }
    wait_child(pid);
    int32_t c[11];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 2, 0, 11, c), 0);
    ck_assert_uint_eq(ifd__kvpool_repairs(pool), 2);
    assert_ok(pool);
    ifd_kvpool_destroy(pool);
}
END_TEST

/* A fixed script a worker runs: touches every crash point (alloc with and
 * without eviction, publish indexed and twin, keyed and chained, lookup,
 * keyed lookup, unref to cached and to free, ref, cow, reclaim). Returns 0
 * if it completed. */
static int crash_script(ifd_kvpool_t *pool, int w)
{
    int32_t toks[3 * BS];
    for (int i = 0; i < 3 * BS; i++)
        toks[i] = 50 + i;
    int32_t a[3], b[3], c[12], got[3];
    if (ifd_kvpool_alloc(pool, w, 0, 3, a))
        return 1;
    for (int i = 0; i < 3; i++)
        if (ifd_kvpool_publish(pool, w, a[i], i ? a[i - 1] : -1, 0, toks + i * BS, NULL) < 0)
            return 2;
    if (ifd_kvpool_alloc(pool, w, 0, 3, b))
        return 3;
    for (int i = 0; i < 3; i++)
        if (ifd_kvpool_publish(pool, w, b[i], i ? b[i - 1] : -1, 0, toks + i * BS, NULL) != 1)
            return 4;
    int32_t k[2], kgot;
    uint64_t key;
    if (ifd_kvpool_block_key(pool, a[2], &key) || ifd_kvpool_alloc(pool, w, 0, 2, k))
        return 12;
    if (ifd_kvpool_publish_keyed(pool, w, k[0], key, 0, toks) != 0 ||
        ifd_kvpool_publish_keyed(pool, w, k[1], key, 0, toks) != 1)
        return 13;
    if (ifd_kvpool_lookup_keyed(pool, w, 0, toks, &key, 1, &kgot) != 1 ||
        ifd_kvpool_unref(pool, w, &kgot, 1) || ifd_kvpool_unref(pool, w, k, 2))
        return 14;
    if (ifd_kvpool_unref(pool, w, a, 3))
        return 5;
    if (ifd_kvpool_lookup(pool, w, 0, toks, 3 * BS, got, 3, NULL) != 3)
        return 6;
    if (ifd_kvpool_unref(pool, w, got, 3) || ifd_kvpool_unref(pool, w, b, 3))
        return 7;
    if (ifd_kvpool_alloc(pool, w, 0, 12, c)) /* evicts */
        return 8;
    if (ifd_kvpool_ref(pool, w, c, 2))
        return 9;
    int32_t x = c[0];
    if (ifd_kvpool_unref(pool, w, c + 4, 8) || ifd_kvpool_cow(pool, w, &x) != 1)
        return 10;
    if (ifd_kvpool_reclaim(pool, w) < 0)
        return 11;
    return 0;
}

START_TEST(test_crash_at_every_point)
{
    /* Find how many crash points the script passes, then die at each one
     * in turn; after each death the pool must repair, reclaim exactly, and
     * end with every block free or cached. */
    int points = 0;
    for (int k = 1;; k++) {
        /* 14 blocks, 2 held by a bystander: the script's 12-block alloc
         * must evict. */
        int32_t keep[2];
        ifd_kvpool_t *pool = make_pool(14);
        ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, 2, keep), 0);
        fill_block(pool, keep[0], 11);
        fill_block(pool, keep[1], 12);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            ifd__kvpool_set_crash_point(pool, k);
            _exit(crash_script(pool, 3));
        }
        int st = wait_child(pid);
        int died = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (!died) {
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "script failed: %d",
                          WEXITSTATUS(st));
            points = k - 1;
            ifd_kvpool_destroy(pool);
            break;
        }
        assert_ok(pool);
        ck_assert_int_ge(ifd_kvpool_reclaim(pool, 3), 0);
        assert_ok(pool);
        ifd_kvpool_stats_t s;
        ifd_kvpool_stats(pool, &s);
        ck_assert_int_eq(s.in_use, 2);
        ck_assert_int_eq(s.free + s.cached, 12);
        ck_assert(block_has(pool, keep[0], 11) && block_has(pool, keep[1], 12));
        ck_assert_int_eq(ifd_kvpool_refs_of(pool, 0, keep[0]), 1);
        /* The pool still works: everything not held can be allocated. */
        int32_t all[12];
        ck_assert_int_eq(ifd_kvpool_alloc(pool, 4, 0, 12, all), 0);
        ck_assert_int_eq(ifd_kvpool_free(pool, 4, all, 12), 0);
        assert_ok(pool);
        ifd_kvpool_destroy(pool);
        ck_assert_int_lt(k, 10000);
    }
    printf("crash points: %d, each survived\n", points);
    ck_assert_int_gt(points, 30);
}
END_TEST

/* ---- multi-process stress and crash
 * --------------------------------------------------------------- */

enum { SP_BLOCKS = 64, SP_SEQS = 48, SP_LEN = 6, SP_HOLD = 6 };

typedef struct {
    int32_t blocks[SP_LEN];
    uint64_t seed[SP_LEN]; /* pattern each block must hold */
    int n;
} sp_seq_t;

/* The stress worker: random operations, each block's data written with a
 * pattern and verified before release. Exit code 0 = all good. */
static int stress_worker(int sock, int w, int ops, uint64_t seed)
{
    int fds[2], nfds;
    char msg[4];
    size_t len;
    if (ifd_fdpass_recv(sock, msg, sizeof msg, &len, fds, 2, &nfds) != 0 || nfds != 2)
        return 20;
    ifd_kvpool_params_t want = small_params(0);
    ifd_kvpool_t *pool;
    if (ifd_kvpool_attach(fds[0], &fds[1], 1, &want, &pool) != 0)
        return 21;
    close(fds[0]);
    close(fds[1]);
    int32_t toks[SP_SEQS][SP_LEN * BS];
    for (int s = 0; s < SP_SEQS; s++)
        for (int i = 0; i < SP_LEN * BS; i++)
            toks[s][i] = (int32_t)(mix64((uint64_t)(s % 4) * 1000 + (uint64_t)(i < 8 ? 0 : s) +
                                         (uint64_t)i) %
                                   7);
    sp_seq_t held[SP_HOLD];
    int nh = 0;
    uint64_t r = seed | 1;
    for (int op = 0; op < ops; op++) {
        int k = (int)(rnd(&r) % 10);
        if (nh < SP_HOLD && k < 5) {
            /* a request: look up its prefix, verify it, compute the rest */
            int s = (int)(rnd(&r) % SP_SEQS);
            int n = 1 + (int)(rnd(&r) % SP_LEN);
            sp_seq_t *q = &held[nh];
            int m = ifd_kvpool_lookup(pool, w, 0, toks[s], n * BS, q->blocks, n, NULL);
            if (m < 0)
                return 22;
            ifd_kvhash_t h = {0, 0};
            for (int i = 0; i < n; i++) {
                h = ifd_kvpool_hash_block(&h, 0, toks[s] + i * BS, BS);
                q->seed[i] = hash_seed(h);
                if (i < m && !block_has(pool, q->blocks[i], q->seed[i]))
                    return 23; /* a cached block holds someone else's data */
            }
            int rc = ifd_kvpool_alloc(pool, w, 0, n - m, q->blocks + m);
            if (rc == IFD_ENOBLOCKS) {
                if (ifd_kvpool_unref(pool, w, q->blocks, m))
                    return 24;
                continue;
            }
            if (rc)
                return 25;
            for (int i = m; i < n; i++) {
                fill_block(pool, q->blocks[i], q->seed[i]);
                if (ifd_kvpool_publish(pool, w, q->blocks[i], i ? q->blocks[i - 1] : -1, 0,
                                       toks[s] + i * BS, NULL) < 0)
                    return 26;
            }
            q->n = n;
            nh++;
        } else if (nh > 0 && k < 8) {
            /* a request ends: its blocks must still hold their data */
            int i = (int)(rnd(&r) % (uint64_t)nh);
            sp_seq_t *q = &held[i];
            for (int j = 0; j < q->n; j++)
                if (!block_has(pool, q->blocks[j], q->seed[j]))
                    return 27;
            if (ifd_kvpool_unref(pool, w, q->blocks, q->n))
                return 28;
            held[i] = held[--nh];
        } else if (nh > 0 && k == 8) {
            /* a private scratch block: cow the last block, scribble, verify, drop */
            sp_seq_t *q = &held[rnd(&r) % (uint64_t)nh];
            int32_t b = q->blocks[q->n - 1];
            int rc = ifd_kvpool_cow(pool, w, &b);
            if (rc == 1) {
                if (!block_has(pool, b, q->seed[q->n - 1]))
                    return 29;
                uint64_t mine = rnd(&r);
                fill_block(pool, b, mine);
                for (int t = 0; t < 3; t++)
                    if (!block_has(pool, b, mine))
                        return 30; /* someone else wrote into our private block */
                q->n--;            /* the private copy replaces the tail; drop it */
                if (ifd_kvpool_unref(pool, w, &b, 1))
                    return 31;
                if (q->n == 0)
                    held[q - held] = held[--nh];
            } else if (rc != IFD_ENOBLOCKS) {
                return 32;
            }
        } else {
            ifd_kvpool_stats_t st;
            if (ifd_kvpool_stats(pool, &st) || st.total != SP_BLOCKS)
                return 33;
        }
    }
    for (int i = 0; i < nh; i++)
        if (ifd_kvpool_unref(pool, w, held[i].blocks, held[i].n))
            return 34;
    ifd_kvpool_destroy(pool);
    return 0;
}

static pid_t spawn_worker(ifd_kvpool_t *pool, int w, int ops, uint64_t seed)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        _exit(stress_worker(sv[1], w, ops, seed));
    }
    close(sv[1]);
    int fds[2] = {ifd_kvpool_meta_fd(pool), ifd_kvpool_data_fd(pool, 0)};
    if (pid > 0 && ifd_fdpass_send(sv[0], "kv", 3, fds, 2) != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        pid = -1;
    }
    close(sv[0]);
    return pid;
}

static void run_stress(uint64_t seed)
{
    enum { NPROC = 4, OPS = 2500 };
    ifd_kvpool_t *pool = make_pool(SP_BLOCKS);
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = spawn_worker(pool, i, OPS, seed * 7919 + (uint64_t)i);
        ck_assert_int_gt(pids[i], 0);
    }
    for (int i = 0; i < NPROC; i++) {
        int st = wait_child(pids[i]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d: status %d (exit %d)", i,
                      st, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    assert_ok(pool);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.in_use, 0);
    ck_assert_int_eq(s.free + s.cached, SP_BLOCKS);
    ck_assert_uint_gt(s.hit_blocks, 0);
    ck_assert_uint_eq(s.repairs, 0);
    printf("stress: allocs %llu, lookups %llu, hit blocks %llu, evictions %llu, cows %llu\n",
           (unsigned long long)s.allocs, (unsigned long long)s.lookups,
           (unsigned long long)s.hit_blocks, (unsigned long long)s.evictions,
           (unsigned long long)s.cows);
    for (int w = 0; w < NW; w++)
        ck_assert_int_eq(ifd_kvpool_reclaim(pool, w), 0); /* nothing leaked */
    ifd_kvpool_destroy(pool);
}

static void run_crash(uint64_t seed)
{
    enum { NPROC = 4, ROUNDS = 12 };
    ifd_kvpool_t *pool = make_pool(SP_BLOCKS);
    uint64_t r = seed * 2654435761u + 1;
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = spawn_worker(pool, i, 1 << 30, rnd(&r));
        ck_assert_int_gt(pids[i], 0);
    }
    /* A lock holder, to be killed in the critical section every round. */
    int locker_slot = NPROC;
    for (int round = 0; round < ROUNDS; round++) {
        int pfd[2];
        ck_assert_int_eq(pipe(pfd), 0);
        pid_t locker = fork();
        if (locker == 0) {
            close(pfd[0]);
            int32_t b;
            if (ifd_kvpool_alloc(pool, locker_slot, 0, 1, &b) != 0)
                (void)0;
            ifd__kvpool_lock(pool);
            (void)!write(pfd[1], "L", 1);
            for (;;)
                pause();
        }
        close(pfd[1]);
        char c;
        ck_assert_int_eq(read(pfd[0], &c, 1), 1);
        close(pfd[0]);
        /* Let the workers pile up on the lock, then kill the holder. */
        struct timespec ts = {0, (long)(rnd(&r) % 2000000)};
        nanosleep(&ts, NULL);
        kill(locker, SIGKILL);
        wait_child(locker);
        ck_assert_int_ge(ifd_kvpool_reclaim(pool, locker_slot), 0);
        /* Kill a random worker at a random moment, reclaim, restart it. */
        ts.tv_nsec = (long)(rnd(&r) % 5000000);
        nanosleep(&ts, NULL);
        int victim = (int)(rnd(&r) % NPROC);
        kill(pids[victim], SIGKILL);
        int st = wait_child(pids[victim]);
        ck_assert_msg(WIFSIGNALED(st), "worker %d exited early: %d (exit %d)", victim, st,
                      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        ck_assert_int_ge(ifd_kvpool_reclaim(pool, victim), 0);
        assert_ok(pool);
        pids[victim] = spawn_worker(pool, victim, 1 << 30, rnd(&r));
        ck_assert_int_gt(pids[victim], 0);
    }
    for (int i = 0; i < NPROC; i++) {
        kill(pids[i], SIGKILL);
        int st = wait_child(pids[i]);
        ck_assert_msg(WIFSIGNALED(st), "worker %d failed: exit %d", i,
                      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        ck_assert_int_ge(ifd_kvpool_reclaim(pool, i), 0);
    }
    assert_ok(pool);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.in_use, 0);
    ck_assert_int_eq(s.free + s.cached, SP_BLOCKS); /* zero leaked blocks */
    ck_assert_uint_ge(s.repairs, ROUNDS);           /* every locker death repaired */
    printf("crash: allocs %llu, lookups %llu, hit blocks %llu, repairs %llu, reclaimed %llu\n",
           (unsigned long long)s.allocs, (unsigned long long)s.lookups,
           (unsigned long long)s.hit_blocks, (unsigned long long)s.repairs,
           (unsigned long long)s.reclaimed_refs);
    int32_t all[SP_BLOCKS];
    ck_assert_int_eq(ifd_kvpool_alloc(pool, 0, 0, SP_BLOCKS, all), 0);
    ifd_kvpool_destroy(pool);
}

/* The stress worker's operations from threads of one process, each with its
 * own handle (the pool's metadata is shared through the one mutex): the
 * multi-thread path, run by test.sh's ThreadSanitizer build. */
typedef struct {
    int sock, w, ops, rc;
    uint64_t seed;
} thr_arg_t;

static void *stress_thread(void *arg)
{
    thr_arg_t *t = arg;
    t->rc = stress_worker(t->sock, t->w, t->ops, t->seed);
    close(t->sock);
    return NULL;
}

static void run_thread_stress(uint64_t seed)
{
    enum { NTHR = 4, OPS = 1500 };
    ifd_kvpool_t *pool = make_pool(SP_BLOCKS);
    pthread_t th[NTHR];
    thr_arg_t arg[NTHR];
    int fds[2] = {ifd_kvpool_meta_fd(pool), ifd_kvpool_data_fd(pool, 0)};
    for (int i = 0; i < NTHR; i++) {
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(ifd_fdpass_send(sv[0], "kv", 3, fds, 2), 0);
        close(sv[0]);
        arg[i] = (thr_arg_t){sv[1], i, OPS, -1, seed * 104729 + (uint64_t)i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, stress_thread, &arg[i]), 0);
    }
    for (int i = 0; i < NTHR; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(arg[i].rc == 0, "thread %d: code %d", i, arg[i].rc);
    }
    assert_ok(pool);
    ifd_kvpool_stats_t s;
    ifd_kvpool_stats(pool, &s);
    ck_assert_int_eq(s.in_use, 0);
    ck_assert_int_eq(s.free + s.cached, SP_BLOCKS);
    ck_assert_uint_gt(s.hit_blocks, 0);
    for (int w = 0; w < NW; w++)
        ck_assert_int_eq(ifd_kvpool_reclaim(pool, w), 0);
    ifd_kvpool_destroy(pool);
}

START_TEST(test_multithread_stress)
{
    for (int i = 0; i < ifd__repeat; i++)
        run_thread_stress((uint64_t)i + 1);
}
END_TEST

START_TEST(test_multiprocess_stress)
{
    for (int i = 0; i < ifd__repeat; i++)
        run_stress((uint64_t)i + 1);
}
END_TEST

START_TEST(test_crash_kill_random)
{
    for (int i = 0; i < ifd__repeat; i++)
        run_crash((uint64_t)i + 1);
}
END_TEST

/* ---- device segments through a provider ------------------------------------------------- */

/* A provider whose "device memory" is a host memfd, so the pool's bind /
 * seal / rebuild logic runs here (and under ASan): VMM segments travel as
 * the memfd itself; an IPC handle names nothing real and opens only while
 * fake_ipc_alive (its "creator" lives). */
static bool fake_ipc_alive;

typedef struct {
    int fd; /* the mapping's memfd (owned by priv unless handed to the pool) */
    bool own_fd;
    size_t bytes;
} fake_map_t;

static int fake_map(int fd, uint64_t bytes, bool own, void **base, void **priv)
{
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    fake_map_t *m = malloc(sizeof *m);
    *m = (fake_map_t){fd, own, (size_t)bytes};
    *base = p;
    *priv = m;
    return 0;
}

static int fake_create(void *ctx, int dev, uint64_t bytes, ifd_kvseg_export_t *exp, void **base,
                       void **priv)
{
    (void)ctx;
    (void)dev;
    int fd = memfd_create("fake-kvseg", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0)
        return IFD_ENOMEM;
    bool ipc = exp->kind == IFD_KVSEG_CUDA_IPC;
    exp->bytes = bytes;
    exp->fd = ipc ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    memset(exp->handle, 0, sizeof exp->handle);
    if (ipc)
        memcpy(exp->handle, &fd, sizeof fd); /* the "creator's" fd */
    fake_ipc_alive = true;
    return fake_map(fd, bytes, true, base, priv);
}

static int fake_import(void *ctx, int dev, const ifd_kvseg_export_t *exp, void **base, void **priv)
{
    (void)ctx;
    (void)dev;
    if (exp->kind == IFD_KVSEG_CUDA_IPC) {
        int fd;
        memcpy(&fd, exp->handle, sizeof fd);
        if (!fake_ipc_alive)
            return IFD_ECUDA; /* its creator died */
        return fake_map(fd, exp->bytes, false, base, priv);
    }
    return exp->fd < 0 ? IFD_EINVAL : fake_map(exp->fd, exp->bytes, false, base, priv);
}

static void fake_release(void *ctx, void *base, uint64_t bytes, void *priv)
{
    (void)ctx;
    fake_map_t *m = priv;
    munmap(base, (size_t)bytes);
    if (m->own_fd)
        close(m->fd);
    free(m);
}

static int fake_copy(void *ctx, void *dst, const void *src, uint64_t n)
{
    (void)ctx;
    memmove(dst, src, (size_t)n);
    return 0;
}

static const ifd_kvseg_provider_t fake_provider = {
    NULL, fake_create, fake_import, fake_release, fake_copy, fake_copy, fake_copy,
};

/* A handle on pool's metadata with pool's data fd, bound via the provider. */
static ifd_kvpool_t *bound_handle(ifd_kvpool_t *pool)
{
    int fd = ifd_kvpool_data_fd(pool, 0);
    ifd_kvpool_t *h = NULL;
    ck_assert_int_eq(ifd_kvpool_attach(ifd_kvpool_meta_fd(pool), &fd, 1, NULL, &h), 0);
    ck_assert_int_eq(ifd_kvpool_bind_segment(h, 0, &fake_provider), 0);
    return h;
}

static void device_segment_case(ifd_kvseg_kind_t kind)
{
    ifd_kvpool_params_t p = small_params(8);
    p.kind[0] = kind;
    ifd_kvpool_t *router;
    ck_assert_int_eq(ifd_kvpool_create(&p, &router), 0);
    ck_assert_ptr_null(ifd_kvpool_layer_k(router, 0, 0));
    /* an incomplete provider is refused */
    ifd_kvseg_provider_t bad = fake_provider;
    bad.read = NULL;
    ck_assert_int_eq(ifd_kvpool_bind_segment(router, 0, &bad), IFD_EINVAL);

    /* worker A makes the segment, writes and publishes two blocks */
    int fd_a = -1;
    ifd_kvpool_t *a = bound_handle(router);
    ck_assert_int_eq(ifd_kvpool_bind_segment(a, 0, &fake_provider), IFD_EEXIST);
    if (kind == IFD_KVSEG_CUDA_VMM) {
        fd_a = ifd_kvpool_data_fd(a, 0);
        ck_assert_int_ge(fd_a, 0);
        ck_assert_int_eq(ifd_kvpool_adopt_fd(router, 0, fcntl(fd_a, F_DUPFD_CLOEXEC, 0)), 0);
    }
    int32_t toks[2 * BS], blk[2];
    for (int i = 0; i < 2 * BS; i++)
        toks[i] = 50 + i;
    ck_assert_int_eq(ifd_kvpool_alloc(a, 0, 0, 2, blk), 0);
    size_t bb = (size_t)ifd_kvpool_block_bytes(&p);
    for (int b = 0; b < 2; b++) {
        memset(ifd_kvpool_block_ptr(a, blk[b], 1, true), 0x40 + b, bb);
        ck_assert_int_eq(ifd_kvpool_publish(a, 0, blk[b], b ? blk[0] : -1, 0, toks + b * BS, NULL),
                         0);
    }
    ck_assert_int_eq(ifd_kvpool_unref(a, 0, blk, 2), 0);

    /* worker B imports it: a prefix hit with A's bytes, no rebuild */
    ifd_kvpool_t *b = bound_handle(router);
    int32_t got[2];
    ck_assert_int_eq(ifd_kvpool_lookup(b, 1, 0, toks, 2 * BS, got, 2, NULL), 2);
    for (int i = 0; i < 2; i++) {
        const unsigned char *d = ifd_kvpool_block_ptr(b, got[i], 1, true);
        ck_assert_int_eq(d[0], 0x40 + i);
        ck_assert_int_eq(d[bb - 1], 0x40 + i);
    }
    ck_assert_int_eq(ifd_kvpool_unref(b, 1, got, 2), 0);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(router, &st), 0);
    ck_assert_uint_eq(st.rebuilds, 0);

    /* the memory goes: the VMM "driver" wipes it (seal broken), or the IPC
     * creator dies; worker C must find no stale prefix and a fresh segment */
    if (kind == IFD_KVSEG_CUDA_VMM)
        memset(ifd_kvpool_layer_k(a, 0, 0), 0, (size_t)ifd_kvpool_segment_bytes(a) + 64);
    else
        fake_ipc_alive = false;
    ifd_kvpool_t *c = bound_handle(router);
    ck_assert_int_eq(ifd_kvpool_stats(router, &st), 0);
    ck_assert_uint_eq(st.rebuilds, 1);
    ck_assert_int_eq(ifd_kvpool_lookup(c, 2, 0, toks, 2 * BS, got, 2, NULL), 0);
    ck_assert_int_eq(ifd_kvpool_probe(router, 0, toks, 2 * BS, NULL, 0), 0);
    if (kind == IFD_KVSEG_CUDA_VMM) /* a new fd for the router */
        ck_assert_int_ge(ifd_kvpool_data_fd(c, 0), 0);
    ck_assert_int_eq(ifd_kvpool_alloc(c, 2, 0, 1, blk), 0);
    memset(ifd_kvpool_block_ptr(c, blk[0], 0, false), 7, bb);
    ck_assert_int_eq(ifd_kvpool_publish(c, 2, blk[0], -1, 0, toks, NULL), 0);
    ck_assert_int_eq(ifd_kvpool_unref(c, 2, blk, 1), 0);
    /* D imports C's segment with the seal intact */
    if (kind == IFD_KVSEG_CUDA_VMM) {
        int fd_c = fcntl(ifd_kvpool_data_fd(c, 0), F_DUPFD_CLOEXEC, 0);
        ck_assert_int_eq(ifd_kvpool_adopt_fd(router, 0, fd_c), 0);
    }
    ifd_kvpool_t *d = bound_handle(router);
    ck_assert_int_eq(ifd_kvpool_lookup(d, 3, 0, toks, 2 * BS, got, 2, NULL), 1);
    ck_assert_int_eq(((const unsigned char *)ifd_kvpool_block_ptr(d, got[0], 0, false))[0], 7);
    ck_assert_int_eq(ifd_kvpool_unref(d, 3, got, 1), 0);
    ck_assert_int_eq(ifd_kvpool_stats(router, &st), 0);
    ck_assert_uint_eq(st.rebuilds, 1);
    assert_ok(router);
    ifd_kvpool_destroy(d);
    ifd_kvpool_destroy(c);
    ifd_kvpool_destroy(b);
    ifd_kvpool_destroy(a);
    ifd_kvpool_destroy(router);
}

START_TEST(test_device_segment_vmm_seal)
{
    device_segment_case(IFD_KVSEG_CUDA_VMM);
}
END_TEST

START_TEST(test_device_segment_ipc_lost)
{
    device_segment_case(IFD_KVSEG_CUDA_IPC);
}
END_TEST

/* A VMM segment whose maker died before the router took its fd is
 * unreachable: the next bind rebuilds it. */
START_TEST(test_device_segment_fd_never_handed_over)
{
    ifd_kvpool_params_t p = small_params(8);
    p.kind[0] = IFD_KVSEG_CUDA_VMM;
    ifd_kvpool_t *router;
    ck_assert_int_eq(ifd_kvpool_create(&p, &router), 0);
    int meta = ifd_kvpool_meta_fd(router);
    ifd_kvpool_t *a, *b;
    ck_assert_int_eq(ifd_kvpool_attach(meta, NULL, 0, NULL, &a), 0);
    ck_assert_int_eq(ifd_kvpool_data_fd(a, 0), -1);
    ck_assert_int_eq(ifd_kvpool_bind_segment(a, 0, &fake_provider), 0);
    ck_assert_int_ge(ifd_kvpool_data_fd(a, 0), 0);
    ifd_kvpool_destroy(a); /* dies before handing its fd to the router */
    ck_assert_int_eq(ifd_kvpool_attach(meta, NULL, 0, NULL, &b), 0);
    ck_assert_int_eq(ifd_kvpool_bind_segment(b, 0, &fake_provider), 0);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(router, &st), 0);
    ck_assert_uint_eq(st.rebuilds, 1);
    ck_assert_int_ge(ifd_kvpool_data_fd(b, 0), 0);
    assert_ok(router);
    ifd_kvpool_destroy(b);
    ifd_kvpool_destroy(router);
}
END_TEST

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--repeat") == 0)
            ifd__repeat = atoi(argv[i + 1]);
    if (ifd__repeat < 1)
        ifd__repeat = 1;
    ifd_log_set_level(IFD_LOG_ERROR);
    Suite *s = suite_create("kvpool");
    TCase *tc = tcase_create("kvpool");
    tcase_set_timeout(tc, 60);
    if (ifd__repeat == 1) {
        tcase_add_test(tc, test_dtype_names);
        tcase_add_test(tc, test_params_and_geometry);
        tcase_add_test(tc, test_attach_checks_everything);
        tcase_add_test(tc, test_fdpass_and_attach_in_child);
        tcase_add_test(tc, test_fdpass_too_many_fds_closes_them);
        tcase_add_test(tc, test_layout_contract);
        tcase_add_test(tc, test_hugepages_fall_back);
        tcase_add_test(tc, test_alloc_all_or_nothing_ref_unref);
        tcase_add_test(tc, test_cow);
        tcase_add_test(tc, test_publish_lookup_chain);
        tcase_add_test(tc, test_unpublish);
        tcase_add_test(tc, test_duplicates_and_twins);
        tcase_add_test(tc, test_collisions_never_return_wrong_kv);
        tcase_add_test(tc, test_keyed_entries);
        tcase_add_test(tc, test_window_run);
        tcase_add_test(tc, test_lru_eviction_order);
        tcase_add_test(tc, test_reclaim_exact);
        tcase_add_test(tc, test_random_ops_invariants);
        tcase_add_test(tc, test_eownerdead_repair);
        tcase_add_test(tc, test_crash_at_every_point);
        tcase_add_test(tc, test_device_segment_vmm_seal);
        tcase_add_test(tc, test_device_segment_ipc_lost);
        tcase_add_test(tc, test_device_segment_fd_never_handed_over);
    } else {
        tcase_set_timeout(tc, 60 * ifd__repeat);
    }
    tcase_add_test(tc, test_multiprocess_stress);
    tcase_add_test(tc, test_multithread_stress);
    tcase_add_test(tc, test_crash_kill_random);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
