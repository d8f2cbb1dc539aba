/*
 * grammar_conv.c — see grammar_conv.h. Every schema node becomes one rule
 * "sN" (references are memoized per target so recursive schemas become
 * recursive rules); the shared JSON rules (ws, jstr, jnum, …) come first.
 * Literals are written with \u escapes for everything but ASCII letters and
 * digits, so no input can break out of a grammar literal.
 */
#include "grammar_conv.h"
#include "grammar_conv_impl.h"

#include "error.h"
#include "grammar.h"
#include "grammar_impl.h"
#include "schema_check.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char BASE_RULES[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,12}\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "jstr ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jint ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "jnum ::= jint ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "jbool ::= \"true\" | \"false\"\n"
    "jnull ::= \"null\"\n"
    "jval ::= jobj | jarr | jstr | jnum | jbool | jnull\n"
    "jobj ::= \"{\" ws ( jstr ws \":\" ws jval ws ( \",\" ws jstr ws \":\" ws jval ws )* )? \"}\"\n"
    "jarr ::= \"[\" ws ( jval ws ( \",\" ws jval ws )* )? \"]\"\n"
    /* days per month; February to the 28th (the 29th only in leap years: not written) */
    "jdatec ::= [0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] "
    "| \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
    "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )\n"
    "jtimec ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
    "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "jhex ::= [0-9a-fA-F]\n"
    "jdate ::= \"\\\"\" jdatec \"\\\"\"\n"
    "jtime ::= \"\\\"\" jtimec \"\\\"\"\n"
    "jdatetime ::= \"\\\"\" jdatec \"T\" jtimec \"\\\"\"\n"
    "juuid ::= \"\\\"\" jhex{8} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{12} "
    "\"\\\"\"\n"
    /* formats (grammar_conv_schema.c: string_body); each a subset of what RFC 3339 / 3986 /
     * 5321 / 1123 / 4291 / ISO 8601 allow, so every text is valid for a strict checker */
    "jdurn ::= [0-9]{1,9}\n"
    /* RFC 3339 Appendix A: units chain without gaps (P1Y2D and PT1H2S are not durations) */
    "jdurd ::= jdurn \"Y\" ( jdurn \"M\" ( jdurn \"D\" )? )? | jdurn \"M\" ( jdurn \"D\" )? | "
    "jdurn \"D\"\n"
    "jdurt ::= jdurn \"H\" ( jdurn \"M\" ( jdurn \"S\" )? )? | jdurn \"M\" ( jdurn \"S\" )? | "
    "jdurn \"S\"\n"
    "jduration ::= \"\\\"\" \"P\" ( jdurd ( \"T\" jdurt )? | \"T\" jdurt | jdurn \"W\" ) "
    "\"\\\"\"\n"
    "joct ::= [0-9] | [1-9] [0-9] | \"1\" [0-9]{2} | \"2\" [0-4] [0-9] | \"25\" [0-5]\n"
    "jipv4c ::= joct \".\" joct \".\" joct \".\" joct\n"
    "jipv4 ::= \"\\\"\" jipv4c \"\\\"\"\n"
    "jh16 ::= jhex{1,4}\n"
    "jls32 ::= jh16 \":\" jh16 | jipv4c\n"
    "jipv6c ::= ( jh16 \":\" ){6} jls32 | \"::\" ( jh16 \":\" ){5} jls32 | jh16? \"::\" "
    "( jh16 \":\" ){4} jls32 | ( ( jh16 \":\" )? jh16 )? \"::\" ( jh16 \":\" ){3} jls32 | "
    "( ( jh16 \":\" ){0,2} jh16 )? \"::\" ( jh16 \":\" ){2} jls32 | ( ( jh16 \":\" ){0,3} "
    "jh16 )? \"::\" jh16 \":\" jls32 | ( ( jh16 \":\" ){0,4} jh16 )? \"::\" jls32 | "
    "( ( jh16 \":\" ){0,5} jh16 )? \"::\" jh16 | ( ( jh16 \":\" ){0,6} jh16 )? \"::\"\n"
    "jipv6 ::= \"\\\"\" jipv6c \"\\\"\"\n"
    /* labels: never "--" in the third and fourth places (RFC 5891 reserves it for A-labels,
     * which are not written) */
    "jan ::= [a-zA-Z0-9]\n"
    "jld ::= [a-zA-Z0-9\\-]\n"
    "jlabel ::= jan ( jld? jan )? | jan jld jld jan | jan jld ( jan jld | \"-\" jan ) jld{0,58} "
    "jan\n"
    "jtld ::= [a-zA-Z] ( jld? jan )? | [a-zA-Z] jld jld jan | [a-zA-Z] jld ( jan jld | \"-\" jan ) "
    "jld{0,19} jan\n"
    "jhostc ::= ( jlabel \".\" ){0,3} jtld\n"
    "jhostname ::= \"\\\"\" jhostc \"\\\"\"\n"
    "jatom ::= [a-zA-Z0-9_%+\\-]{1,20}\n"
    "jemail ::= \"\\\"\" jatom ( \".\" jatom ){0,2} \"@\" ( jlabel \".\" ){1,3} jtld \"\\\"\"\n"
    "jpchar ::= [a-zA-Z0-9._~!$&'()*+,;=:@\\-] | \"%\" jhex jhex\n"
    "jpcharnc ::= [a-zA-Z0-9._~!$&'()*+,;=@\\-] | \"%\" jhex jhex\n"
    "juq ::= ( jpchar | [/?] )*\n"
    "jurit ::= ( \"?\" juq )? ( \"#\" juq )?\n"
    "juric ::= [a-zA-Z] [a-zA-Z0-9+.\\-]{0,15} \"://\" jhostc ( \":\" [0-9]{1,5} )? "
    "( \"/\" jpchar* )* jurit\n"
    "juri ::= \"\\\"\" juric \"\\\"\"\n"
    "juriref ::= \"\\\"\" ( juric | ( \"/\"? jpcharnc+ ( \"/\" jpchar* )* )? jurit ) "
    "\"\\\"\"\n"
    "jptrtok ::= ( \"/\" ( [a-zA-Z0-9._\\-] | \"~\" [01] ){0,24} ){0,8}\n"
    "jjsonptr ::= \"\\\"\" jptrtok \"\\\"\"\n"
    "jreljsonptr ::= \"\\\"\" ( \"0\" | [1-9] [0-9]{0,5} ) ( \"#\" | jptrtok ) \"\\\"\"\n"
    "jregex ::= \"\\\"\" [a-zA-Z0-9 _\\-]{0,64} \"\\\"\"\n"
    /* idn-email (RFC 6531): local parts of atoms that may hold any non-ASCII letter
     * (UTF8-non-ascii needs no table; at most 5 characters an atom there, so that a
     * local part stays within 64 bytes), an ASCII domain (U-labels need IDNA2008) */
    "jidnc ::= [a-zA-Z0-9_%+\\-\\u00A0-\\uD7FF\\uF900-\\uFDCF\\uFDF0-\\uFFEF]\n"
    "jidnemail ::= \"\\\"\" ( jatom ( \".\" jatom ){0,2} | jidnc{1,5} ( \".\" jidnc{1,5} ){0,2} ) "
    "\"@\" ( jlabel \".\" ){1,3} jtld \"\\\"\"\n"
    /* uri-template (RFC 6570, level 4): literals (ucschar among them) and expressions */
    "jtlit ::= [!#$&'()*+,\\-./0-9:;=?@A-Z\\[\\]_a-z~\\u00A0-\\uD7FF\\uF900-\\uFDCF\\uFDF0-\\uFFEF] | "
    "\"%\" jhex jhex\n"
    "jtvc ::= [a-zA-Z0-9_] | \"%\" jhex jhex\n"
    "jtvar ::= jtvc ( \".\"? jtvc ){0,15} ( \":\" [1-9] [0-9]{0,3} | \"*\" )?\n"
    "jtexpr ::= \"{\" [+#./;?&=,!@|]? jtvar ( \",\" jtvar ){0,3} \"}\"\n"
    "juritpl ::= \"\\\"\" ( jtlit | jtexpr )* \"\\\"\"\n";

