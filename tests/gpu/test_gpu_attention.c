/*
 * test_gpu_attention.c — the paged decode and prefill attention kernels
 * against ifd_cpu_paged_attention on fresh random data.
 *
 * Every case builds a KV pool whose blocks are handed out in a random
 * order (non-contiguous block tables), fills the slots each sequence owns
 * with random K/V, and NaN-poisons everything else: the unused tail of a
 * sequence's last block, spare blocks, and the outputs and workspace before
 * the call. Block-table entries past a sequence's blocks hold a huge index,
 * so reading one would fault. Queries are rounded to the KV dtype first
 * (f16/bf16; over q8_0 plain f32, which both kernels quantize alike, make_q),
 * so both sides multiply exactly the same numbers; what remains is the GPU
 * rounding P (and V) to 16 bits before P.V and summation order.
 *
 * Quantized K/V (q8_0, fp8) are written with ifd_cpu_kv_write (the bytes the
 * RoPE+KV write makes, test_gpu_fused) and compared with the CPU kernel on
 * the same pool (q8_0) or on its dequantized f32 copy (fp8, which the CPU
 * kernel does not read): both sides use the values ifd_cpu_kv_dequant_row
 * gives; the GPU also rounds V (and fp8 K) to f16, its MMA type, as it does
 * Q. Over q8_0 K both quantize the query to int8 per 32 values and take q.k
 * as integer dot products per block times the two scales.
 *
 * Tolerances (relative L2 over the whole output): bf16 KV 1e-2, f16 KV 2e-3,
 * fp8 3e-3, q8_0 1e-3 (measured 2.0-2.5e-4 on the emulator, seeds 1-4; a
 * GPU kernel that rounds the query to f16 instead of quantizing it, as
 * before 2026-12-07, gives 2.0e-3 to 9.3e-3 here and fails).
 * Shapes: head dims 64/128/256, group sizes 1, 4, 6 and 20 (two head
 * groups), contexts from 1 to 16384 with odd lengths and block boundaries,
 * 1 and 200 sequences, sliding windows, padding tokens. Under the emulator
 * the shapes are cut down to what runs in seconds.
 */
#include "gpu_test.h"

#include "cuda/cuda_kernels.h"
#include "error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#define BS        16
#define BT_POISON 0x3fffffff

typedef struct {
    int n_seqs, max_blocks, n_phys, n_kv, hd;
    ifd_dtype_t dt;
    int64_t rb;           /* bytes per row: ifd_kv_row_bytes(dt, hd) */
    int32_t *ctx;         /* [n_seqs] positions with K/V */
    int32_t *bt;          /* [n_seqs * max_blocks] */
    unsigned char *k, *v; /* host pool [n_phys][n_kv][BS] rows */
    void *dk, *dv;
    int32_t *dbt;
} pool_t;

/* The 16-bit type the kernels multiply in: bf16 for bf16 K/V, else f16. */
static uint16_t to16(ifd_dtype_t t, float x)
{
    return t == IFD_DTYPE_BF16 ? ifd_f32_to_bf16(x) : ifd_f32_to_f16(x);
}

static float from16(ifd_dtype_t t, uint16_t h)
{
    return t == IFD_DTYPE_BF16 ? ifd_bf16_to_f32(h) : ifd_f16_to_f32(h);
}

