/*
 * kvpool_check.c — the KV pool's invariant check, stats, device (CUDA)
 * segment binding, cache invalidation and test hooks: the parts of
 * common/kvpool/kvpool.h that read the whole pool or deal with providers. The
 * allocator, the prefix cache and crash repair are in kvpool.c; the layout
 * both share is kvpool_impl.h.
 */
#include "kvpool_impl.h"

#include "error.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Drops device dev's cache and marks its segment unbound; lock held. */
static int kv_invalidate_locked(ifd_kvpool_t *p, int dev)
{
    int n = 0;
    int32_t first = dev * p->n_blocks;
    for (int32_t b = first; b < first + p->n_blocks; b++) {
        kv_rec_t *r = &p->rec[b];
        if (r->indexed) {
            bool cached = r->state == KV_CACHED;
            if (cached)
                ifd__kv_lru_remove(p, b);
            ifd__kv_unindex(p, b);
            KV_STORE(&r->published, 0);
            r->gen++;
            if (cached) {
                ifd__kv_free_push(p, b);
                n++;
            }
        } else if (r->published) {
            KV_STORE(&r->published, 0);
            r->gen++;
        }
    }
    if (p->h->dev[dev].kind != IFD_KVSEG_HOST) {
        p->h->dev[dev].bound = 0;
        p->h->dev[dev].seal = 0;
        memset(p->h->dev[dev].ipc_handle, 0, sizeof p->h->dev[dev].ipc_handle);
    }
    return n;
}

int ifd_kvpool_invalidate_device(ifd_kvpool_t *p, int dev)
{
    if (dev < 0 || dev >= p->n_devices)
        return IFD_EINVAL;
    ifd__kv_lock(p);
    int n = kv_invalidate_locked(p, dev);
    ifd__kv_unlock(p);
    return n;
}

#define KV_FAIL(...)                                                                               \
    do {                                                                                           \
        if (err && errlen)                                                                         \
            snprintf(err, errlen, __VA_ARGS__);                                                    \
        rc = IFD_EINTERNAL;                                                                        \
        goto out;                                                                                  \
    } while (0)

