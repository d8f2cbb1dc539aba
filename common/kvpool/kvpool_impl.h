/*
 * kvpool_impl.h — internal to common/kvpool*.c: the shared-memory layout of
 * the KV pool's metadata segment, the per-process handle, and the helpers
 * kvpool.c (create/attach, blocks, prefix cache, repair) shares with
 * kvpool_check.c (invariant check, stats, device segments, test hooks).
 * Nothing outside those two files may include it; see kvpool.c for the
 * invariants and docs/kvpool.md for the picture.
 */
#ifndef IFD_KVPOOL_IMPL_H
#define IFD_KVPOOL_IMPL_H

#include "kvpool.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#define KV_NONE    (-1)
#define KV_ROOT_ID UINT64_MAX
#define KV_NO_ID   (UINT64_MAX - 1)

/* A device (CUDA) segment is segment_bytes of data followed by a seal of
 * this many bytes (kvpool_check.c: bind_segment). */
#define KV_SEAL_BYTES 64

enum { KV_FREE = 0, KV_IN_USE = 1, KV_CACHED = 2 };

/* Event counters, kept in the header (they are the only derived state that
 * repair cannot recompute; after a crash they may be off by the one event). */
enum {
    KV_C_ALLOCS,
    KV_C_ALLOC_FAILURES,
    KV_C_LOOKUPS,
    KV_C_HIT_BLOCKS,
    KV_C_MISS_BLOCKS,
    KV_C_EVICTIONS,
    KV_C_COWS,
    KV_C_RECLAIMS,
    KV_C_RECLAIMED_REFS,
    KV_C_REPAIRS,
    KV_C_REBUILDS,
    KV_C_COUNT
};

typedef struct {
    int32_t kind;      /* ifd_kvseg_kind_t */
    int32_t bound;     /* CUDA: the segment exists (an fd is held, or ipc_handle is valid) */
    int32_t free_head; /* free list (LIFO) through rec.next */
    int32_t lru_head;  /* least recently used cached block: evicted first */
    int32_t lru_tail;  /* most recently used */
    int32_t n_free;
    int32_t n_cached;
    int32_t n_in_use;
    uint64_t bytes;         /* data segment bytes */
    uint64_t seal;          /* CUDA: random token of the segment's incarnation, also stored in
                               the segment's seal (after the data) to detect lost memory */
    uint8_t ipc_handle[64]; /* IFD_KVSEG_CUDA_IPC */
} kv_dev_t;

typedef struct {
    int64_t refs; /* references held (derived) */
} kv_worker_t;

typedef struct {
    uint64_t magic;
    uint32_t version;
    uint32_t hdr_bytes;
    uint64_t meta_bytes;
    uint32_t rec_bytes;
    uint32_t mutex_bytes;
    int32_t n_layers, n_kv_heads, head_dim, dtype, block_size, n_devices, n_workers;
    int32_t n_buckets; /* power of two */
    int64_t n_blocks;  /* per device */
    int64_t n_total;
    uint64_t fingerprint;
    uint64_t block_bytes;
    uint64_t segment_bytes;
    uint64_t off_rec, off_tokens, off_ledger, off_buckets, off_workers;
    union {
        pthread_mutex_t m;
        char pad[64];
    } lock;
    uint64_t tick;     /* LRU clock */
    int32_t hash_bits; /* test hook: 0, or how many hash bits to keep */
    int32_t pad2;
    uint64_t ctr[KV_C_COUNT];
    kv_dev_t dev[IFD_KVPOOL_MAX_DEVICES];
    uint64_t tier[IFD_KVTIER_COUNT]; /* lower tiers' counters (kvpool.h): atomics, no lock */
} kv_hdr_t;

