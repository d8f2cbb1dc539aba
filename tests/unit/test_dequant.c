/*
 * test_dequant.c — kernels/cpu/fp16.c and kernels/cpu/dequant.c.
 *
 * 1. f16/bf16 <-> f32: all 65536 16-bit patterns against a reference built
 *    from plain arithmetic (ldexp), round trips, every f16 rounding boundary
 *    (midpoints and their neighbours) and 2^20 random f32 patterns against a
 *    nearest-value search with ties to even; the bulk (F16C/AVX2) paths
 *    against the scalar ones.
 * 2. Hand-built blocks of every type with literal expected values worked out
 *    by hand from MODEL-FORMATS.md §3 (scale packing, split-halves nibble
 *    order, Q6_K/Q3_K/Q2_K's d-last layout).
 * 3. Random-byte blocks of every type against an element-by-element decoder
 *    written here from the spec: bit-exact, on the SIMD and scalar paths.
 * 4. Random data quantized with this file's quantizers (the spec's reference
 *    quantizers for the 32-element types; simple covering-grid quantizers for
 *    the K-quants), dequantized, and compared to the input: every element
 *    within its stated bound (half a quantization step for the K-quants and
 *    Q4_1/Q5_1/Q8_0 plus the fp16 rounding of d and m; a full step at the
 *    clamped end for Q4_0/Q5_0; 14 grid units for IQ4_NL's uneven grid).
 * 5. Errors: n not a block multiple -> IFD_EINVAL, unsupported type -> IFD_ENOTSUP.
 */
#include "testutil.h"

#include "cpu/cpu_kernels.h"
#include "cpu/fp16.h"
#include "error.h"
#include "kernels.h"
#include "modelfile/ggml_types.h"
#include "rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng_state = 0x1234567;

static uint64_t rnd64(void)
{
    return ifd_rng_mix64(rng_state += 0x9e3779b97f4a7c15ull); /* SplitMix64 */
}

static double rnd_unif(void) /* [0, 1) */
{
    return (double)(rnd64() >> 11) * (1.0 / 9007199254740992.0);
}

static double rnd_gauss(void)
{
    double u = rnd_unif() + 1e-300, v = rnd_unif();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* ---- 1. float conversions ---------------------------------------------------- */

/* The value of an f16 pattern from its definition (NaN for NaNs). */
static double ref_f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

/* The value of a bf16 pattern from its definition. exp 255 with mantissa 0
 * is given as 2^128 (not inf) so it can serve as the "next value" above the
 * largest finite one in the rounding reference. */
static double ref_bf16_value_ext(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 0)
        v = ldexp((double)m, -133);
    else if (e == 255)
        v = m ? NAN : ldexp(1.0, 128);
    else
        v = ldexp(1.0 + m / 128.0, e - 127);
    return s ? -v : v;
}

/* Positive f16 values by pattern, plus 0x7c00 standing for 65536 (the next
 * step above 65504, where round-to-nearest-even sends overflow to inf). */
static double f16_table[0x7c01];

static void build_f16_table(void)
{
    for (int h = 0; h < 0x7c00; h++)
        f16_table[h] = ref_f16_value((uint16_t)h);
    f16_table[0x7c00] = 65536.0;
}

/* Nearest f16 to f, ties to the even pattern: binary search in the table. */
static uint16_t ref_f32_to_f16(float f)
{
    if (isnan(f))
        return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65536.0)
        return sign | 0x7c00;
    int lo = 0, hi = 0x7c00; /* f16_table[lo] <= a < f16_table[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (f16_table[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dlo = a - f16_table[lo], dhi = f16_table[hi] - a;
    int k = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return (uint16_t)(sign | k);
}

static uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u = fbits(f);
    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint16_t lo = (uint16_t)((u >> 16) & 0x7fff), hi = (uint16_t)(lo + 1);
    double a = fabs((double)f);
    double vlo = ref_bf16_value_ext(lo);
    if (a == vlo)
        return sign | lo;
    double vhi = ref_bf16_value_ext(hi);
    double dlo = a - vlo, dhi = vhi - a;
    uint16_t k = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi);
    return sign | k;
}

START_TEST(test_f16_all_patterns)
{
    static float f[65536], fb[65536];
    static uint16_t h[65536], hb[65536];
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ifd_f16_to_f32_n(fb, h, 65536);
    for (int i = 0; i < 65536; i++) {
        f[i] = ifd_f16_to_f32((uint16_t)i);
        double want = ref_f16_value((uint16_t)i);
        int e = (i >> 10) & 31, m = i & 1023;
        if (e == 31 && m) {
            /* NaN: the payload moves to the top of the f32 mantissa. */
            uint32_t wantbits = ((uint32_t)(i & 0x8000) << 16) | 0x7f800000u | (uint32_t)m << 13;
            IFD_CHECK(fbits(f[i]) == wantbits, "f16 %04x -> %08x", i, fbits(f[i]));
            IFD_CHECK(isnan(fb[i]), "bulk f16 %04x not NaN", i);
            IFD_CHECK(ifd_f32_to_f16(f[i]) == (uint16_t)(i | 0x200), "NaN %04x not quieted", i);
            continue;
        }
        IFD_CHECK((double)f[i] == want && !signbit(f[i]) == !signbit(want),
                  "f16 %04x -> %a, want %a", i, (double)f[i], want);
        IFD_CHECK(fbits(fb[i]) == fbits(f[i]), "bulk f16 %04x -> %08x, scalar %08x", i,
                  fbits(fb[i]), fbits(f[i]));
        IFD_CHECK(ifd_f32_to_f16(f[i]) == (uint16_t)i, "round trip %04x -> %04x", i,
                  ifd_f32_to_f16(f[i]));
    }
    /* Back in bulk: the same patterns. */
    ifd_f32_to_f16_n(hb, f, 65536);
    for (int i = 0; i < 65536; i++) {
        if (isnan(f[i]))
            IFD_CHECK((hb[i] & 0x7c00) == 0x7c00 && (hb[i] & 0x3ff), "bulk NaN %04x", i);
        else
            IFD_CHECK(hb[i] == (uint16_t)i, "bulk round trip %04x -> %04x", i, hb[i]);
    }
}
END_TEST

