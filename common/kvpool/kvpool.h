/*
 * kvpool.h — the shared-memory paged KV block pool with a prefix cache.
 *
 * The router creates the pool (ifd_kvpool_create) and keeps its file
 * descriptors for the daemon's lifetime; every worker maps it
 * (ifd_kvpool_attach) from those fds, received over its socketpair with
 * SCM_RIGHTS (common/fdpass.h). A pool is:
 *
 *   - one metadata segment (a memfd): geometry, model fingerprint, a robust
 *     process-shared mutex, per-block records, a per-worker reference ledger,
 *     the prefix index, one free list and one LRU per device, counters.
 *     It holds no pointers: only fixed-width integers and int32 indices.
 *   - one data segment per device holding the K/V data. Device d holds the
 *     global block ids [d * n_blocks, (d + 1) * n_blocks) (n_blocks = blocks
 *     per device); with one device the global and local ids are the same.
 *     A host segment is a memfd (optionally on hugepages); a CUDA segment is
 *     device memory made and mapped by a segment provider (below).
 *
 * Data layout of a segment (the model runtime and the kernels rely on it):
 *
 *   [layer][K | V][local block][kv_head][token_in_block][head_dim]
 *
 * so for each layer the K region and the V region are contiguous arrays of
 * blocks: block b (local index) of layer l's K region starts at
 * ifd_kvpool_layer_k(pool, dev, l) + b * block_bytes, with 64-bit offsets.
 * The kernels' ifd_kv_layer_t {k, v, dtype, block_size, n_kv_heads, head_dim}
 * is filled from ifd_kvpool_layer_k/_v and ifd_kvpool_geometry.
 *
 * Blocks and references. Every reference is taken for a worker slot
 * (0 ≤ worker < n_workers, assigned by the router; the router itself may use
 * a slot too). The ledger counts, per worker and block, the references that
 * worker holds; a block's refcount is the sum over the ledger. A block is
 * FREE (no refs, not cached), IN USE (refs > 0) or CACHED (no refs, in the
 * prefix index and in its device's LRU). A cached block is evicted only when
 * an allocation on its device finds no free block; a held block never is.
 *
 * Prefix cache. A full block is published under a 128-bit XXH3 chain hash of
 * (parent block's hash, salt, the block's block_size token ids). The record
 * also stores the token ids, the salt and the identity (id + generation) of
 * its parent block, and a lookup accepts block i only when its tokens and
 * salt are equal and its parent is exactly the block it accepted for i - 1.
 * So a hash collision (even a full 128-bit one, even a crafted one) can only
 * cost a cache miss, never return another sequence's KV: the hash is just
 * the index key. The salt is an extra key (adapter, tenant, ...): blocks
 * published under different salts never match each other.
 *
 * Crash safety. One robust process-shared mutex guards every operation that
 * changes the metadata. The per-block ledger counts, the "indexed" flag and
 * the published content are the truth; refcounts, free lists, LRUs, the hash
 * buckets and the block counts are derived and are rebuilt from them when a
 * locker gets EOWNERDEAD (a process died inside the critical section). The
 * references of a dead worker are dropped exactly by ifd_kvpool_reclaim.
 *
 * Errors: 0 or a positive count on success, a negative IFD_E* code (error.h)
 * or -errno otherwise. Mismatches on attach are logged naming the field.
 *
 * Threading: a pool handle may be used from several threads of one process
 * (all metadata changes take the shared mutex); addresses returned stay valid
 * until ifd_kvpool_destroy. Data (K/V) reads and writes are not synchronised
 * by the pool: a block's data belongs to whoever holds it, and a published
 * block is read-only by contract (use ifd_kvpool_cow before writing into a
 * block that is shared or published).
 */
#ifndef IFD_KVPOOL_H
#define IFD_KVPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IFD_KVPOOL_MAGIC              0x4c4f4f5056584649ULL /* "IFXVPOOL" little-endian */
#define IFD_KVPOOL_VERSION            5                     /* 5: the host tier's counters */
#define IFD_KVPOOL_MAX_DEVICES        16
#define IFD_KVPOOL_MAX_WORKERS        256
#define IFD_KVPOOL_MAX_BLOCK_SIZE     256
#define IFD_KVPOOL_DEFAULT_BLOCK_SIZE 16
#define IFD_KVPOOL_DEFAULT_WORKERS    16

