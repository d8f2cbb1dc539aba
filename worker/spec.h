/*
 * spec.h — the per-sequence policy of speculative decoding
 * (docs/speculative.md): the setting a request resolves to, how many tokens
 * to propose this step, and how that number follows acceptance. The engine
 * (engine.c) owns the sequence and calls these; the proposals themselves
 * come from the n-gram proposer (ngram.h).
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
 * verifications in a row accepted nothing); n-gram bounds. */
typedef struct {
    int32_t kmax, k, nmin, nmax, wait, misses;
} ifd_spec_state_t;

/* 0 when every field of p is in its range, else IFD_EINVAL. */
int ifd_spec_check(const ifd_spec_params_t *p);

/* The state of a request's setting `req` over the engine's `eng`: a field
 * req leaves 0 is eng's, and eng's 0 the default (k 4, n-grams of 1..4); a
 * bound req sets moves the other when they cross. Off when !usable (no KV
 * cache). 0, or IFD_EINVAL for a req out of range (*st untouched). */
int ifd_spec_resolve(ifd_spec_state_t *st, const ifd_spec_params_t *req,
                     const ifd_spec_params_t *eng, bool usable);

/* Proposes at most min(k, limit) tokens after hist [n_hist] into out, and
 * returns how many (0: off, waiting after misses, no room, no match). A
 * step of a sequence whose k fell to 0 counts down its wait, then probes
 * with k 1. */
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
