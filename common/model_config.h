/*
 * model_config.h — a model's hyper-parameters, resolved from GGUF metadata
 * with llama.cpp's defaults (MODEL-FORMATS.md §1.6, Appendix B).
 *
 * Plain data: the struct is filled by ifd_model_config_from_gguf and may be
 * copied freely. Strings are copied into fixed arrays, so it holds no
 * pointers into the GGUF mapping.
 */
#ifndef IFD_MODEL_CONFIG_H
#define IFD_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "kvpool.h"

typedef enum {
    IFD_ARCH_LLAMA = 0,
    IFD_ARCH_GEMMA3 = 1,
} ifd_arch_t;

#define IFD_MAX_LAYERS 256

typedef struct {
    ifd_arch_t arch;
    char arch_name[32]; /* "llama", "gemma3" */
    char name[128];     /* general.name, or "" */
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_ff;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;   /* attention.key_length (= value_length), default n_embd / n_head */
    uint32_t n_rot;      /* rope.dimension_count, default head_dim */
    uint32_t n_vocab;    /* rows of token_embd */
    uint32_t n_ctx_train;
    float rms_eps;
    float rope_base;        /* global layers */
    float rope_freq_scale;  /* 1 / rope.scaling.factor for linear scaling, else 1 */
    float rope_base_local;  /* gemma3 sliding layers (never scaled) */
    uint32_t sliding_window; /* gemma3: tokens seen by local layers; 0 = none */
    bool layer_is_local[IFD_MAX_LAYERS]; /* gemma3: sliding-window layers */
    float attn_scale;       /* 1/sqrt(head_dim) */
    float embd_scale;       /* 1 (llama) or sqrt(n_embd) (gemma3) */
    bool has_rope_freqs;    /* llama3 frequency factors tensor present */
} ifd_model_config_t;

/*
 * Reads the hyper-parameters of `g`. Returns 0; IFD_ENOTSUP for an
 * architecture other than llama/gemma3 (message names it); IFD_EFORMAT for
 * missing or inconsistent required keys. Messages go to errbuf (or the log
 * when errbuf is NULL).
 */
int ifd_model_config_from_gguf(ifd_model_config_t *cfg, const ifd_gguf_t *g, char *errbuf,
                               size_t errlen);

/* ifd_kvpool_default_params() with the model's KV geometry (n_layers,
 * n_kv_heads, head_dim) filled in, and f32 K/V; the caller sets the rest
 * (block count or budget, workers, dtype, fingerprint). Pure. */
ifd_kvpool_params_t ifd_model_kvpool_params(const ifd_model_config_t *cfg);

/* The default model's file name and where deploy/fetch-model.sh stores it:
 * ${INFERD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/models}/FILE.
 * Writes the path into buf (truncated to len) whether or not the file
 * exists. Thread-safe (reads the environment only). */
#define IFD_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
void ifd_default_model_path(char *buf, size_t len);

#endif
