/*
 * shape.c — model shapes from JSON (shape.h), with jansson.
 */
#include "shape.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* One table for the integer fields: name, where, required, default, max. */
typedef struct {
    const char *key;
    size_t off;
    bool required;
    uint32_t def;
    uint32_t max;
} ifd__shape_u32_t;

#define IFD__OFF(f) offsetof(ifd_model_config_t, f)
static const ifd__shape_u32_t ifd__u32_fields[] = {
    {"n_layer", IFD__OFF(n_layer), true, 0, IFD_MAX_LAYERS},
    {"n_embd", IFD__OFF(n_embd), true, 0, 1 << 16},
    {"n_ff", IFD__OFF(n_ff), true, 0, 1 << 18},
    {"n_head", IFD__OFF(n_head), true, 0, 1024},
    {"n_head_kv", IFD__OFF(n_head_kv), true, 0, 1024},
    {"head_dim", IFD__OFF(head_dim), true, 0, 1024},
    {"n_vocab", IFD__OFF(n_vocab), true, 0, 1 << 20},
    {"n_ctx_train", IFD__OFF(n_ctx_train), false, 4096, 1u << 24},
    {"sliding_window", IFD__OFF(sliding_window), false, 0, 1u << 24},
};
#undef IFD__OFF

static int ifd__shape_fail(char *errbuf, size_t errlen, const char *path, const char *what)
{
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s: %s", path, what);
    return IFD_EFORMAT;
}

int ifd_shape_load(ifd_model_config_t *cfg, const char *path, char *errbuf, size_t errlen)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        FILE *f = fopen(path, "r");
        if (!f) {
            if (errbuf && errlen)
                snprintf(errbuf, errlen, "%s: cannot open", path);
            return -ENOENT;
        }
        fclose(f);
        char msg[300];
        snprintf(msg, sizeof msg, "line %d: %s", je.line, je.text);
        return ifd__shape_fail(errbuf, errlen, path, msg);
    }
    int rc = 0;
    char msg[160];
    memset(cfg, 0, sizeof *cfg);
    const char *arch = json_string_value(json_object_get(j, "arch"));
    const char *name = json_string_value(json_object_get(j, "name"));
    if (!arch || (strcmp(arch, "llama") && strcmp(arch, "gemma3"))) {
        rc = ifd__shape_fail(errbuf, errlen, path, "\"arch\" must be \"llama\" or \"gemma3\"");
        goto out;
    }
    cfg->arch = strcmp(arch, "gemma3") ? IFD_ARCH_LLAMA : IFD_ARCH_GEMMA3;
    snprintf(cfg->arch_name, sizeof cfg->arch_name, "%s", arch);
    snprintf(cfg->name, sizeof cfg->name, "%s", name ? name : "");
    for (size_t i = 0; i < sizeof ifd__u32_fields / sizeof ifd__u32_fields[0]; i++) {
        const ifd__shape_u32_t *f = &ifd__u32_fields[i];
        json_t *v = json_object_get(j, f->key);
        uint32_t *dst = (uint32_t *)((char *)cfg + f->off);
        if (!v && !f->required) {
            *dst = f->def;
            continue;
        }
        if (!json_is_integer(v) || json_integer_value(v) < (f->required ? 1 : 0) ||
            json_integer_value(v) > f->max) {
            snprintf(msg, sizeof msg, "\"%s\" must be an integer in [%d, %u]", f->key,
                     f->required ? 1 : 0, f->max);
            rc = ifd__shape_fail(errbuf, errlen, path, msg);
            goto out;
        }
        *dst = (uint32_t)json_integer_value(v);
    }
    struct {
        const char *key;
        float *dst;
        bool required;
        float def;
    } reals[] = {
        {"rms_eps", &cfg->rms_eps, true, 0},
        {"rope_base", &cfg->rope_base, true, 0},
        {"rope_freq_scale", &cfg->rope_freq_scale, false, 1.0f},
        {"rope_base_local", &cfg->rope_base_local, false, 10000.0f},
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        json_t *v = json_object_get(j, reals[i].key);
        if (!v && !reals[i].required) {
            *reals[i].dst = reals[i].def;
            continue;
        }
        if (!json_is_number(v) || !(json_number_value(v) > 0)) {
            snprintf(msg, sizeof msg, "\"%s\" must be a positive number", reals[i].key);
            rc = ifd__shape_fail(errbuf, errlen, path, msg);
            goto out;
        }
        *reals[i].dst = (float)json_number_value(v);
    }
    if (cfg->n_head % cfg->n_head_kv || cfg->head_dim % 2) {
        rc = ifd__shape_fail(errbuf, errlen, path,
                             "n_head must be a multiple of n_head_kv, head_dim even");
        goto out;
    }
    cfg->n_rot = cfg->head_dim;
    cfg->attn_scale = 1.0f / sqrtf((float)cfg->head_dim);
    cfg->embd_scale = 1.0f;
    if (cfg->arch == IFD_ARCH_GEMMA3) {
        cfg->embd_scale = sqrtf((float)cfg->n_embd);
        json_t *p = json_object_get(j, "sliding_window_pattern");
        json_int_t period = p ? (json_is_integer(p) ? json_integer_value(p) : -1) : 6;
        if (period < 1 || period > IFD_MAX_LAYERS) {
            rc = ifd__shape_fail(errbuf, errlen, path,
                                 "\"sliding_window_pattern\" must be an integer >= 1");
            goto out;
        }
        for (uint32_t l = 0; l < cfg->n_layer; l++)
            cfg->layer_is_local[l] = cfg->sliding_window > 0 && (l + 1) % period != 0;
    }
    /* what the architecture implies, as ifd_model_config_from_gguf sets it */
    const bool gemma = cfg->arch == IFD_ARCH_GEMMA3;
    cfg->rope_neox = gemma;
    cfg->has_qk_norm = gemma;
    cfg->tied_embeddings = true;
    cfg->rope_freq_scale_local = gemma ? 1.0f : cfg->rope_freq_scale;
    if (!gemma)
        cfg->rope_base_local = cfg->rope_base;
out:
    json_decref(j);
    return rc;
}

int ifd_shape_load_vocab(ifd_model_config_t *cfg, const char *path, uint32_t n_vocab,
                         char *errbuf, size_t errlen)
{
    int rc = ifd_shape_load(cfg, path, errbuf, errlen);
    if (rc)
        return rc;
    if (n_vocab > 0 && cfg->n_vocab != n_vocab) {
        IFD_INFO("random weights: the shape's vocabulary of %u tokens becomes the tokenizer's %u",
                 cfg->n_vocab, n_vocab);
        cfg->n_vocab = n_vocab;
    }
    return 0;
}
