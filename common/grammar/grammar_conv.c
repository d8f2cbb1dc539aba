/*
 * grammar_conv.c — see grammar_conv.h. Every schema node becomes one rule
 * "sN" (references are memoized per target so recursive schemas become
 * recursive rules); the shared JSON rules (ws, jstr, jnum, …) come first.
 * Literals are written with \u escapes for everything but ASCII letters and
 * digits, so no input can break out of a grammar literal.
 */
#include "grammar_conv.h"

#include "error.h"
#include "grammar.h"
#include "grammar_impl.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEPTH 64
#define MAX_REFS  1024

static const char BASE_RULES[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,12}\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "jstr ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jint ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "jnum ::= jint ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "jbool ::= \"true\" | \"false\"\n"
    "jnull ::= \"null\"\n"
    "jval ::= jobj | jarr | jstr | jnum | jbool | jnull\n"
    "jobj ::= \"{\" ws ( jstr ws \":\" ws jval ws ( \",\" ws jstr ws \":\" ws jval ws )* )? \"}\"\n"
    "jarr ::= \"[\" ws ( jval ws ( \",\" ws jval ws )* )? \"]\"\n"
    "jdatec ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
    "\"3\" [01] )\n"
    "jtimec ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
    "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "jhex ::= [0-9a-fA-F]\n"
    "jdate ::= \"\\\"\" jdatec \"\\\"\"\n"
    "jtime ::= \"\\\"\" jtimec \"\\\"\"\n"
    "jdatetime ::= \"\\\"\" jdatec \"T\" jtimec \"\\\"\"\n"
    "juuid ::= \"\\\"\" jhex{8} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{12} "
    "\"\\\"\"\n";

typedef struct {
    const json_t *doc;
    char *ref;
    unsigned id;
} ref_t;

typedef struct {
    ifd_buf_t rules;
    unsigned next;
    ref_t *refs;
    size_t n_refs;
    char *err;
    size_t errlen;
    int depth;
    ifd_grammar_budget_t budget;
    uint64_t deadline; /* CLOCK_MONOTONIC ns; 0 none */
    uint64_t steps;    /* schema nodes and regex atoms converted */
} conv_t;

static int cerr(conv_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cerr(conv_t *c, int code, const char *fmt, ...)
{
    if (c->err && c->errlen && !c->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* One step of conversion (a schema node, a regex atom): past the budget's
 * work, time or cancel flag the conversion stops. Conversion is linear in
 * its input; this keeps a huge input within the request's time budget. */
static int conv_step(conv_t *c)
{
    ++c->steps;
    if (c->budget.max_work && c->steps > c->budget.max_work)
        return cerr(c, IFD_ETOOBIG, "the schema or regex is too large to convert (over %llu steps)",
                    (unsigned long long)c->budget.max_work);
    if (c->steps & 1023)
        return 0;
    if (c->budget.cancel && atomic_load_explicit(c->budget.cancel, memory_order_relaxed))
        return cerr(c, IFD_ECANCELED, "canceled");
    if (c->deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec > c->deadline)
            return cerr(c, IFD_ETOOBIG, "converting the schema or regex took longer than %u ms",
                        c->budget.max_time_ms);
    }
    return 0;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* A grammar escape of one code point (inside a literal or a class). */
static int put_cp(ifd_buf_t *b, uint32_t cp)
{
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        return ifd_buf_printf(b, "%c", (char)cp) ? IFD_ENOMEM : 0;
    if (cp < 0x10000)
        return ifd_buf_printf(b, "\\u%04X", cp) ? IFD_ENOMEM : 0;
    return ifd_buf_printf(b, "\\U%08X", cp) ? IFD_ENOMEM : 0;
}

/* Decodes one UTF-8 code point; returns its length or 0 when invalid or
 * unfinished (overlong forms, surrogates and values past U+10FFFF included). */
static int utf8_dec(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (!n)
        return 0;
    size_t k;
    uint32_t v = ifd_utf8_get(s, n, &k);
    if (v == 0xFFFFFFFFu)
        return 0;
    *cp = v;
    return (int)k;
}

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = ifd_utf8_check((const uint8_t *)s + i, n - i);
        if (k <= 0)
            return false;
        i += (size_t)k;
    }
    return true;
}

/* A grammar literal matching exactly the bytes s[0..n) (valid UTF-8). */
static int put_lit(ifd_buf_t *b, const char *s, size_t n)
{
    if (ifd_buf_puts(b, "\""))
        return IFD_ENOMEM;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = utf8_dec((const unsigned char *)s + i, n - i, &cp);
        if (!k)
            return IFD_EFORMAT;
        TRY(put_cp(b, cp));
        i += (size_t)k;
    }
    return ifd_buf_puts(b, "\" ") ? IFD_ENOMEM : 0;
}

/* A literal for the compact JSON text of v. */
static int put_json_lit(conv_t *c, ifd_buf_t *b, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return cerr(c, IFD_ENOMEM, "out of memory");
    int rc = put_lit(b, s, strlen(s));
    free(s);
    return rc == IFD_EFORMAT ? cerr(c, rc, "invalid UTF-8 in a schema value") : rc;
}

/* Appends "sN ::= body\n". */
static int add_rule(conv_t *c, unsigned id, const ifd_buf_t *body)
{
    if (ifd_buf_printf(&c->rules, "s%u ::= %s\n", id, body->len ? body->data : "\"\""))
        return cerr(c, IFD_ENOMEM, "out of memory");
    if (c->rules.len > IFD_GRAMMAR_MAX_TEXT)
        return cerr(c, IFD_ETOOBIG, "the schema's grammar is over %u bytes", IFD_GRAMMAR_MAX_TEXT);
    return 0;
}

/* ---- sets of literals (choice lists, enums) ------------------------------------------- */

/* The literals in sorted order share prefixes: they go out as a trie of
 * rules (each node: its common prefix, then one alternative per next code
 * point), so the grammar's first step has one stack per distinct first
 * character, not one per literal — a choice list of 10,000 entries is
 * cheap instead of "too ambiguous". */
typedef struct {
    const char *s;
    size_t n;
} lit_t;

