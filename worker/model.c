/*
 * model.c — weight loading and the forward pass for llama and gemma3.
 *
 * Loading: each tensor is looked up by its GGUF name, its shape checked
 * against the hyper-parameters, dequantized to f32 (ifd_cpu_dequantize) and
 * placed in backend memory. A tied model (no output.weight) reuses
 * token_embd as the output projection.
 *
 * Forward (MODEL-FORMATS.md §5): embedding → per layer [norm → Q/K/V →
 * (gemma: QK-norm) → RoPE → KV write → paged attention → output projection
 * (gemma: post-norm) → residual → norm → gated MLP (gemma: post-norm) →
 * residual] → final norm on the rows that need logits → output projection.
 * GGUF llama stores Q/K permuted for interleaved RoPE (NORM); gemma3 uses
 * NEOX pairs.
 */
#include "model.h"

#include "error.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ifd_weight_t attn_norm, wq, wk, wv, wo;
    ifd_weight_t q_norm, k_norm, post_attn_norm; /* gemma3 */
    ifd_weight_t ffn_norm, w_gate, w_up, w_down;
    ifd_weight_t post_ffw_norm;                  /* gemma3 */
} ifd__layer_t;

/* Scratch activations for up to `cap` tokens. */
typedef struct {
    int cap;
    float *x, *a, *q, *k, *v, *o, *g, *u, *t;
    int32_t *tokens, *pos, *seq;
    int64_t *slot;
} ifd__scratch_t;

struct ifd_model {
    ifd_model_config_t cfg;
    ifd_gguf_t *gguf;
    ifd_backend_t *be;
    ifd__layer_t *layers;
    ifd_weight_t tok_embd, output_norm, output;
    float *rope_freqs; /* backend memory [n_rot/2] or NULL */
    bool output_tied;
    uint64_t weight_bytes;
    ifd__scratch_t s;
    /* per-call buffers that depend on the batch, grown as needed */
    int32_t *block_tables;
    size_t block_tables_cap;
    int32_t *logit_rows;
    float *xs, *logits;
    int logits_cap;
};

typedef struct {
    ifd_model_t *m;
    char *err;
    size_t errlen;
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
        snprintf(L->err, L->errlen, "%s: %s", ifd_gguf_path(L->m->gguf), msg);
    else
        IFD_ERROR("%s: %s", ifd_gguf_path(L->m->gguf), msg);
    return rc;
}

/* Loads tensor `name` as an f32 weight of [rows, cols] (rows = 1 for a
 * vector). Missing and optional → *w stays zeroed and 0 is returned. */
static int ifd__load(ifd__loader_t *L, ifd_weight_t *w, const char *name, int64_t rows,
                     int64_t cols, bool optional)
{
    ifd_model_t *m = L->m;
    const ifd_gguf_tensor_t *t = ifd_gguf_find_tensor(m->gguf, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional)
            return 0;
        return ifd__load_fail(L, IFD_EFORMAT, "tensor '%s' is missing", name);
    }
    bool is_vec = rows == 1;
    bool shape_ok = is_vec ? (t->n_dims == 1 && (int64_t)t->ne[0] == cols)
                           : (t->n_dims == 2 && (int64_t)t->ne[0] == cols &&
                              (int64_t)t->ne[1] == rows);
    if (!shape_ok)
        return ifd__load_fail(L, IFD_EFORMAT,
                              "tensor '%s' has shape [%llu, %llu] (%u dims), expected [%lld, %lld]",
                              name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                              t->n_dims, (long long)cols, (long long)rows);
    size_t n = (size_t)(rows * cols);
    size_t bytes = n * sizeof(float);
    void *dst;
    int rc = m->be->ops->alloc(m->be, bytes, &dst);
    if (rc)
        return ifd__load_fail(L, rc, "tensor '%s': cannot allocate %zu bytes", name, bytes);
    float *host = m->be->ops->host_memory ? dst : malloc(bytes);
    if (!host) {
        m->be->ops->free(m->be, dst);
        return ifd__load_fail(L, IFD_ENOMEM, "tensor '%s': out of memory", name);
    }
    rc = ifd_cpu_dequantize(host, t->data, t->type, (int64_t)n);
    if (rc == 0 && !m->be->ops->host_memory)
        rc = m->be->ops->upload(m->be, dst, host, bytes);
    if (!m->be->ops->host_memory)
        free(host);
    if (rc) {
        m->be->ops->free(m->be, dst);
        if (rc == IFD_ENOTSUP)
            return ifd__load_fail(L, rc, "tensor '%s' has type %s, which inferd cannot load",
                                  name, ifd_ggml_type_name(t->type));
        return ifd__load_fail(L, rc, "tensor '%s': %s", name, ifd_strerror(rc));
    }
    w->data = dst;
    w->dtype = IFD_DTYPE_F32;
    w->rows = rows;
    w->cols = cols;
    m->weight_bytes += bytes;
    return 0;
}