/* A pool holding ctx[s] positions for each sequence, plus spare blocks. */
static void pool_make(pool_t *P, const int32_t *ctx, int n_seqs, int n_kv, int hd, ifd_dtype_t dt,
                      float sigma)
{
    memset(P, 0, sizeof *P);
    P->n_seqs = n_seqs;
    P->n_kv = n_kv;
    P->hd = hd;
    P->dt = dt;
    P->rb = ifd_kv_row_bytes(dt, hd);
    P->ctx = gt_xmalloc((size_t)n_seqs * 4);
    memcpy(P->ctx, ctx, (size_t)n_seqs * 4);
    int used = 0, maxb = 1;
    for (int s = 0; s < n_seqs; s++) {
        int nb = (ctx[s] + BS - 1) / BS;
        used += nb;
        maxb = nb > maxb ? nb : maxb;
    }
    P->max_blocks = maxb + 1;
    P->n_phys = used + 3;
    int32_t *perm = gt_xmalloc((size_t)P->n_phys * 4);
    gt_permutation(perm, P->n_phys);
    P->bt = gt_xmalloc((size_t)n_seqs * P->max_blocks * 4);
    const int64_t total = (int64_t)P->n_phys * n_kv * BS * P->rb; /* bytes */
    P->k = gt_xmalloc((size_t)total);
    P->v = gt_xmalloc((size_t)total);
    memset(P->k, 0xff, (size_t)total); /* NaN in f16 and bf16, NaN scales */
    memset(P->v, 0xff, (size_t)total);
    ifd_kv_layer_t hkv = {
        .k = P->k, .v = P->v, .dtype = dt, .block_size = BS, .n_kv_heads = n_kv, .head_dim = hd};
    float *kr = gt_xmalloc((size_t)n_kv * hd * 4), *vr = gt_xmalloc((size_t)n_kv * hd * 4);
    int next = 0;
    for (int s = 0; s < n_seqs; s++) {
        int nb = (ctx[s] + BS - 1) / BS;
        for (int b = 0; b < P->max_blocks; b++)
            P->bt[s * P->max_blocks + b] = b < nb ? perm[next++] : BT_POISON;
        for (int p = 0; p < ctx[s]; p++) {
            int64_t slot = (int64_t)P->bt[s * P->max_blocks + p / BS] * BS + p % BS;
            /* Uniform with unit variance: cheap enough for millions of
             * positions (the distribution's shape does not matter). */
            for (int i = 0; i < n_kv * hd; i++) {
                kr[i] = sigma * gt_rand_uniform(-1.7320508f, 1.7320508f);
                vr[i] = gt_rand_uniform(-1.7320508f, 1.7320508f);
            }
            int rc = ifd_cpu_kv_write(&hkv, kr, vr, &slot, 1);
            GT_EXPECT(rc == 0, "ifd_cpu_kv_write returned %d", rc);
        }
    }
    free(perm), free(kr), free(vr);
    P->dk = gt_dupload(P->k, (size_t)total);
    P->dv = gt_dupload(P->v, (size_t)total);
    P->dbt = gt_dupload(P->bt, (size_t)n_seqs * P->max_blocks * 4);
}

static void pool_free(pool_t *P)
{
    free(P->ctx), free(P->bt), free(P->k), free(P->v);
    gt_dfree(P->dk), gt_dfree(P->dv), gt_dfree(P->dbt);
}

static ifd_kv_layer_t pool_layer(const pool_t *P, int device)
{
    ifd_kv_layer_t kv = {
        .k = device ? P->dk : (void *)P->k,
        .v = device ? P->dv : (void *)P->v,
        .dtype = P->dt,
        .block_size = BS,
        .n_kv_heads = P->n_kv,
        .head_dim = P->hd,
    };
    return kv;
}

/* An f32 pool of P's values (ifd_cpu_kv_dequant_row of every row). */
static float *dequant_region(const pool_t *P, const unsigned char *src)
{
    const int64_t rows = (int64_t)P->n_phys * P->n_kv * BS;
    float *f = gt_xmalloc((size_t)(rows * P->hd) * 4);
    for (int64_t r = 0; r < rows; r++)
        ifd_cpu_kv_dequant_row(f + r * P->hd, src + r * P->rb, P->dt, P->hd);
    return f;
}

/* The CPU reference for n_tok tokens (seq, pos, last: NULL =
 * causal) into ref: the CPU kernel on
 * the pool, or for fp8 (which it does not read) on its dequantized copy. */
