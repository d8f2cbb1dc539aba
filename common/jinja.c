/*
 * jinja.c — the renderer of jinja.h: values, scopes, expressions, filters,
 * tests, methods and statements over the AST of jinja_parse.c.
 *
 * Every value of one rendering lives in that rendering's arena (no
 * refcounts): the arena is freed when the rendering ends, and its size is
 * capped by limits.max_memory. Strings are byte strings holding UTF-8 and
 * are indexed, sliced and measured by code point as Python does. Dicts keep
 * insertion order and have string keys (what JSON gives). Scopes: the
 * context, the top-level frame, one frame per for-loop body and per macro
 * call (a macro sees its parameters and the top-level frame).
 *
 * Error results carry a message in errbuf; a raise_exception call puts
 * exactly its argument there.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "jinja.h"
#include "jinja_impl.h"

/* ---- values ---------------------------------------------------------------------------- */

typedef enum {
    V_UNDEF,
    V_NONE,
    V_BOOL,
    V_INT,
    V_FLOAT,
    V_STR,
    V_LIST,
    V_DICT,
    V_NS,
    V_MACRO,
    V_FUNC,
    V_LOOP,
} vt_t;

typedef struct jv jv;
typedef struct {
    size_t n;
    char s[];
} jstr;
typedef struct {
    size_t n, cap;
    jv *v;
    bool tuple;
    bool gen; /* a Python generator (map/select/…): no len(), no index, always true */
} jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

struct jv {
    uint8_t t;
    bool markup; /* V_STR: a markupsafe.Markup (from |safe): `+` escapes the other side */
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s; /* V_STR; V_UNDEF: the missing name, or NULL */
        jlist *l;
        jdict *d; /* V_DICT, V_NS */
        const ifd__jn_t *m;
        jfunc *fn;
        jloop *lp;
    } u;
};

struct jdict {
    size_t n, cap;
    jv *k; /* str, int, float, bool or None */
    jv *v;
};

typedef enum {
    F_RANGE,
    F_NAMESPACE,
    F_RAISE,
    F_STRFTIME,
    F_DICT,
    F_METHOD, /* a method of self named by `name` */
    F_CYCLE,  /* loop.cycle */
} fkind_t;

struct jfunc {
    fkind_t kind;
    const char *name;
    jv self;
};

struct jloop {
    jlist *items;
    size_t i;
};

static const jv UNDEF = {.t = V_UNDEF};
static const jv NONE = {.t = V_NONE};

typedef struct frame {
    jdict *vars;
    struct frame *parent;
} frame_t;

typedef struct {
    ifd_arena_t A;
    ifd_jinja_limits_t lim;
    uint64_t iters;
    unsigned depth;
    int rc;
    char *err;
    size_t errlen;
    int line;
    jdict *globals;
    frame_t *root;
    ifd_buf_t *out;
} R;

