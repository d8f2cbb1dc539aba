/*
 * model_config.c — resolves hyper-parameters from GGUF metadata, applying
 * llama.cpp's defaults where a key is absent, or from a Hugging Face
 * config.json, applying transformers' config-class defaults.
 */
#include "model_config.h"
#include "error.h"
#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A per-model u32 that may also be stored as a per-layer array (first
 * element used; all must agree for the architectures we run). */
static int ifd__get_u32_or_arr(const ifd_gguf_t *g, const char *key, uint32_t *out)
{
    int rc = ifd_gguf_get_u32(g, key, out);
    if (rc != IFD_ETYPE)
        return rc;
    const ifd_gguf_value_t *arr;
    if (ifd_gguf_get_arr(g, key, &arr) != 0 || arr->v.arr.count == 0)
        return IFD_ETYPE;
    ifd_gguf_value_t first, e;
    if (ifd_gguf_arr_get(g, arr, 0, &first) != 0)
        return IFD_ETYPE;
    for (uint64_t i = 1; i < arr->v.arr.count; i++) {
        if (ifd_gguf_arr_get(g, arr, i, &e) != 0 || e.v.u != first.v.u)
            return IFD_ENOTSUP;
    }
    if (first.type != IFD_GGUF_UINT32 && first.type != IFD_GGUF_INT32 &&
        first.type != IFD_GGUF_UINT64 && first.type != IFD_GGUF_UINT16)
        return IFD_ETYPE;
    *out = (uint32_t)first.v.u;
    return 0;
}

/* What the GGUF readers below share: the file, its architecture's key prefix
 * and the error buffer; key holds the last key built. */
typedef struct {
    const ifd_gguf_t *g;
    const char *path;
    const char *arch; /* the key prefix, general.architecture */
    char *errbuf;
    size_t errlen;
    char key[160];
} ifd__gg_t;

/* "<arch>.<suffix>", in x->key. */
static const char *ifd__gg_key(ifd__gg_t *x, const char *suffix)
{
    snprintf(x->key, sizeof x->key, "%s.%s", x->arch, suffix);
    return x->key;
}

/* A required per-model u32 (see ifd__get_u32_or_arr). */
static int ifd__gg_req_u32(ifd__gg_t *x, const char *suffix, uint32_t *out)
{
    int rc = ifd__get_u32_or_arr(x->g, ifd__gg_key(x, suffix), out);
    if (rc)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT, "%s: %s: %s", x->path, x->key,
                            rc == IFD_ENOTFOUND ? "missing" : "not a usable integer");
    return 0;
}

/* An optional one: dflt when absent. */
static int ifd__gg_opt_u32(ifd__gg_t *x, const char *suffix, uint32_t dflt, uint32_t *out)
{
    *out = dflt;
    int rc = ifd__get_u32_or_arr(x->g, ifd__gg_key(x, suffix), out);
    if (rc && rc != IFD_ENOTFOUND)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT, "%s: %s: not a usable integer",
                            x->path, x->key);
    return 0;
}

/* general.architecture (one we run) and general.name. */
static int ifd__gg_arch(ifd__gg_t *x, ifd_model_config_t *cfg)
{
    ifd_str_t s;
    if (ifd_gguf_get_str(x->g, "general.architecture", &s) != 0)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT,
                            "%s: general.architecture is missing", x->path);
    snprintf(cfg->arch_name, sizeof cfg->arch_name, "%.*s", (int)s.len, s.ptr);
    static const struct {
        const char *name;
        ifd_arch_t arch;
    } archs[] = {{"llama", IFD_ARCH_LLAMA},
                 {"gemma3", IFD_ARCH_GEMMA3},
                 {"qwen2", IFD_ARCH_QWEN2},
                 {"qwen3", IFD_ARCH_QWEN3}};
    size_t ai = 0;
    while (ai < sizeof archs / sizeof archs[0] && strcmp(cfg->arch_name, archs[ai].name) != 0)
        ai++;
    if (ai == sizeof archs / sizeof archs[0])
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_ENOTSUP,
                            "%s: architecture '%s' is not supported (supported: llama, gemma3, "
                            "qwen2, qwen3)",
                            x->path, cfg->arch_name);
    cfg->arch = archs[ai].arch;
    cfg->format = IFD_FORMAT_GGUF;
    if (ifd_gguf_get_str(x->g, "general.name", &s) == 0)
        snprintf(cfg->name, sizeof cfg->name, "%.*s", (int)s.len, s.ptr);
    x->arch = cfg->arch_name;
    return 0;
}

