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
 *
 * Frame masks (grammar_mask.h): frame_mask cuts the state, keys the frame
 * (canon_key), finds its mask in the vocabulary's or the grammar's table or
 * builds it (frame_build: a walk from the cut state that also records where
 * the frame completed), and applies it (frame_apply). Invariant: a frame
 * mask decides only tokens of at most its key's horizon; everything else it
 * lists for a check from the real state or its continuation.
 */
#include "grammar_mask.h"

#include "error.h"
#include "grammar_conv.h"
#include "grammar_impl.h"
#include "hash.h"
#include "log.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A frame mask (see grammar_mask.h): for a cut state (ifd__gstate_cut) known
 * by its canonical key, the tokens it allows on its own (a as bits, or al as
 * a list when few); the (token, bytes before its rest) pairs where it
 * completes with bytes left to check from the continuation (u: sorted by
 * the rest, with the bytes each rest shares with the one before); and the
 * tokens longer than the key's horizon that it does not reject by then (l,
 * trie order, with the bytes each shares with the one before: checked from
 * the whole state). */
typedef struct fmask {
    uint64_t hash;
    uint32_t *key;
    size_t key_len;
    uint32_t *a; /* [words], or NULL */
    int32_t *al;
    uint32_t n_al;
    uint32_t n_a; /* tokens in a or al */
    int32_t *u;
    uint8_t *u_at;
    uint16_t *u_lcp;
    uint32_t n_u, cap_u;
    int32_t *l;
    uint16_t *llcp;
    uint32_t n_l, cap_l;
} fmask_t;

static void fmask_free(fmask_t *f)
{
    free(f->key);
    free(f->a);
    free(f->al);
    free(f->u);
    free(f->u_at);
    free(f->u_lcp);
    free(f->l);
    free(f->llcp);
    memset(f, 0, sizeof *f);
}

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
    /* frame masks precomputed by ifd_vocab_prewarm (read-only afterwards) */
    fmask_t *fm; /* [IFD_VOCAB_FRAMES] */
    size_t n_fm;
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

/* What ifd_vocab_create_tokenizer precomputes: the frames of the schema
 * converter's string lexemes (grammar_conv.c BASE_RULES and string_body:
 * plain, minLength, maxLength, the common formats) met along one instance of
 * this schema. The states of a `maxLength` string 40 long cover every count
 * left (the key looks IFD_GFRAME_HORIZON bytes ahead: 17 and more look the
 * same). Only frames that allow many tokens on their own are kept. */
static const char PREWARM_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"a\":{\"type\":\"string\"},"
    "\"b\":{\"type\":\"string\",\"maxLength\":40},"
    "\"c\":{\"type\":\"string\",\"minLength\":1},"
    "\"d\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":40},"
    "\"e\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"f\":{\"type\":\"string\",\"format\":\"uri\"},"
    "\"g\":{\"type\":\"string\",\"format\":\"hostname\"},"
    "\"h\":{\"type\":\"string\",\"format\":\"uri-reference\"}},"
    "\"required\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"]}";

static const char *const PREWARM_TEXT[] = {
    "{\"a\": \"v\\n\\u00e9\\\"x\\/y\", \"b\": \"abcdefghijklmnopqrstuvwxyzabcdefghijklmn\", "
    "\"c\": \"xyz\", \"d\": \"abcdefghijklmnopqrstuvwxyzabcdefghijklmn\", "
    "\"e\": \"first.last@mail.example.com\", \"f\": \"https://example.com/a/b?c=d#e\", "
    "\"g\": \"www.example.com\", \"h\": \"/a/b?c=d#e\"}",
};

