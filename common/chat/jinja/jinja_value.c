/*
 * jinja_value.c — values of the renderer (jinja_rt.h): construction in the
 * rendering's arena, JSON context conversion, UTF-8 code-point helpers,
 * Python str()/repr() and json.dumps text, truth, equality and ordering,
 * arithmetic and `in`, iteration, attribute/item access and slicing.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "jinja_rt.h"
#include "utf8.h"

__attribute__((format(printf, 3, 4))) int ifd__j_rerr(R *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = ifd__jerr_record(&r->rc, r->err, r->errlen, r->line, rc, fmt, ap);
    va_end(ap);
    return rc;
}

void *ifd__j_ralloc(R *r, size_t n)
{
    if (r->rc)
        return NULL;
    if (r->A.total + n > r->lim.max_memory) {
        ifd__j_rerr(r, IFD_ETOOBIG, "template rendering needs more than %zu bytes of memory",
                    r->lim.max_memory);
        return NULL;
    }
    void *p = ifd_arena_alloc(&r->A, n ? n : 1);
    if (!p)
        ifd__j_rerr(r, IFD_ENOMEM, "out of memory");
    return p;
}

bool ifd__j_enter_slow(R *r)
{
    ifd__j_rerr(r, IFD_ETOOBIG, "template nested too deeply (over %d levels of evaluation)",
                r->nest + 1 > IFD_JINJA_MAX_NESTING ? IFD_JINJA_MAX_NESTING : (int)r->nest);
    return false;
}

int ifd__j_tick_slow(R *r)
{
    if (r->lim.cancel && atomic_load_explicit(r->lim.cancel, memory_order_relaxed))
        return ifd__j_rerr(r, IFD_ECANCELED, "template rendering canceled");
    if (r->deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec > r->deadline)
            return ifd__j_rerr(r, IFD_ETOOBIG, "template rendering took longer than %u ms",
                               r->lim.max_time_ms);
    }
    return 0;
}

jstr *ifd__j_mkstr(R *r, const char *s, size_t n)
{
    if (ifd__j_ticks(r, n >> 6))
        return NULL;
    jstr *j = ifd__j_ralloc(r, sizeof *j + n + 1);
    if (!j)
        return NULL;
    j->n = n;
    if (n)
        memcpy(j->s, s, n);
    j->s[n] = '\0';
    return j;
}

jv ifd__j_vstr(R *r, const char *s, size_t n)
{
    jv v = {.t = V_STR};
    v.u.s = ifd__j_mkstr(r, s, n);
    return v.u.s ? v : UNDEF;
}

jv ifd__j_vint(int64_t i)
{
    jv v = {.t = V_INT};
    v.u.i = i;
    return v;
}

jv ifd__j_vfloat(double f)
{
    jv v = {.t = V_FLOAT};
    v.u.f = f;
    return v;
}

jv ifd__j_vbool(bool b)
{
    jv v = {.t = V_BOOL};
    v.u.b = b;
    return v;
}

jlist *ifd__j_mklist(R *r, size_t cap)
{
    jlist *l = ifd__j_ralloc(r, sizeof *l);
    if (!l)
        return NULL;
    memset(l, 0, sizeof *l);
    if (cap && !(l->v = ifd__j_ralloc(r, cap * sizeof *l->v)))
        return NULL;
    l->cap = cap;
    return l;
}

int ifd__j_list_push(R *r, jlist *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = ifd__j_ralloc(r, cap * sizeof *nv);
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

jv ifd__j_vlist(jlist *l)
{
    jv v = {.t = V_LIST};
    v.u.l = l;
    return l ? v : UNDEF;
}

jdict *ifd__j_mkdict(R *r)
{
    jdict *d = ifd__j_ralloc(r, sizeof *d);
    if (d)
        memset(d, 0, sizeof *d);
    return d;
}

jv ifd__j_vdict(jdict *d, int t)
{
    jv v = {.t = (uint8_t)t};
    v.u.d = d;
    return d ? v : UNDEF;
}

/* The hash of a dict key: 1, 1.0 and True hash alike, as they are one key in Python. */
static uint64_t key_hash(jv k)
{
    switch (k.t) {
    case V_STR:
        return ifd_hash_bytes(k.u.s->s, k.u.s->n);
    case V_INT:
    case V_BOOL:
        return ifd_hash_u64((uint64_t)ifd__j_num_i(k));
    case V_FLOAT: {
        double f = k.u.f;
        if (f == f && f >= -9.2e18 && f <= 9.2e18 && f == (double)(int64_t)f)
            return ifd_hash_u64((uint64_t)(int64_t)f);
        uint64_t bits;
        memcpy(&bits, &f, sizeof bits);
        return ifd_hash_u64(bits ^ 0x9e3779b97f4a7c15ULL);
    }
    default:
        return 0x5bd1e995u; /* None */
    }
}

static bool key_is_str(jv k, const char *s, size_t n)
{
    return k.t == V_STR && k.u.s->n == n && memcmp(k.u.s->s, s, n) == 0;
}

