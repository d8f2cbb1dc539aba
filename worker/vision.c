/*
 * vision.c — Gemma 3's SigLIP tower and projector on a backend (vision.h).
 *
 * Loading asks the source for llama.cpp's mmproj names (model_source.h
 * maps them onto an HF checkpoint); each tensor's shape is checked against
 * the config before the backend copies it. q|k|v load as one projection
 * (one GEMM, biases concatenated). mm_input_projection_weight is stored
 * [width, text width] (HF's orientation: the projector multiplies by it
 * from the right), so it is transposed on the host into a [text width,
 * width] projection (a quantized one, as an mmproj may store it, is
 * dequantized to f32 on the host first: transposing moves whole values).
 *
 * Backends: the CPU and CUDA ones (any with the five vision ops and an f32
 * or bf16 mm_in_dtype: the im2col'd patches are rounded to bf16 on the host
 * for a bf16 one).
 *
 * Encoding allocates its activations per call (an image is rare and the
 * tower's work dwarfs the allocation) from the table ifd__acts, and frees
 * them before returning; the residual stream x ends as the tower output
 * (post_layernorm in place).
 */
#include "vision.h"

#include "error.h"
#include "log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ifd_weight_t ln1_w, ln1_b, ln2_w, ln2_b;
    ifd_proj_t qkv, out, fc1, fc2;
} ifd__vlayer_t;

struct ifd_vision {
    ifd_backend_t *be;
    ifd_vision_config_t cfg;
    ifd_proj_t patch; /* [width, 3 · P · P] + bias */
    ifd_weight_t pos; /* f32 [n_patches, width] */
    ifd__vlayer_t *layers;
    ifd_weight_t post_w, post_b;
    ifd_weight_t soft_norm; /* RMSNorm (1 + w) */
    ifd_proj_t mm;          /* [text width, width] */
    uint64_t weight_bytes;
};

/* The load's context: where tensors come from and where messages go. */
typedef struct {
    ifd_vision_t *v;
    const ifd_model_source_t *src; /* NULL: random weights from seed */
    const char *what;              /* the source's path, or "random weights" */
    uint64_t seed;
    void *bufs[2 * IFD_PROJ_MAX_PARTS]; /* random tensors of the current load call */
    int n_bufs;
    char *err;
    size_t errlen;
} ifd__vload_t;

static void ifd__vrelease(ifd__vload_t *L)
{
    for (int i = 0; i < L->n_bufs; i++)
        free(L->bufs[i]);
    L->n_bufs = 0;
}

static uint64_t ifd__vmix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random bf16 values for tensor `name` (element i a function of seed, name
 * and i, as model.c's random weights): vectors 1 + U(-0.1, 0.1), matrices
 * and tables U(-a, a) with a = sqrt(3 / cols). For speed runs in real
 * shapes without a file. */
static int ifd__vrandom(ifd__vload_t *L, const char *name, int64_t rows, int64_t cols,
                        ifd_weight_src_t *out)
{
    uint64_t h = 1469598103934665603ull ^ L->seed;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    const size_t n = (size_t)(rows * cols);
    uint16_t *v = L->n_bufs < (int)(sizeof L->bufs / sizeof L->bufs[0]) ? malloc(n * 2 + 2) : NULL;
    if (!v)
        return ifd_fail_msg(L->err, L->errlen, IFD_ENOMEM, "%s: tensor '%s': out of memory",
                            L->what, name);
    L->bufs[L->n_bufs++] = v;
    const bool vec = rows == 1;
    const float a = vec ? 0.1f : sqrtf(3.0f / (float)cols);
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = ifd__vmix(h + 0x9e3779b97f4a7c15ull * (i + 1));
        const float u = (float)(r >> 40) / 8388608.0f - 1.0f;
        v[i] = ifd_f32_to_bf16((vec ? 1.0f : 0.0f) + a * u);
    }
    *out = (ifd_weight_src_t){
        .name = name, .data = v, .type = IFD_GGML_BF16, .rows = rows, .cols = cols};
    return 0;
}

/* Tensor `name` with shape ne (innermost first, unused dims 1) as a source
 * of rows × cols; *add_one gets the view's flag (may be NULL). */
