/*
 * backend_cpu.c — the CPU backend: host memory, kernels/cpu and a thread
 * pool. Allocations are 64-byte aligned for the SIMD kernels.
 *
 * Storage (weights "auto", the default): a projection whose parts all have
 * a type kernels/cpu/qmatmul.h computes on (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K) stays quantized, repacked into 8-row groups (layout
 * IFD__LAYOUT_Q, dtype = the ggml type): parts of one type are merged into
 * one matrix (QKV and gate|up one product each), parts of different types
 * (a Q4_K_M file's Q5_0 attn_q beside a Q8_0 attn_v) stay side by side and
 * fill their column ranges of y. The input rows are quantized to 8 bits per
 * 32 elements once per projection. An embedding table of such a type stays
 * quantized too (rows decoded on lookup), and a tied output projection
 * shares its buffer (refcounted through `aux`). F16 and BF16 matrices (and
 * embedding tables) whose parts share one of those types stay in 16 bits,
 * repacked into 16-row panels (kernels/cpu/hmatmul.h, layout IFD__LAYOUT_H,
 * dtype F16/BF16): the file's bytes, f32 accumulation, results bitwise
 * those of the f32 packed path on an AVX2 machine. Everything else — other
 * types, mixed 16-bit types, norms, vectors, and every weight with weights "f32"
 * (ifd_backend_cpu_create_ex) — is dequantized to f32 (ifd_cpu_dequantize);
 * f32 projections are concatenated into one [Σ rows, cols] matrix and
 * pre-packed (ifd_cpu_matmul_pack, layout IFD__LAYOUT_PACKED): that is the
 * exact path the oracle tests check at 1e-3. All activations are f32
 * (mm_in_dtype F32).
 *
 * Batch invariance: the packed and the quantized matmuls give each output
 * one summation order for every batch size (activations are quantized row
 * by row), and every other op works row by row, so a token's results do
 * not depend on the rest of the batch, bit for bit.
 */
#include "backend.h"

#include "cpu/hmatmul.h"
#include "cpu/qmatmul.h"
#include "error.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { IFD__LAYOUT_PLAIN = 0, IFD__LAYOUT_PACKED = 1, IFD__LAYOUT_Q = 2, IFD__LAYOUT_H = 3 };

/* aux of a quantized or 16-bit weight: its buffer's reference count (an
 * embedding table and the tied output projection share one). */
typedef struct {
    int refs;
} ifd__qshare_t;

/* A chunk of the weight arena (see ifd__cpu_walloc). */
typedef struct ifd__wchunk {
    struct ifd__wchunk *next;
    uint8_t *base;
    size_t cap, used;
    int live; /* weights placed here and not yet freed */
} ifd__wchunk_t;

typedef struct {
    ifd_backend_t base;
    ifd_threadpool_t *tp;
    ifd_weights_dtype_t weights;
    ifd__wchunk_t *wchunks; /* the weight arena */
    /* rope_kv's contiguous K and V rows, grown as needed */
    float *kv_tmp;
    size_t kv_tmp_floats;
    /* proj's quantized input rows, grown as needed */
    void *qact;
    size_t qact_bytes;
    /* dense_attention's packed K and Vᵀ of every head (ifd_cpu_dense_kv_pack)
     * of the qkv it was last called on with q0 = 0: a vision encode's
     * budgeted steps compute a layer's query rows in pieces, [0, r1) first,
     * and repacking all of K and V for each piece cost more than the piece */
    struct {
        float *kv;
        int64_t floats;
        const void *qkv; /* NULL: nothing packed */
        int n, n_heads, head_dim;
    } dense;
    /* the last quantized embedding table, for a tied output to share */
    struct {
        const void *src;
        ifd_ggml_type_t type;
        int64_t rows, cols;
        ifd_weight_t w;
    } last_embed;
} ifd__cpu_backend_t;

static ifd__cpu_backend_t *ifd__cpu(ifd_backend_t *be)
{
    return (ifd__cpu_backend_t *)be;
}

static void ifd__cpu_destroy(ifd_backend_t *be)
{
    ifd__cpu_backend_t *c = ifd__cpu(be);
    ifd_threadpool_destroy(c->tp);
    free(c->kv_tmp);
    free(c->qact);
    for (ifd__wchunk_t *ch = c->wchunks, *next; ch; ch = next) { /* weights not freed */
        next = ch->next;
        free(ch->base);
        free(ch);
    }
    free(c->dense.kv);
    free(c);
}

/* Activation and index buffers (ops->alloc): 64-byte aligned, no advice —
 * their pages are touched as steps first reach a shape, and khugepaged
 * collapsing a partly touched 2 MiB range would make all of it resident at a
 * moment of its choosing (a soak saw private RSS climb in 2 MiB steps). */
static int ifd__cpu_alloc(ifd_backend_t *be, size_t bytes, void **out)
{
    (void)be;
    void *p = aligned_alloc(64, bytes ? (bytes + 63) & ~(size_t)63 : 64);
    if (!p) {
        IFD_ERROR("cpu backend: aligned_alloc(%zu) failed", bytes);
        return IFD_ENOMEM;
    }
    *out = p;
    return 0;
}

