/*
 * kvpool.c — the shared-memory paged KV block pool (see kvpool.h and
 * docs/kvpool.md).
 *
 * Metadata segment layout (offsets from its start, each 64-byte aligned):
 *
 *   kv_hdr_t                       magic, geometry, lock, per-device lists, counters
 *   kv_rec_t   rec[n_total]        per-block record
 *   int32_t    tokens[n_total][block_size]   published token ids
 *   uint32_t   ledger[n_workers][n_total]    references per worker and block
 *   int32_t    buckets[n_buckets]            prefix index heads (chained via rec.hnext)
 *   kv_worker_t workers[n_workers]
 *
 * Truth and derived state. Only three things are "truth": the ledger counts,
 * a block's published content (tokens, salt, parent, hash, guarded by the
 * `published` flag which is set last and cleared first) and its `indexed`
 * flag (set only when published). Everything else — refcount, state, the
 * free lists, the LRUs, the bucket chains, the per-device counts and the
 * per-worker totals — is derived and is rebuilt by kv_repair() when a locker
 * gets EOWNERDEAD. Each truth change is one aligned store, so a process killed
 * anywhere leaves a truth state that is valid by itself: a block is held iff
 * its ledger sum is > 0, else cached iff indexed, else free. No block can be
 * lost (every block is in exactly one of the three) or owned twice (an
 * allocation makes the ledger entry in one store after taking the block out
 * of the index).
 *
 * Invariants outside the lock: refcount == Σ ledger; state FREE ⇔ on its
 * device's free list; CACHED ⇔ on its device's LRU ⇔ (refcount == 0 and
 * indexed); indexed ⇒ published and in the bucket of hash.lo.
 *
 * Keyed entries (ifd_kvpool_publish_keyed) share the index with chained
 * ones: their parent_id holds the caller's key (another pool's block
 * identity) and their parent hash is {key, KV_KEYED_TAG}, so the stored hash
 * still equals H(parent, salt, tokens). The `keyed` flag, written with the
 * rest of the content, keeps the two kinds apart: a key is never compared
 * with one of this pool's identities.
 */
#include "kvpool_impl.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#define KV_HUGEPAGE (2u << 20)

/* The second word of a keyed entry's parent hash ("KEYED_KV"): a chained
 * entry's parent hash is another chain hash, so the two rarely share a bucket
 * (and never match: see kv_index_find). */
#define KV_KEYED_TAG 0x564b5f444559454bULL

/* ---- geometry ------------------------------------------------------------------ */

static const char *const kv_dtype_names[] = {"f32",  "f16",  "bf16",
                                             "q8_0", "q4_0", "fp8"}; /* index = dtype */
enum { KV_N_DTYPES = sizeof kv_dtype_names / sizeof kv_dtype_names[0], KV_QK = 32 };

uint64_t ifd_kvpool_row_bytes(ifd_kv_dtype_t t, int head_dim)
{
    if (head_dim <= 0)
        return 0;
    const uint64_t hd = (uint64_t)head_dim;
    switch (t) {
    case IFD_KV_F32:
        return hd * 4;
    case IFD_KV_F16:
    case IFD_KV_BF16:
        return hd * 2;
    case IFD_KV_Q8_0:
    case IFD_KV_Q4_0: /* quants, then one f16 scale per 32 values */
        return hd % KV_QK ? 0 : (t == IFD_KV_Q8_0 ? hd : hd / 2) + hd / KV_QK * 2;
    case IFD_KV_FP8: /* e4m3 codes, then one f32 scale */
        return hd % KV_QK ? 0 : hd + 4;
    default:
        return 0;
    }
}

bool ifd_kv_dtype_quantized(ifd_kv_dtype_t t)
{
    return t == IFD_KV_Q8_0 || t == IFD_KV_Q4_0 || t == IFD_KV_FP8;
}

bool ifd_kv_dtype_gpu(ifd_kv_dtype_t t)
{
    return t == IFD_KV_F16 || t == IFD_KV_BF16 || t == IFD_KV_Q8_0 || t == IFD_KV_FP8;
}

const char *ifd_kv_dtype_name(ifd_kv_dtype_t t)
{
    return (unsigned)t < KV_N_DTYPES ? kv_dtype_names[t] : "?";
}

int ifd_kv_dtype_parse(const char *name, ifd_kv_dtype_t *out)
{
    for (int i = 0; i < KV_N_DTYPES; i++) {
        if (name && strcmp(name, kv_dtype_names[i]) == 0) {
            *out = (ifd_kv_dtype_t)i;
            return 0;
        }
    }
    return IFD_EINVAL;
}

ifd_kvpool_params_t ifd_kvpool_default_params(void)
{
    ifd_kvpool_params_t p;
    memset(&p, 0, sizeof p);
    p.dtype = IFD_KV_F16;
    p.block_size = IFD_KVPOOL_DEFAULT_BLOCK_SIZE;
    p.n_devices = 1;
    p.n_workers = IFD_KVPOOL_DEFAULT_WORKERS;
    for (int d = 0; d < IFD_KVPOOL_MAX_DEVICES; d++)
        p.kind[d] = IFD_KVSEG_HOST;
    return p;
}

uint64_t ifd_kvpool_block_bytes(const ifd_kvpool_params_t *p)
{
    const uint64_t rb = ifd_kvpool_row_bytes(p->dtype, p->head_dim);
    if (rb == 0 || p->n_kv_heads <= 0 || p->block_size <= 0)
        return 0;
    return (uint64_t)p->n_kv_heads * (uint64_t)p->block_size * rb;
}

static uint64_t kv_align64(uint64_t x)
{
    return (x + 63) & ~(uint64_t)63;
}

typedef struct {
    uint64_t off_rec, off_tokens, off_ledger, off_buckets, off_workers, total;
    int32_t n_buckets;
} kv_layout_t;

/* Metadata layout for a geometry; IFD_EOVERFLOW when it does not fit. */
static int kv_layout(int64_t n_total, int block_size, int n_workers, kv_layout_t *L)
{
    uint64_t nb = 64;
    while (nb < (uint64_t)n_total)
        nb <<= 1;
    if (nb > (1u << 30))
        return IFD_EOVERFLOW;
    L->n_buckets = (int32_t)nb;
    uint64_t off = kv_align64(sizeof(kv_hdr_t));
    L->off_rec = off;
    off = kv_align64(off + (uint64_t)n_total * sizeof(kv_rec_t));
    L->off_tokens = off;
    off = kv_align64(off + (uint64_t)n_total * (uint64_t)block_size * sizeof(int32_t));
    L->off_ledger = off;
    off = kv_align64(off + (uint64_t)n_workers * (uint64_t)n_total * sizeof(uint32_t));
    L->off_buckets = off;
    off = kv_align64(off + nb * sizeof(int32_t));
    L->off_workers = off;
    off = kv_align64(off + (uint64_t)n_workers * sizeof(kv_worker_t));
    L->total = off;
    return 0;
}