/* Element type of K/V. The values are those of ifd_dtype_t in
 * kernels/cpu/cpu_kernels.h (IFD_DTYPE_F32/F16/BF16/Q8_0/Q4_0/FP8), which common/
 * may not include: the two enums, and ifd_kvpool_row_bytes with the kernels'
 * ifd_kv_row_bytes, must stay equal (test_cpu_attention pins both). Q8_0 and
 * Q4_0 are blocks of 32 values with one f16 scale, FP8 rows of e4m3 codes
 * with one f32 scale per row (docs/kvpool.md, "Quantized K/V"); the three
 * need head_dim a multiple of 32. Which ones a GPU reads: ifd_kv_dtype_gpu. */
typedef enum {
    IFD_KV_F32 = 0,
    IFD_KV_F16 = 1,
    IFD_KV_BF16 = 2,
    IFD_KV_Q8_0 = 3,
    IFD_KV_Q4_0 = 4,
    IFD_KV_FP8 = 5,
} ifd_kv_dtype_t;

/* "f32", "f16", "bf16", "q8_0", "q4_0" or "fp8" (the kv_dtype setting) →
 * *out. 0 or IFD_EINVAL. */
int ifd_kv_dtype_parse(const char *name, ifd_kv_dtype_t *out);

/* The setting's name of a dtype ("f16", …); "?" for another value. */
const char *ifd_kv_dtype_name(ifd_kv_dtype_t t);

/* True for the types with scales inside the rows (Q8_0, Q4_0, FP8). */
bool ifd_kv_dtype_quantized(ifd_kv_dtype_t t);

/* Whether the CUDA kernels read K/V of this type (F16, BF16, Q8_0, FP8); the
 * CPU ones read all six. */
bool ifd_kv_dtype_gpu(ifd_kv_dtype_t t);

/* Bytes of one token's K (or V) row of one KV head: head_dim · 4 / 2 / 2,
 * Q8_0 head_dim + head_dim/16, Q4_0 head_dim/2 + head_dim/16, FP8 head_dim
 * + 4; 0 for a bad dtype or a head_dim a quantized type cannot hold. */
uint64_t ifd_kvpool_row_bytes(ifd_kv_dtype_t t, int head_dim);

/* Where a device's data segment lives. */
typedef enum {
    IFD_KVSEG_HOST = 0,     /* memfd made by ifd_kvpool_create, mmapped */
    IFD_KVSEG_CUDA_VMM = 1, /* cuMemCreate + POSIX-fd shareable handle */
    IFD_KVSEG_CUDA_IPC = 2, /* cudaMalloc + cudaIpcMemHandle (fallback) */
} ifd_kvseg_kind_t;

/* A 128-bit chain hash. {0, 0} is the root's "parent". */
typedef struct {
    uint64_t lo, hi;
} ifd_kvhash_t;

typedef struct {
    /* geometry */
    int n_layers;
    int n_kv_heads;
    int head_dim;
    ifd_kv_dtype_t dtype;
    int block_size;        /* tokens per block, 1..IFD_KVPOOL_MAX_BLOCK_SIZE; default 16 */
    int64_t n_blocks;      /* blocks per device; 0: as many as bytes_budget allows */
    uint64_t bytes_budget; /* data bytes per device when n_blocks == 0 */
    int n_devices;         /* data segments, 1..IFD_KVPOOL_MAX_DEVICES; default 1 */
    ifd_kvseg_kind_t kind[IFD_KVPOOL_MAX_DEVICES]; /* per device; default HOST */
    int n_workers;        /* ledger slots, 1..IFD_KVPOOL_MAX_WORKERS; default 16 */
    uint64_t fingerprint; /* model identity; attach refuses another one */
    bool hugepages;       /* host segments: try MFD_HUGETLB memfds, else THP madvise */
} ifd_kvpool_params_t;

/* Defaults: block_size 16, n_devices 1 (HOST), n_workers 16, the rest 0. */
ifd_kvpool_params_t ifd_kvpool_default_params(void);

