/*
 * hash.h — the one hash table of the code base: an open-addressing index
 * (linear probing, power-of-two capacity, load ≤ 1/2) from a 64-bit hash to
 * int32 values, usually indices into an array the caller owns. The table
 * stores no keys: each slot holds the value and 32 bits of its hash, and the
 * caller compares its own keys while walking the candidates of a hash:
 *
 *     uint32_t it = ifd_hash_first(&h, hv);
 *     for (int32_t i; (i = ifd_hash_next(&h, hv, &it)) >= 0;)
 *         if (same_key(&items[i], key))
 *             return i;
 *
 * So one table serves string keys, integer keys and structured keys alike,
 * with the comparison inlined at the call site (no callback per probe).
 * ifd_hash_bytes / ifd_hash_u64 give well-mixed hashes.
 *
 * Not for shared memory: the KV pool's prefix index (common/kvpool/) lives in
 * a segment mapped by several processes and keeps its own bucket chains of
 * block indices.
 *
 * Ownership: the caller embeds the ifd_hash_t (_init/_close). Threading: none;
 * concurrent readers are safe while nobody inserts or removes.
 */
#ifndef IFD_HASH_H
#define IFD_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t tag; /* the low 32 bits of the hash */
    int32_t val;  /* -1: empty */
} ifd_hash_slot_t;

typedef struct {
    ifd_hash_slot_t *slots;
    uint32_t mask; /* capacity - 1; 0 with slots NULL before the first insert */
    uint32_t count;
} ifd_hash_t;

/* Room for n values without growing (n may be 0: the first insert
 * allocates). Returns 0 or IFD_ENOMEM. */
int ifd_hash_init(ifd_hash_t *h, size_t n);
/* Frees the slots; the table is empty (and usable) again. */
void ifd_hash_close(ifd_hash_t *h);
/* Empties the table, keeping its capacity. */
void ifd_hash_clear(ifd_hash_t *h);

/* Adds val (>= 0) under hash; duplicates are the caller's business (look
 * first). Grows by doubling. Returns 0, IFD_ENOMEM (table unchanged) or
 * IFD_EINVAL (val < 0, or 2^30 values). */
int ifd_hash_insert(ifd_hash_t *h, uint64_t hash, int32_t val);
/* Removes the entry (hash, val); returns 0, or IFD_ENOTFOUND. Backward-shift
 * deletion: no tombstones, probe lengths stay short. */
int ifd_hash_remove(ifd_hash_t *h, uint64_t hash, int32_t val);
/* Replaces the value of the entry (hash, old) by new_val (>= 0); 0 or
 * IFD_ENOTFOUND. */
int ifd_hash_replace(ifd_hash_t *h, uint64_t hash, int32_t old, int32_t new_val);

/* XXH3 of the bytes. */
uint64_t ifd_hash_bytes(const void *p, size_t n);

/* XXH3's 128-bit hash of the bytes, as two halves (an image's content hash
 * on the wire: proto/wire.h, ifd_wire_image_t). */
void ifd_hash_bytes128(const void *p, size_t n, uint64_t *lo, uint64_t *hi);

/* A 64-bit finalizer (murmur3's): for integer keys. */
static inline uint64_t ifd_hash_u64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* The walk over the values stored under hash (see the top of this file). */
static inline uint32_t ifd_hash_first(const ifd_hash_t *h, uint64_t hash)
{
    return (uint32_t)hash & h->mask;
}

static inline int32_t ifd_hash_next(const ifd_hash_t *h, uint64_t hash, uint32_t *it)
{
    if (!h->slots)
        return -1;
    for (;;) {
        const ifd_hash_slot_t *s = &h->slots[*it];
        if (s->val < 0)
            return -1;
        *it = (*it + 1) & h->mask;
        if (s->tag == (uint32_t)hash)
            return s->val;
    }
}

#endif
