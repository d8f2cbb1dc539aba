/*
 * grammar_impl.h — the compiled grammar and the matcher's stack machinery,
 * shared by common/grammar/grammar.c and common/grammar/grammar_mask.c (the token mask walks
 * the vocabulary trie with these primitives). Not a public interface.
 *
 * Elements: one flat array. Rule r's alternatives start at
 * alts[alt_off[r] .. alt_off[r + 1]); each alternative is a run of SET and
 * RULE elements ended by ALT (another alternative follows) or END (the
 * last). A position whose element is ALT or END means "this alternative is
 * complete".
 *
 * A stack is a chain of nodes: the top node's pos is a SET element (the
 * next byte to match), each parent's pos is the element to continue with
 * once the rule below completes. A state is a set of distinct stacks plus
 * `accept` (the empty stack: the root rule is complete).
 *
 * Memory: nodes and state arrays come from an ifd__gmem_t, a bump allocator
 * with marks: release(mark) frees everything allocated after the mark (the
 * chunks are kept for reuse). Threading: one thread per ifd__gmem_t.
 */
#ifndef IFD_GRAMMAR_IMPL_H
#define IFD_GRAMMAR_IMPL_H

#include "grammar.h"
#include "hash.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    IFD__GE_END = 0,
    IFD__GE_ALT = 1,
    IFD__GE_RULE = 2, /* v: rule id */
    IFD__GE_SET = 3,  /* v: byte set index */
};

typedef struct {
    uint32_t type;
    uint32_t v;
} ifd__gelem_t;

struct ifd_grammar {
    ifd__gelem_t *el;
    size_t n_el;
    uint32_t *alts;    /* alternative start positions of every rule */
    uint32_t *alt_off; /* [n_rules + 1] */
    size_t n_rules;
    uint8_t (*sets)[32]; /* 256-bit byte sets */
    size_t n_sets;
    uint32_t root;
};

static inline bool ifd__gset_has(const ifd_grammar_t *g, uint32_t set, uint8_t b)
{
    return (g->sets[set][b >> 3] >> (b & 7)) & 1;
}

typedef struct ifd__gnode {
    uint32_t pos;
    uint32_t hash; /* of the whole stack (pos and every parent's): equal stacks hash alike */
    const struct ifd__gnode *parent;
} ifd__gnode_t;

typedef struct {
    const ifd__gnode_t **v;
    uint32_t n;
    bool accept;
} ifd__gstate_t;

typedef struct {
    size_t chunk;
    size_t used;
} ifd__gmark_t;

typedef struct {
    uint8_t **chunks;
    size_t n_chunks, cap_chunks;
    size_t cur, used; /* the chunk being filled and its bytes used */
    /* scratch for building one state; its stacks indexed by hash once there
     * are more than a few (duplicates are found in O(1), not by a scan) */
    const ifd__gnode_t **scratch;
    uint32_t n_scratch, cap_scratch;
    bool scratch_accept;
    ifd_hash_t scratch_index;
    bool scratch_indexed;
    /* rule expansions in progress (position + parent stack): a nullable
     * cycle that does not grow the stack (`x ::= y x |` with y nullable)
     * reaches one again and stops there instead of looping */
    ifd_hash_t active_index;
    struct ifd__gactive {
        uint32_t pos;
        const ifd__gnode_t *parent;
    } *active;
    uint32_t n_active, cap_active;
    /* Work budget: stacks made by start/advance since `work` was last
     * reset; past work_limit (0: none) they fail with IFD_ETOOBIG. The
     * mask walk sets it per token, compilation for the whole grammar. */
    uint64_t work, work_limit;
} ifd__gmem_t;

/* Expansion depth (rules inside rules) at which a state is refused with
 * IFD_ETOOBIG: bounds the recursion's stack use (~100 bytes a level). */
#define IFD__GRAMMAR_MAX_DEPTH 8192

void ifd__gmem_init(ifd__gmem_t *m);
void ifd__gmem_close(ifd__gmem_t *m);
ifd__gmark_t ifd__gmem_mark(const ifd__gmem_t *m);
void ifd__gmem_release(ifd__gmem_t *m, ifd__gmark_t mark);

/* The start state of g, allocated from m. 0, IFD_ETOOBIG, IFD_ENOMEM. */
int ifd__grammar_start(const ifd_grammar_t *g, ifd__gmem_t *m, ifd__gstate_t *out);

/* The state after byte b from `in` (which stays valid), allocated from m.
 * An empty result (n == 0, !accept) means b is rejected. 0, IFD_ETOOBIG,
 * IFD_ENOMEM. */
int ifd__grammar_advance(const ifd_grammar_t *g, ifd__gmem_t *m, const ifd__gstate_t *in, uint8_t b,
                         ifd__gstate_t *out);

/* A deep copy of s into m (for compaction). 0 or IFD_ENOMEM. */
int ifd__gstate_copy(ifd__gmem_t *m, const ifd__gstate_t *s, ifd__gstate_t *out);

/* The matcher's committed state (borrowed; valid until the next call that
 * changes the matcher). */
const ifd__gstate_t *ifd__gmatch_state(const ifd_gmatch_t *m);

/* The two escape dialects that share ifd__gescape. */
typedef enum {
    IFD__GESC_GBNF,  /* grammar text: also \UHHHHHHHH */
    IFD__GESC_REGEX, /* JSON Schema "pattern" (grammar_conv.c): also \f and \v */
} ifd__gesc_t;

/*
 * The character escapes GBNF and the regex dialect share: \n \r \t \0 and
 * the hex escapes \xHH \uHHHH, plus each dialect's extras above. e is the
 * character after the backslash; for a hex escape *s (bounded by end) moves
 * over the digits. Returns 0 with *cp set (a hex value is not range-checked:
 * each dialect has its own rule), 1 when e is none of these (*s untouched:
 * the caller's own escapes), or IFD_EFORMAT when a hex digit is missing or
 * bad (*s past the bad character). Pure; records no message.
 */
int ifd__gescape(ifd__gesc_t dialect, char e, const char **s, const char *end, uint32_t *cp);

/* Appends a canonical serialization of s (each stack's positions, top
 * first, then a separator) to buf (grown with realloc). Returns the
 * length or -1 on allocation failure. */
long ifd__gstate_key(const ifd__gstate_t *s, uint32_t **buf, size_t *cap);

/*
 * The frames of s above the longest stack suffix that every stack of s has
 * as a proper suffix (the "continuation", *suffix): *out holds s's stacks
 * with that suffix cut off (new nodes in m, hashed as the shorter stacks;
 * accept false). A token is allowed from s exactly when it is alive at its
 * end from *out (some stack left), or when *out completes (accept) after a
 * prefix of it and the rest is allowed by the continuation. No common
 * suffix (or s->accept, or no stack): *suffix NULL and *out = *s.
 * lower > 0 cuts that many nodes lower (a shorter suffix, a bigger frame;
 * past the bottom: none). 0 or IFD_ENOMEM.
 */
int ifd__gstate_cut(ifd__gmem_t *m, const ifd__gstate_t *s, uint32_t lower, ifd__gstate_t *out,
                    const ifd__gnode_t **suffix);

/* The state once the frames above `suffix` (ifd__gstate_cut's) complete:
 * suffix's position expanded under its parents (NULL: the root complete,
 * accept only). Allocated from m. 0, IFD_ETOOBIG, IFD_ENOMEM. */
int ifd__grammar_resume(const ifd_grammar_t *g, ifd__gmem_t *m, const ifd__gnode_t *suffix,
                        ifd__gstate_t *out);

#endif