static void check_f32_to_f16(const float *x, int n)
{
    uint16_t *hb = malloc((size_t)n * sizeof *hb);
    ck_assert_ptr_nonnull(hb);
    ifd_f32_to_f16_n(hb, x, n);
    for (int i = 0; i < n; i++) {
        uint16_t got = ifd_f32_to_f16(x[i]), want = ref_f32_to_f16(x[i]);
        if (isnan(x[i])) {
            IFD_CHECK((got & 0x7e00) == 0x7e00 && (hb[i] & 0x7e00) == 0x7e00,
                      "NaN %08x -> %04x / %04x", fbits(x[i]), got, hb[i]);
            continue;
        }
        IFD_CHECK(got == want, "f32 %a (%08x) -> %04x, want %04x", (double)x[i], fbits(x[i]), got,
                  want);
        IFD_CHECK(hb[i] == want, "bulk f32 %a (%08x) -> %04x, want %04x", (double)x[i], fbits(x[i]),
                  hb[i], want);
    }
    free(hb);
}

START_TEST(test_f32_to_f16_rounding)
{
    build_f16_table();
    /* Every midpoint between neighbouring f16 values (exact in f32), one f32
     * ulp either side of it, both signs; 65504..65520..65536 included. */
    enum { PER = 6 };
    float *x = malloc(sizeof(float) * 0x7c00 * PER);
    ck_assert_ptr_nonnull(x);
    int n = 0;
    for (int k = 0; k < 0x7c00; k++) {
        float mid = (float)((f16_table[k] + f16_table[k + 1]) / 2);
        IFD_CHECK((double)mid == (f16_table[k] + f16_table[k + 1]) / 2, "midpoint %d inexact", k);
        float s = (k & 1) ? -1.0f : 1.0f;
        x[n++] = s * mid;
        x[n++] = s * nextafterf(mid, 0.0f);
        x[n++] = s * nextafterf(mid, INFINITY);
        x[n++] = -s * mid;
        x[n++] = s * (float)f16_table[k];
        x[n++] = -s * nextafterf((float)f16_table[k], INFINITY);
    }
    check_f32_to_f16(x, n);
    free(x);

    /* 2^20 random bit patterns, biased towards the f16 range. */
    enum { NR = 1 << 20 };
    float *r = malloc(sizeof(float) * NR);
    ck_assert_ptr_nonnull(r);
    for (int i = 0; i < NR; i++) {
        uint32_t u = (uint32_t)rnd64();
        if (i % 4 != 0) /* exponent in [2^-26, 2^17) */
            u = (u & 0x807fffffu) | (uint32_t)(101 + rnd64() % 43) << 23;
        r[i] = bitsf(u);
    }
    check_f32_to_f16(r, NR);
    free(r);

    const float specials[] = {0.0f,         -0.0f,     INFINITY,        -INFINITY,  NAN,
                              -NAN,         65504.0f,  65519.99f,       65520.0f,   1e10f,
                              0x1p-24f,     0x1p-25f,  0x1.000002p-25f, 0x1.8p-24f, 0x1p-14f,
                              0x1.ffcp-15f, 0x1p-149f, 3.0e-8f};
    check_f32_to_f16(specials, (int)(sizeof specials / sizeof specials[0]));
    ck_assert_uint_eq(ifd_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_uint_eq(ifd_f32_to_f16(65519.99f), 0x7bff);
    ck_assert_uint_eq(ifd_f32_to_f16(0x1p-25f), 0x0000);        /* tie -> even (0) */
    ck_assert_uint_eq(ifd_f32_to_f16(0x1.000002p-25f), 0x0001); /* just above the tie */
    ck_assert_uint_eq(ifd_f32_to_f16(0x1.8p-24f), 0x0002);      /* 1.5 ulp: tie -> 2 */
    ck_assert_uint_eq(ifd_f32_to_f16(-2.0f), 0xc000);
}
END_TEST

START_TEST(test_bf16)
{
    static float f[65536], fb[65536];
    static uint16_t h[65536], hb[65536];
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ifd_bf16_to_f32_n(fb, h, 65536);
    for (int i = 0; i < 65536; i++) {
        f[i] = ifd_bf16_to_f32((uint16_t)i);
        IFD_CHECK(fbits(fb[i]) == fbits(f[i]), "bulk bf16 %04x", i);
        int e = (i >> 7) & 255, m = i & 127;
        if (e == 255 && m) {
            IFD_CHECK(isnan(f[i]), "bf16 %04x not NaN", i);
            IFD_CHECK(ifd_f32_to_bf16(f[i]) == (uint16_t)(i | 0x40), "bf16 NaN %04x not quieted",
                      i);
            continue;
        }
        double want =
            e == 255 ? (i & 0x8000 ? -INFINITY : INFINITY) : ref_bf16_value_ext((uint16_t)i);
        IFD_CHECK((double)f[i] == want && !signbit(f[i]) == !signbit(want), "bf16 %04x", i);
        IFD_CHECK(ifd_f32_to_bf16(f[i]) == (uint16_t)i, "bf16 round trip %04x", i);
    }
    ifd_f32_to_bf16_n(hb, f, 65536);
    for (int i = 0; i < 65536; i++)
        IFD_CHECK(hb[i] == ifd_f32_to_bf16(f[i]), "bulk bf16 %04x", i);

    /* Rounding: random patterns, and the ties (low 16 bits 0x8000). */
    enum { NR = 1 << 20 };
    float *r = malloc(sizeof(float) * NR);
    uint16_t *rb = malloc(sizeof(uint16_t) * NR);
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_nonnull(rb);
    for (int i = 0; i < NR; i++) {
        uint32_t u = (uint32_t)rnd64();
        if (i % 3 == 0)
            u = (u & 0xffff0000u) | 0x8000u;
        else if (i % 3 == 1)
            u = (u & 0xffff0000u) | (0x7ffeu + (uint32_t)(rnd64() % 4));
        r[i] = bitsf(u);
    }
    ifd_f32_to_bf16_n(rb, r, NR);
    for (int i = 0; i < NR; i++) {
        uint16_t want = ref_f32_to_bf16(r[i]), got = ifd_f32_to_bf16(r[i]);
        IFD_CHECK(got == want, "f32 %08x -> bf16 %04x, want %04x", fbits(r[i]), got, want);
        IFD_CHECK(rb[i] == want, "bulk f32 %08x -> bf16 %04x, want %04x", fbits(r[i]), rb[i], want);
    }
    ck_assert_uint_eq(ifd_f32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80); /* rounds to inf */
    free(r);
    free(rb);
}
END_TEST

/* ---- 2. hand-built blocks ------------------------------------------------------ */

static void dq(float *y, const void *x, uint32_t type, int64_t n)
{
    int rc = ifd_cpu_dequantize(y, x, type, n);
    IFD_CHECK(rc == 0, "dequantize %s: %s", ifd_ggml_type_name(type), ifd_strerror(rc));
}

START_TEST(test_hand_legacy)
{
    uint8_t b[34];
    float y[32];

    /* Q4_0, d = 0.25, qs[j] = j | (15 - j) << 4. */
    put16(b, 0x3400);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    dq(y, b, IFD_GGML_Q4_0, 32);
    ck_assert_float_eq(y[0], -2.0f);
    ck_assert_float_eq(y[3], -1.25f);
    ck_assert_float_eq(y[15], 1.75f);
    ck_assert_float_eq(y[16], 1.75f); /* high nibble of qs[0] = 15 */
    ck_assert_float_eq(y[19], 1.0f);
    ck_assert_float_eq(y[31], -2.0f);

    /* IQ4_NL: the same bytes with d = 0.5 index the non-linear grid. */
    put16(b, 0x3800);
    dq(y, b, IFD_GGML_IQ4_NL, 32);
    ck_assert_float_eq(y[0], -63.5f);
    ck_assert_float_eq(y[8], 0.5f);
    ck_assert_float_eq(y[16], 56.5f);
    ck_assert_float_eq(y[20], 19.0f);
    ck_assert_float_eq(y[31], -63.5f);

    /* Q4_1, d = 0.5, m = -1. */
    put16(b, 0x3800);
    put16(b + 2, 0xbc00);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | (15 - j) << 4);
    dq(y, b, IFD_GGML_Q4_1, 32);
    ck_assert_float_eq(y[2], 0.0f);
    ck_assert_float_eq(y[15], 6.5f);
    ck_assert_float_eq(y[18], 5.5f);
    ck_assert_float_eq(y[31], -1.0f);

    /* Q5_0, d = 2, qh = 0x80010001 (bits 0, 16, 31), qs[j] = j | (15 - j) << 4. */
    put16(b, 0x4000);
    b[2] = 0x01, b[3] = 0x00, b[4] = 0x01, b[5] = 0x80;
    for (int j = 0; j < 16; j++)
        b[6 + j] = (uint8_t)(j | (15 - j) << 4);
    dq(y, b, IFD_GGML_Q5_0, 32);
    ck_assert_float_eq(y[0], 0.0f);    /* 0 | 16 */
    ck_assert_float_eq(y[5], -22.0f);  /* 5 */
    ck_assert_float_eq(y[16], 30.0f);  /* 15 | 16 */
    ck_assert_float_eq(y[23], -16.0f); /* 8 */
    ck_assert_float_eq(y[31], 0.0f);   /* 0 | 16 */

    /* Q5_1, d = 1, m = 0.5, qh = 0xffff0000, qs[j] = j | j << 4: y[i] = i + 0.5. */
    put16(b, 0x3c00);
    put16(b + 2, 0x3800);
    b[4] = 0x00, b[5] = 0x00, b[6] = 0xff, b[7] = 0xff;
    for (int j = 0; j < 16; j++)
        b[8 + j] = (uint8_t)(j | j << 4);
    dq(y, b, IFD_GGML_Q5_1, 32);
    for (int i = 0; i < 32; i++)
        ck_assert_float_eq(y[i], (float)i + 0.5f);

    /* Q8_0, d = -0.5, qs[j] = j - 16. */
    put16(b, 0xb800);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j - 16);
    dq(y, b, IFD_GGML_Q8_0, 32);
    ck_assert_float_eq(y[0], 8.0f);
    ck_assert_float_eq(y[16], -0.0f);
    ck_assert_float_eq(y[31], -7.5f);
}
END_TEST