static void reference(float *ref, const float *q, const pool_t *P, const int32_t *seq,
                      const int32_t *pos, const int32_t *last, int n_tok, int n_heads, float scale,
                      int window)
{
    ifd_kv_layer_t kv = pool_layer(P, 0);
    float *fk = NULL, *fv = NULL;
    if (P->dt == IFD_DTYPE_FP8) {
        fk = dequant_region(P, P->k), fv = dequant_region(P, P->v);
        kv.k = fk, kv.v = fv, kv.dtype = IFD_DTYPE_F32;
    }
    static ifd_threadpool_t *tp;
    if (!tp && ifd_threadpool_create(&tp, 0) != 0)
        tp = NULL;
    int rc = ifd_cpu_paged_attention(ref, q, &kv, seq, pos, last, P->bt, P->max_blocks, n_tok,
                                     n_heads, scale, window, tp);
    GT_EXPECT(rc == 0, "ifd_cpu_paged_attention returned %d", rc);
    free(fk), free(fv);
}

/* Random queries rounded to the KV dtype. Over q8_0 K/V plain f32 values:
 * both kernels quantize the query the same way (int8 per value, one f32
 * scale per 32 values, the CPU's ifd__quant_query), so they multiply the
 * same numbers; a GPU kernel that skipped that quantization (rounding q to
 * f16, as before 2026-12-07) misses the tolerance by 2-4x. */
static float *make_q(int64_t n, ifd_dtype_t dt)
{
    float *q = gt_xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        q[i] = dt == IFD_DTYPE_Q8_0 ? gt_randn() : from16(dt, to16(dt, gt_randn()));
    return q;
}

static double tol_kv(ifd_dtype_t dt)
{
    return dt == IFD_DTYPE_BF16   ? 1e-2
           : dt == IFD_DTYPE_F16  ? 2e-3
           : dt == IFD_DTYPE_Q8_0 ? 1e-3
                                  : 3e-3;
}

static const char *dt_name(ifd_dtype_t dt)
{
    static const char *const names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "fp8"};
    return (unsigned)dt < 6 ? names[dt] : "?";
}

/* ---- decode ---------------------------------------------------------------------- */

/*
 * One decode batch: sequence s has context ctx[s]; one token per sequence at
 * position ctx[s] - 1, in shuffled order, plus `pad` padding tokens.
 */