/* Lets the backend lay a matmul-only weight out its way (pre-packing). */
static int ifd__prepare_matmul(ifd__loader_t *L, ifd_weight_t *w, const char *name)
{
    ifd_backend_t *be = L->m->be;
    if (!be->ops->prepare_matmul)
        return 0;
    int rc = be->ops->prepare_matmul(be, w);
    if (rc)
        return ifd__load_fail(L, rc, "tensor '%s': cannot prepare it for matmul: %s", name,
                              ifd_strerror(rc));
    return 0;
}

static void ifd__free_weight(ifd_model_t *m, ifd_weight_t *w)
{
    if (w->data)
        m->be->ops->free(m->be, w->data);
    w->data = NULL;
}

static int ifd__load_all(ifd__loader_t *L)
{
    ifd_model_t *m = L->m;
    const ifd_model_config_t *c = &m->cfg;
    const int64_t E = c->n_embd, F = c->n_ff, hd = c->head_dim;
    const int64_t qd = (int64_t)c->n_head * hd, kvd = (int64_t)c->n_head_kv * hd;
    const bool gemma = c->arch == IFD_ARCH_GEMMA3;
    int rc;
    if ((rc = ifd__load(L, &m->tok_embd, "token_embd.weight", c->n_vocab, E, false)))
        return rc;
    if ((rc = ifd__load(L, &m->output_norm, "output_norm.weight", 1, E, false)))
        return rc;
    if ((rc = ifd__load(L, &m->output, "output.weight", c->n_vocab, E, true)))
        return rc;
    m->output_tied = m->output.data == NULL;
    if (m->output_tied) {
        /* a copy of its own, so the backend may lay it out for matmul while
         * the embedding keeps rows for the gather */
        if ((rc = ifd__load(L, &m->output, "token_embd.weight", c->n_vocab, E, false)))
            return rc;
    }
    if (c->has_rope_freqs) {
        ifd_weight_t rf;
        if ((rc = ifd__load(L, &rf, "rope_freqs.weight", 1, c->n_rot / 2, false)))
            return rc;
        m->rope_freqs = rf.data;
    }
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    if (!m->layers)
        return ifd__load_fail(L, IFD_ENOMEM, "out of memory");
    for (uint32_t l = 0; l < c->n_layer; l++) {
        ifd__layer_t *ly = &m->layers[l];
        char name[96];
        struct {
            ifd_weight_t *w;
            const char *suffix;
            int64_t rows, cols;
            bool want;
        } tab[] = {
            {&ly->attn_norm, "attn_norm", 1, E, true},
            {&ly->wq, "attn_q", qd, E, true},
            {&ly->wk, "attn_k", kvd, E, true},
            {&ly->wv, "attn_v", kvd, E, true},
            {&ly->wo, "attn_output", E, qd, true},
            {&ly->q_norm, "attn_q_norm", 1, hd, gemma},
            {&ly->k_norm, "attn_k_norm", 1, hd, gemma},
            {&ly->post_attn_norm, "post_attention_norm", 1, E, gemma},
            {&ly->ffn_norm, "ffn_norm", 1, E, true},
            {&ly->w_gate, "ffn_gate", F, E, true},
            {&ly->w_up, "ffn_up", F, E, true},
            {&ly->w_down, "ffn_down", E, F, true},
            {&ly->post_ffw_norm, "post_ffw_norm", 1, E, gemma},
        };
        for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
            if (!tab[i].want)
                continue;
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, tab[i].suffix);
            if ((rc = ifd__load(L, tab[i].w, name, tab[i].rows, tab[i].cols, false)))
                return rc;
            if (tab[i].rows > 1 && (rc = ifd__prepare_matmul(L, tab[i].w, name)))
                return rc;
        }
    }
    return ifd__prepare_matmul(L, &m->output, "output");
}

