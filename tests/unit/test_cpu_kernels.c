/*
 * test_cpu_kernels.c — the dense CPU kernels (matmul on plain and pre-packed
 * weights, RMSNorm, RoPE, softmax, SwiGLU, GeGLU, GELU, and the vision
 * kernels LayerNorm, average pooling, dense attention; dtype sizes) against plain
 * double-precision references on seeded random data of awkward shapes (1,
 * primes, sizes that are not multiples of the SIMD width or of the matmul's
 * blocking).
 *
 * CTest runs this binary three times: natively (the widest path, AVX-512 here)
 * and with INFERD_CPU=avx2 and INFERD_CPU=scalar, which ifd_cpu_features()
 * reads once per process; a capped run the CPU cannot honour skips.
 *
 * Tolerances (ε = FLT_EPSILON), each justified next to its check:
 *  matmul     |y − ref| ≤ 4·√k·ε·Σ_p|x_p·w_p|   (f32 accumulation; observed ≥ 20× below)
 *  rmsnorm    |y − ref| ≤ 8ε·|ref|
 *  rope       |y − ref| ≤ (|a|+|b|)·(|θ|·(i+4)·ε + 8ε); bitwise equal to the
 *             llama.cpp angle recipe (MODEL-FORMATS.md §2.4) re-derived here
 *  softmax    |y − ref| ≤ (16 + |x − max|)·ε·ref + 1e-30, rows sum to 1 ± 1e-5
 *  swiglu     |y − ref| ≤ 16ε·|ref| + 1e-30
 *  geglu      |y − ref| ≤ (16 + 4·|2z|)·ε·|ref| + 1e-30 (z = exp's argument); gelu_tanh
 *             alone the same with u = 1
 *  layernorm  |y − ref| ≤ 16ε·(|x̂·w| + |b|)
 *  avg_pool2d |y − ref| ≤ (k² + 2)·ε·mean|x| over the window
 *  dense_attention |y − ref| ≤ 8(√n + √d)·ε·(Σ p|v| + 2)
 */
#include "testutil.h"

#include "cpu/cpu_kernels.h"
#include "error.h"
#include "kernels.h"
#include "rng.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    return ifd_rng_mix64(rng_state += 0x9e3779b97f4a7c15ull); /* SplitMix64 */
}

