/*
 * bench/gpu_kernels.c — micro-benchmarks of the CUDA kernels (kernels/cuda).
 *
 *   bench_gpu_kernels [--runs N] [--reps R] [--quick]
 *
 * Measures, on device 0, with CUDA events after warm-up, the median of N
 * timed runs (default 15) of each kernel, one run being R launches back to
 * back between two events (default 20) divided by R: one launch between two
 * events would count the launch gap and the events' own resolution (a few
 * microseconds) into kernels that run for tens of microseconds:
 *  - the device-to-device copy bandwidth (cudaMemcpyAsync of 1 GiB; bytes
 *    read + written per second), the yardstick for the memory-bound kernels;
 *  - paged decode attention at batch 64 x context 2048 and batch 8 x 16384
 *    (32 query heads, 8 KV heads, head dim 128, bf16 KV, shuffled block
 *    tables): bytes moved (K + V + q + out) per second and that as a
 *    fraction of the copy bandwidth;
 *  - paged prefill attention, 8 sequences x 2048 new tokens, causal, same
 *    heads: TFLOP/s counting 4 * head_dim FLOPs per visible (query, key,
 *    head) triple (the usual causal FlashAttention accounting);
 *  - RMSNorm + residual, RoPE + KV write, SwiGLU, embedding gather, Q4_K
 *    dequantization: bytes moved per second and fraction of copy bandwidth;
 *  - sampling: 64 rows of a 128256-token vocabulary, top-k 50 / top-p 0.9.
 * Prints one JSON object (one line; "ms" < 0 would be the error code a
 * launcher returned). Without a usable device it prints
 * {"bench":"gpu_kernels","skipped":true,"reason":...} and exits 0. Numbers
 * are a benchmark's, never a test's: nothing here fails on a slow result.
 * Kernel inputs are filler values (speed does not depend on them).
 * --quick shrinks every shape (a smoke test of this program, e.g. on the CPU
 * emulator; its numbers mean nothing).
 */
#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "modelfile/ggml_types.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_runs = 15;
static int g_reps = 20;
static int g_quick = 0;

/* A size, or a small stand-in with --quick. */
static int sz(int full, int quick)
{
    return g_quick ? quick : full;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench_gpu_kernels: %s: %s\n", #call, cudaGetErrorString(e_));         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void *dalloc(size_t n, int fill)
{
    void *p = NULL;
    CK(cudaMalloc(&p, n));
    CK(cudaMemset(p, fill, n));
    return p;
}

static void *dupload(const void *h, size_t n)
{
    void *p = dalloc(n, 0);
    CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
    return p;
}

static uint64_t g_rng = 0x1234567887654321ull;

static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef int (*run_fn)(void *ctx);

/* Median milliseconds per call over g_runs timed runs of g_reps calls back
 * to back, after 3 warm-up calls; negative (the error code) when the kernel
 * refuses to launch. Every launch's return code and the stream's last error
 * are checked: a kernel that fails in a timed run fails the benchmark. */
static double time_ms(run_fn fn, void *ctx)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) {
        int rc = fn(ctx);
        if (rc)
            return rc;
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    double *t = malloc(sizeof(double) * (size_t)g_runs);
    for (int i = 0; i < g_runs; i++) {
        CK(cudaEventRecord(a, 0));
        for (int r = 0; r < g_reps; r++) {
            int rc = fn(ctx);
            if (rc) {
                fprintf(stderr, "bench_gpu_kernels: a timed launch failed (%d)\n", rc);
                exit(1);
            }
        }
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        CK(cudaGetLastError());
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t[i] = ms / g_reps;
    }
    qsort(t, (size_t)g_runs, sizeof *t, cmp_double);
    double med = t[g_runs / 2];
    free(t);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return med;
}

/* ---- copy --------------------------------------------------------------------------- */

typedef struct {
    void *src, *dst;
    size_t n;
} copy_t;

