/*
 * test_hmatmul.c — the f16/bf16-weight matmul (kernels/cpu/hmatmul.h) on
 * random data, shapes with odd row counts, k-block tails and several
 * k-blocks.
 *
 *  - packing: every packed row converts (ifd_cpu_hweight_row) bitwise to
 *    the source row's ifd_f16_to_f32 / ifd_bf16_to_f32 values; padding rows
 *    are zeros;
 *  - products: against an f64 reference Σ x·w within a float-rounding bound
 *    (Σ|x·w| · k · 2⁻²³); scalar and AVX2 bitwise equal; m rows at once equal
 *    each row alone (batch invariance), with 1 and 2 threads; a row stride
 *    ldy > n leaves the other columns alone; and (on a CPU whose f32 panels
 *    are 16 rows, i.e. not AVX-512) bitwise equal to ifd_cpu_matmul_packed
 *    on the weights converted to f32.
 */
#include "testutil.h"

#include "cpu/cpu_kernels.h"
#include "cpu/hmatmul.h"
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

static int have_avx2(void)
{
    const ifd_cpu_features_t *f = ifd_cpu_features();
    return f->avx2 && f->fma && f->f16c;
}

/* The widest path: 2 AVX-512 (real, or emulated in the _avx512emu build),
 * 1 AVX2, 0 scalar. */
static int max_path(void)
{
    const ifd_cpu_features_t *f = ifd_cpu_features();
    return have_avx2() ? 1 + (f->avx512f && f->avx512bw) : 0;
}

static const uint32_t types[] = {IFD_GGML_F16, IFD_GGML_BF16};

static float h2f(uint32_t type, uint16_t h)
{
    return type == IFD_GGML_BF16 ? ifd_bf16_to_f32(h) : ifd_f16_to_f32(h);
}

/* Random [n, k] weights of `type`, magnitudes ~1/sqrt(k), a few zeros and
 * (f16) subnormals. */
static uint16_t *random_w(uint32_t type, int n, int k, unsigned *seed)
{
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)n * k);
    ck_assert_ptr_nonnull(w);
    for (int64_t i = 0; i < (int64_t)n * k; i++) {
        float v = frand(seed) / sqrtf((float)k);
        if (rnd(seed) % 64 == 0)
            v = 0.0f;
        else if (rnd(seed) % 64 == 0)
            v *= 1e-4f;
        w[i] = type == IFD_GGML_BF16 ? ifd_f32_to_bf16(v) : ifd_f32_to_f16(v);
    }
    return w;
}

static uint16_t *pack(const uint16_t *w, int n, int k)
{
    int64_t ne = ifd_cpu_hweight_elems(n, k);
    ck_assert_int_gt(ne, 0);
    uint16_t *p = aligned_alloc(64, (size_t)((ne * 2 + 63) / 64 * 64));
    ck_assert_ptr_nonnull(p);
    memset(p, 0xAB, (size_t)ne * 2);
    ck_assert_int_eq(ifd_cpu_hweight_pack(p, w, n, k), 0);
    return p;
}

START_TEST(test_bad_args)
{
    uint16_t w[32] = {0}, p[16 * 2];
    float x[2] = {0}, y[2];
    ck_assert_int_eq(ifd_cpu_hweight_elems(0, 2), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_hweight_elems(3, 2), 32);
    ck_assert_int_eq(ifd_cpu_hweight_pack(p, w, 1, 0), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_hweight_pack(p, w, 1, 2), 0);
    ck_assert_int_eq(ifd_cpu_hweight_row(y, p, IFD_GGML_F16, 1, 2, 1), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_hweight_row(y, p, IFD_GGML_Q8_0, 1, 2, 0), IFD_ENOTSUP);
    ck_assert_int_eq(ifd_cpu_hmatmul(y, 1, x, p, IFD_GGML_F32, 1, 1, 2, NULL), IFD_ENOTSUP);
    ck_assert_int_eq(ifd_cpu_hmatmul(y, 0, x, p, IFD_GGML_F16, 1, 1, 2, NULL), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_hmatmul(y, 1, x, p, IFD_GGML_F16, -1, 1, 2, NULL), IFD_EINVAL);
    ck_assert_int_eq(ifd__cpu_hmatmul_isa(y, 1, x, p, IFD_GGML_F16, 1, 1, 2, NULL, 3), IFD_ENOTSUP);
    ck_assert(ifd_cpu_htype_supported(IFD_GGML_BF16));
    ck_assert(!ifd_cpu_htype_supported(IFD_GGML_Q8_0));
}
END_TEST

START_TEST(test_pack_rows)
{
    const uint32_t type = types[_i];
    unsigned seed = 7u + (unsigned)_i;
    const int n = 37, k = 70;
    uint16_t *w = random_w(type, n, k, &seed), *p = pack(w, n, k);
    float row[70];
    for (int r = 0; r < n; r++) {
        ck_assert_int_eq(ifd_cpu_hweight_row(row, p, type, n, k, r), 0);
        for (int e = 0; e < k; e++) {
            float want = h2f(type, w[(int64_t)r * k + e]);
            if (memcmp(&row[e], &want, 4) != 0)
                ck_abort_msg("row %d elem %d: %g != %g", r, e, row[e], want);
        }
    }
    for (int r = n; r < 48; r++) /* the last panel's padding */
        for (int e = 0; e < k; e++)
            ck_assert_uint_eq(p[(int64_t)(r / 16) * 16 * k + (int64_t)e * 16 + r % 16], 0);
    free(w);
    free(p);
}
END_TEST

