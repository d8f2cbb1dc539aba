/*
 * sampler.h — choosing the next token from one row of logits: logit bias,
 * repetition / frequency / presence penalties, greedy or seeded random
 * sampling with temperature, min-p, top-k and top-p, and logprobs.
 *
 * Reproducibility: the random draw is a pure function of (processed logits,
 * parameters, seed, position), with randomness from kernels/rng.h keyed by
 * (seed, sequence position). A seed therefore yields the same tokens however
 * requests are batched, preempted or resumed on another worker, and the CUDA
 * sampling kernel must reproduce the definition below bit for bit.
 *
 * The definition (V = vocabulary size, l = the logits row, float32):
 *
 *  1. Logit bias: l[id] += bias for each entry, in entry order.
 *  2. Repetition penalty r (HF/vLLM): once per distinct token id present in
 *     prompt or generated tokens, l = l / r if l > 0, else l = l * r.
 *  3. Frequency penalty f and presence penalty p (OpenAI), over generated
 *     tokens only: with c = occurrences of the id among generated tokens,
 *     c > 0: l = l - f * (float)c, then l = l - p.
 *     Steps 1-3 are float32 operations in exactly this order (vLLM v1's order:
 *     bias before penalties).
 * 3b. Grammar: with a constraint, l = -inf for every token its mask (after
 *     the generated history) does not allow; with an allowed set (vLLM's
 *     allowed_token_ids), l = -inf for every token outside it too. The
 *     result is the "processed logits" l'. ifd_sampler_process_logits stops before this step.
 *     A NaN or +inf in the input, or produced by steps 1-3, is an error;
 *     -inf means "never sample this token".
 *  4. Greedy when temperature < IFD_SAMPLER_GREEDY_TEMP (vLLM's 1e-5): the
 *     token is argmax l', the lowest id among equal maxima. No randomness.
 *  5. Otherwise s_i = l'_i / T (IEEE float32 division; s = l' when T == 1;
 *     a CUDA kernel must not use fast division), m = max_i s_i,
 *     x_i = 0.0f if s_i == m, else s_i - m (float32),
 *     q_i = ifd_sampling_weight(x_i) (kernels/sampling_math.h): an integer
 *     weight in [0, 2^43], 2^43 for the maximum, 0 exactly when x_i < -30.
 *  6. Survivors, by three filters in this order, each keeping every token
 *     tied in value with one it keeps:
 *     a. min-p: A = {i : q_i >= qmin}, qmin = max(1, ceil((double)min_p * 2^43))
 *        (p_i >= min_p * p_max after temperature, as vLLM measures it; with
 *        min_p = 0 this only drops the weight-0 tokens);
 *     b. top-k: if 0 < k < |A|, B = {i in A : s_i >= the k-th largest s over
 *        A, counted with multiplicity}, else B = A. Ties at the boundary are
 *        all kept, like HF and vLLM, so more than k tokens may survive;
 *     c. top-p: if top_p < 1, with Q = sum of q over B,
 *        C = {i in B : s_i == m or
 *             (double)(sum of q_j over j in B with s_j > s_i) < (double)top_p * (double)Q},
 *        else C = B: the smallest set of most probable tokens whose mass
 *        reaches top_p, extended to whole ties. top_p = 0 keeps only the
 *        tokens with s_i == m (greedy unless the maximum is tied).
 *     The maximum survives every filter, so Z = sum of q over C >= 2^43.
 *  7. Draw: t = ifd_sampling_target(seed, position, Z) = floor(u * Z) with u
 *     the 53-bit uniform at (seed, position, counter 0); walking C in
 *     ascending token id and summing q, the token is the first id at which
 *     the running sum exceeds t.
 *
 * The probabilities drawn are exactly q_i / Z: within 1e-6 relative of
 * softmax(s) restricted to the survivors (the weights are float32
 * arithmetic, rounded to integers of 2^-43 of the maximum's); tokens more
 * than 30 nats below the maximum (after temperature) are never drawn.
 *
 * Logprobs (vLLM's default "raw_logprobs"): log-softmax of the model's raw
 * logits, before bias, penalties, temperature and truncation, so they do not
 * change with sampling settings (IFD_LOGPROBS_RAW). IFD_LOGPROBS_PROCESSED
 * gives the log-softmax of the processed logits l' (after steps 1-3, before
 * temperature and truncation) instead. The normalizer is the sum of the
 * step-5 integer weights at T = 1, so logprobs are within 1e-6 of the exact
 * log-softmax; they are not meant to match the GPU bit for bit. Tokens whose
 * logit is -inf get -inf.
 *
 * Position: the index the sampled token will take in its sequence, i.e.
 * prompt length + tokens generated so far. A request resumed elsewhere must
 * keep passing its already streamed tokens as "generated" (not as prompt) so
 * the frequency/presence penalties stay the same. Requests without a seed
 * should be given a random one by the caller; n > 1 choices of one request
 * need distinct seeds (e.g. seed + choice index), or they sample alike.
 *
 * Threading: a sampler is used by one thread at a time; create one per
 * thread to sample rows in parallel. Parameters (but the constraint),
 * logits and histories are only read, and need to live only for the
 * duration of the call. A request without a constraint pays one pointer
 * test for this step.
 */