static int kv_validate_params(const ifd_kvpool_params_t *p, int64_t *n_blocks_out)
{
    if (p->n_layers <= 0 || p->n_layers > 4096 || p->n_kv_heads <= 0 || p->n_kv_heads > 4096 ||
        p->head_dim <= 0 || p->head_dim > 65536 ||
        ifd_kvpool_row_bytes(p->dtype, p->head_dim) == 0 || p->block_size <= 0 ||
        p->block_size > IFD_KVPOOL_MAX_BLOCK_SIZE || p->n_devices <= 0 ||
        p->n_devices > IFD_KVPOOL_MAX_DEVICES || p->n_workers <= 0 ||
        p->n_workers > IFD_KVPOOL_MAX_WORKERS) {
        IFD_ERROR("kvpool: bad geometry (layers %d, kv heads %d, head dim %d, dtype %d%s, "
                  "block size %d, devices %d, workers %d)",
                  p->n_layers, p->n_kv_heads, p->head_dim, (int)p->dtype,
                  ifd_kv_dtype_quantized(p->dtype) && p->head_dim % KV_QK
                      ? ": q8_0/q4_0/fp8 need a head dim that is a multiple of 32"
                      : "",
                  p->block_size, p->n_devices, p->n_workers);
        return IFD_EINVAL;
    }
    for (int d = 0; d < p->n_devices; d++) {
        if (p->kind[d] != IFD_KVSEG_HOST && p->kind[d] != IFD_KVSEG_CUDA_VMM &&
            p->kind[d] != IFD_KVSEG_CUDA_IPC) {
            IFD_ERROR("kvpool: device %d: bad segment kind %d", d, (int)p->kind[d]);
            return IFD_EINVAL;
        }
    }
    uint64_t bb = ifd_kvpool_block_bytes(p);
    uint64_t per_block = bb * 2 * (uint64_t)p->n_layers; /* all layers, K and V */
    int64_t nb = p->n_blocks;
    if (nb == 0 && per_block > 0)
        nb = (int64_t)(p->bytes_budget / per_block);
    if (nb <= 0) {
        IFD_ERROR("kvpool: no blocks (n_blocks %lld, budget %llu bytes, %llu bytes per block)",
                  (long long)p->n_blocks, (unsigned long long)p->bytes_budget,
                  (unsigned long long)per_block);
        return IFD_EINVAL;
    }
    if (nb * (int64_t)p->n_devices >= INT32_MAX / 2) {
        IFD_ERROR("kvpool: %lld blocks per device is too many", (long long)nb);
        return IFD_EOVERFLOW;
    }
    if ((uint64_t)nb > UINT64_MAX / per_block) {
        IFD_ERROR("kvpool: segment size overflows");
        return IFD_EOVERFLOW;
    }
    *n_blocks_out = nb;
    return 0;
}

/* ---- per-process handle ------------------------------------------------------------ */

static void kv_handle_fill(ifd_kvpool_t *p)
{
    kv_hdr_t *h = p->h;
    char *base = (char *)h;
    p->rec = (kv_rec_t *)(base + h->off_rec);
    p->tokens = (int32_t *)(base + h->off_tokens);
    p->ledger = (uint32_t *)(base + h->off_ledger);
    p->buckets = (int32_t *)(base + h->off_buckets);
    p->workers = (kv_worker_t *)(base + h->off_workers);
    p->bs = h->block_size;
    p->n_total = (int32_t)h->n_total;
    p->n_blocks = (int32_t)h->n_blocks;
    p->n_workers = h->n_workers;
    p->n_devices = h->n_devices;
    p->block_bytes = h->block_bytes;
    p->region_bytes = (uint64_t)h->n_blocks * h->block_bytes;
    p->segment_bytes = h->segment_bytes;
}

static ifd_kvpool_t *kv_handle_new(void)
{
    ifd_kvpool_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->meta_fd = -1;
    for (int d = 0; d < IFD_KVPOOL_MAX_DEVICES; d++)
        p->data_fd[d] = -1;
    return p;
}

/* ---- list primitives (caller holds the lock) ----------------------------------------- */

void ifd__kv_free_push(ifd_kvpool_t *p, int32_t b)
{
    kv_dev_t *d = kv_dev_of(p, b);
    kv_rec_t *r = &p->rec[b];
    r->state = KV_FREE;
    r->next = d->free_head;
    r->prev = KV_NONE;
    d->free_head = b;
    d->n_free++;
}

static int32_t kv_free_pop(ifd_kvpool_t *p, kv_dev_t *d)
{
    int32_t b = d->free_head;
    if (b == KV_NONE)
        return KV_NONE;
    d->free_head = p->rec[b].next;
    p->rec[b].next = KV_NONE;
    d->n_free--;
    return b;
}

static void kv_lru_push_tail(ifd_kvpool_t *p, int32_t b)
{
    kv_dev_t *d = kv_dev_of(p, b);
    kv_rec_t *r = &p->rec[b];
    r->state = KV_CACHED;
    r->next = KV_NONE;
    r->prev = d->lru_tail;
    if (d->lru_tail != KV_NONE)
        p->rec[d->lru_tail].next = b;
    else
        d->lru_head = b;
    d->lru_tail = b;
    d->n_cached++;
}

void ifd__kv_lru_remove(ifd_kvpool_t *p, int32_t b)
{
    kv_dev_t *d = kv_dev_of(p, b);
    kv_rec_t *r = &p->rec[b];
    if (r->prev != KV_NONE)
        p->rec[r->prev].next = r->next;
    else
        d->lru_head = r->next;
    if (r->next != KV_NONE)
        p->rec[r->next].prev = r->prev;
    else
        d->lru_tail = r->prev;
    r->next = r->prev = KV_NONE;
    d->n_cached--;
}

static void kv_bucket_insert(ifd_kvpool_t *p, int32_t b)
{
    int32_t *head = &p->buckets[p->rec[b].hash.lo & (uint64_t)(p->h->n_buckets - 1)];
    p->rec[b].hnext = *head;
    *head = b;
}

static void kv_bucket_remove(ifd_kvpool_t *p, int32_t b)
{
    int32_t *link = &p->buckets[p->rec[b].hash.lo & (uint64_t)(p->h->n_buckets - 1)];
    while (*link != KV_NONE && *link != b)
        link = &p->rec[*link].hnext;
    IFD_ASSERT(*link == b);
    *link = p->rec[b].hnext;
    p->rec[b].hnext = KV_NONE;
}

/* The chain hash, cut to h->hash_bits when the test hook asks. */
ifd_kvhash_t ifd__kv_hash(const ifd_kvpool_t *p, const ifd_kvhash_t *parent, uint64_t salt,
                          const int32_t *tokens)
{
    ifd_kvhash_t x = ifd_kvpool_hash_block(parent, salt, tokens, p->bs);
    int bits = p->h->hash_bits;
    if (bits > 0 && bits < 64) {
        x.lo &= (UINT64_C(1) << bits) - 1;
        x.hi = 0;
    }
    return x;
}

/* Identity of block b's current content. */
static inline uint64_t kv_id(const ifd_kvpool_t *p, int32_t b)
{
    return b < 0 ? KV_ROOT_ID : ((uint64_t)p->rec[b].gen << 32) | (uint32_t)b;
}

static inline int32_t kv_id_block(uint64_t id)
{
    return (int32_t)(uint32_t)id;
}

/* The identity still names the same published content (the root always). */
static bool kv_id_alive(const ifd_kvpool_t *p, uint64_t id)
{
    if (id == KV_ROOT_ID)
        return true;
    if (id == KV_NO_ID)
        return false;
    int32_t b = kv_id_block(id);
    return b >= 0 && b < p->n_total && kv_id(p, b) == id && p->rec[b].published;
}

/* The indexed block with this hash, salt and tokens that follows exactly
 * the block with identity parent_id, or KV_NONE. The hash only picks the
 * bucket: equality is decided by content and identity. */
static int32_t kv_index_find(const ifd_kvpool_t *p, const ifd_kvhash_t *hash, uint64_t salt,
                             uint64_t parent_id, bool keyed, const int32_t *tokens)
{
    int32_t b = p->buckets[hash->lo & (uint64_t)(p->h->n_buckets - 1)];
    for (; b != KV_NONE; b = p->rec[b].hnext) {
        const kv_rec_t *r = &p->rec[b];
        if (r->hash.lo == hash->lo && r->hash.hi == hash->hi && r->salt == salt &&
            r->parent_id == parent_id && r->keyed == keyed && r->indexed &&
            memcmp(kv_tokens(p, b), tokens, (size_t)p->bs * sizeof(int32_t)) == 0)
            return b;
    }
    return KV_NONE;
}

/* Takes block b out of the index (truth first: `indexed`, then the chain). */
void ifd__kv_unindex(ifd_kvpool_t *p, int32_t b)
{
    KV_STORE(&p->rec[b].indexed, 0);
    KV_CRASH_POINT(p);
    kv_bucket_remove(p, b);
}