static int lit_cmp(const void *a, const void *b)
{
    const lit_t *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Bytes v[lo] and v[hi - 1] (sorted) share from off on, cut back to a code
 * point boundary (a continuation byte 10xxxxxx never starts one). */
static size_t lit_lcp(const lit_t *v, size_t lo, size_t hi, size_t off)
{
    const lit_t *a = &v[lo], *b = &v[hi - 1];
    size_t k = off;
    while (k < a->n && k < b->n && a->s[k] == b->s[k])
        k++;
    while (k > off && k < a->n && ((unsigned char)a->s[k] & 0xC0) == 0x80)
        k--;
    return k;
}

/* The trie node of v[lo, hi) (sorted, distinct, sharing off bytes) into b. */
static int lit_node(conv_t *c, const lit_t *v, size_t lo, size_t hi, size_t off, int depth,
                    ifd_buf_t *b)
{
    if (depth > 10000)
        return cerr(c, IFD_ETOOBIG, "the literals nest over 10000 levels deep");
    size_t k = hi - lo == 1 ? v[lo].n : lit_lcp(v, lo, hi, off);
    if (k > off && put_lit(b, v[lo].s + off, k - off))
        return cerr(c, IFD_EFORMAT, "a literal is not valid UTF-8");
    if (hi - lo == 1)
        return k > off || ifd_buf_puts(b, "\"\" ") == 0 ? 0 : IFD_ENOMEM;
    if (ifd_buf_puts(b, "( "))
        return IFD_ENOMEM;
    size_t i = lo;
    bool first = true;
    if (v[i].n == k) { /* one literal ends here */
        if (ifd_buf_puts(b, "\"\" "))
            return IFD_ENOMEM;
        i++, first = false;
    }
    while (i < hi) {
        /* the literals whose next code point is v[i]'s */
        size_t cl = 1;
        while (k + cl < v[i].n && ((unsigned char)v[i].s[k + cl] & 0xC0) == 0x80)
            cl++;
        size_t j = i + 1;
        while (j < hi && v[j].n >= k + cl && memcmp(v[j].s + k, v[i].s + k, cl) == 0)
            j++;
        if (!first && ifd_buf_puts(b, "| "))
            return IFD_ENOMEM;
        first = false;
        if (j - i == 1) {
            TRY(lit_node(c, v, i, j, k, depth + 1, b));
        } else {
            ifd_buf_t sub = IFD_BUF_INIT;
            int rc = lit_node(c, v, i, j, k, depth + 1, &sub);
            unsigned id = c->next++;
            if (!rc)
                rc = add_rule(c, id, &sub);
            ifd_buf_free(&sub);
            TRY(rc);
            if (ifd_buf_printf(b, "s%u ", id))
                return IFD_ENOMEM;
        }
        i = j;
    }
    return ifd_buf_puts(b, ") ") ? IFD_ENOMEM : 0;
}

/* Exactly one of the n literals (duplicates allowed), as a trie, into b. */
static int put_literals(conv_t *c, lit_t *v, size_t n, ifd_buf_t *b)
{
    qsort(v, n, sizeof *v, lit_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!m || lit_cmp(&v[m - 1], &v[i]))
            v[m++] = v[i];
    int rc = lit_node(c, v, 0, m, 0, 0, b);
    return rc == IFD_ENOMEM ? cerr(c, rc, "out of memory") : rc;
}

/* ---- regular expressions ------------------------------------------------------------ */

typedef struct {
    uint32_t lo, hi;
} cprange_t;

typedef struct {
    cprange_t *r;
    size_t n, cap;
} cpset_t;

static int cps_add(cpset_t *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        cprange_t *r = realloc(s->r, cap * sizeof *r);
        if (!r)
            return IFD_ENOMEM;
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (cprange_t){lo, hi};
    return 0;
}

static int cmp_cpr(const void *a, const void *b)
{
    const cprange_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges; with neg, complements over [0, 0x10FFFF]. */
static int cps_normalize(cpset_t *s, bool neg)
{
    qsort(s->r, s->n, sizeof *s->r, cmp_cpr);
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (m && s->r[i].lo <= s->r[m - 1].hi + 1) {
            if (s->r[i].hi > s->r[m - 1].hi)
                s->r[m - 1].hi = s->r[i].hi;
        } else {
            s->r[m++] = s->r[i];
        }
    }
    s->n = m;
    if (!neg)
        return 0;
    cpset_t t = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && cps_add(&t, next, s->r[i].lo - 1))
            goto oom;
        next = s->r[i].hi + 1;
    }
    if (next <= 0x10FFFF && cps_add(&t, next, 0x10FFFF))
        goto oom;
    free(s->r);
    *s = t;
    return 0;
oom:
    free(t.r);
    return IFD_ENOMEM;
}

static bool cps_has(const cpset_t *s, uint32_t cp)
{
    for (size_t i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi)
            return true;
    return false;
}

/* Writes a normalized set as one grammar item. Raw mode: a class. JSON
 * mode: the set's characters as they appear inside a JSON string literal:
 * a class of the characters that need no escape, plus alternatives for
 * the escaped forms of '"', '\\' and control characters in the set. */
static int put_set(ifd_buf_t *b, const cpset_t *s, bool json)
{
    bool any_safe = false;
    ifd_buf_t cls = IFD_BUF_INIT;
    int rc = 0;
    if (ifd_buf_puts(&cls, "["))
        rc = IFD_ENOMEM;
    for (size_t i = 0; i < s->n && !rc; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        /* cut out the characters JSON must escape */
        uint32_t a = lo;
        while (a <= hi && !rc) {
            if (json && (a < 0x20 || a == '"' || a == '\\')) {
                a++;
                continue;
            }
            uint32_t e = hi;
            if (json && a < '"' && e >= '"')
                e = '"' - 1;
            else if (json && a < '\\' && e >= '\\')
                e = '\\' - 1;
            rc = put_cp(&cls, a);
            if (!rc && e > a) {
                if (ifd_buf_puts(&cls, "-"))
                    rc = IFD_ENOMEM;
                else
                    rc = put_cp(&cls, e);
            }
            any_safe = true;
            if (e == 0x10FFFF)
                break;
            a = e + 1;
        }
    }
    if (!rc && ifd_buf_puts(&cls, "]"))
        rc = IFD_ENOMEM;
    if (rc) {
        ifd_buf_free(&cls);
        return rc;
    }
    if (!json) {
        rc = any_safe ? (ifd_buf_append(b, cls.data, cls.len) ? IFD_ENOMEM : 0) : IFD_EFORMAT;
        if (!rc && ifd_buf_puts(b, " "))
            rc = IFD_ENOMEM;
        ifd_buf_free(&cls);
        return rc;
    }
    int alts = 0;
    if (ifd_buf_puts(b, "( "))
        rc = IFD_ENOMEM;
    if (!rc && any_safe) {
        rc = ifd_buf_append(b, cls.data, cls.len) ? IFD_ENOMEM : 0;
        alts++;
    }
    ifd_buf_free(&cls);
    static const struct {
        uint32_t cp;
        const char *esc;
    } shorts[] = {{'"', "\\u005C\\u0022"},
                  {'\\', "\\u005C\\u005C"},
                  {'\n', "\\u005Cn"},
                  {'\r', "\\u005Cr"},
                  {'\t', "\\u005Ct"}};
    for (size_t i = 0; i < sizeof shorts / sizeof shorts[0] && !rc; i++) {
        if (cps_has(s, shorts[i].cp)) {
            rc =
                ifd_buf_printf(b, "%s\"%s\"", alts++ ? " | " : " ", shorts[i].esc) ? IFD_ENOMEM : 0;
        }
    }
    for (uint32_t cp = 0; cp < 0x20 && !rc; cp++) {
        if (cps_has(s, cp))
            rc = ifd_buf_printf(b, "%s\"\\u005Cu00%X%X\"", alts++ ? " | " : " ", cp >> 4, cp & 15)
                     ? IFD_ENOMEM
                     : 0;
    }
    if (!rc && !alts)
        rc = IFD_EFORMAT;
    if (!rc && ifd_buf_puts(b, " ) "))
        rc = IFD_ENOMEM;
    return rc;
}

