/*
 * test_kvdisk.c — the KV pool's disk tier (common/kvpool/kvdisk.h).
 *
 * A chain of published blocks with random data is offered, written by the
 * tier's thread and read back into a second pool (a restarted daemon's)
 * byte for byte, with a local-layer pool's twins too; every fault a file
 * can have — truncated, a flipped data byte, a flipped header byte,
 * another fingerprint's file put under our name, a deleted file in the
 * middle of a chain, other tokens — stops the read at the block before it,
 * deletes the bad file and never writes a wrong byte into a block reported
 * as read; the size bound deletes the least recently used files; bad-file
 * warnings are rate-limited (a count of those left out); a read-only
 * directory turns writing off and gives every pin back; a load ended
 * before the thread took it reads nothing.
 */
#include "testutil.h"

#include "error.h"
#include "kvpool/kvdisk.h"
#include "kvpool/kvpool.h"
#include "log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NL 3
#define NH 2
#define HD 8
#define BS 4
#define NB 32
#define W  1 /* the worker slot */

static char dir[200];

static ifd_kvpool_t *make_pool(void)
{
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = NL, p.n_kv_heads = NH, p.head_dim = HD, p.dtype = IFD_KV_F32;
    p.block_size = BS, p.n_blocks = NB, p.n_workers = 4, p.fingerprint = 0xfeedULL;
    ifd_kvpool_t *pool = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    return pool;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t block_bytes(ifd_kvpool_t *pool)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    return ifd_kvpool_block_bytes(&g);
}

static void fill(ifd_kvpool_t *pool, int32_t b, uint64_t seed)
{
    uint64_t s = seed * 2654435761u + 1;
    for (int l = 0; l < NL; l++)
        for (int v = 0; v < 2; v++) {
            uint8_t *d = ifd_kvpool_block_ptr(pool, b, l, v);
            for (uint64_t i = 0; i < block_bytes(pool); i++)
                d[i] = (uint8_t)rnd(&s);
        }
}

static bool same(ifd_kvpool_t *a, int32_t ba, ifd_kvpool_t *b, int32_t bb)
{
    for (int l = 0; l < NL; l++)
        for (int v = 0; v < 2; v++)
            if (memcmp(ifd_kvpool_block_ptr(a, ba, l, v), ifd_kvpool_block_ptr(b, bb, l, v),
                       block_bytes(a)) != 0)
                return false;
    return true;
}

static ifd_kvdisk_t *make_disk(ifd_kvpool_t *pool, uint64_t fp, uint64_t max_bytes)
{
    ifd_kvdisk_params_t p = ifd_kvdisk_default_params();
    p.dir = dir, p.max_bytes = max_bytes, p.fingerprint = fp, p.worker = W;
    ifd_kvdisk_t *d = NULL;
    ck_assert_int_eq(ifd_kvdisk_create(&p, pool, &d), 0);
    return d;
}

static void wait_written(ifd_kvdisk_t *d)
{
    for (int i = 0; i < 5000 && ifd_kvdisk_pending(d) > 0; i++)
        usleep(1000);
    ck_assert_int_eq(ifd_kvdisk_pending(d), 0);
}

/* Publishes n blocks of tokens (data from seed + i) in pool and offers
 * each to d; out_blocks gets them, hashes their disk chain hashes. */
static void publish_chain(ifd_kvpool_t *pool, ifd_kvdisk_t *d, const int32_t *tokens, int n,
                          uint64_t seed, int32_t *out_blocks, ifd_kvhash_t *hashes)
{
    ck_assert_int_eq(ifd_kvpool_alloc(pool, W, 0, n, out_blocks), 0);
    ifd_kvhash_t h = {0, 0};
    for (int i = 0; i < n; i++) {
        fill(pool, out_blocks[i], seed + (uint64_t)i);
        ck_assert_int_ge(ifd_kvpool_publish(pool, W, out_blocks[i], i ? out_blocks[i - 1] : -1, 7,
                                            tokens + i * BS, NULL),
                         0);
        ifd_kvdisk_offer(d, out_blocks[i], -1, &h, 7, tokens + i * BS, &h);
        if (hashes)
            hashes[i] = h;
    }
    wait_written(d);
}

/* Reads up to n blocks of tokens from d into fresh blocks of pool; returns
 * how many were read (their ids in out). */
static int load(ifd_kvpool_t *pool, ifd_kvdisk_t *d, const int32_t *tokens, int n, int32_t *out)
{
    ifd_kvhash_t root = {0, 0};
    ck_assert_int_eq(ifd_kvpool_alloc(pool, W, 0, n, out), 0);
    for (int i = 0; i < n; i++) /* poison: a block reported read must hold the file's bytes */
        for (int l = 0; l < NL; l++)
            for (int v = 0; v < 2; v++)
                memset(ifd_kvpool_block_ptr(pool, out[i], l, v), 0xa5, block_bytes(pool));
    ifd_kvdisk_load_t *ld = NULL;
    ck_assert_int_eq(ifd_kvdisk_load_start(d, &root, 7, tokens, n, out, NULL, &ld), 0);
    ck_assert(ifd_kvdisk_load_wait(ld, 10000));
    return ifd_kvdisk_load_finish(ld, false);
}