static int ifd__vfind(ifd__vload_t *L, const char *name, const uint64_t ne[4], int64_t rows,
                      int64_t cols, ifd_weight_src_t *out, bool *add_one)
{
    if (!L->src) {
        if (add_one)
            *add_one = false;
        return ifd__vrandom(L, name, rows, cols, out);
    }
    ifd_tensor_view_t t;
    char fname[256];
    ifd_model_source_name(L->src, name, fname, sizeof fname);
    if (ifd_model_source_find(L->src, name, &t) != 0)
        return ifd_fail_msg(L->err, L->errlen, IFD_EFORMAT, "%s: tensor '%s' is missing", L->what,
                            fname);
    for (int d = 0; d < 4; d++)
        if (t.ne[d] != ne[d])
            return ifd_fail_msg(
                L->err, L->errlen, IFD_EFORMAT,
                "%s: tensor '%s' has shape [%llu, %llu, %llu, %llu] (innermost "
                "first), expected [%llu, %llu, %llu, %llu]",
                t.file, t.name, (unsigned long long)t.ne[0], (unsigned long long)t.ne[1],
                (unsigned long long)t.ne[2], (unsigned long long)t.ne[3], (unsigned long long)ne[0],
                (unsigned long long)ne[1], (unsigned long long)ne[2], (unsigned long long)ne[3]);
    ifd_backend_t *be = L->v->be;
    if (t.ggml_type == IFD_TENSOR_TYPE_UNSUPPORTED ||
        !be->ops->can_load(be, (ifd_ggml_type_t)t.ggml_type))
        return ifd_fail_msg(L->err, L->errlen, IFD_ENOTSUP,
                            "%s: tensor '%s' has type %s, which inferd cannot load", t.file, t.name,
                            t.dtype ? t.dtype : ifd_ggml_type_name(t.ggml_type));
    *out = (ifd_weight_src_t){.name = name,
                              .data = t.data,
                              .type = (ifd_ggml_type_t)t.ggml_type,
                              .rows = rows,
                              .cols = cols};
    if (add_one)
        *add_one = t.add_one;
    return 0;
}

/* A vector (or, rows > 1, an f32 table) `name` of rows × cols. */
static int ifd__vweight(ifd__vload_t *L, ifd_weight_t *w, const char *name, int64_t rows,
                        int64_t cols, ifd_weight_use_t use)
{
    const uint64_t ne[4] = {(uint64_t)cols, (uint64_t)rows, 1, 1};
    ifd_weight_src_t s;
    bool add_one;
    int rc = ifd__vfind(L, name, ne, rows, cols, &s, &add_one);
    if (rc)
        return rc;
    if (use == IFD_WEIGHT_NORM && add_one)
        use = IFD_WEIGHT_NORM_ADD1;
    rc = L->v->be->ops->load_weight(L->v->be, w, &s, use);
    ifd__vrelease(L);
    if (rc)
        return ifd_fail_msg(L->err, L->errlen, rc, "%s: tensor '%s': %s", L->what, name,
                            ifd_strerror(rc));
    ifd_model_source_release(L->src, name);
    L->v->weight_bytes += w->bytes;
    return 0;
}

/* A projection from n parts "<base>.weight" (rows[i] × cols, stored with
 * shape ne_w: the conv weight is 4-D) each with "<base>.bias". */
static int ifd__vproj(ifd__vload_t *L, ifd_proj_t *p, const char *const *bases, const int64_t *rows,
                      int n, int64_t cols, const uint64_t *ne_w)
{
    ifd_weight_src_t w[IFD_PROJ_MAX_PARTS] = {0}, b[IFD_PROJ_MAX_PARTS] = {0};
    const ifd_weight_src_t *bp[IFD_PROJ_MAX_PARTS] = {0}; /* zeroed for gcc -O1's warning */
    char wn[IFD_PROJ_MAX_PARTS][96], bn[IFD_PROJ_MAX_PARTS][96];
    int rc;
    for (int i = 0; i < n; i++) {
        const uint64_t ne2[4] = {(uint64_t)cols, (uint64_t)rows[i], 1, 1};
        const uint64_t neb[4] = {(uint64_t)rows[i], 1, 1, 1};
        snprintf(wn[i], sizeof wn[i], "%s.weight", bases[i]);
        snprintf(bn[i], sizeof bn[i], "%s.bias", bases[i]);
        if ((rc = ifd__vfind(L, wn[i], ne_w ? ne_w : ne2, rows[i], cols, &w[i], NULL)) ||
            (rc = ifd__vfind(L, bn[i], neb, 1, rows[i], &b[i], NULL))) {
            ifd__vrelease(L);
            return rc;
        }
        bp[i] = &b[i];
    }
    rc = L->v->be->ops->load_proj(L->v->be, p, w, bp, n);
    ifd__vrelease(L);
    if (rc)
        return ifd_fail_msg(L->err, L->errlen, rc, "%s: tensor '%s': %s", L->what, wn[0],
                            ifd_strerror(rc));
    for (int i = 0; i < n; i++)
        ifd_model_source_release(L->src, wn[i]);
    for (int i = 0; i < p->n_parts; i++)
        L->v->weight_bytes += p->part[i].bytes;
    L->v->weight_bytes += p->bias.bytes;
    return 0;
}

/* mm.input_projection [width rows of text-width values] → a projection
 * [text width, width]: the elements transposed on the host (2- or 4-byte
 * types: the ones a checkpoint stores it in). */
