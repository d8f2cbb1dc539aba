/*
 * test_vision.c — Gemma 3's vision tower and projector (worker/vision.h) on
 * the CPU backend against transformers, with the tiny random-weight
 * Gemma3ForConditionalGeneration of tests/data/tiny-gemma3-vision
 * (tools/make_tiny_gemma3_vision.py: 112 px, patch 14, 2 layers, width 64,
 * 4 heads, 16 tokens of width 64; refs.safetensors holds transformers'
 * outputs), so no torch is needed here.
 *
 * Bounds (max over the output of |got − ref| / max(1, |ref|)):
 *   f32 weights:  ≤ 1e-5 for the tower output and the image features
 *                 (float summation order only: observed ≤ 2.3e-6);
 *   bf16 and f16 weights: ≤ 1e-5 against transformers computing in f32
 *                 on the same 16-bit weights (the CPU backend keeps them in
 *                 16 bits and accumulates in f32).
 * pixel_values from the committed PNGs through common/image with the
 * directory's preprocessor_config.json: ≤ 1e-6 absolute (the image path's
 * own bound, docs/vision.md).
 * An mmproj GGUF written from the tiny model the way llama.cpp's converter
 * writes one gives the HF directory's features bit for bit.
 * Also: the config and the source's name mapping, the text model of the
 * same directory loading and giving transformers' logits on the prompt's
 * text before its image (≤ 1e-5 of the row's largest logit), and the errors (a backend without the
 * vision ops, a NaN pixel, broken vision configs).
 */
#include "testutil.h"

#include "arena.h"
#include "error.h"
#include "gguf_builder.h"
#include "tiny_mmproj.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "inspect/inspect.h"
#include "modelfile/model_source.h"
#include "modelfile/safetensors.h"
#include "worker/generate.h"
#include "worker/model.h"
#include "worker/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tiny_dir[4096];

static const char *tiny(const char *sub, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", tiny_dir, sub[0] ? "/" : "", sub);
    return buf;
}

/* A reference tensor from refs.safetensors (f32), its element count in *n. */
static const float *ref(const ifd_safetensors_t *st, const char *name, size_t *n)
{
    const ifd_st_tensor_t *t = ifd_safetensors_find(st, name);
    ck_assert_msg(t && strcmp(t->dtype, "F32") == 0, "refs: %s", name);
    *n = t->n_elems;
    return t->data; /* safetensors data is 8-byte aligned after the header in these files */
}

static ifd_safetensors_t *open_refs(void)
{
    char p[4200], err[256];
    ifd_safetensors_t *st = NULL;
    ck_assert_msg(
        ifd_safetensors_open(&st, tiny("refs.safetensors", p, sizeof p), err, sizeof err) == 0,
        "%s", err);
    return st;
}

static double max_rel(const float *got, const float *want, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        m = d > m || isnan(d) ? d : m;
    }
    return m;
}

static ifd_model_source_t *open_src(const char *sub)
{
    char p[4200], err[512];
    ifd_model_source_t *src = NULL;
    ck_assert_msg(ifd_model_source_open(&src, tiny(sub, p, sizeof p), err, sizeof err) == 0, "%s",
                  err);
    return src;
}

START_TEST(test_config)
{
    ifd_model_source_t *src = open_src("");
    const char *why = "x";
    const ifd_vision_config_t *c = ifd_model_source_vision(src, &why);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_null(why);
    ck_assert_uint_eq(c->image_size, 112);
    ck_assert_uint_eq(c->patch_size, 14);
    ck_assert_uint_eq(c->n_embd, 64);
    ck_assert_uint_eq(c->n_ff, 96);
    ck_assert_uint_eq(c->n_layer, 2);
    ck_assert_uint_eq(c->n_head, 4);
    ck_assert_uint_eq(c->head_dim, 16);
    ck_assert_uint_eq(c->tokens_per_image, 16);
    ck_assert_uint_eq(c->text_embd, 64);
    ck_assert_int_eq(c->boi_id, 509);
    ck_assert_int_eq(c->eoi_id, 510);
    ck_assert_int_eq(c->image_id, 511);
    ck_assert_uint_eq(ifd_vision_patch_side(c), 8);
    ck_assert_uint_eq(ifd_vision_token_side(c), 4);
    ck_assert_uint_eq(ifd_vision_pool(c), 2);
    ck_assert(fabsf(c->eps - 1e-6f) < 1e-12f);
    /* llama.cpp's mmproj names onto transformers 5's checkpoint names */
    char n[256];
    ifd_model_source_name(src, "v.blk.1.attn_out.bias", n, sizeof n);
    ck_assert_str_eq(n, "vision_tower.encoder.layers.1.self_attn.out_proj.bias");
    ifd_model_source_name(src, "v.patch_embd.weight", n, sizeof n);
    ck_assert_str_eq(n, "vision_tower.embeddings.patch_embedding.weight");
    ifd_model_source_name(src, "mm.input_projection.weight", n, sizeof n);
    ck_assert_str_eq(n, "multi_modal_projector.mm_input_projection_weight");
    ifd_tensor_view_t tv;
    ck_assert_int_eq(ifd_model_source_find(src, "v.post_ln.weight", &tv), 0);
    ck_assert(!tv.add_one); /* a LayerNorm, although its name ends in "norm.weight" */
    ck_assert_int_eq(ifd_model_source_find(src, "mm.soft_emb_norm.weight", &tv), 0);
    ck_assert(tv.add_one);
    ck_assert_int_eq(ifd_model_source_find(src, "v.blk.2.ln1.weight", &tv), IFD_ENOTFOUND);
    ck_assert_int_eq(ifd_model_source_find(src, "v.blk.0.nope.weight", &tv), IFD_ENOTFOUND);
    ifd_model_source_close(src);
}
END_TEST

