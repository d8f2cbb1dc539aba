/*
 * grammar_conv_merge.c — allOf, and the siblings of $ref / anyOf / oneOf, as
 * one schema (see grammar_conv_impl.h: ifd__gconv_merge). JSON Schema says a
 * value must satisfy every keyword of a schema object, so
 *
 *   {"$ref": "#/$defs/A", "required": ["x"]}  = A ∩ {"required": ["x"]}
 *   {"allOf": [A, B], "type": "object"}        = A ∩ B ∩ {"type": "object"}
 *   {"anyOf": [A, B], "required": ["x"]}       = anyOf [A ∩ R, B ∩ R]
 *
 * The intersection of two schema objects is computed keyword by keyword:
 * types intersect, enum/const values intersect, lower bounds take the
 * larger and upper bounds the smaller, required lists unite, properties
 * unite (a name both define gets {"allOf": [a, b]}, merged in turn when the
 * converter reaches it; a name only one side defines must also satisfy the
 * other side's additionalProperties: false drops it, or refuses it when it
 * is required), items / additionalProperties / propertyNames become allOf of
 * both, integer multipleOf the least common multiple. Two different values
 * of any other constraining keyword (two patterns, two formats, anyOf on
 * both sides) are IFD_ENOTSUP naming the keyword; annotations keep the
 * first side's value. A $ref inside allOf is resolved (cycles stop at the
 * converter's depth limit).
 */
#include "error.h"
#include "grammar_conv_impl.h"

#include <stdlib.h>
#include <string.h>

static int oom(conv_t *c)
{
    return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
}

static bool has_constraint(const json_t *s, const char *skip1, const char *skip2)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (strcmp(k, skip1) && strcmp(k, skip2) && ifd__gconv_constrains(k))
            return true;
    }
    return false;
}

/* ---- type ------------------------------------------------------------------------------ */

/* Bit per JSON Schema type; "integer" is a subset of "number". */
static const char *const TYPES[] = {"null",   "boolean", "object", "array",
                                    "number", "string",  "integer"};
enum { T_NUMBER = 1 << 4, T_INTEGER = 1 << 6, T_ALL = (1 << 7) - 1 };

static int type_bits(conv_t *c, const json_t *t, unsigned *out)
{
    *out = 0;
    for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
        const char *n = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        size_t j = 0;
        while (n && j < sizeof TYPES / sizeof TYPES[0] && strcmp(n, TYPES[j]))
            j++;
        if (!n || j == sizeof TYPES / sizeof TYPES[0])
            return ifd__gconv_err(c, IFD_ENOTSUP, "'type' must name JSON Schema types");
        *out |= 1u << j;
    }
    if (*out & T_NUMBER)
        *out |= T_INTEGER;
    return 0;
}

static int merge_type(conv_t *c, const json_t *a, const json_t *b, json_t **out)
{
    unsigned ta, tb;
    TRY(type_bits(c, a, &ta));
    TRY(type_bits(c, b, &tb));
    unsigned t = ta & tb;
    if (t & T_NUMBER && !((ta & T_NUMBER) && (tb & T_NUMBER)))
        t &= ~(unsigned)T_NUMBER; /* number ∩ integer = integer */
    if (!t)
        return ifd__gconv_unsat(c, "'allOf': no 'type' satisfies every member");
    json_t *l = json_array();
    for (size_t j = 0; l && j < sizeof TYPES / sizeof TYPES[0]; j++)
        if ((t >> j & 1) && !(j == 6 && (t & T_NUMBER)) &&
            json_array_append_new(l, json_string(TYPES[j])))
            json_decref(l), l = NULL;
    if (!l)
        return oom(c);
    *out = l;
    return 0;
}

/* ---- values ---------------------------------------------------------------------------- */

/* const/enum as a list of values. */
static json_t *values_of(const json_t *s)
{
    const json_t *cst = json_object_get(s, "const");
    if (cst)
        return json_pack("[O]", cst);
    const json_t *en = json_object_get(s, "enum");
    return en && json_is_array(en) ? json_copy((json_t *)en) : NULL;
}