/* The weight arena. Weights are placed one after the other (64-byte
 * aligned) in chunks of at least IFD__WCHUNK, 2 MiB aligned and offered to
 * transparent huge pages: streaming hundreds of MB of weights through 4 KiB
 * pages costs a TLB miss every 64 cache lines, which the batched matmul feels
 * (a 30-layer sweep of SmolLM2's matrices at 31 rows, cold: ~12% faster).
 * Until 2026-12-07 each weight had a 2 MiB-aligned buffer of its own whose
 * last, partly used 2 MiB page was resident whole: ~4.4 MiB a layer of a
 * Llama-3.2-1B (72 MiB of its 1.4 GiB RSS in Q8_0). Packed end to end, only
 * each chunk's last partly used 2 MiB page is wasted; the chunk's untouched
 * rest is address space, not memory. A weight that fits in no chunk's free
 * tail starts a new chunk (its own size when larger). Freeing a weight
 * frees its chunk when the chunk's last weight goes (weights are freed with
 * their model). Weights only: a temporary would stay resident in the arena.
 * Threading: the worker's thread that loads and frees models. */
enum { IFD__WHUGE = 2 << 20, IFD__WCHUNK = 256 << 20 };

/* Under AddressSanitizer every weight is a chunk of its own, exactly its
 * size: a kernel reading past a weight's end is reported, not handed the
 * next weight's bytes. */
#if defined(__SANITIZE_ADDRESS__)
#define IFD__WCHUNK_EXACT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IFD__WCHUNK_EXACT 1
#endif
#endif

