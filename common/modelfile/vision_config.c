/*
 * vision_config.c — a Gemma 3 config.json's vision part (vision_config.h).
 * Keys are read through one table (name, default, bounds) onto the struct.
 */
#include "vision_config.h"

#include "error.h"
#include "log.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The integer keys of vision_config: SiglipVisionConfig's defaults, sane bounds. */
static const struct {
    const char *key;
    size_t off;
    long long def, max;
} ifd__vkeys[] = {
    {"image_size", offsetof(ifd_vision_config_t, image_size), 224, 8192},
    {"patch_size", offsetof(ifd_vision_config_t, patch_size), 16, 1024},
    {"num_channels", offsetof(ifd_vision_config_t, n_channels), 3, 16},
    {"hidden_size", offsetof(ifd_vision_config_t, n_embd), 768, 65536},
    {"intermediate_size", offsetof(ifd_vision_config_t, n_ff), 3072, 262144},
    {"num_hidden_layers", offsetof(ifd_vision_config_t, n_layer), 12, 512},
    {"num_attention_heads", offsetof(ifd_vision_config_t, n_head), 12, 1024},
};

/* The top-level keys of Gemma3Config (ids bounded by int32). */
static const struct {
    const char *key;
    size_t off;
    long long def;
} ifd__tkeys[] = {
    {"mm_tokens_per_image", offsetof(ifd_vision_config_t, tokens_per_image), 256},
    {"boi_token_index", offsetof(ifd_vision_config_t, boi_id), 255999},
    {"eoi_token_index", offsetof(ifd_vision_config_t, eoi_id), 256000},
    {"image_token_index", offsetof(ifd_vision_config_t, image_id), 262144},
};

uint32_t ifd_vision_token_side(const ifd_vision_config_t *c)
{
    uint32_t s = (uint32_t)sqrt((double)c->tokens_per_image);
    while (s * s > c->tokens_per_image)
        s--;
    while ((s + 1) * (s + 1) <= c->tokens_per_image)
        s++;
    return s;
}

/* An integer key in [1, max] (absent: def) into *out. */
static int ifd__int(const json_t *o, const char *key, long long def, long long max, long long *out,
                    const char *file, char *errbuf, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: vision key '%s' must be an integer in 0..%lld", file, key, max);
    *out = json_integer_value(v);
    return 0;
}

static int ifd__check(const ifd_vision_config_t *c, const char *file, char *errbuf, size_t errlen)
{
    if (!c->image_size || !c->patch_size || !c->n_embd || !c->n_ff || !c->n_layer || !c->n_head ||
        !c->tokens_per_image || !c->text_embd)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "%s: a vision size is 0", file);
    for (size_t i = 0; i < sizeof ifd__vkeys / sizeof ifd__vkeys[0]; i++)
        if (*(const uint32_t *)((const char *)c + ifd__vkeys[i].off) > ifd__vkeys[i].max)
            return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "%s: vision %s over %lld", file,
                                ifd__vkeys[i].key, ifd__vkeys[i].max);
    if (c->text_embd > 65536)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "%s: the text width %u is over 65536",
                            file, c->text_embd);
    if (c->n_channels != 3)
        return ifd_fail_msg(errbuf, errlen, IFD_ENOTSUP,
                            "%s: vision_config.num_channels %u: only RGB (3) is supported", file,
                            c->n_channels);
    if (c->image_size % c->patch_size)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: vision_config.image_size %u is not a multiple of patch_size %u",
                            file, c->image_size, c->patch_size);
    if (c->n_embd % c->n_head)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: vision_config.num_attention_heads %u does not divide "
                            "hidden_size %u",
                            file, c->n_head, c->n_embd);
    const uint32_t ts = ifd_vision_token_side(c), side = ifd_vision_patch_side(c);
    if (ts * ts != c->tokens_per_image || side % ts)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: mm_tokens_per_image %u must be a square whose side divides the "
                            "%u x %u patch grid",
                            file, c->tokens_per_image, side, side);
    return 0;
}

static int ifd__parse(ifd_vision_config_t *c, const json_t *root, const char *file, char *errbuf,
                      size_t errlen)
{
    const json_t *vc = json_object_get(root, "vision_config");
    if (!json_is_object(vc))
        return IFD_ENOTFOUND;
    memset(c, 0, sizeof *c);
    long long v;
    int rc;
    for (size_t i = 0; i < sizeof ifd__vkeys / sizeof ifd__vkeys[0]; i++) {
        if ((rc = ifd__int(vc, ifd__vkeys[i].key, ifd__vkeys[i].def, ifd__vkeys[i].max, &v, file,
                           errbuf, errlen)))
            return rc;
        *(uint32_t *)((char *)c + ifd__vkeys[i].off) = (uint32_t)v;
    }
    for (size_t i = 0; i < sizeof ifd__tkeys / sizeof ifd__tkeys[0]; i++) {
        if ((rc = ifd__int(root, ifd__tkeys[i].key, ifd__tkeys[i].def, INT32_MAX, &v, file, errbuf,
                           errlen)))
            return rc;
        *(uint32_t *)((char *)c + ifd__tkeys[i].off) = (uint32_t)v;
    }
    const json_t *tc = json_object_get(root, "text_config");
    if ((rc = ifd__int(json_is_object(tc) ? tc : root, "hidden_size", 2304, 65536, &v, file, errbuf,
                       errlen)))
        return rc;
    c->text_embd = (uint32_t)v;
    const json_t *eps = json_object_get(vc, "layer_norm_eps");
    c->eps = 1e-6f;
    if (eps && !json_is_null(eps)) {
        if (!json_is_number(eps) || json_number_value(eps) < 0 || json_number_value(eps) > 1)
            return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                                "%s: vision_config.layer_norm_eps must be a number in [0, 1]",
                                file);
        c->eps = (float)json_number_value(eps);
    }
    const json_t *act = json_object_get(vc, "hidden_act");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), "gelu_pytorch_tanh") == 0))
        return ifd_fail_msg(errbuf, errlen, IFD_ENOTSUP,
                            "%s: vision_config.hidden_act '%s': only gelu_pytorch_tanh is "
                            "supported",
                            file, json_is_string(act) ? json_string_value(act) : "?");
    if (json_is_true(json_object_get(vc, "vision_use_head")))
        return ifd_fail_msg(errbuf, errlen, IFD_ENOTSUP,
                            "%s: vision_config.vision_use_head true: the pooling head is not "
                            "supported (Gemma 3 has none)",
                            file);
    if ((rc = ifd__check(c, file, errbuf, errlen)))
        return rc;
    c->head_dim = c->n_embd / c->n_head;
    return 0;
}

