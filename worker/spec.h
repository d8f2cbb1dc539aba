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
/* k when neither the request nor the engine sets one (the daemon's
 * spec_tokens default too): docs/speculative.md, "Defaults" */
#define IFD_SPEC_DEFAULT_TOKENS 8
/* The n-gram proposer's probe during a back-off wait: a suffix match of at
 * least this many tokens (a copy resuming) proposes one token at once
 * instead of waiting the wait out (ifd_spec_propose) */
#define IFD_SPEC_PROBE_N 3

typedef enum {
    IFD_SPEC_DEFAULT = 0, /* a request: the engine's setting */
    IFD_SPEC_OFF = 1,
    IFD_SPEC_NGRAM = 2,
    IFD_SPEC_DRAFT = 3, /* a draft model's greedy proposals (engine params: drafter) */
} ifd_spec_method_t;

/* A speculation setting (engine params, and a request's override). */
typedef struct {
    ifd_spec_method_t method;
    int32_t num_tokens; /* k, 1..IFD_SPEC_MAX_TOKENS; 0: the engine's (default 8) */
    int32_t ngram_min;  /* 1..IFD_NGRAM_MAX_N; 0: the engine's (default 1) */
    int32_t ngram_max;  /* ngram_min..IFD_NGRAM_MAX_N; 0: the engine's (default 4) */
} ifd_spec_params_t;

/* One sequence's speculation: kmax 0 is off; k the proposal length adapted
 * to recent acceptance (0: none for `wait` more steps, after `misses`
 * verifications in a row accepted nothing); n-gram bounds; the method
 * (IFD_SPEC_NGRAM or IFD_SPEC_DRAFT when on); hits and fails: the
 * proposed tokens that stood and the verifications that rejected one,
 * both decayed by IFD_SPEC_DECAY a step (ifd_spec_rate). */
typedef struct {
    int32_t kmax, k, nmin, nmax, wait, misses;
    ifd_spec_method_t method;
    float hits, fails;
} ifd_spec_state_t;

/* The verification budget's cost model (ifd_spec_budget, docs/speculative.md
 * "Verification budget"). A sequence's acceptance estimate is the chance
 * that a proposed token stands given that the one before it stood:
 * (hits + W x PRIOR) / (hits + fails + W), its counts decayed by DECAY at
 * every step the sequence decodes with speculation on, so an old miss is
 * forgotten (half-life ~34 steps) and a sequence that stood down is tried
 * again once its estimate is back near the prior. PRIOR: a sequence that
 * never verified (SmolLM2's quiet runs: 0.51-0.91 per proposed token on the
 * input-grounded prompts, 0.78 on open chat past its first 128 tokens). */
#define IFD_SPEC_PRIOR        0.75f
#define IFD_SPEC_PRIOR_WEIGHT 2.0f
#define IFD_SPEC_DECAY        0.98f
/* The knee, in rows, where a step stops being bound by reading the weights
 * (engine.h spec_knee): the CPU backend's, fitted to SmolLM2-135M Q4_1 on
 * 2 threads (quiet, 2026-12-07: a step of 8 decode rows costs 2.5-2.7x one
 * of 1 row; with cost = W + c x rows that is W / c = 3.1-3.6); a GPU's
 * (weights streamed from HBM against tensor cores: far more rows per weight
 * read), not measured: a guess, to be timed on a device. */
#define IFD_SPEC_KNEE_CPU 3.5
#define IFD_SPEC_KNEE_GPU 64.0

/* One sequence's candidate proposal for ifd_spec_budget. */
typedef struct {
    int32_t n;    /* in: tokens proposed (or wanted from a draft model) */
    float p1, p;  /* in: its first token's and the later tokens' estimates (ifd_spec_rate), 0..1 */
    int32_t keep; /* out: how many of the n to verify, 0..n */
} ifd_spec_cand_t;

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
 * req leaves 0 is eng's, and eng's 0 the default (k IFD_SPEC_DEFAULT_TOKENS,
 * n-grams of 1..4); a bound req sets moves the other when they cross. Off
 * when !usable (no KV cache). 0, or IFD_EINVAL for a req out of range, or asking for
 * IFD_SPEC_DRAFT when !has_draft (no draft model) (*st untouched). */
int ifd_spec_resolve(ifd_spec_state_t *st, const ifd_spec_params_t *req,
                     const ifd_spec_params_t *eng, bool usable, bool has_draft);

/* How many tokens to propose this step, at most `limit` (0: off, waiting
 * after misses, no room). A step of a sequence whose k fell to 0 counts
 * down its wait, then probes with k 1. Each call with speculation on is a
 * step: it decays hits and fails by IFD_SPEC_DECAY. */
int32_t ifd_spec_want(ifd_spec_state_t *st, int32_t limit);

/* The n-gram proposal: at most ifd_spec_want(st, limit) tokens after hist
 * [n_hist] into out, and how many (0 also for no match). During a back-off
 * wait, a suffix match of max(nmin, IFD_SPEC_PROBE_N)..nmax tokens ends
 * the wait and proposes one token (the probe, k 1) at once. */
int32_t ifd_spec_propose(ifd_spec_state_t *st, const int32_t *hist, int32_t n_hist, int32_t limit,
                         int32_t *out);

/* The next proposal length after a verification that accepted `acc` of
 * `nd` proposed tokens: all accepted grows k by 2 (up to kmax), a partial
 * acceptance of a tokens makes it a + 1, none halves it; at 0 the sequence
 * proposes nothing for 8, 16, .. 64 steps (misses in a row), then probes.
 * So where proposals keep failing (open-ended text) a verification costs
 * one extra row now and then, and where they hold (copying) k stays up. */
void ifd_spec_adapt(ifd_spec_state_t *st, int32_t nd, int32_t acc);

/* The sequence's acceptance estimate p (IFD_SPEC_PRIOR above), 0..1, and
 * into *p1 (may be NULL) the optimistic one its first proposed token is
 * judged by: p plus one standard error, sqrt(p (1 - p) / (hits + fails +
 * W)), at most 1. The less evidence (a new sequence, or old misses
 * decayed), the higher p1 over p: a sequence that stood down is tried again
 * with one token once its misses are old enough, a new one at once (1 with
 * no evidence), while one with a long record is judged by its record. */
float ifd_spec_rate(const ifd_spec_state_t *st, float *p1);

/* Which proposed tokens of a step to verify (docs/speculative.md,
 * "Verification budget"). A step of T rows costs knee + T units (the
 * weights read once: knee rows' worth; then each row's work), and yields
 * one token a row of decode or prefill plus the proposals that stand: the
 * j-th proposed token of a sequence with estimates p1, p is expected to
 * stand with p1 x p^(j-1). Starting from base_rows (the step's rows without proposals),
 * the proposed token with the largest expected gain is added while that
 * gain exceeds the step's yield so far (expected tokens / cost), which is
 * what raises the yield; ties go to the earlier candidate. So at batch 1
 * (yield 1 / (knee + 1)) every likely proposal is verified, and once the
 * step's rows pass the knee only sequences whose proposals hold nearly
 * surely are. At most max_rows are kept (the step's room), the largest
 * gains first. Sets every c[i].keep; returns the rows kept in all. knee <=
 * 0: every proposal kept (no budget) up to max_rows, in order. Pure,
 * deterministic: the same inputs keep the same tokens (no timing reaches
 * it). */
int32_t ifd_spec_budget(ifd_spec_cand_t *c, int n, int32_t base_rows, double knee,
                        int32_t max_rows);

#endif
