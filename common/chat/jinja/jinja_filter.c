/*
 * jinja_filter.c — the tests, filters and str/dict/list methods of the
 * renderer (jinja_rt.h), each following jinja2 3.1 / Python semantics as
 * docs/chat-templates.md lists them.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "jinja_rt.h"

/* ---- tests ----------------------------------------------------------------------------- */

bool ifd__j_apply_test(R *r, int id, jv v, const args_t *a)
{
    jv x = ifd__j_arg(a, 0, NULL, UNDEF);
    switch (id) {
    case IFD__JT_DEFINED:
        return v.t != V_UNDEF;
    case IFD__JT_UNDEFINED:
        return v.t == V_UNDEF;
    case IFD__JT_NONE:
        return v.t == V_NONE;
    case IFD__JT_BOOLEAN:
        return v.t == V_BOOL;
    case IFD__JT_FALSE:
        return v.t == V_BOOL && !v.u.b;
    case IFD__JT_TRUE:
        return v.t == V_BOOL && v.u.b;
    case IFD__JT_INTEGER:
        return v.t == V_INT;
    case IFD__JT_FLOAT:
        return v.t == V_FLOAT;
    case IFD__JT_NUMBER:
        return ifd__j_is_num(v);
    case IFD__JT_STRING:
        return v.t == V_STR;
    case IFD__JT_MAPPING:
        return v.t == V_DICT;
    case IFD__JT_ITERABLE:
    case IFD__JT_SEQUENCE:
        return v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF;
    case IFD__JT_CALLABLE:
        return v.t == V_MACRO || v.t == V_FUNC;
    case IFD__JT_EVEN:
    case IFD__JT_ODD:
    case IFD__JT_DIVISIBLEBY: {
        if (!ifd__j_is_num(v) || (id == IFD__JT_DIVISIBLEBY && !ifd__j_is_num(x))) {
            ifd__j_rerr(r, IFD_EINVAL, "test needs a number");
            return false;
        }
        int64_t m = id == IFD__JT_DIVISIBLEBY ? ifd__j_num_i(x) : 2;
        if (m == 0) {
            ifd__j_rerr(r, IFD_EINVAL, "integer division or modulo by zero");
            return false;
        }
        int64_t rem = ifd__j_num_i(v) % m;
        return id == IFD__JT_ODD ? rem != 0 : rem == 0;
    }
    case IFD__JT_LOWER:
    case IFD__JT_UPPER: {
        jv s = ifd__j_to_str(r, v);
        bool cased = false;
        for (size_t i = 0; !r->rc && i < s.u.s->n; i++) {
            char c = s.u.s->s[i];
            if (ifd__j_alpha_c(c)) {
                cased = true;
                if ((id == IFD__JT_LOWER) != (c >= 'a' && c <= 'z'))
                    return false;
            }
        }
        return cased;
    }
    case IFD__JT_EQ:
    case IFD__JT_EQUALTO:
    case IFD__JT_EQEQ:
        return ifd__j_equal(r, v, x);
    case IFD__JT_NE:
    case IFD__JT_NEQ:
        return !ifd__j_equal(r, v, x);
    case IFD__JT_LT:
    case IFD__JT_LTS:
    case IFD__JT_LE:
    case IFD__JT_LES:
    case IFD__JT_GT:
    case IFD__JT_GTS:
    case IFD__JT_GE:
    case IFD__JT_GES: {
        int c;
        if (ifd__j_compare(r, v, x, &c))
            return false;
        return id == IFD__JT_LT || id == IFD__JT_LTS   ? c < 0
               : id == IFD__JT_LE || id == IFD__JT_LES ? c <= 0
               : id == IFD__JT_GT || id == IFD__JT_GTS ? c > 0
                                                       : c >= 0;
    }
    case IFD__JT_IN:
        return ifd__j_contains(r, x, v);
    case IFD__JT_SAMEAS:
        if (v.t != x.t)
            return false;
        if (v.t == V_NONE || v.t == V_UNDEF)
            return true;
        if (v.t == V_BOOL || v.t == V_INT)
            return ifd__j_equal(r, v, x);
        if (v.t == V_STR)
            return v.u.s == x.u.s;
        return v.u.l == x.u.l;
    default:
        ifd__j_rerr(r, IFD_EINVAL, "no such test");
        return false;
    }
}

/* ---- filters --------------------------------------------------------------------------- */

/* Attribute path "a.b.0" of v (jinja2's make_attrgetter). */
static jv attr_path(R *r, jv v, jv path)
{
    if (path.t == V_INT)
        return ifd__j_get_item(r, v, path);
    if (path.t != V_STR) {
        ifd__j_rerr(r, IFD_EINVAL, "attribute must be a string");
        return UNDEF;
    }
    const char *s = path.u.s->s;
    size_t n = path.u.s->n;
    while (!r->rc) {
        const char *dot = memchr(s, '.', n);
        size_t l = dot ? (size_t)(dot - s) : n;
        bool digits = l > 0;
        for (size_t i = 0; i < l; i++)
            digits = digits && s[i] >= '0' && s[i] <= '9';
        jv k = digits ? ifd__j_vint(strtoll(s, NULL, 10)) : ifd__j_vstr(r, s, l);
        if (v.t == V_UNDEF)
            return UNDEF;
        v = ifd__j_get_item(r, v, k);
        if (!dot)
            break;
        s = dot + 1;
        n -= l + 1;
    }
    return v;
}