static void path_of(ifd_kvdisk_t *d, uint64_t fp, const ifd_kvhash_t *h, char *out, size_t n)
{
    (void)d;
    char name[64];
    ifd_kvdisk_file_name(fp, h, name, sizeof name);
    snprintf(out, n, "%s/%s", dir, name);
}

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_kvdisk.%d.XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void rm_dir(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void tokens_init(int32_t *t, int n, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(rnd(&s) % 49152);
}

/* Block b's data as a staged tier takes it: every layer's K then V. */
static void copy_out(ifd_kvpool_t *pool, int32_t b, uint8_t *out)
{
    for (int l = 0; l < NL; l++)
        for (int v = 0; v < 2; v++, out += block_bytes(pool))
            memcpy(out, ifd_kvpool_block_ptr(pool, b, l, v), block_bytes(pool));
}

/*
 * A staged tier (a device pool's, kvdisk.h): blocks offered as host copies
 * make the same files, byte for byte, as the pool-backed tier's; a staged
 * load reads a pool-backed tier's files into host buffers (the bytes of the
 * blocks), stops at a corrupt file and deletes it; the pool-only calls are
 * refused by a staged tier and the staged ones by the other.
 */
START_TEST(test_staged_same_files)
{
    make_dir();
    int32_t tok[4 * BS], a[4];
    tokens_init(tok, 4 * BS, 19);
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_t *d1 = make_disk(p1, 43, 1 << 20);
    ifd_kvhash_t hashes[4];
    publish_chain(p1, d1, tok, 4, 300, a, hashes);
    const size_t data = 2 * NL * block_bytes(p1);
    uint8_t *copies = malloc(4 * data), *bufs = malloc(4 * data);
    for (int i = 0; i < 4; i++)
        copy_out(p1, a[i], copies + i * data);
    /* the files moved aside; a staged tier writes them again from the copies */
    char path[300], moved[320], cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir %s/pooled && mv %s/*.kvb %s/pooled/", dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    ifd_kvdisk_params_t sp = ifd_kvdisk_default_params();
    sp.dir = dir, sp.max_bytes = 1 << 20, sp.fingerprint = 43, sp.worker = W, sp.staged = true;
    ifd_kvdisk_t *s1 = NULL;
    ck_assert_int_eq(ifd_kvdisk_create(&sp, p1, &s1), 0);
    ck_assert(ifd_kvdisk_staged(s1) && !ifd_kvdisk_staged(d1));
    ck_assert_uint_eq(ifd_kvdisk_data_bytes(s1), data);
    ifd_kvhash_t h = {0, 0};
    for (int i = 0; i < 4; i++)
        ifd_kvdisk_offer_data(s1, copies + i * data, &h, 7, tok + i * BS, &h);
    wait_written(s1);
    for (int i = 0; i < 4; i++) {
        path_of(s1, 43, &hashes[i], path, sizeof path);
        char name[64];
        ifd_kvdisk_file_name(43, &hashes[i], name, sizeof name);
        snprintf(moved, sizeof moved, "%s/pooled/%s", dir, name);
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, moved);
        ck_assert_msg(system(cmd) == 0, "block %d: the staged file differs", i);
    }
    /* a staged load into host buffers; block 2's file corrupted */
    FILE *f = NULL;
    path_of(s1, 43, &hashes[2], path, sizeof path);
    ck_assert_ptr_nonnull(f = fopen(path, "r+b"));
    fseek(f, -3, SEEK_END);
    int c = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(0x5a ^ c, f);
    fclose(f);
    memset(bufs, 0xa5, 4 * data);
    void *bp[4] = {bufs, bufs + data, bufs + 2 * data, bufs + 3 * data};
    ifd_kvhash_t root = {0, 0};
    ifd_kvdisk_load_t *ld = NULL;
    int32_t blk[4] = {0, 1, 2, 3};
    ck_assert_int_eq(ifd_kvdisk_load_start(s1, &root, 7, tok, 4, blk, NULL, &ld), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvdisk_load_start_staged(d1, &root, 7, tok, 4, bp, &ld), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvdisk_load_start_staged(s1, &root, 7, tok, 4, bp, &ld), 0);
    ck_assert(ifd_kvdisk_load_wait(ld, 10000));
    ck_assert_int_eq(ifd_kvdisk_load_finish(ld, false), 2);
    ck_assert_int_eq(memcmp(bufs, copies, 2 * data), 0);
    ck_assert_int_ne(access(path, F_OK), 0); /* the bad file deleted */
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_BAD_FILES], 1);
    ifd_kvdisk_destroy(s1);
    ifd_kvdisk_destroy(d1);
    ifd_kvpool_destroy(p1);
    free(copies);
    free(bufs);
    rm_dir();
}
END_TEST