static int ifd__vmm(ifd__vload_t *L)
{
    const ifd_vision_config_t *c = &L->v->cfg;
    const uint64_t ne[4] = {c->text_embd, c->n_embd, 1, 1};
    ifd_weight_src_t s;
    int rc = ifd__vfind(L, "mm.input_projection.weight", ne, c->n_embd, c->text_embd, &s, NULL);
    if (rc)
        return rc;
    const size_t R = c->n_embd, C = c->text_embd;
    size_t es = s.type == IFD_GGML_F32                              ? 4
                : s.type == IFD_GGML_F16 || s.type == IFD_GGML_BF16 ? 2
                                                                    : 0;
    float *deq = NULL; /* a quantized matrix: dequantized on the host, then moved as f32 */
    if (!es) {
        if (!(deq = malloc(R * C * sizeof(float))))
            return ifd_fail_msg(L->err, L->errlen, IFD_ENOMEM, "out of memory");
        if ((rc = ifd_cpu_dequantize(deq, s.data, s.type, (int64_t)(R * C)))) {
            free(deq);
            return ifd_fail_msg(L->err, L->errlen, rc,
                                "%s: tensor 'mm.input_projection.weight' (%s): %s", L->what,
                                ifd_ggml_type_name(s.type), ifd_strerror(rc));
        }
        s.data = deq;
        s.type = IFD_GGML_F32;
        es = 4;
    }
    char *t = malloc(R * C * es);
    if (!t) {
        free(deq);
        ifd__vrelease(L);
        return ifd_fail_msg(L->err, L->errlen, IFD_ENOMEM, "out of memory");
    }
    for (size_t r = 0; r < R; r++)
        for (size_t k = 0; k < C; k++)
            memcpy(t + (k * R + r) * es, (const char *)s.data + (r * C + k) * es, es);
    free(deq);
    ifd__vrelease(L);
    s.data = t;
    s.rows = (int64_t)C;
    s.cols = (int64_t)R;
    const ifd_weight_src_t *nob = NULL;
    rc = L->v->be->ops->load_proj(L->v->be, &L->v->mm, &s, &nob, 1);
    free(t);
    if (rc)
        return ifd_fail_msg(L->err, L->errlen, rc, "%s: tensor 'mm.input_projection.weight': %s",
                            L->what, ifd_strerror(rc));
    L->v->weight_bytes += L->v->mm.part[0].bytes;
    return 0;
}

static int ifd__vlayer(ifd__vload_t *L, ifd__vlayer_t *ly, int l)
{
    const ifd_vision_config_t *c = &L->v->cfg;
    char n[8][48];
    static const char *const sfx[8] = {"ln1",    "ln2",      "attn_q", "attn_k",
                                       "attn_v", "attn_out", "ffn_up", "ffn_down"};
    for (int i = 0; i < 8; i++)
        snprintf(n[i], sizeof n[i], "v.blk.%d.%s", l, sfx[i]);
    char w1[64], b1[64], w2[64], b2[64];
    snprintf(w1, sizeof w1, "%s.weight", n[0]);
    snprintf(b1, sizeof b1, "%s.bias", n[0]);
    snprintf(w2, sizeof w2, "%s.weight", n[1]);
    snprintf(b2, sizeof b2, "%s.bias", n[1]);
    const int64_t W = c->n_embd, F = c->n_ff;
    const char *qkv[3] = {n[2], n[3], n[4]}, *out = n[5], *up = n[6], *down = n[7];
    const int64_t rq[3] = {W, W, W};
    int rc;
    if ((rc = ifd__vweight(L, &ly->ln1_w, w1, 1, W, IFD_WEIGHT_VECTOR)) ||
        (rc = ifd__vweight(L, &ly->ln1_b, b1, 1, W, IFD_WEIGHT_VECTOR)) ||
        (rc = ifd__vweight(L, &ly->ln2_w, w2, 1, W, IFD_WEIGHT_VECTOR)) ||
        (rc = ifd__vweight(L, &ly->ln2_b, b2, 1, W, IFD_WEIGHT_VECTOR)) ||
        (rc = ifd__vproj(L, &ly->qkv, qkv, rq, 3, W, NULL)) ||
        (rc = ifd__vproj(L, &ly->out, &out, &W, 1, W, NULL)) ||
        (rc = ifd__vproj(L, &ly->fc1, &up, &F, 1, W, NULL)) ||
        (rc = ifd__vproj(L, &ly->fc2, &down, &W, 1, F, NULL)))
        return rc;
    return 0;
}