int ifd_kvpool_check(ifd_kvpool_t *p, char *err, size_t errlen)
{
    int rc = 0;
    int64_t *wsum = calloc((size_t)p->n_workers, sizeof *wsum);
    uint8_t *seen = calloc((size_t)p->n_total, 1);
    if (!wsum || !seen) {
        free(wsum);
        free(seen);
        return IFD_ENOMEM;
    }
    if (err && errlen)
        err[0] = '\0';
    ifd__kv_lock(p);
    kv_hdr_t *h = p->h;
    /* Per block: refcount = ledger sum, state agrees with truth. */
    for (int32_t b = 0; b < p->n_total; b++) {
        kv_rec_t *r = &p->rec[b];
        int64_t sum = 0;
        for (int w = 0; w < p->n_workers; w++) {
            sum += *kv_ledger(p, w, b);
            wsum[w] += *kv_ledger(p, w, b);
        }
        if (sum != r->refcount)
            KV_FAIL("block %d: refcount %d, ledger sum %lld", b, r->refcount, (long long)sum);
        int want = sum > 0 ? KV_IN_USE : r->indexed ? KV_CACHED : KV_FREE;
        if (r->state != want)
            KV_FAIL("block %d: state %d, expected %d", b, r->state, want);
        if (r->indexed && !r->published)
            KV_FAIL("block %d: indexed but not published", b);
        if (r->published) {
            ifd_kvhash_t hh = ifd__kv_hash(p, &r->parent, r->salt, kv_tokens(p, b));
            if (hh.lo != r->hash.lo || hh.hi != r->hash.hi)
                KV_FAIL("block %d: stored hash does not match its tokens", b);
        }
    }
    for (int w = 0; w < p->n_workers; w++)
        if (wsum[w] != p->workers[w].refs)
            KV_FAIL("worker %d: refs %lld, ledger %lld", w, (long long)p->workers[w].refs,
                    (long long)wsum[w]);
    /* Lists per device. */
    for (int dv = 0; dv < p->n_devices; dv++) {
        kv_dev_t *d = &h->dev[dv];
        int32_t lo = dv * p->n_blocks, hi = lo + p->n_blocks;
        int32_t n_free = 0, n_cached = 0, n_use = 0;
        for (int32_t b = d->free_head; b != KV_NONE; b = p->rec[b].next) {
            if (b < lo || b >= hi || seen[b] || p->rec[b].state != KV_FREE)
                KV_FAIL("device %d: free list holds block %d wrongly", dv, b);
            seen[b] = 1;
            n_free++;
        }
        int32_t prev = KV_NONE;
        uint64_t last_tick = 0;
        for (int32_t b = d->lru_head; b != KV_NONE; b = p->rec[b].next) {
            if (b < lo || b >= hi || seen[b] || p->rec[b].state != KV_CACHED ||
                p->rec[b].prev != prev)
                KV_FAIL("device %d: LRU holds block %d wrongly", dv, b);
            if (p->rec[b].tick < last_tick)
                KV_FAIL("device %d: LRU out of order at block %d", dv, b);
            last_tick = p->rec[b].tick;
            seen[b] = 1;
            prev = b;
            n_cached++;
        }
        if (prev != d->lru_tail)
            KV_FAIL("device %d: LRU tail %d, walked to %d", dv, d->lru_tail, prev);
        for (int32_t b = lo; b < hi; b++)
            if (p->rec[b].state == KV_IN_USE)
                n_use++;
        if (n_free != d->n_free || n_cached != d->n_cached || n_use != d->n_in_use)
            KV_FAIL("device %d: counts free %d/%d cached %d/%d in use %d/%d", dv, d->n_free, n_free,
                    d->n_cached, n_cached, d->n_in_use, n_use);
        if (n_free + n_cached + n_use != p->n_blocks)
            KV_FAIL("device %d: free %d + cached %d + in use %d != %d blocks", dv, n_free, n_cached,
                    n_use, p->n_blocks);
    }
    /* Index: every chained block is indexed, in its bucket, once; every
     * indexed block is chained. */
    memset(seen, 0, (size_t)p->n_total);
    int64_t chained = 0, indexed = 0;
    for (int32_t i = 0; i < h->n_buckets; i++) {
        for (int32_t b = p->buckets[i]; b != KV_NONE; b = p->rec[b].hnext) {
            if (b < 0 || b >= p->n_total || seen[b] || !p->rec[b].indexed ||
                (p->rec[b].hash.lo & (uint64_t)(h->n_buckets - 1)) != (uint64_t)i)
                KV_FAIL("bucket %d holds block %d wrongly", i, b);
            seen[b] = 1;
            chained++;
        }
    }
    for (int32_t b = 0; b < p->n_total; b++)
        indexed += p->rec[b].indexed;
    if (indexed != chained)
        KV_FAIL("%lld blocks indexed, %lld in the buckets", (long long)indexed, (long long)chained);
out:
    ifd__kv_unlock(p);
    free(wsum);
    free(seen);
    return rc;
}

/* ---- stats ------------------------------------------------------------------------------ */

static void kv_counters(const kv_hdr_t *h, ifd_kvpool_stats_t *s)
{
    s->allocs = h->ctr[KV_C_ALLOCS];
    s->alloc_failures = h->ctr[KV_C_ALLOC_FAILURES];
    s->lookups = h->ctr[KV_C_LOOKUPS];
    s->hit_blocks = h->ctr[KV_C_HIT_BLOCKS];
    s->miss_blocks = h->ctr[KV_C_MISS_BLOCKS];
    s->evictions = h->ctr[KV_C_EVICTIONS];
    s->cows = h->ctr[KV_C_COWS];
    s->reclaims = h->ctr[KV_C_RECLAIMS];
    s->reclaimed_refs = h->ctr[KV_C_RECLAIMED_REFS];
    s->repairs = h->ctr[KV_C_REPAIRS];
    s->rebuilds = h->ctr[KV_C_REBUILDS];
}