START_TEST(test_roundtrip_across_pools)
{
    make_dir();
    int32_t tok[6 * BS], a[6], b[6];
    tokens_init(tok, 6 * BS, 11);
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_t *d1 = make_disk(p1, 42, 1 << 20);
    publish_chain(p1, d1, tok, 6, 100, a, NULL);
    ck_assert_int_eq(ifd_kvpool_refs_of(p1, W, a[0]), 1); /* the pin went back */
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_WRITES], 6);
    ifd_kvdisk_offer(d1, a[0], -1, &(ifd_kvhash_t){0, 0}, 7, tok, NULL); /* written already */
    wait_written(d1);
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_WRITES], 6);
    ifd_kvdisk_destroy(d1);

    /* a restarted daemon: a new pool, the same directory */
    ifd_kvpool_t *p2 = make_pool();
    ifd_kvdisk_t *d2 = make_disk(p2, 42, 1 << 20);
    ifd_kvhash_t root = {0, 0};
    ck_assert_int_eq(ifd_kvdisk_probe(d2, &root, 7, tok, 6), 6);
    ck_assert_int_eq(ifd_kvdisk_probe(d2, &root, 8, tok, 6), 0); /* another salt */
    ck_assert_int_eq(load(p2, d2, tok, 6, b), 6);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(same(p1, a[i], p2, b[i]), "block %d differs", i);
    ifd_kvpool_tier_get(p2, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HIT_BLOCKS], 6);
    ck_assert_uint_eq(ctr[IFD_KVTIER_HIT_TOKENS], 6 * BS);
    ck_assert_uint_eq(ctr[IFD_KVTIER_BAD_FILES], 0);
    ck_assert_uint_eq(ctr[IFD_KVTIER_DISK_FILES], 6);
    /* other tokens at block 3: the chain ends there */
    int32_t tok2[6 * BS];
    memcpy(tok2, tok, sizeof tok);
    tok2[3 * BS + 1] ^= 1;
    ck_assert_int_eq(ifd_kvdisk_probe(d2, &root, 7, tok2, 6), 3);
    ifd_kvdisk_destroy(d2);
    ifd_kvpool_destroy(p1);
    ifd_kvpool_destroy(p2);
    rm_dir();
}
END_TEST

/* A model with a local-layer pool: every file holds the block and its
 * local twin (another head_dim here), both read back byte for byte into a
 * restarted daemon's two pools; a block offered without its twin is
 * dropped; a tier without the local pool refuses those files. */
