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
 * encode's row-split steps, worker/vision.h). Threading: every head's K
 * and Vᵀ are packed first (tasks over heads), then the (head, block of
 * query rows) items are spread over the pool's threads, each item's two
 * products and softmax single-threaded on its thread (the products'
 * per-row bits do not depend on the thread count, so neither does the
 * result; no thread waits on a serial softmax or on a 72-column product's
 * 5 panels split two ways). Scratch, allocated per call: all heads' packed
 * K and Vᵀ, and per thread a head's K and Vᵀ gather, IFD__ATT_ROWS Q rows
 * and IFD__ATT_ROWS × n floats of scores.
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

/* One call's state: every head's K and Vᵀ packed (phase 1, tasks over
 * heads), then (head, block of query rows) items spread over the tasks
 * (phase 2), each task with its own gather, Q and score scratch. */
typedef struct {
    float *out;
    const float *qkv;
    int n, q0, q1, n_heads, head_dim, blocks;
    float scale;
    float *kp, *vp; /* [n_heads][kp_floats], [n_heads][vp_floats]: the caller's kv */
    int64_t kp_floats, vp_floats;
    float *scratch;         /* per task: packing: kh, vt; attention: qh, s */
    int64_t scratch_floats; /* per task, a multiple of 16 */
    int rc[64];             /* per task (tasks ≤ 64) */
} ifd__dense_t;

static float *ifd__dense_task_scratch(const ifd__dense_t *c, int task)
{
    return c->scratch + (int64_t)task * c->scratch_floats;
}

/* Phase 1: head h's K rows and Vᵀ gathered, then packed. */
static void ifd__dense_pack_task(void *arg, int task, int n_tasks)
{
    ifd__dense_t *c = arg;
    const int n = c->n, hd = c->head_dim;
    const int64_t width = (int64_t)c->n_heads * hd, ld = 3 * width, nd = (int64_t)n * hd;
    float *kh = ifd__dense_task_scratch(c, task), *vt = kh + nd;
    for (int h = task; h < c->n_heads && c->rc[task] == 0; h += n_tasks) {
        for (int t = 0; t < n; t++) {
            const float *row = c->qkv + (int64_t)t * ld + (int64_t)h * hd;
            memcpy(kh + (int64_t)t * hd, row + width, sizeof(float) * (size_t)hd);
            for (int d = 0; d < hd; d++)
                vt[(int64_t)d * n + t] = row[2 * width + d];
        }
        int rc = ifd_cpu_matmul_pack(c->kp + h * c->kp_floats, kh, n, hd);
        if (rc == 0)
            rc = ifd_cpu_matmul_pack(c->vp + h * c->vp_floats, vt, hd, n);
        c->rc[task] = rc;
    }
}

/* Phase 2: S = scale · Q Kᵀ, softmax, O = S V for (head, block) items. */
static void ifd__dense_block_task(void *arg, int task, int n_tasks)
{
    ifd__dense_t *c = arg;
    const int n = c->n, hd = c->head_dim;
    const int64_t width = (int64_t)c->n_heads * hd, ld = 3 * width;
    float *qh = ifd__dense_task_scratch(c, task), *o = qh; /* q not needed after S */
    float *s = qh + (int64_t)IFD__ATT_ROWS * hd;
    for (int it = task; it < c->n_heads * c->blocks && c->rc[task] == 0; it += n_tasks) {
        const int h = it / c->blocks, r0 = c->q0 + it % c->blocks * IFD__ATT_ROWS;
        const int m = c->q1 - r0 < IFD__ATT_ROWS ? c->q1 - r0 : IFD__ATT_ROWS;
        for (int i = 0; i < m; i++) {
            const float *row = c->qkv + (int64_t)(r0 + i) * ld + (int64_t)h * hd;
            for (int d = 0; d < hd; d++)
                qh[(int64_t)i * hd + d] = row[d] * c->scale;
        }
        int rc;
        if ((rc = ifd_cpu_matmul_packed(s, qh, c->kp + h * c->kp_floats, m, n, hd, NULL)) ||
            (rc = ifd_cpu_softmax(s, m, n)) ||
            (rc = ifd_cpu_matmul_packed(o, s, c->vp + h * c->vp_floats, m, hd, n, NULL))) {
            c->rc[task] = rc;
            return;
        }
        for (int i = 0; i < m; i++)
            memcpy(c->out + (int64_t)(r0 + i) * width + (int64_t)h * hd, o + (int64_t)i * hd,
                   sizeof(float) * (size_t)hd);
    }
}