/* Bytes of one block in one layer's K (or V) region:
 * n_kv_heads * block_size * ifd_kvpool_row_bytes(dtype, head_dim). */
uint64_t ifd_kvpool_block_bytes(const ifd_kvpool_params_t *p);

typedef struct ifd_kvpool ifd_kvpool_t;

/*
 * Creates a pool: the metadata memfd and, for every HOST device, its data
 * memfd (zero-filled). CUDA devices start unbound: the worker that owns the
 * device binds them (ifd_kvpool_bind_segment). Returns 0 with *out set, or
 * IFD_EINVAL (bad geometry, logged), IFD_EOVERFLOW, -errno (memfd_create,
 * ftruncate, mmap). The pool owns its fds (close-on-exec: hand them to other
 * processes with ifd_fdpass_send, not by inheritance across exec) and closes
 * them on destroy.
 */
int ifd_kvpool_create(const ifd_kvpool_params_t *p, ifd_kvpool_t **out);

/*
 * Maps an existing pool in this process. meta_fd is the metadata segment;
 * data_fds[d] (n_data_fds entries, may be NULL when 0) the data segment fd of
 * device d, or -1 (a CUDA segment not bound yet / an IPC segment, or a
 * device this process does not map). HOST segments given here are mapped
 * now; others wait for ifd_kvpool_bind_segment. The fds are dup()ed: the
 * caller keeps its own.
 * `expect` (may be NULL) gives the geometry and fingerprint this process
 * needs: n_layers, n_kv_heads, head_dim, dtype, block_size and fingerprint
 * must be equal (n_blocks, bytes_budget, n_devices, n_workers, kind are not
 * compared when 0/default). Fails with IFD_EFORMAT (bad magic or sizes),
 * IFD_EVERSION, IFD_EMISMATCH (logged, naming the field), -errno.
 */
int ifd_kvpool_attach(int meta_fd, const int *data_fds, int n_data_fds,
                      const ifd_kvpool_params_t *expect, ifd_kvpool_t **out);

/* Unmaps and closes everything of this handle. References taken through
 * it stay in the ledger (release them, or reclaim the worker). NULL is ok. */
void ifd_kvpool_destroy(ifd_kvpool_t *pool);

/* The pool's geometry as stored in the metadata (n_blocks = per device). */
void ifd_kvpool_geometry(const ifd_kvpool_t *pool, ifd_kvpool_params_t *out);

/* The metadata fd and device d's data fd (-1 when none) owned by the
 * handle; valid until destroy. Send them with ifd_fdpass_send. */
int ifd_kvpool_meta_fd(const ifd_kvpool_t *pool);
int ifd_kvpool_data_fd(const ifd_kvpool_t *pool, int dev);

/* Total blocks (n_devices * n_blocks); device and local index of block b. */
int32_t ifd_kvpool_n_blocks(const ifd_kvpool_t *pool);
int ifd_kvpool_block_device(const ifd_kvpool_t *pool, int32_t block);
int32_t ifd_kvpool_block_local(const ifd_kvpool_t *pool, int32_t block);

/* ---- addresses (no lock; valid until destroy) ------------------------------ */

/* Base of layer l's K / V region on device dev in this process (a host or
 * a CUDA device address), or NULL when the segment is not mapped here.
 * Block b (local index) starts at base + b * block_bytes. */
void *ifd_kvpool_layer_k(const ifd_kvpool_t *pool, int dev, int layer);
void *ifd_kvpool_layer_v(const ifd_kvpool_t *pool, int dev, int layer);

/* Address of global block b in layer l, K (v == false) or V; NULL when its
 * device's segment is not mapped here or an argument is out of range. */
void *ifd_kvpool_block_ptr(const ifd_kvpool_t *pool, int32_t block, int layer, bool v);

/* ---- blocks ---------------------------------------------------------------- */

/*
 * Allocates n blocks on device dev, each with one reference for `worker`,
 * into out[0..n-1] — all or nothing. Takes free blocks first, then evicts
 * the least recently used cached blocks of that device. Returns 0,
 * IFD_ENOBLOCKS (not enough even after eviction; nothing changed),
 * IFD_EINVAL. The data of a new block is not cleared.
 */