/* Layers, widths, heads, context and the rotary dimensions. */
static int ifd__gg_dims(ifd__gg_t *x, ifd_model_config_t *cfg)
{
    int rc;
    if ((rc = ifd__gg_req_u32(x, "block_count", &cfg->n_layer)) ||
        (rc = ifd__gg_req_u32(x, "embedding_length", &cfg->n_embd)) ||
        (rc = ifd__gg_req_u32(x, "feed_forward_length", &cfg->n_ff)) ||
        (rc = ifd__gg_req_u32(x, "attention.head_count", &cfg->n_head)) ||
        (rc = ifd__gg_opt_u32(x, "attention.head_count_kv", cfg->n_head, &cfg->n_head_kv)) ||
        (rc = ifd__gg_opt_u32(x, "context_length", 2048, &cfg->n_ctx_train)))
        return rc;
    if (cfg->n_head == 0 || cfg->n_head_kv == 0 || cfg->n_head % cfg->n_head_kv != 0)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT,
                            "%s: head counts %u / %u: kv heads must divide heads", x->path,
                            cfg->n_head, cfg->n_head_kv);
    if (cfg->n_layer == 0 || cfg->n_layer > IFD_MAX_LAYERS)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT, "%s: block_count %u out of 1..%d",
                            x->path, cfg->n_layer, IFD_MAX_LAYERS);
    if ((rc =
             ifd__gg_opt_u32(x, "attention.key_length", cfg->n_embd / cfg->n_head, &cfg->head_dim)))
        return rc;
    uint32_t vlen = cfg->head_dim;
    ifd__get_u32_or_arr(x->g, ifd__gg_key(x, "attention.value_length"), &vlen);
    if (vlen != cfg->head_dim)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_ENOTSUP,
                            "%s: key_length %u != value_length %u is not supported", x->path,
                            cfg->head_dim, vlen);
    if ((rc = ifd__gg_opt_u32(x, "rope.dimension_count", cfg->head_dim, &cfg->n_rot)))
        return rc;
    if (cfg->n_rot > cfg->head_dim || cfg->n_rot % 2)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT,
                            "%s: rope.dimension_count %u invalid", x->path, cfg->n_rot);
    if (cfg->head_dim == 0 || cfg->head_dim % 2)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT, "%s: head dimension %u invalid",
                            x->path, cfg->head_dim);
    return 0;
}

/* Norm epsilon, RoPE base and (linear) scaling, and what the architecture
 * fixes: rotary order, QK norm; the final logit softcap. */
static int ifd__gg_rope(ifd__gg_t *x, ifd_model_config_t *cfg)
{
    const ifd_gguf_t *g = x->g;
    if (ifd_gguf_get_f32(g, ifd__gg_key(x, "attention.layer_norm_rms_epsilon"), &cfg->rms_eps))
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT, "%s: %s is missing", x->path,
                            x->key);
    cfg->rope_base = cfg->arch == IFD_ARCH_GEMMA3 ? 1e6f : 10000.0f;
    ifd_gguf_get_f32(g, ifd__gg_key(x, "rope.freq_base"), &cfg->rope_base);
    cfg->rope_freq_scale = 1.0f;
    float factor = 0;
    if (ifd_gguf_get_f32(g, ifd__gg_key(x, "rope.scaling.factor"), &factor) == 0 && factor > 0) {
        ifd_str_t s = {0}; /* no type: linear */
        if (ifd_gguf_get_str(g, ifd__gg_key(x, "rope.scaling.type"), &s) == 0 &&
            !(s.len == 6 && memcmp(s.ptr, "linear", 6) == 0) &&
            !(s.len == 4 && memcmp(s.ptr, "none", 4) == 0))
            return ifd_fail_msg(x->errbuf, x->errlen, IFD_ENOTSUP,
                                "%s: rope scaling type '%.*s' is not supported", x->path,
                                (int)s.len, s.ptr);
        if (!(s.len == 4 && memcmp(s.ptr, "none", 4) == 0))
            cfg->rope_freq_scale = 1.0f / factor;
    }
    cfg->rope_base_local = cfg->rope_base;
    cfg->rope_freq_scale_local = cfg->rope_freq_scale;
    cfg->rope_neox = cfg->arch != IFD_ARCH_LLAMA;
    cfg->has_qk_norm = cfg->arch == IFD_ARCH_GEMMA3 || cfg->arch == IFD_ARCH_QWEN3;
    ifd_gguf_get_f32(g, ifd__gg_key(x, "final_logit_softcapping"), &cfg->final_logit_softcap);
    return 0;
}

