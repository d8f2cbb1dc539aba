/*
 * respstore.c — see respstore.h. Entries and owners are each one dense
 * array of pointers (a removed item's place is taken by the last one)
 * indexed by the code base's hash table (common/hash.h: XXH3 of the id, or
 * of the owner's name → array index, the keys compared here): an ifd__rs_set_t.
 * Each entry is one allocation holding its three strings; each owner one
 * holding its name, with the totals of its entries and their recency list
 * (head the most recent, tail the next of its entries to evict). An owner
 * exists while it holds entries.
 * Invariants: each set's v[0 .. n) are its items, v[i]->at == i, each in
 * the table once under its hash; an owner's n and bytes are the sums over
 * its list, which holds each of its entries once; the store's n and bytes
 * are the sums over the owners.
 */
#include "respstore.h"

#include "error.h"
#include "hash.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

/* What an entry and an owner start with: their place in their set. */
typedef struct {
    uint64_t hash;
    int32_t at; /* index in the set's v */
} ifd__rs_item_t;

typedef struct {
    ifd_hash_t index; /* hash → index into v */
    ifd__rs_item_t **v;
    size_t n, cap;
} ifd__rs_set_t;

typedef struct ifd__rs_node ifd__rs_node_t;

typedef struct {
    ifd__rs_item_t it;    /* first: owners live in an ifd__rs_set_t */
    ifd__rs_node_t *head; /* its entries, the most recent first */
    ifd__rs_node_t *tail;
    size_t n, bytes;
    char name[];
} ifd__rs_owner_t;

struct ifd__rs_node {
    ifd__rs_item_t it;           /* first: entries live in an ifd__rs_set_t */
    ifd__rs_node_t *prev, *next; /* its owner's recency list */
    ifd__rs_owner_t *owner;
    size_t bytes; /* what it counts against max_bytes */
    ifd_respstore_entry_t e;
    char data[]; /* id, response, conversation, each NUL-terminated */
};

struct ifd_respstore {
    ifd__rs_set_t entries; /* of ifd__rs_node_t, by id */
    ifd__rs_set_t owners;  /* of ifd__rs_owner_t, by name */
    size_t n, bytes;
    uint64_t evicted;
};

/* ---- sets ------------------------------------------------------------------------------ */

/* Adds x under x->hash. 0 or IFD_ENOMEM (x not added). */
static int ifd__set_add(ifd__rs_set_t *set, ifd__rs_item_t *x)
{
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 64;
        ifd__rs_item_t **v = realloc(set->v, cap * sizeof *v);
        if (!v)
            return IFD_ENOMEM;
        set->v = v;
        set->cap = cap;
    }
    x->at = (int32_t)set->n;
    if (ifd_hash_insert(&set->index, x->hash, x->at))
        return IFD_ENOMEM;
    set->v[set->n++] = x;
    return 0;
}

/* Takes x out of the set (the last item takes its place); x is not freed. */
static void ifd__set_remove(ifd__rs_set_t *set, ifd__rs_item_t *x)
{
    IFD_ASSERT(set->n > 0 && set->v[x->at] == x);
    int rc = ifd_hash_remove(&set->index, x->hash, x->at);
    IFD_ASSERT(rc == 0);
    ifd__rs_item_t *last = set->v[set->n - 1];
    if (last != x) {
        rc = ifd_hash_replace(&set->index, last->hash, last->at, x->at);
        IFD_ASSERT(rc == 0);
        last->at = x->at;
        set->v[x->at] = last;
    }
    set->n--;
}

static void ifd__set_close(ifd__rs_set_t *set)
{
    for (size_t i = 0; i < set->n; i++)
        free(set->v[i]);
    free(set->v);
    ifd_hash_close(&set->index);
}

static uint64_t ifd__rs_hash(const char *s)
{
    return ifd_hash_bytes(s, strlen(s));
}

static ifd__rs_node_t *ifd__rs_find(const ifd_respstore_t *s, const char *id, uint64_t h)
{
    const ifd__rs_set_t *set = &s->entries;
    uint32_t it = ifd_hash_first(&set->index, h);
    for (int32_t i; (i = ifd_hash_next(&set->index, h, &it)) >= 0;) {
        ifd__rs_node_t *x = (ifd__rs_node_t *)set->v[i];
        if (x->it.hash == h && strcmp(x->e.id, id) == 0)
            return x;
    }
    return NULL;
}