/* Block b's refcount just reached 0: cache it or free it. */
static void kv_release_block(ifd_kvpool_t *p, int32_t b)
{
    kv_rec_t *r = &p->rec[b];
    kv_dev_t *d = kv_dev_of(p, b);
    d->n_in_use--;
    r->tick = ++p->h->tick;
    if (!r->indexed && r->published) {
        /* An unindexed twin whose original was evicted takes its place. Its
         * parent may have been the original's parent, now gone: then it
         * follows the parent its publisher named, if that one still lives.
         * Either identity is exact, so the swap is one store. A keyed
         * entry's key lives in another pool: it is taken as it is. */
        if (!r->keyed && !kv_id_alive(p, r->parent_id) && kv_id_alive(p, r->own_parent_id)) {
            KV_STORE(&r->parent_id, r->own_parent_id);
            KV_CRASH_POINT(p);
        }
        if ((r->keyed || kv_id_alive(p, r->parent_id)) &&
            kv_index_find(p, &r->hash, r->salt, r->parent_id, r->keyed, kv_tokens(p, b)) ==
                KV_NONE) {
            KV_STORE(&r->indexed, 1);
            KV_CRASH_POINT(p);
            kv_bucket_insert(p, b);
        }
    }
    if (r->indexed)
        kv_lru_push_tail(p, b);
    else
        ifd__kv_free_push(p, b);
}

/* Adds one reference of worker w to block b (in use or cached). */
static void kv_take_ref(ifd_kvpool_t *p, int w, int32_t b)
{
    kv_rec_t *r = &p->rec[b];
    uint32_t *l = kv_ledger(p, w, b);
    IFD_ASSERT(*l < UINT32_MAX && r->refcount < INT32_MAX);
    KV_STORE(l, *l + 1);
    KV_CRASH_POINT(p);
    if (r->refcount++ == 0) {
        IFD_ASSERT(r->state == KV_CACHED);
        ifd__kv_lru_remove(p, b);
        r->state = KV_IN_USE;
        kv_dev_of(p, b)->n_in_use++;
    }
    p->workers[w].refs++;
    r->tick = ++p->h->tick;
}

/* ---- repair --------------------------------------------------------------------------- */

typedef struct {
    uint64_t tick;
    int32_t b;
} kv_tick_t;

static int kv_tick_cmp(const void *a, const void *b)
{
    const kv_tick_t *x = a, *y = b;
    if (x->tick != y->tick)
        return x->tick < y->tick ? -1 : 1;
    return x->b < y->b ? -1 : (x->b > y->b);
}

/*
 * Rebuilds every derived structure from the truth (ledger, published,
 * indexed). Called with the lock held, after EOWNERDEAD. Needs no memory
 * beyond a sort buffer; without one the LRU order falls back to block order.
 */
static void kv_repair(ifd_kvpool_t *p)
{
    kv_hdr_t *h = p->h;
    for (int w = 0; w < p->n_workers; w++)
        p->workers[w].refs = 0;
    for (int32_t i = 0; i < h->n_buckets; i++)
        p->buckets[i] = KV_NONE;
    for (int d = 0; d < p->n_devices; d++) {
        kv_dev_t *dv = &h->dev[d];
        dv->free_head = dv->lru_head = dv->lru_tail = KV_NONE;
        dv->n_free = dv->n_cached = dv->n_in_use = 0;
    }
    kv_tick_t *order = malloc((size_t)p->n_total * sizeof *order);
    int32_t n_order = 0;
    /* Free lists are LIFO: push in reverse so low block ids come out first. */
    for (int32_t b = p->n_total - 1; b >= 0; b--) {
        kv_rec_t *r = &p->rec[b];
        int64_t sum = 0;
        for (int w = 0; w < p->n_workers; w++) {
            uint32_t c = *kv_ledger(p, w, b);
            sum += c;
            p->workers[w].refs += c;
        }
        IFD_ASSERT(sum <= INT32_MAX);
        r->refcount = (int32_t)sum;
        r->next = r->prev = r->hnext = KV_NONE;
        if (r->indexed && !r->published)
            r->indexed = 0;
        if (r->indexed)
            kv_bucket_insert(p, b);
        if (sum > 0) {
            r->state = KV_IN_USE;
            kv_dev_of(p, b)->n_in_use++;
        } else if (r->indexed) {
            r->state = KV_CACHED;
            if (order)
                order[n_order++] = (kv_tick_t){r->tick, b};
        } else {
            ifd__kv_free_push(p, b);
        }
    }
    if (order) {
        qsort(order, (size_t)n_order, sizeof *order, kv_tick_cmp);
        for (int32_t i = 0; i < n_order; i++)
            kv_lru_push_tail(p, order[i].b);
        free(order);
    } else {
        for (int32_t b = 0; b < p->n_total; b++)
            if (p->rec[b].state == KV_CACHED && p->rec[b].refcount == 0)
                kv_lru_push_tail(p, b);
    }
    h->ctr[KV_C_REPAIRS]++;
    IFD_WARN("kvpool: a process died holding the pool lock; state rebuilt from the ledger "
             "(repair %llu)",
             (unsigned long long)h->ctr[KV_C_REPAIRS]);
}

void ifd__kv_lock(ifd_kvpool_t *p)
{
    int rc = pthread_mutex_lock(&p->h->lock.m);
    if (rc == EOWNERDEAD) {
        kv_repair(p);
        rc = pthread_mutex_consistent(&p->h->lock.m);
    }
    IFD_ASSERT(rc == 0);
#ifdef IFD_TEST_HOOKS
    if (p->hold_path)
        ifd__kv_test_hold(p);
#endif
}

void ifd__kv_unlock(ifd_kvpool_t *p)
{
    int rc = pthread_mutex_unlock(&p->h->lock.m);
    IFD_ASSERT(rc == 0);
}

/* ---- create / attach ------------------------------------------------------------------ */

/* A sealed memfd of `bytes` mapped read-write; tries hugetlb first when asked. */
static int kv_memfd(const char *name, uint64_t bytes, bool huge, int *fd_out, void **map_out,
                    size_t *map_bytes)
{
    if (bytes > (uint64_t)SIZE_MAX / 2)
        return IFD_EOVERFLOW;
    if (huge) {
        size_t hb = (size_t)((bytes + KV_HUGEPAGE - 1) / KV_HUGEPAGE * KV_HUGEPAGE);
        int fd = memfd_create(name, MFD_CLOEXEC | MFD_HUGETLB);
        if (fd >= 0) {
            void *m = MAP_FAILED;
            if (ftruncate(fd, (off_t)hb) == 0)
                m = mmap(NULL, hb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
            if (m != MAP_FAILED) {
                *fd_out = fd;
                *map_out = m;
                *map_bytes = hb;
                IFD_INFO("kvpool: %s: %zu bytes on hugetlb pages", name, hb);
                return 0;
            }
            close(fd);
        }
        IFD_INFO("kvpool: %s: no hugetlb pages (%s); using a plain memfd with THP advice", name,
                 strerror(errno));
    }
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        int e = errno;
        IFD_ERROR("kvpool: memfd_create(%s): %s", name, strerror(e));
        return -e;
    }
    size_t n = (size_t)bytes;
    if (ftruncate(fd, (off_t)n) != 0) {
        int e = errno;
        IFD_ERROR("kvpool: ftruncate(%s, %zu): %s", name, n, strerror(e));
        close(fd);
        return -e;
    }
    /* Nobody may shrink the pool under the other processes (SIGBUS). */
    (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        IFD_ERROR("kvpool: mmap(%s, %zu): %s", name, n, strerror(e));
        close(fd);
        return -e;
    }
    if (huge)
        (void)madvise(m, n, MADV_HUGEPAGE);
    *fd_out = fd;
    *map_out = m;
    *map_bytes = n;
    return 0;
}

