/*
 * jinja_lex.h — private to the Jinja parser (jinja_parse.c) and its lexer
 * (jinja_lex.c): the parser state both passes share, and the two lexing
 * passes. Nothing here is used outside those two files.
 *
 * The short type names (P, seg_t, tok_t) break the ifd__ naming rule on
 * purpose: the recursive-descent parser names them on nearly every line, and
 * this header is included by exactly the two files that own them.
 *
 * Allocation: segment text and decoded strings live in the template's arena
 * (p->A); the segment and token arrays are realloc'ed and freed by
 * ifd_jinja_parse. Single-threaded, like the parse itself.
 */
#ifndef IFD_JINJA_LEX_H
#define IFD_JINJA_LEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"

enum { SEG_DATA, SEG_VAR, SEG_BLOCK };

typedef struct {
    int kind;
    const char *s; /* data: normalised copy; tags: the inner text in the source */
    size_t n;
    int line;
} seg_t;

typedef enum { TK_END, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP } tk_kind_t;

typedef struct {
    tk_kind_t kind;
    const char *s; /* name / op text / decoded string */
    size_t n;
    int64_t i;
    double f;
} tok_t;

typedef struct {
    ifd_arena_t *A;
    seg_t *segs;
    size_t nseg, cap, si;
    tok_t *toks;
    size_t nt, tcap, ti;
    int line;
    int depth;
    int loops;
    bool soft; /* inside an if: jinja2 defers unknown filters/tests to run time */
    int rc;
    char *err;
    size_t errlen;
} P;

/* Records the first error (code and "line N: message" in p->err) and
 * returns its code; later errors keep the first. */
__attribute__((format(printf, 3, 4))) int ifd__jparse_err(P *p, int rc, const char *fmt, ...);

/* Pass 1: splits src into data / {{ }} / {% %} segments with the whitespace
 * rules applied (p->segs). 0 or the recorded error code. */
int ifd__jlex_segment(P *p, const char *src, size_t len);

/* Pass 2 for one tag's inner text: tokens into p->toks (ending in TK_END),
 * p->ti reset. 0 or the recorded error code. */
int ifd__jlex_tokenize(P *p, const char *s, size_t n);

#endif
