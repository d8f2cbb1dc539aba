/*
 * test_qmatmul.c — the quantized matmul (kernels/cpu/qmatmul.h) on random
 * blocks of every supported type, shapes with odd row counts and tails.
 *
 *  - packing: every packed row dequantizes (ifd_cpu_qweight_row) bitwise to
 *    what ifd_cpu_dequantize gives for the GGUF row (that one is checked
 *    against gguf-py elsewhere);
 *  - activations: the scalar and AVX2 quantizers agree bitwise, q stays in
 *    [−127, 127] and |x − d·q| ≤ d/2;
 *  - products: against an f64 reference Σ w·(d·q) within float rounding,
 *    and against the true f32 x within the activation rounding bound;
 *    the scalar and AVX2 kernels agree bitwise; m rows at once equal the m
 *    rows one at a time (batch invariance), with 1 and 2 threads; a row
 *    stride ldy > n leaves the other columns alone.
 * Every path this CPU has is forced in turn (the AVX2 one is skipped with a
 * message where the CPU lacks it).
 */
#include "testutil.h"

#include "cpu/cpu_kernels.h"
#include "cpu/qmatmul.h"
#include "cpu/threadpool.h"
#include "error.h"
#include "kernels.h"
#include "modelfile/ggml_types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned rnd(unsigned *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static float frand(unsigned *s)
{
    return (float)(rnd(s) & 0xffffff) / 8388608.0f - 1.0f;
}

/* The f16 fields of each type: offsets within the block. */
static const struct {
    uint32_t type;
    int off[2];
} f16_fields[] = {
    {IFD_GGML_Q4_0, {0, -1}}, {IFD_GGML_Q4_1, {0, 2}},    {IFD_GGML_Q5_0, {0, -1}},
    {IFD_GGML_Q5_1, {0, 2}},  {IFD_GGML_Q8_0, {0, -1}},   {IFD_GGML_Q4_K, {0, 2}},
    {IFD_GGML_Q5_K, {0, 2}},  {IFD_GGML_Q6_K, {208, -1}},
};

/* Random GGUF rows [n, k] of `type`: random quants, sane f16 scales. */
static uint8_t *random_rows(uint32_t type, int n, int k, unsigned *seed)
{
    const int qk = (int)ifd_ggml_block_elems(type), bb = (int)ifd_ggml_block_bytes(type);
    const size_t nblk = (size_t)n * (k / qk);
    uint8_t *w = malloc(nblk * bb);
    ck_assert_ptr_nonnull(w);
    const int *off = NULL;
    for (size_t i = 0; i < sizeof f16_fields / sizeof f16_fields[0]; i++)
        if (f16_fields[i].type == type)
            off = f16_fields[i].off;
    ck_assert_ptr_nonnull(off);
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *blk = w + b * bb;
        for (int i = 0; i < bb; i++)
            blk[i] = (uint8_t)rnd(seed);
        for (int f = 0; f < 2; f++) {
            if (off[f] < 0)
                continue;
            /* a few blocks with a zero scale or min, the rest ±[1e-4, 0.05] */
            float v = (rnd(seed) % 16 == 0) ? 0.0f : frand(seed) * 0.05f;
            if (v != 0.0f && fabsf(v) < 1e-4f)
                v = 1e-4f;
            uint16_t h = ifd_f32_to_f16(v);
            memcpy(blk + off[f], &h, 2);
        }
    }
    return w;
}

static int have_avx2(void)
{
    const ifd_cpu_features_t *f = ifd_cpu_features();
    return f->avx2 && f->fma && f->f16c;
}

/* The widest product path: 2 AVX-512 VNNI (real, or emulated in the
 * _avx512emu build), 1 AVX2, 0 scalar. */
static int max_path(void)
{
    const ifd_cpu_features_t *f = ifd_cpu_features();
    if (have_avx2() && f->avx512f && f->avx512bw && f->avx512vnni)
        return f->amx_int8 ? 3 : 2;
    return have_avx2();
}

static const char *const path_names[] = {"scalar", "avx2", "avx512", "amx", "amx at every m"};

typedef struct {
    uint32_t type;
    int n, k;
    uint8_t *src;
    void *packed;
    float *wdq; /* [n, k] ifd_cpu_dequantize of src */
} wcase_t;

static void wcase_init(wcase_t *c, uint32_t type, int n, int k, unsigned seed)
{
    c->type = type, c->n = n, c->k = k;
    c->src = random_rows(type, n, k, &seed);
    int64_t bytes = ifd_cpu_qweight_bytes(type, n, k);
    ck_assert_int_gt(bytes, 0);
    c->packed = aligned_alloc(64, ((size_t)bytes + 63) / 64 * 64);
    ck_assert_int_eq(ifd_cpu_qweight_pack(c->packed, c->src, type, n, k), 0);
    c->wdq = malloc(sizeof(float) * n * k);
    ck_assert_int_eq(ifd_cpu_dequantize(c->wdq, c->src, type, (int64_t)n * k), 0);
}