START_TEST(test_local_twins_roundtrip)
{
    make_dir();
    enum { N = 5 };
    int32_t tok[N * BS], a[N], la[N], b[N], lb[N];
    tokens_init(tok, N * BS, 17);
    ifd_kvpool_params_t lp = ifd_kvpool_default_params();
    lp.n_layers = NL, lp.n_kv_heads = NH, lp.head_dim = 2 * HD, lp.dtype = IFD_KV_F32;
    lp.block_size = BS, lp.n_blocks = NB, lp.n_workers = 4, lp.fingerprint = 0xfeedULL;
    ifd_kvpool_t *p1 = make_pool(), *l1 = NULL, *p2 = make_pool(), *l2 = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&lp, &l1), 0);
    ck_assert_int_eq(ifd_kvpool_create(&lp, &l2), 0);
    ifd_kvdisk_params_t dp = ifd_kvdisk_default_params();
    dp.dir = dir, dp.max_bytes = 1 << 20, dp.fingerprint = 42, dp.worker = W, dp.local_pool = l1;
    ifd_kvdisk_t *d = NULL;
    ck_assert_int_eq(ifd_kvdisk_create(&dp, p1, &d), 0);
    ck_assert_int_eq(ifd_kvpool_alloc(p1, W, 0, N, a), 0);
    ck_assert_int_eq(ifd_kvpool_alloc(l1, W, 0, N, la), 0);
    ifd_kvhash_t h = {0, 0};
    for (int i = 0; i < N; i++) {
        fill(p1, a[i], 700 + (uint64_t)i);
        fill(l1, la[i], 800 + (uint64_t)i);
        ck_assert_int_ge(ifd_kvpool_publish(p1, W, a[i], i ? a[i - 1] : -1, 7, tok + i * BS, NULL),
                         0);
        ifd_kvdisk_offer(d, a[i], i < N - 1 ? la[i] : -1, &h, 7, tok + i * BS, &h);
    }
    wait_written(d);
    ck_assert_int_eq(ifd_kvpool_refs_of(l1, W, la[0]), 1); /* the twin's pin went back */
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_WRITES], N - 1);
    ck_assert_uint_eq(ctr[IFD_KVTIER_DROPPED], 1); /* the last: no twin */
    ifd_kvdisk_destroy(d);

    /* restarted: two new pools, the same directory */
    dp.local_pool = l2;
    ck_assert_int_eq(ifd_kvdisk_create(&dp, p2, &d), 0);
    ifd_kvhash_t root = {0, 0};
    ck_assert_int_eq(ifd_kvdisk_probe(d, &root, 7, tok, N), N - 1);
    ck_assert_int_eq(ifd_kvpool_alloc(p2, W, 0, N - 1, b), 0);
    ck_assert_int_eq(ifd_kvpool_alloc(l2, W, 0, N - 1, lb), 0);
    ifd_kvdisk_load_t *ld = NULL;
    ck_assert_int_eq(ifd_kvdisk_load_start(d, &root, 7, tok, N - 1, b, NULL, &ld), IFD_EINVAL);
    ck_assert_int_eq(ifd_kvdisk_load_start(d, &root, 7, tok, N - 1, b, lb, &ld), 0);
    ck_assert(ifd_kvdisk_load_wait(ld, 10000));
    ck_assert_int_eq(ifd_kvdisk_load_finish(ld, false), N - 1);
    for (int i = 0; i < N - 1; i++) {
        ck_assert_msg(same(p1, a[i], p2, b[i]), "block %d differs", i);
        ck_assert_msg(same(l1, la[i], l2, lb[i]), "local twin %d differs", i);
    }
    ifd_kvdisk_destroy(d);

    /* the same fingerprint without the local pool: the files are refused */
    d = make_disk(p2, 42, 1 << 20);
    int32_t c[N];
    ck_assert_int_eq(load(p2, d, tok, 1, c), 0);
    ifd_kvpool_tier_get(p2, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_BAD_FILES], 1);
    ifd_kvdisk_destroy(d);
    ifd_kvpool_destroy(p1);
    ifd_kvpool_destroy(l1);
    ifd_kvpool_destroy(p2);
    ifd_kvpool_destroy(l2);
    rm_dir();
}
END_TEST

/*
 * A staged tier with a local pool (a GPU worker of a Gemma 3-shaped model,
 * docs/kvpool.md "Host tier"): a block offered as its host copy — the
 * pool's layers' K then V, then its local twin's — makes the file the
 * pool-backed tier makes from the two pools' memory, byte for byte (the
 * twin's blocks of another size here), and a staged load of those files
 * gives back the same bytes, stopping at a corrupt file.
 */
