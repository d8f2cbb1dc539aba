/*
 * dequant.c — ggml block formats to f32 (ifd_cpu_dequantize, cpu_kernels.h).
 *
 * One table maps each supported ggml type to a row function that decodes a
 * run of whole blocks. Block layouts follow MODEL-FORMATS.md §3 (ggml's
 * formats): fp16 fields little-endian at the offsets given there, the
 * "split halves" nibble order (low nibbles are elements 0..15, high nibbles
 * 16..31) of the legacy 32-element blocks and of Q4_K/Q5_K's 64-element
 * chunks, Q2_K/Q3_K/Q6_K's d stored after the quants.
 *
 * Invariant: the arithmetic is done in f32 in the same order as ggml's and
 * gguf-py's reference dequantizers — e.g. Q4_1 is d·q + m, Q4_K is
 * (d·sc)·q − (dmin·m), Q6_K is (d·sc)·q — with no fused multiply-add, so the
 * output is bit-identical to theirs (tests/integration/test_dequant_vs_gguf.py).
 *
 * Speed: every row function is instantiated twice from one body, plain and
 * with target("avx2,f16c") so that the compiler vectorizes the per-block
 * loops with 256-bit registers and converts the fp16 scales with F16C; the
 * choice is made once per call from ifd_cpu_features().
 */
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"
#include "error.h"
#include "fp16.h"
#include "kernels.h"
#include "modelfile/ggml_types.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define IFD__DQ_X86 1
#else
#define IFD__DQ_X86 0
#endif

#define QK_K 256

/* Decodes nb consecutive blocks of x into y. */
typedef void (*dq_row_fn)(float *restrict y, const uint8_t *restrict x, int64_t nb);

static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

static inline uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* fp16 field → f32: portable, and the F16C instruction for the AVX2 copies. */
static inline float h2f_plain(const uint8_t *p)
{
    return ifd_f16_to_f32(rd16(p));
}

#if IFD__DQ_X86
__attribute__((target("f16c"), always_inline)) static inline float h2f_f16c(const uint8_t *p)
{
    return _cvtsh_ss(rd16(p));
}
#endif

/* ---- block decoders ---------------------------------------------------------
 * Each takes the block's fp16 fields already converted (dd[0], dd[1]) so the
 * same body serves both instantiations. */

#define DQ_INLINE __attribute__((always_inline)) static inline

DQ_INLINE void blk_q4_0(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0];
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 0xF) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

DQ_INLINE void blk_q4_1(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0], m = dd[1];
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0xF) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

DQ_INLINE void blk_q5_0(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0];
    const uint32_t qh = rd32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (int)((qs[j] & 0xF) | ((qh >> j) & 1u) << 4);
        int hi = (int)((qs[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

DQ_INLINE void blk_q5_1(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0], m = dd[1];
    const uint32_t qh = rd32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        uint32_t lo = (qs[j] & 0xFu) | ((qh >> j) & 1u) << 4;
        uint32_t hi = (uint32_t)(qs[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4;
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

DQ_INLINE void blk_q8_0(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0];
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++)
        y[j] = (float)qs[j] * d;
}

DQ_INLINE void blk_iq4_nl(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0];
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4nl_values[qs[j] & 0xF];
        y[j + 16] = d * (float)iq4nl_values[qs[j] >> 4];
    }
}

/* Q2_K: 0 scales[16] · 16 qs[64] · 80 d · 82 dmin. */
DQ_INLINE void blk_q2_k(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0], dmin = dd[1];
    const uint8_t *sc = b, *qs = b + 16;
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 4; j++) {
            for (int g = 0; g < 2; g++) {
                const uint8_t s = sc[8 * h + 2 * j + g];
                const float dl = d * (float)(s & 0xF), ml = dmin * (float)(s >> 4);
                const uint8_t *q = qs + 32 * h + 16 * g;
                float *o = y + 128 * h + 32 * j + 16 * g;
                for (int l = 0; l < 16; l++)
                    o[l] = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
            }
        }
    }
}

/* Q3_K: 0 hmask[32] · 32 qs[64] · 96 scales[12] · 108 d. */
DQ_INLINE void blk_q3_k(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0];
    const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
    float dl[16];
    for (int k = 0; k < 16; k++) {
        int low4 = k < 8 ? (s[k] & 0xF) : (s[k - 8] >> 4);
        int high2 = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        dl[k] = d * (float)((low4 | high2 << 4) - 32);
    }
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 4; j++) {
            const int hbit = 4 * h + j;
            for (int g = 0; g < 2; g++) {
                const float sc = dl[8 * h + 2 * j + g];
                const uint8_t *q = qs + 32 * h + 16 * g, *m = hm + 16 * g;
                float *o = y + 128 * h + 32 * j + 16 * g;
                for (int l = 0; l < 16; l++) {
                    int v = ((q[l] >> (2 * j)) & 3) - (((m[l] >> hbit) & 1) ? 0 : 4);
                    o[l] = sc * (float)v;
                }
            }
        }
    }
}