__attribute__((format(printf, 3, 4))) static int rerr(R *r, int rc, const char *fmt, ...)
{
    if (r->rc)
        return r->rc;
    r->rc = rc;
    if (r->err && r->errlen) {
        int k = snprintf(r->err, r->errlen, "line %d: ", r->line);
        if (k >= 0 && (size_t)k < r->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

static void *ralloc(R *r, size_t n)
{
    if (r->rc)
        return NULL;
    if (r->A.total + n > r->lim.max_memory) {
        rerr(r, IFD_ETOOBIG, "template rendering needs more than %zu bytes of memory",
             r->lim.max_memory);
        return NULL;
    }
    void *p = ifd_arena_alloc(&r->A, n ? n : 1);
    if (!p)
        rerr(r, IFD_ENOMEM, "out of memory");
    return p;
}

static jstr *mkstr(R *r, const char *s, size_t n)
{
    jstr *j = ralloc(r, sizeof *j + n + 1);
    if (!j)
        return NULL;
    j->n = n;
    if (n)
        memcpy(j->s, s, n);
    j->s[n] = '\0';
    return j;
}

static jv vstr(R *r, const char *s, size_t n)
{
    jv v = {.t = V_STR};
    v.u.s = mkstr(r, s, n);
    return v.u.s ? v : UNDEF;
}

static jv vint(int64_t i)
{
    jv v = {.t = V_INT};
    v.u.i = i;
    return v;
}

static jv vfloat(double f)
{
    jv v = {.t = V_FLOAT};
    v.u.f = f;
    return v;
}

static jv vbool(bool b)
{
    jv v = {.t = V_BOOL};
    v.u.b = b;
    return v;
}

static jlist *mklist(R *r, size_t cap)
{
    jlist *l = ralloc(r, sizeof *l);
    if (!l)
        return NULL;
    memset(l, 0, sizeof *l);
    if (cap && !(l->v = ralloc(r, cap * sizeof *l->v)))
        return NULL;
    l->cap = cap;
    return l;
}

static int list_push(R *r, jlist *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = ralloc(r, cap * sizeof *nv);
        if (!nv)
            return r->rc;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

static jv vlist(jlist *l)
{
    jv v = {.t = V_LIST};
    v.u.l = l;
    return l ? v : UNDEF;
}

static jdict *mkdict(R *r)
{
    jdict *d = ralloc(r, sizeof *d);
    if (d)
        memset(d, 0, sizeof *d);
    return d;
}

static jv vdict(jdict *d, int t)
{
    jv v = {.t = (uint8_t)t};
    v.u.d = d;
    return d ? v : UNDEF;
}

static jv *dict_find(const jdict *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].u.s->n == n && memcmp(d->k[i].u.s->s, k, n) == 0)
            return &d->v[i];
    return NULL;
}

static bool equal(jv a, jv b);

static bool hashable(jv k)
{
    return k.t == V_STR || k.t == V_INT || k.t == V_FLOAT || k.t == V_BOOL || k.t == V_NONE;
}

/* Lookup by any hashable key (1, 1.0 and True are the same key, as in Python). */
static jv *dict_findv(const jdict *d, jv k)
{
    if (k.t == V_STR)
        return dict_find(d, k.u.s->s, k.u.s->n);
    if (!hashable(k))
        return NULL;
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t != V_STR && equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

static int dict_setv(R *r, jdict *d, jv k, jv v)
{
    jv *e = dict_findv(d, k);
    if (e) {
        *e = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *nk = ralloc(r, cap * sizeof *nk);
        jv *nv = ralloc(r, cap * sizeof *nv);
        if (!nk || !nv)
            return r->rc;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

static int dict_set(R *r, jdict *d, jstr *k, jv v)
{
    return dict_setv(r, d, (jv){.t = V_STR, .u.s = k}, v);
}

static int dict_setc(R *r, jdict *d, const char *k, jv v)
{
    jstr *s = mkstr(r, k, strlen(k));
    return s ? dict_set(r, d, s, v) : r->rc;
}

static jv from_json(R *r, const json_t *j, int depth)
{
    if (depth > 512) {
        rerr(r, IFD_ETOOBIG, "context nested too deeply");
        return UNDEF;
    }
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = mkdict(r);
        const char *k;
        json_t *v;
        if (!d)
            return UNDEF;
        json_object_foreach((json_t *)j, k, v)
        {
            jv x = from_json(r, v, depth + 1);
            jstr *ks = mkstr(r, k, strlen(k));
            if (r->rc || !ks || dict_set(r, d, ks, x))
                return UNDEF;
        }
        return vdict(d, V_DICT);
    }
    case JSON_ARRAY: {
        jlist *l = mklist(r, json_array_size(j));
        size_t i;
        json_t *v;
        if (!l)
            return UNDEF;
        json_array_foreach(j, i, v)
        {
            if (list_push(r, l, from_json(r, v, depth + 1)))
                return UNDEF;
        }
        return vlist(l);
    }
    case JSON_STRING: return vstr(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return vint((int64_t)json_integer_value(j));
    case JSON_REAL: return vfloat(json_real_value(j));
    case JSON_TRUE: return vbool(true);
    case JSON_FALSE: return vbool(false);
    default: return NONE;
    }
}

/* ---- UTF-8 and Python string helpers --------------------------------------------------- */

/* Length of the UTF-8 sequence at s (1 for an invalid byte). */
static size_t u8len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (l > n)
        return 1;
    for (size_t i = 1; i < l; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 1;
    return l;
}

static uint32_t u8cp(const unsigned char *s, size_t l)
{
    if (l == 1)
        return s[0];
    uint32_t cp = s[0] & (0xFF >> (l + 1));
    for (size_t i = 1; i < l; i++)
        cp = (cp << 6) | (s[i] & 0x3Fu);
    return cp;
}

static size_t u8count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i += u8len((const unsigned char *)s + i, n - i))
        k++;
    return k;
}

/* Byte offset of code point index ci (ci ≤ count). */
static size_t u8off(const char *s, size_t n, size_t ci)
{
    size_t i = 0;
    while (ci-- && i < n)
        i += u8len((const unsigned char *)s + i, n - i);
    return i;
}

/* Python str.isspace() for one code point. */
static bool py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool in_chars(uint32_t c, const jstr *chars)
{
    const unsigned char *s = (const unsigned char *)chars->s;
    for (size_t i = 0; i < chars->n;) {
        size_t l = u8len(s + i, chars->n - i);
        if (u8cp(s + i, l) == c)
            return true;
        i += l;
    }
    return false;
}

/* strip: which = 1 left, 2 right, 3 both; chars NULL = whitespace. */
static jv py_strip(R *r, const jstr *s, const jstr *chars, int which)
{
    const unsigned char *b = (const unsigned char *)s->s;
    size_t a = 0, e = s->n;
    if (which & 1)
        while (a < e) {
            size_t l = u8len(b + a, e - a);
            uint32_t c = u8cp(b + a, l);
            if (chars ? !in_chars(c, chars) : !py_space(c))
                break;
            a += l;
        }
    if (which & 2)
        while (e > a) {
            size_t k = e - 1;
            while (k > a && (b[k] & 0xC0) == 0x80)
                k--;
            size_t l = u8len(b + k, e - k);
            if (k + l != e)
                l = 1, k = e - 1;
            uint32_t c = u8cp(b + k, l);
            if (chars ? !in_chars(c, chars) : !py_space(c))
                break;
            e = k;
        }
    return vstr(r, s->s + a, e - a);
}

static char lower_c(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

static char upper_c(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
}

static bool alpha_c(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* ---- buffers and conversion to text ---------------------------------------------------- */

static int put(R *r, ifd_buf_t *b, const char *s, size_t n)
{
    if (r->rc)
        return r->rc;
    if (b->len + n > r->lim.max_output)
        return rerr(r, IFD_ETOOBIG, "template output larger than %zu bytes", r->lim.max_output);
    if (ifd_buf_append(b, s, n))
        return rerr(r, IFD_ENOMEM, "out of memory");
    return 0;
}

static int puts_(R *r, ifd_buf_t *b, const char *s)
{
    return put(r, b, s, strlen(s));
}

/* Python repr(float). */
static void fmt_float(double f, char *out, size_t cap)
{
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[64];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f)
            break;
    }
    /* buf = [-]d[.ddd]e±XX */
    const char *s = buf;
    bool neg = *s == '-';
    if (neg)
        s++;
    char digits[32];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int ex = atoi(s + 1);
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -ex - 1; i++)
                out[o++] = '0';
            for (int i = 0; i < nd; i++)
                out[o++] = digits[i];
        } else {
            for (int i = 0; i <= ex; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++)
                    out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        snprintf(out + o, cap - o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
}

static int to_text(R *r, ifd_buf_t *b, jv v, bool repr);

static int repr_str(R *r, ifd_buf_t *b, const jstr *s)
{
    bool sq = memchr(s->s, '\'', s->n) != NULL, dq = memchr(s->s, '"', s->n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    put(r, b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->s[i];
        char esc[8];
        if (c == '\\' || c == (unsigned char)q) {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(r, b, esc, 2);
        } else if (c == '\n') {
            puts_(r, b, "\\n");
        } else if (c == '\r') {
            puts_(r, b, "\\r");
        } else if (c == '\t') {
            puts_(r, b, "\\t");
        } else if (c < 0x20 || c == 0x7F) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            puts_(r, b, esc);
        } else {
            put(r, b, (const char *)&c, 1);
        }
    }
    return put(r, b, &q, 1);
}

/* str(v) (repr=false) or repr(v) into b. */
static int to_text(R *r, ifd_buf_t *b, jv v, bool repr)
{
    char num[64];
    switch (v.t) {
    case V_UNDEF: return 0;
    case V_NONE: return puts_(r, b, "None");
    case V_BOOL: return puts_(r, b, v.u.b ? "True" : "False");
    case V_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return puts_(r, b, num);
    case V_FLOAT: fmt_float(v.u.f, num, sizeof num); return puts_(r, b, num);
    case V_STR: return repr ? repr_str(r, b, v.u.s) : put(r, b, v.u.s->s, v.u.s->n);
    case V_LIST:
        if (v.u.l->gen)
            return puts_(r, b, "<generator object>");
        puts_(r, b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                puts_(r, b, ", ");
            to_text(r, b, v.u.l->v[i], true);
        }
        if (v.u.l->tuple && v.u.l->n == 1)
            puts_(r, b, ",");
        return puts_(r, b, v.u.l->tuple ? ")" : "]");
    case V_DICT:
    case V_NS:
        puts_(r, b, v.t == V_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                puts_(r, b, ", ");
            to_text(r, b, v.u.d->k[i], true);
            puts_(r, b, ": ");
            to_text(r, b, v.u.d->v[i], true);
        }
        return puts_(r, b, v.t == V_NS ? "}>" : "}");
    case V_MACRO:
        puts_(r, b, "<Macro '");
        puts_(r, b, v.u.m->s);
        return puts_(r, b, "'>");
    default: return puts_(r, b, "<function>");
    }
}

/* str(v) as a value (strings are returned as they are). */
static jv to_str(R *r, jv v)
{
    if (v.t == V_STR)
        return v;
    ifd_buf_t b = IFD_BUF_INIT;
    to_text(r, &b, v, false);
    jv s = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return s;
}

/* ---- JSON (Python json.dumps) ---------------------------------------------------------- */

typedef struct {
    const char *indent; /* NULL = no newlines */
    const char *item_sep, *key_sep;
    bool sort_keys, ascii;
} jsonopt_t;

static int json_str(R *r, ifd_buf_t *b, const char *s, size_t n, bool ascii)
{
    put(r, b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        char esc[16];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(r, b, esc, 2);
            i++;
        } else if (c < 0x20) {
            const char *e = c == '\n'   ? "\\n"
                            : c == '\r' ? "\\r"
                            : c == '\t' ? "\\t"
                            : c == '\b' ? "\\b"
                            : c == '\f' ? "\\f"
                                        : NULL;
            if (e) {
                puts_(r, b, e);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                puts_(r, b, esc);
            }
            i++;
        } else if (c >= 0x80 && ascii) {
            size_t l = u8len(u + i, n - i);
            uint32_t cp = u8cp(u + i, l);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                         0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            puts_(r, b, esc);
            i += l;
        } else {
            put(r, b, s + i, 1);
            i++;
        }
    }
    return put(r, b, "\"", 1);
}

static void json_nl(R *r, ifd_buf_t *b, const jsonopt_t *o, int level)
{
    if (!o->indent)
        return;
    put(r, b, "\n", 1);
    for (int i = 0; i < level; i++)
        puts_(r, b, o->indent);
}

static int keycmp(const void *a, const void *b)
{
    const jstr *x = *(jstr *const *)a, *y = *(jstr *const *)b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int compare(R *r, jv a, jv b, int *out);

/* Insertion sort of key indices (json.dumps(sort_keys=True); dicts are small). */
static void sort_keys_idx(R *r, const jdict *d, size_t *idx)
{
    for (size_t i = 1; i < d->n && !r->rc; i++) {
        size_t x = idx[i], j = i;
        int c = 0;
        while (j > 0 && !compare(r, d->k[idx[j - 1]], d->k[x], &c) && c > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
}

static int to_json(R *r, ifd_buf_t *b, jv v, const jsonopt_t *o, int level)
{
    char num[64];
    if (level > 512)
        return rerr(r, IFD_ETOOBIG, "tojson: value nested too deeply");
    switch (v.t) {
    case V_NONE: return puts_(r, b, "null");
    case V_BOOL: return puts_(r, b, v.u.b ? "true" : "false");
    case V_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return puts_(r, b, num);
    case V_FLOAT:
        if (isnan(v.u.f))
            return puts_(r, b, "NaN");
        if (isinf(v.u.f))
            return puts_(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        fmt_float(v.u.f, num, sizeof num);
        return puts_(r, b, num);
    case V_STR: return json_str(r, b, v.u.s->s, v.u.s->n, o->ascii);
    case V_LIST:
        if (v.u.l->gen)
            return rerr(r, IFD_EINVAL, "tojson: Object of type generator is not JSON serializable");
        if (!v.u.l->n)
            return puts_(r, b, "[]");
        puts_(r, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                puts_(r, b, o->item_sep);
            json_nl(r, b, o, level + 1);
            to_json(r, b, v.u.l->v[i], o, level + 1);
        }
        json_nl(r, b, o, level);
        return puts_(r, b, "]");
    case V_DICT: {
        const jdict *d = v.u.d;
        if (!d->n)
            return puts_(r, b, "{}");
        size_t *idx = ralloc(r, d->n * sizeof *idx);
        if (!idx)
            return r->rc;
        for (size_t i = 0; i < d->n; i++)
            idx[i] = i;
        if (o->sort_keys)
            sort_keys_idx(r, d, idx);
        puts_(r, b, "{");
        for (size_t i = 0; i < d->n && !r->rc; i++) {
            jv k = d->k[idx[i]];
            if (i)
                puts_(r, b, o->item_sep);
            json_nl(r, b, o, level + 1);
            if (k.t == V_STR) {
                json_str(r, b, k.u.s->s, k.u.s->n, o->ascii);
            } else {
                /* json.dumps turns int/float/bool/None keys into strings */
                put(r, b, "\"", 1);
                if (k.t == V_BOOL || k.t == V_NONE)
                    puts_(r, b, k.t == V_NONE ? "null" : k.u.b ? "true" : "false");
                else
                    to_text(r, b, k, false);
                put(r, b, "\"", 1);
            }
            puts_(r, b, o->key_sep);
            to_json(r, b, d->v[idx[i]], o, level + 1);
        }
        json_nl(r, b, o, level);
        return puts_(r, b, "}");
    }
    default:
        return rerr(r, IFD_EINVAL, "tojson: Object of type %s is not JSON serializable",
                    v.t == V_UNDEF ? "Undefined" : v.t == V_NS ? "Namespace" : "function");
    }
}

/* ---- truth, equality, order ------------------------------------------------------------ */

static bool truthy(jv v)
{
    switch (v.t) {
    case V_UNDEF:
    case V_NONE: return false;
    case V_BOOL: return v.u.b;
    case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0;
    case V_STR: return v.u.s->n != 0;
    case V_LIST: return v.u.l->gen || v.u.l->n != 0;
    case V_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v)
{
    return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL;
}

static double num_f(jv v)
{
    return v.t == V_FLOAT ? v.u.f : v.t == V_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t num_i(jv v)
{
    return v.t == V_INT ? v.u.i : v.t == V_BOOL ? v.u.b : (int64_t)v.u.f;
}

static bool str_eq(const jstr *a, const jstr *b)
{
    return a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
}

static bool equal(jv a, jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT)
            return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case V_UNDEF:
    case V_NONE: return true;
    case V_STR: return str_eq(a.u.s, b.u.s);
    case V_LIST:
        if (a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal(a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case V_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = dict_findv(b.u.d, a.u.d->k[i]);
            if (!o || !equal(a.u.d->v[i], *o))
                return false;
        }
        return true;
    case V_NS: return a.u.d == b.u.d;
    case V_MACRO: return a.u.m == b.u.m;
    default: return false;
    }
}

static const char *type_name(jv v)
{
    static const char *const names[] = {"Undefined", "NoneType", "bool",     "int",
                                        "float",     "str",      "list",     "dict",
                                        "Namespace", "Macro",    "function", "LoopContext"};
    if (v.t == V_LIST && (v.u.l->tuple || v.u.l->gen))
        return v.u.l->gen ? "generator" : "tuple";
    return names[v.t];
}

/* Python a < b etc. (*out: -1, 0, 1). Returns 0 or an error. */
static int compare(R *r, jv a, jv b, int *out)
{
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) {
            int64_t x = num_i(a), y = num_i(b);
            *out = (x > y) - (x < y);
        } else {
            double x = num_f(a), y = num_f(b);
            *out = (x > y) - (x < y);
        }
        return 0;
    }
    if (a.t == V_STR && b.t == V_STR) {
        *out = keycmp(&a.u.s, &b.u.s);
        *out = (*out > 0) - (*out < 0);
        return 0;
    }
    if (a.t == V_LIST && b.t == V_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return compare(r, a.u.l->v[i], b.u.l->v[i], out);
        }
        *out = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return rerr(r, IFD_EINVAL, "'<' not supported between instances of '%s' and '%s'",
                type_name(a), type_name(b));
}

/* ---- iteration ------------------------------------------------------------------------- */

/* list(v) for iteration: list as is, dict → keys, str → characters,
 * undefined → empty. */
static jlist *iter_list(R *r, jv v)
{
    switch (v.t) {
    case V_LIST: return v.u.l;
    case V_UNDEF: return mklist(r, 0);
    case V_DICT: {
        jlist *l = mklist(r, v.u.d->n);
        for (size_t i = 0; l && i < v.u.d->n; i++)
            l->v[l->n++] = v.u.d->k[i];
        return l;
    }
    case V_STR: {
        jlist *l = mklist(r, 0);
        const char *s = v.u.s->s;
        for (size_t i = 0; l && i < v.u.s->n;) {
            size_t k = u8len((const unsigned char *)s + i, v.u.s->n - i);
            if (list_push(r, l, vstr(r, s + i, k)))
                return NULL;
            i += k;
        }
        return l;
    }
    default:
        rerr(r, IFD_EINVAL, "'%s' object is not iterable", type_name(v));
        return NULL;
    }
}

static int count_iter(R *r)
{
    if (++r->iters > r->lim.max_iters)
        return rerr(r, IFD_ETOOBIG, "template runs more than %llu loop iterations",
                    (unsigned long long)r->lim.max_iters);
    return 0;
}

/* ---- attribute and item access --------------------------------------------------------- */

static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "replace",
    "upper", "lower", "title", "capitalize", "format", "find", "rfind", "count", "join",
    "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", "pop",
                                           "update", "setdefault", "copy", NULL};
static const char *const list_methods[] = {"append", "pop", "insert", "extend", "remove",
                                           "index", "count", "copy", "reverse", "sort", NULL};

static bool in_names(const char *const *tab, const char *s, size_t n)
{
    for (int i = 0; tab[i]; i++)
        if (strlen(tab[i]) == n && memcmp(tab[i], s, n) == 0)
            return true;
    return false;
}

static jv method(R *r, jv self, const char *name)
{
    jfunc *f = ralloc(r, sizeof *f);
    if (!f)
        return UNDEF;
    f->kind = F_METHOD;
    f->name = name;
    f->self = self;
    return (jv){.t = V_FUNC, .u.fn = f};
}

static jv loop_attr(R *r, jloop *lp, const char *a)
{
    int64_t n = (int64_t)lp->items->n, i = (int64_t)lp->i;
    if (!strcmp(a, "index"))
        return vint(i + 1);
    if (!strcmp(a, "index0"))
        return vint(i);
    if (!strcmp(a, "revindex"))
        return vint(n - i);
    if (!strcmp(a, "revindex0"))
        return vint(n - i - 1);
    if (!strcmp(a, "first"))
        return vbool(i == 0);
    if (!strcmp(a, "last"))
        return vbool(i == n - 1);
    if (!strcmp(a, "length"))
        return vint(n);
    if (!strcmp(a, "depth"))
        return vint(1);
    if (!strcmp(a, "depth0"))
        return vint(0);
    if (!strcmp(a, "previtem"))
        return i > 0 ? lp->items->v[i - 1] : UNDEF;
    if (!strcmp(a, "nextitem"))
        return i + 1 < n ? lp->items->v[i + 1] : UNDEF;
    if (!strcmp(a, "cycle")) {
        jfunc *f = ralloc(r, sizeof *f);
        if (!f)
            return UNDEF;
        f->kind = F_CYCLE;
        f->name = "cycle";
        f->self = (jv){.t = V_LOOP, .u.lp = lp};
        return (jv){.t = V_FUNC, .u.fn = f};
    }
    return UNDEF;
}

static int undefined_error(R *r, jv v)
{
    if (v.u.s)
        return rerr(r, IFD_EINVAL, "'%s' is undefined", v.u.s->s);
    return rerr(r, IFD_EINVAL, "access to an attribute of an undefined value");
}

/* jinja2's getattr(obj, name): attribute (a method) first, then item. */
static jv get_attr(R *r, jv o, const char *a, size_t n)
{
    switch (o.t) {
    case V_UNDEF: undefined_error(r, o); return UNDEF;
    case V_STR:
        if (in_names(str_methods, a, n))
            return method(r, o, a);
        return UNDEF;
    case V_DICT: {
        if (in_names(dict_methods, a, n))
            return method(r, o, a);
        jv *e = dict_find(o.u.d, a, n);
        return e ? *e : UNDEF;
    }
    case V_NS: {
        jv *e = dict_find(o.u.d, a, n);
        return e ? *e : UNDEF;
    }
    case V_LIST:
        if (in_names(list_methods, a, n))
            return method(r, o, a);
        return UNDEF;
    case V_LOOP: return loop_attr(r, o.u.lp, a);
    default: return UNDEF;
    }
}

static bool norm_index(int64_t *i, size_t n)
{
    if (*i < 0)
        *i += (int64_t)n;
    return *i >= 0 && (uint64_t)*i < n;
}

/* jinja2's getitem(obj, key): item first, then attribute for string keys. */
static jv get_item(R *r, jv o, jv k)
{
    if (o.t == V_UNDEF) {
        undefined_error(r, o);
        return UNDEF;
    }
    if (o.t == V_DICT || o.t == V_NS) {
        if (k.t == V_STR) {
            jv *e = dict_find(o.u.d, k.u.s->s, k.u.s->n);
            if (e)
                return *e;
            return o.t == V_DICT ? get_attr(r, o, k.u.s->s, k.u.s->n) : UNDEF;
        }
        jv *e = dict_findv(o.u.d, k);
        return e ? *e : UNDEF;
    }
    if (o.t == V_LIST && o.u.l->gen) {
        rerr(r, IFD_EINVAL, "'generator' object is not subscriptable");
        return UNDEF;
    }
    if ((o.t == V_LIST || o.t == V_STR) && (k.t == V_INT || k.t == V_BOOL)) {
        int64_t i = num_i(k);
        if (o.t == V_LIST)
            return norm_index(&i, o.u.l->n) ? o.u.l->v[i] : UNDEF;
        size_t cnt = u8count(o.u.s->s, o.u.s->n);
        if (!norm_index(&i, cnt))
            return UNDEF;
        size_t b = u8off(o.u.s->s, o.u.s->n, (size_t)i);
        return vstr(r, o.u.s->s + b, u8len((const unsigned char *)o.u.s->s + b, o.u.s->n - b));
    }
    if (k.t == V_STR)
        return get_attr(r, o, k.u.s->s, k.u.s->n);
    return UNDEF;
}

/* Python slice indices for a sequence of length n. */
static int slice_idx(R *r, jv lo, jv hi, jv st, size_t n, int64_t *start, int64_t *stop,
                     int64_t *step)
{
    *step = st.t == V_NONE || st.t == V_UNDEF ? 1 : num_i(st);
    if ((st.t != V_NONE && st.t != V_UNDEF && !is_num(st)) ||
        (lo.t != V_NONE && lo.t != V_UNDEF && !is_num(lo)) ||
        (hi.t != V_NONE && hi.t != V_UNDEF && !is_num(hi)))
        return rerr(r, IFD_EINVAL, "slice indices must be integers or None");
    if (*step == 0)
        return rerr(r, IFD_EINVAL, "slice step cannot be zero");
    int64_t len = (int64_t)n;
    bool has_lo = lo.t != V_NONE && lo.t != V_UNDEF, has_hi = hi.t != V_NONE && hi.t != V_UNDEF;
    if (*step > 0) {
        *start = has_lo ? num_i(lo) : 0;
        *stop = has_hi ? num_i(hi) : len;
        if (*start < 0)
            *start = *start + len < 0 ? 0 : *start + len;
        if (*start > len)
            *start = len;
        if (*stop < 0)
            *stop = *stop + len < 0 ? 0 : *stop + len;
        if (*stop > len)
            *stop = len;
    } else {
        *start = has_lo ? num_i(lo) : len - 1;
        *stop = has_hi ? num_i(hi) : -1 - len;
        if (*start < 0)
            *start = *start + len < 0 ? -1 : *start + len;
        if (*start >= len)
            *start = len - 1;
        if (*stop < 0)
            *stop = *stop + len < 0 ? -1 : *stop + len;
        if (*stop >= len)
            *stop = len - 1;
    }
    return 0;
}

static jv do_slice(R *r, jv o, jv lo, jv hi, jv st)
{
    int64_t a, e, s;
    if (o.t == V_LIST) {
        if (slice_idx(r, lo, hi, st, o.u.l->n, &a, &e, &s))
            return UNDEF;
        jlist *l = mklist(r, 0);
        for (int64_t i = a; l && (s > 0 ? i < e : i > e); i += s)
            if (list_push(r, l, o.u.l->v[i]))
                return UNDEF;
        if (l)
            l->tuple = o.u.l->tuple;
        return vlist(l);
    }
    if (o.t == V_STR) {
        const char *str = o.u.s->s;
        size_t n = o.u.s->n, cnt = u8count(str, n);
        if (slice_idx(r, lo, hi, st, cnt, &a, &e, &s))
            return UNDEF;
        if (s == 1) {
            if (e <= a)
                return vstr(r, "", 0);
            size_t b0 = u8off(str, n, (size_t)a), b1 = u8off(str, n, (size_t)e);
            return vstr(r, str + b0, b1 - b0);
        }
        size_t *offs = ralloc(r, (cnt + 1) * sizeof *offs);
        if (!offs)
            return UNDEF;
        for (size_t i = 0, k = 0; k <= cnt; k++) {
            offs[k] = i;
            if (i < n)
                i += u8len((const unsigned char *)str + i, n - i);
        }
        ifd_buf_t b = IFD_BUF_INIT;
        for (int64_t i = a; s > 0 ? i < e : i > e; i += s)
            put(r, &b, str + offs[i], offs[i + 1] - offs[i]);
        jv out = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
        ifd_buf_free(&b);
        return out;
    }
    if (o.t == V_UNDEF)
        undefined_error(r, o);
    else
        rerr(r, IFD_EINVAL, "'%s' object is not subscriptable", type_name(o));
    return UNDEF;
}

/* ---- evaluation ------------------------------------------------------------------------ */

typedef struct {
    jv *pos;
    size_t npos;
    const char **kw;
    jv *kwv;
    size_t nkw;
} args_t;

static jv eval(R *r, frame_t *f, const ifd__jn_t *n);
static int exec_body(R *r, frame_t *f, ifd__jn_t *const *body, uint32_t nb, ifd_buf_t *out);

static jv lookup(R *r, frame_t *f, const char *name)
{
    size_t n = strlen(name);
    for (; f; f = f->parent) {
        jv *v = dict_find(f->vars, name, n);
        if (v)
            return *v;
    }
    jv *g = r->globals ? dict_find(r->globals, name, n) : NULL;
    if (g)
        return *g;
    static const struct {
        const char *name;
        fkind_t kind;
    } builtins[] = {{"range", F_RANGE},
                    {"namespace", F_NAMESPACE},
                    {"raise_exception", F_RAISE},
                    {"strftime_now", F_STRFTIME},
                    {"dict", F_DICT}};
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (!strcmp(builtins[i].name, name)) {
            jfunc *fn = ralloc(r, sizeof *fn);
            if (!fn)
                return UNDEF;
            fn->kind = builtins[i].kind;
            fn->name = builtins[i].name;
            fn->self = UNDEF;
            return (jv){.t = V_FUNC, .u.fn = fn};
        }
    jv u = UNDEF;
    u.u.s = mkstr(r, name, n);
    return u;
}

static int eval_args(R *r, frame_t *f, const ifd__jn_t *n, args_t *a)
{
    memset(a, 0, sizeof *a);
    if (n->nv && !(a->pos = ralloc(r, n->nv * sizeof *a->pos)))
        return r->rc;
    for (uint32_t i = 0; i < n->nv; i++) {
        a->pos[i] = eval(r, f, n->v[i]);
        if (r->rc)
            return r->rc;
    }
    a->npos = n->nv;
    if (n->nw) {
        if (!(a->kwv = ralloc(r, n->nw * sizeof *a->kwv)))
            return r->rc;
        for (uint32_t i = 0; i < n->nw; i++) {
            a->kwv[i] = eval(r, f, n->w[i]);
            if (r->rc)
                return r->rc;
        }
        a->kw = n->names;
        a->nkw = n->nw;
    }
    return 0;
}

/* Argument `name` at position `pos` (or -1), else `dflt`. */
static jv arg(const args_t *a, int pos, const char *name, jv dflt)
{
    if (pos >= 0 && (size_t)pos < a->npos)
        return a->pos[pos];
    for (size_t i = 0; name && i < a->nkw; i++)
        if (!strcmp(a->kw[i], name))
            return a->kwv[i];
    return dflt;
}

static int need_str(R *r, jv v, const char *what)
{
    if (v.t == V_STR)
        return 0;
    return rerr(r, IFD_EINVAL, "%s: expected a string, got '%s'", what, type_name(v));
}

static jv call_value(R *r, jv callee, const args_t *a);
static bool apply_test(R *r, int id, jv v, const args_t *a);
static jv apply_filter(R *r, frame_t *f, int id, jv v, const args_t *a);

/* markupsafe.escape(s) for the plain side of Markup + str. */
static jv html_escape(R *r, jv v)
{
    if (v.markup)
        return v;
    ifd_buf_t b = IFD_BUF_INIT;
    for (size_t i = 0; i < v.u.s->n && !r->rc; i++) {
        char c = v.u.s->s[i];
        const char *e = c == '&'   ? "&amp;"
                        : c == '<' ? "&lt;"
                        : c == '>' ? "&gt;"
                        : c == '"' ? "&#34;"
                        : c == '\'' ? "&#39;"
                                    : NULL;
        if (e)
            puts_(r, &b, e);
        else
            put(r, &b, &c, 1);
    }
    jv o = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

static jv arith(R *r, int op, jv a, jv b)
{
    if (op == IFD__OP_ADD) {
        bool markup = (a.t == V_STR && a.markup) || (b.t == V_STR && b.markup);
        if (markup && a.t == V_STR && b.t == V_STR) {
            a = html_escape(r, a);
            b = html_escape(r, b);
            if (r->rc)
                return UNDEF;
        }
        if (a.t == V_STR && b.t == V_STR) {
            jstr *s = ralloc(r, sizeof *s + a.u.s->n + b.u.s->n + 1);
            if (!s)
                return UNDEF;
            s->n = a.u.s->n + b.u.s->n;
            memcpy(s->s, a.u.s->s, a.u.s->n);
            memcpy(s->s + a.u.s->n, b.u.s->s, b.u.s->n);
            s->s[s->n] = '\0';
            return (jv){.t = V_STR, .markup = markup, .u.s = s};
        }
        if (a.t == V_LIST && b.t == V_LIST) {
            jlist *l = mklist(r, a.u.l->n + b.u.l->n);
            if (!l)
                return UNDEF;
            if (a.u.l->n)
                memcpy(l->v, a.u.l->v, a.u.l->n * sizeof *l->v);
            if (b.u.l->n)
                memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof *l->v);
            l->n = a.u.l->n + b.u.l->n;
            l->tuple = a.u.l->tuple && b.u.l->tuple;
            return vlist(l);
        }
    }
    if (op == IFD__OP_MUL && ((a.t == V_STR && (b.t == V_INT || b.t == V_BOOL)) ||
                              (b.t == V_STR && (a.t == V_INT || a.t == V_BOOL)))) {
        jv s = a.t == V_STR ? a : b;
        int64_t k = a.t == V_STR ? num_i(b) : num_i(a);
        if (k <= 0)
            return vstr(r, "", 0);
        if ((uint64_t)k * s.u.s->n > r->lim.max_output) {
            rerr(r, IFD_ETOOBIG, "string repetition larger than %zu bytes", r->lim.max_output);
            return UNDEF;
        }
        jstr *o = ralloc(r, sizeof *o + (size_t)k * s.u.s->n + 1);
        if (!o)
            return UNDEF;
        o->n = (size_t)k * s.u.s->n;
        for (int64_t i = 0; i < k; i++)
            memcpy(o->s + (size_t)i * s.u.s->n, s.u.s->s, s.u.s->n);
        o->s[o->n] = '\0';
        return (jv){.t = V_STR, .u.s = o};
    }
    if (!is_num(a) || !is_num(b)) {
        if (a.t == V_UNDEF || b.t == V_UNDEF)
            undefined_error(r, a.t == V_UNDEF ? a : b);
        else
            rerr(r, IFD_EINVAL, "unsupported operand types for an arithmetic operator: '%s' and '%s'",
                 type_name(a), type_name(b));
        return UNDEF;
    }
    bool fl = a.t == V_FLOAT || b.t == V_FLOAT;
    if (op == IFD__OP_DIV) {
        if (num_f(b) == 0) {
            rerr(r, IFD_EINVAL, "division by zero");
            return UNDEF;
        }
        return vfloat(num_f(a) / num_f(b));
    }
    if (fl) {
        double x = num_f(a), y = num_f(b);
        switch (op) {
        case IFD__OP_ADD: return vfloat(x + y);
        case IFD__OP_SUB: return vfloat(x - y);
        case IFD__OP_MUL: return vfloat(x * y);
        case IFD__OP_POW: return vfloat(pow(x, y));
        case IFD__OP_FLOORDIV:
        case IFD__OP_MOD:
            if (y == 0) {
                rerr(r, IFD_EINVAL, "float division by zero");
                return UNDEF;
            }
            if (op == IFD__OP_FLOORDIV)
                return vfloat(floor(x / y));
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return vfloat(m);
        default: return UNDEF;
        }
    }
    int64_t x = num_i(a), y = num_i(b), z;
    switch (op) {
    case IFD__OP_ADD:
        if (__builtin_add_overflow(x, y, &z))
            goto overflow;
        return vint(z);
    case IFD__OP_SUB:
        if (__builtin_sub_overflow(x, y, &z))
            goto overflow;
        return vint(z);
    case IFD__OP_MUL:
        if (__builtin_mul_overflow(x, y, &z))
            goto overflow;
        return vint(z);
    case IFD__OP_FLOORDIV:
    case IFD__OP_MOD: {
        if (y == 0) {
            rerr(r, IFD_EINVAL, "integer division or modulo by zero");
            return UNDEF;
        }
        if (x == INT64_MIN && y == -1)
            goto overflow;
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
            q--;
            m += y;
        }
        return vint(op == IFD__OP_FLOORDIV ? q : m);
    }
    case IFD__OP_POW: {
        if (y < 0)
            return vfloat(pow((double)x, (double)y));
        int64_t acc = 1;
        for (int64_t i = 0; i < y; i++)
            if (__builtin_mul_overflow(acc, x, &acc))
                goto overflow;
        return vint(acc);
    }
    default: return UNDEF;
    }
overflow:
    rerr(r, IFD_ENOTSUP, "integer arithmetic beyond 64 bits");
    return UNDEF;
}

static bool contains(R *r, jv hay, jv needle)
{
    switch (hay.t) {
    case V_STR:
        if (needle.t != V_STR) {
            rerr(r, IFD_EINVAL, "'in <string>' requires string as left operand, not %s",
                 type_name(needle));
            return false;
        }
        if (!needle.u.s->n)
            return true;
        for (size_t i = 0; i + needle.u.s->n <= hay.u.s->n; i++)
            if (memcmp(hay.u.s->s + i, needle.u.s->s, needle.u.s->n) == 0)
                return true;
        return false;
    case V_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (equal(hay.u.l->v[i], needle))
                return true;
        return false;
    case V_DICT:
    case V_NS:
        if (!hashable(needle)) {
            rerr(r, IFD_EINVAL, "unhashable type: '%s'", type_name(needle));
            return false;
        }
        return dict_findv(hay.u.d, needle) != NULL;
    case V_UNDEF: return false;
    default:
        rerr(r, IFD_EINVAL, "argument of type '%s' is not iterable", type_name(hay));
        return false;
    }
}

static jv binop(R *r, int op, jv a, jv b)
{
    int c;
    switch (op) {
    case IFD__OP_EQ: return vbool(equal(a, b));
    case IFD__OP_NE: return vbool(!equal(a, b));
    case IFD__OP_LT:
    case IFD__OP_LE:
    case IFD__OP_GT:
    case IFD__OP_GE:
        if (compare(r, a, b, &c))
            return UNDEF;
        return vbool(op == IFD__OP_LT   ? c < 0
                     : op == IFD__OP_LE ? c <= 0
                     : op == IFD__OP_GT ? c > 0
                                        : c >= 0);
    case IFD__OP_IN: return vbool(contains(r, b, a));
    case IFD__OP_NOTIN: {
        bool x = contains(r, b, a);
        return vbool(!x);
    }
    default: return arith(r, op, a, b);
    }
}

static jv eval(R *r, frame_t *f, const ifd__jn_t *n)
{
    if (r->rc)
        return UNDEF;
    r->line = n->line;
    switch (n->kind) {
    case IFD__JN_STR: return vstr(r, n->s, n->sn);
    case IFD__JN_INT: return vint(n->i);
    case IFD__JN_FLOAT: return vfloat(n->f);
    case IFD__JN_BOOL: return vbool(n->i != 0);
    case IFD__JN_NONE: return NONE;
    case IFD__JN_NAME: return lookup(r, f, n->s);
    case IFD__JN_ATTR: {
        jv o = eval(r, f, n->a);
        return r->rc ? UNDEF : get_attr(r, o, n->s, n->sn);
    }
    case IFD__JN_ITEM: {
        jv o = eval(r, f, n->a), k = eval(r, f, n->b);
        return r->rc ? UNDEF : get_item(r, o, k);
    }
    case IFD__JN_SLICE: {
        jv o = eval(r, f, n->a);
        jv lo = n->b ? eval(r, f, n->b) : NONE, hi = n->c ? eval(r, f, n->c) : NONE,
           st = n->d ? eval(r, f, n->d) : NONE;
        return r->rc ? UNDEF : do_slice(r, o, lo, hi, st);
    }
    case IFD__JN_CALL: {
        jv c = eval(r, f, n->a);
        args_t a;
        if (r->rc || eval_args(r, f, n, &a))
            return UNDEF;
        r->line = n->line;
        return call_value(r, c, &a);
    }
    case IFD__JN_FILTER: {
        jv v = eval(r, f, n->a);
        args_t a;
        if (r->rc || eval_args(r, f, n, &a))
            return UNDEF;
        r->line = n->line;
        if (n->op == IFD__JF_N) {
            rerr(r, IFD_EINVAL, "no filter named '%s'", n->s);
            return UNDEF;
        }
        return apply_filter(r, f, n->op, v, &a);
    }
    case IFD__JN_TEST: {
        jv v = eval(r, f, n->a);
        args_t a;
        if (r->rc || eval_args(r, f, n, &a))
            return UNDEF;
        if (n->op == IFD__JT_N) {
            rerr(r, IFD_EINVAL, "no test named '%s'", n->s);
            return UNDEF;
        }
        bool t = apply_test(r, n->op, v, &a);
        return vbool(n->i ? !t : t);
    }
    case IFD__JN_BIN: {
        jv a = eval(r, f, n->a), b = eval(r, f, n->b);
        return r->rc ? UNDEF : binop(r, n->op, a, b);
    }
    case IFD__JN_NEG:
    case IFD__JN_POS: {
        jv a = eval(r, f, n->a);
        if (r->rc)
            return UNDEF;
        if (!is_num(a)) {
            rerr(r, IFD_EINVAL, "bad operand type for unary %c: '%s'",
                 n->kind == IFD__JN_NEG ? '-' : '+', type_name(a));
            return UNDEF;
        }
        if (n->kind == IFD__JN_POS)
            return a.t == V_BOOL ? vint(a.u.b) : a;
        return a.t == V_FLOAT ? vfloat(-a.u.f) : vint(-num_i(a));
    }
    case IFD__JN_NOT: {
        jv a = eval(r, f, n->a);
        return vbool(!truthy(a));
    }
    case IFD__JN_AND: {
        jv a = eval(r, f, n->a);
        return !truthy(a) || r->rc ? a : eval(r, f, n->b);
    }
    case IFD__JN_OR: {
        jv a = eval(r, f, n->a);
        return truthy(a) || r->rc ? a : eval(r, f, n->b);
    }
    case IFD__JN_COND: {
        jv c = eval(r, f, n->a);
        if (r->rc)
            return UNDEF;
        if (truthy(c))
            return eval(r, f, n->b);
        return n->c ? eval(r, f, n->c) : UNDEF;
    }
    case IFD__JN_LIST:
    case IFD__JN_TUPLE: {
        jlist *l = mklist(r, n->nv);
        for (uint32_t i = 0; l && i < n->nv; i++) {
            l->v[i] = eval(r, f, n->v[i]);
            l->n++;
        }
        if (l)
            l->tuple = n->kind == IFD__JN_TUPLE;
        return r->rc ? UNDEF : vlist(l);
    }
    case IFD__JN_DICT: {
        jdict *d = mkdict(r);
        for (uint32_t i = 0; d && i < n->nv; i++) {
            jv k = eval(r, f, n->v[i]), v = eval(r, f, n->w[i]);
            if (r->rc)
                return UNDEF;
            if (!hashable(k)) {
                rerr(r, IFD_EINVAL, "unhashable type: '%s'", type_name(k));
                return UNDEF;
            }
            if (dict_setv(r, d, k, v))
                return UNDEF;
        }
        return vdict(d, V_DICT);
    }
    case IFD__JN_CONCAT: {
        ifd_buf_t b = IFD_BUF_INIT;
        for (uint32_t i = 0; i < n->nv && !r->rc; i++) {
            jv v = eval(r, f, n->v[i]);
            if (!r->rc)
                to_text(r, &b, v, false);
        }
        jv s = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
        ifd_buf_free(&b);
        return s;
    }
    default: rerr(r, IFD_EINTERNAL, "bad expression node %d", n->kind); return UNDEF;
    }
}

/* ---- tests ----------------------------------------------------------------------------- */

static bool apply_test(R *r, int id, jv v, const args_t *a)
{
    jv x = arg(a, 0, NULL, UNDEF);
    switch (id) {
    case IFD__JT_DEFINED: return v.t != V_UNDEF;
    case IFD__JT_UNDEFINED: return v.t == V_UNDEF;
    case IFD__JT_NONE: return v.t == V_NONE;
    case IFD__JT_BOOLEAN: return v.t == V_BOOL;
    case IFD__JT_FALSE: return v.t == V_BOOL && !v.u.b;
    case IFD__JT_TRUE: return v.t == V_BOOL && v.u.b;
    case IFD__JT_INTEGER: return v.t == V_INT;
    case IFD__JT_FLOAT: return v.t == V_FLOAT;
    case IFD__JT_NUMBER: return is_num(v);
    case IFD__JT_STRING: return v.t == V_STR;
    case IFD__JT_MAPPING: return v.t == V_DICT;
    case IFD__JT_ITERABLE:
    case IFD__JT_SEQUENCE:
        return v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF;
    case IFD__JT_CALLABLE: return v.t == V_MACRO || v.t == V_FUNC;
    case IFD__JT_EVEN:
    case IFD__JT_ODD:
    case IFD__JT_DIVISIBLEBY: {
        if (!is_num(v) || (id == IFD__JT_DIVISIBLEBY && !is_num(x))) {
            rerr(r, IFD_EINVAL, "test needs a number");
            return false;
        }
        int64_t m = id == IFD__JT_DIVISIBLEBY ? num_i(x) : 2;
        if (m == 0) {
            rerr(r, IFD_EINVAL, "integer division or modulo by zero");
            return false;
        }
        int64_t rem = num_i(v) % m;
        return id == IFD__JT_ODD ? rem != 0 : rem == 0;
    }
    case IFD__JT_LOWER:
    case IFD__JT_UPPER: {
        jv s = to_str(r, v);
        bool cased = false;
        for (size_t i = 0; !r->rc && i < s.u.s->n; i++) {
            char c = s.u.s->s[i];
            if (alpha_c(c)) {
                cased = true;
                if ((id == IFD__JT_LOWER) != (c >= 'a' && c <= 'z'))
                    return false;
            }
        }
        return cased;
    }
    case IFD__JT_EQ:
    case IFD__JT_EQUALTO:
    case IFD__JT_EQEQ: return equal(v, x);
    case IFD__JT_NE:
    case IFD__JT_NEQ: return !equal(v, x);
    case IFD__JT_LT:
    case IFD__JT_LTS:
    case IFD__JT_LE:
    case IFD__JT_LES:
    case IFD__JT_GT:
    case IFD__JT_GTS:
    case IFD__JT_GE:
    case IFD__JT_GES: {
        int c;
        if (compare(r, v, x, &c))
            return false;
        return id == IFD__JT_LT || id == IFD__JT_LTS   ? c < 0
               : id == IFD__JT_LE || id == IFD__JT_LES ? c <= 0
               : id == IFD__JT_GT || id == IFD__JT_GTS ? c > 0
                                                       : c >= 0;
    }
    case IFD__JT_IN: return contains(r, x, v);
    case IFD__JT_SAMEAS:
        if (v.t != x.t)
            return false;
        if (v.t == V_NONE || v.t == V_UNDEF)
            return true;
        if (v.t == V_BOOL || v.t == V_INT)
            return equal(v, x);
        if (v.t == V_STR)
            return v.u.s == x.u.s;
        return v.u.l == x.u.l;
    default: rerr(r, IFD_EINVAL, "no such test"); return false;
    }
}

/* ---- filters --------------------------------------------------------------------------- */

/* Attribute path "a.b.0" of v (jinja2's make_attrgetter). */
static jv attr_path(R *r, jv v, jv path)
{
    if (path.t == V_INT)
        return get_item(r, v, path);
    if (path.t != V_STR) {
        rerr(r, IFD_EINVAL, "attribute must be a string");
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
        jv k = digits ? vint(strtoll(s, NULL, 10)) : vstr(r, s, l);
        if (v.t == V_UNDEF)
            return UNDEF;
        v = get_item(r, v, k);
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
    jv o = vstr(r, v.u.s->s, v.u.s->n);
    for (size_t i = 0; !r->rc && i < o.u.s->n; i++)
        o.u.s->s[i] = lower_c(o.u.s->s[i]);
    return o;
}

typedef struct {
    R *r;
    jv *keys;
    bool reverse;
} sortctx_t;

/* Stable merge sort of idx[0..n) by keys (compare errors recorded in r). */
static void sort_idx(sortctx_t *c, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    sort_idx(c, idx, tmp, h);
    sort_idx(c, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp = 0;
        compare(c->r, c->keys[idx[j]], c->keys[idx[i]], &cmp);
        if (c->reverse)
            cmp = -cmp;
        tmp[k++] = cmp < 0 ? idx[j++] : idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static jlist *sorted(R *r, jlist *in, jv *keys, bool reverse)
{
    size_t n = in->n;
    size_t *idx = ralloc(r, (n + 1) * sizeof *idx), *tmp = ralloc(r, (n + 1) * sizeof *tmp);
    jlist *out = mklist(r, n);
    if (!idx || !tmp || !out)
        return NULL;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    sortctx_t c = {r, keys, reverse};
    sort_idx(&c, idx, tmp, n);
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
            to_text(r, &b, sep, false);
        to_text(r, &b, l->v[i], false);
    }
    jv s = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
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
            put(r, &b, new_->s, new_->n);
            done++;
            if (i == s->n)
                break;
            size_t l = u8len((const unsigned char *)s->s + i, s->n - i);
            put(r, &b, s->s + i, l);
            i += l;
        }
        if (i < s->n)
            put(r, &b, s->s + i, s->n - i);
    } else {
        while (i < s->n) {
            if ((count < 0 || done < count) && i + old->n <= s->n &&
                memcmp(s->s + i, old->s, old->n) == 0) {
                put(r, &b, new_->s, new_->n);
                i += old->n;
                done++;
            } else {
                put(r, &b, s->s + i, 1);
                i++;
            }
        }
    }
    jv o = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

/* Python str.split / rsplit (rsplit only without maxsplit differences that
 * matter: maxsplit counts from the right). */
static jv str_split(R *r, const jstr *s, jv sepv, int64_t maxsplit, bool right)
{
    jlist *l = mklist(r, 0);
    if (!l)
        return UNDEF;
    const char *p = s->s;
    size_t n = s->n;
    if (sepv.t == V_NONE || sepv.t == V_UNDEF) {
        /* runs of whitespace; leading/trailing ignored */
        size_t *st = ralloc(r, (n + 1) * sizeof *st), *en = ralloc(r, (n + 1) * sizeof *en);
        size_t k = 0, i = 0;
        if (!st || !en)
            return UNDEF;
        while (i < n) {
            while (i < n) {
                size_t cl = u8len((const unsigned char *)p + i, n - i);
                if (!py_space(u8cp((const unsigned char *)p + i, cl)))
                    break;
                i += cl;
            }
            if (i >= n)
                break;
            st[k] = i;
            while (i < n) {
                size_t cl = u8len((const unsigned char *)p + i, n - i);
                if (py_space(u8cp((const unsigned char *)p + i, cl)))
                    break;
                i += cl;
            }
            en[k++] = i;
        }
        if (maxsplit >= 0 && (size_t)maxsplit + 1 < k) {
            if (right) {
                size_t first = k - (size_t)maxsplit - 1;
                /* the leftmost piece runs from the start (stripped) to en[first] */
                list_push(r, l, vstr(r, p + st[0], en[first] - st[0]));
                for (size_t j = first + 1; j < k; j++)
                    list_push(r, l, vstr(r, p + st[j], en[j] - st[j]));
            } else {
                for (size_t j = 0; j < (size_t)maxsplit; j++)
                    list_push(r, l, vstr(r, p + st[j], en[j] - st[j]));
                size_t last = st[maxsplit], e = n;
                while (e > last) {
                    size_t q = e - 1;
                    while (q > last && ((unsigned char)p[q] & 0xC0) == 0x80)
                        q--;
                    if (!py_space(u8cp((const unsigned char *)p + q,
                                       u8len((const unsigned char *)p + q, e - q))))
                        break;
                    e = q;
                }
                list_push(r, l, vstr(r, p + last, e - last));
            }
        } else {
            for (size_t j = 0; j < k; j++)
                list_push(r, l, vstr(r, p + st[j], en[j] - st[j]));
        }
        return r->rc ? UNDEF : vlist(l);
    }
    if (need_str(r, sepv, "split"))
        return UNDEF;
    const jstr *sep = sepv.u.s;
    if (!sep->n) {
        rerr(r, IFD_EINVAL, "empty separator");
        return UNDEF;
    }
    if (!right) {
        size_t a = 0, i = 0;
        int64_t done = 0;
        while (i + sep->n <= n) {
            if ((maxsplit < 0 || done < maxsplit) && memcmp(p + i, sep->s, sep->n) == 0) {
                list_push(r, l, vstr(r, p + a, i - a));
                i += sep->n;
                a = i;
                done++;
            } else {
                i++;
            }
        }
        list_push(r, l, vstr(r, p + a, n - a));
        return r->rc ? UNDEF : vlist(l);
    }
    /* rsplit with a separator: collect from the right, then reverse */
    jlist *tmp = mklist(r, 0);
    size_t e = n;
    int64_t done = 0;
    size_t i = n;
    while (tmp && i >= sep->n) {
        size_t st = i - sep->n;
        if ((maxsplit < 0 || done < maxsplit) && memcmp(p + st, sep->s, sep->n) == 0) {
            list_push(r, tmp, vstr(r, p + i, e - i));
            e = st;
            i = st;
            done++;
        } else {
            i--;
        }
    }
    if (tmp)
        list_push(r, tmp, vstr(r, p, e));
    for (size_t j = tmp ? tmp->n : 0; j-- > 0;)
        list_push(r, l, tmp->v[j]);
    return r->rc ? UNDEF : vlist(l);
}

static jv tojson_filter(R *r, jv v, const args_t *a)
{
    jv ind = arg(a, 0, "indent", NONE), seps = arg(a, -1, "separators", NONE);
    jsonopt_t o = {NULL, ", ", ": ", truthy(arg(a, -1, "sort_keys", vbool(false))),
                   truthy(arg(a, -1, "ensure_ascii", vbool(false)))};
    char spaces[256];
    if (ind.t == V_INT || ind.t == V_BOOL) {
        int64_t k = num_i(ind);
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
        rerr(r, IFD_EINVAL, "tojson: bad indent");
        return UNDEF;
    }
    if (o.indent)
        o.item_sep = ",";
    if (seps.t == V_LIST) {
        if (seps.u.l->n != 2 || seps.u.l->v[0].t != V_STR || seps.u.l->v[1].t != V_STR) {
            rerr(r, IFD_EINVAL, "tojson: separators must be two strings");
            return UNDEF;
        }
        o.item_sep = seps.u.l->v[0].u.s->s;
        o.key_sep = seps.u.l->v[1].u.s->s;
    }
    ifd_buf_t b = IFD_BUF_INIT;
    to_json(r, &b, v, &o, 0);
    jv s = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return s;
}

static jv indent_filter(R *r, jv v, const args_t *a)
{
    jv s = to_str(r, v), w = arg(a, 0, "width", vint(4));
    bool first = truthy(arg(a, 1, "first", vbool(false))),
         blank = truthy(arg(a, 2, "blank", vbool(false)));
    if (r->rc)
        return UNDEF;
    jv ind = w.t == V_STR ? w : UNDEF;
    if (w.t != V_STR) {
        int64_t k = num_i(w);
        if (k < 0 || k > 4096) {
            rerr(r, IFD_EINVAL, "indent: bad width");
            return UNDEF;
        }
        char sp[4097];
        memset(sp, ' ', (size_t)k);
        ind = vstr(r, sp, (size_t)k);
    }
    /* lines of s + "\n" as str.splitlines() gives them (\n, \r\n, \r) */
    const char *p = s.u.s->s;
    size_t n = s.u.s->n;
    ifd_buf_t b = IFD_BUF_INIT;
    if (first)
        put(r, &b, ind.u.s->s, ind.u.s->n);
    size_t i = 0, line = 0;
    while (i <= n && !r->rc) {
        size_t e = i;
        while (e < n && p[e] != '\n' && p[e] != '\r')
            e++;
        if (e >= n && i >= n)
            break; /* the "\n" appended by jinja2 ends the last line */
        if (line > 0) {
            put(r, &b, "\n", 1);
            if (blank || e > i)
                put(r, &b, ind.u.s->s, ind.u.s->n);
        }
        put(r, &b, p + i, e - i);
        line++;
        if (e >= n)
            break;
        i = e + (p[e] == '\r' && e + 1 < n && p[e + 1] == '\n' ? 2 : 1);
    }
    jv o = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

static jv title_filter(R *r, jv v)
{
    jv s = to_str(r, v);
    if (r->rc)
        return UNDEF;
    jv o = vstr(r, s.u.s->s, s.u.s->n);
    bool start = true;
    for (size_t i = 0; !r->rc && i < o.u.s->n; i++) {
        char c = o.u.s->s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
            c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
            start = true;
            continue;
        }
        o.u.s->s[i] = start ? upper_c(c) : lower_c(c);
        start = false;
    }
    return o;
}

static jv case_str(R *r, jv v, int mode) /* 0 lower, 1 upper, 2 capitalize, 3 py title */
{
    jv s = to_str(r, v);
    if (r->rc)
        return UNDEF;
    jv o = vstr(r, s.u.s->s, s.u.s->n);
    bool prev_cased = false;
    for (size_t i = 0; !r->rc && i < o.u.s->n; i++) {
        char *c = &o.u.s->s[i];
        switch (mode) {
        case 0: *c = lower_c(*c); break;
        case 1: *c = upper_c(*c); break;
        case 2: *c = i == 0 ? upper_c(*c) : lower_c(*c); break;
        default:
            *c = prev_cased ? lower_c(*c) : upper_c(*c);
            prev_cased = alpha_c(*c);
        }
    }
    return o;
}

static jv select_filter(R *r, int id, jv v, const args_t *a)
{
    bool attr = id == IFD__JF_SELECTATTR || id == IFD__JF_REJECTATTR;
    bool keep = id == IFD__JF_SELECT || id == IFD__JF_SELECTATTR;
    jlist *in = truthy(v) ? iter_list(r, v) : mklist(r, 0), *out = mklist(r, 0);
    size_t k = 0;
    jv path = UNDEF;
    if (attr)
        path = arg(a, k++, NULL, UNDEF);
    jv tname = arg(a, (int)k++, NULL, UNDEF);
    if (!in || !out)
        return UNDEF;
    int tid = -1;
    if (tname.t == V_STR) {
        tid = ifd__jinja_test_id(tname.u.s->s, tname.u.s->n);
        if (tid < 0) {
            rerr(r, IFD_ENOTSUP, "no test named '%s'", tname.u.s->s);
            return UNDEF;
        }
    }
    args_t ta = {a->pos + (a->npos > k ? k : a->npos), a->npos > k ? a->npos - k : 0, NULL, NULL, 0};
    for (size_t i = 0; i < in->n && !r->rc; i++) {
        jv x = attr ? attr_path(r, in->v[i], path) : in->v[i];
        bool t = tid >= 0 ? apply_test(r, tid, x, &ta) : truthy(x);
        if (t == keep && list_push(r, out, in->v[i]))
            return UNDEF;
    }
    out->gen = true;
    return r->rc ? UNDEF : vlist(out);
}

static jv map_filter(R *r, frame_t *f, jv v, const args_t *a)
{
    jlist *in = truthy(v) ? iter_list(r, v) : mklist(r, 0), *out = mklist(r, 0);
    if (!in || !out)
        return UNDEF;
    out->gen = true;
    jv at = arg(a, -1, "attribute", UNDEF);
    if (at.t != V_UNDEF) {
        jv dflt = arg(a, -1, "default", UNDEF);
        for (size_t i = 0; i < in->n && !r->rc; i++) {
            jv x = attr_path(r, in->v[i], at);
            list_push(r, out, x.t == V_UNDEF ? dflt : x);
        }
        return r->rc ? UNDEF : vlist(out);
    }
    jv fname = arg(a, 0, NULL, UNDEF);
    if (fname.t != V_STR) {
        rerr(r, IFD_EINVAL, "map: expected a filter name or attribute=");
        return UNDEF;
    }
    int fid = ifd__jinja_filter_id(fname.u.s->s, fname.u.s->n);
    if (fid < 0) {
        rerr(r, IFD_ENOTSUP, "no filter named '%s'", fname.u.s->s);
        return UNDEF;
    }
    args_t fa = {a->pos + 1, a->npos - 1, a->kw, a->kwv, a->nkw};
    for (size_t i = 0; i < in->n && !r->rc; i++)
        list_push(r, out, apply_filter(r, f, fid, in->v[i], &fa));
    return r->rc ? UNDEF : vlist(out);
}

static jv int_of(R *r, jv v, jv dflt)
{
    (void)r;
    if (v.t == V_INT || v.t == V_BOOL)
        return vint(num_i(v));
    if (v.t == V_FLOAT)
        return isfinite(v.u.f) ? vint((int64_t)v.u.f) : dflt;
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
            return vint(x);
        double d = strtod(buf, &e);
        if (*e == '\0' && isfinite(d))
            return vint((int64_t)d);
    }
    return dflt;
}

static jv apply_filter(R *r, frame_t *f, int id, jv v, const args_t *a)
{
    if (r->rc)
        return UNDEF;
    switch (id) {
    case IFD__JF_SAFE: {
        jv s = to_str(r, v);
        s.markup = !r->rc;
        return s;
    }
    case IFD__JF_STRING: return to_str(r, v);
    case IFD__JF_TOJSON: return tojson_filter(r, v, a);
    case IFD__JF_INDENT: return indent_filter(r, v, a);
    case IFD__JF_TRIM: {
        jv s = to_str(r, v), ch = arg(a, 0, "chars", NONE);
        if (r->rc || (ch.t != V_NONE && need_str(r, ch, "trim")))
            return UNDEF;
        return py_strip(r, s.u.s, ch.t == V_STR ? ch.u.s : NULL, 3);
    }
    case IFD__JF_LOWER: return case_str(r, v, 0);
    case IFD__JF_UPPER: return case_str(r, v, 1);
    case IFD__JF_CAPITALIZE: return case_str(r, v, 2);
    case IFD__JF_TITLE: return title_filter(r, v);
    case IFD__JF_LENGTH:
    case IFD__JF_COUNT:
        switch (v.t) {
        case V_STR: return vint((int64_t)u8count(v.u.s->s, v.u.s->n));
        case V_LIST:
            if (v.u.l->gen)
                break;
            return vint((int64_t)v.u.l->n);
        case V_DICT: return vint((int64_t)v.u.d->n);
        case V_UNDEF: return vint(0);
        default: break;
        }
        rerr(r, IFD_EINVAL, "object of type '%s' has no len()", type_name(v));
        return UNDEF;
    case IFD__JF_DEFAULT:
    case IFD__JF_D: {
        jv d = arg(a, 0, "default_value", vstr(r, "", 0));
        bool boolean = truthy(arg(a, 1, "boolean", vbool(false)));
        return v.t == V_UNDEF || (boolean && !truthy(v)) ? d : v;
    }
    case IFD__JF_JOIN: {
        jv sep = arg(a, 0, "d", vstr(r, "", 0)), at = arg(a, 1, "attribute", UNDEF);
        jlist *l = iter_list(r, v);
        if (!l)
            return UNDEF;
        if (at.t != V_UNDEF) {
            jlist *m = mklist(r, l->n);
            for (size_t i = 0; m && i < l->n; i++)
                m->v[m->n++] = attr_path(r, l->v[i], at);
            l = m;
        }
        return l ? str_join(r, l, sep) : UNDEF;
    }
    case IFD__JF_FIRST:
    case IFD__JF_LAST: {
        jlist *l = iter_list(r, v);
        if (l && l->gen && id == IFD__JF_LAST) {
            rerr(r, IFD_EINVAL, "'generator' object is not reversible");
            return UNDEF;
        }
        if (!l || !l->n)
            return UNDEF;
        return id == IFD__JF_FIRST ? l->v[0] : l->v[l->n - 1];
    }
    case IFD__JF_ITEMS:
    case IFD__JF_DICTSORT: {
        if (v.t == V_UNDEF)
            return vlist(mklist(r, 0));
        if (v.t != V_DICT) {
            rerr(r, IFD_EINVAL, "%s: expected a mapping", id == IFD__JF_ITEMS ? "items" : "dictsort");
            return UNDEF;
        }
        jlist *l = mklist(r, v.u.d->n);
        for (size_t i = 0; l && i < v.u.d->n; i++) {
            jlist *pr = mklist(r, 2);
            if (!pr)
                return UNDEF;
            pr->v[0] = v.u.d->k[i];
            pr->v[1] = v.u.d->v[i];
            pr->n = 2;
            pr->tuple = true;
            l->v[l->n++] = vlist(pr);
        }
        if (!l || id == IFD__JF_ITEMS)
            return vlist(l);
        bool cs = truthy(arg(a, 0, "case_sensitive", vbool(false)));
        jv by = arg(a, 1, "by", UNDEF);
        bool rev = truthy(arg(a, 2, "reverse", vbool(false)));
        int pos = by.t == V_STR && by.u.s->n == 5 && !memcmp(by.u.s->s, "value", 5) ? 1 : 0;
        jv *keys = ralloc(r, (l->n + 1) * sizeof *keys);
        if (!keys)
            return UNDEF;
        for (size_t i = 0; i < l->n; i++)
            keys[i] = lower_key(r, l->v[i].u.l->v[pos], cs);
        return vlist(sorted(r, l, keys, rev));
    }
    case IFD__JF_SORT:
    case IFD__JF_UNIQUE:
    case IFD__JF_MIN:
    case IFD__JF_MAX: {
        jlist *l = iter_list(r, v);
        if (!l)
            return UNDEF;
        bool rev = id == IFD__JF_SORT && truthy(arg(a, 0, "reverse", vbool(false)));
        int cpos = id == IFD__JF_SORT ? 1 : 0;
        bool cs = truthy(arg(a, cpos, "case_sensitive", vbool(false)));
        jv at = arg(a, cpos + 1, "attribute", UNDEF);
        jv *keys = ralloc(r, (l->n + 1) * sizeof *keys);
        if (!keys)
            return UNDEF;
        for (size_t i = 0; i < l->n; i++)
            keys[i] = lower_key(r, at.t != V_UNDEF ? attr_path(r, l->v[i], at) : l->v[i], cs);
        if (id == IFD__JF_SORT)
            return vlist(sorted(r, l, keys, rev));
        if (id == IFD__JF_UNIQUE) {
            jlist *o = mklist(r, 0);
            for (size_t i = 0; o && i < l->n; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                    seen = equal(keys[i], keys[j]);
                if (!seen)
                    list_push(r, o, l->v[i]);
            }
            return vlist(o);
        }
        if (!l->n)
            return UNDEF;
        size_t best = 0;
        for (size_t i = 1; i < l->n && !r->rc; i++) {
            int c;
            if (compare(r, keys[i], keys[best], &c))
                return UNDEF;
            if (id == IFD__JF_MIN ? c < 0 : c > 0)
                best = i;
        }
        return l->v[best];
    }
    case IFD__JF_REVERSE: {
        if (v.t == V_STR) {
            jv lo = NONE, hi = NONE;
            return do_slice(r, v, lo, hi, vint(-1));
        }
        jlist *l = iter_list(r, v), *o = l ? mklist(r, l->n) : NULL;
        for (size_t i = 0; o && i < l->n; i++)
            o->v[o->n++] = l->v[l->n - 1 - i];
        return vlist(o);
    }
    case IFD__JF_LIST: {
        jlist *l = iter_list(r, v), *o = l ? mklist(r, l->n) : NULL;
        for (size_t i = 0; o && i < l->n; i++)
            o->v[o->n++] = l->v[i];
        return vlist(o);
    }
    case IFD__JF_SELECT:
    case IFD__JF_REJECT:
    case IFD__JF_SELECTATTR:
    case IFD__JF_REJECTATTR: return select_filter(r, id, v, a);
    case IFD__JF_MAP: return map_filter(r, f, v, a);
    case IFD__JF_REPLACE: {
        jv s = to_str(r, v), o = to_str(r, arg(a, 0, "old", UNDEF)),
           nw = to_str(r, arg(a, 1, "new", UNDEF)), c = arg(a, 2, "count", NONE);
        if (r->rc)
            return UNDEF;
        return str_replace(r, s.u.s, o.u.s, nw.u.s, c.t == V_NONE ? -1 : num_i(c));
    }
    case IFD__JF_INT: return int_of(r, v, arg(a, 0, "default", vint(0)));
    case IFD__JF_FLOAT: {
        if (is_num(v))
            return vfloat(num_f(v));
        if (v.t == V_STR) {
            char *e;
            double d = strtod(v.u.s->s, &e);
            if (e != v.u.s->s && *e == '\0')
                return vfloat(d);
        }
        return arg(a, 0, "default", vfloat(0));
    }
    case IFD__JF_ABS:
        if (!is_num(v)) {
            rerr(r, IFD_EINVAL, "bad operand type for abs(): '%s'", type_name(v));
            return UNDEF;
        }
        return v.t == V_FLOAT ? vfloat(fabs(v.u.f)) : vint(num_i(v) < 0 ? -num_i(v) : num_i(v));
    case IFD__JF_ROUND: {
        jv pr = arg(a, 0, "precision", vint(0)), m = arg(a, 1, "method", UNDEF);
        if (!is_num(v)) {
            rerr(r, IFD_EINVAL, "round: expected a number");
            return UNDEF;
        }
        double sc = pow(10, (double)num_i(pr)), x = num_f(v) * sc;
        const char *ms = m.t == V_STR ? m.u.s->s : "common";
        x = !strcmp(ms, "ceil") ? ceil(x) : !strcmp(ms, "floor") ? floor(x) : round(x);
        return vfloat(x / sc);
    }
    case IFD__JF_SUM: {
        jlist *l = iter_list(r, v);
        jv at = arg(a, 0, "attribute", UNDEF), acc = arg(a, 1, "start", vint(0));
        for (size_t i = 0; l && i < l->n && !r->rc; i++)
            acc = arith(r, IFD__OP_ADD, acc, at.t != V_UNDEF ? attr_path(r, l->v[i], at) : l->v[i]);
        return acc;
    }
    case IFD__JF_WORDCOUNT: {
        jv s = to_str(r, v);
        if (r->rc)
            return UNDEF;
        int64_t k = 0;
        bool in = false;
        for (size_t i = 0; i < s.u.s->n; i++) {
            char c = s.u.s->s[i];
            bool w = (c >= '0' && c <= '9') || alpha_c(c) || c == '_' || (unsigned char)c >= 0x80;
            if (w && !in)
                k++;
            in = w;
        }
        return vint(k);
    }
    default: rerr(r, IFD_EINVAL, "no such filter"); return UNDEF;
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
            put(r, &b, &c, 1);
            i++;
            continue;
        }
        if (c == '}') {
            rerr(r, IFD_EINVAL, "format: single '}' encountered");
            break;
        }
        if (c != '{') {
            put(r, &b, &c, 1);
            continue;
        }
        const char *e = memchr(fmt->s + i, '}', fmt->n - i);
        if (!e) {
            rerr(r, IFD_EINVAL, "format: single '{' encountered");
            break;
        }
        const char *fld = fmt->s + i + 1;
        size_t fl = (size_t)(e - fld);
        if (memchr(fld, ':', fl) || memchr(fld, '!', fl) || memchr(fld, '[', fl) ||
            memchr(fld, '.', fl)) {
            rerr(r, IFD_ENOTSUP, "format: conversions and format specs are not supported");
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
            rerr(r, IFD_EINVAL, "format: missing argument for '{%.*s}'", (int)fl, fld);
            break;
        }
        to_text(r, &b, v, false);
        i = (size_t)(e - fmt->s);
    }
    jv o = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

static jv find_sub(const jstr *s, const jstr *sub, bool right, bool count)
{
    int64_t k = 0, pos = -1;
    if (!sub->n)
        return vint(count ? (int64_t)u8count(s->s, s->n) + 1 : right ? (int64_t)u8count(s->s, s->n) : 0);
    for (size_t i = 0; i + sub->n <= s->n; i++)
        if (memcmp(s->s + i, sub->s, sub->n) == 0) {
            k++;
            pos = (int64_t)u8count(s->s, i);
            if (count)
                i += sub->n - 1;
            else if (!right)
                break;
        }
    return vint(count ? k : pos);
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
        jv ch = arg(a, 0, NULL, NONE);
        if (ch.t != V_NONE && need_str(r, ch, m))
            return UNDEF;
        return py_strip(r, s, ch.t == V_STR ? ch.u.s : NULL, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        jv ms = arg(a, 1, "maxsplit", vint(-1));
        return str_split(r, s, arg(a, 0, "sep", NONE), num_i(ms), m[0] == 'r');
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        jv x = arg(a, 0, NULL, UNDEF);
        bool end = m[0] == 'e';
        if (x.t == V_LIST) {
            for (size_t i = 0; i < x.u.l->n; i++) {
                if (need_str(r, x.u.l->v[i], m))
                    return UNDEF;
                if (affix(s, x.u.l->v[i].u.s, end))
                    return vbool(true);
            }
            return vbool(false);
        }
        if (need_str(r, x, m))
            return UNDEF;
        return vbool(affix(s, x.u.s, end));
    }
    if (!strcmp(m, "replace")) {
        jv o = arg(a, 0, NULL, UNDEF), nw = arg(a, 1, NULL, UNDEF), c = arg(a, 2, "count", vint(-1));
        if (need_str(r, o, m) || need_str(r, nw, m))
            return UNDEF;
        return str_replace(r, s, o.u.s, nw.u.s, num_i(c));
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
        jv x = arg(a, 0, NULL, UNDEF);
        if (need_str(r, x, m))
            return UNDEF;
        return find_sub(s, x.u.s, m[0] == 'r', m[0] == 'c');
    }
    if (!strcmp(m, "join")) {
        jlist *l = iter_list(r, arg(a, 0, NULL, UNDEF));
        if (!l)
            return UNDEF;
        for (size_t i = 0; i < l->n; i++)
            if (need_str(r, l->v[i], "join"))
                return UNDEF;
        return str_join(r, l, self);
    }
    if (!strcmp(m, "splitlines")) {
        jlist *l = mklist(r, 0);
        size_t i = 0;
        while (l && i < s->n) {
            size_t e = i;
            while (e < s->n && s->s[e] != '\n' && s->s[e] != '\r')
                e++;
            list_push(r, l, vstr(r, s->s + i, e - i));
            i = e < s->n ? e + (s->s[e] == '\r' && e + 1 < s->n && s->s[e + 1] == '\n' ? 2 : 1) : e;
        }
        return vlist(l);
    }
    /* is* predicates (ASCII classes; non-ASCII counts as alphabetic) */
    bool all = s->n > 0, cased = false, lower = true, upper = true;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->s[i];
        bool dig = c >= '0' && c <= '9', al = alpha_c((char)c) || c >= 0x80,
             sp = c == ' ' || (c >= 9 && c <= 13);
        if (!strcmp(m, "isdigit"))
            all = all && dig;
        else if (!strcmp(m, "isalpha"))
            all = all && al;
        else if (!strcmp(m, "isalnum"))
            all = all && (al || dig);
        else if (!strcmp(m, "isspace"))
            all = all && sp;
        if (alpha_c((char)c)) {
            cased = true;
            lower = lower && c >= 'a';
            upper = upper && c < 'a';
        }
    }
    if (!strcmp(m, "islower"))
        return vbool(cased && lower);
    if (!strcmp(m, "isupper"))
        return vbool(cased && upper);
    return vbool(all);
}

static jv call_method(R *r, jv self, const char *m, const args_t *a)
{
    if (self.t == V_STR)
        return str_method(r, self.u.s, m, a);
    if (self.t == V_DICT) {
        const jdict *d = self.u.d;
        if (!strcmp(m, "get")) {
            jv k = arg(a, 0, NULL, UNDEF), dflt = arg(a, 1, NULL, NONE);
            jv *e = dict_findv(d, k);
            return e ? *e : dflt;
        }
        if (!strcmp(m, "items"))
            return apply_filter(r, NULL, IFD__JF_ITEMS, self, a);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            jlist *l = mklist(r, d->n);
            for (size_t i = 0; l && i < d->n; i++)
                l->v[l->n++] = m[0] == 'k' ? d->k[i] : d->v[i];
            return vlist(l);
        }
        if (!strcmp(m, "copy")) {
            jdict *c = mkdict(r);
            for (size_t i = 0; c && i < d->n; i++)
                dict_setv(r, c, d->k[i], d->v[i]);
            return vdict(c, V_DICT);
        }
    }
    if (self.t == V_LIST) {
        if (!strcmp(m, "index") || !strcmp(m, "count")) {
            jv x = arg(a, 0, NULL, UNDEF);
            int64_t k = 0;
            for (size_t i = 0; i < self.u.l->n; i++)
                if (equal(self.u.l->v[i], x)) {
                    if (m[0] == 'i')
                        return vint((int64_t)i);
                    k++;
                }
            if (m[0] == 'i') {
                rerr(r, IFD_EINVAL, "list.index(x): x not in list");
                return UNDEF;
            }
            return vint(k);
        }
        if (!strcmp(m, "copy"))
            return apply_filter(r, NULL, IFD__JF_LIST, self, a);
    }
    rerr(r, IFD_EINVAL, "access to attribute '%s' of '%s' object is unsafe (the sandbox "
                        "forbids modifying values)", m, type_name(self));
    return UNDEF;
}

