/*
 * schema_check.c — JSON Schema validation of a finished output (see
 * schema_check.h for the dialect and its choices). One keyword = one
 * function in KEYWORDS; a schema node runs every keyword it carries that
 * applies to the value's type. Failures inside anyOf / oneOf / not / if /
 * contains are expected outcomes and leave no message (quiet); the first
 * failure outside them writes the message. Hard errors (IFD_ENOTSUP,
 * IFD_ETOOBIG) end the whole check, whatever combinator they occur in.
 */
#include "schema_check.h"

#include "error.h"
#include "grammar_conv_impl.h"
#include "schema_format.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MAX_STEPS 1000000ul
#define MATCH_LIMIT 1000000u /* PCRE2's backtracking steps per pattern search */
#define MAX_DEPTH 256

typedef struct {
    const json_t *doc;
    char *err;
    size_t errlen;
    int quiet; /* > 0: inside a combinator, a failure writes no message */
    int depth;
    unsigned long steps;
    char path[512]; /* JSON pointer of the value being checked */
    size_t plen;
    /* $ref strings resolved so far in this check (an anchor's search walks
     * the document: once per reference, not per evaluation) */
    struct {
        const json_t *ref, *res, *target;
        bool in_res;
    } refs[16];
    unsigned n_refs;
    const json_t *res; /* the embedded resource being checked (NULL: the document's) */
    ifd__gconv_res_seen_t res_seen[16]; /* ifd__gconv_resource's last 16 answers */
    unsigned n_res_seen;
} chk_t;

typedef int (*kw_fn)(chk_t *c, const json_t *s, const json_t *kv, const json_t *v);

static int check(chk_t *c, const json_t *s, const json_t *v);

static int fail(chk_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(chk_t *c, const char *fmt, ...)
{
    if (c->quiet || !c->errlen || c->err[0])
        return IFD_EINVAL;
    int n = snprintf(c->err, c->errlen, "%s: ", c->plen ? c->path : "(the value)");
    if (n >= 0 && (size_t)n < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return IFD_EINVAL;
}

/* A schema the checker cannot evaluate: always written, quiet or not. */
static int unsupported(chk_t *c, const char *fmt, const char *what)
{
    if (c->errlen)
        snprintf(c->err, c->errlen, fmt, what);
    return IFD_ENOTSUP;
}

/* Path segments (JSON pointer escapes); pop by restoring plen. */
static size_t push_key(chk_t *c, const char *k)
{
    size_t was = c->plen;
    if (c->plen + 1 < sizeof c->path)
        c->path[c->plen++] = '/';
    for (; *k && c->plen + 3 < sizeof c->path; k++) {
        if (*k == '~' || *k == '/') {
            c->path[c->plen++] = '~';
            c->path[c->plen++] = *k == '~' ? '0' : '1';
        } else {
            c->path[c->plen++] = *k;
        }
    }
    c->path[c->plen] = '\0';
    return was;
}

static size_t push_index(chk_t *c, size_t i)
{
    char k[24];
    snprintf(k, sizeof k, "%zu", i);
    return push_key(c, k);
}

static void pop(chk_t *c, size_t was)
{
    c->plen = was;
    c->path[was] = '\0';
}

/* The check of v under s without a message (for combinators): 0, IFD_EINVAL
 * or a hard error. */
static int quietly(chk_t *c, const json_t *s, const json_t *v)
{
    c->quiet++;
    int rc = check(c, s, v);
    c->quiet--;
    return rc;
}

static bool hard(int rc)
{
    return rc && rc != IFD_EINVAL;
}

/* ---- values ---- */

static bool is_integral(const json_t *v)
{
    if (json_is_integer(v))
        return true;
    double d = json_real_value(v);
    return json_is_real(v) && isfinite(d) && d == floor(d);
}

/* -1, 0, 1 as a <, =, > b (two numbers; integers compared exactly). */
static int num_cmp(const json_t *a, const json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        return (x > y) - (x < y);
    }
    double x = json_number_value(a), y = json_number_value(b);
    return (x > y) - (x < y);
}

/* JSON equality: numbers by value (1 equals 1.0), objects by members. */
static bool json_eq(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return num_cmp(a, b) == 0;
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_string(a))
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_eq(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)a, k, x)
        {
            const json_t *y = json_object_get(b, k);
            if (!y || !json_eq(x, y))
                return false;
        }
        return true;
    }
    return true; /* true, false, null */
}

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
    case JSON_REAL:
        return !strcmp(t, "number") || (!strcmp(t, "integer") && is_integral(v));
    case JSON_TRUE:
    case JSON_FALSE:
        return !strcmp(t, "boolean");
    case JSON_NULL:
        return !strcmp(t, "null");
    }
    return false;
}