typedef struct {
    conv_t *c;
    const char *start, *s, *end;
    bool json;
    int depth;
} rx_t;

static int rx_err(rx_t *x, int code, const char *what)
{
    if (code == IFD_ENOMEM)
        return cerr(x->c, code, "out of memory");
    return cerr(x->c, code, "regex: %s at offset %ld", what, (long)(x->s - x->start));
}

static int rx_class_escape(char e, cpset_t *s)
{
    int rc = 0;
    switch (e) {
    case 'd':
        return cps_add(s, '0', '9');
    case 'w':
        rc = cps_add(s, '0', '9');
        rc = rc ? rc : cps_add(s, 'A', 'Z');
        rc = rc ? rc : cps_add(s, 'a', 'z');
        return rc ? rc : cps_add(s, '_', '_');
    case 's':
        rc = cps_add(s, '\t', '\r');
        return rc ? rc : cps_add(s, ' ', ' ');
    default:
        return 1; /* not a class escape */
    }
}

/* An escape outside/inside a class producing one code point; 1 when e is
 * not such an escape. */
static int rx_char_escape(rx_t *x, char e, uint32_t *cp)
{
    int k = ifd__gescape(IFD__GESC_REGEX, e, &x->s, x->end, cp);
    if (k < 0)
        return rx_err(x, k, "bad hex escape");
    if (k == 0) /* \xHH cannot reach the surrogates; \uHHHH can */
        return *cp >= 0xD800 && *cp <= 0xDFFF ? rx_err(x, IFD_ENOTSUP, "surrogate escape") : 0;
    /* Other letters and digits are classes, anchors or unsupported; any other
     * character stands for itself. */
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
        return 1;
    *cp = (uint32_t)(unsigned char)e;
    return 0;
}

static int rx_next_cp(rx_t *x, uint32_t *cp)
{
    int k = utf8_dec((const unsigned char *)x->s, (size_t)(x->end - x->s), cp);
    if (!k)
        return rx_err(x, IFD_EFORMAT, "invalid UTF-8");
    x->s += k;
    return 0;
}

/* One member of a class at x->s: a character (0, *cp set) or, where set is
 * given (not at a range's upper end), a class escape \d \w \s added to set
 * (1). Negative: the error, recorded. */
static int rx_class_member(rx_t *x, uint32_t *cp, cpset_t *set)
{
    if (*x->s != '\\')
        return rx_next_cp(x, cp);
    x->s++;
    if (x->s >= x->end)
        return rx_err(x, IFD_EFORMAT, "trailing backslash");
    char e = *x->s++;
    if (set && (e == 'D' || e == 'W' || e == 'S')) {
        /* the complement of \d, \w or \s joins the class ([\s\S]: anything) */
        cpset_t neg = {0};
        int rc = rx_class_escape((char)(e - 'A' + 'a'), &neg);
        rc = rc ? rc : cps_normalize(&neg, true);
        for (size_t i = 0; !rc && i < neg.n; i++)
            rc = cps_add(set, neg.r[i].lo, neg.r[i].hi);
        free(neg.r);
        return rc ? rx_err(x, IFD_ENOMEM, "out of memory") : 1;
    }
    if (set) {
        int k = rx_class_escape(e, set);
        if (k <= 0)
            return k < 0 ? k : 1;
    }
    int k = rx_char_escape(x, e, cp);
    if (k > 0)
        return rx_err(x, IFD_ENOTSUP,
                      set ? "unsupported escape in a class" : "unsupported escape in a range");
    return k;
}

static int rx_class(rx_t *x, ifd_buf_t *b)
{
    x->s++; /* [ */
    bool neg = false;
    if (x->s < x->end && *x->s == '^') {
        neg = true;
        x->s++;
    }
    cpset_t s = {0};
    int rc = 0;
    bool first = true;
    while (!rc) {
        if (x->s >= x->end) {
            rc = rx_err(x, IFD_EFORMAT, "unterminated class");
            break;
        }
        if (*x->s == ']' && !first) {
            x->s++;
            break;
        }
        first = false;
        uint32_t lo;
        int k = rx_class_member(x, &lo, &s);
        if (k > 0)
            continue; /* \d, \w or \s: added to s */
        if ((rc = k))
            break;
        uint32_t hi = lo;
        if (x->end - x->s >= 2 && x->s[0] == '-' && x->s[1] != ']') {
            x->s++;
            if ((rc = rx_class_member(x, &hi, NULL)))
                break;
            if (hi < lo) {
                rc = rx_err(x, IFD_EFORMAT, "reversed range");
                break;
            }
        }
        rc = cps_add(&s, lo, hi);
    }
    if (!rc)
        rc = cps_normalize(&s, neg);
    if (!rc) {
        rc = put_set(b, &s, x->json);
        if (rc == IFD_EFORMAT)
            rc = rx_err(x, IFD_EFORMAT, "empty class");
    }
    free(s.r);
    return rc;
}

static int rx_single(rx_t *x, ifd_buf_t *b, uint32_t lo, uint32_t hi, bool neg)
{
    cpset_t s = {0};
    int rc = cps_add(&s, lo, hi);
    if (!rc)
        rc = cps_normalize(&s, neg);
    if (!rc)
        rc = put_set(b, &s, x->json);
    free(s.r);
    return rc;
}

static int rx_alt(rx_t *x, ifd_buf_t *b);