static int kv_map_fd(int fd, uint64_t need, const char *what, void **map_out, size_t *map_bytes)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        IFD_ERROR("kvpool: fstat(%s fd %d): %s", what, fd, strerror(e));
        return -e;
    }
    if ((uint64_t)st.st_size < need) {
        IFD_ERROR("kvpool: %s segment is %lld bytes, need %llu", what, (long long)st.st_size,
                  (unsigned long long)need);
        return IFD_EFORMAT;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        IFD_ERROR("kvpool: mmap(%s, %lld): %s", what, (long long)st.st_size, strerror(e));
        return -e;
    }
    *map_out = m;
    *map_bytes = (size_t)st.st_size;
    return 0;
}

int ifd_kvpool_create(const ifd_kvpool_params_t *params, ifd_kvpool_t **out)
{
    *out = NULL;
    int64_t nb;
    int rc = kv_validate_params(params, &nb);
    if (rc)
        return rc;
    int64_t n_total = nb * params->n_devices;
    kv_layout_t L;
    if ((rc = kv_layout(n_total, params->block_size, params->n_workers, &L)) != 0)
        return rc;
    ifd_kvpool_t *p = kv_handle_new();
    if (!p)
        return IFD_ENOMEM;
    void *meta;
    rc = kv_memfd("inferd-kv-meta", L.total, false, &p->meta_fd, &meta, &p->meta_bytes);
    if (rc)
        goto fail;
    kv_hdr_t *h = meta;
    p->h = h;
    h->version = IFD_KVPOOL_VERSION;
    h->hdr_bytes = sizeof(kv_hdr_t);
    h->meta_bytes = L.total;
    h->rec_bytes = sizeof(kv_rec_t);
    h->mutex_bytes = sizeof(pthread_mutex_t);
    h->n_layers = params->n_layers;
    h->n_kv_heads = params->n_kv_heads;
    h->head_dim = params->head_dim;
    h->dtype = params->dtype;
    h->block_size = params->block_size;
    h->n_devices = params->n_devices;
    h->n_workers = params->n_workers;
    h->n_buckets = L.n_buckets;
    h->n_blocks = nb;
    h->n_total = n_total;
    h->fingerprint = params->fingerprint;
    h->block_bytes = ifd_kvpool_block_bytes(params);
    h->segment_bytes = 2 * (uint64_t)params->n_layers * (uint64_t)nb * h->block_bytes;
    h->off_rec = L.off_rec;
    h->off_tokens = L.off_tokens;
    h->off_ledger = L.off_ledger;
    h->off_buckets = L.off_buckets;
    h->off_workers = L.off_workers;

    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    rc = pthread_mutex_init(&h->lock.m, &ma);
    pthread_mutexattr_destroy(&ma);
    if (rc) {
        IFD_ERROR("kvpool: pthread_mutex_init: %s", strerror(rc));
        rc = -rc;
        goto fail;
    }
    kv_handle_fill(p);
    for (int d = 0; d < p->n_devices; d++) {
        kv_dev_t *dv = &h->dev[d];
        dv->kind = params->kind[d];
        dv->bytes = h->segment_bytes;
        dv->free_head = dv->lru_head = dv->lru_tail = KV_NONE;
    }
    for (int32_t i = 0; i < h->n_buckets; i++)
        p->buckets[i] = KV_NONE;
    for (int32_t b = p->n_total - 1; b >= 0; b--) {
        p->rec[b].next = p->rec[b].prev = p->rec[b].hnext = KV_NONE;
        p->rec[b].parent_id = p->rec[b].own_parent_id = p->rec[b].dup_id = KV_NO_ID;
        ifd__kv_free_push(p, b);
    }
    for (int d = 0; d < p->n_devices; d++) {
        if (h->dev[d].kind != IFD_KVSEG_HOST)
            continue;
        char name[32];
        snprintf(name, sizeof name, "inferd-kv-data%d", d);
        rc = kv_memfd(name, h->segment_bytes, params->hugepages, &p->data_fd[d], &p->data[d],
                      &p->data_map_bytes[d]);
        if (rc)
            goto fail;
        h->dev[d].bound = 1;
    }
    /* Written last: a half-made segment never passes attach's check. */
    KV_STORE(&h->magic, IFD_KVPOOL_MAGIC);
    *out = p;
    return 0;
fail:
    ifd_kvpool_destroy(p);
    return rc;
}

#define KV_CHECK_FIELD(name, have, want)                                                           \
    do {                                                                                           \
        if ((int64_t)(have) != (int64_t)(want)) {                                                  \
            IFD_ERROR("kvpool: attach: %s is %lld in the pool, this process needs %lld", name,     \
                      (long long)(have), (long long)(want));                                       \
            return IFD_EMISMATCH;                                                                  \
        }                                                                                          \
    } while (0)

static int kv_check_header(const kv_hdr_t *h, size_t map_bytes)
{
    if (map_bytes < sizeof(kv_hdr_t) || h->magic != IFD_KVPOOL_MAGIC) {
        IFD_ERROR("kvpool: attach: not a KV pool segment (bad magic)");
        return IFD_EFORMAT;
    }
    if (h->version != IFD_KVPOOL_VERSION) {
        IFD_ERROR("kvpool: attach: pool version %u, this build speaks %d", h->version,
                  IFD_KVPOOL_VERSION);
        return IFD_EVERSION;
    }
    if (h->hdr_bytes != sizeof(kv_hdr_t) || h->rec_bytes != sizeof(kv_rec_t) ||
        h->mutex_bytes != sizeof(pthread_mutex_t)) {
        IFD_ERROR("kvpool: attach: structure sizes differ (header %u/%zu, record %u/%zu) — "
                  "another build made this pool",
                  h->hdr_bytes, sizeof(kv_hdr_t), h->rec_bytes, sizeof(kv_rec_t));
        return IFD_EVERSION;
    }
    ifd_kvpool_params_t g = ifd_kvpool_default_params();
    g.n_layers = h->n_layers;
    g.n_kv_heads = h->n_kv_heads;
    g.head_dim = h->head_dim;
    g.dtype = (ifd_kv_dtype_t)h->dtype;
    g.block_size = h->block_size;
    g.n_devices = h->n_devices;
    g.n_workers = h->n_workers;
    g.n_blocks = h->n_blocks;
    int64_t nb;
    if (kv_validate_params(&g, &nb) != 0 || h->n_total != nb * h->n_devices)
        return IFD_EFORMAT;
    kv_layout_t L;
    if (kv_layout(h->n_total, h->block_size, h->n_workers, &L) != 0 || L.total != h->meta_bytes ||
        L.total > map_bytes || L.off_rec != h->off_rec || L.off_tokens != h->off_tokens ||
        L.off_ledger != h->off_ledger || L.off_buckets != h->off_buckets ||
        L.off_workers != h->off_workers || L.n_buckets != h->n_buckets ||
        h->block_bytes != ifd_kvpool_block_bytes(&g) ||
        h->segment_bytes != 2 * (uint64_t)h->n_layers * (uint64_t)h->n_blocks * h->block_bytes) {
        IFD_ERROR("kvpool: attach: metadata layout is inconsistent (segment %zu bytes)", map_bytes);
        return IFD_EFORMAT;
    }
    return 0;
}

static int kv_check_expect(const kv_hdr_t *h, const ifd_kvpool_params_t *e)
{
    KV_CHECK_FIELD("n_layers", h->n_layers, e->n_layers);
    KV_CHECK_FIELD("n_kv_heads", h->n_kv_heads, e->n_kv_heads);
    KV_CHECK_FIELD("head_dim", h->head_dim, e->head_dim);
    KV_CHECK_FIELD("dtype", h->dtype, e->dtype);
    KV_CHECK_FIELD("block_size", h->block_size, e->block_size);
    if (h->fingerprint != e->fingerprint) {
        IFD_ERROR("kvpool: attach: model fingerprint %016llx in the pool, this process has "
                  "%016llx (another model?)",
                  (unsigned long long)h->fingerprint, (unsigned long long)e->fingerprint);
        return IFD_EMISMATCH;
    }
    if (e->n_blocks)
        KV_CHECK_FIELD("n_blocks", h->n_blocks, e->n_blocks);
    if (e->n_devices > 1)
        KV_CHECK_FIELD("n_devices", h->n_devices, e->n_devices);
    if (e->n_workers > 0 && e->n_workers != IFD_KVPOOL_DEFAULT_WORKERS)
        KV_CHECK_FIELD("n_workers", h->n_workers, e->n_workers);
    for (int d = 0; d < h->n_devices && d < e->n_devices; d++)
        if (e->kind[d] != IFD_KVSEG_HOST)
            KV_CHECK_FIELD("segment kind", h->dev[d].kind, e->kind[d]);
    return 0;
}

