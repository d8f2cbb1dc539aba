/*
 * image_cache.c — see image_cache.h.
 *
 * Entries live in a growable array (freed slots are reused through a free
 * list threaded through `next`), indexed by common/hash.h's table on the
 * hash's low word and ordered on a doubly linked LRU list of array indices
 * (head: most recent).
 */
#include "image_cache.h"

#include "error.h"
#include "hash.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t key[2];
    float *rows; /* NULL: a free slot */
    size_t n;
    int32_t prev, next; /* the LRU list, or (free) the free list in next */
} ifd__icentry_t;

struct ifd_image_cache {
    uint64_t max_bytes, bytes;
    ifd__icentry_t *e;
    int32_t n_e, cap_e;
    int32_t head, tail, free_list; /* -1: none */
    ifd_hash_t index;
    ifd_image_cache_stats_t st;
};

int ifd_image_cache_create(ifd_image_cache_t **out, uint64_t max_bytes)
{
    ifd_image_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    c->max_bytes = max_bytes;
    c->head = c->tail = c->free_list = -1;
    *out = c;
    return 0;
}

void ifd_image_cache_destroy(ifd_image_cache_t *c)
{
    if (!c)
        return;
    for (int32_t i = 0; i < c->n_e; i++)
        free(c->e[i].rows);
    free(c->e);
    ifd_hash_close(&c->index);
    free(c);
}

static uint64_t ifd__ic_hash(const uint64_t key[2])
{
    return ifd_hash_u64(key[0] ^ ifd_hash_u64(key[1]));
}

static int32_t ifd__ic_find(const ifd_image_cache_t *c, const uint64_t key[2])
{
    const uint64_t hv = ifd__ic_hash(key);
    uint32_t it = ifd_hash_first(&c->index, hv);
    for (int32_t i; (i = ifd_hash_next(&c->index, hv, &it)) >= 0;)
        if (c->e[i].key[0] == key[0] && c->e[i].key[1] == key[1])
            return i;
    return -1;
}

static void ifd__ic_unlink(ifd_image_cache_t *c, int32_t i)
{
    ifd__icentry_t *x = &c->e[i];
    if (x->prev >= 0)
        c->e[x->prev].next = x->next;
    else
        c->head = x->next;
    if (x->next >= 0)
        c->e[x->next].prev = x->prev;
    else
        c->tail = x->prev;
}

static void ifd__ic_push_front(ifd_image_cache_t *c, int32_t i)
{
    c->e[i].prev = -1;
    c->e[i].next = c->head;
    if (c->head >= 0)
        c->e[c->head].prev = i;
    c->head = i;
    if (c->tail < 0)
        c->tail = i;
}

/* Removes entry i and frees its rows; its slot goes to the free list. */
static void ifd__ic_drop(ifd_image_cache_t *c, int32_t i)
{
    ifd__icentry_t *x = &c->e[i];
    ifd__ic_unlink(c, i);
    ifd_hash_remove(&c->index, ifd__ic_hash(x->key), i);
    c->bytes -= x->n * sizeof(float);
    c->st.entries--;
    free(x->rows);
    x->rows = NULL;
    x->next = c->free_list;
    c->free_list = i;
}

const float *ifd_image_cache_get(ifd_image_cache_t *c, const uint64_t hash[2], size_t n_floats)
{
    const int32_t i = ifd__ic_find(c, hash);
    if (i < 0 || c->e[i].n != n_floats) {
        c->st.misses++;
        return NULL;
    }
    c->st.hits++;
    ifd__ic_unlink(c, i);
    ifd__ic_push_front(c, i);
    return c->e[i].rows;
}

/* A slot for a new entry: the free list's first, else a new one at the end. */
static int32_t ifd__ic_slot(ifd_image_cache_t *c)
{
    if (c->free_list >= 0) {
        const int32_t i = c->free_list;
        c->free_list = c->e[i].next;
        return i;
    }
    if (c->n_e == c->cap_e) {
        const int32_t cap = c->cap_e ? 2 * c->cap_e : 16;
        ifd__icentry_t *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e)
            return -1;
        c->e = e;
        c->cap_e = cap;
    }
    c->e[c->n_e].rows = NULL;
    return c->n_e++;
}

int ifd_image_cache_put(ifd_image_cache_t *c, const uint64_t hash[2], const float *rows,
                        size_t n_floats)
{
    const uint64_t bytes = (uint64_t)n_floats * sizeof(float);
    const int32_t old = ifd__ic_find(c, hash);
    if (old >= 0)
        ifd__ic_drop(c, old);
    if (bytes > c->max_bytes || n_floats == 0)
        return 0;
    while (c->bytes + bytes > c->max_bytes && c->tail >= 0) {
        ifd__ic_drop(c, c->tail);
        c->st.evictions++;
    }
    float *copy = malloc(bytes);
    const int32_t i = copy ? ifd__ic_slot(c) : -1;
    if (i < 0) {
        free(copy);
        return IFD_ENOMEM;
    }
    if (ifd_hash_insert(&c->index, ifd__ic_hash(hash), i)) {
        free(copy);
        c->e[i].next = c->free_list;
        c->free_list = i;
        return IFD_ENOMEM;
    }
    memcpy(copy, rows, bytes);
    c->e[i] = (ifd__icentry_t){.key = {hash[0], hash[1]}, .rows = copy, .n = n_floats};
    ifd__ic_push_front(c, i);
    c->bytes += bytes;
    c->st.entries++;
    return 0;
}

void ifd_image_cache_stats(const ifd_image_cache_t *c, ifd_image_cache_stats_t *out)
{
    *out = c->st;
    out->bytes = c->bytes;
}
