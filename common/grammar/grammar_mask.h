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
 * Frame masks (xgrammar's "adaptive token mask cache", in this automaton's
 * terms), for states that take many bytes next (≥ IFD_GFRAME_MIN_BYTES: the
 * inside of a string). A state's stacks share a continuation: below the
 * frames of the lexeme being matched (a string's rule and its character
 * rules) lies the rest of the document, different at every place a string
 * appears. Cut off (ifd__gstate_cut; up to two nodes lower when the frame
 * would complete at once and leave over a quarter of the vocabulary to
 * check), what is left is keyed canonically: its
 * stacks and the positions reachable within a horizon of h bytes, numbered
 * in the order met, with their byte sets and alternatives — the key does not
 * depend on the grammar around it, nor on what lies farther than h (h is the
 * longest token when the frame's grammar is small, else
 * IFD_GFRAME_HORIZON: a count `x{0,99}` then looks the same for every count
 * left past h). Its mask splits in three: the tokens of at most h bytes the
 * frame allows on its own, whatever follows; the (token, prefix length)
 * pairs where the frame completes with bytes left, checked on each use from
 * the state's own continuation (`",` `"}`); and the tokens longer than h,
 * checked on each use from the state. Everything else the frame refuses by
 * itself. A miss in the per-state mask cache then costs a copy and those
 * short checks instead of a walk of the whole trie. Frame masks come from:
 * - the vocabulary: ifd_vocab_prewarm (ifd_vocab_create_tokenizer runs it
 *   on the schema converter's grammar of a fixed schema — plain, minLength,
 *   maxLength strings and the common formats — along one fixed instance, and
 *   keeps the frames that allow many tokens) — at most IFD_VOCAB_FRAMES,
 *   computed once per tokenizer when it is loaded, read-only afterwards;
 * - the grammar: a frame met for the first time whose quick walk
 *   (IFD_GWALK_QUICK trie nodes) does not finish is computed by one walk and
 *   kept with the grammar (at most IFD_GFRAME_MAX), so the next place of the
 *   grammar with the same frame (another string property, the next count)
 *   pays only the use.
 * A frame whose key passes IFD_GFRAME_KEY_MAX positions, or a state without
 * a common continuation (the root level), is walked as before. Masks are
 * exact either way (tests compare them with ifd_constraint_mask_brute). One
 * difference in errors: a state at the matcher's limits
 * (IFD_GRAMMAR_MAX_STACKS, expansion depth) may get its mask through its
 * frame where a walk from the whole state would be refused with IFD_ETOOBIG.
 * Memory: a frame mask is V/8 bytes (or 4 per token when it allows at most
 * IFD_GFRAME_LIST) plus 7 bytes per pair and 6 per long token; SmolLM2's
 * vocabulary holds 110 of them in 1.1 MB; a grammar's are freed with it.
 *
 * Ownership and threading: a vocab is immutable once created (and, when
 * ifd_vocab_prewarm is called directly, once that returns) and shareable
 * between threads; a store and its constraints belong to one thread (the
 * engine loop). Constraints hold a reference on their grammar, and the
 * store and vocab must outlive them.
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
#define IFD_GMASK_WORK       (2u << 20)
#define IFD_VOCAB_FRAMES     128  /* frame masks precomputed per vocabulary */
#define IFD_GFRAME_MAX       256  /* frame masks computed per grammar */
#define IFD_GFRAME_MIN_BYTES 64   /* next bytes a state takes for a frame mask to be tried */
#define IFD_GWALK_QUICK      1024 /* trie nodes walked before a frame mask is looked for */
#define IFD_GWALK_FILTER_MIN 8    /* stacks for a walk state to get a next-byte filter */
#define IFD_GFRAME_LIST      1024 /* a frame's own tokens kept as a list up to this many */
#define IFD_GFRAME_KEY_MAX   1024 /* positions of a frame's key (else no frame mask) */
#define IFD_GFRAME_HORIZON   16   /* bytes a frame's key looks ahead (longer tokens: checked) */

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

/*
 * Precomputes the frame masks (see above) of every state the grammar `text`
 * (len bytes) meets along each of texts[0..n) (NUL-terminated, each a prefix
 * of a sentence of the grammar), into v, up to IFD_VOCAB_FRAMES. Not thread
 * safe: call it before v is shared. 0; the compile errors of
 * ifd_grammar_compile (message in err); IFD_EINVAL when a text leaves the
 * grammar; IFD_ENOMEM. Frame masks computed before an error are kept (they
 * are exact).
 */
int ifd_vocab_prewarm(ifd_vocab_t *v, const char *text, size_t len, const char *const *texts,
                      size_t n_texts, char *err, size_t errlen);

void ifd_vocab_destroy(ifd_vocab_t *v); /* NULL is a no-op */
/* Frame masks held by the vocabulary (ifd_vocab_prewarm), and into *bytes
 * (when not NULL) the memory they take. */
size_t ifd_vocab_frames(const ifd_vocab_t *v, size_t *bytes);
int32_t ifd_vocab_size(const ifd_vocab_t *v);
size_t ifd_vocab_trie_nodes(const ifd_vocab_t *v);

typedef struct ifd_gstore ifd_gstore_t;

/* A store for masks over vocab (borrowed). 0 or IFD_ENOMEM. */
int ifd_gstore_create(const ifd_vocab_t *vocab, ifd_gstore_t **out);
/* Every constraint of the store must be destroyed first. NULL is a no-op. */
void ifd_gstore_destroy(ifd_gstore_t *s);

typedef struct {
    uint64_t compiles;     /* grammars compiled */
    uint64_t mask_hits;    /* masks served from a cache */
    uint64_t mask_walks;   /* masks computed by walking the trie */
    uint64_t frame_shared; /* masks from a frame mask of the vocabulary */
    uint64_t frame_local;  /* masks from a frame mask of the grammar */
    uint64_t frame_builds; /* frame masks computed (one walk each) */
    uint64_t filter_skips; /* trie steps refused by a state's next-byte filter, no advance */
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
