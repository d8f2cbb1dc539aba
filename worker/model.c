/*
 * model.c — weight loading and the forward pass for llama (incl. Mistral),
 * gemma3, qwen2 and qwen3, from GGUF or a Hugging Face directory.
 *
 * Loading: each tensor is looked up by its GGUF name through the model
 * source (common/modelfile/model_source.h: a GGUF file, or an HF directory whose
 * safetensors names it maps) and its shape checked against the
 * hyper-parameters; the backend stores it as it likes from the mapped
 * file's bytes, one tensor at a time (load_weight / load_proj: the CPU
 * dequantizes to f32 and packs). Q|K|V and gate|up are each ONE projection
 * (ifd_proj_t), with the optional "<name>.bias" tensors beside each part
 * (required when the config has q/k/v biases: Qwen 2). HF Gemma norms are w
 * and load as NORM_ADD1; GGUF already stores 1 + w. A tied model (no
 * output.weight) projects with a copy of token_embd. When the tokenizer has
 * fewer ids than the model has vocabulary rows (cfg.n_vocab_valid; Gemma 3
 * 4B), the output projection gets a bias of -inf on the rows past it.
 *
 * Forward (MODEL-FORMATS.md §5), in the backend's fused ops: embedding →
 * per layer [ (+ previous delta) RMSNorm → QKV proj → (gemma: QK-norm) RoPE
 * + K/V write → paged attention → output proj (gemma: post-norm) → (+ delta)
 * RMSNorm → gate|up proj → GLU → down proj (gemma: post-norm) ] → last
 * residual add + final norm on the rows that need logits → output proj
 * (→ final soft-cap when configured). RoPE pairing follows the config:
 * GGUF llama stores Q/K permuted for interleaved RoPE (NORM); gemma3, qwen
 * and every HF checkpoint use NEOX pairs. Local (sliding-window) layers are
 * those the config marks (gemma3's pattern, Mistral's window on all).
 *
 * Buffers (activations, index arrays, block tables, attention workspace)
 * grow geometrically and are kept: once the largest step has run, a step
 * allocates nothing. Every reallocation bumps buf_epoch.
 *
 * Decode steps on a backend with graphs (ops->graph_begin; CUDA): a step in
 * which every sequence brings exactly one token (seq[i] == i, logits for
 * every token, at most IFD_MODEL_MAX_GRAPH_BATCH tokens) is padded to its
 * batch bucket B (1, 2, 4, ..., 256; padding tokens have seq -1 and slot
 * -1: nothing written, zero attention) and its attention planned for a
 * context bucket C (the power of two >= max(max_ctx, 256)), with block
 * tables repacked to [B, ceil(C / block_size)] — so that every argument the
 * ops take by value (row counts, max_blocks, max_ctx, pointers) depends on
 * (B, C) only, and all that changes between steps (tokens, positions,
 * slots, block tables) is uploaded into the same buffers before the step.
 * The first step of a (B, C) pair runs eagerly (it sizes every scratch
 * buffer) and records the ops as graph key(B, C); later ones replay it.
 * The model's buffers are sized for the largest bucket — the smallest one
 * >= max_seqs after ifd_model_set_max_seqs, else 256 — (and the attention
 * workspace for every bucket up to it at C) before the first recording, so
 * that a larger bucket does not move what a smaller one's graph uses (a
 * decode step past it grows them, and the graphs are recorded again); a graph is
 * recorded again when its buffers moved anyway (buf_epoch: a prefill
 * larger than any before) or the KV views differ. Keys come in sets
 * (ifd_model_set_graph_set: a model's and its draft's graphs apart on one
 * backend). ifd_model_set_graphs(m, false) runs
 * the same padded steps eagerly (the reference the graph is tested
 * against). Prefill and mixed steps always run eagerly, unpadded.
 *
 * Sampling on the device (ifd_model_forward_sample, backends with
 * ops->sample): logits stay on the device, grammar masks and logprobs
 * included (backend.h's ifd_sample_row_t); a final soft-cap is applied
 * there too (ops->softcap: ifd_softcap of sampling_math.h, which the host
 * path computes with the same float operations); rows the caller marks
 * for the host are downloaded instead (already capped).
 */
#include "model.h"

#include "error.h"
#include "log.h"
#include "modelfile/model_source.h"
#include "sampling_math.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ifd_weight_t attn_norm, ffn_norm;
    ifd_weight_t q_norm, k_norm;                /* gemma3, qwen3 (data NULL otherwise) */
    ifd_weight_t post_attn_norm, post_ffw_norm; /* gemma3 (data NULL otherwise) */
    ifd_proj_t qkv;     /* Q|K|V, with optional biases */
    ifd_proj_t wo;
    ifd_proj_t gate_up; /* gate|up */
    ifd_proj_t down;
} ifd__layer_t;

/* Activations for up to `cap` tokens (ifd_act_t: the backend's dtypes) and
 * the batch's index arrays in backend memory. */
typedef struct {
    int cap;
    ifd_act_t x;   /* f32 [cap, E]: the residual stream */
    ifd_act_t a;   /* mm_in [cap, E]: normed residual */
    ifd_act_t qkv; /* f32 [cap, qd + 2 kvd] */
    ifd_act_t q;   /* f32 [cap, qd]: rotated queries */
    ifd_act_t o;   /* mm_in [cap, qd]: attention output */
    ifd_act_t t;   /* f32 [cap, E]: a block's output (the pending residual delta) */
    ifd_act_t gu;  /* f32 [cap, 2F]: gate|up */
    ifd_act_t g;   /* mm_in [cap, F]: GLU output */
    int32_t *tokens, *pos, *seq;
    int32_t *last;         /* ifd_batch_t.kv_last */
    int64_t *slot, *lslot; /* lslot: local layers' slots (ifd_batch_t.local_slot) */
} ifd__scratch_t;

/* Buffers sized by n_logits. */
typedef struct {
    int cap;
    ifd_act_t xs, ts; /* f32 [cap, E]: gathered residual and last delta */
    ifd_act_t xn;     /* mm_in [cap, E]: final-normed */
    ifd_act_t logits; /* f32 [cap, V] */
    int32_t *rows;
} ifd__logit_bufs_t;

/* Buffers sized by n_seqs / max_blocks / the attention workspace. */
typedef struct {
    int32_t *block_tables, *lblock_tables; /* lblock_tables: ifd_batch_t.local_block_tables */
    size_t block_tables_cap; /* bytes, each */
    int32_t *cu_q, *ctx_len; /* backend memory [seqs_cap + 1], [seqs_cap] */
    int32_t *h_cu_q, *h_ctx_len; /* host copies */
    int seqs_cap;
    void *workspace;
    size_t workspace_cap;
} ifd__batch_bufs_t;

/* Batch buckets of graph-replayed decode steps, and the context buckets
 * (powers of two from 256) their attention is planned for. */
static const int ifd__buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
#define IFD__N_BUCKETS  ((int)(sizeof ifd__buckets / sizeof ifd__buckets[0]))
#define IFD__CTX_MIN    256
#define IFD__SET_KEYS   (IFD_BACKEND_MAX_GRAPHS / IFD_MODEL_GRAPH_SETS) /* keys a set */
#define IFD__N_CTX_BKTS (IFD__SET_KEYS / IFD__N_BUCKETS)
_Static_assert(IFD_MODEL_MAX_GRAPH_BATCH == 256, "the last bucket");

