/*
 * sample.h — token selection on the GPU (sample.cu): greedy argmax and
 * seeded random sampling with temperature, min-p, top-k and top-p, one
 * token per row of logits, reproducing the CPU sampler bit for bit. See
 * cuda_types.h for the conventions every launcher follows.
 *
 * The definition is worker/sampler.h's, steps 4-7 (greedy below
 * IFD_SAMPLER_GREEDY_TEMP; integer weights from kernels/sampling_math.h;
 * min-p, then top-k, then top-p survivors; the draw from kernels/rng.h at
 * (seed, position, counter 0)). Given the same processed logits (after logit
 * bias and penalties, steps 1-3, which the caller applies) and the same
 * parameters, a row yields exactly the token ifd_sampler_sample returns —
 * on any GPU, for any batch composition. Steps 1-3 are here too
 * (ifd_cuda_apply_penalties), for callers that keep the logits on the
 * device, and so is step 3b (ifd_cuda_apply_mask: a grammar's token mask,
 * computed on the host, applied to the row), and the logprobs of sampler.h
 * (ifd_cuda_logprobs: the scored token's logprob and rank and the top
 * alternatives — any k up to the vocabulary — or the logprobs of listed
 * ids, within float rounding of ifd_sampler_sample's, the same
 * ids in the same order), and the final logit soft-cap that comes before
 * all of them (ifd_cuda_softcap, the host's ifd_softcap bit for bit).
 */
#ifndef IFD_CUDA_SAMPLE_H
#define IFD_CUDA_SAMPLE_H

#include "cuda_types.h"

IFD_CUDA_API_BEGIN

/* One row's parameters (ifd_sampling_params_t's fields used by steps 4-7,
 * plus the row's position). Plain data, copied to the device by the caller. */
typedef struct {
    float temperature; /* >= 0; < IFD_SAMPLER_GREEDY_TEMP (1e-5) is greedy */
    int32_t top_k;     /* <= 0 or >= vocab: off */
    float top_p;       /* in [0, 1]; 1: off */
    float min_p;       /* in [0, 1]; 0: off */
    uint64_t seed;
    uint64_t position; /* the sampled token's index in its sequence */
} ifd_cuda_sample_params_t;

/*
 * tokens[r] = the token sampled from logits[r] with params[r]; -1 when the
 * row has a NaN or +inf logit, every logit is -inf, or its parameters are
 * out of range (the cases where ifd_sampler_sample fails with IFD_EINVAL).
 * params is a device array. vocab in [1, IFD_SAMPLING_MAX_VOCAB (2^20)].
 * Returns 0, IFD_EINVAL (shapes, NULL pointers), IFD_ECUDA.
 */
int ifd_cuda_sample(int32_t *IFD_CUDA_RESTRICT tokens,                        /* [n_rows] */
                    const float *IFD_CUDA_RESTRICT logits,                    /* [n_rows, vocab] */
                    const ifd_cuda_sample_params_t *IFD_CUDA_RESTRICT params, /* [n_rows] */
                    int n_rows, int vocab, ifd_cuda_stream_t stream);

/*
 * Steps 1-3 of the definition (logit bias, repetition, frequency and
 * presence penalties), in place and bit for bit as ifd_sampler_sample
 * computes them (IEEE float32 operations in the definition's order, no
 * contraction). Per row r, rows[r] says where its entries lie in the flat
 * bias and history arrays: bias entries are applied one after another in
 * entry order (an id may repeat); history entries hold DISTINCT ids with
 * their count of generated occurrences, | IFD_CUDA_HIST_PROMPT when the id
 * is also in the prompt (the caller builds them; rows without penalties
 * have n_hist 0). A NaN or +inf produced here is left in the row, where
 * ifd_cuda_sample reports it (-1), as ifd_sampler_sample fails then.
 * All arrays are device memory; ids must be in [0, vocab) (others are
 * skipped). Returns 0, IFD_EINVAL (shapes, NULL pointers), IFD_ECUDA.
 */
#define IFD_CUDA_HIST_PROMPT 0x80000000u

typedef struct {
    float repetition_penalty; /* 1: off */
    float frequency_penalty;
    float presence_penalty;
    int32_t bias0, n_bias; /* bias[bias0 .. bias0 + n_bias) */
    int32_t hist0, n_hist; /* hist[hist0 .. hist0 + n_hist) */
} ifd_cuda_penalty_row_t;

typedef struct {
    int32_t id;
    float bias;
} ifd_cuda_logit_bias_t;

typedef struct {
    int32_t id;
    uint32_t count; /* generated occurrences, | IFD_CUDA_HIST_PROMPT */
} ifd_cuda_hist_t;

int ifd_cuda_apply_penalties(
    float *IFD_CUDA_RESTRICT logits,                      /* [n_rows, vocab], in place */
    const ifd_cuda_penalty_row_t *IFD_CUDA_RESTRICT rows, /* [n_rows] */
    const ifd_cuda_logit_bias_t *IFD_CUDA_RESTRICT bias,  /* [Σ n_bias] */
    const ifd_cuda_hist_t *IFD_CUDA_RESTRICT hist,        /* [Σ n_hist] */
    int n_rows, int vocab, ifd_cuda_stream_t stream);

