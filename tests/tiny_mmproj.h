/*
 * tiny_mmproj.h — tests' writer of the committed tiny Gemma 3's tower
 * (tests/data/tiny-gemma3-vision) as a llama.cpp mmproj GGUF (test_vision,
 * test_worker_vision). Check assertions; header-only like gguf_builder.h.
 */
#ifndef IFD_TEST_TINY_MMPROJ_H
#define IFD_TEST_TINY_MMPROJ_H

#include "gguf_builder.h"
#include "cpu/cpu_kernels.h"
#include "modelfile/gguf.h"
#include "modelfile/model_source.h"

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tiny model's tower as llama.cpp's converter writes an mmproj: clip
 * metadata, the mmproj names, F32 data, mm.soft_emb_norm stored as 1 + w,
 * mm.input_projection in HF's orientation; scale_factor 2 (the tiny's pool;
 * Gemma 3's default 4 is left out when merge is 0); with mean_std (six
 * floats) clip.vision.image_mean and image_std. Written to `path`. */
/* GGML's q8_0 of n values (n a multiple of 32): per block an f16 scale
 * amax / 127, then round(x / d) as int8 — the reference quantizer. */
static inline void ifd_test_q8_0(ifd_buf_t *b, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i += 32) {
        float amax = 0;
        for (int k = 0; k < 32; k++)
            amax = fmaxf(amax, fabsf(x[i + k]));
        const float d = amax / 127, id = d ? 1 / d : 0;
        const uint16_t h = ifd_f32_to_f16(d);
        ifd_buf_append(b, &h, 2);
        for (int k = 0; k < 32; k++) {
            const int8_t q = (int8_t)roundf(x[i + k] * id);
            ifd_buf_append(b, &q, 1);
        }
    }
}

static inline void ifd_test_write_tiny_mmproj(const char *tiny_dir, const char *path,
                                              uint32_t merge, const char *proj_type, bool q8_proj,
                                              const float *mean_std)
{
    ifd_model_source_t *hf = NULL;
    char err[512];
    ck_assert_msg(ifd_model_source_open(&hf, tiny_dir, err, sizeof err) == 0, "%s", err);
    static const char *const sfx[] = {"attn_q", "attn_k", "attn_v", "attn_out",
                                      "ln1",    "ln2",    "ffn_up", "ffn_down"};
    char names[64][48];
    int n = 0;
    snprintf(names[n++], 48, "v.patch_embd.weight");
    snprintf(names[n++], 48, "v.patch_embd.bias");
    snprintf(names[n++], 48, "v.position_embd.weight");
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 8; k++)
            for (int wb = 0; wb < 2; wb++)
                snprintf(names[n++], 48, "v.blk.%d.%s.%s", l, sfx[k], wb ? "bias" : "weight");
    snprintf(names[n++], 48, "v.post_ln.weight");
    snprintf(names[n++], 48, "v.post_ln.bias");
    snprintf(names[n++], 48, "mm.soft_emb_norm.weight");
    snprintf(names[n++], 48, "mm.input_projection.weight");
    ifd_tensor_view_t tv[64];
    for (int i = 0; i < n; i++)
        ck_assert_msg(ifd_model_source_find(hf, names[i], &tv[i]) == 0, "%s", names[i]);
    ifd_buf_t b = {0};
    static const char *const ukeys[] = {
        "clip.vision.image_size",       "clip.vision.patch_size",
        "clip.vision.embedding_length", "clip.vision.feed_forward_length",
        "clip.vision.block_count",      "clip.vision.attention.head_count",
        "clip.vision.projection_dim"};
    const uint32_t uvals[] = {112, 14, 64, 96, 2, 4, 64};
    gb_header(&b, 3, (uint64_t)n, 7 + 4 + (merge ? 1 : 0) + (mean_std ? 2 : 0));
    gb_kv_str(&b, "general.architecture", "clip");
    gb_kv_str(&b, "clip.projector_type", proj_type);
    gb_key(&b, "clip.has_vision_encoder", IFD_GGUF_BOOL);
    gb_u8(&b, 1);
    gb_key(&b, "clip.vision.attention.layer_norm_epsilon", IFD_GGUF_FLOAT32);
    float eps = 1e-6f;
    ifd_buf_append(&b, &eps, 4);
    for (int i = 0; i < 7; i++)
        gb_kv_u32(&b, ukeys[i], uvals[i]);
    if (merge)
        gb_kv_u32(&b, "clip.vision.projector.scale_factor", merge);
    for (int k = 0; mean_std && k < 2; k++) { /* arrays of three float32 */
        gb_key(&b, k ? "clip.vision.image_std" : "clip.vision.image_mean", IFD_GGUF_ARRAY);
        gb_u32(&b, IFD_GGUF_FLOAT32);
        gb_u64(&b, 3);
        ifd_buf_append(&b, mean_std + 3 * k, 3 * sizeof(float));
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) { /* the last: mm.input_projection, q8_0 if asked */
        const bool q = q8_proj && i == n - 1;
        gb_tensor_info(&b, names[i], tv[i].n_dims, tv[i].ne, q ? 8 /* Q8_0 */ : 0 /* F32 */, off);
        off += ((q ? tv[i].nbytes / 4 / 32 * 34 : tv[i].nbytes) + 31) / 32 * 32;
    }
    gb_pad(&b, 32);
    for (int i = 0; i < n; i++) {
        const size_t ne = tv[i].nbytes / 4;
        float *v = malloc(tv[i].nbytes);
        memcpy(v, tv[i].data, tv[i].nbytes);
        for (size_t k = 0; k < ne; k++)
            v[k] += tv[i].add_one ? 1.0f : 0.0f; /* the converter's + 1 on soft_emb_norm */
        if (q8_proj && i == n - 1)
            ifd_test_q8_0(&b, v, ne);
        else
            ifd_buf_append(&b, v, tv[i].nbytes);
        free(v);
        gb_pad(&b, 32);
    }
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b.data, 1, b.len, f), b.len);
    fclose(f);
    ifd_buf_free(&b);
    ifd_model_source_close(hf);
}

#endif