START_TEST(test_staged_local_twins_same_files)
{
    make_dir();
    enum { N = 3 };
    int32_t tok[N * BS], a[N], la[N];
    tokens_init(tok, N * BS, 23);
    ifd_kvpool_params_t lp = ifd_kvpool_default_params();
    lp.n_layers = NL, lp.n_kv_heads = NH, lp.head_dim = 2 * HD, lp.dtype = IFD_KV_F32;
    lp.block_size = BS, lp.n_blocks = NB, lp.n_workers = 4, lp.fingerprint = 0xfeedULL;
    ifd_kvpool_t *p1 = make_pool(), *l1 = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&lp, &l1), 0);
    ifd_kvdisk_params_t dp = ifd_kvdisk_default_params();
    dp.dir = dir, dp.max_bytes = 1 << 20, dp.fingerprint = 44, dp.worker = W, dp.local_pool = l1;
    ifd_kvdisk_t *d = NULL, *s1 = NULL;
    ck_assert_int_eq(ifd_kvdisk_create(&dp, p1, &d), 0);
    dp.staged = true;
    ck_assert_int_eq(ifd_kvdisk_create(&dp, p1, &s1), 0);
    ck_assert(ifd_kvdisk_local_pool(s1) == l1);
    const size_t gdata = 2 * NL * block_bytes(p1), data = gdata + 2 * NL * block_bytes(l1);
    ck_assert_uint_eq(ifd_kvdisk_data_bytes(s1), data);
    ck_assert_uint_eq(ifd_kvdisk_data_bytes(d), data);
    ck_assert_int_eq(ifd_kvpool_alloc(p1, W, 0, N, a), 0);
    ck_assert_int_eq(ifd_kvpool_alloc(l1, W, 0, N, la), 0);
    uint8_t *copies = malloc(N * data), *bufs = malloc(N * data);
    ifd_kvhash_t h = {0, 0}, hashes[N];
    for (int i = 0; i < N; i++) {
        fill(p1, a[i], 900 + (uint64_t)i);
        fill(l1, la[i], 950 + (uint64_t)i);
        copy_out(p1, a[i], copies + i * data);
        copy_out(l1, la[i], copies + i * data + gdata);
        ck_assert_int_ge(ifd_kvpool_publish(p1, W, a[i], i ? a[i - 1] : -1, 7, tok + i * BS, NULL),
                         0);
        ifd_kvdisk_offer(d, a[i], la[i], &h, 7, tok + i * BS, &h);
        hashes[i] = h;
    }
    wait_written(d);
    char path[300], moved[320], cmd[700], name[64];
    snprintf(cmd, sizeof cmd, "mkdir %s/pooled && mv %s/*.kvb %s/pooled/", dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    h = (ifd_kvhash_t){0, 0};
    for (int i = 0; i < N; i++)
        ifd_kvdisk_offer_data(s1, copies + i * data, &h, 7, tok + i * BS, &h);
    wait_written(s1);
    for (int i = 0; i < N; i++) {
        path_of(s1, 44, &hashes[i], path, sizeof path);
        ifd_kvdisk_file_name(44, &hashes[i], name, sizeof name);
        snprintf(moved, sizeof moved, "%s/pooled/%s", dir, name);
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, moved);
        ck_assert_msg(system(cmd) == 0, "block %d: the staged file differs", i);
    }
    /* block 1's twin part corrupted (its last bytes are the local pool's) */
    FILE *f = NULL;
    path_of(s1, 44, &hashes[1], path, sizeof path);
    ck_assert_ptr_nonnull(f = fopen(path, "r+b"));
    fseek(f, -2, SEEK_END);
    int c = fgetc(f);
    fseek(f, -2, SEEK_END);
    fputc(0x21 ^ c, f);
    fclose(f);
    memset(bufs, 0xa5, N * data);
    void *bp[N] = {bufs, bufs + data, bufs + 2 * data};
    ifd_kvhash_t root = {0, 0};
    ifd_kvdisk_load_t *ld = NULL;
    ck_assert_int_eq(ifd_kvdisk_load_start_staged(s1, &root, 7, tok, N, bp, &ld), 0);
    ck_assert(ifd_kvdisk_load_wait(ld, 10000));
    ck_assert_int_eq(ifd_kvdisk_load_finish(ld, false), 1);
    ck_assert_int_eq(memcmp(bufs, copies, data), 0);
    ck_assert_int_ne(access(path, F_OK), 0); /* the bad file deleted */
    ifd_kvdisk_destroy(s1);
    ifd_kvdisk_destroy(d);
    ifd_kvpool_destroy(p1);
    ifd_kvpool_destroy(l1);
    free(copies);
    free(bufs);
    rm_dir();
}
END_TEST

typedef enum { F_TRUNCATE, F_DATA_BYTE, F_HEAD_BYTE, F_FOREIGN, F_DELETE, F_EMPTY } fault_t;

/* Damages block k's file of the chain (hashes) in one way. */
static void damage(fault_t f, const ifd_kvhash_t *h, const char *foreign)
{
    char path[512];
    path_of(NULL, 42, h, path, sizeof path);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    int fd;
    uint8_t c;
    switch (f) {
    case F_TRUNCATE:
        ck_assert_int_eq(truncate(path, st.st_size - 5), 0);
        break;
    case F_EMPTY:
        ck_assert_int_eq(truncate(path, 0), 0);
        break;
    case F_DATA_BYTE:
    case F_HEAD_BYTE: {
        off_t at = f == F_DATA_BYTE ? st.st_size - 17 : 20;
        fd = open(path, O_RDWR);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pread(fd, &c, 1, at), 1);
        c ^= 0x10;
        ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
        close(fd);
        break;
    }
    case F_FOREIGN:
        ck_assert_int_eq(rename(foreign, path), 0);
        break;
    case F_DELETE:
        ck_assert_int_eq(unlink(path), 0);
        break;
    }
}

