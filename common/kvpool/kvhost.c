/* kvhost.c — the host-RAM tier (kvhost.h): a fixed table of entries, each
 * with one block's data, a doubly linked LRU and hash buckets by index. */
#include "kvhost.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    ifd_kvhash_t hash;
    uint64_t salt;
    int32_t prev, next; /* LRU (head: least recently used) or free list (next) */
    int32_t hnext;      /* bucket chain */
    bool used;
    void *data;      /* data_bytes, allocated on first use, then reused */
    int32_t *tokens; /* block_size */
} ifd__hent_t;

struct ifd_kvhost {
    ifd_kvhost_params_t p;
    int32_t cap, n_used;
    ifd__hent_t *ent;
    int32_t *tokens; /* cap * block_size */
    int32_t *bucket; /* n_buckets heads */
    uint32_t mask;
    int32_t head, tail, free_head;
};

static void ifd__ctr(ifd_kvhost_t *h, ifd_kvtier_ctr_t c, uint64_t v)
{
    if (h->p.pool)
        ifd_kvpool_tier_add(h->p.pool, c, v);
}

int ifd_kvhost_create(const ifd_kvhost_params_t *p, ifd_kvhost_t **out)
{
    if (!p || !out || p->data_bytes == 0 || p->block_size <= 0 || p->max_bytes < p->data_bytes)
        return IFD_EINVAL;
    uint64_t cap = p->max_bytes / p->data_bytes;
    if (cap > INT32_MAX / 4)
        return IFD_EINVAL;
    ifd_kvhost_t *h = calloc(1, sizeof *h);
    if (!h)
        return IFD_ENOMEM;
    h->p = *p;
    h->cap = (int32_t)cap;
    uint32_t nb = 16;
    while (nb < 2 * cap)
        nb <<= 1;
    h->mask = nb - 1;
    h->ent = calloc((size_t)cap, sizeof *h->ent);
    h->tokens = malloc((size_t)cap * (size_t)p->block_size * sizeof *h->tokens);
    h->bucket = malloc(nb * sizeof *h->bucket);
    if (!h->ent || !h->tokens || !h->bucket) {
        ifd_kvhost_destroy(h);
        return IFD_ENOMEM;
    }
    memset(h->bucket, 0xff, nb * sizeof *h->bucket);
    for (int32_t i = 0; i < h->cap; i++) {
        h->ent[i].tokens = h->tokens + (size_t)i * (size_t)p->block_size;
        h->ent[i].next = i + 1 < h->cap ? i + 1 : -1;
    }
    h->free_head = 0;
    h->head = h->tail = -1;
    if (p->pool)
        ifd_kvpool_tier_add(p->pool, IFD_KVTIER_HOST_CAPACITY, (uint64_t)cap * p->data_bytes);
    *out = h;
    return 0;
}

void ifd_kvhost_destroy(ifd_kvhost_t *h)
{
    if (!h)
        return;
    if (h->ent) {
        for (int32_t i = 0; i < h->cap; i++)
            free(h->ent[i].data);
        /* the gauges are sums over workers: take this one's share back */
        ifd__ctr(h, IFD_KVTIER_HOST_BLOCKS, (uint64_t) - (int64_t)h->n_used);
        ifd__ctr(h, IFD_KVTIER_HOST_BYTES, (uint64_t) - (int64_t)(h->n_used * h->p.data_bytes));
        ifd__ctr(h, IFD_KVTIER_HOST_CAPACITY,
                 (uint64_t) - (int64_t)((uint64_t)h->cap * h->p.data_bytes));
    }
    free(h->ent);
    free(h->tokens);
    free(h->bucket);
    free(h);
}

static int32_t *ifd__chain(ifd_kvhost_t *h, const ifd_kvhash_t *hash)
{
    return &h->bucket[(hash->lo ^ hash->hi) & h->mask];
}

static int32_t ifd__find(ifd_kvhost_t *h, const ifd_kvhash_t *hash)
{
    for (int32_t i = *ifd__chain(h, hash); i >= 0; i = h->ent[i].hnext)
        if (h->ent[i].hash.lo == hash->lo && h->ent[i].hash.hi == hash->hi)
            return i;
    return -1;
}

static void ifd__lru_unlink(ifd_kvhost_t *h, int32_t i)
{
    ifd__hent_t *e = &h->ent[i];
    if (e->prev >= 0)
        h->ent[e->prev].next = e->next;
    else
        h->head = e->next;
    if (e->next >= 0)
        h->ent[e->next].prev = e->prev;
    else
        h->tail = e->prev;
}