static jv lower_key(R *r, jv v, bool case_sensitive)
{
    if (case_sensitive || v.t != V_STR)
        return v;
    jv o = ifd__j_vstr(r, v.u.s->s, v.u.s->n);
    for (size_t i = 0; !r->rc && i < o.u.s->n; i++)
        o.u.s->s[i] = ifd__j_lower_c(o.u.s->s[i]);
    return o;
}

/* jinja2's unique: the first item of each distinct key, in order. Hashable
 * keys go through a dict of the keys seen (linear time); others (lists,
 * dicts) are compared with the earlier unhashable keys, as equality is all
 * there is for them. */
static jlist *unique(R *r, const jlist *l, const jv *keys)
{
    jlist *o = ifd__j_mklist(r, 0);
    jdict *seen = ifd__j_mkdict(r);
    size_t *other = ifd__j_ralloc(r, (l->n + 1) * sizeof *other), n_other = 0;
    for (size_t i = 0; o && seen && other && i < l->n && !ifd__j_tick(r); i++) {
        bool dup = false;
        if (ifd__j_hashable(keys[i])) {
            dup = ifd__j_dict_findv(r, seen, keys[i]) != NULL;
            if (!dup && ifd__j_dict_setv(r, seen, keys[i], NONE))
                return NULL;
        } else {
            for (size_t j = 0; j < n_other && !dup && !r->rc; j++)
                dup = ifd__j_equal(r, keys[i], keys[other[j]]);
            if (!dup)
                other[n_other++] = i;
        }
        if (!dup && !r->rc)
            ifd__j_list_push(r, o, l->v[i]);
    }
    return r->rc ? NULL : o;
}

static jlist *sorted(R *r, jlist *in, jv *keys, bool reverse)
{
    size_t n = in->n;
    size_t *idx = ifd__j_ralloc(r, (n + 1) * sizeof *idx);
    jlist *out = ifd__j_mklist(r, n);
    if (!idx || !out || ifd__j_sort_idx(r, keys, reverse, idx, n))
        return NULL;
    for (size_t i = 0; i < n; i++)
        out->v[i] = in->v[idx[i]];
    out->n = n;
    return r->rc ? NULL : out;
}

static jv str_join(R *r, jlist *l, jv sep)
{
    ifd_buf_t b = IFD_BUF_INIT;
    for (size_t i = 0; i < l->n && !r->rc; i++) {
        if (i)
            ifd__j_to_text(r, &b, sep, false);
        ifd__j_to_text(r, &b, l->v[i], false);
    }
    jv s = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return s;
}

