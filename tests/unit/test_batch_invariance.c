/*
 * test_batch_invariance.c — a row's result must not depend on what else is
 * in the batch. The engine promises that a request produces exactly the
 * same tokens whether it runs alone or batched with others (and seeded
 * sampling makes that visible), which holds only if every kernel computes
 * each row with the same summation order whatever the batch size m, the
 * thread count and the SIMD path chosen for that m.
 *
 * Checks ifd_cpu_matmul_packed (the weights layout the CPU backend uses)
 * bitwise: y = x·wᵀ for m rows at once equals the m single-row products,
 * for the model's shapes and awkward ones, with 1 and 2 threads; and that it
 * agrees with the plain product within float rounding. Run under each SIMD
 * cap by CTest (INFERD_CPU).
 */
#include "testutil.h"

#include "cpu/cpu_kernels.h"
#include "cpu/threadpool.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void check_shape(ifd_threadpool_t *tp, int m, int n, int k)
{
    unsigned seed = (unsigned)(m * 7919 + n * 31 + k);
    float *x = malloc((size_t)m * k * sizeof *x);
    float *w = malloc((size_t)n * k * sizeof *w);
    float *y = malloc((size_t)m * n * sizeof *y);
    float *y1 = malloc((size_t)n * sizeof *y1);
    float *yref = malloc((size_t)m * n * sizeof *yref);
    int64_t nf = ifd_cpu_matmul_packed_floats(n, k);
    ck_assert_int_gt(nf, 0);
    float *wp = aligned_alloc(64, ((size_t)nf * sizeof(float) + 63) / 64 * 64);
    for (long i = 0; i < (long)m * k; i++)
        x[i] = frand(&seed);
    for (long i = 0; i < (long)n * k; i++)
        w[i] = frand(&seed);
    ck_assert_int_eq(ifd_cpu_matmul_pack(wp, w, n, k), 0);
    ck_assert_int_eq(ifd_cpu_matmul_packed(y, x, wp, m, n, k, tp), 0);
    ck_assert_int_eq(ifd_cpu_matmul_f32(yref, x, w, m, n, k, NULL), 0);
    for (long i = 0; i < (long)m * n; i++)
        IFD_CHECK(fabsf(y[i] - yref[i]) <= 1e-4f * (float)k, "m=%d n=%d k=%d: %g vs %g", m, n, k,
                  y[i], yref[i]);
    for (int i = 0; i < m; i++) {
        IFD_TASSERT_CMP(ifd_cpu_matmul_packed(y1, x + (size_t)i * k, wp, 1, n, k, NULL), ==, 0);
        IFD_CHECK(memcmp(y1, y + (size_t)i * n, (size_t)n * sizeof *y1) == 0,
                  "m=%d n=%d k=%d: row %d differs between the batch and alone", m, n, k, i);
    }
    /* and with another batch size around it */
    int m2 = m / 2 + 1;
    ck_assert_int_eq(ifd_cpu_matmul_packed(y, x, wp, m2, n, k, tp), 0);
    for (int i = 0; i < m2; i++) {
        IFD_TASSERT_CMP(ifd_cpu_matmul_packed(y1, x + (size_t)i * k, wp, 1, n, k, tp), ==, 0);
        IFD_CHECK(memcmp(y1, y + (size_t)i * n, (size_t)n * sizeof *y1) == 0,
                  "m=%d n=%d k=%d: row %d differs", m2, n, k, i);
    }
    free(x);
    free(w);
    free(y);
    free(y1);
    free(yref);
    free(wp);
}

START_TEST(test_matmul_rows_independent_of_batch)
{
    ifd_threadpool_t *tp;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 2), 0);
    static const int shapes[][3] = {
        {40, 576, 576}, {33, 192, 576}, {17, 1536, 576}, {64, 576, 1536},
        {5, 100, 77},   {24, 64, 1000}, {100, 49, 31},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_shape(tp, shapes[i][0], shapes[i][1], shapes[i][2]);
    ifd_threadpool_destroy(tp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("batch_invariance");
    ifd_test_case(s, "matmul", 120, IFD_TESTS(test_matmul_rows_independent_of_batch));
    return ifd_test_run(s);
}
