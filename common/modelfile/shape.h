/*
 * shape.h — a model's shape from a small JSON file (the files in deploy/shapes/),
 * for random-weight models (ifd_model_load_random): speed runs in real
 * shapes without downloading weights.
 *
 * The file: {"name": "...", "arch": "llama" | "gemma3", "n_layer",
 * "n_embd", "n_ff", "n_head", "n_head_kv", "head_dim", "n_vocab",
 * "rms_eps", "rope_base", and optionally "n_ctx_train" (4096),
 * "rope_freq_scale" (1), "rope_base_local" (10000), "sliding_window" (0),
 * "sliding_window_pattern" (gemma3: every Nth layer global, default 6)}.
 * Derived as the GGUF path does: n_rot = head_dim, attn_scale =
 * 1/sqrt(head_dim), gemma3's embedding scale sqrt(n_embd) and local layers.
 * Not modelled (they do not change speed): Llama 3's rope frequency
 * factors, a separate output matrix (random models tie it to the
 * embedding, same bytes per step).
 *
 * Pure apart from reading the file; thread-safe.
 */
#ifndef IFD_SHAPE_H
#define IFD_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "model_config.h"

/* Fills *cfg from the JSON file at `path`. 0, -errno (file), IFD_EFORMAT
 * (bad JSON, missing or out-of-range field; named in errbuf). */
int ifd_shape_load(ifd_model_config_t *cfg, const char *path, char *errbuf, size_t errlen);

/* The shape served with another model's tokenizer (inferd --random-weights,
 * worker/worker_model.h): as ifd_shape_load, then n_vocab set to the
 * tokenizer's n_vocab (when > 0 and different; logged), so every id the
 * model samples decodes. The daemon and its workers both call this, so
 * they agree on the model. */
int ifd_shape_load_vocab(ifd_model_config_t *cfg, const char *path, uint32_t n_vocab,
                         char *errbuf, size_t errlen);

#endif