static int run_copy(void *c_)
{
    copy_t *c = c_;
    return cudaMemcpyAsync(c->dst, c->src, c->n, cudaMemcpyDeviceToDevice, 0) == cudaSuccess ? 0
                                                                                             : -1;
}

/* ---- attention ---------------------------------------------------------------------- */

enum { HEADS = 32, KV_HEADS = 8, HD = 128, BS = 16 };

typedef struct {
    int n_seqs, ctx, max_blocks, n_tok;
    ifd_kv_layer_t kv;
    int32_t *bt, *seq, *pos, *cu, *ctxs;
    float *q, *out;
    void *ws;
    size_t ws_bytes;
} attn_t;

static void attn_setup(attn_t *A, int n_seqs, int ctx, int prefill)
{
    memset(A, 0, sizeof *A);
    A->n_seqs = n_seqs;
    A->ctx = ctx;
    A->max_blocks = (ctx + BS - 1) / BS;
    const int nblk = n_seqs * A->max_blocks;
    const size_t blk_bytes = (size_t)KV_HEADS * BS * HD * 2;
    A->kv.k = dalloc((size_t)nblk * blk_bytes, 0x3c); /* bf16 0x3c3c = 0.0115 */
    A->kv.v = dalloc((size_t)nblk * blk_bytes, 0x3c);
    A->kv.dtype = IFD_DTYPE_BF16;
    A->kv.block_size = BS;
    A->kv.n_kv_heads = KV_HEADS;
    A->kv.head_dim = HD;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nblk);
    for (int i = 0; i < nblk; i++)
        bt[i] = i;
    for (int i = nblk - 1; i > 0; i--) { /* fragmented pool */
        int j = (int)(rnd() % (uint64_t)(i + 1));
        int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    A->bt = dupload(bt, sizeof(int32_t) * (size_t)nblk);
    free(bt);
    A->n_tok = prefill ? n_seqs * ctx : n_seqs;
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)A->n_tok);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)A->n_tok);
    for (int t = 0; t < A->n_tok; t++) {
        seq[t] = prefill ? t / ctx : t;
        pos[t] = prefill ? t % ctx : ctx - 1;
    }
    A->seq = dupload(seq, sizeof(int32_t) * (size_t)A->n_tok);
    A->pos = dupload(pos, sizeof(int32_t) * (size_t)A->n_tok);
    free(seq);
    free(pos);
    int32_t *cu = malloc(sizeof(int32_t) * (size_t)(n_seqs + 1));
    int32_t *cl = malloc(sizeof(int32_t) * (size_t)n_seqs);
    for (int s = 0; s <= n_seqs; s++)
        cu[s] = s * ctx;
    for (int s = 0; s < n_seqs; s++)
        cl[s] = ctx;
    A->cu = dupload(cu, sizeof(int32_t) * (size_t)(n_seqs + 1));
    A->ctxs = dupload(cl, sizeof(int32_t) * (size_t)n_seqs);
    free(cu);
    free(cl);
    const size_t qn = (size_t)A->n_tok * HEADS * HD;
    A->q = dalloc(qn * 4, 0x3c); /* f32 0x3c3c3c3c = 0.0115 */
    A->out = dalloc(qn * 4, 0);
    if (!prefill) {
        if (ifd_cuda_paged_decode_workspace(&A->ws_bytes, A->n_tok, HEADS, KV_HEADS, HD, ctx))
            exit(1);
        A->ws = A->ws_bytes ? dalloc(A->ws_bytes, 0) : NULL;
    }
}

static void attn_free(attn_t *A)
{
    cudaFree(A->kv.k);
    cudaFree(A->kv.v);
    cudaFree(A->bt);
    cudaFree(A->seq);
    cudaFree(A->pos);
    cudaFree(A->cu);
    cudaFree(A->ctxs);
    cudaFree(A->q);
    cudaFree(A->out);
    cudaFree(A->ws);
}