START_TEST(test_faults_stop_the_read_and_delete)
{
    static const fault_t faults[] = {F_TRUNCATE, F_DATA_BYTE, F_HEAD_BYTE,
                                     F_FOREIGN,  F_DELETE,    F_EMPTY};
    for (size_t fi = 0; fi < sizeof faults / sizeof faults[0]; fi++) {
        make_dir();
        int32_t tok[5 * BS], a[5], b[5];
        ifd_kvhash_t h[5], hf[5];
        tokens_init(tok, 5 * BS, 21 + 2 * fi);
        ifd_kvpool_t *p1 = make_pool();
        /* the same chain under another fingerprint: a foreign file */
        ifd_kvdisk_t *df = make_disk(p1, 43, 1 << 20);
        int32_t c[5];
        publish_chain(p1, df, tok, 3, 900, c, hf);
        ifd_kvdisk_destroy(df);
        ifd_kvpool_unref(p1, W, c, 3); /* cached now: the next chain gets other blocks */
        ifd_kvdisk_t *d1 = make_disk(p1, 42, 1 << 20);
        publish_chain(p1, d1, tok, 5, 200, a, h); /* duplicates of c's: published all the same */
        ifd_kvdisk_destroy(d1);
        char foreign[512]; /* the very block, another model's */
        path_of(NULL, 43, &hf[2], foreign, sizeof foreign);
        damage(faults[fi], &h[2], foreign);
        ifd_kvpool_t *p2 = make_pool();
        d1 = make_disk(p2, 42, 1 << 20);
        int got = load(p2, d1, tok, 5, b);
        ck_assert_msg(got == 2, "fault %zu: read %d blocks, expected 2", fi, got);
        for (int i = 0; i < got; i++)
            ck_assert(same(p1, a[i], p2, b[i]));
        char path[512];
        path_of(NULL, 42, &h[2], path, sizeof path);
        ck_assert_msg(access(path, F_OK) != 0, "fault %zu: the bad file stayed", fi);
        uint64_t ctr[IFD_KVTIER_COUNT];
        ifd_kvpool_tier_get(p2, ctr);
        ck_assert_uint_eq(ctr[IFD_KVTIER_BAD_FILES], faults[fi] == F_DELETE ? 0 : 1);
        ifd_kvhash_t root = {0, 0};
        ck_assert_int_eq(ifd_kvdisk_probe(d1, &root, 7, tok, 5), 2);
        ifd_kvdisk_destroy(d1);
        ifd_kvpool_destroy(p1);
        ifd_kvpool_destroy(p2);
        rm_dir();
    }
}
END_TEST

/* Bad files warn at most once per bad_log_s: six bad files, five at once
 * and one after the interval, give two lines, the second counting the four
 * left out; the counter has all six. */
START_TEST(test_bad_file_warnings_rate_limited)
{
    make_dir();
    enum { N = 6 };
    int32_t tok[N][BS], a[N], b[N];
    ifd_kvhash_t h[N];
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_t *d1 = make_disk(p1, 42, 1 << 20);
    for (int i = 0; i < N; i++) { /* six one-block chains, every file then emptied */
        tokens_init(tok[i], BS, 300 + 2 * (uint64_t)i); /* seeds are made odd */
        publish_chain(p1, d1, tok[i], 1, 500 + (uint64_t)i, &a[i], &h[i]);
    }
    ifd_kvdisk_destroy(d1);
    for (int i = 0; i < N; i++)
        damage(F_EMPTY, &h[i], NULL);
    ifd_kvpool_t *p2 = make_pool();
    ifd_kvdisk_params_t dp = ifd_kvdisk_default_params();
    dp.dir = dir, dp.max_bytes = 1 << 20, dp.fingerprint = 42, dp.worker = W, dp.bad_log_s = 2;
    ck_assert_int_eq(ifd_kvdisk_create(&dp, p2, &d1), 0);
    char log_path[256];
    snprintf(log_path, sizeof log_path, "%s.log", dir);
    int saved = dup(2), fd = open(log_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(dup2(fd, 2), 2);
    ifd_log_set_level(IFD_LOG_WARN);
    for (int i = 0; i < N - 1; i++)
        ck_assert_int_eq(load(p2, d1, tok[i], 1, &b[i]), 0);
    usleep(2100 * 1000);
    ck_assert_int_eq(load(p2, d1, tok[N - 1], 1, &b[N - 1]), 0);
    ifd_log_set_level(IFD_LOG_ERROR);
    dup2(saved, 2);
    close(saved);
    char text[4096] = "";
    ck_assert_int_ge(pread(fd, text, sizeof text - 1, 0), 0);
    close(fd);
    unlink(log_path);
    int lines = 0;
    for (const char *at = text; (at = strstr(at, ": bad size")); at++)
        lines++;
    ck_assert_msg(lines == 2, "%d warnings:\n%s", lines, text);
    ck_assert_msg(strstr(text, "; 4 more bad files deleted"), "%s", text);
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(p2, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_BAD_FILES], N);
    ifd_kvdisk_destroy(d1);
    ifd_kvpool_destroy(p1);
    ifd_kvpool_destroy(p2);
    rm_dir();
}
END_TEST

