/*
 * grammar_mask.c — see grammar_mask.h.
 *
 * Trie layout: nodes in preorder; node k holds one byte, its depth (the
 * length of its prefix), end[k] (the first node after its subtree) and the
 * first token whose bytes end exactly there (tok_next chains tokens with
 * identical bytes). The walk keeps one automaton state per depth on the
 * path from the root; moving to node k releases everything computed below
 * depth[k] - 1 (a mark per depth in the bump memory), so a walk allocates
 * at most one path of states at a time.
 *
 * Mask cache: per grammar, up to IFD_GMASK_CACHE_MAX masks indexed by the
 * matcher state's canonical key (ifd__gstate_key) in an ifd_hash_t. When full
 * it is emptied (states of one request repeat locally, so recent ones matter).
 * The transition memo indexes its interned states the same way.
 */
#include "grammar_mask.h"

#include "error.h"
#include "grammar_impl.h"
#include "hash.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

struct ifd_vocab {
    int32_t n_vocab;
    uint8_t *bytes; /* all tokens' bytes */
    uint32_t *off;  /* [n_vocab + 1] */
    int32_t *eog;
    size_t n_eog;
    /* trie */
    size_t n_nodes;
    uint8_t *nbyte;
    uint16_t *ndepth;
    uint32_t *nend;
    int32_t *ntok;
    int32_t *tok_next; /* [n_vocab] */
    uint32_t max_depth;
};

static int cmp_tok(const void *a, const void *b, void *arg)
{
    const ifd_vocab_t *v = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    uint32_t l = lx < ly ? lx : ly;
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], l);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

int ifd_vocab_create(int32_t n_vocab, const char *const *bytes, const uint32_t *lens,
                     const int32_t *eog, size_t n_eog, ifd_vocab_t **out)
{
    if (n_vocab < 1 || n_vocab > (1 << 24))
        return IFD_EINVAL;
    for (size_t i = 0; i < n_eog; i++)
        if (eog[i] < 0 || eog[i] >= n_vocab)
            return IFD_EINVAL;
    ifd_vocab_t *v = calloc(1, sizeof *v);
    if (!v)
        return IFD_ENOMEM;
    v->n_vocab = n_vocab;
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (lens[i] > 65535) {
            free(v);
            return IFD_EINVAL;
        }
        total += lens[i];
    }
    int32_t *order = malloc((size_t)n_vocab * sizeof *order);
    v->bytes = malloc(total ? total : 1);
    v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
    v->eog = malloc((n_eog ? n_eog : 1) * sizeof *v->eog);
    v->tok_next = malloc((size_t)n_vocab * sizeof *v->tok_next);
    /* nodes: at most total bytes */
    v->nbyte = malloc(total ? total : 1);
    v->ndepth = malloc((total ? total : 1) * sizeof *v->ndepth);
    v->nend = malloc((total ? total : 1) * sizeof *v->nend);
    v->ntok = malloc((total ? total : 1) * sizeof *v->ntok);
    if (!order || !v->bytes || !v->off || !v->eog || !v->tok_next || !v->nbyte || !v->ndepth ||
        !v->nend || !v->ntok) {
        free(order);
        ifd_vocab_destroy(v);
        return IFD_ENOMEM;
    }
    size_t o = 0;
    int32_t n_real = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        v->off[i] = (uint32_t)o;
        if (lens[i])
            memcpy(v->bytes + o, bytes[i], lens[i]);
        o += lens[i];
        v->tok_next[i] = -1;
        bool eog_i = false;
        for (size_t j = 0; j < n_eog; j++)
            eog_i |= eog[j] == i;
        if (lens[i] && !eog_i) /* end-of-generation ids never match bytes */
            order[n_real++] = i;
    }
    v->off[n_vocab] = (uint32_t)o;
    if (n_eog)
        memcpy(v->eog, eog, n_eog * sizeof *eog);
    v->n_eog = n_eog;
    qsort_r(order, (size_t)n_real, sizeof *order, cmp_tok, v);

    /* build preorder nodes: path[d] = node index of the prefix of length d+1 */
    uint32_t *path = malloc(65536 * sizeof *path);
    if (!path) {
        free(order);
        ifd_vocab_destroy(v);
        return IFD_ENOMEM;
    }
    uint32_t plen = 0; /* nodes on the current path */
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    size_t nn = 0;
    for (int32_t i = 0; i < n_real; i++) {
        int32_t t = order[i];
        const uint8_t *b = v->bytes + v->off[t];
        uint32_t len = v->off[t + 1] - v->off[t];
        uint32_t l = 0;
        while (l < len && l < prev_len && b[l] == prev[l])
            l++;
        if (l == len && len == prev_len) {
            /* same bytes as the previous token: chain it */
            int32_t first = v->ntok[path[len - 1]];
            while (v->tok_next[first] >= 0)
                first = v->tok_next[first];
            v->tok_next[first] = t;
            continue;
        }
        while (plen > l) /* close nodes off the new path */
            v->nend[path[--plen]] = (uint32_t)nn;
        for (uint32_t d = l; d < len; d++) {
            v->nbyte[nn] = b[d];
            v->ndepth[nn] = (uint16_t)(d + 1);
            v->ntok[nn] = -1;
            path[plen++] = (uint32_t)nn;
            nn++;
        }
        v->ntok[path[len - 1]] = t;
        if (len > v->max_depth)
            v->max_depth = len;
        prev = b;
        prev_len = len;
    }
    while (plen > 0)
        v->nend[path[--plen]] = (uint32_t)nn;
    v->n_nodes = nn;
    free(path);
    free(order);
    *out = v;
    return 0;
}