static jv str_replace(R *r, const jstr *s, const jstr *old, const jstr *new_, int64_t count)
{
    ifd_buf_t b = IFD_BUF_INIT;
    size_t i = 0;
    int64_t done = 0;
    if (!old->n) {
        /* Python: insert `new` before every character and at the end */
        while (i <= s->n && (count < 0 || done < count)) {
            ifd__j_put(r, &b, new_->s, new_->n);
            done++;
            if (i == s->n)
                break;
            size_t l = ifd__j_u8len((const unsigned char *)s->s + i, s->n - i);
            ifd__j_put(r, &b, s->s + i, l);
            i += l;
        }
        if (i < s->n)
            ifd__j_put(r, &b, s->s + i, s->n - i);
    } else {
        while (i < s->n) {
            if ((count < 0 || done < count) && i + old->n <= s->n &&
                memcmp(s->s + i, old->s, old->n) == 0) {
                ifd__j_put(r, &b, new_->s, new_->n);
                i += old->n;
                done++;
            } else {
                ifd__j_put(r, &b, s->s + i, 1);
                i++;
            }
        }
    }
    jv o = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

/* Python str.split / rsplit (rsplit only without maxsplit differences that
 * matter: maxsplit counts from the right). */
static jv str_split(R *r, const jstr *s, jv sepv, int64_t maxsplit, bool right)
{
    jlist *l = ifd__j_mklist(r, 0);
    if (!l)
        return UNDEF;
    const char *p = s->s;
    size_t n = s->n;
    if (sepv.t == V_NONE || sepv.t == V_UNDEF) {
        /* runs of whitespace; leading/trailing ignored */
        size_t *st = ifd__j_ralloc(r, (n + 1) * sizeof *st),
               *en = ifd__j_ralloc(r, (n + 1) * sizeof *en);
        size_t k = 0, i = 0;
        if (!st || !en)
            return UNDEF;
        while (i < n) {
            while (i < n) {
                size_t cl = ifd__j_u8len((const unsigned char *)p + i, n - i);
                if (!ifd__j_py_space(ifd__j_u8cp((const unsigned char *)p + i, cl)))
                    break;
                i += cl;
            }
            if (i >= n)
                break;
            st[k] = i;
            while (i < n) {
                size_t cl = ifd__j_u8len((const unsigned char *)p + i, n - i);
                if (ifd__j_py_space(ifd__j_u8cp((const unsigned char *)p + i, cl)))
                    break;
                i += cl;
            }
            en[k++] = i;
        }
        if (maxsplit >= 0 && (size_t)maxsplit + 1 < k) {
            if (right) {
                size_t first = k - (size_t)maxsplit - 1;
                /* the leftmost piece runs from the start (stripped) to en[first] */
                ifd__j_list_push(r, l, ifd__j_vstr(r, p + st[0], en[first] - st[0]));
                for (size_t j = first + 1; j < k; j++)
                    ifd__j_list_push(r, l, ifd__j_vstr(r, p + st[j], en[j] - st[j]));
            } else {
                for (size_t j = 0; j < (size_t)maxsplit; j++)
                    ifd__j_list_push(r, l, ifd__j_vstr(r, p + st[j], en[j] - st[j]));
                size_t last = st[maxsplit], e = n;
                while (e > last) {
                    size_t q = e - 1;
                    while (q > last && ((unsigned char)p[q] & 0xC0) == 0x80)
                        q--;
                    if (!ifd__j_py_space(
                            ifd__j_u8cp((const unsigned char *)p + q,
                                        ifd__j_u8len((const unsigned char *)p + q, e - q))))
                        break;
                    e = q;
                }
                ifd__j_list_push(r, l, ifd__j_vstr(r, p + last, e - last));
            }
        } else {
            for (size_t j = 0; j < k; j++)
                ifd__j_list_push(r, l, ifd__j_vstr(r, p + st[j], en[j] - st[j]));
        }
        return r->rc ? UNDEF : ifd__j_vlist(l);
    }
    if (ifd__j_need_str(r, sepv, "split"))
        return UNDEF;
    const jstr *sep = sepv.u.s;
    if (!sep->n) {
        ifd__j_rerr(r, IFD_EINVAL, "empty separator");
        return UNDEF;
    }
    if (!right) {
        size_t a = 0, i = 0;
        int64_t done = 0;
        while (i + sep->n <= n) {
            if ((maxsplit < 0 || done < maxsplit) && memcmp(p + i, sep->s, sep->n) == 0) {
                ifd__j_list_push(r, l, ifd__j_vstr(r, p + a, i - a));
                i += sep->n;
                a = i;
                done++;
            } else {
                i++;
            }
        }
        ifd__j_list_push(r, l, ifd__j_vstr(r, p + a, n - a));
        return r->rc ? UNDEF : ifd__j_vlist(l);
    }
    /* rsplit with a separator: collect from the right, then reverse */
    jlist *tmp = ifd__j_mklist(r, 0);
    size_t e = n;
    int64_t done = 0;
    size_t i = n;
    while (tmp && i >= sep->n) {
        size_t st = i - sep->n;
        if ((maxsplit < 0 || done < maxsplit) && memcmp(p + st, sep->s, sep->n) == 0) {
            ifd__j_list_push(r, tmp, ifd__j_vstr(r, p + i, e - i));
            e = st;
            i = st;
            done++;
        } else {
            i--;
        }
    }
    if (tmp)
        ifd__j_list_push(r, tmp, ifd__j_vstr(r, p, e));
    for (size_t j = tmp ? tmp->n : 0; j-- > 0;)
        ifd__j_list_push(r, l, tmp->v[j]);
    return r->rc ? UNDEF : ifd__j_vlist(l);
}

static jv tojson_filter(R *r, jv v, const args_t *a)
{
    jv ind = ifd__j_arg(a, 0, "indent", NONE), seps = ifd__j_arg(a, -1, "separators", NONE);
    jsonopt_t o = {NULL, ", ", ": ",
                   ifd__j_truthy(ifd__j_arg(a, -1, "sort_keys", ifd__j_vbool(false))),
                   ifd__j_truthy(ifd__j_arg(a, -1, "ensure_ascii", ifd__j_vbool(false)))};
    char spaces[256];
    if (ind.t == V_INT || ind.t == V_BOOL) {
        int64_t k = ifd__j_num_i(ind);
        if (k < 0)
            k = 0;
        if (k > 255)
            k = 255;
        memset(spaces, ' ', (size_t)k);
        spaces[k] = '\0';
        o.indent = spaces;
    } else if (ind.t == V_STR) {
        o.indent = ind.u.s->s;
    } else if (ind.t != V_NONE) {
        ifd__j_rerr(r, IFD_EINVAL, "tojson: bad indent");
        return UNDEF;
    }
    if (o.indent)
        o.item_sep = ",";
    if (seps.t == V_LIST) {
        if (seps.u.l->n != 2 || seps.u.l->v[0].t != V_STR || seps.u.l->v[1].t != V_STR) {
            ifd__j_rerr(r, IFD_EINVAL, "tojson: separators must be two strings");
            return UNDEF;
        }
        o.item_sep = seps.u.l->v[0].u.s->s;
        o.key_sep = seps.u.l->v[1].u.s->s;
    }
    ifd_buf_t b = IFD_BUF_INIT;
    ifd__j_to_json(r, &b, v, &o, 0);
    jv s = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return s;
}

static jv indent_filter(R *r, jv v, const args_t *a)
{
    jv s = ifd__j_to_str(r, v), w = ifd__j_arg(a, 0, "width", ifd__j_vint(4));
    bool first = ifd__j_truthy(ifd__j_arg(a, 1, "first", ifd__j_vbool(false))),
         blank = ifd__j_truthy(ifd__j_arg(a, 2, "blank", ifd__j_vbool(false)));
    if (r->rc)
        return UNDEF;
    jv ind = w.t == V_STR ? w : UNDEF;
    if (w.t != V_STR) {
        int64_t k = ifd__j_num_i(w);
        if (k < 0 || k > 4096) {
            ifd__j_rerr(r, IFD_EINVAL, "indent: bad width");
            return UNDEF;
        }
        char sp[4097];
        memset(sp, ' ', (size_t)k);
        ind = ifd__j_vstr(r, sp, (size_t)k);
    }
    /* lines of s + "\n" as str.splitlines() gives them (\n, \r\n, \r) */
    const char *p = s.u.s->s;
    size_t n = s.u.s->n;
    ifd_buf_t b = IFD_BUF_INIT;
    if (first)
        ifd__j_put(r, &b, ind.u.s->s, ind.u.s->n);
    size_t i = 0, line = 0;
    while (i <= n && !r->rc) {
        size_t e = i;
        while (e < n && p[e] != '\n' && p[e] != '\r')
            e++;
        if (e >= n && i >= n)
            break; /* the "\n" appended by jinja2 ends the last line */
        if (line > 0) {
            ifd__j_put(r, &b, "\n", 1);
            if (blank || e > i)
                ifd__j_put(r, &b, ind.u.s->s, ind.u.s->n);
        }
        ifd__j_put(r, &b, p + i, e - i);
        line++;
        if (e >= n)
            break;
        i = e + (p[e] == '\r' && e + 1 < n && p[e + 1] == '\n' ? 2 : 1);
    }
    jv o = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

static jv title_filter(R *r, jv v)
{
    jv s = ifd__j_to_str(r, v);
    if (r->rc)
        return UNDEF;
    jv o = ifd__j_vstr(r, s.u.s->s, s.u.s->n);
    bool start = true;
    for (size_t i = 0; !r->rc && i < o.u.s->n; i++) {
        char c = o.u.s->s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '-' ||
            c == '(' || c == '{' || c == '[' || c == '<') {
            start = true;
            continue;
        }
        o.u.s->s[i] = start ? ifd__j_upper_c(c) : ifd__j_lower_c(c);
        start = false;
    }
    return o;
}

static jv case_str(R *r, jv v, int mode) /* 0 lower, 1 upper, 2 capitalize, 3 py title */
{
    jv s = ifd__j_to_str(r, v);
    if (r->rc)
        return UNDEF;
    jv o = ifd__j_vstr(r, s.u.s->s, s.u.s->n);
    bool prev_cased = false;
    for (size_t i = 0; !r->rc && i < o.u.s->n; i++) {
        char *c = &o.u.s->s[i];
        switch (mode) {
        case 0:
            *c = ifd__j_lower_c(*c);
            break;
        case 1:
            *c = ifd__j_upper_c(*c);
            break;
        case 2:
            *c = i == 0 ? ifd__j_upper_c(*c) : ifd__j_lower_c(*c);
            break;
        default:
            *c = prev_cased ? ifd__j_lower_c(*c) : ifd__j_upper_c(*c);
            prev_cased = ifd__j_alpha_c(*c);
        }
    }
    return o;
}

static jv select_filter(R *r, int id, jv v, const args_t *a)
{
    bool attr = id == IFD__JF_SELECTATTR || id == IFD__JF_REJECTATTR;
    bool keep = id == IFD__JF_SELECT || id == IFD__JF_SELECTATTR;
    jlist *in = ifd__j_truthy(v) ? ifd__j_iter_list(r, v) : ifd__j_mklist(r, 0),
          *out = ifd__j_mklist(r, 0);
    size_t k = 0;
    jv path = UNDEF;
    if (attr)
        path = ifd__j_arg(a, k++, NULL, UNDEF);
    jv tname = ifd__j_arg(a, (int)k++, NULL, UNDEF);
    if (!in || !out)
        return UNDEF;
    int tid = -1;
    if (tname.t == V_STR) {
        tid = ifd__jinja_test_id(tname.u.s->s, tname.u.s->n);
        if (tid < 0) {
            ifd__j_rerr(r, IFD_ENOTSUP, "no test named '%s'", tname.u.s->s);
            return UNDEF;
        }
    }
    args_t ta = {a->pos + (a->npos > k ? k : a->npos), a->npos > k ? a->npos - k : 0, NULL, NULL,
                 0};
    for (size_t i = 0; i < in->n && !r->rc; i++) {
        jv x = attr ? attr_path(r, in->v[i], path) : in->v[i];
        bool t = tid >= 0 ? ifd__j_apply_test(r, tid, x, &ta) : ifd__j_truthy(x);
        if (t == keep && ifd__j_list_push(r, out, in->v[i]))
            return UNDEF;
    }
    out->gen = true;
    return r->rc ? UNDEF : ifd__j_vlist(out);
}

static jv map_filter(R *r, frame_t *f, jv v, const args_t *a)
{
    jlist *in = ifd__j_truthy(v) ? ifd__j_iter_list(r, v) : ifd__j_mklist(r, 0),
          *out = ifd__j_mklist(r, 0);
    if (!in || !out)
        return UNDEF;
    out->gen = true;
    jv at = ifd__j_arg(a, -1, "attribute", UNDEF);
    if (at.t != V_UNDEF) {
        jv dflt = ifd__j_arg(a, -1, "default", UNDEF);
        for (size_t i = 0; i < in->n && !r->rc; i++) {
            jv x = attr_path(r, in->v[i], at);
            ifd__j_list_push(r, out, x.t == V_UNDEF ? dflt : x);
        }
        return r->rc ? UNDEF : ifd__j_vlist(out);
    }
    jv fname = ifd__j_arg(a, 0, NULL, UNDEF);
    if (fname.t != V_STR) {
        ifd__j_rerr(r, IFD_EINVAL, "map: expected a filter name or attribute=");
        return UNDEF;
    }
    int fid = ifd__jinja_filter_id(fname.u.s->s, fname.u.s->n);
    if (fid < 0) {
        ifd__j_rerr(r, IFD_ENOTSUP, "no filter named '%s'", fname.u.s->s);
        return UNDEF;
    }
    args_t fa = {a->pos + 1, a->npos - 1, a->kw, a->kwv, a->nkw};
    for (size_t i = 0; i < in->n && !r->rc; i++)
        ifd__j_list_push(r, out, ifd__j_apply_filter(r, f, fid, in->v[i], &fa));
    return r->rc ? UNDEF : ifd__j_vlist(out);
}

static jv int_of(R *r, jv v, jv dflt)
{
    (void)r;
    if (v.t == V_INT || v.t == V_BOOL)
        return ifd__j_vint(ifd__j_num_i(v));
    if (v.t == V_FLOAT)
        return isfinite(v.u.f) ? ifd__j_vint((int64_t)v.u.f) : dflt;
    if (v.t == V_STR) {
        char buf[64];
        const char *s = v.u.s->s;
        size_t n = v.u.s->n;
        while (n && (*s == ' ' || *s == '\t' || *s == '\n'))
            s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n'))
            n--;
        if (!n || n >= sizeof buf)
            return dflt;
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            if (s[i] != '_')
                buf[o++] = s[i];
        buf[o] = '\0';
        char *e;
        long long x = strtoll(buf, &e, 10);
        if (*e == '\0')
            return ifd__j_vint(x);
        double d = strtod(buf, &e);
        if (*e == '\0' && isfinite(d))
            return ifd__j_vint((int64_t)d);
    }
    return dflt;
}

jv ifd__j_apply_filter(R *r, frame_t *f, int id, jv v, const args_t *a)
{
    if (r->rc)
        return UNDEF;
    switch (id) {
    case IFD__JF_SAFE: {
        jv s = ifd__j_to_str(r, v);
        s.markup = !r->rc;
        return s;
    }
    case IFD__JF_STRING:
        return ifd__j_to_str(r, v);
    case IFD__JF_TOJSON:
        return tojson_filter(r, v, a);
    case IFD__JF_INDENT:
        return indent_filter(r, v, a);
    case IFD__JF_TRIM: {
        jv s = ifd__j_to_str(r, v), ch = ifd__j_arg(a, 0, "chars", NONE);
        if (r->rc || (ch.t != V_NONE && ifd__j_need_str(r, ch, "trim")))
            return UNDEF;
        return ifd__j_py_strip(r, s.u.s, ch.t == V_STR ? ch.u.s : NULL, 3);
    }
    case IFD__JF_LOWER:
        return case_str(r, v, 0);
    case IFD__JF_UPPER:
        return case_str(r, v, 1);
    case IFD__JF_CAPITALIZE:
        return case_str(r, v, 2);
    case IFD__JF_TITLE:
        return title_filter(r, v);
    case IFD__JF_LENGTH:
    case IFD__JF_COUNT:
        switch (v.t) {
        case V_STR:
            return ifd__j_vint((int64_t)ifd__j_u8count(v.u.s->s, v.u.s->n));
        case V_LIST:
            if (v.u.l->gen)
                break;
            return ifd__j_vint((int64_t)v.u.l->n);
        case V_DICT:
            return ifd__j_vint((int64_t)v.u.d->n);
        case V_UNDEF:
            return ifd__j_vint(0);
        default:
            break;
        }
        ifd__j_rerr(r, IFD_EINVAL, "object of type '%s' has no len()", ifd__j_type_name(v));
        return UNDEF;
    case IFD__JF_DEFAULT:
    case IFD__JF_D: {
        jv d = ifd__j_arg(a, 0, "default_value", ifd__j_vstr(r, "", 0));
        bool boolean = ifd__j_truthy(ifd__j_arg(a, 1, "boolean", ifd__j_vbool(false)));
        return v.t == V_UNDEF || (boolean && !ifd__j_truthy(v)) ? d : v;
    }
    case IFD__JF_JOIN: {
        jv sep = ifd__j_arg(a, 0, "d", ifd__j_vstr(r, "", 0)),
           at = ifd__j_arg(a, 1, "attribute", UNDEF);
        jlist *l = ifd__j_iter_list(r, v);
        if (!l)
            return UNDEF;
        if (at.t != V_UNDEF) {
            jlist *m = ifd__j_mklist(r, l->n);
            for (size_t i = 0; m && i < l->n; i++)
                m->v[m->n++] = attr_path(r, l->v[i], at);
            l = m;
        }
        return l ? str_join(r, l, sep) : UNDEF;
    }
    case IFD__JF_FIRST:
    case IFD__JF_LAST: {
        jlist *l = ifd__j_iter_list(r, v);
        if (l && l->gen && id == IFD__JF_LAST) {
            ifd__j_rerr(r, IFD_EINVAL, "'generator' object is not reversible");
            return UNDEF;
        }
        if (!l || !l->n)
            return UNDEF;
        return id == IFD__JF_FIRST ? l->v[0] : l->v[l->n - 1];
    }
    case IFD__JF_ITEMS:
    case IFD__JF_DICTSORT: {
        if (v.t == V_UNDEF)
            return ifd__j_vlist(ifd__j_mklist(r, 0));
        if (v.t != V_DICT) {
            ifd__j_rerr(r, IFD_EINVAL, "%s: expected a mapping",
                        id == IFD__JF_ITEMS ? "items" : "dictsort");
            return UNDEF;
        }
        jlist *l = ifd__j_mklist(r, v.u.d->n);
        for (size_t i = 0; l && i < v.u.d->n; i++) {
            jlist *pr = ifd__j_mklist(r, 2);
            if (!pr)
                return UNDEF;
            pr->v[0] = v.u.d->k[i];
            pr->v[1] = v.u.d->v[i];
            pr->n = 2;
            pr->tuple = true;
            l->v[l->n++] = ifd__j_vlist(pr);
        }
        if (!l || id == IFD__JF_ITEMS)
            return ifd__j_vlist(l);
        bool cs = ifd__j_truthy(ifd__j_arg(a, 0, "case_sensitive", ifd__j_vbool(false)));
        jv by = ifd__j_arg(a, 1, "by", UNDEF);
        bool rev = ifd__j_truthy(ifd__j_arg(a, 2, "reverse", ifd__j_vbool(false)));
        int pos = by.t == V_STR && by.u.s->n == 5 && !memcmp(by.u.s->s, "value", 5) ? 1 : 0;
        jv *keys = ifd__j_ralloc(r, (l->n + 1) * sizeof *keys);
        if (!keys)
            return UNDEF;
        for (size_t i = 0; i < l->n; i++)
            keys[i] = lower_key(r, l->v[i].u.l->v[pos], cs);
        return ifd__j_vlist(sorted(r, l, keys, rev));
    }
    case IFD__JF_SORT:
    case IFD__JF_UNIQUE:
    case IFD__JF_MIN:
    case IFD__JF_MAX: {
        jlist *l = ifd__j_iter_list(r, v);
        if (!l)
            return UNDEF;
        bool rev =
            id == IFD__JF_SORT && ifd__j_truthy(ifd__j_arg(a, 0, "reverse", ifd__j_vbool(false)));
        int cpos = id == IFD__JF_SORT ? 1 : 0;
        bool cs = ifd__j_truthy(ifd__j_arg(a, cpos, "case_sensitive", ifd__j_vbool(false)));
        jv at = ifd__j_arg(a, cpos + 1, "attribute", UNDEF);
        jv *keys = ifd__j_ralloc(r, (l->n + 1) * sizeof *keys);
        if (!keys)
            return UNDEF;
        for (size_t i = 0; i < l->n; i++)
            keys[i] = lower_key(r, at.t != V_UNDEF ? attr_path(r, l->v[i], at) : l->v[i], cs);
        if (id == IFD__JF_SORT)
            return ifd__j_vlist(sorted(r, l, keys, rev));
        if (id == IFD__JF_UNIQUE)
            return ifd__j_vlist(unique(r, l, keys));
        if (!l->n)
            return UNDEF;
        size_t best = 0;
        for (size_t i = 1; i < l->n && !r->rc; i++) {
            int c;
            if (ifd__j_compare(r, keys[i], keys[best], &c))
                return UNDEF;
            if (id == IFD__JF_MIN ? c < 0 : c > 0)
                best = i;
        }
        return l->v[best];
    }
    case IFD__JF_REVERSE: {
        if (v.t == V_STR) {
            jv lo = NONE, hi = NONE;
            return ifd__j_do_slice(r, v, lo, hi, ifd__j_vint(-1));
        }
        jlist *l = ifd__j_iter_list(r, v), *o = l ? ifd__j_mklist(r, l->n) : NULL;
        for (size_t i = 0; o && i < l->n; i++)
            o->v[o->n++] = l->v[l->n - 1 - i];
        return ifd__j_vlist(o);
    }
    case IFD__JF_LIST: {
        jlist *l = ifd__j_iter_list(r, v), *o = l ? ifd__j_mklist(r, l->n) : NULL;
        for (size_t i = 0; o && i < l->n; i++)
            o->v[o->n++] = l->v[i];
        return ifd__j_vlist(o);
    }
    case IFD__JF_SELECT:
    case IFD__JF_REJECT:
    case IFD__JF_SELECTATTR:
    case IFD__JF_REJECTATTR:
        return select_filter(r, id, v, a);
    case IFD__JF_MAP:
        return map_filter(r, f, v, a);
    case IFD__JF_REPLACE: {
        jv s = ifd__j_to_str(r, v), o = ifd__j_to_str(r, ifd__j_arg(a, 0, "old", UNDEF)),
           nw = ifd__j_to_str(r, ifd__j_arg(a, 1, "new", UNDEF)),
           c = ifd__j_arg(a, 2, "count", NONE);
        if (r->rc)
            return UNDEF;
        return str_replace(r, s.u.s, o.u.s, nw.u.s, c.t == V_NONE ? -1 : ifd__j_num_i(c));
    }
    case IFD__JF_INT:
        return int_of(r, v, ifd__j_arg(a, 0, "default", ifd__j_vint(0)));
    case IFD__JF_FLOAT: {
        if (ifd__j_is_num(v))
            return ifd__j_vfloat(ifd__j_num_f(v));
        if (v.t == V_STR) {
            char *e;
            double d = strtod(v.u.s->s, &e);
            if (e != v.u.s->s && *e == '\0')
                return ifd__j_vfloat(d);
        }
        return ifd__j_arg(a, 0, "default", ifd__j_vfloat(0));
    }
    case IFD__JF_ABS:
        if (!ifd__j_is_num(v)) {
            ifd__j_rerr(r, IFD_EINVAL, "bad operand type for abs(): '%s'", ifd__j_type_name(v));
            return UNDEF;
        }
        return v.t == V_FLOAT
                   ? ifd__j_vfloat(fabs(v.u.f))
                   : ifd__j_vint(ifd__j_num_i(v) < 0 ? -ifd__j_num_i(v) : ifd__j_num_i(v));
    case IFD__JF_ROUND: {
        jv pr = ifd__j_arg(a, 0, "precision", ifd__j_vint(0)),
           m = ifd__j_arg(a, 1, "method", UNDEF);
        if (!ifd__j_is_num(v)) {
            ifd__j_rerr(r, IFD_EINVAL, "round: expected a number");
            return UNDEF;
        }
        double sc = pow(10, (double)ifd__j_num_i(pr)), x = ifd__j_num_f(v) * sc;
        const char *ms = m.t == V_STR ? m.u.s->s : "common";
        x = !strcmp(ms, "ceil") ? ceil(x) : !strcmp(ms, "floor") ? floor(x) : round(x);
        return ifd__j_vfloat(x / sc);
    }
    case IFD__JF_SUM: {
        jlist *l = ifd__j_iter_list(r, v);
        jv at = ifd__j_arg(a, 0, "attribute", UNDEF),
           acc = ifd__j_arg(a, 1, "start", ifd__j_vint(0));
        for (size_t i = 0; l && i < l->n && !r->rc; i++)
            acc = ifd__j_arith(r, IFD__OP_ADD, acc,
                               at.t != V_UNDEF ? attr_path(r, l->v[i], at) : l->v[i]);
        return acc;
    }
    case IFD__JF_WORDCOUNT: {
        jv s = ifd__j_to_str(r, v);
        if (r->rc)
            return UNDEF;
        int64_t k = 0;
        bool in = false;
        for (size_t i = 0; i < s.u.s->n; i++) {
            char c = s.u.s->s[i];
            bool w =
                (c >= '0' && c <= '9') || ifd__j_alpha_c(c) || c == '_' || (unsigned char)c >= 0x80;
            if (w && !in)
                k++;
            in = w;
        }
        return ifd__j_vint(k);
    }
    default:
        ifd__j_rerr(r, IFD_EINVAL, "no such filter");
        return UNDEF;
    }
}

/* ---- calls ----------------------------------------------------------------------------- */

/* Python str.format with {} / {0} / {name} fields and no format specs. */
static jv str_format(R *r, const jstr *fmt, const args_t *a)
{
    ifd_buf_t b = IFD_BUF_INIT;
    size_t auto_i = 0;
    for (size_t i = 0; i < fmt->n && !r->rc; i++) {
        char c = fmt->s[i];
        if ((c == '{' || c == '}') && i + 1 < fmt->n && fmt->s[i + 1] == c) {
            ifd__j_put(r, &b, &c, 1);
            i++;
            continue;
        }
        if (c == '}') {
            ifd__j_rerr(r, IFD_EINVAL, "format: single '}' encountered");
            break;
        }
        if (c != '{') {
            ifd__j_put(r, &b, &c, 1);
            continue;
        }
        const char *e = memchr(fmt->s + i, '}', fmt->n - i);
        if (!e) {
            ifd__j_rerr(r, IFD_EINVAL, "format: single '{' encountered");
            break;
        }
        const char *fld = fmt->s + i + 1;
        size_t fl = (size_t)(e - fld);
        if (memchr(fld, ':', fl) || memchr(fld, '!', fl) || memchr(fld, '[', fl) ||
            memchr(fld, '.', fl)) {
            ifd__j_rerr(r, IFD_ENOTSUP, "format: conversions and format specs are not supported");
            break;
        }
        jv v = UNDEF;
        bool found = false;
        if (fl == 0 || (fld[0] >= '0' && fld[0] <= '9')) {
            size_t k = fl == 0 ? auto_i++ : (size_t)strtoul(fld, NULL, 10);
            if (k < a->npos) {
                v = a->pos[k];
                found = true;
            }
        } else {
            for (size_t j = 0; j < a->nkw; j++)
                if (strlen(a->kw[j]) == fl && !memcmp(a->kw[j], fld, fl)) {
                    v = a->kwv[j];
                    found = true;
                }
        }
        if (!found) {
            ifd__j_rerr(r, IFD_EINVAL, "format: missing argument for '{%.*s}'", (int)fl, fld);
            break;
        }
        ifd__j_to_text(r, &b, v, false);
        i = (size_t)(e - fmt->s);
    }
    jv o = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

static jv find_sub(const jstr *s, const jstr *sub, bool right, bool count)
{
    int64_t k = 0, pos = -1;
    if (!sub->n)
        return ifd__j_vint(count   ? (int64_t)ifd__j_u8count(s->s, s->n) + 1
                           : right ? (int64_t)ifd__j_u8count(s->s, s->n)
                                   : 0);
    for (size_t i = 0; i + sub->n <= s->n; i++)
        if (memcmp(s->s + i, sub->s, sub->n) == 0) {
            k++;
            pos = (int64_t)ifd__j_u8count(s->s, i);
            if (count)
                i += sub->n - 1;
            else if (!right)
                break;
        }
    return ifd__j_vint(count ? k : pos);
}

static bool affix(const jstr *s, const jstr *x, bool end)
{
    if (x->n > s->n)
        return false;
    return memcmp(s->s + (end ? s->n - x->n : 0), x->s, x->n) == 0;
}

static jv str_method(R *r, const jstr *s, const char *m, const args_t *a)
{
    jv self = {.t = V_STR, .u.s = (jstr *)s};
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        jv ch = ifd__j_arg(a, 0, NULL, NONE);
        if (ch.t != V_NONE && ifd__j_need_str(r, ch, m))
            return UNDEF;
        return ifd__j_py_strip(r, s, ch.t == V_STR ? ch.u.s : NULL,
                               m[0] == 'l'   ? 1
                               : m[0] == 'r' ? 2
                                             : 3);
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        jv ms = ifd__j_arg(a, 1, "maxsplit", ifd__j_vint(-1));
        return str_split(r, s, ifd__j_arg(a, 0, "sep", NONE), ifd__j_num_i(ms), m[0] == 'r');
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        jv x = ifd__j_arg(a, 0, NULL, UNDEF);
        bool end = m[0] == 'e';
        if (x.t == V_LIST) {
            for (size_t i = 0; i < x.u.l->n; i++) {
                if (ifd__j_need_str(r, x.u.l->v[i], m))
                    return UNDEF;
                if (affix(s, x.u.l->v[i].u.s, end))
                    return ifd__j_vbool(true);
            }
            return ifd__j_vbool(false);
        }
        if (ifd__j_need_str(r, x, m))
            return UNDEF;
        return ifd__j_vbool(affix(s, x.u.s, end));
    }
    if (!strcmp(m, "replace")) {
        jv o = ifd__j_arg(a, 0, NULL, UNDEF), nw = ifd__j_arg(a, 1, NULL, UNDEF),
           c = ifd__j_arg(a, 2, "count", ifd__j_vint(-1));
        if (ifd__j_need_str(r, o, m) || ifd__j_need_str(r, nw, m))
            return UNDEF;
        return str_replace(r, s, o.u.s, nw.u.s, ifd__j_num_i(c));
    }
    if (!strcmp(m, "upper"))
        return case_str(r, self, 1);
    if (!strcmp(m, "lower"))
        return case_str(r, self, 0);
    if (!strcmp(m, "capitalize"))
        return case_str(r, self, 2);
    if (!strcmp(m, "title"))
        return case_str(r, self, 3);
    if (!strcmp(m, "format"))
        return str_format(r, s, a);
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count")) {
        jv x = ifd__j_arg(a, 0, NULL, UNDEF);
        if (ifd__j_need_str(r, x, m))
            return UNDEF;
        return find_sub(s, x.u.s, m[0] == 'r', m[0] == 'c');
    }
    if (!strcmp(m, "join")) {
        jlist *l = ifd__j_iter_list(r, ifd__j_arg(a, 0, NULL, UNDEF));
        if (!l)
            return UNDEF;
        for (size_t i = 0; i < l->n; i++)
            if (ifd__j_need_str(r, l->v[i], "join"))
                return UNDEF;
        return str_join(r, l, self);
    }
    if (!strcmp(m, "splitlines")) {
        jlist *l = ifd__j_mklist(r, 0);
        size_t i = 0;
        while (l && i < s->n) {
            size_t e = i;
            while (e < s->n && s->s[e] != '\n' && s->s[e] != '\r')
                e++;
            ifd__j_list_push(r, l, ifd__j_vstr(r, s->s + i, e - i));
            i = e < s->n ? e + (s->s[e] == '\r' && e + 1 < s->n && s->s[e + 1] == '\n' ? 2 : 1) : e;
        }
        return ifd__j_vlist(l);
    }
    /* is* predicates (ASCII classes; non-ASCII counts as alphabetic) */
    bool all = s->n > 0, cased = false, lower = true, upper = true;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->s[i];
        bool dig = c >= '0' && c <= '9', al = ifd__j_alpha_c((char)c) || c >= 0x80,
             sp = c == ' ' || (c >= 9 && c <= 13);
        if (!strcmp(m, "isdigit"))
            all = all && dig;
        else if (!strcmp(m, "isalpha"))
            all = all && al;
        else if (!strcmp(m, "isalnum"))
            all = all && (al || dig);
        else if (!strcmp(m, "isspace"))
            all = all && sp;
        if (ifd__j_alpha_c((char)c)) {
            cased = true;
            lower = lower && c >= 'a';
            upper = upper && c < 'a';
        }
    }
    if (!strcmp(m, "islower"))
        return ifd__j_vbool(cased && lower);
    if (!strcmp(m, "isupper"))
        return ifd__j_vbool(cased && upper);
    return ifd__j_vbool(all);
}