/* The 6-bit scales and mins of Q4_K / Q5_K, from their 12 packed bytes. */
DQ_INLINE void kq_scale_min(const uint8_t *s, uint8_t sc[8], uint8_t mn[8])
{
    for (int k = 0; k < 4; k++) {
        sc[k] = s[k] & 63;
        mn[k] = s[k + 4] & 63;
        sc[k + 4] = (uint8_t)((s[k + 8] & 0xF) | ((s[k] >> 6) << 4));
        mn[k + 4] = (uint8_t)((s[k + 8] >> 4) | ((s[k + 4] >> 6) << 4));
    }
}

/* Q4_K: 0 d · 2 dmin · 4 scales[12] · 16 qs[128]. */
DQ_INLINE void blk_q4_k(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0], dmin = dd[1];
    uint8_t sc[8], mn[8];
    kq_scale_min(b + 4, sc, mn);
    const uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++) {
        const float d1 = d * (float)sc[2 * c], m1 = dmin * (float)mn[2 * c];
        const float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)mn[2 * c + 1];
        const uint8_t *q = qs + 32 * c;
        float *o = y + 64 * c;
        for (int l = 0; l < 32; l++) {
            o[l] = d1 * (float)(q[l] & 0xF) - m1;
            o[l + 32] = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: 0 d · 2 dmin · 4 scales[12] · 16 qh[32] · 48 qs[128]. */
DQ_INLINE void blk_q5_k(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0], dmin = dd[1];
    uint8_t sc[8], mn[8];
    kq_scale_min(b + 4, sc, mn);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int c = 0; c < 4; c++) {
        const float d1 = d * (float)sc[2 * c], m1 = dmin * (float)mn[2 * c];
        const float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)mn[2 * c + 1];
        const uint8_t *q = qs + 32 * c;
        float *o = y + 64 * c;
        for (int l = 0; l < 32; l++) {
            uint32_t lo = (q[l] & 0xFu) | ((qh[l] >> (2 * c)) & 1u) << 4;
            uint32_t hi = (uint32_t)(q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1u) << 4;
            o[l] = d1 * (float)lo - m1;
            o[l + 32] = d2 * (float)hi - m2;
        }
    }
}

/* Q6_K: 0 ql[128] · 128 qh[64] · 192 scales[16] (int8) · 208 d. */
DQ_INLINE void blk_q6_k(float *restrict y, const uint8_t *restrict b, const float *dd)
{
    const float d = dd[0];
    const int8_t *scales = (const int8_t *)(b + 192);
    float ds[16];
    for (int k = 0; k < 16; k++)
        ds[k] = d * (float)scales[k];
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        float *o = y + 128 * h;
        const float *s = ds + 8 * h;
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = (int)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            o[l] = s[is] * (float)q1;
            o[l + 32] = s[is + 2] * (float)q2;
            o[l + 64] = s[is + 4] * (float)q3;
            o[l + 96] = s[is + 6] * (float)q4;
        }
    }
}

/* ---- row functions: two instantiations of each block loop --------------------
 * DQ_ROWS(name, elements, bytes, offset of dd[0], offset of dd[1] or -1). */

#define DQ_LOOP(name, QK, BYTES, OFF0, OFF1, H2F)                                                  \
    for (int64_t i = 0; i < nb; i++) {                                                             \
        const uint8_t *b = x + i * (BYTES);                                                        \
        float dd[2];                                                                               \
        dd[0] = H2F(b + (OFF0));                                                                   \
        dd[1] = (OFF1) >= 0 ? H2F(b + ((OFF1) >= 0 ? (OFF1) : 0)) : 0.0f;                          \
        blk_##name(y + i * (QK), b, dd);                                                           \
    }

#if IFD__DQ_X86
#define DQ_ROWS(name, QK, BYTES, OFF0, OFF1)                                                       \
    static void row_##name(float *restrict y, const uint8_t *restrict x, int64_t nb)               \
    {                                                                                              \
        DQ_LOOP(name, QK, BYTES, OFF0, OFF1, h2f_plain)                                            \
    }                                                                                              \
    __attribute__((target("avx2,f16c"))) static void row_##name##_avx2(                            \
        float *restrict y, const uint8_t *restrict x, int64_t nb)                                  \
    {                                                                                              \
        DQ_LOOP(name, QK, BYTES, OFF0, OFF1, h2f_f16c)                                             \
    }