int ifd_vocab_create_tokenizer(const ifd_tokenizer_t *t, ifd_vocab_t **out)
{
    int32_t n = ifd_tokenizer_n_vocab(t);
    if (n < 1)
        return IFD_EINVAL;
    char **bytes = calloc((size_t)n, sizeof *bytes);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = 0;
    if (!bytes || !lens)
        rc = IFD_ENOMEM;
    for (int32_t i = 0; i < n && !rc; i++) {
        ifd_toktype_t ty = ifd_tokenizer_token_type(t, i);
        if (ty == IFD_TOKTYPE_CONTROL || ty == IFD_TOKTYPE_UNUSED || ty == IFD_TOKTYPE_UNKNOWN)
            continue;
        char buf[256];
        int k = ifd_tokenizer_token_bytes(t, i, 0, buf, sizeof buf);
        if (k < 0) {
            rc = k;
            break;
        }
        if (k > (int)sizeof buf) /* very long tokens: leave them out */
            continue;
        bytes[i] = malloc((size_t)k + 1);
        if (!bytes[i]) {
            rc = IFD_ENOMEM;
            break;
        }
        memcpy(bytes[i], buf, (size_t)k);
        lens[i] = (uint32_t)k;
    }
    if (!rc) {
        const ifd_token_t *eog;
        size_t n_eog = ifd_tokenizer_eog_ids(t, &eog);
        rc =
            ifd_vocab_create(n, (const char *const *)bytes, lens, (const int32_t *)eog, n_eog, out);
    }
    for (int32_t i = 0; bytes && i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    return rc;
}

void ifd_vocab_destroy(ifd_vocab_t *v)
{
    if (!v)
        return;
    free(v->bytes);
    free(v->off);
    free(v->eog);
    free(v->tok_next);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nend);
    free(v->ntok);
    free(v);
}

int32_t ifd_vocab_size(const ifd_vocab_t *v)
{
    return v->n_vocab;
}

size_t ifd_vocab_trie_nodes(const ifd_vocab_t *v)
{
    return v->n_nodes;
}

/* ---- store ------------------------------------------------------------------------ */

/* One cached mask and the state key it is for. */
typedef struct {
    uint64_t hash;
    uint32_t *key;
    size_t key_len;
    uint32_t *bits;
} mslot_t;

/* An interned state: next[b] is the state after byte b (NEXT_UNKNOWN, or
 * NEXT_REJECT when the grammar refuses b there). */
#define NEXT_UNKNOWN (-2)
#define NEXT_REJECT  (-1)

typedef struct {
    ifd__gstate_t st;
    uint32_t *key;
    size_t key_len;
    uint64_t hash;
    int32_t *next; /* [256] */
} dstate_t;

