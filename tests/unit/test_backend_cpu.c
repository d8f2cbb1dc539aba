/*
 * test_backend_cpu.c — the CPU backend's fused ops (backend.h) against the
 * plain kernels they stand for, on seeded random data of odd shapes:
 *  - load_proj of three parts of different source types (F32, F16, Q8_0)
 *    with biases on some parts = the parts' plain matmuls (ifd_cpu_matmul_f32
 *    of the dequantized parts) + bias; tolerance 1e-5 relative L2 (packed
 *    and plain matmuls may sum in another order); and each row of a
 *    7-row proj equals the 1-row proj of that row bit for bit (batch
 *    invariance);
 *  - rmsnorm with a delta = residual add + ifd_cpu_rmsnorm, bit for bit,
 *    residual updated; NORM_ADD1 weights act as 1 + w;
 *  - rope_kv = slicing QKV + per-head RMSNorm + ifd_cpu_rope +
 *    ifd_cpu_kv_write, bit for bit (pool and q);
 *  - glu on a fused gate|up = ifd_cpu_swiglu / geglu of the halves, bit for
 *    bit; gather_rows;
 *  - can_load: a known quantized type yes, I8 no.
 */
#include "testutil.h"

#include "error.h"
#include "worker/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x1234567;

static float frand(void)
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

static ifd_backend_t *mk(void)
{
    ifd_backend_t *be;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 2), 0);
    return be;
}

static void act(ifd_backend_t *be, ifd_act_t *a, int64_t rows, int64_t cols)
{
    ck_assert_int_eq(be->ops->act_alloc(be, a, IFD_DTYPE_F32, rows, cols), 0);
}

START_TEST(test_proj_parts_types_bias)
{
    ifd_backend_t *be = mk();
    enum { K = 64, M = 7 };
    const int64_t rows[3] = {37, 16, 29};
    const ifd_ggml_type_t types[3] = {IFD_GGML_F32, IFD_GGML_F16, IFD_GGML_Q8_0};
    void *raw[3];
    float *deq[3], *bias[3] = {NULL, NULL, NULL};
    ifd_weight_src_t w[3], b[3];
    const ifd_weight_src_t *bp[3];
    for (int i = 0; i < 3; i++) {
        size_t n = (size_t)(rows[i] * K);
        deq[i] = malloc(n * 4);
        if (types[i] == IFD_GGML_F32) {
            raw[i] = malloc(n * 4);
            fill(raw[i], n, 1);
        } else if (types[i] == IFD_GGML_F16) {
            uint16_t *h = malloc(n * 2);
            for (size_t j = 0; j < n; j++)
                h[j] = ifd_f32_to_f16(frand());
            raw[i] = h;
        } else {
            uint8_t *q = malloc(n / 32 * 34);
            for (size_t blk = 0; blk < n / 32; blk++) {
                uint16_t d = ifd_f32_to_f16(0.01f);
                memcpy(q + blk * 34, &d, 2);
                for (int j = 0; j < 32; j++)
                    q[blk * 34 + 2 + j] = (uint8_t)(rs = rs * 6364136223846793005ull + 1, rs >> 56);
            }
            raw[i] = q;
        }
        ck_assert_int_eq(ifd_cpu_dequantize(deq[i], raw[i], types[i], (int64_t)n), 0);
        w[i] = (ifd_weight_src_t){"part", raw[i], types[i], rows[i], K};
        b[i] = (ifd_weight_src_t){"bias", NULL, IFD_GGML_F32, 1, rows[i]};
        if (i != 1) {
            bias[i] = malloc((size_t)rows[i] * 4);
            fill(bias[i], (size_t)rows[i], 1);
            b[i].data = bias[i];
        }
        bp[i] = &b[i];
    }
    ifd_proj_t p;
    ck_assert_int_eq(be->ops->load_proj(be, &p, w, bp, 3), 0);
    const int64_t R = rows[0] + rows[1] + rows[2];
    ck_assert_int_eq(p.rows, R);
    ck_assert_int_eq(p.cols, K);
    ifd_act_t x, y, y1, x1;
    act(be, &x, M, K), act(be, &y, M, R), act(be, &x1, 1, K), act(be, &y1, 1, R);
    fill(x.data, M * K, 2);
    ck_assert_int_eq(be->ops->proj(be, &y, &x, &p, M), 0);
    double num = 0, den = 0;
    int64_t c0 = 0;
    float *ref = malloc((size_t)(M * R) * 4);
    for (int i = 0; i < 3; i++) {
        float *yi = malloc((size_t)(M * rows[i]) * 4);
        ck_assert_int_eq(ifd_cpu_matmul_f32(yi, x.data, deq[i], M, (int)rows[i], K, NULL), 0);
        for (int r = 0; r < M; r++)
            for (int64_t j = 0; j < rows[i]; j++)
                ref[r * R + c0 + j] = yi[r * rows[i] + j] + (bias[i] ? bias[i][j] : 0.0f);
        c0 += rows[i];
        free(yi);
    }
    for (int64_t j = 0; j < M * R; j++) {
        double d = (double)((float *)y.data)[j] - ref[j];
        num += d * d;
        den += (double)ref[j] * ref[j];
    }
    ck_assert_msg(sqrt(num / den) < 1e-5, "rel L2 %g", sqrt(num / den));
    for (int r = 0; r < M; r++) {
        memcpy(x1.data, (float *)x.data + r * K, K * 4);
        ck_assert_int_eq(be->ops->proj(be, &y1, &x1, &p, 1), 0);
        ck_assert(memcmp(y1.data, (float *)y.data + r * R, (size_t)R * 4) == 0);
    }
    be->ops->proj_free(be, &p);
    ifd_act_t *as[] = {&x, &y, &x1, &y1};
    for (int i = 0; i < 4; i++)
        be->ops->act_free(be, as[i]);
    for (int i = 0; i < 3; i++)
        free(raw[i]), free(deq[i]), free(bias[i]);
    free(ref);
    be->ops->destroy(be);
}
END_TEST