/* Q4_K / Q5_K scales, d = 1, dmin = 0.5. Bytes 0-3 carry sc0..3 = 1..4 in
 * their low 6 bits and the top bits 3,0,1,2 of sc4..7; bytes 4-7 carry
 * mn0..3 = 5..8 and the top bits 0,1,2,3 of mn4..7; bytes 8-11 the low
 * nibbles. So sc = {1,2,3,4,49,3,21,39}, mn = {5,6,7,8,2,20,38,56}. */
static const uint8_t kq_scales[12] = {0xc1, 0x02, 0x43, 0x84, 0x05, 0x46,
                                      0x87, 0xc8, 0x21, 0x43, 0x65, 0x87};

START_TEST(test_hand_q4_k_q5_k)
{
    uint8_t b[176];
    float y[256];

    put16(b, 0x3c00);
    put16(b + 2, 0x3800);
    memcpy(b + 4, kq_scales, 12);
    memset(b + 16, 0x5a, 128); /* low nibble 10 -> first 32 of a chunk, high 5 -> next 32 */
    dq(y, b, IFD_GGML_Q4_K, 256);
    /* y = d·sc·q − dmin·mn per 32-element sub-block. */
    const float want4[8] = {7.5f, 7.0f, 26.5f, 16.0f, 489.0f, 5.0f, 191.0f, 167.0f};
    for (int i = 0; i < 256; i++)
        IFD_CHECK(y[i] == want4[i / 32], "Q4_K y[%d] = %g, want %g", i, (double)y[i],
                  (double)want4[i / 32]);

    /* Q5_K: qh[l] = 0xaa gives the fifth bit (16) to the high-nibble sub-blocks. */
    put16(b, 0x3c00);
    put16(b + 2, 0x3800);
    memcpy(b + 4, kq_scales, 12);
    memset(b + 16, 0xaa, 32);
    memset(b + 48, 0x5a, 128);
    dq(y, b, IFD_GGML_Q5_K, 256);
    const float want5[8] = {7.5f, 39.0f, 26.5f, 80.0f, 489.0f, 53.0f, 191.0f, 791.0f};
    for (int i = 0; i < 256; i++)
        IFD_CHECK(y[i] == want5[i / 32], "Q5_K y[%d] = %g, want %g", i, (double)y[i],
                  (double)want5[i / 32]);
}
END_TEST

