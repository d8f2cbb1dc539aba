/*
 * qmatmul.c — matrix products on ggml-quantized weights with 8-bit
 * activations (qmatmul.h has the contract).
 *
 * Every supported type is first decoded, block by 32-element block, into one
 * canonical form: 32 small integers q and one or two f32 numbers, such that
 * the weight is ws·(q − zp) (Q4_0, Q5_0, Q8_0), ws·q + wm (Q4_1, Q5_1, and
 * the K-quants Q4_K/Q5_K with ws = d·sc, wm = −dmin·m, both exact in f32),
 * or ws_lo·q / ws_hi·q on the two 16-element halves (Q6_K, q − 32 signed).
 * Those values are exactly the ones ifd_cpu_dequantize produces.
 *
 * Packed layout ("8-row groups"): rows are taken 8 at a time (the last group
 * zero-padded); a group stores (K-quants only) one header per 256-element
 * super-block, d[8] and (Q4_K/Q5_K) dmin[8] as f16, then its k/32 blocks one
 * after the other, each
 *   ws[8] then wm[8] or ws_hi[8] when the type has one: f16 for the legacy
 *   types; for the K-quants the 8-bit integer scales (sc and m, unsigned
 *   6-bit, or Q6_K's signed sc_lo, sc_hi), from which the kernels form
 *   ws = d·sc, wm = −(dmin·m) exactly as the decoders do (the file's bytes
 *   +3% instead of +30% with f32 products),
 *   then (5-bit types) one 32-byte vector H of high bits, (Q6_K) two, H0
 *   and H1, then the quants:
 *   4-bit: 4 vectors of 32 bytes; vector g, byte r·4 + t holds element
 *     4g + t of row r in its low nibble and element 16 + 4g + t in its high
 *     nibble;
 *   5-bit: the same 4 vectors and bytes, but byte p = r·4 + t of vector g
 *     holds all 5 bits of element 4g + t in bits 0..4 and the low 3 bits of
 *     element 16 + 4g + t in bits 5..7, whose top 2 bits are bits 2g, 2g + 1
 *     of H's byte p. Unpacking is an and (& 0x1F) for the first, and
 *     (A >> 5) & 0x07 | (H shifted by 3 − 2g) & 0x18 for the second, the
 *     shifts within 16-bit lanes: what crosses into the neighbouring byte
 *     lands outside the bits kept (3..7 for >> 5, 0..2 or 5..7 for the
 *     shifts of H by ≤ 3);
 *   6-bit (Q6_K, u = q + 32 ∈ [0, 63]): the 4-bit vectors hold the low
 *     nibbles of u, bits 2g, 2g + 1 of H0's byte p the top 2 bits of element
 *     4g + t, of H1's byte p those of element 16 + 4g + t; unpacked as
 *     nibble | (H shifted by 4 − 2g) & 0x30, multiplied as unsigned bytes,
 *     and 32·Σx of each half (the activations' h and s − h) subtracted from
 *     the half's integer sum. 208 bytes a block-group: exactly the file's 210 bytes
 *     a row and super-block (until 2026-12-06 the 6-bit quants were stored as
 *     bytes, +30%);
 *   8-bit: 8 vectors; vector g, byte r·4 + t is element 4g + t of row r,
 *     stored as u = q + 128 (zero point 128, so VNNI multiplies it as the
 *     unsigned operand with no sign fix-up: 8 instructions a row and block
 *     fewer than |w| times x with w's sign; the AVX2 path, whose maddubs
 *     would saturate on u, xors it back to q once per block).
 * So a vector of nibbles, masked or shifted, is "4 consecutive columns of
 * 8 rows" as unsigned bytes, and one maddubs against the activation's 4
 * bytes broadcast to every lane gives each row's partial dot in its own
 * lane: the 8 lanes of the f32 accumulator are the 8 rows, no horizontal
 * sums, and the integer sums are exact (their magnitude bounds are noted
 * where they are added in 16 bits).
 *
 * AVX-512 VNNI puts two row groups in one vector (lanes 0..7 group G, 8..15
 * group G + 1, their halves loaded from the two groups) and forms the same
 * integer sums with vpdpbusd (non-saturating u8 × s8 in 32-bit lanes).
 *
 * Order: per output, blocks in order, each folded in with the fma formula
 * of qmatmul.h. The scalar loop and the AVX2 and AVX-512 lanes do the same
 * IEEE operations, so they agree bitwise; tiles of 1..4 activation rows
 * share the weight unpacking but never an accumulator, so the batch size
 * does not change a result either.
 *
 * Parallelism: tasks take contiguous ranges of row groups (pairs, so no two
 * tasks write one 64-byte line of y); activation rows are walked in chunks
 * of 64 so a chunk of x stays in L2 while the task's weights stream past.
 */
#include "qmatmul.h"

#include "cpu_kernels.h"
#include "cpu_simd.h"
#include "error.h"
#include "modelfile/ggml_types.h"

#include <math.h>
#include <string.h>

enum {
    QB = 32,       /* elements per canonical block */
    QG = 8,        /* rows per group */
    QM_CHUNK = 64, /* activation rows per pass over a task's weights */
};

/* ---- type table and canonical decode --------------------------------------- */

typedef struct {
    int16_t q[QB];
    float ws, w2; /* w2: the min (two == 1) or the upper half's scale (two == 2) */
    /* K-quants: the raw parts, ws = f16(d)·sc and w2 = −(f16(dmin)·sc2)
     * (Q4_K/Q5_K, sc and sc2 unsigned 6-bit) or f16(d)·sc2 (Q6_K, int8) */
    uint16_t d, dmin;
    int16_t sc, sc2;
} qblk_t;

typedef void (*qdecode_fn)(qblk_t *o, const uint8_t *row, int b);

typedef struct {
    uint32_t type;
    int qk, bytes; /* ggml block geometry */
    int bits;      /* 4, 5, 6 or 8 */
    int kq;        /* K-quant: f16 d (and dmin) per super-block, integer scales per block */
    int two;       /* 0: none, 1: min, 2: half-block scales */
    int zp;        /* zero point subtracted from q */
    qdecode_fn decode;
} qtype_t;

static inline uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void dec_q4_0(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)b * 18;
    o->ws = ifd_f16_to_f32(rd16(blk));
    o->w2 = 0;
    for (int j = 0; j < 16; j++) {
        o->q[j] = blk[2 + j] & 0xF;
        o->q[j + 16] = blk[2 + j] >> 4;
    }
}

static void dec_q4_1(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)b * 20;
    o->ws = ifd_f16_to_f32(rd16(blk));
    o->w2 = ifd_f16_to_f32(rd16(blk + 2));
    for (int j = 0; j < 16; j++) {
        o->q[j] = blk[4 + j] & 0xF;
        o->q[j + 16] = blk[4 + j] >> 4;
    }
}

