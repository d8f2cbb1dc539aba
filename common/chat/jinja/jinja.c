/*
 * jinja.c — the renderer of jinja.h: scopes, expression evaluation, calls
 * (macros, globals), statements and ifd_jinja_render, over the AST of
 * jinja_parse.c; values live in jinja_value.c, filters in jinja_filter.c.
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
#include "jinja_rt.h"

static jv eval(R *r, frame_t *f, const ifd__jn_t *n);
static int exec_body(R *r, frame_t *f, ifd__jn_t *const *body, uint32_t nb, ifd_buf_t *out);
static jv call_value(R *r, jv callee, const args_t *a);

static jv lookup(R *r, frame_t *f, const char *name)
{
    size_t n = strlen(name);
    for (; f; f = f->parent) {
        jv *v = ifd__j_dict_find(f->vars, name, n);
        if (v)
            return *v;
    }
    jv *g = r->globals ? ifd__j_dict_find(r->globals, name, n) : NULL;
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
            jfunc *fn = ifd__j_ralloc(r, sizeof *fn);
            if (!fn)
                return UNDEF;
            fn->kind = builtins[i].kind;
            fn->name = builtins[i].name;
            fn->self = UNDEF;
            return (jv){.t = V_FUNC, .u.fn = fn};
        }
    jv u = UNDEF;
    u.u.s = ifd__j_mkstr(r, name, n);
    return u;
}

static int eval_args(R *r, frame_t *f, const ifd__jn_t *n, args_t *a)
{
    memset(a, 0, sizeof *a);
    if (n->nv && !(a->pos = ifd__j_ralloc(r, n->nv * sizeof *a->pos)))
        return r->rc;
    for (uint32_t i = 0; i < n->nv; i++) {
        a->pos[i] = eval(r, f, n->v[i]);
        if (r->rc)
            return r->rc;
    }
    a->npos = n->nv;
    if (n->nw) {
        if (!(a->kwv = ifd__j_ralloc(r, n->nw * sizeof *a->kwv)))
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

static jv eval_node(R *r, frame_t *f, const ifd__jn_t *n);

static jv eval(R *r, frame_t *f, const ifd__jn_t *n)
{
    if (r->rc || !ifd__j_enter(r))
        return UNDEF;
    jv v = eval_node(r, f, n);
    ifd__j_leave(r);
    return v;
}

static jv eval_node(R *r, frame_t *f, const ifd__jn_t *n)
{
    r->line = n->line;
    switch (n->kind) {
    case IFD__JN_STR:
        return ifd__j_vstr(r, n->s, n->sn);
    case IFD__JN_INT:
        return ifd__j_vint(n->i);
    case IFD__JN_FLOAT:
        return ifd__j_vfloat(n->f);
    case IFD__JN_BOOL:
        return ifd__j_vbool(n->i != 0);
    case IFD__JN_NONE:
        return NONE;
    case IFD__JN_NAME:
        return lookup(r, f, n->s);
    case IFD__JN_ATTR: {
        jv o = eval(r, f, n->a);
        return r->rc ? UNDEF : ifd__j_get_attr(r, o, n->s, n->sn);
    }
    case IFD__JN_ITEM: {
        jv o = eval(r, f, n->a), k = eval(r, f, n->b);
        return r->rc ? UNDEF : ifd__j_get_item(r, o, k);
    }
    case IFD__JN_SLICE: {
        jv o = eval(r, f, n->a);
        jv lo = n->b ? eval(r, f, n->b) : NONE, hi = n->c ? eval(r, f, n->c) : NONE,
           st = n->d ? eval(r, f, n->d) : NONE;
        return r->rc ? UNDEF : ifd__j_do_slice(r, o, lo, hi, st);
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
            ifd__j_rerr(r, IFD_ENOTSUP, "no filter named '%s'", n->s);
            return UNDEF;
        }
        return ifd__j_apply_filter(r, f, n->op, v, &a);
    }
    case IFD__JN_TEST: {
        jv v = eval(r, f, n->a);
        args_t a;
        if (r->rc || eval_args(r, f, n, &a))
            return UNDEF;
        if (n->op == IFD__JT_N) {
            ifd__j_rerr(r, IFD_ENOTSUP, "no test named '%s'", n->s);
            return UNDEF;
        }
        bool t = ifd__j_apply_test(r, n->op, v, &a);
        return ifd__j_vbool(n->i ? !t : t);
    }
    case IFD__JN_BIN: {
        jv a = eval(r, f, n->a), b = eval(r, f, n->b);
        return r->rc ? UNDEF : ifd__j_binop(r, n->op, a, b);
    }
    case IFD__JN_NEG:
    case IFD__JN_POS: {
        jv a = eval(r, f, n->a);
        if (r->rc)
            return UNDEF;
        if (!ifd__j_is_num(a)) {
            ifd__j_rerr(r, IFD_EINVAL, "bad operand type for unary %c: '%s'",
                        n->kind == IFD__JN_NEG ? '-' : '+', ifd__j_type_name(a));
            return UNDEF;
        }
        if (n->kind == IFD__JN_POS)
            return a.t == V_BOOL ? ifd__j_vint(a.u.b) : a;
        return a.t == V_FLOAT ? ifd__j_vfloat(-a.u.f) : ifd__j_vint(-ifd__j_num_i(a));
    }
    case IFD__JN_NOT: {
        jv a = eval(r, f, n->a);
        return ifd__j_vbool(!ifd__j_truthy(a));
    }
    case IFD__JN_AND: {
        jv a = eval(r, f, n->a);
        return !ifd__j_truthy(a) || r->rc ? a : eval(r, f, n->b);
    }
    case IFD__JN_OR: {
        jv a = eval(r, f, n->a);
        return ifd__j_truthy(a) || r->rc ? a : eval(r, f, n->b);
    }
    case IFD__JN_COND: {
        jv c = eval(r, f, n->a);
        if (r->rc)
            return UNDEF;
        if (ifd__j_truthy(c))
            return eval(r, f, n->b);
        return n->c ? eval(r, f, n->c) : UNDEF;
    }
    case IFD__JN_LIST:
    case IFD__JN_TUPLE: {
        jlist *l = ifd__j_mklist(r, n->nv);
        for (uint32_t i = 0; l && i < n->nv; i++) {
            l->v[i] = eval(r, f, n->v[i]);
            l->n++;
        }
        if (l)
            l->tuple = n->kind == IFD__JN_TUPLE;
        return r->rc ? UNDEF : ifd__j_vlist(l);
    }
    case IFD__JN_DICT: {
        jdict *d = ifd__j_mkdict(r);
        for (uint32_t i = 0; d && i < n->nv; i++) {
            jv k = eval(r, f, n->v[i]), v = eval(r, f, n->w[i]);
            if (r->rc)
                return UNDEF;
            if (!ifd__j_hashable(k)) {
                ifd__j_rerr(r, IFD_EINVAL, "unhashable type: '%s'", ifd__j_type_name(k));
                return UNDEF;
            }
            if (ifd__j_dict_setv(r, d, k, v))
                return UNDEF;
        }
        return ifd__j_vdict(d, V_DICT);
    }
    case IFD__JN_CONCAT: {
        ifd_buf_t b = IFD_BUF_INIT;
        for (uint32_t i = 0; i < n->nv && !r->rc; i++) {
            jv v = eval(r, f, n->v[i]);
            if (!r->rc)
                ifd__j_to_text(r, &b, v, false);
        }
        jv s = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
        ifd_buf_free(&b);
        return s;
    }
    default:
        ifd__j_rerr(r, IFD_EINTERNAL, "bad expression node %d", n->kind);
        return UNDEF;
    }
}

static jv call_macro(R *r, const ifd__jn_t *m, const args_t *a)
{
    if (a->npos > m->nnames) {
        ifd__j_rerr(r, IFD_EINVAL, "macro '%s' takes not more than %u argument(s)", m->s,
                    m->nnames);
        return UNDEF;
    }
    for (size_t i = 0; i < a->nkw; i++) {
        bool ok = false;
        for (uint32_t j = 0; j < m->nnames && !ok; j++)
            ok = !strcmp(a->kw[i], m->names[j]);
        if (!ok) {
            ifd__j_rerr(r, IFD_EINVAL, "macro '%s' takes no keyword argument '%s'", m->s, a->kw[i]);
            return UNDEF;
        }
    }
    if (++r->depth > r->lim.max_depth) {
        ifd__j_rerr(r, IFD_ETOOBIG, "macro calls nested deeper than %u", r->lim.max_depth);
        return UNDEF;
    }
    frame_t fr = {ifd__j_mkdict(r), r->root};
    for (uint32_t j = 0; fr.vars && j < m->nnames && !r->rc; j++) {
        jv v = ifd__j_arg(a, (int)j, m->names[j], UNDEF);
        if (v.t == V_UNDEF && (size_t)j >= a->npos && m->w[j])
            v = eval(r, &fr, m->w[j]);
        ifd__j_dict_setc(r, fr.vars, m->names[j], v);
    }
    ifd_buf_t b = IFD_BUF_INIT;
    if (!r->rc)
        exec_body(r, &fr, m->v, m->nv, &b);
    r->depth--;
    jv s = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
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
            ifd__j_undefined_error(r, c);
        else
            ifd__j_rerr(r, IFD_EINVAL, "'%s' object is not callable", ifd__j_type_name(c));
        return UNDEF;
    }
    jfunc *fn = c.u.fn;
    switch (fn->kind) {
    case F_METHOD:
        return ifd__j_call_method(r, fn->self, fn->name, a);
    case F_CYCLE: {
        if (!a->npos) {
            ifd__j_rerr(r, IFD_EINVAL, "no items for cycling given");
            return UNDEF;
        }
        return a->pos[fn->self.u.lp->i % a->npos];
    }
    case F_RAISE: {
        jv m = ifd__j_to_str(r, ifd__j_arg(a, 0, NULL, UNDEF));
        if (r->rc)
            return UNDEF;
        r->rc = IFD_EINVAL;
        if (r->err && r->errlen)
            snprintf(r->err, r->errlen, "%s", m.u.s->s);
        return UNDEF;
    }
    case F_STRFTIME: {
        jv fmt = ifd__j_arg(a, 0, NULL, UNDEF);
        if (ifd__j_need_str(r, fmt, "strftime_now"))
            return UNDEF;
        time_t now = r->lim.now ? (time_t)r->lim.now : time(NULL);
        struct tm tm;
        char buf[512];
        localtime_r(&now, &tm);
        size_t n = fmt.u.s->n ? strftime(buf, sizeof buf, fmt.u.s->s, &tm) : 0;
        return ifd__j_vstr(r, buf, n);
    }
    case F_RANGE: {
        int64_t lo = 0, hi, st = 1;
        for (size_t i = 0; i < a->npos; i++)
            if (a->pos[i].t != V_INT && a->pos[i].t != V_BOOL) {
                ifd__j_rerr(r, IFD_EINVAL, "range: integer arguments expected");
                return UNDEF;
            }
        if (a->npos == 1) {
            hi = ifd__j_num_i(a->pos[0]);
        } else if (a->npos == 2 || a->npos == 3) {
            lo = ifd__j_num_i(a->pos[0]);
            hi = ifd__j_num_i(a->pos[1]);
            if (a->npos == 3)
                st = ifd__j_num_i(a->pos[2]);
        } else {
            ifd__j_rerr(r, IFD_EINVAL, "range expects 1 to 3 arguments");
            return UNDEF;
        }
        if (st == 0) {
            ifd__j_rerr(r, IFD_EINVAL, "range() arg 3 must not be zero");
            return UNDEF;
        }
        double cnt = st > 0 ? ceil(((double)hi - (double)lo) / (double)st)
                            : ceil(((double)lo - (double)hi) / (double)-st);
        if (cnt > 100000) { /* jinja2's sandbox MAX_RANGE */
            ifd__j_rerr(r, IFD_ETOOBIG, "range too big, maximum size for range is 100000");
            return UNDEF;
        }
        jlist *l = ifd__j_mklist(r, cnt > 0 ? (size_t)cnt : 0);
        for (int64_t i = lo; l && (st > 0 ? i < hi : i > hi); i += st)
            l->v[l->n++] = ifd__j_vint(i);
        return ifd__j_vlist(l);
    }
    case F_NAMESPACE:
    case F_DICT: {
        jdict *d = ifd__j_mkdict(r);
        if (!d)
            return UNDEF;
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i].t != V_DICT) {
                ifd__j_rerr(r, IFD_EINVAL, "%s: positional argument must be a mapping", fn->name);
                return UNDEF;
            }
            for (size_t j = 0; j < a->pos[i].u.d->n; j++)
                ifd__j_dict_setv(r, d, a->pos[i].u.d->k[j], a->pos[i].u.d->v[j]);
        }
        for (size_t i = 0; i < a->nkw; i++)
            ifd__j_dict_setc(r, d, a->kw[i], a->kwv[i]);
        return ifd__j_vdict(d, fn->kind == F_NAMESPACE ? V_NS : V_DICT);
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
            return ifd__j_rerr(r, IFD_EINVAL, "cannot assign attribute on non-namespace object");
        jstr *k = ifd__j_mkstr(r, n->a->s, n->a->sn);
        return k ? ifd__j_dict_set(r, ns.u.d, k, v) : r->rc;
    }
    if (n->nnames == 1)
        return ifd__j_dict_setc(r, f->vars, n->names[0], v);
    jlist *l = ifd__j_iter_list(r, v);
    if (!l)
        return r->rc;
    if (l->n != n->nnames)
        return ifd__j_rerr(r, IFD_EINVAL, "cannot unpack %zu values into %u names", l->n,
                           n->nnames);
    for (uint32_t i = 0; i < n->nnames; i++)
        if (ifd__j_dict_setc(r, f->vars, n->names[i], l->v[i]))
            return r->rc;
    return 0;
}

