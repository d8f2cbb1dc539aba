/*
 * respstore.c — see respstore.h. The entries are one dense array of
 * pointers (a removed entry's place is taken by the last one) indexed by the
 * code base's hash table (common/hash.h: XXH3 of the id → array index, the
 * ids compared here), and chained on a doubly-linked recency list: head the
 * most recent, tail the next to evict. Each entry is one allocation holding
 * its three strings.
 * Invariants: v[0 .. n) are the entries, v[i]->at == i, each in the table
 * once under its hash; n and bytes are the sums over the list, which holds
 * every entry once.
 */
#include "respstore.h"

#include "error.h"
#include "hash.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

typedef struct ifd__rs_node {
    struct ifd__rs_node *prev, *next; /* recency list */
    uint64_t hash;
    int32_t at;   /* its index in v */
    size_t bytes; /* what it counts against max_bytes */
    ifd_respstore_entry_t e;
    char data[]; /* id, response, conversation, each NUL-terminated */
} ifd__rs_node_t;

struct ifd_respstore {
    ifd_hash_t index; /* hash of the id → index into v */
    ifd__rs_node_t **v;
    size_t cap;
    ifd__rs_node_t *head, *tail;
    size_t n, bytes;
    uint64_t evicted;
};

int ifd_respstore_create(ifd_respstore_t **out)
{
    ifd_respstore_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    if (ifd_hash_init(&s->index, 64)) {
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
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    ifd_hash_close(&s->index);
    free(s);
}

static uint64_t ifd__rs_hash(const char *id)
{
    return ifd_hash_bytes(id, strlen(id));
}

static ifd__rs_node_t *ifd__rs_find(const ifd_respstore_t *s, const char *id, uint64_t h)
{
    uint32_t it = ifd_hash_first(&s->index, h);
    for (int32_t i; (i = ifd_hash_next(&s->index, h, &it)) >= 0;)
        if (s->v[i]->hash == h && strcmp(s->v[i]->e.id, id) == 0)
            return s->v[i];
    return NULL;
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

/* Removes x from the table, the array and the list, and frees it. */
static void ifd__rs_remove(ifd_respstore_t *s, ifd__rs_node_t *x)
{
    IFD_ASSERT(s->n > 0 && s->bytes >= x->bytes && s->v[x->at] == x);
    int rc = ifd_hash_remove(&s->index, x->hash, x->at);
    IFD_ASSERT(rc == 0);
    ifd__rs_node_t *last = s->v[s->n - 1];
    if (last != x) { /* the last entry takes x's place */
        rc = ifd_hash_replace(&s->index, last->hash, last->at, x->at);
        IFD_ASSERT(rc == 0);
        last->at = x->at;
        s->v[x->at] = last;
    }
    ifd__rs_unlink(s, x);
    s->n--;
    s->bytes -= x->bytes;
    free(x);
}

/* Adds x, made the most recent. 0 or IFD_ENOMEM (x not added). */
static int ifd__rs_add(ifd_respstore_t *s, ifd__rs_node_t *x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        ifd__rs_node_t **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return IFD_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    x->at = (int32_t)s->n;
    if (ifd_hash_insert(&s->index, x->hash, x->at))
        return IFD_ENOMEM;
    s->v[s->n++] = x;
    ifd__rs_push_front(s, x);
    s->bytes += x->bytes;
    return 0;
}

int ifd_respstore_put(ifd_respstore_t *s, size_t max_entries, size_t max_bytes, const char *id,
                      const char *response, size_t response_len, const char *conversation,
                      size_t conversation_len)
{
    uint64_t h = ifd__rs_hash(id);
    ifd__rs_node_t *old = ifd__rs_find(s, id, h);
    if (old)
        ifd__rs_remove(s, old);
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
    int rc = ifd__rs_add(s, x);
    if (rc)
        free(x);
    return rc;
}

const ifd_respstore_entry_t *ifd_respstore_get(ifd_respstore_t *s, const char *id)
{
    ifd__rs_node_t *x = ifd__rs_find(s, id, ifd__rs_hash(id));
    if (!x)
        return NULL;
    ifd__rs_unlink(s, x);
    ifd__rs_push_front(s, x);
    return &x->e;
}

bool ifd_respstore_delete(ifd_respstore_t *s, const char *id)
{
    ifd__rs_node_t *x = ifd__rs_find(s, id, ifd__rs_hash(id));
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

/* ---- the daemon's store, under the running configuration ---------------------------------- */

bool ifd_respstore_enabled(const ifd_config_t *cfg)
{
    return cfg->responses_store_entries > 0 && cfg->responses_store_bytes > 0;
}

const ifd_respstore_entry_t *ifd_respstore_lookup(ifd_respstore_t **sp, const ifd_config_t *cfg,
                                                  const char *id)
{
    if (!ifd_respstore_enabled(cfg)) { /* turned off by a reload */
        ifd_respstore_destroy(*sp);
        *sp = NULL;
    }
    return *sp ? ifd_respstore_get(*sp, id) : NULL;
}

void ifd_respstore_keep(ifd_respstore_t **sp, const ifd_config_t *cfg, const char *id,
                        const char *response, size_t response_len, const char *conversation,
                        size_t conversation_len)
{
    if (!ifd_respstore_enabled(cfg)) { /* turned off since the request came */
        ifd_respstore_destroy(*sp);
        *sp = NULL;
        return;
    }
    int rc = *sp ? 0 : ifd_respstore_create(sp);
    if (!rc)
        rc = ifd_respstore_put(*sp, (size_t)cfg->responses_store_entries,
                               (size_t)cfg->responses_store_bytes, id, response, response_len,
                               conversation, conversation_len);
    if (rc)
        IFD_WARN("responses store: %s (%zu bytes) not kept: %s", id,
                 response_len + conversation_len, ifd_strerror(rc));
}