static int rx_atom(rx_t *x, ifd_buf_t *b)
{
    TRY(conv_step(x->c));
    char c = *x->s;
    if (c == '(') {
        x->s++;
        if (x->s < x->end && *x->s == '?') {
            x->s++;
            if (x->s < x->end && *x->s == ':') {
                x->s++;
            } else if (x->s < x->end && (*x->s == 'P' || *x->s == '<') &&
                       !(x->end - x->s >= 2 && x->s[0] == '<' &&
                         (x->s[1] == '=' || x->s[1] == '!'))) {
                if (*x->s == 'P')
                    x->s++;
                if (x->s >= x->end || *x->s != '<')
                    return rx_err(x, IFD_ENOTSUP, "unsupported group");
                while (x->s < x->end && *x->s != '>')
                    x->s++;
                if (x->s >= x->end)
                    return rx_err(x, IFD_EFORMAT, "unterminated group name");
                x->s++;
            } else {
                return rx_err(x, IFD_ENOTSUP, "lookaround or inline flags");
            }
        }
        if (ifd_buf_puts(b, "( "))
            return IFD_ENOMEM;
        TRY(rx_alt(x, b));
        if (x->s >= x->end || *x->s != ')')
            return rx_err(x, IFD_EFORMAT, "missing ')'");
        x->s++;
        return ifd_buf_puts(b, ") ") ? IFD_ENOMEM : 0;
    }
    if (c == '[')
        return rx_class(x, b);
    if (c == '.') {
        x->s++;
        cpset_t s = {0};
        int rc = cps_add(&s, '\n', '\n');
        if (!rc)
            rc = cps_normalize(&s, true);
        if (!rc)
            rc = put_set(b, &s, x->json);
        free(s.r);
        return rc;
    }
    if (c == '\\') {
        x->s++;
        if (x->s >= x->end)
            return rx_err(x, IFD_EFORMAT, "trailing backslash");
        char e = *x->s++;
        if (e == 'D' || e == 'W' || e == 'S' || e == 'd' || e == 'w' || e == 's') {
            cpset_t s = {0};
            int rc = rx_class_escape((char)(e | 0x20), &s);
            if (!rc)
                rc = cps_normalize(&s, e < 'a');
            if (!rc)
                rc = put_set(b, &s, x->json);
            free(s.r);
            return rc;
        }
        if (e == 'b' || e == 'B')
            return rx_err(x, IFD_ENOTSUP, "word boundaries");
        if (e >= '1' && e <= '9')
            return rx_err(x, IFD_ENOTSUP, "backreferences");
        uint32_t cp;
        int k = rx_char_escape(x, e, &cp);
        if (k)
            return k < 0 ? k : rx_err(x, IFD_ENOTSUP, "unsupported escape");
        return rx_single(x, b, cp, cp, false);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_err(x, IFD_EFORMAT, "quantifier without an operand");
    uint32_t cp;
    TRY(rx_next_cp(x, &cp));
    return rx_single(x, b, cp, cp, false);
}

static int rx_uint(rx_t *x, unsigned *v)
{
    if (x->s >= x->end || *x->s < '0' || *x->s > '9')
        return rx_err(x, IFD_EFORMAT, "expected a number");
    *v = 0;
    while (x->s < x->end && *x->s >= '0' && *x->s <= '9') {
        *v = *v * 10 + (unsigned)(*x->s++ - '0');
        if (*v > IFD_GRAMMAR_MAX_REPEAT)
            return rx_err(x, IFD_ETOOBIG, "repetition count too large");
    }
    return 0;
}

static int rx_concat(rx_t *x, ifd_buf_t *b)
{
    bool any = false;
    while (x->s < x->end && *x->s != '|' && *x->s != ')') {
        if (*x->s == '^' || *x->s == '$')
            return rx_err(x, IFD_ENOTSUP, "anchors other than a leading ^ and a trailing $");
        TRY(rx_atom(x, b));
        any = true;
        for (;;) {
            if (x->s >= x->end)
                break;
            char q = *x->s;
            if (q == '*' || q == '+' || q == '?') {
                x->s++;
                if (ifd_buf_printf(b, "%c ", q))
                    return IFD_ENOMEM;
            } else if (q == '{') {
                const char *save = x->s;
                x->s++;
                unsigned m, n = 0;
                if (x->s >= x->end || *x->s < '0' || *x->s > '9') {
                    x->s = save;
                    return rx_err(x, IFD_ENOTSUP, "literal '{'");
                }
                TRY(rx_uint(x, &m));
                bool unb = false;
                n = m;
                if (x->s < x->end && *x->s == ',') {
                    x->s++;
                    if (x->s < x->end && *x->s == '}')
                        unb = true;
                    else
                        TRY(rx_uint(x, &n));
                }
                if (x->s >= x->end || *x->s != '}')
                    return rx_err(x, IFD_EFORMAT, "missing '}'");
                x->s++;
                if (!unb && n < m)
                    return rx_err(x, IFD_EFORMAT, "{m,n} with n < m");
                if ((unb ? ifd_buf_printf(b, "{%u,} ", m) : ifd_buf_printf(b, "{%u,%u} ", m, n)))
                    return IFD_ENOMEM;
            } else {
                break;
            }
            if (x->s < x->end && *x->s == '?')
                x->s++; /* lazy: same language */
            else if (x->s < x->end && *x->s == '+')
                return rx_err(x, IFD_ENOTSUP, "possessive quantifiers");
        }
    }
    if (!any && ifd_buf_puts(b, "\"\" "))
        return IFD_ENOMEM;
    return 0;
}

static int rx_alt(rx_t *x, ifd_buf_t *b)
{
    if (++x->depth > 100)
        return rx_err(x, IFD_ETOOBIG, "groups nested too deeply");
    TRY(rx_concat(x, b));
    while (x->s < x->end && *x->s == '|') {
        x->s++;
        if (ifd_buf_puts(b, "| "))
            return IFD_ENOMEM;
        TRY(rx_concat(x, b));
    }
    x->depth--;
    return 0;
}

/* The regex as one grammar item (a group) into b. search: an unanchored
 * side accepts any characters there (JSON Schema's pattern semantics). */
static int rx_convert(conv_t *c, const char *re, size_t len, bool json, bool search, ifd_buf_t *b)
{
    rx_t x = {c, re, re, re + len, json, 0};
    bool head = len && re[0] == '^';
    if (head)
        x.s++;
    bool tail = false;
    if (x.end > x.s && x.end[-1] == '$') {
        /* a trailing $ that is not escaped */
        size_t bs = 0;
        for (const char *q = x.end - 2; q >= x.s && *q == '\\'; q--)
            bs++;
        if (bs % 2 == 0) {
            tail = true;
            x.end--;
        }
    }
    if (ifd_buf_puts(b, "( "))
        return IFD_ENOMEM;
    if (search && !head && ifd_buf_puts(b, json ? "jchar* " : "[^\\x00]* "))
        return IFD_ENOMEM;
    if (ifd_buf_puts(b, "( "))
        return IFD_ENOMEM;
    TRY(rx_alt(&x, b));
    if (x.s != x.end)
        return rx_err(&x, IFD_EFORMAT, "unbalanced ')'");
    if (ifd_buf_puts(b, ") "))
        return IFD_ENOMEM;
    if (search && !tail && ifd_buf_puts(b, json ? "jchar* " : "[^\\x00]* "))
        return IFD_ENOMEM;
    return ifd_buf_puts(b, ") ") ? IFD_ENOMEM : 0;
}

/* ---- JSON Schema ---------------------------------------------------------------------- */

static const char *const KNOWN[] = {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "$defs",
    "definitions",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "nullable",
    /* annotations */
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
};
static const char *const CONSTRAINING[] = {
    "type",    "enum",        "const",    "properties", "required",  "additionalProperties",
    "items",   "prefixItems", "minItems", "maxItems",   "minLength", "maxLength",
    "pattern", "format",      "nullable"};

static bool in_list(const char *k, const char *const *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, l[i]) == 0)
            return true;
    return false;
}

