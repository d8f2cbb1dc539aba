/*
 * grammar_conv_cond.c — the exact readings of the conditional keywords that
 * a loose conversion used to leave to the check at the end: contains (with
 * minContains, maxContains, minItems, maxItems) as a counting automaton,
 * and "not if" for the discriminator form of if (grammar_conv_schema.c's
 * tightened() builds anyOf [if ∧ then, not-if ∧ else] with it). Each writes
 * only where its reading is exact; elsewhere it says so and the caller
 * falls back to an over-approximation checked at the end.
 */
#include "error.h"
#include "grammar_conv_impl.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most states (contains matches counted × items counted) of the
 * automaton ifd__gconv_contains writes. */
#define CONTAINS_STATES 1024

/* JSON Schema's equality: numbers by value (1 and 1.0 are equal), arrays
 * and objects member by member. */
static bool json_same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_same(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v)
        {
            const json_t *w = json_object_get(b, k);
            if (!w || !json_same(v, w))
                return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* Whether schema s holds no constraining keyword but those of keep[0..n). */
static bool only_keys(const json_t *s, const char *const *keep, size_t n)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) if (ifd__gconv_constrains(k) &&
                                               !ifd__gconv_in_list(k, keep, n)) return false;
    return true;
}

/* The values of an enum or const schema (a borrowed array, or a new one in
 * *own for const), NULL when s has neither. */
static const json_t *enum_values(const json_t *s, json_t **own)
{
    *own = NULL;
    const json_t *en = json_object_get(s, "enum");
    if (json_is_array(en))
        return en;
    const json_t *cv = json_object_get(s, "const");
    if (cv)
        *own = json_pack("[O]", cv);
    return *own;
}

/* A schema matching exactly the items (under items) that do not match ct —
 * written only where ct's complement is plain: ct a type (not integer
 * alone, unless the items type leaves number out: "not integer" is no
 * grammar's), or a const / enum whose values the
 * items' own enum lists (those values left out) or whose values are all
 * booleans and null (the other types, and the other of true / false). A new
 * reference (false when no item is left), NULL when it cannot be written,
 * *oom on a failed allocation. */
static json_t *not_contains(const json_t *ct, const json_t *items, bool *oom)
{
    static const char *const TYPES[] = {"null", "boolean", "object", "array", "number", "string"};
    static const char *const TYPE_KEY[] = {"type"}, *const VALUE_KEYS[] = {"enum", "const"};
    *oom = false;
    if (!json_is_object(ct))
        return NULL;
    json_t *out = NULL;
    if (only_keys(ct, TYPE_KEY, 1) && json_object_get(ct, "type")) {
        const json_t *t = json_object_get(ct, "type");
        /* items whose type leaves number out hold integers only: there, not
         * integer is not number */
        const json_t *it = json_is_object(items) ? json_object_get(items, "type") : NULL;
        bool ints_only = it != NULL;
        for (size_t i = 0; it && i < (json_is_array(it) ? json_array_size(it) : 1); i++)
            ints_only &=
                !ifd__gconv_is_str(json_is_array(it) ? json_array_get(it, i) : it, "number");
        bool gone[6] = {false};
        for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
            const json_t *ti = json_is_array(t) ? json_array_get(t, i) : t;
            bool hit = false;
            for (size_t k = 0; k < 6; k++)
                if (ifd__gconv_is_str(ti, TYPES[k]) ||
                    (k == 4 && ints_only && ifd__gconv_is_str(ti, "integer")))
                    gone[k] = hit = true;
            if (!hit && !ifd__gconv_is_str(ti, "integer"))
                return NULL;
        }
        json_t *rest = json_array();
        for (size_t k = 0; rest && k < 6; k++)
            if (!gone[k] && json_array_append_new(rest, json_string(TYPES[k])))
                json_decref(rest), rest = NULL;
        /* integer without number: the non-integers are no grammar's */
        for (size_t i = 0; rest && i < (json_is_array(t) ? json_array_size(t) : 1); i++)
            if (ifd__gconv_is_str(json_is_array(t) ? json_array_get(t, i) : t, "integer") &&
                !gone[4])
                return json_decref(rest), NULL;
        out = !rest                   ? NULL
              : json_array_size(rest) ? json_pack("{s:o}", "type", rest)
                                      : (json_decref(rest), json_false());
        *oom = !out;
        return out;
    }
    json_t *own_c = NULL, *own_i = NULL;
    const json_t *cv = only_keys(ct, VALUE_KEYS, 2) ? enum_values(ct, &own_c) : NULL;
    const json_t *iv = json_is_object(items) ? enum_values(items, &own_i) : NULL;
    if (cv && iv) { /* the items' values that ct's do not list */
        json_t *rest = json_array();
        for (size_t i = 0; rest && i < json_array_size(iv); i++) {
            bool in = false;
            for (size_t j = 0; j < json_array_size(cv) && !in; j++)
                in = json_same(json_array_get(iv, i), json_array_get(cv, j));
            if (!in && json_array_append(rest, json_array_get(iv, i)))
                json_decref(rest), rest = NULL;
        }
        out = !rest                   ? NULL
              : json_array_size(rest) ? json_pack("{s:o}", "enum", rest)
                                      : (json_decref(rest), json_false());
        *oom = !out;
    } else if (cv) { /* booleans and null only: the other types and values */
        bool has_t = false, has_f = false, has_n = false, other = false;
        for (size_t j = 0; j < json_array_size(cv); j++) {
            const json_t *v = json_array_get(cv, j);
            has_t |= json_is_true(v), has_f |= json_is_false(v), has_n |= json_is_null(v);
            other |= !json_is_boolean(v) && !json_is_null(v);
        }
        if (!other) {
            json_t *types = json_pack("[s,s,s,s]", "object", "array", "number", "string");
            json_t *vals = json_array();
            if (types && !has_n)
                json_array_append_new(types, json_string("null"));
            if (types && has_t != has_f)
                json_array_append_new(vals, json_boolean(!has_t));
            else if (types && !has_t)
                json_array_append_new(types, json_string("boolean"));
            out = !types || !vals ? NULL
                  : json_array_size(vals)
                      ? json_pack("{s:[{s:O},{s:O}]}", "anyOf", "type", types, "enum", vals)
                      : json_pack("{s:O}", "type", types);
            json_decref(types);
            json_decref(vals);
            *oom = !out;
        }
    }
    json_decref(own_c);
    json_decref(own_i);
    return out;
}

