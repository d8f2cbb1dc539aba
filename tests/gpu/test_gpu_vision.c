/*
 * test_gpu_vision.c — the ViT encoder's CUDA kernels (kernels/cuda/vision.h)
 * against their CPU references (kernels/cpu/vision.c, ifd_cpu_gelu_tanh) on
 * fresh random data: LayerNorm with bias fused with the residual add (with
 * and without the add, without a bias, in place), gelu_tanh, the row-table
 * add, 2-D average pooling, and dense bidirectional attention (sequence
 * lengths around the 16-row and 32-key tiles, head_dim 16 to 128, several
 * heads).
 *
 * Tolerances (relative L2 against the CPU result): f32 outputs 2e-6 (the
 * kernels repeat the CPU's roundings; only the order of LayerNorm's double
 * sums and the last ulp of expf differ), attention in f32 1e-5 (an online
 * softmax: another summation order than the CPU's two matmuls), bf16 outputs
 * 8e-3, f16 1e-3 (one rounding of the output). add_rows and avg_pool2d are
 * exact. Outputs start NaN-poisoned.
 */
#include "gpu_test.h"

#include "cuda/cuda_kernels.h"
#include "error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ifd_dtype_t DTS[] = {IFD_DTYPE_F32, IFD_DTYPE_BF16, IFD_DTYPE_F16};

static const char *dtype_name(ifd_dtype_t t)
{
    return t == IFD_DTYPE_F32 ? "f32" : t == IFD_DTYPE_BF16 ? "bf16" : "f16";
}

static double tol_for(ifd_dtype_t t, double f32_tol)
{
    return t == IFD_DTYPE_F32 ? f32_tol : t == IFD_DTYPE_BF16 ? 8e-3 : 1e-3;
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
        dst[i] = t == IFD_DTYPE_BF16 ? ifd_bf16_to_f32(h[i]) : ifd_f16_to_f32(h[i]);
    free(h);
}

/* ---- LayerNorm ----------------------------------------------------------------- */

