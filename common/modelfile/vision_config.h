/*
 * vision_config.h — the shape of a Gemma 3 vision tower and projector
 * (SigLIP ViT + Gemma3MultiModalProjector) from a Hugging Face
 * Gemma3ForConditionalGeneration config.json: its `vision_config` object
 * (SiglipVisionConfig's defaults for absent keys) and the top-level
 * `mm_tokens_per_image`, `boi_token_index`, `eoi_token_index`,
 * `image_token_index` (Gemma3Config's defaults: 256, 255999, 256000,
 * 262144), the text width from `text_config.hidden_size`.
 *
 * Threading: reentrant. Ownership: plain values, no allocation kept.
 */
#ifndef IFD_VISION_CONFIG_H
#define IFD_VISION_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct {
    uint32_t image_size; /* square input side in pixels (896 for Gemma 3 4B) */
    uint32_t patch_size; /* 14 */
    uint32_t n_channels; /* 3 */
    uint32_t n_embd;     /* tower width (1152) */
    uint32_t n_ff;       /* MLP width (4304) */
    uint32_t n_layer;    /* 27 */
    uint32_t n_head;     /* 16; head_dim = n_embd / n_head */
    uint32_t head_dim;
    float eps;                 /* layer_norm_eps: every LayerNorm and the soft-emb RMSNorm */
    uint32_t tokens_per_image; /* mm_tokens_per_image: a square (256 = 16²) */
    uint32_t text_embd;        /* the projector's output width (text hidden_size) */
    int32_t boi_id, eoi_id, image_id;
} ifd_vision_config_t;

/* Patches per side (image_size / patch_size) and in all; pooled tokens per
 * side; the pooling window side (patches per side / tokens per side). */
static inline uint32_t ifd_vision_patch_side(const ifd_vision_config_t *c)
{
    return c->image_size / c->patch_size;
}
static inline uint32_t ifd_vision_n_patches(const ifd_vision_config_t *c)
{
    return ifd_vision_patch_side(c) * ifd_vision_patch_side(c);
}
uint32_t ifd_vision_token_side(const ifd_vision_config_t *c);
static inline uint32_t ifd_vision_pool(const ifd_vision_config_t *c)
{
    return ifd_vision_patch_side(c) / ifd_vision_token_side(c);
}

/* google/gemma-3-4b's tower (also 12B's and 27B's): 896 px, patch 14,
 * width 1152, MLP 4304, 27 layers, 16 heads, eps 1e-6, 256 tokens, text width
 * 2560, ids 255999 / 256000 / 262144. */
void ifd_vision_config_gemma3_4b(ifd_vision_config_t *c);

/* The shape checks of the readers below (sizes in range, the patch grid,
 * pooling and heads dividing; head_dim set): 0 or IFD_EFORMAT/IFD_ENOTSUP
 * with a message naming `what`. */
int ifd_vision_config_check(ifd_vision_config_t *c, const char *what, char *errbuf, size_t errlen);

/*
 * Reads dir/config.json. 0 with *c filled; IFD_ENOTFOUND when the config has
 * no `vision_config` (a text-only model: errbuf untouched); IFD_ENOTSUP for
 * a tower inferd cannot run (hidden_act other than gelu_pytorch_tanh,
 * num_channels other than 3, vision_use_head true); IFD_EFORMAT for a
 * malformed or inconsistent one (image_size not a multiple of patch_size,
 * tokens not a square dividing the patch grid, heads not dividing the
 * width, a size out of range); -errno when the file cannot be read. The
 * message, naming the file and the key, goes to errbuf.
 */
int ifd_vision_config_from_hf(ifd_vision_config_t *c, const char *dir, char *errbuf, size_t errlen);

/*
 * Reads a llama.cpp mmproj GGUF's metadata (general.architecture "clip",
 * clip.projector_type "gemma3"): clip.vision.{image_size, patch_size,
 * embedding_length, feed_forward_length, block_count,
 * attention.head_count, attention.layer_norm_epsilon (default 1e-6),
 * projection_dim (the text width)}; tokens per image = (patches per side /
 * n)² with n = clip.vision.projector.scale_factor, default 4 (llama.cpp's
 * rule for Gemma 3). The boi/eoi/image ids are not in an mmproj: they get
 * Gemma3Config's defaults (the text model's tokenizer has the real ones).
 * 0; IFD_ENOTFOUND when the file is not a clip GGUF; IFD_ENOTSUP for
 * another projector type or a file without a vision encoder; IFD_EFORMAT
 * for a missing or inconsistent key (message in errbuf).
 */
int ifd_vision_config_from_gguf(ifd_vision_config_t *c, const ifd_gguf_t *g, char *errbuf,
                                size_t errlen);

#endif
