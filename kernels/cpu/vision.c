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
 * dense_attention: per head and block of query rows, S = scale · Q Kᵀ
 * (ifd_cpu_matmul_f32), row softmax (ifd_cpu_softmax), O = S V
 * (ifd_cpu_matmul_f32 on Vᵀ). Scratch of a block: IFD__ATT_ROWS × n floats
 * of scores plus the head's K, Vᵀ and Q rows, allocated per call.
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

int ifd_cpu_avg_pool2d(float *out, const float *x, int side, int k, int channels)
{
    if (side <= 0 || k <= 0 || channels <= 0 || side % k != 0)
        return IFD_EINVAL;
    const int ps = side / k;
    const float inv = 1.0f / (float)(k * k);
    for (int pi = 0; pi < ps; pi++)
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

/* One head: its K and Vᵀ gathered once, then blocks of query rows. */
static int ifd__dense_head(float *out, const float *qkv, int n, int n_heads, int head_dim, int h,
                           float scale, float *kh, float *vt, float *qh, float *s,
                           ifd_threadpool_t *tp)
{
    const int64_t width = (int64_t)n_heads * head_dim, ld = 3 * width;
    for (int t = 0; t < n; t++) {
        const float *row = qkv + (int64_t)t * ld + (int64_t)h * head_dim;
        memcpy(kh + (int64_t)t * head_dim, row + width, sizeof(float) * (size_t)head_dim);
        for (int d = 0; d < head_dim; d++)
            vt[(int64_t)d * n + t] = row[2 * width + d];
    }
    float *o = qh; /* the block's q rows are not needed after S: reuse them */
    for (int r0 = 0; r0 < n; r0 += IFD__ATT_ROWS) {
        const int m = n - r0 < IFD__ATT_ROWS ? n - r0 : IFD__ATT_ROWS;
        for (int i = 0; i < m; i++) {
            const float *row = qkv + (int64_t)(r0 + i) * ld + (int64_t)h * head_dim;
            for (int d = 0; d < head_dim; d++)
                qh[(int64_t)i * head_dim + d] = row[d] * scale;
        }
        int rc = ifd_cpu_matmul_f32(s, qh, kh, m, n, head_dim, tp);
        if (rc == 0)
            rc = ifd_cpu_softmax(s, m, n);
        if (rc == 0)
            rc = ifd_cpu_matmul_f32(o, s, vt, m, head_dim, n, tp);
        if (rc)
            return rc;
        for (int i = 0; i < m; i++)
            memcpy(out + (int64_t)(r0 + i) * width + (int64_t)h * head_dim,
                   o + (int64_t)i * head_dim, sizeof(float) * (size_t)head_dim);
    }
    return 0;
}

int ifd_cpu_dense_attention(float *out, const float *qkv, int n, int n_heads, int head_dim,
                            float scale, ifd_threadpool_t *tp)
{
    if (n <= 0 || n_heads <= 0 || head_dim <= 0)
        return IFD_EINVAL;
    const int blk = n < IFD__ATT_ROWS ? n : IFD__ATT_ROWS;
    float *kh = malloc(sizeof(float) * (size_t)n * (size_t)head_dim);
    float *vt = malloc(sizeof(float) * (size_t)n * (size_t)head_dim);
    float *qh = malloc(sizeof(float) * (size_t)blk * (size_t)head_dim);
    float *s = malloc(sizeof(float) * (size_t)blk * (size_t)n);
    int rc = kh && vt && qh && s ? 0 : IFD_ENOMEM;
    for (int h = 0; h < n_heads && rc == 0; h++)
        rc = ifd__dense_head(out, qkv, n, n_heads, head_dim, h, scale, kh, vt, qh, s, tp);
    free(kh);
    free(vt);
    free(qh);
    free(s);
    return rc;
}