static int merge_values(conv_t *c, json_t *r, const json_t *a, const json_t *b)
{
    json_t *va = values_of(a), *vb = values_of(b);
    if (!va || !vb) {
        json_decref(va);
        json_decref(vb);
        return 0; /* one side has none: r keeps what it has */
    }
    json_t *both = json_array();
    size_t i, j;
    json_t *x, *y;
    json_array_foreach(va, i, x)
    {
        json_array_foreach(vb, j, y)
        {
            if (json_equal(x, y)) {
                json_array_append(both, x);
                break;
            }
        }
    }
    json_decref(va);
    json_decref(vb);
    if (!both)
        return oom(c);
    if (!json_array_size(both)) {
        json_decref(both);
        return ifd__gconv_unsat(c, "'allOf': no 'enum'/'const' value satisfies both");
    }
    json_object_del(r, "const");
    return json_object_set_new(r, "enum", both) ? oom(c) : 0;
}

/* ---- objects --------------------------------------------------------------------------- */

static json_t *all_of(const json_t *a, const json_t *b)
{
    if (json_is_true(a) || json_equal((json_t *)a, (json_t *)b))
        return json_incref((json_t *)b);
    if (json_is_true(b))
        return json_incref((json_t *)a);
    if (json_is_false(a) || json_is_false(b))
        return json_false();
    return json_pack("{s:[O,O]}", "allOf", a, b);
}

/* Properties one side defines and the other does not: they must satisfy the
 * other side's additionalProperties (props: r's merged properties). */
static int cross_additional(conv_t *c, json_t *props, json_t *req, const json_t *mine,
                            const json_t *other)
{
    const json_t *addl = json_object_get(other, "additionalProperties");
    const json_t *op = json_object_get(other, "properties");
    if (!addl || json_is_true(addl) || !json_is_object(mine))
        return 0;
    if (json_object_get(other, "patternProperties") && c->loose) {
        c->approx = true; /* mine's names are not checked against other's here */
        return 0;
    }
    if (json_object_get(other, "patternProperties"))
        return ifd__gconv_err(c, IFD_ENOTSUP,
                              "'allOf' of 'properties' with 'patternProperties' and "
                              "'additionalProperties'");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)mine, k, v)
    {
        if (op && json_object_get(op, k))
            continue;
        if (json_is_false(addl)) {
            size_t i;
            json_t *r;
            json_array_foreach(req, i, r)
            {
                if (json_is_string(r) && strcmp(json_string_value(r), k) == 0)
                    return ifd__gconv_unsat(c,
                                            "'allOf': '%.100s' is required but "
                                            "'additionalProperties': false forbids it",
                                            k);
            }
            json_object_del(props, k);
            continue;
        }
        json_t *m = all_of(json_object_get(props, k), addl);
        if (!m || json_object_set_new(props, k, m))
            return oom(c);
    }
    return 0;
}

static int merge_objects(conv_t *c, json_t *r, const json_t *a, const json_t *b)
{
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    json_t *props = json_object(), *req = json_array();
    if (!props || !req)
        goto oom;
    const char *k;
    json_t *v;
    if (pa && json_object_update(props, (json_t *)pa))
        goto oom;
    if (pb) {
        json_object_foreach((json_t *)pb, k, v)
        {
            const json_t *old = json_object_get(props, k);
            json_t *m = old ? all_of(old, v) : json_incref(v);
            if (!m || json_object_set_new(props, k, m))
                goto oom;
        }
    }
    const json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
    for (int side = 0; side < 2; side++) {
        const json_t *l = side ? rb : ra;
        size_t i;
        json_array_foreach(l, i, v)
        {
            size_t j;
            json_t *w;
            bool dup = false;
            json_array_foreach(req, j, w) dup |= json_equal(v, w);
            if (!dup && json_array_append(req, v))
                goto oom;
        }
    }
    int rc = cross_additional(c, props, req, pb, a);
    if (!rc)
        rc = cross_additional(c, props, req, pa, b);
    if (!rc && (pa || pb) && json_object_set(r, "properties", props))
        rc = oom(c);
    if (!rc && (ra || rb) && json_object_set(r, "required", req))
        rc = oom(c);
    json_decref(props);
    json_decref(req);
    return rc;
oom:
    json_decref(props);
    json_decref(req);
    return oom(c);
}

/* ---- keywords -------------------------------------------------------------------------- */

static long long gcd(long long a, long long b)
{
    while (b) {
        long long t = a % b;
        a = b, b = t;
    }
    return a;
}

/* Two values of keyword k that cannot be intersected: a loose conversion
 * keeps r's (a superset; the other is checked at the end), a strict one is
 * IFD_ENOTSUP. */
static int keep_one(conv_t *c, const char *k, const char *why)
{
    if (c->loose) {
        c->approx = true;
        return 0;
    }
    return ifd__gconv_err(c, IFD_ENOTSUP, "'allOf' of two %s '%.60s'", why, k);
}