START_TEST(test_hand_q6_k)
{
    uint8_t b[210];
    float y[256];
    /* ql = 0x21 (nibbles 1, 2), qh = 0xe4 (2-bit fields 0, 1, 2, 3), scales[k] = k − 8,
     * d = 0.5 at the END of the block. q1 = 1 − 32, q2 = 17 − 32, q3 = 34 − 32, q4 = 50 − 32. */
    memset(b, 0x21, 128);
    memset(b + 128, 0xe4, 64);
    for (int k = 0; k < 16; k++)
        b[192 + k] = (uint8_t)(int8_t)(k - 8);
    put16(b + 208, 0x3800);
    dq(y, b, IFD_GGML_Q6_K, 256);
    ck_assert_float_eq(y[0], 124.0f);   /* 0.5 · −8 · −31 */
    ck_assert_float_eq(y[40], 45.0f);   /* 0.5 · −6 · −15 */
    ck_assert_float_eq(y[70], -4.0f);   /* 0.5 · −4 · 2 */
    ck_assert_float_eq(y[100], -18.0f); /* 0.5 · −2 · 18 */
    ck_assert_float_eq(y[128], 0.0f);   /* 0.5 · 0 · −31 */
    ck_assert_float_eq(y[200], 4.0f);   /* 0.5 · 4 · 2 */
    ck_assert_float_eq(y[255], 63.0f);  /* 0.5 · 7 · 18 */
}
END_TEST

START_TEST(test_hand_q2_k_q3_k)
{
    uint8_t b[110];
    float y[256];

    /* Q2_K: scales[k] = k | (15 − k) << 4, qs = 0xe4 (2-bit fields 0..3 = j),
     * d = 1 and dmin = 0.5 at the end. y[o] = (o/16)·j − 0.5·(15 − o/16). */
    for (int k = 0; k < 16; k++)
        b[k] = (uint8_t)(k | (15 - k) << 4);
    memset(b + 16, 0xe4, 64);
    put16(b + 80, 0x3c00);
    put16(b + 82, 0x3800);
    dq(y, b, IFD_GGML_Q2_K, 256);
    ck_assert_float_eq(y[0], -7.5f);
    ck_assert_float_eq(y[40], -4.5f);
    ck_assert_float_eq(y[100], 13.5f);
    ck_assert_float_eq(y[150], -3.0f);
    ck_assert_float_eq(y[250], 45.0f);

    /* Q3_K: scales packed so that sc[k] = k − 8 (6-bit values k + 24: low
     * nibbles 8..f,0..7 in bytes 0-7, high 2 bits 1,1,2,2 in bytes 8-11);
     * qs = 0xe4 (q2 = j); hmask = 0x0f: the high bit is set for the first
     * half's 4 shifts (no −4) and clear for the second half's (−4). d = 1. */
    memset(b, 0x0f, 32);
    memset(b + 32, 0xe4, 64);
    const uint8_t s3[12] = {0x08, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0xa5, 0xa5, 0xa5, 0xa5};
    memcpy(b + 96, s3, 12);
    put16(b + 108, 0x3c00);
    dq(y, b, IFD_GGML_Q3_K, 256);
    ck_assert_float_eq(y[0], 0.0f);
    ck_assert_float_eq(y[33], -6.0f);  /* sc −6, q 1 */
    ck_assert_float_eq(y[80], -6.0f);  /* sc −3, q 2 */
    ck_assert_float_eq(y[120], -3.0f); /* sc −1, q 3 */
    ck_assert_float_eq(y[130], 0.0f);  /* sc 0, q −4 */
    ck_assert_float_eq(y[170], -6.0f); /* sc 2, q 1 − 4 */
    ck_assert_float_eq(y[200], -8.0f); /* sc 4, q 2 − 4 */
    ck_assert_float_eq(y[255], -7.0f); /* sc 7, q 3 − 4 */
}
END_TEST

/* ---- 3. element-by-element decoder from the spec ------------------------------- */

