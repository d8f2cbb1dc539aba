/*
 * model_config.h — a model's hyper-parameters, resolved from GGUF metadata
 * with llama.cpp's defaults (MODEL-FORMATS.md §1.6, Appendix B), or from a
 * Hugging Face directory's config.json (+ generation_config.json) with
 * transformers' defaults (§4.2, §4.3).
 *
 * Plain data: the struct is filled by ifd_model_config_from_gguf or
 * ifd_model_config_from_hf and may be copied freely. Strings are copied into
 * fixed arrays, so it holds no pointers into the GGUF mapping.
 *
 * Architectures: llama (GGUF `llama`; HF LlamaForCausalLM and
 * MistralForCausalLM, whose sliding window, when configured, marks every
 * layer local), gemma3 (GGUF `gemma3`; HF Gemma3ForCausalLM and the text
 * part of Gemma3ForConditionalGeneration), qwen2 and qwen3 (GGUF
 * `qwen2`/`qwen3`; HF Qwen2ForCausalLM / Qwen3ForCausalLM).
 */
#ifndef IFD_MODEL_CONFIG_H
#define IFD_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"

typedef enum {
    IFD_ARCH_LLAMA = 0,
    IFD_ARCH_GEMMA3 = 1,
    IFD_ARCH_QWEN2 = 2,
    IFD_ARCH_QWEN3 = 3,
} ifd_arch_t;

/* Where the weights come from. */
typedef enum {
    IFD_FORMAT_GGUF = 0,
    IFD_FORMAT_HF = 1, /* config.json + safetensors */
} ifd_model_format_t;

#define IFD_MAX_EOS_IDS 8

/* generation_config.json's defaults (HF only; `present` false otherwise).
 * Negative / zero values mean "not given". The daemon applies the sampling
 * ones to requests that do not set them (docs/models.md, vLLM's
 * --generation-config auto); do_sample is shown, not applied (vLLM ignores
 * it too). */
typedef struct {
    bool present;
    bool do_sample;           /* false: HF decodes greedily by default */
    float temperature;        /* < 0: not given */
    float top_p;              /* < 0: not given */
    int32_t top_k;            /* < 0: not given */
    float min_p;              /* < 0: not given */
    float repetition_penalty; /* < 0: not given */
    int32_t max_new_tokens;   /* <= 0: not given */
    uint32_t n_eos;
    int32_t eos_ids[IFD_MAX_EOS_IDS];
} ifd_gen_defaults_t;

#define IFD_MAX_LAYERS 256

typedef struct {
    ifd_arch_t arch;
    char arch_name[32]; /* "llama", "gemma3", "qwen2", "qwen3" (the GGUF names) */
    char name[128];     /* general.name, or "" (HF: the directory's name) */
    ifd_model_format_t format;
    char hf_arch[64];   /* HF: architectures[0] ("MistralForCausalLM"); GGUF: "" */
    char dtype[16];     /* HF: torch_dtype ("bfloat16"); GGUF: "" */
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_ff;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;   /* attention.key_length (= value_length), default n_embd / n_head */
    uint32_t n_rot;      /* rope.dimension_count, default head_dim */
    uint32_t n_vocab;    /* rows of token_embd */
    /* Ids a sampler may pick: the tokenizer's size where it is below n_vocab (Gemma 3
     * 4B: 262208 rows, 262145 tokens); the model's logits of ids >= it are -inf. 0 (what
     * the file readers leave): n_vocab. Set by whoever knows the tokenizer
     * (ifd_model_load_source, a caller of ifd_model_load_random). */
    uint32_t n_vocab_valid;
    uint32_t n_ctx_train;
    float rms_eps;
    float rope_base;        /* global layers */
    float rope_freq_scale;  /* 1 / rope.scaling.factor for linear scaling, else 1 */
    float rope_base_local;  /* local (sliding-window) layers: gemma3 1e4, else rope_base */
    float rope_freq_scale_local; /* gemma3: 1 (never scaled), else rope_freq_scale */
    bool rope_neox;         /* RoPE pairs (i, i + n_rot/2): gemma3, qwen2/3 and every HF
                             * checkpoint; false: interleaved (2i, 2i+1), GGUF llama, whose
                             * converter permuted Q/K rows (MODEL-FORMATS.md §2.4) */
    uint32_t sliding_window; /* tokens seen by local layers (i - j < window); 0 = none */
    bool layer_is_local[IFD_MAX_LAYERS]; /* sliding-window layers (gemma3, Mistral) */
    float attn_scale;       /* 1/sqrt(head_dim); gemma3 HF: query_pre_attn_scalar^-1/2 */
    float embd_scale;       /* 1, or sqrt(n_embd) (gemma3) */
    bool has_rope_freqs;    /* llama3 frequency factors: GGUF tensor, or HF rope_scaling */
    bool has_qk_norm;       /* per-head RMSNorm of q and k before RoPE (gemma3, qwen3) */
    bool has_attn_bias;     /* q/k/v projection biases (qwen2; llama attention_bias) */
    bool tied_embeddings;   /* logits through token_embd (no separate output matrix) */
    float final_logit_softcap; /* logits = c·tanh(logits/c) when > 0 */
    /* HF rope_scaling {"rope_type": "llama3", ...}: see ifd_model_config_rope_factors */
    float llama3_factor, llama3_low_freq, llama3_high_freq;
    uint32_t llama3_orig_ctx;
    ifd_gen_defaults_t gen;
} ifd_model_config_t;

/*
 * Reads the hyper-parameters of `g`. Returns 0; IFD_ENOTSUP for an
 * architecture other than llama/gemma3 (message names it); IFD_EFORMAT for
 * missing or inconsistent required keys. Messages go to errbuf (or the log
 * when errbuf is NULL).
 */
int ifd_model_config_from_gguf(ifd_model_config_t *cfg, const ifd_gguf_t *g, char *errbuf,
                               size_t errlen);

/*
 * Reads `dir`/config.json (and generation_config.json when present) of a
 * Hugging Face model directory. Tensor-derived fields are left for the
 * weight source to check (n_vocab comes from vocab_size; has_rope_freqs is
 * set for llama3 rope scaling). Returns 0; -errno when config.json cannot be
 * read; IFD_EFORMAT for invalid JSON or a missing/ill-typed required key
 * (named); IFD_ENOTSUP for an architecture, activation, rope scaling type or
 * option inferd does not run (named). Message to errbuf or the log.
 */
int ifd_model_config_from_hf(ifd_model_config_t *cfg, const char *dir, char *errbuf,
                             size_t errlen);

/* Llama 3 RoPE frequency factors (n_rot / 2 floats into out), as llama.cpp's
 * converter stores them in rope_freqs.weight (MODEL-FORMATS.md §2.4), from
 * cfg's llama3_* fields. Pure. */
void ifd_model_config_rope_factors(const ifd_model_config_t *cfg, float *out);

/* "gguf" or "hf". */
const char *ifd_model_format_name(ifd_model_format_t f);

/* Sliding-window layers of cfg (layer_is_local with a window > 0). Pure. */
int ifd_model_n_local_layers(const ifd_model_config_t *cfg);

/* The default model's file name and where deploy/fetch-model.sh stores it:
 * ${INFERD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/models}/FILE.
 * Writes the path into buf (truncated to len) whether or not the file
 * exists. Thread-safe (reads the environment only). */
#define IFD_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
void ifd_default_model_path(char *buf, size_t len);

#endif