int ifd_kvpool_attach(int meta_fd, const int *data_fds, int n_data_fds,
                      const ifd_kvpool_params_t *expect, ifd_kvpool_t **out)
{
    *out = NULL;
    if (meta_fd < 0 || n_data_fds < 0 || (n_data_fds > 0 && !data_fds))
        return IFD_EINVAL;
    ifd_kvpool_t *p = kv_handle_new();
    if (!p)
        return IFD_ENOMEM;
    int rc;
    void *meta;
    p->meta_fd = fcntl(meta_fd, F_DUPFD_CLOEXEC, 0);
    if (p->meta_fd < 0) {
        rc = -errno;
        IFD_ERROR("kvpool: dup(%d): %s", meta_fd, strerror(-rc));
        goto fail;
    }
    if ((rc = kv_map_fd(p->meta_fd, sizeof(kv_hdr_t), "metadata", &meta, &p->meta_bytes)))
        goto fail;
    p->h = meta;
    if ((rc = kv_check_header(p->h, p->meta_bytes)))
        goto fail;
    if (expect && (rc = kv_check_expect(p->h, expect)))
        goto fail;
    kv_handle_fill(p);
#ifdef IFD_TEST_HOOKS
    const char *hold = getenv("INFERD_TEST_POOL_LOCK_HOLD");
    if (hold && *hold && !(p->hold_path = strdup(hold))) {
        rc = IFD_ENOMEM;
        goto fail;
    }
#endif
    if (n_data_fds > p->n_devices) {
        IFD_ERROR("kvpool: attach: %d data fds for a pool of %d devices", n_data_fds, p->n_devices);
        rc = IFD_EMISMATCH;
        goto fail;
    }
    for (int d = 0; d < n_data_fds; d++) {
        if (data_fds[d] < 0)
            continue;
        p->data_fd[d] = fcntl(data_fds[d], F_DUPFD_CLOEXEC, 0);
        if (p->data_fd[d] < 0) {
            rc = -errno;
            IFD_ERROR("kvpool: dup(%d): %s", data_fds[d], strerror(-rc));
            goto fail;
        }
        if (p->h->dev[d].kind == IFD_KVSEG_HOST &&
            (rc = kv_map_fd(p->data_fd[d], p->segment_bytes, "data", &p->data[d],
                            &p->data_map_bytes[d])))
            goto fail;
    }
    *out = p;
    return 0;
fail:
    ifd_kvpool_destroy(p);
    return rc;
}

void ifd_kvpool_destroy(ifd_kvpool_t *p)
{
    if (!p)
        return;
    for (int d = 0; d < IFD_KVPOOL_MAX_DEVICES; d++) {
        if (p->prov[d] && p->data[d])
            p->prov[d]->release(p->prov[d]->ctx, p->data[d], p->segment_bytes + KV_SEAL_BYTES,
                                p->prov_priv[d]);
        else if (p->data[d])
            munmap(p->data[d], p->data_map_bytes[d]);
        if (p->data_fd[d] >= 0)
            close(p->data_fd[d]);
    }
    if (p->h)
        munmap(p->h, p->meta_bytes);
    if (p->meta_fd >= 0)
        close(p->meta_fd);
    free(p->hold_path);
    free(p);
}

void ifd_kvpool_geometry(const ifd_kvpool_t *p, ifd_kvpool_params_t *g)
{
    *g = ifd_kvpool_default_params();
    const kv_hdr_t *h = p->h;
    g->n_layers = h->n_layers;
    g->n_kv_heads = h->n_kv_heads;
    g->head_dim = h->head_dim;
    g->dtype = (ifd_kv_dtype_t)h->dtype;
    g->block_size = h->block_size;
    g->n_blocks = h->n_blocks;
    g->bytes_budget = h->segment_bytes;
    g->n_devices = h->n_devices;
    for (int d = 0; d < h->n_devices; d++)
        g->kind[d] = (ifd_kvseg_kind_t)h->dev[d].kind;
    g->n_workers = h->n_workers;
    g->fingerprint = h->fingerprint;
}

int ifd_kvpool_meta_fd(const ifd_kvpool_t *p)
{
    return p->meta_fd;
}

int ifd_kvpool_data_fd(const ifd_kvpool_t *p, int dev)
{
    return dev >= 0 && dev < p->n_devices ? p->data_fd[dev] : -1;
}

int32_t ifd_kvpool_n_blocks(const ifd_kvpool_t *p)
{
    return p->n_total;
}

int ifd_kvpool_block_device(const ifd_kvpool_t *p, int32_t b)
{
    return b >= 0 && b < p->n_total ? (int)(b / p->n_blocks) : -1;
}

int32_t ifd_kvpool_block_local(const ifd_kvpool_t *p, int32_t b)
{
    return b >= 0 && b < p->n_total ? b % p->n_blocks : -1;
}

uint64_t ifd_kvpool_segment_bytes(const ifd_kvpool_t *p)
{
    return p->segment_bytes;
}

/* ---- addresses ------------------------------------------------------------------------- */

static void *kv_region(const ifd_kvpool_t *p, int dev, int layer, int v)
{
    if (dev < 0 || dev >= p->n_devices || layer < 0 || layer >= p->h->n_layers || !p->data[dev])
        return NULL;
    return (char *)p->data[dev] + ((uint64_t)layer * 2 + (uint64_t)v) * p->region_bytes;
}

void *ifd_kvpool_layer_k(const ifd_kvpool_t *p, int dev, int layer)
{
    return kv_region(p, dev, layer, 0);
}

void *ifd_kvpool_layer_v(const ifd_kvpool_t *p, int dev, int layer)
{
    return kv_region(p, dev, layer, 1);
}

void *ifd_kvpool_block_ptr(const ifd_kvpool_t *p, int32_t b, int layer, bool v)
{
    if (b < 0 || b >= p->n_total)
        return NULL;
    char *base = kv_region(p, b / p->n_blocks, layer, v ? 1 : 0);
    return base ? base + (uint64_t)(b % p->n_blocks) * p->block_bytes : NULL;
}

/* ---- blocks ---------------------------------------------------------------------------- */

static bool kv_worker_ok(const ifd_kvpool_t *p, int w)
{
    return w >= 0 && w < p->n_workers;
}

/* Takes one block off device d's free list or evicts its LRU head and gives
 * worker w its only reference. The caller checked that one is available. */
static int32_t kv_alloc_one(ifd_kvpool_t *p, int w, kv_dev_t *d)
{
    int32_t b = kv_free_pop(p, d);
    if (b == KV_NONE) {
        b = d->lru_head;
        IFD_ASSERT(b != KV_NONE);
        ifd__kv_lru_remove(p, b);
        ifd__kv_unindex(p, b);
        p->h->ctr[KV_C_EVICTIONS]++;
    }
    kv_rec_t *r = &p->rec[b];
    KV_STORE(&r->published, 0);
    r->gen++;
    r->parent_id = r->own_parent_id = r->dup_id = KV_NO_ID;
    KV_CRASH_POINT(p);
    KV_STORE(kv_ledger(p, w, b), 1u);
    KV_CRASH_POINT(p);
    r->refcount = 1;
    r->state = KV_IN_USE;
    r->tick = ++p->h->tick;
    d->n_in_use++;
    p->workers[w].refs++;
    return b;
}