static const int8_t iq4nl_k[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

static float h2f(const uint8_t *p)
{
    return ifd_f16_to_f32(get16(p));
}

/* Nibble for element i of a 32-element split-halves group of 16 bytes. */
static int nib32(const uint8_t *qs, int i)
{
    return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

/* The 6-bit scale (what = 0) or min (what = 1) k of Q4_K/Q5_K, from the
 * byte-level description: bytes 0-3 / 4-7 hold sc/mn 0..3 in their low 6
 * bits and the top 2 bits of sc/mn 4..7; bytes 8-11 the low 4 bits of
 * sc 4..7 (low nibble) and mn 4..7 (high nibble). */
static int kq_field(const uint8_t *s, int k, int what)
{
    const uint8_t *base = s + 4 * what;
    if (k < 4)
        return base[k] & 63;
    int low = what ? s[8 + k - 4] >> 4 : s[8 + k - 4] & 15;
    return low | (base[k - 4] >> 6) << 4;
}

static float ref_elem(uint32_t type, const uint8_t *b, int i)
{
    switch (type) {
    case IFD_GGML_F32: {
        float f;
        memcpy(&f, b, 4);
        return f;
    }
    case IFD_GGML_F16:
        return h2f(b);
    case IFD_GGML_BF16:
        return bitsf((uint32_t)get16(b) << 16);
    case IFD_GGML_Q4_0:
        return h2f(b) * (float)(nib32(b + 2, i) - 8);
    case IFD_GGML_Q4_1:
        return h2f(b) * (float)nib32(b + 4, i) + h2f(b + 2);
    case IFD_GGML_Q5_0: {
        uint32_t qh =
            (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        int q = nib32(b + 6, i) | (int)((qh >> i) & 1) << 4;
        return h2f(b) * (float)(q - 16);
    }
    case IFD_GGML_Q5_1: {
        uint32_t qh =
            (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
        int q = nib32(b + 8, i) | (int)((qh >> i) & 1) << 4;
        return h2f(b) * (float)q + h2f(b + 2);
    }
    case IFD_GGML_Q8_0:
        return h2f(b) * (float)(int8_t)b[2 + i];
    case IFD_GGML_IQ4_NL:
        return h2f(b) * (float)iq4nl_k[nib32(b + 2, i)];
    case IFD_GGML_Q2_K: {
        /* output 128h + 32j + 16g + l: scale byte i/16, qs byte 32h + 16g + l = 32h + i%32 */
        int h = i / 128, j = (i % 128) / 32;
        int S = b[i / 16];
        int q = (b[16 + 32 * h + i % 32] >> (2 * j)) & 3;
        return h2f(b + 80) * (float)(S & 15) * (float)q - h2f(b + 82) * (float)(S >> 4);
    }
    case IFD_GGML_Q3_K: {
        int h = i / 128, j = (i % 128) / 32, k = i / 16;
        const uint8_t *s = b + 96;
        int low4 = k < 8 ? s[k] & 15 : s[k - 8] >> 4;
        int high2 = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        int sc = (low4 | high2 << 4) - 32;
        int q2 = (b[32 + 32 * h + i % 32] >> (2 * j)) & 3;
        int hb = (b[i % 32] >> (i / 32)) & 1; /* bit 4h + j of hmask[16g + l] */
        return h2f(b + 108) * (float)sc * (float)(q2 - (hb ? 0 : 4));
    }
    case IFD_GGML_Q4_K:
    case IFD_GGML_Q5_K: {
        int c = i / 64, r = i % 64, sub = i / 32, l = r % 32;
        const uint8_t *qs = b + (type == IFD_GGML_Q4_K ? 16 : 48);
        int q = r < 32 ? qs[32 * c + l] & 15 : qs[32 * c + l] >> 4;
        if (type == IFD_GGML_Q5_K)
            q += 16 * ((b[16 + l] >> sub) & 1);
        int sc = kq_field(b + 4, sub, 0), mn = kq_field(b + 4, sub, 1);
        return h2f(b) * (float)sc * (float)q - h2f(b + 2) * (float)mn;
    }
    case IFD_GGML_Q6_K: {
        int h = i / 128, r = i % 128, k = r / 32, l = r % 32;
        int lowb = b[64 * h + l + (k & 1) * 32];
        int lo4 = k >= 2 ? lowb >> 4 : lowb & 15;
        int hi2 = (b[128 + 32 * h + l] >> (2 * k)) & 3;
        int q = (lo4 | hi2 << 4) - 32;
        return h2f(b + 208) * (float)(int8_t)b[192 + i / 16] * (float)q;
    }
    }
    ck_abort_msg("no reference for type %u", type);
    return 0;
}

/* Every supported type and the offsets of its fp16 fields (-1: none). */
static const struct {
    uint32_t type;
    int off0, off1;
} all_types[] = {
    {IFD_GGML_F32, -1, -1},  {IFD_GGML_F16, -1, -1},   {IFD_GGML_BF16, -1, -1},
    {IFD_GGML_Q4_0, 0, -1},  {IFD_GGML_Q4_1, 0, 2},    {IFD_GGML_Q5_0, 0, -1},
    {IFD_GGML_Q5_1, 0, 2},   {IFD_GGML_Q8_0, 0, -1},   {IFD_GGML_IQ4_NL, 0, -1},
    {IFD_GGML_Q2_K, 80, 82}, {IFD_GGML_Q3_K, 108, -1}, {IFD_GGML_Q4_K, 0, 2},
    {IFD_GGML_Q5_K, 0, 2},   {IFD_GGML_Q6_K, 208, -1},
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

static uint16_t rnd_finite_f16(void)
{
    uint16_t h;
    do
        h = (uint16_t)rnd64();
    while ((h & 0x7c00) == 0x7c00);
    return h;
}

/* Random bytes for nb blocks at x + misalign, with finite fp16 fields, then
 * decoded both ways and compared bit for bit. */
static void check_random_bytes(int misalign)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        uint32_t ty = all_types[t].type;
        int be = (int)ifd_ggml_block_elems(ty), bb = (int)ifd_ggml_block_bytes(ty);
        int nb = be == 1 ? 4099 : be == 32 ? 515 : 67;
        uint8_t *raw = malloc((size_t)nb * bb + 8);
        float *y = malloc((size_t)nb * be * sizeof *y);
        ck_assert_ptr_nonnull(raw);
        ck_assert_ptr_nonnull(y);
        uint8_t *x = raw + misalign;
        for (int i = 0; i < nb * bb; i++)
            x[i] = (uint8_t)rnd64();
        for (int k = 0; k < nb; k++) {
            uint8_t *blk = x + (size_t)k * bb;
            if (all_types[t].off0 >= 0)
                put16(blk + all_types[t].off0, rnd_finite_f16());
            if (all_types[t].off1 >= 0)
                put16(blk + all_types[t].off1, rnd_finite_f16());
        }
        if (ty == IFD_GGML_F16) /* keep a few NaNs out of the exact comparison */
            for (int k = 0; k < nb; k++)
                put16(x + 2 * k, rnd_finite_f16());
        if (ty == IFD_GGML_F32 || ty == IFD_GGML_BF16)
            for (int k = 0; k < nb; k++)
                x[(size_t)k * bb + bb - 1] &= 0xbf; /* finite */
        dq(y, x, ty, (int64_t)nb * be);
        for (int k = 0; k < nb; k++) {
            for (int i = 0; i < be; i++) {
                float want = ref_elem(ty, x + (size_t)k * bb, i), got = y[k * be + i];
                IFD_CHECK(fbits(got) == fbits(want),
                          "%s block %d elem %d: %a, want %a (isa %s, misalign %d)",
                          ifd_ggml_type_name(ty), k, i, (double)got, (double)want,
                          ifd_cpu_isa_name(), misalign);
            }
        }
        free(raw);
        free(y);
    }
}

START_TEST(test_random_bytes_vs_spec)
{
    check_random_bytes(0);
    check_random_bytes(1);
    check_random_bytes(3);
}
END_TEST

/* The same on the portable path ($INFERD_CPU caps the features; each test
 * runs in its own forked process, so the cap applies before first use). */
START_TEST(test_random_bytes_scalar_path)
{
    setenv("INFERD_CPU", "scalar", 1);
    if (strcmp(ifd_cpu_isa_name(), "scalar") != 0)
        fprintf(stderr, "note: features already detected (CK_FORK=no?); SIMD path again\n");
    check_random_bytes(0);
    check_random_bytes(1);
    ck_assert_uint_eq(ifd_f32_to_f16(1.0f), 0x3c00);
    /* The bulk conversions' scalar fallbacks. */
    float f[1000], g[1000];
    uint16_t h[1000], h2[1000];
    for (int i = 0; i < 1000; i++)
        f[i] = (float)(rnd_gauss() * 1000.0);
    ifd_f32_to_f16_n(h, f, 1000);
    ifd_f16_to_f32_n(g, h, 1000);
    for (int i = 0; i < 1000; i++) {
        ck_assert_uint_eq(h[i], ifd_f32_to_f16(f[i]));
        ck_assert_uint_eq(fbits(g[i]), fbits(ifd_f16_to_f32(h[i])));
    }
    ifd_f32_to_bf16_n(h2, f, 1000);
    ifd_bf16_to_f32_n(g, h2, 1000);
    for (int i = 0; i < 1000; i++) {
        ck_assert_uint_eq(h2[i], ifd_f32_to_bf16(f[i]));
        ck_assert_uint_eq(fbits(g[i]), fbits(ifd_bf16_to_f32(h2[i])));
    }
}
END_TEST

/* ---- 4. quantize -> dequantize round trips ----------------------------------- */

/* Quantizes one block of x into b and sets tol[i], the bound on |y[i] − x[i]|. */
typedef void (*quant_fn)(uint8_t *b, const float *x, float *tol);

static float f16r(float v) /* v rounded to f16 and back */
{
    return ifd_f16_to_f32(ifd_f32_to_f16(v));
}

/* Smallest f16 >= v (v >= 0), so that a scale rounded to f16 never shrinks. */
static uint16_t f16_up(float v)
{
    uint16_t h = ifd_f32_to_f16(v);
    if (ifd_f16_to_f32(h) < v)
        h++;
    return h;
}

static const float eps_rel = 1e-5f;

static void pack_split_halves(uint8_t *qs, const int *q)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

/* Q8_0 (spec): d = amax/127, q = roundf(x/d). */
static void quant_q8_0(uint8_t *b, const float *x, float *tol)
{
    float amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    put16(b, ifd_f32_to_f16(d));
    float dh = f16r(d);
    for (int j = 0; j < 32; j++) {
        b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
        tol[j] = 0.5f * d + 127 * fabsf(d - dh) + eps_rel * (fabsf(x[j]) + d);
    }
}

/* Q4_0 / Q5_0 (spec): d = max/−8 (−16) with max the signed value of largest
 * magnitude, q = min(15 (31), trunc(x/d + 8.5 (16.5))). The clamped end errs
 * by up to one full step. */
static void quant_q4_0_q5_0(uint8_t *b, const float *x, float *tol, int bits)
{
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax)
            amax = fabsf(x[j]), max = x[j];
    const int half = 1 << (bits - 1), top = (1 << bits) - 1;
    float d = max / (float)-half, id = d ? 1.0f / d : 0.0f;
    put16(b, ifd_f32_to_f16(d));
    float dh = f16r(d);
    int q[32];
    for (int j = 0; j < 32; j++) {
        int v = (int)truncf(x[j] * id + (float)half + 0.5f);
        q[j] = v > top ? top : v;
        tol[j] = fabsf(d) + (float)(half + 1) * fabsf(d - dh) + eps_rel * (fabsf(x[j]) + fabsf(d));
    }
    if (bits == 4) {
        pack_split_halves(b + 2, q);
    } else {
        uint32_t qh = 0;
        for (int j = 0; j < 32; j++)
            qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        b[2] = (uint8_t)qh, b[3] = (uint8_t)(qh >> 8), b[4] = (uint8_t)(qh >> 16),
        b[5] = (uint8_t)(qh >> 24);
        pack_split_halves(b + 6, q);
    }
}

static void quant_q4_0(uint8_t *b, const float *x, float *tol)
{
    quant_q4_0_q5_0(b, x, tol, 4);
}

static void quant_q5_0(uint8_t *b, const float *x, float *tol)
{
    quant_q4_0_q5_0(b, x, tol, 5);
}

/* Q4_1 / Q5_1 (spec): d = (max − min)/15 (31), m = min, q = trunc((x − min)/d + 0.5). */
static void quant_q4_1_q5_1(uint8_t *b, const float *x, float *tol, int bits)
{
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; j++)
        mn = fminf(mn, x[j]), mx = fmaxf(mx, x[j]);
    const int top = (1 << bits) - 1;
    float d = (mx - mn) / (float)top, id = d ? 1.0f / d : 0.0f;
    put16(b, ifd_f32_to_f16(d));
    put16(b + 2, ifd_f32_to_f16(mn));
    float dh = f16r(d), mh = f16r(mn);
    int q[32];
    for (int j = 0; j < 32; j++) {
        int v = (int)truncf((x[j] - mn) * id + 0.5f);
        q[j] = v > top ? top : v;
        tol[j] = 0.5f * d + (float)top * fabsf(d - dh) + fabsf(mn - mh) +
                 eps_rel * (fabsf(x[j]) + fabsf(mn) + d);
    }
    if (bits == 4) {
        pack_split_halves(b + 4, q);
    } else {
        uint32_t qh = 0;
        for (int j = 0; j < 32; j++)
            qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        b[4] = (uint8_t)qh, b[5] = (uint8_t)(qh >> 8), b[6] = (uint8_t)(qh >> 16),
        b[7] = (uint8_t)(qh >> 24);
        pack_split_halves(b + 8, q);
    }
}

static void quant_q4_1(uint8_t *b, const float *x, float *tol)
{
    quant_q4_1_q5_1(b, x, tol, 4);
}

static void quant_q5_1(uint8_t *b, const float *x, float *tol)
{
    quant_q4_1_q5_1(b, x, tol, 5);
}

/* IQ4_NL: d = max/−127 (as Q4_0 picks max), q = the nearest grid value.
 * Neighbouring grid values are at most 24 apart (error <= 12·|d|) and the far
 * end stops at 113 against 127 (error <= 14·|d|). */
static void quant_iq4_nl(uint8_t *b, const float *x, float *tol)
{
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax)
            amax = fabsf(x[j]), max = x[j];
    float d = max / -127.0f;
    put16(b, ifd_f32_to_f16(d));
    float dh = f16r(d);
    int q[32];
    for (int j = 0; j < 32; j++) {
        int best = 0;
        for (int k = 1; k < 16; k++)
            if (fabsf(x[j] - dh * iq4nl_k[k]) < fabsf(x[j] - dh * iq4nl_k[best]))
                best = k;
        q[j] = best;
        tol[j] = 14.0f * fabsf(dh) + 127.0f * fabsf(d - dh) + eps_rel * (fabsf(x[j]) + fabsf(d));
    }
    pack_split_halves(b + 2, q);
}