/* One keyword both sides have (va from r, vb from b), into r. */
static int merge_key(conv_t *c, json_t *r, const char *k, const json_t *va, const json_t *vb)
{
    static const char *const lower[] = {"minimum",  "exclusiveMinimum", "minLength",
                                        "minItems", "minProperties",    "minContains"};
    static const char *const upper[] = {"maximum",  "exclusiveMaximum", "maxLength",
                                        "maxItems", "maxProperties",    "maxContains"};
    static const char *const nested[] = {"items", "additionalProperties", "propertyNames",
                                         "additionalItems", "contains"};
    if (json_equal((json_t *)va, (json_t *)vb) || !ifd__gconv_constrains(k))
        return 0;
    for (int side = 0; side < 2; side++) {
        const char *const *l = side ? upper : lower;
        for (size_t i = 0; i < 6; i++) {
            if (strcmp(k, l[i]))
                continue;
            if (!json_is_number(va) || !json_is_number(vb))
                return keep_one(c, k, "different");
            double x = json_number_value(va), y = json_number_value(vb);
            if (side ? y < x : y > x)
                return json_object_set(r, k, (json_t *)vb) ? oom(c) : 0;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof nested / sizeof nested[0]; i++) {
        if (strcmp(k, nested[i]) == 0 && !json_is_array(va) && !json_is_array(vb)) {
            json_t *m = all_of(va, vb);
            return !m || json_object_set_new(r, k, m) ? oom(c) : 0;
        }
    }
    if (strcmp(k, "multipleOf") == 0 && json_is_integer(va) && json_is_integer(vb) &&
        json_integer_value(va) > 0 && json_integer_value(vb) > 0) {
        long long x = json_integer_value(va), y = json_integer_value(vb);
        long long g = gcd(x, y);
        if (x / g > (1LL << 40) / (y > 0 ? y : 1))
            return keep_one(c, k, "too large");
        return json_object_set_new(r, k, json_integer(x / g * y)) ? oom(c) : 0;
    }
    return keep_one(c, k, "different");
}

static bool is_contains_key(const char *k)
{
    return !strcmp(k, "contains") || !strcmp(k, "minContains") || !strcmp(k, "maxContains");
}

/* contains with its minContains / maxContains is one constraint ("that
 * many items match"), which the converter enforces (array_body): two
 * different ones cannot be intersected (an allOf of their schemas would
 * ask one item to match both), so a loose merge keeps neither — a
 * superset, the check at the end has them — and min/maxContains without
 * contains (no-ops) never pair with another side's contains. r is a's
 * copy. */
static int merge_contains(conv_t *c, json_t *r, const json_t *a, const json_t *b)
{
    const json_t *ca = json_object_get(a, "contains"), *cb = json_object_get(b, "contains");
    if (!cb)
        return 0; /* b's minContains / maxContains alone are no-ops */
    if (!ca) {
        json_object_del(r, "minContains");
        json_object_del(r, "maxContains");
        static const char *const keys[] = {"contains", "minContains", "maxContains"};
        for (size_t i = 0; i < 3; i++) {
            const json_t *v = json_object_get(b, keys[i]);
            if (v && json_object_set(r, keys[i], (json_t *)v))
                return oom(c);
        }
        return 0;
    }
    if (!json_equal((json_t *)ca, (json_t *)cb)) {
        int rc = keep_one(c, "contains", "different");
        json_object_del(r, "contains");
        json_object_del(r, "minContains");
        json_object_del(r, "maxContains");
        return rc;
    }
    /* the same contains: the larger minimum, the smaller maximum (one side's
     * minContains beside the other's default 1 is taken as it is: at
     * worst a looser bound) */
    static const char *const bounds[] = {"minContains", "maxContains"};
    for (size_t i = 0; i < 2; i++) {
        const json_t *va = json_object_get(a, bounds[i]), *vb = json_object_get(b, bounds[i]);
        int rc = !vb  ? 0
                 : va ? merge_key(c, r, bounds[i], va, vb)
                      : (json_object_set(r, bounds[i], (json_t *)vb) ? oom(c) : 0);
        if (rc)
            return rc;
    }
    return 0;
}

/* r (a copy of a) ∩ b, into r. */
static int merge_into(conv_t *c, json_t *r, const json_t *b)
{
    json_t *a = json_copy(r);
    if (!a)
        return oom(c);
    int rc = merge_contains(c, r, a, b);
    const char *k;
    json_t *vb;
    json_object_foreach((json_t *)b, k, vb)
    {
        if (rc)
            break;
        const json_t *va = json_object_get(a, k);
        if (!strcmp(k, "properties") || !strcmp(k, "required") || !strcmp(k, "const") ||
            !strcmp(k, "enum") || is_contains_key(k))
            continue; /* below, or above */
        if (!strcmp(k, "type") && va) {
            json_t *t = NULL;
            rc = merge_type(c, va, vb, &t);
            if (!rc && json_object_set_new(r, "type", t))
                rc = oom(c);
        } else if (!va) {
            rc = json_object_set(r, k, vb) ? oom(c) : 0;
        } else {
            rc = merge_key(c, r, k, va, vb);
        }
        if (rc)
            break;
    }
    if (!rc && (json_object_get(b, "properties") || json_object_get(b, "required") ||
                json_object_get(b, "additionalProperties")))
        rc = merge_objects(c, r, a, b);
    bool vb_has = json_object_get(b, "const") || json_object_get(b, "enum");
    bool va_has = json_object_get(a, "const") || json_object_get(a, "enum");
    if (!rc && vb_has && va_has) {
        rc = merge_values(c, r, a, b);
    } else if (!rc && vb_has) {
        const char *key = json_object_get(b, "const") ? "const" : "enum";
        rc = json_object_set(r, key, json_object_get(b, key)) ? oom(c) : 0;
    }
    json_decref(a);
    return rc;
}

/* ---- the schema's combinators ---------------------------------------------------------- */

static int flatten(conv_t *c, const json_t *s, const json_t *doc, int depth, json_t **out);

/* A member of allOf (or a $ref's target) flattened: a bare {"$ref"} is
 * resolved to its target. */
static int member(conv_t *c, const json_t *m, const json_t *doc, int depth, json_t **out)
{
    if (json_is_true(m) || (json_is_object(m) && !json_object_size(m))) {
        *out = json_object();
        return *out ? 0 : oom(c);
    }
    if (json_is_false(m))
        return ifd__gconv_unsat(c, "a 'false' schema in 'allOf' (nothing can match it)");
    if (!json_is_object(m))
        return ifd__gconv_err(c, IFD_ENOTSUP, "'allOf' members must be schema objects");
    const json_t *ref = json_object_get(m, "$ref");
    if (ref && !has_constraint(m, "$ref", "$defs")) {
        const char *r = json_string_value(ref);
        bool in_res;
        const json_t *t = r ? ifd__gconv_resolve_in(doc, c->res, r, &in_res) : NULL;
        if (!t)
            return ifd__gconv_err(c, IFD_ENOTSUP,
                                  "$ref '%.200s' is not a local reference into the schema",
                                  r ? r : "?");
        return member(c, t, doc, depth + 1, out);
    }
    return flatten(c, m, doc, depth + 1, out);
}

/* Names the value must not have all of (not: {required: names}): the last one
 * r does not require becomes "name": false in r's properties (JSON Schema's
 * own way to forbid a name), which merging keeps and the converter leaves out
 * (a false optional property is never written; a required one is refused). */
static int forbid_names(conv_t *c, json_t *r, const json_t *names)
{
    const json_t *req = json_object_get(r, "required");
    for (size_t i = json_array_size(names); i-- > 0;) {
        const char *n = json_string_value(json_array_get(names, i));
        bool needed = false;
        size_t j;
        json_t *q;
        json_array_foreach(req, j, q) needed |=
            json_is_string(q) && n && !strcmp(json_string_value(q), n);
        if (!n || needed)
            continue;
        json_t *props = json_object_get(r, "properties");
        json_t *copy = json_is_object(props) ? json_copy(props) : json_object();
        if (!copy || json_object_set_new(copy, n, json_false()) ||
            json_object_set_new(r, "properties", copy))
            return oom(c);
        return 0;
    }
    return ifd__gconv_unsat(c, "'not': every name of its 'required' is required here");
}

/* Only these constraining keywords in s. */
static bool only(const json_t *s, const char *k1, const char *k2)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (ifd__gconv_constrains(k) && strcmp(k, k1) && (!k2 || strcmp(k, k2)))
            return false;
    }
    return true;
}