static int schema_rule(conv_t *c, const json_t *s, const json_t *doc, unsigned *id);

/* One of the enum's values (their compact JSON texts, as a trie). */
static int enum_body(conv_t *c, const json_t *en, ifd_buf_t *b)
{
    size_t n = json_array_size(en);
    lit_t *v = calloc(n, sizeof *v);
    if (!v)
        return cerr(c, IFD_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char *s = json_dumps(json_array_get(en, i), JSON_COMPACT | JSON_ENCODE_ANY);
        if (!s)
            rc = cerr(c, IFD_ENOMEM, "out of memory");
        else
            v[i] = (lit_t){s, strlen(s)};
    }
    if (!rc)
        rc = put_literals(c, v, n, b);
    for (size_t i = 0; i < n; i++)
        free((char *)v[i].s);
    free(v);
    return rc;
}

/* Resolves a local reference against doc. */
static const json_t *resolve(const json_t *doc, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *cur = doc;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/')
            return NULL;
        p++;
        char key[256];
        size_t k = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~') {
                if (*p == '0')
                    ch = '~';
                else if (*p == '1')
                    ch = '/';
                else
                    return NULL;
                p++;
            }
            if (k + 1 >= sizeof key)
                return NULL;
            key[k++] = ch;
        }
        key[k] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, key);
        } else if (json_is_array(cur)) {
            char *e;
            unsigned long i = strtoul(key, &e, 10);
            cur = *e || !k ? NULL : json_array_get(cur, i);
        } else {
            return NULL;
        }
        if (!cur)
            return NULL;
    }
    return cur;
}

static int ref_rule(conv_t *c, const char *ref, const json_t *doc, unsigned *id)
{
    for (size_t i = 0; i < c->n_refs; i++) {
        if (c->refs[i].doc == doc && strcmp(c->refs[i].ref, ref) == 0) {
            *id = c->refs[i].id;
            return 0;
        }
    }
    const json_t *t = resolve(doc, ref);
    if (!t)
        return cerr(c, IFD_ENOTSUP, "$ref '%.200s' is not a local reference into the schema", ref);
    if (c->n_refs == MAX_REFS)
        return cerr(c, IFD_ETOOBIG, "more than %d distinct $ref targets", MAX_REFS);
    ref_t *r = realloc(c->refs, (c->n_refs + 1) * sizeof *r);
    if (!r)
        return cerr(c, IFD_ENOMEM, "out of memory");
    c->refs = r;
    char *dup = strdup(ref);
    if (!dup)
        return cerr(c, IFD_ENOMEM, "out of memory");
    unsigned me = c->next++;
    c->refs[c->n_refs++] = (ref_t){doc, dup, me};
    /* sN ::= <the target's rule> (recursion reaches sN by name) */
    unsigned tid;
    int saved = c->depth;
    c->depth = 0;
    int rc = schema_rule(c, t, doc, &tid);
    c->depth = saved;
    if (rc)
        return rc;
    ifd_buf_t body = IFD_BUF_INIT;
    rc = ifd_buf_printf(&body, "s%u", tid) ? cerr(c, IFD_ENOMEM, "out of memory") : 0;
    if (!rc)
        rc = add_rule(c, me, &body);
    ifd_buf_free(&body);
    *id = me;
    return rc;
}

static int get_count(conv_t *c, const json_t *s, const char *key, long long *out)
{
    const json_t *v = json_object_get(s, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > IFD_GRAMMAR_MAX_REPEAT)
        return cerr(c, IFD_ENOTSUP, "'%s' must be an integer in [0, %d]", key,
                    IFD_GRAMMAR_MAX_REPEAT);
    *out = json_integer_value(v);
    return 0;
}

static int string_body(conv_t *c, const json_t *s, ifd_buf_t *b)
{
    const json_t *fmt = json_object_get(s, "format");
    const json_t *pat = json_object_get(s, "pattern");
    long long mn = -1, mx = -1;
    TRY(get_count(c, s, "minLength", &mn));
    TRY(get_count(c, s, "maxLength", &mx));
    if (fmt) {
        const char *f = json_string_value(fmt);
        static const struct {
            const char *name, *rule;
        } formats[] = {
            {"date", "jdate"}, {"time", "jtime"}, {"date-time", "jdatetime"}, {"uuid", "juuid"}};
        if (!f)
            return cerr(c, IFD_ENOTSUP, "'format' must be a string");
        if (pat || mn >= 0 || mx >= 0)
            return cerr(c, IFD_ENOTSUP, "'format' combined with 'pattern' or a length");
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            if (strcmp(f, formats[i].name) == 0)
                return ifd_buf_printf(b, "%s ", formats[i].rule) ? IFD_ENOMEM : 0;
        return cerr(c, IFD_ENOTSUP,
                    "'format': \"%.60s\" is not supported (date, time, date-time, uuid are)", f);
    }
    if (pat) {
        const char *p = json_string_value(pat);
        if (!p)
            return cerr(c, IFD_ENOTSUP, "'pattern' must be a string");
        if (mn >= 0 || mx >= 0)
            return cerr(c, IFD_ENOTSUP, "'pattern' combined with 'minLength'/'maxLength'");
        if (ifd_buf_puts(b, "\"\\u0022\" "))
            return IFD_ENOMEM;
        TRY(rx_convert(c, p, strlen(p), true, true, b));
        return ifd_buf_puts(b, "\"\\u0022\" ") ? IFD_ENOMEM : 0;
    }
    if (mn < 0 && mx < 0)
        return ifd_buf_puts(b, "jstr ") ? IFD_ENOMEM : 0;
    if (mn < 0)
        mn = 0;
    if (mx >= 0 && mx < mn)
        return cerr(c, IFD_ENOTSUP, "'maxLength' below 'minLength'");
    if (mx >= 0)
        return ifd_buf_printf(b, "\"\\u0022\" jchar{%lld,%lld} \"\\u0022\" ", mn, mx) ? IFD_ENOMEM
                                                                                      : 0;
    return ifd_buf_printf(b, "\"\\u0022\" jchar{%lld,} \"\\u0022\" ", mn) ? IFD_ENOMEM : 0;
}