static int run_decode(void *a_)
{
    attn_t *A = a_;
    return ifd_cuda_paged_decode_attention(A->out, A->q, &A->kv, A->seq, A->pos, A->bt,
                                           A->max_blocks, A->n_tok, HEADS, 0.088388f, 0, A->ctx,
                                           A->ws, A->ws_bytes, NULL);
}

static int run_prefill(void *a_)
{
    attn_t *A = a_;
    return ifd_cuda_paged_prefill_attention(A->out, A->q, &A->kv, A->cu, A->ctxs, NULL, A->bt,
                                            A->max_blocks, A->n_seqs, A->n_tok, A->ctx, HEADS,
                                            0.088388f, 0, NULL);
}

/* ---- small kernels -------------------------------------------------------------------- */

typedef struct {
    int rows, dim;
    void *a, *b, *c, *d, *e, *f;
    ifd_kv_layer_t kv;
    ifd_cuda_rope_t rope;
} small_t;

static int run_rmsnorm(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_rmsnorm(S->a, S->b, S->c, S->d, S->rows, S->dim, 1e-5f, 0, IFD_DTYPE_BF16,
                            NULL);
}

static int run_rope(void *s_)
{
    small_t *S = s_;
    const int64_t kvld = (int64_t)KV_HEADS * HD;
    return ifd_cuda_rope_kv_write(S->a, &S->kv, S->b, S->c, S->d, S->e, S->rows, HEADS,
                                  (int64_t)HEADS * HD, kvld, kvld, &S->rope, NULL);
}

static int run_glu(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_glu(S->a, S->b, S->rows, S->dim, IFD_GLU_SWIGLU, IFD_DTYPE_BF16, NULL);
}

static int run_embed(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_embed(S->a, S->b, S->c, S->rows, S->dim, 32000, IFD_DTYPE_BF16, 1.0f, NULL);
}

static int run_dequant(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_dequantize_bf16(S->a, S->b, IFD_GGML_Q4_K, (int64_t)S->rows * S->dim, NULL);
}

static int run_sample(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_sample(S->a, S->b, S->c, S->rows, S->dim, NULL);
}

/* in place, so every repetition after the first masks an already masked row:
 * the same reads and branch pattern, the writes of the masked ids again */
static int run_mask(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_apply_mask(S->b, S->d, S->e, S->rows, S->rows, S->dim, NULL);
}

static int run_logprobs(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_logprobs(S->f, S->c, NULL, S->rows, S->dim, NULL);
}

static int run_softcap(void *s_)
{
    small_t *S = s_;
    return ifd_cuda_softcap(S->b, (int64_t)S->rows * S->dim, 30.0f, NULL);
}

static void free_small(small_t *S)
{
    cudaFree(S->a);
    cudaFree(S->b);
    cudaFree(S->c);
    cudaFree(S->d);
    cudaFree(S->e);
    cudaFree(S->f);
    memset(S, 0, sizeof *S);
}

/* Prints one memory-bound result. */
static void print_bw(const char *name, const char *shape, double ms, double bytes, double copy,
                     int *first)
{
    printf("%s{\"kernel\":\"%s\",\"shape\":\"%s\",\"ms\":%.4f,\"gb_s\":%.1f,\"frac_copy\":%.3f}",
           *first ? "" : ",", name, shape, ms, ms > 0 ? bytes / ms / 1e6 : 0.0,
           ms > 0 ? bytes / ms / 1e6 / copy : 0.0);
    *first = 0;
}

/* The command line into the globals. 0, or 2 after the usage line. */
static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            g_runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            g_quick = 1, g_runs = 3, g_reps = 2;
        else {
            fprintf(stderr, "usage: bench_gpu_kernels [--runs N] [--reps R] [--quick]\n");
            return 2;
        }
    }
    if (g_runs < 1)
        g_runs = 1;
    if (g_reps < 1)
        g_reps = 1;
    return 0;
}

/* The device-to-device copy bandwidth (bytes read + written per second,
 * GB/s): the yardstick of the memory-bound kernels. */
