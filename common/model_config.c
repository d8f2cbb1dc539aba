/*
 * model_config.c — resolves hyper-parameters from GGUF metadata, applying
 * llama.cpp's defaults where a key is absent.
 */
#include "model_config.h"
#include "error.h"
#include "log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ifd__cfg_fail(char *errbuf, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int ifd__cfg_fail(char *errbuf, size_t errlen, int rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s", msg);
    else
        IFD_ERROR("%s", msg);
    return rc;
}

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

int ifd_model_config_from_gguf(ifd_model_config_t *cfg, const ifd_gguf_t *g, char *errbuf,
                               size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    const char *path = ifd_gguf_path(g);
    ifd_str_t s;
    if (ifd_gguf_get_str(g, "general.architecture", &s) != 0)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT,
                             "%s: general.architecture is missing", path);
    snprintf(cfg->arch_name, sizeof cfg->arch_name, "%.*s", (int)s.len, s.ptr);
    if (strcmp(cfg->arch_name, "llama") == 0)
        cfg->arch = IFD_ARCH_LLAMA;
    else if (strcmp(cfg->arch_name, "gemma3") == 0)
        cfg->arch = IFD_ARCH_GEMMA3;
    else
        return ifd__cfg_fail(errbuf, errlen, IFD_ENOTSUP,
                             "%s: architecture '%s' is not supported (supported: llama, gemma3)",
                             path, cfg->arch_name);
    if (ifd_gguf_get_str(g, "general.name", &s) == 0)
        snprintf(cfg->name, sizeof cfg->name, "%.*s", (int)s.len, s.ptr);

    char key[160];
    const char *a = cfg->arch_name;
#define IFD__REQ_U32(field, suffix)                                                         \
    do {                                                                                    \
        snprintf(key, sizeof key, "%s.%s", a, suffix);                                      \
        int rc_ = ifd__get_u32_or_arr(g, key, &cfg->field);                                 \
        if (rc_)                                                                            \
            return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT, "%s: %s: %s", path, key,      \
                                 rc_ == IFD_ENOTFOUND ? "missing" : "not a usable integer");  \
    } while (0)
#define IFD__OPT_U32(field, suffix, dflt)                                                   \
    do {                                                                                    \
        snprintf(key, sizeof key, "%s.%s", a, suffix);                                      \
        cfg->field = (dflt);                                                                \
        int rc_ = ifd__get_u32_or_arr(g, key, &cfg->field);                                 \
        if (rc_ && rc_ != IFD_ENOTFOUND)                                                    \
            return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT, "%s: %s: not a usable integer", \
                                 path, key);                                                \
    } while (0)

    IFD__REQ_U32(n_layer, "block_count");
    IFD__REQ_U32(n_embd, "embedding_length");
    IFD__REQ_U32(n_ff, "feed_forward_length");
    IFD__REQ_U32(n_head, "attention.head_count");
    IFD__OPT_U32(n_head_kv, "attention.head_count_kv", cfg->n_head);
    IFD__OPT_U32(n_ctx_train, "context_length", 2048);
    if (cfg->n_head == 0 || cfg->n_head_kv == 0 || cfg->n_head % cfg->n_head_kv != 0)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT,
                             "%s: head counts %u / %u: kv heads must divide heads", path,
                             cfg->n_head, cfg->n_head_kv);
    if (cfg->n_layer == 0 || cfg->n_layer > IFD_MAX_LAYERS)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT, "%s: block_count %u out of 1..%d",
                             path, cfg->n_layer, IFD_MAX_LAYERS);
    IFD__OPT_U32(head_dim, "attention.key_length", cfg->n_embd / cfg->n_head);
    uint32_t vlen = cfg->head_dim;
    snprintf(key, sizeof key, "%s.attention.value_length", a);
    ifd__get_u32_or_arr(g, key, &vlen);
    if (vlen != cfg->head_dim)
        return ifd__cfg_fail(errbuf, errlen, IFD_ENOTSUP,
                             "%s: key_length %u != value_length %u is not supported", path,
                             cfg->head_dim, vlen);
    IFD__OPT_U32(n_rot, "rope.dimension_count", cfg->head_dim);
    if (cfg->n_rot > cfg->head_dim || cfg->n_rot % 2)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT, "%s: rope.dimension_count %u invalid",
                             path, cfg->n_rot);
    if (cfg->head_dim == 0 || cfg->head_dim % 2)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT, "%s: head dimension %u invalid", path,
                             cfg->head_dim);

    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    if (ifd_gguf_get_f32(g, key, &cfg->rms_eps) != 0)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT, "%s: %s is missing", path, key);
    cfg->rope_base = cfg->arch == IFD_ARCH_GEMMA3 ? 1e6f : 10000.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    ifd_gguf_get_f32(g, key, &cfg->rope_base);
    cfg->rope_freq_scale = 1.0f;
    float factor = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    if (ifd_gguf_get_f32(g, key, &factor) == 0 && factor > 0) {
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        if (ifd_gguf_get_str(g, key, &s) == 0 && !(s.len == 6 && memcmp(s.ptr, "linear", 6) == 0) &&
            !(s.len == 4 && memcmp(s.ptr, "none", 4) == 0))
            return ifd__cfg_fail(errbuf, errlen, IFD_ENOTSUP,
                                 "%s: rope scaling type '%.*s' is not supported", path,
                                 (int)s.len, s.ptr);
        if (!(s.len == 4 && memcmp(s.ptr, "none", 4) == 0))
            cfg->rope_freq_scale = 1.0f / factor;
    }
    cfg->rope_base_local = 10000.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base_swa", a);
    ifd_gguf_get_f32(g, key, &cfg->rope_base_local);

    if (cfg->arch == IFD_ARCH_GEMMA3) {
        IFD__OPT_U32(sliding_window, "attention.sliding_window", 512);
        /* Per-layer bool array when present, else llama.cpp's period-6 rule. */
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", a);
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
        cfg->embd_scale = 1.0f;
    }
    cfg->attn_scale = 1.0f / sqrtf((float)cfg->head_dim);

    const ifd_gguf_tensor_t *emb = ifd_gguf_find_tensor(g, "token_embd.weight");
    if (!emb)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT, "%s: tensor token_embd.weight is missing",
                             path);
    if (emb->ne[0] != cfg->n_embd || emb->ne[1] > UINT32_MAX)
        return ifd__cfg_fail(errbuf, errlen, IFD_EFORMAT,
                             "%s: token_embd.weight has row length %llu, expected %u", path,
                             (unsigned long long)emb->ne[0], cfg->n_embd);
    cfg->n_vocab = (uint32_t)emb->ne[1];
    cfg->has_rope_freqs = ifd_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    return 0;
#undef IFD__REQ_U32
#undef IFD__OPT_U32
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

ifd_kvpool_params_t ifd_model_kvpool_params(const ifd_model_config_t *cfg)
{
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = (int)cfg->n_layer;
    kp.n_kv_heads = (int)cfg->n_head_kv;
    kp.head_dim = (int)cfg->head_dim;
    kp.dtype = IFD_KV_F32;
    return kp;
}