/* in_place: y is the residual (F32 only); with_x: a delta to add first. */
static void layernorm_one(int rows, int dim, ifd_dtype_t t, int with_x, int with_b, int in_place)
{
    const int64_t n = (int64_t)rows * dim;
    float *res = gt_xmalloc((size_t)n * 4), *x = gt_xmalloc((size_t)n * 4);
    float *w = gt_xmalloc((size_t)dim * 4), *b = gt_xmalloc((size_t)dim * 4);
    gt_fill_randn(res, n, 2.0f);
    for (int64_t i = 0; i < n; i++) /* an offset per row: the mean matters */
        res[i] += (float)(i / dim % 7) - 3.0f;
    gt_fill_randn(x, n, 1.0f);
    for (int i = 0; i < dim; i++) {
        w[i] = gt_rand_uniform(0.5f, 1.5f);
        b[i] = gt_rand_uniform(-0.5f, 0.5f);
    }
    float *d_res = gt_dupload(res, (size_t)n * 4),
          *d_x = with_x ? gt_dupload(x, (size_t)n * 4) : NULL;
    float *d_w = gt_dupload(w, (size_t)dim * 4),
          *d_b = with_b ? gt_dupload(b, (size_t)dim * 4) : NULL;
    void *d_y = in_place ? (void *)d_res : gt_dalloc_poison((size_t)n * (size_t)ifd_dtype_size(t));
    int rc = ifd_cuda_layernorm(d_y, d_res, d_x, d_w, d_b, rows, dim, 1e-6f, t, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_layernorm returned %d", rc);
    gt_sync();
    /* the reference */
    if (with_x)
        for (int64_t i = 0; i < n; i++)
            res[i] += x[i];
    float *ref = gt_xmalloc((size_t)n * 4), *got = gt_xmalloc((size_t)n * 4);
    ifd_cpu_layernorm(ref, res, w, with_b ? b : NULL, rows, dim, 1e-6f);
    download_as_f32(got, d_y, t, n);
    const double e = gt_rel_l2(got, ref, n), tol = tol_for(t, 2e-6);
    GT_EXPECT(e <= tol, "layernorm rows=%d dim=%d %s x=%d b=%d in_place=%d: rel L2 %.3g > %.1g",
              rows, dim, dtype_name(t), with_x, with_b, in_place, e, tol);
    if (!in_place) { /* the residual got the delta, exactly */
        float *r2 = gt_xmalloc((size_t)n * 4);
        gt_download(r2, d_res, (size_t)n * 4);
        GT_EXPECT(memcmp(r2, res, (size_t)n * 4) == 0, "layernorm: residual not res + x");
        free(r2);
        gt_dfree(d_y);
    }
    free(res), free(x), free(w), free(b), free(ref), free(got);
    gt_dfree(d_res), gt_dfree(d_x), gt_dfree(d_w), gt_dfree(d_b);
}

static void test_layernorm(void)
{
    const int small = gt_small();
    for (int ti = 0; ti < 3; ti++) {
        layernorm_one(small ? 5 : 300, 64, DTS[ti], 1, 1, 0);
        layernorm_one(3, 37, DTS[ti], 0, 1, 0);
        layernorm_one(small ? 4 : 64, small ? 300 : 1152, DTS[ti], 1, 0, 0);
    }
    layernorm_one(6, 1152, IFD_DTYPE_F32, 1, 1, 1);
    layernorm_one(2, 17, IFD_DTYPE_F32, 0, 1, 1);
    float *p = gt_dalloc(64);
    GT_EXPECT(ifd_cuda_layernorm(p, p, NULL, p, NULL, 1, 0, 1e-6f, IFD_DTYPE_F32, NULL) ==
                  IFD_EINVAL,
              "dim 0 accepted");
    GT_EXPECT(ifd_cuda_layernorm(p, p, NULL, p, NULL, 1, 4, 1e-6f, IFD_DTYPE_Q8_0, NULL) ==
                  IFD_ENOTSUP,
              "a q8_0 output accepted");
    gt_dfree(p);
}

/* ---- gelu, add_rows, avg_pool2d ------------------------------------------------ */

static void gelu_one(int64_t n, ifd_dtype_t t)
{
    float *x = gt_xmalloc((size_t)n * 4), *ref = gt_xmalloc((size_t)n * 4);
    float *got = gt_xmalloc((size_t)n * 4);
    gt_fill_randn(x, n, 3.0f);
    float *d_x = gt_dupload(x, (size_t)n * 4);
    void *d_o = gt_dalloc_poison((size_t)n * (size_t)ifd_dtype_size(t));
    int rc = ifd_cuda_gelu_tanh(d_o, d_x, n, t, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_gelu_tanh returned %d", rc);
    gt_sync();
    ifd_cpu_gelu_tanh(ref, x, n);
    download_as_f32(got, d_o, t, n);
    /* f16 stores values below 2^-14 as subnormals, steps of 2^-24 apart: gelu of a
     * large negative x is that small (-1e-6 at x = -5), so a relative bound alone fails
     * on a short row (n = 1: one value rounded to 0 is a relative error of 1). The
     * bound is the dtype's: relative, plus half a subnormal step an element for f16. */
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++)
        d2 += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]), r2 += (double)ref[i] * ref[i];
    const double tol = tol_for(t, 2e-6);
    const double abs_floor = t == IFD_DTYPE_F16 ? 0x1p-25 * sqrt((double)n) : 0.0;
    GT_EXPECT(sqrt(d2) <= tol * sqrt(r2) + abs_floor,
              "gelu n=%lld %s: L2 error %.3g > %.1g x %.3g + %.3g",
              (long long)n, dtype_name(t), sqrt(d2), tol, sqrt(r2), abs_floor);
    free(x), free(ref), free(got);
    gt_dfree(d_x), gt_dfree(d_o);
}

static void test_gelu(void)
{
    for (int ti = 0; ti < 3; ti++) {
        gelu_one(1, DTS[ti]);
        gelu_one(gt_small() ? 3001 : 1 << 20, DTS[ti]);
    }
}

static void test_add_rows(void)
{
    const int rows = gt_small() ? 37 : 4096, cols = gt_small() ? 40 : 1152;
    const int64_t n = (int64_t)rows * cols;
    float *x = gt_xmalloc((size_t)(n + cols) * 4), *t = gt_xmalloc((size_t)(n + cols) * 4);
    gt_fill_randn(x, n + cols, 1.0f);
    gt_fill_randn(t, n + cols, 1.0f);
    float *d_x = gt_dupload(x, (size_t)(n + cols) * 4), *d_t = gt_dupload(t, (size_t)n * 4);
    GT_EXPECT(ifd_cuda_add_rows(d_x, d_t, rows, cols, NULL) == 0, "ifd_cuda_add_rows failed");
    float *got = gt_xmalloc((size_t)(n + cols) * 4);
    gt_download(got, d_x, (size_t)(n + cols) * 4);
    int64_t bad = 0;
    for (int64_t i = 0; i < n + cols; i++) {
        const float want = i < n ? x[i] + t[i] : x[i]; /* the row past `rows` untouched */
        bad += memcmp(&want, &got[i], 4) != 0;
    }
    GT_EXPECT(bad == 0, "add_rows %dx%d: %lld elements differ", rows, cols, (long long)bad);
    free(x), free(t), free(got);
    gt_dfree(d_x), gt_dfree(d_t);
}