static int object_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return cerr(c, IFD_ENOTSUP, "'properties' must be an object");
    if (req && !json_is_array(req))
        return cerr(c, IFD_ENOTSUP, "'required' must be an array");
    size_t np = props ? json_object_size(props) : 0;
    if (np == 0) {
        if (req && json_array_size(req))
            return cerr(c, IFD_ENOTSUP, "'required' names properties the schema does not define");
        if (!addl || json_is_true(addl))
            return ifd_buf_puts(b, "jobj ") ? IFD_ENOMEM : 0;
        if (json_is_false(addl))
            return ifd_buf_puts(b, "\"{\" ws \"}\" ") ? IFD_ENOMEM : 0;
        unsigned v;
        TRY(schema_rule(c, addl, doc, &v));
        return ifd_buf_printf(b,
                              "\"{\" ws ( jstr ws \":\" ws s%u ws ( \",\" ws jstr ws \":\" ws "
                              "s%u ws )* )? \"}\" ",
                              v, v)
                   ? IFD_ENOMEM
                   : 0;
    }
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (!r)
            return cerr(c, IFD_ENOTSUP, "'required' must list strings");
        if (!json_object_get(props, r))
            return cerr(c, IFD_ENOTSUP, "'required' names '%.100s', which is not in 'properties'",
                        r);
    }
    /* kv rule per property: "key" ws ":" ws value ws */
    unsigned *kv = calloc(np, sizeof *kv);
    bool *isreq = calloc(np, sizeof *isreq);
    if (!kv || !isreq) {
        free(kv);
        free(isreq);
        return cerr(c, IFD_ENOMEM, "out of memory");
    }
    int rc = 0;
    size_t i = 0;
    const char *key;
    const json_t *val;
    /* the required names as a set (jansson's objects are hashed): linear in
     * properties + required, however long both lists are */
    json_t *reqset = json_object();
    for (size_t j = 0; reqset && req && j < json_array_size(req); j++)
        if (json_object_set_new(reqset, json_string_value(json_array_get(req, j)), json_true()))
            json_decref(reqset), reqset = NULL;
    if (!reqset) {
        free(kv);
        free(isreq);
        return cerr(c, IFD_ENOMEM, "out of memory");
    }
    json_object_foreach((json_t *)props, key, val)
    {
        isreq[i] = json_object_get(reqset, key) != NULL;
        unsigned v;
        if ((rc = schema_rule(c, val, doc, &v)))
            break;
        ifd_buf_t kb = IFD_BUF_INIT;
        json_t *ks = json_string(key);
        rc = ks ? put_json_lit(c, &kb, ks) : IFD_ENOMEM;
        json_decref(ks);
        if (!rc && ifd_buf_printf(&kb, "ws \":\" ws s%u ws", v))
            rc = IFD_ENOMEM;
        kv[i] = c->next++;
        if (!rc)
            rc = add_rule(c, kv[i], &kb);
        ifd_buf_free(&kb);
        if (rc)
            break;
        i++;
    }
    size_t nreq = 0;
    for (size_t j = 0; j < np; j++)
        nreq += isreq[j];
    if (!rc && ifd_buf_puts(b, "\"{\" ws "))
        rc = IFD_ENOMEM;
    if (!rc && nreq) {
        /* schema order: optional ones before the first required one carry
         * their comma after them, later ones before them */
        bool seen_req = false;
        for (size_t j = 0; j < np && !rc; j++) {
            const char *f = isreq[j] ? (seen_req ? "\",\" ws s%u " : "s%u ")
                                     : (seen_req ? "( \",\" ws s%u )? " : "( s%u \",\" ws )? ");
            rc = ifd_buf_printf(b, f, kv[j]) ? IFD_ENOMEM : 0;
            seen_req |= isreq[j];
        }
    } else if (!rc) {
        /* tails: t_j ::= ( "," ws kv_j )? t_{j+1}; first present one picks the tail */
        unsigned *tail = calloc(np + 1, sizeof *tail);
        if (!tail)
            rc = IFD_ENOMEM;
        for (size_t j = np; j-- > 1 && !rc;) {
            ifd_buf_t tb = IFD_BUF_INIT;
            rc = ifd_buf_printf(&tb, "( \",\" ws s%u )? ", kv[j]) ? IFD_ENOMEM : 0;
            if (!rc && j + 1 < np && ifd_buf_printf(&tb, "s%u", tail[j + 1]))
                rc = IFD_ENOMEM;
            tail[j] = c->next++;
            if (!rc)
                rc = add_rule(c, tail[j], &tb);
            ifd_buf_free(&tb);
        }
        if (!rc && ifd_buf_puts(b, "( "))
            rc = IFD_ENOMEM;
        for (size_t j = 0; j < np && !rc; j++) {
            rc = ifd_buf_printf(b, "%ss%u ", j ? "| " : "", kv[j]) ? IFD_ENOMEM : 0;
            if (!rc && j + 1 < np && ifd_buf_printf(b, "s%u ", tail[j + 1]))
                rc = IFD_ENOMEM;
        }
        if (!rc && ifd_buf_puts(b, ")? "))
            rc = IFD_ENOMEM;
        free(tail);
    }
    if (!rc && ifd_buf_puts(b, "\"}\" "))
        rc = IFD_ENOMEM;
    json_decref(reqset);
    free(kv);
    free(isreq);
    return rc == IFD_ENOMEM ? cerr(c, rc, "out of memory") : rc;
}

static int array_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    const json_t *items = json_object_get(s, "items");
    const json_t *prefix = json_object_get(s, "prefixItems");
    long long mn = 0, mx = -1;
    TRY(get_count(c, s, "minItems", &mn));
    TRY(get_count(c, s, "maxItems", &mx));
    if (mx >= 0 && mx < mn)
        return cerr(c, IFD_ENOTSUP, "'maxItems' below 'minItems'");
    if (prefix) {
        if (!json_is_array(prefix) || json_array_size(prefix) == 0)
            return cerr(c, IFD_ENOTSUP, "'prefixItems' must be a non-empty array");
        size_t k = json_array_size(prefix);
        if ((long long)k < mn || (mx >= 0 && (long long)k > mx))
            return cerr(c, IFD_ENOTSUP,
                        "'prefixItems' with 'minItems'/'maxItems' other than its length");
        if (ifd_buf_puts(b, "\"[\" ws "))
            return IFD_ENOMEM;
        for (size_t i = 0; i < k; i++) {
            unsigned v;
            TRY(schema_rule(c, json_array_get(prefix, i), doc, &v));
            if (ifd_buf_printf(b, i ? "\",\" ws s%u ws " : "s%u ws ", v))
                return IFD_ENOMEM;
        }
        return ifd_buf_puts(b, "\"]\" ") ? IFD_ENOMEM : 0;
    }
    char item[32] = "jval";
    if (items && !json_is_true(items)) {
        if (json_is_false(items)) {
            if (mn > 0)
                return cerr(c, IFD_ENOTSUP, "'items': false with 'minItems' > 0");
            return ifd_buf_puts(b, "\"[\" ws \"]\" ") ? IFD_ENOMEM : 0;
        }
        unsigned v;
        TRY(schema_rule(c, items, doc, &v));
        snprintf(item, sizeof item, "s%u", v);
    }
    if (mx == 0)
        return ifd_buf_puts(b, "\"[\" ws \"]\" ") ? IFD_ENOMEM : 0;
    int rc = ifd_buf_puts(b, "\"[\" ws ");
    if (!rc && mn == 0)
        rc = ifd_buf_puts(b, "( ");
    if (!rc)
        rc = ifd_buf_printf(b, "%s ws ", item);
    long long lo = mn > 0 ? mn - 1 : 0;
    if (!rc) {
        if (mx < 0)
            rc = ifd_buf_printf(b, "( \",\" ws %s ws ){%lld,} ", item, lo);
        else if (mx - 1 > 0 || lo > 0)
            rc = ifd_buf_printf(b, "( \",\" ws %s ws ){%lld,%lld} ", item, lo, mx - 1);
    }
    if (!rc && mn == 0)
        rc = ifd_buf_puts(b, ")? ");
    if (!rc)
        rc = ifd_buf_puts(b, "\"]\" ");
    return rc ? IFD_ENOMEM : 0;
}