/* Uniform in [lo, hi). */
static float rnd(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

static float *rnd_array(int64_t n, float lo, float hi)
{
    float *a = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    ck_assert_ptr_nonnull(a);
    for (int64_t i = 0; i < n; i++)
        a[i] = rnd(lo, hi);
    return a;
}

static float *nan_array(int64_t n)
{
    float *a = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    ck_assert_ptr_nonnull(a);
    for (int64_t i = 0; i < n; i++)
        a[i] = NAN;
    return a;
}

/* ---- dtype ------------------------------------------------------------------ */

START_TEST(test_dtype_size)
{
    ck_assert_int_eq(ifd_dtype_size(IFD_DTYPE_F32), 4);
    ck_assert_int_eq(ifd_dtype_size(IFD_DTYPE_F16), 2);
    ck_assert_int_eq(ifd_dtype_size(IFD_DTYPE_BF16), 2);
    ck_assert_int_lt(ifd_dtype_size((ifd_dtype_t)7), 0);
}
END_TEST

/* ---- matmul ----------------------------------------------------------------- */

static const int mm_shapes[][3] = {
    /* m, n, k */
    {1, 1, 1},    {1, 7, 3},      {1, 33, 17},    {1, 97, 576},    {2, 45, 129},
    {3, 17, 33},  {4, 64, 64},    {5, 31, 385},   {7, 100, 16},    {11, 13, 1000},
    {13, 45, 67}, {16, 64, 64},   {17, 1, 31},    {19, 33, 17},    {23, 129, 800},
    {31, 47, 9},  {37, 100, 385}, {64, 192, 576}, {100, 61, 1536}, {131, 67, 5},
};

static double mm_worst; /* max |y − ref| / Σ|x·w| seen, and its k */
static int mm_worst_k;

static void mm_case(int m, int n, int k, ifd_threadpool_t *tp)
{
    float *x = rnd_array((int64_t)m * k, -1, 1);
    float *w = rnd_array((int64_t)n * k, -1, 1);
    float *y = nan_array((int64_t)m * n);
    float *y1 = nan_array((int64_t)m * n);
    float *yp = nan_array((int64_t)m * n);
    ck_assert_int_eq(ifd_cpu_matmul_f32(y, x, w, m, n, k, tp), 0);
    ck_assert_int_eq(ifd_cpu_matmul_f32(y1, x, w, m, n, k, NULL), 0);
    /* The pre-packed API (what the CPU backend uses) on the same data. */
    const int64_t nf = ifd_cpu_matmul_packed_floats(n, k);
    ck_assert_int_ge(nf, (int64_t)n * k);
    float *wp = aligned_alloc(64, ((size_t)nf * sizeof(float) + 63) / 64 * 64);
    ck_assert_ptr_nonnull(wp);
    ck_assert_int_eq(ifd_cpu_matmul_pack(wp, w, n, k), 0);
    ck_assert_int_eq(ifd_cpu_matmul_packed(yp, x, wp, m, n, k, tp), 0);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double t = (double)x[(int64_t)i * k + p] * w[(int64_t)j * k + p];
                ref += t;
                mag += fabs(t);
            }
            const float got = y[(int64_t)i * n + j], gotp = yp[(int64_t)i * n + j];
            const double tol = 4.0 * sqrt((double)k) * FLT_EPSILON * mag + 1e-30;
            IFD_CHECK(fabs(got - ref) <= tol, "matmul m=%d n=%d k=%d y[%d,%d]=%.9g ref %.9g", m, n,
                      k, i, j, got, ref);
            IFD_CHECK(fabs(gotp - ref) <= tol,
                      "matmul_packed m=%d n=%d k=%d y[%d,%d]=%.9g ref %.9g", m, n, k, i, j, gotp,
                      ref);
            if (mag > 0 && fabs(gotp - ref) / mag > worst)
                worst = fabs(gotp - ref) / mag;
            if (mag > 0 && fabs(got - ref) / mag > worst)
                worst = fabs(got - ref) / mag;
        }
    /* The thread count changes who computes a row, never how. */
    ck_assert_msg(memcmp(y, y1, sizeof(float) * (size_t)m * n) == 0,
                  "matmul m=%d n=%d k=%d differs between the pool and one thread", m, n, k);
    free(x), free(w), free(y), free(y1), free(yp), free(wp);
    if (worst > mm_worst)
        mm_worst = worst, mm_worst_k = k;
}

START_TEST(test_matmul_shapes)
{
    rng_state = 1;
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 3), 0);
    for (size_t s = 0; s < sizeof mm_shapes / sizeof mm_shapes[0]; s++)
        mm_case(mm_shapes[s][0], mm_shapes[s][1], mm_shapes[s][2], tp);
    ifd_threadpool_destroy(tp);
    printf("matmul: max |y - ref| / sum|x w| = %.3g (k = %d; tolerance 4 sqrt(k) eps = %.3g)\n",
           mm_worst, mm_worst_k, 4 * sqrt((double)mm_worst_k) * FLT_EPSILON);
}
END_TEST

/* The model's shapes: decode (m = 1) and a prefill chunk for each projection. */
START_TEST(test_matmul_model_shapes)
{
    rng_state = 2;
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 2), 0);
    mm_case(1, 576, 576, tp);
    mm_case(1, 1536, 576, tp);
    mm_case(1, 576, 1536, tp);
    mm_case(1, 4099, 576, tp);
    mm_case(53, 192, 576, tp);
    mm_case(29, 1536, 576, tp);
    mm_case(29, 576, 1536, tp);
    ifd_threadpool_destroy(tp);
}
END_TEST

START_TEST(test_matmul_edges)
{
    float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 1, 1, 1, 1, 1}, y[4] = {NAN, NAN, NAN, NAN};
    ck_assert_int_eq(ifd_cpu_matmul_f32(y, x, w, 2, 2, 0, NULL), 0); /* k = 0: zeros */
    for (int i = 0; i < 4; i++)
        IFD_TASSERT(y[i] == 0.0f);
    ck_assert_int_eq(ifd_cpu_matmul_f32(y, x, w, 0, 2, 3, NULL), 0);
    ck_assert_int_eq(ifd_cpu_matmul_f32(y, x, w, 2, 0, 3, NULL), 0);
    ck_assert_int_eq(ifd_cpu_matmul_f32(y, x, w, -1, 2, 3, NULL), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_matmul_f32(y, x, w, 2, 2, -3, NULL), IFD_EINVAL);
    ck_assert_int_lt(ifd_cpu_matmul_packed_floats(0, 3), 0);
    ck_assert_int_eq(ifd_cpu_matmul_packed(y, x, NULL, 2, 2, 3, NULL), IFD_EINVAL);
    /* Exact small integers: [1 2 3; 4 5 6] · [1 1 1; 1 1 1]ᵀ. */
    ck_assert_int_eq(ifd_cpu_matmul_f32(y, x, w, 2, 2, 3, NULL), 0);
    ck_assert(y[0] == 6 && y[1] == 6 && y[2] == 15 && y[3] == 15);
}
END_TEST