/* A loose conversion's array with contains (array_body), exact: M, the
 * items that match items and contains (their allOf), and O, the other
 * items — any item (I) without maxContains, else the items that match
 * items but not contains (not_contains: only where that complement is
 * plain). The array is a right-linear automaton over (j, l), j the M items
 * so far (counted up to maxContains, or up to minContains when unbounded),
 * l the items so far (up to maxItems, or up to minItems when unbounded):
 * it may end where minContains <= j and minItems <= l, takes an M while j
 * may grow, an O while l may. Where it cannot be written so (maxContains
 * without a plain complement, more than CONTAINS_STATES states, a contains
 * that cannot be merged with items): 1, and array_body writes its plain
 * form (tightened asked it for minContains items), contains checked at the
 * end. */
int ifd__gconv_contains(conv_t *c, const json_t *s, const json_t *items, const char *item,
                        long long mn, long long mx, const json_t *doc, ifd_buf_t *b)
{
    const json_t *ct = json_object_get(s, "contains"), *mc = json_object_get(s, "minContains");
    const json_t *xc = json_object_get(s, "maxContains");
    long long need = 1, most = -1;
    if ((mc && !json_is_integer(mc)) || (xc && !json_is_integer(xc)))
        return 1;
    if (mc)
        need = json_integer_value(mc);
    if (xc)
        most = json_integer_value(xc);
    if (need < 0 || (need == 0 && most < 0))
        return 1; /* (minContains 0 without a maximum: nothing to enforce) */
    if (most >= 0 && most < need)
        return ifd__gconv_unsat(c, "'maxContains' below 'minContains'");
    if (mx >= 0 && need > mx)
        return ifd__gconv_unsat(c, "'minContains' above 'maxItems'");
    if (mx >= 0 && most >= mx)
        most = -1; /* (no array of at most maxItems items passes it) */
    if (need > CONTAINS_STATES || most > CONTAINS_STATES || mn > CONTAINS_STATES)
        return 1; /* (and the product below cannot overflow) */
    if (need == 0 && most < 0)
        return 1;
    long long jcap = most >= 0 ? most : need, lcap = mx >= 0 ? mx : (mn > need ? mn : need);
    if ((jcap + 1) * (lcap + 1) > CONTAINS_STATES)
        return 1;
    bool oom = false;
    json_t *nc = most >= 0 ? not_contains(ct, items, &oom) : NULL;
    if (oom)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    if (most >= 0 && !nc)
        return 1;
    json_t *m = items && !json_is_true(items) ? json_pack("{s:[O,O]}", "allOf", items, ct)
                                              : json_incref((json_t *)ct);
    if (!m) {
        json_decref(nc);
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
    }
    unsigned mid;
    ifd__gconv_mark_t mark = ifd__gconv_mark(c);
    int rc = ifd__gconv_schema_rule(c, m, doc, &mid);
    json_decref(m);
    if (rc && ifd__gconv_loosen(c, mark, rc)) {
        json_decref(nc);
        return 1;
    }
    if (rc) { /* (no item can match both: no valid array) */
        json_decref(nc);
        return rc;
    }
    /* O: any item, or the items outside contains (none: O never taken) */
    char other[32];
    snprintf(other, sizeof other, "%s", item);
    bool no_other = false;
    if (nc) {
        json_t *o = items && !json_is_true(items) ? json_pack("{s:[O,O]}", "allOf", items, nc)
                                                  : json_incref(nc);
        json_decref(nc);
        if (!o)
            return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
        unsigned oid;
        mark = ifd__gconv_mark(c);
        rc = ifd__gconv_schema_rule(c, o, doc, &oid);
        json_decref(o);
        if (rc && ifd__gconv_drop_unsat(c, mark, rc))
            no_other = true;
        else if (rc && ifd__gconv_loosen(c, mark, rc))
            return 1;
        else if (rc)
            return rc;
        else
            snprintf(other, sizeof other, "s%u", oid);
    }
    /* state (j, l) is rule base + j * (lcap + 1) + l: after the first item,
     * ws "]" | "," ws M | "," ws O, each only toward a live state (one from
     * which the array can end: its successors have j and l no smaller, so
     * one pass from the top finds them) */
    size_t ns = (size_t)((jcap + 1) * (lcap + 1));
    bool *live = calloc(ns, sizeof *live);
    if (!live)
        return ifd__gconv_err(c, IFD_ENOMEM, "out of memory");
#define ST(j, l)    ((size_t)((j) * (lcap + 1) + (l)))
#define NEXT_J(j)   (most >= 0 ? (j) + 1 : ((j) + 1 < jcap ? (j) + 1 : jcap))
#define NEXT_L(l)   (mx >= 0 ? (l) + 1 : ((l) + 1 < lcap ? (l) + 1 : lcap))
#define CAN_M(j, l) ((most < 0 || (j) < most) && !(mx >= 0 && (l) >= mx))
#define CAN_O(l)    (!no_other && !(mx >= 0 && (l) >= mx))
    for (long long j = jcap; j >= 0; j--)
        for (long long l = lcap; l >= 0; l--)
            live[ST(j, l)] = (j >= need && l >= mn) ||
                             (CAN_M(j, l) && live[ST(NEXT_J(j), NEXT_L(l))]) ||
                             (CAN_O(l) && live[ST(j, NEXT_L(l))]);
    unsigned base = c->next;
    c->next += (unsigned)ns;
    ifd_buf_t r = IFD_BUF_INIT;
    for (long long j = 0; !rc && j <= jcap; j++) {
        for (long long l = 0; !rc && l <= lcap; l++) {
            if (!live[ST(j, l)])
                continue;
            r.len = 0;
            const char *sep = "";
            bool end = j >= need && l >= mn;
            long long j2 = NEXT_J(j), l2 = NEXT_L(l);
            bool take_m = CAN_M(j, l) && live[ST(j2, l2)];
            bool take_o = CAN_O(l) && live[ST(j, l2)];
            if (end)
                rc = ifd_buf_puts(&r, "ws \"]\" "), sep = "| ";
            if (!rc && take_m)
                rc = ifd_buf_printf(&r, "%s\",\" ws s%u ws s%u ", sep, mid,
                                    base + (unsigned)(j2 * (lcap + 1) + l2)),
                sep = "| ";
            if (!rc && take_o)
                rc = ifd_buf_printf(&r, "%s\",\" ws %s ws s%u ", sep, other,
                                    base + (unsigned)(j * (lcap + 1) + l2));
            if (rc)
                rc = IFD_ENOMEM;
            else
                rc = ifd__gconv_rule(c, base + (unsigned)(j * (lcap + 1) + l), &r);
        }
    }
    ifd_buf_free(&r);
    /* the first item has no comma; an empty array where it may end */
    long long j1 = NEXT_J(0), l1 = NEXT_L(0);
    bool end0 = need <= 0 && mn <= 0, first_m = CAN_M(0, 0) && live[ST(j1, l1)];
    bool first_o = CAN_O(0) && live[ST(0, l1)];
#undef ST
#undef NEXT_J
#undef NEXT_L
#undef CAN_M
#undef CAN_O
    free(live);
    if (!rc && !end0 && !first_m && !first_o)
        return ifd__gconv_unsat(c, "no array has the items 'contains' and the lengths ask for");
    const char *sep = "";
    if (!rc && ifd_buf_puts(b, "\"[\" ws ( "))
        rc = IFD_ENOMEM;
    if (!rc && end0)
        rc = ifd_buf_puts(b, "\"]\" "), sep = "| ";
    if (!rc && first_m)
        rc = ifd_buf_printf(b, "%ss%u ws s%u ", sep, mid, base + (unsigned)(j1 * (lcap + 1) + l1)),
        sep = "| ";
    if (!rc && first_o)
        rc = ifd_buf_printf(b, "%s%s ws s%u ", sep, other, base + (unsigned)(l1));
    if (!rc && ifd_buf_puts(b, ") "))
        rc = IFD_ENOMEM;
    return rc == IFD_ENOMEM ? ifd__gconv_err(c, rc, "out of memory") : rc;
}

