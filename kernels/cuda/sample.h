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
 * on any GPU, for any batch composition.
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

IFD_CUDA_API_END

#endif