/* 64-byte aligned floats (ifd_cpu_matmul_pack's requirement), or NULL. */
static float *ifd__dense_alloc(int64_t floats)
{
    const size_t bytes = ((size_t)floats * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static int64_t ifd__round16(int64_t f)
{
    return (f + 15) / 16 * 16;
}

int64_t ifd_cpu_dense_kv_floats(int n, int n_heads, int head_dim)
{
    if (n <= 0 || n_heads <= 0 || head_dim <= 0)
        return IFD_EINVAL;
    return (ifd__round16(ifd_cpu_matmul_packed_floats(n, head_dim)) +
            ifd__round16(ifd_cpu_matmul_packed_floats(head_dim, n))) *
           n_heads;
}

/* c's fields for n, n_heads, head_dim and kv (the packs' layout). */
static void ifd__dense_init(ifd__dense_t *c, float *kv, int n, int n_heads, int head_dim)
{
    *c = (ifd__dense_t){.n = n,
                        .n_heads = n_heads,
                        .head_dim = head_dim,
                        .kp_floats = ifd__round16(ifd_cpu_matmul_packed_floats(n, head_dim)),
                        .vp_floats = ifd__round16(ifd_cpu_matmul_packed_floats(head_dim, n))};
    c->kp = kv;
    c->vp = kv + c->kp_floats * n_heads;
}

/* Runs fn over `tasks` tasks with per-task scratch of c->scratch_floats;
 * the first task error, or IFD_ENOMEM. */
static int ifd__dense_run(ifd__dense_t *c, ifd_task_cb fn, int tasks, ifd_threadpool_t *tp)
{
    tasks = tasks > 64 ? 64 : tasks;
    c->scratch = ifd__dense_alloc(c->scratch_floats * tasks);
    if (!c->scratch)
        return IFD_ENOMEM;
    memset(c->rc, 0, sizeof c->rc);
    ifd_threadpool_run(tasks > 1 ? tp : NULL, fn, c, tasks);
    int rc = 0;
    for (int t = 0; t < tasks && rc == 0; t++)
        rc = c->rc[t];
    free(c->scratch);
    c->scratch = NULL;
    return rc;
}

int ifd_cpu_dense_kv_pack(float *kv, const float *qkv, int n, int n_heads, int head_dim,
                          ifd_threadpool_t *tp)
{
    if (n <= 0 || n_heads <= 0 || head_dim <= 0 || !kv || ((uintptr_t)kv & 63))
        return IFD_EINVAL;
    ifd__dense_t c;
    ifd__dense_init(&c, kv, n, n_heads, head_dim);
    c.qkv = qkv;
    c.scratch_floats = ifd__round16(2 * (int64_t)n * head_dim);
    const int tasks = ifd_threadpool_size(tp);
    return ifd__dense_run(&c, ifd__dense_pack_task, tasks < n_heads ? tasks : n_heads, tp);
}

int ifd_cpu_dense_attention_kv(float *out, const float *qkv, const float *kv, int n, int q0, int q1,
                               int n_heads, int head_dim, float scale, ifd_threadpool_t *tp)
{
    if (n <= 0 || n_heads <= 0 || head_dim <= 0 || q0 < 0 || q1 < q0 || q1 > n || !kv)
        return IFD_EINVAL;
    if (q0 == q1)
        return 0;
    ifd__dense_t c;
    ifd__dense_init(&c, (float *)kv, n, n_heads, head_dim);
    c.out = out;
    c.qkv = qkv;
    c.q0 = q0;
    c.q1 = q1;
    c.scale = scale;
    c.blocks = (q1 - q0 + IFD__ATT_ROWS - 1) / IFD__ATT_ROWS;
    const int blk = q1 - q0 < IFD__ATT_ROWS ? q1 - q0 : IFD__ATT_ROWS;
    /* the block task's scratch: qh [IFD__ATT_ROWS · head_dim], then s [blk · n] */
    c.scratch_floats = ifd__round16((int64_t)IFD__ATT_ROWS * head_dim + (int64_t)blk * n);
    const int tasks = ifd_threadpool_size(tp), items = n_heads * c.blocks;
    return ifd__dense_run(&c, ifd__dense_block_task, tasks < items ? tasks : items, tp);
}

int ifd_cpu_dense_attention(float *out, const float *qkv, int n, int q0, int q1, int n_heads,
                            int head_dim, float scale, ifd_threadpool_t *tp)
{
    if (n <= 0 || n_heads <= 0 || head_dim <= 0 || q0 < 0 || q1 < q0 || q1 > n)
        return IFD_EINVAL;
    if (q0 == q1)
        return 0;
    float *kv = ifd__dense_alloc(ifd_cpu_dense_kv_floats(n, n_heads, head_dim));
    if (!kv)
        return IFD_ENOMEM;
    int rc = ifd_cpu_dense_kv_pack(kv, qkv, n, n_heads, head_dim, tp);
    if (rc == 0)
        rc = ifd_cpu_dense_attention_kv(out, qkv, kv, n, q0, q1, n_heads, head_dim, scale, tp);
    free(kv);
    return rc;
}
