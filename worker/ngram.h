/*
 * ngram.h — the n-gram (prompt lookup) proposer of speculative decoding
 * (docs/speculative.md): proposes the tokens that followed the last
 * occurrence of the sequence's own suffix in its prompt and output.
 *
 * For n from max_n down to min_n, the last n tokens of the history are
 * looked for earlier in it (the occurrence must end before the history's
 * last token, so at least one token follows it); the most recent
 * occurrence of the longest n that has one wins, and the up to k tokens
 * that followed it are the proposal. The most recent occurrence because a
 * rewrite or an extraction copies the text it just passed (vLLM's ngram
 * proposer takes the earliest; for a history that repeats itself the two
 * differ only in which copy continues).
 *
 * Pure: no allocation, no state; O(n_hist * max_n) per call. Any thread.
 */
#ifndef IFD_NGRAM_H
#define IFD_NGRAM_H

#include <stdint.h>

/* Longest n-gram looked for at most (bounds the request field too). */
#define IFD_NGRAM_MAX_N 16

/* Writes up to k proposed tokens into out [k] and returns how many (0: no
 * match, or k <= 0, or an empty history). min_n is clamped to >= 1 and
 * max_n to <= IFD_NGRAM_MAX_N; min_n > max_n proposes nothing. hist
 * [n_hist] is only read. */
int32_t ifd_ngram_propose(const int32_t *hist, int32_t n_hist, int32_t min_n, int32_t max_n,
                          int32_t k, int32_t *out);

#endif
