/*
 * grammar_conv_schema.c — JSON Schema to grammar rules (see grammar_conv.h
 * for what is accepted; docs/structured-outputs.md lists every keyword).
 * Each schema node becomes one rule "sN"; references are memoized per target
 * so that recursive schemas become recursive rules. A node is first merged
 * (grammar_conv_merge.c: allOf and the siblings of $ref / anyOf / oneOf),
 * then its keywords are read by type. Keywords the converter does not know
 * are annotations (JSON Schema: unknown keywords are ignored); the ones
 * that constrain and cannot be enforced are IFD_ENOTSUP naming them
 * (REFUSED below), so no constraint is ever dropped silently.
 */
#include "error.h"
#include "grammar_conv.h"
#include "grammar_conv_impl.h"
#include "schema_check.h"
#include "schema_format.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REFS 1024

/* The keywords that constrain a value (JSON Schema draft-04 to 2020-12 and
 * OpenAPI's nullable). Everything else is an annotation or unknown, and
 * ignored as the specification says: title, description, default,
 * examples, $schema, $id / id, $comment, deprecated, readOnly, writeOnly,
 * $defs / definitions, then / else without if, x-* and other vendor keys. */
static const char *const CONSTRAINING[] = {"type",
                                           "enum",
                                           "const",
                                           "properties",
                                           "required",
                                           "additionalProperties",
                                           "patternProperties",
                                           "minProperties",
                                           "maxProperties",
                                           "items",
                                           "prefixItems",
                                           "additionalItems",
                                           "minItems",
                                           "maxItems",
                                           "uniqueItems",
                                           "$ref",
                                           "anyOf",
                                           "oneOf",
                                           "allOf",
                                           "minLength",
                                           "maxLength",
                                           "pattern",
                                           "format",
                                           "nullable",
                                           "minimum",
                                           "maximum",
                                           "exclusiveMinimum",
                                           "exclusiveMaximum",
                                           "multipleOf",
                                           "not",
                                           "if",
                                           "contains",
                                           "minContains",
                                           "maxContains",
                                           "dependentRequired",
                                           "dependentSchemas",
                                           "dependencies",
                                           "propertyNames",
                                           "unevaluatedProperties",
                                           "unevaluatedItems",
                                           "$dynamicRef",
                                           "$recursiveRef"};

/* The ones no grammar here enforces: a precise 400 (checked per node after
 * the merge, with the exceptions refused() lets through) — unless the
 * conversion is loose and the keyword is one of LOOSE: then the grammar
 * leaves it out (a superset of the valid values) and the output is checked
 * at the end (schema_check.h). */
static const char *const REFUSED[] = {"not",
                                      "if",
                                      "contains",
                                      "propertyNames",
                                      "uniqueItems",
                                      "$dynamicRef",
                                      "$recursiveRef",
                                      "unevaluatedProperties",
                                      "unevaluatedItems"};
static const char *const LOOSE[] = {"not",         "if", "contains", "propertyNames",
                                    "uniqueItems", "unevaluatedProperties", "unevaluatedItems"};

bool ifd__gconv_constrains(const char *key)
{
    return ifd__gconv_in_list(key, CONSTRAINING, sizeof CONSTRAINING / sizeof CONSTRAINING[0]);
}

static int enum_body(conv_t *c, const json_t *en, ifd_buf_t *b)
{
    size_t n = json_array_size(en);
    lit_t *v = calloc(n, sizeof *v);
    char **own = calloc(n, sizeof *own); /* the literals' sort drops duplicates from v */
    int rc = v && own ? 0 : ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        own[i] = ifd__gconv_dump_value(json_array_get(en, i));
        if (!own[i])
            rc = ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
        else
            v[i] = (lit_t){own[i], strlen(own[i])};
    }
    if (!rc)
        rc = ifd__gconv_literals(c, v, n, b);
    for (size_t i = 0; own && i < n; i++)
        free(own[i]);
    free(own);
    free(v);
    return rc;
}

static int ref_rule(conv_t *c, const char *ref, const json_t *doc, unsigned *id)
{
    /* a fragment is read in the embedded resource it is written in, first */
    const json_t *scope = c->res && ref[0] == '#' ? c->res : doc;
    for (size_t i = 0; i < c->n_refs; i++) {
        if (c->refs[i].doc == scope && strcmp(c->refs[i].ref, ref) == 0) {
            *id = c->refs[i].id;
            return 0;
        }
    }
    bool in_res;
    const json_t *t = ifd__gconv_resolve_in(doc, c->res, ref, &in_res);
    if (!t)
        return ifd__gconv_err(c, IFD_ENOTSUP,
                              "$ref '%.200s' is not a local reference into the schema", ref);
    if (c->n_refs == MAX_REFS)
        return ifd__gconv_err(c, IFD_ETOOBIG, "more than %d distinct $ref targets", MAX_REFS);
    ifd__gconv_ref_t *r = realloc(c->refs, (c->n_refs + 1) * sizeof *r);
    if (!r)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    c->refs = r;
    char *dup = strdup(ref);
    if (!dup)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    unsigned me = c->next++;
    c->refs[c->n_refs++] = (ifd__gconv_ref_t){scope, dup, me};
    /* sN ::= <the target's rule> (recursion reaches sN by name), converted in
     * the resource it was found in */
    unsigned tid;
    int saved = c->depth;
    const json_t *saved_res = c->res;
    c->depth = 0;
    c->res = in_res ? c->res : NULL;
    int rc = ifd__gconv_schema_rule(c, t, doc, &tid);
    c->depth = saved;
    c->res = saved_res;
    if (rc)
        return rc;
    ifd_buf_t body = IFD_BUF_INIT;
    rc = ifd_buf_printf(&body, "s%u", tid) ? ifd__gconv_err(c, IFD_ENOMEM, "out of memory") : 0;
    if (!rc)
        rc = ifd__gconv_rule(c, me, &body);
    ifd_buf_free(&body);
    *id = me;
    return rc;
}

/* A count keyword (minLength, maxItems, …). A maximum above what a
 * grammar repetition counts is clamped to IFD_GRAMMAR_MAX_REPEAT (every
 * shorter value obeys it); a minimum above it is refused. */
static int get_count(conv_t *c, const json_t *s, const char *key, long long *out)
{
    const json_t *v = json_object_get(s, key);
    if (!v)
        return 0;
    long long n = json_is_integer(v) ? json_integer_value(v)
                  : json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v)
                      ? (long long)json_real_value(v)
                      : -1;
    if (n < 0)
        return ifd__gconv_err(c, IFD_ENOTSUP, "'%s' must be a non-negative integer", key);
    if (n > IFD_GRAMMAR_MAX_REPEAT) {
        if (strncmp(key, "min", 3) == 0)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'%s' over %d is not supported", key,
                                  IFD_GRAMMAR_MAX_REPEAT);
        n = IFD_GRAMMAR_MAX_REPEAT;
    }
    *out = n;
    return 0;
}

/* Length of the regex atom at p (a class, an escape, '.', one character);
 * 0 when p does not start with one. */
static size_t rx_atom_len(const char *p)
{
    if (*p == '[') {
        size_t i = 1;
        if (p[i] == '^')
            i++;
        if (p[i] == ']')
            i++;
        for (; p[i] && p[i] != ']'; i++)
            if (p[i] == '\\' && p[i + 1])
                i++;
        return p[i] == ']' ? i + 1 : 0;
    }
    if (*p == '\\')
        return p[1] == 'u' ? 6 : p[1] == 'x' ? 4 : p[1] ? 2 : 0;
    if (!*p || strchr("()|*+?{}^$", *p))
        return 0;
    size_t k = 1;
    while (((unsigned char)p[k] & 0xC0) == 0x80)
        k++;
    return k;
}