/* not: the forms a grammar can express, folded into r — {} / true (nothing
 * matches), false (everything does), {type: …} (the other types), {required:
 * […]} and anyOf of those (the names left out). Other forms stay in r (and
 * are refused). */
static int fold_not(conv_t *c, json_t *r)
{
    json_t *n = json_incref(json_object_get(r, "not"));
    int rc = 0;
    if (json_is_false(n)) {
        json_object_del(r, "not");
    } else if (json_is_true(n) || (json_is_object(n) && only(n, "", NULL))) {
        rc = ifd__gconv_unsat(c, "'not': {} (nothing can match it)");
    } else if (json_is_object(n) && json_object_get(n, "type") && only(n, "type", NULL)) {
        unsigned t;
        rc = type_bits(c, json_object_get(n, "type"), &t);
        if (!rc && (t & T_INTEGER) && !(t & T_NUMBER))
            goto keep; /* the numbers that are not integers: no grammar here */
        json_t *l = json_array();
        for (size_t j = 0; !rc && l && j < 6; j++)
            if (!(t >> j & 1))
                json_array_append_new(l, json_string(TYPES[j]));
        json_t *m = l ? json_pack("{s:o}", "type", l) : NULL;
        rc = rc                   ? rc
             : !m                 ? oom(c)
             : json_array_size(l) ? 0
                                  : ifd__gconv_unsat(c, "'not' of every type");
        json_object_del(r, "not");
        if (!rc)
            rc = merge_into(c, r, m);
        json_decref(m);
    } else if (json_is_object(n) && only(n, "required", NULL)) {
        json_object_del(r, "not");
        rc = forbid_names(c, r, json_object_get(n, "required"));
    } else if (json_is_object(n) && only(n, "anyOf", NULL) &&
               json_is_array(json_object_get(n, "anyOf"))) {
        const json_t *any = json_object_get(n, "anyOf");
        for (size_t i = 0; i < json_array_size(any); i++) {
            const json_t *b = json_array_get(any, i);
            if (!json_is_object(b) || !only(b, "required", NULL) || !json_object_get(b, "required"))
                goto keep;
        }
        json_object_del(r, "not");
        for (size_t i = 0; !rc && i < json_array_size(any); i++)
            rc = forbid_names(c, r, json_object_get(json_array_get(any, i), "required"));
    }
keep:
    json_decref(n);
    return rc;
}

