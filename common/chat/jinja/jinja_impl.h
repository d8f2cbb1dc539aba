/*
 * jinja_impl.h — internals shared by jinja_parse.c (lexer, parser) and
 * jinja.c (renderer): the AST, the filter/test tables and how both record
 * errors. Not a public API.
 *
 * The AST lives in the template's arena and is immutable after parsing.
 * Statement bodies are arrays of nodes (v/nv); what a field holds per node
 * kind is written next to the kind.
 */
#ifndef IFD_JINJA_IMPL_H
#define IFD_JINJA_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"

typedef enum {
    /* statements */
    IFD__JN_TEXT,     /* s/sn: literal text */
    IFD__JN_OUT,      /* a: expression */
    IFD__JN_IF,       /* a: condition, v: body, w: else body (an elif is one IF in w) */
    IFD__JN_FOR,      /* names: targets, a: iterable, b: filter or NULL, v: body, w: else;
                         i: 1 when the body refers to `loop` */
    IFD__JN_SET,      /* names[0] (and a NULL) or a: NS target (ATTR), b: value;
                         nnames > 1: tuple unpacking */
    IFD__JN_SETBLOCK, /* names[0]: variable, v: body, c: filter chain or NULL */
    IFD__JN_MACRO,    /* s: name, names: params, w: defaults (NULL entries = none), v: body */
    IFD__JN_BREAK,
    IFD__JN_CONTINUE,
    IFD__JN_FILTERBLOCK, /* c: filter chain (a FILTER whose innermost a is NULL), v: body */
    /* expressions */
    IFD__JN_STR,   /* s/sn */
    IFD__JN_INT,   /* i */
    IFD__JN_FLOAT, /* f */
    IFD__JN_BOOL,  /* i */
    IFD__JN_NONE,
    IFD__JN_NAME,   /* s */
    IFD__JN_ATTR,   /* a . s */
    IFD__JN_ITEM,   /* a [ b ] */
    IFD__JN_SLICE,  /* a [ b : c : d ] (each may be NULL) */
    IFD__JN_CALL,   /* a ( v ; names = w ) */
    IFD__JN_FILTER, /* a | s ( v ; names = w ); op: filter id */
    IFD__JN_TEST,   /* a is [not: i] s ( v ); op: test id */
    IFD__JN_BIN,    /* a op b */
    IFD__JN_NEG,    /* - a */
    IFD__JN_POS,    /* + a */
    IFD__JN_NOT,    /* not a */
    IFD__JN_AND,    /* a and b */
    IFD__JN_OR,     /* a or b */
    IFD__JN_COND,   /* b if a else c (c may be NULL) */
    IFD__JN_LIST,   /* v */
    IFD__JN_TUPLE,  /* v */
    IFD__JN_DICT,   /* v: keys, w: values */
    IFD__JN_CONCAT, /* v: operands of ~ */
} ifd__jn_kind_t;

typedef enum {
    IFD__OP_ADD,
    IFD__OP_SUB,
    IFD__OP_MUL,
    IFD__OP_DIV,
    IFD__OP_FLOORDIV,
    IFD__OP_MOD,
    IFD__OP_POW,
    IFD__OP_EQ,
    IFD__OP_NE,
    IFD__OP_LT,
    IFD__OP_LE,
    IFD__OP_GT,
    IFD__OP_GE,
    IFD__OP_IN,
    IFD__OP_NOTIN,
} ifd__jop_t;

typedef struct ifd__jn ifd__jn_t;
struct ifd__jn {
    uint16_t kind;
    uint16_t op;
    int line;
    ifd__jn_t *a, *b, *c, *d;
    ifd__jn_t **v;
    ifd__jn_t **w;
    uint32_t nv, nw;
    const char *s;
    size_t sn;
    const char **names;
    uint32_t nnames;
    int64_t i;
    double f;
};