static void dec_q5_0(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)b * 22;
    o->ws = ifd_f16_to_f32(rd16(blk));
    o->w2 = 0;
    uint32_t qh = rd32(blk + 2);
    for (int j = 0; j < 16; j++) {
        o->q[j] = (int16_t)((blk[6 + j] & 0xF) | ((qh >> j) & 1u) << 4);
        o->q[j + 16] = (int16_t)((blk[6 + j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
    }
}

static void dec_q5_1(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)b * 24;
    o->ws = ifd_f16_to_f32(rd16(blk));
    o->w2 = ifd_f16_to_f32(rd16(blk + 2));
    uint32_t qh = rd32(blk + 4);
    for (int j = 0; j < 16; j++) {
        o->q[j] = (int16_t)((blk[8 + j] & 0xF) | ((qh >> j) & 1u) << 4);
        o->q[j + 16] = (int16_t)((blk[8 + j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
    }
}

static void dec_q8_0(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)b * 34;
    o->ws = ifd_f16_to_f32(rd16(blk));
    o->w2 = 0;
    for (int j = 0; j < 32; j++) /* u = q + 128 ∈ [0, 255]: zero point 128 (see the layout) */
        o->q[j] = (int16_t)((int8_t)blk[2 + j] + 128);
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block. */
static void kq_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Sub-block j (32 elements) of a K super-block: chunk j/2 of 32 bytes, low
 * nibbles for even j, high for odd (MODEL-FORMATS.md §3). */
static void dec_q4_k(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)(b / 8) * 144;
    const int j = b % 8;
    int sc, mn;
    kq_scale_min(blk + 4, j, &sc, &mn);
    o->ws = ifd_f16_to_f32(rd16(blk)) * (float)sc;
    o->w2 = -(ifd_f16_to_f32(rd16(blk + 2)) * (float)mn);
    o->d = rd16(blk), o->dmin = rd16(blk + 2), o->sc = (int16_t)sc, o->sc2 = (int16_t)mn;
    const uint8_t *q = blk + 16 + 32 * (j / 2);
    for (int l = 0; l < 32; l++)
        o->q[l] = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
}

static void dec_q5_k(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)(b / 8) * 176;
    const int j = b % 8;
    int sc, mn;
    kq_scale_min(blk + 4, j, &sc, &mn);
    o->ws = ifd_f16_to_f32(rd16(blk)) * (float)sc;
    o->w2 = -(ifd_f16_to_f32(rd16(blk + 2)) * (float)mn);
    o->d = rd16(blk), o->dmin = rd16(blk + 2), o->sc = (int16_t)sc, o->sc2 = (int16_t)mn;
    const uint8_t *qh = blk + 16, *q = blk + 48 + 32 * (j / 2);
    for (int l = 0; l < 32; l++) {
        int lo = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
        o->q[l] = (int16_t)(lo | ((qh[l] >> j) & 1) << 4);
    }
}

/* Q6_K element e = 128h + 32c + l: low 4 bits from ql[64h + l + 32(c&1)]
 * (high nibble for c ≥ 2), high 2 from qh[32h + l] >> 2c; scale e/16. */
static void dec_q6_k(qblk_t *o, const uint8_t *row, int b)
{
    const uint8_t *blk = row + (size_t)(b / 8) * 210;
    const int e0 = (b % 8) * 32, h = e0 / 128, c = (e0 % 128) / 32;
    const float d = ifd_f16_to_f32(rd16(blk + 208));
    const int8_t *sc = (const int8_t *)(blk + 192);
    const uint8_t *ql = blk + 64 * h + 32 * (c & 1), *qh = blk + 128 + 32 * h;
    for (int l = 0; l < 32; l++) {
        int lo = c >= 2 ? ql[l] >> 4 : ql[l] & 0xF;
        o->q[l] = (int16_t)((lo | ((qh[l] >> (2 * c)) & 3) << 4) - 32);
    }
    o->ws = d * (float)sc[e0 / 16];
    o->w2 = d * (float)sc[e0 / 16 + 1];
    o->d = rd16(blk + 208), o->dmin = 0, o->sc = sc[e0 / 16], o->sc2 = sc[e0 / 16 + 1];
}

static const qtype_t qtypes[] = {
    {IFD_GGML_Q4_0, 32, 18, 4, 0, 0, 8, dec_q4_0},
    {IFD_GGML_Q4_1, 32, 20, 4, 0, 1, 0, dec_q4_1},
    {IFD_GGML_Q5_0, 32, 22, 5, 0, 0, 16, dec_q5_0},
    {IFD_GGML_Q5_1, 32, 24, 5, 0, 1, 0, dec_q5_1},
    {IFD_GGML_Q8_0, 32, 34, 8, 0, 0, 128, dec_q8_0},
    {IFD_GGML_Q4_K, 256, 144, 4, 1, 1, 0, dec_q4_k},
    {IFD_GGML_Q5_K, 256, 176, 5, 1, 1, 0, dec_q5_k},
    {IFD_GGML_Q6_K, 256, 210, 6, 1, 2, 0, dec_q6_k},
};

static const qtype_t *qtype_find(uint32_t type)
{
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; i++)
        if (qtypes[i].type == type)
            return &qtypes[i];
    return NULL;
}

/* Packed bytes of one 32-element block of one 8-row group, and offsets. */
static int qt_scale_bytes(const qtype_t *t)
{
    return (t->kq ? 1 : 2) * QG * (t->two ? 2 : 1);
}

/* A group's super-block headers (K-quants: d[8], then dmin[8] when the
 * type has a min, f16, per 256 elements) before its blocks. */
static int qt_hdr_stride(const qtype_t *t)
{
    return t->kq ? 2 * QG * (t->two == 1 ? 2 : 1) : 0;
}

static int64_t qt_hdr_bytes(const qtype_t *t, int nb)
{
    return (int64_t)qt_hdr_stride(t) * (nb / 8);
}

static int qt_qh_bytes(const qtype_t *t)
{
    return t->bits == 5 ? 32 : t->bits == 6 ? 64 : 0;
}

static int qt_block_bytes(const qtype_t *t)
{
    return qt_scale_bytes(t) + qt_qh_bytes(t) + (t->bits == 8 ? 256 : 128);
}

bool ifd_cpu_qtype_supported(uint32_t type)
{
    return qtype_find(type) != NULL;
}

int64_t ifd_cpu_qweight_bytes(uint32_t type, int n, int k)
{
    const qtype_t *t = qtype_find(type);
    if (!t)
        return IFD_ENOTSUP;
    if (n <= 0 || k <= 0 || k % t->qk)
        return IFD_EINVAL;
    const int nb = k / QB;
    return (int64_t)((n + QG - 1) / QG) * (qt_hdr_bytes(t, nb) + (int64_t)nb * qt_block_bytes(t));
}

static void put_f16(uint8_t *p, int r, float v)
{
    uint16_t h = ifd_f32_to_f16(v); /* exact: v came from an f16 */
    memcpy(p + 2 * r, &h, 2);
}

static float get_f16(const uint8_t *p, int r)
{
    uint16_t h;
    memcpy(&h, p + 2 * r, 2);
    return ifd_f16_to_f32(h);
}

/* Row r's ws and w2 of block b (at blk) of a group (at grp): the decoders'
 * expressions, so the values are bitwise theirs. */
static void blk_scales(const qtype_t *t, const uint8_t *grp, const uint8_t *blk, int b, int r,
                       float *ws, float *w2)
{
    if (!t->kq) {
        *ws = get_f16(blk, r);
        *w2 = t->two ? get_f16(blk + 2 * QG, r) : 0.0f;
        return;
    }
    const uint8_t *h = grp + (int64_t)qt_hdr_stride(t) * (b / 8);
    const float d = get_f16(h, r);
    if (t->two == 1) {
        *ws = d * (float)blk[r];
        *w2 = -(get_f16(h + 2 * QG, r) * (float)blk[QG + r]);
    } else {
        *ws = d * (float)(int8_t)blk[r];
        *w2 = d * (float)(int8_t)blk[QG + r];
    }
}

int ifd_cpu_qweight_pack(void *restrict dst, const void *restrict src, uint32_t type, int n, int k)
{
    int64_t total = ifd_cpu_qweight_bytes(type, n, k);
    if (total < 0)
        return (int)total;
    if (!dst || !src)
        return IFD_EINVAL;
    const qtype_t *t = qtype_find(type);
    const int nb = k / QB, bb = qt_block_bytes(t), scb = qt_scale_bytes(t), qhb = qt_qh_bytes(t);
    const size_t row_bytes = (size_t)(k / t->qk) * t->bytes;
    const int half = scb / 2; /* offset of the second value array */
    const int64_t hdr = qt_hdr_bytes(t, nb), gb = hdr + (int64_t)nb * bb;
    uint8_t *out = dst;
    memset(out, 0, (size_t)total);
    for (int g0 = 0; g0 < n; g0 += QG) {
        uint8_t *grp = out + (int64_t)(g0 / QG) * gb;
        for (int b = 0; b < nb; b++) {
            uint8_t *blk = grp + hdr + (int64_t)b * bb;
            uint8_t *qh = blk + scb, *qs = qh + qhb;
            for (int r = 0; r < QG && g0 + r < n; r++) {
                qblk_t q;
                t->decode(&q, (const uint8_t *)src + (size_t)(g0 + r) * row_bytes, b);
                if (t->kq) { /* the header again for each block: the same values */
                    uint8_t *h = grp + (int64_t)qt_hdr_stride(t) * (b / 8);
                    memcpy(h + 2 * r, &q.d, 2);
                    if (t->two == 1)
                        memcpy(h + 2 * QG + 2 * r, &q.dmin, 2);
                    blk[r] = (uint8_t)q.sc;
                    blk[QG + r] = (uint8_t)q.sc2;
                } else {
                    put_f16(blk, r, q.ws);
                    if (t->two)
                        put_f16(blk + half, r, q.w2);
                }
                for (int e = 0; e < QB; e++) {
                    int v = q.q[e];
                    if (t->bits == 8) { /* u = q + 128 */
                        qs[(e / 4) * 32 + r * 4 + e % 4] = (uint8_t)v;
                        continue;
                    }
                    int hi = e >= 16, g = (e % 16) / 4, p = r * 4 + e % 4;
                    if (t->bits == 6) { /* u = q + 32: low nibble as 4-bit, top 2 in H0/H1 */
                        qs[g * 32 + p] |= (uint8_t)(((v + 32) & 0xF) << (hi ? 4 : 0));
                        qh[32 * hi + p] |= (uint8_t)(((v + 32) >> 4) << (2 * g));
                    } else if (t->bits == 4) {
                        qs[g * 32 + p] |= (uint8_t)((v & 0xF) << (hi ? 4 : 0));
                    } else if (!hi) {
                        qs[g * 32 + p] |= (uint8_t)v;
                    } else {
                        qs[g * 32 + p] |= (uint8_t)((v & 7) << 5);
                        qh[p] |= (uint8_t)((v >> 3) << (2 * g));
                    }
                }
            }
        }
    }
    return 0;
}

/* Element e of row r of a packed block, as the canonical q. */
static int packed_q(const qtype_t *t, const uint8_t *blk, int r, int e)
{
    const uint8_t *qh = blk + qt_scale_bytes(t), *qs = qh + qt_qh_bytes(t);
    if (t->bits == 8)
        return qs[(e / 4) * 32 + r * 4 + e % 4];
    int hi = e >= 16, g = (e % 16) / 4, p = r * 4 + e % 4;
    if (t->bits == 6)
        return (((qs[g * 32 + p] >> (hi ? 4 : 0)) & 0xF) | ((qh[32 * hi + p] >> (2 * g)) & 3)
                                                               << 4) -
               32;
    if (t->bits == 4)
        return (qs[g * 32 + p] >> (hi ? 4 : 0)) & 0xF;
    if (!hi)
        return qs[g * 32 + p] & 0x1F;
    return (qs[g * 32 + p] >> 5) | ((qh[p] >> (2 * g)) & 3) << 3;
}

int ifd_cpu_qweight_row(float *restrict y, const void *restrict wq, uint32_t type, int n, int k,
                        int row)
{
    int64_t total = ifd_cpu_qweight_bytes(type, n, k);
    if (total < 0)
        return (int)total;
    if (row < 0 || row >= n)
        return IFD_EINVAL;
    const qtype_t *t = qtype_find(type);
    const int nb = k / QB, bb = qt_block_bytes(t), r = row % QG;
    const int64_t hdr = qt_hdr_bytes(t, nb);
    const uint8_t *grp = (const uint8_t *)wq + (int64_t)(row / QG) * (hdr + (int64_t)nb * bb);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = grp + hdr + (int64_t)b * bb;
        float ws, w2;
        blk_scales(t, grp, blk, b, r, &ws, &w2);
        float *o = y + (int64_t)b * QB;
        /* the same expressions as dequant.c, so the values match bitwise */
        for (int e = 0; e < QB; e++) {
            int q = packed_q(t, blk, r, e);
            if (t->two == 1)
                o[e] = ws * (float)q + w2;
            else if (t->two == 2)
                o[e] = (e < 16 ? ws : w2) * (float)q;
            else
                o[e] = ws * (float)(q - t->zp);
        }
    }
    return 0;
}

/* ---- activations ------------------------------------------------------------- */

static int64_t align64(int64_t v)
{
    return (v + 63) & ~(int64_t)63;
}

int64_t ifd_cpu_qact_bytes(int m, int k)
{
    if (m <= 0 || k <= 0 || k % QB)
        return IFD_EINVAL;
    int64_t nb = (int64_t)m * (k / QB);
    return align64((int64_t)m * k) + align64(nb * 4) * 4 + 64;
}