static void wcase_free(wcase_t *c)
{
    free(c->src);
    free(c->packed);
    free(c->wdq);
}

static const uint32_t all_types[] = {IFD_GGML_Q4_0, IFD_GGML_Q4_1, IFD_GGML_Q5_0, IFD_GGML_Q5_1,
                                     IFD_GGML_Q8_0, IFD_GGML_Q4_K, IFD_GGML_Q5_K, IFD_GGML_Q6_K};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))

START_TEST(test_pack_roundtrip)
{
    const uint32_t type = all_types[_i];
    const int qk = (int)ifd_ggml_block_elems(type);
    const int ns[] = {1, 7, 8, 9, 20};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (int kb = 1; kb <= 3; kb++) {
            const int n = ns[a], k = qk * kb;
            wcase_t c;
            wcase_init(&c, type, n, k, 1234u + (unsigned)(n * 7 + k));
            float *row = malloc(sizeof(float) * k);
            for (int r = 0; r < n; r++) {
                IFD_TASSERT_CMP(ifd_cpu_qweight_row(row, c.packed, type, n, k, r), ==, 0);
                for (int e = 0; e < k; e++)
                    if (memcmp(&row[e], &c.wdq[(size_t)r * k + e], 4) != 0)
                        ck_abort_msg("%s n=%d k=%d row %d elem %d: %g != %g",
                                     ifd_ggml_type_name(type), n, k, r, e, row[e],
                                     c.wdq[(size_t)r * k + e]);
            }
            ck_assert_int_eq(ifd_cpu_qweight_row(row, c.packed, type, n, k, n), IFD_EINVAL);
            free(row);
            wcase_free(&c);
        }
    }
}
END_TEST

START_TEST(test_bad_args)
{
    ck_assert(!ifd_cpu_qtype_supported(IFD_GGML_F32));
    ck_assert(!ifd_cpu_qtype_supported(IFD_GGML_Q2_K));
    ck_assert_int_eq(ifd_cpu_qweight_bytes(IFD_GGML_Q2_K, 8, 256), IFD_ENOTSUP);
    ck_assert_int_eq(ifd_cpu_qweight_bytes(IFD_GGML_Q4_0, 8, 48), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_qweight_bytes(IFD_GGML_Q4_K, 8, 288), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_qweight_bytes(IFD_GGML_Q4_0, 0, 32), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_qact_bytes(1, 33), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_qact_bytes(0, 32), IFD_EINVAL);
    /* Q4_0: 8 rows × 32 = 18 bytes a row-block, as in the file */
    ck_assert_int_eq(ifd_cpu_qweight_bytes(IFD_GGML_Q4_0, 8, 64), 8 * 2 * 18);
    ck_assert_int_eq(ifd_cpu_qweight_bytes(IFD_GGML_Q8_0, 9, 32), 2 * 8 * 34);
    /* Q6_K: the file's 210 bytes per row and 256 elements (6.5625 bits), not
     * 6-bit quants widened to bytes */
    ck_assert_int_eq(ifd_cpu_qweight_bytes(IFD_GGML_Q6_K, 8, 512), 8 * 2 * 210);
}
END_TEST

/* Quantized activations for x [m, k]; *mem to free. */
static ifd_cpu_qact_t qact_make(const float *x, int m, int k, int isa, ifd_threadpool_t *tp,
                                void **mem)
{
    ifd_cpu_qact_t a;
    int64_t bytes = ifd_cpu_qact_bytes(m, k);
    ck_assert_int_gt(bytes, 0);
    *mem = malloc((size_t)bytes);
    ck_assert_int_eq(ifd_cpu_qact_init(&a, *mem, m, k), 0);
    ck_assert_int_eq(ifd__cpu_quantize_act_isa(&a, x, tp, isa), 0);
    return a;
}

