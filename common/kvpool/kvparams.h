/*
 * The KV pool's geometry for a model: ifd_kvpool_params_t filled in from a
 * model's hyper-parameters (model_config). Kept apart from kvpool.h so that
 * the pool itself knows nothing of model files; only the code that sizes a
 * pool for a model (worker, daemon, benchmarks) includes this.
 *
 * Both functions are pure: no allocation, any thread.
 */
#ifndef IFD_KVPOOL_KVPARAMS_H
#define IFD_KVPOOL_KVPARAMS_H

#include <stdbool.h>

#include "kvpool/kvpool.h"
#include "modelfile/model_config.h"

/* ifd_kvpool_default_params() with the model's KV geometry (n_layers,
 * n_kv_heads, head_dim) filled in, and f32 K/V; the caller sets the rest
 * (block count or budget, workers, dtype, fingerprint). */
ifd_kvpool_params_t ifd_kvpool_model_params(const ifd_model_config_t *cfg);

/* The KV geometry of a model whose local layers keep their K/V in a pool
 * of their own (docs/models.md, "Gemma 3 local layers"): *global gets the
 * other layers (n_layers = n_layer - local ones), *local the local layers,
 * both otherwise as ifd_kvpool_model_params. Returns false (and both =
 * ifd_kvpool_model_params) when cfg has no local layers or only local ones
 * (a model whose every layer is local, Mistral, keeps one pool). */
bool ifd_kvpool_model_params_split(const ifd_model_config_t *cfg, ifd_kvpool_params_t *global,
                                   ifd_kvpool_params_t *local);

#endif