/* Decode-step graphs: the padded batch's host arrays, and per key what the
 * graph was recorded against. */
typedef struct {
    bool off; /* ifd_model_set_graphs(m, false) */
    int set;  /* ifd_model_set_graph_set: keys [set * IFD__SET_KEYS, + IFD__SET_KEYS) */
    int32_t tokens[IFD_MODEL_MAX_GRAPH_BATCH], pos[IFD_MODEL_MAX_GRAPH_BATCH];
    int32_t seq[IFD_MODEL_MAX_GRAPH_BATCH], rows[IFD_MODEL_MAX_GRAPH_BATCH];
    int64_t slot[IFD_MODEL_MAX_GRAPH_BATCH], lslot[IFD_MODEL_MAX_GRAPH_BATCH];
    int32_t *bt, *lbt; /* host [B, MB] (lbt: local tables, when the batch has them) */
    size_t bt_cap;
    uint64_t epoch[IFD_BACKEND_MAX_GRAPHS]; /* buf_epoch at recording; 0 = none */
    uint64_t kv_hash[IFD_BACKEND_MAX_GRAPHS];
    ifd_model_graph_stats_t st;
} ifd__graphs_t;

struct ifd_model {
    ifd_model_config_t cfg;
    ifd_model_source_t *src; /* NULL for random weights */
    ifd_backend_t *be;
    ifd__layer_t *layers;
    ifd_weight_t tok_embd, output_norm, rope_freqs;
    ifd_proj_t output;
    bool output_tied;
    uint64_t weight_bytes;
    ifd__scratch_t s;
    ifd__logit_bufs_t lg;
    ifd__batch_bufs_t bb;
    uint64_t buf_epoch; /* bumped by every buffer (re)allocation */
    bool local_tables;  /* a batch brought local tables: lslot, lblock_tables exist */
    int max_bucket;     /* the largest decode bucket sized for; 0: the last one */
    ifd__graphs_t gr;
};

/* The largest batch bucket the buffers are sized for before a recording
 * (ifd_model_set_max_seqs; a larger decode step still runs, growing them). */
static int ifd__max_bucket(const ifd_model_t *m)
{
    return m->max_bucket ? m->max_bucket : IFD_MODEL_MAX_GRAPH_BATCH;
}

/* A capacity for n: the next power of two (at least 16), so that growing
 * batches reallocate O(log n) times. */