/* rows × side grid (rows < side: a band of a square grid). */
static void pool_one(int rows, int side, int k, int ch)
{
    const int64_t n = (int64_t)rows * side * ch, m = (int64_t)(rows / k) * (side / k) * ch;
    float *x = gt_xmalloc((size_t)n * 4), *ref = gt_xmalloc((size_t)m * 4);
    float *got = gt_xmalloc((size_t)m * 4);
    gt_fill_randn(x, n, 2.0f);
    float *d_x = gt_dupload(x, (size_t)n * 4), *d_o = gt_dalloc_poison((size_t)m * 4);
    GT_EXPECT(ifd_cuda_avg_pool2d(d_o, d_x, rows, side, k, ch, NULL) == 0,
              "ifd_cuda_avg_pool2d failed");
    gt_download(got, d_o, (size_t)m * 4);
    ifd_cpu_avg_pool2d(ref, x, rows, side, k, ch);
    GT_EXPECT(memcmp(got, ref, (size_t)m * 4) == 0, "avg_pool2d rows=%d side=%d k=%d ch=%d differs",
              rows, side, k, ch);
    free(x), free(ref), free(got);
    gt_dfree(d_x), gt_dfree(d_o);
}

static void test_avg_pool2d(void)
{
    pool_one(8, 8, 2, 64);
    pool_one(6, 6, 3, 5);
    pool_one(5, 5, 1, 7);
    pool_one(2, 8, 2, 64); /* bands: the vision encode's pieces of the tail */
    pool_one(3, 6, 3, 5);
    pool_one(gt_small() ? 16 : 64, gt_small() ? 16 : 64, 4, gt_small() ? 24 : 1152);
    float *p = gt_dalloc(64), *q = gt_dalloc(64);
    GT_EXPECT(ifd_cuda_avg_pool2d(p, q, 6, 6, 4, 1, NULL) == IFD_EINVAL, "side %% k != 0 accepted");
    GT_EXPECT(ifd_cuda_avg_pool2d(p, q, 3, 6, 2, 1, NULL) == IFD_EINVAL, "rows %% k != 0 accepted");
    gt_dfree(p), gt_dfree(q);
}

/* ---- dense attention ------------------------------------------------------------ */

