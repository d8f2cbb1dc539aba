/*
 * grammar_conv_impl.h — the converter's state and helpers shared by the
 * JSON Schema converter's modules (common/grammar/grammar_conv.c: regexes,
 * literals, tool calls; grammar_conv_schema.c: the schema walk;
 * grammar_conv_num.c: numeric bounds;
 * grammar_conv_merge.c: allOf and siblings of $ref / anyOf merged into one
 * schema). Not a public interface. One conversion = one conv_t, used by one
 * thread; every helper appends grammar text to a caller's ifd_buf_t and
 * returns 0 or an IFD_E* code with the message recorded in the conv_t (the
 * first message wins).
 */
#ifndef IFD_GRAMMAR_CONV_IMPL_H
#define IFD_GRAMMAR_CONV_IMPL_H

#include "arena.h"
#include "grammar/grammar.h"
#include "hash.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define IFD__GCONV_MAX_DEPTH 64

typedef struct {
    const json_t *doc;
    char *ref;
    unsigned id;
} ifd__gconv_ref_t;

/* One answer of ifd__gconv_resource (ifd__gconv_resource_cached). */
typedef struct {
    const json_t *s, *res;
} ifd__gconv_res_seen_t;

/* A rule body written (ifd__gconv_rule): where its text lies in rules. */
typedef struct {
    size_t off, len;
    unsigned id;
} ifd__gconv_body_t;

typedef struct {
    ifd_buf_t rules; /* the "sN ::= …" rules written so far */
    /* Hash-consing (ifd__gconv_rule): a body equal to one written before,
     * once its references are mapped to the rules they alias, is not
     * written again; its rule becomes an alias (alias[id], UINT32_MAX:
     * none), resolved in every reference when the grammar is finished. */
    ifd_hash_t body_index; /* hash of a body's text → bodies[] */
    ifd__gconv_body_t *bodies;
    size_t n_bodies, cap_bodies;
    unsigned *alias;
    size_t cap_alias;
    unsigned *alias_log; /* the ids aliased, in order (taken back with the rules) */
    size_t n_alias, cap_alias_log;
    unsigned next;   /* the next rule number */
    ifd__gconv_ref_t *refs;
    size_t n_refs;
    char *err;
    size_t errlen;
    int depth;
    ifd_grammar_budget_t budget;
    uint64_t deadline; /* CLOCK_MONOTONIC ns; 0 none */
    uint64_t steps;    /* schema nodes and regex atoms converted */
    bool unsat;        /* the last error: no value satisfies the schema */
    bool loose;        /* over-approximate what no grammar enforces (ifd__gconv_loosen) */
    bool approx;       /* it did: the output must be checked (schema_check.h) */
    bool dep_loose;    /* loose dependentSchemas whose name is not required (fold_dependent) */
    const json_t *res; /* the embedded resource being converted (NULL: the document's) */
    ifd__gconv_res_seen_t res_seen[16]; /* ifd__gconv_resource's last 16 answers */
    unsigned n_res_seen;
} conv_t;

/* Where the output stands, to take back a part that failed. */
typedef struct {
    size_t rules_len, n_refs, n_bodies, n_alias;
} ifd__gconv_mark_t;