int ifd__gconv_err(conv_t *c, int code, const char *fmt, ...)
{
    if (c->err && c->errlen && !c->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    c->unsat = false;
    return code;
}

int ifd__gconv_unsat(conv_t *c, const char *fmt, ...)
{
    if (c->err && c->errlen && !c->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    c->unsat = true;
    return IFD_ENOTSUP;
}

ifd__gconv_mark_t ifd__gconv_mark(const conv_t *c)
{
    return (ifd__gconv_mark_t){c->rules.len, c->n_refs, c->n_bodies, c->n_alias};
}

void ifd__gconv_take_back(conv_t *c, ifd__gconv_mark_t mark)
{
    c->unsat = false;
    for (size_t i = mark.n_bodies; i < c->n_bodies; i++) {
        const ifd__gconv_body_t *e = &c->bodies[i];
        ifd_hash_remove(&c->body_index, ifd_hash_bytes(c->rules.data + e->off, e->len),
                        (int32_t)i);
    }
    c->n_bodies = mark.n_bodies;
    for (size_t i = mark.n_alias; i < c->n_alias; i++)
        c->alias[c->alias_log[i]] = UINT32_MAX;
    c->n_alias = mark.n_alias;
    c->rules.len = mark.rules_len;
    if (c->rules.data)
        c->rules.data[mark.rules_len] = '\0';
    for (size_t i = mark.n_refs; i < c->n_refs; i++)
        free(c->refs[i].ref);
    c->n_refs = mark.n_refs;
    if (c->err && c->errlen)
        c->err[0] = '\0';
}

bool ifd__gconv_drop_unsat(conv_t *c, ifd__gconv_mark_t mark, int rc)
{
    if (rc != IFD_ENOTSUP || !c->unsat)
        return false;
    ifd__gconv_take_back(c, mark);
    return true;
}

bool ifd__gconv_loosen(conv_t *c, ifd__gconv_mark_t mark, int rc)
{
    if (!c->loose || rc != IFD_ENOTSUP || c->unsat)
        return false;
    ifd__gconv_take_back(c, mark);
    c->approx = true;
    return true;
}

/* One step of conversion (a schema node, a regex atom): past the budget's
 * work, time or cancel flag the conversion stops. Conversion is linear in
 * its input; this keeps a huge input within the request's time budget. */
int ifd__gconv_step(conv_t *c)
{
    ++c->steps;
    if (c->budget.max_work && c->steps > c->budget.max_work)
        return ifd__gconv_err(c, IFD_ETOOBIG,
                              "the schema or regex is too large to convert (over %llu steps)",
                              (unsigned long long)c->budget.max_work);
    if (c->steps & 1023)
        return 0;
    if (c->budget.cancel && atomic_load_explicit(c->budget.cancel, memory_order_relaxed))
        return ifd__gconv_err(c, IFD_ECANCELED, "canceled");
    if (c->deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec > c->deadline)
            return ifd__gconv_err(c, IFD_ETOOBIG,
                                  "converting the schema or regex took longer than %u ms",
                                  c->budget.max_time_ms);
    }
    return 0;
}

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

bool ifd__gconv_valid_utf8(const char *s, size_t n)
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
char *ifd__gconv_dump_value(const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s || !strpbrk(s, ".eE"))
        return s; /* (no real number in it: nothing to shorten) */
    for (int p = 1; p <= 17; p++) {
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(p));
        json_t *back = t ? json_loads(t, JSON_DECODE_ANY, NULL) : NULL;
        bool same = back && json_equal(back, (json_t *)v);
        json_decref(back);
        if (same) {
            free(s);
            return t;
        }
        free(t);
    }
    return s;
}