static void attn_one(int n, int heads, int hd, ifd_dtype_t t)
{
    const int64_t w = (int64_t)heads * hd, nq = (int64_t)n * 3 * w, no = (int64_t)n * w;
    float *qkv = gt_xmalloc((size_t)nq * 4), *ref = gt_xmalloc((size_t)no * 4);
    float *got = gt_xmalloc((size_t)no * 4);
    gt_fill_randn(qkv, nq, 1.5f);
    const float scale = 1.0f / sqrtf((float)hd);
    float *d_qkv = gt_dupload(qkv, (size_t)nq * 4);
    void *d_o = gt_dalloc_poison((size_t)no * (size_t)ifd_dtype_size(t));
    int rc = ifd_cuda_dense_attention(d_o, d_qkv, n, 0, n, heads, hd, scale, t, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_dense_attention returned %d", rc);
    gt_sync();
    GT_EXPECT(ifd_cpu_dense_attention(ref, qkv, n, 0, n, heads, hd, scale, NULL) == 0,
              "cpu attention");
    download_as_f32(got, d_o, t, no);
    const double e = gt_rel_l2(got, ref, no), tol = tol_for(t, 1e-5);
    GT_EXPECT(e <= tol, "dense attention n=%d heads=%d hd=%d %s: rel L2 %.3g > %.1g", n, heads, hd,
              dtype_name(t), e, tol);
    free(qkv), free(ref), free(got);
    gt_dfree(d_qkv), gt_dfree(d_o);
}

/* The query rows [q0, q1) alone: against the CPU reference there, the same
 * bits as the whole call's rows, and the rows outside still the poison. */
static void attn_range(int n, int heads, int hd, int q0, int q1)
{
    const int64_t w = (int64_t)heads * hd, nq = (int64_t)n * 3 * w, no = (int64_t)n * w;
    float *qkv = gt_xmalloc((size_t)nq * 4), *ref = gt_xmalloc((size_t)no * 4);
    float *got = gt_xmalloc((size_t)no * 4), *whole = gt_xmalloc((size_t)no * 4);
    gt_fill_randn(qkv, nq, 1.5f);
    const float scale = 1.0f / sqrtf((float)hd);
    float *d_qkv = gt_dupload(qkv, (size_t)nq * 4);
    float *d_o = gt_dalloc((size_t)no * 4), *d_w = gt_dalloc((size_t)no * 4);
    for (int64_t i = 0; i < no; i++)
        got[i] = -7.0f;
    gt_upload(d_o, got, (size_t)no * 4);
    GT_EXPECT(
        ifd_cuda_dense_attention(d_o, d_qkv, n, q0, q1, heads, hd, scale, IFD_DTYPE_F32, NULL) == 0,
        "range [%d, %d) refused", q0, q1);
    GT_EXPECT(
        ifd_cuda_dense_attention(d_w, d_qkv, n, 0, n, heads, hd, scale, IFD_DTYPE_F32, NULL) == 0,
        "whole refused");
    gt_sync();
    GT_EXPECT(ifd_cpu_dense_attention(ref, qkv, n, 0, n, heads, hd, scale, NULL) == 0,
              "cpu attention");
    gt_download(got, d_o, (size_t)no * 4);
    gt_download(whole, d_w, (size_t)no * 4);
    const int64_t a = (int64_t)q0 * w, b = (int64_t)q1 * w;
    const double e = gt_rel_l2(got + a, ref + a, b - a);
    GT_EXPECT(e <= 1e-5, "dense attention rows [%d, %d) of %d: rel L2 %.3g", q0, q1, n, e);
    GT_EXPECT(memcmp(got + a, whole + a, (size_t)(b - a) * 4) == 0,
              "rows [%d, %d) of %d differ from the whole call's", q0, q1, n);
    int outside = 0;
    for (int64_t i = 0; i < no; i++)
        outside += (i < a || i >= b) && got[i] != -7.0f;
    GT_EXPECT(outside == 0, "%d values outside [%d, %d) written", outside, q0, q1);
    free(qkv), free(ref), free(got), free(whole);
    gt_dfree(d_qkv), gt_dfree(d_o), gt_dfree(d_w);
}

static void test_dense_attention(void)
{
    const int small = gt_small();
    for (int ti = 0; ti < 3; ti++)
        attn_one(64, 4, 16, DTS[ti]); /* the tiny model's shape */
    attn_one(1, 1, 8, IFD_DTYPE_F32);
    attn_one(33, 2, 72, IFD_DTYPE_F32); /* a partial key tile, Gemma 3's head_dim */
    attn_one(17, 3, 128, IFD_DTYPE_BF16);
    attn_one(small ? 47 : 1024, small ? 2 : 16, 72, IFD_DTYPE_F32);
    if (!small)
        attn_one(4096, 2, 72, IFD_DTYPE_BF16);
    attn_range(64, 4, 16, 5, 37); /* the tiny model's shape, a range off the 16-row blocks */
    attn_range(33, 2, 72, 32, 33);
    float *p = gt_dalloc(64), *q = gt_dalloc(64);
    GT_EXPECT(ifd_cuda_dense_attention(p, q, 4, 0, 4, 1, 129, 1.0f, IFD_DTYPE_F32, NULL) ==
                  IFD_ENOTSUP,
              "head_dim 129 accepted");
    GT_EXPECT(ifd_cuda_dense_attention(p, q, 4, 0, 4, 0, 16, 1.0f, IFD_DTYPE_F32, NULL) ==
                  IFD_EINVAL,
              "0 heads accepted");
    GT_EXPECT(ifd_cuda_dense_attention(p, q, 4, 3, 5, 1, 16, 1.0f, IFD_DTYPE_F32, NULL) ==
                  IFD_EINVAL,
              "a range past n accepted");
    gt_dfree(p), gt_dfree(q);
}

int main(void)
{
    gt_begin("test_gpu_vision");
    gt_case("layernorm", test_layernorm);
    gt_case("gelu_tanh", test_gelu);
    gt_case("add_rows", test_add_rows);
    gt_case("avg_pool2d", test_avg_pool2d);
    gt_case("dense_attention", test_dense_attention);
    return gt_end();
}