int ifd_kvpool_alloc(ifd_kvpool_t *p, int w, int dev, int n, int32_t *out)
{
    if (!kv_worker_ok(p, w) || dev < 0 || dev >= p->n_devices || n < 0 || (n > 0 && !out))
        return IFD_EINVAL;
    if (n == 0)
        return 0;
    ifd__kv_lock(p);
    kv_dev_t *d = &p->h->dev[dev];
    if ((int64_t)d->n_free + d->n_cached < n) {
        p->h->ctr[KV_C_ALLOC_FAILURES]++;
        ifd__kv_unlock(p);
        return IFD_ENOBLOCKS;
    }
    for (int i = 0; i < n; i++)
        out[i] = kv_alloc_one(p, w, d);
    p->h->ctr[KV_C_ALLOCS] += (uint64_t)n;
    ifd__kv_unlock(p);
    return 0;
}

int ifd_kvpool_ref(ifd_kvpool_t *p, int w, const int32_t *blocks, int n)
{
    if (!kv_worker_ok(p, w) || n < 0 || (n > 0 && !blocks))
        return IFD_EINVAL;
    ifd__kv_lock(p);
    for (int i = 0; i < n; i++) {
        int32_t b = blocks[i];
        if (b < 0 || b >= p->n_total || p->rec[b].state == KV_FREE) {
            ifd__kv_unlock(p);
            IFD_ERROR("kvpool: ref: block %d is not in use or cached", b);
            return IFD_EINVAL;
        }
    }
    for (int i = 0; i < n; i++)
        kv_take_ref(p, w, blocks[i]);
    ifd__kv_unlock(p);
    return 0;
}

/* Drops one reference of w from each block (last to first); the caller
 * holds the lock. IFD_EINVAL with nothing changed when w lacks one. */
static int kv_unref_locked(ifd_kvpool_t *p, int w, const int32_t *blocks, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t b = blocks[i];
        if (b < 0 || b >= p->n_total || *kv_ledger(p, w, b) == 0) {
            /* Undo the ledger decrements made so far. */
            for (int j = 0; j < i; j++)
                (*kv_ledger(p, w, blocks[j]))++;
            IFD_ERROR("kvpool: unref: worker %d holds no reference to block %d", w, b);
            return IFD_EINVAL;
        }
        KV_STORE(kv_ledger(p, w, b), *kv_ledger(p, w, b) - 1);
        KV_CRASH_POINT(p);
    }
    for (int i = n - 1; i >= 0; i--) {
        int32_t b = blocks[i];
        kv_rec_t *r = &p->rec[b];
        IFD_ASSERT(r->refcount > 0 && r->state == KV_IN_USE);
        p->workers[w].refs--;
        if (--r->refcount == 0)
            kv_release_block(p, b);
        KV_CRASH_POINT(p);
    }
    return 0;
}

int ifd_kvpool_unref(ifd_kvpool_t *p, int w, const int32_t *blocks, int n)
{
    if (!kv_worker_ok(p, w) || n < 0 || (n > 0 && !blocks))
        return IFD_EINVAL;
    ifd__kv_lock(p);
    int rc = kv_unref_locked(p, w, blocks, n);
    ifd__kv_unlock(p);
    return rc;
}

int ifd_kvpool_free(ifd_kvpool_t *p, int w, const int32_t *blocks, int n)
{
    return ifd_kvpool_unref(p, w, blocks, n);
}

int ifd_kvpool_refs_of(ifd_kvpool_t *p, int w, int32_t b)
{
    if (!kv_worker_ok(p, w) || b < 0 || b >= p->n_total)
        return -1;
    return (int)__atomic_load_n(kv_ledger(p, w, b), __ATOMIC_RELAXED);
}

static int kv_copy_block(ifd_kvpool_t *p, int32_t dst, int32_t src)
{
    int dev = src / p->n_blocks;
    for (int l = 0; l < p->h->n_layers; l++) {
        for (int v = 0; v < 2; v++) {
            void *to = ifd_kvpool_block_ptr(p, dst, l, v);
            const void *from = ifd_kvpool_block_ptr(p, src, l, v);
            if (p->prov[dev]) {
                int rc = p->prov[dev]->copy(p->prov[dev]->ctx, to, from, p->block_bytes);
                if (rc)
                    return rc;
            } else {
                memcpy(to, from, p->block_bytes);
            }
        }
    }
    return 0;
}

int ifd_kvpool_cow(ifd_kvpool_t *p, int w, int32_t *block)
{
    if (!kv_worker_ok(p, w) || !block || *block < 0 || *block >= p->n_total)
        return IFD_EINVAL;
    int32_t old = *block;
    int dev = old / p->n_blocks;
    if (!p->data[dev])
        return IFD_ENODEV;
    ifd__kv_lock(p);
    if (*kv_ledger(p, w, old) == 0) {
        ifd__kv_unlock(p);
        IFD_ERROR("kvpool: cow: worker %d holds no reference to block %d", w, old);
        return IFD_EINVAL;
    }
    if (p->rec[old].refcount == 1 && !p->rec[old].published) {
        ifd__kv_unlock(p);
        return 0;
    }
    kv_dev_t *d = &p->h->dev[dev];
    if ((int64_t)d->n_free + d->n_cached < 1) {
        p->h->ctr[KV_C_ALLOC_FAILURES]++;
        ifd__kv_unlock(p);
        return IFD_ENOBLOCKS;
    }
    int32_t nb = kv_alloc_one(p, w, d);
    p->h->ctr[KV_C_ALLOCS]++;
    ifd__kv_unlock(p);
    /* Both blocks are held by w: nobody can take them while we copy unlocked. */
    int rc = kv_copy_block(p, nb, old);
    ifd__kv_lock(p);
    if (rc == 0) {
        IFD_ASSERT(kv_unref_locked(p, w, &old, 1) == 0);
        p->h->ctr[KV_C_COWS]++;
        *block = nb;
    } else {
        IFD_ASSERT(kv_unref_locked(p, w, &nb, 1) == 0);
    }
    ifd__kv_unlock(p);
    return rc == 0 ? 1 : rc;
}

/* ---- prefix cache ---------------------------------------------------------------------- */

ifd_kvhash_t ifd_kvpool_hash_block(const ifd_kvhash_t *parent, uint64_t salt, const int32_t *tokens,
                                   int block_size)
{
    /* Hashed as one little-endian byte string (x86-64 and aarch64 are both LE). */
    uint64_t buf[3 + IFD_KVPOOL_MAX_BLOCK_SIZE / 2];
    if (block_size < 0 || block_size > IFD_KVPOOL_MAX_BLOCK_SIZE)
        block_size = 0; /* never happens through the pool; keeps the copy in bounds */
    buf[0] = parent ? parent->lo : 0;
    buf[1] = parent ? parent->hi : 0;
    buf[2] = salt;
    size_t tb = (size_t)block_size * sizeof(int32_t);
    memcpy(&buf[3], tokens, tb);
    XXH128_hash_t x = XXH3_128bits(buf, 3 * sizeof(uint64_t) + tb);
    return (ifd_kvhash_t){x.low64, x.high64};
}

/* Under the lock: fills block b's record as published (its tokens, salt,
 * parent, hash, ids; twin: the indexed block with the same content, or
 * KV_NONE) and, when it has no twin, indexes it. Content first, flag last,
 * with the crash points between. */
static void kv_commit_publish(ifd_kvpool_t *p, int32_t b, const int32_t *tokens, uint64_t salt,
                              ifd_kvhash_t parent, ifd_kvhash_t hash, uint64_t parent_id,
                              uint64_t own_parent_id, bool keyed, int32_t twin)
{
    kv_rec_t *r = &p->rec[b];
    memcpy(kv_tokens(p, b), tokens, (size_t)p->bs * sizeof(int32_t));
    r->keyed = keyed;
    r->salt = salt;
    r->parent = parent;
    r->hash = hash;
    r->parent_id = parent_id;
    r->own_parent_id = own_parent_id;
    r->dup_id = twin >= 0 ? kv_id(p, twin) : KV_NO_ID;
    KV_CRASH_POINT(p);
    KV_STORE(&r->published, 1); /* content first, flag last */
    KV_CRASH_POINT(p);
    if (twin == KV_NONE) {
        KV_STORE(&r->indexed, 1);
        KV_CRASH_POINT(p);
        kv_bucket_insert(p, b);
    }
}