START_TEST(test_rmsnorm_fused)
{
    ifd_backend_t *be = mk();
    enum { ROWS = 5, D = 83 };
    float wv[D];
    fill(wv, D, 0.5f);
    ifd_weight_src_t src = {"norm", wv, IFD_GGML_F32, 1, D};
    ifd_weight_t w, w1;
    ck_assert_int_eq(be->ops->load_weight(be, &w, &src, IFD_WEIGHT_NORM), 0);
    ck_assert_int_eq(be->ops->load_weight(be, &w1, &src, IFD_WEIGHT_NORM_ADD1), 0);
    ifd_act_t r, d, y;
    act(be, &r, ROWS, D), act(be, &d, ROWS, D), act(be, &y, ROWS, D);
    fill(r.data, ROWS * D, 3), fill(d.data, ROWS * D, 1);
    float h[ROWS * D], ref[ROWS * D], w1v[D];
    for (int i = 0; i < ROWS * D; i++)
        h[i] = ((float *)r.data)[i] + ((float *)d.data)[i];
    for (int i = 0; i < D; i++)
        w1v[i] = 1.0f + wv[i];
    ck_assert_int_eq(be->ops->rmsnorm(be, &y, &r, &d, &w, ROWS, 1e-6f), 0);
    ck_assert_int_eq(ifd_cpu_rmsnorm(ref, h, wv, ROWS, D, 1e-6f), 0);
    ck_assert(memcmp(r.data, h, sizeof h) == 0);
    ck_assert(memcmp(y.data, ref, sizeof ref) == 0);
    /* in place, no delta, 1 + w */
    ck_assert_int_eq(be->ops->rmsnorm(be, &r, &r, NULL, &w1, ROWS, 1e-6f), 0);
    ck_assert_int_eq(ifd_cpu_rmsnorm(ref, h, w1v, ROWS, D, 1e-6f), 0);
    ck_assert(memcmp(r.data, ref, sizeof ref) == 0);
    be->ops->weight_free(be, &w), be->ops->weight_free(be, &w1);
    be->ops->act_free(be, &r), be->ops->act_free(be, &d), be->ops->act_free(be, &y);
    be->ops->destroy(be);
}
END_TEST