static int vocab_prewarm_json(ifd_vocab_t *v)
{
    ifd_buf_t g = IFD_BUF_INIT;
    char err[256] = "";
    json_error_t je;
    json_t *schema = json_loads(PREWARM_SCHEMA, 0, &je);
    int rc = schema ? ifd_gconv_json_schema(schema, &g, NULL, err, sizeof err) : IFD_ENOMEM;
    json_decref(schema);
    if (!rc)
        rc = ifd_vocab_prewarm(v, g.data, g.len, PREWARM_TEXT,
                               sizeof PREWARM_TEXT / sizeof PREWARM_TEXT[0], err, sizeof err);
    if (rc) /* the masks stay exact without them: only slower */
        IFD_WARN("grammar: frame masks not precomputed: %s", err[0] ? err : ifd_strerror(rc));
    ifd_buf_free(&g);
    return rc;
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
        if (!rc)
            vocab_prewarm_json(*out);
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
    for (size_t i = 0; i < v->n_fm; i++)
        fmask_free(&v->fm[i]);
    free(v->fm);
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

size_t ifd_vocab_frames(const ifd_vocab_t *v, size_t *bytes)
{
    size_t b = 0;
    for (size_t i = 0; i < v->n_fm; i++) {
        const fmask_t *f = &v->fm[i];
        b += sizeof *f + f->key_len * sizeof *f->key + f->n_al * sizeof *f->al +
             (f->a ? ((size_t)v->n_vocab + 31) / 32 * sizeof *f->a : 0) +
             f->n_u * (sizeof *f->u + sizeof *f->u_at + sizeof *f->u_lcp) +
             f->n_l * (sizeof *f->l + sizeof *f->llcp);
    }
    if (bytes)
        *bytes = b;
    return v->n_fm;
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
    int32_t *next;     /* [256] */
    uint64_t takes[4]; /* next-byte filter (path_filter) of st */
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
    /* frame masks computed for this grammar */
    fmask_t *fm; /* [IFD_GFRAME_MAX], allocated at the first */
    size_t n_fm;
    uint8_t *minlen; /* [n_rules]: bytes each rule needs at least (saturating at 255) */
} gentry_t;

#define CK_SLOTS (4 * IFD_GFRAME_KEY_MAX) /* a power of two */

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
    /* per path depth: the bytes some stack of states[d] takes next (all
     * ones when not computed: states with few stacks), see path_filter;
     * unused where ids[d] >= 0 (the interned state's takes) */
    uint64_t (*nset)[4];
    uint32_t *keybuf; /* the mask cache's key */
    size_t keycap;
    uint32_t *ikeybuf; /* the transition memo's key */
    size_t ikeycap;
    ifd__gmem_t cut;   /* the cut state of a frame mask */
    uint32_t *ckeybuf; /* the canonical key of a cut state */
    size_t ckeycap;
    uint32_t *cq; /* [IFD_GFRAME_KEY_MAX] positions in key order */
    /* the key's positions met: open addressing over CK_SLOTS slots, pos + 1
     * (0: free) -> {canonical id, distance | bit 30 once written} */
    uint32_t *ck_pos;
    int32_t (*ck_val)[2];
    uint32_t hmax;     /* the longest horizon: the longest token, at most 254 */
    uint32_t **bucket; /* [hmax + 1]: the key's positions to write, by distance */
    uint32_t *n_bucket, *cap_bucket;
    uint8_t *cdep;        /* [max_depth + 2]: where the frame completed on the path */
    ifd_vocab_t *prewarm; /* ifd_vocab_prewarm: frame masks go to the vocab */
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
    ifd__gmem_init(&s->cut);
    s->states = calloc(vocab->max_depth + 2, sizeof *s->states);
    s->marks = calloc(vocab->max_depth + 2, sizeof *s->marks);
    s->ids = calloc(vocab->max_depth + 2, sizeof *s->ids);
    s->nset = calloc(vocab->max_depth + 2, sizeof *s->nset);
    s->cq = malloc(IFD_GFRAME_KEY_MAX * sizeof *s->cq);
    s->ck_pos = calloc(CK_SLOTS, sizeof *s->ck_pos);
    s->ck_val = malloc(CK_SLOTS * sizeof *s->ck_val);
    s->hmax = vocab->max_depth < 254 ? vocab->max_depth : 254;
    s->hmax = s->hmax > IFD_GFRAME_HORIZON ? s->hmax : IFD_GFRAME_HORIZON;
    s->bucket = calloc(s->hmax + 1, sizeof *s->bucket);
    s->n_bucket = calloc(s->hmax + 1, sizeof *s->n_bucket);
    s->cap_bucket = calloc(s->hmax + 1, sizeof *s->cap_bucket);
    s->cdep = calloc(vocab->max_depth + 2, sizeof *s->cdep);
    if (!s->states || !s->marks || !s->ids || !s->nset || !s->cq || !s->ck_pos || !s->ck_val ||
        !s->bucket || !s->n_bucket || !s->cap_bucket || !s->cdep) {
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
    for (size_t i = 0; i < e->n_fm; i++)
        fmask_free(&e->fm[i]);
    free(e->fm);
    free(e->minlen);
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
    ifd__gmem_close(&s->cut);
    free(s->states);
    free(s->marks);
    free(s->ids);
    free(s->nset);
    free(s->cq);
    free(s->ck_pos);
    free(s->ck_val);
    free(s->ckeybuf);
    for (uint32_t d = 0; s->bucket && d <= s->hmax; d++)
        free(s->bucket[d]);
    free(s->bucket);
    free(s->n_bucket);
    free(s->cap_bucket);
    free(s->cdep);
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

/*
 * Lower bounds of the bytes each rule needs to complete, for the frame
 * keys' distances (canon_key): from 0, a few passes of "the least of the
 * alternatives' sums" over the rules, highest id first (the helper rules
 * a rule refers to come after it). Each pass keeps every bound at or below
 * the true least length, so stopping early only loosens them. Saturates at
 * 255 (past any horizon). 0 or IFD_ENOMEM.
 */
static int rule_minlen(gentry_t *e)
{
    const ifd_grammar_t *g = e->g;
    e->minlen = calloc(g->n_rules ? g->n_rules : 1, 1);
    if (!e->minlen)
        return IFD_ENOMEM;
    const unsigned cap = 255;
    int passes = g->n_el > (1u << 16) ? 2 : 8; /* bounded time on huge grammars */
    for (int pass = 0; pass < passes; pass++) {
        bool changed = false;
        for (size_t r = g->n_rules; r-- > 0;) {
            unsigned best = cap;
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && best; a++) {
                unsigned sum = 0;
                for (uint32_t p = g->alts[a]; sum < cap; p++) {
                    uint32_t t = g->el[p].type;
                    if (t == IFD__GE_SET)
                        sum++;
                    else if (t == IFD__GE_RULE)
                        sum += e->minlen[g->el[p].v];
                    else
                        break;
                }
                best = sum < best ? sum : best;
            }
            if (best > e->minlen[r]) {
                e->minlen[r] = (uint8_t)best;
                changed = true;
            }
        }
        if (!changed)
            break;
    }
    return 0;
}

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
    if ((rc = rule_minlen(e))) {
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

static void state_takes(const ifd_grammar_t *g, const ifd__gstate_t *t, uint64_t w[4]);

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
    state_takes(e->g, &d->st, d->takes);
    return (int32_t)e->n_ds++;
}

/*
 * The next-byte filter of path position d: the union of the byte sets at
 * the tops of states[d]'s stacks, so that a byte no stack takes is rejected
 * without an advance (which would test every stack, then build and drop an
 * empty state). A trie node has up to ~250 children, and a state with many
 * stacks (an object with many optional properties after a comma, an anyOf
 * of objects) rejects most of them: computed only for states with at least
 * IFD_GWALK_FILTER_MIN stacks, all ones otherwise. Exact: advance(t, b) is
 * empty exactly when no stack's top takes b.
 */
static void state_takes(const ifd_grammar_t *g, const ifd__gstate_t *t, uint64_t w[4])
{
    if (t->n < IFD_GWALK_FILTER_MIN) {
        w[0] = w[1] = w[2] = w[3] = UINT64_MAX;
        return;
    }
    w[0] = w[1] = w[2] = w[3] = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        uint64_t x[4];
        memcpy(x, g->sets[g->el[t->v[i]->pos].v], sizeof x);
        for (int j = 0; j < 4; j++)
            w[j] |= x[j];
    }
}