/* Encodes both images of refs with the model in `sub`, against prefix's refs. */
static void check_encode(const char *sub, const char *prefix, double bound)
{
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    ifd_model_source_t *src = open_src(sub);
    ifd_vision_t *v = NULL;
    char err[512];
    ck_assert_msg(ifd_vision_load(&v, src, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(src); /* the vision model keeps none of it */
    ck_assert_int_eq(ifd_vision_tokens_per_image(v), 16);
    ck_assert_int_eq(ifd_vision_text_width(v), 64);
    ck_assert_int_eq(ifd_vision_image_size(v), 112);
    ck_assert_uint_gt(ifd_vision_weight_bytes(v), 0);
    ifd_safetensors_t *st = open_refs();
    for (int i = 0; i < 2; i++) {
        char name[64];
        size_t npv, nt, nf;
        snprintf(name, sizeof name, "pixel_values_%d", i);
        const float *pv = ref(st, name, &npv);
        snprintf(name, sizeof name, "%svision_%d", prefix, i);
        const float *want_t = ref(st, name, &nt);
        snprintf(name, sizeof name, "%sfeatures_%d", prefix, i);
        const float *want_f = ref(st, name, &nf);
        ck_assert_uint_eq(npv, 3 * 112 * 112);
        ck_assert_uint_eq(nt, 64 * 64);
        ck_assert_uint_eq(nf, 16 * 64);
        float *tower = malloc(nt * sizeof(float)), *feat = malloc(nf * sizeof(float));
        ck_assert_int_eq(ifd_vision_encode(v, pv, feat, tower), 0);
        const double et = max_rel(tower, want_t, nt), ef = max_rel(feat, want_f, nf);
        printf("%s image %d: tower max rel err %.3g, features %.3g (bound %.0e)\n",
               sub[0] ? sub : "f32", i, et, ef, bound);
        ck_assert_msg(et <= bound && ef <= bound, "%s image %d: tower %.3g features %.3g", sub, i,
                      et, ef);
        /* features without the tower output: the same values */
        float *feat2 = malloc(nf * sizeof(float));
        ck_assert_int_eq(ifd_vision_encode(v, pv, feat2, NULL), 0);
        ck_assert(memcmp(feat, feat2, nf * sizeof(float)) == 0);
        free(tower), free(feat), free(feat2);
    }
    ifd_safetensors_close(st);
    ifd_vision_destroy(v);
    be->ops->destroy(be);
}

START_TEST(test_encode_f32)
{
    check_encode("", "", 1e-5);
}
END_TEST

START_TEST(test_encode_bf16)
{
    check_encode("bf16", "bf16_", 1e-5);
}
END_TEST

START_TEST(test_encode_f16)
{
    check_encode("f16", "f16_", 1e-5);
}
END_TEST

/* The smallest pieces _step_flops may run over a budget (vision.h): 16 patch
 * rows of the patch embedding and of each layer phase, one band of the
 * tail (the pooled side: 4 tokens); their FLOPs. */
enum { N_SMALLEST = 6 };
static void smallest_pieces(const ifd_vision_config_t *c, double s[N_SMALLEST])
{
    const double W = c->n_embd, F = c->n_ff, n = 64, band = 4, patch = 3 * 14 * 14;
    s[0] = 16 * 2 * W * patch;           /* the patch embedding */
    s[1] = 16 * 2 * W * 3 * W;           /* LN1 + q|k|v */
    s[2] = 16 * 4 * n * W;               /* the attention */
    s[3] = 16 * (2 * W * W + 2 * W * F); /* out_proj + LN2 + fc1 + gelu */
    s[4] = 16 * 2 * F * W;               /* fc2 */
    s[5] = band * 2 * W * c->text_embd;  /* post_layernorm, pooling, norm, projector */
}

/* pv encoded with ifd_vision_encode_step_flops(budget) calls (every other
 * one ifd_vision_encode_step(1) when mixed) into features / tower; the
 * number of calls. Each call's FLOPs stay within the budget unless it ran
 * one of the smallest pieces alone (smallest_pieces: a whole phase over the
 * budget, the patch embedding's or the tail's as they were once, fails);
 * they add up to ifd_vision_encode_flops. */
static int budget_steps(ifd_vision_t *v, const float *pv, double budget, bool mixed,
                        float *features, float *tower)
{
    const ifd_vision_config_t *c = ifd_vision_config(v);
    const double W = c->n_embd, F = c->n_ff, n = 64;
    const double patch = 2 * W * 3 * 14 * 14 * n;
    const double tail = 2.0 * (double)c->tokens_per_image * W * (double)c->text_embd;
    double smallest[N_SMALLEST];
    smallest_pieces(c, smallest);
    ifd_vision_enc_t *e = NULL;
    ck_assert_int_eq(ifd_vision_encode_begin(&e, v, pv), 0);
    int calls = 0, rc;
    double sum = 0, done = 0;
    do {
        if (mixed && calls % 2) {
            rc = ifd_vision_encode_step(e, 1);
        } else {
            rc = ifd_vision_encode_step_flops(e, budget, &done);
            bool one_smallest = false;
            for (int i = 0; i < N_SMALLEST; i++)
                one_smallest |= done == smallest[i];
            ck_assert_msg(done <= budget || one_smallest, "%g FLOPs in a step of %g", done, budget);
            ck_assert(done > 0);
            sum += done;
        }
        calls++;
    } while (rc == 0);
    ck_assert_int_eq(rc, 1);
    if (!mixed) {
        const double total = ifd_vision_encode_flops(v);
        ck_assert_msg(fabs(sum - total) <= 1e-9 * total, "%g FLOPs of %g", sum, total);
        ck_assert(total ==
                  patch + 2 * n * (2 * W * 3 * W + 4 * n * W + 2 * W * W + 4 * W * F) + tail);
    }
    memset(features, 0xff, 16 * 64 * sizeof(float));
    ck_assert_int_eq(ifd_vision_encode_end(e, features, tower), 0);
    return calls;
}

/* The encode in phases (vision.h, ifd_vision_encode_begin / _step / _end):
 * the same bits as ifd_vision_encode in steps of 1, 3 and all phases, and
 * in row pieces bounded by FLOPs (_step_flops), for
 * the f32 and the bf16 weights; ending early is IFD_EINVAL, abandoning an
 * encode midway frees it (ASan's leak check), two encodes may interleave. */
static void check_phases(const char *sub)
{
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    ifd_model_source_t *src = open_src(sub);
    ifd_vision_t *v = NULL;
    char err[512];
    ck_assert_msg(ifd_vision_load(&v, src, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(src);
    const int phases = ifd_vision_encode_phases(v);
    ck_assert_int_eq(phases, 2 + 4 * 2); /* patches, 4 per layer, the tail */
    ifd_safetensors_t *st = open_refs();
    size_t npv;
    const float *pv0 = ref(st, "pixel_values_0", &npv), *pv1 = ref(st, "pixel_values_1", &npv);
    const size_t nf = 16 * 64, nt = 64 * 64;
    float *want = malloc(nf * sizeof(float)), *want_t = malloc(nt * sizeof(float));
    float *got = malloc(nf * sizeof(float)), *got_t = malloc(nt * sizeof(float));
    ck_assert_int_eq(ifd_vision_encode(v, pv0, want, want_t), 0);
    static const int steps[] = {1, 3, 1000};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        ifd_vision_enc_t *e = NULL;
        ck_assert_int_eq(ifd_vision_encode_begin(&e, v, pv0), 0);
        int calls = 0, rc;
        while ((rc = ifd_vision_encode_step(e, steps[k])) == 0)
            calls++;
        ck_assert_int_eq(rc, 1);
        ck_assert_int_eq(calls + 1, (phases + steps[k] - 1) / steps[k]);
        ck_assert_int_eq(ifd_vision_encode_step(e, 1), 1); /* nothing left: still done */
        memset(got, 0xff, nf * sizeof(float));
        ck_assert_int_eq(ifd_vision_encode_end(e, got, got_t), 0);
        ck_assert_msg(memcmp(got, want, nf * sizeof(float)) == 0, "%s: steps of %d differ", sub,
                      steps[k]);
        ck_assert(memcmp(got_t, want_t, nt * sizeof(float)) == 0);
    }
    /* bounded by FLOPs: the same bits (budget_steps); budget 0: every piece
     * the smallest (the patch embedding in 4, each layer phase in 4, the
     * tail in its 4 bands) */
    ck_assert_int_eq(budget_steps(v, pv0, 0, false, got, got_t), 64 / 16 * (1 + 4 * 2) + 16 / 4);
    ck_assert(memcmp(got, want, nf * sizeof(float)) == 0 && memcmp(got_t, want_t, nt * 4) == 0);
    /* a budget of a band and a half of the tail (less than its whole 131
     * kFLOP): the tail in its 4 bands, one a call; of 3.5 16-row pieces of
     * the patch embedding (less than its 4.8 MFLOP): its first 48 rows
     * alone, then 16 and the rest of the encode in 3 calls (4.2 MFLOP each
     * at most) */
    double smallest[N_SMALLEST];
    smallest_pieces(ifd_vision_config(v), smallest);
    ck_assert_int_eq(budget_steps(v, pv0, 1.5 * smallest[5], false, got, got_t),
                     64 / 16 + 4 * 2 * 4 + 16 / 4);
    ck_assert(memcmp(got, want, nf * sizeof(float)) == 0 && memcmp(got_t, want_t, nt * 4) == 0);
    ck_assert_int_eq(budget_steps(v, pv0, 3.5 * smallest[0], false, got, got_t), 4);
    ck_assert(memcmp(got, want, nf * sizeof(float)) == 0 && memcmp(got_t, want_t, nt * 4) == 0);
    const int some = budget_steps(v, pv0, 2e6, false, got, got_t);
    ck_assert_msg(some > 1 && some < 33, "%d steps of 2 MFLOP", some);
    ck_assert(memcmp(got, want, nf * sizeof(float)) == 0 && memcmp(got_t, want_t, nt * 4) == 0);
    ck_assert_int_eq(budget_steps(v, pv0, 1e12, false, got, got_t), 1);
    ck_assert(memcmp(got, want, nf * sizeof(float)) == 0 && memcmp(got_t, want_t, nt * 4) == 0);
    ck_assert_int_gt(budget_steps(v, pv0, 3e5, true, got, got_t), 10);
    ck_assert(memcmp(got, want, nf * sizeof(float)) == 0 && memcmp(got_t, want_t, nt * 4) == 0);
    /* two encodes interleaved, each its own bits */
    float *want1 = malloc(nf * sizeof(float)), *got1 = malloc(nf * sizeof(float));
    ck_assert_int_eq(ifd_vision_encode(v, pv1, want1, NULL), 0);
    ck_assert(memcmp(want1, want, nf * sizeof(float)) != 0);
    ifd_vision_enc_t *a = NULL, *b = NULL;
    ck_assert_int_eq(ifd_vision_encode_begin(&a, v, pv0), 0);
    ck_assert_int_eq(ifd_vision_encode_begin(&b, v, pv1), 0);
    int ra = 0, rb = 0;
    while (ra == 0 || rb == 0) {
        if (ra == 0)
            ck_assert_int_ge(ra = ifd_vision_encode_step(a, 1), 0);
        if (rb == 0)
            ck_assert_int_ge(rb = ifd_vision_encode_step(b, 2), 0);
    }
    ck_assert_int_eq(ifd_vision_encode_end(a, got, NULL), 0);
    ck_assert_int_eq(ifd_vision_encode_end(b, got1, NULL), 0);
    ck_assert(memcmp(got, want, nf * sizeof(float)) == 0);
    ck_assert(memcmp(got1, want1, nf * sizeof(float)) == 0);
    /* ended before its last phase; abandoned midway; a NaN pixel */
    ck_assert_int_eq(ifd_vision_encode_begin(&a, v, pv0), 0);
    ck_assert_int_eq(ifd_vision_encode_step(a, 2), 0);
    ck_assert_int_eq(ifd_vision_encode_end(a, got, NULL), IFD_EINVAL);
    ck_assert_int_eq(ifd_vision_encode_begin(&a, v, pv0), 0);
    ck_assert_int_eq(ifd_vision_encode_step(a, 5), 0);
    ifd_vision_encode_free(a);
    ifd_vision_encode_free(NULL);
    float *bad = malloc(npv * sizeof(float));
    memcpy(bad, pv0, npv * sizeof(float));
    bad[npv / 2] = NAN;
    a = (ifd_vision_enc_t *)1;
    ck_assert_int_eq(ifd_vision_encode_begin(&a, v, bad), IFD_EINVAL);
    ck_assert_ptr_null(a);
    free(bad), free(want), free(want_t), free(got), free(got_t), free(want1), free(got1);
    ifd_safetensors_close(st);
    ifd_vision_destroy(v);
    be->ops->destroy(be);
}

START_TEST(test_encode_phases)
{
    check_phases("");
    check_phases("bf16");
}
END_TEST

/* The committed PNGs through decode and preprocessing: transformers' pixel_values. */
START_TEST(test_pixels_from_png)
{
    char p[4200], err[256];
    size_t len;
    char *json = ifd_test_read_file(tiny("preprocessor_config.json", p, sizeof p), &len);
    ck_assert_ptr_nonnull(json);
    ifd_image_prep_t prep;
    ck_assert_msg(ifd_image_prep_from_json(&prep, json, len, err, sizeof err) == 0, "%s", err);
    free(json);
    ifd_safetensors_t *st = open_refs();
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "image%d.png", i);
        void *bytes = ifd_test_read_file(tiny(name, p, sizeof p), &len);
        ck_assert_ptr_nonnull(bytes);
        ifd_image_t img;
        ifd_image_limits_t lim = ifd_image_default_limits();
        ck_assert_msg(ifd_image_decode(&img, bytes, len, &lim, err, sizeof err) == 0, "%s", err);
        free(bytes);
        size_t n = ifd_image_prep_floats(&prep, &img), nref;
        ck_assert_uint_eq(n, 3 * 112 * 112);
        float *pv = malloc(n * sizeof(float));
        ck_assert_int_eq(ifd_image_preprocess(pv, n, &img, &prep), 0);
        snprintf(name, sizeof name, "pixel_values_%d", i);
        const float *want = ref(st, name, &nref);
        double m = 0;
        for (size_t k = 0; k < n; k++)
            m = fmax(m, fabs((double)pv[k] - want[k]));
        ck_assert_msg(m <= 1e-6, "image%d.png: pixel_values max abs diff %.3g", i, m);
        free(pv);
        ifd_image_free(&img);
    }
    ifd_safetensors_close(st);
}
END_TEST

/* The text model of the same directory (language_model.* tensors) still loads. */
START_TEST(test_text_model_loads)
{
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
    char p[4200], err[512];
    ifd_model_t *m = NULL;
    ck_assert_msg(ifd_model_load(&m, tiny("", p, sizeof p), be, err, sizeof err) == 0, "%s", err);
    const ifd_model_config_t *c = ifd_model_config(m);
    ck_assert_int_eq(c->arch, IFD_ARCH_GEMMA3);
    ck_assert_uint_eq(c->n_vocab, 512);
    ck_assert_uint_eq(c->n_embd, 64);
    ck_assert_uint_eq(c->n_layer, 2);
    ifd_model_destroy(m);
    be->ops->destroy(be);
}
END_TEST

/* The committed prompt's positions before its first image token depend on
 * text alone (causal attention): inferd's text model of the directory gives
 * transformers' logits there (max error ≤ 1e-5 of the row's largest logit;
 * observed 1.2e-7). The rows after it are the image-prefill branch's to
 * check. */
START_TEST(test_text_prefix_logits)
{
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
    char p[4200], err[512];
    ifd_model_t *m = NULL;
    ck_assert_msg(ifd_model_load(&m, tiny("", p, sizeof p), be, err, sizeof err) == 0, "%s", err);
    ifd_safetensors_t *st = open_refs();
    const ifd_st_tensor_t *ids_t = ifd_safetensors_find(st, "prompt_ids");
    ck_assert(ids_t && strcmp(ids_t->dtype, "I32") == 0);
    const int32_t *ids = ids_t->data;
    int n = 0;
    while (n < (int)ids_t->n_elems && ids[n] != 511)
        n++;
    ck_assert_int_ge(n, 2); /* BOS, text, boi */
    size_t nl;
    const float *want = ref(st, "prompt_logits", &nl);
    ck_assert_uint_eq(nl, ids_t->n_elems * 512);
    FILE *dump = tmpfile();
    ck_assert_ptr_nonnull(dump);
    ifd_generate_params_t gp = ifd_generate_default_params();
    gp.n_predict = 1;
    gp.ignore_eos = true;
    gp.dump_logits = dump;
    ifd_generate_result_t r;
    ck_assert_int_eq(ifd_generate(m, ids, n, &gp, &r), 0);
    ck_assert_int_eq(r.n_logit_rows, n);
    ifd_generate_result_free(&r);
    /* .npy: magic, version, header length (v1: u16 at 8), header, data */
    unsigned char head[10];
    rewind(dump);
    ck_assert_uint_eq(fread(head, 1, 10, dump), 10);
    ck_assert_int_eq(fseek(dump, 10 + (head[8] | head[9] << 8), SEEK_SET), 0);
    float *got = malloc((size_t)n * 512 * sizeof(float));
    ck_assert_uint_eq(fread(got, sizeof(float), (size_t)n * 512, dump), (size_t)n * 512);
    fclose(dump);
    for (int i = 0; i < n; i++) {
        double mx = 0, d = 0;
        for (int k = 0; k < 512; k++) {
            mx = fmax(mx, fabs(want[i * 512 + k]));
            d = fmax(d, fabs((double)got[i * 512 + k] - want[i * 512 + k]));
        }
        printf("prompt position %d: logits max abs err %.3g (max |logit| %.3g)\n", i, d, mx);
        ck_assert_msg(d <= 1e-5 * mx, "position %d: %.3g", i, d);
    }
    free(got);
    ifd_safetensors_close(st);
    ifd_model_destroy(m);
    be->ops->destroy(be);
}
END_TEST

static void write_mmproj(const char *path, uint32_t merge, const char *proj_type, bool q8_proj)
{
    ifd_test_write_tiny_mmproj(tiny_dir, path, merge, proj_type, q8_proj, NULL);
}

/* The same tower from an mmproj GGUF: the same features as from the HF
 * directory (the same f32 weights: bit for bit). */
START_TEST(test_mmproj)
{
    char path[256], err[512];
    snprintf(path, sizeof path, "/tmp/inferd-vis-tower-%d-mmproj.gguf", (int)getpid());
    write_mmproj(path, 2, "gemma3", false);
    ifd_model_source_t *src = NULL;
    ck_assert_msg(ifd_model_source_open_mmproj(&src, path, err, sizeof err) == 0, "%s", err);
    const ifd_vision_config_t *c = ifd_model_source_vision(src, NULL);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(c->tokens_per_image, 16);
    ck_assert_uint_eq(c->head_dim, 16);
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    ifd_vision_t *vg = NULL, *vh = NULL;
    ck_assert_msg(ifd_vision_load(&vg, src, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(src);
    ifd_model_source_t *hf = open_src("");
    ck_assert_msg(ifd_vision_load(&vh, hf, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(hf);
    ifd_safetensors_t *st = open_refs();
    size_t npv;
    const float *pv = ref(st, "pixel_values_1", &npv);
    float *fg = malloc(16 * 64 * sizeof(float)), *fh = malloc(16 * 64 * sizeof(float));
    ck_assert_int_eq(ifd_vision_encode(vg, pv, fg, NULL), 0);
    ck_assert_int_eq(ifd_vision_encode(vh, pv, fh, NULL), 0);
    ck_assert(memcmp(fg, fh, 16 * 64 * sizeof(float)) == 0);
    free(fg), free(fh);
    ifd_vision_destroy(vg);
    ifd_vision_destroy(vh);
    /* --inspect of an mmproj: not servable alone, its tower described */
    FILE *rep = tmpfile();
    ck_assert_int_eq(ifd_inspect_file(rep, stderr, path, false), 0);
    char text[16384];
    rewind(rep);
    text[fread(text, 1, sizeof text - 1, rep)] = '\0';
    fclose(rep);
    ck_assert_msg(strstr(text, "servable:       no") && strstr(text, "vision tower:") &&
                      strstr(text, "tokens_per_image       16"),
                  "%s", text);
    /* mm.input_projection in q8_0 (llama.cpp's quantized mmproj files): dequantized on the
     * host before the transpose; within q8_0's error of the f32 features (|Δ| ≤ 2e-2 of
     * max(1, |ref|); a wrong orientation would be off by O(1)) */
    write_mmproj(path, 2, "gemma3", true);
    ck_assert_msg(ifd_model_source_open_mmproj(&src, path, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(ifd_vision_load(&vg, src, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(src);
    fg = malloc(16 * 64 * sizeof(float));
    ck_assert_int_eq(ifd_vision_encode(vg, pv, fg, NULL), 0);
    size_t nf;
    const float *want = ref(st, "features_1", &nf);
    const double eq = max_rel(fg, want, nf);
    printf("mmproj with a q8_0 mm.input_projection: features max rel err %.3g\n", eq);
    ck_assert_msg(eq <= 2e-2 && eq > 0, "q8_0 projection: %.3g", eq);
    free(fg);
    ifd_vision_destroy(vg);
    ifd_safetensors_close(st);
    /* without scale_factor: Gemma 3's pooling 4 → 2 x 2 tokens */
    write_mmproj(path, 0, "gemma3", false);
    ck_assert_msg(ifd_model_source_open_mmproj(&src, path, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ifd_model_source_vision(src, NULL)->tokens_per_image, 4);
    ifd_model_source_close(src);
    /* another projector; a text GGUF; not a GGUF */
    write_mmproj(path, 2, "llava", false);
    ck_assert_int_eq(ifd_model_source_open_mmproj(&src, path, err, sizeof err), IFD_ENOTSUP);
    ck_assert_msg(strstr(err, "gemma3"), "%s", err);
    unlink(path);
    char p[4200];
    ck_assert_int_eq(
        ifd_model_source_open_mmproj(&src, tiny("config.json", p, sizeof p), err, sizeof err),
        IFD_EFORMAT);
    ck_assert_msg(strstr(err, "not a GGUF"), "%s", err);
    be->ops->destroy(be);
}
END_TEST

/* The mmproj made by llama.cpp's own converter (tools/make_tiny_gemma3_gguf.py:
 * convert_hf_to_gguf.py --mmproj of llama-cpp-python 0.3.36's llama.cpp, committed in
 * gguf/): its metadata read as the
 * tiny config's, its tower bit for bit the HF directory's (the same f32 weights), its features
 * within 1e-5 of transformers' computed with the F16 mm.input_projection the converter stores
 * (refs_gguf.safetensors' mmproj_features_i) and within that rounding of the f32 model's. */
START_TEST(test_mmproj_llamacpp)
{
    char p[4200], err[512];
    ifd_model_source_t *src = NULL;
    const char *path = tiny("gguf/mmproj-tiny-gemma3-f32.gguf", p, sizeof p);
    ck_assert_msg(ifd_model_source_open_mmproj(&src, path, err, sizeof err) == 0, "%s", err);
    const ifd_vision_config_t *c = ifd_model_source_vision(src, NULL);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(c->image_size, 112);
    ck_assert_uint_eq(c->patch_size, 14);
    ck_assert_uint_eq(c->n_embd, 64);
    ck_assert_uint_eq(c->n_ff, 96);
    ck_assert_uint_eq(c->n_layer, 2);
    ck_assert_uint_eq(c->n_head, 4);
    ck_assert_uint_eq(c->text_embd, 64);
    ck_assert_uint_eq(c->tokens_per_image, 16); /* clip.vision.projector.scale_factor 2 */
    ck_assert(fabsf(c->eps - 1e-6f) < 1e-12f);
    ifd_tensor_view_t tv;
    ck_assert_int_eq(ifd_model_source_find(src, "mm.input_projection.weight", &tv), 0);
    ck_assert_int_eq(tv.ggml_type, IFD_GGML_F16); /* the converter's forced type */
    ck_assert_int_eq(ifd_model_source_find(src, "mm.soft_emb_norm.weight", &tv), 0);
    ck_assert(!tv.add_one); /* the converter stored 1 + w */
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    ifd_vision_t *vg = NULL, *vh = NULL;
    ck_assert_msg(ifd_vision_load(&vg, src, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(src);
    ifd_model_source_t *hf = open_src("");
    ck_assert_msg(ifd_vision_load(&vh, hf, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(hf);
    ifd_safetensors_t *st = open_refs(), *sg = NULL;
    ck_assert_msg(ifd_safetensors_open(&sg, tiny("gguf/refs_gguf.safetensors", p, sizeof p), err,
                                       sizeof err) == 0,
                  "%s", err);
    for (int i = 0; i < 2; i++) {
        char name[64];
        size_t npv, nf, nf2;
        snprintf(name, sizeof name, "pixel_values_%d", i);
        const float *pv = ref(st, name, &npv);
        snprintf(name, sizeof name, "mmproj_features_%d", i);
        const float *want = ref(sg, name, &nf);
        snprintf(name, sizeof name, "features_%d", i);
        const float *want_f32 = ref(st, name, &nf2);
        ck_assert_uint_eq(nf, 16 * 64);
        ck_assert_uint_eq(nf2, nf);
        float *tg = malloc(64 * 64 * sizeof(float)), *th = malloc(64 * 64 * sizeof(float));
        float *fg = malloc(nf * sizeof(float)), *fh = malloc(nf * sizeof(float));
        ck_assert_int_eq(ifd_vision_encode(vg, pv, fg, tg), 0);
        ck_assert_int_eq(ifd_vision_encode(vh, pv, fh, th), 0);
        ck_assert(memcmp(tg, th, 64 * 64 * sizeof(float)) == 0);
        const double e = max_rel(fg, want, nf), e32 = max_rel(fg, want_f32, nf),
                     eh = max_rel(fh, want_f32, nf);
        printf("llama.cpp mmproj image %d: features max rel err %.3g against transformers with "
               "the F16 projection (bound 1e-5); %.3g against the f32 model's (the HF "
               "directory: %.3g)\n",
               i, e, e32, eh);
        ck_assert_msg(e <= 1e-5, "image %d: %.3g", i, e);
        ck_assert_msg(e32 <= 1e-2, "image %d: against f32 %.3g", i, e32);
        free(tg), free(th), free(fg), free(fh);
    }
    ifd_safetensors_close(sg);
    ifd_safetensors_close(st);
    ifd_vision_destroy(vg);
    ifd_vision_destroy(vh);
    be->ops->destroy(be);
}
END_TEST

/* The same tiny model converted with --outtype q8_0 --mmproj by llama.cpp's converter: its 12
 * attention and MLP matrices are Q8_0 (the rest as in the f32 file). inferd loads it with the
 * text model's quantized GEMM (activations quantized per 32 to 8 bits, kernels/cpu/qmatmul.h)
 * and must give transformers' features with the file's dequantized weights and that activation
 * rounding (refs_gguf_q8_0.safetensors, tools/make_tiny_gemma3_gguf.py) within 1e-5, and the
 * f32 file's features within the 8-bit error (observed ~1.4e-2 of the largest). */
START_TEST(test_mmproj_llamacpp_q8_0)
{
    char p[4200], err[512];
    ifd_model_source_t *src = NULL, *s32 = NULL;
    ck_assert_msg(ifd_model_source_open_mmproj(
                      &src, tiny("gguf/mmproj-tiny-gemma3-q8_0.gguf", p, sizeof p), err,
                      sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(ifd_model_source_open_mmproj(
                      &s32, tiny("gguf/mmproj-tiny-gemma3-f32.gguf", p, sizeof p), err,
                      sizeof err) == 0,
                  "%s", err);
    static const char *const q8[] = {"attn_q", "attn_k", "attn_v", "attn_out", "ffn_up",
                                     "ffn_down"};
    ifd_tensor_view_t tv;
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 6; k++) {
            char name[64];
            snprintf(name, sizeof name, "v.blk.%d.%s.weight", l, q8[k]);
            ck_assert_int_eq(ifd_model_source_find(src, name, &tv), 0);
            ck_assert_msg(tv.ggml_type == IFD_GGML_Q8_0, "%s: type %d", name, (int)tv.ggml_type);
        }
    ck_assert_int_eq(ifd_model_source_find(src, "mm.input_projection.weight", &tv), 0);
    ck_assert_int_eq(tv.ggml_type, IFD_GGML_F16);
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    ifd_vision_t *vq = NULL, *v32 = NULL;
    ck_assert_msg(ifd_vision_load(&vq, src, be, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(ifd_vision_load(&v32, s32, be, err, sizeof err) == 0, "%s", err);
    ifd_model_source_close(src);
    ifd_model_source_close(s32);
    ck_assert_uint_lt(ifd_vision_weight_bytes(vq), ifd_vision_weight_bytes(v32));
    ifd_safetensors_t *st = open_refs(), *sq = NULL;
    ck_assert_msg(ifd_safetensors_open(&sq, tiny("gguf/refs_gguf_q8_0.safetensors", p, sizeof p),
                                       err, sizeof err) == 0,
                  "%s", err);
    for (int i = 0; i < 2; i++) {
        char name[64];
        size_t npv, nf;
        snprintf(name, sizeof name, "pixel_values_%d", i);
        const float *pv = ref(st, name, &npv);
        snprintf(name, sizeof name, "mmproj_q8_0_features_%d", i);
        const float *want = ref(sq, name, &nf);
        ck_assert_uint_eq(nf, 16 * 64);
        float *fq = malloc(nf * sizeof(float)), *f32 = malloc(nf * sizeof(float));
        ck_assert_int_eq(ifd_vision_encode(vq, pv, fq, NULL), 0);
        ck_assert_int_eq(ifd_vision_encode(v32, pv, f32, NULL), 0);
        double big = 0, d8 = 0;
        for (size_t j = 0; j < nf; j++) {
            big = fmax(big, fabs(f32[j]));
            d8 = fmax(d8, fabs((double)fq[j] - f32[j]));
        }
        const double e = max_rel(fq, want, nf);
        printf("q8_0 mmproj image %d: features max rel err %.3g against transformers with its "
               "weights and 8-bit activations (bound 1e-5); %.3g of the largest from the f32 "
               "file's (bound 3e-2)\n",
               i, e, d8 / big);
        ck_assert_msg(e <= 1e-5, "image %d: %.3g", i, e);
        ck_assert_msg(d8 / big <= 3e-2 && d8 > 0, "image %d: against f32 %.3g", i, d8 / big);
        free(fq), free(f32);
    }
    ifd_safetensors_close(sq);
    ifd_safetensors_close(st);
    ifd_vision_destroy(vq);
    ifd_vision_destroy(v32);
    be->ops->destroy(be);
}
END_TEST

/* Random weights (the benchmark's): a function of the seed only. */
START_TEST(test_random)
{
    ifd_backend_t *be = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
    ifd_model_source_t *src = open_src("");
    ifd_vision_config_t c = *ifd_model_source_vision(src, NULL);
    ifd_model_source_close(src);
    char err[512];
    float *pv = calloc(3 * 112 * 112, sizeof(float)), f[3][16 * 64];
    for (int i = 0; i < 3 * 112 * 112; i++)
        pv[i] = (float)((i * 7919) % 255) / 127.5f - 1.0f;
    const uint64_t seeds[3] = {1, 1, 2};
    for (int k = 0; k < 3; k++) {
        ifd_vision_t *v = NULL;
        ck_assert_msg(ifd_vision_load_random(&v, &c, seeds[k], be, err, sizeof err) == 0, "%s",
                      err);
        ck_assert_int_eq(ifd_vision_encode(v, pv, f[k], NULL), 0);
        ifd_vision_destroy(v);
    }
    ck_assert(memcmp(f[0], f[1], sizeof f[0]) == 0);
    ck_assert(memcmp(f[0], f[2], sizeof f[0]) != 0);
    free(pv);
    ifd_vision_t *v = NULL;
    c.tokens_per_image = 15;
    ck_assert_int_eq(ifd_vision_load_random(&v, &c, 1, be, err, sizeof err), IFD_EFORMAT);
    ck_assert_ptr_null(v);
    ifd_vision_config_gemma3_4b(&c);
    ck_assert_int_eq(ifd_vision_config_check(&c, "4b", err, sizeof err), 0);
    ck_assert_uint_eq(ifd_vision_pool(&c), 4);
    ck_assert_uint_eq(c.head_dim, 72);
    be->ops->destroy(be);
}
END_TEST

START_TEST(test_errors)
{
    ifd_backend_t *cpu = NULL;
    ck_assert_int_eq(ifd_backend_cpu_create(&cpu, 1), 0);
    ifd_model_source_t *src = open_src("");
    char err[512];
    /* a backend without the vision ops */
    ifd_backend_ops_t ops = *cpu->ops;
    ops.dense_attention = NULL;
    ops.name = "fake";
    ifd_backend_t fake = {.ops = &ops};
    ifd_vision_t *v = (ifd_vision_t *)&fake;
    ck_assert_int_eq(ifd_vision_load(&v, src, &fake, err, sizeof err), IFD_ENOTSUP);
    ck_assert_ptr_null(v);
    ck_assert_msg(strstr(err, "vision on the fake backend not yet"), "%s", err);
    /* a NaN pixel */
    ck_assert_int_eq(ifd_vision_load(&v, src, cpu, err, sizeof err), 0);
    float *pv = calloc(3 * 112 * 112, sizeof(float)), feat[16 * 64];
    pv[777] = NAN;
    ck_assert_int_eq(ifd_vision_encode(v, pv, feat, NULL), IFD_EINVAL);
    free(pv);
    ifd_vision_destroy(v);
    ifd_model_source_close(src);
    ifd_vision_destroy(NULL);
    cpu->ops->destroy(cpu);
}
END_TEST

/* A copy of the tiny directory whose config.json's vision part is edited:
 * `from` replaced by `to` in the text. */
static void edited_dir(char *dir, size_t len, const char *from, const char *to)
{
    snprintf(dir, len, "/tmp/inferd-vis-tower-%d-XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char p[4200], q[4200];
    size_t n;
    char *cfg = ifd_test_read_file(tiny("config.json", p, sizeof p), &n);
    ck_assert_ptr_nonnull(cfg);
    char *at = strstr(cfg, from);
    ck_assert_msg(at, "config.json has no '%s'", from);
    snprintf(q, sizeof q, "%s/config.json", dir);
    FILE *f = fopen(q, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%.*s%s%s", (int)(at - cfg), cfg, to, at + strlen(from));
    fclose(f);
    free(cfg);
    snprintf(q, sizeof q, "%s/model.safetensors", dir);
    ck_assert_int_eq(symlink(tiny("model.safetensors", p, sizeof p), q), 0);
}

static void remove_dir(const char *dir)
{
    char q[4200];
    snprintf(q, sizeof q, "%s/config.json", dir);
    unlink(q);
    snprintf(q, sizeof q, "%s/model.safetensors", dir);
    unlink(q);
    rmdir(dir);
}

START_TEST(test_bad_configs)
{
    static const struct {
        const char *from, *to;
        int load_rc;      /* ifd_vision_load's (the source opens: the text model is fine) */
        const char *what; /* in the message */
    } cases[] = {
        {"\"image_size\": 112", "\"image_size\": 113", IFD_ENOTFOUND,
         "not a multiple of patch_size"},
        {"\"mm_tokens_per_image\": 16", "\"mm_tokens_per_image\": 15", IFD_ENOTFOUND, "a square"},
        {"\"mm_tokens_per_image\": 16", "\"mm_tokens_per_image\": 9", IFD_ENOTFOUND, "divides"},
        {"\"num_attention_heads\": 4", "\"num_attention_heads\": 5", IFD_ENOTFOUND,
         "does not divide"},
        {"\"image_size\": 112", "\"image_size\": -1", IFD_ENOTFOUND, "image_size"},
        {"\"hidden_act\": \"gelu_pytorch_tanh\"", "\"hidden_act\": \"relu\"", IFD_ENOTFOUND,
         "only gelu_pytorch_tanh"},
        {"\"vision_use_head\": false", "\"vision_use_head\": true", IFD_ENOTFOUND, "pooling head"},
        {"\"intermediate_size\": 96", "\"intermediate_size\": 128", IFD_EFORMAT, "has shape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[256], err[512] = "";
        edited_dir(dir, sizeof dir, cases[i].from, cases[i].to);
        ifd_model_source_t *src = NULL;
        ck_assert_msg(ifd_model_source_open(&src, dir, err, sizeof err) == 0, "case %zu: %s", i,
                      err);
        ifd_backend_t *be = NULL;
        ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
        ifd_vision_t *v = NULL;
        int rc = ifd_vision_load(&v, src, be, err, sizeof err);
        ck_assert_msg(rc == cases[i].load_rc && !v, "case %zu: load %d (%s)", i, rc, err);
        const char *why = NULL;
        ck_assert((ifd_model_source_vision(src, &why) == NULL) == (rc == IFD_ENOTFOUND));
        ck_assert((why != NULL) == (rc == IFD_ENOTFOUND));
        be->ops->destroy(be);
        ifd_model_source_close(src);
        ck_assert_msg(strstr(err, cases[i].what), "case %zu: '%s' lacks '%s'", i, err,
                      cases[i].what);
        remove_dir(dir);
    }
}
END_TEST

static Suite *vision_suite(void)
{
    Suite *s = suite_create("vision");
    ifd_test_case(s, "tiny", 120,
                  IFD_TESTS(test_config, test_encode_f32, test_encode_bf16, test_encode_f16, test_encode_phases,
                            test_pixels_from_png, test_text_model_loads, test_text_prefix_logits,
                            test_mmproj, test_mmproj_llamacpp, test_mmproj_llamacpp_q8_0, test_random, test_errors,
                            test_bad_configs));
    return s;
}

int main(void)
{
    const char *root = getenv("INFERD_SOURCE_DIR");
    snprintf(tiny_dir, sizeof tiny_dir, "%s/tests/data/tiny-gemma3-vision", root ? root : ".");
    struct stat sb;
    if (stat(tiny_dir, &sb) != 0)
        ifd_test_skip("%s is missing", tiny_dir);
    return ifd_test_run(vision_suite());
}