static void ifd__lru_push(ifd_kvhost_t *h, int32_t i)
{
    ifd__hent_t *e = &h->ent[i];
    e->prev = h->tail;
    e->next = -1;
    if (h->tail >= 0)
        h->ent[h->tail].next = i;
    else
        h->head = i;
    h->tail = i;
}

/* Takes entry i out of the table and the LRU onto the free list. */
static void ifd__remove(ifd_kvhost_t *h, int32_t i)
{
    int32_t *pp = ifd__chain(h, &h->ent[i].hash);
    while (*pp != i)
        pp = &h->ent[*pp].hnext;
    *pp = h->ent[i].hnext;
    ifd__lru_unlink(h, i);
    h->ent[i].used = false;
    h->ent[i].next = h->free_head;
    h->free_head = i;
    h->n_used--;
    ifd__ctr(h, IFD_KVTIER_HOST_BLOCKS, (uint64_t)-1);
    ifd__ctr(h, IFD_KVTIER_HOST_BYTES, (uint64_t) - (int64_t)h->p.data_bytes);
}

void ifd_kvhost_forget(ifd_kvhost_t *h, const ifd_kvhash_t *hash)
{
    int32_t i = ifd__find(h, hash);
    if (i >= 0)
        ifd__remove(h, i);
}

void *ifd_kvhost_put(ifd_kvhost_t *h, const ifd_kvhash_t *hash, uint64_t salt,
                     const int32_t *tokens)
{
    ifd_kvhost_forget(h, hash);
    if (h->free_head < 0) { /* full: the least recently used goes */
        ifd__remove(h, h->head);
        ifd__ctr(h, IFD_KVTIER_HOST_EVICTED, 1);
    }
    int32_t i = h->free_head;
    ifd__hent_t *e = &h->ent[i];
    if (!e->data && !(e->data = malloc(h->p.data_bytes))) {
        ifd__ctr(h, IFD_KVTIER_HOST_DROPPED, 1);
        return NULL;
    }
    h->free_head = e->next;
    e->hash = *hash;
    e->salt = salt;
    e->used = true;
    memcpy(e->tokens, tokens, (size_t)h->p.block_size * sizeof *tokens);
    int32_t *chain = ifd__chain(h, hash);
    e->hnext = *chain;
    *chain = i;
    ifd__lru_push(h, i);
    h->n_used++;
    ifd__ctr(h, IFD_KVTIER_HOST_BLOCKS, 1);
    ifd__ctr(h, IFD_KVTIER_HOST_BYTES, h->p.data_bytes);
    ifd__ctr(h, IFD_KVTIER_HOST_WRITES, 1);
    return e->data;
}

const void *ifd_kvhost_get(ifd_kvhost_t *h, const ifd_kvhash_t *hash, uint64_t salt,
                           const int32_t *tokens)
{
    int32_t i = ifd__find(h, hash);
    if (i < 0)
        return NULL;
    ifd__hent_t *e = &h->ent[i];
    if (e->salt != salt || memcmp(e->tokens, tokens, (size_t)h->p.block_size * sizeof *tokens))
        return NULL;
    ifd__lru_unlink(h, i);
    ifd__lru_push(h, i);
    ifd__ctr(h, IFD_KVTIER_HOST_HIT_BLOCKS, 1);
    ifd__ctr(h, IFD_KVTIER_HOST_HIT_TOKENS, (uint64_t)h->p.block_size);
    ifd__ctr(h, IFD_KVTIER_HOST_READ_BYTES, h->p.data_bytes);
    return e->data;
}

void ifd_kvhost_count_query(ifd_kvhost_t *h, int64_t n_tokens, bool missed)
{
    ifd__ctr(h, IFD_KVTIER_HOST_QUERY_TOKENS, (uint64_t)n_tokens);
    if (missed)
        ifd__ctr(h, IFD_KVTIER_HOST_MISSES, 1);
}

int64_t ifd_kvhost_blocks(const ifd_kvhost_t *h)
{
    return h->n_used;
}

uint64_t ifd_kvhost_bytes(const ifd_kvhost_t *h)
{
    return (uint64_t)h->n_used * h->p.data_bytes;
}

size_t ifd_kvhost_data_bytes(const ifd_kvhost_t *h)
{
    return h->p.data_bytes;
}