/* path position d's filter: an interned state's (id >= 0: computed once,
 * when it was interned; looked up by id, as ds may move), else computed
 * into nset[d] */
static void path_filter(ifd_gstore_t *s, const gentry_t *e, uint32_t d, int32_t id,
                        const ifd__gstate_t *t)
{
    if (id < 0)
        state_takes(e->g, t, s->nset[d]);
}

/* Path position d holds state t (interned as id, or -1): its copy, its
 * mark in the walk memory and its next-byte filter. */
static void path_set(ifd_gstore_t *s, const gentry_t *e, uint32_t d, const ifd__gstate_t *t,
                     int32_t id)
{
    s->states[d] = *t;
    s->ids[d] = id;
    s->marks[d] = ifd__gmem_mark(&s->walk);
    path_filter(s, e, d, id, t);
}

static inline bool path_takes(const ifd_gstore_t *s, const gentry_t *e, uint32_t d, uint8_t b)
{
    const uint64_t *w = s->ids[d] >= 0 ? e->ds[s->ids[d]].takes : s->nset[d];
    return (w[b >> 6] >> (b & 63)) & 1;
}

/*
 * One walk of the trie from `root`. Each path position holds a state: an
 * interned one (ids[d] >= 0: its successors are memoized, so revisiting a
 * byte costs a table lookup) or, when the memo is full, a state in the walk
 * memory (ids[d] = -1, released with the depth marks). With max_nodes (0:
 * none), gives up with 1 after visiting that many trie nodes.
 */
static int walk(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *root, uint32_t *bits,
                size_t max_nodes)
{
    size_t visited = 0;
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
    path_set(s, e, 0, root, intern(s, e, root));
    size_t k = 0;
    while (k < v->n_nodes) {
        if (max_nodes && ++visited > max_nodes) {
            ifd__gmem_release(m, (ifd__gmark_t){0, 0});
            return 1;
        }
        uint32_t d = v->ndepth[k];
        uint8_t byte = v->nbyte[k];
        int32_t pid = s->ids[d - 1];
        int32_t nid = pid >= 0 ? e->ds[pid].next[byte] : NEXT_UNKNOWN;
        ifd__gstate_t t;
        if (nid == NEXT_UNKNOWN && !path_takes(s, e, d - 1, byte)) {
            nid = NEXT_REJECT;
            s->st.filter_skips++;
            if (pid >= 0)
                e->ds[pid].next[byte] = NEXT_REJECT;
        }
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
        path_set(s, e, d, &t, nid >= 0 ? nid : -1);
        k++;
    }
    ifd__gmem_release(m, (ifd__gmark_t){0, 0});
    return 0;
}

/* ---- frame masks ------------------------------------------------------------------- */

/* Appends w to the canonical key (grown with realloc). */
static int ckey_put(ifd_gstore_t *s, size_t *n, uint32_t w)
{
    if (*n == s->ckeycap) {
        size_t cap = s->ckeycap ? 2 * s->ckeycap : 256;
        uint32_t *b = realloc(s->ckeybuf, cap * sizeof *b);
        if (!b)
            return IFD_ENOMEM;
        s->ckeybuf = b;
        s->ckeycap = cap;
    }
    s->ckeybuf[(*n)++] = w;
    return 0;
}

/* Position p met at distance d (bytes, a lower bound) by the key's
 * traversal: its canonical id (numbered in the order first met) into the
 * key, and p queued at d when that is nearer than before. -1 past
 * IFD_GFRAME_KEY_MAX positions, IFD_ENOMEM. */
/* The key table's entry for position p, made ({-1, -1}) when new. There is
 * always a free slot: at most IFD_GFRAME_KEY_MAX of CK_SLOTS are used. */
static int32_t *ck_slot(ifd_gstore_t *s, uint32_t p)
{
    uint32_t i = (uint32_t)ifd_hash_u64(p) & (CK_SLOTS - 1);
    while (s->ck_pos[i] && s->ck_pos[i] != p + 1)
        i = (i + 1) & (CK_SLOTS - 1);
    if (!s->ck_pos[i]) {
        s->ck_pos[i] = p + 1;
        s->ck_val[i][0] = s->ck_val[i][1] = -1;
    }
    return s->ck_val[i];
}