static int exec_for(R *r, frame_t *f, const ifd__jn_t *n, ifd_buf_t *out)
{
    jv it = eval(r, f, n->a);
    if (r->rc)
        return r->rc;
    jlist *src = it.t == V_DICT ? ifd__j_iter_list(r, it) : ifd__j_iter_list(r, it);
    if (!src)
        return r->rc;
    frame_t fr = {ifd__j_mkdict(r), f};
    jloop *lp = ifd__j_ralloc(r, sizeof *lp);
    if (!fr.vars || !lp)
        return r->rc;
    jlist *items = src;
    if (n->b) {
        /* `for x in xs if cond`: filter first so loop.length counts the kept ones */
        items = ifd__j_mklist(r, 0);
        for (size_t i = 0; items && i < src->n && !r->rc; i++) {
            if (ifd__j_count_iter(r))
                return r->rc;
            jv x = src->v[i];
            if (n->nnames == 1) {
                ifd__j_dict_setc(r, fr.vars, n->names[0], x);
            } else {
                jlist *tl = ifd__j_iter_list(r, x);
                if (!tl || tl->n != n->nnames)
                    return ifd__j_rerr(r, IFD_EINVAL, "cannot unpack a loop item into %u names",
                                       n->nnames);
                for (uint32_t k = 0; k < n->nnames; k++)
                    ifd__j_dict_setc(r, fr.vars, n->names[k], tl->v[k]);
            }
            if (ifd__j_truthy(eval(r, &fr, n->b)))
                ifd__j_list_push(r, items, x);
        }
        if (r->rc || !items)
            return r->rc;
    }
    lp->items = items;
    for (size_t i = 0; i < items->n; i++) {
        if (ifd__j_count_iter(r))
            return r->rc;
        ifd__j_dict_clear(fr.vars); /* a fresh scope per iteration */
        lp->i = i;
        jv x = items->v[i];
        if (n->nnames == 1) {
            ifd__j_dict_setc(r, fr.vars, n->names[0], x);
        } else {
            jlist *tl = ifd__j_iter_list(r, x);
            if (!tl)
                return r->rc;
            if (tl->n != n->nnames)
                return ifd__j_rerr(r, IFD_EINVAL, "cannot unpack %zu values into %u names", tl->n,
                                   n->nnames);
            for (uint32_t k = 0; k < n->nnames; k++)
                ifd__j_dict_setc(r, fr.vars, n->names[k], tl->v[k]);
        }
        ifd__j_dict_setc(r, fr.vars, "loop", (jv){.t = V_LOOP, .u.lp = lp});
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
    return ifd__j_apply_filter(r, f, c->op, in, &a);
}

static int exec_stmts(R *r, frame_t *f, ifd__jn_t *const *body, uint32_t nb, ifd_buf_t *out);

static int exec_body(R *r, frame_t *f, ifd__jn_t *const *body, uint32_t nb, ifd_buf_t *out)
{
    if (r->rc || !ifd__j_enter(r))
        return r->rc;
    int fl = exec_stmts(r, f, body, nb, out);
    ifd__j_leave(r);
    return fl;
}

static int exec_stmts(R *r, frame_t *f, ifd__jn_t *const *body, uint32_t nb, ifd_buf_t *out)
{
    for (uint32_t i = 0; i < nb; i++) {
        const ifd__jn_t *n = body[i];
        if (r->rc)
            return r->rc;
        r->line = n->line;
        switch (n->kind) {
        case IFD__JN_TEXT:
            if (ifd__j_put(r, out, n->s, n->sn))
                return r->rc;
            break;
        case IFD__JN_OUT: {
            jv v = eval(r, f, n->a);
            if (r->rc || ifd__j_to_text(r, out, v, false))
                return r->rc;
            break;
        }
        case IFD__JN_IF: {
            jv c = eval(r, f, n->a);
            if (r->rc)
                return r->rc;
            int fl = ifd__j_truthy(c) ? exec_body(r, f, n->v, n->nv, out)
                                      : exec_body(r, f, n->w, n->nw, out);
            if (fl)
                return fl;
            break;
        }
        case IFD__JN_FOR:
            if (++r->depth > r->lim.max_depth + IFD__JINJA_MAX_NEST)
                return ifd__j_rerr(r, IFD_ETOOBIG, "loops nested too deeply");
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
            jv v = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
            ifd_buf_free(&b);
            v = filter_chain(r, f, n->c, v);
            if (r->rc || ifd__j_dict_setc(r, f->vars, n->names[0], v))
                return r->rc;
            break;
        }
        case IFD__JN_FILTERBLOCK: {
            ifd_buf_t b = IFD_BUF_INIT;
            exec_body(r, f, n->v, n->nv, &b);
            jv v = r->rc ? UNDEF : ifd__j_vstr(r, b.data ? b.data : "", b.len);
            ifd_buf_free(&b);
            v = filter_chain(r, f, n->c, v);
            if (r->rc || ifd__j_to_text(r, out, v, false))
                return r->rc;
            break;
        }
        case IFD__JN_MACRO:
            if (ifd__j_dict_setc(r, f->vars, n->s, (jv){.t = V_MACRO, .u.m = n}))
                return r->rc;
            break;
        case IFD__JN_BREAK:
            return FLOW_BREAK;
        case IFD__JN_CONTINUE:
            return FLOW_CONTINUE;
        default:
            return ifd__j_rerr(r, IFD_EINTERNAL, "bad statement node %d", n->kind);
        }
    }
    return r->rc;
}

ifd_jinja_limits_t ifd_jinja_default_limits(void)
{
    ifd_jinja_limits_t l = {16u << 20, 256u << 20, 1000000, 64, 0, 10000, NULL};
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
    r.stack_top = (uintptr_t)&r;
    if (r.lim.max_time_ms) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r.deadline = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
                     (uint64_t)r.lim.max_time_ms * 1000000u;
    }
    ifd_arena_init(&r.A, 0);
    ifd_buf_t b = IFD_BUF_INIT;
    if (ctx && !json_is_object(ctx)) {
        ifd__j_rerr(&r, IFD_EINVAL, "the context must be a JSON object");
    } else if (ctx) {
        jv g = ifd__j_from_json(&r, ctx, 0);
        if (!r.rc)
            r.globals = g.u.d;
    }
    frame_t root = {NULL, NULL};
    if (!r.rc && (root.vars = ifd__j_mkdict(&r))) {
        r.root = &root;
        int fl = exec_body(&r, &root, t->body, t->nbody, &b);
        (void)fl; /* break/continue outside a loop are refused by the parser */
    }
    for (jdict *d = r.indexed; d; d = d->next_indexed)
        ifd_hash_close(&d->idx);
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