static int ifd__cap_for(int n)
{
    int c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* Where tensors come from: the model source (m->src), or generated random
 * weights (random: host buffers made per tensor, freed after each backend
 * load call). */
typedef struct {
    ifd_model_t *m;
    char *err;
    size_t errlen;
    const char *what; /* the file's or directory's path, or "random weights" */
    bool random;
    uint64_t seed;
    void *bufs[2 * IFD_PROJ_MAX_PARTS];
    int n_bufs;
} ifd__loader_t;

static int ifd__load_fail(ifd__loader_t *L, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int ifd__load_fail(ifd__loader_t *L, int rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (L->err && L->errlen)
        snprintf(L->err, L->errlen, "%s", msg);
    else
        IFD_ERROR("%s", msg);
    return rc;
}

static void ifd__loader_release(ifd__loader_t *L)
{
    for (int i = 0; i < L->n_bufs; i++)
        free(L->bufs[i]);
    L->n_bufs = 0;
}

static uint64_t ifd__mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random bf16 weights for tensor `name`: element i is a function of (seed,
 * name, i) only, so every backend and every run with the same seed gets the
 * same values, and bf16 values are exact in f32 (the CPU and a bf16 GPU
 * hold identical weights). Vectors (norm weights) are 1 + U(-0.1, 0.1);
 * matrices U(-a, a) with a = sqrt(3 / cols), unit variance of each output
 * for unit inputs. Optional tensors (biases, output.weight, rope_freqs) do
 * not exist. */
static int ifd__random_src(ifd__loader_t *L, ifd_weight_src_t *src)
{
    uint64_t h = 1469598103934665603ull ^ L->seed;
    for (const char *p = src->name; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    const size_t n = (size_t)(src->rows * src->cols);
    uint16_t *v = malloc(n * 2 + 2);
    if (!v || L->n_bufs == (int)(sizeof L->bufs / sizeof L->bufs[0])) {
        free(v);
        return ifd__load_fail(L, IFD_ENOMEM, "%s: tensor '%s': out of memory", L->what,
                              src->name);
    }
    L->bufs[L->n_bufs++] = v;
    const bool vec = src->rows == 1;
    const float a = vec ? 0.1f : sqrtf(3.0f / (float)src->cols);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = ifd__mix(h + 0x9e3779b97f4a7c15ull * (i + 1));
        float u = (float)(r >> 40) / 8388608.0f - 1.0f; /* [-1, 1) */
        v[i] = ifd_f32_to_bf16((vec ? 1.0f : 0.0f) + a * u);
    }
    src->data = v;
    src->type = IFD_GGML_BF16;
    return 0;
}

/* Finds tensor `name` (a GGUF name) of [rows, cols] (rows = 1: a vector)
 * whose type the backend can load, as a source for it; *add_one (may be
 * NULL) says the file stores w for a 1 + w norm (HF Gemma). Missing and
 * optional → src->data NULL and 0. Messages name the file and the tensor
 * as the file names it. */
static int ifd__find(ifd__loader_t *L, ifd_weight_src_t *src, const char *name, int64_t rows,
                     int64_t cols, bool optional, bool *add_one)
{
    ifd_model_t *m = L->m;
    ifd_tensor_view_t tv, *t = &tv;
    *src = (ifd_weight_src_t){.name = name, .rows = rows, .cols = cols};
    if (add_one)
        *add_one = false;
    if (L->random)
        return optional ? 0 : ifd__random_src(L, src);
    if (ifd_model_source_find(m->src, name, &tv) != 0) {
        if (optional)
            return 0;
        char fname[256];
        ifd_model_source_name(m->src, name, fname, sizeof fname);
        return ifd__load_fail(L, IFD_EFORMAT, "%s: tensor '%s' is missing", L->what, fname);
    }
    bool is_vec = rows == 1;
    bool shape_ok = is_vec ? (t->n_dims == 1 && (int64_t)t->ne[0] == cols)
                           : (t->n_dims == 2 && (int64_t)t->ne[0] == cols &&
                              (int64_t)t->ne[1] == rows);
    if (!shape_ok)
        return ifd__load_fail(L, IFD_EFORMAT,
                              "%s: tensor '%s' has shape [%llu, %llu] (%u dims, innermost "
                              "first), expected [%lld, %lld]",
                              t->file, t->name, (unsigned long long)t->ne[0],
                              (unsigned long long)t->ne[1], t->n_dims, (long long)cols,
                              (long long)rows);
    if (t->ggml_type == IFD_TENSOR_TYPE_UNSUPPORTED ||
        !m->be->ops->can_load(m->be, (ifd_ggml_type_t)t->ggml_type))
        return ifd__load_fail(L, IFD_ENOTSUP,
                              "%s: tensor '%s' has type %s, which inferd cannot load", t->file,
                              t->name, t->dtype ? t->dtype : ifd_ggml_type_name(t->ggml_type));
    src->data = t->data;
    src->type = (ifd_ggml_type_t)t->ggml_type;
    if (add_one)
        *add_one = t->add_one;
    return 0;
}

/* A vector or table; optional and missing → w stays zeroed. */
static int ifd__load_weight(ifd__loader_t *L, ifd_weight_t *w, const char *name, int64_t rows,
                            int64_t cols, ifd_weight_use_t use, bool optional)
{
    ifd_backend_t *be = L->m->be;
    ifd_weight_src_t src;
    bool add_one;
    memset(w, 0, sizeof *w);
    int rc = ifd__find(L, &src, name, rows, cols, optional, &add_one);
    if (rc || !src.data) {
        ifd__loader_release(L);
        return rc;
    }
    if (add_one && use == IFD_WEIGHT_NORM)
        use = IFD_WEIGHT_NORM_ADD1;
    rc = be->ops->load_weight(be, w, &src, use);
    ifd__loader_release(L);
    if (rc)
        return ifd__load_fail(L, rc, "%s: tensor '%s': %s", L->what, name, ifd_strerror(rc));
    if (!L->random) /* copied: the file's pages need not stay resident */
        ifd_model_source_release(L->m->src, name);
    L->m->weight_bytes += w->bytes;
    return 0;
}

/* ifd_batch_t.kv_last's rule: kv_last[i] >= pos[i], and a token that sees
 * ahead is followed by the next position of its sequence seeing as far —
 * so by induction the batch holds every position up to kv_last[i] (their
 * K/V are written before attention). */
static int ifd__check_images(const ifd_batch_t *b)
{
    for (int i = 0; b->kv_last && i < b->n_tok; i++) {
        if (b->kv_last[i] < b->pos[i])
            return IFD_EINVAL;
        if (b->kv_last[i] > b->pos[i] &&
            (i + 1 == b->n_tok || b->seq[i + 1] != b->seq[i] || b->pos[i + 1] != b->pos[i] + 1 ||
             b->kv_last[i + 1] != b->kv_last[i]))
            return IFD_EINVAL;
    }
    return 0;
}

/* A projection from n parts: names[i] ("%s.weight", with a "%s.bias"
 * beside it, optional unless need_bias) of rows[i] × cols. bias0 (NULL:
 * none) is a bias for part 0 made by the caller, where the file has none. */
static int ifd__load_proj(ifd__loader_t *L, ifd_proj_t *p, const char *const *names,
                          const int64_t *rows, int n, int64_t cols, bool need_bias,
                          const ifd_weight_src_t *bias0)
{
    ifd_backend_t *be = L->m->be;
    char wname[IFD_PROJ_MAX_PARTS][96], bname[IFD_PROJ_MAX_PARTS][96];
    ifd_weight_src_t w[IFD_PROJ_MAX_PARTS] = {0}, b[IFD_PROJ_MAX_PARTS] = {0};
    const ifd_weight_src_t *bp[IFD_PROJ_MAX_PARTS] = {0}; /* zeroed for gcc -O1's warning */
    memset(p, 0, sizeof *p);
    int rc;
    for (int i = 0; i < n; i++) {
        snprintf(wname[i], sizeof wname[i], "%s.weight", names[i]);
        snprintf(bname[i], sizeof bname[i], "%s.bias", names[i]);
        if ((rc = ifd__find(L, &w[i], wname[i], rows[i], cols, false, NULL)) ||
            (rc = ifd__find(L, &b[i], bname[i], 1, rows[i], !need_bias || L->random, NULL))) {
            ifd__loader_release(L);
            return rc;
        }
        bp[i] = &b[i];
    }
    if (bias0 && b[0].data) {
        ifd__loader_release(L);
        return ifd__load_fail(L, IFD_ENOTSUP,
                              "%s: tensor '%s' and a vocabulary larger than the tokenizer's: "
                              "not supported", L->what, bname[0]);
    }
    if (bias0)
        bp[0] = bias0;
    rc = be->ops->load_proj(be, p, w, bp, n);
    ifd__loader_release(L);
    if (rc)
        return ifd__load_fail(L, rc, "%s: tensor '%s': %s", L->what, wname[0], ifd_strerror(rc));
    for (int i = 0; i < n && !L->random; i++) /* copied: the file's pages need not stay */
        ifd_model_source_release(L->m->src, wname[i]);
    for (int i = 0; i < p->n_parts; i++)
        L->m->weight_bytes += p->part[i].bytes;
    L->m->weight_bytes += p->bias.bytes;
    return 0;
}

static int ifd__load_all(ifd__loader_t *L)
{
    ifd_model_t *m = L->m;
    const ifd_model_config_t *c = &m->cfg;
    const int64_t E = c->n_embd, F = c->n_ff, hd = c->head_dim;
    const int64_t qd = (int64_t)c->n_head * hd, kvd = (int64_t)c->n_head_kv * hd;
    const bool gemma = c->arch == IFD_ARCH_GEMMA3;
    /* GGUF stores Gemma's RMSNorm weights as 1 + w already (the converter
     * adds the 1), so they are plain NORM weights here. */
    const ifd_weight_use_t norm = IFD_WEIGHT_NORM; /* HF Gemma: NORM_ADD1, by the source */
    ifd_tensor_view_t tv;
    int rc;
    if ((rc = ifd__load_weight(L, &m->tok_embd, "token_embd.weight", c->n_vocab, E,
                               IFD_WEIGHT_EMBED, false)))
        return rc;
    if ((rc = ifd__load_weight(L, &m->output_norm, "output_norm.weight", 1, E, norm, false)))
        return rc;
    /* A tied model (no output.weight) projects with token_embd: a copy of
     * its own, so the backend may lay it out for matmul while the embedding
     * keeps rows for the gather. */
    m->output_tied = L->random || ifd_model_source_find(m->src, "output.weight", &tv) != 0;
    const char *out_name = m->output_tied ? "token_embd" : "output";
    /* Rows past the tokenizer's ids (n_vocab_valid) get a bias of -inf: their
     * logits are -inf on every backend, so neither the host nor a device
     * sampler can pick an id that has no text, whatever a request's
     * logit_bias (-inf + bias = -inf), and logprobs leave them out. */
    float *mask = NULL;
    ifd_weight_src_t mask_src = {0};
    if (c->n_vocab_valid > 0 && c->n_vocab_valid < c->n_vocab) {
        if (!(mask = malloc((size_t)c->n_vocab * sizeof *mask)))
            return ifd__load_fail(L, IFD_ENOMEM, "%s: out of memory", L->what);
        for (uint32_t i = 0; i < c->n_vocab; i++)
            mask[i] = i < c->n_vocab_valid ? 0.0f : -INFINITY;
        mask_src = (ifd_weight_src_t){.name = "(ids past the tokenizer's)", .data = mask,
                                      .type = IFD_GGML_F32, .rows = 1, .cols = c->n_vocab};
    }
    rc = ifd__load_proj(L, &m->output, &out_name, (const int64_t[]){c->n_vocab}, 1, E, false,
                        mask ? &mask_src : NULL);
    free(mask);
    if (rc)
        return rc;
    if (c->has_rope_freqs &&
        (rc = ifd__load_weight(L, &m->rope_freqs, "rope_freqs.weight", 1, c->n_rot / 2,
                               IFD_WEIGHT_VECTOR, false)))
        return rc;
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    if (!m->layers)
        return ifd__load_fail(L, IFD_ENOMEM, "%s: out of memory", L->what);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        ifd__layer_t *ly = &m->layers[l];
        char n[4][64];
        struct {
            ifd_weight_t *w;
            const char *suffix;
            bool want;
        } vecs[] = {
            {&ly->attn_norm, "attn_norm", true},
            {&ly->q_norm, "attn_q_norm", c->has_qk_norm},
            {&ly->k_norm, "attn_k_norm", c->has_qk_norm},
            {&ly->post_attn_norm, "post_attention_norm", gemma},
            {&ly->ffn_norm, "ffn_norm", true},
            {&ly->post_ffw_norm, "post_ffw_norm", gemma},
        };
        for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) {
            if (!vecs[i].want)
                continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, vecs[i].suffix);
            int64_t len = (vecs[i].w == &ly->q_norm || vecs[i].w == &ly->k_norm) ? hd : E;
            if ((rc = ifd__load_weight(L, vecs[i].w, name, 1, len, norm, false)))
                return rc;
        }
        const char *suffix[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
        const char *names[4];
        for (int i = 0; i < 4; i++) {
            snprintf(n[i], sizeof n[i], "blk.%u.%s", l, suffix[i]);
            names[i] = n[i];
        }
        if ((rc = ifd__load_proj(L, &ly->qkv, names, (const int64_t[]){qd, kvd, kvd}, 3, E,
                                 c->has_attn_bias, NULL)) ||
            (rc = ifd__load_proj(L, &ly->wo, &names[3], (const int64_t[]){E}, 1, qd, false,
                                 NULL)))
            return rc;
        const char *fsuffix[] = {"ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 3; i++) {
            snprintf(n[i], sizeof n[i], "blk.%u.%s", l, fsuffix[i]);
            names[i] = n[i];
        }
        if ((rc = ifd__load_proj(L, &ly->gate_up, names, (const int64_t[]){F, F}, 2, E, false,
                                 NULL)) ||
            (rc = ifd__load_proj(L, &ly->down, &names[2], (const int64_t[]){E}, 1, F, false,
                                 NULL)))
            return rc;
    }
    return 0;
}

