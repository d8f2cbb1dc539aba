/*
 * spec.h — the per-sequence policy of speculative decoding
 * (docs/speculative.md): the setting a request resolves to, how many tokens
 * to propose this step, and how that number follows acceptance. The engine
 * (engine.c) owns the sequence and calls these; the proposals themselves
 * come from the n-gram proposer (ngram.h) or from a draft model through the
 * ifd_spec_drafter_t interface below (spec_draft.h implements it).
 *
 * Pure: plain data, no allocation. Any thread (one per state).
 */
#ifndef IFD_SPEC_H
#define IFD_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "ngram.h"

#define IFD_SPEC_MAX_TOKENS 16 /* proposed tokens per sequence and step at most */

typedef enum {
    IFD_SPEC_DEFAULT = 0, /* a request: the engine's setting */
    IFD_SPEC_OFF = 1,
    IFD_SPEC_NGRAM = 2,
    IFD_SPEC_DRAFT = 3, /* a draft model's greedy proposals (engine params: drafter) */
} ifd_spec_method_t;

/* A speculation setting (engine params, and a request's override). */
typedef struct {
    ifd_spec_method_t method;
    int32_t num_tokens; /* k, 1..IFD_SPEC_MAX_TOKENS; 0: the engine's (default 4) */
    int32_t ngram_min;  /* 1..IFD_NGRAM_MAX_N; 0: the engine's (default 1) */
    int32_t ngram_max;  /* ngram_min..IFD_NGRAM_MAX_N; 0: the engine's (default 4) */
} ifd_spec_params_t;

/* One sequence's speculation: kmax 0 is off; k the proposal length adapted
 * to recent acceptance (0: none for `wait` more steps, after `misses`
 * verifications in a row accepted nothing); n-gram bounds; the method
 * (IFD_SPEC_NGRAM or IFD_SPEC_DRAFT when on). */
typedef struct {
    int32_t kmax, k, nmin, nmax, wait, misses;
    ifd_spec_method_t method;
} ifd_spec_state_t;

/* One sequence's query to a model proposer (ifd_spec_drafter_t). */
typedef struct {
    void *seq;             /* in/out: the proposer's state of the sequence; NULL before its first */
    const int32_t *tokens; /* [n_tokens]: prompt + output so far (only read) */
    int32_t n_tokens;
    /* tokens wanted, 1..IFD_SPEC_MAX_TOKENS; 0: a feed (the sequence is
     * prefilling: tokens[0..n_tokens) are its own, up to the end of the
     * target's chunk this step; the proposer may compute their state
     * ahead of the first proposal, and proposes nothing) */
    int32_t k;
    int32_t *out;  /* [k] */
    int32_t n_out; /* out: tokens proposed, 0..k */
} ifd_spec_draft_query_t;

/* A model proposer as the engine sees it (engine params `drafter`; the
 * draft model of worker/spec_draft.h, or a fake in tests). Proposals must
 * be deterministic functions of the tokens (the engine's one-hot
 * verification rule is exact for those: docs/speculative.md). */
typedef struct {
    void *ctx;
    /* Proposes for q[0..n) at once (one batch across the sequences; the
     * engine calls it at most once a step, proposals first, then feeds):
     * sets each q[i].out / n_out (0 where it cannot, and for a feed: the
     * sequence then proposes nothing this step) and q[i].seq. 0, or an
     * error for the whole call (every n_out 0; the engine logs it and goes
     * on). */
    int (*propose)(void *ctx, ifd_spec_draft_query_t *q, int n);
    /* Forgets a sequence's state (preemption, the end of the sequence):
     * what it holds (the draft's KV blocks) goes back. seq NULL: a no-op. */
    void (*release)(void *ctx, void *seq);
} ifd_spec_drafter_t;

/* 0 when every field of p is in its range, else IFD_EINVAL. */
int ifd_spec_check(const ifd_spec_params_t *p);

/* The state of a request's setting `req` over the engine's `eng`: a field
 * req leaves 0 is eng's, and eng's 0 the default (k 4, n-grams of 1..4); a
 * bound req sets moves the other when they cross. Off when !usable (no KV
 * cache). 0, or IFD_EINVAL for a req out of range, or asking for
 * IFD_SPEC_DRAFT when !has_draft (no draft model) (*st untouched). */
int ifd_spec_resolve(ifd_spec_state_t *st, const ifd_spec_params_t *req,
                     const ifd_spec_params_t *eng, bool usable, bool has_draft);

/* How many tokens to propose this step, at most `limit` (0: off, waiting
 * after misses, no room). A step of a sequence whose k fell to 0 counts
 * down its wait, then probes with k 1. */
int32_t ifd_spec_want(ifd_spec_state_t *st, int32_t limit);

/* The n-gram proposal: at most ifd_spec_want(st, limit) tokens after hist
 * [n_hist] into out, and how many (0 also for no match). */
int32_t ifd_spec_propose(ifd_spec_state_t *st, const int32_t *hist, int32_t n_hist, int32_t limit,
                         int32_t *out);

/* The next proposal length after a verification that accepted `acc` of
 * `nd` proposed tokens: all accepted grows k by 2 (up to kmax), a partial
 * acceptance of a tokens makes it a + 1, none halves it; at 0 the sequence
 * proposes nothing for 8, 16, .. 64 steps (misses in a row), then probes.
 * So where proposals keep failing (open-ended text) a verification costs
 * one extra row now and then, and where they hold (copying) k stays up. */
void ifd_spec_adapt(ifd_spec_state_t *st, int32_t nd, int32_t acc);

#endif