static void ifd__scratch_free(ifd_model_t *m)
{
    ifd__scratch_t *s = &m->s;
    void *bufs[] = {s->x, s->a, s->q, s->k, s->v, s->o, s->g, s->u, s->t,
                    s->tokens, s->pos, s->seq, s->slot};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            m->be->ops->free(m->be, bufs[i]);
    memset(s, 0, sizeof *s);
}

static int ifd__scratch_reserve(ifd_model_t *m, int n_tok)
{
    if (n_tok <= m->s.cap)
        return 0;
    ifd__scratch_free(m);
    const ifd_model_config_t *c = &m->cfg;
    size_t n = (size_t)n_tok;
    size_t E = c->n_embd, F = c->n_ff, qd = (size_t)c->n_head * c->head_dim,
           kvd = (size_t)c->n_head_kv * c->head_dim;
    ifd__scratch_t *s = &m->s;
    struct {
        void **p;
        size_t bytes;
    } tab[] = {
        {(void **)&s->x, n * E * 4},   {(void **)&s->a, n * E * 4},
        {(void **)&s->q, n * qd * 4},  {(void **)&s->k, n * kvd * 4},
        {(void **)&s->v, n * kvd * 4}, {(void **)&s->o, n * qd * 4},
        {(void **)&s->g, n * F * 4},   {(void **)&s->u, n * F * 4},
        {(void **)&s->t, n * (E > qd ? E : qd) * 4},
        {(void **)&s->tokens, n * 4},  {(void **)&s->pos, n * 4},
        {(void **)&s->seq, n * 4},     {(void **)&s->slot, n * 8},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        int rc = m->be->ops->alloc(m->be, tab[i].bytes, tab[i].p);
        if (rc) {
            ifd__scratch_free(m);
            return rc;
        }
    }
    s->cap = n_tok;
    return 0;
}

static int ifd__logits_reserve(ifd_model_t *m, int n_logits)
{
    if (n_logits <= m->logits_cap)
        return 0;
    ifd_backend_t *be = m->be;
    if (m->xs)
        be->ops->free(be, m->xs), m->xs = NULL;
    if (m->logits)
        be->ops->free(be, m->logits), m->logits = NULL;
    if (m->logit_rows)
        be->ops->free(be, m->logit_rows), m->logit_rows = NULL;
    m->logits_cap = 0;
    int rc;
    if ((rc = be->ops->alloc(be, (size_t)n_logits * m->cfg.n_embd * 4, (void **)&m->xs)) ||
        (rc = be->ops->alloc(be, (size_t)n_logits * m->cfg.n_vocab * 4, (void **)&m->logits)) ||
        (rc = be->ops->alloc(be, (size_t)n_logits * 4, (void **)&m->logit_rows)))
        return rc;
    m->logits_cap = n_logits;
    return 0;
}