/* ---- rmsnorm ---------------------------------------------------------------- */

START_TEST(test_rmsnorm)
{
    static const int shapes[][2] = {{1, 1}, {3, 7}, {2, 16}, {5, 33}, {2, 576}, {4, 1001}};
    rng_state = 3;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rows = shapes[s][0], dim = shapes[s][1];
        const float eps = s % 2 ? 1e-5f : 1e-6f;
        float *x = rnd_array((int64_t)rows * dim, -3, 3);
        float *w = rnd_array(dim, -2, 2);
        float *y = nan_array((int64_t)rows * dim);
        float *xi = malloc(sizeof(float) * (size_t)rows * dim);
        memcpy(xi, x, sizeof(float) * (size_t)rows * dim);
        ck_assert_int_eq(ifd_cpu_rmsnorm(y, x, w, rows, dim, eps), 0);
        ck_assert_int_eq(ifd_cpu_rmsnorm(xi, xi, w, rows, dim, eps), 0); /* in place */
        for (int r = 0; r < rows; r++) {
            double ss = 0;
            for (int i = 0; i < dim; i++)
                ss += (double)x[r * dim + i] * x[r * dim + i];
            const double sc = 1.0 / sqrt(ss / dim + eps);
            for (int i = 0; i < dim; i++) {
                const double ref = x[r * dim + i] * sc * w[i];
                const float got = y[r * dim + i];
                IFD_CHECK(fabs(got - ref) <= 8 * FLT_EPSILON * fabs(ref),
                          "rmsnorm %dx%d [%d,%d] %.9g ref %.9g", rows, dim, r, i, got, ref);
                IFD_TASSERT(xi[r * dim + i] == got);
            }
        }
        free(x), free(w), free(y), free(xi);
    }
    float one = 1;
    ck_assert_int_eq(ifd_cpu_rmsnorm(&one, &one, &one, 1, 0, 1e-5f), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_rmsnorm(&one, &one, &one, 1, 1, -1.0f), IFD_EINVAL);
}
END_TEST

/* ---- rope ------------------------------------------------------------------- */

typedef struct {
    int n_tok, n_heads, head_dim, n_rot;
    float base, freq_scale;
    int use_ff;
    ifd_rope_mode_t mode;
} rope_case_t;