static double bench_copy(void)
{
    copy_t cp = {.n = (size_t)sz(1 << 30, 1 << 20)};
    cp.src = dalloc(cp.n, 1);
    cp.dst = dalloc(cp.n, 0);
    const double copy_ms = time_ms(run_copy, &cp);
    const double copy_gbs = 2.0 * (double)cp.n / copy_ms / 1e6;
    cudaFree(cp.src);
    cudaFree(cp.dst);
    return copy_gbs;
}

/* Paged decode attention at its two shapes. */
static void bench_decode(double copy_gbs)
{
    printf(",\"decode\":[");
    const int dcfg[2][2] = {{sz(64, 3), sz(2048, 100)}, {sz(8, 1), sz(16384, 700)}};
    for (int i = 0; i < 2; i++) {
        attn_t A;
        attn_setup(&A, dcfg[i][0], dcfg[i][1], 0);
        double ms = time_ms(run_decode, &A);
        double bytes = 2.0 * dcfg[i][0] * (double)dcfg[i][1] * KV_HEADS * HD * 2 +
                       2.0 * dcfg[i][0] * HEADS * HD * 4;
        printf("%s{\"batch\":%d,\"ctx\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,"
               "\"kv\":\"bf16\",\"ms\":%.4f,\"gb_s\":%.1f,\"frac_copy\":%.3f}",
               i ? "," : "", dcfg[i][0], dcfg[i][1], HEADS, KV_HEADS, HD, ms,
               ms > 0 ? bytes / ms / 1e6 : 0.0, ms > 0 ? bytes / ms / 1e6 / copy_gbs : 0.0);
        attn_free(&A);
    }
    printf("]");
}

/* Paged prefill attention, causal. */
static void bench_prefill(void)
{
    attn_t A;
    const int pb = sz(8, 2), pl = sz(2048, 70);
    attn_setup(&A, pb, pl, 1);
    double ms = time_ms(run_prefill, &A);
    double flops = 4.0 * HD * HEADS * pb * ((double)pl * (pl + 1) / 2.0);
    printf(",\"prefill\":{\"batch\":%d,\"len\":%d,\"causal\":true,\"heads\":%d,"
           "\"kv_heads\":%d,\"head_dim\":%d,\"kv\":\"bf16\",\"ms\":%.4f,\"tflop_s\":%.1f}",
           pb, pl, HEADS, KV_HEADS, HD, ms, ms > 0 ? flops / ms / 1e9 : 0.0);
    attn_free(&A);
}

/* The small memory-bound kernels: bytes moved per second and that as a
 * fraction of the copy bandwidth. */