static void ifd__free_idx(ifd_backend_t *be, void *pp)
{
    void **p = pp;
    if (*p)
        be->ops->free(be, *p);
    *p = NULL;
}

static void ifd__scratch_free(ifd_model_t *m)
{
    ifd_backend_t *be = m->be;
    ifd__scratch_t *s = &m->s;
    ifd_act_t *acts[] = {&s->x, &s->a, &s->qkv, &s->q, &s->o, &s->t, &s->gu, &s->g};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (acts[i]->data)
            be->ops->act_free(be, acts[i]);
    ifd__free_idx(be, &s->tokens);
    ifd__free_idx(be, &s->pos);
    ifd__free_idx(be, &s->seq);
    ifd__free_idx(be, &s->last);
    ifd__free_idx(be, &s->slot);
    ifd__free_idx(be, &s->lslot);
    memset(s, 0, sizeof *s);
}

static int ifd__scratch_reserve(ifd_model_t *m, int n_tok)
{
    if (n_tok <= m->s.cap)
        return 0;
    ifd__scratch_free(m);
    m->buf_epoch++;
    n_tok = ifd__cap_for(n_tok);
    ifd_backend_t *be = m->be;
    const ifd_model_config_t *c = &m->cfg;
    const int64_t n = n_tok, E = c->n_embd, F = c->n_ff, qd = (int64_t)c->n_head * c->head_dim,
                  kvd = (int64_t)c->n_head_kv * c->head_dim;
    const ifd_dtype_t f32 = IFD_DTYPE_F32, mmin = be->ops->mm_in_dtype;
    ifd__scratch_t *s = &m->s;
    struct {
        ifd_act_t *a;
        ifd_dtype_t dt;
        int64_t cols;
    } acts[] = {
        {&s->x, f32, E},   {&s->a, mmin, E},  {&s->qkv, f32, qd + 2 * kvd},
        {&s->q, f32, qd},  {&s->o, mmin, qd}, {&s->t, f32, E},
        {&s->gu, f32, 2 * F}, {&s->g, mmin, F},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof acts / sizeof acts[0] && rc == 0; i++)
        rc = be->ops->act_alloc(be, acts[i].a, acts[i].dt, n, acts[i].cols);
    if (rc == 0 && (rc = be->ops->alloc(be, (size_t)n * 4, (void **)&s->tokens)) == 0 &&
        (rc = be->ops->alloc(be, (size_t)n * 4, (void **)&s->pos)) == 0 &&
        (rc = be->ops->alloc(be, (size_t)n * 4, (void **)&s->seq)) == 0 &&
        (rc = be->ops->alloc(be, (size_t)n * 4, (void **)&s->last)) == 0 &&
        (rc = be->ops->alloc(be, (size_t)n * 8, (void **)&s->slot)) == 0 && m->local_tables)
        rc = be->ops->alloc(be, (size_t)n * 8, (void **)&s->lslot);
    if (rc) {
        ifd__scratch_free(m);
        return rc;
    }
    s->cap = n_tok;
    return 0;
}

static void ifd__logits_free(ifd_model_t *m)
{
    ifd_backend_t *be = m->be;
    ifd__logit_bufs_t *g = &m->lg;
    ifd_act_t *acts[] = {&g->xs, &g->ts, &g->xn, &g->logits};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (acts[i]->data)
            be->ops->act_free(be, acts[i]);
    ifd__free_idx(be, &g->rows);
    memset(g, 0, sizeof *g);
}

static int ifd__logits_reserve(ifd_model_t *m, int n_logits)
{
    if (n_logits <= m->lg.cap)
        return 0;
    ifd__logits_free(m);
    m->buf_epoch++;
    n_logits = ifd__cap_for(n_logits);
    ifd_backend_t *be = m->be;
    ifd__logit_bufs_t *g = &m->lg;
    const int64_t E = m->cfg.n_embd;
    int rc;
    if ((rc = be->ops->act_alloc(be, &g->xs, IFD_DTYPE_F32, n_logits, E)) ||
        (rc = be->ops->act_alloc(be, &g->ts, IFD_DTYPE_F32, n_logits, E)) ||
        (rc = be->ops->act_alloc(be, &g->xn, be->ops->mm_in_dtype, n_logits, E)) ||
        (rc = be->ops->act_alloc(be, &g->logits, IFD_DTYPE_F32, n_logits, m->cfg.n_vocab)) ||
        (rc = be->ops->alloc(be, (size_t)n_logits * 4, (void **)&g->rows))) {
        ifd__logits_free(m);
        return rc;
    }
    g->cap = n_logits;
    return 0;
}

static void ifd__batch_bufs_free(ifd_model_t *m)
{
    ifd_backend_t *be = m->be;
    ifd__batch_bufs_t *bb = &m->bb;
    ifd__free_idx(be, &bb->block_tables);
    ifd__free_idx(be, &bb->lblock_tables);
    ifd__free_idx(be, &bb->cu_q);
    ifd__free_idx(be, &bb->ctx_len);
    ifd__free_idx(be, &bb->workspace);
    free(bb->h_cu_q);
    free(bb->h_ctx_len);
    memset(bb, 0, sizeof *bb);
}