/* A count keyword's value (minLength, maxItems, …); -1 when it is not one. */
static long long count_of(const json_t *kv)
{
    if (json_is_integer(kv))
        return json_integer_value(kv) < 0 ? -1 : (long long)json_integer_value(kv);
    return is_integral(kv) && json_real_value(kv) >= 0 ? (long long)json_real_value(kv) : -1;
}

/* Whether the regex pat finds a match in str[0..n) (a search). */
static int re_search(chk_t *c, const char *pat, size_t pn, const char *str, size_t n,
                     bool *found)
{
    int ec;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, pn,
                                   PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &off, NULL);
    if (!re)
        return unsupported(c, "'pattern' '%.200s' is not a regex PCRE2 compiles", pat);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (mc) { /* a pattern that backtracks without end is not run on */
        pcre2_set_match_limit(mc, MATCH_LIMIT);
        pcre2_set_depth_limit(mc, MATCH_LIMIT / 10);
    }
    int rc = md && mc ? pcre2_match(re, (PCRE2_SPTR)str, n, 0, 0, md, mc) : PCRE2_ERROR_NOMEMORY;
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        return unsupported(c, "'pattern' '%.200s' could not be run on the value", pat);
    *found = rc >= 0;
    return 0;
}

/* ---- keywords of any type ---- */

static int kw_type(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    if (json_is_string(kv))
        return has_type(v, json_string_value(kv))
                   ? 0
                   : fail(c, "not of type %s", json_string_value(kv));
    if (!json_is_array(kv))
        return unsupported(c, "'%s' must be a string or a list of strings", "type");
    for (size_t i = 0; i < json_array_size(kv); i++)
        if (json_is_string(json_array_get(kv, i)) &&
            has_type(v, json_string_value(json_array_get(kv, i))))
            return 0;
    return fail(c, "not of any of the types listed");
}

static int kw_enum(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    for (size_t i = 0; i < json_array_size(kv); i++)
        if (json_eq(json_array_get(kv, i), v))
            return 0;
    return fail(c, "not one of the 'enum' values");
}

static int kw_const(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    return json_eq(kv, v) ? 0 : fail(c, "not the 'const' value");
}

static int kw_all_of(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    for (size_t i = 0; i < json_array_size(kv); i++) {
        int rc = check(c, json_array_get(kv, i), v);
        if (rc)
            return rc;
    }
    return 0;
}

/* anyOf and oneOf: how many branches v matches, up to stop. */
static int matches(chk_t *c, const json_t *kv, const json_t *v, size_t stop, size_t *n)
{
    *n = 0;
    for (size_t i = 0; i < json_array_size(kv) && *n < stop; i++) {
        int rc = quietly(c, json_array_get(kv, i), v);
        if (hard(rc))
            return rc;
        *n += !rc;
    }
    return 0;
}

static int kw_any_of(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    size_t n;
    int rc = matches(c, kv, v, 1, &n);
    return rc ? rc : n ? 0 : fail(c, "matches no branch of 'anyOf'");
}

static int kw_one_of(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    size_t n;
    int rc = matches(c, kv, v, 2, &n);
    return rc       ? rc
           : n == 1 ? 0
           : n      ? fail(c, "matches more than one branch of 'oneOf'")
                    : fail(c, "matches no branch of 'oneOf'");
}

static int kw_not(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    int rc = quietly(c, kv, v);
    return hard(rc) ? rc : rc ? 0 : fail(c, "matches the 'not' schema");
}

static int kw_if(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    int rc = quietly(c, kv, v);
    if (hard(rc))
        return rc;
    const json_t *next = json_object_get(s, rc ? "else" : "then");
    return next ? check(c, next, v) : 0;
}