START_TEST(test_rope_kv_fused)
{
    ifd_backend_t *be = mk();
    enum { N = 6, NH = 4, NKV = 2, HD = 16, BS = 16, NB = 4 };
    const int qd = NH * HD, kvd = NKV * HD, ld = qd + 2 * kvd;
    float *kp = calloc(NB * BS * kvd, 4), *vp = calloc(NB * BS * kvd, 4);
    float *kr = calloc(NB * BS * kvd, 4), *vr = calloc(NB * BS * kvd, 4);
    ifd_kv_layer_t kv = {kp, vp, IFD_DTYPE_F32, BS, NKV, HD};
    ifd_kv_layer_t kvr = {kr, vr, IFD_DTYPE_F32, BS, NKV, HD};
    ifd_act_t qkv, q;
    act(be, &qkv, N, ld), act(be, &q, N, qd);
    fill(qkv.data, (size_t)N * ld, 2);
    int32_t pos[N] = {0, 1, 2, 17, 40, 5};
    int64_t slot[N] = {3, 20, 63, -1, 7, 33};
    float qn[HD], kn[HD];
    fill(qn, HD, 1), fill(kn, HD, 1);
    ifd_weight_src_t sq = {"qn", qn, IFD_GGML_F32, 1, HD}, sk = {"kn", kn, IFD_GGML_F32, 1, HD};
    ifd_weight_t wq, wk;
    ck_assert_int_eq(be->ops->load_weight(be, &wq, &sq, IFD_WEIGHT_NORM), 0);
    ck_assert_int_eq(be->ops->load_weight(be, &wk, &sk, IFD_WEIGHT_NORM), 0);
    for (int mode = 0; mode < 2; mode++) {
        ifd_rope_t rope = {HD, 10000.0f, 1.0f, NULL, mode ? IFD_ROPE_NEOX : IFD_ROPE_NORM};
        float rq[N * qd], rk[N * kvd], rv[N * kvd];
        for (int t = 0; t < N; t++) {
            const float *row = (float *)qkv.data + t * ld;
            memcpy(rq + t * qd, row, qd * 4);
            memcpy(rk + t * kvd, row + qd, kvd * 4);
            memcpy(rv + t * kvd, row + qd + kvd, kvd * 4);
        }
        ifd_cpu_rmsnorm(rq, rq, qn, N * NH, HD, 1e-6f);
        ifd_cpu_rmsnorm(rk, rk, kn, N * NKV, HD, 1e-6f);
        ifd_cpu_rope(rq, pos, N, NH, HD, HD, 10000.0f, 1.0f, NULL, rope.mode);
        ifd_cpu_rope(rk, pos, N, NKV, HD, HD, 10000.0f, 1.0f, NULL, rope.mode);
        ifd_cpu_kv_write(&kvr, rk, rv, slot, N);
        ck_assert_int_eq(be->ops->rope_kv(be, &q, &qkv, &wq, &wk, 1e-6f, &kv, pos, slot, N, NH,
                                          &rope),
                         0);
        ck_assert(memcmp(q.data, rq, sizeof rq) == 0);
        ck_assert(memcmp(kp, kr, (size_t)NB * BS * kvd * 4) == 0);
        ck_assert(memcmp(vp, vr, (size_t)NB * BS * kvd * 4) == 0);
    }
    be->ops->weight_free(be, &wq), be->ops->weight_free(be, &wk);
    be->ops->act_free(be, &qkv), be->ops->act_free(be, &q);
    free(kp), free(vp), free(kr), free(vr);
    be->ops->destroy(be);
}
END_TEST

/* Q8_0/Q4_0 K is kept rotated (kv_rot.h): the backend's rope_kv rotates q
 * and K after RoPE (bitwise ifd_cpu_rope + ifd_cpu_kv_rotate +
 * ifd_cpu_kv_write), so the scores its q makes with the stored K are the
 * unrotated q·k to the quantization's precision; a q left unrotated would
 * give another score. */