jv *ifd__j_dict_find(const jdict *d, const char *k, size_t n)
{
    if (d->idx.slots) {
        uint64_t h = ifd_hash_bytes(k, n);
        uint32_t it = ifd_hash_first(&d->idx, h);
        for (int32_t i; (i = ifd_hash_next(&d->idx, h, &it)) >= 0;)
            if (key_is_str(d->k[i], k, n))
                return &d->v[i];
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (key_is_str(d->k[i], k, n))
            return &d->v[i];
    return NULL;
}

bool ifd__j_hashable(jv k)
{
    return k.t == V_STR || k.t == V_INT || k.t == V_FLOAT || k.t == V_BOOL || k.t == V_NONE;
}

/* Lookup by any hashable key (1, 1.0 and True are the same key, as in Python). */
jv *ifd__j_dict_findv(R *r, const jdict *d, jv k)
{
    if (k.t == V_STR)
        return ifd__j_dict_find(d, k.u.s->s, k.u.s->n);
    if (!ifd__j_hashable(k))
        return NULL;
    if (d->idx.slots) {
        uint64_t h = key_hash(k);
        uint32_t it = ifd_hash_first(&d->idx, h);
        for (int32_t i; (i = ifd_hash_next(&d->idx, h, &it)) >= 0;)
            if (d->k[i].t != V_STR && ifd__j_equal(r, d->k[i], k))
                return &d->v[i];
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t != V_STR && ifd__j_equal(r, d->k[i], k))
            return &d->v[i];
    return NULL;
}

/* Builds d's hash index (d has IFD__JDICT_INDEX_AT entries), or adds entry i to it. */
static int dict_index(R *r, jdict *d, size_t i)
{
    size_t before = d->idx.slots ? ((size_t)d->idx.mask + 1) * sizeof *d->idx.slots : 0;
    if (!d->idx.slots) {
        if (ifd_hash_init(&d->idx, 2 * IFD__JDICT_INDEX_AT))
            return ifd__j_rerr(r, IFD_ENOMEM, "out of memory");
        d->next_indexed = r->indexed;
        r->indexed = d;
        for (size_t j = 0; j < i; j++)
            if (ifd_hash_insert(&d->idx, key_hash(d->k[j]), (int32_t)j))
                return ifd__j_rerr(r, IFD_ENOMEM, "out of memory");
    }
    if (i > INT32_MAX || ifd_hash_insert(&d->idx, key_hash(d->k[i]), (int32_t)i))
        return ifd__j_rerr(r, IFD_ENOMEM, "out of memory");
    r->index_bytes += ((size_t)d->idx.mask + 1) * sizeof *d->idx.slots - before;
    if (r->A.total + r->index_bytes > r->lim.max_memory)
        return ifd__j_rerr(r, IFD_ETOOBIG,
                           "template rendering needs more than %zu bytes of memory",
                           r->lim.max_memory);
    return 0;
}

void ifd__j_dict_clear(jdict *d)
{
    d->n = 0;
    ifd_hash_clear(&d->idx);
}

int ifd__j_dict_setv(R *r, jdict *d, jv k, jv v)
{
    jv *e = ifd__j_dict_findv(r, d, k);
    if (e) {
        *e = v;
        return 0;
    }
    if (r->rc)
        return r->rc;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *nk = ifd__j_ralloc(r, cap * sizeof *nk);
        jv *nv = ifd__j_ralloc(r, cap * sizeof *nv);
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
    d->v[d->n] = v;
    if ((d->idx.slots || d->n + 1 >= IFD__JDICT_INDEX_AT) && dict_index(r, d, d->n))
        return r->rc;
    d->n++;
    return 0;
}

int ifd__j_dict_set(R *r, jdict *d, jstr *k, jv v)
{
    return ifd__j_dict_setv(r, d, (jv){.t = V_STR, .u.s = k}, v);
}

int ifd__j_dict_setc(R *r, jdict *d, const char *k, jv v)
{
    jstr *s = ifd__j_mkstr(r, k, strlen(k));
    return s ? ifd__j_dict_set(r, d, s, v) : r->rc;
}

static jv from_json(R *r, const json_t *j, int depth);

jv ifd__j_from_json(R *r, const json_t *j, int depth)
{
    if (depth > 512) {
        ifd__j_rerr(r, IFD_ETOOBIG, "context nested too deeply");
        return UNDEF;
    }
    if (!ifd__j_enter(r))
        return UNDEF;
    jv v = from_json(r, j, depth);
    ifd__j_leave(r);
    return v;
}

static jv from_json(R *r, const json_t *j, int depth)
{
    if (ifd__j_tick(r))
        return UNDEF;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = ifd__j_mkdict(r);
        const char *k;
        json_t *v;
        if (!d)
            return UNDEF;
        json_object_foreach((json_t *)j, k, v)
        {
            jv x = ifd__j_from_json(r, v, depth + 1);
            jstr *ks = ifd__j_mkstr(r, k, strlen(k));
            if (r->rc || !ks || ifd__j_dict_set(r, d, ks, x))
                return UNDEF;
        }
        return ifd__j_vdict(d, V_DICT);
    }
    case JSON_ARRAY: {
        jlist *l = ifd__j_mklist(r, json_array_size(j));
        size_t i;
        json_t *v;
        if (!l)
            return UNDEF;
        json_array_foreach(j, i, v)
        {
            if (ifd__j_list_push(r, l, ifd__j_from_json(r, v, depth + 1)))
                return UNDEF;
        }
        return ifd__j_vlist(l);
    }
    case JSON_STRING:
        return ifd__j_vstr(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return ifd__j_vint((int64_t)json_integer_value(j));
    case JSON_REAL:
        return ifd__j_vfloat(json_real_value(j));
    case JSON_TRUE:
        return ifd__j_vbool(true);
    case JSON_FALSE:
        return ifd__j_vbool(false);
    default:
        return NONE;
    }
}

/* ---- UTF-8 and Python string helpers --------------------------------------------------- */

/* Length of the UTF-8 sequence at s (1 for an invalid byte: each byte of an
 * invalid sequence counts as one character, as the text is passed through). */
size_t ifd__j_u8len(const unsigned char *s, size_t n)
{
    int c = ifd_utf8_check(s, n);
    return c > 0 ? (size_t)c : 1;
}