/* "not if" for the discriminator form, under s: if = {properties: {k:
 * {const | enum: A}}, [required: [k]]} where s gives k a const or enum D —
 * then "not if" is an object whose k is one of D less A ({type: object,
 * properties: {k: {enum: D - A}}}, false for k when none is left), and k
 * absent where if requires it (else required). NULL where if is not of
 * that form. */
json_t *ifd__gconv_not_if(const json_t *s, const json_t *ifs)
{
    static const char *const IF_KEYS[] = {"properties", "required"};
    static const char *const VALUE_KEYS[] = {"enum", "const"};
    const json_t *ip = json_object_get(ifs, "properties"), *ir = json_object_get(ifs, "required");
    if (!json_is_object(ifs) || !only_keys(ifs, IF_KEYS, 2) || json_object_size(ip) != 1 ||
        (ir && (!json_is_array(ir) || json_array_size(ir) > 1)))
        return NULL;
    void *it = json_object_iter((json_t *)ip);
    const char *k = json_object_iter_key(it);
    const json_t *sub = json_object_iter_value(it);
    if (ir && json_array_size(ir) == 1 && !ifd__gconv_is_str(json_array_get(ir, 0), k))
        return NULL;
    const json_t *outer = json_object_get(json_object_get(s, "properties"), k);
    if (!json_is_object(sub) || !only_keys(sub, VALUE_KEYS, 2) || !json_is_object(outer))
        return NULL;
    json_t *own_a = NULL, *own_d = NULL, *out = NULL;
    const json_t *a = enum_values(sub, &own_a), *d = enum_values(outer, &own_d);
    json_t *rest = a && d ? json_array() : NULL;
    for (size_t i = 0; rest && i < json_array_size(d); i++) {
        bool in = false;
        for (size_t j = 0; j < json_array_size(a) && !in; j++)
            in = json_same(json_array_get(d, i), json_array_get(a, j));
        if (!in && json_array_append(rest, json_array_get(d, i)))
            json_decref(rest), rest = NULL;
    }
    if (rest) {
        json_t *v = json_array_size(rest) ? json_pack("{s:O}", "enum", rest) : json_false();
        /* (a value that is no object satisfies if: not if is an object) */
        out = v ? json_pack("{s:s,s:{s:o}}", "type", "object", "properties", k, v) : NULL;
        /* absent k satisfies an if that does not require it */
        if (out && !json_array_size(ir) &&
            json_object_set_new(out, "required", json_pack("[s]", k)))
            json_decref(out), out = NULL;
    }
    json_decref(rest);
    json_decref(own_a);
    json_decref(own_d);
    return out;
}