static int ifd__vload_all(ifd__vload_t *L)
{
    ifd_vision_t *v = L->v;
    const ifd_vision_config_t *c = &v->cfg;
    const int64_t W = c->n_embd, P = c->patch_size, np = ifd_vision_n_patches(c);
    const uint64_t ne_conv[4] = {(uint64_t)P, (uint64_t)P, c->n_channels, (uint64_t)W};
    const char *patch = "v.patch_embd";
    int rc;
    if ((rc = ifd__vproj(L, &v->patch, &patch, &W, 1, c->n_channels * P * P, ne_conv)) ||
        (rc = ifd__vweight(L, &v->pos, "v.position_embd.weight", np, W, IFD_WEIGHT_VECTOR)))
        return rc;
    for (uint32_t l = 0; l < c->n_layer; l++)
        if ((rc = ifd__vlayer(L, &v->layers[l], (int)l)))
            return rc;
    if ((rc = ifd__vweight(L, &v->post_w, "v.post_ln.weight", 1, W, IFD_WEIGHT_VECTOR)) ||
        (rc = ifd__vweight(L, &v->post_b, "v.post_ln.bias", 1, W, IFD_WEIGHT_VECTOR)) ||
        (rc = ifd__vweight(L, &v->soft_norm, "mm.soft_emb_norm.weight", 1, W, IFD_WEIGHT_NORM)))
        return rc;
    return ifd__vmm(L);
}

/* Loads cfg's tower from src (NULL: random weights from seed) onto be. */
static int ifd__vision_new(ifd_vision_t **out, const ifd_vision_config_t *cfg,
                           const ifd_model_source_t *src, uint64_t seed, ifd_backend_t *be,
                           char *errbuf, size_t errlen)
{
    const ifd_backend_ops_t *o = be->ops;
    if (!o->layernorm || !o->add_rows || !o->gelu || !o->dense_attention || !o->avg_pool2d ||
        (o->mm_in_dtype != IFD_DTYPE_F32 && o->mm_in_dtype != IFD_DTYPE_BF16))
        return ifd_fail_msg(errbuf, errlen, IFD_ENOTSUP,
                            "vision on the %s backend not yet (it lacks the vision ops)", o->name);
    ifd_vision_t *v = calloc(1, sizeof *v);
    if (!v || !(v->layers = calloc(cfg->n_layer, sizeof *v->layers))) {
        free(v);
        return ifd_fail_msg(errbuf, errlen, IFD_ENOMEM, "out of memory");
    }
    v->be = be;
    v->cfg = *cfg;
    ifd__vload_t L = {.v = v,
                      .src = src,
                      .what = src ? ifd_model_source_path(src) : "random weights",
                      .seed = seed,
                      .err = errbuf,
                      .errlen = errlen};
    int rc = ifd__vload_all(&L);
    if (rc) {
        ifd_vision_destroy(v);
        return rc;
    }
    *out = v;
    return 0;
}

int ifd_vision_load(ifd_vision_t **out, const ifd_model_source_t *src, ifd_backend_t *be,
                    char *errbuf, size_t errlen)
{
    *out = NULL;
    const char *why = NULL;
    const ifd_vision_config_t *cfg = ifd_model_source_vision(src, &why);
    if (!cfg)
        return ifd_fail_msg(errbuf, errlen, IFD_ENOTFOUND, "%s",
                            why ? why : "the model has no vision tower");
    return ifd__vision_new(out, cfg, src, 0, be, errbuf, errlen);
}

int ifd_vision_load_random(ifd_vision_t **out, const ifd_vision_config_t *cfg, uint64_t seed,
                           ifd_backend_t *be, char *errbuf, size_t errlen)
{
    *out = NULL;
    ifd_vision_config_t c = *cfg;
    int rc = ifd_vision_config_check(&c, "random weights", errbuf, errlen);
    return rc ? rc : ifd__vision_new(out, &c, NULL, seed, be, errbuf, errlen);
}

void ifd_vision_destroy(ifd_vision_t *v)
{
    if (!v)
        return;
    ifd_backend_t *be = v->be;
    const ifd_backend_ops_t *o = be->ops;
    for (uint32_t l = 0; v->layers && l < v->cfg.n_layer; l++) {
        ifd__vlayer_t *ly = &v->layers[l];
        ifd_weight_t *ws[] = {&ly->ln1_w, &ly->ln1_b, &ly->ln2_w, &ly->ln2_b};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            o->weight_free(be, ws[i]);
        ifd_proj_t *ps[] = {&ly->qkv, &ly->out, &ly->fc1, &ly->fc2};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            o->proj_free(be, ps[i]);
    }
    ifd_weight_t *ws[] = {&v->pos, &v->post_w, &v->post_b, &v->soft_norm};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        o->weight_free(be, ws[i]);
    o->proj_free(be, &v->patch);
    o->proj_free(be, &v->mm);
    free(v->layers);
    free(v);
}

const ifd_vision_config_t *ifd_vision_config(const ifd_vision_t *v)
{
    return &v->cfg;
}

int ifd_vision_tokens_per_image(const ifd_vision_t *v)
{
    return (int)v->cfg.tokens_per_image;
}

int ifd_vision_text_width(const ifd_vision_t *v)
{
    return (int)v->cfg.text_embd;
}