int ifd_kvpool_alloc(ifd_kvpool_t *pool, int worker, int dev, int n, int32_t *out);

/* Adds one reference for `worker` to each of blocks[0..n-1] (a block may
 * appear several times). Each must be in use or cached (a cached block
 * leaves the LRU). All or nothing: IFD_EINVAL (a free block or a bad id)
 * changes nothing. */
int ifd_kvpool_ref(ifd_kvpool_t *pool, int worker, const int32_t *blocks, int n);

/* Drops one reference of `worker` from each of blocks[0..n-1], processing
 * them from the last to the first so that a sequence's tail is evicted
 * before its head. A block whose refcount reaches 0 becomes CACHED when it
 * is published (and no equal block is indexed), else FREE. All or nothing:
 * IFD_EINVAL when `worker` does not hold enough references (a caller bug:
 * logged, nothing changed — not an abort, because the router must survive a
 * buggy worker). ifd_kvpool_free is the same call. */
int ifd_kvpool_unref(ifd_kvpool_t *pool, int worker, const int32_t *blocks, int n);
int ifd_kvpool_free(ifd_kvpool_t *pool, int worker, const int32_t *blocks, int n);

/*
 * Copy-on-write before `worker` writes into *block. When the worker holds
 * the only reference and the block is not published, returns 0 and leaves
 * *block. Otherwise allocates a block on the same device (may evict),
 * copies every layer's K and V of the old block into it (memcpy for HOST,
 * the provider's copy for CUDA), drops the worker's reference to the old
 * block, stores the new id in *block and returns 1. IFD_ENOBLOCKS, IFD_EINVAL
 * (worker holds no reference), IFD_ENODEV (segment not mapped here).
 */
int ifd_kvpool_cow(ifd_kvpool_t *pool, int worker, int32_t *block);

/* References `worker` holds on block b (0 when none; -1 on a bad id). */
int ifd_kvpool_refs_of(ifd_kvpool_t *pool, int worker, int32_t block);

/* ---- prefix cache ---------------------------------------------------------- */

/* The chain hash of one full block: XXH3-128 of (parent.lo, parent.hi,
 * salt, tokens[0..block_size-1]) as little-endian 64/64/64/32-bit words.
 * parent NULL means the root ({0, 0}). Pure; thread-safe. */
ifd_kvhash_t ifd_kvpool_hash_block(const ifd_kvhash_t *parent, uint64_t salt, const int32_t *tokens,
                                   int block_size);

/*
 * Publishes block `block` (held by `worker`, full, not yet published) as the
 * cache entry for tokens[0..block_size-1] following block `parent` — the
 * block holding the sequence's previous block_size tokens, published and
 * held by `worker` — or -1 for the first block of a sequence, under `salt`.
 * Stores the block's chain hash into *out_hash (may be NULL).
 * Returns 0 when the block entered the index, 1 when an equal block (same
 * tokens, salt and parent) was already indexed: this one is then published
 * (later blocks may name it as their parent) but stays out of the index
 * until it is the last one of its kind. IFD_EINVAL: a bad id, block not
 * held by worker or already published, parent not published or not held.
 * The block's data must be final: published blocks are read-only.
 */
int ifd_kvpool_publish(ifd_kvpool_t *pool, int worker, int32_t block, int32_t parent, uint64_t salt,
                       const int32_t *tokens, ifd_kvhash_t *out_hash);

/*
 * Withdraws block `block` (held by `worker`) from the prefix cache: it leaves
 * the index and is no longer published, so no later lookup finds it nor any
 * block published after it (their chain names it as parent), and when its
 * last reference goes it becomes FREE. For a block whose data turned out to
 * be wrong after it was published (a tier hit whose upload failed). Holders
 * keep their references and the bytes. Returns 1 when it was published, 0
 * when it was not (nothing changed), IFD_EINVAL: a bad id or a block the
 * worker does not hold.
 */
int ifd_kvpool_unpublish(ifd_kvpool_t *pool, int worker, int32_t block);