int ifd_model_load(ifd_model_t **out, const char *path, ifd_backend_t *be, char *errbuf,
                   size_t errlen)
{
    ifd_model_source_t *src = NULL;
    int rc = ifd_model_source_open(&src, path, errbuf, errlen);
    if (rc)
        return rc;
    return ifd_model_load_source(out, src, 0, be, errbuf, errlen);
}

int ifd_model_load_source(ifd_model_t **out, ifd_model_source_t *src, int32_t n_tokens,
                          ifd_backend_t *be, char *errbuf, size_t errlen)
{
    ifd_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        ifd_model_source_close(src);
        return IFD_ENOMEM;
    }
    m->be = be;
    m->src = src;
    m->cfg = *ifd_model_source_config(m->src);
    int rc;
    if (n_tokens > 0 && (uint32_t)n_tokens < m->cfg.n_vocab) {
        m->cfg.n_vocab_valid = (uint32_t)n_tokens;
        IFD_INFO("%s: %u logits rows for a tokenizer of %d tokens: ids %d..%u are never "
                 "sampled", ifd_model_source_path(m->src), m->cfg.n_vocab, n_tokens, n_tokens,
                 m->cfg.n_vocab - 1);
    }
    ifd__loader_t L = {.m = m, .err = errbuf, .errlen = errlen,
                       .what = ifd_model_source_path(m->src)};
    rc = ifd__load_all(&L);
    if (rc) {
        ifd_model_destroy(m);
        return rc;
    }
    /* every backend copies what it keeps: the file's pages need not stay resident */
    ifd_model_source_release_all(m->src);
    *out = m;
    return 0;
}

int ifd_model_load_random(ifd_model_t **out, const ifd_model_config_t *cfg, uint64_t seed,
                          ifd_backend_t *be, char *errbuf, size_t errlen)
{
    if (cfg->n_layer == 0 || cfg->n_layer > IFD_MAX_LAYERS || cfg->n_embd == 0 ||
        cfg->n_head == 0 || cfg->n_head_kv == 0 || cfg->n_head % cfg->n_head_kv ||
        cfg->head_dim == 0 || cfg->head_dim % 2 || cfg->n_rot > cfg->head_dim ||
        cfg->n_rot % 2 || cfg->n_ff == 0 || cfg->n_vocab == 0 || cfg->has_rope_freqs) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "random weights: inconsistent shape");
        return IFD_EINVAL;
    }
    ifd_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return IFD_ENOMEM;
    m->be = be;
    m->cfg = *cfg;
    ifd__loader_t L = {.m = m, .err = errbuf, .errlen = errlen, .what = "random weights",
                       .random = true, .seed = seed};
    int rc = ifd__load_all(&L);
    if (rc) {
        ifd_model_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

void ifd_model_destroy(ifd_model_t *m)
{
    if (!m)
        return;
    ifd_backend_t *be = m->be;
    if (m->layers) {
        for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
            ifd__layer_t *ly = &m->layers[l];
            ifd_weight_t *ws[] = {&ly->attn_norm,      &ly->ffn_norm,      &ly->q_norm,
                                  &ly->k_norm,         &ly->post_attn_norm, &ly->post_ffw_norm};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                be->ops->weight_free(be, ws[i]);
            ifd_proj_t *ps[] = {&ly->qkv, &ly->wo, &ly->gate_up, &ly->down};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                be->ops->proj_free(be, ps[i]);
        }
        free(m->layers);
    }
    be->ops->proj_free(be, &m->output);
    be->ops->weight_free(be, &m->tok_embd);
    be->ops->weight_free(be, &m->output_norm);
    be->ops->weight_free(be, &m->rope_freqs);
    ifd__scratch_free(m);
    ifd__logits_free(m);
    ifd__batch_bufs_free(m);
    free(m->gr.bt);
    free(m->gr.lbt);
    ifd_model_source_close(m->src);
    free(m);
}

const ifd_model_config_t *ifd_model_config(const ifd_model_t *m)
{
    return &m->cfg;
}

const ifd_gguf_t *ifd_model_gguf(const ifd_model_t *m)
{
    return m->src ? ifd_model_source_gguf(m->src) : NULL;
}

const ifd_model_source_t *ifd_model_source(const ifd_model_t *m)
{
    return m->src;
}

ifd_backend_t *ifd_model_backend(const ifd_model_t *m)
{
    return m->be;
}

uint64_t ifd_model_weight_bytes(const ifd_model_t *m)
{
    return m->weight_bytes;
}

static int ifd__check_batch(const ifd_model_t *m, const ifd_batch_t *b, int block_size)
{
    if (b->n_tok <= 0 || b->n_seqs <= 0 || b->max_blocks <= 0 || b->n_logits < 0 ||
        !b->local_block_tables != !b->local_slot)
        return IFD_EINVAL;
    for (int i = 0; i < b->n_tok; i++) {
        if (b->tokens[i] < 0 || (uint32_t)b->tokens[i] >= m->cfg.n_vocab)
            return IFD_EINVAL;
        if (b->seq[i] < 0 || b->seq[i] >= b->n_seqs || b->pos[i] < 0)
            return IFD_EINVAL;
        if (b->pos[i] / block_size >= b->max_blocks)
            return IFD_EINVAL;
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tok)
            return IFD_EINVAL;
    return ifd__check_images(b);
}

/* Whether token i of b sees past its own position (an image token). */
static bool ifd__sees_ahead(const ifd_batch_t *b, int i)
{
    return b->kv_last && b->kv_last[i] != b->pos[i];
}

/* Whether b needs a varlen batch for attention: some token sees ahead. */
static bool ifd__has_images(const ifd_batch_t *b)
{
    for (int i = 0; b->kv_last && i < b->n_tok; i++)
        if (ifd__sees_ahead(b, i))
            return true;
    return false;
}

/* Fills the attention description of batch b (host side: cu_q / ctx_len
 * when the batch is varlen, see backend.h) and grows the per-batch buffers.
 * decode_ctx > 0: b is a padded decode step (seq -1 on padding tokens)
 * whose attention is planned for decode_ctx positions, without the varlen
 * scan. */