int ifd_vision_config_from_hf(ifd_vision_config_t *c, const char *dir, char *errbuf, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "%s: %s (line %d)", path, jerr.text,
                            jerr.line);
    int rc = ifd__parse(c, root, path, errbuf, errlen);
    json_decref(root);
    return rc;
}

/* clip.vision.* integer keys of an mmproj (all required). */
static const struct {
    const char *key;
    size_t off;
} ifd__gkeys[] = {
    {"clip.vision.image_size", offsetof(ifd_vision_config_t, image_size)},
    {"clip.vision.patch_size", offsetof(ifd_vision_config_t, patch_size)},
    {"clip.vision.embedding_length", offsetof(ifd_vision_config_t, n_embd)},
    {"clip.vision.feed_forward_length", offsetof(ifd_vision_config_t, n_ff)},
    {"clip.vision.block_count", offsetof(ifd_vision_config_t, n_layer)},
    {"clip.vision.attention.head_count", offsetof(ifd_vision_config_t, n_head)},
    {"clip.vision.projection_dim", offsetof(ifd_vision_config_t, text_embd)},
};

static bool ifd__gguf_str_is(const ifd_gguf_t *g, const char *key, const char *want)
{
    ifd_str_t v;
    return ifd_gguf_get_str(g, key, &v) == 0 && v.len == strlen(want) &&
           memcmp(v.ptr, want, v.len) == 0;
}

int ifd_vision_config_from_gguf(ifd_vision_config_t *c, const ifd_gguf_t *g, char *errbuf,
                                size_t errlen)
{
    const char *file = ifd_gguf_path(g);
    if (!ifd__gguf_str_is(g, "general.architecture", "clip"))
        return IFD_ENOTFOUND;
    bool has = false;
    if (ifd_gguf_get_bool(g, "clip.has_vision_encoder", &has) == 0 && !has)
        return ifd_fail_msg(errbuf, errlen, IFD_ENOTSUP, "%s: an mmproj without a vision encoder",
                            file);
    if (!ifd__gguf_str_is(g, "clip.projector_type", "gemma3") &&
        !ifd__gguf_str_is(g, "clip.vision.projector_type", "gemma3"))
        return ifd_fail_msg(errbuf, errlen, IFD_ENOTSUP,
                            "%s: clip.projector_type is not gemma3: only Gemma 3's mmproj is "
                            "supported",
                            file);
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof ifd__gkeys / sizeof ifd__gkeys[0]; i++)
        if (ifd_gguf_get_u32(g, ifd__gkeys[i].key, (uint32_t *)((char *)c + ifd__gkeys[i].off)))
            return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "%s: %s is missing or not an integer",
                                file, ifd__gkeys[i].key);
    c->n_channels = 3;
    c->eps = 1e-6f;
    (void)ifd_gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &c->eps);
    uint32_t merge = 4;
    (void)ifd_gguf_get_u32(g, "clip.vision.projector.scale_factor", &merge);
    if (!c->patch_size || !merge || c->image_size / c->patch_size % merge)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: the projector's pooling %u does not divide the %u-patch side",
                            file, merge, c->patch_size ? c->image_size / c->patch_size : 0);
    const uint32_t ts = c->image_size / c->patch_size / merge;
    c->tokens_per_image = ts * ts;
    c->boi_id = 255999;
    c->eoi_id = 256000;
    c->image_id = 262144;
    if (!(c->eps >= 0 && c->eps <= 1))
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: clip.vision.attention.layer_norm_epsilon out of [0, 1]", file);
    int rc = ifd__check(c, file, errbuf, errlen);
    if (rc == 0)
        c->head_dim = c->n_embd / c->n_head;
    return rc;
}

void ifd_vision_config_gemma3_4b(ifd_vision_config_t *c)
{
    *c = (ifd_vision_config_t){.image_size = 896,
                               .patch_size = 14,
                               .n_channels = 3,
                               .n_embd = 1152,
                               .n_ff = 4304,
                               .n_layer = 27,
                               .n_head = 16,
                               .head_dim = 72,
                               .eps = 1e-6f,
                               .tokens_per_image = 256,
                               .text_embd = 2560,
                               .boi_id = 255999,
                               .eoi_id = 256000,
                               .image_id = 262144};
}

int ifd_vision_config_check(ifd_vision_config_t *c, const char *what, char *errbuf, size_t errlen)
{
    int rc = ifd__check(c, what, errbuf, errlen);
    if (rc == 0)
        c->head_dim = c->n_embd / c->n_head;
    return rc;
}