/* Sliding-window layers and the embedding and attention scales. */
static int ifd__gg_windows(ifd__gg_t *x, ifd_model_config_t *cfg)
{
    const ifd_gguf_t *g = x->g;
    int rc;
    if (cfg->arch == IFD_ARCH_GEMMA3) {
        cfg->rope_base_local = 10000.0f;
        cfg->rope_freq_scale_local = 1.0f;
        ifd_gguf_get_f32(g, ifd__gg_key(x, "rope.freq_base_swa"), &cfg->rope_base_local);
        if ((rc = ifd__gg_opt_u32(x, "attention.sliding_window", 512, &cfg->sliding_window)))
            return rc;
        /* Per-layer bool array when present, else llama.cpp's period-6 rule. */
        const char *key = ifd__gg_key(x, "attention.sliding_window_pattern");
        const ifd_gguf_value_t *pat;
        uint32_t period = 6;
        if (ifd_gguf_get_arr(g, key, &pat) == 0 && pat->v.arr.elem == IFD_GGUF_BOOL) {
            for (uint32_t l = 0; l < cfg->n_layer; l++) {
                ifd_gguf_value_t e;
                cfg->layer_is_local[l] =
                    l < pat->v.arr.count && ifd_gguf_arr_get(g, pat, l, &e) == 0 && e.v.b;
            }
        } else {
            ifd_gguf_get_u32(g, key, &period);
            for (uint32_t l = 0; l < cfg->n_layer; l++)
                cfg->layer_is_local[l] = period > 0 && (l + 1) % period != 0;
        }
        cfg->embd_scale = sqrtf((float)cfg->n_embd);
    } else {
        /* Mistral-style: a window on every layer when the file states one
         * (llama.cpp's converter does not write it for llama; ours may) */
        if ((rc = ifd__gg_opt_u32(x, "attention.sliding_window", 0, &cfg->sliding_window)))
            return rc;
        for (uint32_t l = 0; l < cfg->n_layer; l++)
            cfg->layer_is_local[l] = cfg->sliding_window > 0;
        cfg->embd_scale = 1.0f;
    }
    cfg->attn_scale = 1.0f / sqrtf((float)cfg->head_dim);
    return 0;
}

/* What the tensors tell: the vocabulary size, RoPE factors, attention bias,
 * tied embeddings. */
static int ifd__gg_tensors(ifd__gg_t *x, ifd_model_config_t *cfg)
{
    const ifd_gguf_t *g = x->g;
    const ifd_gguf_tensor_t *emb = ifd_gguf_find_tensor(g, "token_embd.weight");
    if (!emb)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT,
                            "%s: tensor token_embd.weight is missing", x->path);
    if (emb->ne[0] != cfg->n_embd || emb->ne[1] > UINT32_MAX)
        return ifd_fail_msg(x->errbuf, x->errlen, IFD_EFORMAT,
                            "%s: token_embd.weight has row length %llu, expected %u", x->path,
                            (unsigned long long)emb->ne[0], cfg->n_embd);
    cfg->n_vocab = (uint32_t)emb->ne[1];
    cfg->has_rope_freqs = ifd_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    cfg->has_attn_bias = ifd_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    cfg->tied_embeddings = ifd_gguf_find_tensor(g, "output.weight") == NULL;
    return 0;
}

int ifd_model_config_from_gguf(ifd_model_config_t *cfg, const ifd_gguf_t *g, char *errbuf,
                               size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    ifd__gg_t x = {.g = g, .path = ifd_gguf_path(g), .errbuf = errbuf, .errlen = errlen};
    int rc;
    if ((rc = ifd__gg_arch(&x, cfg)) || (rc = ifd__gg_dims(&x, cfg)) ||
        (rc = ifd__gg_rope(&x, cfg)) || (rc = ifd__gg_windows(&x, cfg)))
        return rc;
    return ifd__gg_tensors(&x, cfg);
}

