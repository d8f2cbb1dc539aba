/*
 * jinja_rt.h — the renderer's internals shared by jinja.c (evaluation,
 * statements), jinja_value.c (values, text, JSON, operators, access) and
 * jinja_filter.c (tests, filters, methods). Not a public API.
 *
 * Values (jv) are small structs passed by value; strings, lists and dicts
 * they point to live in the rendering's arena (R.A) and are never freed one
 * by one. Every function that can fail records the first error in R (rc,
 * message) and returns a neutral value; callers check r->rc.
 */
#ifndef IFD_JINJA_RT_H
#define IFD_JINJA_RT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "hash.h"
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
    /* From IFD__JDICT_INDEX_AT entries on, a hash index over k (values: entry
     * indices), so lookups stay O(1) for the large dicts a client can send
     * (chat_template_kwargs, documents). Its slots are malloc'ed: the dict is
     * then on R.indexed, whose indexes ifd_jinja_render frees at the end. */
    ifd_hash_t idx;
    jdict *next_indexed;
};
#define IFD__JDICT_INDEX_AT 16

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
    unsigned depth;      /* macro calls (limits.max_depth) */
    unsigned nest;       /* evaluation nesting (IFD_JINJA_MAX_NESTING): ifd__j_enter */
    uintptr_t stack_top; /* the address of ifd_jinja_render's frame (the stack budget) */
    uint64_t ticks;      /* work steps since the render began (ifd__j_tick) */
    uint64_t deadline;   /* CLOCK_MONOTONIC ns; 0 = none */
    jdict *indexed;      /* dicts whose hash index must be freed */
    size_t index_bytes;  /* their slots, counted against limits.max_memory */
    int rc;
    char *err;
    size_t errlen;
    int line;
    jdict *globals;
    frame_t *root;
    ifd_buf_t *out;
} R;

typedef struct {
    const char *indent; /* NULL = no newlines */
    const char *item_sep, *key_sep;
    bool sort_keys, ascii;
} jsonopt_t;

typedef struct {
    jv *pos;
    size_t npos;
    const char **kw;
    jv *kwv;
    size_t nkw;
} args_t;

/* Every recursive path of the renderer (evaluation, statements, printing,
 * comparing and serializing nested values) brackets its recursion with
 * these: false (with IFD_ETOOBIG recorded, nothing to undo) when the nesting
 * passes IFD_JINJA_MAX_NESTING or the stack used passes
 * IFD_JINJA_STACK_BUDGET (the frames' sizes vary by compiler and
 * sanitizer); otherwise the caller calls ifd__j_leave when it returns. */
bool ifd__j_enter_slow(R *r);
static inline bool ifd__j_enter(R *r)
{
    char here;
    uintptr_t sp = (uintptr_t)&here;
    if (r->nest + 1 > IFD_JINJA_MAX_NESTING || r->stack_top - sp > IFD_JINJA_STACK_BUDGET)
        return ifd__j_enter_slow(r);
    r->nest++;
    return true;
}
static inline void ifd__j_leave(R *r)
{
    r->nest--;
}

/* One step of work (a loop iteration, an element compared, copied or
 * scanned): every 4096 steps, the wall-time budget and the cancel flag are
 * checked. Returns 0 or the error recorded (IFD_ETOOBIG, IFD_ECANCELED). */
int ifd__j_tick_slow(R *r);
static inline int ifd__j_tick(R *r)
{
    if (r->rc)
        return r->rc;
    return (++r->ticks & 4095) ? 0 : ifd__j_tick_slow(r);
}
/* n steps at once (a scan over n bytes or elements). */
static inline int ifd__j_ticks(R *r, uint64_t n)
{
    if (r->rc)
        return r->rc;
    uint64_t before = r->ticks;
    r->ticks += n;
    return (before >> 12) == (r->ticks >> 12) ? 0 : ifd__j_tick_slow(r);
}

jv ifd__j_apply_filter(R *r, frame_t *f, int id, jv v, const args_t *a);
bool ifd__j_apply_test(R *r, int id, jv v, const args_t *a);
jv ifd__j_call_method(R *r, jv self, const char *m, const args_t *a);
bool ifd__j_alpha_c(char c);
jv ifd__j_arg(const args_t *a, int pos, const char *name, jv dflt);
jv ifd__j_arith(R *r, int op, jv a, jv b);
jv ifd__j_binop(R *r, int op, jv a, jv b);
int ifd__j_compare(R *r, jv a, jv b, int *out);
bool ifd__j_contains(R *r, jv hay, jv needle);
int ifd__j_count_iter(R *r);
jv *ifd__j_dict_find(const jdict *d, const char *k, size_t n);
jv *ifd__j_dict_findv(R *r, const jdict *d, jv k);
void ifd__j_dict_clear(jdict *d);
int ifd__j_dict_set(R *r, jdict *d, jstr *k, jv v);
int ifd__j_dict_setc(R *r, jdict *d, const char *k, jv v);
int ifd__j_dict_setv(R *r, jdict *d, jv k, jv v);
jv ifd__j_do_slice(R *r, jv o, jv lo, jv hi, jv st);
bool ifd__j_equal(R *r, jv a, jv b);
jv ifd__j_from_json(R *r, const json_t *j, int depth);
jv ifd__j_get_attr(R *r, jv o, const char *a, size_t n);
jv ifd__j_get_item(R *r, jv o, jv k);
bool ifd__j_hashable(jv k);
bool ifd__j_is_num(jv v);
jlist *ifd__j_iter_list(R *r, jv v);
int ifd__j_list_push(R *r, jlist *l, jv v);
char ifd__j_lower_c(char c);
jdict *ifd__j_mkdict(R *r);
jlist *ifd__j_mklist(R *r, size_t cap);
jstr *ifd__j_mkstr(R *r, const char *s, size_t n);
int ifd__j_need_str(R *r, jv v, const char *what);
double ifd__j_num_f(jv v);
int64_t ifd__j_num_i(jv v);
int ifd__j_put(R *r, ifd_buf_t *b, const char *s, size_t n);
bool ifd__j_py_space(uint32_t c);
jv ifd__j_py_strip(R *r, const jstr *s, const jstr *chars, int which);
void *ifd__j_ralloc(R *r, size_t n);
__attribute__((format(printf, 3, 4))) int ifd__j_rerr(R *r, int rc, const char *fmt, ...);
/* Stable merge sort: idx[0..n) gets the indices of keys[0..n) in Python's
 * order (reversed when asked); compare errors are recorded in r. */
int ifd__j_sort_idx(R *r, const jv *keys, bool reverse, size_t *idx, size_t n);
int ifd__j_to_json(R *r, ifd_buf_t *b, jv v, const jsonopt_t *o, int level);
jv ifd__j_to_str(R *r, jv v);
int ifd__j_to_text(R *r, ifd_buf_t *b, jv v, bool repr);
bool ifd__j_truthy(jv v);
const char *ifd__j_type_name(jv v);
size_t ifd__j_u8count(const char *s, size_t n);
uint32_t ifd__j_u8cp(const unsigned char *s, size_t l);
size_t ifd__j_u8len(const unsigned char *s, size_t n);
int ifd__j_undefined_error(R *r, jv v);
char ifd__j_upper_c(char c);
jv ifd__j_vbool(bool b);
jv ifd__j_vdict(jdict *d, int t);
jv ifd__j_vfloat(double f);
jv ifd__j_vint(int64_t i);
jv ifd__j_vlist(jlist *l);
jv ifd__j_vstr(R *r, const char *s, size_t n);

#endif