/* The target of the $ref string kv in the document (NULL: none), the last
 * 16 resolved kept in c. */
static const json_t *ref_target(chk_t *c, const json_t *kv, bool *in_res)
{
    const char *r = json_string_value(kv);
    const json_t *t = NULL;
    *in_res = false;
    for (unsigned i = 0; i < c->n_refs && i < 16 && !t; i++)
        if (c->refs[i].ref == kv && c->refs[i].res == c->res)
            t = c->refs[i].target, *in_res = c->refs[i].in_res;
    if (!t && r && (t = ifd__gconv_resolve_in(c->doc, c->res, r, in_res))) {
        unsigned k = c->n_refs++ % 16;
        c->refs[k].ref = kv, c->refs[k].res = c->res;
        c->refs[k].target = t, c->refs[k].in_res = *in_res;
    }
    return t;
}

static int kw_ref(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    const char *r = json_string_value(kv);
    bool in_res;
    const json_t *t = ref_target(c, kv, &in_res);
    if (!t)
        return unsupported(c, "'$ref' '%.200s' is not a local reference into the schema",
                           r ? r : "");
    const json_t *saved = c->res; /* the target checked in the resource it was found in */
    c->res = in_res ? c->res : NULL;
    int rc = check(c, t, v);
    c->res = saved;
    return rc;
}

static int kw_refused(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s, (void)kv, (void)v;
    return unsupported(c, "%s",
                       "the schema uses a keyword the output check cannot evaluate "
                       "($dynamicRef or $recursiveRef)");
}

/* ---- numbers ---- */

/* minimum / maximum; draft-04's boolean exclusive* sibling makes them strict. */
static int bound(chk_t *c, const json_t *s, const json_t *kv, const json_t *v, int sign,
                 const char *excl, const char *name)
{
    if (!json_is_number(kv))
        return unsupported(c, "'%s' must be a number", name);
    int cmp = num_cmp(v, kv) * sign;
    bool strict = json_is_true(json_object_get(s, excl));
    return cmp > 0 || (cmp == 0 && !strict) ? 0 : fail(c, "outside '%s'", name);
}

static int kw_minimum(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    return bound(c, s, kv, v, 1, "exclusiveMinimum", "minimum");
}

static int kw_maximum(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    return bound(c, s, kv, v, -1, "exclusiveMaximum", "maximum");
}

/* exclusiveMinimum / exclusiveMaximum as numbers (draft-06 on). */
static int kw_excl(chk_t *c, const json_t *kv, const json_t *v, int sign, const char *name)
{
    if (json_is_boolean(kv))
        return 0; /* draft-04's form, read by bound() */
    if (!json_is_number(kv))
        return unsupported(c, "'%s' must be a number", name);
    return num_cmp(v, kv) * sign > 0 ? 0 : fail(c, "outside '%s'", name);
}

static int kw_excl_min(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    return kw_excl(c, kv, v, 1, "exclusiveMinimum");
}

static int kw_excl_max(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    return kw_excl(c, kv, v, -1, "exclusiveMaximum");
}

static int kw_multiple_of(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    if (!json_is_number(kv) || json_number_value(kv) <= 0)
        return unsupported(c, "'%s' must be a number above 0", "multipleOf");
    if (json_is_integer(kv) && json_is_integer(v))
        return json_integer_value(v) % json_integer_value(kv) == 0
                   ? 0
                   : fail(c, "not a multiple of %lld", (long long)json_integer_value(kv));
    double q = json_number_value(v) / json_number_value(kv);
    bool ok = isfinite(q) && fabs(q - nearbyint(q)) <= 1e-9 * fmax(1.0, fabs(q));
    return ok ? 0 : fail(c, "not a multiple of %g", json_number_value(kv));
}

/* ---- strings ---- */

