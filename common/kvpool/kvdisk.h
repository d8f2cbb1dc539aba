/*
 * kvdisk.h — the KV pool's disk tier: published blocks kept as files in a
 * directory, found again by their chained prefix hash, across restarts.
 *
 * One tier per worker process, over its pool handle (a HOST segment: the
 * tier reads and writes the pool's memory in place; a device segment, with
 * params staged: through host copies the engine makes). Every block the engine
 * publishes is offered (ifd_kvdisk_offer): the tier pins it (one pool
 * reference of the worker's slot) and a thread of its own writes it out and
 * unpins it, so the step never waits on the disk. Blocks are written when
 * published, not when evicted: a block evicted later is already on disk,
 * and a router that dies (or a daemon that stops) loses nothing that was
 * published a moment before. On admission the engine asks how many of the
 * blocks past its pool hit have a file (ifd_kvdisk_probe), allocates fresh
 * pool blocks for them and has the thread read them in (ifd_kvdisk_load_*);
 * the reads overlap the steps of the other sequences, and the engine cuts a
 * read short at a deadline (what recomputing would cost) and recomputes the
 * rest.
 *
 * Files. DIR/<fingerprint>-<hash>.kvb (16 and 32 hex digits): a header
 * (magic, version, block size, fingerprint, salt, the block's chain hash
 * and its parent's, data size, XXH3-64 of the data, XXH3-64 of the header
 * and tokens), the block's token ids, then its data — every layer's K then
 * V block, as the pool lays them out. The fingerprint (ifd_kvdisk_fingerprint)
 * covers the model's identity and every setting that changes the K/V bytes,
 * so a file made by another model or setting is never read: its name
 * differs, and a file put in place under our name is refused by its header.
 * A file is accepted only when its size, header, fingerprint, hash, parent
 * hash, salt, tokens and both checksums are what the reader expects; any
 * other file read is deleted and counted (IFD_KVTIER_BAD_FILES), never
 * given to the model. The chain hash is XXH3-128 over the whole prefix
 * (ifd_kvpool_hash_block, computed here from the tokens, never the pool's
 * own possibly weakened one).
 *
 * Crash safety. A file is written under a temporary name (.tmp.<pid>.<n>)
 * and renamed into place once complete, so a reader sees a whole file or
 * none. No fsync: after a power loss a renamed file may be torn, and the
 * checksums then turn it into a deleted miss (docs/reliability.md). Stale
 * temporary files (a writer that died) older than 10 minutes are deleted
 * by the next collection.
 *
 * Size. The files' total stays near max_bytes: the tier counts what it
 * writes and, past the bound (or every 64 writes), rescans the directory
 * and deletes the least recently used files (by mtime: a read touches its
 * file) down to 90% of the bound. Between two scans another process's
 * writes are not counted: the directory may exceed the bound by what other
 * workers wrote since.
 *
 * Concurrency. Several workers and daemons may share a directory: writes
 * are renames of complete files (equal content under an equal name), a
 * reader keeps its open file even when another process deletes it, and a
 * collection takes an exclusive flock(2) on DIR/.lock (a process finding it
 * taken skips its collection).
 *
 * Degrading. A directory that cannot be created or opened makes create
 * fail (the caller runs without a tier and says so once); a write that
 * finds the disk read-only, full or forbidden (EROFS, ENOSPC, EDQUOT,
 * EACCES, EPERM) turns writing off with one warning; reads go on. Bad
 * files are warned about at most once per bad_log_s (a disk full of them
 * must not flood the log): the next warning says how many were deleted
 * without one; the counter has them all.
 *
 * Threading: every function is for the engine's thread (one thread per
 * tier); the tier's own thread does the I/O. Counters go to the pool's
 * tier counters (kvpool.h, ifd_kvpool_tier_*).
 */
#ifndef IFD_KVDISK_H
#define IFD_KVDISK_H

