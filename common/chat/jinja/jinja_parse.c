/*
 * jinja_parse.c — the parser of jinja.h (its lexer is jinja_lex.c).
 *
 * Two passes. The first splits the source into segments — data, {{ … }},
 * {% … %} — and applies Jinja's whitespace rules as Hugging Face configures
 * them: `{%-`/`-%}` strip all whitespace on that side, trim_blocks drops the
 * first newline after a block or comment tag, lstrip_blocks drops the spaces
 * and tabs in front of a block or comment tag that starts its line (`{%+`
 * disables it), one trailing newline of the source is dropped
 * (keep_trailing_newline=False), data newlines are normalised to "\n". Tags
 * are scanned with string literals skipped, so "%}" inside a string does not
 * end a tag. The second pass tokenizes each tag and builds the AST with
 * jinja2's operator precedence (parser.py: condexpr < or < and < not <
 * compare < + - < ~ < * / // % < ** < unary < postfix, filters and tests
 * bind to the unary operand).
 *
 * Everything is allocated in the template's arena; on error the caller
 * destroys the half-built template.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja.h"
#include "jinja_impl.h"
#include "jinja_lex.h"

/* ---- tables ---------------------------------------------------------------------------- */

#define IFD__X_NAME(id, name) name,
static const char *const ifd__jfilter_names[] = {IFD__JFILTERS(IFD__X_NAME)};
static const char *const ifd__jtest_names[] = {IFD__JTESTS(IFD__X_NAME)};
#undef IFD__X_NAME

static int ifd__find_name(const char *const *tab, int n, const char *s, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(tab[i]) == len && memcmp(tab[i], s, len) == 0)
            return i;
    return -1;
}

int ifd__jinja_filter_id(const char *name, size_t n)
{
    return ifd__find_name(ifd__jfilter_names, IFD__JF_N, name, n);
}

int ifd__jinja_test_id(const char *name, size_t n)
{
    return ifd__find_name(ifd__jtest_names, IFD__JT_N, name, n);
}

static tok_t *cur(P *p)
{
    return &p->toks[p->ti];
}

static bool is_op(P *p, const char *op)
{
    tok_t *t = cur(p);
    return t->kind == TK_OP && strcmp(t->s, op) == 0;
}

static bool is_name(P *p, const char *nm)
{
    tok_t *t = cur(p);
    return t->kind == TK_NAME && t->n == strlen(nm) && memcmp(t->s, nm, t->n) == 0;
}

static bool accept_op(P *p, const char *op)
{
    if (!is_op(p, op))
        return false;
    p->ti++;
    return true;
}

static bool accept_name(P *p, const char *nm)
{
    if (!is_name(p, nm))
        return false;
    p->ti++;
    return true;
}

static const char *tok_desc(P *p)
{
    tok_t *t = cur(p);
    switch (t->kind) {
    case TK_END:
        return "end of tag";
    case TK_STR:
        return "string";
    case TK_INT:
    case TK_FLOAT:
        return "number";
    default:
        break;
    }
    char *d = ifd_arena_strndup(p->A, t->s, t->n);
    return d ? d : "token";
}

static int expect_op(P *p, const char *op)
{
    if (accept_op(p, op))
        return 0;
    return ifd__jparse_err(p, IFD_EFORMAT, "expected '%s', found '%s'", op, tok_desc(p));
}

static const char *expect_ident(P *p)
{
    tok_t *t = cur(p);
    if (t->kind != TK_NAME) {
        ifd__jparse_err(p, IFD_EFORMAT, "expected a name, found '%s'", tok_desc(p));
        return NULL;
    }
    p->ti++;
    char *s = ifd_arena_strndup(p->A, t->s, t->n);
    if (!s)
        ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
    return s;
}

static int expect_end(P *p)
{
    if (cur(p)->kind == TK_END)
        return 0;
    return ifd__jparse_err(p, IFD_EFORMAT, "unexpected '%s'", tok_desc(p));
}

/* ---- nodes ----------------------------------------------------------------------------- */

static ifd__jn_t *node(P *p, int kind)
{
    ifd__jn_t *n = ifd_arena_calloc(p->A, 1, sizeof *n);
    if (!n) {
        ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
        return NULL;
    }
    n->kind = (uint16_t)kind;
    n->line = p->line;
    return n;
}

typedef struct {
    ifd__jn_t **v;
    uint32_t n, cap;
} nvec_t;

static int nvec_push(P *p, nvec_t *v, ifd__jn_t *x)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        ifd__jn_t **nv = ifd_arena_alloc(p->A, cap * sizeof *nv);
        if (!nv)
            return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

typedef struct {
    const char **v;
    uint32_t n, cap;
} svec_t;