/* One quantifier at q (none: {1,1}); its length in *len, 0 when malformed. */
static int rx_quant(const char *q, const char *end, long long *lo, long long *hi, size_t *len)
{
    *lo = *hi = 1, *len = 0;
    if (q == end || !strchr("*+?{", *q))
        return 0;
    if (*q != '{') {
        *lo = *q == '+', *hi = *q == '?' ? 1 : -1, *len = 1;
        return 0;
    }
    char *e;
    *lo = strtoll(q + 1, &e, 10);
    if (e == q + 1)
        return -1;
    if (*e == '}')
        *hi = *lo;
    else if (*e == ',' && e[1] == '}')
        *hi = -1, e++;
    else if (*e == ',')
        *hi = strtoll(e + 1, &e, 10);
    if (*e != '}' || e >= end)
        return -1;
    *len = (size_t)(e - q) + 1;
    return 0;
}

/* The items (atom, count range) of the anchored pattern p, without an outer
 * group around the whole of it; false when p is not such a sequence. */
typedef struct {
    const char *at;
    size_t len;
    long long lo, hi; /* hi -1: unbounded */
} rx_item_t;

enum { RX_MAX_ITEMS = 64 };

static bool rx_items(const char *p, size_t n, rx_item_t *item, size_t *k)
{
    if (n < 3 || memchr(p, '\0', n) || p[0] != '^' || p[n - 1] != '$' || p[n - 2] == '\\')
        return false;
    const char *q = p + 1, *end = p + n - 1;
    if (*q == '(' && end[-1] == ')') { /* ( … ) or (?: … ) around everything, no | in it */
        int depth = 0;
        const char *r = q;
        for (; r < end; r++) {
            if (*r == '\\') {
                r++;
                continue;
            }
            if (*r == '[') {
                size_t cl = rx_atom_len(r);
                if (!cl)
                    return false;
                r += cl - 1;
                continue;
            }
            depth += *r == '(' ? 1 : *r == ')' ? -1 : 0;
            if ((depth == 0 && r + 1 < end) || (depth == 1 && *r == '|'))
                break;
        }
        if (r == end && depth == 0 && q[1] != '?') {
            q++;
            end--;
        } else if (r == end && depth == 0 && q[2] == ':') {
            q += 3;
            end--;
        }
    }
    *k = 0;
    while (q < end) {
        size_t al = rx_atom_len(q), ql;
        long long lo, hi;
        if (!al || *k == RX_MAX_ITEMS || q + al > end || rx_quant(q + al, end, &lo, &hi, &ql) ||
            (hi >= 0 && hi < lo))
            return false;
        item[(*k)++] = (rx_item_t){q, al, lo, hi};
        q += al + ql;
    }
    return *k > 0;
}

/* pattern with minLength / maxLength: supported when the pattern is an
 * anchored sequence of atoms (classes, escapes, '.', characters) each with
 * an optional quantifier (^[a-z][a-z0-9_-]*$, ^(\\d+\\.\\d+.*)$): the lengths
 * bound the repetitions' counts — exactly with one variable repetition;
 * with several, minLength's extra goes to the first ones and maxLength's
 * room is shared out evenly (every string written obeys both; not every
 * valid one is written). Otherwise IFD_ENOTSUP. */
static int pattern_length(conv_t *c, const char *p, size_t pn, long long mn, long long mx,
                          ifd_buf_t *b)
{
    rx_item_t item[RX_MAX_ITEMS];
    size_t k;
    if (!rx_items(p, pn, item, &k))
        return ifd__gconv_err(c, IFD_ENOTSUP,
                              "'pattern' combined with 'minLength'/'maxLength' (supported when "
                              "the pattern is an anchored sequence of characters and classes "
                              "with quantifiers, as ^[a-z][a-z0-9]*$)");
    long long sum_lo = 0, nvar = 0;
    for (size_t i = 0; i < k; i++) {
        sum_lo += item[i].lo;
        nvar += item[i].lo != item[i].hi;
    }
    /* minLength: the first repetitions take the extra */
    long long need = mn > sum_lo ? mn - sum_lo : 0;
    for (size_t i = 0; i < k && need; i++) {
        long long room = item[i].hi < 0 ? need : item[i].hi - item[i].lo;
        long long take = room < need ? room : need;
        item[i].lo += take, need -= take, sum_lo += take;
    }
    if (need)
        return ifd__gconv_unsat(c, "'pattern' strings are shorter than 'minLength'");
    if (mx >= 0) { /* maxLength: the room left, shared out */
        if (sum_lo > mx)
            return ifd__gconv_unsat(c, "'pattern' strings are longer than 'maxLength'");
        long long room = mx - sum_lo, share = nvar ? room / nvar : 0, rest = nvar ? room % nvar : 0;
        for (size_t i = 0; i < k; i++) {
            if (item[i].lo == item[i].hi)
                continue;
            long long cap = item[i].lo + share + rest;
            rest = 0;
            if (item[i].hi < 0 || item[i].hi > cap)
                item[i].hi = cap;
        }
    }
    if (ifd_buf_puts(b, "\"\\u0022\" "))
        return IFD_ENOMEM;
    for (size_t i = 0; i < k; i++) {
        if (item[i].lo > IFD_GRAMMAR_MAX_REPEAT)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'pattern' repeated over %d times",
                                  IFD_GRAMMAR_MAX_REPEAT);
        if (item[i].hi > IFD_GRAMMAR_MAX_REPEAT)
            item[i].hi = IFD_GRAMMAR_MAX_REPEAT; /* shorter strings obey both */
        if (ifd_buf_puts(b, "( "))
            return IFD_ENOMEM;
        TRY(ifd__gconv_regex(c, item[i].at, item[i].len, true, false, b));
        int e = item[i].hi < 0 ? ifd_buf_printf(b, "){%lld,} ", item[i].lo)
                               : ifd_buf_printf(b, "){%lld,%lld} ", item[i].lo, item[i].hi);
        if (e)
            return IFD_ENOMEM;
    }
    return ifd_buf_puts(b, "\"\\u0022\" ") ? IFD_ENOMEM : 0;
}

static int string_exact(conv_t *c, const json_t *s, ifd_buf_t *b)
{
    const json_t *fmt = json_object_get(s, "format");
    const json_t *pat = json_object_get(s, "pattern");
    long long mn = -1, mx = -1;
    TRY(get_count(c, s, "minLength", &mn));
    TRY(get_count(c, s, "maxLength", &mx));
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'format' must be a string");
        /* a length beside the format stands only where every string of its
         * rule obeys it (schema_format.h: each rule's shortest and longest) */
        const ifd_schema_format_t *sf = ifd_schema_format_find(f);
        if (sf) {
            bool fits = mn <= sf->lo && (mx < 0 || (sf->hi >= 0 && sf->hi <= mx));
            if (pat || !fits)
                return ifd__gconv_err(c, IFD_ENOTSUP,
                                      "'format': \"%s\" combined with 'pattern' or a length its "
                                      "strings (%d to %d characters) do not all obey",
                                      f, sf->lo, sf->hi);
            return ifd_buf_printf(b, "%s ", sf->rule) ? IFD_ENOMEM : 0;
        }
        /* other formats (OpenAPI's int64, byte, password, vendors' own) are annotations */
    }
    if (pat) {
        const char *p = json_string_value(pat);
        if (!p)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'pattern' must be a string");
        /* (its length: a pattern may hold a NUL, "[^\u0000]") */
        size_t pn = json_string_length(pat);
        if (mn >= 0 || mx >= 0)
            return pattern_length(c, p, pn, mn, mx, b);
        if (ifd_buf_puts(b, "\"\\u0022\" "))
            return IFD_ENOMEM;
        TRY(ifd__gconv_regex(c, p, pn, true, true, b));
        return ifd_buf_puts(b, "\"\\u0022\" ") ? IFD_ENOMEM : 0;
    }
    if (mn < 0 && mx < 0)
        return ifd_buf_puts(b, "jstr ") ? IFD_ENOMEM : 0;
    if (mn < 0)
        mn = 0;
    if (mx >= 0 && mx < mn)
        return ifd__gconv_unsat(c, "'maxLength' below 'minLength'");
    if (mx >= 0)
        return ifd_buf_printf(b, "\"\\u0022\" jchar{%lld,%lld} \"\\u0022\" ", mn, mx) ? IFD_ENOMEM
                                                                                      : 0;
    return ifd_buf_printf(b, "\"\\u0022\" jchar{%lld,} \"\\u0022\" ", mn) ? IFD_ENOMEM : 0;
}

