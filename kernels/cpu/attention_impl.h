/*
 * attention_impl.h — internal to kernels/cpu: what attention.c (the KV rows,
 * the f32/f16 paths, the scheduling) and attention_q.c (the quantized-query
 * path of Q8_0/Q4_0 K/V) share: the row layout, the limits, and the
 * functions one calls in the other. Not an API: cpu_kernels.h is.
 * Threading: every function is reentrant; the chunk kernels write only the
 * state they are handed.
 */
#ifndef IFD_KERNELS_CPU_ATTENTION_IMPL_H
#define IFD_KERNELS_CPU_ATTENTION_IMPL_H

#include "cpu_kernels.h"
#include "cpu_simd.h"
#include "fp16.h"

#include <stdint.h>
#include <string.h>

enum {
    IFD__ATT_MAX_HEAD_DIM = 256,
    IFD__ATT_MAX_GROUP = 32,      /* query heads per KV head */
    IFD__ATT_MAX_ITEM_HEADS = 64, /* query heads one work item may serve */
    IFD__ATT_CHUNK = 16,          /* positions per online-softmax step */
    IFD__ATT_PART = 64,           /* positions per partition (a multiple of the chunk) */
};

enum { IFD__QK = 32 }; /* values per scale of Q8_0/Q4_0 */

/* Bytes of a block-type row's quants: its f16 scales start there. */
static inline int64_t ifd__row_qbytes(int dt, int hd)
{
    return dt == IFD_DTYPE_Q4_0 ? hd / 2 : hd;
}

/* Bytes of one row (0: a dtype or head_dim the layout cannot hold). */
static inline int64_t ifd__row_bytes(int dt, int hd)
{
    switch (dt) {
    case IFD_DTYPE_F32:
        return (int64_t)hd * 4;
    case IFD_DTYPE_F16:
    case IFD_DTYPE_BF16:
        return (int64_t)hd * 2;
    case IFD_DTYPE_Q8_0:
    case IFD_DTYPE_Q4_0:
        return hd % IFD__QK ? 0 : ifd__row_qbytes(dt, hd) + (int64_t)hd / IFD__QK * 2;
    case IFD_DTYPE_FP8: /* e4m3 codes, then one f32 scale */
        return hd % IFD__QK ? 0 : (int64_t)hd + 4;
    default:
        return 0;
    }
}

/* The scale of values [32b, 32b + 32) of a block-type row. */
static inline float ifd__row_scale(const char *row, int dt, int hd, int b)
{
    uint16_t h;
    memcpy(&h, row + ifd__row_qbytes(dt, hd) + 2 * b, 2);
    return ifd_f16_to_f32(h);
}

enum {
    IFD__QROW = 64,
    IFD__QMAXB = IFD__ATT_MAX_HEAD_DIM / IFD__QK,
    IFD__QMAXC = IFD__ATT_MAX_HEAD_DIM / IFD__QROW
};

/* Bytes of a quantized query row (its quants; its scales are qrow/32 floats). */
static inline int64_t ifd__qrow(int hd)
{
    return (hd + IFD__QROW - 1) / IFD__QROW * IFD__QROW;
}

/* The signed quant of element e of a Q8_0/Q4_0 row. */
static inline int ifd__row_quant(const char *row, int e, int dt)
{
    if (dt == IFD_DTYPE_Q8_0)
        return ((const int8_t *)row)[e];
    const uint8_t byte = ((const uint8_t *)row)[e / IFD__QK * 16 + e % 16];
    return (e % IFD__QK < 16 ? byte & 15 : byte >> 4) - 8;
}

/* attention.c: a chunk's n rows of a K or V region as f32 (buf when they
 * need converting), and the online-softmax update of one query head by a
 * chunk's scaled scores s (overwritten with their weights). */
const float *ifd__rows_f32(const ifd_kv_layer_t *kv, const void *region, int64_t off, int n,
                           float *buf);
void ifd__online_scalar(float *s, int n, const float *V, int hd, float *m, float *l, float *ag);

/* attention_q.c ("the quantized-query path"): one query row quantized, and
 * one chunk of n positions at byte offset base for the G query heads of a KV
 * head (qi/qd: their quantized rows, ifd__qrow(hd) apart; qo their offsets,
 * ifd__qrow(hd) / 32 apart) — scalar (V through vbuf), AVX2 and AVX-512 VNNI. */
void ifd__quant_query(int8_t *restrict qi, float *restrict qd, const float *restrict x, int hd);
/* The offsets −o·Σ q per 32-value block of the quantized query row qi
 * (ifd__qrow(hd) / 32 of them; o = 128 over Q8_0, 8 over Q4_0: the AVX-512
 * path's unsigned K bytes are k + o). */
void ifd__quant_query_offsets(int32_t *restrict qo, const int8_t *restrict qi, int hd, int dt);
void ifd__chunk_qscalar(const int8_t *qi, const float *qd, const ifd_kv_layer_t *kv, int64_t base,
                        int n, int G, float scale, float *m, float *l, float *acc, float *vbuf);
#if IFD__X86
void ifd__chunk_q512_kv(const ifd_kv_layer_t *kv, int64_t base, int n, const int8_t *qi,
                        const float *qd, const int32_t *qo, int G, float scale, float *m, float *l,
                        float *acc);
void ifd__chunk_q256_kv(const ifd_kv_layer_t *kv, int64_t base, int n, const int8_t *qi,
                        const float *qd, int G, float scale, float *m, float *l, float *acc);
#endif

#endif