static ifd__rs_owner_t *ifd__rs_owner_find(const ifd_respstore_t *s, const char *name, uint64_t h)
{
    const ifd__rs_set_t *set = &s->owners;
    uint32_t it = ifd_hash_first(&set->index, h);
    for (int32_t i; (i = ifd_hash_next(&set->index, h, &it)) >= 0;) {
        ifd__rs_owner_t *o = (ifd__rs_owner_t *)set->v[i];
        if (o->it.hash == h && strcmp(o->name, name) == 0)
            return o;
    }
    return NULL;
}

/* ---- entries --------------------------------------------------------------------------- */

int ifd_respstore_create(ifd_respstore_t **out)
{
    ifd_respstore_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    if (ifd_hash_init(&s->entries.index, 64) || ifd_hash_init(&s->owners.index, 8)) {
        ifd_hash_close(&s->entries.index);
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
    ifd__set_close(&s->entries);
    ifd__set_close(&s->owners);
    free(s);
}

static void ifd__rs_unlink(ifd__rs_owner_t *o, ifd__rs_node_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        o->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        o->tail = x->prev;
    x->prev = x->next = NULL;
}

static void ifd__rs_push_front(ifd__rs_owner_t *o, ifd__rs_node_t *x)
{
    x->prev = NULL;
    x->next = o->head;
    if (o->head)
        o->head->prev = x;
    o->head = x;
    if (!o->tail)
        o->tail = x;
}

/* Removes x from the store and frees it (and its owner, left with nothing). */
static void ifd__rs_remove(ifd_respstore_t *s, ifd__rs_node_t *x)
{
    ifd__rs_owner_t *o = x->owner;
    IFD_ASSERT(s->n > 0 && s->bytes >= x->bytes && o->n > 0 && o->bytes >= x->bytes);
    ifd__set_remove(&s->entries, &x->it);
    ifd__rs_unlink(o, x);
    o->n--;
    o->bytes -= x->bytes;
    s->n--;
    s->bytes -= x->bytes;
    free(x);
    if (!o->n) {
        ifd__set_remove(&s->owners, &o->it);
        free(o);
    }
}

/* Adds x for the owner named `owner` (made here when new), as its most
 * recent. 0 or IFD_ENOMEM (x not added). */
static int ifd__rs_add(ifd_respstore_t *s, ifd__rs_node_t *x, const char *owner)
{
    uint64_t oh = ifd__rs_hash(owner);
    ifd__rs_owner_t *o = ifd__rs_owner_find(s, owner, oh);
    bool made = false;
    if (!o) {
        size_t nl = strlen(owner);
        if (!(o = calloc(1, sizeof *o + nl + 1)))
            return IFD_ENOMEM;
        memcpy(o->name, owner, nl + 1);
        o->it.hash = oh;
        if (ifd__set_add(&s->owners, &o->it)) {
            free(o);
            return IFD_ENOMEM;
        }
        made = true;
    }
    if (ifd__set_add(&s->entries, &x->it)) {
        if (made) {
            ifd__set_remove(&s->owners, &o->it);
            free(o);
        }
        return IFD_ENOMEM;
    }
    x->owner = o;
    x->e.owner = o->name;
    ifd__rs_push_front(o, x);
    o->n++;
    o->bytes += x->bytes;
    s->n++;
    s->bytes += x->bytes;
    return 0;
}

/* The owner holding the most bytes (ties: the most entries); the store is
 * not empty. A scan: owners are identities, a handful (respstore.h). */
static ifd__rs_owner_t *ifd__rs_largest(const ifd_respstore_t *s)
{
    ifd__rs_owner_t *best = NULL;
    for (size_t i = 0; i < s->owners.n; i++) {
        ifd__rs_owner_t *o = (ifd__rs_owner_t *)s->owners.v[i];
        if (!best || o->bytes > best->bytes || (o->bytes == best->bytes && o->n > best->n))
            best = o;
    }
    IFD_ASSERT(best);
    return best;
}

/* A new entry (not in the store) holding copies of the strings; NULL on OOM. */
static ifd__rs_node_t *ifd__rs_node(const char *id, size_t id_len, const char *response,
                                    size_t response_len, const char *conversation,
                                    size_t conversation_len, size_t strings, uint64_t h)
{
    ifd__rs_node_t *x = malloc(sizeof *x + strings);
    if (!x)
        return NULL;
    memset(x, 0, sizeof *x);
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
    x->it.hash = h;
    x->bytes = strings + IFD_RESPSTORE_ENTRY_OVERHEAD;
    return x;
}

int ifd_respstore_put(ifd_respstore_t *s, size_t max_entries, size_t max_bytes, const char *owner,
                      const char *id, const char *response, size_t response_len,
                      const char *conversation, size_t conversation_len)
{
    uint64_t h = ifd__rs_hash(id);
    ifd__rs_node_t *old = ifd__rs_find(s, id, h);
    if (old)
        ifd__rs_remove(s, old);
    if (!max_entries || !max_bytes) { /* the store is off: drop everything */
        while (s->entries.n)
            ifd__rs_remove(s, (ifd__rs_node_t *)s->entries.v[s->entries.n - 1]);
        return IFD_ETOOBIG;
    }
    size_t id_len = strlen(id);
    size_t strings = id_len + response_len + conversation_len + 3;
    if (strings + IFD_RESPSTORE_ENTRY_OVERHEAD > max_bytes)
        return IFD_ETOOBIG;
    ifd__rs_node_t *x = ifd__rs_node(id, id_len, response, response_len, conversation,
                                     conversation_len, strings, h);
    if (!x)
        return IFD_ENOMEM;
    int rc = ifd__rs_add(s, x, owner);
    if (rc) {
        free(x);
        return rc;
    }
    /* added first, so that its owner's choice counts it: the flooder is the
     * largest owner, and its own oldest entries go */
    while (s->n > max_entries || s->bytes > max_bytes) {
        ifd__rs_node_t *victim = ifd__rs_largest(s)->tail;
        bool self = victim == x;
        ifd__rs_remove(s, victim);
        if (self)
            return IFD_ETOOBIG;
        s->evicted++;
    }
    return 0;
}

const ifd_respstore_entry_t *ifd_respstore_get(ifd_respstore_t *s, const char *owner,
                                               const char *id)
{
    ifd__rs_node_t *x = ifd__rs_find(s, id, ifd__rs_hash(id));
    if (!x || strcmp(x->owner->name, owner) != 0)
        return NULL;
    ifd__rs_unlink(x->owner, x);
    ifd__rs_push_front(x->owner, x);
    return &x->e;
}

bool ifd_respstore_delete(ifd_respstore_t *s, const char *owner, const char *id)
{
    ifd__rs_node_t *x = ifd__rs_find(s, id, ifd__rs_hash(id));
    if (!x || strcmp(x->owner->name, owner) != 0)
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

void ifd_respstore_owner_stats(const ifd_respstore_t *s, const char *owner, size_t *entries,
                               size_t *bytes)
{
    const ifd__rs_owner_t *o = ifd__rs_owner_find(s, owner, ifd__rs_hash(owner));
    *entries = o ? o->n : 0;
    *bytes = o ? o->bytes : 0;
}

/* ---- the daemon's store, under the running configuration ---------------------------------- */

bool ifd_respstore_enabled(const ifd_config_t *cfg)
{
    return cfg->responses_store_entries > 0 && cfg->responses_store_bytes > 0;
}

const ifd_respstore_entry_t *ifd_respstore_lookup(ifd_respstore_t **sp, const ifd_config_t *cfg,
                                                  const char *owner, const char *id)
{
    if (!ifd_respstore_enabled(cfg)) { /* turned off by a reload */
        ifd_respstore_destroy(*sp);
        *sp = NULL;
    }
    return *sp ? ifd_respstore_get(*sp, owner, id) : NULL;
}

void ifd_respstore_keep(ifd_respstore_t **sp, const ifd_config_t *cfg, const char *owner,
                        const char *id, const char *response, size_t response_len,
                        const char *conversation, size_t conversation_len)
{
    if (!ifd_respstore_enabled(cfg)) { /* turned off since the request came */
        ifd_respstore_destroy(*sp);
        *sp = NULL;
        return;
    }
    int rc = *sp ? 0 : ifd_respstore_create(sp);
    if (!rc)
        rc = ifd_respstore_put(*sp, (size_t)cfg->responses_store_entries,
                               (size_t)cfg->responses_store_bytes, owner, id, response,
                               response_len, conversation, conversation_len);
    if (rc)
        IFD_WARN("responses store: %s of %s (%zu bytes) not kept: %s", id, owner,
                 response_len + conversation_len,
                 rc == IFD_ETOOBIG ? "over the store's limits for its owner" : ifd_strerror(rc));
}