static long long utf8_chars(const char *p, size_t n)
{
    long long k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

static int length(chk_t *c, const json_t *kv, const json_t *v, int sign, const char *name)
{
    long long n = count_of(kv);
    if (n < 0)
        return unsupported(c, "'%s' must be a non-negative integer", name);
    long long have = utf8_chars(json_string_value(v), json_string_length(v));
    return (have - n) * sign >= 0 ? 0 : fail(c, "length %lld outside '%s'", have, name);
}

static int kw_min_length(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    return length(c, kv, v, 1, "minLength");
}

static int kw_max_length(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    return length(c, kv, v, -1, "maxLength");
}

static int kw_pattern(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    if (!json_is_string(kv))
        return unsupported(c, "'%s' must be a string", "pattern");
    bool found;
    int rc =
        re_search(c, json_string_value(kv), json_string_length(kv), json_string_value(v),
                  json_string_length(v), &found);
    return rc ? rc : found ? 0 : fail(c, "does not match 'pattern' %.100s", json_string_value(kv));
}

/* The formats the grammar enforces (schema_format.h), asserted with the
 * standards' definitions; any other format is an annotation. */
static int kw_format(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    const ifd_schema_format_t *f = ifd_schema_format_find(json_string_value(kv));
    if (!f || f->check(json_string_value(v), json_string_length(v)))
        return 0;
    return fail(c, "not a valid '%s' ('format')", f->name);
}

/* ---- arrays ---- */

static int items_from(chk_t *c, const json_t *sub, const json_t *v, size_t from)
{
    for (size_t i = from; i < json_array_size(v); i++) {
        size_t was = push_index(c, i);
        int rc = check(c, sub, json_array_get(v, i));
        pop(c, was);
        if (rc)
            return rc;
    }
    return 0;
}

static int kw_prefix_items(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    for (size_t i = 0; i < json_array_size(kv) && i < json_array_size(v); i++) {
        size_t was = push_index(c, i);
        int rc = check(c, json_array_get(kv, i), json_array_get(v, i));
        pop(c, was);
        if (rc)
            return rc;
    }
    return 0;
}

/* items: a schema for every item (past prefixItems'), or draft-04's tuple
 * followed by additionalItems. */
static int kw_items(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    if (!json_is_array(kv))
        return items_from(c, kv, v, json_array_size(json_object_get(s, "prefixItems")));
    int rc = kw_prefix_items(c, s, kv, v);
    const json_t *more = json_object_get(s, "additionalItems");
    return rc || !more ? rc : items_from(c, more, v, json_array_size(kv));
}

static int kw_min_items(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    long long n = count_of(kv);
    return n < 0 ? unsupported(c, "'%s' must be a non-negative integer", "minItems")
           : (long long)json_array_size(v) >= n ? 0
                                                : fail(c, "fewer items than 'minItems' %lld", n);
}

static int kw_max_items(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    long long n = count_of(kv);
    return n < 0 ? unsupported(c, "'%s' must be a non-negative integer", "maxItems")
           : (long long)json_array_size(v) <= n ? 0
                                                : fail(c, "more items than 'maxItems' %lld", n);
}

static int kw_unique_items(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    if (!json_is_true(kv))
        return 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        for (size_t j = i + 1; j < json_array_size(v); j++) {
            if (++c->steps > MAX_STEPS) {
                unsupported(c, "%s", "the output check's work limit was reached");
                return IFD_ETOOBIG;
            }
            if (json_eq(json_array_get(v, i), json_array_get(v, j)))
                return fail(c, "items %zu and %zu are equal ('uniqueItems')", i, j);
        }
    return 0;
}

/* contains with minContains (default 1) and maxContains. */
static int kw_contains(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    long long lo = 1, hi = -1;
    const json_t *mn = json_object_get(s, "minContains"), *mx = json_object_get(s, "maxContains");
    if ((mn && (lo = count_of(mn)) < 0) || (mx && (hi = count_of(mx)) < 0))
        return unsupported(c, "'%s' must be a non-negative integer", "minContains/maxContains");
    long long n = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        int rc = quietly(c, kv, json_array_get(v, i));
        if (hard(rc))
            return rc;
        n += !rc;
    }
    if (n < lo)
        return fail(c, "%lld items match 'contains', fewer than %lld", n, lo);
    return hi < 0 || n <= hi ? 0 : fail(c, "%lld items match 'contains', more than %lld", n, hi);
}

/* ---- objects ---- */

static int kw_properties(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    const char *k;
    const json_t *sub;
    json_object_foreach((json_t *)kv, k, sub)
    {
        const json_t *x = json_object_get(v, k);
        if (!x)
            continue;
        size_t was = push_key(c, k);
        int rc = check(c, sub, x);
        pop(c, was);
        if (rc)
            return rc;
    }
    return 0;
}

