/*
 * backend_cpu.c — the CPU backend: host memory, kernels/cpu and a thread
 * pool. Allocations are 64-byte aligned for the SIMD kernels.
 */
#include "backend.h"

#include "error.h"
#include "log.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

typedef struct {
    ifd_backend_t base;
    ifd_threadpool_t *tp;
} ifd__cpu_backend_t;

static ifd_threadpool_t *ifd__tp(ifd_backend_t *be)
{
    return ((ifd__cpu_backend_t *)be)->tp;
}

static void ifd__cpu_destroy(ifd_backend_t *be)
{
    ifd__cpu_backend_t *c = (ifd__cpu_backend_t *)be;
    ifd_threadpool_destroy(c->tp);
    free(c);
}

/* Buffers of 2 MiB or more (the weights) are aligned to 2 MiB and offered
 * to transparent huge pages: streaming hundreds of MB of weights through 4 KiB
 * pages costs a TLB miss every 64 cache lines, which the batched matmul feels
 * (a 30-layer sweep of SmolLM2's matrices at 31 rows, cold: ~12% faster;
 * bench_engine at concurrency 16: a few %, within its noise). The price: a
 * buffer's last, partly used 2 MiB page is resident whole (at most ≈ 60 MB
 * over SmolLM2's 650 MB of f32 weights). Advice only: where THP is off, the
 * pages stay small and nothing fails. */
static int ifd__cpu_alloc(ifd_backend_t *be, size_t bytes, void **out)
{
    (void)be;
    enum { HUGE = 2 << 20 };
    const size_t align = bytes >= HUGE ? HUGE : 64;
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    void *p = aligned_alloc(align, rounded ? rounded : 64);
    if (!p) {
        IFD_ERROR("cpu backend: aligned_alloc(%zu) failed", bytes);
        return IFD_ENOMEM;
    }
#ifdef MADV_HUGEPAGE
    if (align == HUGE)
        (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    *out = p;
    return 0;
}

static void ifd__cpu_free(ifd_backend_t *be, void *p)
{
    (void)be;
    free(p);
}

static int ifd__cpu_copy(ifd_backend_t *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static int ifd__cpu_sync(ifd_backend_t *be)
{
    (void)be;
    return 0;
}

static int ifd__cpu_embed(ifd_backend_t *be, float *out, const ifd_weight_t *emb,
                          const int32_t *tokens, int n, float scale)
{
    (void)be;
    if (emb->dtype != IFD_DTYPE_F32)
        return IFD_ENOTSUP;
    const float *e = emb->data;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= emb->rows)
            return IFD_ERANGE;
        const float *row = e + (int64_t)tokens[i] * emb->cols;
        float *o = out + (int64_t)i * emb->cols;
        for (int64_t j = 0; j < emb->cols; j++)
            o[j] = row[j] * scale;
    }
    return 0;
}

static int ifd__cpu_matmul(ifd_backend_t *be, float *y, const float *x, const ifd_weight_t *w,
                           int m)
{
    if (w->dtype != IFD_DTYPE_F32)
        return IFD_ENOTSUP;
    if (w->packed)
        return ifd_cpu_matmul_packed(y, x, w->data, m, (int)w->rows, (int)w->cols, ifd__tp(be));
    return ifd_cpu_matmul_f32(y, x, w->data, m, (int)w->rows, (int)w->cols, ifd__tp(be));
}

/* Pre-packs a weight for ifd_cpu_matmul_packed: one summation order per
 * output for any batch size (batched results equal unbatched ones), and no
 * per-call packing for batch-1 decode. */
static int ifd__cpu_prepare_matmul(ifd_backend_t *be, ifd_weight_t *w)
{
    if (w->dtype != IFD_DTYPE_F32 || w->packed)
        return w->packed ? 0 : IFD_ENOTSUP;
    if (w->rows > INT32_MAX || w->cols > INT32_MAX)
        return IFD_ERANGE;
    int64_t nf = ifd_cpu_matmul_packed_floats((int)w->rows, (int)w->cols);
    if (nf < 0)
        return (int)nf;
    void *wp;
    int rc = ifd__cpu_alloc(be, (size_t)nf * sizeof(float), &wp);
    if (rc)
        return rc;
    ifd_cpu_matmul_pack(wp, w->data, (int)w->rows, (int)w->cols);
    free(w->data);
    w->data = wp;
    w->packed = true;
    return 0;
}