START_TEST(test_rope_kv_rotated)
{
    ifd_backend_t *be = mk();
    enum { N = 3, NH = 2, NKV = 1, HD = 64, BS = 4, NB = 2 };
    const int qd = NH * HD, kvd = NKV * HD, ld = qd + 2 * kvd;
    const ifd_dtype_t ts[] = {IFD_DTYPE_Q8_0, IFD_DTYPE_Q4_0};
    for (int ti = 0; ti < 2; ti++) {
        const int64_t rb = ifd_kv_row_bytes(ts[ti], HD), pool = (int64_t)NB * BS * NKV * rb;
        char *kp = calloc(pool, 1), *vp = calloc(pool, 1), *kr = calloc(pool, 1),
             *vr = calloc(pool, 1);
        ifd_kv_layer_t kv = {kp, vp, ts[ti], BS, NKV, HD};
        ifd_kv_layer_t kvr = {kr, vr, ts[ti], BS, NKV, HD};
        ifd_act_t qkv, q;
        act(be, &qkv, N, ld), act(be, &q, N, qd);
        fill(qkv.data, (size_t)N * ld, 7 + ti);
        int32_t pos[N] = {0, 5, 2};
        int64_t slot[N] = {1, 6, 3};
        ifd_rope_t rope = {HD, 10000.0f, 1.0f, NULL, IFD_ROPE_NORM};
        float rq[N * qd], rk[N * kvd], rv[N * kvd];
        for (int t = 0; t < N; t++) {
            const float *row = (float *)qkv.data + t * ld;
            memcpy(rq + t * qd, row, qd * 4);
            memcpy(rk + t * kvd, row + qd, kvd * 4);
            memcpy(rv + t * kvd, row + qd + kvd, kvd * 4);
        }
        ifd_cpu_rope(rq, pos, N, NH, HD, HD, 10000.0f, 1.0f, NULL, rope.mode);
        ifd_cpu_rope(rk, pos, N, NKV, HD, HD, 10000.0f, 1.0f, NULL, rope.mode);
        float uq[N * qd], uk[N * kvd]; /* the unrotated q and K */
        memcpy(uq, rq, sizeof uq), memcpy(uk, rk, sizeof uk);
        ck_assert_int_eq(ifd_cpu_kv_rotate(rq, N * NH, HD, ts[ti]), 0);
        ck_assert_int_eq(ifd_cpu_kv_rotate(rk, N * NKV, HD, ts[ti]), 0);
        ifd_cpu_kv_write(&kvr, rk, rv, slot, N);
        ck_assert_int_eq(
            be->ops->rope_kv(be, &q, &qkv, NULL, NULL, 1e-6f, &kv, pos, slot, N, NH, &rope), 0);
        ck_assert(memcmp(q.data, rq, sizeof rq) == 0);
        ck_assert(memcmp(kp, kr, (size_t)pool) == 0);
        ck_assert(memcmp(vp, vr, (size_t)pool) == 0);
        ck_assert(memcmp(uq, rq, sizeof uq) != 0); /* it did rotate */
        /* Scores: backend q · stored K against the unrotated q · k. */
        for (int t = 0; t < N; t++)
            for (int h = 0; h < NH; h++) {
                float kd[HD];
                const int64_t off = ((slot[t] / BS) * NKV * BS + slot[t] % BS) * rb;
                ck_assert_int_eq(ifd_cpu_kv_dequant_row(kd, kp + off, ts[ti], HD), 0);
                double got = 0, ref = 0, norm = 0;
                for (int e = 0; e < HD; e++) {
                    got += (double)((float *)q.data)[t * qd + h * HD + e] * kd[e];
                    ref += (double)uq[t * qd + h * HD + e] * uk[t * kvd + e];
                    norm += fabs((double)uq[t * qd + h * HD + e] * uk[t * kvd + e]);
                }
                ck_assert_msg(fabs(got - ref) <= (ti ? 0.2 : 0.02) * norm,
                              "t %d h %d: score %g, unrotated %g", t, h, got, ref);
            }
        be->ops->act_free(be, &qkv), be->ops->act_free(be, &q);
        free(kp), free(vp), free(kr), free(vr);
    }
    be->ops->destroy(be);
}
END_TEST

START_TEST(test_glu_gather_can_load)
{
    ifd_backend_t *be = mk();
    enum { ROWS = 3, F = 37 };
    ifd_act_t gu, o, g2;
    act(be, &gu, ROWS, 2 * F), act(be, &o, ROWS, F), act(be, &g2, 2, 2 * F);
    fill(gu.data, ROWS * 2 * F, 4);
    for (int kind = 0; kind < 2; kind++) {
        ck_assert_int_eq(be->ops->glu(be, &o, &gu, ROWS, F, (ifd_glu_t)kind), 0);
        for (int r = 0; r < ROWS; r++) {
            float ref[F];
            const float *row = (float *)gu.data + r * 2 * F;
            (kind ? ifd_cpu_geglu_tanh : ifd_cpu_swiglu)(ref, row, row + F, F);
            ck_assert(memcmp((float *)o.data + r * F, ref, sizeof ref) == 0);
        }
    }
    int32_t rows[2] = {2, 0};
    ck_assert_int_eq(be->ops->gather_rows(be, &g2, &gu, rows, 2), 0);
    ck_assert(memcmp(g2.data, (float *)gu.data + 2 * 2 * F, 2 * F * 4) == 0);
    ck_assert(memcmp((float *)g2.data + 2 * F, gu.data, 2 * F * 4) == 0);
    ck_assert(be->ops->can_load(be, IFD_GGML_Q4_K));
    ck_assert(be->ops->can_load(be, IFD_GGML_F32));
    ck_assert(!be->ops->can_load(be, IFD_GGML_I8));
    be->ops->act_free(be, &gu), be->ops->act_free(be, &o), be->ops->act_free(be, &g2);
    be->ops->destroy(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("backend_cpu");
    ifd_test_case(s, "ops", 60,
                  IFD_TESTS(test_proj_parts_types_bias, test_rmsnorm_fused, test_rope_kv_fused,
                            test_rope_kv_rotated,
                            test_glu_gather_can_load));
    return ifd_test_run(s);
}