/*
 * The K-quants with a min (Q2_K, Q4_K, Q5_K): sub-blocks of `sub` elements,
 * y = D·q − M with D = d·sc, M = dmin·mn. The grid is made to cover each
 * sub-block: M >= −min (mins rounded up), D·top >= max + M (scales rounded
 * up, d and dmin rounded up to f16), so every element is within D/2.
 */
static void quant_k_min(const float *x, int sub, int top, int smax, float *d_out, float *dmin_out,
                        int *sc, int *mn, int *q, float *tol)
{
    const int ns = 256 / sub;
    float mnf[16], mxf[16], sf[16], M[16];
    float maxmn = 0;
    for (int s = 0; s < ns; s++) {
        float lo = x[s * sub], hi = x[s * sub];
        for (int l = 1; l < sub; l++)
            lo = fminf(lo, x[s * sub + l]), hi = fmaxf(hi, x[s * sub + l]);
        mnf[s] = fmaxf(0.0f, -lo);
        mxf[s] = hi;
        maxmn = fmaxf(maxmn, mnf[s]);
    }
    uint16_t dminh = f16_up(maxmn / (float)smax);
    float dmin = ifd_f16_to_f32(dminh);
    float maxsf = 0;
    for (int s = 0; s < ns; s++) {
        int m = dmin > 0 ? (int)ceilf(mnf[s] / dmin) : 0;
        mn[s] = m > smax ? smax : m;
        M[s] = dmin * (float)mn[s];
        sf[s] = (mxf[s] + M[s]) / (float)top;
        maxsf = fmaxf(maxsf, sf[s]);
    }
    uint16_t dh = f16_up(maxsf / (float)smax);
    float d = ifd_f16_to_f32(dh);
    for (int s = 0; s < ns; s++) {
        int c = d > 0 ? (int)ceilf(sf[s] / d) : 0;
        sc[s] = c > smax ? smax : c;
        float D = d * (float)sc[s];
        for (int l = 0; l < sub; l++) {
            int i = s * sub + l;
            int v = D > 0 ? (int)lrintf((x[i] + M[s]) / D) : 0;
            q[i] = v < 0 ? 0 : v > top ? top : v;
            tol[i] = 0.5f * D + eps_rel * (fabsf(x[i]) + M[s] + D);
        }
    }
    *d_out = d;
    *dmin_out = dmin;
}