static void rope_case(const rope_case_t *rc)
{
    static const int32_t positions[] = {0, 1, 2, 7, 31, 100, 511, 4095, 8191, 100000};
    const int n = rc->n_tok * rc->n_heads * rc->head_dim, half = rc->n_rot / 2;
    float *x = rnd_array(n, -2, 2);
    float *y = malloc(sizeof(float) * (size_t)n);
    float *yg = malloc(sizeof(float) * (size_t)n);
    float *ff = rnd_array(half, 1, 32);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)rc->n_tok);
    for (int t = 0; t < rc->n_tok; t++)
        pos[t] = positions[(t * 7 + 3) % (int)(sizeof positions / sizeof positions[0])];
    memcpy(y, x, sizeof(float) * (size_t)n);
    memcpy(yg, x, sizeof(float) * (size_t)n);
    const float *ffp = rc->use_ff ? ff : NULL;
    ck_assert_int_eq(ifd_cpu_rope(y, pos, rc->n_tok, rc->n_heads, rc->head_dim, rc->n_rot, rc->base,
                                  rc->freq_scale, ffp, rc->mode),
                     0);
    /* The same, through llama.cpp's recipe (MODEL-FORMATS.md §2.4), in float. */
    const float ts = powf(rc->base, -2.0f / (float)rc->n_rot);
    for (int t = 0; t < rc->n_tok; t++) {
        float theta = (float)pos[t];
        for (int i = 0; i < half; i++) {
            const float th = rc->freq_scale * (theta / (ffp ? ffp[i] : 1.0f));
            const float c = cosf(th), s = sinf(th);
            for (int h = 0; h < rc->n_heads; h++) {
                float *v = yg + ((int64_t)t * rc->n_heads + h) * rc->head_dim;
                const int ia = rc->mode == IFD_ROPE_NORM ? 2 * i : i;
                const int ib = rc->mode == IFD_ROPE_NORM ? 2 * i + 1 : i + half;
                const float a = v[ia], b = v[ib];
                v[ia] = a * c - b * s;
                v[ib] = a * s + b * c;
            }
            theta *= ts;
        }
    }
    ck_assert_msg(memcmp(y, yg, sizeof(float) * (size_t)n) == 0,
                  "rope differs from the llama.cpp angle recipe");
    /* And against the textbook formula in double. */
    for (int t = 0; t < rc->n_tok; t++)
        for (int h = 0; h < rc->n_heads; h++) {
            const int64_t o = ((int64_t)t * rc->n_heads + h) * rc->head_dim;
            for (int i = 0; i < half; i++) {
                const double th = pos[t] * (double)rc->freq_scale *
                                  pow(rc->base, -2.0 * i / rc->n_rot) / (ffp ? ffp[i] : 1.0);
                const int ia = rc->mode == IFD_ROPE_NORM ? 2 * i : i;
                const int ib = rc->mode == IFD_ROPE_NORM ? 2 * i + 1 : i + half;
                const double a = x[o + ia], b = x[o + ib];
                const double ra = a * cos(th) - b * sin(th), rb = a * sin(th) + b * cos(th);
                const double tol = (fabs(a) + fabs(b)) * (fabs(th) * (i + 4) + 8) * FLT_EPSILON;
                IFD_CHECK(fabs(y[o + ia] - ra) <= tol && fabs(y[o + ib] - rb) <= tol,
                          "rope t=%d pos=%d h=%d i=%d: (%.9g, %.9g) ref (%.9g, %.9g)", t, pos[t], h,
                          i, y[o + ia], y[o + ib], ra, rb);
            }
            for (int d = rc->n_rot; d < rc->head_dim; d++)
                IFD_TASSERT(y[o + d] == x[o + d]); /* unrotated tail untouched */
        }
    free(x), free(y), free(yg), free(ff), free(pos);
}

START_TEST(test_rope)
{
    static const rope_case_t cases[] = {
        {3, 2, 64, 64, 100000.0f, 1.0f, 0, IFD_ROPE_NORM},    /* SmolLM2 */
        {10, 3, 64, 64, 500000.0f, 1.0f, 1, IFD_ROPE_NORM},   /* Llama 3.2 + rope_freqs */
        {5, 3, 10, 6, 10000.0f, 1.0f, 0, IFD_ROPE_NORM},      /* partial rotation */
        {4, 2, 16, 16, 10000.0f, 0.25f, 0, IFD_ROPE_NEOX},    /* linear scaling */
        {7, 1, 256, 256, 1000000.0f, 1.0f, 0, IFD_ROPE_NEOX}, /* Gemma 3 */
        {2, 5, 18, 14, 10000.0f, 0.5f, 1, IFD_ROPE_NEOX},
        {1, 1, 2, 2, 10000.0f, 1.0f, 0, IFD_ROPE_NORM},
    };
    rng_state = 4;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        rope_case(&cases[i]);
    float x[8] = {0};
    int32_t p = 0;
    ck_assert_int_eq(ifd_cpu_rope(x, &p, 1, 1, 8, 7, 1e4f, 1, NULL, IFD_ROPE_NORM), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_rope(x, &p, 1, 1, 8, 10, 1e4f, 1, NULL, IFD_ROPE_NORM), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_rope(x, &p, 1, 1, 8, 8, 1e4f, 1, NULL, (ifd_rope_mode_t)1),
                     IFD_ENOTSUP);
}
END_TEST

/* ---- softmax ---------------------------------------------------------------- */