int ifd_kvpool_stats(ifd_kvpool_t *p, ifd_kvpool_stats_t *s)
{
    memset(s, 0, sizeof *s);
    ifd__kv_lock(p);
    for (int d = 0; d < p->n_devices; d++) {
        s->free += p->h->dev[d].n_free;
        s->cached += p->h->dev[d].n_cached;
        s->in_use += p->h->dev[d].n_in_use;
    }
    s->total = p->n_total;
    kv_counters(p->h, s);
    ifd__kv_unlock(p);
    return 0;
}

int ifd_kvpool_device_stats(ifd_kvpool_t *p, int dev, ifd_kvpool_stats_t *s)
{
    if (dev < 0 || dev >= p->n_devices)
        return IFD_EINVAL;
    memset(s, 0, sizeof *s);
    ifd__kv_lock(p);
    s->free = p->h->dev[dev].n_free;
    s->cached = p->h->dev[dev].n_cached;
    s->in_use = p->h->dev[dev].n_in_use;
    s->total = p->n_blocks;
    kv_counters(p->h, s);
    ifd__kv_unlock(p);
    return 0;
}

/* ---- device segments --------------------------------------------------------------------- */

/* The seal after a device segment's data: what says "this is the memory
 * the metadata describes". */
#define KV_SEAL_MAGIC 0x4c4145535658464bULL /* "KFXVSEAL" */
#define KV_LOST       1 /* internal: the recorded segment's memory is gone */
#define KV_NEW        2 /* internal: make a segment */

typedef struct {
    uint64_t magic;
    uint64_t token;
    uint64_t segment_bytes;
    uint64_t not_token;
    uint8_t pad[KV_SEAL_BYTES - 32];
} kv_seal_t;

static uint64_t kv_seal_token(void)
{
    uint64_t t = 0;
    if (getrandom(&t, sizeof t, 0) != (ssize_t)sizeof t) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() << 32 ^
            (uint64_t)ts.tv_sec;
    }
    return t | 1; /* 0 is "no seal" */
}

static kv_seal_t kv_seal_of(const ifd_kvpool_t *p, uint64_t token)
{
    kv_seal_t s;
    memset(&s, 0, sizeof s);
    s.magic = KV_SEAL_MAGIC;
    s.token = token;
    s.segment_bytes = p->segment_bytes;
    s.not_token = ~token;
    return s;
}

/* Imports device dev's recorded segment and checks its seal. 0, or
 * KV_LOST when the memory is gone (logged: the caller rebuilds), or
 * another provider error. Lock held. */
static int kv_import_checked(ifd_kvpool_t *p, int dev, const ifd_kvseg_provider_t *prov,
                             ifd_kvseg_export_t *exp, void **base, void **priv)
{
    kv_dev_t *d = &p->h->dev[dev];
    int rc = prov->import(prov->ctx, dev, exp, base, priv);
    if (rc) {
        if (d->kind == IFD_KVSEG_CUDA_IPC)
            IFD_WARN("kvpool: device %d: the IPC segment cannot be opened (%s): its memory died "
                     "with the process that made it; rebuilding the device's pool",
                     dev, ifd_strerror(rc));
        else
            IFD_WARN("kvpool: device %d: the VMM segment's fd does not import (%s): its memory "
                     "is out of reach; rebuilding the device's pool",
                     dev, ifd_strerror(rc));
        return KV_LOST;
    }
    kv_seal_t want = kv_seal_of(p, d->seal), got;
    rc = prov->read(prov->ctx, &got, (const char *)*base + p->segment_bytes, sizeof got);
    if (rc == 0 && memcmp(&want, &got, sizeof got) == 0)
        return 0;
    prov->release(prov->ctx, *base, p->segment_bytes + KV_SEAL_BYTES, *priv);
    *base = *priv = NULL;
    if (rc)
        return rc;
    IFD_WARN("kvpool: device %d: the %s segment's seal does not match (memory freed or replaced "
             "by the driver): its cached blocks are lost; rebuilding the device's pool",
             dev, d->kind == IFD_KVSEG_CUDA_VMM ? "VMM" : "IPC");
    return KV_LOST;
}