static void pack_kq_scales(uint8_t *s, const int *sc, const int *mn)
{
    for (int k = 0; k < 4; k++) {
        s[k] = (uint8_t)((sc[k] & 63) | (sc[k + 4] >> 4) << 6);
        s[k + 4] = (uint8_t)((mn[k] & 63) | (mn[k + 4] >> 4) << 6);
        s[k + 8] = (uint8_t)((sc[k + 4] & 15) | (mn[k + 4] & 15) << 4);
    }
}

static void quant_q4_k(uint8_t *b, const float *x, float *tol)
{
    float d, dmin;
    int sc[8], mn[8], q[256];
    quant_k_min(x, 32, 15, 63, &d, &dmin, sc, mn, q, tol);
    put16(b, ifd_f32_to_f16(d));
    put16(b + 2, ifd_f32_to_f16(dmin));
    pack_kq_scales(b + 4, sc, mn);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b[16 + 32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
}

static void quant_q5_k(uint8_t *b, const float *x, float *tol)
{
    float d, dmin;
    int sc[8], mn[8], q[256];
    quant_k_min(x, 32, 31, 63, &d, &dmin, sc, mn, q, tol);
    put16(b, ifd_f32_to_f16(d));
    put16(b + 2, ifd_f32_to_f16(dmin));
    pack_kq_scales(b + 4, sc, mn);
    memset(b + 16, 0, 32);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
            b[48 + 32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            b[16 + l] |= (uint8_t)(((lo >> 4) & 1) << (2 * c) | ((hi >> 4) & 1) << (2 * c + 1));
        }
    }
}

static void quant_q2_k(uint8_t *b, const float *x, float *tol)
{
    float d, dmin;
    int sc[16], mn[16], q[256];
    quant_k_min(x, 16, 3, 15, &d, &dmin, sc, mn, q, tol);
    for (int k = 0; k < 16; k++)
        b[k] = (uint8_t)(sc[k] | mn[k] << 4);
    memset(b + 16, 0, 64);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, j = (i % 128) / 32;
        b[16 + 32 * h + i % 32] |= (uint8_t)(q[i] << (2 * j));
    }
    put16(b + 80, ifd_f32_to_f16(d));
    put16(b + 82, ifd_f32_to_f16(dmin));
}

/*
 * The symmetric K-quants (Q3_K, Q6_K): sub-blocks of 16, y = D·q with
 * D = d·sc, sc signed (a random sign per sub-block exercises negative
 * scales), |q| <= qmax so the grid covers ±amax: every element within |D|/2.
 */
static void quant_k_sym(const float *x, int qmax, int smax, float *d_out, int *sc, int *q,
                        float *tol)
{
    float sf[16], maxsf = 0;
    for (int s = 0; s < 16; s++) {
        float amax = 0;
        for (int l = 0; l < 16; l++)
            amax = fmaxf(amax, fabsf(x[16 * s + l]));
        sf[s] = amax / (float)qmax;
        maxsf = fmaxf(maxsf, sf[s]);
    }
    float d = ifd_f16_to_f32(f16_up(maxsf / (float)smax));
    for (int s = 0; s < 16; s++) {
        int c = d > 0 ? (int)ceilf(sf[s] / d) : 0;
        c = c > smax ? smax : c;
        sc[s] = (rnd64() & 1) ? -c : c;
        float D = d * (float)sc[s];
        for (int l = 0; l < 16; l++) {
            int i = 16 * s + l;
            int v = D != 0 ? (int)lrintf(x[i] / D) : 0;
            q[i] = v < -qmax ? -qmax : v > qmax ? qmax : v;
            tol[i] = 0.5f * fabsf(D) + eps_rel * (fabsf(x[i]) + fabsf(D));
        }
    }
    *d_out = d;
}

static void quant_q3_k(uint8_t *b, const float *x, float *tol)
{
    float d;
    int sc[16], q[256];
    quant_k_sym(x, 3, 31, &d, sc, q, tol);
    memset(b, 0, 110);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, j = (i % 128) / 32;
        int u = q[i] + 4; /* 0..7: bit 2 → hmask, low 2 bits → qs */
        b[32 + 32 * h + i % 32] |= (uint8_t)((u & 3) << (2 * j));
        b[i % 32] |= (uint8_t)((u >> 2) << (i / 32));
    }
    uint8_t *s = b + 96;
    for (int k = 0; k < 16; k++) {
        int v = sc[k] + 32; /* 1..63 */
        if (k < 8)
            s[k] |= (uint8_t)(v & 15);
        else
            s[k - 8] |= (uint8_t)((v & 15) << 4);
        s[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
    }
    put16(b + 108, ifd_f32_to_f16(d));
}

static void quant_q6_k(uint8_t *b, const float *x, float *tol)
{
    float d;
    int sc[16], q[256];
    quant_k_sym(x, 31, 127, &d, sc, q, tol);
    memset(b, 0, 210);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, r = i % 128, k = r / 32, l = r % 32;
        int u = q[i] + 32; /* 1..63 */
        b[64 * h + l + (k & 1) * 32] |= (uint8_t)((u & 15) << (k >= 2 ? 4 : 0));
        b[128 + 32 * h + l] |= (uint8_t)((u >> 4) << (2 * k));
    }
    for (int k = 0; k < 16; k++)
        b[192 + k] = (uint8_t)(int8_t)sc[k];
    put16(b + 208, ifd_f32_to_f16(d));
}