static int type_body(conv_t *c, const char *t, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    if (strcmp(t, "string") == 0)
        return string_body(c, s, b);
    if (strcmp(t, "object") == 0)
        return object_body(c, s, doc, b);
    if (strcmp(t, "array") == 0)
        return array_body(c, s, doc, b);
    static const struct {
        const char *t, *rule;
    } simple[] = {{"number", "jnum"}, {"integer", "jint"}, {"boolean", "jbool"}, {"null", "jnull"}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (strcmp(t, simple[i].t) == 0)
            return ifd_buf_printf(b, "%s ", simple[i].rule) ? IFD_ENOMEM : 0;
    return cerr(c, IFD_ENOTSUP, "'type': \"%.40s\" is not a JSON Schema type", t);
}

static int schema_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    if (json_is_true(s))
        return ifd_buf_puts(b, "jval ") ? IFD_ENOMEM : 0;
    if (json_is_false(s))
        return cerr(c, IFD_ENOTSUP, "a 'false' schema (nothing can match it)");
    if (!json_is_object(s))
        return cerr(c, IFD_EFORMAT, "a schema must be an object or a boolean");
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)s, key, val)
    {
        if (!in_list(key, KNOWN, sizeof KNOWN / sizeof KNOWN[0]))
            return cerr(c, IFD_ENOTSUP, "'%.60s' is not supported", key);
    }
    const json_t *nullable = json_object_get(s, "nullable");
    bool or_null = nullable && json_is_true(nullable);
    if (or_null && ifd_buf_puts(b, "( jnull | "))
        return IFD_ENOMEM;
    int rc = 0;
    const json_t *ref = json_object_get(s, "$ref");
    const json_t *cst = json_object_get(s, "const");
    const json_t *en = json_object_get(s, "enum");
    const json_t *any = json_object_get(s, "anyOf");
    if (!any)
        any = json_object_get(s, "oneOf");
    const json_t *all = json_object_get(s, "allOf");
    const json_t *type = json_object_get(s, "type");
    /* combinators and references stand alone: besides them only
     * annotations (and $defs) may appear */
    const char *comb = ref ? "$ref" : any ? "anyOf/oneOf" : all ? "allOf" : NULL;
    if (comb) {
        json_object_foreach((json_t *)s, key, val)
        {
            if (strcmp(key, "nullable") != 0 &&
                in_list(key, CONSTRAINING, sizeof CONSTRAINING / sizeof CONSTRAINING[0]))
                return cerr(c, IFD_ENOTSUP, "'%s' combined with '%.60s'", comb, key);
        }
        if ((ref != NULL) + (any != NULL) + (all != NULL) > 1)
            return cerr(c, IFD_ENOTSUP, "'$ref', 'anyOf' and 'allOf' combined");
    }
    if (ref) {
        const char *r = json_string_value(ref);
        if (!r)
            return cerr(c, IFD_ENOTSUP, "'$ref' must be a string");
        unsigned id = 0;
        TRY(ref_rule(c, r, doc, &id));
        rc = ifd_buf_printf(b, "s%u ", id) ? IFD_ENOMEM : 0;
    } else if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0)
            return cerr(c, IFD_ENOTSUP, "'anyOf' must be a non-empty array");
        if (ifd_buf_puts(b, "( "))
            return IFD_ENOMEM;
        for (size_t i = 0; i < json_array_size(any); i++) {
            unsigned id;
            TRY(schema_rule(c, json_array_get(any, i), doc, &id));
            if (ifd_buf_printf(b, "%ss%u ", i ? "| " : "", id))
                return IFD_ENOMEM;
        }
        rc = ifd_buf_puts(b, ") ") ? IFD_ENOMEM : 0;
    } else if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            return cerr(c, IFD_ENOTSUP, "'allOf' with more than one schema");
        unsigned id;
        TRY(schema_rule(c, json_array_get(all, 0), doc, &id));
        rc = ifd_buf_printf(b, "s%u ", id) ? IFD_ENOMEM : 0;
    } else if (cst) {
        rc = put_json_lit(c, b, cst);
    } else if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0)
            return cerr(c, IFD_ENOTSUP, "'enum' must be a non-empty array");
        rc = enum_body(c, en, b);
    } else if (type) {
        if (json_is_string(type)) {
            rc = type_body(c, json_string_value(type), s, doc, b);
        } else if (json_is_array(type) && json_array_size(type) > 0) {
            if (ifd_buf_puts(b, "( "))
                return IFD_ENOMEM;
            for (size_t i = 0; i < json_array_size(type) && !rc; i++) {
                const char *t = json_string_value(json_array_get(type, i));
                if (!t)
                    return cerr(c, IFD_ENOTSUP, "'type' must list strings");
                if (i && ifd_buf_puts(b, "| "))
                    return IFD_ENOMEM;
                rc = type_body(c, t, s, doc, b);
            }
            if (!rc && ifd_buf_puts(b, ") "))
                rc = IFD_ENOMEM;
        } else {
            return cerr(c, IFD_ENOTSUP, "'type' must be a string or a list of strings");
        }
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
               json_object_get(s, "required")) {
        rc = object_body(c, s, doc, b);
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) {
        rc = array_body(c, s, doc, b);
    } else {
        rc = ifd_buf_puts(b, "jval ") ? IFD_ENOMEM : 0;
    }
    if (!rc && or_null && ifd_buf_puts(b, ") "))
        rc = IFD_ENOMEM;
    return rc == IFD_ENOMEM ? cerr(c, rc, "out of memory") : rc;
}