int ifd_cpu_qact_init(ifd_cpu_qact_t *a, void *mem, int m, int k)
{
    if (ifd_cpu_qact_bytes(m, k) < 0 || !mem)
        return IFD_EINVAL;
    uint8_t *p = (uint8_t *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    int64_t nb = (int64_t)m * (k / QB);
    a->q = (int8_t *)p;
    a->d = (float *)(p + align64((int64_t)m * k));
    a->s = (int32_t *)((uint8_t *)a->d + align64(nb * 4));
    a->h = (int32_t *)((uint8_t *)a->s + align64(nb * 4));
    a->ds = (float *)((uint8_t *)a->h + align64(nb * 4));
    a->m = m;
    a->k = k;
    return 0;
}

/* d = amax/127, q = round-to-nearest-even(x · 127/amax): the same IEEE
 * operations in both paths. */
static void qact_block_scalar(int8_t *q, float *d, int32_t *s, int32_t *h, const float *x)
{
    float amax = 0.0f;
    for (int j = 0; j < QB; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < QB; j++) {
        q[j] = (int8_t)lrintf(x[j] * id);
        sum += q[j];
        if (j == 15)
            *h = sum;
    }
    *d = amax / 127.0f;
    *s = sum;
}

#if IFD__X86
IFD__TARGET_AVX2 static void qact_block_avx2(int8_t *q, float *d, int32_t *s, int32_t *h,
                                             const float *x)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absm), _mm256_and_ps(v1, absm)),
                              _mm256_max_ps(_mm256_and_ps(v2, absm), _mm256_and_ps(v3, absm)));
    const float amax = ifd__hmax8(mx);
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, id));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, id));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, id));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, id));
    /* lanes: 0..3 the first half's sums (i0 + i1 cover x[0..16)), 4..7 the whole's */
    __m256i lo = _mm256_add_epi32(i0, i1), sum = _mm256_add_epi32(lo, _mm256_add_epi32(i2, i3));
    __m256i both = _mm256_permute2x128_si256(lo, sum, 0x20); /* lo's low, sum's low */
    both = _mm256_add_epi32(both, _mm256_permute2x128_si256(lo, sum, 0x31));
    both = _mm256_add_epi32(both, _mm256_shuffle_epi32(both, 0x4e));
    both = _mm256_add_epi32(both, _mm256_shuffle_epi32(both, 0xb1));
    /* packs work per 128-bit lane: undo the interleave with one permute */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    *d = amax / 127.0f;
    *h = _mm256_cvtsi256_si32(both);
    *s = _mm_cvtsi128_si32(_mm256_extracti128_si256(both, 1));
}
#endif

typedef struct {
    ifd_cpu_qact_t *a;
    const float *x;
    int rows_per_task;
    int isa;
} qact_job_t;

static void qact_task(void *arg, int task, int n_tasks)
{
    (void)n_tasks;
    const qact_job_t *j = arg;
    const int k = j->a->k, nb = k / QB;
    int i0 = task * j->rows_per_task, i1 = i0 + j->rows_per_task;
    if (i1 > j->a->m)
        i1 = j->a->m;
    for (int i = i0; i < i1; i++) {
        for (int b = 0; b < nb; b++) {
            int8_t *q = j->a->q + (int64_t)i * k + b * QB;
            float *d = j->a->d + (int64_t)i * nb + b;
            int32_t *s = j->a->s + (int64_t)i * nb + b, *h = j->a->h + (int64_t)i * nb + b;
            const float *x = j->x + (int64_t)i * k + b * QB;
#if IFD__X86
            if (j->isa >= IFD__ISA_AVX2)
                qact_block_avx2(q, d, s, h, x);
            else
#endif
                qact_block_scalar(q, d, s, h, x);
            j->a->ds[(int64_t)i * nb + b] = *d * (float)*s; /* qmm_scalar's dx * (float)xs[b] */
        }
    }
}

int ifd__cpu_quantize_act_isa(ifd_cpu_qact_t *a, const float *restrict x, ifd_threadpool_t *tp,
                              int isa)
{
    if (!a || !x || a->m <= 0 || a->k <= 0 || a->k % QB)
        return IFD_EINVAL;
    if (isa < 0 || isa > 3 || (isa > 0 && ifd__cpu_isa() < IFD__ISA_AVX2))
        return IFD_ENOTSUP; /* every product path ≥ 1 (qmm_max_isa) quantizes with AVX2 */
    qact_job_t j = {a, x, a->m, isa};
    int tasks = 1;
    /* below ~64K elements a second thread costs more than it saves */
    if ((int64_t)a->m * a->k >= 65536 && ifd_threadpool_size(tp) > 1) {
        tasks = ifd_threadpool_size(tp);
        j.rows_per_task = (a->m + tasks - 1) / tasks;
        tasks = (a->m + j.rows_per_task - 1) / j.rows_per_task;
    }
    ifd_threadpool_run(tasks > 1 ? tp : NULL, qact_task, &j, tasks);
    return 0;
}

int ifd_cpu_quantize_act(ifd_cpu_qact_t *a, const float *restrict x, ifd_threadpool_t *tp)
{
    return ifd__cpu_quantize_act_isa(a, x, tp, ifd__cpu_isa() >= IFD__ISA_AVX2);
}

/* ---- the product --------------------------------------------------------------- */

/* The product's paths (ifd__cpu_qmatmul_isa): AVX-512 needs VNNI too (the
 * AVX-512 CPUs without it, Skylake-SP/X, run the AVX2 path). Which kernel
 * streams a few rows' weights faster depends on the CPU: on a 2-core Zen
 * EPYC the pair kernel (two groups' blocks read side by side) went slower
 * than the AVX2 kernel (one group at a time) below 5 rows (engine decode of
 * SmolLM2 / Gemma 3: −10% at batch 1, −20..−30% at 2-3, −5% at 4,
 * +25..+60% from 5 on; docs/benchmarks.md, "AVX-512"), so AMD CPUs run the
 * AVX2 kernel below QMM_AVX512_MIN_M_AMD rows; on a 2-core Xeon (avx512_fp16
 * generation) the pair kernel was faster at every m (Q4_K at m = 1, 2, 4,
 * prefetched: 24.7 / 23.6 / 20.7 GB/s against 20.9 / 19.4 / 15.8;
 * bench_qstream), so other CPUs run it always. The bits are the same
 * either way. */
enum {
    QMM_PATH_SCALAR = 0,
    QMM_PATH_AVX2 = 1,
    QMM_PATH_AVX512 = 2,
    QMM_PATH_AMX = 3, /* AVX-512 VNNI and, from QMM_AMX_MIN_M activation rows on, AMX-INT8 tiles */
    QMM_AVX512_MIN_M_AMD = 5,
};

static int qmm_max_isa(void)
{
    ifd__isa_t isa = ifd__cpu_isa();
    if (isa >= IFD__ISA_AVX512 && ifd_cpu_features()->avx512vnni)
        return ifd_cpu_features()->amx_int8 ? QMM_PATH_AMX : QMM_PATH_AVX512;
    return isa >= IFD__ISA_AVX2 ? QMM_PATH_AVX2 : QMM_PATH_SCALAR;
}

typedef struct qmm {
    float *y;
    int64_t ldy;
    const ifd_cpu_qact_t *a;
    const uint8_t *w;
    const qtype_t *t;
    int n, nb, bb;
    int64_t hdr, gb; /* a group's header bytes (K-quants) and its whole size */
    int groups_per_task;
    /* the SIMD kernel for groups [G0, G1), chosen once per product; NULL: scalar */
    void (*simd)(const struct qmm *c, int G0, int G1);
} qmm_t;

/* Scalar: the reference order (qmatmul.h), one output at a time. */
static void qmm_scalar(const qmm_t *c, int G0, int G1)
{
    const qtype_t *t = c->t;
    const int k = c->a->k, nb = c->nb;
    for (int G = G0; G < G1; G++) {
        const uint8_t *grp = c->w + (int64_t)G * c->gb;
        const int rows = c->n - G * QG < QG ? c->n - G * QG : QG;
        for (int i = 0; i < c->a->m; i++) {
            const int8_t *xq = c->a->q + (int64_t)i * k;
            const float *xd = c->a->d + (int64_t)i * nb;
            const int32_t *xs = c->a->s + (int64_t)i * nb;
            for (int r = 0; r < rows; r++) {
                float acc = 0.0f;
                for (int b = 0; b < nb; b++) {
                    const uint8_t *blk = grp + c->hdr + (int64_t)b * c->bb;
                    const int8_t *xb = xq + b * QB;
                    int32_t lo = 0, hi = 0;
                    for (int e = 0; e < 16; e++)
                        lo += packed_q(t, blk, r, e) * xb[e];
                    for (int e = 16; e < QB; e++)
                        hi += packed_q(t, blk, r, e) * xb[e];
                    const float dx = xd[b];
                    float ws, w2;
                    blk_scales(t, grp, blk, b, r, &ws, &w2);
                    if (t->two == 2) {
                        acc = fmaf(ws * dx, (float)lo, acc);
                        acc = fmaf(w2 * dx, (float)hi, acc);
                        continue;
                    }
                    acc = fmaf(ws * dx, (float)(lo + hi - t->zp * xs[b]), acc);
                    if (t->two == 1)
                        acc = fmaf(w2, dx * (float)xs[b], acc);
                }
                c->y[(int64_t)i * c->ldy + G * QG + r] = acc;
            }
        }
    }
}

#if IFD__X86

/* Software prefetch: each block's lines QMM_PREFETCH bytes ahead are
 * requested as the block is read, by the first tile of an activation chunk
 * only (the later tiles re-read the same group from cache). With few rows a
 * product streams its weights, and the hardware prefetcher alone left both
 * kernels at about half the read bandwidth: on a 2-core Xeon (29 GB/s
 * streaming read), Q4_K at m = 1 went from 14.9 to 20.9 GB/s (one-group
 * kernel) and from 20.5 to 24.7 GB/s (two-group kernel) with 2 KiB ahead;
 * 3-4 KiB were no better (bench_qstream, docs/benchmarks.md). Reading past
 * the weight's end is harmless: a prefetch never faults. */
enum { QMM_PREFETCH = 2048 };
static int qmm_prefetch = QMM_PREFETCH;

void ifd__cpu_qmatmul_set_prefetch(int bytes)
{
    qmm_prefetch = bytes >= 0 ? bytes : QMM_PREFETCH;
}

IFD__INLINE void qmm_prefetch_block(const uint8_t *blk, int bb, int pf)
{
    if (!pf || !qmm_prefetch)
        return;
    for (int o = 0; o < bb; o += 64)
        _mm_prefetch((const char *)blk + qmm_prefetch + o, _MM_HINT_T0);
}

/* The top 2 bits (at 3, 4) of 5-bit vector W[g + 4] (g = 0..3) from the
 * block's H (the layout comment says why the 16-bit shifts are safe). g is
 * a constant after unrolling, so the branches fold away. */
IFD__TARGET_AVX2 IFD__INLINE __m256i qh_top2(__m256i H, const int g)
{
    __m256i v;
    if (g < 2)
        v = _mm256_slli_epi16(H, 3 - 2 * g);
    else
        v = _mm256_srli_epi16(H, 2 * g - 3);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x18));
}

/* Bits 2g, 2g + 1 of each byte of a 6-bit block's H0 or H1, moved to bits
 * 4, 5 (the 16-bit shifts are safe as in qh_top2: what crosses a byte lands
 * outside 0x30). */
IFD__TARGET_AVX2 IFD__INLINE __m256i qh_hi2(__m256i H, const int g)
{
    __m256i v = g < 2 ? _mm256_slli_epi16(H, 4 - 2 * g) : g == 2 ? H : _mm256_srli_epi16(H, 2);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x30));
}

IFD__TARGET_AVX2 IFD__INLINE __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* y[i0..i0+MI, 8 rows of group G]: one tile; the per-output operations are
 * those of qmm_scalar, lane r being row r. The type's parameters are
 * compile-time constants in each instantiation. */