static int ifd__attn_batch(ifd_model_t *m, const ifd_batch_t *b, const ifd_kv_layer_t *kv,
                           int decode_ctx, ifd_attn_batch_t *ab, ifd_attn_batch_t *abl)
{
    ifd_backend_t *be = m->be;
    ifd__batch_bufs_t *bb = &m->bb;
    int rc;
    size_t bt_bytes = (size_t)b->n_seqs * (size_t)b->max_blocks * sizeof(int32_t);
    /* a padded decode step: room for the largest bucket (model.c's top) */
    const int n_seqs = decode_ctx && b->n_seqs < ifd__max_bucket(m) ? ifd__max_bucket(m)
                                                                     : b->n_seqs;
    const size_t bt_need = (size_t)n_seqs * (size_t)b->max_blocks * sizeof(int32_t);
    if (bt_need > bb->block_tables_cap) {
        ifd__free_idx(be, &bb->block_tables);
        ifd__free_idx(be, &bb->lblock_tables);
        bb->block_tables_cap = 0;
        m->buf_epoch++;
        size_t want = bt_need + bt_need / 2;
        if ((rc = be->ops->alloc(be, want, (void **)&bb->block_tables)) ||
            (m->local_tables && (rc = be->ops->alloc(be, want, (void **)&bb->lblock_tables))))
            return rc;
        bb->block_tables_cap = want;
    }
    if (n_seqs > bb->seqs_cap) {
        ifd__free_idx(be, &bb->cu_q);
        ifd__free_idx(be, &bb->ctx_len);
        free(bb->h_cu_q);
        free(bb->h_ctx_len);
        bb->h_cu_q = bb->h_ctx_len = NULL;
        bb->seqs_cap = 0;
        m->buf_epoch++;
        size_t n = (size_t)ifd__cap_for(n_seqs);
        bb->h_cu_q = malloc((n + 1) * 4);
        bb->h_ctx_len = malloc(n * 4);
        if (!bb->h_cu_q || !bb->h_ctx_len)
            return IFD_ENOMEM;
        if ((rc = be->ops->alloc(be, (n + 1) * 4, (void **)&bb->cu_q)) ||
            (rc = be->ops->alloc(be, n * 4, (void **)&bb->ctx_len)))
            return rc;
        bb->seqs_cap = (int)n;
    }
    /* varlen: sequence ids non-decreasing, one run per sequence, consecutive
     * positions in each run */
    bool varlen = decode_ctx == 0;
    int max_q = 1, max_ctx = decode_ctx;
    if (decode_ctx == 0) {
        max_q = 0;
        for (int s = 0; s <= b->n_seqs; s++)
            bb->h_cu_q[s] = 0;
        for (int s = 0; s < b->n_seqs; s++)
            bb->h_ctx_len[s] = 0;
        for (int i = 0; i < b->n_tok; i++) {
            int s = b->seq[i];
            const int32_t end = b->kv_last ? b->kv_last[i] : b->pos[i];
            if (end + 1 > max_ctx)
                max_ctx = end + 1;
            if (i > 0 && (s < b->seq[i - 1] ||
                          (s == b->seq[i - 1] && b->pos[i] != b->pos[i - 1] + 1)))
                varlen = false;
            bb->h_cu_q[s + 1]++;
            bb->h_ctx_len[s] = b->pos[i] + 1;
        }
        for (int s = 0; s < b->n_seqs; s++) {
            if (bb->h_cu_q[s + 1] > max_q)
                max_q = bb->h_cu_q[s + 1];
            bb->h_cu_q[s + 1] += bb->h_cu_q[s];
        }
    }
    /* an image: the kernels take its tokens in runs of their sequence */
    const bool images = ifd__has_images(b);
    if (images && (!varlen || max_q < 2))
        return IFD_EINVAL;
    *ab = (ifd_attn_batch_t){
        .n_tok = b->n_tok,
        .n_seqs = b->n_seqs,
        .seq = m->s.seq,
        .pos = m->s.pos,
        .block_tables = bb->block_tables,
        .max_blocks = b->max_blocks,
        .cu_q = varlen ? bb->cu_q : NULL,
        .ctx_len = varlen ? bb->ctx_len : NULL,
        .max_q_len = varlen       ? max_q
                     : decode_ctx ? 1
                                  : b->n_tok,
        .max_ctx = max_ctx,
        .last = images ? m->s.last : NULL,
    };
    size_t ws = 0;
    if ((rc = be->ops->attn_workspace(be, &ws, ab, kv, (int)m->cfg.n_head)))
        return rc;
    size_t want_ws = ws;
    if (decode_ctx && ws > bb->workspace_cap) /* enough for every bucket at this context */
        for (int i = 0; i < IFD__N_BUCKETS && ifd__buckets[i] <= n_seqs; i++) {
            ifd_attn_batch_t t = *ab;
            t.n_tok = t.n_seqs = ifd__buckets[i];
            size_t w = 0;
            if ((rc = be->ops->attn_workspace(be, &w, &t, kv, (int)m->cfg.n_head)))
                return rc;
            want_ws = w > want_ws ? w : want_ws;
        }
    if (want_ws > bb->workspace_cap) {
        ifd__free_idx(be, &bb->workspace);
        bb->workspace_cap = 0;
        m->buf_epoch++;
        size_t want = want_ws + want_ws / 2;
        if ((rc = be->ops->alloc(be, want, &bb->workspace)))
            return rc;
        bb->workspace_cap = want;
    }
    ab->workspace = ws ? bb->workspace : NULL;
    ab->workspace_bytes = bb->workspace_cap;
    if ((rc = be->ops->upload(be, bb->block_tables, b->block_tables, bt_bytes)))
        return rc;
    *abl = *ab; /* the local layers': the same batch through their own tables */
    if (b->local_block_tables) {
        abl->block_tables = bb->lblock_tables;
        if ((rc = be->ops->upload(be, bb->lblock_tables, b->local_block_tables, bt_bytes)))
            return rc;
    }
    if (varlen && ((rc = be->ops->upload(be, bb->cu_q, bb->h_cu_q, (size_t)(b->n_seqs + 1) * 4)) ||
                   (rc = be->ops->upload(be, bb->ctx_len, bb->h_ctx_len, (size_t)b->n_seqs * 4))))
        return rc;
    if (images && (rc = be->ops->upload(be, m->s.last, b->kv_last, (size_t)b->n_tok * 4)))
        return rc;
    return 0;
}

/* The input embeddings b->embd gives in place of the token rows of s->x
 * (after op->embed), uploaded in runs of rows adjacent on both sides. */
static int ifd__inject(ifd_model_t *m, const ifd_batch_t *b)
{
    const size_t row = (size_t)m->cfg.n_embd * sizeof(float);
    for (int i = 0; b->embd && i < b->n_tok;) {
        if (!b->embd[i]) {
            i++;
            continue;
        }
        int j = i + 1;
        while (j < b->n_tok && b->embd[j] == b->embd[j - 1] + m->cfg.n_embd)
            j++;
        int rc = m->be->ops->upload(m->be, (char *)m->s.x.data + (size_t)i * row, b->embd[i],
                                    (size_t)(j - i) * row);
        if (rc)
            return rc;
        i = j;
    }
    return 0;
}

/* The layers and the logits projection for a batch whose index arrays are
 * uploaded: every op enqueued, nothing synchronised (so that a graph can
 * record it). n tokens, n_logits rows into m->lg.logits. */
