/*
 * gcache.c — see gcache.h. Entries are one allocation each (key then
 * words), in a dense array indexed by common/hash.h (a removed entry's slot
 * is taken by the last one) and on a recency list (head most recent).
 * Invariants, under the mutex: v[0 .. n) are the entries, v[i]->at == i,
 * each indexed once under its key's hash; bytes is the sum of their sizes.
 */
#include "gcache.h"

#include "error.h"
#include "hash.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct gc_entry {
    struct gc_entry *prev, *next; /* recency */
    uint64_t hash;
    int32_t at;
    size_t klen, n, bytes;
    int32_t *words; /* into data, after the key */
    json_t *schema; /* a reference, or NULL */
    char data[];
} gc_entry_t;

struct ifd_gcache {
    pthread_mutex_t mu;
    size_t max_bytes, bytes;
    ifd_hash_t index;
    gc_entry_t **v;
    size_t n, cap;
    gc_entry_t *head, *tail;
    uint64_t hits, misses;
};

int ifd_gcache_create(ifd_gcache_t **out, size_t max_bytes)
{
    ifd_gcache_t *c = calloc(1, sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    if (ifd_hash_init(&c->index, 64)) {
        free(c);
        return IFD_ENOMEM;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = max_bytes;
    *out = c;
    return 0;
}

void ifd_gcache_destroy(ifd_gcache_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        json_decref(c->v[i]->schema);
        free(c->v[i]);
    }
    free(c->v);
    ifd_hash_close(&c->index);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void gc_unlink(ifd_gcache_t *c, gc_entry_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void gc_push_front(ifd_gcache_t *c, gc_entry_t *e)
{
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static gc_entry_t *gc_find(const ifd_gcache_t *c, const void *key, size_t klen, uint64_t h)
{
    uint32_t it = ifd_hash_first(&c->index, h);
    for (int32_t i; (i = ifd_hash_next(&c->index, h, &it)) >= 0;) {
        gc_entry_t *e = c->v[i];
        if (e->hash == h && e->klen == klen && memcmp(e->data, key, klen) == 0)
            return e;
    }
    return NULL;
}

static void gc_remove(ifd_gcache_t *c, gc_entry_t *e)
{
    gc_unlink(c, e);
    ifd_hash_remove(&c->index, e->hash, e->at);
    gc_entry_t *last = c->v[--c->n];
    if (last != e) {
        ifd_hash_replace(&c->index, last->hash, last->at, e->at);
        last->at = e->at;
        c->v[e->at] = last;
    }
    c->bytes -= e->bytes;
    json_decref(e->schema);
    free(e);
}

int ifd_gcache_get(ifd_gcache_t *c, const void *key, size_t klen, ifd_arena_t *a, int32_t **words,
                   size_t *n, json_t **schema)
{
    uint64_t h = ifd_hash_bytes(key, klen);
    int found = 0;
    pthread_mutex_lock(&c->mu);
    gc_entry_t *e = gc_find(c, key, klen, h);
    if (e) {
        *words = NULL;
        *n = e->n;
        if (e->n && (*words = ifd_arena_alloc(a, e->n * sizeof **words)))
            memcpy(*words, e->words, e->n * sizeof **words);
        found = !e->n || *words;
        if (found && schema)
            *schema = json_incref(e->schema);
        gc_unlink(c, e);
        gc_push_front(c, e);
    }
    if (found)
        c->hits++;
    else
        c->misses++;
    pthread_mutex_unlock(&c->mu);
    return found;
}

void ifd_gcache_put(ifd_gcache_t *c, const void *key, size_t klen, const int32_t *words, size_t n,
                    json_t *schema, size_t schema_bytes)
{
    size_t off = (klen + 7) & ~(size_t)7;
    size_t size = sizeof(gc_entry_t) + off + n * sizeof *words;
    size_t bytes = size + (schema ? schema_bytes : 0); /* what it counts for */
    if (bytes > c->max_bytes)
        return;
    gc_entry_t *e = malloc(size);
    if (!e)
        return;
    memcpy(e->data, key, klen);
    e->words = (int32_t *)(e->data + off);
    if (n)
        memcpy(e->words, words, n * sizeof *words);
    e->schema = NULL;
    e->klen = klen;
    e->n = n;
    e->bytes = bytes;
    e->hash = ifd_hash_bytes(key, klen);
    e->prev = e->next = NULL;
    pthread_mutex_lock(&c->mu);
    gc_entry_t *old = gc_find(c, key, klen, e->hash);
    if (old)
        gc_remove(c, old);
    while (c->tail && c->bytes + bytes > c->max_bytes)
        gc_remove(c, c->tail);
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        gc_entry_t **v = realloc(c->v, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&c->mu);
            free(e);
            return;
        }
        c->v = v;
        c->cap = cap;
    }
    if (ifd_hash_insert(&c->index, e->hash, (int32_t)c->n)) {
        pthread_mutex_unlock(&c->mu);
        free(e);
        return;
    }
    e->at = (int32_t)c->n;
    e->schema = json_incref(schema);
    c->v[c->n++] = e;
    c->bytes += bytes;
    gc_push_front(c, e);
    pthread_mutex_unlock(&c->mu);
}

void ifd_gcache_stats(ifd_gcache_t *c, size_t *entries, size_t *bytes, uint64_t *hits,
                      uint64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    *entries = c->n;
    *bytes = c->bytes;
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
