/*
 * test_gpu_fused.c — the small fused CUDA kernels against their CPU
 * references (kernels/cpu) on fresh random data: RMSNorm + residual (plain
 * and Gemma), RoPE (NORM and NEOX, with and without frequency factors) fused
 * with the KV-cache write, SwiGLU / tanh-GeGLU, and the embedding gather.
 *
 * Tolerances (relative L2 against the CPU result): f32 outputs 2e-6 (the
 * kernels repeat the CPU's roundings; only summation order and the last ulp
 * of cosf/sinf/expf differ), bf16 outputs 8e-3 and f16 outputs 1e-3 (one
 * rounding of the output to 8 or 11 significant bits); the quantized KV
 * writes (q8_0, fp8) byte for byte: V always, K on the emulator (the host's
 * cosf/sinf, so the same rotated values), K on a device within one
 * quantization step's rel L2 (cosf/sinf may differ in the last ulp, moving a
 * value across a rounding edge). Outputs and unused
 * cache slots start NaN-poisoned, so anything a kernel skips or overwrites
 * by mistake shows up.
 */
#include "gpu_test.h"

#include "cuda/cuda_kernels.h"
#include "error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_name(ifd_dtype_t t)
{
    static const char *const names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "fp8"};
    return (unsigned)t < 6 ? names[t] : "?";
}

static double tol_for(ifd_dtype_t t)
{
    return t == IFD_DTYPE_F32 ? 2e-6 : t == IFD_DTYPE_BF16 ? 8e-3 : 1e-3;
}

static uint16_t to_dt(ifd_dtype_t t, float x)
{
    return t == IFD_DTYPE_BF16 ? ifd_f32_to_bf16(x) : ifd_f32_to_f16(x);
}

static float from_dt(ifd_dtype_t t, uint16_t h)
{
    return t == IFD_DTYPE_BF16 ? ifd_bf16_to_f32(h) : ifd_f16_to_f32(h);
}