void ifd_default_model_path(char *buf, size_t len)
{
    const char *dir = getenv("INFERD_MODEL_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (dir && *dir)
        snprintf(buf, len, "%s/%s", dir, IFD_DEFAULT_MODEL_FILE);
    else if (xdg && *xdg)
        snprintf(buf, len, "%s/inferd/models/%s", xdg, IFD_DEFAULT_MODEL_FILE);
    else
        snprintf(buf, len, "%s/.cache/inferd/models/%s", home ? home : "", IFD_DEFAULT_MODEL_FILE);
}

int ifd_model_n_local_layers(const ifd_model_config_t *cfg)
{
    int n = 0;
    for (uint32_t l = 0; l < cfg->n_layer && l < IFD_MAX_LAYERS && cfg->sliding_window > 0; l++)
        n += cfg->layer_is_local[l];
    return n;
}

/* ---- Hugging Face config.json ------------------------------------------------------------ */

const char *ifd_model_format_name(ifd_model_format_t f)
{
    return f == IFD_FORMAT_HF ? "hf" : "gguf";
}

typedef struct {
    const char *file; /* for messages */
    char *err;
    size_t errlen;
} ifd__hf_t;

/* An optional number: absent or null → dflt; another type is an error. */
static int ifd__hf_num(ifd__hf_t *h, const json_t *o, const char *key, double dflt, double *out)
{
    const json_t *v = json_object_get(o, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: %s is not a number", h->file, key);
    *out = json_number_value(v);
    return 0;
}

/* A u32: required (dflt < 0) or defaulted. */
static int ifd__hf_u32(ifd__hf_t *h, const json_t *o, const char *key, long long dflt,
                       uint32_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0)
            return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: %s is missing", h->file, key);
        *out = (uint32_t)dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX)
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: %s is not an integer in 0..2^32-1",
                            h->file, key);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static bool ifd__hf_bool(const json_t *o, const char *key, bool dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *ifd__hf_str(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* rope_scaling (or transformers 5's rope_parameters) → cfg; `global` says
 * whether it is for the global layers (gemma3 scales only those). */
static int ifd__hf_rope_scaling(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *rs)
{
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs))
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: rope_scaling is not an object",
                            h->file);
    const char *type = ifd__hf_str(rs, "rope_type");
    if (!type)
        type = ifd__hf_str(rs, "type");
    if (!type || strcmp(type, "default") == 0)
        return 0;
    double factor, low, high;
    uint32_t orig;
    int rc;
    if ((rc = ifd__hf_num(h, rs, "factor", 1.0, &factor)))
        return rc;
    if (!(factor > 0))
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: rope_scaling.factor %g invalid",
                            h->file, factor);
    if (strcmp(type, "linear") == 0) {
        cfg->rope_freq_scale = (float)(1.0 / factor);
        return 0;
    }
    if (strcmp(type, "llama3") == 0) {
        if ((rc = ifd__hf_num(h, rs, "low_freq_factor", 1.0, &low)) ||
            (rc = ifd__hf_num(h, rs, "high_freq_factor", 4.0, &high)) ||
            (rc = ifd__hf_u32(h, rs, "original_max_position_embeddings", 8192, &orig)))
            return rc;
        if (!(high > low) || orig == 0)
            return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT,
                                "%s: rope_scaling llama3: high_freq_factor %g must exceed "
                                "low_freq_factor %g, original context %u > 0",
                                h->file, high, low, orig);
        cfg->llama3_factor = (float)factor;
        cfg->llama3_low_freq = (float)low;
        cfg->llama3_high_freq = (float)high;
        cfg->llama3_orig_ctx = orig;
        cfg->has_rope_freqs = true;
        return 0;
    }
    return ifd_fail_msg(h->err, h->errlen, IFD_ENOTSUP,
                        "%s: rope_scaling type '%s' is not supported (supported: linear, llama3)",
                        h->file, type);
}

void ifd_model_config_rope_factors(const ifd_model_config_t *cfg, float *out)
{
    const double two_pi = 6.283185307179586;
    const double lo_wl = cfg->llama3_orig_ctx / cfg->llama3_low_freq;
    const double hi_wl = cfg->llama3_orig_ctx / cfg->llama3_high_freq;
    for (uint32_t i = 0; i < cfg->n_rot / 2; i++) {
        double freq = pow(cfg->rope_base, -2.0 * i / cfg->n_rot);
        double wl = two_pi / freq;
        double f;
        if (wl < hi_wl) {
            f = 1.0;
        } else if (wl > lo_wl) {
            f = cfg->llama3_factor;
        } else {
            double s = (cfg->llama3_orig_ctx / wl - cfg->llama3_low_freq) /
                       (cfg->llama3_high_freq - cfg->llama3_low_freq);
            f = 1.0 / ((1.0 - s) / cfg->llama3_factor + s);
        }
        out[i] = (float)f;
    }
}