START_TEST(test_quantize_act)
{
    const int ms[] = {1, 3, 70}, ks[] = {32, 96, 2048};
    ifd_threadpool_t *tp;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 2), 0);
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++) {
            const int m = ms[a], k = ks[b], nb = k / 32;
            unsigned seed = 99u + (unsigned)(m * k);
            float *x = malloc(sizeof(float) * m * k);
            for (int i = 0; i < m * k; i++)
                x[i] = frand(&seed) * (i % 97 == 0 ? 40.0f : 3.0f);
            for (int i = 0; i < 32 && i < k; i++)
                x[i] = 0.0f; /* an all-zero block */
            void *m0, *m1;
            ifd_cpu_qact_t q0 = qact_make(x, m, k, 0, tp, &m0);
            for (int i = 0; i < m; i++) {
                for (int bl = 0; bl < nb; bl++) {
                    float d = q0.d[i * nb + bl];
                    int32_t s = 0, h = 0;
                    for (int e = 0; e < 32; e++) {
                        int64_t j = (int64_t)i * k + bl * 32 + e;
                        IFD_TASSERT_CMP(q0.q[j], >=, -127);
                        IFD_TASSERT(fabsf(x[j] - d * q0.q[j]) <= d * 0.5f * 1.0001f + 1e-30f);
                        s += q0.q[j];
                        h += e < 16 ? q0.q[j] : 0;
                    }
                    IFD_TASSERT_CMP(s, ==, q0.s[i * nb + bl]);
                    IFD_TASSERT_CMP(h, ==, q0.h[i * nb + bl]);
                }
            }
            if (have_avx2()) {
                ifd_cpu_qact_t q1 = qact_make(x, m, k, 1, tp, &m1);
                ck_assert_int_eq(memcmp(q0.q, q1.q, (size_t)m * k), 0);
                ck_assert_int_eq(memcmp(q0.d, q1.d, sizeof(float) * m * nb), 0);
                ck_assert_int_eq(memcmp(q0.s, q1.s, sizeof(int32_t) * m * nb), 0);
                ck_assert_int_eq(memcmp(q0.h, q1.h, sizeof(int32_t) * m * nb), 0);
                free(m1);
            }
            free(m0);
            free(x);
        }
    }
    ifd_threadpool_destroy(tp);
}
END_TEST

/* y for one type and shape on one path, checked against the references. */
static void check_product(const wcase_t *c, int m, int isa, ifd_threadpool_t *tp1,
                          ifd_threadpool_t *tp2, float **yout)
{
    const int n = c->n, k = c->k, nb = k / 32;
    unsigned seed = 555u + (unsigned)(m * 131 + n * 17 + k);
    float *x = malloc(sizeof(float) * m * k);
    for (int i = 0; i < m * k; i++)
        x[i] = frand(&seed) * 2.0f;
    void *mem;
    ifd_cpu_qact_t a = qact_make(x, m, k, isa, tp1, &mem);
    /* y2: 2 threads, rows ldy = n + 3 apart with the gaps poisoned (NaN) */
    const int ldy = n + 3;
    float *y = malloc(sizeof(float) * m * n), *y2 = malloc(sizeof(float) * m * ldy);
    float *y1 = malloc(sizeof(float) * n);
    for (int i = 0; i < m * ldy; i++)
        y2[i] = NAN;
    ck_assert_int_eq(ifd__cpu_qmatmul_isa(y, n, &a, c->packed, c->type, n, tp1, isa), 0);
    ck_assert_int_eq(ifd__cpu_qmatmul_isa(y2, ldy, &a, c->packed, c->type, n, tp2, isa), 0);
    ck_assert_int_eq(ifd__cpu_qmatmul_isa(y2, n - 1, &a, c->packed, c->type, n, tp2, isa),
                     IFD_EINVAL);
    for (int i = 0; i < m; i++) {
        ck_assert_msg(memcmp(y + (int64_t)i * n, y2 + (int64_t)i * ldy, sizeof(float) * n) == 0,
                      "%s: 1 thread != 2 threads", ifd_ggml_type_name(c->type));
        for (int j = n; j < ldy; j++)
            ck_assert_msg(isnan(y2[(int64_t)i * ldy + j]), "column %d of ldy %d written", j, ldy);
    }
    for (int i = 0; i < m; i++) {
        /* the row alone: a one-row view of the same activations */
        ifd_cpu_qact_t one = {
            a.q + (int64_t)i * k,  a.d + (int64_t)i * nb, a.s + (int64_t)i * nb, 1, k,
            a.h + (int64_t)i * nb, a.ds + (int64_t)i * nb};
        ck_assert_int_eq(ifd__cpu_qmatmul_isa(y1, n, &one, c->packed, c->type, n, tp2, isa), 0);
        if (memcmp(y1, y + (int64_t)i * n, sizeof(float) * n) != 0)
            ck_abort_msg("%s m=%d n=%d k=%d isa=%d: row %d batched != alone",
                         ifd_ggml_type_name(c->type), m, n, k, isa, i);
        for (int j = 0; j < n; j++) {
            const float *w = c->wdq + (int64_t)j * k;
            double ref = 0, mag = 0, truth = 0, bound = 0;
            for (int e = 0; e < k; e++) {
                double xd = (double)a.d[i * nb + e / 32] * a.q[(int64_t)i * k + e];
                ref += (double)w[e] * xd;
                mag += fabs((double)w[e] * xd);
                truth += (double)w[e] * x[(int64_t)i * k + e];
                bound += fabs((double)w[e]) * a.d[i * nb + e / 32] * 0.5;
            }
            double got = y[(int64_t)i * n + j];
            if (fabs(got - ref) > 2e-6 * mag + 1e-30 ||
                fabs(got - truth) > bound * 1.001 + 2e-6 * mag)
                ck_abort_msg("%s m=%d n=%d k=%d isa=%d y[%d,%d]=%.9g ref=%.9g truth=%.9g "
                             "(mag %g bound %g)",
                             ifd_ggml_type_name(c->type), m, n, k, isa, i, j, got, ref, truth, mag,
                             bound);
        }
    }
    free(mem);
    free(x);
    free(y2);
    free(y1);
    *yout = y;
}