typedef struct gentry {
    struct gentry *next;
    uint64_t text_hash; /* of compiled, text[0..text_len) */
    bool compiled;      /* text holds ifd_grammar_serialize's words, not grammar text */
    char *text;
    size_t text_len;
    ifd_grammar_t *g;
    int refs;
    uint64_t last_used;
    mslot_t *slots; /* [IFD_GMASK_CACHE_MAX], the first n_used filled */
    size_t n_used;
    ifd_hash_t mask_index; /* key hash -> index in slots */
    /* transition memo: interned automaton states, their successor per byte */
    dstate_t *ds;
    size_t n_ds, cap_ds;
    ifd_hash_t ds_index; /* key hash -> id in ds */
    ifd__gmem_t ds_mem;
} gentry_t;

struct ifd_gstore {
    const ifd_vocab_t *vocab;
    size_t words;
    gentry_t *entries;
    uint64_t clock;
    ifd__gmem_t walk; /* scratch for trie walks */
    const ifd__gstate_t **path_states;
    ifd__gstate_t *states;
    int32_t *ids;
    ifd__gmark_t *marks;
    uint32_t *keybuf; /* the mask cache's key */
    size_t keycap;
    uint32_t *ikeybuf; /* the transition memo's key */
    size_t ikeycap;
    ifd_gstore_stats_t st;
};

int ifd_gstore_create(const ifd_vocab_t *vocab, ifd_gstore_t **out)
{
    ifd_gstore_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    s->vocab = vocab;
    s->words = ((size_t)vocab->n_vocab + 31) / 32;
    ifd__gmem_init(&s->walk);
    s->states = calloc(vocab->max_depth + 2, sizeof *s->states);
    s->marks = calloc(vocab->max_depth + 2, sizeof *s->marks);
    s->ids = calloc(vocab->max_depth + 2, sizeof *s->ids);
    if (!s->states || !s->marks || !s->ids) {
        ifd_gstore_destroy(s);
        return IFD_ENOMEM;
    }
    *out = s;
    return 0;
}

static void entry_clear_cache(gentry_t *e)
{
    for (size_t i = 0; i < e->n_used; i++) {
        free(e->slots[i].key);
        free(e->slots[i].bits);
    }
    e->n_used = 0;
    ifd_hash_clear(&e->mask_index);
}

static void entry_clear_dfa(gentry_t *e)
{
    for (size_t i = 0; i < e->n_ds; i++) {
        free(e->ds[i].key);
        free(e->ds[i].next);
    }
    e->n_ds = 0;
    ifd_hash_clear(&e->ds_index);
    ifd__gmem_release(&e->ds_mem, (ifd__gmark_t){0, 0});
}

static void entry_free(gentry_t *e)
{
    entry_clear_dfa(e);
    free(e->ds);
    ifd_hash_close(&e->ds_index);
    ifd__gmem_close(&e->ds_mem);
    entry_clear_cache(e);
    free(e->slots);
    ifd_hash_close(&e->mask_index);
    ifd_grammar_destroy(e->g);
    free(e->text);
    free(e);
}

void ifd_gstore_destroy(ifd_gstore_t *s)
{
    if (!s)
        return;
    for (gentry_t *e = s->entries, *n; e; e = n) {
        n = e->next;
        IFD_ASSERT(e->refs == 0);
        entry_free(e);
    }
    ifd__gmem_close(&s->walk);
    free(s->states);
    free(s->marks);
    free(s->ids);
    free(s->keybuf);
    free(s->ikeybuf);
    free(s);
}

void ifd_gstore_stats(const ifd_gstore_t *s, ifd_gstore_stats_t *out)
{
    *out = s->st;
}

/* Drops unused grammars beyond IFD_GSTORE_KEEP, least recently used first. */
static void store_trim(ifd_gstore_t *s)
{
    for (;;) {
        size_t unused = 0;
        gentry_t *oldest = NULL, **oldest_link = NULL;
        for (gentry_t **l = &s->entries; *l; l = &(*l)->next) {
            if ((*l)->refs)
                continue;
            unused++;
            if (!oldest || (*l)->last_used < oldest->last_used) {
                oldest = *l;
                oldest_link = l;
            }
        }
        if (unused <= IFD_GSTORE_KEEP)
            return;
        *oldest_link = oldest->next;
        entry_free(oldest);
    }
}

struct ifd_constraint {
    ifd_gstore_t *store;
    gentry_t *entry;
    ifd_gmatch_t *m;
    size_t consumed;
    int32_t *seen; /* the consumed tokens, to notice a different history */
    size_t cap_seen;
    bool ended; /* an end-of-generation token was consumed */
};