START_TEST(test_size_bound_lru)
{
    make_dir();
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_t *d = make_disk(p1, 42, 1 << 20);
    int32_t tok[BS], a[1];
    ifd_kvhash_t h;
    tokens_init(tok, BS, 1);
    publish_chain(p1, d, tok, 1, 1, a, &h);
    char path[512];
    path_of(NULL, 42, &h, path, sizeof path);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    const uint64_t file = (uint64_t)st.st_size;
    ifd_kvdisk_destroy(d);
    ifd_kvpool_destroy(p1);
    rm_dir();

    make_dir();
    p1 = make_pool();
    d = make_disk(p1, 42, file * 4 + file / 2); /* room for 4 files */
    int32_t toks[8][BS], blk[8][1];
    ifd_kvhash_t hs[8];
    for (int i = 0; i < 8; i++) {
        tokens_init(toks[i], BS, 101 + 2 * (uint64_t)i); /* tokens_init sets the low bit */
        publish_chain(p1, d, toks[i], 1, (uint64_t)i, blk[i], &hs[i]);
        ifd_kvpool_unref(p1, W, blk[i], 1);
        if (i == 2) { /* read file 0 back: it becomes the most recently used */
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            int32_t b[1];
            ck_assert_int_eq(load(p1, d, toks[0], 1, b), 1);
            ck_assert(same(p1, blk[0][0], p1, b[0]));
            ifd_kvpool_unref(p1, W, b, 1);
        }
        if (i == 5) { /* 6 written, 2 collected: the oldest by access, 1 and 2, not 0 */
            path_of(NULL, 42, &hs[0], path, sizeof path);
            ck_assert_msg(access(path, F_OK) == 0, "the file read last was collected");
            path_of(NULL, 42, &hs[2], path, sizeof path);
            ck_assert_msg(access(path, F_OK) != 0, "an older file survived the read one");
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_le(ctr[IFD_KVTIER_DISK_BYTES], file * 4 + file / 2);
    ck_assert_uint_ge(ctr[IFD_KVTIER_EVICTED_FILES], 1);
    int present = 0;
    for (int i = 0; i < 8; i++) {
        path_of(NULL, 42, &hs[i], path, sizeof path);
        present += access(path, F_OK) == 0;
    }
    ck_assert_int_le(present, 4);
    path_of(NULL, 42, &hs[7], path, sizeof path);
    ck_assert_msg(access(path, F_OK) == 0, "the newest file was collected");
    path_of(NULL, 42, &hs[1], path, sizeof path);
    ck_assert_msg(access(path, F_OK) != 0, "an old unread file survived");
    ifd_kvdisk_destroy(d);
    ifd_kvpool_destroy(p1);
    rm_dir();
}
END_TEST

START_TEST(test_read_only_dir_turns_writing_off)
{
    if (geteuid() == 0) { /* a read-only mode does not stop root: nothing to see */
        fprintf(stderr, "test_read_only_dir_turns_writing_off: skipped (running as root)\n");
        return;
    }
    make_dir();
    ck_assert_int_eq(chmod(dir, 0500), 0);
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_t *d = make_disk(p1, 42, 1 << 20);
    int32_t tok[3 * BS], a[3];
    tokens_init(tok, 3 * BS, 5);
    publish_chain(p1, d, tok, 3, 1, a, NULL);
    for (int i = 0; i < 3; i++) /* every pin given back */
        ck_assert_int_eq(ifd_kvpool_refs_of(p1, W, a[i]), 1);
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_WRITES], 0);
    ck_assert_uint_eq(ctr[IFD_KVTIER_DROPPED], 3);
    ifd_kvhash_t root = {0, 0};
    ck_assert_int_eq(ifd_kvdisk_probe(d, &root, 7, tok, 3), 0);
    ifd_kvdisk_destroy(d);
    ifd_kvpool_destroy(p1);
    rm_dir();
}
END_TEST

/* As root (where file modes stop nothing): a full disk, then a read-only
 * one, made with a 64 KiB tmpfs mounted on the directory; skipped where
 * mount(2) is refused. Writing turns off, every pin goes back, reads of the
 * files already there go on. */