/* generation_config.json: eos ids and sampling defaults; absent is fine. */
static int ifd__hf_generation(ifd__hf_t *h0, ifd_model_config_t *cfg, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) {
        if (errno == ENOENT && access(path, F_OK) != 0)
            return 0;
        return ifd_fail_msg(h0->err, h0->errlen, IFD_EFORMAT, "%s: not valid JSON (line %d): %s",
                            path, jerr.line, jerr.text);
    }
    ifd__hf_t h = {path, h0->err, h0->errlen};
    ifd_gen_defaults_t *g = &cfg->gen;
    int rc = 0;
    g->present = true;
    g->do_sample = ifd__hf_bool(j, "do_sample", false);
    double v;
    if ((rc = ifd__hf_num(&h, j, "temperature", -1, &v)))
        goto out;
    g->temperature = (float)v;
    if ((rc = ifd__hf_num(&h, j, "top_p", -1, &v)))
        goto out;
    g->top_p = (float)v;
    if ((rc = ifd__hf_num(&h, j, "top_k", -1, &v)))
        goto out;
    g->top_k = (int32_t)v;
    if ((rc = ifd__hf_num(&h, j, "min_p", -1, &v)))
        goto out;
    g->min_p = (float)v;
    if ((rc = ifd__hf_num(&h, j, "repetition_penalty", -1, &v)))
        goto out;
    g->repetition_penalty = (float)v;
    if ((rc = ifd__hf_num(&h, j, "max_new_tokens", 0, &v)))
        goto out;
    g->max_new_tokens = v > INT32_MAX ? INT32_MAX : (int32_t)v;
    const json_t *eos = json_object_get(j, "eos_token_id");
    if (json_is_integer(eos)) {
        g->eos_ids[g->n_eos++] = (int32_t)json_integer_value(eos);
    } else if (json_is_array(eos)) {
        size_t i;
        const json_t *e;
        json_array_foreach(eos, i, e)
        {
            if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                json_integer_value(e) > INT32_MAX) {
                rc = ifd_fail_msg(h.err, h.errlen, IFD_EFORMAT,
                                  "%s: eos_token_id[%zu] is not a token id", path, i);
                goto out;
            }
            if (g->n_eos < IFD_MAX_EOS_IDS)
                g->eos_ids[g->n_eos++] = (int32_t)json_integer_value(e);
        }
    } else if (eos && !json_is_null(eos)) {
        rc = ifd_fail_msg(h.err, h.errlen, IFD_EFORMAT,
                          "%s: eos_token_id is neither an id nor a list of ids", path);
    }
out:
    json_decref(j);
    return rc;
}

/* The HF class name → architecture, and what the class fixes. */
static const struct {
    const char *hf;
    ifd_arch_t arch;
    const char *act; /* hidden_act the forward pass implements */
} ifd__hf_archs[] = {
    {"LlamaForCausalLM", IFD_ARCH_LLAMA, "silu"},
    {"MistralForCausalLM", IFD_ARCH_LLAMA, "silu"},
    {"Gemma3ForCausalLM", IFD_ARCH_GEMMA3, "gelu_pytorch_tanh"},
    {"Gemma3ForConditionalGeneration", IFD_ARCH_GEMMA3, "gelu_pytorch_tanh"},
    {"Qwen2ForCausalLM", IFD_ARCH_QWEN2, "silu"},
    {"Qwen3ForCausalLM", IFD_ARCH_QWEN3, "silu"},
};

/* layer_types ["sliding_attention" | "full_attention", …] into layer_is_local:
 * 1 when present, 0 when absent (the caller decides), or an error. */
static int ifd__hf_layer_types(ifd__hf_t *h, const json_t *c, ifd_model_config_t *cfg)
{
    const json_t *lt = json_object_get(c, "layer_types");
    if (!json_is_array(lt))
        return 0;
    if (json_array_size(lt) != cfg->n_layer)
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT,
                            "%s: layer_types has %zu entries for %u layers", h->file,
                            json_array_size(lt), cfg->n_layer);
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        const char *t = json_string_value(json_array_get(lt, l));
        if (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
            return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT,
                                "%s: layer_types[%u] is not sliding_attention or full_attention",
                                h->file, l);
        cfg->layer_is_local[l] = strcmp(t, "sliding_attention") == 0;
    }
    return 1;
}

static const char *const ifd__arch_names[] = {"llama", "gemma3", "qwen2", "qwen3"};

/* architectures[0] → cfg's architecture and dtype; *ai gets its row of
 * ifd__hf_archs, *c the object with the language model's keys: the top level,
 * or text_config (multimodal Gemma 3). */