static jv call_macro(R *r, const ifd__jn_t *m, const args_t *a)
{
    if (a->npos > m->nnames) {
        rerr(r, IFD_EINVAL, "macro '%s' takes not more than %u argument(s)", m->s, m->nnames);
        return UNDEF;
    }
    for (size_t i = 0; i < a->nkw; i++) {
        bool ok = false;
        for (uint32_t j = 0; j < m->nnames && !ok; j++)
            ok = !strcmp(a->kw[i], m->names[j]);
        if (!ok) {
            rerr(r, IFD_EINVAL, "macro '%s' takes no keyword argument '%s'", m->s, a->kw[i]);
            return UNDEF;
        }
    }
    if (++r->depth > r->lim.max_depth) {
        rerr(r, IFD_ETOOBIG, "macro calls nested deeper than %u", r->lim.max_depth);
        return UNDEF;
    }
    frame_t fr = {mkdict(r), r->root};
    for (uint32_t j = 0; fr.vars && j < m->nnames && !r->rc; j++) {
        jv v = arg(a, (int)j, m->names[j], UNDEF);
        if (v.t == V_UNDEF && (size_t)j >= a->npos && m->w[j])
            v = eval(r, &fr, m->w[j]);
        dict_setc(r, fr.vars, m->names[j], v);
    }
    ifd_buf_t b = IFD_BUF_INIT;
    if (!r->rc)
        exec_body(r, &fr, m->v, m->nv, &b);
    r->depth--;
    jv s = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return s;
}