IFD__TARGET_AVX2 IFD__INLINE void qtile_avx2(const qmm_t *c, int G, int i0, const int MI,
                                             const int BITS, const int KQ, const int TWO,
                                             const int ZP, int pf)
{
    const int k = c->a->k, nb = c->nb, bb = c->bb;
    const int scb = (KQ ? 1 : 2) * QG * (TWO ? 2 : 1), qhb = BITS == 5 ? 32 : BITS == 6 ? 64 : 0;
    const int hs = KQ ? 2 * QG * (TWO == 1 ? 2 : 1) : 0; /* qt_hdr_stride */
    const uint8_t *grp = c->w + (int64_t)G * c->gb, *blocks = grp + c->hdr;
    const __m256 neg0 = _mm256_set1_ps(-0.0f);
    __m256 dv = _mm256_setzero_ps(), mv = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++)
        acc[i] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = blocks + (int64_t)b * bb;
        qmm_prefetch_block(blk, bb, pf);
        const uint8_t *qh = blk + scb, *qs = qh + qhb;
        __m256 ws, w2 = _mm256_setzero_ps();
        if (KQ) { /* blk_scales: d·sc and −(dmin·m), or d·sc_lo and d·sc_hi */
            if ((b & 7) == 0) {
                const uint8_t *h = grp + (int64_t)hs * (b >> 3);
                dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
                if (TWO == 1)
                    mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 16)));
            }
            const __m128i s0 = _mm_loadl_epi64((const __m128i *)blk);
            const __m128i s1 = _mm_loadl_epi64((const __m128i *)(blk + QG));
            if (TWO == 1) {
                ws = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(s0)));
                w2 = _mm256_xor_ps(_mm256_mul_ps(mv, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(s1))),
                                   neg0);
            } else {
                ws = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s0)));
                w2 = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s1)));
            }
        } else {
            ws = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
            if (TWO)
                w2 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
        }
        __m256i W[8];
        if (BITS == 8) { /* u ^ 0x80 = u − 128 = q, signed: maddubs's u8 operand would
                          * saturate its 16-bit pair sums at u up to 255 */
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++)
                W[g] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(qs + 32 * g)),
                                        _mm256_set1_epi8((char)0x80));
        } else if (BITS == 6) { /* u = q + 32 ∈ [0, 63], unsigned */
            const __m256i H0 = _mm256_loadu_si256((const __m256i *)qh),
                          H1 = _mm256_loadu_si256((const __m256i *)(qh + 32));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m256i L = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
                W[g] = _mm256_or_si256(_mm256_and_si256(L, m4), qh_hi2(H0, g));
                W[g + 4] =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), m4), qh_hi2(H1, g));
            }
        } else {
            const __m256i H =
                BITS == 5 ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m256i L = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
                if (BITS == 4) {
                    W[g] = _mm256_and_si256(L, m4);
                    W[g + 4] = _mm256_and_si256(_mm256_srli_epi16(L, 4), m4);
                } else {
                    W[g] = _mm256_and_si256(L, _mm256_set1_epi8(0x1F));
                    W[g + 4] = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(L, 5), _mm256_set1_epi8(0x07)),
                        qh_top2(H, g));
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < MI; i++) {
            const int8_t *xb = c->a->q + (int64_t)(i0 + i) * k + b * QB;
            const float dx = c->a->d[(int64_t)(i0 + i) * nb + b];
            const int32_t sx = c->a->s[(int64_t)(i0 + i) * nb + b];
            __m256i lo, hi;
            if (BITS == 6) {
                /* Σ u·x per half (a maddubs lane ≤ 2·63·127: two of them
                 * fit 16 bits), then − 32·Σx of the half: Σ (u − 32)·x */
                const int32_t sh = c->a->h[(int64_t)(i0 + i) * nb + b];
                __m256i s[8];
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++)
                    s[g] = _mm256_maddubs_epi16(W[g], bcast4(xb + 4 * g));
                lo = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(s[0], s[1]), ones),
                                      _mm256_madd_epi16(_mm256_add_epi16(s[2], s[3]), ones));
                hi = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(s[4], s[5]), ones),
                                      _mm256_madd_epi16(_mm256_add_epi16(s[6], s[7]), ones));
                lo = _mm256_sub_epi32(lo, _mm256_set1_epi32(32 * sh));
                hi = _mm256_sub_epi32(hi, _mm256_set1_epi32(32 * (sx - sh)));
            } else if (BITS == 8) {
                /* signed × signed: |w| (≤ 128) times x with w's sign; one
                 * maddubs pair ≤ 2·128·127 < 2^15, so widen each at once */
                lo = hi = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) {
                    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(W[g], W[g]),
                                                     _mm256_sign_epi8(bcast4(xb + 4 * g), W[g]));
                    p = _mm256_madd_epi16(p, ones);
                    if (g < 4)
                        lo = _mm256_add_epi32(lo, p);
                    else
                        hi = _mm256_add_epi32(hi, p);
                }
            } else {
                /* unsigned nibbles: a maddubs lane ≤ 2·15·127 (4-bit, 8 of
                 * them fit 16 bits) or 2·31·127 (5-bit, 4 of them fit) */
                __m256i s[8];
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++)
                    s[g] = _mm256_maddubs_epi16(W[g], bcast4(xb + 4 * g));
                __m256i l16 =
                    _mm256_add_epi16(_mm256_add_epi16(s[0], s[1]), _mm256_add_epi16(s[2], s[3]));
                __m256i h16 =
                    _mm256_add_epi16(_mm256_add_epi16(s[4], s[5]), _mm256_add_epi16(s[6], s[7]));
                if (BITS == 4) {
                    lo = _mm256_madd_epi16(_mm256_add_epi16(l16, h16), ones);
                    hi = _mm256_setzero_si256();
                } else {
                    lo = _mm256_madd_epi16(l16, ones);
                    hi = _mm256_madd_epi16(h16, ones);
                }
            }
            const __m256 fdx = _mm256_set1_ps(dx);
            if (TWO == 2) {
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(ws, fdx), _mm256_cvtepi32_ps(lo), acc[i]);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(w2, fdx), _mm256_cvtepi32_ps(hi), acc[i]);
                continue;
            }
            __m256i is = _mm256_add_epi32(lo, hi);
            if (ZP && BITS != 8) /* the 8-bit sums are of q itself (above) */
                is = _mm256_sub_epi32(is, _mm256_set1_epi32(ZP * sx));
            acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(ws, fdx), _mm256_cvtepi32_ps(is), acc[i]);
            if (TWO == 1) /* ds: dx · (float)sx, formed at quantization */
                acc[i] = _mm256_fmadd_ps(w2, _mm256_set1_ps(c->a->ds[(int64_t)(i0 + i) * nb + b]),
                                         acc[i]);
        }
    }
    const int rows = c->n - G * QG < QG ? c->n - G * QG : QG;
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++) {
        float *yr = c->y + (int64_t)(i0 + i) * c->ldy + G * QG;
        if (rows == QG)
            _mm256_storeu_ps(yr, acc[i]);
        else
            _mm256_maskstore_ps(yr, ifd__mask8(rows), acc[i]);
    }
}

/* ---- AVX-512 VNNI: two row groups at once ------------------------------------ */

/* 16 lanes = the 8 rows of group G then the 8 of G + 1, whose outputs are
 * adjacent in y. Each lane does what the AVX2 lane (and qmm_scalar) does
 * for its row: the same integer block sums, now by vpdpbusd (u8 × s8, four
 * products a lane, exact in 32 bits), and the same f32 operations in the
 * same order, so AVX-512, AVX2 and scalar agree bitwise. The halves of each
 * vector come from the two groups' blocks (gb bytes apart). */
IFD__TARGET_AVX512VNNI IFD__INLINE __m512i join256(const uint8_t *a, const uint8_t *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* 8 f16 of a then 8 of b, as 16 floats. */
IFD__TARGET_AVX512VNNI IFD__INLINE __m512 join_f16(const uint8_t *a, const uint8_t *b)
{
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                        _mm_loadu_si128((const __m128i *)b), 1);
    return _mm512_cvtph_ps(h);
}

/* 8 bytes of a then 8 of b, as 16 floats (unsigned or signed bytes). */
IFD__TARGET_AVX512VNNI IFD__INLINE __m512 join_i8(const uint8_t *a, const uint8_t *b, const int sgn)
{
    __m128i v = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)a),
                                   _mm_loadl_epi64((const __m128i *)b));
    return _mm512_cvtepi32_ps(sgn ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

IFD__TARGET_AVX512VNNI IFD__INLINE __m512i qh_top2_512(__m512i H, const int g)
{
    __m512i v;
    if (g < 2)
        v = _mm512_slli_epi16(H, 3 - 2 * g);
    else
        v = _mm512_srli_epi16(H, 2 * g - 3);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x18));
}

IFD__TARGET_AVX512VNNI IFD__INLINE __m512i qh_hi2_512(__m512i H, const int g)
{
    __m512i v = g < 2 ? _mm512_slli_epi16(H, 4 - 2 * g) : g == 2 ? H : _mm512_srli_epi16(H, 2);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x30));
}

IFD__TARGET_AVX512VNNI IFD__INLINE __m512i bcast4_512(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* One block of groups G and G + 1 for the two-group tiles: the 16 rows'
 * scales (ws, w2: blk_scales' values) and the 8 vectors of 4 consecutive
 * columns × 16 rows as unsigned bytes (the layout comment). dv and mv carry
 * a K-quant super-block's d and dmin from one block to the next. */
IFD__TARGET_AVX512VNNI IFD__INLINE void qblk_unpack512(const qmm_t *c, const uint8_t *grp, int b,
                                                       const int BITS, const int KQ, const int TWO,
                                                       __m512 *dv, __m512 *mv, __m512 *ws,
                                                       __m512 *w2, __m512i W[8])
{
    const int scb = (KQ ? 1 : 2) * QG * (TWO ? 2 : 1), qhb = BITS == 5 ? 32 : BITS == 6 ? 64 : 0;
    const int hs = KQ ? 2 * QG * (TWO == 1 ? 2 : 1) : 0; /* qt_hdr_stride */
    const int64_t gb = c->gb;
    const uint8_t *blk = grp + c->hdr + (int64_t)b * c->bb, *blk2 = blk + gb;
    const uint8_t *qh = blk + scb, *qs = qh + qhb;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    *w2 = _mm512_setzero_ps();
    if (KQ) { /* blk_scales: d·sc and −(dmin·m), or d·sc_lo and d·sc_hi */
        if ((b & 7) == 0) {
            const uint8_t *h = grp + (int64_t)hs * (b >> 3);
            *dv = join_f16(h, h + gb);
            if (TWO == 1)
                *mv = join_f16(h + 16, h + 16 + gb);
        }
        if (TWO == 1) {
            *ws = _mm512_mul_ps(*dv, join_i8(blk, blk2, 0));
            *w2 = _mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(_mm512_mul_ps(*mv, join_i8(blk + QG, blk2 + QG, 0))),
                _mm512_set1_epi32((int32_t)0x80000000u)));
        } else {
            *ws = _mm512_mul_ps(*dv, join_i8(blk, blk2, 1));
            *w2 = _mm512_mul_ps(*dv, join_i8(blk + QG, blk2 + QG, 1));
        }
    } else {
        *ws = join_f16(blk, blk2);
        if (TWO)
            *w2 = join_f16(blk + 16, blk2 + 16);
    }
    if (BITS == 8) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            W[g] = join256(qs + 32 * g, qs + 32 * g + gb);
    } else if (BITS == 6) { /* u = q + 32 ∈ [0, 63], unsigned (as the AVX2 tile) */
        const __m512i H0 = join256(qh, qh + gb), H1 = join256(qh + 32, qh + 32 + gb);
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m512i L = join256(qs + 32 * g, qs + 32 * g + gb);
            W[g] = _mm512_or_si512(_mm512_and_si512(L, m4), qh_hi2_512(H0, g));
            W[g + 4] =
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4), qh_hi2_512(H1, g));
        }
    } else {
        const __m512i H = BITS == 5 ? join256(qh, qh + gb) : _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m512i L = join256(qs + 32 * g, qs + 32 * g + gb);
            if (BITS == 4) {
                W[g] = _mm512_and_si512(L, m4);
                W[g + 4] = _mm512_and_si512(_mm512_srli_epi16(L, 4), m4);
            } else {
                W[g] = _mm512_and_si512(L, _mm512_set1_epi8(0x1F));
                W[g + 4] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(L, 5), _mm512_set1_epi8(0x07)),
                    qh_top2_512(H, g));
            }
        }
    }
}