static int ifd__cpu_rmsnorm(ifd_backend_t *be, float *y, const float *x, const ifd_weight_t *w,
                            int rows, float eps)
{
    (void)be;
    return ifd_cpu_rmsnorm(y, x, w->data, rows, (int)w->cols, eps);
}

static int ifd__cpu_add(ifd_backend_t *be, float *y, const float *x, int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
    return 0;
}

static int ifd__cpu_rope(ifd_backend_t *be, float *x, const int32_t *pos, int n_tok, int n_heads,
                         int head_dim, int n_rot, float base, float freq_scale,
                         const float *freq_factors, ifd_rope_mode_t mode)
{
    (void)be;
    return ifd_cpu_rope(x, pos, n_tok, n_heads, head_dim, n_rot, base, freq_scale, freq_factors,
                        mode);
}

static int ifd__cpu_kv_write(ifd_backend_t *be, const ifd_kv_layer_t *kv, const float *k,
                             const float *v, const int64_t *slot, int n_tok)
{
    (void)be;
    return ifd_cpu_kv_write(kv, k, v, slot, n_tok);
}

static int ifd__cpu_attention(ifd_backend_t *be, float *out, const float *q,
                              const ifd_kv_layer_t *kv, const int32_t *seq, const int32_t *pos,
                              const int32_t *block_tables, int max_blocks, int n_tok, int n_heads,
                              float scale, int window)
{
    return ifd_cpu_paged_attention(out, q, kv, seq, pos, block_tables, max_blocks, n_tok, n_heads,
                                   scale, window, ifd__tp(be));
}

static int ifd__cpu_glu(ifd_backend_t *be, float *out, const float *gate, const float *up,
                        int64_t n, ifd_glu_t kind)
{
    (void)be;
    switch (kind) {
    case IFD_GLU_SWIGLU:
        return ifd_cpu_swiglu(out, gate, up, n);
    case IFD_GLU_GEGLU_TANH:
        return ifd_cpu_geglu_tanh(out, gate, up, n);
    }
    return IFD_ENOTSUP;
}

static int ifd__cpu_gather_rows(ifd_backend_t *be, float *out, const float *x, const int32_t *rows,
                                int n_rows, int dim)
{
    (void)be;
    for (int i = 0; i < n_rows; i++)
        memcpy(out + (int64_t)i * dim, x + (int64_t)rows[i] * dim, (size_t)dim * sizeof(float));
    return 0;
}

static const ifd_backend_ops_t ifd__cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .destroy = ifd__cpu_destroy,
    .alloc = ifd__cpu_alloc,
    .free = ifd__cpu_free,
    .upload = ifd__cpu_copy,
    .download = ifd__cpu_copy,
    .sync = ifd__cpu_sync,
    .prepare_matmul = ifd__cpu_prepare_matmul,
    .embed = ifd__cpu_embed,
    .matmul = ifd__cpu_matmul,
    .rmsnorm = ifd__cpu_rmsnorm,
    .add = ifd__cpu_add,
    .rope = ifd__cpu_rope,
    .kv_write = ifd__cpu_kv_write,
    .attention = ifd__cpu_attention,
    .glu = ifd__cpu_glu,
    .gather_rows = ifd__cpu_gather_rows,
};

int ifd_backend_cpu_create(ifd_backend_t **out, int n_threads)
{
    ifd__cpu_backend_t *c = calloc(1, sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    c->base.ops = &ifd__cpu_ops;
    int rc = ifd_threadpool_create(&c->tp, n_threads);
    if (rc) {
        free(c);
        return rc;
    }
    *out = &c->base;
    return 0;
}