static int svec_push(P *p, svec_t *v, const char *s)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        const char **nv = ifd_arena_alloc(p->A, cap * sizeof *nv);
        if (!nv)
            return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = s;
    return 0;
}

/* ---- expressions ----------------------------------------------------------------------- */

static ifd__jn_t *parse_expr(P *p);
static ifd__jn_t *parse_or(P *p);
static ifd__jn_t *parse_unary(P *p, bool with_filter);

static bool enter(P *p)
{
    if (++p->depth > IFD__JINJA_MAX_NEST) {
        ifd__jparse_err(p, IFD_ETOOBIG, "expression nested deeper than %d", IFD__JINJA_MAX_NEST);
        return false;
    }
    return true;
}

/* Call arguments after '(' up to ')': positional into n->v, keyword into
 * n->names/n->w. */
static int parse_args(P *p, ifd__jn_t *n)
{
    nvec_t pos = {0}, kwv = {0};
    svec_t kwn = {0};
    while (!accept_op(p, ")")) {
        if (pos.n + kwv.n > 0 && expect_op(p, ","))
            return p->rc;
        if (accept_op(p, ")"))
            break;
        if (is_op(p, "*") || is_op(p, "**"))
            return ifd__jparse_err(p, IFD_ENOTSUP, "unsupported construct: *args / **kwargs in a call");
        if (cur(p)->kind == TK_NAME && p->toks[p->ti + 1].kind == TK_OP &&
            strcmp(p->toks[p->ti + 1].s, "=") == 0) {
            const char *k = expect_ident(p);
            p->ti++;
            ifd__jn_t *v = parse_expr(p);
            if (!k || !v || svec_push(p, &kwn, k) || nvec_push(p, &kwv, v))
                return p->rc ? p->rc : IFD_ENOMEM;
        } else {
            if (kwv.n)
                return ifd__jparse_err(p, IFD_EFORMAT, "positional argument after a keyword argument");
            ifd__jn_t *v = parse_expr(p);
            if (!v || nvec_push(p, &pos, v))
                return p->rc;
        }
    }
    n->v = pos.v;
    n->nv = pos.n;
    n->w = kwv.v;
    n->nw = kwv.n;
    n->names = kwn.v;
    n->nnames = kwn.n;
    return 0;
}