/* What a loose conversion keeps of a string or number schema it cannot
 * enforce whole, tried in order (a try whose keyword is absent is
 * skipped): the format alone, the pattern alone, the lengths alone, any
 * string; the bounds without multipleOf, any number. The keywords each
 * leaves out are checked at the end. */
typedef struct {
    const char *needs;   /* the keyword the try keeps (NULL: none) */
    const char *drop[5]; /* the keywords it leaves out */
} loose_try_t;

static const loose_try_t STRING_TRIES[] = {
    {"format", {"pattern", "minLength", "maxLength"}},
    {"pattern", {"format", "minLength", "maxLength"}},
    {NULL, {"format", "pattern"}},
    {NULL, {"format", "pattern", "minLength", "maxLength"}},
    {NULL, {NULL}},
};

static const loose_try_t NUMBER_TRIES[] = {
    {"multipleOf", {"multipleOf"}},
    {NULL, {"multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
    {NULL, {NULL}},
};

typedef int (*body_fn)(conv_t *c, const json_t *s, bool integer, ifd_buf_t *b);

/* fn(s), or in a loose conversion the first of tries (ending with an empty
 * one) that converts. */
static int loose_body(conv_t *c, const json_t *s, bool integer, body_fn fn,
                      const loose_try_t *tries, ifd_buf_t *b)
{
    size_t at = b->len;
    ifd__gconv_mark_t mark = ifd__gconv_mark(c);
    int rc = fn(c, s, integer, b);
    for (const loose_try_t *t = tries; rc && t->drop[0] && ifd__gconv_loosen(c, mark, rc); t++) {
        if (t->needs && !json_object_get(s, t->needs)) {
            rc = IFD_ENOTSUP;
            continue;
        }
        b->len = at;
        if (b->data)
            b->data[at] = '\0';
        json_t *x = json_copy((json_t *)s);
        if (!x)
            return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
        for (size_t k = 0; k < 5 && t->drop[k]; k++)
            json_object_del(x, t->drop[k]);
        rc = fn(c, x, integer, b);
        json_decref(x);
    }
    return rc;
}

static int string_fn(conv_t *c, const json_t *s, bool integer, ifd_buf_t *b)
{
    (void)integer;
    return string_exact(c, s, b);
}

/* Every standard format of 2020-12 has a rule (schema_format.h); any other
 * is an annotation. */
static int string_body(conv_t *c, const json_t *s, ifd_buf_t *b)
{
    return loose_body(c, s, false, string_fn, STRING_TRIES, b);
}

/* Whether the pattern (a JSON Schema regex: a search) matches the key. */
static int pattern_matches(conv_t *c, const char *pat, const char *key, bool *yes)
{
    /* PCRE2, as the check at the end reads patterns (UTF, $ only at the end):
     * lookaround and the like decide which schemas a name falls under even
     * where no grammar could write them */
    int ec;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &off, NULL);
    if (!re)
        return ifd__gconv_err(c, IFD_ENOTSUP,
                              "'patternProperties' '%.200s' is not a regex "
                              "PCRE2 compiles",
                              pat);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    int rc = md && mc ? 0 : IFD_ENOMEM;
    if (!rc) {
        pcre2_set_match_limit(mc, 1000000);
        int r = pcre2_match(re, (PCRE2_SPTR)key, strlen(key), 0, 0, md, mc);
        if (r >= 0 || r == PCRE2_ERROR_NOMATCH)
            *yes = r >= 0;
        else
            rc = ifd__gconv_err(c, IFD_ENOTSUP,
                                "'patternProperties' '%.200s' could not be matched against "
                                "'%.100s' (error %d)",
                                pat, key, r);
    }
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    c->steps++;
    return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
}

/* One property to generate. */
typedef struct {
    const char *name;
    json_t *schema; /* owned */
    bool req;
} prop_t;

static void props_free(prop_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(p[i].schema);
    free(p);
}

/* Appends name n to the ordered list `all` unless the set `seen` has it
 * (jansson's objects are hashed: one lookup per name). 0, or -1 when out of
 * memory. */
static int add_required(json_t *all, json_t *seen, json_t *n)
{
    const char *name = json_string_value(n);
    if (json_object_get(seen, name))
        return 0;
    return json_object_set_new(seen, name, json_true()) || json_array_append(all, n) ? -1 : 0;
}

/* The names a value must have: required, plus what dependentRequired (or
 * draft-04 dependencies with lists) asks of a present property — made
 * required as well, which keeps every output valid. *out is the list
 * (first occurrence order, no repeats), *set the same names as a hashed set:
 * linear in the lists' lengths, however long they are. */
static int required_set(conv_t *c, const json_t *s, json_t **out, json_t **set)
{
    const json_t *req = json_object_get(s, "required");
    if (req && !json_is_array(req))
        return ifd__gconv_err(c, IFD_ENOTSUP, "'required' must be an array");
    json_t *all = json_array(), *seen = json_object();
    int rc = all && seen ? 0 : IFD_ENOMEM;
    size_t i;
    json_t *n;
    json_array_foreach(req, i, n)
    {
        if (rc)
            break;
        if (!json_is_string(n))
            rc = ifd__gconv_err(c, IFD_ENOTSUP, "'required' must list strings");
        else if (add_required(all, seen, n))
            rc = IFD_ENOMEM;
    }
    static const char *const dep_keys[] = {"dependentRequired", "dependencies"};
    for (size_t d = 0; !rc && d < 2; d++) {
        const json_t *dep = json_object_get(s, dep_keys[d]);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)dep, k, v)
        {
            if (!json_is_array(v)) {
                rc = ifd__gconv_err(c, IFD_ENOTSUP,
                                    "'%s' with a schema is not supported (only lists of "
                                    "names are)",
                                    dep_keys[d]);
                break;
            }
            json_array_foreach(v, i, n)
            {
                if (json_is_string(n) && add_required(all, seen, n)) {
                    rc = IFD_ENOMEM;
                    break;
                }
            }
            if (rc)
                break;
        }
    }
    if (rc) {
        json_decref(all);
        json_decref(seen);
        return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
    }
    *out = all;
    *set = seen;
    return 0;
}

/* The properties to generate, in order: the declared ones (each also
 * under the patternProperties whose pattern matches its name), then the
 * required names not declared (under the patternProperties matching them,
 * or additionalProperties where none does); then
 * minProperties / maxProperties applied by making the first optional ones
 * required, or leaving the last ones out. */