static ifd__wchunk_t *ifd__wchunk_new(size_t bytes, size_t need)
{
    ifd__wchunk_t *ch = calloc(1, sizeof *ch);
    if (!ch)
        return NULL;
#ifdef IFD__WCHUNK_EXACT
    (void)need;
    void *p = NULL;
    ch->cap = bytes ? bytes : 1;
    if (posix_memalign(&p, 64, ch->cap)) {
        free(ch);
        return NULL;
    }
    ch->base = p;
    return ch;
#else
    (void)bytes;
    size_t min = (need + IFD__WHUGE - 1) & ~(size_t)(IFD__WHUGE - 1);
    ch->cap = min > IFD__WCHUNK ? min : IFD__WCHUNK;
    if (!(ch->base = aligned_alloc(IFD__WHUGE, ch->cap)) && ch->cap > min)
        ch->base = aligned_alloc(IFD__WHUGE, ch->cap = min); /* a tight address space */
    if (!ch->base) {
        free(ch);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(ch->base, ch->cap, MADV_HUGEPAGE); /* advice: where THP is off, 4 KiB pages */
#endif
    return ch;
#endif
}

static int ifd__cpu_walloc(ifd_backend_t *be, size_t bytes, void **out)
{
    ifd__cpu_backend_t *c = ifd__cpu(be);
    const size_t need = bytes ? (bytes + 63) & ~(size_t)63 : 64;
    ifd__wchunk_t *ch = c->wchunks;
    while (ch && ch->cap - ch->used < need)
        ch = ch->next;
#ifdef IFD__WCHUNK_EXACT
    ch = NULL;
#endif
    if (!ch) {
        if (!(ch = ifd__wchunk_new(bytes, need))) {
            IFD_ERROR("cpu backend: cannot allocate %zu bytes of weights", bytes);
            return IFD_ENOMEM;
        }
        ch->next = c->wchunks;
        c->wchunks = ch;
    }
    *out = ch->base + ch->used;
    ch->used += need;
    ch->live++;
    return 0;
}

/* Frees a weight of ifd__cpu_walloc (NULL: nothing). */
static void ifd__cpu_wfree(ifd_backend_t *be, void *p)
{
    if (!p)
        return;
    ifd__cpu_backend_t *c = ifd__cpu(be);
    ifd__wchunk_t **pp = &c->wchunks;
    while (*pp && !((uint8_t *)p >= (*pp)->base && (uint8_t *)p < (*pp)->base + (*pp)->cap))
        pp = &(*pp)->next;
    IFD_ASSERT(*pp && (*pp)->live > 0);
    ifd__wchunk_t *ch = *pp;
    if (--ch->live == 0) {
        *pp = ch->next;
        free(ch->base);
        free(ch);
    }
}

static void ifd__cpu_free(ifd_backend_t *be, void *p)
{
    (void)be;
    free(p);
}

static int ifd__cpu_copy(ifd_backend_t *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static int ifd__cpu_sync(ifd_backend_t *be)
{
    (void)be;
    return 0;
}

/* ---- weights ------------------------------------------------------------- */

static bool ifd__cpu_can_load(ifd_backend_t *be, ifd_ggml_type_t type)
{
    (void)be;
    /* exactly the types ifd_cpu_dequantize knows (a one-block probe) */
    uint32_t be_elems = ifd_ggml_block_elems(type);
    uint64_t bb = ifd_ggml_block_bytes(type);
    if (!be_elems || !bb || be_elems > 256)
        return false;
    uint8_t zero[512] = {0};
    float y[256];
    return bb <= sizeof zero && ifd_cpu_dequantize(y, zero, type, be_elems) == 0;
}

/* src's rows × cols elements, dequantized to f32 into dst. */
static int ifd__cpu_dequant(float *dst, const ifd_weight_src_t *src)
{
    int rc = ifd_cpu_dequantize(dst, src->data, src->type, src->rows * src->cols);
    if (rc)
        IFD_ERROR("cpu backend: tensor '%s' (%s): %s", src->name, ifd_ggml_type_name(src->type),
                  ifd_strerror(rc));
    return rc;
}

/* Whether a matrix of src's type and shape stays quantized. */
static bool ifd__cpu_keeps_q(ifd_backend_t *be, const ifd_weight_src_t *src)
{
    return ifd__cpu(be)->weights == IFD_WEIGHTS_AUTO && ifd_cpu_qtype_supported(src->type) &&
           src->rows <= INT32_MAX && src->cols <= INT32_MAX &&
           ifd_cpu_qweight_bytes(src->type, (int)src->rows, (int)src->cols) > 0;
}

/* Whether an f16/bf16 matrix of src's type and shape stays in 16 bits. */
static bool ifd__cpu_keeps_h(ifd_backend_t *be, const ifd_weight_src_t *src)
{
    return ifd__cpu(be)->weights == IFD_WEIGHTS_AUTO && ifd_cpu_htype_supported(src->type) &&
           src->rows <= INT32_MAX && src->cols <= INT32_MAX &&
           ifd_cpu_hweight_elems((int)src->rows, (int)src->cols) > 0;
}

/* A 16-bit weight from n parts of one type (rows concatenated), repacked
 * into 16-row panels (hmatmul.h). */
static int ifd__cpu_load_h(ifd_backend_t *be, ifd_weight_t *out, const ifd_weight_src_t *parts,
                           int n)
{
    int64_t rows = 0, cols = parts[0].cols;
    for (int i = 0; i < n; i++)
        rows += parts[i].rows;
    if (rows > INT32_MAX)
        return IFD_ERANGE;
    int64_t elems = ifd_cpu_hweight_elems((int)rows, (int)cols);
    if (elems < 0)
        return (int)elems;
    uint16_t *wh = NULL;
    ifd__qshare_t *share = malloc(sizeof *share);
    int rc = share ? ifd__cpu_walloc(be, (size_t)elems * 2, (void **)&wh) : IFD_ENOMEM;
    /* a panel may straddle two parts: pack them as one concatenated tensor */
    const uint16_t *src = parts[0].data;
    uint16_t *cat = NULL;
    if (rc == 0 && n > 1) {
        if (!(cat = malloc((size_t)(rows * cols) * 2)))
            rc = IFD_ENOMEM;
        int64_t off = 0;
        for (int i = 0; i < n && rc == 0; i++) {
            memcpy(cat + off, parts[i].data, (size_t)(parts[i].rows * cols) * 2);
            off += parts[i].rows * cols;
        }
        src = cat;
    }
    if (rc == 0)
        rc = ifd_cpu_hweight_pack(wh, src, (int)rows, (int)cols);
    free(cat);
    if (rc) {
        ifd__cpu_wfree(be, wh);
        free(share);
        IFD_ERROR("cpu backend: tensor '%s' (%s): cannot repack: %s", parts[0].name,
                  ifd_ggml_type_name(parts[0].type), ifd_strerror(rc));
        return rc;
    }
    share->refs = 1;
    *out = (ifd_weight_t){.data = wh, .dtype = parts[0].type, .rows = rows, .cols = cols,
                          .layout = IFD__LAYOUT_H, .aux = share, .bytes = (uint64_t)elems * 2};
    return 0;
}

/* A quantized weight from n parts of one type (rows concatenated). */
static int ifd__cpu_load_q(ifd_backend_t *be, ifd_weight_t *out, const ifd_weight_src_t *parts,
                           int n)
{
    int64_t rows = 0, cols = parts[0].cols;
    for (int i = 0; i < n; i++)
        rows += parts[i].rows;
    const ifd_ggml_type_t type = parts[0].type;
    if (rows > INT32_MAX)
        return IFD_ERANGE;
    int64_t bytes = ifd_cpu_qweight_bytes(type, (int)rows, (int)cols);
    if (bytes < 0)
        return (int)bytes;
    const void *src = parts[0].data;
    uint8_t *cat = NULL;
    if (n > 1) { /* the parts' rows one after the other, as one tensor */
        const uint64_t row_bytes = (uint64_t)(cols / ifd_ggml_block_elems(type)) *
                                   ifd_ggml_block_bytes(type);
        if (!(cat = malloc(row_bytes * (uint64_t)rows)))
            return IFD_ENOMEM;
        uint64_t off = 0;
        for (int i = 0; i < n; i++) {
            memcpy(cat + off, parts[i].data, row_bytes * (uint64_t)parts[i].rows);
            off += row_bytes * (uint64_t)parts[i].rows;
        }
        src = cat;
    }
    void *wq = NULL;
    ifd__qshare_t *share = malloc(sizeof *share);
    int rc = share ? ifd__cpu_walloc(be, (size_t)bytes, &wq) : IFD_ENOMEM;
    if (rc == 0)
        rc = ifd_cpu_qweight_pack(wq, src, type, (int)rows, (int)cols);
    free(cat);
    if (rc) {
        ifd__cpu_wfree(be, wq);
        free(share);
        IFD_ERROR("cpu backend: tensor '%s' (%s): cannot repack: %s", parts[0].name,
                  ifd_ggml_type_name(type), ifd_strerror(rc));
        return rc;
    }
    share->refs = 1;
    *out = (ifd_weight_t){.data = wq, .dtype = type, .rows = rows, .cols = cols,
                          .layout = IFD__LAYOUT_Q, .aux = share, .bytes = (uint64_t)bytes};
    return 0;
}

static int ifd__cpu_load_weight(ifd_backend_t *be, ifd_weight_t *out, const ifd_weight_src_t *src,
                                ifd_weight_use_t use)
{
    memset(out, 0, sizeof *out);
    const bool keep_q = ifd__cpu_keeps_q(be, src), keep_h = !keep_q && ifd__cpu_keeps_h(be, src);
    if (use == IFD_WEIGHT_EMBED && src->rows > 1 && (keep_q || keep_h)) {
        int rc = keep_q ? ifd__cpu_load_q(be, out, src, 1) : ifd__cpu_load_h(be, out, src, 1);
        if (rc == 0) {
            ifd__cpu_backend_t *c = ifd__cpu(be);
            c->last_embed.src = src->data;
            c->last_embed.type = src->type;
            c->last_embed.rows = src->rows;
            c->last_embed.cols = src->cols;
            c->last_embed.w = *out;
        }
        return rc;
    }
    size_t n = (size_t)(src->rows * src->cols), bytes = n * sizeof(float);
    float *w;
    int rc = ifd__cpu_walloc(be, bytes, (void **)&w);
    if (rc)
        return rc;
    if ((rc = ifd__cpu_dequant(w, src))) {
        ifd__cpu_wfree(be, w);
        return rc;
    }
    if (use == IFD_WEIGHT_NORM_ADD1)
        for (size_t i = 0; i < n; i++)
            w[i] = 1.0f + w[i];
    *out = (ifd_weight_t){.data = w, .dtype = IFD_GGML_F32, .rows = src->rows,
                          .cols = src->cols, .bytes = bytes};
    return 0;
}

static void ifd__cpu_weight_free(ifd_backend_t *be, ifd_weight_t *w)
{
    ifd__cpu_backend_t *c = ifd__cpu(be);
    if ((w->layout == IFD__LAYOUT_Q || w->layout == IFD__LAYOUT_H) && w->aux) {
        ifd__qshare_t *share = w->aux;
        IFD_ASSERT(share->refs > 0);
        if (--share->refs > 0) {
            memset(w, 0, sizeof *w);
            return;
        }
        free(share);
    }
    if (w->data && w->data == c->last_embed.w.data)
        memset(&c->last_embed, 0, sizeof c->last_embed);
    ifd__cpu_wfree(be, w->data);
    memset(w, 0, sizeof *w);
}

static void ifd__cpu_proj_free(ifd_backend_t *be, ifd_proj_t *p)
{
    for (int i = 0; i < p->n_parts; i++)
        ifd__cpu_weight_free(be, &p->part[i]);
    ifd__cpu_weight_free(be, &p->bias);
    memset(p, 0, sizeof *p);
}

/* The biases of n parts as one f32 [Σ rows] vector (zeros where a part has
 * none) in *out, or NULL when no part has one. */
static int ifd__cpu_load_bias(ifd_backend_t *be, float **out, const ifd_weight_src_t *parts,
                              const ifd_weight_src_t *const *bias, int n, int64_t rows)
{
    *out = NULL;
    bool any_bias = false;
    for (int i = 0; i < n; i++)
        any_bias |= bias && bias[i] && bias[i]->data;
    if (!any_bias)
        return 0;
    float *b;
    int rc = ifd__cpu_walloc(be, (size_t)rows * sizeof(float), (void **)&b);
    if (rc)
        return rc;
    int64_t r0 = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (bias[i] && bias[i]->data)
            rc = ifd__cpu_dequant(b + r0, bias[i]);
        else
            memset(b + r0, 0, (size_t)parts[i].rows * sizeof(float));
        r0 += parts[i].rows;
    }
    if (rc) {
        ifd__cpu_wfree(be, b);
        return rc;
    }
    *out = b;
    return 0;
}

/* Quantized parts (h: 16-bit parts of one type): one merged weight when
 * all have one type, else one weight per part (a tied output shares the
 * embedding's buffer). */
static int ifd__cpu_load_proj_q(ifd_backend_t *be, ifd_proj_t *out, const ifd_weight_src_t *parts,
                                const ifd_weight_src_t *const *bias, int n, int64_t rows, bool h)
{
    ifd__cpu_backend_t *c = ifd__cpu(be);
    bool same = true;
    for (int i = 1; i < n; i++)
        same &= parts[i].type == parts[0].type;
    int rc = 0;
    if (n == 1 && c->last_embed.w.data && c->last_embed.src == parts[0].data &&
        c->last_embed.type == parts[0].type && c->last_embed.rows == parts[0].rows &&
        c->last_embed.cols == parts[0].cols) {
        out->part[0] = c->last_embed.w;
        out->part[0].bytes = 0; /* counted once, with the embedding */
        ((ifd__qshare_t *)out->part[0].aux)->refs++;
        out->n_parts = 1;
    } else if (same) {
        rc = h ? ifd__cpu_load_h(be, &out->part[0], parts, n)
               : ifd__cpu_load_q(be, &out->part[0], parts, n);
        out->n_parts = rc ? 0 : 1;
    } else {
        int64_t r0 = 0;
        for (int i = 0; i < n && rc == 0; i++) {
            if ((rc = ifd__cpu_load_q(be, &out->part[i], &parts[i], 1)) == 0) {
                out->part_row0[i] = r0;
                out->n_parts = i + 1;
            }
            r0 += parts[i].rows;
        }
    }
    float *b = NULL;
    if (rc == 0)
        rc = ifd__cpu_load_bias(be, &b, parts, bias, n, rows);
    if (rc) {
        ifd__cpu_proj_free(be, out);
        return rc;
    }
    if (b)
        out->bias = (ifd_weight_t){.data = b, .dtype = IFD_GGML_F32, .rows = 1, .cols = rows,
                                   .bytes = (uint64_t)rows * sizeof(float)};
    out->rows = rows;
    out->cols = parts[0].cols;
    return 0;
}

/* Quantized where every part's type allows it (see the top of the file),
 * else every part dequantized into one f32 [Σ rows, cols] matrix, packed. */
static int ifd__cpu_load_proj(ifd_backend_t *be, ifd_proj_t *out, const ifd_weight_src_t *parts,
                              const ifd_weight_src_t *const *bias, int n)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || n > IFD_PROJ_MAX_PARTS)
        return IFD_EINVAL;
    int64_t rows = 0, cols = parts[0].cols;
    bool all_q = true, all_h = true;
    for (int i = 0; i < n; i++) {
        if (parts[i].cols != cols)
            return IFD_EINVAL;
        rows += parts[i].rows;
        all_q &= ifd__cpu_keeps_q(be, &parts[i]);
        all_h &= ifd__cpu_keeps_h(be, &parts[i]) && parts[i].type == parts[0].type;
    }
    if (rows > INT32_MAX || cols > INT32_MAX)
        return IFD_ERANGE;
    if (all_q || all_h)
        return ifd__cpu_load_proj_q(be, out, parts, bias, n, rows, all_h);
    int64_t nf = ifd_cpu_matmul_packed_floats((int)rows, (int)cols);
    if (nf < 0)
        return (int)nf;
    float *wp = NULL, *b = NULL;
    float *w = malloc((size_t)(rows * cols) * sizeof(float)); /* unpacked: a temporary */
    if (!w)
        return IFD_ENOMEM;
    int rc = 0;
    int64_t r0 = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = ifd__cpu_dequant(w + r0 * cols, &parts[i]);
        r0 += parts[i].rows;
    }
    if (rc == 0)
        rc = ifd__cpu_load_bias(be, &b, parts, bias, n, rows);
    if (rc == 0 && (rc = ifd__cpu_walloc(be, (size_t)nf * sizeof(float), (void **)&wp)) == 0)
        ifd_cpu_matmul_pack(wp, w, (int)rows, (int)cols);
    free(w);
    if (rc) {
        ifd__cpu_wfree(be, b);
        return rc;
    }
    out->n_parts = 1;
    out->part[0] = (ifd_weight_t){.data = wp, .dtype = IFD_GGML_F32, .rows = rows, .cols = cols,
                                  .layout = IFD__LAYOUT_PACKED,
                                  .bytes = (uint64_t)nf * sizeof(float)};
    if (b)
        out->bias = (ifd_weight_t){.data = b, .dtype = IFD_GGML_F32, .rows = 1, .cols = rows,
                                   .bytes = (uint64_t)rows * sizeof(float)};
    out->rows = rows;
    out->cols = cols;
    return 0;
}

