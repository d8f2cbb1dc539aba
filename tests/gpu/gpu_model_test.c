/*
 * gpu_model_test.c — see gpu_model_test.h.
 */
#include "gpu_model_test.h"

#include "error.h"
#include "gpu_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

ifd_model_config_t gt_tiny_config(bool gemma, uint32_t n_layer)
{
    ifd_model_config_t c;
    memset(&c, 0, sizeof c);
    c.arch = gemma ? IFD_ARCH_GEMMA3 : IFD_ARCH_LLAMA;
    snprintf(c.arch_name, sizeof c.arch_name, "%s", gemma ? "gemma3" : "llama");
    c.n_layer = n_layer;
    c.n_embd = 128;
    c.n_ff = 192;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 64;
    c.n_rot = 64;
    c.n_vocab = 101;
    c.n_ctx_train = 256;
    c.rms_eps = 1e-6f;
    c.rope_base = gemma ? 1000000.0f : 10000.0f;
    c.rope_freq_scale = 1.0f;
    c.rope_base_local = gemma ? 10000.0f : 0.0f;
    c.attn_scale = 1.0f / 8.0f;
    c.embd_scale = gemma ? sqrtf(128.0f) : 1.0f;
    if (gemma) {
        c.sliding_window = 8;
        for (uint32_t l = 0; l < n_layer; l += 2)
            c.layer_is_local[l] = true;
    }
    return c;
}

int gt_side_open(gt_side_t *s, ifd_backend_t *be, int be_rc, const char *be_err,
                 const ifd_model_config_t *c, ifd_dtype_t kv_dtype, int block_size, int n_blocks)
{
    memset(s, 0, sizeof *s);
    if (be_rc || !be) {
        gt_fail(__FILE__, __LINE__, "backend create: %s %s", ifd_strerror(be_rc),
                be_err ? be_err : "");
        return be_rc ? be_rc : IFD_EINVAL;
    }
    s->be = be;
    if (c->n_layer > GT_SIDE_MAX_LAYERS) {
        gt_fail(__FILE__, __LINE__, "%u layers > %d", c->n_layer, GT_SIDE_MAX_LAYERS);
        return IFD_EINVAL;
    }
    char err[256] = "";
    int rc = ifd_model_load_random(&s->m, c, 42, be, err, sizeof err);
    if (rc) {
        gt_fail(__FILE__, __LINE__, "load: %s %s", ifd_strerror(rc), err);
        return rc;
    }
    const size_t bytes = (size_t)n_blocks * c->n_head_kv * (size_t)block_size *
                         (size_t)ifd_kv_row_bytes(kv_dtype, (int)c->head_dim);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        if ((rc = be->ops->alloc(be, bytes, &s->k[l])) ||
            (rc = be->ops->alloc(be, bytes, &s->v[l]))) {
            gt_fail(__FILE__, __LINE__, "KV alloc (%zu bytes): %s", bytes, ifd_strerror(rc));
            return rc;
        }
        s->n_layer = l + 1;
        s->kv[l] = (ifd_kv_layer_t){s->k[l],    s->v[l],           kv_dtype,
                                    block_size, (int)c->n_head_kv, (int)c->head_dim};
    }
    return 0;
}

void gt_side_close(gt_side_t *s)
{
    if (!s->be)
        return;
    for (uint32_t l = 0; l < s->n_layer; l++) {
        s->be->ops->free(s->be, s->k[l]);
        s->be->ops->free(s->be, s->v[l]);
    }
    ifd_model_destroy(s->m);
    s->be->ops->destroy(s->be);
    memset(s, 0, sizeof *s);
}