int ifd_kvpool_bind_segment(ifd_kvpool_t *p, int dev, const ifd_kvseg_provider_t *prov)
{
    if (dev < 0 || dev >= p->n_devices || !prov || !prov->create || !prov->import ||
        !prov->release || !prov->copy || !prov->write || !prov->read)
        return IFD_EINVAL;
    if (p->h->dev[dev].kind == IFD_KVSEG_HOST) {
        IFD_ERROR("kvpool: device %d is a host segment; nothing to bind", dev);
        return IFD_EINVAL;
    }
    if (p->data[dev])
        return IFD_EEXIST;
    int rc;
    void *base = NULL, *priv = NULL;
    const uint64_t bytes = p->segment_bytes + KV_SEAL_BYTES;
    ifd_kvseg_export_t exp;
    memset(&exp, 0, sizeof exp);
    exp.kind = (ifd_kvseg_kind_t)p->h->dev[dev].kind;
    exp.fd = -1;
    exp.bytes = bytes;
    /* Under the lock so that two workers never both create device dev. */
    ifd__kv_lock(p);
    kv_dev_t *d = &p->h->dev[dev];
    if (d->bound && (d->kind == IFD_KVSEG_CUDA_IPC || p->data_fd[dev] >= 0)) {
        exp.fd = p->data_fd[dev];
        memcpy(exp.handle, d->ipc_handle, sizeof exp.handle);
        rc = kv_import_checked(p, dev, prov, &exp, &base, &priv);
    } else if (d->bound) {
        /* Its maker died before the router took the fd: nobody can reach it. */
        IFD_WARN("kvpool: device %d's VMM segment exists but no fd for it reached this process "
                 "(its maker died before handing it over?); rebuilding the device's pool",
                 dev);
        rc = KV_LOST;
    } else {
        rc = KV_NEW; /* nothing yet: make it */
    }
    if (rc == KV_LOST) {
        int n = kv_invalidate_locked(p, dev);
        p->h->ctr[KV_C_REBUILDS]++;
        IFD_WARN("kvpool: device %d: dropped %d cached blocks of the lost segment", dev, n);
        if (p->data_fd[dev] >= 0) {
            close(p->data_fd[dev]);
            p->data_fd[dev] = -1;
        }
        rc = KV_NEW;
    }
    if (rc == KV_NEW) {
        memset(&exp, 0, sizeof exp);
        exp.kind = (ifd_kvseg_kind_t)d->kind; /* what the pool asks for */
        exp.fd = -1;
        rc = prov->create(prov->ctx, dev, bytes, &exp, &base, &priv);
        uint64_t token = kv_seal_token();
        kv_seal_t seal = kv_seal_of(p, token);
        if (rc == 0 &&
            (rc = prov->write(prov->ctx, (char *)base + p->segment_bytes, &seal, sizeof seal))) {
            prov->release(prov->ctx, base, bytes, priv);
            if (exp.fd >= 0)
                close(exp.fd);
        }
        if (rc == 0) {
            /* The provider may have fallen back from VMM to IPC. */
            d->kind = exp.kind;
            d->seal = token;
            memcpy(d->ipc_handle, exp.handle, sizeof d->ipc_handle);
            if (exp.fd >= 0) {
                if (p->data_fd[dev] >= 0)
                    close(p->data_fd[dev]);
                p->data_fd[dev] = exp.fd;
            }
            KV_STORE(&d->bound, 1);
        }
    }
    ifd__kv_unlock(p);
    if (rc == 0) {
        p->data[dev] = base;
        p->prov[dev] = prov;
        p->prov_priv[dev] = priv;
    }
    return rc;
}