/* ---- activations ---------------------------------------------------------- */

static int ifd__cpu_act_alloc(ifd_backend_t *be, ifd_act_t *out, ifd_dtype_t dtype, int64_t rows,
                              int64_t cols)
{
    memset(out, 0, sizeof *out);
    if (dtype != IFD_DTYPE_F32 || rows < 0 || cols <= 0)
        return IFD_EINVAL;
    int rc = ifd__cpu_alloc(be, (size_t)(rows * cols) * sizeof(float), &out->data);
    if (rc)
        return rc;
    out->dtype = dtype;
    out->rows = rows;
    out->cols = cols;
    return 0;
}

static void ifd__cpu_act_free(ifd_backend_t *be, ifd_act_t *a)
{
    (void)be;
    free(a->data);
    memset(a, 0, sizeof *a);
}

static float *ifd__f(const ifd_act_t *a)
{
    return a->data;
}

/* ---- compute -------------------------------------------------------------- */

static int ifd__cpu_embed(ifd_backend_t *be, ifd_act_t *x, const ifd_weight_t *emb,
                          const int32_t *tokens, int n, float scale)
{
    (void)be;
    const bool q = emb->layout == IFD__LAYOUT_Q, h = emb->layout == IFD__LAYOUT_H;
    if ((!q && !h && emb->dtype != IFD_GGML_F32) || x->cols != emb->cols || n > x->rows)
        return IFD_EINVAL;
    const float *e = emb->data;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= emb->rows)
            return IFD_ERANGE;
        float *o = ifd__f(x) + (int64_t)i * emb->cols;
        const float *row = o;
        if (h) {
            if (ifd_cpu_hweight_row(o, emb->data, emb->dtype, (int)emb->rows, (int)emb->cols,
                                    tokens[i]) != 0)
                return IFD_EINVAL;
        } else if (!q)
            row = e + (int64_t)tokens[i] * emb->cols;
        else if (ifd_cpu_qweight_row(o, emb->data, emb->dtype, (int)emb->rows, (int)emb->cols,
                                     tokens[i]) != 0)
            return IFD_EINVAL;
        for (int64_t j = 0; j < emb->cols; j++)
            o[j] = row[j] * scale;
    }
    return 0;
}