START_TEST(test_full_then_read_only_disk)
{
    make_dir();
    if (mount("none", dir, "tmpfs", 0, "size=64k") != 0) {
        fprintf(stderr, "test_full_then_read_only_disk: skipped (mount: %s)\n", strerror(errno));
        rm_dir();
        return;
    }
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_t *d = make_disk(p1, 42, 1 << 20);
    int32_t tok[4 * BS], a[4], b[4];
    tokens_init(tok, 4 * BS, 77);
    publish_chain(p1, d, tok, 2, 1, a, NULL); /* two files fit */
    char filler[512];
    snprintf(filler, sizeof filler, "%s/filler", dir);
    FILE *f = fopen(filler, "w");
    ck_assert_ptr_nonnull(f);
    static char zero[4096];
    while (fwrite(zero, 1, sizeof zero, f) == sizeof zero && fflush(f) == 0)
        ;
    fclose(f);
    ifd_kvhash_t h = {0, 0};
    for (int i = 0; i < 2; i++)
        h = ifd_kvpool_hash_block(&h, 7, tok + i * BS, BS);
    ck_assert_int_eq(ifd_kvpool_alloc(p1, W, 0, 2, a + 2), 0);
    for (int i = 2; i < 4; i++) { /* the disk is full now */
        ck_assert_int_ge(ifd_kvpool_publish(p1, W, a[i], a[i - 1], 7, tok + i * BS, NULL), 0);
        ifd_kvdisk_offer(d, a[i], -1, &h, 7, tok + i * BS, &h);
    }
    wait_written(d);
    uint64_t ctr[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_WRITES], 2);
    ck_assert_uint_eq(ctr[IFD_KVTIER_DROPPED], 2);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ifd_kvpool_refs_of(p1, W, a[i]), 1);
    ifd_kvdisk_destroy(d);
    ck_assert_int_eq(unlink(filler), 0);
    ck_assert_int_eq(mount("none", dir, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=64k"), 0);
    d = make_disk(p1, 42, 1 << 20); /* a read-only directory still serves reads */
    ck_assert_int_eq(load(p1, d, tok, 4, b), 2);
    for (int i = 0; i < 2; i++)
        ck_assert(same(p1, a[i], p1, b[i]));
    ifd_kvpool_unref(p1, W, b, 4);
    ifd_kvdisk_offer(d, a[2], -1, &(ifd_kvhash_t){0, 0}, 7, tok + 2 * BS, NULL);
    wait_written(d);
    ifd_kvpool_tier_get(p1, ctr);
    ck_assert_uint_eq(ctr[IFD_KVTIER_WRITES], 2);
    ck_assert_uint_eq(ctr[IFD_KVTIER_DROPPED], 3);
    ck_assert_int_eq(ifd_kvpool_refs_of(p1, W, a[2]), 1);
    ifd_kvdisk_destroy(d);
    ifd_kvpool_destroy(p1);
    ck_assert_int_eq(umount(dir), 0);
    rm_dir();
}
END_TEST

START_TEST(test_missing_parent_dir_fails_create)
{
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_params_t p = ifd_kvdisk_default_params();
    p.dir = "/nonexistent-inferd-dir/kv", p.max_bytes = 1 << 20, p.fingerprint = 1, p.worker = W;
    ifd_kvdisk_t *d = NULL;
    ck_assert_int_lt(ifd_kvdisk_create(&p, p1, &d), 0);
    ck_assert_ptr_null(d);
    p.dir = "";
    ck_assert_int_eq(ifd_kvdisk_create(&p, p1, &d), IFD_EINVAL);
    ifd_kvpool_destroy(p1);
}
END_TEST

START_TEST(test_load_cancelled_early)
{
    make_dir();
    ifd_kvpool_t *p1 = make_pool();
    ifd_kvdisk_t *d = make_disk(p1, 42, 1 << 20);
    int32_t tok[8 * BS], a[8];
    tokens_init(tok, 8 * BS, 9);
    publish_chain(p1, d, tok, 8, 3, a, NULL);
    ifd_kvhash_t root = {0, 0};
    int32_t b[8];
    ck_assert_int_eq(ifd_kvpool_alloc(p1, W, 0, 8, b), 0);
    for (int round = 0; round < 20; round++) {
        ifd_kvdisk_load_t *l1 = NULL, *l2 = NULL;
        ck_assert_int_eq(ifd_kvdisk_load_start(d, &root, 7, tok, 8, b, NULL, &l1), 0);
        ck_assert_int_eq(ifd_kvdisk_load_start(d, &root, 7, tok, 8, b, NULL, &l2), 0);
        int n2 = ifd_kvdisk_load_finish(l2, true);
        int n1 = ifd_kvdisk_load_finish(l1, true);
        ck_assert(n1 >= 0 && n1 <= 8 && n2 >= 0 && n2 <= 8);
        for (int i = 0; i < (n1 < n2 ? n1 : n2); i++) /* both wrote the same bytes */
            ck_assert(same(p1, a[i], p1, b[i]));
    }
    ifd_kvdisk_destroy(d);
    ifd_kvpool_destroy(p1);
    rm_dir();
}
END_TEST

int main(void)
{
    ifd_log_set_level(getenv("KVD_DEBUG") ? IFD_LOG_DEBUG : IFD_LOG_ERROR);
    Suite *s = suite_create("kvdisk");
    TCase *tc = tcase_create("kvdisk");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip_across_pools);
    tcase_add_test(tc, test_staged_same_files);
    tcase_add_test(tc, test_local_twins_roundtrip);
    tcase_add_test(tc, test_staged_local_twins_same_files);
    tcase_add_test(tc, test_faults_stop_the_read_and_delete);
    tcase_add_test(tc, test_bad_file_warnings_rate_limited);
    tcase_add_test(tc, test_size_bound_lru);
    tcase_add_test(tc, test_read_only_dir_turns_writing_off);
    tcase_add_test(tc, test_full_then_read_only_disk);
    tcase_add_test(tc, test_missing_parent_dir_fails_create);
    tcase_add_test(tc, test_load_cancelled_early);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