int ifd_kvpool_publish(ifd_kvpool_t *p, int w, int32_t b, int32_t parent, uint64_t salt,
                       const int32_t *tokens, ifd_kvhash_t *out_hash)
{
    if (!kv_worker_ok(p, w) || b < 0 || b >= p->n_total || parent < -1 || parent >= p->n_total ||
        parent == b || !tokens)
        return IFD_EINVAL;
    ifd__kv_lock(p);
    kv_rec_t *r = &p->rec[b];
    if (*kv_ledger(p, w, b) == 0 || r->published) {
        ifd__kv_unlock(p);
        IFD_ERROR("kvpool: publish: block %d is %s", b,
                  r->published ? "already published" : "not held by this worker");
        return IFD_EINVAL;
    }
    uint64_t own = KV_ROOT_ID, pid = KV_ROOT_ID;
    ifd_kvhash_t ph = {0, 0};
    if (parent >= 0) {
        const kv_rec_t *pr = &p->rec[parent];
        if (*kv_ledger(p, w, parent) == 0 || !pr->published || pr->keyed) {
            ifd__kv_unlock(p);
            IFD_ERROR("kvpool: publish: parent block %d is %s", parent,
                      !pr->published ? "not published"
                      : pr->keyed    ? "a keyed entry"
                                     : "not held by this worker");
            return IFD_EINVAL;
        }
        ph = pr->hash;
        own = pid = kv_id(p, parent);
        /* Follow the indexed twin of an unindexed parent, so that lookups,
         * which walk indexed blocks, find this block after it. */
        if (!pr->indexed && kv_id_alive(p, pr->dup_id) && p->rec[kv_id_block(pr->dup_id)].indexed)
            pid = pr->dup_id;
    }
    ifd_kvhash_t hash = ifd__kv_hash(p, &ph, salt, tokens);
    int32_t twin = kv_index_find(p, &hash, salt, pid, false, tokens);
    kv_commit_publish(p, b, tokens, salt, ph, hash, pid, own, false, twin);
    ifd__kv_unlock(p);
    if (out_hash)
        *out_hash = hash;
    return twin == KV_NONE ? 0 : 1;
}

/* Matches blocks [0, n) of a chunk whose hashes are known, following
 * *prev (the block matched last, -1 at the start); takes refs for w when
 * w ≥ 0. Returns how many matched. Lock held. */
static int kv_match_locked(ifd_kvpool_t *p, int w, uint64_t salt, const int32_t *tokens,
                           const ifd_kvhash_t *hashes, int32_t *prev, int n, int32_t *out_blocks)
{
    int i;
    for (i = 0; i < n; i++) {
        int32_t b =
            kv_index_find(p, &hashes[i], salt, kv_id(p, *prev), false, tokens + (size_t)i * p->bs);
        if (b == KV_NONE)
            break;
        *prev = b;
        if (w >= 0)
            kv_take_ref(p, w, b);
        if (out_blocks)
            out_blocks[i] = b;
    }
    return i;
}

#define KV_CHUNK 64

static int kv_lookup(ifd_kvpool_t *p, int w, uint64_t salt, const int32_t *tokens, int n_tokens,
                     int32_t *out_blocks, int max_blocks, ifd_kvhash_t *out_hashes)
{
    if ((w >= 0 && !kv_worker_ok(p, w)) || n_tokens < 0 || max_blocks < 0 ||
        (n_tokens > 0 && !tokens) || (w >= 0 && max_blocks > 0 && !out_blocks))
        return IFD_EINVAL;
    int want = n_tokens / p->bs;
    if (want > max_blocks)
        want = max_blocks;
    ifd_kvhash_t hashes[KV_CHUNK];
    ifd_kvhash_t parent = {0, 0};
    int32_t prev = KV_NONE;
    int done = 0;
    /* Hash a chunk outside the lock, match it under the lock, go on while
     * the whole chunk matched. References already taken stay valid across
     * the unlock: a held block is never evicted. */
    int chunk = 4; /* small first: a miss costs one or two hashes, not 64 */
    while (done < want) {
        int n = want - done < chunk ? want - done : chunk;
        chunk = chunk * 4 > KV_CHUNK ? KV_CHUNK : chunk * 4;
        for (int i = 0; i < n; i++)
            hashes[i] = ifd__kv_hash(p, i ? &hashes[i - 1] : &parent, salt,
                                     tokens + (size_t)(done + i) * p->bs);
        ifd__kv_lock(p);
        int m = kv_match_locked(p, w, salt, tokens + (size_t)done * p->bs, hashes, &prev, n,
                                out_blocks ? out_blocks + done : NULL);
        if (w >= 0) {
            p->h->ctr[KV_C_HIT_BLOCKS] += (uint64_t)m;
            if (m < n || done + m == want) {
                p->h->ctr[KV_C_LOOKUPS]++;
                p->h->ctr[KV_C_MISS_BLOCKS] += (uint64_t)(n_tokens / p->bs - done - m);
            }
        }
        ifd__kv_unlock(p);
        if (out_hashes)
            memcpy(out_hashes + done, hashes, (size_t)m * sizeof *hashes);
        done += m;
        if (m < n)
            break;
        parent = hashes[n - 1];
    }
    if (want == 0 && w >= 0) {
        ifd__kv_lock(p);
        p->h->ctr[KV_C_LOOKUPS]++;
        p->h->ctr[KV_C_MISS_BLOCKS] += (uint64_t)(n_tokens / p->bs);
        ifd__kv_unlock(p);
    }
    return done;
}

int ifd_kvpool_lookup(ifd_kvpool_t *p, int w, uint64_t salt, const int32_t *tokens, int n_tokens,
                      int32_t *out_blocks, int max_blocks, ifd_kvhash_t *out_hashes)
{
    if (!kv_worker_ok(p, w))
        return IFD_EINVAL;
    return kv_lookup(p, w, salt, tokens, n_tokens, out_blocks, max_blocks, out_hashes);
}

int ifd_kvpool_probe(ifd_kvpool_t *p, uint64_t salt, const int32_t *tokens, int n_tokens,
                     int32_t *out_blocks, int max_blocks)
{
    if (!out_blocks)
        max_blocks = n_tokens / p->bs;
    return kv_lookup(p, -1, salt, tokens, n_tokens, out_blocks, max_blocks, NULL);
}

/* ---- keyed entries ------------------------------------------------------------------- */

int ifd_kvpool_block_key(ifd_kvpool_t *p, int32_t b, uint64_t *out_key)
{
    if (b < 0 || b >= p->n_total || !out_key)
        return IFD_EINVAL;
    ifd__kv_lock(p);
    const kv_rec_t *r = &p->rec[b];
    int rc = r->published && !r->keyed ? 0 : IFD_EINVAL;
    uint64_t key = kv_id(p, b);
    /* an unindexed duplicate: lookups return its indexed twin, so name that */
    if (rc == 0 && !r->indexed && kv_id_alive(p, r->dup_id) &&
        p->rec[kv_id_block(r->dup_id)].indexed)
        key = r->dup_id;
    ifd__kv_unlock(p);
    if (rc == 0)
        *out_key = key;
    return rc;
}

static ifd_kvhash_t kv_keyed_parent(uint64_t key)
{
    return (ifd_kvhash_t){key, KV_KEYED_TAG};
}