int ifd_vision_image_size(const ifd_vision_t *v)
{
    return (int)v->cfg.image_size;
}

uint64_t ifd_vision_weight_bytes(const ifd_vision_t *v)
{
    return v->weight_bytes;
}

/* ---- encode ----------------------------------------------------------------- */

/* The activations of one encode: index, mm_in (else f32), rows (patches or
 * tokens), cols (which width). */
enum { A_PATCH, A_X, A_Y, A_QKV, A_ATT, A_O, A_H, A_G, A_POOL, A_NORM, A_FEAT, A_N };
enum { R_PATCHES, R_TOKENS };
enum { C_PATCH, C_W, C_3W, C_FF, C_TEXT };
static const struct {
    bool mm_in;
    int rows, cols;
} ifd__acts[A_N] = {
    [A_PATCH] = {true, R_PATCHES, C_PATCH}, [A_X] = {false, R_PATCHES, C_W},
    [A_Y] = {true, R_PATCHES, C_W},         [A_QKV] = {false, R_PATCHES, C_3W},
    [A_ATT] = {true, R_PATCHES, C_W},       [A_O] = {false, R_PATCHES, C_W},
    [A_H] = {false, R_PATCHES, C_FF},       [A_G] = {true, R_PATCHES, C_FF},
    [A_POOL] = {false, R_TOKENS, C_W},      [A_NORM] = {true, R_TOKENS, C_W},
    [A_FEAT] = {false, R_TOKENS, C_TEXT},
};

/* pixel_values [3][S][S] → patches [n][c · P² + ky · P + kx] (the conv
 * weight's order). */