/* The code point of the l-byte sequence at s (l from ifd__j_u8len). */
uint32_t ifd__j_u8cp(const unsigned char *s, size_t l)
{
    size_t len;
    uint32_t cp = ifd_utf8_get(s, l, &len);
    return cp == 0xFFFFFFFFu ? s[0] : cp;
}

size_t ifd__j_u8count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i += ifd__j_u8len((const unsigned char *)s + i, n - i))
        k++;
    return k;
}

/* Byte offset of code point index ci (ci ≤ count). */
static size_t u8off(const char *s, size_t n, size_t ci)
{
    size_t i = 0;
    while (ci-- && i < n)
        i += ifd__j_u8len((const unsigned char *)s + i, n - i);
    return i;
}

/* Python str.isspace() for one code point. */
bool ifd__j_py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool in_chars(uint32_t c, const jstr *chars)
{
    const unsigned char *s = (const unsigned char *)chars->s;
    for (size_t i = 0; i < chars->n;) {
        size_t l = ifd__j_u8len(s + i, chars->n - i);
        if (ifd__j_u8cp(s + i, l) == c)
            return true;
        i += l;
    }
    return false;
}

/* strip: which = 1 left, 2 right, 3 both; chars NULL = whitespace. */
jv ifd__j_py_strip(R *r, const jstr *s, const jstr *chars, int which)
{
    const unsigned char *b = (const unsigned char *)s->s;
    size_t a = 0, e = s->n;
    if (which & 1)
        while (a < e) {
            size_t l = ifd__j_u8len(b + a, e - a);
            uint32_t c = ifd__j_u8cp(b + a, l);
            if (chars ? !in_chars(c, chars) : !ifd__j_py_space(c))
                break;
            a += l;
        }
    if (which & 2)
        while (e > a) {
            size_t k = e - 1;
            while (k > a && (b[k] & 0xC0) == 0x80)
                k--;
            size_t l = ifd__j_u8len(b + k, e - k);
            if (k + l != e)
                l = 1, k = e - 1;
            uint32_t c = ifd__j_u8cp(b + k, l);
            if (chars ? !in_chars(c, chars) : !ifd__j_py_space(c))
                break;
            e = k;
        }
    return ifd__j_vstr(r, s->s + a, e - a);
}