static jv call_value(R *r, jv c, const args_t *a)
{
    if (r->rc)
        return UNDEF;
    if (c.t == V_MACRO)
        return call_macro(r, c.u.m, a);
    if (c.t != V_FUNC) {
        if (c.t == V_UNDEF)
            undefined_error(r, c);
        else
            rerr(r, IFD_EINVAL, "'%s' object is not callable", type_name(c));
        return UNDEF;
    }
    jfunc *fn = c.u.fn;
    switch (fn->kind) {
    case F_METHOD: return call_method(r, fn->self, fn->name, a);
    case F_CYCLE: {
        if (!a->npos) {
            rerr(r, IFD_EINVAL, "no items for cycling given");
            return UNDEF;
        }
        return a->pos[fn->self.u.lp->i % a->npos];
    }
    case F_RAISE: {
        jv m = to_str(r, arg(a, 0, NULL, UNDEF));
        if (r->rc)
            return UNDEF;
        r->rc = IFD_EINVAL;
        if (r->err && r->errlen)
            snprintf(r->err, r->errlen, "%s", m.u.s->s);
        return UNDEF;
    }
    case F_STRFTIME: {
        jv fmt = arg(a, 0, NULL, UNDEF);
        if (need_str(r, fmt, "strftime_now"))
            return UNDEF;
        time_t now = r->lim.now ? (time_t)r->lim.now : time(NULL);
        struct tm tm;
        char buf[512];
        localtime_r(&now, &tm);
        size_t n = fmt.u.s->n ? strftime(buf, sizeof buf, fmt.u.s->s, &tm) : 0;
        return vstr(r, buf, n);
    }
    case F_RANGE: {
        int64_t lo = 0, hi, st = 1;
        for (size_t i = 0; i < a->npos; i++)
            if (a->pos[i].t != V_INT && a->pos[i].t != V_BOOL) {
                rerr(r, IFD_EINVAL, "range: integer arguments expected");
                return UNDEF;
            }
        if (a->npos == 1) {
            hi = num_i(a->pos[0]);
        } else if (a->npos == 2 || a->npos == 3) {
            lo = num_i(a->pos[0]);
            hi = num_i(a->pos[1]);
            if (a->npos == 3)
                st = num_i(a->pos[2]);
        } else {
            rerr(r, IFD_EINVAL, "range expects 1 to 3 arguments");
            return UNDEF;
        }
        if (st == 0) {
            rerr(r, IFD_EINVAL, "range() arg 3 must not be zero");
            return UNDEF;
        }
        double cnt = st > 0 ? ceil(((double)hi - (double)lo) / (double)st)
                            : ceil(((double)lo - (double)hi) / (double)-st);
        if (cnt > 100000) { /* jinja2's sandbox MAX_RANGE */
            rerr(r, IFD_ETOOBIG, "range too big, maximum size for range is 100000");
            return UNDEF;
        }
        jlist *l = mklist(r, cnt > 0 ? (size_t)cnt : 0);
        for (int64_t i = lo; l && (st > 0 ? i < hi : i > hi); i += st)
            l->v[l->n++] = vint(i);
        return vlist(l);
    }
    case F_NAMESPACE:
    case F_DICT: {
        jdict *d = mkdict(r);
        if (!d)
            return UNDEF;
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i].t != V_DICT) {
                rerr(r, IFD_EINVAL, "%s: positional argument must be a mapping", fn->name);
                return UNDEF;
            }
            for (size_t j = 0; j < a->pos[i].u.d->n; j++)
                dict_setv(r, d, a->pos[i].u.d->k[j], a->pos[i].u.d->v[j]);
        }
        for (size_t i = 0; i < a->nkw; i++)
            dict_setc(r, d, a->kw[i], a->kwv[i]);
        return vdict(d, fn->kind == F_NAMESPACE ? V_NS : V_DICT);
    }
    }
    return UNDEF;
}