/*
 * Looks up the longest run of cached full blocks that starts the sequence
 * tokens[0..n_tokens-1] under `salt` (only n_tokens / block_size full blocks
 * count), takes one reference for `worker` on each and stores them into
 * out_blocks[0..ret-1] (at most max_blocks) and their hashes into
 * out_hashes (may be NULL). Returns the number of blocks (≥ 0) or
 * IFD_EINVAL. Blocks may live on any device (ifd_kvpool_block_device).
 * Note: a worker that needs logits of the last prompt token should look up
 * at most n_tokens - 1 tokens, so at least one token is recomputed.
 */
int ifd_kvpool_lookup(ifd_kvpool_t *pool, int worker, uint64_t salt, const int32_t *tokens,
                      int n_tokens, int32_t *out_blocks, int max_blocks, ifd_kvhash_t *out_hashes);

/* Like lookup, but takes no references and changes no LRU order or stats:
 * for the router's routing decision. out_blocks may be NULL. */
int ifd_kvpool_probe(ifd_kvpool_t *pool, uint64_t salt, const int32_t *tokens, int n_tokens,
                     int32_t *out_blocks, int max_blocks);

/* ---- keyed entries: a second pool's twins ------------------------------------ */

/*
 * A model whose layers live in two pools (docs/models.md, local layers) keeps,
 * for block i of a sequence, a twin in the second pool. A chained entry there
 * would be found only through its twins before it, from block 0, which the
 * second pool may have released or evicted; a keyed entry is found on its own,
 * under the identity of its twin in the first pool (the "key"). That identity
 * is exact for the whole prefix: the first pool accepted its block only after
 * every block before it, and a block's key changes whenever the block is
 * reused. So a keyed lookup returns a block only when it was published, for
 * these tokens and salt, under the very block the caller holds in the first
 * pool (a hash collision still costs only a miss).
 */

/* The key of block `block` for keyed entries in another pool: its identity
 * (id and generation), or that of the indexed equal block it duplicates
 * (what ifd_kvpool_lookup returns for this prefix). The block must be
 * published here (chained); the caller should hold it, else the key may name
 * a block that is already gone (it then matches nothing). 0 with *out_key
 * set, or IFD_EINVAL. */
int ifd_kvpool_block_key(ifd_kvpool_t *pool, int32_t block, uint64_t *out_key);

/*
 * Publishes `block` (held by `worker`, full, not yet published) as the keyed
 * entry for tokens[0..block_size-1] under `salt` and `key` (another pool's
 * ifd_kvpool_block_key of the block it is the twin of). It names no parent in
 * this pool and cannot be one (ifd_kvpool_publish refuses it); ifd_kvpool_lookup
 * never returns it. Returns 0 when indexed, 1 when an equal entry (same key,
 * tokens and salt) was indexed already (this one then waits out of the index,
 * as publish's duplicates do), IFD_EINVAL. The data must be final.
 */
int ifd_kvpool_publish_keyed(ifd_kvpool_t *pool, int worker, int32_t block, uint64_t key,
                             uint64_t salt, const int32_t *tokens);

/*
 * Looks up n keyed entries at once: entry j under keys[j], salt and the
 * tokens tokens[j * block_size .. (j + 1) * block_size - 1]. A found entry
 * gets one reference for `worker` and its id in out_blocks[j]; a missing one
 * -1 (a key of UINT64_MAX matches nothing: for a twin without one).
 * Returns how many were found (≥ 0) or IFD_EINVAL. Counts one lookup
 * and its hits and misses in the stats. probe_keyed: the same without
 * references or stats (the router's).
 */
int ifd_kvpool_lookup_keyed(ifd_kvpool_t *pool, int worker, uint64_t salt, const int32_t *tokens,
                            const uint64_t *keys, int n, int32_t *out_blocks);
int ifd_kvpool_probe_keyed(ifd_kvpool_t *pool, uint64_t salt, const int32_t *tokens,
                           const uint64_t *keys, int n, int32_t *out_blocks);

