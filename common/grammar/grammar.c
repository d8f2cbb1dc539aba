/*
 * grammar.c — see grammar.h. The parser writes byte-level elements
 * directly: literals become runs of one-byte sets, ASCII classes one set,
 * other classes a helper rule whose alternatives are the UTF-8 byte-range
 * sequences of the class; groups and repetitions become helper rules. One
 * flattening pass then lays every rule out in the flat element array.
 *
 * Invariants: after compilation every RULE element names a defined rule,
 * no rule is left-recursive (so expansion terminates), and every rule has
 * at least one alternative.
 */
#include "grammar_impl.h"

#include "error.h"
#include "hash.h"
#include "log.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- bump memory --------------------------------------------------------------- */

#define GMEM_CHUNK (64u << 10)

void ifd__gmem_init(ifd__gmem_t *m)
{
    memset(m, 0, sizeof *m);
}

void ifd__gmem_close(ifd__gmem_t *m)
{
    for (size_t i = 0; i < m->n_chunks; i++)
        free(m->chunks[i]);
    free(m->chunks);
    free(m->scratch);
    free(m->active);
    ifd_hash_close(&m->scratch_index);
    ifd_hash_close(&m->active_index);
    memset(m, 0, sizeof *m);
}

ifd__gmark_t ifd__gmem_mark(const ifd__gmem_t *m)
{
    return (ifd__gmark_t){m->cur, m->used};
}

void ifd__gmem_release(ifd__gmem_t *m, ifd__gmark_t mark)
{
    m->cur = mark.chunk;
    m->used = mark.used;
}

static void *gmem_alloc(ifd__gmem_t *m, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > GMEM_CHUNK)
        return NULL;
    if (m->n_chunks == 0 || m->used + n > GMEM_CHUNK) {
        size_t next = m->n_chunks == 0 ? 0 : m->cur + 1;
        if (next >= m->n_chunks) {
            if (m->n_chunks == m->cap_chunks) {
                size_t cap = m->cap_chunks ? 2 * m->cap_chunks : 8;
                uint8_t **c = realloc(m->chunks, cap * sizeof *c);
                if (!c)
                    return NULL;
                m->chunks = c;
                m->cap_chunks = cap;
            }
            uint8_t *chunk = malloc(GMEM_CHUNK);
            if (!chunk)
                return NULL;
            m->chunks[m->n_chunks++] = chunk;
        }
        m->cur = next;
        m->used = 0;
    }
    void *p = m->chunks[m->cur] + m->used;
    m->used += n;
    return p;
}

#define IFD__GSTACK_SEED 0x9e3779b9u

static uint32_t stack_hash(uint32_t pos, const ifd__gnode_t *parent)
{
    uint64_t k = ((uint64_t)pos << 32) | (parent ? parent->hash : IFD__GSTACK_SEED);
    return (uint32_t)ifd_hash_u64(k);
}

static const ifd__gnode_t *gnode(ifd__gmem_t *m, uint32_t pos, const ifd__gnode_t *parent)
{
    ifd__gnode_t *n = gmem_alloc(m, sizeof *n);
    if (n) {
        n->pos = pos;
        n->hash = stack_hash(pos, parent);
        n->parent = parent;
    }
    return n;
}

/* ---- expansion ------------------------------------------------------------------ */

static bool stack_eq(const ifd__gnode_t *a, const ifd__gnode_t *b)
{
    while (a != b) {
        if (!a || !b || a->pos != b->pos || a->hash != b->hash)
            return false;
        a = a->parent;
        b = b->parent;
    }
    return true;
}

/* Below this many stacks a state's duplicates are found by a scan. */
#define IFD__SCRATCH_SCAN 16

static int scratch_index_all(ifd__gmem_t *m)
{
    ifd_hash_clear(&m->scratch_index);
    for (uint32_t i = 0; i < m->n_scratch; i++)
        if (ifd_hash_insert(&m->scratch_index, m->scratch[i]->hash, (int32_t)i))
            return IFD_ENOMEM;
    m->scratch_indexed = true;
    return 0;
}

static bool scratch_has(const ifd__gmem_t *m, const ifd__gnode_t *n)
{
    if (!m->scratch_indexed) {
        for (uint32_t i = 0; i < m->n_scratch; i++)
            if (stack_eq(m->scratch[i], n))
                return true;
        return false;
    }
    uint32_t it = ifd_hash_first(&m->scratch_index, n->hash);
    for (int32_t i; (i = ifd_hash_next(&m->scratch_index, n->hash, &it)) >= 0;)
        if (stack_eq(m->scratch[i], n))
            return true;
    return false;
}

static int scratch_push(ifd__gmem_t *m, const ifd__gnode_t *n)
{
    if (m->work_limit && ++m->work > m->work_limit)
        return IFD_ETOOBIG;
    if (scratch_has(m, n))
        return 0;
    if (m->n_scratch == IFD_GRAMMAR_MAX_STACKS)
        return IFD_ETOOBIG;
    if (m->n_scratch == m->cap_scratch) {
        uint32_t cap = m->cap_scratch ? 2 * m->cap_scratch : 16;
        const ifd__gnode_t **v = realloc(m->scratch, cap * sizeof *v);
        if (!v)
            return IFD_ENOMEM;
        m->scratch = v;
        m->cap_scratch = cap;
    }
    m->scratch[m->n_scratch++] = n;
    if (m->scratch_indexed)
        return ifd_hash_insert(&m->scratch_index, n->hash, (int32_t)(m->n_scratch - 1))
                   ? IFD_ENOMEM
                   : 0;
    return m->n_scratch > IFD__SCRATCH_SCAN ? scratch_index_all(m) : 0;
}

static void scratch_begin(ifd__gmem_t *m)
{
    m->n_scratch = 0;
    m->scratch_accept = false;
    if (m->scratch_indexed) {
        ifd_hash_clear(&m->scratch_index);
        m->scratch_indexed = false;
    }
}

/* Marks the expansion of the rule element at pos under parent as in
 * progress: 1 when it already is (a cycle: nothing new comes of it), 0
 * when marked, or an error. */
static int active_enter(ifd__gmem_t *m, uint32_t pos, const ifd__gnode_t *parent)
{
    uint32_t h = stack_hash(pos, parent);
    uint32_t it = ifd_hash_first(&m->active_index, h);
    for (int32_t i; (i = ifd_hash_next(&m->active_index, h, &it)) >= 0;)
        if (m->active[i].pos == pos && stack_eq(m->active[i].parent, parent))
            return 1;
    if (m->n_active == IFD__GRAMMAR_MAX_DEPTH)
        return IFD_ETOOBIG;
    if (m->n_active == m->cap_active) {
        uint32_t cap = m->cap_active ? 2 * m->cap_active : 32;
        struct ifd__gactive *v = realloc(m->active, cap * sizeof *v);
        if (!v)
            return IFD_ENOMEM;
        m->active = v;
        m->cap_active = cap;
    }
    if (ifd_hash_insert(&m->active_index, h, (int32_t)m->n_active))
        return IFD_ENOMEM;
    m->active[m->n_active++] = (struct ifd__gactive){pos, parent};
    return 0;
}

static void active_leave(ifd__gmem_t *m)
{
    struct ifd__gactive *a = &m->active[--m->n_active];
    ifd_hash_remove(&m->active_index, stack_hash(a->pos, a->parent), (int32_t)m->n_active);
}

static int expand(const ifd_grammar_t *g, ifd__gmem_t *m, uint32_t pos, const ifd__gnode_t *parent);

/* Expands the rule element at pos (parent: what follows it) into every
 * alternative of its rule. */
static int expand_rule(const ifd_grammar_t *g, ifd__gmem_t *m, uint32_t pos,
                       const ifd__gnode_t *parent)
{
    int rc = active_enter(m, pos, parent);
    if (rc)
        return rc == 1 ? 0 : rc;
    const ifd__gnode_t *cont = parent;
    uint32_t nt = g->el[pos + 1].type;
    if (nt != IFD__GE_END && nt != IFD__GE_ALT && !(cont = gnode(m, pos + 1, parent)))
        rc = IFD_ENOMEM;
    uint32_t r = g->el[pos].v;
    for (uint32_t a = g->alt_off[r]; !rc && a < g->alt_off[r + 1]; a++)
        rc = expand(g, m, g->alts[a], cont);
    active_leave(m);
    return rc;
}