/* The fold of qfold512 from the activation row's block entries (d, s, h
 * and ds at that row and block); SG: the sums are of q − zp already (the
 * AMX tile's signed B), not of the stored unsigned u. */
IFD__TARGET_AVX512VNNI IFD__INLINE __m512 qfold512_at(const float *d, const int32_t *s,
                                                      const int32_t *h, const float *ds, __m512i lo,
                                                      __m512i hi, __m512 ws, __m512 w2, __m512 acc,
                                                      const int BITS, const int TWO, const int ZP,
                                                      const int SG)
{
    const float dx = *d;
    const int32_t sx = *s;
    if (BITS == 6 && !SG) { /* Σ (u − 32)·x per half, as in the AVX2 tile */
        const int32_t sh = *h;
        lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(32 * sh));
        hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(32 * (sx - sh)));
    }
    const __m512 fdx = _mm512_set1_ps(dx);
    if (TWO == 2) {
        acc = _mm512_fmadd_ps(_mm512_mul_ps(ws, fdx), _mm512_cvtepi32_ps(lo), acc);
        return _mm512_fmadd_ps(_mm512_mul_ps(w2, fdx), _mm512_cvtepi32_ps(hi), acc);
    }
    if (ZP && !SG) /* 8-bit: u = q + 128 (unsigned) times x, 128·Σx off here */
        lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(ZP * sx));
    acc = _mm512_fmadd_ps(_mm512_mul_ps(ws, fdx), _mm512_cvtepi32_ps(lo), acc);
    if (TWO == 1) /* ds: dx · (float)sx, formed at quantization */
        acc = _mm512_fmadd_ps(w2, _mm512_set1_ps(*ds), acc);
    return acc;
}

/* Folds block b of activation row r into acc, from the block's integer sums
 * (lo: the whole block, or with TWO == 2 its first half, and hi the second;
 * u·x sums as the layout stores u): the same f32 operations in the same
 * order as the scalar loop. */
IFD__TARGET_AVX512VNNI IFD__INLINE __m512 qfold512(const qmm_t *c, int64_t r, int b, __m512i lo,
                                                   __m512i hi, __m512 ws, __m512 w2, __m512 acc,
                                                   const int BITS, const int TWO, const int ZP)
{
    const int64_t rb = r * c->nb + b;
    return qfold512_at(c->a->d + rb, c->a->s + rb, c->a->h + rb, c->a->ds + rb, lo, hi, ws, w2, acc,
                       BITS, TWO, ZP, 0);
}

/* Stores a tile's 16-lane rows (the two groups' 16 output columns). */
IFD__TARGET_AVX512VNNI IFD__INLINE void qstore512(const qmm_t *c, int G, int i0, const int MI,
                                                  const __m512 *acc)
{
    const int rows = c->n - G * QG < 2 * QG ? c->n - G * QG : 2 * QG;
#pragma GCC unroll 16
    for (int i = 0; i < MI; i++) {
        float *yr = c->y + (int64_t)(i0 + i) * c->ldy + G * QG;
        if (rows == 2 * QG)
            _mm512_storeu_ps(yr, acc[i]);
        else
            _mm512_mask_storeu_ps(yr, ifd__mask16(rows), acc[i]);
    }
}

IFD__TARGET_AVX512VNNI IFD__INLINE void qtile_avx512(const qmm_t *c, int G, int i0, const int MI,
                                                     const int BITS, const int KQ, const int TWO,
                                                     const int ZP, int pf)
{
    const int k = c->a->k;
    const uint8_t *grp = c->w + (int64_t)G * c->gb;
    __m512 dv = _mm512_setzero_ps(), mv = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    __m512 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < MI; i++)
        acc[i] = _mm512_setzero_ps();
    for (int b = 0; b < c->nb; b++) {
        const uint8_t *blk = grp + c->hdr + (int64_t)b * c->bb;
        qmm_prefetch_block(blk, c->bb, pf);
        qmm_prefetch_block(blk + c->gb, c->bb, pf);
        __m512 ws, w2;
        __m512i W[8];
        qblk_unpack512(c, grp, b, BITS, KQ, TWO, &dv, &mv, &ws, &w2, W);
#pragma GCC unroll 8
        for (int i = 0; i < MI; i++) {
            const int8_t *xb = c->a->q + (int64_t)(i0 + i) * k + b * QB;
            /* one integer sum, or (TWO == 2) one per half: exact either way */
            __m512i lo = zero, hi = zero;
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m512i x = bcast4_512(xb + 4 * g);
                if (g < 4 || TWO != 2)
                    lo = _mm512_dpbusd_epi32(lo, W[g], x);
                else
                    hi = _mm512_dpbusd_epi32(hi, W[g], x);
            }
            acc[i] = qfold512(c, i0 + i, b, lo, hi, ws, w2, acc[i], BITS, TWO, ZP);
        }
    }
    qstore512(c, G, i0, MI, acc);
}

/* ---- AMX: the integer block sums by tile products ------------------------------
 *
 * The two-group tile of 16 activation rows with the block sums formed by
 * AMX-INT8 (tdpbsud: signed bytes of A times unsigned bytes of B, four
 * products a 32-bit lane, exact): B is the block's 8 unpacked vectors as
 * they are (vector g is row g of B: byte 4n + t of it is column 4g + t of
 * weight row n, the layout tdpbsud reads), A the 16 rows' 32 activation
 * bytes (or two tiles of 16 for Q6_K's halves), C their 16 × 16 sums. The
 * sums are then folded in by qfold512 exactly as the VNNI tile folds its
 * own, so AMX, AVX-512, AVX2 and scalar agree bitwise. Types with a zero
 * point (Q4_0, Q5_0, Q8_0, and Q6_K's 32) store B as q = u − zp and use
 * tdpbssd (both signed): the sums are then Σ q·x, the same integers the
 * fold would form by subtracting zp·Σx, with no subtraction a row. What AMX saves is the
 * 8 vpdpbusd a row and block: the unpacking is shared by 16 rows and the
 * f32 fold (3-5 operations a row and block) is what is left.
 *
 * The blocks go in batches of 4 (Q6_K: 2) through a pipeline: batch j's
 * tile products, then batch j − 1 folded, then batch j + 1 unpacked, each
 * batch with its own C tiles and buffers. A tile store is not forwarded to
 * the vector loads that read it, nor vector stores to a tile load, so a
 * block folded right after its own product waits for the round trip
 * through L1 (a first version that did so, one block at a time, was no
 * faster than VNNI); a batch's worth of other work between them hides it.
 *
 * Tiles (palette 1, configured per task, released at its end):
 *   one sum a block: 0..3: C (16 × 16 int32) of the batch's blocks; 4, 5: A
 *     (16 × 32 bytes), 6, 7: B (8 × 64 bytes), alternating by block (a short
 *     last batch: one block at a time in C 0, A 4, B 6);
 *   Q6_K's halves: 0, 1: C of the batch's first block's halves, 2, 3: of its
 *     second's; 4, 5: A's halves (16 × 16 bytes); 6, 7: B's halves (4 × 64).
 * A product of fewer than 16 rows (from QMM_AMX_MIN_M on) runs one tile of
 * its m rows: A and C tiles configured with m rows (amx_cfg_rows), the fold
 * and the store over m rows.
 * The emulated build (IFD_AVX512_EMU, tests/cpu_emu) runs the same code on
 * tiles in memory, so the layout and the folding are tested on any CPU. */
enum { AMX_ROWS = 16, AMX_BATCH = 4 };

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg_t;

static const amx_cfg_t amx_cfg[2] = {
    {.palette = 1,
     .colsb = {64, 64, 64, 64, 32, 32, 64, 64},
     .rows = {AMX_ROWS, AMX_ROWS, AMX_ROWS, AMX_ROWS, AMX_ROWS, AMX_ROWS, 8, 8}},
    {.palette = 1,
     .colsb = {64, 64, 64, 64, 16, 16, 64, 64},
     .rows = {AMX_ROWS, AMX_ROWS, AMX_ROWS, AMX_ROWS, AMX_ROWS, AMX_ROWS, 4, 4}},
};

/* The configuration for tiles of mr ≤ AMX_ROWS activation rows (A and C
 * tiles that short: amx_short_min_m). */
static inline amx_cfg_t amx_cfg_rows(const amx_cfg_t *base, int mr)
{
    amx_cfg_t cfg = *base;
    for (int t = 0; t < 6; t++)
        cfg.rows[t] = (uint8_t)mr;
    return cfg;
}

#if defined(IFD_AVX512_EMU)
#define IFD__TARGET_AMX IFD__TARGET_AVX2
static __thread uint8_t amx_emu[8][1024];
static __thread const amx_cfg_t *amx_emu_cfg;

static void amx_emu_load(int t, const void *p, int64_t stride)
{
    for (int r = 0; r < amx_emu_cfg->rows[t]; r++)
        memcpy(amx_emu[t] + 64 * r, (const uint8_t *)p + r * stride, amx_emu_cfg->colsb[t]);
}

static void amx_emu_store(int t, void *p, int64_t stride)
{
    for (int r = 0; r < amx_emu_cfg->rows[t]; r++)
        memcpy((uint8_t *)p + r * stride, amx_emu[t] + 64 * r, amx_emu_cfg->colsb[t]);
}