int ifd__gconv_json_lit(conv_t *c, ifd_buf_t *b, const json_t *v)
{
    char *s = ifd__gconv_dump_value(v);
    if (!s)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    int rc = put_lit(b, s, strlen(s));
    free(s);
    return rc == IFD_EFORMAT ? ifd__gconv_err(c, rc, "invalid UTF-8 in a schema value") : rc;
}

/* The rule id's canonical rule: itself, or the rule it aliases. */
static unsigned canon(const conv_t *c, unsigned id)
{
    return id < c->cap_alias && c->alias[id] != UINT32_MAX ? c->alias[id] : id;
}

static bool ident_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-';
}

/* text[0..n) into out with every reference sN mapped to its canonical rule
 * (literals and classes copied as they are). */
static int map_refs(const conv_t *c, const char *t, size_t n, ifd_buf_t *out)
{
    size_t i = 0, from = 0;
    while (i < n) {
        char ch = t[i];
        if (ch == '"' || ch == '[') { /* a literal or a class: to its closing quote */
            char end = ch == '"' ? '"' : ']';
            for (i++; i < n && t[i] != end; i++)
                if (t[i] == '\\')
                    i++;
            i++;
            continue;
        }
        if (!ident_char(ch)) {
            i++;
            continue;
        }
        size_t s = i;
        while (i < n && ident_char(t[i]))
            i++;
        if (t[s] != 's' || i - s < 2 || i - s > 10)
            continue;
        unsigned long v = 0;
        size_t k = s + 1;
        for (; k < i && t[k] >= '0' && t[k] <= '9'; k++)
            v = v * 10 + (unsigned long)(t[k] - '0');
        if (k != i || canon(c, (unsigned)v) == v)
            continue;
        if (ifd_buf_append(out, t + from, s - from) ||
            ifd_buf_printf(out, "s%u", canon(c, (unsigned)v)))
            return IFD_ENOMEM;
        from = i;
    }
    return ifd_buf_append(out, t + from, n - from) ? IFD_ENOMEM : 0;
}