/*
 * The usable length of a prefix hit over two pools: `blocks[0..k)` is a run
 * of `pool`'s (from ifd_kvpool_lookup or _probe), `lpool` holds the keyed
 * twins of a model's sliding-window layers (window `window` tokens, the same
 * block size). A hit of k' blocks needs only the twins the first recomputed
 * query (at position k' * bs) reads: blocks lo(k') = max(0, k' * bs - window
 * + 1) / bs .. k' - 1, on device dev. Looks them up by their twins' keys for
 * k' = k; where one is missing the hit ends below it (k' = that block) and
 * the shorter hit's window is looked up in turn, down to 0. Returns k' and
 * stores lo(k') into *out_lo (may be NULL); twins[lo(k') .. k') then hold the
 * twins, with one reference each for `worker` (worker -1: a probe, no
 * references, no stats); other entries of twins[0..k) are scratch. keys:
 * [k] scratch. IFD_EINVAL on bad arguments (nothing held). The engine's
 * admission and the router's routing both use it (docs/models.md).
 */
int ifd_kvpool_window_run(ifd_kvpool_t *pool, ifd_kvpool_t *lpool, int worker, int dev, int window,
                          uint64_t salt, const int32_t *tokens, const int32_t *blocks, int k,
                          int32_t *twins, uint64_t *keys, int32_t *out_lo);

/* ---- crash recovery -------------------------------------------------------- */

/* Drops every reference `worker` holds (after that worker died or exited).
 * Returns the number of references dropped (≥ 0) or IFD_EINVAL. */
int ifd_kvpool_reclaim(ifd_kvpool_t *pool, int worker);

/* Drops every cached (unheld) block of device dev from the index and marks
 * its segment unbound: for a CUDA IPC segment whose memory died with the
 * worker that allocated it. Held blocks stay held but leave the index.
 * Returns the number of blocks dropped or a negative error. */
int ifd_kvpool_invalidate_device(ifd_kvpool_t *pool, int dev);

/* Checks every invariant (free + cached + in use = total per device;
 * refcounts = ledger sums; free lists, LRUs and the index agree with the
 * block states; published content hashes correctly). 0, or IFD_EINTERNAL
 * with a description in err. Takes the lock; O(blocks * workers). */
int ifd_kvpool_check(ifd_kvpool_t *pool, char *err, size_t errlen);

/* ---- stats ----------------------------------------------------------------- */

typedef struct {
    int64_t total;           /* blocks, all devices */
    int64_t free;            /* no refs, not cached */
    int64_t in_use;          /* refcount > 0 */
    int64_t cached;          /* no refs, in the index and the LRU (evictable) */
    uint64_t allocs;         /* blocks handed out by alloc (and cow) */
    uint64_t alloc_failures; /* alloc calls answered IFD_ENOBLOCKS */
    uint64_t lookups;        /* lookup calls */
    uint64_t hit_blocks;     /* blocks returned by lookups */
    uint64_t miss_blocks;    /* full blocks looked up but not found */
    uint64_t evictions;
    uint64_t cows;           /* copies made by ifd_kvpool_cow */
    uint64_t reclaims;       /* ifd_kvpool_reclaim calls */
    uint64_t reclaimed_refs; /* references they dropped */
    uint64_t repairs;        /* EOWNERDEAD repairs */
    uint64_t rebuilds;       /* device segments found lost and made afresh (bind_segment) */
} ifd_kvpool_stats_t;

/* A consistent snapshot (takes the lock). 0 or a negative error. */
int ifd_kvpool_stats(ifd_kvpool_t *pool, ifd_kvpool_stats_t *out);

/* Per-device counts (free, in use, cached), same snapshot rules. */
int ifd_kvpool_device_stats(ifd_kvpool_t *pool, int dev, ifd_kvpool_stats_t *out);

/* ---- lower tiers' counters (kvdisk.h) ---------------------------------------- */

/* What the disk tier of every worker did, kept in the metadata segment so
 * the router shows them (/metrics) without a message: each worker's tier
 * adds to the counters and stores the gauges (the tier's size as that
 * worker last measured it). Relaxed atomics, no lock: any thread of any
 * process. */