static int ckey_ref(ifd_gstore_t *s, uint32_t p, uint32_t d, uint32_t h, uint32_t cap, uint32_t *nq,
                    size_t *n)
{
    int32_t *c = ck_slot(s, p);
    if (c[0] < 0) {
        if (*nq == cap) { /* not in cq, so not emptied after: free it (the last made) */
            s->ck_pos[(c - s->ck_val[0]) / 2] = 0;
            return -1;
        }
        c[0] = (int32_t)*nq;
        c[1] = 0x3fffffff; /* no distance yet; bit 30: written */
        s->cq[(*nq)++] = p;
    }
    if (ckey_put(s, n, (uint32_t)c[0]))
        return IFD_ENOMEM;
    if (!(c[1] & 0x40000000) && (int32_t)d < c[1] && d <= h) {
        c[1] = (int32_t)d;
        uint32_t *b = s->bucket[d];
        if (s->n_bucket[d] == s->cap_bucket[d]) {
            uint32_t cap = s->cap_bucket[d] ? 2 * s->cap_bucket[d] : 64;
            if (!(b = realloc(b, cap * sizeof *b)))
                return IFD_ENOMEM;
            s->bucket[d] = b;
            s->cap_bucket[d] = cap;
        }
        b[s->n_bucket[d]++] = p;
    }
    return 0;
}

/*
 * The canonical key of the cut state c into s->ckeybuf: its stacks as
 * canonical positions, then every position reachable from them in at most
 * h bytes (distances are lower bounds: rule_minlen) (the rest of each alternative, the alternatives
 * of each rule referenced), numbered in the order a deterministic traversal
 * meets them (nearest first), with its element: SET (its 256 bits, next),
 * RULE (its alternatives, next), done, or "farther" (past the horizon). Two
 * states with equal keys have isomorphic grammars within the horizon with
 * their stacks at the same places: every byte string of at most
 * h bytes is alive, dead or completes the frame alike from
 * both. So frame masks decide tokens up to that length and list longer ones
 * for the check. A key never depends on where the rules sit in their
 * grammar, nor on what lies farther (the count left in `x{0,99}`). Returns
 * the length, -1 when more than cap (≤ IFD_GFRAME_KEY_MAX) positions are met
 * (no frame mask for this state), or IFD_ENOMEM.
 */