/* C[m][n] += Σ_kk Σ_t A[m][4kk + t] (signed) · B[kk][4n + t] (unsigned, or
 * signed with sgn: tdpbsud, tdpbssd) */
static void amx_emu_dp(int tc, int ta, int tb, int sgn)
{
    for (int m = 0; m < amx_emu_cfg->rows[tc]; m++) {
        for (int n = 0; n < amx_emu_cfg->colsb[tc] / 4; n++) {
            int32_t v;
            memcpy(&v, amx_emu[tc] + 64 * m + 4 * n, 4);
            for (int kk = 0; kk < amx_emu_cfg->colsb[ta] / 4; kk++)
                for (int t = 0; t < 4; t++)
                    v += (int8_t)amx_emu[ta][64 * m + 4 * kk + t] *
                         (sgn ? (int32_t)(int8_t)amx_emu[tb][64 * kk + 4 * n + t]
                              : (int32_t)amx_emu[tb][64 * kk + 4 * n + t]);
            memcpy(amx_emu[tc] + 64 * m + 4 * n, &v, 4);
        }
    }
}

static __thread amx_cfg_t amx_emu_cfg_rows;
#define AMX_CONFIG(two, mr)                                                                        \
    (amx_emu_cfg_rows = amx_cfg_rows(&amx_cfg[(two) == 2], mr), amx_emu_cfg = &amx_emu_cfg_rows)
#define AMX_RELEASE()       ((void)0)
#define AMX_ZERO(t)         memset(amx_emu[t], 0, sizeof amx_emu[t])
#define AMX_LOAD(t, p, s)   amx_emu_load(t, p, s)
#define AMX_STORE(t, p, s)  amx_emu_store(t, p, s)
#define AMX_DPBSUD(c, a, b) amx_emu_dp(c, a, b, 0)
#define AMX_DPBSSD(c, a, b) amx_emu_dp(c, a, b, 1)
#else
#define IFD__TARGET_AMX                                                                            \
    __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")))
#define AMX_CONFIG(two, mr)                                                                        \
    do {                                                                                           \
        const amx_cfg_t cfg_ = amx_cfg_rows(&amx_cfg[(two) == 2], mr);                             \
        _tile_loadconfig(&cfg_);                                                                   \
    } while (0)
#define AMX_RELEASE()       _tile_release()
#define AMX_ZERO(t)         _tile_zero(t)
#define AMX_LOAD(t, p, s)   _tile_loadd(t, p, s)
#define AMX_STORE(t, p, s)  _tile_stored(t, p, s)
#define AMX_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#endif
/* B signed (SG: q − zp) or unsigned (u) */
#define AMX_DP(SG, c, a, b)                                                                        \
    do {                                                                                           \
        if (SG)                                                                                    \
            AMX_DPBSSD(c, a, b);                                                                   \
        else                                                                                       \
            AMX_DPBSUD(c, a, b);                                                                   \
    } while (0)

/* Two tile products with their steps interleaved, so the second's loads do
 * not wait for the first's store: A from the 16 rows at a0 and a1 (k bytes
 * apart), B from b0 and b1, the sums to c0 and c1, in C tiles S and S + 1
 * (S = 0 or 2, a constant: tile numbers are immediates). Two blocks of one
 * sum each, or Q6_K's two halves of one block. */
IFD__TARGET_AMX IFD__INLINE void amx_pair(const int SG, const int S, const int8_t *a0,
                                          const int8_t *a1, int k, const uint8_t *b0,
                                          const uint8_t *b1, int32_t *c0, int32_t *c1)
{
    AMX_LOAD(4, a0, k);
    AMX_LOAD(6, b0, 64);
    AMX_LOAD(5, a1, k);
    AMX_LOAD(7, b1, 64);
    if (S == 0) {
        AMX_ZERO(0);
        AMX_ZERO(1);
        AMX_DP(SG, 0, 4, 6);
        AMX_DP(SG, 1, 5, 7);
        AMX_STORE(0, c0, 64);
        AMX_STORE(1, c1, 64);
    } else {
        AMX_ZERO(2);
        AMX_ZERO(3);
        AMX_DP(SG, 2, 4, 6);
        AMX_DP(SG, 3, 5, 7);
        AMX_STORE(2, c0, 64);
        AMX_STORE(3, c1, 64);
    }
}

/* One block's product (one sum a block) alone: a batch's last blocks. */
IFD__TARGET_AMX IFD__INLINE void amx_one(const int SG, const int8_t *a, int k, const uint8_t *bt,
                                         int32_t *ct)
{
    AMX_LOAD(4, a, k);
    AMX_LOAD(6, bt, 64);
    AMX_ZERO(0);
    AMX_DP(SG, 0, 4, 6);
    AMX_STORE(0, ct, 64);
}

/* A block's weights for the AMX tile: scales kept for its fold, vectors
 * stored as B. */
typedef struct {
    __m512 ws, w2;
} amx_scales_t;

IFD__TARGET_AMX IFD__INLINE void amx_unpack(const qmm_t *c, const uint8_t *grp, int b,
                                            const int BITS, const int KQ, const int TWO,
                                            const int ZP, __m512 *dv, __m512 *mv, amx_scales_t *sc,
                                            uint8_t *bt, int pf)
{
    const uint8_t *blk = grp + c->hdr + (int64_t)b * c->bb;
    qmm_prefetch_block(blk, c->bb, pf);
    qmm_prefetch_block(blk + c->gb, c->bb, pf);
    __m512i W[8];
    qblk_unpack512(c, grp, b, BITS, KQ, TWO, dv, mv, &sc->ws, &sc->w2, W);
    /* types with a zero point (Q6_K's 32 too): B as q = u − zp, signed, so
     * the fold subtracts nothing a row (zp ≤ 128: the bytes wrap to q) */
    const int zp = BITS == 6 ? 32 : ZP;
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        __m512i v = W[g];
        if (zp == 128) /* u − 128 as a byte: the sign bit flipped (no byte overflow) */
            v = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
        else if (zp) /* u ∈ [0, 2·zp): u − zp fits a signed byte */
            v = _mm512_sub_epi8(v, _mm512_set1_epi8((char)zp));
        _mm512_store_si512((__m512i *)(bt + 64 * g), v);
    }
}

IFD__TARGET_AMX IFD__INLINE void amx_fold(const qmm_t *c, int i0, int b, const int BITS,
                                          const int TWO, const int ZP, const int SG,
                                          const amx_scales_t *sc, const int32_t *ct,
                                          const int32_t *ch, __m512 *acc, int mr)
{
    const int64_t rb = (int64_t)i0 * c->nb + b;
    const float *d = c->a->d + rb, *ds = c->a->ds + rb;
    const int32_t *s = c->a->s + rb, *h = c->a->h + rb;
#pragma GCC unroll 16
    for (int i = 0; i < AMX_ROWS; i++) {
        if (i >= mr)
            break;
        const __m512i lo = _mm512_load_si512((const __m512i *)(ct + 16 * i));
        const __m512i hi =
            TWO == 2 ? _mm512_load_si512((const __m512i *)(ch + 16 * i)) : _mm512_setzero_si512();
        acc[i] = qfold512_at(d, s, h, ds, lo, hi, sc->ws, sc->w2, acc[i], BITS, TWO, ZP, SG);
        d += c->nb, ds += c->nb, s += c->nb, h += c->nb;
    }
}

/* A segment: AMX_SEG blocks of a group pair unpacked once (B tiles and
 * scales) and then used by every 16-row tile of the activation chunk (up to
 * QM_CHUNK / AMX_ROWS of them), where each tile used to unpack every block
 * for itself. 64 blocks: 32 KiB of B and 8 KiB of scales, which stay in
 * L1/L2 while the chunk's tiles read them; and a B tile is then never
 * loaded right after the vector stores that wrote it (no forwarding from
 * those to a tile load: the comment above). */
enum { AMX_SEG = 64, AMX_SEG1 = 8, AMX_TILES = QM_CHUNK / AMX_ROWS };

typedef struct {
    _Alignas(64) uint8_t bt[AMX_SEG][8 * 64];
    amx_scales_t sc[AMX_SEG];
} amx_seg_t;

/* The tile of 16 activation rows from i0 over the segment's ns blocks (the
 * first is block b0), folded into acc in block order: batch j's tile
 * products, then batch j − 1 folded, so a C tile is read back a batch
 * after its store. With nn > 0 (the segment's last tile) each batch's slots,
 * once folded, are refilled with the next segment's blocks (b0 + ns on, nn
 * of them, in order: dv and mv carry a K-quant's header), so that unpacking
 * runs while the tile products do, as it did before segments; without it
 * Q6_K (two tile products a block) was 3% slower than before segments and
 * the other 4- to 6-bit types gained less (docs/benchmarks.md, "AMX prefill,
 * unpacking once per chunk"). */
IFD__TARGET_AMX IFD__INLINE void amx_run(const qmm_t *c, int i0, int b0, int ns,
                                         amx_seg_t *sg, const int BITS, const int TWO,
                                         const int ZP, __m512 *acc,
                                         int32_t (*ct)[AMX_BATCH][AMX_ROWS * 16],
                                         int32_t (*ch)[2][TWO == 2 ? AMX_ROWS * 16 : 1],
                                         const uint8_t *pf, int64_t pf_step,
                                         const uint8_t *grp, int nn, const int KQ, __m512 *dv,
                                         __m512 *mv, int mr)
{
    const int SG = ZP != 0 || BITS == 6; /* B signed: amx_unpack */
    const int k = c->a->k, nbt = TWO == 2 ? 2 : AMX_BATCH;
    const int8_t *xq = c->a->q + (int64_t)i0 * k + (int64_t)b0 * QB;
    for (int q = 0, s0 = 0;; q ^= 1, s0 += nbt) {
        const int r = ns - s0 < nbt ? ns - s0 : nbt;
        if (pf) { /* the next segment's weights, a slice a batch (both groups) */
            for (int64_t o = 0; o < pf_step; o += 64) {
                _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
                _mm_prefetch((const char *)pf + c->gb + o, _MM_HINT_T0);
            }
            pf += pf_step;
        }
        const int8_t *xb = xq + s0 * QB;
        const uint8_t(*bt)[8 * 64] = sg->bt + s0;
        if (TWO == 2) { /* a block's halves, one pair a block */
            amx_pair(SG, 0, xb, xb + 16, k, bt[0], bt[0] + 4 * 64, ct[q][0], ch[q][0]);
            if (r > 1)
                amx_pair(SG, 2, xb + QB, xb + QB + 16, k, bt[1], bt[1] + 4 * 64, ct[q][1],
                         ch[q][1]);
        } else if (r == AMX_BATCH) {
            amx_pair(SG, 0, xb, xb + QB, k, bt[0], bt[1], ct[q][0], ct[q][1]);
            amx_pair(SG, 2, xb + 2 * QB, xb + 3 * QB, k, bt[2], bt[3], ct[q][2], ct[q][3]);
        } else {
            for (int s = 0; s < r; s++)
                amx_one(SG, xb + s * QB, k, bt[s], ct[q][s]);
        }
        if (s0 > 0) { /* the batch before: always a whole one */
            for (int s = 0; s < nbt; s++)
                amx_fold(c, i0, b0 + s0 - nbt + s, BITS, TWO, ZP, SG, &sg->sc[s0 - nbt + s],
                         ct[!q][s], ch[!q][s & (TWO == 2)], acc, mr);
            /* the segment's last tile: its slots, read for the last time, take
             * the next segment's blocks while the tile products run */
            for (int s = s0 - nbt; s < s0 && s < nn; s++)
                amx_unpack(c, grp, b0 + ns + s, BITS, KQ, TWO, ZP, dv, mv, &sg->sc[s], sg->bt[s],
                           0);
        }
        if (s0 + nbt >= ns) {
            for (int s = 0; s < r; s++)
                amx_fold(c, i0, b0 + s0 + s, BITS, TWO, ZP, SG, &sg->sc[s0 + s], ct[q][s],
                         ch[q][s & (TWO == 2)], acc, mr);
            for (int s = s0; s < nn; s++)
                amx_unpack(c, grp, b0 + ns + s, BITS, KQ, TWO, ZP, dv, mv, &sg->sc[s], sg->bt[s],
                           0);
            return;
        }
    }
}