typedef struct {
    int32_t refcount;  /* derived: Σ ledger */
    uint8_t state;     /* derived: KV_FREE / KV_IN_USE / KV_CACHED */
    uint8_t published; /* truth: tokens/salt/parent/hash are valid */
    uint8_t indexed;   /* truth: in the prefix index (⇒ published) */
    uint8_t keyed;     /* published content: a keyed entry (parent_id holds its key) */
    int32_t next;  /* free list or LRU: next */
    int32_t prev;  /* LRU: previous */
    int32_t hnext; /* bucket chain */
    uint32_t gen;  /* changes whenever the block's content may change */
    /* Published content (valid while `published`). Block identities are
     * (generation << 32 | block id), written in one store; KV_ROOT_ID is
     * "no parent" and KV_NO_ID "none". */
    uint64_t parent_id;     /* the exact block this one follows, as indexed; keyed: the key */
    uint64_t own_parent_id; /* the parent its publisher named */
    uint64_t dup_id;        /* an indexed equal block at publish time */
    uint64_t tick;          /* last use (LRU order, rebuilt from it on repair) */
    uint64_t salt;
    ifd_kvhash_t hash;
    ifd_kvhash_t parent; /* the parent's hash (hash = H(parent, salt, tokens)) */
} kv_rec_t;

struct ifd_kvpool {
    int meta_fd;
    size_t meta_bytes;
    kv_hdr_t *h;
    kv_rec_t *rec;
    int32_t *tokens;
    uint32_t *ledger;
    int32_t *buckets;
    kv_worker_t *workers;
    int bs;
    int32_t n_total;
    int32_t n_blocks;
    int n_workers;
    int n_devices;
    uint64_t block_bytes;
    uint64_t region_bytes; /* n_blocks * block_bytes: one layer's K (or V) region */
    uint64_t segment_bytes;
    int data_fd[IFD_KVPOOL_MAX_DEVICES];
    void *data[IFD_KVPOOL_MAX_DEVICES];            /* mapped base, or NULL */
    size_t data_map_bytes[IFD_KVPOOL_MAX_DEVICES]; /* HOST: munmap length */
    const ifd_kvseg_provider_t *prov[IFD_KVPOOL_MAX_DEVICES];
    void *prov_priv[IFD_KVPOOL_MAX_DEVICES];
    long crash_countdown; /* test hook: SIGKILL self at the n-th crash point */
    char *hold_path;      /* test hook ($INFERD_TEST_POOL_LOCK_HOLD), or NULL */
};

/* Test hook (ifd__kvpool_set_crash_point): dies between two stores. */
#define KV_CRASH_POINT(p)                                                                          \
    do {                                                                                           \
        if ((p)->crash_countdown > 0 && --(p)->crash_countdown == 0)                               \
            raise(SIGKILL);                                                                        \
    } while (0)

#define KV_STORE(ptr, val) __atomic_store_n((ptr), (val), __ATOMIC_RELEASE)

static inline uint32_t *kv_ledger(const ifd_kvpool_t *p, int w, int32_t b)
{
    return &p->ledger[(size_t)w * (size_t)p->n_total + (size_t)b];
}

static inline int32_t *kv_tokens(const ifd_kvpool_t *p, int32_t b)
{
    return &p->tokens[(size_t)b * (size_t)p->bs];
}

static inline kv_dev_t *kv_dev_of(const ifd_kvpool_t *p, int32_t b)
{
    return &p->h->dev[b / p->n_blocks];
}

/* Helpers defined in kvpool.c. The lock functions repair on EOWNERDEAD;
 * the list functions need the lock held. */
void ifd__kv_lock(ifd_kvpool_t *p);
/* Test hook, kvpool_check.c: with the lock held, stops this process for good
 * when the file p->hold_path exists (see ifd_kvpool_attach in kvpool.h). */
void ifd__kv_test_hold(ifd_kvpool_t *p);
void ifd__kv_unlock(ifd_kvpool_t *p);
ifd_kvhash_t ifd__kv_hash(const ifd_kvpool_t *p, const ifd_kvhash_t *parent, uint64_t salt,
                          const int32_t *tokens);
void ifd__kv_free_push(ifd_kvpool_t *p, int32_t b);
void ifd__kv_lru_remove(ifd_kvpool_t *p, int32_t b);
void ifd__kv_unindex(ifd_kvpool_t *p, int32_t b);

#endif