int ifd_model_load(ifd_model_t **out, const char *path, ifd_backend_t *be, char *errbuf,
                   size_t errlen)
{
    ifd_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return IFD_ENOMEM;
    m->be = be;
    int rc = ifd_gguf_open(&m->gguf, path, errbuf, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    rc = ifd_model_config_from_gguf(&m->cfg, m->gguf, errbuf, errlen);
    if (rc == 0) {
        ifd__loader_t L = {m, errbuf, errlen};
        rc = ifd__load_all(&L);
    }
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
    if (m->layers) {
        for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
            ifd_weight_t *ws = (ifd_weight_t *)&m->layers[l];
            for (size_t i = 0; i < sizeof(ifd__layer_t) / sizeof(ifd_weight_t); i++)
                ifd__free_weight(m, &ws[i]);
        }
        free(m->layers);
    }
    ifd__free_weight(m, &m->output); /* tied: a copy of its own */
    ifd__free_weight(m, &m->tok_embd);
    ifd__free_weight(m, &m->output_norm);
    if (m->rope_freqs)
        m->be->ops->free(m->be, m->rope_freqs);
    ifd__scratch_free(m);
    if (m->block_tables)
        m->be->ops->free(m->be, m->block_tables);
    if (m->xs)
        m->be->ops->free(m->be, m->xs);
    if (m->logits)
        m->be->ops->free(m->be, m->logits);
    if (m->logit_rows)
        m->be->ops->free(m->be, m->logit_rows);
    ifd_gguf_close(m->gguf);
    free(m);
}

const ifd_model_config_t *ifd_model_config(const ifd_model_t *m)
{
    return &m->cfg;
}

const ifd_gguf_t *ifd_model_gguf(const ifd_model_t *m)
{
    return m->gguf;
}

uint64_t ifd_model_weight_bytes(const ifd_model_t *m)
{
    return m->weight_bytes;
}

static int ifd__check_batch(const ifd_model_t *m, const ifd_batch_t *b, int block_size)
{
    if (b->n_tok <= 0 || b->n_seqs <= 0 || b->max_blocks <= 0 || b->n_logits < 0)
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
    return 0;
}