/* nt (1..AMX_TILES) tiles of 16 activation rows (mr: a short product's one
 * tile of mr < 16) from i0 on groups G and G + 1, segment by segment: each
 * segment's blocks unpacked once, then every tile runs over them, its
 * accumulators kept here between segments. With one tile nothing is shared,
 * and segments of AMX_SEG1 blocks refilled during its run pipeline the
 * unpacking with the tile products instead (8 measured best of 4, 8, 12, 16,
 * 32 and 64 at 9-16 rows: 64 made a one-tile product 8-36% slower).
 * Each output still folds its blocks in order, so the results are those
 * of the other paths bit for bit. */
IFD__TARGET_AMX IFD__INLINE void qtiles_amx(const qmm_t *c, int G, int i0, int nt, const int BITS,
                                            const int KQ, const int TWO, const int ZP, int mr)
{
    const uint8_t *grp = c->w + (int64_t)G * c->gb;
    __m512 dv = _mm512_setzero_ps(), mv = _mm512_setzero_ps();
    amx_seg_t sg;
    _Alignas(64) int32_t ct[2][AMX_BATCH][AMX_ROWS * 16], ch[2][2][TWO == 2 ? AMX_ROWS * 16 : 1];
    __m512 accs[AMX_TILES][AMX_ROWS];
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < AMX_ROWS; i++)
            accs[t][i] = _mm512_setzero_ps();
    /* OV: the next segment unpacked during the last tile's run (amx_run);
     * Q8_0, whose unpacking is 8 loads and xors, measured no gain from it
     * (the code in the loop cost as much as the overlap saved), so it
     * unpacks each segment up front */
    const int nbt = TWO == 2 ? 2 : AMX_BATCH, OV = BITS != 8 || nt == 1;
    const int seg = nt == 1 ? AMX_SEG1 : AMX_SEG;
    for (int s = 0; s < seg && s < c->nb; s++)
        amx_unpack(c, grp, s, BITS, KQ, TWO, ZP, &dv, &mv, &sg.sc[s], sg.bt[s], 1);
    for (int b0 = 0; b0 < c->nb; b0 += seg) {
        const int ns = c->nb - b0 < seg ? c->nb - b0 : seg;
        for (int s = 0; !OV && b0 > 0 && s < ns; s++)
            amx_unpack(c, grp, b0 + s, BITS, KQ, TWO, ZP, &dv, &mv, &sg.sc[s], sg.bt[s], 0);
        /* the first tile's run asks for the next segment's blocks, spread over
         * its batches, so that segment's unpacking reads them from cache */
        const int nn = c->nb - b0 - ns < seg ? c->nb - b0 - ns : seg;
        const uint8_t *pf = nn > 0 ? grp + c->hdr + (int64_t)(b0 + ns) * c->bb : NULL;
        const int nbat = (ns + nbt - 1) / nbt;
        const int64_t pf_step = ((int64_t)nn * c->bb + nbat - 1) / nbat;
        for (int t = 0; t < nt; t++) {
            __m512 acc[AMX_ROWS];
#pragma GCC unroll 16
            for (int i = 0; i < AMX_ROWS; i++)
                acc[i] = accs[t][i];
            amx_run(c, i0 + t * AMX_ROWS, b0, ns, &sg, BITS, TWO, ZP, acc, ct, ch,
                    t == 0 ? pf : NULL, pf_step, grp, OV && t == nt - 1 ? nn : 0, KQ, &dv, &mv,
                    mr);
#pragma GCC unroll 16
            for (int i = 0; i < AMX_ROWS; i++)
                accs[t][i] = acc[i];
        }
    }
    for (int t = 0; t < nt; t++)
        qstore512(c, G, i0 + t * AMX_ROWS, mr, accs[t]);
}

/* The tile of path P for MI activation rows from i (AVX2: MI ≤ 4, its 16
 * registers; AVX-512: MI 8 or ≤ 4): on groups G and G + 1 when `pair` (AVX-512),
 * else on G alone (the AVX2 tile, which gives the AVX-512 lanes' results
 * lane for lane; more than 4 rows as two of its tiles). */
#define QTILE_avx2(pair, MI, BITS, KQ, TWO, ZP) qtile_avx2(c, G, i, MI, BITS, KQ, TWO, ZP, i == c0)
#define QTILE_avx512(pair, MI, BITS, KQ, TWO, ZP)                                                  \
    do {                                                                                           \
        if (pair) {                                                                                \
            qtile_avx512(c, G, i, MI, BITS, KQ, TWO, ZP, i == c0);                                 \
        } else if ((MI) == 8) {                                                                    \
            qtile_avx2(c, G, i, 4, BITS, KQ, TWO, ZP, i == c0);                                    \
            qtile_avx2(c, G, i + 4, 4, BITS, KQ, TWO, ZP, 0);                                      \
        } else {                                                                                   \
            qtile_avx2(c, G, i, MI, BITS, KQ, TWO, ZP, i == c0);                                   \
        }                                                                                          \
    } while (0)

/* Whether the path runs 5..7 rows left on a group pair as one AVX-512 tile
 * (QTILEP_TILE) rather than 4 + 1..3: the AVX-512 path, where products of
 * 5..7 rows (and 13..15) land. Not AVX2 (tiles of 4), nor AMX, which takes
 * products from 9 rows on as one tile and sees 5..7 left only at a 64-row
 * chunk's end; nor the last, odd group: each inlined tile costs compile
 * time (qmatmul.c: 22 s to compile on main, 50 s with all of them, 33 s so). */
#define QTILEP_avx2   0
#define QTILEP_avx512 1
#define QTILEP_amx    0
#define QTILEP_TILE(MI, BITS, KQ, TWO, ZP) qtile_avx512(c, G, i, MI, BITS, KQ, TWO, ZP, i == c0)

/* A task's set-up and tear-down per path: AMX loads its tile configuration
 * (per thread) and releases it, so a pool thread carries no tile state. */
#define QMM_BEGIN_avx2(two)   ((void)0)
#define QMM_END_avx2()        ((void)0)
#define QMM_BEGIN_avx512(two) ((void)0)
#define QMM_END_avx512()      ((void)0)
#define QMM_BEGIN_amx(two)    AMX_CONFIG(two, m < AMX_ROWS ? m : AMX_ROWS)
/* Where a path runs several tiles of a group in one call: AMX, every whole
 * 16-row tile of the chunk on a group pair (qtiles_amx), i moved past them. */
#define QTILES_avx2(pair, BITS, KQ, TWO, ZP)   ((void)0)
#define QTILES_avx512(pair, BITS, KQ, TWO, ZP) ((void)0)
#define QTILES_amx(pair, BITS, KQ, TWO, ZP)                                                        \
    do {                                                                                           \
        if ((pair) && c1 - i >= AMX_ROWS) {                                                        \
            const int nt = (c1 - i) / AMX_ROWS;                                                    \
            qtiles_amx(c, G, i, nt, BITS, KQ, TWO, ZP, AMX_ROWS);                                  \
            i += nt * AMX_ROWS;                                                                    \
        } else if ((pair) && m < AMX_ROWS) { /* a short product: one tile of m rows */             \
            /* (a second call site, so that the 16-row one keeps mr a constant: one call   \
             * with mr at run time made the 64-row chunks 10-20% slower) */                        \
            qtiles_amx(c, G, i, 1, BITS, KQ, TWO, ZP, m);                                          \
            i += m;                                                                                \
        }                                                                                          \
    } while (0)
#define QMM_END_amx()         AMX_RELEASE()

#define QTILE_amx(pair, MI, BITS, KQ, TWO, ZP)                                                     \
    do {                                                                                           \
        if ((MI) == AMX_ROWS) /* the last, odd group (QTILES_amx took the pairs): the AVX2 \
                               * tile, 4 rows at a time */                                         \
            for (int i4 = 0; i4 < AMX_ROWS; i4 += 4)                                               \
                qtile_avx2(c, G, i + i4, 4, BITS, KQ, TWO, ZP, i4 == 0 && i == c0);                \
        else                                                                                       \
            QTILE_avx512(pair, MI, BITS, KQ, TWO, ZP);                                             \
    } while (0)

/* One function per path and type: groups [G0, G1) (GSTEP at a time) for
 * every activation row, in chunks of QM_CHUNK rows, tiles of TW (4, 8 or
 * 16) then the rest (AVX-512 and AMX: 4 to 7 rows as one tile, then 1..3;
 * until 2026-12-07 a tile of 4 and one of 1..3, which unpacked the weights
 * twice: 6 rows cost what 8 did, bench_qmatmul --ms). The rows of a tile
 * share the weights' unpacking, so wider tiles spend fewer instructions a
 * product (prefill, speculation's verification rows); each row keeps its
 * own accumulators, so the tiling never changes a result. */