/* Test data: per block a random magnitude over 9 decades and an offset; per
 * 16-element group a random spread; some all-zero, constant and all-positive
 * groups. */
static void make_data(float *x, int n)
{
    for (int i0 = 0; i0 < n; i0 += 256) {
        double scale = exp(rnd_unif() * 20.0 - 14.0);
        double off = rnd_unif() < 0.3 ? rnd_gauss() * scale : 0.0;
        for (int g = i0; g < i0 + 256 && g < n; g += 16) {
            double spread = scale * (0.05 + rnd_unif());
            int kind = (int)(rnd64() % 16);
            for (int l = g; l < g + 16 && l < n; l++) {
                if (kind == 0)
                    x[l] = 0.0f;
                else if (kind == 1)
                    x[l] = (float)(off + scale);
                else if (kind == 2)
                    x[l] = (float)(spread * (1.0 + rnd_unif()));
                else
                    x[l] = (float)(off + spread * rnd_gauss());
            }
        }
    }
}

static const struct {
    uint32_t type;
    quant_fn quant;
} quants[] = {
    {IFD_GGML_Q4_0, quant_q4_0}, {IFD_GGML_Q4_1, quant_q4_1}, {IFD_GGML_Q5_0, quant_q5_0},
    {IFD_GGML_Q5_1, quant_q5_1}, {IFD_GGML_Q8_0, quant_q8_0}, {IFD_GGML_IQ4_NL, quant_iq4_nl},
    {IFD_GGML_Q2_K, quant_q2_k}, {IFD_GGML_Q3_K, quant_q3_k}, {IFD_GGML_Q4_K, quant_q4_k},
    {IFD_GGML_Q5_K, quant_q5_k}, {IFD_GGML_Q6_K, quant_q6_k},
};

START_TEST(test_quant_round_trip)
{
    enum { N = 256 * 96 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *tol = malloc(N * sizeof *tol);
    uint8_t *buf = malloc(N * 2);
    ck_assert(x && y && tol && buf);
    make_data(x, N);
    for (size_t t = 0; t < sizeof quants / sizeof quants[0]; t++) {
        uint32_t ty = quants[t].type;
        int be = (int)ifd_ggml_block_elems(ty), bb = (int)ifd_ggml_block_bytes(ty);
        for (int k = 0; k < N / be; k++)
            quants[t].quant(buf + (size_t)k * bb, x + (size_t)k * be, tol + (size_t)k * be);
        dq(y, buf, ty, N);
        double worst = 0, se = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            double err = fabs((double)y[i] - x[i]);
            IFD_CHECK(err <= tol[i], "%s elem %d: x %g y %g err %g > tol %g",
                      ifd_ggml_type_name(ty), i, (double)x[i], (double)y[i], err, (double)tol[i]);
            if (tol[i] > 0 && err / tol[i] > worst)
                worst = err / tol[i];
            se += err * err;
            sx += (double)x[i] * x[i];
            /* And bit-exact against the spec decoder. */
            float want = ref_elem(ty, buf + (size_t)(i / be) * bb, i % be);
            IFD_CHECK(fbits(y[i]) == fbits(want), "elem %d: %08x, want %08x", i, fbits(y[i]),
                      fbits(want));
        }
        printf("%-7s max err/tol %.3f  rel rms err %.2e\n", ifd_ggml_type_name(ty), worst,
               sqrt(se / sx));
    }
    /* The float types round-trip exactly (F16/BF16 on values they hold). */
    for (int i = 0; i < N; i++)
        x[i] = ifd_bf16_to_f32(ifd_f32_to_bf16(ifd_f16_to_f32(ifd_f32_to_f16(x[i]))));
    uint16_t *h = (uint16_t *)buf;
    ifd_f32_to_f16_n(h, x, N);
    dq(y, h, IFD_GGML_F16, N);
    for (int i = 0; i < N; i++)
        IFD_CHECK(fbits(y[i]) == fbits(f16r(x[i])), "f16 elem %d", i);
    ifd_f32_to_bf16_n(h, x, N);
    dq(y, h, IFD_GGML_BF16, N);
    for (int i = 0; i < N; i++)
        IFD_CHECK(fbits(y[i]) == fbits(ifd_bf16_to_f32(ifd_f32_to_bf16(x[i]))), "bf16 elem %d", i);
    dq(y, x, IFD_GGML_F32, N);
    ck_assert(memcmp(x, y, N * sizeof *x) == 0);
    free(x);
    free(y);
    free(tol);
    free(buf);
}
END_TEST

/* ---- 5. errors ------------------------------------------------------------------ */

START_TEST(test_errors)
{
    uint8_t x[512] = {0};
    float y[512];
    ck_assert_int_eq(ifd_cpu_dequantize(y, x, IFD_GGML_Q4_0, 31), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dequantize(y, x, IFD_GGML_Q4_K, 32), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dequantize(y, x, IFD_GGML_Q8_0, -32), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dequantize(y, x, IFD_GGML_Q8_0, 0), 0);
    ck_assert_int_eq(ifd_cpu_dequantize(NULL, x, IFD_GGML_Q8_0, 32), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_dequantize(y, NULL, IFD_GGML_Q8_0, 32), IFD_EINVAL);
    const uint32_t unsupported[] = {IFD_GGML_Q8_1,
                                    IFD_GGML_Q8_K,
                                    IFD_GGML_IQ2_XXS,
                                    IFD_GGML_IQ4_XS,
                                    IFD_GGML_I32,
                                    IFD_GGML_F64,
                                    IFD_GGML_TQ1_0,
                                    IFD_GGML_MXFP4,
                                    4,
                                    31,
                                    999};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        ck_assert_int_eq(ifd_cpu_dequantize(y, x, unsupported[i], 256), IFD_ENOTSUP);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dequant");
    ifd_test_case(s, "fp16", 60,
                  IFD_TESTS(test_f16_all_patterns, test_f32_to_f16_rounding, test_bf16));
    ifd_test_case(s, "dequant", 60,
                  IFD_TESTS(test_hand_legacy, test_hand_q4_k_q5_k, test_hand_q6_k,
                            test_hand_q2_k_q3_k, test_random_bytes_vs_spec,
                            test_random_bytes_scalar_path, test_quant_round_trip, test_errors));
    return ifd_test_run(s);
}
