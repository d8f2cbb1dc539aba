/*
 * test_backend_cpu_q.c — the CPU backend's quantized weights (weights
 * "auto": kernels/cpu/qmatmul.h behind load_proj / proj / embed), on seeded
 * random blocks:
 *  - parts of one quantized type merge into one weight, parts of different
 *    quantized types stay side by side, a part of another type (F16) sends
 *    the whole projection to the f32 path;
 *  - proj = the f64 product of the dequantized parts and the input (plus
 *    bias) within the 8-bit activation error, and each row of a 9-row proj
 *    equals that row's 1-row proj bit for bit (batch invariance);
 *  - embed of a quantized table = the dequantized rows × scale, bit for bit;
 *    a tied output projection shares the table's buffer (bytes 0) and both
 *    free cleanly (ASan);
 *  - F16 or BF16 parts of one type stay in 16 bits (kernels/cpu/hmatmul.h,
 *    the file's bytes), F16 beside BF16 goes to f32; the product is bit for
 *    bit the f32 packed one (on a CPU with 16-row f32 panels, i.e. not
 *    AVX-512) and batch invariant; an F16/BF16 embedding table is looked up
 *    exactly and shared with a tied output;
 *  - weights "f32": the same sources give the f32 packed path, bit for bit
 *    what ifd_cpu_matmul_packed computes on the dequantized matrix;
 *  - ifd_weights_dtype_parse.
 */
#include "testutil.h"

#include "cpu/hmatmul.h"
#include "cpu/qmatmul.h"
#include "error.h"
#include "kernels.h"
#include "modelfile/ggml_types.h"
#include "worker/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 33);
}

static float frand(void)
{
    return (float)(rnd() & 0xffffff) / 16777216.0f - 0.5f;
}

/* f16 scale offsets inside a block, per type used here */
static int scale_off(ifd_ggml_type_t t, int which)
{
    switch (t) {
    case IFD_GGML_Q8_0:
    case IFD_GGML_Q5_0:
    case IFD_GGML_Q4_0:
        return which == 0 ? 0 : -1;
    case IFD_GGML_Q4_1:
    case IFD_GGML_Q4_K:
        return which == 0 ? 0 : 2;
    case IFD_GGML_Q6_K:
        return which == 0 ? 208 : -1;
    default:
        return -1;
    }
}

/* Random rows × cols of a quantized type (or F16), and their dequantized f32. */
static void *make_src(ifd_ggml_type_t t, int64_t rows, int64_t cols, float **deq)
{
    const uint64_t elems = ifd_ggml_block_elems(t), bb = ifd_ggml_block_bytes(t);
    const uint64_t nblk = (uint64_t)rows * cols / elems;
    uint8_t *w = malloc(nblk * bb);
    ck_assert_ptr_nonnull(w);
    for (uint64_t b = 0; b < nblk; b++) {
        uint8_t *blk = w + b * bb;
        for (uint64_t i = 0; i < bb; i++)
            blk[i] = (uint8_t)rnd();
        if (t == IFD_GGML_F16 || t == IFD_GGML_BF16) {
            uint16_t h = t == IFD_GGML_F16 ? ifd_f32_to_f16(frand()) : ifd_f32_to_bf16(frand());
            memcpy(blk, &h, 2);
        }
        for (int f = 0; f < 2; f++) {
            int off = scale_off(t, f);
            if (off >= 0) {
                uint16_t h = ifd_f32_to_f16(frand() * 0.04f);
                memcpy(blk + off, &h, 2);
            }
        }
    }
    *deq = malloc(sizeof(float) * rows * cols);
    ck_assert_int_eq(ifd_cpu_dequantize(*deq, w, t, rows * cols), 0);
    return w;
}

static void act(ifd_backend_t *be, ifd_act_t *a, int64_t rows, int64_t cols)
{
    ck_assert_int_eq(be->ops->act_alloc(be, a, IFD_DTYPE_F32, rows, cols), 0);
}

typedef struct {
    int n;
    ifd_ggml_type_t types[3];
    int64_t rows[3];
    int64_t cols;
    int want_parts; /* stored parts with weights auto */
    bool want_q;    /* stays quantized */
    bool want_h;    /* stays in 16 bits */
} proj_case_t;