static int ifd__hf_arch(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *root, size_t *ai,
                        const json_t **c)
{
    const json_t *archs = json_object_get(root, "architectures");
    const char *an = json_is_array(archs) ? json_string_value(json_array_get(archs, 0)) : NULL;
    if (!an)
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT,
                            "%s: architectures is missing (expected e.g. [\"LlamaForCausalLM\"])",
                            h->file);
    size_t na = sizeof ifd__hf_archs / sizeof ifd__hf_archs[0];
    *ai = 0;
    while (*ai < na && strcmp(an, ifd__hf_archs[*ai].hf) != 0)
        (*ai)++;
    if (*ai == na)
        return ifd_fail_msg(h->err, h->errlen, IFD_ENOTSUP,
                            "%s: architecture '%s' is not supported (supported: "
                            "LlamaForCausalLM, MistralForCausalLM, Gemma3ForCausalLM, "
                            "Gemma3ForConditionalGeneration, Qwen2ForCausalLM, Qwen3ForCausalLM)",
                            h->file, an);
    cfg->arch = ifd__hf_archs[*ai].arch;
    snprintf(cfg->hf_arch, sizeof cfg->hf_arch, "%s", an);
    snprintf(cfg->arch_name, sizeof cfg->arch_name, "%s", ifd__arch_names[cfg->arch]);
    const char *dt = ifd__hf_str(root, "torch_dtype");
    if (!dt)
        dt = ifd__hf_str(root, "dtype");
    *c = root;
    const json_t *tc = json_object_get(root, "text_config");
    if (strcmp(an, "Gemma3ForConditionalGeneration") == 0) {
        if (!json_is_object(tc))
            return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: text_config is missing",
                                h->file);
        *c = tc;
        if (!dt)
            dt = ifd__hf_str(tc, "torch_dtype");
        if (!dt)
            dt = ifd__hf_str(tc, "dtype");
    }
    snprintf(cfg->dtype, sizeof cfg->dtype, "%s", dt ? dt : "");
    return 0;
}

/* The sizes: vocabulary, widths, layers, heads, context, norm epsilon. */
static int ifd__hf_dims(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *c)
{
    const bool gemma = cfg->arch == IFD_ARCH_GEMMA3;
    int rc;
    /* Gemma3TextConfig's defaults fill what a 4B text_config leaves out */
    const long long d_vocab = gemma ? 262208 : -1, d_embd = gemma ? 2304 : -1,
                    d_ff = gemma ? 9216 : -1, d_layer = gemma ? 26 : -1, d_head = gemma ? 8 : -1;
    if ((rc = ifd__hf_u32(h, c, "vocab_size", d_vocab, &cfg->n_vocab)) ||
        (rc = ifd__hf_u32(h, c, "hidden_size", d_embd, &cfg->n_embd)) ||
        (rc = ifd__hf_u32(h, c, "intermediate_size", d_ff, &cfg->n_ff)) ||
        (rc = ifd__hf_u32(h, c, "num_hidden_layers", d_layer, &cfg->n_layer)) ||
        (rc = ifd__hf_u32(h, c, "num_attention_heads", d_head, &cfg->n_head)))
        return rc;
    if ((rc = ifd__hf_u32(h, c, "num_key_value_heads", gemma ? 4 : cfg->n_head, &cfg->n_head_kv)))
        return rc;
    if (cfg->n_head == 0 || cfg->n_head_kv == 0 || cfg->n_head % cfg->n_head_kv != 0)
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT,
                            "%s: head counts %u / %u: kv heads must divide heads", h->file,
                            cfg->n_head, cfg->n_head_kv);
    if (cfg->n_layer == 0 || cfg->n_layer > IFD_MAX_LAYERS)
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: num_hidden_layers %u out of 1..%d",
                            h->file, cfg->n_layer, IFD_MAX_LAYERS);
    if ((rc = ifd__hf_u32(h, c, "head_dim", gemma ? 256 : cfg->n_embd / cfg->n_head,
                          &cfg->head_dim)))
        return rc;
    if (cfg->head_dim == 0 || cfg->head_dim % 2 || cfg->n_embd == 0 || cfg->n_ff == 0 ||
        cfg->n_vocab == 0)
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT,
                            "%s: head_dim %u, hidden_size %u, intermediate_size %u, "
                            "vocab_size %u: invalid",
                            h->file, cfg->head_dim, cfg->n_embd, cfg->n_ff, cfg->n_vocab);
    cfg->n_rot = cfg->head_dim;
    if ((rc = ifd__hf_u32(h, c, "max_position_embeddings", gemma ? 131072 : 2048,
                          &cfg->n_ctx_train)))
        return rc;
    double v;
    if ((rc = ifd__hf_num(h, c, "rms_norm_eps", 1e-6, &v)))
        return rc;
    cfg->rms_eps = (float)v;
    return 0;
}

