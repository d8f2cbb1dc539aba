/*
 * worker_model.h — the model and tokenizer a serving worker runs (serve.c)
 * and sizes its KV pool for (the --kv-probe of worker_cli.c): either a model
 * file (GGUF or a Hugging Face directory) with its own tokenizer, or random
 * weights in a real shape (a deploy/shapes/ JSON file, ifd_model_load_random)
 * with the tokenizer of `model_path`, whose weights are then not read.
 *
 * Random weights: the shape's n_vocab is replaced by the tokenizer's
 * vocabulary size when they differ (ifd_shape_load_vocab, common/modelfile/shape.h),
 * so every sampled id decodes; the daemon reads the shape the same way for
 * the KV geometry and the context. Same shape, seed and tokenizer → the same weights on every
 * backend (CPU, CUDA, exact CUDA).
 *
 * A model file whose config has more vocabulary rows than its tokenizer has
 * tokens (Gemma 3 4B) is loaded with the rows past the tokenizer's masked
 * (ifd_model_load_source): no sampled id is one without text.
 *
 * Ownership: *model and *tok belong to the caller (ifd_model_destroy,
 * ifd_tokenizer_destroy); the backend must outlive the model. Threading:
 * call from one thread.
 */
#ifndef IFD_WORKER_MODEL_H
#define IFD_WORKER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *model_path; /* the model, or with shape: where the tokenizer comes from */
    const char *shape;      /* a shape JSON file: random weights; NULL or "": a model file */
    uint64_t weights_seed;  /* the random weights' seed */
} ifd_worker_model_opts_t;

/* Loads the model onto `be` and its tokenizer. 0, or the loader's error
 * with its message in errbuf; nothing is left allocated on failure. */
int ifd_worker_model_load(const ifd_worker_model_opts_t *o, ifd_backend_t *be,
                          ifd_model_t **model, ifd_tokenizer_t **tok, char *errbuf,
                          size_t errlen);

#endif