/* Each member whose name the pattern finds: *hit set, checked against sub
 * (NULL: only *hit). */
static int pattern_members(chk_t *c, const char *pat, const json_t *sub, const json_t *v,
                           const char *name, bool *hit)
{
    bool found;
    int rc = re_search(c, pat, strlen(pat), name, strlen(name), &found);
    if (rc || !found)
        return rc;
    *hit = true;
    if (!sub)
        return 0;
    size_t was = push_key(c, name);
    rc = check(c, sub, json_object_get(v, name));
    pop(c, was);
    return rc;
}

static int kw_pattern_properties(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    const char *name, *pat;
    const json_t *x, *sub;
    json_object_foreach((json_t *)v, name, x)
    {
        json_object_foreach((json_t *)kv, pat, sub)
        {
            bool hit = false;
            int rc = pattern_members(c, pat, sub, v, name, &hit);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int kw_additional_properties(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *pp = json_object_get(s, "patternProperties");
    const char *name, *pat;
    const json_t *x, *unused;
    json_object_foreach((json_t *)v, name, x)
    {
        bool hit = json_object_get(props, name) != NULL;
        json_object_foreach((json_t *)pp, pat, unused)
        {
            int rc = hit ? 0 : pattern_members(c, pat, NULL, v, name, &hit);
            if (rc)
                return rc;
        }
        if (hit)
            continue;
        size_t was = push_key(c, name);
        int rc =
            json_is_false(kv) ? fail(c, "not allowed ('additionalProperties')") : check(c, kv, x);
        pop(c, was);
        if (rc)
            return rc;
    }
    return 0;
}

static int required_names(chk_t *c, const json_t *names, const json_t *v, const char *why)
{
    for (size_t i = 0; i < json_array_size(names); i++) {
        const char *n = json_string_value(json_array_get(names, i));
        if (n && !json_object_get(v, n))
            return fail(c, "'%.100s' is missing (%s)", n, why);
    }
    return 0;
}

static int kw_required(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    return json_is_array(kv) ? required_names(c, kv, v, "required") : 0; /* draft-03's bool */
}

static int kw_min_properties(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    long long n = count_of(kv);
    return n < 0 ? unsupported(c, "'%s' must be a non-negative integer", "minProperties")
           : (long long)json_object_size(v) >= n ? 0
                                                 : fail(c, "fewer members than 'minProperties'");
}

static int kw_max_properties(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    long long n = count_of(kv);
    return n < 0 ? unsupported(c, "'%s' must be a non-negative integer", "maxProperties")
           : (long long)json_object_size(v) <= n ? 0
                                                 : fail(c, "more members than 'maxProperties'");
}

static int kw_property_names(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    const char *name;
    const json_t *x;
    json_object_foreach((json_t *)v, name, x)
    {
        json_t *n = json_string(name);
        if (!n)
            return unsupported(c, "%s", "out of memory");
        size_t was = push_key(c, name);
        int rc = check(c, kv, n);
        pop(c, was);
        json_decref(n);
        if (rc)
            return rc;
    }
    return 0;
}

/* dependentRequired, dependentSchemas and draft-04's dependencies (either). */
static int kw_dependencies(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    (void)s;
    const char *name;
    const json_t *dep;
    json_object_foreach((json_t *)kv, name, dep)
    {
        if (!json_object_get(v, name))
            continue;
        int rc = json_is_array(dep) ? required_names(c, dep, v, "a dependency") : check(c, dep, v);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- unevaluatedProperties / unevaluatedItems (2019-09, 2020-12) ---- */

static int evaluated(chk_t *c, const json_t *s, const json_t *v, bool props, bool self, bool *ev);

/* evaluated() of each schema in the array l (all: every one; else only
 * those v passes, as anyOf / oneOf branches). */
static int evaluated_of(chk_t *c, const json_t *l, const json_t *v, bool props, bool all,
                        bool *ev)
{
    for (size_t i = 0; i < json_array_size(l); i++) {
        const json_t *b = json_array_get(l, i);
        int rc = all ? 0 : quietly(c, b, v);
        if (hard(rc))
            return rc;
        if (!rc && (rc = evaluated(c, b, v, props, false, ev)))
            return rc;
    }
    return 0;
}

/* Marks ev[i] for each member of the object v (props: the i-th in its
 * iteration order) or item of the array v that s evaluates: the members of
 * properties, patternProperties, additionalProperties and (unless self: s's
 * own) unevaluatedProperties; the items of prefixItems, items,
 * additionalItems, contains (those that match) and unevaluatedItems — in s
 * and, where they pass, in its in-place subschemas: allOf, the anyOf /
 * oneOf branches v satisfies, if with then or else as if decides,
 * dependentSchemas of the names present, $ref. 0 or a hard error. */
static int evaluated(chk_t *c, const json_t *s, const json_t *v, bool props, bool self, bool *ev)
{
    if (!json_is_object(s))
        return 0;
    if (++c->steps > MAX_STEPS || c->depth >= MAX_DEPTH) {
        unsupported(c, "%s", "the output check's work or depth limit was reached");
        return IFD_ETOOBIG;
    }
    int rc = 0;
    size_t n = props ? json_object_size(v) : json_array_size(v), i = 0;
    c->depth++;
    if (props) {
        const json_t *pr = json_object_get(s, "properties"), *pp = json_object_get(s, "patternProperties");
        bool all = json_object_get(s, "additionalProperties") ||
                   (!self && json_object_get(s, "unevaluatedProperties"));
        const char *name, *pat;
        const json_t *x, *unused;
        json_object_foreach((json_t *)v, name, x)
        {
            bool hit = all || json_object_get(pr, name);
            json_object_foreach((json_t *)pp, pat, unused)
            {
                if (!rc && !hit)
                    rc = pattern_members(c, pat, NULL, v, name, &hit);
            }
            ev[i++] |= hit;
        }
        const char *k;
        const json_t *d;
        for (int j = 0; j < 2 && !rc; j++) {
            json_object_foreach(json_object_get(s, j ? "dependencies" : "dependentSchemas"), k, d)
            {
                if (!rc && json_object_get(v, k) && !json_is_array(d))
                    rc = evaluated(c, d, v, props, false, ev);
            }
        }
    } else {
        const json_t *it = json_object_get(s, "items"), *con = json_object_get(s, "contains");
        size_t k = json_array_size(json_object_get(s, "prefixItems"));
        if (json_is_array(it))
            k = json_object_get(s, "additionalItems") ? n : json_array_size(it);
        else if (it || (!self && json_object_get(s, "unevaluatedItems")))
            k = n;
        for (i = 0; i < n; i++) {
            ev[i] |= i < k;
            int q = con && !ev[i] ? quietly(c, con, json_array_get(v, i)) : IFD_EINVAL;
            if (hard(q)) {
                rc = q;
                break;
            }
            ev[i] |= !q;
        }
    }
    if (!rc)
        rc = evaluated_of(c, json_object_get(s, "allOf"), v, props, true, ev);
    if (!rc)
        rc = evaluated_of(c, json_object_get(s, "anyOf"), v, props, false, ev);
    if (!rc)
        rc = evaluated_of(c, json_object_get(s, "oneOf"), v, props, false, ev);
    const json_t *ifs = json_object_get(s, "if"), *ref = json_object_get(s, "$ref");
    if (!rc && ifs) {
        int q = quietly(c, ifs, v);
        if (hard(q))
            rc = q;
        else if (!q && !(rc = evaluated(c, ifs, v, props, false, ev)))
            rc = evaluated(c, json_object_get(s, "then"), v, props, false, ev);
        else if (q)
            rc = evaluated(c, json_object_get(s, "else"), v, props, false, ev);
    }
    if (!rc && ref) {
        bool in_res;
        const json_t *t = ref_target(c, ref, &in_res), *saved = c->res;
        c->res = in_res ? c->res : NULL;
        rc = evaluated(c, t, v, props, false, ev);
        c->res = saved;
    }
    c->depth--;
    return rc;
}

/* The members (items) s does not evaluate, each checked against kv. */
static int unevaluated(chk_t *c, const json_t *s, const json_t *kv, const json_t *v, bool props)
{
    size_t n = props ? json_object_size(v) : json_array_size(v);
    bool *ev = calloc(n ? n : 1, sizeof *ev);
    if (!ev) {
        unsupported(c, "%s", "out of memory");
        return IFD_ENOMEM;
    }
    int rc = evaluated(c, s, v, props, true, ev);
    const char *name;
    const json_t *x;
    size_t i = 0;
    const char *kw = props ? "unevaluatedProperties" : "unevaluatedItems";
    json_object_foreach((json_t *)(props ? v : NULL), name, x)
    {
        if (rc || ev[i++])
            continue;
        size_t was = push_key(c, name);
        rc = json_is_false(kv) ? fail(c, "not allowed ('%s')", kw) : check(c, kv, x);
        pop(c, was);
    }
    for (i = 0; !props && !rc && i < n; i++) {
        if (ev[i])
            continue;
        size_t was = push_index(c, i);
        rc = json_is_false(kv) ? fail(c, "not allowed ('%s')", kw)
                               : check(c, kv, json_array_get(v, i));
        pop(c, was);
    }
    free(ev);
    return rc;
}

static int kw_unevaluated_properties(chk_t *c, const json_t *s, const json_t *kv,
                                     const json_t *v)
{
    return unevaluated(c, s, kv, v, true);
}

static int kw_unevaluated_items(chk_t *c, const json_t *s, const json_t *kv, const json_t *v)
{
    return unevaluated(c, s, kv, v, false);
}

/* ---- the table ---- */

typedef enum { ANY, NUM, STR, ARR, OBJ } applies_t;

static const struct {
    const char *key;
    applies_t to;
    kw_fn fn;
} KEYWORDS[] = {
    {"type", ANY, kw_type},
    {"enum", ANY, kw_enum},
    {"const", ANY, kw_const},
    {"$ref", ANY, kw_ref},
    {"allOf", ANY, kw_all_of},
    {"anyOf", ANY, kw_any_of},
    {"oneOf", ANY, kw_one_of},
    {"not", ANY, kw_not},
    {"if", ANY, kw_if},
    {"$dynamicRef", ANY, kw_refused},
    {"$recursiveRef", ANY, kw_refused},
    {"minimum", NUM, kw_minimum},
    {"maximum", NUM, kw_maximum},
    {"exclusiveMinimum", NUM, kw_excl_min},
    {"exclusiveMaximum", NUM, kw_excl_max},
    {"multipleOf", NUM, kw_multiple_of},
    {"minLength", STR, kw_min_length},
    {"maxLength", STR, kw_max_length},
    {"pattern", STR, kw_pattern},
    {"format", STR, kw_format},
    {"prefixItems", ARR, kw_prefix_items},
    {"items", ARR, kw_items},
    {"minItems", ARR, kw_min_items},
    {"maxItems", ARR, kw_max_items},
    {"uniqueItems", ARR, kw_unique_items},
    {"contains", ARR, kw_contains},
    {"properties", OBJ, kw_properties},
    {"patternProperties", OBJ, kw_pattern_properties},
    {"additionalProperties", OBJ, kw_additional_properties},
    {"required", OBJ, kw_required},
    {"minProperties", OBJ, kw_min_properties},
    {"maxProperties", OBJ, kw_max_properties},
    {"propertyNames", OBJ, kw_property_names},
    {"dependentRequired", OBJ, kw_dependencies},
    {"dependentSchemas", OBJ, kw_dependencies},
    {"dependencies", OBJ, kw_dependencies},
    /* last: an earlier keyword's failure is the message */
    {"unevaluatedProperties", OBJ, kw_unevaluated_properties},
    {"unevaluatedItems", ARR, kw_unevaluated_items},
};

static applies_t kind_of(const json_t *v)
{
    return json_is_number(v)   ? NUM
           : json_is_string(v) ? STR
           : json_is_array(v)  ? ARR
           : json_is_object(v) ? OBJ
                               : ANY;
}

static int check(chk_t *c, const json_t *s, const json_t *v)
{
    if (json_is_true(s))
        return 0;
    if (json_is_false(s))
        return fail(c, "no value is allowed here (a false schema)");
    if (!json_is_object(s))
        return unsupported(c, "%s", "a schema must be an object or a boolean");
    if (++c->steps > MAX_STEPS || c->depth >= MAX_DEPTH) {
        unsupported(c, "%s", "the output check's work or depth limit was reached");
        return IFD_ETOOBIG;
    }
    if (json_is_null(v) && json_is_true(json_object_get(s, "nullable")))
        return 0;
    applies_t kind = kind_of(v);
    const json_t *saved = c->res; /* an embedded resource: its fragments are its own */
    const json_t *res = ifd__gconv_resource_cached(c->doc, s, c->res_seen, &c->n_res_seen);
    if (res)
        c->res = res;
    c->depth++;
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++) {
        if (KEYWORDS[i].to != ANY && KEYWORDS[i].to != kind)
            continue;
        const json_t *kv = json_object_get(s, KEYWORDS[i].key);
        if (kv)
            rc = KEYWORDS[i].fn(c, s, kv, v);
    }
    c->depth--;
    c->res = saved;
    return rc;
}

int ifd_schema_check(const json_t *schema, const json_t *v, char *err, size_t errlen)
{
    chk_t c = {.doc = schema, .err = err, .errlen = errlen};
    if (errlen)
        err[0] = '\0';
    return check(&c, schema, v);
}

int ifd_schema_check_text(const json_t *schema, const char *text, size_t n, char *err,
                          size_t errlen)
{
    json_error_t je;
    json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) {
        bool range = json_error_code(&je) == json_error_numeric_overflow;
        if (errlen)
            snprintf(err, errlen, "(the value): %s (%s)",
                     range ? "a number jansson cannot hold" : "not JSON", je.text);
        return range ? IFD_ENOTSUP : IFD_EINVAL;
    }
    int rc = ifd_schema_check(schema, v, err, errlen);
    json_decref(v);
    return rc;
}

/* ---- what the check can evaluate ---- */

static int compiles(chk_t *c, const char *pat, size_t pn)
{
    bool found;
    return re_search(c, pat, pn, "", 0, &found);
}

static int supported(chk_t *c, const json_t *s)
{
    if (++c->steps > MAX_STEPS || c->depth >= MAX_DEPTH) {
        unsupported(c, "%s", "the schema is too large or deep for the output check");
        return IFD_ENOTSUP;
    }
    if (json_is_array(s)) {
        for (size_t i = 0; i < json_array_size(s); i++)
            TRY(supported(c, json_array_get(s, i)));
        return 0;
    }
    if (!json_is_object(s))
        return 0;
    static const char *const never[] = {"$dynamicRef", "$recursiveRef"};
    static const char *const values[] = {"enum", "const", "default", "examples"};
    const char *k;
    const json_t *v;
    const json_t *saved = c->res,
                 *res = ifd__gconv_resource_cached(c->doc, s, c->res_seen, &c->n_res_seen);
    if (res)
        c->res = res;
    c->depth++;
    int rc = 0;
    bool in_res;
    json_object_foreach((json_t *)s, k, v)
    {
        bool skip = false;
        for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
            skip |= strcmp(k, values[i]) == 0;
        for (size_t i = 0; !rc && i < sizeof never / sizeof never[0]; i++)
            if (strcmp(k, never[i]) == 0)
                rc = unsupported(c, "'%s' cannot be checked after generation", k);
        if (!rc && strcmp(k, "$ref") == 0 && json_is_string(v) &&
            !ifd__gconv_resolve_in(c->doc, c->res, json_string_value(v), &in_res))
            rc = unsupported(c, "'$ref' '%.200s' is not a local reference into the schema",
                             json_string_value(v));
        if (!rc && strcmp(k, "pattern") == 0 && json_is_string(v))
            rc = compiles(c, json_string_value(v), json_string_length(v));
        if (!rc && strcmp(k, "patternProperties") == 0 && json_is_object(v)) {
            const char *pat;
            const json_t *unused;
            json_object_foreach((json_t *)v, pat, unused)
            {
                if (!rc)
                    rc = compiles(c, pat, strlen(pat));
            }
        }
        if (!rc && !skip)
            rc = supported(c, v);
        if (rc)
            break;
    }
    c->depth--;
    c->res = saved;
    return rc;
}

int ifd_schema_check_supported(const json_t *schema, char *err, size_t errlen)
{
    chk_t c = {.doc = schema, .err = err, .errlen = errlen};
    if (errlen)
        err[0] = '\0';
    return supported(&c, schema);
}