#define QMM_DEF(P, TARGET, GSTEP, TW, name, BITS, KQ, TWO, ZP)                                     \
    TARGET static void qmm_##P##_##name(const qmm_t *c, int G0, int G1)                            \
    {                                                                                              \
        const int m = c->a->m;                                                                     \
        QMM_BEGIN_##P(TWO);                                                                        \
        for (int c0 = 0; c0 < m; c0 += QM_CHUNK) {                                                 \
            const int c1 = c0 + QM_CHUNK < m ? c0 + QM_CHUNK : m;                                  \
            for (int G = G0; G < G1; G += GSTEP) {                                                 \
                const int pair = GSTEP == 2 && G + 1 < G1;                                         \
                (void)pair;                                                                        \
                int i = c0;                                                                        \
                QTILES_##P(pair, BITS, KQ, TWO, ZP);                                               \
                for (; i + TW <= c1; i += TW)                                                      \
                    QTILE_##P(pair, TW, BITS, KQ, TWO, ZP);                                        \
                if (TW == 16 && c1 - i >= 8) {                                                     \
                    QTILE_##P(pair, 8, BITS, KQ, TWO, ZP);                                         \
                    i += 8;                                                                        \
                }                                                                                  \
                /* 5..7 rows left on a pair: one tile, not 4 + 1..3 */                             \
                switch (QTILEP_##P && pair ? c1 - i : 0) {                                         \
                case 7:                                                                            \
                    QTILEP_TILE(7, BITS, KQ, TWO, ZP);                                             \
                    i += 7;                                                                        \
                    break;                                                                         \
                case 6:                                                                            \
                    QTILEP_TILE(6, BITS, KQ, TWO, ZP);                                             \
                    i += 6;                                                                        \
                    break;                                                                         \
                case 5:                                                                            \
                    QTILEP_TILE(5, BITS, KQ, TWO, ZP);                                             \
                    i += 5;                                                                        \
                    break;                                                                         \
                default:                                                                           \
                    break;                                                                         \
                }                                                                                  \
                if (TW >= 8 && c1 - i >= 4) {                                                      \
                    QTILE_##P(pair, 4, BITS, KQ, TWO, ZP);                                         \
                    i += 4;                                                                        \
                }                                                                                  \
                switch (c1 - i) {                                                                  \
                case 3:                                                                            \
                    QTILE_##P(pair, 3, BITS, KQ, TWO, ZP);                                         \
                    break;                                                                         \
                case 2:                                                                            \
                    QTILE_##P(pair, 2, BITS, KQ, TWO, ZP);                                         \
                    break;                                                                         \
                case 1:                                                                            \
                    QTILE_##P(pair, 1, BITS, KQ, TWO, ZP);                                         \
                    break;                                                                         \
                default:                                                                           \
                    break;                                                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        QMM_END_##P();                                                                             \
    }

#define QMM_TYPES(P, TARGET, GSTEP, TW)                                                            \
    QMM_DEF(P, TARGET, GSTEP, TW, q4_0, 4, 0, 0, 8)                                                \
    QMM_DEF(P, TARGET, GSTEP, TW, q4_1, 4, 0, 1, 0)                                                \
    QMM_DEF(P, TARGET, GSTEP, TW, q5_0, 5, 0, 0, 16)                                               \
    QMM_DEF(P, TARGET, GSTEP, TW, q5_1, 5, 0, 1, 0)                                                \
    QMM_DEF(P, TARGET, GSTEP, TW, q8_0, 8, 0, 0, 128)                                              \
    QMM_DEF(P, TARGET, GSTEP, TW, q4_k, 4, 1, 1, 0)                                                \
    QMM_DEF(P, TARGET, GSTEP, TW, q5_k, 5, 1, 1, 0)                                                \
    QMM_DEF(P, TARGET, GSTEP, TW, q6_k, 6, 1, 2, 0)

QMM_TYPES(avx2, IFD__TARGET_AVX2, 1, 4)
QMM_TYPES(avx512, IFD__TARGET_AVX512VNNI, 2, 8)
QMM_TYPES(amx, IFD__TARGET_AMX, 2, 16)
#undef QMM_TYPES
#undef QMM_DEF
#undef QTILE_avx2
#undef QTILE_avx512
#undef QTILE_amx
#undef QTILES_avx2
#undef QTILES_avx512
#undef QTILES_amx
#undef QTILEP_avx2
#undef QTILEP_avx512
#undef QTILEP_amx
#undef QTILEP_TILE
#undef QMM_BEGIN_avx2
#undef QMM_END_avx2
#undef QMM_BEGIN_avx512
#undef QMM_END_avx512
#undef QMM_BEGIN_amx
#undef QMM_END_amx

typedef void (*qmm_fn)(const qmm_t *c, int G0, int G1);

/* The SIMD kernels of each type, by path. */
static const struct {
    uint32_t type;
    qmm_fn avx2, avx512, amx;
} qmm_kernels[] = {
    {IFD_GGML_Q4_0, qmm_avx2_q4_0, qmm_avx512_q4_0, qmm_amx_q4_0},
    {IFD_GGML_Q4_1, qmm_avx2_q4_1, qmm_avx512_q4_1, qmm_amx_q4_1},
    {IFD_GGML_Q5_0, qmm_avx2_q5_0, qmm_avx512_q5_0, qmm_amx_q5_0},
    {IFD_GGML_Q5_1, qmm_avx2_q5_1, qmm_avx512_q5_1, qmm_amx_q5_1},
    {IFD_GGML_Q8_0, qmm_avx2_q8_0, qmm_avx512_q8_0, qmm_amx_q8_0},
    {IFD_GGML_Q4_K, qmm_avx2_q4_k, qmm_avx512_q4_k, qmm_amx_q4_k},
    {IFD_GGML_Q5_K, qmm_avx2_q5_k, qmm_avx512_q5_k, qmm_amx_q5_k},
    {IFD_GGML_Q6_K, qmm_avx2_q6_k, qmm_avx512_q6_k, qmm_amx_q6_k},
};

static int qmm_avx512_min_m; /* 0: the CPU's default (qmm_min_m) */

void ifd__cpu_qmatmul_set_avx512_min_m(int m)
{
    qmm_avx512_min_m = m > 0 ? m : 0;
}

/* The fewest activation rows for which the AMX path runs its tiles (fewer
 * run the AVX-512 VNNI kernel; the bits are the same either way); a product
 * of 9 to 15 rows is one tile of that many rows (amx_cfg_rows). 9 from
 * bench_qmatmul --ms (CPU time, one thread, a loaded 2-core Xeon with AMX,
 * 2026-12-07): on SmolLM2's decode products (Q4_1, k 576) and the 1B
 * shape's (Q4_K, Q6_K) AMX lost at 8 rows and fewer (its fixed cost: the B
 * tiles stored and reloaded, the C round trip; 2.4× VNNI's at one row) and
 * won from 9 (−10% at 9 rows for Q4_1 and Q4_K, −2..−5% for Q6_K, up to
 * −30% at 16). Speculation's verification steps (k + 1 rows) are where
 * 9-15 rows occur (docs/benchmarks.md, "Small row counts"). */
enum { QMM_AMX_MIN_M = 9 };
static int qmm_amx_min_m; /* 0: QMM_AMX_MIN_M */

void ifd__cpu_qmatmul_set_amx_min_m(int m)
{
    qmm_amx_min_m = m > 0 ? m : 0;
}

static int qmm_min_m(void)
{
    if (qmm_avx512_min_m > 0)
        return qmm_avx512_min_m;
    return __builtin_cpu_is("amd") ? QMM_AVX512_MIN_M_AMD : 1;
}

static qmm_fn qmm_simd(uint32_t type, int isa, int m)
{
    for (size_t i = 0; i < sizeof qmm_kernels / sizeof qmm_kernels[0]; i++)
        if (qmm_kernels[i].type == type) {
            if (isa >= QMM_PATH_AMX && m >= (qmm_amx_min_m > 0 ? qmm_amx_min_m : QMM_AMX_MIN_M))
                return qmm_kernels[i].amx;
            return isa >= QMM_PATH_AVX512 && m >= qmm_min_m() ? qmm_kernels[i].avx512
                                                              : qmm_kernels[i].avx2;
        }
    IFD_ASSERT(!"qmatmul: type without a SIMD kernel");
    return NULL;
}

#else
void ifd__cpu_qmatmul_set_amx_min_m(int m) /* no AMX path off x86 (tests call it anyway) */
{
    (void)m;
}
#endif /* IFD__X86 */

static void qmm_task(void *arg, int task, int n_tasks)
{
    (void)n_tasks;
    const qmm_t *c = arg;
    const int groups = (c->n + QG - 1) / QG;
    int G0 = task * c->groups_per_task, G1 = G0 + c->groups_per_task;
    if (G1 > groups)
        G1 = groups;
    if (G0 >= G1)
        return;
    if (c->simd)
        c->simd(c, G0, G1);
    else
        qmm_scalar(c, G0, G1);
}

/* Tasks per pool thread (ifd__cpu_qmatmul_set_split): more than one lets a
 * thread that finishes early take another's share (the pool hands tasks out
 * as they are claimed). */
static int qmm_split = 1;

void ifd__cpu_qmatmul_set_split(int tasks_per_thread)
{
    qmm_split = tasks_per_thread > 0 ? tasks_per_thread : 1;
}

int ifd__cpu_qmatmul_isa(float *restrict y, int64_t ldy, const ifd_cpu_qact_t *xa,
                         const void *restrict wq, uint32_t type, int n, ifd_threadpool_t *tp,
                         int isa)
{
    if (!xa || !y || !wq || xa->m <= 0 || ldy < n)
        return IFD_EINVAL;
    int64_t bytes = ifd_cpu_qweight_bytes(type, n, xa->k);
    if (bytes < 0)
        return (int)bytes;
    if (isa < 0 || isa > qmm_max_isa())
        return IFD_ENOTSUP;
    const qtype_t *t = qtype_find(type);
    qmm_t c = {.y = y,
               .ldy = ldy,
               .a = xa,
               .w = wq,
               .t = t,
               .n = n,
               .nb = xa->k / QB,
               .bb = qt_block_bytes(t)};
#if IFD__X86
    if (isa >= QMM_PATH_AVX2)
        c.simd = qmm_simd(type, isa, xa->m);
#endif
    c.hdr = qt_hdr_bytes(t, c.nb);
    c.gb = c.hdr + (int64_t)c.nb * c.bb;
    /* One contiguous range of row groups per thread (each streams its part
     * of w once per activation chunk), in pairs of groups; no task under
     * ~64K multiply-adds. */
    const int groups = (n + QG - 1) / QG, pairs = (groups + 1) / 2;
    int64_t work_per_pair = (int64_t)xa->m * xa->k * 2 * QG;
    int64_t tasks = (int64_t)ifd_threadpool_size(tp) * (tp ? qmm_split : 1);
    int64_t max_tasks = work_per_pair * pairs / 65536 + 1;
    if (tasks > max_tasks)
        tasks = max_tasks;
    if (tasks > pairs)
        tasks = pairs;
    c.groups_per_task = (int)((pairs + tasks - 1) / tasks) * 2;
    tasks = (groups + c.groups_per_task - 1) / c.groups_per_task;
    ifd_threadpool_run(tasks > 1 ? tp : NULL, qmm_task, &c, (int)tasks);
    return 0;
}

int ifd_cpu_qmatmul(float *restrict y, int64_t ldy, const ifd_cpu_qact_t *xa,
                    const void *restrict wq, uint32_t type, int n, ifd_threadpool_t *tp)
{
    return ifd__cpu_qmatmul_isa(y, ldy, xa, wq, type, n, tp, qmm_max_isa());
}