static int collect_props(conv_t *c, const json_t *s, const json_t *req, const json_t *req_set,
                         prop_t **out, size_t *n)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *pp = json_object_get(s, "patternProperties");
    if (props && !json_is_object(props))
        return ifd__gconv_err(c, IFD_ENOTSUP, "'properties' must be an object");
    size_t np = json_object_size(props) + json_array_size(req), k = 0;
    prop_t *p = calloc(np ? np : 1, sizeof *p);
    if (!p)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    int rc = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)props, key, val)
    {
        p[k] = (prop_t){key, json_incref(val), json_object_get(req_set, key) != NULL};
        const char *pk;
        json_t *pv;
        json_object_foreach((json_t *)pp, pk, pv)
        {
            bool yes = false;
            if ((rc = pattern_matches(c, pk, key, &yes)))
                break;
            if (yes) {
                json_t *both = json_pack("{s:[O,O]}", "allOf", p[k].schema, pv);
                json_decref(p[k].schema);
                p[k].schema = both;
            }
        }
        if (rc || !p[k++].schema)
            break;
    }
    for (size_t i = 0; !rc && i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (props && json_object_get(props, r))
            continue;
        /* the schemas of the patterns matching r, all of them; additionalProperties
         * only where none does (as for a key outside 'properties') */
        json_t *sub = NULL;
        const char *pk;
        json_t *pv;
        json_object_foreach((json_t *)pp, pk, pv)
        {
            bool yes = false;
            if ((rc = pattern_matches(c, pk, r, &yes)))
                break;
            if (yes && !sub && !(sub = json_pack("{s:[]}", "allOf")))
                rc = ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
            if (yes && !rc && json_array_append((json_t *)json_object_get(sub, "allOf"), pv))
                rc = ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
            if (rc)
                break;
        }
        if (rc)
            json_decref(sub);
        else if (sub)
            p[k++] = (prop_t){r, sub, true};
        else if (json_is_false(addl))
            rc = ifd__gconv_unsat(c,
                                  "'required' names '%.100s', which is not in 'properties' and "
                                  "which 'additionalProperties': false forbids",
                                  r);
        else
            p[k++] = (prop_t){r, addl ? json_incref((json_t *)addl) : json_true(), true};
    }
    long long mn = 0, mx = -1;
    if (!rc)
        rc = get_count(c, s, "minProperties", &mn);
    if (!rc)
        rc = get_count(c, s, "maxProperties", &mx);
    size_t nreq = 0;
    for (size_t i = 0; i < k; i++)
        nreq += p[i].req;
    if (!rc && k &&
        (mn > (long long)k || (mx >= 0 && mx < (long long)nreq) || (mx >= 0 && mx < mn)))
        rc = ifd__gconv_unsat(c,
                              "'minProperties'/'maxProperties' with 'properties' need between the "
                              "required and the declared count of properties (%zu..%zu)",
                              nreq, k);
    for (size_t i = 0; !rc && i < k && (long long)nreq < mn; i++)
        if (!p[i].req)
            p[i].req = true, nreq++;
    if (!rc && mx >= 0) { /* at most mx: the optional ones past the budget go */
        size_t keep = 0, room = (size_t)mx - nreq;
        for (size_t i = 0; i < k; i++) {
            if (!p[i].req && room == 0) {
                json_decref(p[i].schema);
                continue;
            }
            room -= !p[i].req;
            p[keep++] = p[i];
        }
        k = keep;
    }
    if (rc) {
        props_free(p, k);
        return rc;
    }
    *out = p;
    *n = k;
    return 0;
}

/* The literal text every key matching pat starts with, into out (at most
 * cap - 1 bytes): the plain characters after a leading ^ up to the first
 * operator (a character a quantifier makes optional is left out). false
 * when pat is not anchored at its start or holds an alternation (its
 * prefix is then unknown). */
static bool literal_prefix(const char *pat, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    if (pat[0] != '^' || strchr(pat, '|'))
        return false;
    for (const char *p = pat + 1; *p && n + 1 < cap;) {
        char ch;
        size_t len;
        if (*p == '\\' && p[1] && !isalnum((unsigned char)p[1]))
            ch = p[1], len = 2;
        else if (isalnum((unsigned char)*p) || (*p && strchr(" -_/:@#%&=~,<>'\"!;", *p)))
            ch = *p, len = 1;
        else
            break;
        if (p[len] == '?' || p[len] == '*' || p[len] == '{')
            break;
        out[n++] = ch;
        p += len;
        if (*p == '+')
            break;
    }
    out[n] = '\0';
    return true;
}

/* Whether no key can match both patterns: both anchored at the start with
 * literal prefixes of which neither is a prefix of the other. */
static bool patterns_disjoint(const char *a, const char *b)
{
    char pa[64], pb[64];
    if (!literal_prefix(a, pa, sizeof pa) || !literal_prefix(b, pb, sizeof pb))
        return false;
    size_t n = strlen(pa) < strlen(pb) ? strlen(pa) : strlen(pb);
    return strncmp(pa, pb, n) != 0;
}

/* The key-value alternatives of a map, into pair: one per patternProperties
 * pattern (keys from it; values under its schema and the schema of every
 * other pattern that may match the same key — all of them but those
 * patterns_disjoint proves apart, so a key matching several gets a value
 * valid for each), or any key under additionalProperties without patterns.
 * A pattern whose value schema nothing satisfies is left out (no key of it
 * is written: valid). *none: every pattern was left out. */
static int map_pairs(conv_t *c, const json_t *pp, const json_t *addl, const json_t *doc,
                     ifd_buf_t *pair, bool *none)
{
    *none = false;
    if (!json_object_size(pp)) {
        if (addl && json_is_false(addl)) {
            *none = true;
            return 0;
        }
        char val[32] = "jval";
        if (addl && !json_is_true(addl)) {
            unsigned v;
            TRY(ifd__gconv_schema_rule(c, addl, doc, &v));
            snprintf(val, sizeof val, "s%u", v);
        }
        return ifd_buf_printf(pair, "jstr ws \":\" ws %s ws", val) ? IFD_ENOMEM : 0;
    }
    size_t kept = 0;
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)pp, pk, pv)
    {
        /* vs: the value's schema, NULL for any value; a false schema among them
         * leaves the pattern out */
        json_t *vs = json_is_true(pv) ? NULL : json_incref(pv);
        bool never = json_is_false(pv);
        const char *ok;
        json_t *ov;
        json_object_foreach((json_t *)pp, ok, ov)
        {
            if (ok == pk || never || patterns_disjoint(pk, ok) || json_is_true(ov))
                continue;
            never = json_is_false(ov);
            json_t *both = vs ? json_pack("{s:[O,O]}", "allOf", vs, ov) : json_incref(ov);
            json_decref(vs);
            if (!(vs = both))
                return IFD_ENOMEM;
        }
        if (never) {
            json_decref(vs);
            continue;
        }
        ifd__gconv_mark_t mark = ifd__gconv_mark(c);
        unsigned v = 0;
        bool any = !vs;
        int rc = any ? 0 : ifd__gconv_schema_rule(c, vs, doc, &v);
        json_decref(vs);
        if (rc && ifd__gconv_drop_unsat(c, mark, rc))
            continue;
        if (rc)
            return rc;
        char val[32] = "jval";
        if (!any)
            snprintf(val, sizeof val, "s%u", v);
        size_t at = pair->len;
        if (ifd_buf_puts(pair, kept ? "| \"\\u0022\" " : "( \"\\u0022\" "))
            return IFD_ENOMEM;
        /* a pattern no grammar writes (lookaround): none of its keys is written */
        mark = ifd__gconv_mark(c);
        rc = ifd__gconv_regex(c, pk, strlen(pk), true, true, pair);
        if (rc == IFD_ENOTSUP) {
            ifd__gconv_take_back(c, mark);
            pair->len = at;
            if (pair->data)
                pair->data[at] = '\0';
            continue;
        }
        TRY(rc);
        if (ifd_buf_printf(pair, "\"\\u0022\" ws \":\" ws %s ws ", val))
            return IFD_ENOMEM;
        kept++;
    }
    if (kept && ifd_buf_puts(pair, ") "))
        return IFD_ENOMEM;
    *none = kept == 0;
    return 0;
}

/* An object used as a map: keys from the patternProperties patterns (or
 * any string), values from their schemas (or additionalProperties), between
 * minProperties and maxProperties pairs. Keys are not checked for
 * uniqueness (llguidance does the same). */