/* What the forward pass must support: the activation (the one the class
 * implements), no MLP bias, no attention softcapping; and the switches
 * (attention bias, QK norm, tied embeddings, final logit softcap). */
static int ifd__hf_features(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *root,
                            const json_t *c, size_t ai)
{
    const bool gemma = cfg->arch == IFD_ARCH_GEMMA3;
    const char *act = ifd__hf_str(c, "hidden_activation");
    if (!act)
        act = ifd__hf_str(c, "hidden_act");
    if (!act)
        act = ifd__hf_archs[ai].act;
    if (strcmp(act, ifd__hf_archs[ai].act) != 0 &&
        !(gemma && strcmp(act, "gelu_pytorch_tanh") == 0))
        return ifd_fail_msg(h->err, h->errlen, IFD_ENOTSUP,
                            "%s: activation '%s' is not supported for %s (expected %s)", h->file,
                            act, ifd__hf_archs[ai].hf, ifd__hf_archs[ai].act);
    if (ifd__hf_bool(c, "mlp_bias", false))
        return ifd_fail_msg(h->err, h->errlen, IFD_ENOTSUP, "%s: mlp_bias is not supported",
                            h->file);
    if (json_object_get(c, "attn_logit_softcapping") &&
        !json_is_null(json_object_get(c, "attn_logit_softcapping")))
        return ifd_fail_msg(h->err, h->errlen, IFD_ENOTSUP,
                            "%s: attn_logit_softcapping is not supported", h->file);
    cfg->has_attn_bias = cfg->arch == IFD_ARCH_QWEN2 || ifd__hf_bool(c, "attention_bias", false);
    cfg->has_qk_norm = gemma || cfg->arch == IFD_ARCH_QWEN3;
    cfg->tied_embeddings =
        ifd__hf_bool(c, "tie_word_embeddings", ifd__hf_bool(root, "tie_word_embeddings", gemma));
    double v;
    int rc = ifd__hf_num(h, c, "final_logit_softcapping", 0, &v);
    if (rc)
        return rc;
    cfg->final_logit_softcap = (float)v;
    return 0;
}

/* RoPE (global layers) and the default scales; *rp_local gets the
 * sliding-attention rope_parameters of transformers >= 5, or NULL. */
static int ifd__hf_rope(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *c,
                        const json_t **rp_local)
{
    int rc;
    double v;
    /* RoPE: HF checkpoints are in rotate-half order for every architecture */
    cfg->rope_neox = true;
    cfg->rope_freq_scale = 1.0f;
    const json_t *rp = json_object_get(c, "rope_parameters"); /* transformers >= 5 */
    const json_t *rp_full = rp;
    *rp_local = NULL;
    if (json_is_object(rp) && json_object_get(rp, "full_attention")) {
        rp_full = json_object_get(rp, "full_attention");
        *rp_local = json_object_get(rp, "sliding_attention");
    }
    if ((rc = ifd__hf_num(h, c, "rope_theta", cfg->arch == IFD_ARCH_GEMMA3 ? 1e6 : 10000.0, &v)))
        return rc;
    if (json_is_object(rp_full) && (rc = ifd__hf_num(h, rp_full, "rope_theta", v, &v)))
        return rc;
    cfg->rope_base = (float)v;
    const json_t *rs = json_object_get(c, "rope_scaling");
    if ((rc = ifd__hf_rope_scaling(h, cfg, (rs && !json_is_null(rs)) ? rs : rp_full)))
        return rc;
    cfg->rope_base_local = cfg->rope_base;
    cfg->rope_freq_scale_local = cfg->rope_freq_scale;
    cfg->attn_scale = 1.0f / sqrtf((float)cfg->head_dim);
    cfg->embd_scale = 1.0f;
    return 0;
}

/* Gemma 3: local RoPE, query and embedding scales, the sliding-window
 * layers (layer_types, else every sliding_window_pattern-th layer global). */