static void run_case(const proj_case_t *pc, ifd_weights_dtype_t mode)
{
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create_ex(&be, 2, mode), 0);
    enum { M = 9 };
    const int64_t K = pc->cols;
    ifd_weight_src_t parts[3], bsrc[3];
    const ifd_weight_src_t *bp[3];
    void *raw[3];
    float *deq[3], *bias[3];
    int64_t R = 0;
    for (int i = 0; i < pc->n; i++) {
        raw[i] = make_src(pc->types[i], pc->rows[i], K, &deq[i]);
        parts[i] = (ifd_weight_src_t){"w", raw[i], pc->types[i], pc->rows[i], K};
        bias[i] = malloc(sizeof(float) * pc->rows[i]);
        for (int64_t j = 0; j < pc->rows[i]; j++)
            bias[i][j] = frand();
        bsrc[i] = (ifd_weight_src_t){"b", i == 1 ? NULL : bias[i], IFD_GGML_F32, 1, pc->rows[i]};
        bp[i] = &bsrc[i];
        R += pc->rows[i];
    }
    ifd_proj_t p;
    ck_assert_int_eq(be->ops->load_proj(be, &p, parts, bp, pc->n), 0);
    ck_assert_int_eq(p.rows, R);
    const bool q = mode == IFD_WEIGHTS_AUTO && pc->want_q;
    const bool h = mode == IFD_WEIGHTS_AUTO && pc->want_h;
    ck_assert_int_eq(p.n_parts, q ? pc->want_parts : 1);
    if (h) {
        ck_assert_int_eq(p.part[0].dtype, pc->types[0]);
        ck_assert_int_eq(p.part[0].bytes, 2 * ifd_cpu_hweight_elems((int)R, (int)K));
    } else if (q) {
        int64_t bytes = 0;
        for (int i = 0; i < p.n_parts; i++) {
            ck_assert_int_ne(p.part[i].dtype, IFD_GGML_F32);
            bytes += (int64_t)p.part[i].bytes;
        }
        if (p.n_parts == 1)
            ck_assert_int_eq(bytes, ifd_cpu_qweight_bytes(pc->types[0], (int)R, (int)K));
    } else {
        ck_assert_int_eq(p.part[0].dtype, IFD_GGML_F32);
    }

    ifd_act_t x, y, x1, y1;
    act(be, &x, M, K), act(be, &y, M, R), act(be, &x1, 1, K), act(be, &y1, 1, R);
    float *xf = x.data;
    for (int64_t i = 0; i < M * K; i++)
        xf[i] = frand() * (i % 53 == 0 ? 8.0f : 2.0f);
    ck_assert_int_eq(be->ops->proj(be, &y, &x, &p, M), 0);
    const float *yf = y.data;
    for (int r = 0; r < M; r++) {
        memcpy(x1.data, xf + r * K, sizeof(float) * K);
        ck_assert_int_eq(be->ops->proj(be, &y1, &x1, &p, 1), 0);
        ck_assert_msg(memcmp(y1.data, yf + r * R, sizeof(float) * R) == 0,
                      "row %d: batched != alone", r);
        /* f64 reference; the error bound: each input off by ≤ its block's d/2 */
        int64_t col = 0;
        for (int i = 0; i < pc->n; i++) {
            for (int64_t j = 0; j < pc->rows[i]; j++, col++) {
                double ref = i == 1 ? 0.0 : bias[i][j], bound = 0, mag = fabs(ref);
                for (int64_t e = 0; e < K; e++) {
                    double w = deq[i][j * K + e];
                    ref += w * xf[r * K + e];
                    mag += fabs(w * xf[r * K + e]);
                    if (q) {
                        float amax = 0;
                        for (int64_t u = e / 32 * 32; u < e / 32 * 32 + 32; u++)
                            amax = fmaxf(amax, fabsf(xf[r * K + u]));
                        bound += fabs(w) * amax / 127.0 * 0.5;
                    }
                }
                double got = yf[r * R + col];
                ck_assert_msg(fabs(got - ref) <= bound * 1.01 + 1e-5 * mag,
                              "part %d row %lld, x row %d: %.9g vs %.9g (bound %g)", i,
                              (long long)j, r, got, ref, bound);
            }
        }
    }
    if (!q && (!h || strcmp(ifd_cpu_isa_name(), "avx512") != 0)) {
        /* exactly the f32 packed kernel on the dequantized, concatenated parts */
        float *w = malloc(sizeof(float) * R * K), *ref = malloc(sizeof(float) * M * R);
        int64_t r0 = 0;
        for (int i = 0; i < pc->n; i++) {
            memcpy(w + r0 * K, deq[i], sizeof(float) * pc->rows[i] * K);
            r0 += pc->rows[i];
        }
        float *wp = aligned_alloc(
            64, ((size_t)ifd_cpu_matmul_packed_floats((int)R, (int)K) * 4 + 63) / 64 * 64);
        ifd_cpu_matmul_pack(wp, w, (int)R, (int)K);
        ck_assert_int_eq(ifd_cpu_matmul_packed(ref, xf, wp, M, (int)R, (int)K, NULL), 0);
        for (int r = 0; r < M; r++) {
            int64_t c0 = 0;
            for (int i = 0; i < pc->n; i++) {
                for (int64_t j = 0; j < pc->rows[i]; j++)
                    if (i != 1)
                        ref[r * R + c0 + j] += bias[i][j];
                c0 += pc->rows[i];
            }
        }
        ck_assert(memcmp(ref, yf, sizeof(float) * M * R) == 0);
        free(w), free(ref), free(wp);
    }
    be->ops->proj_free(be, &p);
    be->ops->act_free(be, &x), be->ops->act_free(be, &y);
    be->ops->act_free(be, &x1), be->ops->act_free(be, &y1);
    for (int i = 0; i < pc->n; i++)
        free(raw[i]), free(deq[i]), free(bias[i]);
    be->ops->destroy(be);
}