static void bench_small(double copy_gbs)
{
    printf(",\"small\":[");
    int first = 1;
    small_t S;
    char shape[128];
    {
        const int rows = sz(8192, 5), dim = sz(4096, 256);
        const size_t n = (size_t)rows * dim;
        memset(&S, 0, sizeof S);
        S.rows = rows, S.dim = dim;
        S.a = dalloc(n * 2, 0), S.b = dalloc(n * 4, 0x3c), S.c = dalloc(n * 4, 0x3c);
        S.d = dalloc((size_t)dim * 4, 0x3c);
        double ms = time_ms(run_rmsnorm, &S);
        snprintf(shape, sizeof shape, "%dx%d f32->bf16", rows, dim);
        print_bw("rmsnorm_residual", shape, ms, (double)n * (4 + 4 + 4 + 2), copy_gbs, &first);
        free_small(&S);
    }
    {
        const int n_tok = sz(8192, 5);
        const int64_t qn = (int64_t)n_tok * HEADS * HD, kn = (int64_t)n_tok * KV_HEADS * HD;
        memset(&S, 0, sizeof S);
        S.rows = n_tok;
        S.a = dalloc((size_t)qn * 4, 0x3c), S.b = dalloc((size_t)kn * 4, 0x3c);
        S.c = dalloc((size_t)kn * 4, 0x3c);
        int32_t *pos = malloc(sizeof(int32_t) * n_tok);
        int64_t *slot = malloc(sizeof(int64_t) * n_tok);
        for (int t = 0; t < n_tok; t++)
            pos[t] = t % 2048, slot[t] = t;
        S.d = dupload(pos, sizeof(int32_t) * n_tok);
        S.e = dupload(slot, sizeof(int64_t) * n_tok);
        free(pos);
        free(slot);
        const size_t pool = (size_t)(n_tok + BS - 1) / BS * BS * KV_HEADS * HD; /* slots t */
        S.kv.k = dalloc(pool * 2, 0);
        S.kv.v = S.f = dalloc(pool * 2, 0);
        S.kv.dtype = IFD_DTYPE_BF16, S.kv.block_size = BS, S.kv.n_kv_heads = KV_HEADS;
        S.kv.head_dim = HD;
        S.rope.n_rot = HD, S.rope.base = 500000.0f, S.rope.freq_scale = 1.0f;
        S.rope.mode = IFD_ROPE_NEOX;
        double ms = time_ms(run_rope, &S);
        snprintf(shape, sizeof shape, "%d tok, %d/%d heads x %d, bf16 pool", n_tok, HEADS, KV_HEADS,
                 HD);
        print_bw("rope_kv_write", shape, ms, (double)qn * 8 + (double)kn * (4 + 4 + 2 + 2),
                 copy_gbs, &first);
        cudaFree(S.kv.k);
        free_small(&S);
    }
    {
        const int rows = sz(4096, 3), ff = sz(14336, 512);
        const size_t n = (size_t)rows * ff;
        memset(&S, 0, sizeof S);
        S.rows = rows, S.dim = ff;
        S.a = dalloc(n * 2, 0), S.b = dalloc(n * 8, 0x3c);
        double ms = time_ms(run_glu, &S);
        snprintf(shape, sizeof shape, "%dx%d f32->bf16", rows, ff);
        print_bw("swiglu", shape, ms, (double)n * (8 + 2), copy_gbs, &first);
        free_small(&S);
    }
    {
        const int n_tok = sz(8192, 5), dim = sz(4096, 256);
        memset(&S, 0, sizeof S);
        S.rows = n_tok, S.dim = dim;
        S.a = dalloc((size_t)n_tok * dim * 4, 0);
        S.b = dalloc((size_t)32000 * dim * 2, 0x3c);
        int32_t *ids = malloc(sizeof(int32_t) * n_tok);
        for (int t = 0; t < n_tok; t++)
            ids[t] = (int32_t)(rnd() % 32000);
        S.c = dupload(ids, sizeof(int32_t) * n_tok);
        free(ids);
        double ms = time_ms(run_embed, &S);
        snprintf(shape, sizeof shape, "%d tok x %d, bf16 table", n_tok, dim);
        print_bw("embed", shape, ms, (double)n_tok * dim * (2 + 4), copy_gbs, &first);
        free_small(&S);
    }
    {
        const int rows = sz(4096, 4), cols = sz(14336, 512);
        const size_t n = (size_t)rows * cols;
        memset(&S, 0, sizeof S);
        S.rows = rows, S.dim = cols;
        S.a = dalloc(n * 2, 0);
        S.b = dalloc(n / 256 * 144, 0x11);
        double ms = time_ms(run_dequant, &S);
        snprintf(shape, sizeof shape, "%dx%d", rows, cols);
        print_bw("dequant_q4_k_bf16", shape, ms, (double)n / 256 * 144 + (double)n * 2, copy_gbs,
                 &first);
        free_small(&S);
    }
    printf("]");
}

/* Sampling, then on the same logits the grammar mask, the soft-cap and
 * the logprobs. */