static int schema_rule(conv_t *c, const json_t *s, const json_t *doc, unsigned *id)
{
    TRY(conv_step(c));
    if (++c->depth > MAX_DEPTH)
        return cerr(c, IFD_ETOOBIG, "schema nested deeper than %d levels", MAX_DEPTH);
    ifd_buf_t body = IFD_BUF_INIT;
    int rc = schema_body(c, s, doc, &body);
    if (!rc) {
        *id = c->next++;
        rc = add_rule(c, *id, &body);
    }
    ifd_buf_free(&body);
    c->depth--;
    return rc;
}

static void conv_close(conv_t *c)
{
    ifd_buf_free(&c->rules);
    for (size_t i = 0; i < c->n_refs; i++)
        free(c->refs[i].ref);
    free(c->refs);
}

static int finish(conv_t *c, const char *root_body, ifd_buf_t *out)
{
    size_t at = out->len;
    int rc = 0;
    if (ifd_buf_printf(out, "root ::= %s\n", root_body) || ifd_buf_puts(out, BASE_RULES) ||
        ifd_buf_append(out, c->rules.data ? c->rules.data : "", c->rules.len))
        rc = cerr(c, IFD_ENOMEM, "out of memory");
    if (rc) {
        out->len = at;
        if (out->data)
            out->data[at] = '\0';
    }
    return rc;
}

static void conv_init(conv_t *c, const ifd_grammar_budget_t *budget, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->budget = budget ? *budget : ifd_grammar_default_budget();
    if (c->budget.max_time_ms) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        c->deadline = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
                      (uint64_t)c->budget.max_time_ms * 1000000u;
    }
    c->rules = (ifd_buf_t)IFD_BUF_INIT;
    c->err = err;
    c->errlen = errlen;
    if (err && errlen)
        err[0] = '\0';
}

int ifd_gconv_json_schema(const json_t *schema, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                          char *err, size_t errlen)
{
    conv_t c;
    conv_init(&c, budget, err, errlen);
    unsigned id;
    int rc = schema_rule(&c, schema, schema, &id);
    if (!rc) {
        char root[32];
        snprintf(root, sizeof root, "s%u", id);
        rc = finish(&c, root, out);
    }
    conv_close(&c);
    return rc;
}

int ifd_gconv_json_object(ifd_buf_t *out)
{
    conv_t c;
    conv_init(&c, NULL, NULL, 0);
    int rc = finish(&c, "jobj", out);
    conv_close(&c);
    return rc;
}

int ifd_gconv_regex(const char *re, size_t len, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                    char *err, size_t errlen)
{
    conv_t c;
    conv_init(&c, budget, err, errlen);
    ifd_buf_t body = IFD_BUF_INIT;
    int rc = rx_convert(&c, re, len, false, false, &body);
    if (rc == IFD_ENOMEM)
        rc = cerr(&c, rc, "out of memory");
    if (!rc)
        rc = finish(&c, body.data, out);
    ifd_buf_free(&body);
    conv_close(&c);
    return rc;
}

int ifd_gconv_choice(const char *const *choices, size_t n, ifd_buf_t *out,
                     const ifd_grammar_budget_t *budget, char *err, size_t errlen)
{
    conv_t c;
    conv_init(&c, budget, err, errlen);
    ifd_buf_t body = IFD_BUF_INIT;
    int rc = n ? 0 : cerr(&c, IFD_EFORMAT, "no choices");
    lit_t *v = n ? calloc(n, sizeof *v) : NULL;
    if (!rc && !v)
        rc = cerr(&c, IFD_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        size_t len = strlen(choices[i]);
        if (!valid_utf8(choices[i], len))
            rc = cerr(&c, IFD_EFORMAT, "choice %zu is not valid UTF-8", i);
        v[i] = (lit_t){choices[i], len};
    }
    if (!rc)
        rc = put_literals(&c, v, n, &body);
    free(v);
    if (!rc)
        rc = finish(&c, body.data, out);
    ifd_buf_free(&body);
    conv_close(&c);
    return rc;
}

int ifd_gconv_tool_calls(const ifd_gconv_tool_t *tools, size_t n, unsigned min_calls,
                         unsigned max_calls, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                         char *err, size_t errlen)
{
    conv_t c;
    conv_init(&c, budget, err, errlen);
    ifd_buf_t body = IFD_BUF_INIT;
    int rc = n ? 0 : cerr(&c, IFD_EFORMAT, "no tools");
    unsigned call = 0;
    ifd_buf_t cb = IFD_BUF_INIT;
    if (!rc && ifd_buf_puts(&cb, "( "))
        rc = IFD_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned pid = 0;
        bool any = !tools[i].parameters;
        if (!any)
            rc = schema_rule(&c, tools[i].parameters, tools[i].parameters, &pid);
        if (rc)
            break;
        json_t *name = json_string(tools[i].name);
        if (!name) {
            rc = cerr(&c, IFD_EFORMAT, "tool name is not valid UTF-8");
            break;
        }
        if (i && ifd_buf_puts(&cb, "| "))
            rc = IFD_ENOMEM;
        if (!rc && ifd_buf_puts(&cb, "\"{\" ws \"\\u0022name\\u0022\" ws \":\" ws "))
            rc = IFD_ENOMEM;
        if (!rc)
            rc = put_json_lit(&c, &cb, name);
        json_decref(name);
        if (!rc && (any ? ifd_buf_puts(&cb, "ws \",\" ws \"\\u0022parameters\\u0022\" ws \":\" "
                                            "ws jobj ws \"}\" ")
                        : ifd_buf_printf(&cb,
                                         "ws \",\" ws \"\\u0022parameters\\u0022\" ws \":\" ws "
                                         "s%u ws \"}\" ",
                                         pid)))
            rc = IFD_ENOMEM;
    }
    if (!rc && ifd_buf_puts(&cb, ")"))
        rc = IFD_ENOMEM;
    if (!rc) {
        call = c.next++;
        rc = add_rule(&c, call, &cb);
    }
    if (!rc) {
        unsigned lo = min_calls ? min_calls - 1 : 0;
        int e;
        if (max_calls == 0)
            e = ifd_buf_printf(&body, "\"[\" ws s%u ws ( \",\" ws s%u ws ){%u,} \"]\"", call, call,
                               lo);
        else if (max_calls == 1)
            e = ifd_buf_printf(&body, "\"[\" ws s%u ws \"]\"", call);
        else
            e = ifd_buf_printf(&body, "\"[\" ws s%u ws ( \",\" ws s%u ws ){%u,%u} \"]\"", call,
                               call, lo, max_calls - 1);
        rc = e ? IFD_ENOMEM : 0;
    }
    if (rc == IFD_ENOMEM)
        rc = cerr(&c, rc, "out of memory");
    if (!rc)
        rc = finish(&c, body.data, out);
    ifd_buf_free(&cb);
    ifd_buf_free(&body);
    conv_close(&c);
    return rc;
}
