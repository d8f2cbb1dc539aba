/*
 * grammar.h — context-free grammars for constrained decoding: a GBNF-style
 * text format compiled into a byte-level grammar, and a matcher that runs
 * it as a pushdown automaton over bytes.
 *
 * Text format (close to llama.cpp's GBNF, our own implementation):
 *
 *     # a comment runs to the end of the line
 *     root   ::= "{" ws pair ("," ws pair)* "}"
 *     pair   ::= [a-z]+ ":" ws ( "true" | "false" )
 *     ws     ::= [ \t\n]{0,4}
 *
 *   - a rule is `name ::= alternatives`; names are [A-Za-z0-9_-]+; a rule
 *     ends where the next `name ::=` begins; the start rule is `root`;
 *   - terminals: "literal" and [class] ([^...] negated, a-z ranges) over
 *     Unicode code points (the text is UTF-8), `.` any code point; escapes
 *     \n \r \t \\ \" \] \[ \- \^ \/ \xHH \uHHHH \UHHHHHHHH;
 *   - ( group ), postfix * + ? {m} {m,} {m,n} (m, n <= IFD_GRAMMAR_MAX_REPEAT),
 *     spaces before a postfix operator allowed;
 *   - an empty alternative matches the empty string (`x ::= "a" | `).
 *
 * Compilation lowers code points to UTF-8 byte sequences (each range split
 * at encoding boundaries, surrogates excluded) and repetitions to helper
 * rules, so the matcher sees only byte sets and rule references. Refused
 * at compile time with a message naming the rule: undefined rules, a
 * missing root, left recursion that grows the stack (`x ::= x "a"`, direct
 * or through rules that can match nothing; a repetition of something that
 * can be empty, `(a*)*`, is accepted), grammars over the size limits or
 * the compile budget, a first step too ambiguous to compute. Compilation is
 * linear in the grammar (hashed rule names, worklist nullability, one SCC
 * pass) up to the expansions of the start state.
 *
 * Matching: the state is a set of stacks of grammar positions (an
 * ambiguous grammar keeps several alive). A rule reference in tail
 * position pushes no return frame, so right recursion (x*, lists) runs in
 * constant stack depth. Stacks share their tails and live in the
 * matcher's own memory, compacted after every accepted chunk.
 *
 * Ownership: a grammar is immutable once compiled and may be shared by any
 * number of matchers and threads. A matcher belongs to one thread at a time
 * and borrows its grammar, which must outlive it.
 */
#ifndef IFD_GRAMMAR_H
#define IFD_GRAMMAR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IFD_GRAMMAR_MAX_TEXT     (1u << 20) /* bytes of grammar text */
#define IFD_GRAMMAR_MAX_REPEAT   4096       /* m and n of {m,n} */
#define IFD_GRAMMAR_MAX_ELEMENTS (1u << 21) /* compiled elements in all */
#define IFD_GRAMMAR_MAX_STACKS   4096       /* live stacks in one state */
/* Compile work (elements made, stacks expanded) of the default budget:
 * about a second of compilation on a slow core. */
#define IFD_GRAMMAR_DEFAULT_WORK (64u << 20)

typedef struct ifd_grammar ifd_grammar_t;

/*
 * Compiles grammar text (len bytes, need not be NUL-terminated). Returns 0
 * and *out; IFD_EFORMAT with a message in err (errlen bytes, may be NULL)
 * for a syntax or semantic error ("line 3: undefined rule 'valu'");
 * IFD_ETOOBIG over the limits; IFD_ENOMEM. Free with ifd_grammar_destroy.
 */
int ifd_grammar_compile(const char *text, size_t len, ifd_grammar_t **out, char *err,
                        size_t errlen);

/* What one compilation may spend. Work counts the elements made and the
 * stacks expanded (every step of the compiler that can grow with the input
 * counts, so a hostile grammar stops within it); the clock and the cancel
 * flag are read every 4096 steps. */
typedef struct {
    uint64_t max_work;        /* 0: none */
    unsigned max_time_ms;     /* 0: none */
    const atomic_int *cancel; /* nonzero (set by another thread): stop; NULL: none */
} ifd_grammar_budget_t;

/* IFD_GRAMMAR_DEFAULT_WORK, no time limit, no cancel flag. */
ifd_grammar_budget_t ifd_grammar_default_budget(void);

/* ifd_grammar_compile within a budget (NULL: the default): also
 * IFD_ETOOBIG naming the exhausted limit, IFD_ECANCELED. Everything made
 * so far is freed. Reentrant. */
int ifd_grammar_compile_budget(const char *text, size_t len, const ifd_grammar_budget_t *budget,
                               ifd_grammar_t **out, char *err, size_t errlen);

/* NULL is a no-op. */
void ifd_grammar_destroy(ifd_grammar_t *g);

/* The compiled grammar as 32-bit words (*out malloc'ed, caller frees; *n
 * words), so it is compiled once — by the router, off its loop — and
 * handed to the worker in the ADD frame. 0 or IFD_ENOMEM. */
int ifd_grammar_serialize(const ifd_grammar_t *g, int32_t **out, size_t *n);

/* The grammar of ifd_grammar_serialize's words, checked (every index in
 * range, every alternative where the matcher expects one): a corrupt or
 * hostile array is IFD_EFORMAT with a message, never a crash. The words
 * are copied. 0, IFD_EFORMAT, IFD_ENOMEM. */
int ifd_grammar_deserialize(const int32_t *words, size_t n, ifd_grammar_t **out, char *err,
                            size_t errlen);

typedef struct ifd_gmatch ifd_gmatch_t;

/* A matcher at the start of g. 0 and *out, or IFD_ENOMEM. */
int ifd_gmatch_create(const ifd_grammar_t *g, ifd_gmatch_t **out);
void ifd_gmatch_destroy(ifd_gmatch_t *m); /* NULL is a no-op */

/* Back to the start state. */
void ifd_gmatch_reset(ifd_gmatch_t *m);

/* Consumes n bytes: 0 when every byte is accepted; IFD_EINVAL when some
 * byte is not (the state is then unchanged); IFD_ETOOBIG when the
 * grammar is so ambiguous that a state would exceed IFD_GRAMMAR_MAX_STACKS
 * (state unchanged); IFD_ENOMEM. */
int ifd_gmatch_accept(ifd_gmatch_t *m, const void *bytes, size_t n);

/* Whether the n bytes would be accepted from the current state (the state
 * is not changed). */
bool ifd_gmatch_check(ifd_gmatch_t *m, const void *bytes, size_t n);

/* The bytes so far form a complete sentence of the grammar. */
bool ifd_gmatch_can_end(const ifd_gmatch_t *m);

/* No byte can follow (complete, or no live stack at all). */
bool ifd_gmatch_is_done(const ifd_gmatch_t *m);

#endif