static int map_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *pp = json_object_get(s, "patternProperties");
    long long mn = 0, mx = -1;
    TRY(get_count(c, s, "minProperties", &mn));
    TRY(get_count(c, s, "maxProperties", &mx));
    if (pp && !json_is_object(pp))
        return ifd__gconv_err(c, IFD_ENOTSUP, "'patternProperties' must be an object");
    if (!json_object_size(pp) && (!addl || json_is_true(addl)) && mn == 0 && mx < 0)
        return ifd_buf_puts(b, "jobj ") ? IFD_ENOMEM : 0;
    if (mx >= 0 && mx < mn)
        return ifd__gconv_unsat(c, "'maxProperties' below 'minProperties'");
    ifd_buf_t pair = IFD_BUF_INIT;
    bool none = false;
    int rc = map_pairs(c, pp, addl, doc, &pair, &none);
    if (!rc && none) {
        if (mn > 0)
            rc = ifd__gconv_unsat(c, "'minProperties' where no property is allowed");
        else
            rc = ifd_buf_puts(b, "\"{\" ws \"}\" ") ? IFD_ENOMEM : 0;
        ifd_buf_free(&pair);
        return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
    }
    if (!rc) {
        unsigned id = c->next++;
        rc = ifd__gconv_rule(c, id, &pair);
        long long lo = mn > 0 ? mn - 1 : 0;
        if (!rc && mx == 0)
            rc = ifd_buf_puts(b, "\"{\" ws \"}\" ") ? IFD_ENOMEM : 0;
        else if (!rc && mx > 0)
            rc = ifd_buf_printf(b, "\"{\" ws %ss%u ( \",\" ws s%u ){%lld,%lld} %s\"}\" ",
                                mn ? "" : "( ", id, id, lo, mx - 1, mn ? "" : ")? ")
                     ? IFD_ENOMEM
                     : 0;
        else if (!rc)
            rc = ifd_buf_printf(b, "\"{\" ws %ss%u ( \",\" ws s%u ){%lld,} %s\"}\" ",
                                mn ? "" : "( ", id, id, lo, mn ? "" : ")? ")
                     ? IFD_ENOMEM
                     : 0;
    }
    ifd_buf_free(&pair);
    return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
}

/* The declared properties in schema order, required ones always, optional
 * ones possibly; no other key is generated (valid whatever
 * additionalProperties and patternProperties allow besides). */
static int props_body(conv_t *c, const prop_t *p, size_t n, const json_t *doc, ifd_buf_t *b)
{
    unsigned *kv = calloc(n, sizeof *kv);
    bool *req = calloc(n, sizeof *req);
    if (!kv || !req) {
        free(kv);
        free(req);
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    }
    int rc = 0;
    size_t nreq = 0, np = 0; /* np: the properties kept */
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned v;
        ifd__gconv_mark_t mark = ifd__gconv_mark(c);
        rc = ifd__gconv_schema_rule(c, p[i].schema, doc, &v);
        if (rc && !p[i].req && ifd__gconv_drop_unsat(c, mark, rc)) {
            rc = 0; /* an optional property no value satisfies: never written */
            continue;
        }
        if (rc)
            break;
        ifd_buf_t kb = IFD_BUF_INIT;
        json_t *ks = json_string(p[i].name);
        rc = ks ? ifd__gconv_json_lit(c, &kb, ks) : IFD_ENOMEM;
        json_decref(ks);
        if (!rc && ifd_buf_printf(&kb, "ws \":\" ws s%u ws", v))
            rc = IFD_ENOMEM;
        kv[np] = c->next++;
        req[np] = p[i].req;
        nreq += p[i].req;
        if (!rc)
            rc = ifd__gconv_rule(c, kv[np], &kb);
        np++;
        ifd_buf_free(&kb);
    }
    if (!rc && !np) {
        free(kv);
        free(req);
        return ifd_buf_puts(b, "\"{\" ws \"}\" ") ? ifd__gconv_err(c, IFD_ENOMEM, "out of memory")
                                                  : 0;
    }
    if (!rc && ifd_buf_puts(b, "\"{\" ws "))
        rc = IFD_ENOMEM;
    if (!rc && nreq) {
        /* schema order: optional ones before the first required one carry
         * their comma after them, later ones before them */
        bool seen_req = false;
        for (size_t j = 0; j < np && !rc; j++) {
            const char *f = req[j] ? (seen_req ? "\",\" ws s%u " : "s%u ")
                                   : (seen_req ? "( \",\" ws s%u )? " : "( s%u \",\" ws )? ");
            rc = ifd_buf_printf(b, f, kv[j]) ? IFD_ENOMEM : 0;
            seen_req |= req[j];
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
                rc = ifd__gconv_rule(c, tail[j], &tb);
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
    free(kv);
    free(req);
    return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
}

static int object_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    json_t *req = NULL, *req_set = NULL;
    TRY(required_set(c, s, &req, &req_set));
    prop_t *p = NULL;
    size_t np = 0;
    int rc = collect_props(c, s, req, req_set, &p, &np);
    json_decref(req);
    json_decref(req_set);
    if (rc)
        return rc;
    rc = np ? props_body(c, p, np, doc, b) : map_body(c, s, doc, b);
    props_free(p, np);
    return rc;
}

static int array_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    const json_t *items = json_object_get(s, "items");
    const json_t *prefix = json_object_get(s, "prefixItems");
    long long mn = 0, mx = -1;
    TRY(get_count(c, s, "minItems", &mn));
    TRY(get_count(c, s, "maxItems", &mx));
    if (mx >= 0 && mx < mn)
        return ifd__gconv_unsat(c, "'maxItems' below 'minItems'");
    if (json_is_array(items)) { /* draft-04's tuple form */
        if (prefix)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'items' as a list beside 'prefixItems'");
        prefix = items;
        items = json_object_get(s, "additionalItems");
    }
    if (prefix) {
        if (!json_is_array(prefix) || json_array_size(prefix) == 0)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'prefixItems' must be a non-empty array");
        /* the prefix items (as many as maxItems lets), then the items that
         * minItems still asks for, under items / additionalItems */
        long long k = (long long)json_array_size(prefix);
        long long n = mx >= 0 && mx < k ? mx : k;
        if (ifd_buf_puts(b, "\"[\" ws "))
            return IFD_ENOMEM;
        for (long long i = 0; i < n; i++) {
            unsigned v;
            TRY(ifd__gconv_schema_rule(c, json_array_get(prefix, (size_t)i), doc, &v));
            if (ifd_buf_printf(b, i ? "\",\" ws s%u ws " : "s%u ws ", v))
                return IFD_ENOMEM;
        }
        if (mn > n) {
            if (json_is_false(items))
                return ifd__gconv_unsat(c, "'minItems' above the items allowed");
            char rest[32] = "jval";
            if (items && !json_is_true(items)) {
                unsigned v;
                TRY(ifd__gconv_schema_rule(c, items, doc, &v));
                snprintf(rest, sizeof rest, "s%u", v);
            }
            if (ifd_buf_printf(b, "( \",\" ws %s ws ){%lld} ", rest, mn - n))
                return IFD_ENOMEM;
        }
        return ifd_buf_puts(b, "\"]\" ") ? IFD_ENOMEM : 0;
    }
    char item[32] = "jval";
    if (items && !json_is_true(items)) {
        if (json_is_false(items)) {
            if (mn > 0)
                return ifd__gconv_err(c, IFD_ENOTSUP, "'items': false with 'minItems' > 0");
            return ifd_buf_puts(b, "\"[\" ws \"]\" ") ? IFD_ENOMEM : 0;
        }
        unsigned v;
        ifd__gconv_mark_t mark = ifd__gconv_mark(c);
        int rc = ifd__gconv_schema_rule(c, items, doc, &v);
        if (rc && mn == 0 && ifd__gconv_drop_unsat(c, mark, rc)) /* no item can exist */
            return ifd_buf_puts(b, "\"[\" ws \"]\" ") ? IFD_ENOMEM : 0;
        TRY(rc);
        snprintf(item, sizeof item, "s%u", v);
    }
    if (mx == 0)
        return ifd_buf_puts(b, "\"[\" ws \"]\" ") ? IFD_ENOMEM : 0;
    if (c->loose && json_object_get(s, "contains")) {
        int crc = ifd__gconv_contains(c, s, items, item, mn, mx, doc, b);
        if (crc != 1)
            return crc;
    }
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
    if (strcmp(t, "number") == 0 || strcmp(t, "integer") == 0)
        return loose_body(c, s, t[0] == 'i', ifd__gconv_number, NUMBER_TRIES, b);
    static const struct {
        const char *t, *rule;
    } simple[] = {{"boolean", "jbool"}, {"null", "jnull"}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (strcmp(t, simple[i].t) == 0)
            return ifd_buf_printf(b, "%s ", simple[i].rule) ? IFD_ENOMEM : 0;
    return ifd__gconv_err(c, IFD_ENOTSUP, "'type': \"%.40s\" is not a JSON Schema type", t);
}