#include "kvpool/kvpool.h"

#include <stddef.h>
#include <stdint.h>

#define IFD_KVDISK_MAGIC   0x4b4c42564b444649ULL /* "IFDKVBLK" little-endian */
/* 2: Q8_0/Q4_0 K rows are kept in the Walsh-Hadamard basis (kernels/cpu/kv_rot.h);
 * a version-1 file of those types holds unrotated K, so it is not read (the version
 * is in the header and in every fingerprint, hence in the file names). */
#define IFD_KVDISK_VERSION 2

typedef struct {
    const char *dir;      /* created (0700) when missing; copied */
    uint64_t max_bytes;   /* bound on the files' total; > 0 */
    uint64_t fingerprint; /* ifd_kvdisk_fingerprint */
    int worker;           /* the pool slot whose references pin queued blocks */
    int device;           /* the pool device whose blocks this tier reads and writes */
    /* The model's local-layer pool (sliding-window layers, engine.h
     * local_pool), or NULL: then every file also holds the block's local
     * twin (written with it at publish, read with it). Same block size and
     * device, host memory; kept by pointer: it must outlive the tier. */
    ifd_kvpool_t *local_pool;
    int max_pending;      /* blocks queued for writing at most (each pinned); 0: 64 */
    double bad_log_s;     /* a bad file's warning at most once per bad_log_s seconds (the
                           * next one counts those left out); <= 0: 10 */
    /* The pool's segment is device memory (a GPU worker): the tier never
     * touches the pool. Blocks come as host copies (ifd_kvdisk_offer_data,
     * copied into the queue) and loads read into host buffers
     * (ifd_kvdisk_load_start_staged); the engine copies between those and
     * the device (engine.h, kv_download / kv_upload). The files are the
     * same: with a local pool (then device memory too) a block's data is
     * its global layers' K and V, then its local twin's, as a host pool's
     * tier lays them out. */
    bool staged;
} ifd_kvdisk_params_t;

typedef struct ifd_kvdisk ifd_kvdisk_t;
typedef struct ifd_kvdisk_load ifd_kvdisk_load_t;

/* Defaults: max_pending 64, bad_log_s 10, the rest 0. */
ifd_kvdisk_params_t ifd_kvdisk_default_params(void);

/* The fingerprint of a tier: XXH3-64 over the pool's geometry (layers, KV
 * heads, head_dim, KV dtype, block size), the pool's model fingerprint
 * (kvpool.h: the weights file's identity) and `identity`'s n bytes (the
 * caller's settings that change the K/V values: backend, weights dtype,
 * RoPE settings, …). Pure. */
uint64_t ifd_kvdisk_fingerprint(const ifd_kvpool_t *pool, const void *identity, size_t n);

/* Creates the tier over `pool` (kept by pointer: it must outlive the tier)
 * and starts its thread; scans the directory once (size, stale temporary
 * files). Returns 0 with *out set; IFD_EINVAL (bad params), IFD_ENOTSUP
 * (the device's segment is not host memory mapped here), -errno (mkdir,
 * open, pthread_create; logged naming the call and the path). */
int ifd_kvdisk_create(const ifd_kvdisk_params_t *p, ifd_kvpool_t *pool, ifd_kvdisk_t **out);

/* Writes what is queued (blocks already published deserve their file: a
 * stopping daemon keeps them), stops the thread and frees the tier. Every
 * load must be finished first. NULL is ok. */
void ifd_kvdisk_destroy(ifd_kvdisk_t *d);

/* The local pool the tier was created with (params local_pool), or NULL. */
ifd_kvpool_t *ifd_kvdisk_local_pool(const ifd_kvdisk_t *d);