/* Expands the stack (pos, parent) until every top is a SET element,
 * adding the results to the scratch list. */
static int expand(const ifd_grammar_t *g, ifd__gmem_t *m, uint32_t pos, const ifd__gnode_t *parent)
{
    for (;;) {
        const ifd__gelem_t *e = &g->el[pos];
        if (e->type == IFD__GE_SET) {
            const ifd__gnode_t *n = gnode(m, pos, parent);
            return n ? scratch_push(m, n) : IFD_ENOMEM;
        }
        if (e->type == IFD__GE_RULE)
            return expand_rule(g, m, pos, parent);
        /* END or ALT: the alternative is complete; return to the parent */
        if (!parent) {
            m->scratch_accept = true;
            return 0;
        }
        pos = parent->pos;
        parent = parent->parent;
    }
}

static int scratch_finish(ifd__gmem_t *m, ifd__gstate_t *out)
{
    out->n = m->n_scratch;
    out->accept = m->scratch_accept;
    out->v = NULL;
    if (m->n_scratch) {
        const ifd__gnode_t **v = gmem_alloc(m, m->n_scratch * sizeof *v);
        if (!v)
            return IFD_ENOMEM;
        memcpy(v, m->scratch, m->n_scratch * sizeof *v);
        out->v = v;
    }
    return 0;
}

int ifd__grammar_start(const ifd_grammar_t *g, ifd__gmem_t *m, ifd__gstate_t *out)
{
    scratch_begin(m);
    for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) {
        int rc = expand(g, m, g->alts[a], NULL);
        if (rc)
            return rc;
    }
    return scratch_finish(m, out);
}

int ifd__grammar_advance(const ifd_grammar_t *g, ifd__gmem_t *m, const ifd__gstate_t *in, uint8_t b,
                         ifd__gstate_t *out)
{
    scratch_begin(m);
    for (uint32_t i = 0; i < in->n; i++) {
        const ifd__gnode_t *n = in->v[i];
        if (!ifd__gset_has(g, g->el[n->pos].v, b))
            continue;
        int rc = expand(g, m, n->pos + 1, n->parent);
        if (rc)
            return rc;
    }
    return scratch_finish(m, out);
}

/* Nodes remembered by one ifd__gstate_copy (open addressing over old node
 * addresses; a power of two). Past a quarter full, later nodes are copied
 * without being remembered (still a correct copy, only less shared). */
#define IFD__COPY_MEMO 256

int ifd__gstate_copy(ifd__gmem_t *m, const ifd__gstate_t *s, ifd__gstate_t *out)
{
    out->n = s->n;
    out->accept = s->accept;
    out->v = NULL;
    if (!s->n)
        return 0;
    const ifd__gnode_t **v = gmem_alloc(m, s->n * sizeof *v);
    if (!v)
        return IFD_ENOMEM;
    /* Stacks of one state share their lower nodes (the document around the
     * alternatives being matched: an object with 100 optional properties
     * has 100 stacks over one suffix). Each node reached is copied once and
     * the copies share it the same way: O(distinct nodes), not the sum of
     * the stacks' lengths. Nodes are immutable and compared by content
     * (stack_eq), so sharing changes nothing but memory and time. */
    const ifd__gnode_t *from[IFD__COPY_MEMO];
    ifd__gnode_t *to[IFD__COPY_MEMO];
    bool memo = s->n >= 4;
    uint32_t used = 0;
    if (memo)
        memset(from, 0, sizeof from);
    for (uint32_t i = 0; i < s->n; i++) {
        const ifd__gnode_t *p = s->v[i];
        ifd__gnode_t *first = NULL, *prev = NULL;
        while (p) {
            ifd__gnode_t *n = NULL;
            uint32_t slot = 0;
            if (memo) {
                slot = (uint32_t)(((uintptr_t)p >> 4) * 0x9e3779b1u) & (IFD__COPY_MEMO - 1);
                while (from[slot] && from[slot] != p)
                    slot = (slot + 1) & (IFD__COPY_MEMO - 1);
                n = from[slot] ? to[slot] : NULL;
            }
            if (n) { /* copied already, with everything below it */
                if (prev)
                    prev->parent = n;
                else
                    first = n;
                break;
            }
            if (!(n = gmem_alloc(m, sizeof *n)))
                return IFD_ENOMEM;
            n->pos = p->pos;
            n->hash = p->hash; /* the same stack: its hash does not depend on addresses */
            n->parent = NULL;
            if (memo && used < IFD__COPY_MEMO / 4) {
                from[slot] = p;
                to[slot] = n;
                used++;
            }
            if (prev)
                prev->parent = n;
            else
                first = n;
            prev = n;
            p = p->parent;
        }
        v[i] = first;
    }
    out->v = v;
    return 0;
}

static uint32_t stack_len(const ifd__gnode_t *n)
{
    uint32_t k = 0;
    for (; n; n = n->parent)
        k++;
    return k;
}

static const ifd__gnode_t *stack_up(const ifd__gnode_t *n, uint32_t k)
{
    while (k--)
        n = n->parent;
    return n;
}

int ifd__gstate_cut(ifd__gmem_t *m, const ifd__gstate_t *s, uint32_t lower, ifd__gstate_t *out,
                    const ifd__gnode_t **suffix)
{
    *out = *s;
    *suffix = NULL;
    if (s->accept || s->n == 0)
        return 0;
    /* the longest suffix of stack 0 that is a proper suffix of every stack */
    uint32_t dmin = UINT32_MAX, len0 = stack_len(s->v[0]);
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t d = i ? stack_len(s->v[i]) : len0;
        dmin = d < dmin ? d : dmin;
    }
    uint32_t lc = dmin - 1;
    const ifd__gnode_t *cand = stack_up(s->v[0], len0 - lc);
    for (uint32_t i = 1; i < s->n && cand; i++) {
        const ifd__gnode_t *x = stack_up(s->v[i], stack_len(s->v[i]) - lc);
        while (!stack_eq(x, cand)) {
            x = x->parent;
            cand = cand->parent;
            lc--;
        }
    }
    for (; lower && cand; lower--) {
        cand = cand->parent;
        lc--;
    }
    if (!cand)
        return 0;
    /* each stack without the suffix, rebuilt bottom up so that its hashes
     * are those of the shorter stack */
    const ifd__gnode_t **v = gmem_alloc(m, s->n * sizeof *v);
    if (!v)
        return IFD_ENOMEM;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t k = stack_len(s->v[i]) - lc; /* nodes above the suffix */
        uint32_t *pos = gmem_alloc(m, k * sizeof *pos);
        if (!pos)
            return IFD_ENOMEM;
        const ifd__gnode_t *x = s->v[i];
        for (uint32_t j = 0; j < k; j++, x = x->parent)
            pos[j] = x->pos;
        const ifd__gnode_t *top = NULL;
        for (uint32_t j = k; j-- > 0;)
            if (!(top = gnode(m, pos[j], top)))
                return IFD_ENOMEM;
        v[i] = top;
    }
    out->v = v;
    out->n = s->n;
    out->accept = false;
    *suffix = cand;
    return 0;
}

int ifd__grammar_resume(const ifd_grammar_t *g, ifd__gmem_t *m, const ifd__gnode_t *suffix,
                        ifd__gstate_t *out)
{
    scratch_begin(m);
    int rc = suffix ? expand(g, m, suffix->pos, suffix->parent) : 0;
    if (!suffix)
        m->scratch_accept = true;
    return rc ? rc : scratch_finish(m, out);
}

long ifd__gstate_key(const ifd__gstate_t *s, uint32_t **buf, size_t *cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i <= s->n; i++) {
        const ifd__gnode_t *p = i < s->n ? s->v[i] : NULL;
        for (;;) {
            if (n + 1 > *cap) {
                size_t c = *cap ? 2 * *cap : 64;
                uint32_t *b = realloc(*buf, c * sizeof *b);
                if (!b)
                    return -1;
                *buf = b;
                *cap = c;
            }
            if (i == s->n) {
                (*buf)[n++] = s->accept ? 0xfffffffeu : 0xfffffffdu;
                break;
            }
            if (!p) {
                (*buf)[n++] = 0xffffffffu;
                break;
            }
            (*buf)[n++] = p->pos;
            p = p->parent;
        }
    }
    return (long)n;
}