/*
 * Step 3b: for each of n_masks masks, logits row rows[j] gets -inf at
 * every id whose bit is clear in masks[j] (bit i % 32 of word i / 32, the
 * layout of ifd_constraint_mask), in place. A NaN or +inf logit is left as
 * it is even where masked, so ifd_cuda_sample still reports the row (-1),
 * as ifd_sampler_sample fails on it before masking. rows[j] in
 * [0, n_logit_rows) (others are skipped); a row may appear once.
 * Returns 0, IFD_EINVAL (shapes, NULL pointers), IFD_ECUDA.
 */
int ifd_cuda_apply_mask(float *IFD_CUDA_RESTRICT logits,         /* [n_logit_rows, vocab] */
                        const uint32_t *IFD_CUDA_RESTRICT masks, /* [n_masks, (vocab + 31) / 32] */
                        const int32_t *IFD_CUDA_RESTRICT rows,   /* [n_masks] */
                        int n_masks, int n_logit_rows, int vocab, ifd_cuda_stream_t stream);

/*
 * The final logit soft-cap in place: x = ifd_softcap(x, cap)
 * (kernels/sampling_math.h: c * tanh(x / c) in IEEE float32 operations,
 * the host's bits exactly), for n elements. cap > 0 and finite.
 * Returns 0, IFD_EINVAL, IFD_ECUDA.
 */
int ifd_cuda_softcap(float *IFD_CUDA_RESTRICT x, /* [n] */
                     int64_t n, float cap, ifd_cuda_stream_t stream);

/* Top alternatives ifd_cuda_logprobs returns inline, in the result itself
 * (IFD_SAMPLER_INLINE_LOGPROBS); more (a top k up to the vocabulary, or more
 * than this many logprob_token_ids) go to the request's `more` room. */
#define IFD_CUDA_MAX_LOGPROBS 20

/* One alternative in a request's `more` room: an id and its logprob. */
typedef struct {
    int32_t id;
    float logprob;
} ifd_cuda_lp_entry_t;

/* One row to score: its logits x (device memory, [vocab]), the id whose
 * logprob is wanted — token >= 0, or token < 0: tokens[tok_row], the id a
 * sampling kernel wrote there (-1 there: nothing is scored) — and either
 * the top n_top alternatives (n_top >= 0, min(n_top, vocab) of them), or,
 * with n_ids > 0, the logprobs of ids[0 .. n_ids) in that order (vLLM's
 * logprob_token_ids; ids in [0, vocab), device memory). When that count is
 * over IFD_CUDA_MAX_LOGPROBS the entries go to `more` (device memory,
 * [count], written by the kernel, which also uses it as its sort scratch),
 * else inline in the result; more may be NULL then. */
typedef struct {
    const float *x;
    int32_t token;
    int32_t tok_row;
    int32_t n_top;
    int32_t n_ids;
    const int32_t *ids;
    ifd_cuda_lp_entry_t *more;
} ifd_cuda_logprob_req_t;

/* The result, laid out as ifd_sample_result_t (sampler.h) up to its more_*
 * room. token = -1: not scored (the sampled token was -1, the row holds a
 * NaN or +inf, where ifd_sampler_logprobs fails with IFD_EINVAL, or the
 * request is malformed); the rest is then zero. n_top: the count of
 * entries (top or ids); top_* hold them when n_top <= IFD_CUDA_MAX_LOGPROBS,
 * else the request's `more` does (top_* zero). */
typedef struct {
    int32_t token;
    float logprob;
    int32_t rank;
    int32_t n_top;
    int32_t top_ids[IFD_CUDA_MAX_LOGPROBS];
    float top_logprobs[IFD_CUDA_MAX_LOGPROBS];
} ifd_cuda_logprob_t;

/*
 * Logprobs as sampler.h defines them, of each request's row x: with
 * m = max x and Z = the sum over the row of the step-5 integer weights
 * ifd_sampling_weight(x_i - m) (T = 1, exact), lse = m + log(Z / 2^43) in
 * double and logprob(v) = (float)(v - lse), -inf for v = -inf (all of a row
 * that is -inf everywhere); rank = the number of ids with x_i >= x_token;
 * the top n_top = min(n_top, vocab) ids by value, ties by ascending id
 * (-0 equal to +0), or the n_ids requested ids in their order. The same
 * ids, ranks and order as ifd_sampler_sample / ifd_sampler_logprobs; the
 * values within a double rounding of theirs (log() is the device's).
 * One block per request. A top k <= IFD_CUDA_MAX_LOGPROBS: each thread's
 * own sorted list, merged by k block-wide maxima. A larger k: a radix
 * select of the k-th largest (value, -id) key over the row (8-bit digits,
 * at most 8 passes, stopping once a digit's bucket is taken whole), the k
 * selected keys compacted into `more`, sorted there by a bitonic network
 * (O(k log^2 k) compare-exchanges, none past k), then turned into (id,
 * logprob) in place: no k x vocab work and no scratch but `more`.
 * tokens may be NULL when every token is >= 0. Returns 0, IFD_EINVAL
 * (shapes, NULL pointers; a request out of range — n_top < 0, n_ids < 0,
 * an id outside [0, vocab), no `more` for a count over
 * IFD_CUDA_MAX_LOGPROBS — is checked on the device and gets token -1),
 * IFD_ECUDA.
 */
int ifd_cuda_logprobs(ifd_cuda_logprob_t *IFD_CUDA_RESTRICT out,                /* [n] */
                      const ifd_cuda_logprob_req_t *IFD_CUDA_RESTRICT reqs,     /* [n] */
                      const int32_t *IFD_CUDA_RESTRICT tokens, /* [> max tok_row] or NULL */
                      int n, int vocab, ifd_cuda_stream_t stream);

IFD_CUDA_API_END

#endif