START_TEST(test_softmax)
{
    static const int shapes[][2] = {{1, 1}, {3, 7}, {2, 16}, {2, 17}, {4, 1000}, {1, 49152}};
    rng_state = 5;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rows = shapes[s][0], n = shapes[s][1];
        float *x = rnd_array((int64_t)rows * n, -40, 40);
        for (int r = 0; r < rows && n > 3; r++)
            x[(int64_t)r * n + 1] = x[(int64_t)r * n + n - 1] = -INFINITY; /* masked: exactly 0 */
        float *y = malloc(sizeof(float) * (size_t)rows * n);
        memcpy(y, x, sizeof(float) * (size_t)rows * n);
        ck_assert_int_eq(ifd_cpu_softmax(y, rows, n), 0);
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (int64_t)r * n, *yr = y + (int64_t)r * n;
            double mx = -INFINITY, sum = 0, ysum = 0;
            for (int i = 0; i < n; i++)
                mx = xr[i] > mx ? xr[i] : mx;
            for (int i = 0; i < n; i++)
                sum += exp((double)xr[i] - mx);
            for (int i = 0; i < n; i++) {
                const double ref = exp((double)xr[i] - mx) / sum;
                /* x − max is rounded in f32: relative error |x − max|·ε/2 in exp. */
                const double d = isinf(xr[i]) ? 0 : fabs((double)xr[i] - mx);
                const double tol = (16 + d) * FLT_EPSILON * ref + 1e-30;
                IFD_CHECK(fabs(yr[i] - ref) <= tol, "softmax %dx%d [%d,%d] %.9g ref %.9g", rows, n,
                          r, i, yr[i], ref);
                ysum += yr[i];
            }
            IFD_TASSERT(fabs(ysum - 1) <= 1e-5);
            if (n > 3)
                IFD_TASSERT(yr[1] == 0.0f && yr[n - 1] == 0.0f);
        }
        free(x), free(y);
    }
    float v = 0;
    ck_assert_int_eq(ifd_cpu_softmax(&v, 1, 0), IFD_EINVAL);
}
END_TEST

/* ---- GLU activations -------------------------------------------------------- */

static void glu_case(int64_t n, int gelu)
{
    float *g = rnd_array(n, -20, 20), *u = rnd_array(n, -3, 3);
    static const float special[] = {0.0f, -0.0f, 1e-20f, -1e-20f, 100.0f, -100.0f, 9.5f, -9.5f};
    for (int64_t i = 0; i < n && i < 8; i++)
        g[i * 3 % n] = special[i];
    float *y = nan_array(n);
    ck_assert_int_eq(gelu ? ifd_cpu_geglu_tanh(y, g, u, n) : ifd_cpu_swiglu(y, g, u, n), 0);
    float *plain = nan_array(n); /* gelu_tanh alone: geglu with u = 1 */
    ck_assert_int_eq(ifd_cpu_gelu_tanh(plain, g, n), 0);
    for (int64_t i = 0; i < n; i++) {
        const double x = g[i], z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        const double ref = x / (1 + exp(-2 * z));
        IFD_CHECK(fabs(plain[i] - ref) <= (16 + 4 * fabs(2 * z)) * FLT_EPSILON * fabs(ref) + 1e-30,
                  "gelu_tanh n=%lld [%lld] x=%.9g: %.9g ref %.9g", (long long)n, (long long)i, g[i],
                  plain[i], ref);
    }
    free(plain);
    for (int64_t i = 0; i < n; i++) {
        const double x = g[i];
        double ref, tol;
        if (gelu) {
            const double z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            /* 0.5·x·(1 + tanh z), written as x / (1 + e^−2z) (the same function)
             * because 1 + tanh z cancels completely for z ≲ −19 even in double. */
            ref = x / (1 + exp(-2 * z)) * u[i];
            tol = (16 + 4 * fabs(2 * z)) * FLT_EPSILON * fabs(ref) + 1e-30;
        } else {
            ref = x / (1 + exp(-x)) * u[i];
            tol = 16 * FLT_EPSILON * fabs(ref) + 1e-30;
        }
        IFD_CHECK(fabs(y[i] - ref) <= tol, "%s n=%lld [%lld] g=%.9g u=%.9g: %.9g ref %.9g",
                  gelu ? "geglu" : "swiglu", (long long)n, (long long)i, g[i], u[i], y[i], ref);
    }
    /* In place (out == gate). */
    ck_assert_int_eq(gelu ? ifd_cpu_geglu_tanh(g, g, u, n) : ifd_cpu_swiglu(g, g, u, n), 0);
    ck_assert(memcmp(g, y, sizeof(float) * (size_t)n) == 0);
    free(g), free(u), free(y);
}

START_TEST(test_glu)
{
    static const int64_t sizes[] = {1, 7, 8, 16, 17, 33, 1001, 1536};
    rng_state = 6;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        glu_case(sizes[s], 0);
        glu_case(sizes[s], 1);
    }
    float v = 0;
    ck_assert_int_eq(ifd_cpu_swiglu(&v, &v, &v, 0), 0);
    ck_assert_int_eq(ifd_cpu_swiglu(&v, &v, &v, -1), IFD_EINVAL);
}
END_TEST