int ifd_model_forward(ifd_model_t *m, const ifd_batch_t *b, const ifd_kv_layer_t *kv,
                      float *logits)
{
    const ifd_model_config_t *c = &m->cfg;
    ifd_backend_t *be = m->be;
    const ifd_backend_ops_t *op = be->ops;
    if (kv[0].block_size <= 0)
        return IFD_EINVAL;
    int rc = ifd__check_batch(m, b, kv[0].block_size);
    if (rc)
        return rc;
    if (kv[0].n_kv_heads != (int)c->n_head_kv || kv[0].head_dim != (int)c->head_dim)
        return IFD_EINVAL;
    if ((rc = ifd__scratch_reserve(m, b->n_tok)) || (rc = ifd__logits_reserve(m, b->n_logits)))
        return rc;
    size_t bt_bytes = (size_t)b->n_seqs * (size_t)b->max_blocks * sizeof(int32_t);
    if (bt_bytes > m->block_tables_cap) {
        if (m->block_tables)
            op->free(be, m->block_tables), m->block_tables = NULL;
        m->block_tables_cap = 0;
        if ((rc = op->alloc(be, bt_bytes, (void **)&m->block_tables)))
            return rc;
        m->block_tables_cap = bt_bytes;
    }
    ifd__scratch_t *s = &m->s;
    const int n = b->n_tok;
    if ((rc = op->upload(be, s->tokens, b->tokens, (size_t)n * 4)) ||
        (rc = op->upload(be, s->pos, b->pos, (size_t)n * 4)) ||
        (rc = op->upload(be, s->seq, b->seq, (size_t)n * 4)) ||
        (rc = op->upload(be, s->slot, b->slot, (size_t)n * 8)) ||
        (rc = op->upload(be, m->block_tables, b->block_tables, bt_bytes)) ||
        (rc = op->upload(be, m->logit_rows, b->logit_rows, (size_t)b->n_logits * 4)))
        return rc;

    const int E = (int)c->n_embd, hd = (int)c->head_dim;
    const int nh = (int)c->n_head, nkv = (int)c->n_head_kv;
    const bool gemma = c->arch == IFD_ARCH_GEMMA3;
    const ifd_rope_mode_t mode = gemma ? IFD_ROPE_NEOX : IFD_ROPE_NORM;

#define IFD__TRY(call)                                                                      \
    do {                                                                                    \
        if ((rc = (call)) != 0)                                                             \
            return rc;                                                                      \
    } while (0)

    IFD__TRY(op->embed(be, s->x, &m->tok_embd, s->tokens, n, c->embd_scale));
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const ifd__layer_t *ly = &m->layers[l];
        const bool local = gemma && c->layer_is_local[l];
        IFD__TRY(op->rmsnorm(be, s->a, s->x, &ly->attn_norm, n, c->rms_eps));
        IFD__TRY(op->matmul(be, s->q, s->a, &ly->wq, n));
        IFD__TRY(op->matmul(be, s->k, s->a, &ly->wk, n));
        IFD__TRY(op->matmul(be, s->v, s->a, &ly->wv, n));
        if (gemma) {
            IFD__TRY(op->rmsnorm(be, s->q, s->q, &ly->q_norm, n * nh, c->rms_eps));
            IFD__TRY(op->rmsnorm(be, s->k, s->k, &ly->k_norm, n * nkv, c->rms_eps));
        }
        float base = local ? c->rope_base_local : c->rope_base;
        float fscale = local ? 1.0f : c->rope_freq_scale;
        IFD__TRY(op->rope(be, s->q, s->pos, n, nh, hd, (int)c->n_rot, base, fscale, m->rope_freqs,
                          mode));
        IFD__TRY(op->rope(be, s->k, s->pos, n, nkv, hd, (int)c->n_rot, base, fscale,
                          m->rope_freqs, mode));
        IFD__TRY(op->kv_write(be, &kv[l], s->k, s->v, s->slot, n));
        IFD__TRY(op->attention(be, s->o, s->q, &kv[l], s->seq, s->pos, m->block_tables,
                               b->max_blocks, n, nh, c->attn_scale,
                               local ? (int)c->sliding_window : 0));
        IFD__TRY(op->matmul(be, s->t, s->o, &ly->wo, n));
        if (gemma)
            IFD__TRY(op->rmsnorm(be, s->t, s->t, &ly->post_attn_norm, n, c->rms_eps));
        IFD__TRY(op->add(be, s->x, s->t, (int64_t)n * E));
        IFD__TRY(op->rmsnorm(be, s->a, s->x, &ly->ffn_norm, n, c->rms_eps));
        IFD__TRY(op->matmul(be, s->g, s->a, &ly->w_gate, n));
        IFD__TRY(op->matmul(be, s->u, s->a, &ly->w_up, n));
        IFD__TRY(op->glu(be, s->g, s->g, s->u, (int64_t)n * c->n_ff,
                         gemma ? IFD_GLU_GEGLU_TANH : IFD_GLU_SWIGLU));
        IFD__TRY(op->matmul(be, s->t, s->g, &ly->w_down, n));
        if (gemma)
            IFD__TRY(op->rmsnorm(be, s->t, s->t, &ly->post_ffw_norm, n, c->rms_eps));
        IFD__TRY(op->add(be, s->x, s->t, (int64_t)n * E));
    }
    if (b->n_logits == 0)
        return op->sync(be);
    IFD__TRY(op->gather_rows(be, m->xs, s->x, m->logit_rows, b->n_logits, E));
    IFD__TRY(op->rmsnorm(be, m->xs, m->xs, &m->output_norm, b->n_logits, c->rms_eps));
    IFD__TRY(op->matmul(be, m->logits, m->xs, &m->output, b->n_logits));
    IFD__TRY(op->download(be, logits, m->logits, (size_t)b->n_logits * c->n_vocab * 4));
    return op->sync(be);
#undef IFD__TRY
}