static const struct {
    int n, k;
} shapes[] = {{16, 16}, {37, 70}, {50, 384}, {33, 800}, {8, 1000}};
/* 200: two row blocks of the AVX-512 path (hmatmul.c's HMC) */
static const int ms[] = {1, 2, 5, 6, 7, 8, 12, 13, 31, 200};

START_TEST(test_products)
{
    const uint32_t type = types[_i];
    const bool f32_same = strcmp(ifd_cpu_isa_name(), "avx512") != 0;
    ifd_threadpool_t *tp2;
    ck_assert_int_eq(ifd_threadpool_create(&tp2, 2), 0);
    unsigned seed = 99u + (unsigned)_i;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int n = shapes[s].n, k = shapes[s].k;
        uint16_t *w = random_w(type, n, k, &seed), *p = pack(w, n, k);
        float *wf = malloc(sizeof(float) * (size_t)n * k);
        ck_assert_ptr_nonnull(wf);
        for (int64_t e = 0; e < (int64_t)n * k; e++)
            wf[e] = h2f(type, w[e]);
        int64_t nf = ifd_cpu_matmul_packed_floats(n, k);
        float *wfp = aligned_alloc(64, (size_t)((nf * 4 + 63) / 64 * 64));
        ck_assert_ptr_nonnull(wfp);
        ck_assert_int_eq(ifd_cpu_matmul_pack(wfp, wf, n, k), 0);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int m = ms[mi], ldy = n + 3;
            float *x = malloc(sizeof(float) * (size_t)m * k);
            float *ys = malloc(sizeof(float) * (size_t)m * ldy);
            float *yv = malloc(sizeof(float) * (size_t)m * ldy);
            float *y1 = malloc(sizeof(float) * (size_t)ldy);
            float *yf = malloc(sizeof(float) * (size_t)m * n);
            ck_assert(x && ys && yv && y1 && yf);
            for (int64_t e = 0; e < (int64_t)m * k; e++)
                x[e] = frand(&seed);
            for (int64_t e = 0; e < (int64_t)m * ldy; e++)
                ys[e] = yv[e] = -7.0f;
            ck_assert_int_eq(ifd__cpu_hmatmul_isa(ys, ldy, x, p, type, m, n, k, NULL, 0), 0);
            for (int i = 0; i < m; i++) {
                for (int j = n; j < ldy; j++)
                    ck_assert(ys[(int64_t)i * ldy + j] == -7.0f);
                for (int j = 0; j < n; j++) {
                    double ref = 0, mag = 0;
                    for (int e = 0; e < k; e++) {
                        double t = (double)x[(int64_t)i * k + e] * wf[(int64_t)j * k + e];
                        ref += t;
                        mag += fabs(t);
                    }
                    double got = ys[(int64_t)i * ldy + j];
                    if (fabs(got - ref) > mag * k * 0x1p-23 + 1e-30)
                        ck_abort_msg("%s m=%d n=%d k=%d y[%d,%d]=%.9g ref=%.9g",
                                     ifd_ggml_type_name(type), m, n, k, i, j, got, ref);
                }
            }
            for (int isa = 1; isa <= max_path(); isa++) {
                ck_assert_int_eq(ifd__cpu_hmatmul_isa(yv, ldy, x, p, type, m, n, k, tp2, isa), 0);
                if (memcmp(ys, yv, sizeof(float) * (size_t)m * ldy) != 0)
                    ck_abort_msg("%s m=%d n=%d k=%d: scalar != %s", ifd_ggml_type_name(type), m, n,
                                 k, isa == 1 ? "avx2" : "avx512");
            }
            for (int i = 0; i < m; i++) { /* batch invariance, default path, 2 threads */
                ck_assert_int_eq(ifd_cpu_hmatmul(y1, n, x + (int64_t)i * k, p, type, 1, n, k, tp2),
                                 0);
                if (memcmp(y1, ys + (int64_t)i * ldy, sizeof(float) * n) != 0)
                    ck_abort_msg("%s m=%d n=%d k=%d: row %d batched != alone",
                                 ifd_ggml_type_name(type), m, n, k, i);
            }
            if (f32_same) {
                ck_assert_int_eq(ifd_cpu_matmul_packed(yf, x, wfp, m, n, k, tp2), 0);
                for (int i = 0; i < m; i++)
                    if (memcmp(yf + (int64_t)i * n, ys + (int64_t)i * ldy, sizeof(float) * n) != 0)
                        ck_abort_msg("%s m=%d n=%d k=%d: row %d != f32 packed",
                                     ifd_ggml_type_name(type), m, n, k, i);
            }
            free(x), free(ys), free(yv), free(y1), free(yf);
        }
        free(w), free(p), free(wf), free(wfp);
    }
    ifd_threadpool_destroy(tp2);
}
END_TEST

static Suite *hmatmul_suite(void)
{
    Suite *s = suite_create("hmatmul");
    TCase *tc = ifd_test_case(s, "core", 60, IFD_TESTS(test_bad_args));
    tcase_add_loop_test(tc, test_pack_rows, 0, 2);
    tcase_add_loop_test(tc, test_products, 0, 2);
    return s;
}

int main(void)
{
    printf("hmatmul paths: scalar%s%s (cpu: %s)\n", have_avx2() ? ", avx2" : "",
           max_path() == 2 ? ", avx512" : "", ifd_cpu_isa_name());
    if (max_path() < 2)
        printf("SKIPPED part: AVX-512 path (not on this CPU: test_hmatmul_avx512emu runs it "
               "emulated)\n");
    if (!have_avx2())
        printf("SKIPPED part: AVX2 path (this CPU or $INFERD_CPU has no AVX2/FMA/F16C)\n");
    return ifd_test_run(hmatmul_suite());
}