/* Records id as an alias of to. */
static int set_alias(conv_t *c, unsigned id, unsigned to)
{
    if (id >= c->cap_alias) {
        size_t cap = c->cap_alias ? c->cap_alias : 256;
        while (cap <= id)
            cap *= 2;
        unsigned *a = realloc(c->alias, cap * sizeof *a);
        if (!a)
            return IFD_ENOMEM;
        for (size_t i = c->cap_alias; i < cap; i++)
            a[i] = UINT32_MAX;
        c->alias = a;
        c->cap_alias = cap;
    }
    unsigned *log = ifd_grow(c->alias_log, c->n_alias, &c->cap_alias_log, sizeof *log, 64);
    if (!log)
        return IFD_ENOMEM;
    c->alias_log = log;
    c->alias[id] = to;
    c->alias_log[c->n_alias++] = id;
    return 0;
}

int ifd__gconv_rule(conv_t *c, unsigned id, const ifd_buf_t *body)
{
    ifd_buf_t m = IFD_BUF_INIT;
    int rc = body->len ? map_refs(c, body->data, body->len, &m) : ifd_buf_puts(&m, "\"\"");
    if (rc) {
        ifd_buf_free(&m);
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    }
    uint64_t h = ifd_hash_bytes(m.data, m.len);
    uint32_t it = ifd_hash_first(&c->body_index, h);
    for (int32_t i; (i = ifd_hash_next(&c->body_index, h, &it)) >= 0;) {
        const ifd__gconv_body_t *e = &c->bodies[i];
        if (e->len == m.len && memcmp(c->rules.data + e->off, m.data, m.len) == 0) {
            ifd_buf_free(&m);
            rc = e->id == id ? 0 : set_alias(c, id, e->id);
            return rc ? ifd__gconv_err(c, IFD_ENOMEM, "out of memory") : 0;
        }
    }
    rc = ifd_buf_printf(&c->rules, "s%u ::= ", id) ? IFD_ENOMEM : 0;
    size_t off = c->rules.len;
    if (!rc && (ifd_buf_append(&c->rules, m.data, m.len) || ifd_buf_puts(&c->rules, "\n")))
        rc = IFD_ENOMEM;
    ifd__gconv_body_t *nb =
        rc ? NULL : ifd_grow(c->bodies, c->n_bodies, &c->cap_bodies, sizeof *nb, 64);
    if (!rc && !nb)
        rc = IFD_ENOMEM;
    if (nb)
        c->bodies = nb;
    if (!rc) {
        c->bodies[c->n_bodies] = (ifd__gconv_body_t){off, m.len, id};
        if (ifd_hash_insert(&c->body_index, h, (int32_t)c->n_bodies))
            rc = IFD_ENOMEM;
        else
            c->n_bodies++;
    }
    ifd_buf_free(&m);
    if (rc)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    if (c->rules.len > IFD_GRAMMAR_MAX_TEXT)
        return ifd__gconv_err(c, IFD_ETOOBIG, "the schema's grammar is over %u bytes",
                              IFD_GRAMMAR_MAX_TEXT);
    return 0;
}