int ifd_kvpool_adopt_fd(ifd_kvpool_t *p, int dev, int fd)
{
    if (dev < 0 || dev >= p->n_devices || fd < 0 || p->h->dev[dev].kind == IFD_KVSEG_HOST)
        return IFD_EINVAL;
    if (p->data_fd[dev] >= 0)
        close(p->data_fd[dev]);
    p->data_fd[dev] = fd;
    return 0;
}

/* ---- test hooks ---------------------------------------------------------------------------- */

void ifd__kvpool_set_crash_point(ifd_kvpool_t *p, long n)
{
    p->crash_countdown = n;
}

#ifdef IFD_TEST_HOOKS
void ifd__kv_test_hold(ifd_kvpool_t *p)
{
    /* One process wins the rename; it reports its pid (written, then renamed
     * into place so the reader never sees half of it) and stops holding the
     * lock until it is killed. Others find no file and go on. */
    char held[4096], tmp[4200], pidf[4200];
    snprintf(held, sizeof held, "%s.held", p->hold_path);
    if (rename(p->hold_path, held) != 0)
        return;
    snprintf(tmp, sizeof tmp, "%s.pid.tmp", p->hold_path);
    snprintf(pidf, sizeof pidf, "%s.pid", p->hold_path);
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
        rename(tmp, pidf);
    }
    IFD_WARN("kvpool: test hook: holding the pool lock until killed (pid %d)", (int)getpid());
    for (;;)
        pause();
}
#endif

void ifd__kvpool_lock(ifd_kvpool_t *p)
{
    ifd__kv_lock(p);
}

void ifd__kvpool_scramble(ifd_kvpool_t *p)
{
    /* Breaks every derived structure the way a torn update could. */
    for (int d = 0; d < p->n_devices; d++) {
        p->h->dev[d].free_head = p->h->dev[d].lru_head = 0;
        p->h->dev[d].n_free = -5;
        p->h->dev[d].n_cached = 12345;
    }
    for (int32_t b = 0; b < p->n_total; b++) {
        p->rec[b].refcount = 7;
        p->rec[b].next = (b + 1) % p->n_total;
        p->rec[b].state = KV_CACHED;
    }
    for (int32_t i = 0; i < p->h->n_buckets; i++)
        p->buckets[i] = KV_NONE;
}

void ifd__kvpool_weaken_hash(ifd_kvpool_t *p, int bits)
{
    p->h->hash_bits = bits;
}

uint64_t ifd__kvpool_repairs(ifd_kvpool_t *p)
{
    return __atomic_load_n(&p->h->ctr[KV_C_REPAIRS], __ATOMIC_RELAXED);
}

/* ---- lower tiers' counters ------------------------------------------------------------ */

void ifd_kvpool_tier_add(ifd_kvpool_t *p, ifd_kvtier_ctr_t c, uint64_t v)
{
    if ((unsigned)c < IFD_KVTIER_COUNT)
        __atomic_fetch_add(&p->h->tier[c], v, __ATOMIC_RELAXED);
}

void ifd_kvpool_tier_set(ifd_kvpool_t *p, ifd_kvtier_ctr_t c, uint64_t v)
{
    if ((unsigned)c < IFD_KVTIER_COUNT)
        __atomic_store_n(&p->h->tier[c], v, __ATOMIC_RELAXED);
}

void ifd_kvpool_tier_get(const ifd_kvpool_t *p, uint64_t out[IFD_KVTIER_COUNT])
{
    for (int c = 0; c < IFD_KVTIER_COUNT; c++)
        out[c] = __atomic_load_n(&p->h->tier[c], __ATOMIC_RELAXED);
}