/* ---- matcher ---------------------------------------------------------------------- */

struct ifd_gmatch {
    const ifd_grammar_t *g;
    ifd__gmem_t mem[2];
    int cur; /* mem[cur] holds the committed state */
    ifd__gstate_t state;
};

int ifd_gmatch_create(const ifd_grammar_t *g, ifd_gmatch_t **out)
{
    ifd_gmatch_t *m = calloc(1, sizeof *m);
    if (!m)
        return IFD_ENOMEM;
    m->g = g;
    ifd__gmem_init(&m->mem[0]);
    ifd__gmem_init(&m->mem[1]);
    int rc = ifd__grammar_start(g, &m->mem[0], &m->state);
    if (rc) {
        ifd_gmatch_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

void ifd_gmatch_destroy(ifd_gmatch_t *m)
{
    if (!m)
        return;
    ifd__gmem_close(&m->mem[0]);
    ifd__gmem_close(&m->mem[1]);
    free(m);
}

void ifd_gmatch_reset(ifd_gmatch_t *m)
{
    m->cur = 0;
    ifd__gmem_release(&m->mem[0], (ifd__gmark_t){0, 0});
    /* the start state fit before, so it fits again */
    IFD_ASSERT(ifd__grammar_start(m->g, &m->mem[0], &m->state) == 0);
}

const ifd__gstate_t *ifd__gmatch_state(const ifd_gmatch_t *m)
{
    return &m->state;
}

/* Runs the bytes from the committed state in mem[cur] above a mark. */
static int run(ifd_gmatch_t *m, const uint8_t *p, size_t n, ifd__gstate_t *out)
{
    ifd__gstate_t s = m->state;
    for (size_t i = 0; i < n; i++) {
        ifd__gstate_t t;
        int rc = ifd__grammar_advance(m->g, &m->mem[m->cur], &s, p[i], &t);
        if (rc)
            return rc;
        if (t.n == 0 && (!t.accept || i + 1 < n))
            return IFD_EINVAL;
        s = t;
    }
    *out = s;
    return 0;
}

int ifd_gmatch_accept(ifd_gmatch_t *m, const void *bytes, size_t n)
{
    ifd__gmem_t *mem = &m->mem[m->cur];
    ifd__gmark_t mark = ifd__gmem_mark(mem);
    ifd__gstate_t s;
    int rc = run(m, bytes, n, &s);
    if (rc) {
        ifd__gmem_release(mem, mark);
        return rc;
    }
    /* compact: copy the new state into the other memory */
    ifd__gmem_t *other = &m->mem[1 - m->cur];
    ifd__gmem_release(other, (ifd__gmark_t){0, 0});
    ifd__gstate_t c;
    if ((rc = ifd__gstate_copy(other, &s, &c))) {
        ifd__gmem_release(mem, mark);
        return rc;
    }
    m->cur = 1 - m->cur;
    m->state = c;
    return 0;
}

bool ifd_gmatch_check(ifd_gmatch_t *m, const void *bytes, size_t n)
{
    ifd__gmem_t *mem = &m->mem[m->cur];
    ifd__gmark_t mark = ifd__gmem_mark(mem);
    ifd__gstate_t s;
    int rc = run(m, bytes, n, &s);
    ifd__gmem_release(mem, mark);
    return rc == 0;
}

bool ifd_gmatch_can_end(const ifd_gmatch_t *m)
{
    return m->state.accept;
}

bool ifd_gmatch_is_done(const ifd_gmatch_t *m)
{
    return m->state.n == 0;
}

/* ---- compiler ---------------------------------------------------------------------- */

typedef struct {
    char *name;
    ifd__gelem_t *el;
    size_t n, cap;
    bool defined;
    bool helper;   /* made by the compiler for a group, class or repetition */
    uint32_t user; /* the rule written in the text that it belongs to (itself when !helper) */
    int line;
} prule_t;

typedef struct {
    const char *s, *end;
    int line;
    prule_t *rules;
    size_t n_rules, cap_rules;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    ifd_hash_t set_index;  /* byte set -> its index in sets (each set stored once) */
    ifd_hash_t rule_index; /* a written rule's name -> its id */
    size_t n_elements;
    ifd_grammar_budget_t budget;
    uint64_t work;     /* elements made and stacks expanded so far */
    uint64_t deadline; /* CLOCK_MONOTONIC ns; 0 none */
    int err;
    char *errbuf;
    size_t errlen;
} parser_t;

static int perr(parser_t *p, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(parser_t *p, int code, const char *fmt, ...)
{
    if (p->err)
        return p->err;
    p->err = code;
    if (p->errbuf && p->errlen) {
        int k = snprintf(p->errbuf, p->errlen, "line %d: ", p->line);
        if (k >= 0 && (size_t)k < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->errbuf + k, p->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return code;
}

static int work(parser_t *p, uint64_t n);

static int rule_push(parser_t *p, uint32_t r, uint32_t type, uint32_t v)
{
    prule_t *R = &p->rules[r];
    if (++p->n_elements > IFD_GRAMMAR_MAX_ELEMENTS)
        return perr(p, IFD_ETOOBIG, "grammar too large (over %u elements)",
                    IFD_GRAMMAR_MAX_ELEMENTS);
    int rc = work(p, 1);
    if (rc)
        return rc;
    if (R->n == R->cap) {
        size_t cap = R->cap ? 2 * R->cap : 16;
        ifd__gelem_t *e = realloc(R->el, cap * sizeof *e);
        if (!e)
            return perr(p, IFD_ENOMEM, "out of memory");
        R->el = e;
        R->cap = cap;
    }
    R->el[R->n++] = (ifd__gelem_t){type, v};
    return 0;
}

static int rule_append(parser_t *p, uint32_t r, const ifd__gelem_t *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = rule_push(p, r, e[i].type, e[i].v);
        if (rc)
            return rc;
    }
    return 0;
}

static int rule_new(parser_t *p, uint32_t *out)
{
    if (p->n_rules == p->cap_rules) {
        size_t cap = p->cap_rules ? 2 * p->cap_rules : 32;
        prule_t *r = realloc(p->rules, cap * sizeof *r);
        if (!r)
            return perr(p, IFD_ENOMEM, "out of memory");
        p->rules = r;
        p->cap_rules = cap;
    }
    prule_t *R = &p->rules[p->n_rules];
    memset(R, 0, sizeof *R);
    R->line = p->line;
    R->user = (uint32_t)p->n_rules;
    *out = (uint32_t)p->n_rules++;
    return 0;
}

/* The id of the rule written as name (created undefined when new). */
static int rule_get(parser_t *p, const char *name, size_t len, uint32_t *out)
{
    uint64_t h = ifd_hash_bytes(name, len);
    uint32_t it = ifd_hash_first(&p->rule_index, h);
    for (int32_t i; (i = ifd_hash_next(&p->rule_index, h, &it)) >= 0;) {
        if (strlen(p->rules[i].name) == len && memcmp(p->rules[i].name, name, len) == 0) {
            *out = (uint32_t)i;
            return 0;
        }
    }
    int rc = rule_new(p, out);
    if (rc)
        return rc;
    if (!(p->rules[*out].name = strndup(name, len)))
        return perr(p, IFD_ENOMEM, "out of memory");
    if (ifd_hash_insert(&p->rule_index, h, (int32_t)*out))
        return perr(p, IFD_ENOMEM, "out of memory");
    return 0;
}

/* A new helper rule inside rule r, named "<r's name>_<id>" (never looked up
 * by name), remembering the written rule it belongs to for messages. */
static int rule_helper(parser_t *p, uint32_t r, uint32_t *out)
{
    int rc = rule_new(p, out);
    if (rc)
        return rc;
    prule_t *R = &p->rules[*out];
    char buf[160];
    const char *base = p->rules[r].name;
    size_t len = strlen(base);
    snprintf(buf, sizeof buf, "%.*s_%u", (int)(len > 120 ? 120 : len), base, *out);
    R->name = strdup(buf);
    R->defined = true;
    R->helper = true;
    R->user = p->rules[r].user;
    return R->name ? 0 : perr(p, IFD_ENOMEM, "out of memory");
}

/* One unit of compile work: past the budget's work, time or cancel flag the
 * compilation stops with IFD_ETOOBIG / IFD_ECANCELED. The clock and the
 * flag are read every 4096 units. */
static int work(parser_t *p, uint64_t n)
{
    uint64_t before = p->work;
    p->work += n;
    if (p->budget.max_work && p->work > p->budget.max_work)
        return perr(p, IFD_ETOOBIG, "grammar too large to compile (over %llu steps)",
                    (unsigned long long)p->budget.max_work);
    if ((before >> 12) == (p->work >> 12))
        return 0;
    if (p->budget.cancel && atomic_load_explicit(p->budget.cancel, memory_order_relaxed))
        return perr(p, IFD_ECANCELED, "grammar compilation canceled");
    if (p->deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec > p->deadline)
            return perr(p, IFD_ETOOBIG, "grammar took longer than %u ms to compile",
                        p->budget.max_time_ms);
    }
    return 0;
}

static int set_intern(parser_t *p, const uint8_t set[32], uint32_t *out)
{
    uint64_t hv = ifd_hash_bytes(set, 32);
    uint32_t it = ifd_hash_first(&p->set_index, hv);
    for (int32_t i; (i = ifd_hash_next(&p->set_index, hv, &it)) >= 0;) {
        if (memcmp(p->sets[i], set, 32) == 0) {
            *out = (uint32_t)i;
            return 0;
        }
    }
    if (p->n_sets == p->cap_sets) {
        size_t cap = p->cap_sets ? 2 * p->cap_sets : 64;
        uint8_t(*s)[32] = realloc(p->sets, cap * sizeof *s);
        if (!s)
            return perr(p, IFD_ENOMEM, "out of memory");
        p->sets = s;
        p->cap_sets = cap;
    }
    /* n_sets stays under IFD_GRAMMAR_MAX_ELEMENTS, far below the index's limit */
    if (ifd_hash_insert(&p->set_index, hv, (int32_t)p->n_sets))
        return perr(p, IFD_ENOMEM, "out of memory");
    memcpy(p->sets[p->n_sets], set, 32);
    *out = (uint32_t)p->n_sets++;
    return 0;
}

static int push_byte_range(parser_t *p, uint32_t r, unsigned lo, unsigned hi)
{
    uint8_t set[32] = {0};
    for (unsigned b = lo; b <= hi; b++)
        set[b >> 3] |= (uint8_t)(1u << (b & 7));
    uint32_t id;
    int rc = set_intern(p, set, &id);
    return rc ? rc : rule_push(p, r, IFD__GE_SET, id);
}

/* Appends to rule r one alternative per byte-range sequence of the code
 * points [lo, hi] (no surrogates inside), each followed by ALT. */
static int utf8_ranges(parser_t *p, uint32_t r, uint32_t lo, uint32_t hi)
{
    static const uint32_t limits[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++) {
        if (lo <= limits[i] && hi > limits[i]) {
            int rc = utf8_ranges(p, r, lo, limits[i]);
            return rc ? rc : utf8_ranges(p, r, limits[i] + 1, hi);
        }
    }
    if (hi < 0x80) {
        int rc = push_byte_range(p, r, lo, hi);
        return rc ? rc : rule_push(p, r, IFD__GE_ALT, 0);
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                int rc = utf8_ranges(p, r, lo, lo | m);
                return rc ? rc : utf8_ranges(p, r, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                int rc = utf8_ranges(p, r, lo, (hi & ~m) - 1);
                return rc ? rc : utf8_ranges(p, r, hi & ~m, hi);
            }
        }
    }
    uint8_t a[4], b[4];
    int n = (int)ifd_utf8_put(a, lo);
    IFD_ASSERT((int)ifd_utf8_put(b, hi) == n);
    for (int i = 0; i < n; i++) {
        int rc = push_byte_range(p, r, a[i], b[i]);
        if (rc)
            return rc;
    }
    return rule_push(p, r, IFD__GE_ALT, 0);
}

/* ---- lexing ---- */

static void skip_ws(parser_t *p, bool newlines)
{
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '#') {
            while (p->s < p->end && *p->s != '\n')
                p->s++;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->s++;
        } else if (c == '\n' && newlines) {
            p->line++;
            p->s++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

static size_t name_len(const char *s, const char *end)
{
    size_t n = 0;
    while (s + n < end && is_name_char(s[n]) && !(s[n] == '.' && n == 0))
        n++;
    return n;
}

/* Is the text at s a rule head "name ::="? */
static bool at_rule_head(const parser_t *p)
{
    size_t n = name_len(p->s, p->end);
    if (!n)
        return false;
    const char *q = p->s + n;
    while (q < p->end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
        q++;
    return p->end - q >= 3 && memcmp(q, "::=", 3) == 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int ifd__gescape(ifd__gesc_t dialect, char e, const char **s, const char *end, uint32_t *cp)
{
    int digits;
    switch (e) {
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case '0':
        *cp = 0;
        return 0;
    case 'f':
    case 'v':
        if (dialect != IFD__GESC_REGEX)
            return 1;
        *cp = e == 'f' ? '\f' : '\v';
        return 0;
    case 'x':
        digits = 2;
        break;
    case 'u':
        digits = 4;
        break;
    case 'U':
        if (dialect != IFD__GESC_GBNF)
            return 1;
        digits = 8;
        break;
    default:
        return 1;
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        if (*s >= end)
            return IFD_EFORMAT;
        int h = hexval(*(*s)++);
        if (h < 0)
            return IFD_EFORMAT;
        v = v * 16 + (uint32_t)h;
    }
    *cp = v;
    return 0;
}

/* One code point of a literal or class (escapes decoded); *esc tells an
 * escaped character from a plain one. */
static int read_char(parser_t *p, uint32_t *out, bool *esc)
{
    *esc = false;
    if (p->s >= p->end)
        return perr(p, IFD_EFORMAT, "unexpected end of grammar");
    unsigned char c = (unsigned char)*p->s;
    if (c == '\\') {
        *esc = true;
        p->s++;
        if (p->s >= p->end)
            return perr(p, IFD_EFORMAT, "unexpected end after '\\'");
        char e = *p->s++;
        uint32_t v;
        int k = ifd__gescape(IFD__GESC_GBNF, e, &p->s, p->end, &v);
        if (k < 0)
            return perr(p, k, "bad hex escape");
        if (k == 0 && (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)))
            return perr(p, IFD_EFORMAT, "escape \\%c%X is not a Unicode scalar value", e, v);
        if (k > 0) { /* GBNF's own: the punctuation its literals and classes use */
            if (e == '\0' || !strchr("\\\"[]-^/'.()|*+?{}", e))
                return perr(p, IFD_EFORMAT, "unknown escape '\\%c'", e);
            v = (uint32_t)(unsigned char)e;
        }
        *out = v;
        return 0;
    }
    size_t n;
    uint32_t v = ifd_utf8_get((const uint8_t *)p->s, (size_t)(p->end - p->s), &n);
    if (v == 0xFFFFFFFFu) /* invalid or cut short: overlong, surrogate, past U+10FFFF */
        return perr(p, IFD_EFORMAT, "invalid UTF-8 in grammar");
    if (c == '\n')
        p->line++;
    p->s += n;
    *out = v;
    return 0;
}

/* ---- classes ---- */

typedef struct {
    uint32_t lo, hi;
} range_t;

static int cmp_range(const void *a, const void *b)
{
    const range_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Emits the code-point set (ranges, possibly negated) into rule r as one
 * element: a byte set when it is ASCII only, else a helper rule. */
static int emit_class(parser_t *p, uint32_t r, range_t *rg, size_t n, bool neg)
{
    qsort(rg, n, sizeof *rg, cmp_range);
    /* merge */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && rg[i].lo <= rg[m - 1].hi + 1) {
            if (rg[i].hi > rg[m - 1].hi)
                rg[m - 1].hi = rg[i].hi;
        } else {
            rg[m++] = rg[i];
        }
    }
    n = m;
    range_t *out = malloc((2 * n + 4) * sizeof *out);
    if (!out)
        return perr(p, IFD_ENOMEM, "out of memory");
    size_t k = 0;
    if (neg) {
        uint32_t next = 0;
        for (size_t i = 0; i < n; i++) {
            if (rg[i].lo > next)
                out[k++] = (range_t){next, rg[i].lo - 1};
            next = rg[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            out[k++] = (range_t){next, 0x10FFFF};
    } else {
        memcpy(out, rg, n * sizeof *out);
        k = n;
    }
    /* drop surrogates */
    size_t k2 = 0;
    range_t *fin = malloc((2 * k + 2) * sizeof *fin);
    if (!fin) {
        free(out);
        return perr(p, IFD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < k; i++) {
        range_t x = out[i];
        if (x.hi < 0xD800 || x.lo > 0xDFFF) {
            fin[k2++] = x;
            continue;
        }
        if (x.lo < 0xD800)
            fin[k2++] = (range_t){x.lo, 0xD7FF};
        if (x.hi > 0xDFFF)
            fin[k2++] = (range_t){0xE000, x.hi};
    }
    free(out);
    int rc = 0;
    if (k2 == 0) {
        rc = perr(p, IFD_EFORMAT, "empty character class");
    } else if (fin[k2 - 1].hi < 0x80) {
        uint8_t set[32] = {0};
        for (size_t i = 0; i < k2; i++)
            for (uint32_t b = fin[i].lo; b <= fin[i].hi; b++)
                set[b >> 3] |= (uint8_t)(1u << (b & 7));
        uint32_t id;
        rc = set_intern(p, set, &id);
        if (!rc)
            rc = rule_push(p, r, IFD__GE_SET, id);
    } else {
        uint32_t h;
        rc = rule_helper(p, r, &h);
        /* ASCII part as one set, then the multi-byte ranges */
        size_t i = 0;
        if (!rc && fin[0].lo < 0x80) {
            uint8_t set[32] = {0};
            for (; i < k2 && fin[i].lo < 0x80; i++) {
                uint32_t hi = fin[i].hi < 0x80 ? fin[i].hi : 0x7F;
                for (uint32_t b = fin[i].lo; b <= hi; b++)
                    set[b >> 3] |= (uint8_t)(1u << (b & 7));
                if (fin[i].hi >= 0x80) {
                    fin[i].lo = 0x80;
                    break;
                }
            }
            uint32_t id;
            rc = set_intern(p, set, &id);
            if (!rc)
                rc = rule_push(p, h, IFD__GE_SET, id);
            if (!rc)
                rc = rule_push(p, h, IFD__GE_ALT, 0);
        }
        for (; !rc && i < k2; i++)
            rc = utf8_ranges(p, h, fin[i].lo, fin[i].hi);
        if (!rc) /* turn the last ALT into END */
            p->rules[h].el[p->rules[h].n - 1].type = IFD__GE_END;
        if (!rc)
            rc = rule_push(p, r, IFD__GE_RULE, h);
    }
    free(fin);
    return rc;
}

static int parse_class(parser_t *p, uint32_t r)
{
    /* at '[' */
    p->s++;
    bool neg = false;
    if (p->s < p->end && *p->s == '^') {
        neg = true;
        p->s++;
    }
    range_t *rg = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    while (!rc) {
        if (p->s >= p->end) {
            rc = perr(p, IFD_EFORMAT, "unterminated character class");
            break;
        }
        if (*p->s == ']') {
            p->s++;
            break;
        }
        uint32_t lo, hi;
        bool esc;
        if ((rc = read_char(p, &lo, &esc)))
            break;
        hi = lo;
        if (p->end - p->s >= 2 && p->s[0] == '-' && p->s[1] != ']') {
            p->s++;
            if ((rc = read_char(p, &hi, &esc)))
                break;
            if (hi < lo) {
                rc = perr(p, IFD_EFORMAT, "reversed range in character class");
                break;
            }
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            range_t *x = realloc(rg, cap * sizeof *x);
            if (!x) {
                rc = perr(p, IFD_ENOMEM, "out of memory");
                break;
            }
            rg = x;
        }
        rg[n++] = (range_t){lo, hi};
    }
    if (!rc && n == 0 && !neg)
        rc = perr(p, IFD_EFORMAT, "empty character class");
    if (!rc)
        rc = emit_class(p, r, rg, n, neg);
    free(rg);
    return rc;
}

static int parse_alternatives(parser_t *p, uint32_t r, int depth);

static int parse_uint(parser_t *p, unsigned *out)
{
    if (p->s >= p->end || *p->s < '0' || *p->s > '9')
        return perr(p, IFD_EFORMAT, "expected a number");
    unsigned v = 0;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        v = v * 10 + (unsigned)(*p->s - '0');
        if (v > IFD_GRAMMAR_MAX_REPEAT)
            return perr(p, IFD_ETOOBIG, "repetition count over %d", IFD_GRAMMAR_MAX_REPEAT);
        p->s++;
    }
    *out = v;
    return 0;
}

/* Applies a postfix operator to the item at rule r's elements [start, n). */
static int apply_repeat(parser_t *p, uint32_t r, size_t start, unsigned min, unsigned max,
                        bool unbounded)
{
    prule_t *R = &p->rules[r];
    size_t fl = R->n - start;
    ifd__gelem_t *frag = malloc(fl * sizeof *frag);
    if (!frag)
        return perr(p, IFD_ENOMEM, "out of memory");
    memcpy(frag, R->el + start, fl * sizeof *frag);
    p->n_elements -= fl;
    p->rules[r].n = start;
    int rc = 0;
    for (unsigned i = 0; i < min && !rc; i++)
        rc = rule_append(p, r, frag, fl);
    if (!rc && unbounded) {
        /* S ::= frag S | (empty) */
        uint32_t s;
        rc = rule_helper(p, r, &s);
        if (!rc)
            rc = rule_append(p, s, frag, fl);
        if (!rc)
            rc = rule_push(p, s, IFD__GE_RULE, s);
        if (!rc)
            rc = rule_push(p, s, IFD__GE_ALT, 0);
        if (!rc)
            rc = rule_push(p, s, IFD__GE_END, 0);
        if (!rc)
            rc = rule_push(p, r, IFD__GE_RULE, s);
    } else if (!rc && max > min) {
        /* O_1 ::= frag | ; O_k ::= frag O_{k-1} | */
        uint32_t prev = 0;
        for (unsigned k = 1; k <= max - min && !rc; k++) {
            uint32_t o;
            rc = rule_helper(p, r, &o);
            if (!rc)
                rc = rule_append(p, o, frag, fl);
            if (!rc && k > 1)
                rc = rule_push(p, o, IFD__GE_RULE, prev);
            if (!rc)
                rc = rule_push(p, o, IFD__GE_ALT, 0);
            if (!rc)
                rc = rule_push(p, o, IFD__GE_END, 0);
            prev = o;
        }
        if (!rc)
            rc = rule_push(p, r, IFD__GE_RULE, prev);
    }
    free(frag);
    return rc;
}

/* One sequence of items into rule r, up to '|', ')', a rule head or the
 * end. */
static int parse_sequence(parser_t *p, uint32_t r, int depth)
{
    for (;;) {
        skip_ws(p, depth > 0);
        /* a newline ends nothing by itself: continue on the next line unless
         * a rule head starts there */
        if (depth == 0 && p->s < p->end && *p->s == '\n') {
            skip_ws(p, true);
            if (p->s >= p->end || at_rule_head(p))
                return 0;
        }
        if (p->s >= p->end)
            return 0;
        char c = *p->s;
        if (c == '|' || c == ')')
            return 0;
        size_t start = p->rules[r].n;
        int rc = 0;
        if (c == '"') {
            p->s++;
            for (;;) {
                if (p->s >= p->end)
                    return perr(p, IFD_EFORMAT, "unterminated string literal");
                if (*p->s == '"') {
                    p->s++;
                    break;
                }
                uint32_t cp;
                bool esc;
                if ((rc = read_char(p, &cp, &esc)))
                    return rc;
                uint8_t b[4];
                int nb = (int)ifd_utf8_put(b, cp);
                for (int i = 0; i < nb && !rc; i++)
                    rc = push_byte_range(p, r, b[i], b[i]);
                if (rc)
                    return rc;
            }
            if (p->rules[r].n == start) /* "" matches the empty string */
                continue;
        } else if (c == '[') {
            if ((rc = parse_class(p, r)))
                return rc;
        } else if (c == '.') {
            p->s++;
            range_t all = {0, 0x10FFFF};
            if ((rc = emit_class(p, r, &all, 1, false)))
                return rc;
        } else if (c == '(') {
            p->s++;
            uint32_t g;
            if ((rc = rule_helper(p, r, &g)))
                return rc;
            if ((rc = parse_alternatives(p, g, depth + 1)))
                return rc;
            skip_ws(p, true);
            if (p->s >= p->end || *p->s != ')')
                return perr(p, IFD_EFORMAT, "expected ')'");
            p->s++;
            if ((rc = rule_push(p, r, IFD__GE_RULE, g)))
                return rc;
        } else if (is_name_char(c) && c != '.') {
            if (depth == 0 && at_rule_head(p))
                return 0;
            size_t n = name_len(p->s, p->end);
            uint32_t ref;
            if ((rc = rule_get(p, p->s, n, &ref)))
                return rc;
            p->s += n;
            if ((rc = rule_push(p, r, IFD__GE_RULE, ref)))
                return rc;
        } else {
            return perr(p, IFD_EFORMAT, "unexpected character '%c'", c);
        }
        /* postfix operators, possibly stacked ("x?*" is rare but legal) */
        for (;;) {
            const char *before = p->s;
            while (p->s < p->end && (*p->s == ' ' || *p->s == '\t'))
                p->s++;
            if (p->s >= p->end || !strchr("*+?{", *p->s)) {
                p->s = before;
                break;
            }
            char o = *p->s;
            if (o == '*' || o == '+' || o == '?') {
                p->s++;
                rc = apply_repeat(p, r, start, o == '+', o == '?', o != '?');
            } else if (o == '{') {
                p->s++;
                unsigned min = 0, max = 0;
                bool unb = false;
                skip_ws(p, false);
                if ((rc = parse_uint(p, &min)))
                    return rc;
                skip_ws(p, false);
                max = min;
                if (p->s < p->end && *p->s == ',') {
                    p->s++;
                    skip_ws(p, false);
                    if (p->s < p->end && *p->s == '}')
                        unb = true;
                    else if ((rc = parse_uint(p, &max)))
                        return rc;
                    skip_ws(p, false);
                }
                if (p->s >= p->end || *p->s != '}')
                    return perr(p, IFD_EFORMAT, "expected '}'");
                p->s++;
                if (!unb && max < min)
                    return perr(p, IFD_EFORMAT, "repetition {%u,%u}: max below min", min, max);
                rc = apply_repeat(p, r, start, min, max, unb);
            } else {
                break;
            }
            if (rc)
                return rc;
        }
    }
}

static int parse_alternatives(parser_t *p, uint32_t r, int depth)
{
    if (depth > 200)
        return perr(p, IFD_ETOOBIG, "groups nested too deeply");
    for (;;) {
        int rc = parse_sequence(p, r, depth);
        if (rc)
            return rc;
        skip_ws(p, depth > 0);
        if (p->s < p->end && *p->s == '|') {
            p->s++;
            if ((rc = rule_push(p, r, IFD__GE_ALT, 0)))
                return rc;
            continue;
        }
        if (depth == 0 && p->s < p->end && *p->s == ')')
            return perr(p, IFD_EFORMAT, "unexpected ')'");
        return rule_push(p, r, IFD__GE_END, 0);
    }
}

/* ---- checks and flattening ---- */

/* ---- left recursion ------------------------------------------------------------------- */

/* nullable[r]: rule r can match the empty string. A worklist over the
 * alternatives (each counts its rule references not yet known nullable;
 * one with a byte set never becomes nullable): linear in the grammar.
 * With sets_match, the same worklist finds the productive rules instead
 * (r matches some finite text: a byte set matches one byte). */
static int find_matching(parser_t *p, const ifd_grammar_t *g, uint8_t *nullable, bool sets_match)
{
    size_t nr = g->n_rules, na = g->alt_off[nr];
    uint32_t *left = calloc(na + 1, sizeof *left), *alt_rule = malloc((na + 1) * sizeof *alt_rule);
    uint32_t *occ_off = calloc(nr + 2, sizeof *occ_off), *fill = malloc((nr + 1) * sizeof *fill);
    uint32_t *occ = malloc((g->n_el + 1) * sizeof *occ), *queue = malloc((nr + 1) * sizeof *queue);
    uint32_t nq = 0;
    int rc = 0;
    if (!left || !alt_rule || !occ_off || !fill || !occ || !queue) {
        rc = perr(p, IFD_ENOMEM, "out of memory");
        goto out;
    }
    /* each alternative: its rule, and its rule references (none counted when it has a set) */
    for (uint32_t r = 0; r < nr; r++)
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
            alt_rule[a] = r;
            for (uint32_t pos = g->alts[a]; g->el[pos].type >= IFD__GE_RULE; pos++)
                left[a] = g->el[pos].type == IFD__GE_SET && sets_match              ? left[a]
                          : g->el[pos].type == IFD__GE_SET || left[a] == UINT32_MAX ? UINT32_MAX
                                                                                    : left[a] + 1;
        }
    /* where each rule occurs (in alternatives that may become nullable) */
    for (uint32_t a = 0; a < na; a++)
        for (uint32_t pos = g->alts[a]; left[a] != UINT32_MAX && g->el[pos].type >= IFD__GE_RULE;
             pos++)
            if (g->el[pos].type == IFD__GE_RULE)
                occ_off[g->el[pos].v + 1]++;
    for (size_t r = 0; r < nr; r++)
        occ_off[r + 1] += occ_off[r];
    memcpy(fill, occ_off, nr * sizeof *fill);
    for (uint32_t a = 0; a < na; a++)
        for (uint32_t pos = g->alts[a]; left[a] != UINT32_MAX && g->el[pos].type >= IFD__GE_RULE;
             pos++)
            if (g->el[pos].type == IFD__GE_RULE)
                occ[fill[g->el[pos].v]++] = a;
    for (uint32_t a = 0; a < na; a++)
        if (left[a] == 0 && !nullable[alt_rule[a]])
            nullable[alt_rule[a]] = 1, queue[nq++] = alt_rule[a];
    while (nq && !rc) {
        uint32_t q = queue[--nq];
        rc = work(p, 1 + occ_off[q + 1] - occ_off[q]);
        for (uint32_t k = occ_off[q]; k < occ_off[q + 1]; k++) {
            uint32_t a = occ[k];
            if (--left[a] == 0 && !nullable[alt_rule[a]])
                nullable[alt_rule[a]] = 1, queue[nq++] = alt_rule[a];
        }
    }
out:
    free(left);
    free(alt_rule);
    free(occ_off);
    free(fill);
    free(occ);
    free(queue);
    return rc;
}

/* The "r can begin with q" edges: q referenced with only nullable rules
 * before it in one of r's alternatives. An edge grows the stack when
 * something follows the reference (the expansion must come back there).
 * CSR arrays: r's edges are to[off[r] .. off[r + 1]). */
typedef struct {
    uint32_t *off, *to;
    uint8_t *grows;
} ledges_t;

static int left_edges(parser_t *p, const ifd_grammar_t *g, const uint8_t *nullable, ledges_t *E)
{
    size_t nr = g->n_rules;
    E->off = calloc(nr + 1, sizeof *E->off);
    E->to = malloc((g->n_el + 1) * sizeof *E->to);
    E->grows = malloc(g->n_el + 1);
    if (!E->off || !E->to || !E->grows)
        return perr(p, IFD_ENOMEM, "out of memory");
    uint32_t n = 0;
    for (uint32_t r = 0; r < nr; r++) {
        E->off[r] = n;
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
            for (uint32_t pos = g->alts[a]; g->el[pos].type == IFD__GE_RULE; pos++) {
                uint32_t next = g->el[pos + 1].type;
                E->to[n] = g->el[pos].v;
                E->grows[n++] = next != IFD__GE_END && next != IFD__GE_ALT;
                if (!nullable[g->el[pos].v])
                    break;
            }
    }
    E->off[nr] = n;
    return work(p, n);
}

/* Strongly connected components of the edges (Tarjan's, with an explicit
 * stack): comp[r] for every rule. */
static int left_sccs(parser_t *p, size_t nr, const ledges_t *E, uint32_t *comp)
{
    uint32_t *index = malloc(nr * sizeof *index), *low = malloc(nr * sizeof *low);
    uint32_t *cs = malloc(nr * sizeof *cs), *ce = malloc(nr * sizeof *ce);
    uint32_t *st = malloc(nr * sizeof *st);
    uint8_t *on = calloc(nr, 1);
    int rc = 0;
    if (!index || !low || !cs || !ce || !st || !on) {
        rc = perr(p, IFD_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nr; i++)
        index[i] = UINT32_MAX;
    uint32_t next = 0, ns = 0, nc = 0, ncomp = 0;
    for (uint32_t s = 0; s < nr; s++) {
        if (index[s] != UINT32_MAX)
            continue;
        cs[nc] = s, ce[nc++] = E->off[s];
        index[s] = low[s] = next++, st[ns++] = s, on[s] = 1;
        while (nc) {
            uint32_t v = cs[nc - 1];
            if (ce[nc - 1] < E->off[v + 1]) {
                uint32_t w = E->to[ce[nc - 1]++];
                if (index[w] == UINT32_MAX) {
                    cs[nc] = w, ce[nc++] = E->off[w];
                    index[w] = low[w] = next++, st[ns++] = w, on[w] = 1;
                } else if (on[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            if (low[v] == index[v]) {
                uint32_t w;
                do {
                    w = st[--ns];
                    on[w] = 0;
                    comp[w] = ncomp;
                } while (w != v);
                ncomp++;
            }
            if (--nc && low[v] < low[cs[nc - 1]])
                low[cs[nc - 1]] = low[v];
        }
    }
out:
    free(index);
    free(low);
    free(cs);
    free(ce);
    free(st);
    free(on);
    return rc;
}

/* Refuses left recursion that would grow the stack without consuming input
 * (`x ::= x "a"`, or through rules that can match nothing): a cycle of
 * "can begin with" edges one of which grows the stack. A cycle of tail
 * references only (`s ::= a s |` with `a` nullable, as `(a*)*` makes) adds
 * nothing to the stack: expansion meets it again and stops there
 * (active_enter), so it is accepted. Linear in the grammar. */
static int check_left_recursion(parser_t *p, const ifd_grammar_t *g)
{
    size_t nr = g->n_rules;
    uint8_t *nullable = calloc(nr + 1, 1);
    uint32_t *comp = malloc((nr + 1) * sizeof *comp);
    ledges_t E = {0};
    int rc = 0;
    if (!nullable || !comp)
        rc = perr(p, IFD_ENOMEM, "out of memory");
    if (!rc)
        rc = find_matching(p, g, nullable, false);
    if (!rc)
        rc = left_edges(p, g, nullable, &E);
    if (!rc)
        rc = left_sccs(p, nr, &E, comp);
    for (uint32_t r = 0; r < nr && !rc; r++)
        for (uint32_t k = E.off[r]; k < E.off[r + 1] && !rc; k++) {
            if (!E.grows[k] || comp[E.to[k]] != comp[r])
                continue;
            const prule_t *u = &p->rules[p->rules[r].user];
            p->line = u->line;
            rc = p->rules[r].helper
                     ? perr(p, IFD_EFORMAT,
                            "rule '%s' is left-recursive: a group or repetition in it can "
                            "begin with itself without consuming input",
                            u->name)
                     : perr(p, IFD_EFORMAT, "rule '%s' is left-recursive", u->name);
        }
    /* a root that matches no finite text (a rule that must always reference
     * itself again: a schema requiring a property of its own type) would
     * generate until max_tokens: refused */
    uint8_t *productive = rc ? NULL : calloc(nr + 1, 1);
    if (!rc && !productive)
        rc = perr(p, IFD_ENOMEM, "out of memory");
    if (!rc)
        rc = find_matching(p, g, productive, true);
    if (!rc && !productive[g->root]) {
        p->line = p->rules[g->root].line;
        rc = perr(p, IFD_EFORMAT,
                  "the grammar matches no text: 'root' never ends (every way "
                  "through it references a rule that cannot end)");
    }
    free(productive);
    free(nullable);
    free(comp);
    free(E.off);
    free(E.to);
    free(E.grows);
    return rc;
}

ifd_grammar_budget_t ifd_grammar_default_budget(void)
{
    return (ifd_grammar_budget_t){IFD_GRAMMAR_DEFAULT_WORK, 0, NULL};
}

int ifd_grammar_compile(const char *text, size_t len, ifd_grammar_t **out, char *err, size_t errlen)
{
    ifd_grammar_budget_t b = ifd_grammar_default_budget();
    return ifd_grammar_compile_budget(text, len, &b, out, err, errlen);
}

/* The start state must be computable within the budget: a grammar whose
 * first step is too ambiguous is refused now, not at its first token. */
static int check_start(parser_t *p, const ifd_grammar_t *g)
{
    ifd__gmem_t m;
    ifd__gmem_init(&m);
    m.work_limit = p->budget.max_work ? p->budget.max_work - p->work + 1 : 0;
    ifd__gstate_t s;
    int rc = ifd__grammar_start(g, &m, &s);
    uint64_t used = m.work;
    ifd__gmem_close(&m);
    if (rc == IFD_ETOOBIG)
        return perr(p, rc, "the grammar's first step is too ambiguous (over %u alternatives "
                           "or the compile budget)", IFD_GRAMMAR_MAX_STACKS);
    return rc ? perr(p, rc, "out of memory") : work(p, used);
}

int ifd_grammar_compile_budget(const char *text, size_t len, const ifd_grammar_budget_t *budget,
                               ifd_grammar_t **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!text || len > IFD_GRAMMAR_MAX_TEXT) {
        if (err && errlen)
            snprintf(err, errlen, "grammar over %u bytes", IFD_GRAMMAR_MAX_TEXT);
        return IFD_ETOOBIG;
    }
    parser_t p = {.s = text, .end = text + len, .line = 1, .errbuf = err, .errlen = errlen};
    p.budget = budget ? *budget : ifd_grammar_default_budget();
    if (p.budget.max_time_ms) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        p.deadline = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
                     (uint64_t)p.budget.max_time_ms * 1000000u;
    }
    ifd_grammar_t *g = NULL;
    int rc = 0;
    for (;;) {
        skip_ws(&p, true);
        if (p.s >= p.end)
            break;
        size_t n = name_len(p.s, p.end);
        if (!n || !at_rule_head(&p)) {
            rc = perr(&p, IFD_EFORMAT, "expected a rule 'name ::= ...'");
            goto fail;
        }
        uint32_t r;
        if ((rc = rule_get(&p, p.s, n, &r)))
            goto fail;
        if (p.rules[r].defined) {
            rc = perr(&p, IFD_EFORMAT, "rule '%s' defined twice", p.rules[r].name);
            goto fail;
        }
        p.rules[r].defined = true;
        p.rules[r].line = p.line;
        p.s += n;
        skip_ws(&p, true);
        p.s += 3; /* "::=" */
        if ((rc = parse_alternatives(&p, r, 0)))
            goto fail;
    }
    uint32_t root = UINT32_MAX;
    for (size_t i = 0; i < p.n_rules; i++) {
        if (!p.rules[i].defined) {
            p.line = p.rules[i].line;
            rc = perr(&p, IFD_EFORMAT, "undefined rule '%s'", p.rules[i].name);
            goto fail;
        }
        if (strcmp(p.rules[i].name, "root") == 0)
            root = (uint32_t)i;
    }
    if (root == UINT32_MAX) {
        rc = perr(&p, IFD_EFORMAT, "no 'root' rule");
        goto fail;
    }
    g = calloc(1, sizeof *g);
    if (!g) {
        rc = perr(&p, IFD_ENOMEM, "out of memory");
        goto fail;
    }
    size_t n_el = 0, n_alts = 0;
    for (size_t i = 0; i < p.n_rules; i++) {
        n_el += p.rules[i].n;
        for (size_t j = 0; j < p.rules[i].n; j++)
            n_alts += p.rules[i].el[j].type <= IFD__GE_ALT;
    }
    g->el = malloc((n_el + 1) * sizeof *g->el);
    g->alts = malloc((n_alts + 1) * sizeof *g->alts);
    g->alt_off = malloc((p.n_rules + 1) * sizeof *g->alt_off);
    if (!g->el || !g->alts || !g->alt_off) {
        rc = perr(&p, IFD_ENOMEM, "out of memory");
        goto fail;
    }
    size_t e = 0, a = 0;
    for (size_t i = 0; i < p.n_rules; i++) {
        g->alt_off[i] = (uint32_t)a;
        g->alts[a++] = (uint32_t)e;
        for (size_t j = 0; j < p.rules[i].n; j++) {
            g->el[e++] = p.rules[i].el[j];
            if (p.rules[i].el[j].type == IFD__GE_ALT)
                g->alts[a++] = (uint32_t)e;
        }
    }
    g->alt_off[p.n_rules] = (uint32_t)a;
    g->el[e] = (ifd__gelem_t){IFD__GE_END, 0};
    g->n_el = e;
    g->n_rules = p.n_rules;
    g->root = root;
    g->sets = p.sets;
    g->n_sets = p.n_sets;
    p.sets = NULL;
    if ((rc = check_left_recursion(&p, g)) || (rc = check_start(&p, g)))
        goto fail;
    for (size_t i = 0; i < p.n_rules; i++) {
        free(p.rules[i].name);
        free(p.rules[i].el);
    }
    free(p.rules);
    ifd_hash_close(&p.set_index);
    ifd_hash_close(&p.rule_index);
    *out = g;
    return 0;
fail:
    for (size_t i = 0; i < p.n_rules; i++) {
        free(p.rules[i].name);
        free(p.rules[i].el);
    }
    free(p.rules);
    free(p.sets);
    ifd_hash_close(&p.set_index);
    ifd_hash_close(&p.rule_index);
    ifd_grammar_destroy(g);
    return rc;
}

/* ---- the compiled form, as words ----------------------------------------------------- */

#define IFD__GSER_MAGIC 0x31524749u /* "IGR1" */
#define IFD__GSER_HDR   6           /* magic, n_el, n_alts, n_rules, n_sets, root */

int ifd_grammar_serialize(const ifd_grammar_t *g, int32_t **out, size_t *n_out)
{
    size_t n_alts = g->alt_off[g->n_rules];
    size_t n = IFD__GSER_HDR + 2 * (g->n_el + 1) + n_alts + g->n_rules + 1 + 8 * g->n_sets;
    uint32_t *w = malloc(n * sizeof *w);
    if (!w)
        return IFD_ENOMEM;
    size_t k = 0;
    w[k++] = IFD__GSER_MAGIC;
    w[k++] = (uint32_t)g->n_el;
    w[k++] = (uint32_t)n_alts;
    w[k++] = (uint32_t)g->n_rules;
    w[k++] = (uint32_t)g->n_sets;
    w[k++] = g->root;
    for (size_t i = 0; i <= g->n_el; i++) {
        w[k++] = g->el[i].type;
        w[k++] = g->el[i].v;
    }
    memcpy(w + k, g->alts, n_alts * sizeof *w);
    k += n_alts;
    memcpy(w + k, g->alt_off, (g->n_rules + 1) * sizeof *w);
    k += g->n_rules + 1;
    memcpy(w + k, g->sets, 32 * g->n_sets);
    *out = (int32_t *)w;
    *n_out = n;
    return 0;
}

/* Every index in range: what the matcher needs to stay inside the arrays.
 * (A hand-made array could still be left-recursive; the expansion's depth
 * and work limits stop that with IFD_ETOOBIG.) */
static int gser_check(const ifd_grammar_t *g, size_t n_alts)
{
    if (g->el[g->n_el].type != IFD__GE_END || g->root >= g->n_rules)
        return IFD_EFORMAT;
    for (size_t i = 0; i <= g->n_el; i++) {
        const ifd__gelem_t *e = &g->el[i];
        if (e->type > IFD__GE_SET || (e->type == IFD__GE_RULE && e->v >= g->n_rules) ||
            (e->type == IFD__GE_SET && e->v >= g->n_sets))
            return IFD_EFORMAT;
    }
    if (g->alt_off[0] != 0 || g->alt_off[g->n_rules] != n_alts)
        return IFD_EFORMAT;
    for (size_t r = 0; r < g->n_rules; r++)
        if (g->alt_off[r + 1] <= g->alt_off[r]) /* every rule has an alternative */
            return IFD_EFORMAT;
    /* an alternative runs from its start to the next ALT or END; el[n_el] is
     * END, so any start in range ends inside the array */
    for (size_t a = 0; a < n_alts; a++)
        if (g->alts[a] > g->n_el)
            return IFD_EFORMAT;
    return 0;
}

int ifd_grammar_deserialize(const int32_t *words, size_t n, ifd_grammar_t **out, char *err,
                            size_t errlen)
{
    const uint32_t *w = (const uint32_t *)words;
    *out = NULL;
    if (n < IFD__GSER_HDR || w[0] != IFD__GSER_MAGIC || w[1] > IFD_GRAMMAR_MAX_ELEMENTS ||
        w[2] > IFD_GRAMMAR_MAX_ELEMENTS + 1 || w[3] > IFD_GRAMMAR_MAX_ELEMENTS ||
        w[4] > IFD_GRAMMAR_MAX_ELEMENTS) {
        ifd_fail_msg(err, errlen, 0, "compiled grammar: bad header");
        return IFD_EFORMAT;
    }
    size_t n_el = w[1], n_alts = w[2], n_rules = w[3], n_sets = w[4];
    if (n != IFD__GSER_HDR + 2 * (n_el + 1) + n_alts + n_rules + 1 + 8 * n_sets || !n_rules) {
        ifd_fail_msg(err, errlen, 0, "compiled grammar: %zu words do not match its header", n);
        return IFD_EFORMAT;
    }
    ifd_grammar_t *g = calloc(1, sizeof *g);
    if (!g)
        return IFD_ENOMEM;
    g->n_el = n_el;
    g->n_rules = n_rules;
    g->n_sets = n_sets;
    g->root = w[5];
    g->el = malloc((n_el + 1) * sizeof *g->el);
    g->alts = malloc((n_alts + 1) * sizeof *g->alts);
    g->alt_off = malloc((n_rules + 1) * sizeof *g->alt_off);
    g->sets = malloc(32 * (n_sets + 1));
    if (!g->el || !g->alts || !g->alt_off || !g->sets) {
        ifd_grammar_destroy(g);
        return IFD_ENOMEM;
    }
    size_t k = IFD__GSER_HDR;
    for (size_t i = 0; i <= n_el; i++, k += 2)
        g->el[i] = (ifd__gelem_t){w[k], w[k + 1]};
    memcpy(g->alts, w + k, n_alts * sizeof *w);
    k += n_alts;
    memcpy(g->alt_off, w + k, (n_rules + 1) * sizeof *w);
    k += n_rules + 1;
    memcpy(g->sets, w + k, 32 * n_sets);
    if (gser_check(g, n_alts)) {
        ifd_grammar_destroy(g);
        ifd_fail_msg(err, errlen, 0, "compiled grammar: inconsistent");
        return IFD_EFORMAT;
    }
    *out = g;
    return 0;
}

void ifd_grammar_destroy(ifd_grammar_t *g)
{
    if (!g)
        return;
    free(g->el);
    free(g->alts);
    free(g->alt_off);
    free(g->sets);
    free(g);
}