/* ---- vision: layernorm, avg_pool2d, dense attention ------------------------ */

/* |y − ref| ≤ 16ε·(|x − mean|·rstd·|w| + |b|) + 1e-6·ε: float rounding of
 * each step after a double mean/variance. */
START_TEST(test_layernorm)
{
    static const int dims[] = {1, 7, 64, 97, 1152};
    rng_state = 28;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        const int dim = dims[d], rows = 5;
        float *x = rnd_array((int64_t)rows * dim, -4, 6), *w = rnd_array(dim, 0.5f, 1.5f);
        float *b = rnd_array(dim, -0.5f, 0.5f), *y = nan_array((int64_t)rows * dim);
        ck_assert_int_eq(ifd_cpu_layernorm(y, x, w, b, rows, dim, 1e-6f), 0);
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (int64_t)r * dim;
            double mean = 0, var = 0;
            for (int i = 0; i < dim; i++)
                mean += xr[i];
            mean /= dim;
            for (int i = 0; i < dim; i++)
                var += (xr[i] - mean) * (xr[i] - mean);
            const double rstd = 1 / sqrt(var / dim + 1e-6);
            for (int i = 0; i < dim; i++) {
                const double ref = (xr[i] - mean) * rstd * w[i] + b[i];
                const double tol =
                    16 * FLT_EPSILON * (fabs((xr[i] - mean) * rstd * w[i]) + fabs(b[i])) +
                    1e-6 * FLT_EPSILON;
                IFD_CHECK(fabs(y[(int64_t)r * dim + i] - ref) <= tol,
                          "layernorm dim=%d [%d,%d]: %.9g ref %.9g", dim, r, i,
                          y[(int64_t)r * dim + i], ref);
            }
        }
        /* in place, and no bias = zero bias */
        float *z = calloc((size_t)dim, sizeof(float)), *y2 = nan_array((int64_t)rows * dim);
        ck_assert_int_eq(ifd_cpu_layernorm(y2, x, w, z, rows, dim, 1e-6f), 0);
        ck_assert_int_eq(ifd_cpu_layernorm(x, x, w, NULL, rows, dim, 1e-6f), 0);
        ck_assert(memcmp(x, y2, sizeof(float) * (size_t)rows * dim) == 0);
        free(x), free(w), free(b), free(y), free(z), free(y2);
    }
    float v = 1;
    ck_assert_int_eq(ifd_cpu_layernorm(&v, &v, &v, NULL, 1, 0, 1e-6f), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_layernorm(&v, &v, &v, NULL, 1, 1, -1), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_layernorm(&v, &v, &v, NULL, 1, 1, NAN), IFD_EINVAL);
}
END_TEST

/* |y − ref| ≤ (k² + 2)·ε·mean|x| of the window (float sums of k² terms). */
START_TEST(test_avg_pool2d)
{
    static const int shapes[][3] = {{1, 1, 1}, {4, 2, 3},  {8, 2, 64},
                                    {8, 4, 5}, {64, 4, 7}, {6, 3, 2}};
    rng_state = 29;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int side = shapes[t][0], k = shapes[t][1], c = shapes[t][2], ps = side / k;
        float *x = rnd_array((int64_t)side * side * c, -3, 3), *y = nan_array((int64_t)ps * ps * c);
        ck_assert_int_eq(ifd_cpu_avg_pool2d(y, x, side, side, k, c), 0);
        for (int pi = 0; pi < ps; pi++)
            for (int pj = 0; pj < ps; pj++)
                for (int ch = 0; ch < c; ch++) {
                    double sum = 0, mag = 0;
                    for (int a = 0; a < k; a++)
                        for (int b = 0; b < k; b++) {
                            const float v = x[((int64_t)(pi * k + a) * side + pj * k + b) * c + ch];
                            sum += v, mag += fabs(v);
                        }
                    const double ref = sum / (k * k), got = y[((int64_t)pi * ps + pj) * c + ch];
                    IFD_CHECK(fabs(got - ref) <= (k * k + 2) * FLT_EPSILON * mag / (k * k) + 1e-30,
                              "avg_pool2d side=%d k=%d c=%d [%d,%d,%d]: %.9g ref %.9g", side, k, c,
                              pi, pj, ch, got, ref);
                }
        /* every band of pooled rows [b, ps) alone: the whole's rows, bit for bit */
        for (int b = 0; b < ps; b++) {
            float *band = nan_array((int64_t)(ps - b) * ps * c);
            ck_assert_int_eq(
                ifd_cpu_avg_pool2d(band, x + (int64_t)b * k * side * c, (ps - b) * k, side, k, c),
                0);
            ck_assert_msg(memcmp(band, y + (int64_t)b * ps * c,
                                 sizeof(float) * (size_t)(ps - b) * ps * c) == 0,
                          "avg_pool2d side=%d k=%d: the band from %d differs", side, k, b);
            free(band);
        }
        free(x), free(y);
    }
    float v = 0;
    ck_assert_int_eq(ifd_cpu_avg_pool2d(&v, &v, 5, 5, 2, 1), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_avg_pool2d(&v, &v, 4, 4, 0, 1), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_avg_pool2d(&v, &v, 3, 4, 2, 1), IFD_EINVAL); /* rows % k */
    ck_assert_int_eq(ifd_cpu_avg_pool2d(&v, &v, 0, 4, 2, 1), IFD_EINVAL);
}
END_TEST