/* A refused keyword of s that matters here (NULL: none). Some are no-ops:
 * "if" without then/else, uniqueItems false or with at most one item,
 * propertyNames true / {} / only type string, min/maxContains without
 * contains. In a loose conversion the LOOSE ones are left to the check at
 * the end (c->approx). */
static const char *refused(conv_t *c, const json_t *s)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (!ifd__gconv_in_list(k, REFUSED, sizeof REFUSED / sizeof REFUSED[0]))
            continue;
        if (strcmp(k, "if") == 0 && !json_object_get(s, "then") && !json_object_get(s, "else"))
            continue;
        if (strcmp(k, "uniqueItems") == 0) {
            const json_t *mx = json_object_get(s, "maxItems");
            if (json_is_false(v) || (json_is_integer(mx) && json_integer_value(mx) <= 1))
                continue;
        }
        if (strcmp(k, "propertyNames") == 0) {
            const json_t *t = json_object_get(v, "type");
            if (json_is_true(v) || (json_is_object(v) &&
                                    (json_object_size(v) == 0 ||
                                     (json_object_size(v) == 1 && ifd__gconv_is_str(t, "string")))))
                continue;
        }
        if (c->loose && ifd__gconv_in_list(k, LOOSE, sizeof LOOSE / sizeof LOOSE[0])) {
            c->approx = true;
            continue;
        }
        return k;
    }
    return NULL;
}

/* The types a schema without "type" is read as: the one its keywords
 * imply (properties: object, items: array, minLength: string, minimum:
 * number), or any value. Generating one of several allowed types is
 * always valid. */
static const char *implied_type(const json_t *s)
{
    static const struct {
        const char *key, *type;
    } by_key[] = {{"properties", "object"},
                  {"additionalProperties", "object"},
                  {"required", "object"},
                  {"patternProperties", "object"},
                  {"minProperties", "object"},
                  {"maxProperties", "object"},
                  {"items", "array"},
                  {"prefixItems", "array"},
                  {"minItems", "array"},
                  {"maxItems", "array"},
                  {"minLength", "string"},
                  {"maxLength", "string"},
                  {"pattern", "string"},
                  {"format", "string"},
                  {"minimum", "number"},
                  {"maximum", "number"},
                  {"exclusiveMinimum", "number"},
                  {"exclusiveMaximum", "number"},
                  {"multipleOf", "number"}};
    for (size_t i = 0; i < sizeof by_key / sizeof by_key[0]; i++)
        if (json_object_get(s, by_key[i].key))
            return by_key[i].type;
    return NULL;
}

/* Whether v is an instance of JSON Schema type t. */
static bool has_type(const json_t *v, const char *t)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return !strcmp(t, "object");
    case JSON_ARRAY:
        return !strcmp(t, "array");
    case JSON_STRING:
        return !strcmp(t, "string");
    case JSON_INTEGER:
        return !strcmp(t, "integer") || !strcmp(t, "number");
    case JSON_REAL:
        return !strcmp(t, "number") ||
               (!strcmp(t, "integer") &&
                json_real_value(v) == (double)(long long)json_real_value(v));
    case JSON_TRUE:
    case JSON_FALSE:
        return !strcmp(t, "boolean");
    case JSON_NULL:
        return !strcmp(t, "null");
    }
    return false;
}

/* const / enum: the values that also have one of the schema's types. */
static int values_body(conv_t *c, const json_t *s, const json_t *vals, ifd_buf_t *b)
{
    const json_t *type = json_object_get(s, "type");
    bool or_null = json_is_true(json_object_get(s, "nullable"));
    json_t *keep = json_array();
    if (!keep)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v)
    {
        bool ok = !type || (or_null && json_is_null(v));
        for (size_t j = 0; type && !ok && j < (json_is_array(type) ? json_array_size(type) : 1);
             j++) {
            const char *t = json_string_value(json_is_array(type) ? json_array_get(type, j) : type);
            ok = t && has_type(v, t);
        }
        if (ok)
            json_array_append(keep, v);
    }
    int rc = json_array_size(keep)
                 ? enum_body(c, keep, b)
                 : ifd__gconv_unsat(c, "no 'enum'/'const' value has the schema's 'type'");
    json_decref(keep);
    return rc;
}

/* anyOf / oneOf (alone after the merge): one rule per branch; oneOf's
 * branches first made disjoint (ifd__gconv_one_of). */
static int any_body(conv_t *c, const json_t *any, const json_t *doc, ifd_buf_t *b)
{
    if (!json_is_array(any) || json_array_size(any) == 0)
        return ifd__gconv_err(c, IFD_ENOTSUP, "'anyOf' must be a non-empty array");
    if (ifd_buf_puts(b, "( "))
        return IFD_ENOMEM;
    size_t kept = 0;
    for (size_t i = 0; i < json_array_size(any); i++) {
        unsigned id;
        ifd__gconv_mark_t mark = ifd__gconv_mark(c);
        int rc = ifd__gconv_schema_rule(c, json_array_get(any, i), doc, &id);
        if (rc && ifd__gconv_drop_unsat(c, mark, rc))
            continue; /* a branch nothing satisfies adds nothing */
        TRY(rc);
        if (ifd_buf_printf(b, "%ss%u ", kept++ ? "| " : "", id))
            return IFD_ENOMEM;
    }
    if (!kept)
        return ifd__gconv_unsat(c, "no branch of 'anyOf'/'oneOf' can be satisfied");
    return ifd_buf_puts(b, ") ") ? IFD_ENOMEM : 0;
}

static int types_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    const json_t *type = json_object_get(s, "type");
    if (!type) {
        const char *t = implied_type(s);
        return t ? type_body(c, t, s, doc, b) : (ifd_buf_puts(b, "jval ") ? IFD_ENOMEM : 0);
    }
    if (json_is_string(type))
        return type_body(c, json_string_value(type), s, doc, b);
    if (!json_is_array(type) || json_array_size(type) == 0)
        return ifd__gconv_err(c, IFD_ENOTSUP, "'type' must be a string or a list of strings");
    if (ifd_buf_puts(b, "( "))
        return IFD_ENOMEM;
    for (size_t i = 0; i < json_array_size(type); i++) {
        const char *t = json_string_value(json_array_get(type, i));
        if (!t)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'type' must list strings");
        /* integer beside number adds nothing */
        if (!strcmp(t, "integer") && json_array_size(type) > 1) {
            bool num = false;
            for (size_t j = 0; j < json_array_size(type); j++)
                num |= ifd__gconv_is_str(json_array_get(type, j), "number");
            if (num)
                continue;
        }
        if (i && ifd_buf_puts(b, "| "))
            return IFD_ENOMEM;
        TRY(type_body(c, t, s, doc, b));
    }
    return ifd_buf_puts(b, ") ") ? IFD_ENOMEM : 0;
}