/* Device output of dtype t [n] to host f32. */
static void download_as_f32(float *dst, const void *dev, ifd_dtype_t t, int64_t n)
{
    if (t == IFD_DTYPE_F32) {
        gt_download(dst, dev, (size_t)n * 4);
        return;
    }
    uint16_t *h = gt_xmalloc((size_t)n * 2);
    gt_download(h, dev, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        dst[i] = from_dt(t, h[i]);
    free(h);
}

/* ---- RMSNorm ---------------------------------------------------------------------- */

static void rmsnorm_one(int rows, int dim, ifd_dtype_t out_t, int gemma, int with_x)
{
    const int64_t n = (int64_t)rows * dim;
    float *res = gt_xmalloc((size_t)n * 4), *x = gt_xmalloc((size_t)n * 4);
    float *w = gt_xmalloc((size_t)dim * 4), *w1 = gt_xmalloc((size_t)dim * 4);
    gt_fill_randn(res, n, 2.0f);
    gt_fill_randn(x, n, 1.0f);
    for (int i = 0; i < dim; i++) {
        w[i] = gemma ? gt_rand_uniform(-0.5f, 0.5f) : gt_rand_uniform(0.5f, 1.5f);
        w1[i] = gemma ? 1.0f + w[i] : w[i];
    }
    const size_t esz = (size_t)ifd_dtype_size(out_t);
    float *d_res = gt_dupload(res, (size_t)n * 4);
    float *d_x = with_x ? gt_dupload(x, (size_t)n * 4) : NULL;
    float *d_w = gt_dupload(w, (size_t)dim * 4);
    void *d_y = gt_dalloc_poison((size_t)n * esz);

    int rc = ifd_cuda_rmsnorm(d_y, d_res, d_x, d_w, rows, dim, 1e-6f, gemma, out_t, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_rmsnorm returned %d", rc);
    gt_sync();

    /* Reference: h = res + x, then the CPU RMSNorm with w' = w or 1 + w. */
    if (with_x)
        for (int64_t i = 0; i < n; i++)
            res[i] = res[i] + x[i];
    float *ref = gt_xmalloc((size_t)n * 4), *got = gt_xmalloc((size_t)n * 4);
    ifd_cpu_rmsnorm(ref, res, w1, rows, dim, 1e-6f);
    download_as_f32(got, d_y, out_t, n);
    double e = gt_rel_l2(got, ref, n);
    GT_EXPECT(e <= tol_for(out_t), "rmsnorm rows=%d dim=%d %s gemma=%d x=%d: rel L2 %.3g > %.3g",
              rows, dim, dtype_name(out_t), gemma, with_x, e, tol_for(out_t));
    gt_download(got, d_res, (size_t)n * 4);
    e = gt_rel_l2(got, res, n);
    GT_EXPECT(e == 0.0, "rmsnorm rows=%d dim=%d: residual differs (rel L2 %.3g)", rows, dim, e);

    /* In place (y == residual, F32, no x): the plain normalization. */
    if (out_t == IFD_DTYPE_F32 && !with_x) {
        rc = ifd_cuda_rmsnorm(d_res, d_res, NULL, d_w, rows, dim, 1e-6f, gemma, out_t, NULL);
        GT_EXPECT(rc == 0, "in-place ifd_cuda_rmsnorm returned %d", rc);
        gt_download(got, d_res, (size_t)n * 4);
        e = gt_rel_l2(got, ref, n);
        GT_EXPECT(e <= tol_for(out_t), "in-place rmsnorm dim=%d: rel L2 %.3g", dim, e);
    }
    free(res), free(x), free(w), free(w1), free(ref), free(got);
    gt_dfree(d_res), gt_dfree(d_x), gt_dfree(d_w), gt_dfree(d_y);
}

static void test_rmsnorm(void)
{
    static const int dims_big[] = {576, 1001, 2048, 4096, 8192};
    static const int dims_small[] = {64, 37, 576};
    const int *dims = gt_small() ? dims_small : dims_big;
    const int nd = gt_small() ? 3 : 5;
    const int rows_list[] = {1, 7, gt_small() ? 3 : 200};
    const ifd_dtype_t ts[] = {IFD_DTYPE_F32, IFD_DTYPE_BF16, IFD_DTYPE_F16};
    for (int di = 0; di < nd; di++)
        for (int ri = 0; ri < 3; ri++)
            for (int ti = 0; ti < 3; ti++)
                rmsnorm_one(rows_list[ri], dims[di], ts[ti], (di + ri + ti) % 2,
                            (di + ti) % 3 != 0);
    /* Bad arguments are refused before any launch. */
    GT_EXPECT(ifd_cuda_rmsnorm(NULL, NULL, NULL, NULL, 1, 8, 1e-6f, 0, IFD_DTYPE_F32, NULL) ==
                  IFD_EINVAL,
              "NULL pointers accepted");
}

/* ---- RoPE + KV write --------------------------------------------------------------- */

/* The quantized pools of rope_kv_one (n_rows rows each, poisoned where
 * unwritten): V byte for byte; K too on the emulator, on a device its
 * dequantized values within 2e-2 rel L2 (a few quants a step apart). */
static void quant_pool_check(const unsigned char *kc, const unsigned char *gk,
                             const unsigned char *vc, const unsigned char *gv, int64_t n_rows,
                             ifd_dtype_t t, int hd, int mode)
{
    const int64_t rb = ifd_kv_row_bytes(t, hd);
    GT_EXPECT(memcmp(vc, gv, (size_t)(n_rows * rb)) == 0, "rope_kv V pool %s hd=%d: bytes differ",
              dtype_name(t), hd);
#ifdef IFD_CUDA_EMU
    int64_t bad = 0;
    for (int64_t i = 0; i < n_rows * rb; i++)
        bad += kc[i] != gk[i];
    GT_EXPECT(bad == 0, "rope_kv K pool %s hd=%d mode=%d: %lld bytes differ", dtype_name(t), hd,
              mode, (long long)bad);
#else
    float *fr = gt_xmalloc((size_t)hd * 4), *fg = gt_xmalloc((size_t)hd * 4);
    double num = 0, den = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        if (kc[r * rb + rb - 1] == 0xff && memcmp(kc + r * rb, gk + r * rb, (size_t)rb) == 0)
            continue; /* unwritten, still poison on both sides */
        ifd_cpu_kv_dequant_row(fr, kc + r * rb, t, hd);
        ifd_cpu_kv_dequant_row(fg, gk + r * rb, t, hd);
        for (int e = 0; e < hd; e++)
            num += ((double)fg[e] - fr[e]) * ((double)fg[e] - fr[e]), den += (double)fr[e] * fr[e];
    }
    GT_EXPECT(num <= 4e-4 * den, "rope_kv K pool %s hd=%d mode=%d: rel L2 %.3g", dtype_name(t), hd,
              mode, den > 0 ? sqrt(num / den) : 0.0);
    free(fr), free(fg);
#endif
}

static void rope_kv_one(int n_tok, int n_heads, int n_kv, int hd, int n_rot, ifd_rope_mode_t mode,
                        int with_ff, ifd_dtype_t kv_t, int max_pos)
{
    const int bs = 16;
    const int n_blocks = (n_tok + bs - 1) / bs + 2;
    const int64_t q_ld = (int64_t)n_heads * hd, kv_ld = (int64_t)n_kv * hd;
    /* A fused QKV buffer: q, k, v of a token side by side (strided views). */
    const int64_t ld = q_ld + 2 * kv_ld;
    float *qkv = gt_xmalloc((size_t)(n_tok * ld) * 4);
    gt_fill_randn(qkv, n_tok * ld, 1.0f);
    int32_t *pos = gt_xmalloc((size_t)n_tok * 4);
    int64_t *slot = gt_xmalloc((size_t)n_tok * 8);
    int32_t *perm = gt_xmalloc((size_t)n_blocks * bs * 4);
    gt_permutation(perm, n_blocks * bs);
    for (int t = 0; t < n_tok; t++) {
        pos[t] = (int32_t)gt_rand_int(max_pos);
        slot[t] = t % 7 == 3 ? -1 : perm[t]; /* distinct slots, some padding */
    }
    float ff[512];
    for (int i = 0; i < n_rot / 2; i++)
        ff[i] = gt_rand_uniform(1.0f, 8.0f);

    /* Reference: ifd_cpu_rope on q and k, ifd_cpu_kv_rotate, then
     * ifd_cpu_kv_write into a poisoned host pool. */
    float *q = gt_xmalloc((size_t)(n_tok * q_ld) * 4), *k = gt_xmalloc((size_t)(n_tok * kv_ld) * 4);
    float *v = gt_xmalloc((size_t)(n_tok * kv_ld) * 4);
    for (int t = 0; t < n_tok; t++) {
        memcpy(q + t * q_ld, qkv + t * ld, (size_t)q_ld * 4);
        memcpy(k + t * kv_ld, qkv + t * ld + q_ld, (size_t)kv_ld * 4);
        memcpy(v + t * kv_ld, qkv + t * ld + q_ld + kv_ld, (size_t)kv_ld * 4);
    }
    const float base = 10000.0f, fscale = with_ff ? 0.5f : 1.0f;
    ifd_cpu_rope(q, pos, n_tok, n_heads, hd, n_rot, base, fscale, with_ff ? ff : NULL, mode);
    ifd_cpu_rope(k, pos, n_tok, n_kv, hd, n_rot, base, fscale, with_ff ? ff : NULL, mode);
    /* Q8_0 with head_dim 64/128/256: q and K into the rotated basis (kv_rot.h). */
    ifd_cpu_kv_rotate(q, (int64_t)n_tok * q_ld / hd, hd, kv_t);
    ifd_cpu_kv_rotate(k, (int64_t)n_tok * kv_ld / hd, hd, kv_t);
    const int quant = kv_t == IFD_DTYPE_Q8_0 || kv_t == IFD_DTYPE_FP8;
    /* Quantized pools are compared as bytes: one "element" per byte. */
    const size_t esz = quant ? 1 : (size_t)ifd_dtype_size(kv_t);
    const int64_t pool_n =
        (int64_t)n_blocks * n_kv * bs * ifd_kv_row_bytes(kv_t, hd) / (int64_t)esz;
    unsigned char *kc = gt_xmalloc((size_t)pool_n * esz), *vc = gt_xmalloc((size_t)pool_n * esz);
    memset(kc, 0xff, (size_t)pool_n * esz);
    memset(vc, 0xff, (size_t)pool_n * esz);
    ifd_kv_layer_t hkv = {
        .k = kc, .v = vc, .dtype = kv_t, .block_size = bs, .n_kv_heads = n_kv, .head_dim = hd};
    ifd_cpu_kv_write(&hkv, k, v, slot, n_tok);

    float *d_qkv = gt_dupload(qkv, (size_t)(n_tok * ld) * 4);
    int32_t *d_pos = gt_dupload(pos, (size_t)n_tok * 4);
    int64_t *d_slot = gt_dupload(slot, (size_t)n_tok * 8);
    float *d_ff = gt_dupload(ff, sizeof ff);
    void *d_kc = gt_dalloc_poison((size_t)pool_n * esz),
         *d_vc = gt_dalloc_poison((size_t)pool_n * esz);
    ifd_kv_layer_t dkv = hkv;
    dkv.k = d_kc;
    dkv.v = d_vc;
    ifd_cuda_rope_t rope = {.n_rot = n_rot,
                            .base = base,
                            .freq_scale = fscale,
                            .freq_factors = with_ff ? d_ff : NULL,
                            .mode = mode};
    int rc = ifd_cuda_rope_kv_write(d_qkv, &dkv, d_qkv + q_ld, d_qkv + q_ld + kv_ld, d_pos, d_slot,
                                    n_tok, n_heads, ld, ld, ld, &rope, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_rope_kv_write returned %d", rc);
    gt_sync();

    float *got = gt_xmalloc((size_t)(n_tok * ld) * 4);
    gt_download(got, d_qkv, (size_t)(n_tok * ld) * 4);
    float *gq = gt_xmalloc((size_t)(n_tok * q_ld) * 4);
    for (int t = 0; t < n_tok; t++)
        memcpy(gq + t * q_ld, got + t * ld, (size_t)q_ld * 4);
    double e = gt_rel_l2(gq, q, n_tok * q_ld);
    GT_EXPECT(e <= 2e-6, "rope q tok=%d heads=%d hd=%d n_rot=%d mode=%d ff=%d: rel L2 %.3g", n_tok,
              n_heads, hd, n_rot, (int)mode, with_ff, e);
    for (int t = 0; t < n_tok; t++) /* k and v are inputs only */
        GT_EXPECT(memcmp(got + t * ld + q_ld, qkv + t * ld + q_ld, (size_t)kv_ld * 8) == 0,
                  "rope_kv modified k/v of token %d", t);

    /* The pools: untouched slots keep their poison bits, written ones match. */
    unsigned char *gk = gt_xmalloc((size_t)pool_n * esz), *gv = gt_xmalloc((size_t)pool_n * esz);
    gt_download(gk, d_kc, (size_t)pool_n * esz);
    gt_download(gv, d_vc, (size_t)pool_n * esz);
    if (quant)
        quant_pool_check(kc, gk, vc, gv, n_blocks * n_kv * bs, kv_t, hd, (int)mode);
    float *fk_ref = gt_xmalloc((size_t)pool_n * 4), *fk_got = gt_xmalloc((size_t)pool_n * 4);
    float *fv_ref = gt_xmalloc((size_t)pool_n * 4), *fv_got = gt_xmalloc((size_t)pool_n * 4);
    int64_t poison_bad = 0, nw = 0;
    for (int64_t i = 0; i < (quant ? 0 : pool_n); i++) {
        int ref_poison =
            esz == 4 ? ((uint32_t *)kc)[i] == 0xffffffffu : ((uint16_t *)kc)[i] == 0xffffu;
        int got_poison =
            esz == 4 ? ((uint32_t *)gk)[i] == 0xffffffffu : ((uint16_t *)gk)[i] == 0xffffu;
        poison_bad += ref_poison != got_poison;
        if (ref_poison)
            continue;
        if (esz == 4) {
            fk_ref[nw] = ((float *)kc)[i], fk_got[nw] = ((float *)gk)[i];
            fv_ref[nw] = ((float *)vc)[i], fv_got[nw] = ((float *)gv)[i];
        } else {
            fk_ref[nw] = from_dt(kv_t, ((uint16_t *)kc)[i]);
            fk_got[nw] = from_dt(kv_t, ((uint16_t *)gk)[i]);
            fv_ref[nw] = from_dt(kv_t, ((uint16_t *)vc)[i]);
            fv_got[nw] = from_dt(kv_t, ((uint16_t *)gv)[i]);
        }
        nw++;
    }
    GT_EXPECT(poison_bad == 0, "rope_kv: %lld pool slots written/unwritten differently",
              (long long)poison_bad);
    const double tk = kv_t == IFD_DTYPE_F32 ? 2e-6 : 1e-3;
    e = quant ? 0.0 : gt_rel_l2(fk_got, fk_ref, nw);
    GT_EXPECT(e <= tk, "rope_kv K pool %s hd=%d mode=%d: rel L2 %.3g", dtype_name(kv_t), hd,
              (int)mode, e);
    e = quant ? 0.0 : gt_rel_l2(fv_got, fv_ref, nw);
    GT_EXPECT(e == 0.0, "rope_kv V pool %s: rel L2 %.3g (must be exact)", dtype_name(kv_t), e);

    free(qkv), free(pos), free(slot), free(perm), free(q), free(k), free(v), free(kc), free(vc);
    free(got), free(gq), free(gk), free(gv), free(fk_ref), free(fk_got), free(fv_ref), free(fv_got);
    gt_dfree(d_qkv), gt_dfree(d_pos), gt_dfree(d_slot), gt_dfree(d_ff), gt_dfree(d_kc);
    gt_dfree(d_vc);
}

/* Q8_0 and FP8: the rows' bytes against ifd_cpu_kv_write's. */
static void test_rope_kv_quant(void)
{
    const int small = gt_small();
    static const int shapes[][4] = {
        /* n_heads, n_kv, head_dim, n_rot */
        {9, 3, 64, 64}, {32, 8, 128, 128}, {4, 1, 256, 256}, {8, 2, 128, 64}, {6, 6, 96, 96},
    };
    const ifd_dtype_t ts[] = {IFD_DTYPE_Q8_0, IFD_DTYPE_FP8};
    for (int si = 0; si < 5; si++)
        for (int mode = 0; mode < 2; mode++)
            rope_kv_one(small ? 5 + si : (si % 2 ? 200 : 37), shapes[si][0], shapes[si][1],
                        shapes[si][2], shapes[si][3], mode ? IFD_ROPE_NEOX : IFD_ROPE_NORM,
                        (si + mode) % 2, ts[(si + mode) % 2], small ? 5000 : 16384);
}

static void test_rope_kv(void)
{
    const int small = gt_small();
    const ifd_dtype_t ts[] = {IFD_DTYPE_BF16, IFD_DTYPE_F16, IFD_DTYPE_F32};
    static const int shapes[][4] = {
        /* n_heads, n_kv, head_dim, n_rot */
        {9, 3, 64, 64}, {32, 8, 128, 128}, {4, 1, 256, 256}, {8, 2, 128, 64}, {6, 6, 80, 80},
    };
    for (int si = 0; si < 5; si++)
        for (int mode = 0; mode < 2; mode++) {
            const int n_tok = small ? 5 + si : (si % 2 ? 200 : 37);
            rope_kv_one(n_tok, shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3],
                        mode ? IFD_ROPE_NEOX : IFD_ROPE_NORM, (si + mode) % 2, ts[(si + mode) % 3],
                        small ? 5000 : 16384);
        }
}

/* ---- SwiGLU / GeGLU ----------------------------------------------------------------- */

static void glu_one(int rows, int n_ff, ifd_glu_t act, ifd_dtype_t out_t)
{
    const int64_t n = (int64_t)rows * n_ff;
    float *gu = gt_xmalloc((size_t)(2 * n) * 4);
    gt_fill_randn(gu, 2 * n, 3.0f);
    float *ref = gt_xmalloc((size_t)n * 4), *got = gt_xmalloc((size_t)n * 4);
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (int64_t)r * 2 * n_ff;
        if (act == IFD_GLU_SWIGLU)
            ifd_cpu_swiglu(ref + (int64_t)r * n_ff, g, g + n_ff, n_ff);
        else
            ifd_cpu_geglu_tanh(ref + (int64_t)r * n_ff, g, g + n_ff, n_ff);
    }
    float *d_gu = gt_dupload(gu, (size_t)(2 * n) * 4);
    void *d_out = gt_dalloc_poison((size_t)n * (size_t)ifd_dtype_size(out_t));
    int rc = ifd_cuda_glu(d_out, d_gu, rows, n_ff, act, out_t, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_glu returned %d", rc);
    gt_sync();
    download_as_f32(got, d_out, out_t, n);
    /* The CPU's SIMD exp is within 2 ulp of libm's; f32 tolerance allows it. */
    const double tol = out_t == IFD_DTYPE_F32 ? 1e-5 : tol_for(out_t);
    double e = gt_rel_l2(got, ref, n);
    GT_EXPECT(e <= tol, "glu rows=%d n_ff=%d act=%d %s: rel L2 %.3g > %.3g", rows, n_ff, (int)act,
              dtype_name(out_t), e, tol);
    free(gu), free(ref), free(got);
    gt_dfree(d_gu), gt_dfree(d_out);
}

static void test_glu(void)
{
    const int small = gt_small();
    const int ffs[] = {1536, 37, 8192};
    const int rows[] = {1, small ? 3 : 200, 7};
    const ifd_dtype_t ts[] = {IFD_DTYPE_F32, IFD_DTYPE_BF16, IFD_DTYPE_F16};
    for (int fi = 0; fi < (small ? 2 : 3); fi++)
        for (int ri = 0; ri < 3; ri++)
            for (int a = 0; a < 2; a++)
                glu_one(rows[ri], ffs[fi], (ifd_glu_t)a, ts[(fi + ri + a) % 3]);
}

/* ---- embedding -------------------------------------------------------------------- */

static void embed_one(int n_tok, int dim, int vocab, ifd_dtype_t tt, float scale)
{
    const size_t esz = (size_t)ifd_dtype_size(tt);
    const int64_t tn = (int64_t)vocab * dim;
    unsigned char *tab = gt_xmalloc((size_t)tn * esz);
    float *tf = gt_xmalloc((size_t)tn * 4);
    for (int64_t i = 0; i < tn; i++) {
        float x = gt_randn();
        if (tt == IFD_DTYPE_F32)
            ((float *)tab)[i] = x, tf[i] = x;
        else
            ((uint16_t *)tab)[i] = to_dt(tt, x), tf[i] = from_dt(tt, ((uint16_t *)tab)[i]);
    }
    int32_t *ids = gt_xmalloc((size_t)n_tok * 4);
    for (int t = 0; t < n_tok; t++)
        ids[t] = t == 2 ? vocab : t == 4 ? -1 : (int32_t)gt_rand_int(vocab);
    float *ref = gt_xmalloc((size_t)n_tok * dim * 4), *got = gt_xmalloc((size_t)n_tok * dim * 4);
    for (int t = 0; t < n_tok; t++)
        for (int d = 0; d < dim; d++)
            ref[(int64_t)t * dim + d] =
                ids[t] < 0 || ids[t] >= vocab ? NAN : tf[(int64_t)ids[t] * dim + d] * scale;
    void *d_tab = gt_dupload(tab, (size_t)tn * esz);
    int32_t *d_ids = gt_dupload(ids, (size_t)n_tok * 4);
    float *d_out = gt_dalloc_poison((size_t)n_tok * dim * 4);
    int rc = ifd_cuda_embed(d_out, d_tab, d_ids, n_tok, dim, vocab, tt, scale, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_embed returned %d", rc);
    gt_sync();
    gt_download(got, d_out, (size_t)n_tok * dim * 4);
    int64_t bad = 0;
    for (int64_t i = 0; i < (int64_t)n_tok * dim; i++) {
        if (isnan(ref[i]) ? !isnan(got[i]) : memcmp(&ref[i], &got[i], 4) != 0)
            bad++;
    }
    GT_EXPECT(bad == 0, "embed tok=%d dim=%d %s scale=%g: %lld elements differ", n_tok, dim,
              dtype_name(tt), scale, (long long)bad);
    free(tab), free(tf), free(ids), free(ref), free(got);
    gt_dfree(d_tab), gt_dfree(d_ids), gt_dfree(d_out);
}

static void test_embed(void)
{
    const ifd_dtype_t ts[] = {IFD_DTYPE_F32, IFD_DTYPE_BF16, IFD_DTYPE_F16};
    const int small = gt_small();
    for (int ti = 0; ti < 3; ti++) {
        embed_one(small ? 9 : 200, 576, 1000, ts[ti], 1.0f);
        embed_one(7, 37, 50, ts[ti], 24.0f);
        embed_one(small ? 6 : 64, small ? 640 : 2048, 300, ts[ti], sqrtf(640.0f));
    }
}

int main(void)
{
    gt_begin("test_gpu_fused");
    gt_case("rmsnorm", test_rmsnorm);
    gt_case("rope_kv_write", test_rope_kv);
    gt_case("rope_kv_write_quant", test_rope_kv_quant);
    gt_case("glu", test_glu);
    gt_case("embed", test_embed);
    return gt_end();
}
