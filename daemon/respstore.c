/*
 * respstore.c — see respstore.h. A chained hash table (FNV-1a over the
 * id, power-of-two buckets, doubled past a load of 1) whose entries are
 * also on a doubly-linked recency list: head the most recent, tail the
 * next to evict. Each entry is one allocation holding its three strings.
 * Invariants: n and bytes are the sums over the list; every entry is in
 * exactly one bucket chain and once on the list.
 */
#include "respstore.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

typedef struct ifd__rs_node {
    struct ifd__rs_node *chain;       /* next in its bucket */
    struct ifd__rs_node *prev, *next; /* recency list */
    uint64_t hash;
    size_t bytes; /* what it counts against max_bytes */
    ifd_respstore_entry_t e;
    char data[]; /* id, response, conversation, each NUL-terminated */
} ifd__rs_node_t;

struct ifd_respstore {
    ifd__rs_node_t **buckets;
    size_t n_buckets; /* a power of two */
    ifd__rs_node_t *head, *tail;
    size_t n, bytes;
    uint64_t evicted;
};

static uint64_t ifd__rs_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

int ifd_respstore_create(ifd_respstore_t **out)
{
    ifd_respstore_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    s->n_buckets = 64;
    s->buckets = calloc(s->n_buckets, sizeof *s->buckets);
    if (!s->buckets) {
        free(s);
        return IFD_ENOMEM;
    }
    *out = s;
    return 0;
}

void ifd_respstore_destroy(ifd_respstore_t *s)
{
    if (!s)
        return;
    for (ifd__rs_node_t *x = s->head, *next; x; x = next) {
        next = x->next;
        free(x);
    }
    free(s->buckets);
    free(s);
}

static ifd__rs_node_t **ifd__rs_slot(ifd_respstore_t *s, const char *id, uint64_t h)
{
    ifd__rs_node_t **p = &s->buckets[h & (s->n_buckets - 1)];
    while (*p && ((*p)->hash != h || strcmp((*p)->e.id, id) != 0))
        p = &(*p)->chain;
    return p;
}

static void ifd__rs_unlink(ifd_respstore_t *s, ifd__rs_node_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        s->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        s->tail = x->prev;
    x->prev = x->next = NULL;
}

static void ifd__rs_push_front(ifd_respstore_t *s, ifd__rs_node_t *x)
{
    x->prev = NULL;
    x->next = s->head;
    if (s->head)
        s->head->prev = x;
    s->head = x;
    if (!s->tail)
        s->tail = x;
}

/* Removes x from the table and the list and frees it. */
static void ifd__rs_remove(ifd_respstore_t *s, ifd__rs_node_t *x)
{
    ifd__rs_node_t **p = ifd__rs_slot(s, x->e.id, x->hash);
    IFD_ASSERT(*p == x);
    *p = x->chain;
    ifd__rs_unlink(s, x);
    IFD_ASSERT(s->n > 0 && s->bytes >= x->bytes);
    s->n--;
    s->bytes -= x->bytes;
    free(x);
}

/* Doubles the buckets (a failed allocation keeps the old ones: longer chains). */
static void ifd__rs_grow(ifd_respstore_t *s)
{
    size_t nb = s->n_buckets * 2;
    ifd__rs_node_t **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (ifd__rs_node_t *x = s->head; x; x = x->next) {
        ifd__rs_node_t **p = &b[x->hash & (nb - 1)];
        x->chain = *p;
        *p = x;
    }
    free(s->buckets);
    s->buckets = b;
    s->n_buckets = nb;
}

int ifd_respstore_put(ifd_respstore_t *s, size_t max_entries, size_t max_bytes, const char *id,
                      const char *response, size_t response_len, const char *conversation,
                      size_t conversation_len)
{
    uint64_t h = ifd__rs_hash(id);
    ifd__rs_node_t **old = ifd__rs_slot(s, id, h);
    if (*old)
        ifd__rs_remove(s, *old);
    size_t id_len = strlen(id);
    size_t strings = id_len + response_len + conversation_len + 3;
    size_t bytes = strings + IFD_RESPSTORE_ENTRY_OVERHEAD;
    if (!max_entries || !max_bytes) { /* the store is off: drop everything */
        while (s->tail)
            ifd__rs_remove(s, s->tail);
        return IFD_ETOOBIG;
    }
    if (bytes > max_bytes)
        return IFD_ETOOBIG;
    ifd__rs_node_t *x = malloc(sizeof *x + strings);
    if (!x)
        return IFD_ENOMEM;
    char *p = x->data;
    memcpy(p, id, id_len + 1);
    x->e.id = p;
    p += id_len + 1;
    memcpy(p, response, response_len);
    p[response_len] = '\0';
    x->e.response = p;
    x->e.response_len = response_len;
    p += response_len + 1;
    memcpy(p, conversation, conversation_len);
    p[conversation_len] = '\0';
    x->e.conversation = p;
    x->e.conversation_len = conversation_len;
    x->hash = h;
    x->bytes = bytes;
    while (s->tail && (s->n + 1 > max_entries || s->bytes + bytes > max_bytes)) {
        ifd__rs_remove(s, s->tail);
        s->evicted++;
    }
    if (s->n + 1 > s->n_buckets)
        ifd__rs_grow(s);
    ifd__rs_node_t **slot = &s->buckets[h & (s->n_buckets - 1)];
    x->chain = *slot;
    *slot = x;
    ifd__rs_push_front(s, x);
    s->n++;
    s->bytes += bytes;
    return 0;
}

const ifd_respstore_entry_t *ifd_respstore_get(ifd_respstore_t *s, const char *id)
{
    ifd__rs_node_t *x = *ifd__rs_slot(s, id, ifd__rs_hash(id));
    if (!x)
        return NULL;
    ifd__rs_unlink(s, x);
    ifd__rs_push_front(s, x);
    return &x->e;
}

bool ifd_respstore_delete(ifd_respstore_t *s, const char *id)
{
    ifd__rs_node_t *x = *ifd__rs_slot(s, id, ifd__rs_hash(id));
    if (!x)
        return false;
    ifd__rs_remove(s, x);
    return true;
}

void ifd_respstore_stats(const ifd_respstore_t *s, size_t *entries, size_t *bytes,
                         uint64_t *evicted)
{
    *entries = s->n;
    *bytes = s->bytes;
    *evicted = s->evicted;
}
