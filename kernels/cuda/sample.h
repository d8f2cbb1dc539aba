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
 * device; the grammar masks of step 3b are not (constrained rows are
 * sampled on the host).
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

IFD_CUDA_API_END

#endif