START_TEST(test_products)
{
    const uint32_t type = all_types[_i];
    const int qk = (int)ifd_ggml_block_elems(type);
    const int ns[] = {1, 7, 8, 9, 17, 100};
    /* the last k of each (70 blocks of 32, 9 super-blocks: 72) crosses the AMX
     * path's segment of 64 blocks (qtiles_amx), a short batch in its second;
     * run for n = 17 (a group pair and an odd group) and m from 16 on only */
    const int kbs_small[] = {1, 3, 18, 70}, kbs_k[] = {1, 2, 9};
    const int *kbs = qk == 32 ? kbs_small : kbs_k;
    const int nk = qk == 32 ? 4 : 3;
    /* AVX-512 tiles of 8, then 4, then 1..3 rows (8, 13, 15, 70: a 64-row chunk and 6);
     * AVX2 tiles of 4 then 1..3; AMX tiles of 16 from m = 16 on, then 8, 4, 1..3
     * (16, 31: 16 + 8 + 4 + 3, 70: 4 × 16 + 4 + 2), and below 16 rows from its
     * QMM_AMX_MIN_M on (9, 13, 15; and every m with the minimum at 1) one tile
     * of m rows */
    const int ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 15, 16, 31, 70};
    ifd_threadpool_t *tp1, *tp2;
    ck_assert_int_eq(ifd_threadpool_create(&tp1, 1), 0);
    ck_assert_int_eq(ifd_threadpool_create(&tp2, 2), 0);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (int b = 0; b < nk; b++) {
            wcase_t c;
            wcase_init(&c, type, ns[a], qk * kbs[b], 77u + (unsigned)(a * 10 + b));
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                const int m = ms[mi];
                if (m > 15 && ns[a] > 17)
                    continue; /* keep the f64 reference quick */
                if (b == nk - 1 && (ns[a] != 17 || m < 16))
                    continue; /* the long k: the segment case only */
                float *ys, *yv;
                check_product(&c, m, 0, tp1, tp2, &ys);
                /* path 4: AMX with its tiles at every m (ifd__cpu_qmatmul_set_amx_min_m(1):
                 * a short product is one tile of m rows, the rows alone tiles of 1) */
                for (int pv = 1; pv <= max_path() + (max_path() == 3); pv++) {
                    const int isa = pv < 4 ? pv : 3;
                    ifd__cpu_qmatmul_set_amx_min_m(pv == 4 ? 1 : 0);
                    check_product(&c, m, isa, tp1, tp2, &yv);
                    ifd__cpu_qmatmul_set_amx_min_m(0);
                    if (memcmp(ys, yv, sizeof(float) * m * c.n) != 0)
                        ck_abort_msg("%s m=%d n=%d k=%d: scalar != %s", ifd_ggml_type_name(type), m,
                                     c.n, c.k, path_names[pv]);
                    free(yv);
                }
                free(ys);
            }
            wcase_free(&c);
        }
    }
    ifd_threadpool_destroy(tp1);
    ifd_threadpool_destroy(tp2);
}
END_TEST

static Suite *qmatmul_suite(void)
{
    Suite *s = suite_create("qmatmul");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_bad_args);
    tcase_add_loop_test(tc, test_pack_roundtrip, 0, N_TYPES);
    tcase_add_test(tc, test_quantize_act);
    tcase_add_loop_test(tc, test_products, 0, N_TYPES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    printf("qmatmul paths: scalar%s%s%s (cpu: %s)\n", max_path() >= 1 ? ", avx2" : "",
           max_path() >= 2 ? ", avx512" : "", max_path() >= 3 ? ", amx" : "", ifd_cpu_isa_name());
    if (!have_avx2())
        printf("SKIPPED part: AVX2 path (this CPU or $INFERD_CPU has no AVX2/FMA/F16C)\n");
    if (max_path() < 2)
        printf("SKIPPED part: AVX-512 VNNI path (not on this CPU: test_qmatmul_avx512emu "
               "runs it emulated)\n");
    if (max_path() < 3)
        printf("SKIPPED part: AMX-INT8 path (not on this CPU or not enabled by its OS: "
               "test_qmatmul_avx512emu runs it on emulated tiles)\n");
    return ifd_test_run(qmatmul_suite());
}