#ifndef IFD_SAMPLER_H
#define IFD_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar_mask.h"
#include "proto/wire.h"

/* Temperatures below this are greedy (vLLM's _SAMPLING_EPS). */
#define IFD_SAMPLER_GREEDY_TEMP 1e-5f

/* Top alternatives a result holds in itself (OpenAI's top_logprobs limit,
 * and the CUDA logprobs kernel's); more (up to the vocabulary, vLLM's
 * --max-logprobs -1) go to caller-owned room (ifd_sample_result_t.more_*). */
#define IFD_SAMPLER_INLINE_LOGPROBS 20

/* logprob_token_ids a request may name at most: up to 20 fill the inline
 * room, more the caller's more_* room (as a top k does). */
#define IFD_SAMPLER_MAX_LP_IDS IFD_SAMPLER_MAX_VOCAB

/* Largest vocabulary supported (kernels/sampling_math.h's IFD_SAMPLING_MAX_VOCAB). */
#define IFD_SAMPLER_MAX_VOCAB (1 << 20)

typedef enum {
    IFD_LOGPROBS_RAW = 0,  /* log-softmax of the raw logits (vLLM's default) */
    IFD_LOGPROBS_PROCESSED /* log-softmax after bias and penalties, before temperature */
} ifd_logprobs_mode_t;

/* One logit_bias entry: bias is added to the logit of token id. The wire's
 * type itself (proto/wire.h), so a request's array passes from the ADD
 * frame to the sampler as it is, with no cast between look-alike types. */
typedef ifd_wire_logit_bias_t ifd_logit_bias_t;

typedef struct {
    float temperature;        /* >= 0; < IFD_SAMPLER_GREEDY_TEMP is greedy. Default 1 */
    int32_t top_k;            /* <= 0 or >= vocab: off. Default 0 */
    float top_p;              /* in [0, 1]; 1: off. Default 1 */
    float min_p;              /* in [0, 1]; 0: off. Default 0 */
    float repetition_penalty; /* > 0; 1: off. Default 1 */
    float frequency_penalty;  /* finite; 0: off. Default 0 */
    float presence_penalty;   /* finite; 0: off. Default 0 */
    /* Borrowed for the duration of each call; NULL when n_logit_bias is 0.
     * Ids must be in [0, vocab); biases finite or -inf. */
    const ifd_logit_bias_t *logit_bias;
    uint32_t n_logit_bias;
    /* -1: no logprobs; 0: the chosen token's only; 1..vocab: also that many
     * top alternatives (over IFD_SAMPLER_INLINE_LOGPROBS: into the result's
     * more_* room). Default -1 */
    int32_t n_logprobs;
    ifd_logprobs_mode_t logprobs_mode; /* default IFD_LOGPROBS_RAW */
    uint64_t seed;                     /* default 0 */
    /* Structured output (step 3b): NULL, or the sequence's grammar
     * constraint. It is the one parameter the sampler changes: each call
     * brings it to the history's generated tokens (grammar_mask.h). Owned by
     * whoever owns the request (the engine frees it with the sequence). */
    ifd_constraint_t *constraint;
    /* vLLM's allowed_token_ids (step 3b): NULL, or a bitmask of
     * (vocab + 31) / 32 words whose bit i % 32 of word i / 32 is set for
     * each id that may be drawn (ifd_sampling_allowed_mask). Borrowed for
     * the call; the engine keeps it with its sequence. */
    const uint32_t *allowed;
    /* vLLM's logprob_token_ids: with n_logprobs >= 0, the result's "top"
     * entries are these ids' logprobs, in this order, instead of the top
     * n_logprobs (n_lp_ids <= IFD_SAMPLER_MAX_LP_IDS, ids in [0, vocab));
     * NULL / 0: the top ones. Borrowed for the call. */
    const int32_t *lp_ids;
    uint32_t n_lp_ids;
} ifd_sampling_params_t;

/* The token history penalties look at. Either array may be NULL when its
 * count is 0; ids must be in [0, vocab). Borrowed for the call. */
typedef struct {
    const int32_t *prompt;
    size_t n_prompt;
    const int32_t *generated;
    size_t n_generated;
} ifd_sampler_history_t;