/* Offers block `block` (held by the caller, just published: final and
 * read-only) for writing, as the block after the chain hash *parent (the
 * previous blocks' ifd_kvpool_hash_block chain; root {0, 0}) under salt with
 * tokens[0..block_size). With a local pool, lblock is its local twin (held,
 * final), written in the same file; a block offered without one (-1) is
 * dropped. Without, lblock is ignored. Never blocks on I/O: pins the
 * block(s) and queues them, or drops them (queue full, writing off:
 * counted). Stores the block's chain hash into *out_hash (may be parent),
 * the next block's parent. */
void ifd_kvdisk_offer(ifd_kvdisk_t *d, int32_t block, int32_t lblock, const ifd_kvhash_t *parent,
                      uint64_t salt, const int32_t *tokens, ifd_kvhash_t *out_hash);

/* Staged tiers (params staged): offers a block as data — data_bytes
 * (ifd_kvdisk_data_bytes), every layer's K then V block, then with a
 * local pool every local layer's K then V block of its twin — copied into
 * the queue, so the caller may reuse `data` at once; otherwise as
 * ifd_kvdisk_offer (dropped and counted when the queue is full, writing is
 * off, memory is short or the tier is not staged). */
void ifd_kvdisk_offer_data(ifd_kvdisk_t *d, const void *data, const ifd_kvhash_t *parent,
                           uint64_t salt, const int32_t *tokens, ifd_kvhash_t *out_hash);

/* Whether the tier is staged (params staged), and one block's data bytes
 * (its file's data: every layer's K and V, and the local twin's). */
bool ifd_kvdisk_staged(const ifd_kvdisk_t *d);
uint64_t ifd_kvdisk_data_bytes(const ifd_kvdisk_t *d);

/* How many consecutive blocks after *parent (tokens[0..n * block_size))
 * have a file here, at most n: one faccessat(2) each, no read. Counts the
 * query (tokens asked) and, at 0, a miss. */
int ifd_kvdisk_probe(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, uint64_t salt,
                     const int32_t *tokens, int n);

/* Starts reading the n blocks after *parent (tokens[0..n * block_size),
 * copied) into blocks[0..n) and, with a local pool, their twins into
 * lblocks[0..n) of it (both copied; held by the caller, which must not
 * touch their data before ifd_kvdisk_load_finish; lblocks NULL without a
 * local pool). 0 with *out set, IFD_EINVAL (a local pool, no lblocks; a
 * staged tier), IFD_ENOMEM. */
int ifd_kvdisk_load_start(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, uint64_t salt,
                          const int32_t *tokens, int n, const int32_t *blocks,
                          const int32_t *lblocks, ifd_kvdisk_load_t **out);

/* The same for a staged tier: into bufs[0..n) (host memory, data_bytes
 * each, the pointers copied; the caller must not touch them before
 * ifd_kvdisk_load_finish). IFD_EINVAL when the tier is not staged. */
int ifd_kvdisk_load_start_staged(ifd_kvdisk_t *d, const ifd_kvhash_t *parent, uint64_t salt,
                                 const int32_t *tokens, int n, void *const *bufs,
                                 ifd_kvdisk_load_t **out);

/* Whether the load is done (every block read, or stopped at the first one
 * that was missing or bad), waiting up to wait_ms for it (0: just look). */
bool ifd_kvdisk_load_wait(ifd_kvdisk_load_t *l, double wait_ms);

/* Ends a load: stops the thread's work on it (waiting for the block being
 * read, if any), frees it and returns how many leading blocks hold
 * verified data (0..n). `cut`: the caller's deadline ended it early
 * (counted as a slow read when blocks were left). */
int ifd_kvdisk_load_finish(ifd_kvdisk_load_t *l, bool cut);

/* The file name of a block (for tests): "<fingerprint>-<hash>.kvb" into
 * out (≥ 56 bytes). */
void ifd_kvdisk_file_name(uint64_t fingerprint, const ifd_kvhash_t *hash, char *out, size_t n);

/* Blocks queued for writing now (tests wait for 0). */
int ifd_kvdisk_pending(ifd_kvdisk_t *d);

#endif