/* Filters and tests known to the renderer: X(id, "name"). */
#define IFD__JFILTERS(X)                                                                           \
    X(ABS, "abs")                                                                                  \
    X(CAPITALIZE, "capitalize")                                                                    \
    X(COUNT, "count")                                                                              \
    X(DEFAULT, "default")                                                                          \
    X(D, "d")                                                                                      \
    X(DICTSORT, "dictsort")                                                                        \
    X(FIRST, "first")                                                                              \
    X(FLOAT, "float")                                                                              \
    X(INDENT, "indent")                                                                            \
    X(INT, "int")                                                                                  \
    X(ITEMS, "items")                                                                              \
    X(JOIN, "join")                                                                                \
    X(LAST, "last")                                                                                \
    X(LENGTH, "length")                                                                            \
    X(LIST, "list")                                                                                \
    X(LOWER, "lower")                                                                              \
    X(MAP, "map")                                                                                  \
    X(MAX, "max")                                                                                  \
    X(MIN, "min")                                                                                  \
    X(REJECT, "reject")                                                                            \
    X(REJECTATTR, "rejectattr")                                                                    \
    X(REPLACE, "replace")                                                                          \
    X(REVERSE, "reverse")                                                                          \
    X(ROUND, "round")                                                                              \
    X(SAFE, "safe")                                                                                \
    X(SELECT, "select")                                                                            \
    X(SELECTATTR, "selectattr")                                                                    \
    X(SORT, "sort")                                                                                \
    X(STRING, "string")                                                                            \
    X(SUM, "sum")                                                                                  \
    X(TITLE, "title")                                                                              \
    X(TOJSON, "tojson")                                                                            \
    X(TRIM, "trim")                                                                                \
    X(UNIQUE, "unique")                                                                            \
    X(UPPER, "upper")                                                                              \
    X(WORDCOUNT, "wordcount")

#define IFD__JTESTS(X)                                                                             \
    X(DEFINED, "defined")                                                                          \
    X(UNDEFINED, "undefined")                                                                      \
    X(NONE, "none")                                                                                \
    X(BOOLEAN, "boolean")                                                                          \
    X(FALSE, "false")                                                                              \
    X(TRUE, "true")                                                                                \
    X(INTEGER, "integer")                                                                          \
    X(FLOAT, "float")                                                                              \
    X(NUMBER, "number")                                                                            \
    X(STRING, "string")                                                                            \
    X(MAPPING, "mapping")                                                                          \
    X(ITERABLE, "iterable")                                                                        \
    X(SEQUENCE, "sequence")                                                                        \
    X(CALLABLE, "callable")                                                                        \
    X(EVEN, "even")                                                                                \
    X(ODD, "odd")                                                                                  \
    X(DIVISIBLEBY, "divisibleby")                                                                  \
    X(LOWER, "lower")                                                                              \
    X(UPPER, "upper")                                                                              \
    X(EQ, "eq")                                                                                    \
    X(EQUALTO, "equalto")                                                                          \
    X(EQEQ, "==")                                                                                  \
    X(NE, "ne")                                                                                    \
    X(NEQ, "!=")                                                                                   \
    X(LT, "lt")                                                                                    \
    X(LTS, "<")                                                                                    \
    X(LE, "le")                                                                                    \
    X(LES, "<=")                                                                                   \
    X(GT, "gt")                                                                                    \
    X(GTS, ">")                                                                                    \
    X(GE, "ge")                                                                                    \
    X(GES, ">=")                                                                                   \
    X(IN, "in")                                                                                    \
    X(SAMEAS, "sameas")

#define IFD__X_ENUM_F(id, name) IFD__JF_##id,
#define IFD__X_ENUM_T(id, name) IFD__JT_##id,
enum { IFD__JFILTERS(IFD__X_ENUM_F) IFD__JF_N };
enum { IFD__JTESTS(IFD__X_ENUM_T) IFD__JT_N };
#undef IFD__X_ENUM_F
#undef IFD__X_ENUM_T

/* Name → id, or -1. */
int ifd__jinja_filter_id(const char *name, size_t n);
int ifd__jinja_test_id(const char *name, size_t n);

/* The parser's and the renderer's error convention: the first error wins.
 * When *first is 0 it becomes rc and err (when not NULL) gets "line N: " and
 * the message, truncated to errlen. Returns *first. */
__attribute__((format(printf, 6, 0))) int ifd__jerr_record(int *first, char *err, size_t errlen,
                                                           int line, int rc, const char *fmt,
                                                           va_list ap);

struct ifd_jinja {
    ifd_arena_t arena;
    ifd__jn_t **body;
    uint32_t nbody;
};

#define IFD__JINJA_MAX_NEST 200

#endif