static void decode_case(const int32_t *ctx, int n_seqs, int n_heads, int n_kv, int hd,
                        ifd_dtype_t dt, int window, int pad, float sigma)
{
    pool_t P;
    pool_make(&P, ctx, n_seqs, n_kv, hd, dt, sigma);
    const int n_tok = n_seqs + pad;
    int32_t *seq = gt_xmalloc((size_t)n_tok * 4), *pos = gt_xmalloc((size_t)n_tok * 4);
    int32_t *perm = gt_xmalloc((size_t)n_tok * 4);
    gt_permutation(perm, n_tok);
    int max_ctx = 1;
    for (int t = 0; t < n_tok; t++) {
        int s = perm[t];
        seq[t] = s < n_seqs ? s : -1;
        pos[t] = s < n_seqs ? ctx[s] - 1 : 0;
        if (s < n_seqs) {
            int c = window > 0 && ctx[s] > window ? window : ctx[s];
            max_ctx = c > max_ctx ? c : max_ctx;
        }
    }
    const int64_t nq = (int64_t)n_tok * n_heads * hd;
    float *q = make_q(nq, dt);
    float *ref = gt_xmalloc((size_t)nq * 4), *got = gt_xmalloc((size_t)nq * 4);
    const float scale = 1.0f / sqrtf((float)hd);
    reference(ref, q, &P, seq, pos, NULL, n_tok, n_heads, scale, window);

    float *dq = gt_dupload(q, (size_t)nq * 4);
    float *dout = gt_dalloc_poison((size_t)nq * 4);
    int32_t *dseq = gt_dupload(seq, (size_t)n_tok * 4), *dpos = gt_dupload(pos, (size_t)n_tok * 4);
    size_t wsb = 0;
    int rc = ifd_cuda_paged_decode_workspace(&wsb, n_tok, n_heads, n_kv, hd, max_ctx);
    GT_EXPECT(rc == 0, "workspace query returned %d", rc);
    void *ws = wsb ? gt_dalloc_poison(wsb) : NULL;
    ifd_kv_layer_t kv = pool_layer(&P, 1);
    rc = ifd_cuda_paged_decode_attention(dout, dq, &kv, dseq, dpos, P.dbt, P.max_blocks, n_tok,
                                         n_heads, scale, window, max_ctx, ws, wsb, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_paged_decode_attention returned %d", rc);
    gt_sync();
    gt_download(got, dout, (size_t)nq * 4);
    double e = gt_rel_l2(got, ref, nq);
    gt_note("decode seqs=%d heads=%d/%d hd=%d %s window=%d: rel L2 %.2e", n_seqs, n_heads, n_kv, hd,
            dt_name(dt), window, e);
    GT_EXPECT(e <= tol_kv(dt),
              "decode seqs=%d heads=%d/%d hd=%d %s window=%d max_ctx=%d: rel L2 %.3g > %.3g",
              n_seqs, n_heads, n_kv, hd, dt_name(dt), window, max_ctx, e, tol_kv(dt));
    if (e > tol_kv(dt)) { /* name the first bad token for debugging */
        for (int t = 0; t < n_tok; t++) {
            int64_t o = (int64_t)t * n_heads * hd;
            double et = gt_rel_l2(got + o, ref + o, (int64_t)n_heads * hd);
            if (et > tol_kv(dt)) {
                printf("    token %d (seq %d pos %d): rel L2 %.3g, got[0]=%g ref[0]=%g\n", t,
                       seq[t], pos[t], et, got[o], ref[o]);
                break;
            }
        }
    }
    free(seq), free(pos), free(perm), free(q), free(ref), free(got);
    gt_dfree(dq), gt_dfree(dout), gt_dfree(dseq), gt_dfree(dpos), gt_dfree(ws);
    pool_free(&P);
}

/* Context lengths around block boundaries and odd sizes, up to maxc. */
static int32_t pick_ctx(int i, int maxc)
{
    static const int32_t special[] = {1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129, 255, 257};
    int n = (int)(sizeof special / sizeof special[0]);
    if (i < n && special[i] <= maxc)
        return special[i];
    return 1 + (int32_t)gt_rand_int(maxc);
}

/* The shapes both kernels run: each head dim with each (query, kv) head
 * count pair gi, the dtype alternating; a small run takes every other one. */
typedef void (*shape_fn)(int hd, int gi, int n_heads, int n_kv, ifd_dtype_t dt);

static void for_each_shape(shape_fn f)
{
    static const int hds[] = {64, 128, 256};
    static const int heads[][2] = {{8, 8}, {32, 8}, {12, 2}, {40, 2}};
    const ifd_dtype_t dts[] = {IFD_DTYPE_BF16, IFD_DTYPE_F16};
    const int small = gt_small();
    for (int hi = 0; hi < 3; hi++) {
        for (int gi = 0; gi < 4; gi++) {
            if (small && (hi + gi) % 2)
                continue;
            f(hds[hi], gi, heads[gi][0], heads[gi][1], dts[(hi + gi / 2) % 2]);
        }
    }
}

static void decode_shape(int hd, int gi, int n_heads, int n_kv, ifd_dtype_t dt)
{
    const int small = gt_small();
    const int n_seqs = small ? 3 : 13;
    int32_t ctx[13];
    for (int s = 0; s < n_seqs; s++)
        ctx[s] = pick_ctx(s + gi * 3, small ? 300 : 3000);
    decode_case(ctx, n_seqs, n_heads, n_kv, hd, dt, 0, gi == 1, 1.0f);
}

static void test_decode_shapes(void)
{
    for_each_shape(decode_shape);
}

static void test_decode_window(void)
{
    const int small = gt_small();
    const int n_seqs = small ? 3 : 20;
    int32_t ctx[20];
    for (int s = 0; s < n_seqs; s++)
        ctx[s] = pick_ctx(s, small ? 200 : 5000);
    decode_case(ctx, n_seqs, 8, 2, 128, IFD_DTYPE_BF16, 37, 1, 1.0f);
    decode_case(ctx, n_seqs, 8, 4, 64, IFD_DTYPE_F16, 128, 0, 1.0f);
    decode_case(ctx, n_seqs, 4, 1, 256, IFD_DTYPE_BF16, 1, 0, 1.0f);
}

/* Peaked softmax (large scores) stresses the running maximum and the merge. */
static void test_decode_peaked(void)
{
    const int small = gt_small();
    int32_t ctx[4] = {small ? 150 : 4000, 40, small ? 99 : 2049, 1};
    decode_case(ctx, 4, 16, 4, 128, IFD_DTYPE_BF16, 0, 0, 6.0f);
    decode_case(ctx, 4, 16, 4, 64, IFD_DTYPE_F16, 0, 0, 6.0f);
}

static void test_decode_one_seq(void)
{
    int32_t ctx[1] = {gt_small() ? 333 : 16384};
    decode_case(ctx, 1, 32, 8, 128, IFD_DTYPE_BF16, 0, 0, 1.0f);
    if (!gt_small()) {
        decode_case(ctx, 1, 8, 1, 256, IFD_DTYPE_F16, 0, 0, 1.0f);
        decode_case(ctx, 1, 16, 16, 64, IFD_DTYPE_BF16, 4096, 0, 1.0f);
    }
}

static void test_decode_200_seqs(void)
{
    const int n = gt_small() ? 20 : 200;
    int32_t *ctx = gt_xmalloc((size_t)n * 4);
    for (int s = 0; s < n; s++)
        ctx[s] =
            gt_small() ? 1 + (int32_t)gt_rand_int(40) : (s % 100 == 0 ? 16384 : pick_ctx(s, 700));
    decode_case(ctx, n, 32, 8, 128, IFD_DTYPE_BF16, 0, 2, 1.0f);
    if (!gt_small())
        decode_case(ctx, n, 16, 2, 64, IFD_DTYPE_F16, 0, 0, 1.0f);
    free(ctx);
}

/* Quantized K/V: the shapes of both kernels for q8_0 and fp8 (head dims,
 * groups with padding and two head groups, a window, peaked scores). */
static void test_decode_quant(void)
{
    const int small = gt_small();
    const ifd_dtype_t dts[] = {IFD_DTYPE_Q8_0, IFD_DTYPE_FP8};
    int32_t ctx[13];
    for (int i = 0; i < 2; i++) {
        const int n_seqs = small ? 3 : 13;
        for (int s = 0; s < n_seqs; s++)
            ctx[s] = pick_ctx(s + 3 * i, small ? 300 : 3000);
        decode_case(ctx, n_seqs, 8, 8, 64, dts[i], 0, 1, 1.0f);
        decode_case(ctx, n_seqs, 40, 2, 128, dts[i], 0, 0, 1.0f);
        decode_case(ctx, n_seqs, 12, 2, 256, dts[i], 0, 1, 1.0f);
        decode_case(ctx, n_seqs, 8, 2, 128, dts[i], 37, 1, 1.0f);
        decode_case(ctx, n_seqs, 16, 4, 64, dts[i], 0, 0, 6.0f);
    }
}

static void test_decode_errors(void)
{
    ifd_kv_layer_t kv = {.k = (void *)16,
                         .v = (void *)16,
                         .dtype = IFD_DTYPE_BF16,
                         .block_size = BS,
                         .n_kv_heads = 2,
                         .head_dim = 96};
    float *p = (float *)16, *o = (float *)64;
    int32_t *i = (int32_t *)16;
    GT_EXPECT(ifd_cuda_paged_decode_attention(o, p, &kv, i, i, i, 4, 1, 4, 1.0f, 0, 16, NULL, 0,
                                              NULL) == IFD_ENOTSUP,
              "head_dim 96 accepted");
    kv.head_dim = 128;
    kv.block_size = 32;
    GT_EXPECT(ifd_cuda_paged_decode_attention(o, p, &kv, i, i, i, 4, 1, 4, 1.0f, 0, 16, NULL, 0,
                                              NULL) == IFD_ENOTSUP,
              "block size 32 accepted");
    kv.block_size = BS;
    kv.dtype = IFD_DTYPE_F32;
    GT_EXPECT(ifd_cuda_paged_decode_attention(o, p, &kv, i, i, i, 4, 1, 4, 1.0f, 0, 16, NULL, 0,
                                              NULL) == IFD_ENOTSUP,
              "f32 KV accepted");
    kv.dtype = IFD_DTYPE_Q4_0;
    GT_EXPECT(ifd_cuda_paged_decode_attention(o, p, &kv, i, i, i, 4, 1, 4, 1.0f, 0, 16, NULL, 0,
                                              NULL) == IFD_ENOTSUP,
              "q4_0 KV accepted");
    GT_EXPECT(ifd_cuda_paged_prefill_attention(o, p, &kv, i, i, NULL, i, 4, 1, 1, 1, 4, 1.0f, 0,
                                               NULL) == IFD_ENOTSUP,
              "q4_0 KV accepted by prefill");
    kv.dtype = IFD_DTYPE_BF16;
    GT_EXPECT(ifd_cuda_paged_decode_attention(o, p, &kv, i, i, i, 4, 1, 3, 1.0f, 0, 16, NULL, 0,
                                              NULL) == IFD_EINVAL,
              "3 heads over 2 KV heads accepted");
}

/* ---- prefill ---------------------------------------------------------------------- */

/*
 * One prefill batch: sequence s has a cached prefix of prefix[s] positions
 * and a new chunk of qlen[s] tokens (all in the pool already). images:
 * Gemma 3's image blocks (`last`) — in each chunk of 2+ tokens an image over
 * its middle half, and one begun in the cached prefix where there is one
 * (its last 3 positions and the chunk's first 2).
 */
static void prefill_case(const int32_t *prefix, const int32_t *qlen, int n_seqs, int n_heads,
                         int n_kv, int hd, ifd_dtype_t dt, int window, float sigma, bool images)
{
    int32_t *ctx = gt_xmalloc((size_t)n_seqs * 4), *cu = gt_xmalloc((size_t)(n_seqs + 1) * 4);
    int max_q = 0;
    cu[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        ctx[s] = prefix[s] + qlen[s];
        cu[s + 1] = cu[s] + qlen[s];
        max_q = qlen[s] > max_q ? qlen[s] : max_q;
    }
    const int n_tok = cu[n_seqs];
    pool_t P;
    pool_make(&P, ctx, n_seqs, n_kv, hd, dt, sigma);
    int32_t *seq = gt_xmalloc((size_t)n_tok * 4), *pos = gt_xmalloc((size_t)n_tok * 4);
    int32_t *last = gt_xmalloc((size_t)n_tok * 4 + 4);
    for (int s = 0; s < n_seqs; s++) {
        const int a = qlen[s] / 4, b = a + (qlen[s] / 2 > 2 ? qlen[s] / 2 : 2); /* [a, b) */
        for (int i = 0; i < qlen[s]; i++) {
            seq[cu[s] + i] = s;
            pos[cu[s] + i] = last[cu[s] + i] = prefix[s] + i;
            if (images && prefix[s] >= 3 && qlen[s] >= 2 && i < 2)
                last[cu[s] + i] = prefix[s] + 1;
            else if (images && qlen[s] >= 2 && b <= qlen[s] && i >= a && i < b)
                last[cu[s] + i] = prefix[s] + b - 1;
        }
    }
    const int64_t nq = (int64_t)n_tok * n_heads * hd;
    float *q = make_q(nq, dt);
    float *ref = gt_xmalloc((size_t)nq * 4), *got = gt_xmalloc((size_t)nq * 4);
    const float scale = 1.0f / sqrtf((float)hd);
    reference(ref, q, &P, seq, pos, images ? last : NULL, n_tok, n_heads, scale, window);

    float *dq = gt_dupload(q, (size_t)nq * 4);
    float *dout = gt_dalloc_poison((size_t)nq * 4);
    int32_t *dcu = gt_dupload(cu, (size_t)(n_seqs + 1) * 4);
    int32_t *dctx = gt_dupload(ctx, (size_t)n_seqs * 4);
    int32_t *dlast = images ? gt_dupload(last, (size_t)n_tok * 4) : NULL;
    ifd_kv_layer_t kv = pool_layer(&P, 1);
    int rc = ifd_cuda_paged_prefill_attention(dout, dq, &kv, dcu, dctx, dlast, P.dbt, P.max_blocks,
                                              n_seqs, n_tok, max_q, n_heads, scale, window, NULL);
    GT_EXPECT(rc == 0, "ifd_cuda_paged_prefill_attention returned %d", rc);
    gt_sync();
    gt_download(got, dout, (size_t)nq * 4);
    double e = gt_rel_l2(got, ref, nq);
    gt_note("prefill seqs=%d tokens=%d heads=%d/%d hd=%d %s window=%d images=%d: rel L2 %.2e",
            n_seqs, n_tok, n_heads, n_kv, hd, dt_name(dt), window, images, e);
    GT_EXPECT(
        e <= tol_kv(dt),
        "prefill seqs=%d tokens=%d heads=%d/%d hd=%d %s window=%d images=%d: rel L2 %.3g > %.3g",
        n_seqs, n_tok, n_heads, n_kv, hd, dt_name(dt), window, images, e, tol_kv(dt));
    if (e > tol_kv(dt)) {
        for (int t = 0; t < n_tok; t++) {
            int64_t o = (int64_t)t * n_heads * hd;
            double et = gt_rel_l2(got + o, ref + o, (int64_t)n_heads * hd);
            if (et > tol_kv(dt)) {
                printf("    token %d (seq %d pos %d): rel L2 %.3g, got[0]=%g ref[0]=%g\n", t,
                       seq[t], pos[t], et, got[o], ref[o]);
                break;
            }
        }
    }
    free(ctx), free(cu), free(seq), free(pos), free(last), free(q), free(ref), free(got);
    gt_dfree(dq), gt_dfree(dout), gt_dfree(dcu), gt_dfree(dctx);
    if (dlast)
        gt_dfree(dlast);
    pool_free(&P);
}

static void prefill_shape(int hd, int gi, int n_heads, int n_kv, ifd_dtype_t dt)
{
    (void)gi;
    const int small = gt_small();
    int32_t prefix[4] = {0, 5, 16, small ? 40 : 300};
    int32_t qlen[4] = {small ? 17 : 200, 1, small ? 33 : 64, small ? 9 : 129};
    prefill_case(prefix, qlen, 4, n_heads, n_kv, hd, dt, 0, 1.0f, false);
}

static void test_prefill_shapes(void)
{
    for_each_shape(prefill_shape);
}

static void test_prefill_window(void)
{
    const int small = gt_small();
    int32_t prefix[3] = {small ? 20 : 700, 0, 3};
    int32_t qlen[3] = {small ? 40 : 333, small ? 30 : 257, 1};
    prefill_case(prefix, qlen, 3, 8, 2, 128, IFD_DTYPE_BF16, 33, 1.0f, false);
    prefill_case(prefix, qlen, 3, 8, 8, 64, IFD_DTYPE_F16, 64, 1.0f, false);
    prefill_case(prefix, qlen, 3, 4, 1, 256, IFD_DTYPE_BF16, 1, 1.0f, false);
}

static void test_prefill_peaked(void)
{
    int32_t prefix[2] = {gt_small() ? 50 : 1000, 0};
    int32_t qlen[2] = {gt_small() ? 20 : 300, gt_small() ? 24 : 250};
    prefill_case(prefix, qlen, 2, 16, 4, 128, IFD_DTYPE_BF16, 0, 6.0f, false);
}

/* Gemma 3's image blocks: the shapes and windows above (one shorter than an
 * image, one longer) with images in every chunk. */
static void test_prefill_images(void)
{
    const int small = gt_small();
    int32_t prefix[4] = {0, 5, 16, small ? 40 : 300};
    int32_t qlen[4] = {small ? 17 : 200, 1, small ? 33 : 64, small ? 9 : 129};
    prefill_case(prefix, qlen, 4, 8, 2, 128, IFD_DTYPE_BF16, 0, 1.0f, true);
    prefill_case(prefix, qlen, 4, 8, 8, 64, IFD_DTYPE_F16, 5, 1.0f, true);
    prefill_case(prefix, qlen, 4, 4, 1, 256, IFD_DTYPE_BF16, 300, 1.0f, true);
    prefill_case(prefix, qlen, 4, 16, 4, 128, IFD_DTYPE_BF16, 0, 6.0f, true);
}

static void test_prefill_long(void)
{
    /* One long chunk with a long cached prefix (16384 positions in all), and
     * a batch of 200 short chunks. */
    const int small = gt_small();
    int32_t prefix[1] = {small ? 100 : 16384 - 97}, qlen[1] = {small ? 50 : 97};
    prefill_case(prefix, qlen, 1, 32, 8, 128, IFD_DTYPE_BF16, 0, 1.0f, false);
    const int n = small ? 12 : 200;
    int32_t *pf = gt_xmalloc((size_t)n * 4), *ql = gt_xmalloc((size_t)n * 4);
    for (int s = 0; s < n; s++) {
        pf[s] = (int32_t)gt_rand_int(small ? 40 : 600);
        ql[s] = 1 + (int32_t)gt_rand_int(small ? 20 : 70);
    }
    prefill_case(pf, ql, n, 16, 4, 64, IFD_DTYPE_F16, 0, 1.0f, false);
    free(pf), free(ql);
}

static void test_prefill_quant(void)
{
    const int small = gt_small();
    const ifd_dtype_t dts[] = {IFD_DTYPE_Q8_0, IFD_DTYPE_FP8};
    int32_t prefix[4] = {0, 5, 16, small ? 40 : 300};
    int32_t qlen[4] = {small ? 17 : 200, 1, small ? 33 : 64, small ? 9 : 129};
    for (int i = 0; i < 2; i++) {
        prefill_case(prefix, qlen, 4, 12, 2, 64, dts[i], 0, 1.0f, false);
        prefill_case(prefix, qlen, 4, 32, 8, 128, dts[i], 33, 1.0f, false);
        prefill_case(prefix, qlen, 4, 4, 1, 256, dts[i], 0, 1.0f, false);
        prefill_case(prefix, qlen, 2, 16, 4, 128, dts[i], 0, 6.0f, false);
    }
}

int main(void)
{
    gt_begin("test_gpu_attention");
    gt_case("decode_shapes", test_decode_shapes);
    gt_case("decode_window", test_decode_window);
    gt_case("decode_peaked", test_decode_peaked);
    gt_case("decode_one_seq", test_decode_one_seq);
    gt_case("decode_200_seqs", test_decode_200_seqs);
    gt_case("decode_quant", test_decode_quant);
    gt_case("decode_errors", test_decode_errors);
    gt_case("prefill_shapes", test_prefill_shapes);
    gt_case("prefill_window", test_prefill_window);
    gt_case("prefill_peaked", test_prefill_peaked);
    gt_case("prefill_images", test_prefill_images);
    gt_case("prefill_long", test_prefill_long);
    gt_case("prefill_quant", test_prefill_quant);
    return gt_end();
}