static long canon_key(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *c, uint32_t h,
                      uint32_t cap)
{
    const ifd_grammar_t *g = e->g;
    size_t n = 0;
    uint32_t nq = 0;
    long rc = 0;
    for (uint32_t d = 0; d <= h; d++)
        s->n_bucket[d] = 0;
#define PUT(w)                                                                                     \
    do {                                                                                           \
        if (ckey_put(s, &n, (w))) {                                                                \
            rc = IFD_ENOMEM;                                                                       \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
#define REF(p, d)                                                                                  \
    do {                                                                                           \
        int r_ = ckey_ref(s, (p), (d), h, cap, &nq, &n);                                           \
        if (r_) {                                                                                  \
            rc = r_;                                                                               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
    PUT(h);
    PUT(c->n);
    for (uint32_t i = 0; i < c->n; i++) {
        for (const ifd__gnode_t *x = c->v[i]; x; x = x->parent)
            REF(x->pos, 0);
        PUT(0xffffffffu);
    }
    PUT(c->accept);
    /* nearest first: a position is written once, at its least distance */
    for (uint32_t d = 0; d <= h; d++) {
        for (uint32_t bi = 0; bi < s->n_bucket[d]; bi++) {
            uint32_t p = s->bucket[d][bi];
            int32_t *cp = ck_slot(s, p);
            if (cp[1] != (int32_t)d || (cp[1] & 0x40000000))
                continue; /* nearer, or written */
            const ifd__gelem_t *el = &g->el[p];
            PUT((uint32_t)cp[0]);
            cp[1] |= 0x40000000;
            if (el->type == IFD__GE_SET) {
                PUT(1);
                uint32_t w[8];
                memcpy(w, g->sets[el->v], sizeof w);
                for (int j = 0; j < 8; j++)
                    PUT(w[j]);
                REF(p + 1, d + 1);
            } else if (el->type == IFD__GE_RULE) {
                uint32_t r = el->v;
                PUT(2);
                PUT(g->alt_off[r + 1] - g->alt_off[r]);
                for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
                    REF(g->alts[a], d);
                REF(p + 1, d + e->minlen[r]);
            } else {
                PUT(0); /* END or ALT: the alternative is complete */
            }
        }
    }
    PUT(0xfffffffeu);
    for (uint32_t qi = 0; qi < nq; qi++) /* the rest: past the horizon */
        if (!(ck_slot(s, s->cq[qi])[1] & 0x40000000))
            PUT(qi);
    rc = (long)n;
out:
    for (uint32_t qi = 0; qi < nq; qi++) { /* empty the table (no deletions: all go) */
        uint32_t i = (uint32_t)ifd_hash_u64(s->cq[qi]) & (CK_SLOTS - 1);
        while (s->ck_pos[i] != s->cq[qi] + 1)
            i = (i + 1) & (CK_SLOTS - 1);
        s->ck_pos[i] = 0;
    }
    return rc;
#undef PUT
#undef REF
}

/* Pairs (tok, each of the path's completion depths pts[0..n)) into f->u,
 * and (tok, at) when `at` is not 0xffff. */
static int fmask_add_u(fmask_t *f, int32_t tok, const uint8_t *pts, uint32_t n, uint32_t at)
{
    uint32_t need = n + (at != 0xffff);
    if (f->n_u + need > f->cap_u) {
        uint32_t cap = f->cap_u ? 2 * f->cap_u : 256;
        while (cap < f->n_u + need)
            cap *= 2;
        int32_t *u = realloc(f->u, cap * sizeof *u);
        if (u)
            f->u = u;
        uint8_t *ua = realloc(f->u_at, cap);
        if (ua)
            f->u_at = ua;
        if (!u || !ua)
            return IFD_ENOMEM;
        f->cap_u = cap;
    }
    for (uint32_t i = 0; i < need; i++) {
        f->u[f->n_u] = tok;
        f->u_at[f->n_u++] = i < n ? pts[i] : (uint8_t)at;
    }
    return 0;
}

static int fmask_add_l(fmask_t *f, int32_t tok)
{
    if (f->n_l == f->cap_l) {
        uint32_t cap = f->cap_l ? 2 * f->cap_l : 64;
        int32_t *l = realloc(f->l, cap * sizeof *l);
        if (!l)
            return IFD_ENOMEM;
        f->l = l;
        f->cap_l = cap;
    }
    f->l[f->n_l++] = tok;
    return 0;
}

/* Every token of the trie nodes [from, to) into f->u with the completion
 * depths pts[0..n) of the path above them. */
static int fmask_add_nodes(const ifd_vocab_t *v, fmask_t *f, size_t from, size_t to,
                           const uint8_t *pts, uint32_t n)
{
    for (size_t j = from; j < to; j++)
        for (int32_t tok = v->ntok[j]; tok >= 0; tok = v->tok_next[tok])
            if (fmask_add_u(f, tok, pts, n, 0xffff))
                return IFD_ENOMEM;
    return 0;
}

/* The bytes a and b share at their start. */
static uint32_t common_prefix(const uint8_t *a, uint32_t la, const uint8_t *b, uint32_t lb)
{
    uint32_t l = 0;
    while (l < la && l < lb && a[l] == b[l])
        l++;
    return l;
}

static int cmp_rest(const void *x, const void *y, void *arg)
{
    const ifd_vocab_t *v = ((const void *const *)arg)[0];
    const fmask_t *f = ((const void *const *)arg)[1];
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    const uint8_t *a = v->bytes + v->off[f->u[i]] + f->u_at[i];
    const uint8_t *b = v->bytes + v->off[f->u[j]] + f->u_at[j];
    uint32_t la = v->off[f->u[i] + 1] - v->off[f->u[i]] - f->u_at[i];
    uint32_t lb = v->off[f->u[j] + 1] - v->off[f->u[j]] - f->u_at[j];
    int c = memcmp(a, b, la < lb ? la : lb);
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* f->u sorted by the rests, their shared prefixes; f->a as a list when it
 * holds few tokens. 0 or IFD_ENOMEM. */
static int fmask_finish(const ifd_vocab_t *v, fmask_t *f)
{
    if (f->n_u) {
        uint32_t *ord = malloc(f->n_u * sizeof *ord);
        int32_t *u = malloc(f->n_u * sizeof *u);
        uint8_t *at = malloc(f->n_u);
        f->u_lcp = malloc(f->n_u * sizeof *f->u_lcp);
        if (!ord || !u || !at || !f->u_lcp) {
            free(ord);
            free(u);
            free(at);
            return IFD_ENOMEM;
        }
        for (uint32_t i = 0; i < f->n_u; i++)
            ord[i] = i;
        const void *arg[2] = {v, f};
        qsort_r(ord, f->n_u, sizeof *ord, cmp_rest, (void *)arg);
        for (uint32_t i = 0; i < f->n_u; i++) {
            u[i] = f->u[ord[i]];
            at[i] = f->u_at[ord[i]];
        }
        free(ord);
        free(f->u);
        free(f->u_at);
        f->u = u;
        f->u_at = at;
        for (uint32_t i = 0; i < f->n_u; i++) {
            uint32_t l = 0;
            if (i) {
                int32_t p = f->u[i - 1], t = f->u[i];
                l = common_prefix(v->bytes + v->off[p] + f->u_at[i - 1],
                                  v->off[p + 1] - v->off[p] - f->u_at[i - 1],
                                  v->bytes + v->off[t] + f->u_at[i],
                                  v->off[t + 1] - v->off[t] - f->u_at[i]);
            }
            f->u_lcp[i] = (uint16_t)l;
        }
    }
    uint32_t n = 0;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    for (size_t w = 0; w < words; w++)
        n += (uint32_t)__builtin_popcount(f->a[w]);
    f->n_a = n;
    if (n <= IFD_GFRAME_LIST) {
        f->al = malloc((n ? n : 1) * sizeof *f->al);
        if (!f->al)
            return IFD_ENOMEM;
        for (size_t w = 0; w < words; w++)
            for (uint32_t x = f->a[w]; x; x &= x - 1)
                f->al[f->n_al++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(x));
        free(f->a);
        f->a = NULL;
    }
    return 0;
}

/*
 * The frame mask of the cut state `root` into f (whose key, of horizon h, is
 * set): one walk of the trie as walk() does, also keeping the depths at which
 * the frame completed (accept) on the path. A token of at most h bytes alive
 * at its end is in f->a; one that is not but whose path completed the frame
 * (at its end, or before: then the whole subtree) is in f->u with those
 * depths; a longer token whose first h bytes are not rejected is in f->l.
 * 0, IFD_ETOOBIG (the walk's budget), IFD_ENOMEM.
 */
static int frame_build(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *root, uint32_t h,
                       fmask_t *f)
{
    const ifd_grammar_t *g = e->g;
    const ifd_vocab_t *v = s->vocab;
    f->a = calloc(s->words, sizeof *f->a);
    if (!f->a)
        return IFD_ENOMEM;
    if (e->n_ds > IFD_GDFA_MAX - IFD_GDFA_MAX / 8)
        entry_clear_dfa(e);
    ifd__gmem_t *m = &s->walk;
    ifd__gmem_release(m, (ifd__gmark_t){0, 0});
    m->work = 0;
    m->work_limit = IFD_GMASK_WORK;
    path_set(s, e, 0, root, intern(s, e, root));
    uint32_t ncd = 0; /* completion depths on the path: s->cdep[0..ncd) */
    if (root->accept)
        s->cdep[ncd++] = 0;
    size_t k = 0;
    int rc = 0;
    while (k < v->n_nodes && !rc) {
        uint32_t d = v->ndepth[k];
        while (ncd && s->cdep[ncd - 1] >= d)
            ncd--;
        if (d > h) { /* beyond what the key decides: checked on use */
            for (size_t j = k; j < v->nend[k] && !rc; j++)
                for (int32_t tok = v->ntok[j]; tok >= 0 && !rc; tok = v->tok_next[tok])
                    rc = fmask_add_l(f, tok);
            k = v->nend[k];
            continue;
        }
        uint8_t byte = v->nbyte[k];
        int32_t pid = s->ids[d - 1];
        int32_t nid = pid >= 0 ? e->ds[pid].next[byte] : NEXT_UNKNOWN;
        ifd__gstate_t t = {0};
        if (nid == NEXT_UNKNOWN && !path_takes(s, e, d - 1, byte)) {
            nid = NEXT_REJECT;
            s->st.filter_skips++;
            if (pid >= 0)
                e->ds[pid].next[byte] = NEXT_REJECT;
        }
        bool dead = nid == NEXT_REJECT;
        if (nid >= 0) {
            t = e->ds[nid].st;
        } else if (!dead) {
            ifd__gmem_release(m, s->marks[d - 1]);
            const ifd__gstate_t *from = pid >= 0 ? &e->ds[pid].st : &s->states[d - 1];
            if ((rc = ifd__grammar_advance(g, m, from, byte, &t)))
                break;
            dead = t.n == 0 && !t.accept;
            if (dead && pid >= 0)
                e->ds[pid].next[byte] = NEXT_REJECT;
            if (!dead && pid >= 0 && (nid = intern(s, e, &t)) >= 0) {
                e->ds[pid].next[byte] = nid;
                t = e->ds[nid].st;
            }
        }
        if (dead) {
            if (ncd) /* completed before: the continuation decides */
                rc = fmask_add_nodes(v, f, k, v->nend[k], s->cdep, ncd);
            k = v->nend[k];
            continue;
        }
        for (int32_t tok = v->ntok[k]; tok >= 0 && !rc; tok = v->tok_next[tok]) {
            if (t.n)
                f->a[tok >> 5] |= 1u << (tok & 31);
            else /* completed exactly at its end */
                rc = fmask_add_u(f, tok, s->cdep, ncd, d);
        }
        if (t.accept)
            s->cdep[ncd++] = (uint8_t)d;
        if (t.n == 0) {
            if (!rc)
                rc = fmask_add_nodes(v, f, k + 1, v->nend[k], s->cdep, ncd);
            k = v->nend[k];
            continue;
        }
        path_set(s, e, d, &t, nid >= 0 ? nid : -1);
        k++;
    }
    ifd__gmem_release(m, (ifd__gmark_t){0, 0});
    if (rc)
        return rc;
    if ((rc = fmask_finish(v, f)))
        return rc;
    if (f->n_l && !(f->llcp = malloc(f->n_l * sizeof *f->llcp)))
        return IFD_ENOMEM;
    for (uint32_t i = 0; i < f->n_l; i++) {
        uint32_t l = 0;
        if (i) {
            const uint8_t *a = v->bytes + v->off[f->l[i - 1]], *b = v->bytes + v->off[f->l[i]];
            uint32_t la = v->off[f->l[i - 1] + 1] - v->off[f->l[i - 1]];
            uint32_t lb = v->off[f->l[i] + 1] - v->off[f->l[i]];
            while (l < la && l < lb && a[l] == b[l])
                l++;
        }
        f->llcp[i] = (uint16_t)l;
    }
    return 0;
}

/* One step of a check: the state after byte b from path position d (its
 * memo id ids[d], or states[d]), into position d + 1. 1 when alive, 0 when
 * rejected, or an error. */
static int check_step(ifd_gstore_t *s, gentry_t *e, uint32_t d, uint8_t b)
{
    int32_t pid = s->ids[d];
    int32_t nid = pid >= 0 ? e->ds[pid].next[b] : NEXT_UNKNOWN;
    ifd__gstate_t t;
    if (nid == NEXT_UNKNOWN && !path_takes(s, e, d, b)) {
        s->st.filter_skips++;
        if (pid >= 0)
            e->ds[pid].next[b] = NEXT_REJECT;
        return 0;
    }
    if (nid == NEXT_REJECT)
        return 0;
    if (nid >= 0) {
        t = e->ds[nid].st;
    } else {
        ifd__gmem_release(&s->walk, s->marks[d]);
        const ifd__gstate_t *from = pid >= 0 ? &e->ds[pid].st : &s->states[d];
        int rc = ifd__grammar_advance(e->g, &s->walk, from, b, &t);
        if (rc)
            return rc;
        if (t.n == 0 && !t.accept) {
            if (pid >= 0)
                e->ds[pid].next[b] = NEXT_REJECT;
            return 0;
        }
        if (pid >= 0 && (nid = intern(s, e, &t)) >= 0) {
            e->ds[pid].next[b] = nid;
            t = e->ds[nid].st;
        }
    }
    path_set(s, e, d + 1, &t, nid >= 0 ? nid : -1);
    return 1;
}

/*
 * The mask of state st (cut at `suffix`) from its frame mask f: f->a; each
 * token of f->u whose rest, after one of its completion depths, the
 * continuation allows (the state once the frame completes,
 * ifd__grammar_resume: the same whichever way the frame completed); each
 * token of f->l that st allows, run from st in trie order (a token reuses
 * the states of the prefix it shares with the one before, and one that
 * shares a rejected prefix is rejected at once).
 */
static int frame_apply(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *st,
                       const ifd__gnode_t *suffix, const fmask_t *f, uint32_t *bits)
{
    const ifd_vocab_t *v = s->vocab;
    if (f->a) {
        memcpy(bits, f->a, s->words * sizeof *bits);
    } else {
        memset(bits, 0, s->words * sizeof *bits);
        for (uint32_t i = 0; i < f->n_al; i++)
            bits[f->al[i] >> 5] |= 1u << (f->al[i] & 31);
    }
    if (!f->n_u && !f->n_l)
        return 0;
    if (e->n_ds > IFD_GDFA_MAX - IFD_GDFA_MAX / 8)
        entry_clear_dfa(e);
    ifd__gmem_t *m = &s->walk;
    m->work = 0;
    m->work_limit = IFD_GMASK_WORK;
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        /* pass 0: the rests of f->u from the continuation; 1: f->l from st */
        uint32_t n = pass ? f->n_l : f->n_u;
        if (!n)
            continue;
        ifd__gmem_release(m, (ifd__gmark_t){0, 0});
        if (pass) {
            s->states[0] = *st;
        } else if ((rc = ifd__grammar_resume(e->g, &s->cut, suffix, &s->states[0]))) {
            break;
        }
        s->ids[0] = intern(s, e, &s->states[0]);
        if (s->ids[0] >= 0)
            s->states[0] = e->ds[s->ids[0]].st;
        s->marks[0] = ifd__gmem_mark(m);
        path_filter(s, e, 0, s->ids[0], &s->states[0]);
        bool alive0 = s->states[0].n || s->states[0].accept;
        uint32_t dead = alive0 ? UINT32_MAX : 0; /* the previous rest's rejected prefix */
        for (uint32_t i = 0; i < n && !rc; i++) {
            int32_t tok = pass ? f->l[i] : f->u[i];
            uint32_t at = pass ? 0 : f->u_at[i];
            const uint8_t *b = v->bytes + v->off[tok] + at;
            uint32_t len = v->off[tok + 1] - v->off[tok] - at;
            uint32_t d = pass ? f->llcp[i] : f->u_lcp[i];
            if (d >= dead)
                continue; /* the same rejected prefix */
            dead = UINT32_MAX;
            for (; d < len; d++) {
                int r = check_step(s, e, d, b[d]);
                if (r <= 0) {
                    rc = r;
                    dead = d + 1;
                    break;
                }
            }
            if (!rc && dead == UINT32_MAX)
                bits[tok >> 5] |= 1u << (tok & 31);
        }
    }
    ifd__gmem_release(m, (ifd__gmark_t){0, 0});
    return rc;
}

static const fmask_t *fmask_find(const fmask_t *fm, size_t n, uint64_t h, const uint32_t *key,
                                 size_t klen)
{
    for (size_t i = 0; i < n; i++)
        if (fm[i].hash == h && fm[i].key_len == klen &&
            memcmp(fm[i].key, key, klen * sizeof *key) == 0)
            return &fm[i];
    return NULL;
}

/*
 * The mask of st through a frame mask: the vocabulary's (precomputed at its
 * load), or this grammar's, or a new one for this grammar when the cut
 * state has a continuation (a frame shared by several places of the
 * grammar: the inside of every string). Returns 0 (bits written), 1 when no
 * frame mask applies (the caller walks), or an error.
 */
/*
 * The frame mask of state st cut `lower` nodes below its common suffix
 * (ifd__gstate_cut): the vocabulary's (precomputed at its load), or this
 * grammar's, or a new one for this grammar. 0 with *f and *suffix set;
 * FIND_WALK when no frame mask applies (no common suffix, a key too big,
 * the tables full: the caller walks); FIND_DONE when the quick walk tried
 * before building one finished (bits written); or an error.
 */
enum { FIND_WALK = 1, FIND_DONE = 2 };

static int frame_find(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *st, uint32_t lower,
                      const fmask_t **fout, const ifd__gnode_t **suffix, uint32_t *bits)
{
    const ifd_vocab_t *v = s->vocab;
    ifd__gmem_release(&s->cut, (ifd__gmark_t){0, 0});
    ifd__gstate_t c;
    int rc = ifd__gstate_cut(&s->cut, st, lower, &c, suffix);
    if (rc)
        return rc;
    if (!*suffix)
        return FIND_WALK; /* the whole stack: a root-level state, walked */
    /* the whole longest token when the frame's grammar is small (a string's
     * body), else IFD_GFRAME_HORIZON (a count: `x{0,99}`) */
    uint32_t h = s->hmax;
    long kl = canon_key(s, e, &c, h, IFD_GFRAME_KEY_MAX / 4);
    if (kl == -1 && h > IFD_GFRAME_HORIZON)
        kl = canon_key(s, e, &c, h = IFD_GFRAME_HORIZON, IFD_GFRAME_KEY_MAX);
    if (kl < 0)
        return kl == -1 ? FIND_WALK : (int)kl;
    size_t klen = (size_t)kl;
    uint64_t kh = ifd_hash_bytes(s->ckeybuf, klen * sizeof *s->ckeybuf);
    const fmask_t *f = fmask_find(v->fm, v->n_fm, kh, s->ckeybuf, klen);
    if (f) {
        s->st.frame_shared++;
    } else if ((f = fmask_find(e->fm, e->n_fm, kh, s->ckeybuf, klen))) {
        s->st.frame_local++;
    } else {
        fmask_t *nf;
        if (s->prewarm && s->prewarm->n_fm < IFD_VOCAB_FRAMES)
            nf = &s->prewarm->fm[s->prewarm->n_fm];
        else if (!s->prewarm && e->n_fm < IFD_GFRAME_MAX &&
                 (e->fm || (e->fm = calloc(IFD_GFRAME_MAX, sizeof *e->fm))))
            nf = &e->fm[e->n_fm];
        else
            return FIND_WALK;
        if (!s->prewarm && !lower) {
            /* a small mask (no string inside) is cheaper walked than kept */
            if ((rc = walk(s, e, st, bits, IFD_GWALK_QUICK)) != 1) {
                s->st.mask_walks += !rc;
                return rc ? rc : FIND_DONE;
            }
        }
        memset(nf, 0, sizeof *nf);
        nf->key = malloc(klen * sizeof *nf->key);
        if (!nf->key)
            return IFD_ENOMEM;
        memcpy(nf->key, s->ckeybuf, klen * sizeof *nf->key);
        nf->key_len = klen;
        nf->hash = kh;
        if ((rc = frame_build(s, e, &c, h, nf))) {
            fmask_free(nf);
            return rc == IFD_ETOOBIG ? FIND_WALK : rc;
        }
        uint32_t few =
            (uint32_t)v->n_vocab / 8 < IFD_GFRAME_LIST ? (uint32_t)v->n_vocab / 8 : IFD_GFRAME_LIST;
        if (s->prewarm && nf->n_a < few) {
            fmask_free(nf); /* few tokens: as cheap to walk, not kept */
            return FIND_WALK;
        }
        if (s->prewarm)
            s->prewarm->n_fm++;
        else
            e->n_fm++;
        s->st.frame_builds++;
        f = nf;
    }
    *fout = f;
    return 0;
}

static int frame_mask(ifd_gstore_t *s, gentry_t *e, const ifd__gstate_t *st, uint32_t *bits)
{
    const ifd_vocab_t *v = s->vocab;
    /* a state that takes few bytes next (structure, digits, a literal) has a
     * small mask, cheaper walked than keyed */
    uint64_t next[4] = {0};
    for (uint32_t i = 0; i < st->n; i++) {
        uint64_t w[4];
        memcpy(w, e->g->sets[e->g->el[st->v[i]->pos].v], sizeof w);
        for (int j = 0; j < 4; j++)
            next[j] |= w[j];
    }
    int nb = 0;
    for (int j = 0; j < 4; j++)
        nb += __builtin_popcountll(next[j]);
    if (nb < IFD_GFRAME_MIN_BYTES && !s->prewarm)
        return 1;
    /* a frame that completes after a byte or so (the first, mandatory
     * character of a string) leaves nearly every token to check: cut lower */
    for (uint32_t lower = 0;; lower++) {
        const fmask_t *f;
        const ifd__gnode_t *suffix;
        int rc = frame_find(s, e, st, lower, &f, &suffix, bits);
        if (rc == FIND_DONE)
            return 0;
        if (rc < 0)
            return rc;
        if (rc == FIND_WALK) {
            if (!lower && !s->prewarm)
                return 1;
            if (!lower) /* prewarm: the frame was not kept; a lower one may be */
                continue;
            break; /* lower did not work: the frame above does */
        }
        if (f->n_u > (uint32_t)v->n_vocab / 4 && lower < 2)
            continue;
        return frame_apply(s, e, st, suffix, f, bits);
    }
    /* the frame one level up, found again (now in a table) */
    const fmask_t *f;
    const ifd__gnode_t *suffix;
    int rc = frame_find(s, e, st, 0, &f, &suffix, bits);
    return rc ? rc : frame_apply(s, e, st, suffix, f, bits);
}

int ifd_vocab_prewarm(ifd_vocab_t *v, const char *grammar, size_t len, const char *const *texts,
                      size_t n_texts, char *err, size_t errlen)
{
    if (!v->fm && !(v->fm = calloc(IFD_VOCAB_FRAMES, sizeof *v->fm)))
        return IFD_ENOMEM;
    ifd_gstore_t *s;
    int rc = ifd_gstore_create(v, &s);
    if (rc)
        return rc;
    s->prewarm = v;
    ifd_constraint_t *c = NULL;
    uint32_t *bits = malloc(s->words * sizeof *bits);
    rc = bits ? ifd_constraint_create(s, grammar, len, &c, err, errlen) : IFD_ENOMEM;
    for (size_t i = 0; i < n_texts && !rc; i++) {
        ifd_gmatch_reset(c->m);
        size_t n = strlen(texts[i]);
        for (size_t j = 0; j <= n && !rc; j++) {
            rc = frame_mask(s, c->entry, ifd__gmatch_state(c->m), bits);
            rc = rc == 1 ? 0 : rc;
            if (!rc && j < n && ifd_gmatch_accept(c->m, texts[i] + j, 1)) {
                if (err && errlen)
                    snprintf(err, errlen, "prewarm text %zu refused at byte %zu", i, j);
                rc = IFD_EINVAL;
            }
        }
    }
    ifd_constraint_destroy(c);
    free(bits);
    ifd_gstore_destroy(s);
    return rc;
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
    rc = frame_mask(s, e, st, bits);
    if (rc == 1) {
        rc = walk(s, e, st, bits, 0);
        s->st.mask_walks++;
    }
    if (rc)
        return rc;
    set_eog(v, st, bits);
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
