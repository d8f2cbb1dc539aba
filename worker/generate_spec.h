/*
 * generate_spec.h — offline generation with speculative decoding
 * (`inferd-worker --prompt ... --spec ngram|draft`; docs/speculative.md):
 * one sequence served by the engine (worker/engine.h) with its spec setting,
 * where ifd_generate (generate.h) has no engine and so no verification step.
 * The engine's verification makes the tokens those of plain decoding
 * (greedy and seeded alike); only the number of forwards changes, which the
 * stats report.
 *
 * It takes ifd_generate_params_t and fills ifd_generate_result_t as
 * ifd_generate does, less what the engine cannot do: no --dump-logits, no
 * --no-kv-cache, no images and no separate local-layer pool (those are
 * IFD_ENOTSUP). prefill_chunk is the engine's step budget.
 *
 * Ownership: the model and the draft are borrowed; the result's tokens are
 * the caller's (ifd_generate_result_free). Threading: one call at a time
 * per model (and draft).
 */
#ifndef IFD_GENERATE_SPEC_H
#define IFD_GENERATE_SPEC_H

#include <stdint.h>

#include "generate.h"
#include "model.h"
#include "spec.h"

typedef struct {
    ifd_spec_method_t method; /* IFD_SPEC_NGRAM or IFD_SPEC_DRAFT (IFD_SPEC_OFF: plain, through
                               * the engine all the same) */
    int num_tokens;           /* k, 1..IFD_SPEC_MAX_TOKENS; 0: the engine's default (4) */
    int ngram_min, ngram_max; /* the n-gram proposer's n (0: the engine's defaults) */
    ifd_model_t *draft;       /* IFD_SPEC_DRAFT: the draft model on the model's backend; its
                               * tokenizer is the caller's to check
                               * (ifd_spec_draft_check_tokenizers) */
    int draft_step_tokens;    /* the draft's catch-up tokens a step (0: the step budget) */
} ifd_generate_spec_params_t;

/* What speculation did: verifications, proposed and accepted tokens, engine
 * steps (forwards of the model). */
typedef struct {
    uint64_t drafts, draft_tokens, accepted_tokens, steps;
} ifd_generate_spec_stats_t;

/* Generates for prompt[0..n_prompt) as ifd_generate does, through the
 * engine with speculation s. 0; IFD_EINVAL (empty prompt, bad parameters,
 * prompt + n_predict beyond the model's context); IFD_ENOTSUP (dump_logits,
 * use_cache off, images, local_pool, or a draft without a draft model); a
 * pool, drafter or model error. st may be NULL. */
int ifd_generate_spec(ifd_model_t *m, const int32_t *prompt, int n_prompt,
                      const ifd_generate_params_t *p, const ifd_generate_spec_params_t *s,
                      ifd_generate_result_t *r, ifd_generate_spec_stats_t *st);

#endif