/* Whether s requires the property name. */
static bool requires(const json_t *s, const char *name)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(s, "required"), i, r)
    {
        if (json_is_string(r) && strcmp(json_string_value(r), name) == 0)
            return true;
    }
    return false;
}

/* dependentSchemas (and draft-04 dependencies with schemas): "when name is
 * present, the value also satisfies the schema". Each schema is merged in
 * whether or not its name is written (valid either way: a value satisfying
 * it as well is still valid); name lists (dependentRequired's form) stay for
 * the object reader. Merged unconditionally, two dependencies may exclude
 * each other (a's schema forbids b, b's forbids a, and an anyOf asks for
 * one of them): the loose conversion then runs again with c->dep_loose
 * (convert() in grammar_conv_schema.c), where a schema whose name is not
 * required is left out of the grammar (llguidance's rule: a superset,
 * c->approx, checked at the end) and one whose name is required is merged
 * (exact: its name is always written). */
static int fold_dependent(conv_t *c, json_t *r, const json_t *doc, int depth)
{
    static const char *const keys[] = {"dependentSchemas", "dependencies"};
    for (size_t d = 0; d < 2; d++) {
        json_t *dep = json_incref(json_object_get(r, keys[d]));
        if (!json_is_object(dep)) {
            json_decref(dep);
            continue;
        }
        json_t *lists = json_object();
        const char *k;
        json_t *v;
        int rc = lists ? 0 : oom(c);
        json_object_foreach(dep, k, v)
        {
            if (rc)
                break;
            if (json_is_array(v)) { /* a name list: kept */
                rc = json_object_set(lists, k, v) ? oom(c) : 0;
                continue;
            }
            if (c->dep_loose && !requires(r, k)) {
                c->approx = true;
                continue;
            }
            json_t *m = NULL;
            rc = member(c, v, doc, depth, &m);
            if (!rc)
                rc = merge_into(c, r, m);
            json_decref(m);
        }
        if (!rc && json_object_size(lists))
            rc = json_object_set(r, keys[d], lists) ? oom(c) : 0;
        else if (!rc)
            json_object_del(r, keys[d]);
        json_decref(lists);
        json_decref(dep);
        if (rc)
            return rc;
    }
    return 0;
}