static int ifd__cpu_rmsnorm(ifd_backend_t *be, ifd_act_t *y, ifd_act_t *residual,
                            const ifd_act_t *delta, const ifd_weight_t *w, int rows, float eps)
{
    (void)be;
    if (rows > residual->rows || rows > y->rows || residual->cols != w->cols ||
        y->cols != w->cols || (delta && delta->cols != w->cols))
        return IFD_EINVAL;
    if (delta) {
        float *r = ifd__f(residual);
        const float *d = ifd__f(delta);
        for (int64_t i = 0; i < (int64_t)rows * w->cols; i++)
            r[i] += d[i];
    }
    return ifd_cpu_rmsnorm(ifd__f(y), ifd__f(residual), w->data, rows, (int)w->cols, eps);
}

/* Rows a per-call scratch buffer is sized for when a step of m rows needs
 * it: the next power of two (at least 16). Sized exactly, a step shape that
 * creeps upward under load freed and reallocated the buffer at every new
 * maximum (45 times a minute under a soak). */
static int ifd__rows_cap(int m)
{
    int c = 16;
    while (c < m && c < (1 << 30))
        c *= 2;
    return c;
}

/* The quantized parts: x quantized once, each part into its columns. */
static int ifd__cpu_proj_q(ifd_backend_t *be, float *y, const float *x, const ifd_proj_t *p, int m)
{
    ifd__cpu_backend_t *c = ifd__cpu(be);
    int64_t need = ifd_cpu_qact_bytes(ifd__rows_cap(m), (int)p->cols);
    if (need < 0)
        return (int)need;
    if ((size_t)need > c->qact_bytes) {
        free(c->qact);
        c->qact_bytes = 0;
        if ((c->qact = malloc((size_t)need)) == NULL)
            return IFD_ENOMEM;
        c->qact_bytes = (size_t)need;
    }
    ifd_cpu_qact_t a;
    int rc = ifd_cpu_qact_init(&a, c->qact, m, (int)p->cols);
    if (rc == 0)
        rc = ifd_cpu_quantize_act(&a, x, c->tp);
    for (int i = 0; i < p->n_parts && rc == 0; i++)
        rc = ifd_cpu_qmatmul(y + p->part_row0[i], p->rows, &a, p->part[i].data, p->part[i].dtype,
                             (int)p->part[i].rows, c->tp);
    return rc;
}