/* One node once merged: $ref, anyOf / oneOf, const / enum or its types. */
static int node_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    const char *bad = refused(c, s);
    if (bad)
        return ifd__gconv_err(c, IFD_ENOTSUP,
                              "'%s' is not supported (no grammar enforces it; see "
                              "docs/structured-outputs.md)",
                              bad);
    bool or_null = json_is_true(json_object_get(s, "nullable"));
    if (or_null && ifd_buf_puts(b, "( jnull | "))
        return IFD_ENOMEM;
    int rc;
    const json_t *ref = json_object_get(s, "$ref");
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    const json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (ref) {
        const char *r = json_string_value(ref);
        unsigned id = 0;
        if (!r)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'$ref' must be a string");
        TRY(ref_rule(c, r, doc, &id));
        rc = ifd_buf_printf(b, "s%u ", id) ? IFD_ENOMEM : 0;
    } else if (any || one) {
        json_t *branches = NULL;
        ifd__gconv_mark_t mark = ifd__gconv_mark(c);
        rc = any ? 0 : ifd__gconv_one_of(c, one, doc, &branches);
        if (rc && ifd__gconv_loosen(c, mark, rc))
            rc = 0, any = one; /* overlapping branches: anyOf, checked at the end */
        if (!rc)
            rc = any_body(c, any ? any : branches, doc, b);
        json_decref(branches);
    } else if (cst) {
        json_t *l = json_pack("[O]", cst);
        rc = l ? values_body(c, s, l, b) : IFD_ENOMEM;
        json_decref(l);
    } else if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0)
            return ifd__gconv_err(c, IFD_ENOTSUP, "'enum' must be a non-empty array");
        rc = values_body(c, s, en, b);
    } else {
        rc = types_body(c, s, doc, b);
    }
    if (!rc && or_null && ifd_buf_puts(b, ") "))
        rc = IFD_ENOMEM;
    return rc;
}

/* A loose conversion's tighter reading of what its grammar leaves out,
 * still accepting every valid value: if/then/else as anyOf [allOf [if,
 * then], else] (level 2: a valid value satisfies if and then, or else; the
 * else branch does not assert "not if", which no grammar enforces) or,
 * where that cannot be merged, anyOf [then, else] (level 1); contains on
 * an array as at least minContains (default 1) items (array_body then
 * asks for that many items of contains' schema where it can). NULL:
 * nothing to tighten. */
static json_t *tightened(const json_t *s, int level, bool *oom)
{
    const json_t *then = json_object_get(s, "then"), *els = json_object_get(s, "else");
    const json_t *ct = json_object_get(s, "contains"), *mc = json_object_get(s, "minContains");
    const json_t *mi = json_object_get(s, "minItems");
    *oom = false;
    json_t *nif = NULL;
    if (level == 3) { /* the discriminator form, exact: anyOf [if ∧ then, not if ∧ else] */
        if (!json_object_get(s, "if") || (!then && !els) ||
            !(nif = ifd__gconv_not_if(s, json_object_get(s, "if"))))
            return NULL;
        json_t *t = json_copy((json_t *)s);
        const json_t *all = t ? json_object_get(t, "allOf") : NULL;
        json_t *l = !t ? NULL : json_is_array(all) ? json_copy((json_t *)all) : json_array();
        json_t *any =
            json_pack("{s:[{s:[O,O]},{s:[O,O]}]}", "anyOf", "allOf", json_object_get(s, "if"),
                      then ? then : json_true(), "allOf", nif, els ? els : json_true());
        json_decref(nif);
        if (!t || !l || !any || json_array_append_new(l, any) ||
            json_object_set_new(t, "allOf", l)) {
            if (!any || !l)
                json_decref(l), json_decref(any);
            json_decref(t);
            *oom = true;
            return NULL;
        }
        json_object_del(t, "if"), json_object_del(t, "then"), json_object_del(t, "else");
        return t;
    }
    bool cond = json_object_get(s, "if") && then && els;
    long long need = ct && ifd__gconv_is_str(json_object_get(s, "type"), "array")
                         ? (json_is_integer(mc) ? json_integer_value(mc) : 1)
                         : 0;
    bool more = need > 0 && !(json_is_integer(mi) && json_integer_value(mi) >= need);
    if ((!cond && !more) || (level < 2 && !cond)) /* (level 1 differs only for if) */
        return NULL;
    json_t *t = json_copy((json_t *)s);
    if (t && more && json_object_set_new(t, "minItems", json_integer(need)))
        json_decref(t), t = NULL;
    if (t && cond) {
        const json_t *all = json_object_get(t, "allOf");
        json_t *l = json_is_array(all) ? json_copy((json_t *)all) : json_array();
        json_t *yes = level >= 2 ? json_pack("{s:[O,O]}", "allOf", json_object_get(s, "if"), then)
                                 : json_incref((json_t *)then);
        json_t *any = yes ? json_pack("{s:[O,O]}", "anyOf", yes, els) : NULL;
        json_decref(yes);
        if (!l || !any || json_array_append_new(l, any) || json_object_set_new(t, "allOf", l)) {
            if (!any || !l) /* (the calls that failed later took theirs) */
                json_decref(l), json_decref(any);
            json_decref(t), t = NULL;
        } else {
            json_object_del(t, "if"), json_object_del(t, "then"), json_object_del(t, "else");
        }
    }
    *oom = !t;
    return t;
}

static int merged_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    json_t *m = NULL;
    TRY(ifd__gconv_merge(c, s, doc, &m));
    int rc = node_body(c, m, doc, b);
    json_decref(m);
    return rc;
}

static int schema_body(conv_t *c, const json_t *s, const json_t *doc, ifd_buf_t *b)
{
    if (json_is_true(s))
        return ifd_buf_puts(b, "jval ") ? IFD_ENOMEM : 0;
    if (json_is_false(s))
        return ifd__gconv_unsat(c, "a 'false' schema (nothing can match it)");
    if (!json_is_object(s))
        return ifd__gconv_err(c, IFD_EFORMAT, "a schema must be an object or a boolean");
    int rc;
    /* the tightest reading, else (a keyword it cannot merge) a looser one,
     * at last the plain one */
    for (int level = 3; c->loose && level >= 1; level--) {
        bool oom = false;
        json_t *t = tightened(s, level, &oom);
        if (oom)
            return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
        if (!t)
            break;
        size_t at = b->len;
        ifd__gconv_mark_t mark = ifd__gconv_mark(c);
        c->approx = true;
        rc = merged_body(c, t, doc, b);
        json_decref(t);
        if (!rc || !ifd__gconv_loosen(c, mark, rc))
            return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
        b->len = at;
        if (b->data)
            b->data[at] = '\0';
    }
    rc = merged_body(c, s, doc, b);
    return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
}

/* Past this depth a schema's rule is remembered by the schema's text (in
 * c->refs, keyed "~" + its compact text with sorted keys), so that a
 * recursion the merge unrolls — a $ref beside other keywords inlines its
 * target, whose own $ref with siblings inlines it again (`resjson`'s
 * `additionalProperties: {minProperties: 1, anyOf: [{$ref: resource}, …]}`)
 * — meets its own text again and refers to its rule instead of nesting
 * until IFD__GCONV_MAX_DEPTH. The same text under the same document
 * converts to the same language, so the reference is exact. Shallower
 * schemas are not keyed: dumping every node of a large schema would cost
 * its size times its depth. */
#define MEMO_DEPTH 16
/* A schema whose text is longer is not keyed (its text would cost more to
 * keep than its rule: a recursion through one is cut at
 * IFD__GCONV_MAX_DEPTH as before). */
#define MEMO_TEXT_MAX 65536

typedef struct {
    char *p;  /* MEMO_TEXT_MAX + 2 bytes: "~" + the text + NUL */
    size_t n; /* bytes written, the "~" included */
} memo_text_t;