typedef int (*dense_fn)(float *, const float *, int, int, int, int, int, float, ifd_threadpool_t *);

/* Against a double reference: |y − ref| ≤ 8·(√n + √d)·ε·Σ_u p_u·|v_u| + 1e-6·ε·max|v|
 * (two f32 matmuls and a softmax in between). Sizes cross the 256-row block. */
static void dense_vs_reference(dense_fn fn, const char *name)
{
    static const int shapes[][3] = {{1, 1, 4},    {5, 2, 8},    {16, 4, 16}, {64, 4, 16},
                                    {257, 3, 72}, {300, 2, 33}, {600, 2, 16}};
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 2), 0);
    rng_state = 30;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int n = shapes[t][0], H = shapes[t][1], D = shapes[t][2];
        const int64_t width = (int64_t)H * D;
        const float scale = 1.0f / sqrtf((float)D);
        float *qkv = rnd_array(n * 3 * width, -2, 2), *y = nan_array(n * width);
        ck_assert_int_eq(fn(y, qkv, n, 0, n, H, D, scale, tp), 0);
        double *p = malloc(sizeof(double) * (size_t)n);
        ck_assert_ptr_nonnull(p);
        for (int i = 0; i < n; i++)
            for (int h = 0; h < H; h++) {
                const float *q = qkv + (int64_t)i * 3 * width + (int64_t)h * D;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u < n; u++) {
                    const float *kk = qkv + (int64_t)u * 3 * width + width + (int64_t)h * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += (double)q[d] * kk[d];
                    p[u] = dot * scale;
                    mx = p[u] > mx ? p[u] : mx;
                }
                for (int u = 0; u < n; u++)
                    sum += (p[u] = exp(p[u] - mx));
                for (int d = 0; d < D; d++) {
                    double ref = 0, mag = 0;
                    for (int u = 0; u < n; u++) {
                        const float v =
                            qkv[(int64_t)u * 3 * width + 2 * width + (int64_t)h * D + d];
                        ref += p[u] / sum * v, mag += p[u] / sum * fabs(v);
                    }
                    const double got = y[(int64_t)i * width + (int64_t)h * D + d];
                    const double tol =
                        8 * (sqrt(n) + sqrt(D)) * FLT_EPSILON * (mag + 2) + 1e-6 * FLT_EPSILON;
                    IFD_CHECK(fabs(got - ref) <= tol, "%s n=%d H=%d D=%d [%d,%d,%d]: %.9g ref %.9g",
                              name, n, H, D, i, h, d, got, ref);
                }
            }
        free(qkv), free(y), free(p);
    }
    float v = 0;
    ck_assert_int_eq(fn(&v, &v, 0, 0, 0, 1, 1, 1, tp), IFD_EINVAL);
    ck_assert_int_eq(fn(&v, &v, 4, 3, 2, 1, 1, 1, tp), IFD_EINVAL);
    ifd_threadpool_destroy(tp);
}

START_TEST(test_dense_attention)
{
    dense_vs_reference(ifd_cpu_dense_attention, "dense_attention");
}
END_TEST

/* Query-row ranges that cover [0, n) give the whole call's bits (the vision
 * encode's row-split steps rest on it), and so does one thread; rows outside
 * a range are untouched;
 * a range outside [0, n] is refused. Ranges cross the 256-row block and
 * the packed kernels' 16-row panels at odd places. */
