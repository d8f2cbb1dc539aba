/*
 * vision.c — the kernels of a ViT encoder (SigLIP, worker/vision.c) that
 * the text model does not need: LayerNorm with bias, 2-D average pooling of
 * a patch grid, dense bidirectional multi-head attention over one sequence.
 *
 * layernorm: mean and variance (biased, as torch) of each row in double,
 * y = (x − mean) · rstd · w + b with rstd = 1 / sqrt(var + eps) in float.
 * avg_pool2d: the k × k window summed in float in row-major order, then
 * multiplied by 1 / k² (torch's AvgPool2d divides; the two differ by at most
 * one rounding).
 * dense_attention: per head and block of query rows of [q0, q1), S =
 * scale · Q Kᵀ, row softmax (ifd_cpu_softmax), O = S V, both products with
 * ifd_cpu_matmul_packed on the head's K and Vᵀ packed once per call: one
 * summation order per output whatever the block's size, so a query row's
 * result does not depend on the range it was computed in (the vision
 * encode's row-split steps, worker/vision.h). Scratch: IFD__ATT_ROWS × n
 * floats of scores plus the head's packed K, Vᵀ and its Q rows, allocated
 * per call.
 */
#include "cpu_kernels.h"

#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ifd_cpu_layernorm(float *y, const float *x, const float *w, const float *b, int rows, int dim,
                      float eps)
{
    if (rows < 0 || dim <= 0 || !(eps >= 0))
        return IFD_EINVAL;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim;
        float *yr = y + (int64_t)r * dim;
        double s = 0, ss = 0;
        for (int i = 0; i < dim; i++)
            s += xr[i];
        const double mean = s / dim;
        for (int i = 0; i < dim; i++)
            ss += (xr[i] - mean) * (xr[i] - mean);
        const float rstd = 1.0f / sqrtf((float)(ss / dim) + eps), m = (float)mean;
        for (int i = 0; i < dim; i++)
            yr[i] = (xr[i] - m) * rstd * w[i] + (b ? b[i] : 0.0f);
    }
    return 0;
}

int ifd_cpu_avg_pool2d(float *out, const float *x, int rows, int side, int k, int channels)
{
    if (rows <= 0 || side <= 0 || k <= 0 || channels <= 0 || side % k != 0 || rows % k != 0)
        return IFD_EINVAL;
    const int ps = side / k;
    const float inv = 1.0f / (float)(k * k);
    for (int pi = 0; pi < rows / k; pi++)
        for (int pj = 0; pj < ps; pj++) {
            float *o = out + ((int64_t)pi * ps + pj) * channels;
            memset(o, 0, sizeof(float) * (size_t)channels);
            for (int a = 0; a < k; a++)
                for (int bb = 0; bb < k; bb++) {
                    const float *row = x + ((int64_t)(pi * k + a) * side + pj * k + bb) * channels;
                    for (int c = 0; c < channels; c++)
                        o[c] += row[c];
                }
            for (int c = 0; c < channels; c++)
                o[c] *= inv;
        }
    return 0;
}

enum { IFD__ATT_ROWS = 256 };

/* The scratch of one call: K and Vᵀ of a head (plain, then packed), a
 * block's Q rows (then its output) and scores. */
typedef struct {
    float *kh, *vt, *kp, *vp, *qh, *s;
} ifd__dense_scratch_t;

/* One head: its K and Vᵀ gathered and packed once, then blocks of the
 * query rows [q0, q1). */
static int ifd__dense_head(float *out, const float *qkv, int n, int q0, int q1, int n_heads,
                           int head_dim, int h, float scale, const ifd__dense_scratch_t *sc,
                           ifd_threadpool_t *tp)
{
    const int64_t width = (int64_t)n_heads * head_dim, ld = 3 * width;
    for (int t = 0; t < n; t++) {
        const float *row = qkv + (int64_t)t * ld + (int64_t)h * head_dim;
        memcpy(sc->kh + (int64_t)t * head_dim, row + width, sizeof(float) * (size_t)head_dim);
        for (int d = 0; d < head_dim; d++)
            sc->vt[(int64_t)d * n + t] = row[2 * width + d];
    }
    int rc = ifd_cpu_matmul_pack(sc->kp, sc->kh, n, head_dim);
    if (rc == 0)
        rc = ifd_cpu_matmul_pack(sc->vp, sc->vt, head_dim, n);
    float *qh = sc->qh, *o = sc->qh; /* the block's q rows are not needed after S */
    for (int r0 = q0; r0 < q1 && rc == 0; r0 += IFD__ATT_ROWS) {
        const int m = q1 - r0 < IFD__ATT_ROWS ? q1 - r0 : IFD__ATT_ROWS;
        for (int i = 0; i < m; i++) {
            const float *row = qkv + (int64_t)(r0 + i) * ld + (int64_t)h * head_dim;
            for (int d = 0; d < head_dim; d++)
                qh[(int64_t)i * head_dim + d] = row[d] * scale;
        }
        if ((rc = ifd_cpu_matmul_packed(sc->s, qh, sc->kp, m, n, head_dim, tp)) ||
            (rc = ifd_cpu_softmax(sc->s, m, n)) ||
            (rc = ifd_cpu_matmul_packed(o, sc->s, sc->vp, m, head_dim, n, tp)))
            return rc;
        for (int i = 0; i < m; i++)
            memcpy(out + (int64_t)(r0 + i) * width + (int64_t)h * head_dim,
                   o + (int64_t)i * head_dim, sizeof(float) * (size_t)head_dim);
    }
    return rc;
}

/* 64-byte aligned floats (ifd_cpu_matmul_pack's requirement), or NULL. */
static float *ifd__dense_alloc(int64_t floats)
{
    const size_t bytes = ((size_t)floats * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

int ifd_cpu_dense_attention(float *out, const float *qkv, int n, int q0, int q1, int n_heads,
                            int head_dim, float scale, ifd_threadpool_t *tp)
{
    if (n <= 0 || n_heads <= 0 || head_dim <= 0 || q0 < 0 || q1 < q0 || q1 > n)
        return IFD_EINVAL;
    if (q0 == q1)
        return 0;
    const int blk = q1 - q0 < IFD__ATT_ROWS ? q1 - q0 : IFD__ATT_ROWS;
    const int64_t nd = (int64_t)n * head_dim;
    ifd__dense_scratch_t sc = {
        .kh = malloc(sizeof(float) * (size_t)nd),
        .vt = malloc(sizeof(float) * (size_t)nd),
        .kp = ifd__dense_alloc(ifd_cpu_matmul_packed_floats(n, head_dim)),
        .vp = ifd__dense_alloc(ifd_cpu_matmul_packed_floats(head_dim, n)),
        .qh = malloc(sizeof(float) * (size_t)blk * (size_t)head_dim),
        .s = malloc(sizeof(float) * (size_t)blk * (size_t)n),
    };
    int rc = sc.kh && sc.vt && sc.kp && sc.vp && sc.qh && sc.s ? 0 : IFD_ENOMEM;
    for (int h = 0; h < n_heads && rc == 0; h++)
        rc = ifd__dense_head(out, qkv, n, q0, q1, n_heads, head_dim, h, scale, &sc, tp);
    free(sc.kh);
    free(sc.vt);
    free(sc.kp);
    free(sc.vp);
    free(sc.qh);
    free(sc.s);
    return rc;
}