#define DQ_AVX2(name) row_##name##_avx2
#else
#define DQ_ROWS(name, QK, BYTES, OFF0, OFF1)                                                       \
    static void row_##name(float *restrict y, const uint8_t *restrict x, int64_t nb)               \
    {                                                                                              \
        DQ_LOOP(name, QK, BYTES, OFF0, OFF1, h2f_plain)                                            \
    }
#define DQ_AVX2(name) NULL
#endif

DQ_ROWS(q4_0, 32, 18, 0, -1)
DQ_ROWS(q4_1, 32, 20, 0, 2)
DQ_ROWS(q5_0, 32, 22, 0, -1)
DQ_ROWS(q5_1, 32, 24, 0, 2)
DQ_ROWS(q8_0, 32, 34, 0, -1)
DQ_ROWS(iq4_nl, 32, 18, 0, -1)
DQ_ROWS(q2_k, QK_K, 84, 80, 82)
DQ_ROWS(q3_k, QK_K, 110, 108, -1)
DQ_ROWS(q4_k, QK_K, 144, 0, 2)
DQ_ROWS(q5_k, QK_K, 176, 0, 2)
DQ_ROWS(q6_k, QK_K, 210, 208, -1)

/* The float types: one "block" per element. */
static void row_f32(float *restrict y, const uint8_t *restrict x, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof *y);
}

/* The 16-bit ones convert whole aligned rows with ifd_<T>_to_f32_n and
 * unaligned ones value by value. */
#define ROW_HALF(T)                                                                                \
    static void row_##T(float *restrict y, const uint8_t *restrict x, int64_t n)                   \
    {                                                                                              \
        if (((uintptr_t)x & 1) == 0) {                                                             \
            ifd_##T##_to_f32_n(y, (const uint16_t *)(const void *)x, n);                           \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++)                                                            \
            y[i] = ifd_##T##_to_f32(rd16(x + 2 * i));                                              \
    }
ROW_HALF(f16)
ROW_HALF(bf16)

/* The supported types. Block geometry comes from ggml_types.h; the sizes in
 * DQ_ROWS above are checked against it in ifd_cpu_dequantize's lookup. */
static const struct {
    uint32_t type;
    uint32_t elems, bytes; /* per block, as in ggml_types.h */
    dq_row_fn plain;
    dq_row_fn avx2; /* NULL: the plain one serves (float types, non-x86) */
} dq_table[] = {
    {IFD_GGML_F32, 1, 4, row_f32, NULL},
    {IFD_GGML_F16, 1, 2, row_f16, NULL},
    {IFD_GGML_BF16, 1, 2, row_bf16, NULL},
    {IFD_GGML_Q4_0, 32, 18, row_q4_0, DQ_AVX2(q4_0)},
    {IFD_GGML_Q4_1, 32, 20, row_q4_1, DQ_AVX2(q4_1)},
    {IFD_GGML_Q5_0, 32, 22, row_q5_0, DQ_AVX2(q5_0)},
    {IFD_GGML_Q5_1, 32, 24, row_q5_1, DQ_AVX2(q5_1)},
    {IFD_GGML_Q8_0, 32, 34, row_q8_0, DQ_AVX2(q8_0)},
    {IFD_GGML_IQ4_NL, 32, 18, row_iq4_nl, DQ_AVX2(iq4_nl)},
    {IFD_GGML_Q2_K, QK_K, 84, row_q2_k, DQ_AVX2(q2_k)},
    {IFD_GGML_Q3_K, QK_K, 110, row_q3_k, DQ_AVX2(q3_k)},
    {IFD_GGML_Q4_K, QK_K, 144, row_q4_k, DQ_AVX2(q4_k)},
    {IFD_GGML_Q5_K, QK_K, 176, row_q5_k, DQ_AVX2(q5_k)},
    {IFD_GGML_Q6_K, QK_K, 210, row_q6_k, DQ_AVX2(q6_k)},
};

int ifd_cpu_dequantize(float *restrict y, const void *restrict x, uint32_t type, int64_t n)
{
    for (size_t i = 0; i < sizeof dq_table / sizeof dq_table[0]; i++) {
        if (dq_table[i].type != type)
            continue;
        IFD_ASSERT(dq_table[i].elems == ifd_ggml_block_elems(type) &&
                   dq_table[i].bytes == ifd_ggml_block_bytes(type));
        if (n < 0 || n % dq_table[i].elems != 0)
            return IFD_EINVAL;
        if (n == 0)
            return 0;
        if (!y || !x)
            return IFD_EINVAL;
        dq_row_fn fn = dq_table[i].plain;
        const ifd_cpu_features_t *f = ifd_cpu_features();
        if (dq_table[i].avx2 && f->avx2 && f->f16c)
            fn = dq_table[i].avx2;
        fn(y, (const uint8_t *)x, n / dq_table[i].elems);
        return 0;
    }
    return IFD_ENOTSUP;
}