/* The store's entry for a grammar given as text (compiled here) or as
 * compiled words (checked and loaded here), found or made. */
static int entry_get(ifd_gstore_t *s, const void *key, size_t len, bool compiled, gentry_t **out,
                     char *err, size_t errlen)
{
    uint64_t h = ifd_hash_bytes(key, len);
    gentry_t *e = s->entries;
    for (; e; e = e->next)
        if (e->text_hash == h && e->compiled == compiled && e->text_len == len &&
            memcmp(e->text, key, len) == 0)
            break;
    if (e) {
        *out = e;
        return 0;
    }
    e = calloc(1, sizeof *e);
    if (!e)
        return IFD_ENOMEM;
    e->text = malloc(len ? len : 1);
    e->slots = calloc(IFD_GMASK_CACHE_MAX, sizeof *e->slots);
    ifd__gmem_init(&e->ds_mem);
    /* sized for their maxima, so the caches never grow (nor fail) later */
    int rc = ifd_hash_init(&e->mask_index, IFD_GMASK_CACHE_MAX);
    rc = rc ? rc : ifd_hash_init(&e->ds_index, IFD_GDFA_MAX);
    if (!e->text || !e->slots || rc) {
        entry_free(e);
        return IFD_ENOMEM;
    }
    memcpy(e->text, key, len);
    e->text_len = len;
    e->text_hash = h;
    e->compiled = compiled;
    rc = compiled ? ifd_grammar_deserialize(key, len / sizeof(int32_t), &e->g, err, errlen)
                  : ifd_grammar_compile(key, len, &e->g, err, errlen);
    if (rc) {
        entry_free(e);
        return rc;
    }
    s->st.compiles++;
    e->next = s->entries;
    s->entries = e;
    *out = e;
    return 0;
}

static int constraint_new(ifd_gstore_t *s, gentry_t *e, ifd_constraint_t **out);

int ifd_constraint_create(ifd_gstore_t *s, const char *text, size_t len, ifd_constraint_t **out,
                          char *err, size_t errlen)
{
    gentry_t *e;
    int rc = entry_get(s, text, len, false, &e, err, errlen);
    return rc ? rc : constraint_new(s, e, out);
}

int ifd_constraint_create_compiled(ifd_gstore_t *s, const int32_t *words, size_t n,
                                   ifd_constraint_t **out, char *err, size_t errlen)
{
    gentry_t *e;
    int rc = entry_get(s, words, n * sizeof *words, true, &e, err, errlen);
    return rc ? rc : constraint_new(s, e, out);
}