int ifd_kvpool_unpublish(ifd_kvpool_t *p, int w, int32_t b)
{
    if (!kv_worker_ok(p, w) || b < 0 || b >= p->n_total)
        return IFD_EINVAL;
    ifd__kv_lock(p);
    kv_rec_t *r = &p->rec[b];
    int rc = 0;
    if (*kv_ledger(p, w, b) == 0) {
        IFD_ERROR("kvpool: unpublish: worker %d holds no reference to block %d", w, b);
        rc = IFD_EINVAL;
    } else if (r->published) {
        /* Held, so in use: not on the LRU. Index first (an indexed block must be published),
         * then the content, then a new identity for the chains that named it. */
        if (r->indexed)
            ifd__kv_unindex(p, b);
        KV_STORE(&r->published, 0);
        KV_CRASH_POINT(p);
        r->gen++;
        rc = 1;
    }
    ifd__kv_unlock(p);
    return rc;
}

int ifd_kvpool_publish_keyed(ifd_kvpool_t *p, int w, int32_t b, uint64_t key, uint64_t salt,
                             const int32_t *tokens)
{
    if (!kv_worker_ok(p, w) || b < 0 || b >= p->n_total || !tokens || key == KV_ROOT_ID ||
        key == KV_NO_ID)
        return IFD_EINVAL;
    const ifd_kvhash_t ph = kv_keyed_parent(key);
    const ifd_kvhash_t hash = ifd__kv_hash(p, &ph, salt, tokens);
    ifd__kv_lock(p);
    kv_rec_t *r = &p->rec[b];
    if (*kv_ledger(p, w, b) == 0 || r->published) {
        ifd__kv_unlock(p);
        IFD_ERROR("kvpool: publish_keyed: block %d is %s", b,
                  r->published ? "already published" : "not held by this worker");
        return IFD_EINVAL;
    }
    int32_t twin = kv_index_find(p, &hash, salt, key, true, tokens);
    kv_commit_publish(p, b, tokens, salt, ph, hash, key, key, true, twin);
    ifd__kv_unlock(p);
    return twin == KV_NONE ? 0 : 1;
}

/* Looks up n keyed entries (w < 0: a probe, no references, no stats). */
static int kv_lookup_keyed(ifd_kvpool_t *p, int w, uint64_t salt, const int32_t *tokens,
                           const uint64_t *keys, int n, int32_t *out_blocks)
{
    if (n < 0 || (n > 0 && (!tokens || !keys || !out_blocks)))
        return IFD_EINVAL;
    int found = 0;
    ifd_kvhash_t hashes[KV_CHUNK];
    /* hash a chunk outside the lock, match it under the lock */
    for (int done = 0; done < n; done += KV_CHUNK) {
        const int m = n - done < KV_CHUNK ? n - done : KV_CHUNK;
        for (int i = 0; i < m; i++) {
            const ifd_kvhash_t ph = kv_keyed_parent(keys[done + i]);
            hashes[i] = ifd__kv_hash(p, &ph, salt, tokens + (size_t)(done + i) * p->bs);
        }
        ifd__kv_lock(p);
        for (int i = 0; i < m; i++) {
            const int j = done + i;
            int32_t b =
                keys[j] == KV_ROOT_ID || keys[j] == KV_NO_ID
                    ? KV_NONE
                    : kv_index_find(p, &hashes[i], salt, keys[j], true, tokens + (size_t)j * p->bs);
            if (b != KV_NONE && w >= 0)
                kv_take_ref(p, w, b);
            out_blocks[j] = b;
            found += b != KV_NONE;
        }
        ifd__kv_unlock(p);
    }
    if (w >= 0) {
        ifd__kv_lock(p);
        p->h->ctr[KV_C_LOOKUPS]++;
        p->h->ctr[KV_C_HIT_BLOCKS] += (uint64_t)found;
        p->h->ctr[KV_C_MISS_BLOCKS] += (uint64_t)(n - found);
        ifd__kv_unlock(p);
    }
    return found;
}

int ifd_kvpool_lookup_keyed(ifd_kvpool_t *p, int w, uint64_t salt, const int32_t *tokens,
                            const uint64_t *keys, int n, int32_t *out_blocks)
{
    if (!kv_worker_ok(p, w))
        return IFD_EINVAL;
    return kv_lookup_keyed(p, w, salt, tokens, keys, n, out_blocks);
}

int ifd_kvpool_probe_keyed(ifd_kvpool_t *p, uint64_t salt, const int32_t *tokens,
                           const uint64_t *keys, int n, int32_t *out_blocks)
{
    return kv_lookup_keyed(p, -1, salt, tokens, keys, n, out_blocks);
}

/* The first block the window of a query at position q reads. */
static int32_t kv_window_lo(int32_t q, int window, int bs)
{
    const int32_t lo = q - window + 1;
    return lo > 0 ? lo / bs : 0;
}

/* Drops worker w's references on the twins held in t[from, to) (w < 0: none). */
static void kv_window_drop(ifd_kvpool_t *lp, int w, const int32_t *t, int32_t from, int32_t to)
{
    for (int32_t b = from; w >= 0 && b < to; b++)
        if (t[b] >= 0)
            ifd_kvpool_unref(lp, w, t + b, 1);
}

int ifd_kvpool_window_run(ifd_kvpool_t *pool, ifd_kvpool_t *lpool, int w, int dev, int window,
                          uint64_t salt, const int32_t *tokens, const int32_t *blocks, int k,
                          int32_t *twins, uint64_t *keys, int32_t *out_lo)
{
    if (!pool || !lpool || window < 1 || k < 0 ||
        (k > 0 && (!tokens || !blocks || !twins || !keys)) || (w >= 0 && !kv_worker_ok(lpool, w)) ||
        lpool->bs != pool->bs)
        return IFD_EINVAL;
    const int bs = lpool->bs;
    int32_t a = k; /* twins[a, k) are looked up: found (held when w >= 0), or -1 */
    while (k > 0) {
        const int32_t lo = kv_window_lo(k * bs, window, bs);
        if (lo < a) {
            for (int32_t b = lo; b < a; b++)
                if (ifd_kvpool_block_key(pool, blocks[b], &keys[b - lo]))
                    keys[b - lo] = UINT64_MAX; /* not published: matches nothing */
            int got =
                kv_lookup_keyed(lpool, w, salt, tokens + (size_t)lo * bs, keys, a - lo, twins + lo);
            for (int32_t b = lo; b < a; b++)
                if (got < 0) {
                    twins[b] = -1;
                } else if (twins[b] >= 0 && ifd_kvpool_block_device(lpool, twins[b]) != dev) {
                    kv_window_drop(lpool, w, twins, b, b + 1);
                    twins[b] = -1;
                }
            a = lo;
        }
        int32_t miss = k - 1;
        while (miss >= lo && twins[miss] >= 0)
            miss--;
        if (miss < lo)
            break; /* the whole window is there */
        kv_window_drop(lpool, w, twins, miss + 1, k);
        k = miss;
    }
    const int32_t first = kv_window_lo(k * bs, window, bs);
    kv_window_drop(lpool, w, twins, a, first); /* before the window: not needed */
    if (out_lo)
        *out_lo = first;
    return k;
}

/* ---- recovery -------------------------------------------------------------------------- */

int ifd_kvpool_reclaim(ifd_kvpool_t *p, int w)
{
    if (!kv_worker_ok(p, w))
        return IFD_EINVAL;
    ifd__kv_lock(p);
    int64_t dropped = 0;
    for (int32_t b = p->n_total - 1; b >= 0; b--) {
        uint32_t *l = kv_ledger(p, w, b);
        uint32_t c = *l;
        if (c == 0)
            continue;
        KV_STORE(l, 0u);
        KV_CRASH_POINT(p);
        kv_rec_t *r = &p->rec[b];
        IFD_ASSERT(r->refcount >= (int32_t)c);
        r->refcount -= (int32_t)c;
        p->workers[w].refs -= c;
        dropped += c;
        if (r->refcount == 0)
            kv_release_block(p, b);
    }
    p->h->ctr[KV_C_RECLAIMS]++;
    p->h->ctr[KV_C_RECLAIMED_REFS] += (uint64_t)dropped;
    ifd__kv_unlock(p);
    if (dropped)
        IFD_INFO("kvpool: reclaimed %lld block references of worker %d", (long long)dropped, w);
    return dropped > INT32_MAX ? INT32_MAX : (int)dropped;
}