static void bench_sampling(void)
{
    small_t S;
    const int rows = sz(64, 3), vocab = sz(128256, 3000);
    memset(&S, 0, sizeof S);
    S.rows = rows, S.dim = vocab;
    S.a = dalloc(sizeof(int32_t) * rows, 0);
    float *l = malloc(sizeof(float) * (size_t)rows * vocab);
    for (size_t i = 0; i < (size_t)rows * vocab; i++)
        l[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 20.0 - 10.0);
    S.b = dupload(l, sizeof(float) * (size_t)rows * vocab);
    free(l);
    ifd_cuda_sample_params_t *p = calloc((size_t)rows, sizeof *p);
    for (int r = 0; r < rows; r++) {
        p[r].temperature = 0.8f, p[r].top_k = 50, p[r].top_p = 0.9f, p[r].min_p = 0.0f;
        p[r].seed = rnd(), p[r].position = (uint64_t)r;
    }
    S.c = dupload(p, sizeof *p * rows);
    free(p);
    double ms = time_ms(run_sample, &S);
    printf(",\"sample\":{\"rows\":%d,\"vocab\":%d,\"top_k\":50,\"top_p\":0.9,\"ms\":%.4f}",
           rows, vocab, ms);
    /* grammar masks: one per row, a random half of the ids allowed */
    const int W = (vocab + 31) / 32;
    uint32_t *m = malloc(sizeof(uint32_t) * (size_t)rows * W);
    int32_t *mr = malloc(sizeof(int32_t) * (size_t)rows);
    for (size_t i = 0; i < (size_t)rows * W; i++)
        m[i] = (uint32_t)rnd();
    for (int r = 0; r < rows; r++)
        mr[r] = r;
    S.d = dupload(m, sizeof(uint32_t) * (size_t)rows * W);
    S.e = dupload(mr, sizeof(int32_t) * (size_t)rows);
    free(m);
    free(mr);
    ms = time_ms(run_mask, &S);
    printf(",\"mask\":{\"rows\":%d,\"vocab\":%d,\"ms\":%.4f}", rows, vocab, ms);
    ms = time_ms(run_softcap, &S);
    printf(",\"softcap\":{\"rows\":%d,\"vocab\":%d,\"ms\":%.4f}", rows, vocab, ms);
    /* logprobs with 20 alternatives of every row (on the masked rows) */
    cudaFree(S.c);
    ifd_cuda_logprob_req_t *q = calloc((size_t)rows, sizeof *q);
    for (int r = 0; r < rows; r++)
        q[r] = (ifd_cuda_logprob_req_t){
            (const float *)S.b + (size_t)r * vocab, r, r, 20, 0, NULL, NULL};
    S.c = dupload(q, sizeof *q * rows);
    free(q);
    S.f = dalloc(sizeof(ifd_cuda_logprob_t) * (size_t)rows, 0);
    ms = time_ms(run_logprobs, &S);
    printf(",\"logprobs\":{\"rows\":%d,\"vocab\":%d,\"top\":20,\"ms\":%.4f}", rows,
           vocab, ms);
    free_small(&S);
}

int main(int argc, char **argv)
{
    int status = parse_args(argc, argv);
    if (status)
        return status;
    char err[256] = "", desc[256] = "";
    int ndev = 0;
    if (ifd_cuda_device_count(&ndev, err, sizeof err) != 0) {
        printf("{\"bench\":\"gpu_kernels\",\"skipped\":true,\"reason\":\"no CUDA device: ");
        for (const char *p = err; *p; p++)
            if (*p != '"' && *p != '\\')
                putchar(*p);
        printf("\"}\n");
        return 0;
    }
    ifd_cuda_device_describe(0, desc, sizeof desc);
    const double copy_gbs = bench_copy();
    printf("{\"bench\":\"gpu_kernels\",\"device\":\"%s\",\"runs\":%d,\"reps\":%d,"
           "\"copy_gb_s\":%.1f",
           desc, g_runs, g_reps, copy_gbs);
    bench_decode(copy_gbs);
    bench_prefill();
    bench_small(copy_gbs);
    bench_sampling();
    printf("}\n");
    return 0;
}