static int constraint_new(ifd_gstore_t *s, gentry_t *e, ifd_constraint_t **out)
{
    ifd_constraint_t *c = calloc(1, sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    int rc = ifd_gmatch_create(e->g, &c->m);
    if (rc) {
        free(c);
        return rc;
    }
    c->store = s;
    c->entry = e;
    e->refs++;
    e->last_used = ++s->clock;
    store_trim(s);
    *out = c;
    return 0;
}

void ifd_constraint_destroy(ifd_constraint_t *c)
{
    if (!c)
        return;
    c->entry->refs--;
    IFD_ASSERT(c->entry->refs >= 0);
    c->entry->last_used = ++c->store->clock;
    ifd_gmatch_destroy(c->m);
    ifd_gstore_t *s = c->store;
    free(c->seen);
    free(c);
    store_trim(s);
}

static bool is_eog(const ifd_vocab_t *v, int32_t t)
{
    for (size_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t)
            return true;
    return false;
}

static int sync(ifd_constraint_t *c, const int32_t *gen, size_t n)
{
    const ifd_vocab_t *v = c->store->vocab;
    if (n < c->consumed || (c->consumed && memcmp(c->seen, gen, c->consumed * sizeof *gen) != 0)) {
        ifd_gmatch_reset(c->m);
        c->consumed = 0;
        c->ended = false;
    }
    if (n > c->cap_seen) {
        size_t cap = c->cap_seen ? 2 * c->cap_seen : 64;
        while (cap < n)
            cap *= 2;
        int32_t *x = realloc(c->seen, cap * sizeof *x);
        if (!x)
            return IFD_ENOMEM;
        c->seen = x;
        c->cap_seen = cap;
    }
    for (; c->consumed < n; c->consumed++) {
        int32_t t = gen[c->consumed];
        int rc = 0;
        if (t < 0 || t >= v->n_vocab || c->ended) {
            rc = IFD_EINVAL;
        } else if (is_eog(v, t)) {
            if (!ifd_gmatch_can_end(c->m))
                rc = IFD_EINVAL;
            c->ended = true;
        } else {
            uint32_t len = v->off[t + 1] - v->off[t];
            rc = len ? ifd_gmatch_accept(c->m, v->bytes + v->off[t], len) : IFD_EINVAL;
        }
        if (rc) {
            ifd_gmatch_reset(c->m);
            c->consumed = 0;
            c->ended = false;
            return rc;
        }
        c->seen[c->consumed] = t;
    }
    return 0;
}

static void set_eog(const ifd_vocab_t *v, const ifd__gstate_t *st, uint32_t *bits)
{
    if (!st->accept)
        return;
    for (size_t i = 0; i < v->n_eog; i++)
        bits[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
}

/* The id of state t in e's memo (copied in when new), or -1 when the memo
 * is full or out of memory (the caller then works without it). */
static int32_t intern(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *t)
{
    long kl = ifd__gstate_key(t, &s->ikeybuf, &s->ikeycap);
    if (kl < 0)
        return -1;
    size_t klen = (size_t)kl;
    uint64_t h = ifd_hash_bytes(s->ikeybuf, klen * sizeof *s->ikeybuf);
    uint32_t it = ifd_hash_first(&e->ds_index, h);
    for (int32_t i; (i = ifd_hash_next(&e->ds_index, h, &it)) >= 0;) {
        const dstate_t *d = &e->ds[i];
        if (d->hash == h && d->key_len == klen &&
            memcmp(d->key, s->ikeybuf, klen * sizeof *s->ikeybuf) == 0)
            return i;
    }
    if (e->n_ds >= IFD_GDFA_MAX)
        return -1;
    if (e->n_ds == e->cap_ds) {
        size_t cap = e->cap_ds ? 2 * e->cap_ds : 64;
        dstate_t *v = realloc(e->ds, cap * sizeof *v);
        if (!v)
            return -1;
        e->ds = v;
        e->cap_ds = cap;
    }
    dstate_t *d = &e->ds[e->n_ds];
    d->key = malloc(klen * sizeof *d->key);
    d->next = malloc(256 * sizeof *d->next);
    if (!d->key || !d->next || ifd__gstate_copy(&e->ds_mem, t, &d->st) ||
        ifd_hash_insert(&e->ds_index, h, (int32_t)e->n_ds)) {
        free(d->key);
        free(d->next);
        return -1;
    }
    memcpy(d->key, s->ikeybuf, klen * sizeof *d->key);
    d->key_len = klen;
    d->hash = h;
    for (int b = 0; b < 256; b++)
        d->next[b] = NEXT_UNKNOWN;
    return (int32_t)e->n_ds++;
}

/*
 * One walk of the trie from `root`. Each path position holds a state: an
 * interned one (ids[d] >= 0: its successors are memoized, so revisiting a
 * byte costs a table lookup) or, when the memo is full, a state in the walk
 * memory (ids[d] = -1, released with the depth marks).
 */
static int walk(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *root, uint32_t *bits)
{
    const ifd_grammar_t *g = e->g;
    const ifd_vocab_t *v = s->vocab;
    memset(bits, 0, s->words * sizeof *bits);
    if (e->n_ds > IFD_GDFA_MAX - IFD_GDFA_MAX / 8)
        entry_clear_dfa(e); /* nearly full: start over rather than walk unmemoized */
    ifd__gmem_t *m = &s->walk;
    ifd__gmem_release(m, (ifd__gmark_t){0, 0});
    /* one token's mask may expand at most IFD_GMASK_WORK stacks: past it the
     * sequence ends with an error, the step goes on (issue 31 row 2) */
    m->work = 0;
    m->work_limit = IFD_GMASK_WORK;
    s->states[0] = *root;
    s->ids[0] = intern(s, e, root);
    s->marks[0] = ifd__gmem_mark(m);
    size_t k = 0;
    while (k < v->n_nodes) {
        uint32_t d = v->ndepth[k];
        uint8_t byte = v->nbyte[k];
        int32_t pid = s->ids[d - 1];
        int32_t nid = pid >= 0 ? e->ds[pid].next[byte] : NEXT_UNKNOWN;
        ifd__gstate_t t;
        if (nid == NEXT_REJECT) {
            k = v->nend[k];
            continue;
        }
        if (nid >= 0) {
            t = e->ds[nid].st;
        } else {
            ifd__gmem_release(m, s->marks[d - 1]);
            const ifd__gstate_t *from = pid >= 0 ? &e->ds[pid].st : &s->states[d - 1];
            int rc = ifd__grammar_advance(g, m, from, byte, &t);
            if (rc)
                return rc;
            if (t.n == 0 && !t.accept) {
                if (pid >= 0)
                    e->ds[pid].next[byte] = NEXT_REJECT;
                k = v->nend[k];
                continue;
            }
            if (pid >= 0) {
                nid = intern(s, e, &t);
                if (nid >= 0) {
                    e->ds[pid].next[byte] = nid;
                    t = e->ds[nid].st;
                }
            }
        }
        for (int32_t tok = v->ntok[k]; tok >= 0; tok = v->tok_next[tok])
            bits[tok >> 5] |= 1u << (tok & 31);
        if (t.n == 0) {
            k = v->nend[k];
            continue;
        }
        s->states[d] = t;
        s->ids[d] = nid >= 0 ? nid : -1;
        s->marks[d] = ifd__gmem_mark(m);
        k++;
    }
    ifd__gmem_release(m, (ifd__gmark_t){0, 0});
    return 0;
}

int ifd_constraint_mask(ifd_constraint_t *c, const int32_t *generated, size_t n, uint32_t *bits)
{
    int rc = sync(c, generated, n);
    if (rc)
        return rc;
    ifd_gstore_t *s = c->store;
    const ifd_vocab_t *v = s->vocab;
    if (c->ended) {
        memset(bits, 0, s->words * sizeof *bits);
        return 0;
    }
    const ifd__gstate_t *st = ifd__gmatch_state(c->m);
    long kl = ifd__gstate_key(st, &s->keybuf, &s->keycap);
    if (kl < 0)
        return IFD_ENOMEM;
    size_t klen = (size_t)kl;
    uint64_t h = ifd_hash_bytes(s->keybuf, klen * sizeof *s->keybuf);
    gentry_t *e = c->entry;
    uint32_t it = ifd_hash_first(&e->mask_index, h);
    for (int32_t i; (i = ifd_hash_next(&e->mask_index, h, &it)) >= 0;) {
        const mslot_t *ms = &e->slots[i];
        if (ms->hash == h && ms->key_len == klen &&
            memcmp(ms->key, s->keybuf, klen * sizeof *s->keybuf) == 0) {
            memcpy(bits, ms->bits, s->words * sizeof *bits);
            s->st.mask_hits++;
            return 0;
        }
    }
    if ((rc = walk(s, e, st, bits)))
        return rc;
    set_eog(v, st, bits);
    s->st.mask_walks++;
    if (e->n_used >= IFD_GMASK_CACHE_MAX)
        entry_clear_cache(e);
    mslot_t *ms = &e->slots[e->n_used];
    ms->key = malloc(klen * sizeof *ms->key);
    ms->bits = malloc(s->words * sizeof *ms->bits);
    if (!ms->key || !ms->bits ||
        ifd_hash_insert(&e->mask_index, h, (int32_t)e->n_used)) { /* optional: keep going */
        free(ms->key);
        free(ms->bits);
        return 0;
    }
    memcpy(ms->key, s->keybuf, klen * sizeof *ms->key);
    memcpy(ms->bits, bits, s->words * sizeof *bits);
    ms->key_len = klen;
    ms->hash = h;
    e->n_used++;
    return 0;
}

int ifd_constraint_mask_brute(ifd_constraint_t *c, const int32_t *generated, size_t n,
                              uint32_t *bits)
{
    int rc = sync(c, generated, n);
    if (rc)
        return rc;
    const ifd_vocab_t *v = c->store->vocab;
    memset(bits, 0, c->store->words * sizeof *bits);
    if (c->ended)
        return 0;
    for (int32_t t = 0; t < v->n_vocab; t++) {
        uint32_t len = v->off[t + 1] - v->off[t];
        bool ok = is_eog(v, t) ? ifd_gmatch_can_end(c->m)
                  : len        ? ifd_gmatch_check(c->m, v->bytes + v->off[t], len)
                               : false;
        if (ok)
            bits[t >> 5] |= 1u << (t & 31);
    }
    return 0;
}