static int ifd__layers(ifd_model_t *m, const ifd_kv_layer_t *kv, const ifd_attn_batch_t *ab,
                       const ifd_attn_batch_t *abl, const int64_t *lslot, int n, int n_logits,
                       const ifd_batch_t *inj)
{
    const ifd_model_config_t *c = &m->cfg;
    ifd_backend_t *be = m->be;
    const ifd_backend_ops_t *op = be->ops;
    ifd__scratch_t *s = &m->s;
    const int nh = (int)c->n_head;
    const bool gemma = c->arch == IFD_ARCH_GEMMA3;
    const float eps = c->rms_eps;
    const ifd_glu_t glu = gemma ? IFD_GLU_GEGLU_TANH : IFD_GLU_SWIGLU;
    int rc;

#define IFD__TRY(call)                                                                      \
    do {                                                                                    \
        if ((rc = (call)) != 0)                                                             \
            return rc;                                                                      \
    } while (0)

    /* The residual add of each block is fused into the next norm: s->t is
     * the pending delta from the previous block (none before layer 0). */
    IFD__TRY(op->embed(be, &s->x, &m->tok_embd, s->tokens, n, c->embd_scale));
    if (inj)
        IFD__TRY(ifd__inject(m, inj));
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const ifd__layer_t *ly = &m->layers[l];
        const bool local = c->sliding_window > 0 && c->layer_is_local[l];
        const ifd_rope_t rope = {
            .n_rot = (int)c->n_rot,
            .base = local ? c->rope_base_local : c->rope_base,
            .freq_scale = local ? c->rope_freq_scale_local : c->rope_freq_scale,
            .freq_factors = m->rope_freqs.data,
            /* GGUF llama stores Q/K permuted for interleaved pairs; gemma3,
             * qwen and HF checkpoints pair (i, i + n_rot/2) */
            .mode = c->rope_neox ? IFD_ROPE_NEOX : IFD_ROPE_NORM,
        };
        IFD__TRY(op->rmsnorm(be, &s->a, &s->x, l ? &s->t : NULL, &ly->attn_norm, n, eps));
        IFD__TRY(op->proj(be, &s->qkv, &s->a, &ly->qkv, n));
        IFD__TRY(op->rope_kv(be, &s->q, &s->qkv, ly->q_norm.data ? &ly->q_norm : NULL,
                             ly->k_norm.data ? &ly->k_norm : NULL, eps, &kv[l], s->pos,
                             local ? lslot : s->slot, n, nh, &rope));
        IFD__TRY(op->attention(be, &s->o, &s->q, &kv[l], local ? abl : ab, nh, c->attn_scale,
                               local ? (int)c->sliding_window : 0));
        IFD__TRY(op->proj(be, &s->t, &s->o, &ly->wo, n));
        if (gemma)
            IFD__TRY(op->rmsnorm(be, &s->t, &s->t, NULL, &ly->post_attn_norm, n, eps));
        IFD__TRY(op->rmsnorm(be, &s->a, &s->x, &s->t, &ly->ffn_norm, n, eps));
        IFD__TRY(op->proj(be, &s->gu, &s->a, &ly->gate_up, n));
        IFD__TRY(op->glu(be, &s->g, &s->gu, n, (int)c->n_ff, glu));
        IFD__TRY(op->proj(be, &s->t, &s->g, &ly->down, n));
        if (gemma)
            IFD__TRY(op->rmsnorm(be, &s->t, &s->t, NULL, &ly->post_ffw_norm, n, eps));
    }
    if (n_logits == 0)
        return 0;
    /* the last residual add and the final norm, on the sampled rows only */
    ifd__logit_bufs_t *g = &m->lg;
    IFD__TRY(op->gather_rows(be, &g->xs, &s->x, g->rows, n_logits));
    IFD__TRY(op->gather_rows(be, &g->ts, &s->t, g->rows, n_logits));
    IFD__TRY(op->rmsnorm(be, &g->xn, &g->xs, &g->ts, &m->output_norm, n_logits, eps));
    IFD__TRY(op->proj(be, &g->logits, &g->xn, &m->output, n_logits));
    return 0;
#undef IFD__TRY
}

/* The graph key of a padded decode step: (batch bucket, context bucket),
 * or -1 when b is not such a step or the backend has no graphs. Fills the
 * padded batch *pb (host arrays in m->gr) and the context bucket. */
static int ifd__decode_bucket(ifd_model_t *m, const ifd_batch_t *b, int block_size,
                              ifd_batch_t *pb, int *ctx_out)
{
    ifd__graphs_t *g = &m->gr;
    if (!m->be->ops->graph_begin || b->n_tok > IFD_MODEL_MAX_GRAPH_BATCH || b->n_seqs != b->n_tok ||
        b->n_logits != b->n_tok || b->kv_last || b->embd)
        return -1;
    int max_ctx = 0;
    for (int i = 0; i < b->n_tok; i++) {
        if (b->seq[i] != i || b->logit_rows[i] != i)
            return -1;
        if (b->pos[i] + 1 > max_ctx)
            max_ctx = b->pos[i] + 1;
    }
    int bi = 0, ci = 0, ctx = IFD__CTX_MIN;
    while (ifd__buckets[bi] < b->n_tok)
        bi++;
    while (ctx < max_ctx && ci + 1 < IFD__N_CTX_BKTS)
        ctx *= 2, ci++;
    if (ctx < max_ctx)
        return -1;
    const int B = ifd__buckets[bi], MB = (ctx + block_size - 1) / block_size;
    size_t bt = (size_t)B * (size_t)MB;
    if (bt > g->bt_cap) {
        int32_t *t = realloc(g->bt, bt * sizeof *t);
        if (t)
            g->bt = t;
        int32_t *lt = t ? realloc(g->lbt, bt * sizeof *lt) : NULL;
        if (!lt)
            return -1; /* eager then */
        g->lbt = lt;
        g->bt_cap = bt;
    }
    const bool two = b->local_block_tables != NULL;
    memset(g->bt, 0, bt * sizeof *g->bt);
    if (two)
        memset(g->lbt, 0, bt * sizeof *g->lbt);
    const int cols = b->max_blocks < MB ? b->max_blocks : MB;
    for (int i = 0; i < B; i++) {
        const bool real = i < b->n_tok;
        g->tokens[i] = real ? b->tokens[i] : 0;
        g->pos[i] = real ? b->pos[i] : 0;
        g->seq[i] = real ? i : -1;
        g->slot[i] = real ? b->slot[i] : -1;
        g->lslot[i] = real && two ? b->local_slot[i] : -1;
        g->rows[i] = i;
        if (real)
            memcpy(g->bt + (size_t)i * MB, b->block_tables + (size_t)i * b->max_blocks,
                   (size_t)cols * sizeof *g->bt);
        if (real && two)
            memcpy(g->lbt + (size_t)i * MB, b->local_block_tables + (size_t)i * b->max_blocks,
                   (size_t)cols * sizeof *g->lbt);
    }
    *pb = (ifd_batch_t){.n_tok = B,
                        .tokens = g->tokens,
                        .pos = g->pos,
                        .seq = g->seq,
                        .slot = g->slot,
                        .n_seqs = B,
                        .block_tables = g->bt,
                        .max_blocks = MB,
                        .n_logits = B,
                        .logit_rows = g->rows,
                        .local_block_tables = two ? g->lbt : NULL,
                        .local_slot = two ? g->lslot : NULL};
    *ctx_out = ctx;
    return g->set * IFD__SET_KEYS + bi * IFD__N_CTX_BKTS + ci;
}

static uint64_t ifd__kv_hash(const ifd_model_t *m, const ifd_kv_layer_t *kv)
{
    uint64_t h = 0x243f6a8885a308d3ull;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        const uint64_t v[4] = {(uint64_t)(uintptr_t)kv[l].k, (uint64_t)(uintptr_t)kv[l].v,
                               (uint64_t)kv[l].dtype << 32 | (uint64_t)kv[l].block_size,
                               (uint64_t)kv[l].n_kv_heads << 32 | (uint64_t)kv[l].head_dim};
        for (int i = 0; i < 4; i++)
            h = (h ^ v[i]) * 0x100000001b3ull + (h >> 29);
    }
    return h;
}

/* The forward pass up to the logits of b's n_logits rows, left in
 * m->lg.logits (rows in b's order), enqueued but not synchronised. */