/* s with $ref (beside constraints) and allOf folded into one object. */
static int flatten(conv_t *c, const json_t *s, const json_t *doc, int depth, json_t **out)
{
    *out = NULL;
    if (depth > IFD__GCONV_MAX_DEPTH)
        return ifd__gconv_err(c, IFD_ETOOBIG,
                              "'allOf'/'$ref' nested deeper than %d levels (a cycle?)",
                              IFD__GCONV_MAX_DEPTH);
    const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    json_t *r = json_copy((json_t *)s);
    if (!r)
        return oom(c);
    int rc = 0;
    if (ref && (all || has_constraint(s, "$ref", "$defs"))) {
        json_object_del(r, "$ref");
        json_t *t = NULL, *wrap = json_pack("{s:O}", "$ref", ref);
        rc = wrap ? member(c, wrap, doc, depth, &t) : oom(c);
        json_decref(wrap);
        if (!rc)
            rc = merge_into(c, r, t);
        json_decref(t);
    }
    if (!rc && all) {
        json_object_del(r, "allOf");
        if (!json_is_array(all) || !json_array_size(all))
            rc = ifd__gconv_err(c, IFD_ENOTSUP, "'allOf' must be a non-empty array");
        for (size_t i = 0; !rc && i < json_array_size(all); i++) {
            json_t *m = NULL;
            rc = member(c, json_array_get(all, i), doc, depth, &m);
            if (!rc)
                rc = merge_into(c, r, m);
            json_decref(m);
        }
    }
    if (!rc)
        rc = fold_dependent(c, r, doc, depth);
    if (!rc && json_object_get(r, "not"))
        rc = fold_not(c, r);
    if (rc) {
        json_decref(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* anyOf/oneOf beside constraints: each branch ∩ the siblings. */
static int distribute(conv_t *c, json_t *r, const json_t *doc)
{
    const char *comb = json_object_get(r, "anyOf") ? "anyOf" : "oneOf";
    const json_t *any = json_object_get(r, comb);
    if (json_object_get(r, "anyOf") && json_object_get(r, "oneOf") && c->loose) {
        c->approx = true; /* anyOf alone: a superset, oneOf checked at the end */
        json_object_del(r, "oneOf");
    }
    if (json_object_get(r, "anyOf") && json_object_get(r, "oneOf"))
        return ifd__gconv_err(c, IFD_ENOTSUP, "'anyOf' and 'oneOf' in one schema");
    if (!json_is_array(any) || !json_array_size(any))
        return ifd__gconv_err(c, IFD_ENOTSUP, "'%s' must be a non-empty array", comb);
    if (!has_constraint(r, comb, "$defs"))
        return 0;
    json_t *sib = json_copy(r), *branches = json_array();
    int rc = sib && branches ? 0 : oom(c);
    if (!rc)
        json_object_del(sib, comb);
    for (size_t i = 0; !rc && i < json_array_size(any); i++) {
        json_t *m = NULL, *x = json_copy(sib);
        rc = x ? member(c, json_array_get(any, i), doc, 0, &m) : oom(c);
        if (!rc)
            rc = merge_into(c, x, m);
        if (!rc && json_array_append(branches, x))
            rc = oom(c);
        json_decref(m);
        json_decref(x);
    }
    if (!rc) { /* r becomes {comb: branches} and its annotations */
        const char *k;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(r, tmp, k, v)
        {
            if (ifd__gconv_constrains(k) && strcmp(k, "$defs"))
                json_object_del(r, k);
        }
        if (json_object_set(r, comb, branches))
            rc = oom(c);
    }
    json_decref(sib);
    json_decref(branches);
    return rc;
}

int ifd__gconv_merge(conv_t *c, const json_t *s, const json_t *doc, json_t **out)
{
    *out = NULL;
    if (!json_is_object(s)) {
        *out = json_incref((json_t *)s);
        return 0;
    }
    const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    bool any = json_object_get(s, "anyOf") || json_object_get(s, "oneOf");
    bool fold = all || json_object_get(s, "not") || json_object_get(s, "dependentSchemas") ||
                json_is_object(json_object_get(s, "dependencies")) ||
                (ref && has_constraint(s, "$ref", "$defs"));
    if (!fold && !any) {
        *out = json_incref((json_t *)s);
        return 0;
    }
    json_t *r = NULL;
    TRY(flatten(c, s, doc, 0, &r));
    int rc = json_object_get(r, "anyOf") || json_object_get(r, "oneOf") ? distribute(c, r, doc) : 0;
    if (rc) {
        json_decref(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* ---- oneOf ----------------------------------------------------------------------------- */

static unsigned types_of(const json_t *s)
{
    unsigned t;
    const json_t *type = json_object_get(s, "type");
    char scratch[8] = "";
    conv_t quiet = {.err = scratch, .errlen = 0};
    if (!type) { /* the types of const / enum values */
        json_t *vals = values_of(s);
        size_t i;
        json_t *v;
        t = vals ? 0 : T_ALL;
        json_array_foreach(vals, i, v)
        {
            static const unsigned bit[] = {
                [JSON_OBJECT] = 1 << 2,     [JSON_ARRAY] = 1 << 3,  [JSON_STRING] = 1 << 5,
                [JSON_INTEGER] = T_INTEGER, [JSON_REAL] = T_NUMBER, [JSON_TRUE] = 1 << 1,
                [JSON_FALSE] = 1 << 1,      [JSON_NULL] = 1};
            t |= bit[json_typeof(v)];
        }
        json_decref(vals);
        return t;
    }
    if (type_bits(&quiet, type, &t))
        return T_ALL;
    if (json_is_true(json_object_get(s, "nullable")))
        t |= 1; /* null */
    return t;
}

/* Whether the value sets (const/enum) of x and y share nothing. */
static bool values_apart(const json_t *x, const json_t *y)
{
    json_t *vx = values_of(x), *vy = values_of(y);
    bool apart = vx && vy;
    size_t i, j;
    json_t *a, *b;
    json_array_foreach(vx, i, a)
    {
        json_array_foreach(vy, j, b) apart &= !json_equal(a, b);
    }
    json_decref(vx);
    json_decref(vy);
    return apart;
}

/* One requires a property the other forbids. */
static bool forbids(const json_t *x, const json_t *y)
{
    if (!json_is_false(json_object_get(y, "additionalProperties")))
        return false;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(x, "required"), i, r)
    {
        const json_t *py = json_object_get(y, "properties");
        if (json_is_string(r) && !(py && json_object_get(py, json_string_value(r))))
            return true;
    }
    return false;
}

/* The converter writes an object only with the names of its properties and
 * required: when x writes nothing but objects and y requires a name x never
 * writes, no value x generates matches y. */
static bool never_matches(const json_t *x, const json_t *y)
{
    unsigned tx = types_of(x);
    bool implied = !json_object_get(x, "type") && !json_object_get(x, "enum") &&
                   !json_object_get(x, "const") &&
                   (json_object_get(x, "properties") || json_object_get(x, "required"));
    const json_t *px = json_object_get(x, "properties");
    if (tx != (1u << 2) && !implied) /* object only */
        return false;
    if (!json_object_size(px) && !json_array_size(json_object_get(x, "required")))
        return false; /* written as a map: any name */
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(y, "required"), i, r)
    {
        const char *n = json_string_value(r);
        if (n && !(px && json_object_get(px, n)) && !requires(x, n))
            return true;
    }
    return false;
}

/* The types the converter writes for s: without "type", the one its
 * keywords imply (grammar_conv_schema.c: implied_type), else types_of. */
static unsigned written_types(const json_t *s)
{
    static const struct {
        const char *key;
        unsigned bits;
    } by_key[] = {{"properties", 1 << 2},
                  {"additionalProperties", 1 << 2},
                  {"required", 1 << 2},
                  {"patternProperties", 1 << 2},
                  {"minProperties", 1 << 2},
                  {"maxProperties", 1 << 2},
                  {"items", 1 << 3},
                  {"prefixItems", 1 << 3},
                  {"minItems", 1 << 3},
                  {"maxItems", 1 << 3},
                  {"minLength", 1 << 5},
                  {"maxLength", 1 << 5},
                  {"pattern", 1 << 5},
                  {"format", 1 << 5},
                  {"minimum", T_NUMBER | T_INTEGER},
                  {"maximum", T_NUMBER | T_INTEGER},
                  {"exclusiveMinimum", T_NUMBER | T_INTEGER},
                  {"exclusiveMaximum", T_NUMBER | T_INTEGER},
                  {"multipleOf", T_NUMBER | T_INTEGER}};
    unsigned t = types_of(s);
    if (json_object_get(s, "type") || json_object_get(s, "enum") || json_object_get(s, "const") ||
        json_object_get(s, "anyOf") || json_object_get(s, "oneOf") || json_object_get(s, "$ref"))
        return t;
    unsigned null = json_is_true(json_object_get(s, "nullable")) ? 1u : 0u;
    for (size_t i = 0; i < sizeof by_key / sizeof by_key[0]; i++)
        if (json_object_get(s, by_key[i].key))
            return (t & by_key[i].bits) | null;
    return t;
}

static bool apart(const json_t *x, const json_t *y);

/* Two arrays whose items no value can match both: apart once both have at
 * least one item (the empty array matches both). */
static bool arrays_apart(json_t *x, json_t *y)
{
    const json_t *ix = json_object_get(x, "items"), *iy = json_object_get(y, "items");
    if (written_types(x) != (1u << 3) || written_types(y) != (1u << 3) || !json_is_object(ix) ||
        !json_is_object(iy) || json_object_get(x, "prefixItems") ||
        json_object_get(y, "prefixItems") || !apart(ix, iy))
        return false;
    for (int side = 0; side < 2; side++) {
        json_t *s = side ? y : x;
        const json_t *mn = json_object_get(s, "minItems");
        if (!json_is_integer(mn) || json_integer_value(mn) < 1)
            json_object_set_new(s, "minItems", json_integer(1));
    }
    return true;
}

static bool apart(const json_t *x, const json_t *y)
{
    /* what one writes, the other refuses, both ways */
    if ((!(written_types(x) & types_of(y)) && !(written_types(y) & types_of(x))) ||
        values_apart(x, y) || forbids(x, y) || forbids(y, x))
        return true;
    if (never_matches(x, y) && never_matches(y, x))
        return true;
    const json_t *px = json_object_get(x, "properties"), *py = json_object_get(y, "properties");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)px, k, v)
    {
        const json_t *w = py ? json_object_get(py, k) : NULL;
        if (w && json_is_object(v) && json_is_object(w) && requires(x, k) && requires(y, k) &&
            values_apart(v, w))
            return true;
    }
    return false;
}

/* Names y requires that x does not (into a new array; NULL when none). */
static json_t *separating(const json_t *x, const json_t *y)
{
    json_t *names = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(y, "required"), i, r)
    {
        if (json_is_string(r) && !requires(x, json_string_value(r)))
            json_array_append(names, r);
    }
    if (names && !json_array_size(names))
        json_decref(names), names = NULL;
    return names;
}

/* Whether x writes nothing but objects (its type, or implied by its keywords). */
static bool object_only(const json_t *x)
{
    if (json_object_get(x, "type"))
        return types_of(x) == (1u << 2);
    return !json_object_get(x, "enum") && !json_object_get(x, "const") &&
           (json_object_get(x, "properties") || json_object_get(x, "required"));
}

/* x and y may overlap: when both write only objects and each requires a
 * name the other does not, x leaves out y's names and y x's (they stay
 * optional there, so leaving them out is valid), which makes them apart. */
static bool separate(json_t *x, json_t *y)
{
    if (!object_only(x) || !object_only(y))
        return false;
    json_t *nx = separating(x, y), *ny = separating(y, x);
    bool ok = nx && ny;
    for (int side = 0; ok && side < 2; side++) {
        json_t *s = side ? y : x, *names = side ? ny : nx;
        json_t *props = json_object_get(s, "properties");
        size_t i;
        json_t *n;
        if (!props)
            continue;
        json_t *copy = json_copy(props);
        json_array_foreach(names, i, n) json_object_del(copy, json_string_value(n));
        ok = copy && json_object_set_new(s, "properties", copy) == 0;
    }
    json_decref(nx);
    json_decref(ny);
    return ok;
}

int ifd__gconv_one_of(conv_t *c, const json_t *branches, const json_t *doc, json_t **out)
{
    size_t n = json_array_size(branches);
    json_t *m = json_array();
    int rc = m ? 0 : oom(c);
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *b = NULL;
        rc = member(c, json_array_get(branches, i), doc, 0, &b);
        if (!rc && json_array_append_new(m, b))
            rc = oom(c);
    }
    for (size_t i = 0; i < n && !rc; i++)
        for (size_t j = i + 1; j < n && !rc; j++) {
            json_t *x = json_array_get(m, i), *y = json_array_get(m, j);
            if (!apart(x, y) && !separate(x, y) && !arrays_apart(x, y))
                rc = ifd__gconv_err(c, IFD_ENOTSUP,
                                    "'oneOf' whose branches %zu and %zu may overlap (a value "
                                    "matching both would be invalid; give them distinct types, "
                                    "consts or required names)",
                                    i, j);
        }
    if (rc) {
        json_decref(m);
        return rc;
    }
    *out = m;
    return 0;
}