typedef struct {
    int32_t token;
    /* The rest is set only when params.n_logprobs >= 0 (else zeros). */
    float logprob; /* of token, in the chosen logprobs mode */
    int32_t rank;  /* 1 + number of other tokens with logprob >= token's (vLLM's rank) */
    int32_t n_top; /* min(n_logprobs, vocab) */
    /* Most probable first; equal logprobs by ascending id. Here when n_top
     * <= IFD_SAMPLER_INLINE_LOGPROBS (the CUDA kernel's layout, no
     * allocation for OpenAI's range), else in more_*: read them with
     * ifd_sample_top_ids / ifd_sample_top_logprobs. */
    int32_t top_ids[IFD_SAMPLER_INLINE_LOGPROBS];
    float top_logprobs[IFD_SAMPLER_INLINE_LOGPROBS];
    /* Caller-owned room for more_cap top entries, set before a call that may
     * give more than IFD_SAMPLER_INLINE_LOGPROBS (sized by the request's k,
     * e.g. per sequence); the sampler keeps these fields and only writes
     * into the arrays. NULL / 0 when k stays inline. */
    int32_t *more_ids;
    float *more_logprobs;
    int32_t more_cap;
} ifd_sample_result_t;

/* Where r's n_top alternatives are (inline or the caller's room). */
static inline const int32_t *ifd_sample_top_ids(const ifd_sample_result_t *r)
{
    return r->n_top > IFD_SAMPLER_INLINE_LOGPROBS ? r->more_ids : r->top_ids;
}
static inline const float *ifd_sample_top_logprobs(const ifd_sample_result_t *r)
{
    return r->n_top > IFD_SAMPLER_INLINE_LOGPROBS ? r->more_logprobs : r->top_logprobs;
}

typedef struct ifd_sampler ifd_sampler_t;

/* The defaults listed above: plain sampling at temperature 1, seed 0. */
ifd_sampling_params_t ifd_sampling_default_params(void);

/* Checks every parameter for a vocabulary of `vocab` tokens. Returns 0,
 * IFD_EINVAL for a value out of its documented range (NaN included), or
 * IFD_ERANGE for a logit_bias id outside [0, vocab). Thread-safe. */
int ifd_sampling_params_check(const ifd_sampling_params_t *params, int32_t vocab);

/* The allowed-set bitmask of ids[0..n) for ifd_sampling_params_t.allowed:
 * (vocab + 31) / 32 words in *out (caller frees). 0; IFD_EINVAL for n 0;
 * IFD_ERANGE for an id outside [0, vocab); IFD_ENOMEM. Thread-safe. */
int ifd_sampling_allowed_mask(const int32_t *ids, size_t n, int32_t vocab, uint32_t **out);

/* Allocates a sampler for rows of `vocab` logits, with all scratch memory it
 * will ever need (41.1 bytes per vocabulary entry: 10.3 MiB for 262144), so
 * sampling never allocates. Returns 0 and *out, IFD_EINVAL when vocab is not in
 * [1, IFD_SAMPLER_MAX_VOCAB], or IFD_ENOMEM. Free with ifd_sampler_destroy. */
int ifd_sampler_create(int32_t vocab, ifd_sampler_t **out);

/* Frees the sampler; NULL is ignored. */
void ifd_sampler_destroy(ifd_sampler_t *s);

/* The sampler's vocabulary size. */
int32_t ifd_sampler_vocab(const ifd_sampler_t *s);

/*
 * Samples one token from `logits` [vocab] (step 1-7 above) for the token at
 * `position` of its sequence, with `hist` (NULL = empty) for the penalties.
 * Fills *out (keeping its more_* room, which must hold min(n_logprobs, vocab)
 * entries when that is over IFD_SAMPLER_INLINE_LOGPROBS). Top k > 20 costs
 * a linear selection over the row plus a sort of k. Returns 0; IFD_EINVAL
 * for bad params, too little more_* room, a NaN or +inf logit
 * (before or after steps 1-3), a row that is -inf everywhere (also when the
 * grammar allows nothing) or a history the constraint rejects; IFD_ERANGE
 * for a history or logit_bias id outside [0, vocab). On error *out is
 * untouched and the sampler stays usable.
 */
int ifd_sampler_sample(ifd_sampler_t *s, const ifd_sampling_params_t *params, const float *logits,
                       const ifd_sampler_history_t *hist, uint64_t position,
                       ifd_sample_result_t *out);

/*
 * Raw logprobs of one row (IFD_LOGPROBS_RAW, as above) for a token that was
 * not sampled here — a prompt token's (vLLM's prompt_logprobs): out->token =
 * token, its logprob and rank, and the n_top (0..vocab; over
 * IFD_SAMPLER_INLINE_LOGPROBS into out's more_* room, as above) most
 * probable ids. Returns 0; IFD_EINVAL for a NaN or +inf logit, n_top out of
 * range or too little room; IFD_ERANGE for a token outside [0, vocab). Same threading as
 * ifd_sampler_sample.
 */
int ifd_sampler_logprobs(ifd_sampler_t *s, const float *logits, int32_t token, int32_t n_top,
                         ifd_sample_result_t *out);

/*
 * Steps 1-3 alone: writes the processed logits of `logits` [vocab] into
 * `out` [vocab] (may equal logits). For tests and for checking a GPU
 * implementation of the penalties. Same errors as ifd_sampler_sample, except
 * that an all -inf row is accepted.
 */
int ifd_sampler_process_logits(ifd_sampler_t *s, const ifd_sampling_params_t *params,
                               const float *logits, const ifd_sampler_history_t *hist, float *out);

#endif
