/*
 * kvhost.h — the KV pool's host-RAM tier for workers whose pool lives in
 * device memory (GPU workers): copies of published blocks in this
 * process's memory, an LRU bounded by bytes, found again by the disk
 * tier's key (the chained prefix hash, kvdisk.h) and verified by the
 * block's salt and token ids.
 *
 * The tier knows nothing of devices: the engine copies a block's data
 * (every layer's K then V, kvdisk.h's file data layout) into the buffer
 * ifd_kvhost_put returns, and out of the one ifd_kvhost_get returns, with
 * its model adapter's copy ops (engine.h, kv_download / kv_upload).
 *
 * Crash safety: none needed — the tier is per worker process and dies with
 * it (the pool and the disk tier outlive a worker; this tier does not).
 *
 * Ownership: the tier owns its entries' memory; a pointer returned by put
 * or get is valid until the next put or destroy.
 * Errors: create returns IFD_EINVAL / IFD_ENOMEM; put returns NULL when
 * the data does not fit the bound or memory runs out (counted as dropped).
 * Threading: one thread (the engine's). Counters go to the pool's tier
 * counters (kvpool.h, IFD_KVTIER_HOST_*) when a pool is given.
 */
#ifndef IFD_KVHOST_H
#define IFD_KVHOST_H

#include "kvpool/kvpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t max_bytes; /* bound on the entries' data bytes; > 0 */
    size_t data_bytes;  /* one block's data (2 * n_layers * block_bytes); > 0 */
    int32_t block_size; /* tokens per block; > 0 */
    ifd_kvpool_t *pool; /* where the counters go (borrowed), or NULL */
} ifd_kvhost_params_t;

typedef struct ifd_kvhost ifd_kvhost_t;

/* 0 with *out set; IFD_EINVAL (a zero field, a bound below one block),
 * IFD_ENOMEM. */
int ifd_kvhost_create(const ifd_kvhost_params_t *p, ifd_kvhost_t **out);
void ifd_kvhost_destroy(ifd_kvhost_t *h); /* NULL is ok */

/* The buffer (data_bytes) for the block whose chain hash is *hash, salt
 * and tokens[0..block_size) (copied), which the caller fills at once:
 * the entry is the most recently used. An entry already there under the
 * key is replaced. Evicts least recently used entries to stay within
 * max_bytes. NULL: no memory (counted as dropped). */
void *ifd_kvhost_put(ifd_kvhost_t *h, const ifd_kvhash_t *hash, uint64_t salt,
                     const int32_t *tokens);

/* Forgets the entry under *hash (the caller failed to fill a put buffer). */
void ifd_kvhost_forget(ifd_kvhost_t *h, const ifd_kvhash_t *hash);

/* The data of the block under *hash when its salt and tokens equal the
 * caller's (a hash collision is a miss), made the most recently used; NULL
 * when there is none. Counts a hit (block, tokens, bytes) or nothing: the
 * caller counts queries and misses (ifd_kvhost_count_query). */
const void *ifd_kvhost_get(ifd_kvhost_t *h, const ifd_kvhash_t *hash, uint64_t salt,
                           const int32_t *tokens);

/* Counts one lookup of n_tokens past the pool's hit, a miss when none hit. */
void ifd_kvhost_count_query(ifd_kvhost_t *h, int64_t n_tokens, bool missed);

/* One block's data bytes (params data_bytes). */
size_t ifd_kvhost_data_bytes(const ifd_kvhost_t *h);

/* Entries and their data bytes now. */
int64_t ifd_kvhost_blocks(const ifd_kvhost_t *h);
uint64_t ifd_kvhost_bytes(const ifd_kvhost_t *h);

#endif