typedef enum {
    IFD_KVTIER_DISK_BYTES,    /* gauge: bytes of block files in the directory */
    IFD_KVTIER_DISK_FILES,    /* gauge: block files in the directory */
    IFD_KVTIER_DISK_CAPACITY, /* gauge: kv_cache_disk_bytes */
    IFD_KVTIER_QUERY_TOKENS,  /* prompt tokens looked up on disk (past the pool's hit) */
    IFD_KVTIER_HIT_TOKENS,    /* of those, read back from disk */
    IFD_KVTIER_HIT_BLOCKS,    /* blocks read back */
    IFD_KVTIER_MISS_BLOCKS,   /* lookups whose first block had no file */
    IFD_KVTIER_READ_BYTES,    /* file bytes read (hits) */
    IFD_KVTIER_WRITTEN_BYTES, /* file bytes written */
    IFD_KVTIER_WRITES,        /* block files written */
    IFD_KVTIER_DROPPED,       /* blocks not written: the queue was full or writes are off */
    IFD_KVTIER_BAD_FILES,     /* torn, truncated, corrupt or foreign files skipped (deleted) */
    IFD_KVTIER_SLOW_READS,    /* reads cut short by their deadline (the rest recomputed) */
    IFD_KVTIER_EVICTED_FILES, /* files deleted to stay within the size bound */
    /* the host-RAM tier (kvhost.h, GPU workers): gauges are sums over the
     * workers (each adds and takes back its own share) */
    IFD_KVTIER_HOST_BYTES,        /* gauge: data bytes held */
    IFD_KVTIER_HOST_BLOCKS,       /* gauge: blocks held */
    IFD_KVTIER_HOST_CAPACITY,     /* gauge: kv_cache_host_bytes (rounded down to blocks) */
    IFD_KVTIER_HOST_QUERY_TOKENS, /* prompt tokens looked up there (past the pool's hit) */
    IFD_KVTIER_HOST_HIT_TOKENS,   /* of those, copied back to the device */
    IFD_KVTIER_HOST_HIT_BLOCKS,   /* blocks copied back */
    IFD_KVTIER_HOST_MISSES,       /* lookups whose first block was not there */
    IFD_KVTIER_HOST_READ_BYTES,   /* bytes copied back (hits) */
    IFD_KVTIER_HOST_WRITES,       /* blocks copied in from the device */
    IFD_KVTIER_HOST_EVICTED,      /* blocks evicted to stay within the bound */
    IFD_KVTIER_HOST_DROPPED,      /* blocks not kept: no memory or the copy failed */
    IFD_KVTIER_COUNT
} ifd_kvtier_ctr_t;

/* Adds v to counter c / stores v in gauge c. Out-of-range c is ignored. */
void ifd_kvpool_tier_add(ifd_kvpool_t *pool, ifd_kvtier_ctr_t c, uint64_t v);
void ifd_kvpool_tier_set(ifd_kvpool_t *pool, ifd_kvtier_ctr_t c, uint64_t v);
/* Every counter into out[0..IFD_KVTIER_COUNT). */
void ifd_kvpool_tier_get(const ifd_kvpool_t *pool, uint64_t out[IFD_KVTIER_COUNT]);

/* ---- device (CUDA) segments -------------------------------------------------- */

/* What travels between processes for a device segment: an fd (CUDA VMM)
 * or an opaque 64-byte handle (cudaIpcMemHandle_t), plus the size. */
typedef struct {
    ifd_kvseg_kind_t kind;
    int fd;             /* CUDA_VMM: the shareable POSIX fd; else -1 */
    uint8_t handle[64]; /* CUDA_IPC: the IPC handle bytes */
    uint64_t bytes;
} ifd_kvseg_export_t;

/*
 * A provider of device memory, implemented outside common/ (the CUDA one is
 * kernels/cuda/kvseg_cuda.h) so common/ and the router never link CUDA.
 * create: allocate `bytes` on device dev, map it, fill *exp (kind and fd or
 *   handle; the fd then belongs to the pool) and *base; *priv is the
 *   provider's per-mapping state. exp->kind comes in as the kind the pool
 *   asks for (CUDA_IPC: use the fallback); the provider may fall back from
 *   VMM to IPC and says so in exp->kind. import: map an exported segment.
 * release: unmap/free what create/import made. copy: device-to-device copy
 *   of n bytes within one segment (used by cow), synchronous.
 * write / read: host-to-device / device-to-host copies of n bytes,
 *   synchronous (the pool's seal, below).
 * Each returns 0 or a negative IFD_E* code.
 */
