/*
 * grammar_mask.h — token-level constraints for the sampler: which tokens
 * of the vocabulary may come next under a grammar (common/grammar/grammar.h).
 *
 * - ifd_vocab_t: every token's bytes in a trie (preorder arrays with
 *   subtree ends), built once per tokenizer. Tokens with no bytes (control
 *   tokens, unused slots) are never allowed, except the end-of-generation
 *   ids, which are allowed exactly when the grammar's sentence is complete.
 * - ifd_gstore_t: the worker's compiled grammars keyed by their text, each
 *   with a cache of masks keyed by the matcher state; a grammar stays
 *   cached (up to IFD_GSTORE_KEEP unused ones) so repeated schemas compile
 *   once and mostly hit the mask cache.
 * - ifd_constraint_t: one sequence's grammar state. Its state is a pure
 *   function of the tokens generated so far: ifd_constraint_mask takes the
 *   whole generated history, consumes what it has not seen yet, and replays
 *   from the start if the history does not extend what it consumed — so a
 *   request resumed on another worker (its streamed tokens passed as
 *   generated) gets exactly the same masks.
 *
 * Mask computation on a cache miss walks the trie once from the current
 * state, advancing the pushdown automaton byte by byte and skipping every
 * subtree whose prefix is rejected. The states met are interned per grammar
 * with their successor per byte (a lazily built DFA over the automaton's
 * states), so a walk through states seen before — the inside of a JSON
 * string at every character — costs a table lookup per trie node.
 *
 * Ownership and threading: a vocab is immutable and shareable; a store and
 * its constraints belong to one thread (the engine loop). Constraints hold
 * a reference on their grammar, and the store and vocab must outlive them.
 */
#ifndef IFD_GRAMMAR_MASK_H
#define IFD_GRAMMAR_MASK_H

#include "grammar.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

#define IFD_GSTORE_KEEP     8    /* unused grammars kept compiled */
#define IFD_GMASK_CACHE_MAX 1024 /* cached masks per grammar */
#define IFD_GDFA_MAX        8192 /* memoized automaton states per grammar (1 KiB each) */
/* Stacks one mask may expand on a cache miss (about 100 ms of a slow core):
 * a grammar whose next step needs more is IFD_ETOOBIG for its sequence. */
#define IFD_GMASK_WORK      (2u << 20)

typedef struct ifd_vocab ifd_vocab_t;

/*
 * A vocabulary from raw token bytes: token i is bytes[i][0..lens[i]) (len 0:
 * never allowed). eog[0..n_eog) are the end-of-generation ids. Everything is
 * copied. 0 and *out; IFD_EINVAL (n_vocab < 1, an eog id out of range);
 * IFD_ENOMEM.
 */
int ifd_vocab_create(int32_t n_vocab, const char *const *bytes, const uint32_t *lens,
                     const int32_t *eog, size_t n_eog, ifd_vocab_t **out);

/* The vocabulary of a tokenizer: each token's bytes (ifd_tokenizer_token_bytes)
 * except control/unused ones; eog from ifd_tokenizer_eog_ids. */
int ifd_vocab_create_tokenizer(const ifd_tokenizer_t *t, ifd_vocab_t **out);

void ifd_vocab_destroy(ifd_vocab_t *v); /* NULL is a no-op */
int32_t ifd_vocab_size(const ifd_vocab_t *v);
size_t ifd_vocab_trie_nodes(const ifd_vocab_t *v);

typedef struct ifd_gstore ifd_gstore_t;

/* A store for masks over vocab (borrowed). 0 or IFD_ENOMEM. */
int ifd_gstore_create(const ifd_vocab_t *vocab, ifd_gstore_t **out);
/* Every constraint of the store must be destroyed first. NULL is a no-op. */
void ifd_gstore_destroy(ifd_gstore_t *s);

typedef struct {
    uint64_t compiles;   /* grammars compiled */
    uint64_t mask_hits;  /* masks served from a cache */
    uint64_t mask_walks; /* masks computed by walking the trie */
} ifd_gstore_stats_t;

void ifd_gstore_stats(const ifd_gstore_t *s, ifd_gstore_stats_t *out);

typedef struct ifd_constraint ifd_constraint_t;

/* A constraint at the start of the grammar `text` (len bytes), compiled or
 * found in the store. 0 and *out; the compile errors of ifd_grammar_compile
 * with the message in err; IFD_ENOMEM. */
int ifd_constraint_create(ifd_gstore_t *s, const char *text, size_t len, ifd_constraint_t **out,
                          char *err, size_t errlen);
void ifd_constraint_destroy(ifd_constraint_t *c); /* NULL is a no-op */

/* The same from a grammar compiled elsewhere (ifd_grammar_serialize's n
 * words, as the router hands it on in ADD): loaded, not compiled; found in
 * the store by those words. IFD_EFORMAT (bad words, message in err),
 * IFD_ETOOBIG (words that load, but whose first step is over the matcher's
 * limits: corrupted words can be), IFD_ENOMEM. */
int ifd_constraint_create_compiled(ifd_gstore_t *s, const int32_t *words, size_t n,
                                   ifd_constraint_t **out, char *err, size_t errlen);

/*
 * Brings the constraint to the state after `generated` (n tokens: the
 * whole history, of which it has seen some) and writes the allowed tokens
 * of the next position into bits [(V + 31) / 32] (bit i of word i / 32 for
 * token i). Returns 0; IFD_EINVAL when the history contains a token the
 * grammar does not allow (the constraint is then reset and the call may be
 * retried with a valid history); IFD_ETOOBIG (an ambiguous grammar's
 * state limit, or a mask over IFD_GMASK_WORK); IFD_ENOMEM. A complete sentence with no possible
 * continuation allows only the end-of-generation ids (none: all zero).
 */
int ifd_constraint_mask(ifd_constraint_t *c, const int32_t *generated, size_t n, uint32_t *bits);

/* The same mask computed the slow way, for tests: every token's bytes
 * checked against the grammar one by one (no trie, no cache). */
int ifd_constraint_mask_brute(ifd_constraint_t *c, const int32_t *generated, size_t n,
                              uint32_t *bits);

#endif
