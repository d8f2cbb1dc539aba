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
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const ifd__gnode_t *gnode(ifd__gmem_t *m, uint32_t pos, const ifd__gnode_t *parent)
{
    ifd__gnode_t *n = gmem_alloc(m, sizeof *n);
    if (n) {
        n->pos = pos;
        n->parent = parent;
    }
    return n;
}

/* ---- expansion ------------------------------------------------------------------ */

static bool stack_eq(const ifd__gnode_t *a, const ifd__gnode_t *b)
{
    while (a != b) {
        if (!a || !b || a->pos != b->pos)
            return false;
        a = a->parent;
        b = b->parent;
    }
    return true;
}

static int scratch_push(ifd__gmem_t *m, const ifd__gnode_t *n)
{
    for (uint32_t i = 0; i < m->n_scratch; i++)
        if (stack_eq(m->scratch[i], n))
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
    return 0;
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
        if (e->type == IFD__GE_RULE) {
            const ifd__gnode_t *cont = parent;
            uint32_t nt = g->el[pos + 1].type;
            if (nt != IFD__GE_END && nt != IFD__GE_ALT) {
                cont = gnode(m, pos + 1, parent);
                if (!cont)
                    return IFD_ENOMEM;
            }
            uint32_t r = e->v;
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                int rc = expand(g, m, g->alts[a], cont);
                if (rc)
                    return rc;
            }
            return 0;
        }
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
    m->n_scratch = 0;
    m->scratch_accept = false;
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
    m->n_scratch = 0;
    m->scratch_accept = false;
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
    for (uint32_t i = 0; i < s->n; i++) {
        /* each chain is copied whole: states hold few, short stacks */
        const ifd__gnode_t *p = s->v[i];
        ifd__gnode_t *first = NULL, *prev = NULL;
        while (p) {
            ifd__gnode_t *n = gmem_alloc(m, sizeof *n);
            if (!n)
                return IFD_ENOMEM;
            n->pos = p->pos;
            n->parent = NULL;
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
    int line;
} prule_t;

typedef struct {
    const char *s, *end;
    int line;
    prule_t *rules;
    size_t n_rules, cap_rules;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    ifd_hash_t set_index; /* byte set -> its index in sets (each set stored once) */
    size_t n_elements;
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

static int rule_push(parser_t *p, uint32_t r, uint32_t type, uint32_t v)
{
    prule_t *R = &p->rules[r];
    if (++p->n_elements > IFD_GRAMMAR_MAX_ELEMENTS)
        return perr(p, IFD_ETOOBIG, "grammar too large (over %u elements)",
                    IFD_GRAMMAR_MAX_ELEMENTS);
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

/* A rule id for name (created undefined when new); helper rules pass
 * name NULL and get "<base>_<n>". */
static int rule_get(parser_t *p, const char *name, size_t len, bool helper, uint32_t *out)
{
    if (!helper) {
        for (size_t i = 0; i < p->n_rules; i++) {
            if (strlen(p->rules[i].name) == len && memcmp(p->rules[i].name, name, len) == 0) {
                *out = (uint32_t)i;
                return 0;
            }
        }
    }
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
    if (helper) {
        char buf[160];
        snprintf(buf, sizeof buf, "%.*s_%zu", (int)(len > 120 ? 120 : len), name, p->n_rules);
        R->name = strdup(buf);
        R->defined = true;
    } else {
        R->name = strndup(name, len);
    }
    if (!R->name)
        return perr(p, IFD_ENOMEM, "out of memory");
    *out = (uint32_t)p->n_rules++;
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
        rc = rule_get(p, p->rules[r].name, strlen(p->rules[r].name), true, &h);
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
    const char *base = p->rules[r].name;
    size_t blen = strlen(base);
    int rc = 0;
    for (unsigned i = 0; i < min && !rc; i++)
        rc = rule_append(p, r, frag, fl);
    if (!rc && unbounded) {
        /* S ::= frag S | (empty) */
        uint32_t s;
        rc = rule_get(p, base, blen, true, &s);
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
            rc = rule_get(p, base, blen, true, &o);
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
            if ((rc = rule_get(p, p->rules[r].name, strlen(p->rules[r].name), true, &g)))
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
            if ((rc = rule_get(p, p->s, n, false, &ref)))
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

static int check_left_recursion(parser_t *p, const ifd_grammar_t *g)
{
    size_t nr = g->n_rules;
    uint8_t *nullable = calloc(nr, 1);
    uint8_t *color = calloc(nr, 1);
    uint32_t *stack = malloc(nr * 2 * sizeof *stack);
    int rc = 0;
    if (!nullable || !color || !stack) {
        rc = perr(p, IFD_ENOMEM, "out of memory");
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < nr; r++) {
            if (nullable[r])
                continue;
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && !nullable[r]; a++) {
                uint32_t pos = g->alts[a];
                bool all = true;
                for (;; pos++) {
                    const ifd__gelem_t *e = &g->el[pos];
                    if (e->type == IFD__GE_END || e->type == IFD__GE_ALT)
                        break;
                    if (e->type == IFD__GE_SET || !nullable[e->v]) {
                        all = false;
                        break;
                    }
                }
                if (all) {
                    nullable[r] = 1;
                    changed = true;
                }
            }
        }
    }
    /* iterative DFS over "r can begin with q" edges; color 1 = on the
     * stack, 2 = done. stack holds (rule, next alternative/element cursor)
     * pairs flattened as rule ids; recursion depth is at most nr. */
    for (size_t s = 0; s < nr && !rc; s++) {
        if (color[s])
            continue;
        /* recursive helper via explicit stack of (rule, position index) */
        size_t sp = 0;
        stack[sp++] = (uint32_t)s;
        stack[sp++] = 0; /* cursor: index into the rule's "first" refs */
        color[s] = 1;
        while (sp && !rc) {
            uint32_t r = stack[sp - 2];
            uint32_t cur = stack[sp - 1];
            /* enumerate the first refs of r in order; cur counts them */
            uint32_t k = 0, found = UINT32_MAX;
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && found == UINT32_MAX; a++) {
                for (uint32_t pos = g->alts[a];; pos++) {
                    const ifd__gelem_t *e = &g->el[pos];
                    if (e->type != IFD__GE_RULE)
                        break;
                    if (k++ == cur) {
                        found = e->v;
                        break;
                    }
                    if (!nullable[e->v])
                        break;
                }
            }
            if (found == UINT32_MAX) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = cur + 1;
            if (color[found] == 1) {
                rc = perr(p, IFD_EFORMAT, "rule '%s' is left-recursive", p->rules[found].name);
            } else if (color[found] == 0) {
                color[found] = 1;
                stack[sp++] = found;
                stack[sp++] = 0;
            }
        }
    }
out:
    free(nullable);
    free(color);
    free(stack);
    return rc;
}

int ifd_grammar_compile(const char *text, size_t len, ifd_grammar_t **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!text || len > IFD_GRAMMAR_MAX_TEXT) {
        if (err && errlen)
            snprintf(err, errlen, "grammar over %u bytes", IFD_GRAMMAR_MAX_TEXT);
        return IFD_ETOOBIG;
    }
    parser_t p = {.s = text, .end = text + len, .line = 1, .errbuf = err, .errlen = errlen};
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
        if ((rc = rule_get(&p, p.s, n, false, &r)))
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
    if ((rc = check_left_recursion(&p, g)))
        goto fail;
    /* the start state must be computable */
    {
        ifd__gmem_t m;
        ifd__gmem_init(&m);
        ifd__gstate_t s;
        rc = ifd__grammar_start(g, &m, &s);
        ifd__gmem_close(&m);
        if (rc) {
            perr(&p, rc, "the start state is too ambiguous");
            goto fail;
        }
    }
    for (size_t i = 0; i < p.n_rules; i++) {
        free(p.rules[i].name);
        free(p.rules[i].el);
    }
    free(p.rules);
    ifd_hash_close(&p.set_index);
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
    ifd_grammar_destroy(g);
    return rc;
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