typedef struct {
    void *ctx;
    int (*create)(void *ctx, int dev, uint64_t bytes, ifd_kvseg_export_t *exp, void **base,
                  void **priv);
    int (*import)(void *ctx, int dev, const ifd_kvseg_export_t *exp, void **base, void **priv);
    void (*release)(void *ctx, void *base, uint64_t bytes, void *priv);
    int (*copy)(void *ctx, void *dst, const void *src, uint64_t n);
    int (*write)(void *ctx, void *dst_dev, const void *src_host, uint64_t n);
    int (*read)(void *ctx, void *dst_host, const void *src_dev, uint64_t n);
} ifd_kvseg_provider_t;

/* Data bytes of one device segment (2 * n_layers * n_blocks * block_bytes). */
uint64_t ifd_kvpool_segment_bytes(const ifd_kvpool_t *pool);

/*
 * Maps device dev's CUDA segment in this process through `provider` (kept
 * by pointer: it must outlive the pool handle). When the segment is bound
 * already (an fd passed at attach for VMM, or the IPC handle recorded in the
 * metadata) it is imported; otherwise it is created and recorded, and its fd
 * is available from ifd_kvpool_data_fd so the worker can hand it to the
 * router, which keeps the memory alive by holding it (ifd_kvpool_adopt_fd).
 *
 * Lost memory. A device segment carries a seal after its data (64 bytes: a
 * magic and a random token that the metadata records when the segment is
 * made). An import checks it. When the import fails (an IPC segment whose
 * allocator died: IPC memory dies with it; a VMM fd that does not import),
 * the segment exists but this process got no fd for it (its maker died
 * before handing it to the router), or the seal does not match (a driver
 * that freed a VMM allocation although the router held its fd), the memory
 * and every cached block in it are gone, as far as this pool can reach: bind_segment logs it (a
 * warning naming the cause), drops the device's cache as
 * ifd_kvpool_invalidate_device does, makes a fresh segment and counts a
 * rebuild (stats.rebuilds). Held blocks stay held (their holders must be
 * gone: reclaim them); only the data is lost. The caller then has a new fd
 * (VMM) to hand to the router again.
 * Returns 0, IFD_EINVAL (a HOST device), IFD_EEXIST (mapped here already),
 * or the provider's error.
 */
int ifd_kvpool_bind_segment(ifd_kvpool_t *pool, int dev, const ifd_kvseg_provider_t *provider);

/* Hands this handle an fd for device dev's segment without mapping it (the
 * router's way of holding a worker's CUDA VMM fd). Takes ownership of fd. */
int ifd_kvpool_adopt_fd(ifd_kvpool_t *pool, int dev, int fd);

/* ---- internal: test hooks (tests/unit/test_kvpool.c) -------------------------- */

/* $INFERD_TEST_POOL_LOCK_HOLD=PATH, read by ifd_kvpool_attach (so by the
 * workers, never by the daemon that creates the pool): each time a handle
 * takes the lock it renames PATH to PATH.held; the one process that
 * succeeds writes its pid to PATH.pid and stays inside the lock until it is
 * killed. A test creates PATH at the moment it wants a worker to stop there
 * (tests/integration/test_daemon_load.py). Unset, it costs nothing.
 * Compiled only with -DINFERD_TEST_HOOKS=ON (test builds: test.sh). */

/* SIGKILLs this process at the n-th crash point (a spot between two stores
 * inside the critical section) reached through this handle; 0 disables. */
void ifd__kvpool_set_crash_point(ifd_kvpool_t *pool, long n);
/* Takes the pool lock, to die holding it (so there is no release). */
void ifd__kvpool_lock(ifd_kvpool_t *pool);
/* Garbles every derived structure (lists, counts, refcounts) as a torn
 * update could; call with the lock held, then die. */
void ifd__kvpool_scramble(ifd_kvpool_t *pool);
/* Keeps only the low `bits` bits of every chain hash (0: all 128), for
 * every process of the pool: makes hash collisions common, to test that
 * they never return wrong blocks. Set before any block is published. */
void ifd__kvpool_weaken_hash(ifd_kvpool_t *pool, int bits);
/* EOWNERDEAD repairs done so far. */
uint64_t ifd__kvpool_repairs(ifd_kvpool_t *pool);

#endif