START_TEST(test_dense_attention_ranges)
{
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 2), 0);
    const int n = 300, H = 2, D = 24, cuts[] = {0, 1, 7, 40, 263, 299, 300};
    const int64_t width = (int64_t)H * D;
    float *qkv = rnd_array(n * 3 * width, -2, 2), *whole = nan_array(n * width);
    float *parts = nan_array(n * width);
    ck_assert_int_eq(ifd_cpu_dense_attention(whole, qkv, n, 0, n, H, D, 0.3f, tp), 0);
    for (size_t i = 0; i + 1 < sizeof cuts / sizeof *cuts; i++) {
        ck_assert_int_eq(
            ifd_cpu_dense_attention(parts, qkv, n, cuts[i], cuts[i + 1], H, D, 0.3f, tp), 0);
        for (int64_t j = (int64_t)cuts[i + 1] * width; j < n * width; j++)
            ck_assert_msg(isnan(parts[j]), "row %lld written before its range",
                          (long long)(j / width));
    }
    ck_assert_int_eq(memcmp(whole, parts, sizeof(float) * (size_t)(n * width)), 0);
    /* K and V packed once, then the pieces (the CPU backend's way): the same bits */
    const int64_t kvf = ifd_cpu_dense_kv_floats(n, H, D);
    ck_assert_int_gt(kvf, 0);
    float *kv = aligned_alloc(64, (size_t)(kvf * 4 + 63) / 64 * 64);
    ck_assert_ptr_nonnull(kv);
    ck_assert_int_eq(ifd_cpu_dense_kv_pack(kv, qkv, n, H, D, tp), 0);
    float *pieces = nan_array(n * width);
    for (size_t i = 0; i + 1 < sizeof cuts / sizeof *cuts; i++)
        ck_assert_int_eq(
            ifd_cpu_dense_attention_kv(pieces, qkv, kv, n, cuts[i], cuts[i + 1], H, D, 0.3f, tp),
            0);
    ck_assert_int_eq(memcmp(whole, pieces, sizeof(float) * (size_t)(n * width)), 0);
    ck_assert_int_eq(ifd_cpu_dense_kv_pack(kv + 1, qkv, n, H, D, tp), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dense_attention_kv(pieces, qkv, NULL, n, 0, n, H, D, 0.3f, tp),
                     IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dense_attention_kv(pieces, qkv, kv, n, 0, n + 1, H, D, 0.3f, tp),
                     IFD_EINVAL);
    free(kv), free(pieces);
    /* one thread: the same bits as two (the items are spread over threads) */
    ck_assert_int_eq(ifd_cpu_dense_attention(parts, qkv, n, 0, n, H, D, 0.3f, NULL), 0);
    ck_assert_int_eq(memcmp(whole, parts, sizeof(float) * (size_t)(n * width)), 0);
    ck_assert_int_eq(ifd_cpu_dense_attention(parts, qkv, n, 5, 5, H, D, 0.3f, tp), 0);
    ck_assert_int_eq(ifd_cpu_dense_attention(parts, qkv, n, 5, 4, H, D, 0.3f, tp), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dense_attention(parts, qkv, n, -1, 4, H, D, 0.3f, tp), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dense_attention(parts, qkv, n, 0, n + 1, H, D, 0.3f, tp), IFD_EINVAL);
    free(qkv), free(whole), free(parts);
    ifd_threadpool_destroy(tp);
}
END_TEST

static Suite *cpu_kernels_suite(void)
{
    Suite *s = suite_create("cpu_kernels");
    ifd_test_case(s, "core", 120,
                  IFD_TESTS(test_dtype_size, test_matmul_shapes, test_matmul_model_shapes,
                            test_matmul_edges, test_rmsnorm, test_rope, test_softmax, test_glu,
                            test_layernorm, test_avg_pool2d, test_dense_attention,
                            test_dense_attention_ranges));
    return s;
}

/* Skips when $INFERD_CPU asks for a path this CPU does not have. */
static void check_isa_request(void)
{
    const char *cap = getenv("INFERD_CPU");
    const ifd_cpu_features_t *f = ifd_cpu_features();
    if (cap && strcmp(cap, "avx2") == 0 && !(f->avx2 && f->fma && f->f16c))
        ifd_test_skip("INFERD_CPU=avx2 but this CPU has no AVX2/FMA/F16C");
    printf("cpu kernels path: %s (INFERD_CPU=%s)\n", ifd_cpu_isa_name(), cap ? cap : "");
}

int main(void)
{
    check_isa_request();
    return ifd_test_run(cpu_kernels_suite());
}