static void ifd__im2col(float *patches, const float *pv, const ifd_vision_config_t *c)
{
    const int P = (int)c->patch_size, S = (int)c->image_size, side = S / P, C = (int)c->n_channels;
    for (int py = 0; py < side; py++)
        for (int px = 0; px < side; px++) {
            float *row = patches + ((int64_t)py * side + px) * C * P * P;
            for (int ch = 0; ch < C; ch++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(row + (ch * P + ky) * P,
                           pv + ((int64_t)ch * S + py * P + ky) * S + px * P,
                           sizeof(float) * (size_t)P);
        }
}

/* n host floats into a (mm_in_dtype: F32 as they are, BF16 rounded to
 * nearest even on the host, as the backend's own conversions round). */
static int ifd__upload_mm_in(ifd_backend_t *be, ifd_act_t *a, const float *host, size_t n)
{
    if (a->dtype == IFD_DTYPE_F32)
        return be->ops->upload(be, a->data, host, sizeof(float) * n);
    uint16_t *h16 = malloc(sizeof(uint16_t) * n);
    if (!h16)
        return IFD_ENOMEM;
    for (size_t i = 0; i < n; i++)
        h16[i] = ifd_f32_to_bf16(host[i]);
    int rc = be->ops->upload(be, a->data, h16, sizeof(uint16_t) * n);
    free(h16);
    return rc;
}

/* ---- incremental encode ----------------------------------------------------- */

/* Phases of one encode: the patch embedding, four per encoder layer (the
 * groups between which the residual stream rests in x), then the tail.
 * Each runs in pieces of rows [r0, r1): the patch embedding and every
 * layer phase are row-local in the patch rows (layernorm, proj, gelu,
 * add_rows per patch row; the attention per query row over all keys); the
 * tail in the rows of pooled tokens, whole bands of them (a band: one row
 * of the pooled grid, side / pool tokens, whose k × k windows cover pool
 * whole rows of the patch grid: post_layernorm on those rows, their
 * pooling, RMSNorm and the projector on the band's tokens). The kinds of
 * phase: a layer's four, then PH_PATCHES and PH_TAIL. */
enum { PH_LN1_QKV, PH_ATTN, PH_OUT_MLP_UP, PH_MLP_DOWN, PH_PER_LAYER };
enum { PH_PATCHES = PH_PER_LAYER, PH_TAIL };

/* A budgeted step's pieces of a patch-row phase are multiples of this many
 * rows (the packed matmul's panel height: fewer rows cost as much), the
 * last of a phase excepted; the tail's are whole bands. */
enum { IFD__STEP_ROWS = 16 };

struct ifd_vision_enc {
    ifd_vision_t *v;
    ifd_act_t a[A_N];
    int next; /* the next phase: 0 patches, 1 + 4 l + k layer l's k-th, last the tail */
    int row;  /* rows of phase `next` done (the tail: tokens) */
};

int ifd_vision_encode_phases(const ifd_vision_t *v)
{
    return 2 + PH_PER_LAYER * (int)v->cfg.n_layer;
}

/* The kind of phase `ph` of an encode (PH_*). */
static int ifd__phase_kind(const ifd_vision_t *v, int ph)
{
    if (ph == 0)
        return PH_PATCHES;
    return ph == ifd_vision_encode_phases(v) - 1 ? PH_TAIL : (ph - 1) % PH_PER_LAYER;
}

/* Multiply-adds × 2 per row of a phase of kind k (norms, gelu, pooling and
 * the position add, a few operations per value, left out): a patch row, or
 * for the tail a pooled token. */
static double ifd__phase_flops(const ifd_vision_config_t *c, int k)
{
    const double W = c->n_embd, F = c->n_ff, n = (double)ifd_vision_n_patches(c);
    switch (k) {
    case PH_PATCHES:
        return 2 * W * (double)c->n_channels * c->patch_size * c->patch_size;
    case PH_LN1_QKV:
        return 2 * W * 3 * W;
    case PH_ATTN:
        return 4 * n * W; /* q · K and p · V per head */
    case PH_OUT_MLP_UP:
        return 2 * W * W + 2 * W * F;
    case PH_MLP_DOWN:
        return 2 * F * W;
    default:
        return 2 * W * (double)c->text_embd;
    }
}

double ifd_vision_encode_flops(const ifd_vision_t *v)
{
    const ifd_vision_config_t *c = &v->cfg;
    double per_layer = 0;
    for (int k = 0; k < PH_PER_LAYER; k++)
        per_layer += ifd__phase_flops(c, k);
    return ((double)c->n_layer * per_layer + ifd__phase_flops(c, PH_PATCHES)) *
               (double)ifd_vision_n_patches(c) +
           ifd__phase_flops(c, PH_TAIL) * (double)c->tokens_per_image;
}

/* Rows r0.. of a (rows r0 on: a view for the row-local ops). */
static ifd_act_t ifd__rows(const ifd_act_t *a, int r0)
{
    ifd_act_t v = *a;
    v.data = (char *)a->data + (size_t)r0 * (size_t)a->cols * (size_t)ifd_dtype_size(a->dtype);
    v.rows = a->rows - r0;
    return v;
}

/* Rows [r0, r1) of phase k (of PH_PER_LAYER) of layer l. The previous
 * layer's MLP output (in A_O) joins the residual at LN1, the attention's at
 * LN2. */
static int ifd__encode_layer_phase(ifd_vision_t *v, ifd_act_t *act, int n, uint32_t l, int k,
                                   int r0, int r1)
{
    ifd_backend_t *be = v->be;
    const ifd_backend_ops_t *o = be->ops;
    const ifd_vision_config_t *c = &v->cfg;
    const ifd__vlayer_t *ly = &v->layers[l];
    const float eps = c->eps, scale = 1.0f / sqrtf((float)c->head_dim);
    const int m = r1 - r0;
    if (k == PH_ATTN) /* every key: the whole q|k|v, the rows' part of the output */
        return o->dense_attention(be, &act[A_ATT], &act[A_QKV], n, r0, r1, (int)c->n_head,
                                  (int)c->head_dim, scale);
    ifd_act_t a[A_N]; /* the patch-row activations from row r0 on */
    for (int i = 0; i < A_N; i++)
        a[i] = ifd__rows(&act[i], ifd__acts[i].rows == R_PATCHES ? r0 : 0);
    int rc = 0;
    switch (k) {
    case PH_LN1_QKV:
        if (!(rc = o->layernorm(be, &a[A_Y], &a[A_X], l ? &a[A_O] : NULL, &ly->ln1_w, &ly->ln1_b, m,
                                eps)))
            rc = o->proj(be, &a[A_QKV], &a[A_Y], &ly->qkv, m);
        return rc;
    case PH_OUT_MLP_UP:
        if ((rc = o->proj(be, &a[A_O], &a[A_ATT], &ly->out, m)) ||
            (rc = o->layernorm(be, &a[A_Y], &a[A_X], &a[A_O], &ly->ln2_w, &ly->ln2_b, m, eps)) ||
            (rc = o->proj(be, &a[A_H], &a[A_Y], &ly->fc1, m)))
            return rc;
        return o->gelu(be, &a[A_G], &a[A_H], m);
    default:
        return o->proj(be, &a[A_O], &a[A_G], &ly->fc2, m);
    }
}

/* _begin's part of the first phase: the im2col'd patches uploaded (memory
 * work only, no FLOPs: the caller's pixels need not outlive _begin). */
static int ifd__upload_patches(ifd_vision_enc_t *e, const float *pv)
{
    ifd_vision_t *v = e->v;
    const size_t patch_floats = (size_t)ifd_vision_n_patches(&v->cfg) * (size_t)e->a[A_PATCH].cols;
    float *host = malloc(sizeof(float) * patch_floats);
    if (!host)
        return IFD_ENOMEM;
    ifd__im2col(host, pv, &v->cfg);
    int rc = ifd__upload_mm_in(v->be, &e->a[A_PATCH], host, patch_floats);
    free(host);
    return rc;
}

/* Patch rows [r0, r1) of the first phase: embedded, + their positions. */
static int ifd__encode_patches(ifd_vision_enc_t *e, int r0, int r1)
{
    ifd_vision_t *v = e->v;
    ifd_backend_t *be = v->be;
    ifd_act_t x = ifd__rows(&e->a[A_X], r0), patch = ifd__rows(&e->a[A_PATCH], r0);
    ifd_weight_t pos = v->pos; /* f32 [n_patches, width], plain: rows r0 on */
    pos.data = (char *)pos.data + (size_t)r0 * (size_t)pos.cols * sizeof(float);
    pos.rows -= r0;
    int rc = be->ops->proj(be, &x, &patch, &v->patch, r1 - r0);
    return rc ? rc : be->ops->add_rows(be, &x, &pos, r1 - r0);
}

/* Pooled tokens [t0, t1) of the last phase, whole bands (multiples of the
 * pooled side): the last MLP output joins the band's patch rows,
 * post_layernorm in place on them, then their pooling and the projector. */
static int ifd__encode_tail(ifd_vision_enc_t *e, int t0, int t1)
{
    ifd_vision_t *v = e->v;
    ifd_backend_t *be = v->be;
    const ifd_backend_ops_t *o = be->ops;
    const ifd_vision_config_t *c = &v->cfg;
    const int side = (int)ifd_vision_patch_side(c), k = (int)ifd_vision_pool(c), ps = side / k;
    IFD_ASSERT(t0 % ps == 0 && t1 % ps == 0);
    const int p0 = t0 / ps * k * side, grid_rows = (t1 - t0) / ps * k, T = t1 - t0;
    ifd_act_t x = ifd__rows(&e->a[A_X], p0), mlp = ifd__rows(&e->a[A_O], p0);
    ifd_act_t pool = ifd__rows(&e->a[A_POOL], t0), norm = ifd__rows(&e->a[A_NORM], t0);
    ifd_act_t feat = ifd__rows(&e->a[A_FEAT], t0);
    int rc;
    if ((rc = o->layernorm(be, &x, &x, c->n_layer ? &mlp : NULL, &v->post_w, &v->post_b,
                           grid_rows * side, c->eps)) ||
        (rc = o->avg_pool2d(be, &pool, &x, grid_rows, side, k)) ||
        (rc = o->rmsnorm(be, &norm, &pool, NULL, &v->soft_norm, T, c->eps)))
        return rc;
    return o->proj(be, &feat, &norm, &v->mm, T);
}

void ifd_vision_encode_free(ifd_vision_enc_t *e)
{
    if (!e)
        return;
    ifd_backend_t *be = e->v->be;
    for (int i = 0; i < A_N; i++)
        if (e->a[i].data)
            be->ops->act_free(be, &e->a[i]);
    free(e);
}

int ifd_vision_encode_begin(ifd_vision_enc_t **out, ifd_vision_t *v, const float *pixel_values)
{
    *out = NULL;
    const ifd_vision_config_t *c = &v->cfg;
    const size_t npx = (size_t)c->n_channels * c->image_size * c->image_size;
    for (size_t i = 0; i < npx; i++)
        if (!isfinite(pixel_values[i]))
            return IFD_EINVAL;
    ifd_vision_enc_t *e = calloc(1, sizeof *e);
    if (!e)
        return IFD_ENOMEM;
    e->v = v;
    ifd_backend_t *be = v->be;
    const int64_t rows[] = {
        [R_PATCHES] = ifd_vision_n_patches(c), [R_TOKENS] = c->tokens_per_image};
    const int64_t cols[] = {[C_PATCH] = (int64_t)c->n_channels * c->patch_size * c->patch_size,
                            [C_W] = c->n_embd,
                            [C_3W] = 3 * (int64_t)c->n_embd,
                            [C_FF] = c->n_ff,
                            [C_TEXT] = c->text_embd};
    int rc = 0;
    for (int i = 0; i < A_N && rc == 0; i++)
        rc = be->ops->act_alloc(be, &e->a[i],
                                ifd__acts[i].mm_in ? be->ops->mm_in_dtype : IFD_DTYPE_F32,
                                rows[ifd__acts[i].rows], cols[ifd__acts[i].cols]);
    /* the patches are uploaded now: the caller's pixels need not outlive the call */
    if (rc == 0)
        rc = ifd__upload_patches(e, pixel_values);
    if (rc) {
        ifd_vision_encode_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* Rows in phase `ph` (the tail's: pooled tokens). */
static int ifd__phase_rows(const ifd_vision_enc_t *e, int ph)
{
    const ifd_vision_config_t *c = &e->v->cfg;
    return (int)(ifd__phase_kind(e->v, ph) == PH_TAIL ? c->tokens_per_image
                                                      : ifd_vision_n_patches(c));
}

/* The rows a budgeted piece of phase `ph` is a multiple of: IFD__STEP_ROWS,
 * or for the tail one band (the pooled side). */
static int ifd__phase_unit(const ifd_vision_enc_t *e, int ph)
{
    const ifd_vision_config_t *c = &e->v->cfg;
    return ifd__phase_kind(e->v, ph) == PH_TAIL ? (int)ifd_vision_token_side(c) : IFD__STEP_ROWS;
}

/* The next `m` rows of the current phase; the phase advances when done. */
static int ifd__encode_rows(ifd_vision_enc_t *e, int m)
{
    const int kind = ifd__phase_kind(e->v, e->next), r0 = e->row;
    int rc;
    if (kind == PH_PATCHES) {
        rc = ifd__encode_patches(e, r0, r0 + m);
    } else if (kind == PH_TAIL) {
        rc = ifd__encode_tail(e, r0, r0 + m);
    } else {
        rc = ifd__encode_layer_phase(e->v, e->a, (int)ifd_vision_n_patches(&e->v->cfg),
                                     (uint32_t)((e->next - 1) / PH_PER_LAYER), kind, r0, r0 + m);
    }
    if (rc)
        return rc;
    e->row += m;
    if (e->row == ifd__phase_rows(e, e->next)) {
        e->next++;
        e->row = 0;
    }
    return 0;
}

/* After a step: its work done before it returns (an asynchronous backend),
 * 1 when the encode is complete. */
static int ifd__step_end(ifd_vision_enc_t *e, int rc)
{
    if (rc == 0)
        rc = e->v->be->ops->sync(e->v->be);
    return rc ? rc : e->next >= ifd_vision_encode_phases(e->v);
}

int ifd_vision_encode_step(ifd_vision_enc_t *e, int max_phases)
{
    const int last = ifd_vision_encode_phases(e->v) - 1;
    int rc = 0;
    for (int done = 0; done < max_phases && e->next <= last && rc == 0; done++)
        rc = ifd__encode_rows(e, ifd__phase_rows(e, e->next) - e->row);
    return ifd__step_end(e, rc);
}

/* FLOPs per row of phase e->next. */
static double ifd__row_flops(const ifd_vision_enc_t *e)
{
    return ifd__phase_flops(&e->v->cfg, ifd__phase_kind(e->v, e->next));
}

/* Rows of phase e->next that fit in `budget` FLOPs: all that are left, else
 * a multiple of the phase's unit (0 when none fit). */
static int ifd__rows_within(const ifd_vision_enc_t *e, double budget)
{
    const int left = ifd__phase_rows(e, e->next) - e->row, unit = ifd__phase_unit(e, e->next);
    const double fit = budget / ifd__row_flops(e);
    if (fit >= left)
        return left;
    return fit < unit ? 0 : (int)(fit / unit) * unit;
}

int ifd_vision_encode_step_flops(ifd_vision_enc_t *e, double max_flops, double *done)
{
    const int last = ifd_vision_encode_phases(e->v) - 1;
    double spent = 0;
    int rc = 0;
    while (e->next <= last && rc == 0) {
        int m = ifd__rows_within(e, max_flops - spent);
        if (m == 0 && spent > 0)
            break;
        if (m == 0) { /* the step's one piece: the smallest */
            const int left = ifd__phase_rows(e, e->next) - e->row;
            const int unit = ifd__phase_unit(e, e->next);
            m = left < unit ? left : unit;
        }
        spent += m * ifd__row_flops(e);
        rc = ifd__encode_rows(e, m);
    }
    if (done)
        *done = spent;
    return ifd__step_end(e, rc);
}

int ifd_vision_encode_end(ifd_vision_enc_t *e, float *features, float *tower)
{
    ifd_vision_t *v = e->v;
    const ifd_backend_ops_t *o = v->be->ops;
    const ifd_vision_config_t *c = &v->cfg;
    int rc = e->next < ifd_vision_encode_phases(v) ? IFD_EINVAL : 0;
    if (!rc && tower)
        rc = o->download(v->be, tower, e->a[A_X].data,
                         sizeof(float) * (size_t)ifd_vision_n_patches(c) * c->n_embd);
    if (!rc)
        rc = o->download(v->be, features, e->a[A_FEAT].data,
                         sizeof(float) * (size_t)c->tokens_per_image * c->text_embd);
    ifd_vision_encode_free(e);
    return rc;
}

int ifd_vision_encode(ifd_vision_t *v, const float *pixel_values, float *features, float *tower)
{
    ifd_vision_enc_t *e;
    int rc = ifd_vision_encode_begin(&e, v, pixel_values);
    if (rc)
        return rc;
    rc = ifd_vision_encode_step(e, ifd_vision_encode_phases(v));
    if (rc < 0) {
        ifd_vision_encode_free(e);
        return rc;
    }
    return ifd_vision_encode_end(e, features, tower);
}