static int memo_text_cb(const char *buf, size_t size, void *data)
{
    memo_text_t *t = data;
    if (t->n + size > MEMO_TEXT_MAX + 1)
        return -1;
    memcpy(t->p + t->n, buf, size);
    t->n += size;
    return 0;
}

static int schema_rule(conv_t *c, const json_t *s, const json_t *doc, unsigned *id);

int ifd__gconv_schema_rule(conv_t *c, const json_t *s, const json_t *doc, unsigned *id)
{
    const json_t *res = ifd__gconv_resource_cached(doc, s, c->res_seen, &c->n_res_seen);
    if (!res)
        return schema_rule(c, s, doc, id);
    const json_t *saved = c->res; /* an embedded resource: its fragments are its own */
    c->res = res;
    int rc = schema_rule(c, s, doc, id);
    c->res = saved;
    return rc;
}

static int schema_rule(conv_t *c, const json_t *s, const json_t *doc, unsigned *id)
{
    TRY(ifd__gconv_step(c));
    if (++c->depth > IFD__GCONV_MAX_DEPTH) {
        c->depth--;
        return ifd__gconv_err(c, IFD_ETOOBIG, "schema nested deeper than %d levels",
                              IFD__GCONV_MAX_DEPTH);
    }
    int rc = 0;
    char *key = NULL;
    unsigned me = 0;
    bool memo = false; /* me is this schema's rule, remembered */
    if (c->depth > MEMO_DEPTH && json_is_object(s)) {
        memo_text_t t = {malloc(MEMO_TEXT_MAX + 2), 1};
        if (!t.p)
            rc = ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
        else if (json_dump_callback(s, memo_text_cb, &t, JSON_COMPACT | JSON_SORT_KEYS) == 0) {
            t.p[0] = '~', t.p[t.n] = '\0';
            key = realloc(t.p, t.n + 1); /* (kept: only its own length) */
            if (!key)
                key = t.p;
        } else { /* (a large subtree: converted as if shallow) */
            free(t.p);
        }
        for (size_t i = 0; !rc && key && i < c->n_refs; i++) {
            if (c->refs[i].doc == doc && strcmp(c->refs[i].ref, key) == 0) {
                *id = c->refs[i].id;
                free(key);
                c->depth--;
                return 0;
            }
        }
        ifd__gconv_ref_t *r = rc || !key || c->n_refs == MAX_REFS
                                  ? NULL
                                  : realloc(c->refs, (c->n_refs + 1) * sizeof *r);
        if (r) { /* (a full table: converted as if shallow) */
            c->refs = r;
            me = c->next++;
            memo = true;
            c->refs[c->n_refs++] = (ifd__gconv_ref_t){doc, key, me};
            key = NULL;
        } else if (!rc && key && c->n_refs < MAX_REFS) {
            rc = ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
        }
        free(key);
    }
    ifd_buf_t body = IFD_BUF_INIT;
    if (!rc)
        rc = schema_body(c, s, doc, &body);
    if (!rc) {
        *id = memo ? me : c->next++;
        rc = ifd__gconv_rule(c, *id, &body);
    }
    ifd_buf_free(&body);
    c->depth--;
    return rc;
}

/* Whether the string v holds a NUL. */
static bool has_nul(const json_t *v)
{
    return json_is_string(v) && memchr(json_string_value(v), '\0', json_string_length(v));
}

int ifd__gconv_nul_check(conv_t *c, const json_t *s, int depth)
{
    static const char *const maps[] = {"properties",   "patternProperties", "$defs",
                                       "definitions",  "dependentSchemas",  "dependencies"};
    static const char *const read[] = {"then", "else", "$defs", "definitions"};
    if (!json_is_object(s) || depth > 256)
        return 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        /* enum / const values are written whole (escaped); a pattern is read with its
         * length; annotations and unknown keywords are not read */
        if (!strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "pattern") ||
            !(ifd__gconv_constrains(k) || ifd__gconv_in_list(k, read, 4)))
            continue;
        bool map = ifd__gconv_in_list(k, maps, 6) && json_is_object(v);
        size_t i;
        const char *n;
        json_t *x;
        int bad = has_nul(v);
        if (json_is_array(v)) {
            json_array_foreach(v, i, x)
            {
                bad |= has_nul(x);
                TRY(ifd__gconv_nul_check(c, x, depth + 1));
            }
        } else if (map) {
            json_object_foreach(v, n, x)
            {
                for (i = 0; json_is_array(x) && i < json_array_size(x); i++)
                    bad |= has_nul(json_array_get(x, i)); /* dependencies' name lists */
                TRY(ifd__gconv_nul_check(c, x, depth + 1));
            }
        } else {
            TRY(ifd__gconv_nul_check(c, v, depth + 1));
        }
        if (bad)
            return ifd__gconv_err(c, IFD_ENOTSUP,
                                  "'%s' holds a NUL character (\\u0000): only 'pattern', "
                                  "'enum' and 'const' strings (and annotations) may",
                                  k);
    }
    return 0;
}

bool ifd__gconv_has_dep_schema(const json_t *v, int depth)
{
    if (depth > 256)
        return false;
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x)
        {
            if (ifd__gconv_has_dep_schema(x, depth + 1))
                return true;
        }
        return false;
    }
    json_object_foreach((json_t *)v, k, x)
    {
        if (json_is_object(x) && (!strcmp(k, "dependentSchemas") || !strcmp(k, "dependencies"))) {
            const char *n;
            json_t *d;
            json_object_foreach(x, n, d)
            {
                if (!json_is_array(d))
                    return true;
            }
        }
        if ((json_is_object(x) || json_is_array(x)) && ifd__gconv_has_dep_schema(x, depth + 1))
            return true;
    }
    return false;
}

static int convert(const json_t *schema, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                   bool loose, bool *approx, char *err, size_t errlen)
{
    size_t out_len = out->len;
    bool dep_loose = false;
    uint64_t deadline = 0, steps = 0;
again:;
    conv_t c;
    ifd__gconv_init(&c, budget, err, errlen);
    c.loose = loose;
    if (dep_loose) { /* the second pass within the first one's budget */
        c.dep_loose = true;
        c.deadline = deadline;
        c.steps = steps;
    }
    unsigned id;
    int rc = ifd__gconv_nul_check(&c, schema, 0);
    if (!rc)
        rc = ifd__gconv_schema_rule(&c, schema, schema, &id);
    if (!rc) {
        char root[32];
        snprintf(root, sizeof root, "s%u", id);
        rc = ifd__gconv_finish(&c, root, out);
    }
    /* an over-approximation stands only where the check can evaluate the
     * whole schema: a part it cannot evaluate would go unchecked */
    if (!rc && c.approx && ifd_schema_check_supported(schema, err, errlen))
        rc = IFD_ENOTSUP;
    if (approx)
        *approx = !rc && c.approx;
    deadline = c.deadline;
    steps = c.steps;
    ifd__gconv_close(&c);
    /* dependentSchemas merged whether or not their names are written may
     * exclude each other (fold_dependent): once more, leaving out those
     * whose names are not required */
    if (rc == IFD_ENOTSUP && loose && !dep_loose && ifd__gconv_has_dep_schema(schema, 0)) {
        dep_loose = true;
        out->len = out_len;
        if (out->data)
            out->data[out_len] = '\0';
        if (err && errlen)
            err[0] = '\0';
        goto again;
    }
    return rc;
}

int ifd_gconv_json_schema(const json_t *schema, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                          char *err, size_t errlen)
{
    return convert(schema, out, budget, false, NULL, err, errlen);
}

int ifd_gconv_json_schema_loose(const json_t *schema, ifd_buf_t *out,
                                const ifd_grammar_budget_t *budget, bool *approx, char *err,
                                size_t errlen)
{
    return convert(schema, out, budget, true, approx, err, errlen);
}