static ifd__jn_t *parse_primary(P *p)
{
    tok_t *t = cur(p);
    ifd__jn_t *n = NULL;
    if (!enter(p))
        return NULL;
    switch (t->kind) {
    case TK_NAME:
        p->ti++;
#define IS(w) (t->n == strlen(w) && memcmp(t->s, w, t->n) == 0)
        if (IS("true") || IS("True") || IS("false") || IS("False")) {
            if ((n = node(p, IFD__JN_BOOL)))
                n->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (IS("none") || IS("None")) {
            n = node(p, IFD__JN_NONE);
        } else if ((n = node(p, IFD__JN_NAME))) {
            n->s = ifd_arena_strndup(p->A, t->s, t->n);
            n->sn = t->n;
        }
#undef IS
        break;
    case TK_STR: {
        /* adjacent literals concatenate */
        size_t total = 0, k = p->ti;
        while (p->toks[k].kind == TK_STR)
            total += p->toks[k++].n;
        char *d = ifd_arena_alloc(p->A, total + 1);
        if (!d || !(n = node(p, IFD__JN_STR))) {
            ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
            break;
        }
        size_t o = 0;
        while (cur(p)->kind == TK_STR) {
            memcpy(d + o, cur(p)->s, cur(p)->n);
            o += cur(p)->n;
            p->ti++;
        }
        d[o] = '\0';
        n->s = d;
        n->sn = o;
        break;
    }
    case TK_INT:
        p->ti++;
        if ((n = node(p, IFD__JN_INT)))
            n->i = t->i;
        break;
    case TK_FLOAT:
        p->ti++;
        if ((n = node(p, IFD__JN_FLOAT)))
            n->f = t->f;
        break;
    case TK_OP:
        if (accept_op(p, "(")) {
            if (accept_op(p, ")")) {
                n = node(p, IFD__JN_TUPLE);
                break;
            }
            ifd__jn_t *e = parse_expr(p);
            if (!e)
                break;
            if (!is_op(p, ",")) {
                if (!expect_op(p, ")"))
                    n = e;
                break;
            }
            nvec_t v = {0};
            nvec_push(p, &v, e);
            while (accept_op(p, ",") && !is_op(p, ")")) {
                if (!(e = parse_expr(p)) || nvec_push(p, &v, e))
                    break;
            }
            if (p->rc || expect_op(p, ")"))
                break;
            if ((n = node(p, IFD__JN_TUPLE))) {
                n->v = v.v;
                n->nv = v.n;
            }
        } else if (accept_op(p, "[")) {
            nvec_t v = {0};
            while (!accept_op(p, "]")) {
                if (v.n && expect_op(p, ","))
                    break;
                if (accept_op(p, "]"))
                    break;
                ifd__jn_t *e = parse_expr(p);
                if (!e || nvec_push(p, &v, e))
                    break;
            }
            if (!p->rc && (n = node(p, IFD__JN_LIST))) {
                n->v = v.v;
                n->nv = v.n;
            }
        } else if (accept_op(p, "{")) {
            nvec_t k = {0}, v = {0};
            while (!accept_op(p, "}")) {
                if (k.n && expect_op(p, ","))
                    break;
                if (accept_op(p, "}"))
                    break;
                ifd__jn_t *ke = parse_expr(p);
                if (!ke || expect_op(p, ":"))
                    break;
                ifd__jn_t *ve = parse_expr(p);
                if (!ve || nvec_push(p, &k, ke) || nvec_push(p, &v, ve))
                    break;
            }
            if (!p->rc && (n = node(p, IFD__JN_DICT))) {
                n->v = k.v;
                n->nv = k.n;
                n->w = v.v;
                n->nw = v.n;
            }
        } else {
            ifd__jparse_err(p, IFD_EFORMAT, "unexpected '%s'", tok_desc(p));
        }
        break;
    case TK_END:
        ifd__jparse_err(p, IFD_EFORMAT, "unexpected end of tag");
        break;
    }
    p->depth--;
    return p->rc ? NULL : n;
}

static ifd__jn_t *parse_postfix(P *p, ifd__jn_t *n)
{
    while (n && !p->rc) {
        if (accept_op(p, ".")) {
            tok_t *t = cur(p);
            if (t->kind == TK_INT) {
                ifd__jn_t *k = node(p, IFD__JN_INT), *it = node(p, IFD__JN_ITEM);
                if (!k || !it)
                    return NULL;
                k->i = t->i;
                p->ti++;
                it->a = n;
                it->b = k;
                n = it;
                continue;
            }
            const char *nm = expect_ident(p);
            ifd__jn_t *at = nm ? node(p, IFD__JN_ATTR) : NULL;
            if (!at)
                return NULL;
            at->a = n;
            at->s = nm;
            at->sn = strlen(nm);
            n = at;
        } else if (accept_op(p, "[")) {
            ifd__jn_t *lo = NULL, *hi = NULL, *st = NULL;
            if (!is_op(p, ":") && !(lo = parse_expr(p)))
                return NULL;
            if (lo && accept_op(p, "]")) {
                ifd__jn_t *it = node(p, IFD__JN_ITEM);
                if (!it)
                    return NULL;
                it->a = n;
                it->b = lo;
                n = it;
                continue;
            }
            if (expect_op(p, ":"))
                return NULL;
            if (!is_op(p, "]") && !is_op(p, ":") && !(hi = parse_expr(p)))
                return NULL;
            if (accept_op(p, ":") && !is_op(p, "]") && !(st = parse_expr(p)))
                return NULL;
            if (expect_op(p, "]"))
                return NULL;
            ifd__jn_t *sl = node(p, IFD__JN_SLICE);
            if (!sl)
                return NULL;
            sl->a = n;
            sl->b = lo;
            sl->c = hi;
            sl->d = st;
            n = sl;
        } else if (accept_op(p, "(")) {
            ifd__jn_t *c = node(p, IFD__JN_CALL);
            if (!c || parse_args(p, c))
                return NULL;
            c->a = n;
            n = c;
        } else {
            break;
        }
    }
    return p->rc ? NULL : n;
}

static ifd__jn_t *parse_filter(P *p, ifd__jn_t *operand)
{
    const char *nm = expect_ident(p);
    if (!nm)
        return NULL;
    int id = ifd__jinja_filter_id(nm, strlen(nm));
    if (id < 0 && !p->soft) {
        ifd__jparse_err(p, IFD_ENOTSUP, "no filter named '%s'", nm);
        return NULL;
    }
    ifd__jn_t *f = node(p, IFD__JN_FILTER);
    if (!f)
        return NULL;
    f->a = operand;
    f->s = nm;
    f->op = id < 0 ? IFD__JF_N : (uint16_t)id; /* unknown inside an if: fails when run */
    if (accept_op(p, "(") && parse_args(p, f))
        return NULL;
    return f;
}

static ifd__jn_t *parse_filter_expr(P *p, ifd__jn_t *n)
{
    while (n && !p->rc) {
        if (accept_op(p, "|")) {
            n = parse_filter(p, n);
        } else if (accept_name(p, "is")) {
            bool neg = accept_name(p, "not");
            tok_t *t = cur(p);
            const char *nm;
            if (t->kind == TK_OP && (is_op(p, "==") || is_op(p, "!=") || is_op(p, "<") ||
                                     is_op(p, "<=") || is_op(p, ">") || is_op(p, ">="))) {
                nm = t->s;
                p->ti++;
            } else if (!(nm = expect_ident(p))) {
                return NULL;
            }
            int id = ifd__jinja_test_id(nm, strlen(nm));
            if (id < 0 && !p->soft) {
                ifd__jparse_err(p, IFD_ENOTSUP, "no test named '%s'", nm);
                return NULL;
            }
            if (id < 0)
                id = IFD__JT_N;
            ifd__jn_t *te = node(p, IFD__JN_TEST);
            if (!te)
                return NULL;
            te->a = n;
            te->s = nm;
            te->op = (uint16_t)id;
            te->i = neg;
            t = cur(p);
            if (accept_op(p, "(")) {
                if (parse_args(p, te))
                    return NULL;
            } else if ((t->kind == TK_NAME || t->kind == TK_STR || t->kind == TK_INT ||
                        t->kind == TK_FLOAT || is_op(p, "(") || is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
                if (is_name(p, "is")) {
                    ifd__jparse_err(p, IFD_EFORMAT, "you cannot chain multiple tests with 'is'");
                    return NULL;
                }
                ifd__jn_t *arg = parse_postfix(p, parse_primary(p));
                if (!arg)
                    return NULL;
                ifd__jn_t **v = ifd_arena_alloc(p->A, sizeof *v);
                if (!v)
                    return NULL;
                v[0] = arg;
                te->v = v;
                te->nv = 1;
            }
            n = te;
        } else if (accept_op(p, "(")) {
            ifd__jn_t *c = node(p, IFD__JN_CALL);
            if (!c || parse_args(p, c))
                return NULL;
            c->a = n;
            n = c;
        } else {
            break;
        }
    }
    return p->rc ? NULL : n;
}

static ifd__jn_t *parse_unary(P *p, bool with_filter)
{
    ifd__jn_t *n;
    if (!enter(p))
        return NULL;
    if (is_op(p, "-") || is_op(p, "+")) {
        int k = is_op(p, "-") ? IFD__JN_NEG : IFD__JN_POS;
        p->ti++;
        ifd__jn_t *a = parse_unary(p, false);
        if ((n = a ? node(p, k) : NULL))
            n->a = a;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

/* A node of two operands; NULL when either is (a failure already recorded). */
static ifd__jn_t *pair(P *p, int kind, ifd__jn_t *a, ifd__jn_t *b)
{
    if (!a || !b)
        return NULL;
    ifd__jn_t *n = node(p, kind);
    if (n) {
        n->a = a;
        n->b = b;
    }
    return n;
}

static ifd__jn_t *binop(P *p, int op, ifd__jn_t *a, ifd__jn_t *b)
{
    ifd__jn_t *n = pair(p, IFD__JN_BIN, a, b);
    if (n)
        n->op = (uint16_t)op;
    return n;
}

static ifd__jn_t *parse_pow(P *p)
{
    ifd__jn_t *l = parse_unary(p, true);
    while (l && accept_op(p, "**"))
        l = binop(p, IFD__OP_POW, l, parse_unary(p, true));
    return l;
}

static ifd__jn_t *parse_math2(P *p)
{
    ifd__jn_t *l = parse_pow(p);
    for (;;) {
        int op = is_op(p, "*")    ? IFD__OP_MUL
                 : is_op(p, "/")  ? IFD__OP_DIV
                 : is_op(p, "//") ? IFD__OP_FLOORDIV
                 : is_op(p, "%")  ? IFD__OP_MOD
                                  : -1;
        if (!l || op < 0)
            return l;
        p->ti++;
        l = binop(p, op, l, parse_pow(p));
    }
}

static ifd__jn_t *parse_concat(P *p)
{
    ifd__jn_t *l = parse_math2(p);
    if (!l || !is_op(p, "~"))
        return l;
    nvec_t v = {0};
    nvec_push(p, &v, l);
    while (accept_op(p, "~")) {
        ifd__jn_t *r = parse_math2(p);
        if (!r || nvec_push(p, &v, r))
            return NULL;
    }
    ifd__jn_t *n = node(p, IFD__JN_CONCAT);
    if (n) {
        n->v = v.v;
        n->nv = v.n;
    }
    return n;
}

static ifd__jn_t *parse_math1(P *p)
{
    ifd__jn_t *l = parse_concat(p);
    for (;;) {
        int op = is_op(p, "+") ? IFD__OP_ADD : is_op(p, "-") ? IFD__OP_SUB : -1;
        if (!l || op < 0)
            return l;
        p->ti++;
        l = binop(p, op, l, parse_concat(p));
    }
}

static ifd__jn_t *parse_compare(P *p)
{
    ifd__jn_t *l = parse_math1(p), *res = NULL;
    while (l) {
        int op = is_op(p, "==")     ? IFD__OP_EQ
                 : is_op(p, "!=")   ? IFD__OP_NE
                 : is_op(p, "<")    ? IFD__OP_LT
                 : is_op(p, "<=")   ? IFD__OP_LE
                 : is_op(p, ">")    ? IFD__OP_GT
                 : is_op(p, ">=")   ? IFD__OP_GE
                 : is_name(p, "in") ? IFD__OP_IN
                                    : -1;
        if (op < 0 && is_name(p, "not") && p->toks[p->ti + 1].kind == TK_NAME &&
            p->toks[p->ti + 1].n == 2 && memcmp(p->toks[p->ti + 1].s, "in", 2) == 0) {
            op = IFD__OP_NOTIN;
            p->ti++;
        }
        if (op < 0)
            break;
        p->ti++;
        ifd__jn_t *r = parse_math1(p);
        ifd__jn_t *c = binop(p, op, l, r);
        if (!c)
            return NULL;
        /* a < b < c → (a < b) and (b < c) */
        if (!(res = res ? pair(p, IFD__JN_AND, res, c) : c))
            return NULL;
        l = r;
    }
    return p->rc ? NULL : res ? res : l;
}

static ifd__jn_t *parse_not(P *p)
{
    if (is_name(p, "not")) {
        p->ti++;
        if (!enter(p))
            return NULL;
        ifd__jn_t *a = parse_not(p), *n = a ? node(p, IFD__JN_NOT) : NULL;
        p->depth--;
        if (n)
            n->a = a;
        return n;
    }
    return parse_compare(p);
}

static ifd__jn_t *parse_and(P *p)
{
    ifd__jn_t *l = parse_not(p);
    while (l && accept_name(p, "and"))
        l = pair(p, IFD__JN_AND, l, parse_not(p));
    return l;
}

static ifd__jn_t *parse_or(P *p)
{
    ifd__jn_t *l = parse_and(p);
    while (l && accept_name(p, "or"))
        l = pair(p, IFD__JN_OR, l, parse_and(p));
    return l;
}

static ifd__jn_t *parse_expr(P *p)
{
    if (!enter(p))
        return NULL;
    ifd__jn_t *e = parse_or(p);
    while (e && accept_name(p, "if")) {
        ifd__jn_t *c = parse_or(p), *el = NULL;
        if (!c)
            return NULL;
        if (accept_name(p, "else") && !(el = parse_expr(p)))
            return NULL;
        ifd__jn_t *n = node(p, IFD__JN_COND);
        if (!n)
            return NULL;
        n->a = c;
        n->b = e;
        n->c = el;
        e = n;
    }
    p->depth--;
    return e;
}

/* expr [, expr …] → a tuple when there is a comma (`{{ a, b }}`, `set x = 1, 2`). */
static ifd__jn_t *parse_tuple(P *p, bool condexpr)
{
    ifd__jn_t *e = condexpr ? parse_expr(p) : parse_or(p);
    if (!e || !is_op(p, ","))
        return e;
    nvec_t v = {0};
    nvec_push(p, &v, e);
    while (accept_op(p, ",")) {
        if (cur(p)->kind == TK_END)
            break;
        if (!(e = condexpr ? parse_expr(p) : parse_or(p)) || nvec_push(p, &v, e))
            return NULL;
    }
    ifd__jn_t *n = node(p, IFD__JN_TUPLE);
    if (n) {
        n->v = v.v;
        n->nv = v.n;
    }
    return n;
}

/* ---- statements ------------------------------------------------------------------------ */

static int parse_body(P *p, const char *const *ends, nvec_t *out);

static bool seg_is(P *p, const char *word)
{
    return p->si < p->nseg && p->segs[p->si].kind == SEG_BLOCK && is_name(p, word);
}

/* After parse_body stopped at an end tag: consume it (its tokens are current). */
static int close_tag(P *p, const char *word)
{
    if (!seg_is(p, word))
        return ifd__jparse_err(p, IFD_EFORMAT, "expected '%s'", word);
    p->ti++;
    p->si++;
    return expect_end(p);
}

/* The optional {% else %} body (into n->w), then the closing {% end %}. */
static int parse_else_end(P *p, ifd__jn_t *n, const char *end)
{
    if (seg_is(p, "else")) {
        const char *const ends[] = {end, NULL};
        nvec_t el = {0};
        if (close_tag(p, "else") || parse_body(p, ends, &el))
            return p->rc;
        n->w = el.v;
        n->nw = el.n;
    }
    return close_tag(p, end);
}

static int parse_if_soft(P *p, ifd__jn_t *n);

static int parse_if(P *p, ifd__jn_t *n)
{
    bool soft = p->soft;
    p->soft = true;
    int rc = parse_if_soft(p, n);
    p->soft = soft;
    return rc;
}

static int parse_if_soft(P *p, ifd__jn_t *n)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!(n->a = parse_tuple(p, true)) || expect_end(p))
        return p->rc;
    nvec_t body = {0};
    if (parse_body(p, ends, &body))
        return p->rc;
    n->v = body.v;
    n->nv = body.n;
    if (seg_is(p, "elif")) {
        p->ti++;
        p->si++;
        ifd__jn_t *e = node(p, IFD__JN_IF);
        if (!e || parse_if_soft(p, e))
            return p->rc;
        ifd__jn_t **w = ifd_arena_alloc(p->A, sizeof *w);
        if (!w)
            return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
        w[0] = e;
        n->w = w;
        n->nw = 1;
        return 0; /* the innermost elif consumed endif */
    }
    return parse_else_end(p, n, "endif");
}

static int parse_for(P *p, ifd__jn_t *n)
{
    svec_t names = {0};
    do {
        const char *nm = expect_ident(p);
        if (!nm || svec_push(p, &names, nm))
            return p->rc;
    } while (accept_op(p, ","));
    if (!accept_name(p, "in"))
        return ifd__jparse_err(p, IFD_EFORMAT, "expected 'in' in for loop");
    n->names = names.v;
    n->nnames = names.n;
    if (!(n->a = parse_tuple(p, false)))
        return p->rc;
    if (accept_name(p, "if") && !(n->b = parse_expr(p)))
        return p->rc;
    if (is_name(p, "recursive"))
        return ifd__jparse_err(p, IFD_ENOTSUP, "unsupported construct: recursive for loop");
    if (expect_end(p))
        return p->rc;
    static const char *const ends[] = {"else", "endfor", NULL};
    nvec_t body = {0};
    bool soft = p->soft;
    p->soft = false; /* a new frame in jinja2's compiler */
    p->loops++;
    int rc = parse_body(p, ends, &body);
    p->loops--;
    p->soft = soft;
    if (rc)
        return rc;
    n->v = body.v;
    n->nv = body.n;
    return parse_else_end(p, n, "endfor");
}

/* A filter chain for {% filter f | g %} / {% set x | f %}: FILTER nodes whose
 * innermost operand is NULL (the body's text). */
static ifd__jn_t *parse_filter_chain(P *p)
{
    ifd__jn_t *f = parse_filter(p, NULL);
    while (f && accept_op(p, "|"))
        f = parse_filter(p, f);
    return f;
}

static int parse_set(P *p, ifd__jn_t *n)
{
    svec_t names = {0};
    const char *nm = expect_ident(p);
    if (!nm)
        return p->rc;
    if (accept_op(p, ".")) {
        const char *attr = expect_ident(p);
        ifd__jn_t *base = node(p, IFD__JN_NAME), *at = node(p, IFD__JN_ATTR);
        if (!attr || !base || !at)
            return p->rc;
        base->s = nm;
        base->sn = strlen(nm);
        at->a = base;
        at->s = attr;
        at->sn = strlen(attr);
        n->a = at;
    } else {
        svec_push(p, &names, nm);
        while (accept_op(p, ",")) {
            if (!(nm = expect_ident(p)) || svec_push(p, &names, nm))
                return p->rc;
        }
        n->names = names.v;
        n->nnames = names.n;
    }
    if (accept_op(p, "=")) {
        if (!(n->b = parse_tuple(p, true)))
            return p->rc;
        return expect_end(p);
    }
    /* block set */
    if (n->a || n->nnames != 1)
        return ifd__jparse_err(p, IFD_EFORMAT, "a block set takes one variable name");
    n->kind = IFD__JN_SETBLOCK;
    if (accept_op(p, "|") && !(n->c = parse_filter_chain(p)))
        return p->rc;
    if (expect_end(p))
        return p->rc;
    static const char *const ends[] = {"endset", NULL};
    nvec_t body = {0};
    if (parse_body(p, ends, &body))
        return p->rc;
    n->v = body.v;
    n->nv = body.n;
    return close_tag(p, "endset");
}

static int parse_macro(P *p, ifd__jn_t *n)
{
    if (!(n->s = expect_ident(p)) || expect_op(p, "("))
        return p->rc;
    svec_t names = {0};
    nvec_t defs = {0};
    while (!accept_op(p, ")")) {
        if (names.n && expect_op(p, ","))
            return p->rc;
        if (accept_op(p, ")"))
            break;
        const char *nm = expect_ident(p);
        ifd__jn_t *d = NULL;
        if (!nm)
            return p->rc;
        if (accept_op(p, "=") && !(d = parse_expr(p)))
            return p->rc;
        if (svec_push(p, &names, nm) || nvec_push(p, &defs, d))
            return p->rc;
    }
    if (expect_end(p))
        return p->rc;
    n->names = names.v;
    n->nnames = names.n;
    n->w = defs.v;
    n->nw = defs.n;
    static const char *const ends[] = {"endmacro", NULL};
    nvec_t body = {0};
    int loops = p->loops;
    bool soft = p->soft;
    p->loops = 0;
    p->soft = false;
    int rc = parse_body(p, ends, &body);
    p->loops = loops;
    p->soft = soft;
    if (rc)
        return rc;
    n->v = body.v;
    n->nv = body.n;
    return close_tag(p, "endmacro");
}

static int parse_wrapped(P *p, ifd__jn_t *n, const char *end)
{
    const char *ends[] = {end, NULL};
    nvec_t body = {0};
    bool soft = p->soft;
    p->soft = false;
    int rc = parse_body(p, ends, &body);
    p->soft = soft;
    if (rc)
        return rc;
    n->v = body.v;
    n->nv = body.n;
    return close_tag(p, end);
}

static const char *const ifd__unsupported_tags[] = {
    "call", "include",    "import", "from",      "extends", "block", "with",
    "do",   "autoescape", "trans",  "pluralize", "print",   NULL};

static int parse_stmt(P *p, nvec_t *out)
{
    tok_t *t = cur(p);
    if (t->kind != TK_NAME)
        return ifd__jparse_err(p, IFD_EFORMAT, "expected a tag name, found '%s'", tok_desc(p));
    char word[32];
    snprintf(word, sizeof word, "%.*s", (int)(t->n < 31 ? t->n : 31), t->s);
    p->ti++;
    p->si++;
    ifd__jn_t *n;
    if (!strcmp(word, "if")) {
        if (!(n = node(p, IFD__JN_IF)) || parse_if(p, n))
            return p->rc;
    } else if (!strcmp(word, "for")) {
        if (!(n = node(p, IFD__JN_FOR)) || parse_for(p, n))
            return p->rc;
    } else if (!strcmp(word, "set")) {
        if (!(n = node(p, IFD__JN_SET)) || parse_set(p, n))
            return p->rc;
    } else if (!strcmp(word, "macro")) {
        if (!(n = node(p, IFD__JN_MACRO)) || parse_macro(p, n))
            return p->rc;
    } else if (!strcmp(word, "break") || !strcmp(word, "continue")) {
        if (!p->loops)
            return ifd__jparse_err(p, IFD_EFORMAT, "'%s' outside a loop", word);
        if (!(n = node(p, word[0] == 'b' ? IFD__JN_BREAK : IFD__JN_CONTINUE)) || expect_end(p))
            return p->rc;
    } else if (!strcmp(word, "filter")) {
        if (!(n = node(p, IFD__JN_FILTERBLOCK)) || !(n->c = parse_filter_chain(p)) ||
            expect_end(p) || parse_wrapped(p, n, "endfilter"))
            return p->rc;
    } else if (!strcmp(word, "generation")) {
        /* transformers' AssistantTracker: renders the body unchanged */
        if (!(n = node(p, IFD__JN_IF)) || expect_end(p) || !(n->a = node(p, IFD__JN_BOOL)) ||
            parse_wrapped(p, n, "endgeneration"))
            return p->rc;
        n->a->i = 1;
    } else {
        for (int i = 0; ifd__unsupported_tags[i]; i++)
            if (!strcmp(word, ifd__unsupported_tags[i]))
                return ifd__jparse_err(p, IFD_ENOTSUP, "unsupported tag '%s'", word);
        return ifd__jparse_err(p, IFD_EFORMAT, "unknown or unexpected tag '%s'", word);
    }
    return nvec_push(p, out, n);
}

/* Parses segments into *out until a block tag whose name is in `ends`
 * (left current, tokenized) or, with ends == NULL, the end of the source. */
static int parse_body(P *p, const char *const *ends, nvec_t *out)
{
    if (++p->depth > IFD__JINJA_MAX_NEST)
        return ifd__jparse_err(p, IFD_ETOOBIG, "blocks nested deeper than %d", IFD__JINJA_MAX_NEST);
    while (p->si < p->nseg) {
        seg_t *s = &p->segs[p->si];
        p->line = s->line;
        if (s->kind == SEG_DATA) {
            ifd__jn_t *n = node(p, IFD__JN_TEXT);
            if (!n)
                return p->rc;
            n->s = s->s;
            n->sn = s->n;
            p->si++;
            if (nvec_push(p, out, n))
                return p->rc;
            continue;
        }
        if (ifd__jlex_tokenize(p, s->s, s->n))
            return p->rc;
        if (s->kind == SEG_VAR) {
            ifd__jn_t *n = node(p, IFD__JN_OUT);
            if (!n || !(n->a = parse_tuple(p, true)) || expect_end(p))
                return p->rc;
            p->si++;
            if (nvec_push(p, out, n))
                return p->rc;
            continue;
        }
        for (int i = 0; ends && ends[i]; i++)
            if (is_name(p, ends[i])) {
                p->depth--;
                return 0;
            }
        if (parse_stmt(p, out))
            return p->rc;
    }
    if (ends) {
        size_t k = 0;
        while (ends[k + 1])
            k++;
        return ifd__jparse_err(p, IFD_EFORMAT, "missing '{%% %s %%}' at the end of the template", ends[k]);
    }
    p->depth--;
    return 0;
}

/* ---- tree height ----------------------------------------------------------------------- */

/* Child k of n, k < 4 + nv + nw (a, b, c, d, then v, then w); may be NULL. */
static const ifd__jn_t *child(const ifd__jn_t *n, uint32_t k)
{
    switch (k) {
    case 0:
        return n->a;
    case 1:
        return n->b;
    case 2:
        return n->c;
    case 3:
        return n->d;
    default:
        k -= 4;
        return k < n->nv ? n->v[k] : n->w[k - n->nv];
    }
}

typedef struct {
    const ifd__jn_t *n;
    uint32_t k; /* next child */
    uint32_t h; /* the highest expression child so far */
} hframe_t;

/* Refuses an expression whose tree is higher than IFD__JINJA_MAX_NEST. The
 * parser bounds its own recursion, but chains — `x|trim|trim…`, `1 and 1
 * and …`, `a[0][0]…` — are built in loops into trees as high as they are
 * long, and the renderer recurses over them. Walks the tree with a heap
 * stack (no recursion of its own). 0 or the recorded error. */
static int check_heights(P *p, ifd__jn_t *const *body, uint32_t nbody)
{
    size_t cap = 64, sp = 0;
    hframe_t *st = malloc(cap * sizeof *st);
    if (!st)
        return ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < nbody && !p->rc; i++) {
        st[sp++] = (hframe_t){body[i], 0, 0};
        while (sp && !p->rc) {
            hframe_t *top = &st[sp - 1];
            if (top->k < 4 + top->n->nv + top->n->nw) {
                const ifd__jn_t *c = child(top->n, top->k++);
                if (!c)
                    continue;
                if (sp == cap) {
                    hframe_t *ns = realloc(st, 2 * cap * sizeof *st);
                    if (!ns) {
                        ifd__jparse_err(p, IFD_ENOMEM, "out of memory");
                        break;
                    }
                    st = ns;
                    cap *= 2;
                }
                st[sp++] = (hframe_t){c, 0, 0};
                continue;
            }
            uint32_t h = top->n->kind >= IFD__JN_STR ? top->h + 1 : 0;
            if (h > IFD__JINJA_MAX_NEST) {
                p->line = top->n->line;
                ifd__jparse_err(p, IFD_ETOOBIG, "expression nested deeper than %d",
                                IFD__JINJA_MAX_NEST);
            }
            if (--sp && h > st[sp - 1].h)
                st[sp - 1].h = h;
        }
        sp = 0;
    }
    free(st);
    return p->rc;
}

int ifd_jinja_parse(ifd_jinja_t **out, const char *src, size_t len, char *errbuf, size_t errlen)
{
    *out = NULL;
    if (errbuf && errlen)
        errbuf[0] = '\0';
    ifd_jinja_t *t = calloc(1, sizeof *t);
    if (!t)
        return IFD_ENOMEM;
    ifd_arena_init(&t->arena, 0);
    P p = {.A = &t->arena, .err = errbuf, .errlen = errlen, .line = 1};
    nvec_t body = {0};
    if (!ifd__jlex_segment(&p, src, len) && !parse_body(&p, NULL, &body))
        check_heights(&p, body.v, body.n);
    free(p.segs);
    free(p.toks);
    if (p.rc) {
        ifd_jinja_destroy(t);
        return p.rc;
    }
    t->body = body.v;
    t->nbody = body.n;
    *out = t;
    return 0;
}

void ifd_jinja_destroy(ifd_jinja_t *t)
{
    if (!t)
        return;
    ifd_arena_close(&t->arena);
    free(t);
}