jv ifd__j_call_method(R *r, jv self, const char *m, const args_t *a)
{
    if (self.t == V_STR)
        return str_method(r, self.u.s, m, a);
    if (self.t == V_DICT) {
        const jdict *d = self.u.d;
        if (!strcmp(m, "get")) {
            jv k = ifd__j_arg(a, 0, NULL, UNDEF), dflt = ifd__j_arg(a, 1, NULL, NONE);
            jv *e = ifd__j_dict_findv(r, d, k);
            return e ? *e : dflt;
        }
        if (!strcmp(m, "items"))
            return ifd__j_apply_filter(r, NULL, IFD__JF_ITEMS, self, a);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            jlist *l = ifd__j_mklist(r, d->n);
            for (size_t i = 0; l && i < d->n; i++)
                l->v[l->n++] = m[0] == 'k' ? d->k[i] : d->v[i];
            return ifd__j_vlist(l);
        }
        if (!strcmp(m, "copy")) {
            jdict *c = ifd__j_mkdict(r);
            for (size_t i = 0; c && i < d->n; i++)
                ifd__j_dict_setv(r, c, d->k[i], d->v[i]);
            return ifd__j_vdict(c, V_DICT);
        }
    }
    if (self.t == V_LIST) {
        if (!strcmp(m, "index") || !strcmp(m, "count")) {
            jv x = ifd__j_arg(a, 0, NULL, UNDEF);
            int64_t k = 0;
            for (size_t i = 0; i < self.u.l->n; i++)
                if (ifd__j_equal(r, self.u.l->v[i], x)) {
                    if (m[0] == 'i')
                        return ifd__j_vint((int64_t)i);
                    k++;
                }
            if (m[0] == 'i') {
                ifd__j_rerr(r, IFD_EINVAL, "list.index(x): x not in list");
                return UNDEF;
            }
            return ifd__j_vint(k);
        }
        if (!strcmp(m, "copy"))
            return ifd__j_apply_filter(r, NULL, IFD__JF_LIST, self, a);
    }
    ifd__j_rerr(r, IFD_EINVAL,
                "access to attribute '%s' of '%s' object is unsafe (the sandbox "
                "forbids modifying values)",
                m, ifd__j_type_name(self));
    return UNDEF;
}