/* A literal: n bytes at s (valid UTF-8), borrowed. */
typedef struct {
    const char *s;
    size_t n;
} lit_t;

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* Records the message (unless one is recorded already) and returns code. */
int ifd__gconv_err(conv_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* One step of conversion (a schema node, a regex atom): IFD_ETOOBIG past
 * the budget's work or time, IFD_ECANCELED once its cancel flag is set. */
int ifd__gconv_step(conv_t *c);

/* IFD_ENOTSUP for a schema no value satisfies (a false schema, an empty
 * enum, bounds that cross): sets c->unsat, so that an optional property or
 * an anyOf branch with such a schema is left out instead (valid: such a
 * property can never appear). */
int ifd__gconv_unsat(conv_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

ifd__gconv_mark_t ifd__gconv_mark(const conv_t *c);

/* Takes back the rules and references written since mark and clears the
 * message (the caller leaves that part out). */
void ifd__gconv_take_back(conv_t *c, ifd__gconv_mark_t mark);

/* In loose mode, whether the failure rc since mark was an IFD_ENOTSUP that
 * an over-approximation may replace: if so the rules and references written
 * since are taken back, the message cleared, c->approx set and true
 * returned (the caller writes a grammar accepting a superset instead). */
bool ifd__gconv_loosen(conv_t *c, ifd__gconv_mark_t mark, int rc);

/* Whether the failure rc since mark was an unsatisfiable schema; if so the
 * rules and references written since are taken back, the message cleared
 * and true returned (the caller leaves that part out). */
bool ifd__gconv_drop_unsat(conv_t *c, ifd__gconv_mark_t mark, int rc);

/* Appends the rule "sN ::= body" (an empty body matches nothing: ""),
 * unless an equal body (its references mapped through the aliases) was
 * written before as rule sM: then sN becomes an alias of sM, resolved by
 * ifd__gconv_finish. Grammars whose schemas repeat a part in many places
 * (a $ref merged with its siblings, inlined anew at each use) shrink to
 * their distinct rules. IFD_ETOOBIG past IFD_GRAMMAR_MAX_TEXT bytes. */
int ifd__gconv_rule(conv_t *c, unsigned id, const ifd_buf_t *body);

/* Exactly one of the n literals, as a trie of rules, into b (sorts v). */
int ifd__gconv_literals(conv_t *c, lit_t *v, size_t n, ifd_buf_t *b);

void ifd__gconv_init(conv_t *c, const ifd_grammar_budget_t *budget, char *err, size_t errlen);
void ifd__gconv_close(conv_t *c);
/* out += "root ::= root_body", the shared JSON rules and c's rules. */
int ifd__gconv_finish(conv_t *c, const char *root_body, ifd_buf_t *out);

bool ifd__gconv_valid_utf8(const char *s, size_t n);

/* The compact JSON text of v (malloc'd, NULL when out of memory), each real
 * number at the fewest significant digits that read back as the same
 * double (2.1, not jansson's 17-digit 2.1000000000000001, which a checker
 * reading decimals exactly tells apart from the schema's 2.1). */
char *ifd__gconv_dump_value(const json_t *v);

/* A literal for the compact JSON text of v. */
int ifd__gconv_json_lit(conv_t *c, ifd_buf_t *b, const json_t *v);

/* The regex re[0..len) as grammar items; json: as the inside of a JSON
 * string literal; search: unanchored sides match any characters. */
int ifd__gconv_regex(conv_t *c, const char *re, size_t len, bool json, bool search, ifd_buf_t *b);

/* The rule sN (*id) of the schema s inside doc (grammar_conv_schema.c). */
int ifd__gconv_schema_rule(conv_t *c, const json_t *s, const json_t *doc, unsigned *id);

/* A JSON number ("integer" true: an integer) obeying s's minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (numbers, or draft-04's booleans) and
 * multipleOf, into b (grammar_conv_num.c). IFD_ENOTSUP names what cannot be
 * enforced; every text the grammar accepts satisfies all of them. */
int ifd__gconv_number(conv_t *c, const json_t *s, bool integer, ifd_buf_t *b);

/* The schema s with its sibling combinators folded in (grammar_conv_merge.c):
 * allOf members, the target of a $ref that has constraining siblings, each
 * merged into one schema (a new reference in *out, freed by the caller), so
 * that the converter sees no allOf and no $ref beside constraints. *out is s
 * itself (with a reference taken) when there is nothing to merge.
 * IFD_ENOTSUP names a pair of keywords that cannot be intersected. */
int ifd__gconv_merge(conv_t *c, const json_t *s, const json_t *doc, json_t **out);

/* oneOf's branches (resolved, a new array in *out) made such that no value
 * written by one matches another, so that they can be generated as anyOf:
 * distinct types, distinct const/enum values, a property both require
 * with distinct const/enum values, one requiring a name the other's
 * additionalProperties: false forbids — or, for objects where each
 * requires a name the other does not, each leaves out the other's names.
 * IFD_ENOTSUP names two branches that may overlap. */
int ifd__gconv_one_of(conv_t *c, const json_t *branches, const json_t *doc, json_t **out);

/* A loose conversion's array with contains, exactly (grammar_conv_cond.c):
 * the items of allOf [items, contains] counted between minContains and
 * maxContains, the array's length between mn and mx (mx -1: none); item is
 * the rule of items ("jval" for any). 0 with the array's grammar in b; 1
 * where it cannot be written exactly (nothing written: the caller writes its
 * over-approximation); or an IFD_E* code (IFD_ENOTSUP with c->unsat when no
 * array satisfies it). */
int ifd__gconv_contains(conv_t *c, const json_t *s, const json_t *items, const char *item,
                        long long mn, long long mx, const json_t *doc, ifd_buf_t *b);

/* "not if" under s for the discriminator form of if (grammar_conv_cond.c):
 * a new schema, or NULL where if is not of that form or memory ran out. */
json_t *ifd__gconv_not_if(const json_t *s, const json_t *ifs);

/* IFD_ENOTSUP when a string the converter reads as a C string (a required
 * name, a $ref, a format, …) holds a NUL, which it would cut short: NUL is
 * read only in pattern (with its length), enum and const (written whole,
 * as the JSON escape \u0000) and the annotations it ignores. */
int ifd__gconv_nul_check(conv_t *c, const json_t *s, int depth);

/* Whether v holds, at any depth, a dependentSchemas or a draft-04
 * dependencies with a schema (not a name list) among its values: a loose
 * conversion that fails is then tried once more with c->dep_loose. */
bool ifd__gconv_has_dep_schema(const json_t *v, int depth);

/* The reference ref resolved inside doc (schema_ref.c): "#", JSON pointers
 * ("#/$defs/X", percent-decoded), plain-name fragments ("#foo": $anchor, or
 * an $id / id "#foo"), and URIs naming the document or a resource embedded
 * in it (its $id); NULL when it names nothing in doc (a remote reference). */
const json_t *ifd__gconv_resolve(const json_t *doc, const char *ref);

/* The resource embedded in doc that s is (schema_ref.c): NULL when s has no
 * $id (id) beyond a fragment or names the document itself; else the
 * subschema of doc with that $id — the same pointer for every copy of it
 * the merge makes, so that references inside are keyed by one resource. */
const json_t *ifd__gconv_resource(const json_t *doc, const json_t *s);

/* ifd__gconv_resource's answer, from a cache of the last 16 (its search
 * walks the document). A hit counts only where the resource (inside doc,
 * alive) carries the same $id as s: the merge's copies are freed, and
 * another object may take the same address. */
const json_t *ifd__gconv_resource_cached(const json_t *doc, const json_t *s,
                                         ifd__gconv_res_seen_t *seen, unsigned *n);

/* ref as written inside the embedded resource res (NULL or doc: none): a
 * fragment resolved in res first, as its base URI says (*in_res set), else
 * in the whole document, where many published schemas mean it to point
 * (an "id" on a subschema, "#/definitions/x" meaning the root's); other
 * references as ifd__gconv_resolve. */
const json_t *ifd__gconv_resolve_in(const json_t *doc, const json_t *res, const char *ref,
                                    bool *in_res);

/* Whether key is an annotation or a keyword the converter ignores as JSON
 * Schema says (unknown keywords, x-*): false for the ones that constrain. */
bool ifd__gconv_constrains(const char *key);

/* Whether k is one of the n strings of l. */
static inline bool ifd__gconv_in_list(const char *k, const char *const *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, l[i]) == 0)
            return true;
    return false;
}

/* Whether v is the JSON string s. */
static inline bool ifd__gconv_is_str(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

#endif