static const proj_case_t cases[] = {
    {3, {IFD_GGML_Q8_0, IFD_GGML_Q8_0, IFD_GGML_Q8_0}, {37, 16, 29}, 96, 1, true, false},
    {2, {IFD_GGML_Q4_K, IFD_GGML_Q4_K}, {21, 21}, 512, 1, true, false},
    {3, {IFD_GGML_Q5_0, IFD_GGML_Q5_0, IFD_GGML_Q8_0}, {13, 8, 8}, 64, 3, true, false},
    {2, {IFD_GGML_Q4_K, IFD_GGML_Q6_K}, {9, 17}, 256, 2, true, false},
    {1, {IFD_GGML_Q4_1}, {50}, 160, 1, true, false},
    {2, {IFD_GGML_Q8_0, IFD_GGML_F16}, {16, 16}, 64, 1, false, false},
    {3, {IFD_GGML_F16, IFD_GGML_F16, IFD_GGML_F16}, {37, 8, 19}, 400, 1, false, true},
    {2, {IFD_GGML_BF16, IFD_GGML_BF16}, {24, 24}, 72, 1, false, true},
    {2, {IFD_GGML_F16, IFD_GGML_BF16}, {16, 16}, 64, 1, false, false},
};

START_TEST(test_proj_auto)
{
    run_case(&cases[_i], IFD_WEIGHTS_AUTO);
}
END_TEST

START_TEST(test_proj_f32)
{
    run_case(&cases[_i], IFD_WEIGHTS_F32);
}
END_TEST

static const ifd_ggml_type_t embed_types[] = {IFD_GGML_Q8_0, IFD_GGML_F16, IFD_GGML_BF16};

START_TEST(test_embed_tied)
{
    const ifd_ggml_type_t t = embed_types[_i];
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    enum { V = 70, E = 64 };
    float *deq;
    void *raw = make_src(t, V, E, &deq);
    ifd_weight_src_t src = {"token_embd", raw, t, V, E};
    ifd_weight_t emb;
    ck_assert_int_eq(be->ops->load_weight(be, &emb, &src, IFD_WEIGHT_EMBED), 0);
    ck_assert_int_eq(emb.dtype, t);
    ck_assert_int_eq(emb.bytes, t == IFD_GGML_Q8_0 ? ifd_cpu_qweight_bytes(t, V, E)
                                                   : 2 * ifd_cpu_hweight_elems(V, E));
    ifd_proj_t out;
    ck_assert_int_eq(be->ops->load_proj(be, &out, &src, NULL, 1), 0);
    ck_assert_ptr_eq(out.part[0].data, emb.data);
    ck_assert_int_eq(out.part[0].bytes, 0);

    const int32_t toks[3] = {0, 69, 33};
    ifd_act_t x;
    ck_assert_int_eq(be->ops->act_alloc(be, &x, IFD_DTYPE_F32, 3, E), 0);
    ck_assert_int_eq(be->ops->embed(be, &x, &emb, toks, 3, 1.5f), 0);
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < E; e++) {
            float want = deq[toks[i] * E + e] * 1.5f;
            ck_assert(memcmp(&want, (float *)x.data + i * E + e, 4) == 0);
        }
    const int32_t bad = V;
    ck_assert_int_eq(be->ops->embed(be, &x, &emb, &bad, 1, 1.0f), IFD_ERANGE);
    /* free in either order: the buffer goes with the last reference */
    be->ops->weight_free(be, &emb);
    ifd_act_t y;
    ck_assert_int_eq(be->ops->act_alloc(be, &y, IFD_DTYPE_F32, 3, V), 0);
    ck_assert_int_eq(be->ops->proj(be, &y, &x, &out, 3), 0);
    be->ops->proj_free(be, &out);
    /* a table of another source is not shared */
    ck_assert_int_eq(be->ops->load_weight(be, &emb, &src, IFD_WEIGHT_EMBED), 0);
    ifd_weight_src_t other = src;
    float *deq2;
    void *raw2 = make_src(t, V, E, &deq2);
    other.data = raw2;
    ck_assert_int_eq(be->ops->load_proj(be, &out, &other, NULL, 1), 0);
    ck_assert_ptr_ne(out.part[0].data, emb.data);
    ck_assert_int_gt(out.part[0].bytes, 0);
    be->ops->proj_free(be, &out);
    be->ops->weight_free(be, &emb);
    be->ops->act_free(be, &x), be->ops->act_free(be, &y);
    be->ops->destroy(be);
    free(raw), free(raw2), free(deq), free(deq2);
}
END_TEST