/* ---- sets of literals (choice lists, enums) ------------------------------------------- */

/* The literals in sorted order share prefixes: they go out as a trie of
 * rules (each node: its common prefix, then one alternative per next code
 * point), so the grammar's first step has one stack per distinct first
 * character, not one per literal — a choice list of 10,000 entries is
 * cheap instead of "too ambiguous". */
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
        return ifd__gconv_err(c, IFD_ETOOBIG, "the literals nest over 10000 levels deep");
    size_t k = hi - lo == 1 ? v[lo].n : lit_lcp(v, lo, hi, off);
    if (k > off && put_lit(b, v[lo].s + off, k - off))
        return ifd__gconv_err(c, IFD_EFORMAT, "a literal is not valid UTF-8");
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
                rc = ifd__gconv_rule(c, id, &sub);
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
int ifd__gconv_literals(conv_t *c, lit_t *v, size_t n, ifd_buf_t *b)
{
    qsort(v, n, sizeof *v, lit_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!m || lit_cmp(&v[m - 1], &v[i]))
            v[m++] = v[i];
    int rc = lit_node(c, v, 0, m, 0, 0, b);
    return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
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
        return ifd__gconv_err(x->c, code, "out of memory");
    return ifd__gconv_err(x->c, code, "regex: %s at offset %ld", what, (long)(x->s - x->start));
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
    TRY(ifd__gconv_step(x->c));
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
/* The top-level alternatives of re[0..len): their starts in at[] (at most
 * max), *n of them; outside groups, classes and escapes. */
static void rx_top_alts(const char *re, size_t len, const char **at, size_t max, size_t *n)
{
    int depth = 0;
    bool cls = false;
    *n = 0;
    at[(*n)++] = re;
    for (size_t i = 0; i < len; i++) {
        char ch = re[i];
        if (ch == '\\') {
            i++;
        } else if (cls) {
            cls = ch != ']';
        } else if (ch == '[') {
            cls = true;
            if (i + 1 < len && re[i + 1] == '^')
                i++;
            if (i + 1 < len && re[i + 1] == ']')
                i++; /* a leading ] is a member */
        } else if (ch == '(') {
            depth++;
        } else if (ch == ')') {
            depth--;
        } else if (ch == '|' && depth == 0 && *n < max) {
            at[(*n)++] = re + i + 1;
        }
    }
}

/* Whether the alternative a[0..n) starts with ^ or ends with an unescaped $. */
static bool rx_anchored(const char *a, size_t n)
{
    size_t bs = 0;
    for (size_t i = n - 1; n >= 2 && i > 0 && a[i - 1] == '\\'; i--)
        bs++;
    return n && (a[0] == '^' || (a[n - 1] == '$' && bs % 2 == 0));
}

int ifd__gconv_regex(conv_t *c, const char *re, size_t len, bool json, bool search, ifd_buf_t *b)
{
    /* a search of A|B is a search of A or one of B: alternatives anchored on
     * their own (^a$|^b$) are converted one by one */
    const char *alt[64];
    size_t n_alt;
    rx_top_alts(re, len, alt, 64, &n_alt);
    bool split = false;
    for (size_t i = 0; search && n_alt > 1 && i < n_alt; i++) {
        size_t n = (i + 1 < n_alt ? (size_t)(alt[i + 1] - alt[i]) - 1 : (size_t)(re + len - alt[i]));
        split |= rx_anchored(alt[i], n);
    }
    if (split) {
        if (ifd_buf_puts(b, "( "))
            return IFD_ENOMEM;
        for (size_t i = 0; i < n_alt; i++) {
            size_t n = i + 1 < n_alt ? (size_t)(alt[i + 1] - alt[i]) - 1 : (size_t)(re + len - alt[i]);
            if (i && ifd_buf_puts(b, "| "))
                return IFD_ENOMEM;
            TRY(ifd__gconv_regex(c, alt[i], n, json, true, b));
        }
        return ifd_buf_puts(b, ") ") ? IFD_ENOMEM : 0;
    }
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

void ifd__gconv_close(conv_t *c)
{
    ifd_buf_free(&c->rules);
    ifd_hash_close(&c->body_index);
    free(c->bodies);
    free(c->alias);
    free(c->alias_log);
    for (size_t i = 0; i < c->n_refs; i++)
        free(c->refs[i].ref);
    free(c->refs);
}

int ifd__gconv_finish(conv_t *c, const char *root_body, ifd_buf_t *out)
{
    size_t at = out->len;
    int rc = 0;
    /* the references written before their rule became an alias, resolved */
    if (ifd_buf_puts(out, "root ::= ") || map_refs(c, root_body, strlen(root_body), out) ||
        ifd_buf_puts(out, "\n") || ifd_buf_puts(out, BASE_RULES) ||
        (c->n_alias ? map_refs(c, c->rules.data, c->rules.len, out)
                    : ifd_buf_append(out, c->rules.data ? c->rules.data : "", c->rules.len)))
        rc = ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    if (rc) {
        out->len = at;
        if (out->data)
            out->data[at] = '\0';
    }
    return rc;
}

void ifd__gconv_init(conv_t *c, const ifd_grammar_budget_t *budget, char *err, size_t errlen)
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

int ifd_gconv_json_object(ifd_buf_t *out)
{
    conv_t c;
    ifd__gconv_init(&c, NULL, NULL, 0);
    int rc = ifd__gconv_finish(&c, "jobj", out);
    ifd__gconv_close(&c);
    return rc;
}

int ifd_gconv_regex(const char *re, size_t len, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                    char *err, size_t errlen)
{
    conv_t c;
    ifd__gconv_init(&c, budget, err, errlen);
    ifd_buf_t body = IFD_BUF_INIT;
    int rc = ifd__gconv_regex(&c, re, len, false, false, &body);
    if (rc == IFD_ENOMEM)
        rc = ifd__gconv_err(&c, rc, "out of memory");
    if (!rc)
        rc = ifd__gconv_finish(&c, body.data, out);
    ifd_buf_free(&body);
    ifd__gconv_close(&c);
    return rc;
}

int ifd_gconv_choice(const char *const *choices, size_t n, ifd_buf_t *out,
                     const ifd_grammar_budget_t *budget, char *err, size_t errlen)
{
    conv_t c;
    ifd__gconv_init(&c, budget, err, errlen);
    ifd_buf_t body = IFD_BUF_INIT;
    int rc = n ? 0 : ifd__gconv_err(&c, IFD_EFORMAT, "no choices");
    lit_t *v = n ? calloc(n, sizeof *v) : NULL;
    if (!rc && !v)
        rc = ifd__gconv_err(&c, IFD_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        size_t len = strlen(choices[i]);
        if (!ifd__gconv_valid_utf8(choices[i], len))
            rc = ifd__gconv_err(&c, IFD_EFORMAT, "choice %zu is not valid UTF-8", i);
        v[i] = (lit_t){choices[i], len};
    }
    if (!rc)
        rc = ifd__gconv_literals(&c, v, n, &body);
    free(v);
    if (!rc)
        rc = ifd__gconv_finish(&c, body.data, out);
    ifd_buf_free(&body);
    ifd__gconv_close(&c);
    return rc;
}

/* One pass of ifd_gconv_tool_calls; dep_loose as conv_t's (the second pass,
 * in the first one's budget: *deadline and *steps carried over). */
static int tool_calls_pass(const ifd_gconv_tool_t *tools, size_t n, unsigned min_calls,
                           unsigned max_calls, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                           bool *approx, char *err, size_t errlen, bool dep_loose,
                           uint64_t *deadline, uint64_t *steps)
{
    conv_t c;
    ifd__gconv_init(&c, budget, err, errlen);
    c.loose = approx != NULL;
    if (dep_loose) {
        c.dep_loose = true;
        c.deadline = *deadline;
        c.steps = *steps;
    }
    ifd_buf_t body = IFD_BUF_INIT;
    int rc = n ? 0 : ifd__gconv_err(&c, IFD_EFORMAT, "no tools");
    unsigned call = 0;
    ifd_buf_t cb = IFD_BUF_INIT;
    if (!rc && ifd_buf_puts(&cb, "( "))
        rc = IFD_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned pid = 0;
        bool any = !tools[i].parameters;
        if (!any)
            rc = ifd__gconv_nul_check(&c, tools[i].parameters, 0);
        if (!any && !rc)
            rc = ifd__gconv_schema_rule(&c, tools[i].parameters, tools[i].parameters, &pid);
        if (rc)
            break;
        json_t *name = json_string(tools[i].name);
        if (!name) {
            rc = ifd__gconv_err(&c, IFD_EFORMAT, "tool name is not valid UTF-8");
            break;
        }
        if (i && ifd_buf_puts(&cb, "| "))
            rc = IFD_ENOMEM;
        if (!rc && ifd_buf_puts(&cb, "\"{\" ws \"\\u0022name\\u0022\" ws \":\" ws "))
            rc = IFD_ENOMEM;
        if (!rc)
            rc = ifd__gconv_json_lit(&c, &cb, name);
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
        rc = ifd__gconv_rule(&c, call, &cb);
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
        rc = ifd__gconv_err(&c, rc, "out of memory");
    if (!rc)
        rc = ifd__gconv_finish(&c, body.data, out);
    /* as convert() in grammar_conv_schema.c: an over-approximation stands
     * only where the check can evaluate every tool's whole schema */
    for (size_t i = 0; !rc && c.approx && i < n; i++)
        if (tools[i].parameters && ifd_schema_check_supported(tools[i].parameters, err, errlen))
            rc = IFD_ENOTSUP;
    if (approx)
        *approx = !rc && c.approx;
    *deadline = c.deadline;
    *steps = c.steps;
    ifd_buf_free(&cb);
    ifd_buf_free(&body);
    ifd__gconv_close(&c);
    return rc;
}

int ifd_gconv_tool_calls(const ifd_gconv_tool_t *tools, size_t n, unsigned min_calls,
                         unsigned max_calls, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                         bool *approx, char *err, size_t errlen)
{
    uint64_t deadline = 0, steps = 0;
    size_t out_len = out->len;
    int rc = tool_calls_pass(tools, n, min_calls, max_calls, out, budget, approx, err, errlen,
                             false, &deadline, &steps);
    bool deps = false; /* as convert() in grammar_conv_schema.c */
    for (size_t i = 0; rc == IFD_ENOTSUP && approx && i < n && !deps; i++)
        deps = tools[i].parameters && ifd__gconv_has_dep_schema(tools[i].parameters, 0);
    if (deps) {
        out->len = out_len;
        if (out->data)
            out->data[out_len] = '\0';
        if (err && errlen)
            err[0] = '\0';
        rc = tool_calls_pass(tools, n, min_calls, max_calls, out, budget, approx, err, errlen,
                             true, &deadline, &steps);
    }
    return rc;
}