char ifd__j_lower_c(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

char ifd__j_upper_c(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
}

bool ifd__j_alpha_c(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* ---- buffers and conversion to text ---------------------------------------------------- */

int ifd__j_put(R *r, ifd_buf_t *b, const char *s, size_t n)
{
    if (ifd__j_ticks(r, n >> 6))
        return r->rc;
    if (b->len + n > r->lim.max_output)
        return ifd__j_rerr(r, IFD_ETOOBIG, "template output larger than %zu bytes",
                           r->lim.max_output);
    if (ifd_buf_append(b, s, n))
        return ifd__j_rerr(r, IFD_ENOMEM, "out of memory");
    return 0;
}

static int puts_(R *r, ifd_buf_t *b, const char *s)
{
    return ifd__j_put(r, b, s, strlen(s));
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

int ifd__j_to_text(R *r, ifd_buf_t *b, jv v, bool repr);

static int repr_str(R *r, ifd_buf_t *b, const jstr *s)
{
    bool sq = memchr(s->s, '\'', s->n) != NULL, dq = memchr(s->s, '"', s->n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    ifd__j_put(r, b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->s[i];
        char esc[8];
        if (c == '\\' || c == (unsigned char)q) {
            esc[0] = '\\';
            esc[1] = (char)c;
            ifd__j_put(r, b, esc, 2);
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
            ifd__j_put(r, b, (const char *)&c, 1);
        }
    }
    return ifd__j_put(r, b, &q, 1);
}

static int to_text(R *r, ifd_buf_t *b, jv v, bool repr);

/* str(v) (repr=false) or repr(v) into b. */
int ifd__j_to_text(R *r, ifd_buf_t *b, jv v, bool repr)
{
    if (ifd__j_tick(r) || !ifd__j_enter(r))
        return r->rc;
    int rc = to_text(r, b, v, repr);
    ifd__j_leave(r);
    return rc;
}

static int to_text(R *r, ifd_buf_t *b, jv v, bool repr)
{
    char num[64];
    switch (v.t) {
    case V_UNDEF:
        return 0;
    case V_NONE:
        return puts_(r, b, "None");
    case V_BOOL:
        return puts_(r, b, v.u.b ? "True" : "False");
    case V_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        return puts_(r, b, num);
    case V_FLOAT:
        fmt_float(v.u.f, num, sizeof num);
        return puts_(r, b, num);
    case V_STR:
        return repr ? repr_str(r, b, v.u.s) : ifd__j_put(r, b, v.u.s->s, v.u.s->n);
    case V_LIST:
        if (v.u.l->gen)
            return puts_(r, b, "<generator object>");
        puts_(r, b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                puts_(r, b, ", ");
            ifd__j_to_text(r, b, v.u.l->v[i], true);
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
            ifd__j_to_text(r, b, v.u.d->k[i], true);
            puts_(r, b, ": ");
            ifd__j_to_text(r, b, v.u.d->v[i], true);
        }
        return puts_(r, b, v.t == V_NS ? "}>" : "}");
    case V_MACRO:
        puts_(r, b, "<Macro '");
        puts_(r, b, v.u.m->s);
        return puts_(r, b, "'>");
    default:
        return puts_(r, b, "<function>");
    }
}

/* str(v) as a value (strings are returned as they are). */
jv ifd__j_to_str(R *r, jv v)
{
    if (v.t == V_STR)
        return v;
    ifd_buf_t b = IFD_BUF_INIT;
    ifd__j_to_text(r, &b, v, false);
    jv s = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return s;
}

/* ---- JSON (Python json.dumps) ---------------------------------------------------------- */

static int json_str(R *r, ifd_buf_t *b, const char *s, size_t n, bool ascii)
{
    ifd__j_put(r, b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        char esc[16];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            ifd__j_put(r, b, esc, 2);
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
            size_t l = ifd__j_u8len(u + i, n - i);
            uint32_t cp = ifd__j_u8cp(u + i, l);
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
            ifd__j_put(r, b, s + i, 1);
            i++;
        }
    }
    return ifd__j_put(r, b, "\"", 1);
}

static void json_nl(R *r, ifd_buf_t *b, const jsonopt_t *o, int level)
{
    if (!o->indent)
        return;
    ifd__j_put(r, b, "\n", 1);
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

int ifd__j_compare(R *r, jv a, jv b, int *out);

static void sort_idx_rec(R *r, const jv *keys, bool reverse, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2 || r->rc)
        return;
    size_t h = n / 2;
    sort_idx_rec(r, keys, reverse, idx, tmp, h);
    sort_idx_rec(r, keys, reverse, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp = 0;
        ifd__j_compare(r, keys[idx[j]], keys[idx[i]], &cmp);
        if (reverse)
            cmp = -cmp;
        tmp[k++] = cmp < 0 ? idx[j++] : idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

int ifd__j_sort_idx(R *r, const jv *keys, bool reverse, size_t *idx, size_t n)
{
    size_t *tmp = ifd__j_ralloc(r, (n + 1) * sizeof *tmp);
    for (size_t i = 0; tmp && i < n; i++)
        idx[i] = i;
    if (tmp)
        sort_idx_rec(r, keys, reverse, idx, tmp, n);
    return r->rc;
}

static int to_json(R *r, ifd_buf_t *b, jv v, const jsonopt_t *o, int level);

int ifd__j_to_json(R *r, ifd_buf_t *b, jv v, const jsonopt_t *o, int level)
{
    if (level > 512)
        return ifd__j_rerr(r, IFD_ETOOBIG, "tojson: value nested too deeply");
    if (ifd__j_tick(r) || !ifd__j_enter(r))
        return r->rc;
    int rc = to_json(r, b, v, o, level);
    ifd__j_leave(r);
    return rc;
}

static int to_json(R *r, ifd_buf_t *b, jv v, const jsonopt_t *o, int level)
{
    char num[64];
    switch (v.t) {
    case V_NONE:
        return puts_(r, b, "null");
    case V_BOOL:
        return puts_(r, b, v.u.b ? "true" : "false");
    case V_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        return puts_(r, b, num);
    case V_FLOAT:
        if (isnan(v.u.f))
            return puts_(r, b, "NaN");
        if (isinf(v.u.f))
            return puts_(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        fmt_float(v.u.f, num, sizeof num);
        return puts_(r, b, num);
    case V_STR:
        return json_str(r, b, v.u.s->s, v.u.s->n, o->ascii);
    case V_LIST:
        if (v.u.l->gen)
            return ifd__j_rerr(r, IFD_EINVAL,
                               "tojson: Object of type generator is not JSON serializable");
        if (!v.u.l->n)
            return puts_(r, b, "[]");
        puts_(r, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                puts_(r, b, o->item_sep);
            json_nl(r, b, o, level + 1);
            ifd__j_to_json(r, b, v.u.l->v[i], o, level + 1);
        }
        json_nl(r, b, o, level);
        return puts_(r, b, "]");
    case V_DICT: {
        const jdict *d = v.u.d;
        if (!d->n)
            return puts_(r, b, "{}");
        size_t *idx = ifd__j_ralloc(r, d->n * sizeof *idx);
        if (!idx)
            return r->rc;
        for (size_t i = 0; i < d->n; i++)
            idx[i] = i;
        if (o->sort_keys && ifd__j_sort_idx(r, d->k, false, idx, d->n))
            return r->rc;
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
                ifd__j_put(r, b, "\"", 1);
                if (k.t == V_BOOL || k.t == V_NONE)
                    puts_(r, b, k.t == V_NONE ? "null" : k.u.b ? "true" : "false");
                else
                    ifd__j_to_text(r, b, k, false);
                ifd__j_put(r, b, "\"", 1);
            }
            puts_(r, b, o->key_sep);
            ifd__j_to_json(r, b, d->v[idx[i]], o, level + 1);
        }
        json_nl(r, b, o, level);
        return puts_(r, b, "}");
    }
    default:
        return ifd__j_rerr(r, IFD_EINVAL, "tojson: Object of type %s is not JSON serializable",
                           v.t == V_UNDEF ? "Undefined"
                           : v.t == V_NS  ? "Namespace"
                                          : "function");
    }
}

/* ---- truth, equality, order ------------------------------------------------------------ */

bool ifd__j_truthy(jv v)
{
    switch (v.t) {
    case V_UNDEF:
    case V_NONE:
        return false;
    case V_BOOL:
        return v.u.b;
    case V_INT:
        return v.u.i != 0;
    case V_FLOAT:
        return v.u.f != 0;
    case V_STR:
        return v.u.s->n != 0;
    case V_LIST:
        return v.u.l->gen || v.u.l->n != 0;
    case V_DICT:
        return v.u.d->n != 0;
    default:
        return true;
    }
}

bool ifd__j_is_num(jv v)
{
    return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL;
}

double ifd__j_num_f(jv v)
{
    return v.t == V_FLOAT ? v.u.f : v.t == V_INT ? (double)v.u.i : (double)v.u.b;
}

int64_t ifd__j_num_i(jv v)
{
    return v.t == V_INT ? v.u.i : v.t == V_BOOL ? v.u.b : (int64_t)v.u.f;
}

static bool str_eq(const jstr *a, const jstr *b)
{
    return a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
}

static bool equal(R *r, jv a, jv b);

/* a == b as Python compares (an error recorded in r, e.g. nesting, gives false). */
bool ifd__j_equal(R *r, jv a, jv b)
{
    if (ifd__j_tick(r) || !ifd__j_enter(r))
        return false;
    bool eq = equal(r, a, b);
    ifd__j_leave(r);
    return eq && !r->rc;
}

static bool equal(R *r, jv a, jv b)
{
    if (ifd__j_is_num(a) && ifd__j_is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT)
            return ifd__j_num_i(a) == ifd__j_num_i(b);
        return ifd__j_num_f(a) == ifd__j_num_f(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case V_UNDEF:
    case V_NONE:
        return true;
    case V_STR:
        return str_eq(a.u.s, b.u.s);
    case V_LIST:
        if (a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!ifd__j_equal(r, a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case V_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = ifd__j_dict_findv(r, b.u.d, a.u.d->k[i]);
            if (!o || !ifd__j_equal(r, a.u.d->v[i], *o))
                return false;
        }
        return true;
    case V_NS:
        return a.u.d == b.u.d;
    case V_MACRO:
        return a.u.m == b.u.m;
    default:
        return false;
    }
}

const char *ifd__j_type_name(jv v)
{
    static const char *const names[] = {"Undefined", "NoneType", "bool",     "int",
                                        "float",     "str",      "list",     "dict",
                                        "Namespace", "Macro",    "function", "LoopContext"};
    if (v.t == V_LIST && (v.u.l->tuple || v.u.l->gen))
        return v.u.l->gen ? "generator" : "tuple";
    return names[v.t];
}

static int compare(R *r, jv a, jv b, int *out);

/* Python a < b etc. (*out: -1, 0, 1). Returns 0 or an error. */
int ifd__j_compare(R *r, jv a, jv b, int *out)
{
    *out = 0;
    if (ifd__j_tick(r) || !ifd__j_enter(r))
        return r->rc;
    int rc = compare(r, a, b, out);
    ifd__j_leave(r);
    return rc;
}

static int compare(R *r, jv a, jv b, int *out)
{
    if (ifd__j_is_num(a) && ifd__j_is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) {
            int64_t x = ifd__j_num_i(a), y = ifd__j_num_i(b);
            *out = (x > y) - (x < y);
        } else {
            double x = ifd__j_num_f(a), y = ifd__j_num_f(b);
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
            if (ifd__j_equal(r, a.u.l->v[i], b.u.l->v[i]))
                continue;
            if (r->rc)
                return r->rc;
            return ifd__j_compare(r, a.u.l->v[i], b.u.l->v[i], out);
        }
        *out = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return ifd__j_rerr(r, IFD_EINVAL, "'<' not supported between instances of '%s' and '%s'",
                       ifd__j_type_name(a), ifd__j_type_name(b));
}

/* ---- iteration ------------------------------------------------------------------------- */

/* list(v) for iteration: list as is, dict → keys, str → characters,
 * undefined → empty. */
jlist *ifd__j_iter_list(R *r, jv v)
{
    switch (v.t) {
    case V_LIST:
        return v.u.l;
    case V_UNDEF:
        return ifd__j_mklist(r, 0);
    case V_DICT: {
        jlist *l = ifd__j_mklist(r, v.u.d->n);
        for (size_t i = 0; l && i < v.u.d->n; i++)
            l->v[l->n++] = v.u.d->k[i];
        return l;
    }
    case V_STR: {
        jlist *l = ifd__j_mklist(r, 0);
        const char *s = v.u.s->s;
        for (size_t i = 0; l && i < v.u.s->n;) {
            size_t k = ifd__j_u8len((const unsigned char *)s + i, v.u.s->n - i);
            if (ifd__j_list_push(r, l, ifd__j_vstr(r, s + i, k)))
                return NULL;
            i += k;
        }
        return l;
    }
    default:
        ifd__j_rerr(r, IFD_EINVAL, "'%s' object is not iterable", ifd__j_type_name(v));
        return NULL;
    }
}

int ifd__j_count_iter(R *r)
{
    if (ifd__j_tick(r))
        return r->rc;
    if (++r->iters > r->lim.max_iters)
        return ifd__j_rerr(r, IFD_ETOOBIG, "template runs more than %llu loop iterations",
                           (unsigned long long)r->lim.max_iters);
    return 0;
}

/* ---- attribute and item access --------------------------------------------------------- */

static const char *const str_methods[] = {
    "strip",   "lstrip",  "rstrip",     "split",   "rsplit",     "startswith", "endswith",
    "replace", "upper",   "lower",      "title",   "capitalize", "format",     "find",
    "rfind",   "count",   "join",       "isdigit", "isalpha",    "isalnum",    "isspace",
    "islower", "isupper", "splitlines", NULL};
static const char *const dict_methods[] = {"get",    "items",      "keys", "values", "pop",
                                           "update", "setdefault", "copy", NULL};
static const char *const list_methods[] = {"append", "pop",  "insert",  "extend", "remove", "index",
                                           "count",  "copy", "reverse", "sort",   NULL};

static bool in_names(const char *const *tab, const char *s, size_t n)
{
    for (int i = 0; tab[i]; i++)
        if (strlen(tab[i]) == n && memcmp(tab[i], s, n) == 0)
            return true;
    return false;
}

static jv method(R *r, jv self, const char *name)
{
    jfunc *f = ifd__j_ralloc(r, sizeof *f);
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
        return ifd__j_vint(i + 1);
    if (!strcmp(a, "index0"))
        return ifd__j_vint(i);
    if (!strcmp(a, "revindex"))
        return ifd__j_vint(n - i);
    if (!strcmp(a, "revindex0"))
        return ifd__j_vint(n - i - 1);
    if (!strcmp(a, "first"))
        return ifd__j_vbool(i == 0);
    if (!strcmp(a, "last"))
        return ifd__j_vbool(i == n - 1);
    if (!strcmp(a, "length"))
        return ifd__j_vint(n);
    if (!strcmp(a, "depth"))
        return ifd__j_vint(1);
    if (!strcmp(a, "depth0"))
        return ifd__j_vint(0);
    if (!strcmp(a, "previtem"))
        return i > 0 ? lp->items->v[i - 1] : UNDEF;
    if (!strcmp(a, "nextitem"))
        return i + 1 < n ? lp->items->v[i + 1] : UNDEF;
    if (!strcmp(a, "cycle")) {
        jfunc *f = ifd__j_ralloc(r, sizeof *f);
        if (!f)
            return UNDEF;
        f->kind = F_CYCLE;
        f->name = "cycle";
        f->self = (jv){.t = V_LOOP, .u.lp = lp};
        return (jv){.t = V_FUNC, .u.fn = f};
    }
    return UNDEF;
}

int ifd__j_undefined_error(R *r, jv v)
{
    if (v.u.s)
        return ifd__j_rerr(r, IFD_EINVAL, "'%s' is undefined", v.u.s->s);
    return ifd__j_rerr(r, IFD_EINVAL, "access to an attribute of an undefined value");
}

/* jinja2's getattr(obj, name): attribute (a method) first, then item. */
jv ifd__j_get_attr(R *r, jv o, const char *a, size_t n)
{
    switch (o.t) {
    case V_UNDEF:
        ifd__j_undefined_error(r, o);
        return UNDEF;
    case V_STR:
        if (in_names(str_methods, a, n))
            return method(r, o, a);
        return UNDEF;
    case V_DICT: {
        if (in_names(dict_methods, a, n))
            return method(r, o, a);
        jv *e = ifd__j_dict_find(o.u.d, a, n);
        return e ? *e : UNDEF;
    }
    case V_NS: {
        jv *e = ifd__j_dict_find(o.u.d, a, n);
        return e ? *e : UNDEF;
    }
    case V_LIST:
        if (in_names(list_methods, a, n))
            return method(r, o, a);
        return UNDEF;
    case V_LOOP:
        return loop_attr(r, o.u.lp, a);
    default:
        return UNDEF;
    }
}

static bool norm_index(int64_t *i, size_t n)
{
    if (*i < 0)
        *i += (int64_t)n;
    return *i >= 0 && (uint64_t)*i < n;
}

/* jinja2's getitem(obj, key): item first, then attribute for string keys. */
jv ifd__j_get_item(R *r, jv o, jv k)
{
    if (o.t == V_UNDEF) {
        ifd__j_undefined_error(r, o);
        return UNDEF;
    }
    if (o.t == V_DICT || o.t == V_NS) {
        if (k.t == V_STR) {
            jv *e = ifd__j_dict_find(o.u.d, k.u.s->s, k.u.s->n);
            if (e)
                return *e;
            return o.t == V_DICT ? ifd__j_get_attr(r, o, k.u.s->s, k.u.s->n) : UNDEF;
        }
        jv *e = ifd__j_dict_findv(r, o.u.d, k);
        return e ? *e : UNDEF;
    }
    if (o.t == V_LIST && o.u.l->gen) {
        ifd__j_rerr(r, IFD_EINVAL, "'generator' object is not subscriptable");
        return UNDEF;
    }
    if ((o.t == V_LIST || o.t == V_STR) && (k.t == V_INT || k.t == V_BOOL)) {
        int64_t i = ifd__j_num_i(k);
        if (o.t == V_LIST)
            return norm_index(&i, o.u.l->n) ? o.u.l->v[i] : UNDEF;
        size_t cnt = ifd__j_u8count(o.u.s->s, o.u.s->n);
        if (!norm_index(&i, cnt))
            return UNDEF;
        size_t b = u8off(o.u.s->s, o.u.s->n, (size_t)i);
        return ifd__j_vstr(r, o.u.s->s + b,
                           ifd__j_u8len((const unsigned char *)o.u.s->s + b, o.u.s->n - b));
    }
    if (k.t == V_STR)
        return ifd__j_get_attr(r, o, k.u.s->s, k.u.s->n);
    return UNDEF;
}

/* Python slice indices for a sequence of length n. */
static int slice_idx(R *r, jv lo, jv hi, jv st, size_t n, int64_t *start, int64_t *stop,
                     int64_t *step)
{
    *step = st.t == V_NONE || st.t == V_UNDEF ? 1 : ifd__j_num_i(st);
    if ((st.t != V_NONE && st.t != V_UNDEF && !ifd__j_is_num(st)) ||
        (lo.t != V_NONE && lo.t != V_UNDEF && !ifd__j_is_num(lo)) ||
        (hi.t != V_NONE && hi.t != V_UNDEF && !ifd__j_is_num(hi)))
        return ifd__j_rerr(r, IFD_EINVAL, "slice indices must be integers or None");
    if (*step == 0)
        return ifd__j_rerr(r, IFD_EINVAL, "slice step cannot be zero");
    int64_t len = (int64_t)n;
    bool has_lo = lo.t != V_NONE && lo.t != V_UNDEF, has_hi = hi.t != V_NONE && hi.t != V_UNDEF;
    if (*step > 0) {
        *start = has_lo ? ifd__j_num_i(lo) : 0;
        *stop = has_hi ? ifd__j_num_i(hi) : len;
        if (*start < 0)
            *start = *start + len < 0 ? 0 : *start + len;
        if (*start > len)
            *start = len;
        if (*stop < 0)
            *stop = *stop + len < 0 ? 0 : *stop + len;
        if (*stop > len)
            *stop = len;
    } else {
        *start = has_lo ? ifd__j_num_i(lo) : len - 1;
        *stop = has_hi ? ifd__j_num_i(hi) : -1 - len;
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

jv ifd__j_do_slice(R *r, jv o, jv lo, jv hi, jv st)
{
    int64_t a, e, s;
    if (o.t == V_LIST) {
        if (slice_idx(r, lo, hi, st, o.u.l->n, &a, &e, &s))
            return UNDEF;
        jlist *l = ifd__j_mklist(r, 0);
        for (int64_t i = a; l && (s > 0 ? i < e : i > e); i += s)
            if (ifd__j_list_push(r, l, o.u.l->v[i]))
                return UNDEF;
        if (l)
            l->tuple = o.u.l->tuple;
        return ifd__j_vlist(l);
    }
    if (o.t == V_STR) {
        const char *str = o.u.s->s;
        size_t n = o.u.s->n, cnt = ifd__j_u8count(str, n);
        if (slice_idx(r, lo, hi, st, cnt, &a, &e, &s))
            return UNDEF;
        if (s == 1) {
            if (e <= a)
                return ifd__j_vstr(r, "", 0);
            size_t b0 = u8off(str, n, (size_t)a), b1 = u8off(str, n, (size_t)e);
            return ifd__j_vstr(r, str + b0, b1 - b0);
        }
        size_t *offs = ifd__j_ralloc(r, (cnt + 1) * sizeof *offs);
        if (!offs)
            return UNDEF;
        for (size_t i = 0, k = 0; k <= cnt; k++) {
            offs[k] = i;
            if (i < n)
                i += ifd__j_u8len((const unsigned char *)str + i, n - i);
        }
        ifd_buf_t b = IFD_BUF_INIT;
        for (int64_t i = a; s > 0 ? i < e : i > e; i += s)
            ifd__j_put(r, &b, str + offs[i], offs[i + 1] - offs[i]);
        jv out = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
        ifd_buf_free(&b);
        return out;
    }
    if (o.t == V_UNDEF)
        ifd__j_undefined_error(r, o);
    else
        ifd__j_rerr(r, IFD_EINVAL, "'%s' object is not subscriptable", ifd__j_type_name(o));
    return UNDEF;
}

/* Argument `name` at position `pos` (or -1), else `dflt`. */
jv ifd__j_arg(const args_t *a, int pos, const char *name, jv dflt)
{
    if (pos >= 0 && (size_t)pos < a->npos)
        return a->pos[pos];
    for (size_t i = 0; name && i < a->nkw; i++)
        if (!strcmp(a->kw[i], name))
            return a->kwv[i];
    return dflt;
}

int ifd__j_need_str(R *r, jv v, const char *what)
{
    if (v.t == V_STR)
        return 0;
    return ifd__j_rerr(r, IFD_EINVAL, "%s: expected a string, got '%s'", what, ifd__j_type_name(v));
}

/* markupsafe.escape(s) for the plain side of Markup + str. */
static jv html_escape(R *r, jv v)
{
    if (v.markup)
        return v;
    ifd_buf_t b = IFD_BUF_INIT;
    for (size_t i = 0; i < v.u.s->n && !r->rc; i++) {
        char c = v.u.s->s[i];
        const char *e = c == '&'    ? "&amp;"
                        : c == '<'  ? "&lt;"
                        : c == '>'  ? "&gt;"
                        : c == '"'  ? "&#34;"
                        : c == '\'' ? "&#39;"
                                    : NULL;
        if (e)
            puts_(r, &b, e);
        else
            ifd__j_put(r, &b, &c, 1);
    }
    jv o = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
    return o;
}

jv ifd__j_arith(R *r, int op, jv a, jv b)
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
            jstr *s = ifd__j_ralloc(r, sizeof *s + a.u.s->n + b.u.s->n + 1);
            if (!s)
                return UNDEF;
            s->n = a.u.s->n + b.u.s->n;
            memcpy(s->s, a.u.s->s, a.u.s->n);
            memcpy(s->s + a.u.s->n, b.u.s->s, b.u.s->n);
            s->s[s->n] = '\0';
            return (jv){.t = V_STR, .markup = markup, .u.s = s};
        }
        if (a.t == V_LIST && b.t == V_LIST) {
            jlist *l = ifd__j_mklist(r, a.u.l->n + b.u.l->n);
            if (!l)
                return UNDEF;
            if (a.u.l->n)
                memcpy(l->v, a.u.l->v, a.u.l->n * sizeof *l->v);
            if (b.u.l->n)
                memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof *l->v);
            l->n = a.u.l->n + b.u.l->n;
            l->tuple = a.u.l->tuple && b.u.l->tuple;
            return ifd__j_vlist(l);
        }
    }
    if (op == IFD__OP_MUL && ((a.t == V_STR && (b.t == V_INT || b.t == V_BOOL)) ||
                              (b.t == V_STR && (a.t == V_INT || a.t == V_BOOL)))) {
        jv s = a.t == V_STR ? a : b;
        int64_t k = a.t == V_STR ? ifd__j_num_i(b) : ifd__j_num_i(a);
        if (k <= 0)
            return ifd__j_vstr(r, "", 0);
        if ((uint64_t)k * s.u.s->n > r->lim.max_output) {
            ifd__j_rerr(r, IFD_ETOOBIG, "string repetition larger than %zu bytes",
                        r->lim.max_output);
            return UNDEF;
        }
        jstr *o = ifd__j_ralloc(r, sizeof *o + (size_t)k * s.u.s->n + 1);
        if (!o)
            return UNDEF;
        o->n = (size_t)k * s.u.s->n;
        for (int64_t i = 0; i < k; i++)
            memcpy(o->s + (size_t)i * s.u.s->n, s.u.s->s, s.u.s->n);
        o->s[o->n] = '\0';
        return (jv){.t = V_STR, .u.s = o};
    }
    if (!ifd__j_is_num(a) || !ifd__j_is_num(b)) {
        if (a.t == V_UNDEF || b.t == V_UNDEF)
            ifd__j_undefined_error(r, a.t == V_UNDEF ? a : b);
        else
            ifd__j_rerr(r, IFD_EINVAL,
                        "unsupported operand types for an arithmetic operator: '%s' and '%s'",
                        ifd__j_type_name(a), ifd__j_type_name(b));
        return UNDEF;
    }
    bool fl = a.t == V_FLOAT || b.t == V_FLOAT;
    if (op == IFD__OP_DIV) {
        if (ifd__j_num_f(b) == 0) {
            ifd__j_rerr(r, IFD_EINVAL, "division by zero");
            return UNDEF;
        }
        return ifd__j_vfloat(ifd__j_num_f(a) / ifd__j_num_f(b));
    }
    if (fl) {
        double x = ifd__j_num_f(a), y = ifd__j_num_f(b);
        switch (op) {
        case IFD__OP_ADD:
            return ifd__j_vfloat(x + y);
        case IFD__OP_SUB:
            return ifd__j_vfloat(x - y);
        case IFD__OP_MUL:
            return ifd__j_vfloat(x * y);
        case IFD__OP_POW:
            return ifd__j_vfloat(pow(x, y));
        case IFD__OP_FLOORDIV:
        case IFD__OP_MOD:
            if (y == 0) {
                ifd__j_rerr(r, IFD_EINVAL, "float division by zero");
                return UNDEF;
            }
            if (op == IFD__OP_FLOORDIV)
                return ifd__j_vfloat(floor(x / y));
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return ifd__j_vfloat(m);
        default:
            return UNDEF;
        }
    }
    int64_t x = ifd__j_num_i(a), y = ifd__j_num_i(b), z;
    switch (op) {
    case IFD__OP_ADD:
        if (__builtin_add_overflow(x, y, &z))
            goto overflow;
        return ifd__j_vint(z);
    case IFD__OP_SUB:
        if (__builtin_sub_overflow(x, y, &z))
            goto overflow;
        return ifd__j_vint(z);
    case IFD__OP_MUL:
        if (__builtin_mul_overflow(x, y, &z))
            goto overflow;
        return ifd__j_vint(z);
    case IFD__OP_FLOORDIV:
    case IFD__OP_MOD: {
        if (y == 0) {
            ifd__j_rerr(r, IFD_EINVAL, "integer division or modulo by zero");
            return UNDEF;
        }
        if (x == INT64_MIN && y == -1)
            goto overflow;
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
            q--;
            m += y;
        }
        return ifd__j_vint(op == IFD__OP_FLOORDIV ? q : m);
    }
    case IFD__OP_POW: {
        if (y < 0)
            return ifd__j_vfloat(pow((double)x, (double)y));
        int64_t acc = 1;
        for (int64_t i = 0; i < y; i++)
            if (__builtin_mul_overflow(acc, x, &acc))
                goto overflow;
        return ifd__j_vint(acc);
    }
    default:
        return UNDEF;
    }
overflow:
    ifd__j_rerr(r, IFD_ENOTSUP, "integer arithmetic beyond 64 bits");
    return UNDEF;
}

bool ifd__j_contains(R *r, jv hay, jv needle)
{
    switch (hay.t) {
    case V_STR:
        if (needle.t != V_STR) {
            ifd__j_rerr(r, IFD_EINVAL, "'in <string>' requires string as left operand, not %s",
                        ifd__j_type_name(needle));
            return false;
        }
        if (!needle.u.s->n)
            return true;
        /* memmem is linear (two-way); the scan counts as work for the time budget */
        if (ifd__j_ticks(r, hay.u.s->n >> 6))
            return false;
        return memmem(hay.u.s->s, hay.u.s->n, needle.u.s->s, needle.u.s->n) != NULL;
    case V_LIST:
        for (size_t i = 0; i < hay.u.l->n && !r->rc; i++)
            if (ifd__j_equal(r, hay.u.l->v[i], needle))
                return true;
        return false;
    case V_DICT:
    case V_NS:
        if (!ifd__j_hashable(needle)) {
            ifd__j_rerr(r, IFD_EINVAL, "unhashable type: '%s'", ifd__j_type_name(needle));
            return false;
        }
        return ifd__j_dict_findv(r, hay.u.d, needle) != NULL;
    case V_UNDEF:
        return false;
    default:
        ifd__j_rerr(r, IFD_EINVAL, "argument of type '%s' is not iterable", ifd__j_type_name(hay));
        return false;
    }
}

jv ifd__j_binop(R *r, int op, jv a, jv b)
{
    int c;
    switch (op) {
    case IFD__OP_EQ:
        return ifd__j_vbool(ifd__j_equal(r, a, b));
    case IFD__OP_NE:
        return ifd__j_vbool(!ifd__j_equal(r, a, b));
    case IFD__OP_LT:
    case IFD__OP_LE:
    case IFD__OP_GT:
    case IFD__OP_GE:
        if (ifd__j_compare(r, a, b, &c))
            return UNDEF;
        return ifd__j_vbool(op == IFD__OP_LT   ? c < 0
                            : op == IFD__OP_LE ? c <= 0
                            : op == IFD__OP_GT ? c > 0
                                               : c >= 0);
    case IFD__OP_IN:
        return ifd__j_vbool(ifd__j_contains(r, b, a));
    case IFD__OP_NOTIN: {
        bool x = ifd__j_contains(r, b, a);
        return ifd__j_vbool(!x);
    }
    default:
        return ifd__j_arith(r, op, a, b);
    }
}