/* ---- statements ------------------------------------------------------------------------ */

enum { FLOW_NEXT = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static int assign(R *r, frame_t *f, const ifd__jn_t *n, jv v)
{
    if (n->a) {
        jv ns = eval(r, f, n->a->a);
        if (r->rc)
            return r->rc;
        if (ns.t != V_NS)
            return rerr(r, IFD_EINVAL, "cannot assign attribute on non-namespace object");
        jstr *k = mkstr(r, n->a->s, n->a->sn);
        return k ? dict_set(r, ns.u.d, k, v) : r->rc;
    }
    if (n->nnames == 1)
        return dict_setc(r, f->vars, n->names[0], v);
    jlist *l = iter_list(r, v);
    if (!l)
        return r->rc;
    if (l->n != n->nnames)
        return rerr(r, IFD_EINVAL, "cannot unpack %zu values into %u names", l->n, n->nnames);
    for (uint32_t i = 0; i < n->nnames; i++)
        if (dict_setc(r, f->vars, n->names[i], l->v[i]))
            return r->rc;
    return 0;
}

static int exec_for(R *r, frame_t *f, const ifd__jn_t *n, ifd_buf_t *out)
{
    jv it = eval(r, f, n->a);
    if (r->rc)
        return r->rc;
    jlist *src = it.t == V_DICT ? iter_list(r, it) : iter_list(r, it);
    if (!src)
        return r->rc;
    frame_t fr = {mkdict(r), f};
    jloop *lp = ralloc(r, sizeof *lp);
    if (!fr.vars || !lp)
        return r->rc;
    jlist *items = src;
    if (n->b) {
        /* `for x in xs if cond`: filter first so loop.length counts the kept ones */
        items = mklist(r, 0);
        for (size_t i = 0; items && i < src->n && !r->rc; i++) {
            if (count_iter(r))
                return r->rc;
            jv x = src->v[i];
            if (n->nnames == 1) {
                dict_setc(r, fr.vars, n->names[0], x);
            } else {
                jlist *tl = iter_list(r, x);
                if (!tl || tl->n != n->nnames)
                    return rerr(r, IFD_EINVAL, "cannot unpack a loop item into %u names",
                                n->nnames);
                for (uint32_t k = 0; k < n->nnames; k++)
                    dict_setc(r, fr.vars, n->names[k], tl->v[k]);
            }
            if (truthy(eval(r, &fr, n->b)))
                list_push(r, items, x);
        }
        if (r->rc || !items)
            return r->rc;
    }
    lp->items = items;
    for (size_t i = 0; i < items->n; i++) {
        if (count_iter(r))
            return r->rc;
        fr.vars->n = 0; /* a fresh scope per iteration */
        lp->i = i;
        jv x = items->v[i];
        if (n->nnames == 1) {
            dict_setc(r, fr.vars, n->names[0], x);
        } else {
            jlist *tl = iter_list(r, x);
            if (!tl)
                return r->rc;
            if (tl->n != n->nnames)
                return rerr(r, IFD_EINVAL, "cannot unpack %zu values into %u names", tl->n,
                            n->nnames);
            for (uint32_t k = 0; k < n->nnames; k++)
                dict_setc(r, fr.vars, n->names[k], tl->v[k]);
        }
        dict_setc(r, fr.vars, "loop", (jv){.t = V_LOOP, .u.lp = lp});
        int fl = exec_body(r, &fr, n->v, n->nv, out);
        if (fl < 0)
            return fl;
        if (fl == FLOW_BREAK)
            break;
    }
    if (!items->n && n->nw)
        return exec_body(r, f, n->w, n->nw, out);
    return r->rc;
}

/* Applies a filter chain whose innermost operand is NULL to v. */
static jv filter_chain(R *r, frame_t *f, const ifd__jn_t *c, jv v)
{
    if (!c)
        return v;
    jv in = filter_chain(r, f, c->a, v);
    args_t a;
    if (r->rc || eval_args(r, f, c, &a))
        return UNDEF;
    return apply_filter(r, f, c->op, in, &a);
}

static int exec_body(R *r, frame_t *f, ifd__jn_t *const *body, uint32_t nb, ifd_buf_t *out)
{
    for (uint32_t i = 0; i < nb; i++) {
        const ifd__jn_t *n = body[i];
        if (r->rc)
            return r->rc;
        r->line = n->line;
        switch (n->kind) {
        case IFD__JN_TEXT:
            if (put(r, out, n->s, n->sn))
                return r->rc;
            break;
        case IFD__JN_OUT: {
            jv v = eval(r, f, n->a);
            if (r->rc || to_text(r, out, v, false))
                return r->rc;
            break;
        }
        case IFD__JN_IF: {
            jv c = eval(r, f, n->a);
            if (r->rc)
                return r->rc;
            int fl = truthy(c) ? exec_body(r, f, n->v, n->nv, out) : exec_body(r, f, n->w, n->nw, out);
            if (fl)
                return fl;
            break;
        }
        case IFD__JN_FOR:
            if (++r->depth > r->lim.max_depth + IFD__JINJA_MAX_NEST)
                return rerr(r, IFD_ETOOBIG, "loops nested too deeply");
            exec_for(r, f, n, out);
            r->depth--;
            if (r->rc)
                return r->rc;
            break;
        case IFD__JN_SET: {
            jv v = eval(r, f, n->b);
            if (r->rc || assign(r, f, n, v))
                return r->rc;
            break;
        }
        case IFD__JN_SETBLOCK: {
            ifd_buf_t b = IFD_BUF_INIT;
            exec_body(r, f, n->v, n->nv, &b);
            jv v = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
            ifd_buf_free(&b);
            v = filter_chain(r, f, n->c, v);
            if (r->rc || dict_setc(r, f->vars, n->names[0], v))
                return r->rc;
            break;
        }
        case IFD__JN_FILTERBLOCK: {
            ifd_buf_t b = IFD_BUF_INIT;
            exec_body(r, f, n->v, n->nv, &b);
            jv v = r->rc ? UNDEF : vstr(r, b.data ? b.data : "", b.len);
            ifd_buf_free(&b);
            v = filter_chain(r, f, n->c, v);
            if (r->rc || to_text(r, out, v, false))
                return r->rc;
            break;
        }
        case IFD__JN_MACRO:
            if (dict_setc(r, f->vars, n->s, (jv){.t = V_MACRO, .u.m = n}))
                return r->rc;
            break;
        case IFD__JN_BREAK: return FLOW_BREAK;
        case IFD__JN_CONTINUE: return FLOW_CONTINUE;
        default: return rerr(r, IFD_EINTERNAL, "bad statement node %d", n->kind);
        }
    }
    return r->rc;
}

ifd_jinja_limits_t ifd_jinja_default_limits(void)
{
    ifd_jinja_limits_t l = {16u << 20, 256u << 20, 1000000, 64, 0};
    return l;
}

int ifd_jinja_render(const ifd_jinja_t *t, const json_t *ctx, const ifd_jinja_limits_t *lim,
                     char **out, size_t *out_len, char *errbuf, size_t errlen)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (errbuf && errlen)
        errbuf[0] = '\0';
    R r;
    memset(&r, 0, sizeof r);
    r.lim = lim ? *lim : ifd_jinja_default_limits();
    r.err = errbuf;
    r.errlen = errlen;
    ifd_arena_init(&r.A, 0);
    ifd_buf_t b = IFD_BUF_INIT;
    if (ctx && !json_is_object(ctx)) {
        rerr(&r, IFD_EINVAL, "the context must be a JSON object");
    } else if (ctx) {
        jv g = from_json(&r, ctx, 0);
        if (!r.rc)
            r.globals = g.u.d;
    }
    frame_t root = {NULL, NULL};
    if (!r.rc && (root.vars = mkdict(&r))) {
        r.root = &root;
        int fl = exec_body(&r, &root, t->body, t->nbody, &b);
        (void)fl; /* break/continue outside a loop are refused by the parser */
    }
    ifd_arena_close(&r.A);
    if (!r.rc && !b.data && !(b.data = calloc(1, 1)))
        r.rc = IFD_ENOMEM;
    if (r.rc) {
        ifd_buf_free(&b);
        return r.rc;
    }
    *out = b.data;
    if (out_len)
        *out_len = b.len;
    return 0;
}
