/*
 * image_cache.h — the worker's cache of image embeddings (docs/vision.md):
 * the vision tower's output rows of a picture, keyed by the router's 128-bit
 * content hash (proto/wire.h, ifd_wire_image_t), so a picture sent again (the
 * next turn of a chat, a resumed request, the same image twice in a prompt)
 * is not encoded again. Bounded in bytes (the rows' floats; the entries'
 * bookkeeping is small beside them) and evicted least recently used first;
 * an entry larger than the bound is not kept.
 *
 * Ownership: the cache owns copies of the rows. A pointer from
 * ifd_image_cache_get stays valid until the next put or destroy (which may
 * evict it): copy the rows before putting others. Threading: one thread.
 */
#ifndef IFD_IMAGE_CACHE_H
#define IFD_IMAGE_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ifd_image_cache ifd_image_cache_t;

typedef struct {
    uint64_t hits, misses; /* ifd_image_cache_get's outcomes */
    uint64_t entries, bytes;
    uint64_t evictions;
} ifd_image_cache_stats_t;

/* A cache of at most max_bytes of rows (0: a cache that keeps nothing).
 * 0 or IFD_ENOMEM. */
int ifd_image_cache_create(ifd_image_cache_t **out, uint64_t max_bytes);
void ifd_image_cache_destroy(ifd_image_cache_t *c); /* NULL is a no-op */

/* The rows stored under hash (n_floats of them, checked: another count is a
 * miss), now the most recently used; NULL (a miss) when absent. Counts a hit
 * or a miss. */
const float *ifd_image_cache_get(ifd_image_cache_t *c, const uint64_t hash[2], size_t n_floats);

/* Stores a copy of rows[0 .. n_floats) under hash (replacing what was
 * there), evicting the least recently used entries to stay within the
 * bound. 0; 0 without storing when the entry alone exceeds the bound;
 * IFD_ENOMEM (the cache unchanged but for evictions). */
int ifd_image_cache_put(ifd_image_cache_t *c, const uint64_t hash[2], const float *rows,
                        size_t n_floats);

void ifd_image_cache_stats(const ifd_image_cache_t *c, ifd_image_cache_stats_t *out);

#endif