START_TEST(test_weights_dtype_parse)
{
    ifd_weights_dtype_t w;
    ck_assert_int_eq(ifd_weights_dtype_parse("auto", &w), 0);
    ck_assert_int_eq(w, IFD_WEIGHTS_AUTO);
    ck_assert_int_eq(ifd_weights_dtype_parse("f32", &w), 0);
    ck_assert_int_eq(w, IFD_WEIGHTS_F32);
    ck_assert_int_eq(ifd_weights_dtype_parse("q8", &w), IFD_EINVAL);
    ck_assert_int_eq(ifd_weights_dtype_parse(NULL, &w), IFD_EINVAL);
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create_ex(&be, 1, (ifd_weights_dtype_t)7), IFD_EINVAL);
}
END_TEST

/* The weight arena (backend_cpu.c): quantized weights loaded one after the
 * other lie end to end in one chunk, 64-byte aligned (no 2 MiB page each:
 * the RSS that cost); freed in any order and loaded again they still work.
 * Under AddressSanitizer each weight is its own buffer (overreads caught):
 * only alignment and the products are checked there. */
START_TEST(test_weight_arena)
{
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 1), 0);
    enum { N = 6, R = 40, K = 96 };
    void *raw[N];
    float *deq[N];
    ifd_proj_t p[N];
    ifd_act_t x;
    ck_assert_int_eq(be->ops->act_alloc(be, &x, IFD_DTYPE_F32, 2, K), 0);
    for (int i = 0; i < 2 * K; i++)
        ((float *)x.data)[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            raw[i] = make_src(IFD_GGML_Q8_0, R + i, K, &deq[i]);
            ifd_weight_src_t src = {"w", raw[i], IFD_GGML_Q8_0, R + i, K};
            ck_assert_int_eq(be->ops->load_proj(be, &p[i], &src, NULL, 1), 0);
            const uint8_t *d = p[i].part[0].data;
            ck_assert_uint_eq((uintptr_t)d % 64, 0);
#if !defined(__SANITIZE_ADDRESS__)
            if (i > 0) {
                const uint8_t *prev = p[i - 1].part[0].data;
                ck_assert_ptr_eq(d, prev + ((p[i - 1].part[0].bytes + 63) & ~(uint64_t)63));
            }
#endif
        }
        /* free every other one first, then the rest: the products of the
         * live ones are still their weights' */
        for (int i = 0; i < N; i += 2)
            be->ops->proj_free(be, &p[i]);
        for (int i = 1; i < N; i += 2) {
            ifd_act_t yi;
            ck_assert_int_eq(be->ops->act_alloc(be, &yi, IFD_DTYPE_F32, 2, R + i), 0);
            ck_assert_int_eq(be->ops->proj(be, &yi, &x, &p[i], 2), 0);
            for (int r = 0; r < R + i; r++) {
                double want = 0;
                for (int k = 0; k < K; k++)
                    want += (double)deq[i][r * K + k] * ((float *)x.data)[k];
                ck_assert(fabs(((float *)yi.data)[r] - want) < 0.05 + 0.02 * fabs(want));
            }
            be->ops->act_free(be, &yi);
            be->ops->proj_free(be, &p[i]);
        }
        for (int i = 0; i < N; i++)
            free(raw[i]), free(deq[i]);
    }
    be->ops->act_free(be, &x);
    be->ops->destroy(be);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("backend_cpu_q");
    TCase *tc = tcase_create("q");
    tcase_set_timeout(tc, 120);
    const int n = (int)(sizeof cases / sizeof cases[0]);
    tcase_add_loop_test(tc, test_proj_auto, 0, n);
    tcase_add_loop_test(tc, test_proj_f32, 0, n);
    tcase_add_loop_test(tc, test_embed_tied, 0, 3);
    tcase_add_test(tc, test_weights_dtype_parse);
    tcase_add_test(tc, test_weight_arena);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ifd_test_run(suite());
}