static int ifd__cpu_proj(ifd_backend_t *be, ifd_act_t *y, const ifd_act_t *x, const ifd_proj_t *p,
                         int m)
{
    /* f32 parts are always merged (see the top of the file) */
    const ifd_weight_t *w = &p->part[0];
    const bool q = w->layout == IFD__LAYOUT_Q, h = w->layout == IFD__LAYOUT_H;
    if ((!q && (p->n_parts != 1 || (w->layout != IFD__LAYOUT_PACKED && !h))) ||
        x->cols != p->cols || y->cols != p->rows || m > x->rows || m > y->rows)
        return IFD_EINVAL;
    if (m == 0)
        return 0;
    int rc = q   ? ifd__cpu_proj_q(be, ifd__f(y), ifd__f(x), p, m)
             : h ? ifd_cpu_hmatmul(ifd__f(y), p->rows, ifd__f(x), w->data, w->dtype, m,
                                   (int)w->rows, (int)w->cols, ifd__cpu(be)->tp)
                 : ifd_cpu_matmul_packed(ifd__f(y), ifd__f(x), w->data, m, (int)w->rows,
                                         (int)w->cols, ifd__cpu(be)->tp);
    if (rc || !p->bias.data)
        return rc;
    const float *b = p->bias.data;
    for (int r = 0; r < m; r++) {
        float *row = ifd__f(y) + (int64_t)r * p->rows;
        for (int64_t j = 0; j < p->rows; j++)
            row[j] += b[j];
    }
    return 0;
}

static int ifd__cpu_rope_kv(ifd_backend_t *be, ifd_act_t *q_out, const ifd_act_t *qkv,
                            const ifd_weight_t *q_norm, const ifd_weight_t *k_norm, float eps,
                            const ifd_kv_layer_t *kv, const int32_t *pos, const int64_t *slot,
                            int n_tok, int n_heads, const ifd_rope_t *rope)
{
    ifd__cpu_backend_t *c = ifd__cpu(be);
    const int hd = kv->head_dim, nkv = kv->n_kv_heads;
    const int64_t qd = (int64_t)n_heads * hd, kvd = (int64_t)nkv * hd, ld = qd + 2 * kvd;
    if (qkv->cols != ld || q_out->cols != qd || n_tok > qkv->rows || n_tok > q_out->rows)
        return IFD_EINVAL;
    size_t need = (size_t)n_tok * (size_t)kvd * 2;
    if (need > c->kv_tmp_floats) {
        need = (size_t)ifd__rows_cap(n_tok) * (size_t)kvd * 2;
        float *t = realloc(c->kv_tmp, need * sizeof(float));
        if (!t)
            return IFD_ENOMEM;
        c->kv_tmp = t;
        c->kv_tmp_floats = need;
    }
    float *k = c->kv_tmp, *v = c->kv_tmp + (size_t)n_tok * kvd;
    float *q = ifd__f(q_out);
    for (int t = 0; t < n_tok; t++) {
        const float *row = ifd__f(qkv) + (int64_t)t * ld;
        memcpy(q + (int64_t)t * qd, row, (size_t)qd * sizeof(float));
        memcpy(k + (int64_t)t * kvd, row + qd, (size_t)kvd * sizeof(float));
        memcpy(v + (int64_t)t * kvd, row + qd + kvd, (size_t)kvd * sizeof(float));
    }
    int rc = 0;
    if (q_norm && (rc = ifd_cpu_rmsnorm(q, q, q_norm->data, n_tok * n_heads, hd, eps)))
        return rc;
    if (k_norm && (rc = ifd_cpu_rmsnorm(k, k, k_norm->data, n_tok * nkv, hd, eps)))
        return rc;
    if ((rc = ifd_cpu_rope(q, pos, n_tok, n_heads, hd, rope->n_rot, rope->base, rope->freq_scale,
                           rope->freq_factors, rope->mode)) ||
        (rc = ifd_cpu_rope(k, pos, n_tok, nkv, hd, rope->n_rot, rope->base, rope->freq_scale,
                           rope->freq_factors, rope->mode)))
        return rc;
    /* Quantized K is kept rotated (kv_rot.h); q goes into the same basis. */
    if ((rc = ifd_cpu_kv_rotate(q, (int64_t)n_tok * n_heads, hd, kv->dtype)) ||
        (rc = ifd_cpu_kv_rotate(k, (int64_t)n_tok * nkv, hd, kv->dtype)))
        return rc;
    return ifd_cpu_kv_write(kv, k, v, slot, n_tok);
}