static int ifd__forward_dev(ifd_model_t *m, const ifd_batch_t *b0, const ifd_kv_layer_t *kv)
{
    const ifd_model_config_t *c = &m->cfg;
    ifd_backend_t *be = m->be;
    const ifd_backend_ops_t *op = be->ops;
    if (kv[0].block_size <= 0)
        return IFD_EINVAL;
    int rc = ifd__check_batch(m, b0, kv[0].block_size);
    if (rc)
        return rc;
    if (kv[0].n_kv_heads != (int)c->n_head_kv || kv[0].head_dim != (int)c->head_dim)
        return IFD_EINVAL;
    if (b0->local_block_tables && !m->local_tables) {
        /* the first batch with local tables: the buffers again, with room
         * for them (a model never given any does not allocate them) */
        m->local_tables = true;
        ifd__scratch_free(m);
        ifd__batch_bufs_free(m);
    }
    ifd_batch_t pb;
    int ctx = 0;
    const int key = ifd__decode_bucket(m, b0, kv[0].block_size, &pb, &ctx);
    const ifd_batch_t *b = key >= 0 ? &pb : b0;
    const int reserve = key >= 0 ? ifd__max_bucket(m) : 0; /* see the top */
    if ((rc = ifd__scratch_reserve(m, b->n_tok > reserve ? b->n_tok : reserve)) ||
        (rc = ifd__logits_reserve(m, b->n_logits > reserve ? b->n_logits : reserve)))
        return rc;
    ifd__scratch_t *s = &m->s;
    const int n = b->n_tok;
    if ((rc = op->upload(be, s->tokens, b->tokens, (size_t)n * 4)) ||
        (rc = op->upload(be, s->pos, b->pos, (size_t)n * 4)) ||
        (rc = op->upload(be, s->seq, b->seq, (size_t)n * 4)) ||
        (rc = op->upload(be, s->slot, b->slot, (size_t)n * 8)) ||
        (b->local_slot && (rc = op->upload(be, s->lslot, b->local_slot, (size_t)n * 8))) ||
        (rc = op->upload(be, m->lg.rows, b->logit_rows, (size_t)b->n_logits * 4)))
        return rc;
    ifd_attn_batch_t ab, abl;
    if ((rc = ifd__attn_batch(m, b, kv, ctx, &ab, &abl)))
        return rc;
    /* without local tables the local layers write through the same slots */
    const int64_t *lslot = b->local_slot ? s->lslot : s->slot;
    ifd__graphs_t *g = &m->gr;
    if (key < 0 || g->off) {
        g->st.eager_steps++;
        return ifd__layers(m, kv, &ab, &abl, lslot, n, b->n_logits, b);
    }
    /* a graph records which slots and tables the local layers use */
    const uint64_t kvh = ifd__kv_hash(m, kv) ^ (b->local_block_tables != NULL);
    rc = IFD_ENOTFOUND;
    if (g->epoch[key] == m->buf_epoch && g->kv_hash[key] == kvh)
        rc = op->graph_launch(be, key);
    if (rc == 0) {
        g->st.replays++;
        g->st.set_replays[g->set]++;
        return 0;
    }
    if (rc != IFD_ENOTFOUND)
        return rc;
    /* Run it eagerly (which also sizes every scratch buffer the ops use),
     * then record the same ops for the next steps of this bucket. */
    g->epoch[key] = 0;
    g->st.eager_steps++;
    if ((rc = ifd__layers(m, kv, &ab, &abl, lslot, n, b->n_logits, NULL)))
        return rc;
    if ((rc = op->graph_begin(be)))
        return rc;
    rc = ifd__layers(m, kv, &ab, &abl, lslot, n, b->n_logits, NULL);
    int re = op->graph_end(be, key);
    if (rc || re) {
        IFD_WARN("model: recording the decode graph of %d tokens failed (%s): eager steps",
                 n, ifd_strerror(rc ? rc : re));
        g->off = true; /* stay correct: this backend cannot record these ops */
        return 0;      /* the eager run above computed the step */
    }
    g->epoch[key] = m->buf_epoch;
    g->kv_hash[key] = kvh;
    g->st.captures++;
    return 0;
}

/* Gemma-style c·tanh(logits / c), on a host copy; -inf (an id past the
 * tokenizer's) stays -inf. ifd_softcap (sampling_math.h), not tanhf: the
 * device computes the same bits (ops->softcap). */
static void ifd__softcap(const ifd_model_t *m, float *logits, size_t n)
{
    const float cap = m->cfg.final_logit_softcap;
    if (cap > 0)
        for (size_t i = 0; i < n; i++)
            logits[i] = ifd_softcap(logits[i], cap);
}

int ifd_model_forward(ifd_model_t *m, const ifd_batch_t *b, const ifd_kv_layer_t *kv,
                      float *logits)
{
    ifd_backend_t *be = m->be;
    int rc = ifd__forward_dev(m, b, kv);
    if (rc)
        return rc;
    if (b->n_logits == 0)
        return be->ops->sync(be);
    const size_t V = m->cfg.n_vocab;
    if ((rc = be->ops->download(be, logits, m->lg.logits.data, (size_t)b->n_logits * V * 4)) ||
        (rc = be->ops->sync(be)))
        return rc;
    ifd__softcap(m, logits, (size_t)b->n_logits * V);
    return 0;
}

int ifd_model_forward_sample(ifd_model_t *m, const ifd_batch_t *b, const ifd_kv_layer_t *kv,
                             const ifd_sample_row_t *rows, int32_t *tokens, float *logits)
{
    ifd_backend_t *be = m->be;
    const float cap = m->cfg.final_logit_softcap;
    const bool device = be->ops->sample && (!(cap > 0) || be->ops->softcap);
    int rc = ifd__forward_dev(m, b, kv);
    if (rc)
        return rc;
    const size_t V = m->cfg.n_vocab;
    /* capped on the device: the rows downloaded below are final already */
    const bool dev_cap = device && cap > 0 && b->n_logits > 0;
    if (dev_cap && (rc = be->ops->softcap(be, &m->lg.logits, b->n_logits, cap)))
        return rc;
    bool any_dev = false;
    for (int i = 0; i < b->n_logits; i++) {
        if (device && (rows[i].params || rows[i].result)) {
            any_dev = true;
            if (!rows[i].params)
                tokens[i] = 0; /* a scoring row, scored on the device */
            continue;
        }
        tokens[i] = IFD_MODEL_SAMPLE_ON_HOST;
        float *dst = logits + (size_t)i * V;
        const float *src = (const float *)m->lg.logits.data + (size_t)i * V;
        if ((rc = be->ops->download(be, dst, src, V * 4)))
            return rc;
        if (!dev_cap)
            ifd__softcap(m, dst, V);
    }
    if (any_dev && (rc = be->ops->sample(be, tokens, &m->lg.logits, rows, b->n_logits)))
        return rc;
    return be->ops->sync(be);
}

void ifd_model_set_max_seqs(ifd_model_t *m, int max_seqs)
{
    int b = 0;
    while (b < IFD__N_BUCKETS - 1 && ifd__buckets[b] < max_seqs)
        b++;
    m->max_bucket = max_seqs > 0 ? ifd__buckets[b] : 0;
}

void ifd_model_set_graphs(ifd_model_t *m, bool on)
{
    m->gr.off = !on;
}

void ifd_model_set_graph_set(ifd_model_t *m, int set)
{
    if (set >= 0 && set < IFD_MODEL_GRAPH_SETS)
        m->gr.set = set;
}

void ifd_model_graph_stats(const ifd_model_t *m, ifd_model_graph_stats_t *out)
{
    *out = m->gr.st;
}