static int ifd__hf_gemma(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *c,
                         const json_t *rp_local)
{
    int rc;
    double v;
    if ((rc = ifd__hf_num(h, c, "rope_local_base_freq", 10000.0, &v)))
        return rc;
    if (json_is_object(rp_local) && (rc = ifd__hf_num(h, rp_local, "rope_theta", v, &v)))
        return rc;
    cfg->rope_base_local = (float)v;
    cfg->rope_freq_scale_local = 1.0f;
    if ((rc = ifd__hf_num(h, c, "query_pre_attn_scalar", 256, &v)))
        return rc;
    if (!(v > 0))
        return ifd_fail_msg(h->err, h->errlen, IFD_EFORMAT, "%s: query_pre_attn_scalar %g invalid",
                            h->file, v);
    cfg->attn_scale = (float)(1.0 / sqrt(v));
    /* HF multiplies by sqrt(hidden) cast to the weights' dtype */
    float es = sqrtf((float)cfg->n_embd);
    if (strcmp(cfg->dtype, "bfloat16") == 0) {
        uint32_t b;
        memcpy(&b, &es, 4);
        b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
        memcpy(&es, &b, 4);
    }
    cfg->embd_scale = es;
    if ((rc = ifd__hf_u32(h, c, "sliding_window", 4096, &cfg->sliding_window)))
        return rc;
    if ((rc = ifd__hf_layer_types(h, c, cfg)) < 0)
        return rc;
    if (rc == 0) {
        uint32_t period;
        if ((rc = ifd__hf_u32(h, c, "sliding_window_pattern", 6, &period)))
            return rc;
        for (uint32_t l = 0; l < cfg->n_layer; l++)
            cfg->layer_is_local[l] = period > 0 && (l + 1) % period != 0;
    }
    return 0;
}

/* Sliding windows of the other architectures: Mistral's on every layer,
 * Qwen's (use_sliding_window) from max_window_layers on. */
static int ifd__hf_windows(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *c, const char *an)
{
    int rc;
    if (strcmp(an, "MistralForCausalLM") == 0) {
        if ((rc = ifd__hf_u32(h, c, "sliding_window", 0, &cfg->sliding_window)))
            return rc;
        for (uint32_t l = 0; l < cfg->n_layer; l++)
            cfg->layer_is_local[l] = cfg->sliding_window > 0;
    } else if ((cfg->arch == IFD_ARCH_QWEN2 || cfg->arch == IFD_ARCH_QWEN3) &&
               ifd__hf_bool(c, "use_sliding_window", false)) {
        /* transformers: sliding_window on layers i >= max_window_layers (or as
         * layer_types says); sliding_window null turns it off */
        uint32_t mwl;
        const json_t *sw = json_object_get(c, "sliding_window");
        if ((rc = ifd__hf_u32(h, c, "sliding_window", sw ? 0 : 4096, &cfg->sliding_window)) ||
            (rc = ifd__hf_u32(h, c, "max_window_layers", 28, &mwl)))
            return rc;
        if ((rc = ifd__hf_layer_types(h, c, cfg)) < 0)
            return rc;
        for (uint32_t l = 0; rc == 0 && l < cfg->n_layer; l++)
            cfg->layer_is_local[l] = cfg->sliding_window > 0 && l >= mwl;
        if (cfg->sliding_window == 0)
            memset(cfg->layer_is_local, 0, sizeof cfg->layer_is_local);
    }
    return 0;
}

static int ifd__hf_parse(ifd__hf_t *h, ifd_model_config_t *cfg, const json_t *root)
{
    size_t ai = 0;
    const json_t *c = root, *rp_local = NULL;
    int rc;
    if ((rc = ifd__hf_arch(h, cfg, root, &ai, &c)) || (rc = ifd__hf_dims(h, cfg, c)) ||
        (rc = ifd__hf_features(h, cfg, root, c, ai)) || (rc = ifd__hf_rope(h, cfg, c, &rp_local)))
        return rc;
    if (cfg->arch == IFD_ARCH_GEMMA3)
        return ifd__hf_gemma(h, cfg, c, rp_local);
    return ifd__hf_windows(h, cfg, c, ifd__hf_archs[ai].hf);
}

int ifd_model_config_from_hf(ifd_model_config_t *cfg, const char *dir, char *errbuf,
                             size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->format = IFD_FORMAT_HF;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        if (access(path, F_OK) != 0) {
            int rc = -errno;
            return ifd_fail_msg(errbuf, errlen, rc, "%s: %s", path, strerror(-rc));
        }
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "%s: not valid JSON (line %d): %s", path,
                            jerr.line, jerr.text);
    }
    ifd__hf_t h = {path, errbuf, errlen};
    int rc = json_is_object(root)
                 ? ifd__hf_parse(&h, cfg, root)
                 : ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "%s: not a JSON object", path);
    json_decref(root);
    if (rc == 0)
        rc = ifd__hf_generation(&h, cfg, dir);
    if (rc == 0) {
        /* the model's name: the directory's last component */
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
            n--;
        size_t b = n;
        while (b > 0 && dir[b - 1] != '/')
            b--;
        snprintf(cfg->name, sizeof cfg->name, "%.*s", (int)(n - b), dir + b);
    }
    return rc;
}