static int ifd__cpu_attn_workspace(ifd_backend_t *be, size_t *bytes, const ifd_attn_batch_t *ab,
                                   const ifd_kv_layer_t *kv, int n_heads)
{
    (void)be, (void)ab, (void)kv, (void)n_heads;
    *bytes = 0;
    return 0;
}

/* The CPU kernel takes every token on its own (seq, pos), so the varlen
 * description (cu_q, ctx_len) is not needed. */
static int ifd__cpu_attention(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *q,
                              const ifd_kv_layer_t *kv, const ifd_attn_batch_t *ab, int n_heads,
                              float scale, int window)
{
    if (ab->n_tok > out->rows || ab->n_tok > q->rows)
        return IFD_EINVAL;
    return ifd_cpu_paged_attention(ifd__f(out), ifd__f(q), kv, ab->seq, ab->pos, ab->last,
                                   ab->block_tables, ab->max_blocks, ab->n_tok, n_heads, scale,
                                   window, ifd__cpu(be)->tp);
}

static int ifd__cpu_glu(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *gate_up, int rows,
                        int n_ff, ifd_glu_t kind)
{
    (void)be;
    if (gate_up->cols != 2 * (int64_t)n_ff || out->cols != n_ff || rows > out->rows ||
        rows > gate_up->rows)
        return IFD_EINVAL;
    int (*fn)(float *, const float *, const float *, int64_t);
    switch (kind) {
    case IFD_GLU_SWIGLU:
        fn = ifd_cpu_swiglu;
        break;
    case IFD_GLU_GEGLU_TANH:
        fn = ifd_cpu_geglu_tanh;
        break;
    default:
        return IFD_ENOTSUP;
    }
    for (int r = 0; r < rows; r++) {
        const float *gu = ifd__f(gate_up) + (int64_t)r * 2 * n_ff;
        int rc = fn(ifd__f(out) + (int64_t)r * n_ff, gu, gu + n_ff, n_ff);
        if (rc)
            return rc;
    }
    return 0;
}

static int ifd__cpu_gather_rows(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x,
                                const int32_t *rows, int n_rows)
{
    (void)be;
    if (out->cols != x->cols || n_rows > out->rows)
        return IFD_EINVAL;
    const size_t dim = (size_t)x->cols;
    for (int i = 0; i < n_rows; i++) {
        if (rows[i] < 0 || rows[i] >= x->rows)
            return IFD_EINVAL;
        memcpy(ifd__f(out) + (size_t)i * dim, ifd__f(x) + (size_t)rows[i] * dim,
               dim * sizeof(float));
    }
    return 0;
}

/* ---- vision ---------------------------------------------------------------- */

static int ifd__cpu_layernorm(ifd_backend_t *be, ifd_act_t *y, ifd_act_t *residual,
                              const ifd_act_t *delta, const ifd_weight_t *w, const ifd_weight_t *b,
                              int rows, float eps)
{
    (void)be;
    if (rows > residual->rows || rows > y->rows || residual->cols != w->cols ||
        y->cols != w->cols || (delta && (delta->cols != w->cols || rows > delta->rows)) ||
        (b && b->cols != w->cols) || w->dtype != IFD_GGML_F32)
        return IFD_EINVAL;
    if (delta) {
        float *r = ifd__f(residual);
        const float *d = ifd__f(delta);
        for (int64_t i = 0; i < (int64_t)rows * w->cols; i++)
            r[i] += d[i];
    }
    return ifd_cpu_layernorm(ifd__f(y), ifd__f(residual), w->data, b ? b->data : NULL, rows,
                             (int)w->cols, eps);
}

static int ifd__cpu_add_rows(ifd_backend_t *be, ifd_act_t *x, const ifd_weight_t *t, int rows)
{
    (void)be;
    if (rows > x->rows || rows > t->rows || t->cols != x->cols || t->dtype != IFD_GGML_F32 ||
        t->layout != IFD__LAYOUT_PLAIN)
        return IFD_EINVAL;
    const float *tv = t->data;
    float *xv = ifd__f(x);
    for (int64_t i = 0; i < (int64_t)rows * x->cols; i++)
        xv[i] += tv[i];
    return 0;
}

static int ifd__cpu_gelu(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x, int rows)
{
    (void)be;
    if (out->cols != x->cols || rows > out->rows || rows > x->rows)
        return IFD_EINVAL;
    return ifd_cpu_gelu_tanh(ifd__f(out), ifd__f(x), (int64_t)rows * x->cols);
}

static int ifd__cpu_dense_attention(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *qkv, int n,
                                    int q0, int q1, int n_heads, int head_dim, float scale)
{
    const int64_t width = (int64_t)n_heads * head_dim;
    if (n > out->rows || n > qkv->rows || out->cols != width || qkv->cols != 3 * width)
        return IFD_EINVAL;
    ifd__cpu_backend_t *c = ifd__cpu(be);
    const int64_t floats = ifd_cpu_dense_kv_floats(n, n_heads, head_dim);
    if (floats < 0 || q0 < 0 || q1 < q0 || q1 > n)
        return IFD_EINVAL;
    if (q0 == q1)
        return 0;
    /* K and V packed at q0 = 0 (a new sweep: a new layer's qkv in the same
     * buffer) or when the call is on another qkv or shape */
    if (q0 == 0 || c->dense.qkv != qkv->data || c->dense.n != n || c->dense.n_heads != n_heads ||
        c->dense.head_dim != head_dim) {
        c->dense.qkv = NULL;
        if (c->dense.floats < floats) {
            free(c->dense.kv);
            const size_t bytes = ((size_t)floats * sizeof(float) + 63) & ~(size_t)63;
            c->dense.kv = aligned_alloc(64, bytes);
            c->dense.floats = c->dense.kv ? floats : 0;
            if (!c->dense.kv)
                return IFD_ENOMEM;
        }
        int rc = ifd_cpu_dense_kv_pack(c->dense.kv, ifd__f(qkv), n, n_heads, head_dim, c->tp);
        if (rc)
            return rc;
        c->dense.qkv = qkv->data;
        c->dense.n = n, c->dense.n_heads = n_heads, c->dense.head_dim = head_dim;
    }
    return ifd_cpu_dense_attention_kv(ifd__f(out), ifd__f(qkv), c->dense.kv, n, q0, q1, n_heads,
                                      head_dim, scale, c->tp);
}

static int ifd__cpu_avg_pool2d(ifd_backend_t *be, ifd_act_t *out, const ifd_act_t *x, int rows,
                               int side, int k)
{
    (void)be;
    if (k <= 0 || side <= 0 || rows <= 0 || side % k || rows % k ||
        x->rows < (int64_t)rows * side || out->rows < (int64_t)(rows / k) * (side / k) ||
        out->cols != x->cols)
        return IFD_EINVAL;
    return ifd_cpu_avg_pool2d(ifd__f(out), ifd__f(x), rows, side, k, (int)x->cols);
}

static const ifd_backend_ops_t ifd__cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .mm_in_dtype = IFD_DTYPE_F32,
    .destroy = ifd__cpu_destroy,
    .alloc = ifd__cpu_alloc,
    .free = ifd__cpu_free,
    .upload = ifd__cpu_copy,
    .download = ifd__cpu_copy,
    .sync = ifd__cpu_sync,
    .can_load = ifd__cpu_can_load,
    .load_weight = ifd__cpu_load_weight,
    .load_proj = ifd__cpu_load_proj,
    .weight_free = ifd__cpu_weight_free,
    .proj_free = ifd__cpu_proj_free,
    .act_alloc = ifd__cpu_act_alloc,
    .act_free = ifd__cpu_act_free,
    .embed = ifd__cpu_embed,
    .rmsnorm = ifd__cpu_rmsnorm,
    .proj = ifd__cpu_proj,
    .rope_kv = ifd__cpu_rope_kv,
    .attn_workspace = ifd__cpu_attn_workspace,
    .attention = ifd__cpu_attention,
    .glu = ifd__cpu_glu,
    .gather_rows = ifd__cpu_gather_rows,
    .layernorm = ifd__cpu_layernorm,
    .add_rows = ifd__cpu_add_rows,
    .gelu = ifd__cpu_gelu,
    .dense_attention = ifd__cpu_dense_attention,
    .avg_pool2d = ifd__cpu_avg_pool2d,
};

int ifd_backend_cpu_create(ifd_backend_t **out, int n_threads)
{
    return ifd_backend_cpu_create_ex(out, n_threads, IFD_WEIGHTS_AUTO);
}

int ifd_weights_dtype_parse(const char *s, ifd_weights_dtype_t *out)
{
    if (s && strcmp(s, "auto") == 0)
        *out = IFD_WEIGHTS_AUTO;
    else if (s && strcmp(s, "f32") == 0)
        *out = IFD_WEIGHTS_F32;
    else
        return IFD_EINVAL;
    return 0;
}

int ifd_backend_cpu_create_ex(ifd_backend_t **out, int n_threads, ifd_weights_dtype_t weights)
{
    if (weights != IFD_WEIGHTS_AUTO && weights != IFD_WEIGHTS_F32)
        return IFD_EINVAL;
    ifd__cpu_backend_t *c = calloc(1, sizeof *c);
    if (!c)
        return IFD_ENOMEM;
    c->base.ops = &ifd__cpu_ops;
    c->weights = weights;
    int rc = ifd_threadpool_create(&c->tp, n_threads);
    if (rc) {
        free(c);
        return rc;
    }
    *out = &c->base;
    return 0;
}
