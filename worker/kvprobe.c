/*
 * kvprobe.c — see kvprobe.h.
 */
#include "kvprobe.h"
#include "kvpool/kvparams.h"

#include "engine.h"
#include "error.h"
#include "kvsize.h"
#include "sampler.h"
#include "spec.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* model.c's graph buckets: batch sizes, and contexts (powers of two from
 * 256). A change there only makes this warm-up record fewer or more graphs
 * than the worker can; what it records is measured either way. */
static const int ifd__batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
#define IFD__CTX_MIN 256

/* The warm-up's state: the scratch KV views and the host arrays of one
 * batch, sized for the largest. */
typedef struct {
    ifd_model_t *m;
    ifd_backend_t *be;
    ifd_kv_layer_t *kv; /* [n_layer] */
    void *kv_mem;
    int nb; /* scratch blocks per layer */
    int bs;
    int32_t *tokens, *pos, *seq, *rows, *bt, *sampled;
    int64_t *slot;
    ifd_sample_row_t *srows;
    ifd_sampling_params_t sp;
    float *logits;
    int cap_tok, cap_rows;
    size_t cap_bt;
    int steps;
    /* the model's sliding-window layers get a pool of their own (the daemon
     * splits every such model's): the steps bring local tables too, so that
     * the buffers and graphs measured are those of the serving worker */
    bool local_tables;
    const ifd_sampling_params_t *row_sp; /* a sampled row's params: &sp, or NULL (draft) */
    bool plp;      /* prompt-logprob rows in the largest prefill (not a draft's) */
    int spec_rows; /* verification rows in the largest prefill (ifd__spec_rows) */
} ifd__warm_t;

static void ifd__warm_free(ifd__warm_t *w)
{
    if (w->kv_mem)
        w->be->ops->free(w->be, w->kv_mem);
    free(w->kv);
    free(w->tokens);
    free(w->pos);
    free(w->seq);
    free(w->rows);
    free(w->bt);
    free(w->sampled);
    free(w->slot);
    free(w->srows);
    free(w->logits);
}

/* The scratch KV: nb blocks per layer, K then V of every layer in one
 * allocation, zeroed (uploaded in chunks from one zero buffer). */
static int ifd__warm_kv(ifd__warm_t *w, const ifd_kvprobe_params_t *p)
{
    const ifd_model_config_t *c = ifd_model_config(w->m);
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(c);
    kp.dtype = p->kv_dtype;
    kp.block_size = p->block_size;
    const uint64_t region = (uint64_t)w->nb * ifd_kvpool_block_bytes(&kp);
    const uint64_t total = 2 * (uint64_t)c->n_layer * region;
    w->kv = calloc(c->n_layer, sizeof *w->kv);
    if (!w->kv)
        return IFD_ENOMEM;
    int rc = w->be->ops->alloc(w->be, total, &w->kv_mem);
    if (rc)
        return rc;
    const size_t chunk = 1 << 20;
    void *zero = calloc(1, chunk);
    if (!zero)
        return IFD_ENOMEM;
    for (uint64_t off = 0; off < total && rc == 0; off += chunk) {
        size_t n = total - off < chunk ? (size_t)(total - off) : chunk;
        rc = w->be->ops->upload(w->be, (char *)w->kv_mem + off, zero, n);
    }
    if (rc == 0)
        rc = w->be->ops->sync(w->be);
    free(zero);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        w->kv[l].k = (char *)w->kv_mem + (2 * (uint64_t)l) * region;
        w->kv[l].v = (char *)w->kv_mem + (2 * (uint64_t)l + 1) * region;
        w->kv[l].dtype = (ifd_dtype_t)p->kv_dtype;
        w->kv[l].block_size = p->block_size;
        w->kv[l].n_kv_heads = (int)c->n_head_kv;
        w->kv[l].head_dim = (int)c->head_dim;
    }
    return rc;
}

static int ifd__warm_arrays(ifd__warm_t *w, int tok, int rows, size_t bt)
{
    const size_t V = ifd_model_config(w->m)->n_vocab;
    w->cap_tok = tok;
    w->cap_rows = rows;
    w->cap_bt = bt;
    w->tokens = malloc((size_t)tok * sizeof *w->tokens);
    w->pos = malloc((size_t)tok * sizeof *w->pos);
    w->seq = malloc((size_t)tok * sizeof *w->seq);
    w->slot = malloc((size_t)tok * sizeof *w->slot);
    w->rows = malloc((size_t)rows * sizeof *w->rows);
    w->sampled = malloc((size_t)rows * sizeof *w->sampled);
    w->srows = calloc((size_t)rows, sizeof *w->srows);
    w->logits = malloc((size_t)rows * V * sizeof *w->logits);
    w->bt = malloc(bt * sizeof *w->bt);
    if (!w->tokens || !w->pos || !w->seq || !w->slot || !w->rows || !w->sampled || !w->srows ||
        !w->logits || !w->bt)
        return IFD_ENOMEM;
    w->sp = ifd_sampling_default_params();
    for (int i = 0; i < rows; i++)
        w->srows[i] = (ifd_sample_row_t){.params = &w->sp, .hist = NULL, .position = 0};
    return 0;
}

/* Block table rows of max_blocks entries, all alike: j → j mod nb. */
static void ifd__warm_tables(ifd__warm_t *w, int n_seqs, int max_blocks)
{
    for (int s = 0; s < n_seqs; s++)
        for (int j = 0; j < max_blocks; j++)
            w->bt[(size_t)s * max_blocks + j] = j % w->nb;
}

/* One step (sampled on the device where the backend can). */
/* Runs the step that w's arrays describe: n tokens of n_seqs sequences
 * (tables of max_blocks), logits for the first n_logits of w->rows. */
static int ifd__warm_step(ifd__warm_t *w, int n, int n_seqs, int max_blocks, int n_logits)
{
    ifd__warm_tables(w, n_seqs, max_blocks);
    const ifd_batch_t b = {.n_tok = n,
                           .tokens = w->tokens,
                           .pos = w->pos,
                           .seq = w->seq,
                           .slot = w->slot,
                           .n_seqs = n_seqs,
                           .block_tables = w->bt,
                           .max_blocks = max_blocks,
                           .n_logits = n_logits,
                           .logit_rows = w->rows,
                           .local_block_tables = w->local_tables ? w->bt : NULL,
                           .local_slot = w->local_tables ? w->slot : NULL};
    w->steps++;
    return ifd_model_forward_sample(w->m, &b, w->kv, w->srows, w->sampled, w->logits);
}

/* The verification rows a step of the engine may add beside its sample and
 * prompt-logprob rows (speculative decoding): p->spec_rows, at most
 * IFD_SPEC_MAX_TOKENS a sequence; none in a draft's warm-up (one row per
 * proposing sequence, its sample rows). */
static int ifd__spec_rows(const ifd_kvprobe_params_t *p)
{
    if (p->draft || p->spec_rows <= 0)
        return 0;
    const int64_t most = (int64_t)IFD_SPEC_MAX_TOKENS * p->max_seqs;
    return most < p->spec_rows ? (int)most : p->spec_rows;
}

/* Step 2c's rows (ifd__warm_logprobs): every row of the largest prefill
 * asks k alternatives past the inline ones, each with room for them. */
typedef struct {
    ifd_sampling_params_t p;
    ifd_sample_result_t *res; /* [rows] */
    int32_t *ids;             /* [rows x k] */
    float *lps;               /* [rows x k] */
    int32_t k;
} ifd__lpwarm_t;

/* A mixed prefill step of n tokens: sequences 0..S-2 one token each at
 * position 0 (nothing written), sequence S-1 a run from position 0 written
 * into blocks 0, 1, ...; a logits row per sequence (sampled on the device)
 * and, when extra_rows, up to IFD_ENGINE_PLP_ROWS more from the run (prompt
 * logprobs; not in a draft's warm-up) and up to w->spec_rows after them
 * (verification rows: downloaded, as the engine's are with device
 * sampling), the most rows an engine step asks for. */
static int ifd__warm_prefill(ifd__warm_t *w, int n, int max_seqs, bool extra_rows,
                             const ifd__lpwarm_t *lp)
{
    const int32_t V = (int32_t)ifd_model_config(w->m)->n_vocab;
    int S = n - 1 < max_seqs ? n - 1 : max_seqs;
    S = S < 1 ? 1 : S;
    const int run = n - (S - 1);
    const int max_blocks = (run + w->bs - 1) / w->bs;
    for (int i = 0; i < n; i++) {
        const bool single = i < S - 1;
        w->tokens[i] = (int32_t)((7 * (int64_t)i + 1) % V);
        w->seq[i] = single ? i : S - 1;
        w->pos[i] = single ? 0 : i - (S - 1);
        w->slot[i] = single ? -1 : w->pos[i];
    }
    for (int s = 0; s < S; s++)
        w->rows[s] = s < S - 1 ? s : n - 1;
    const int plp = !extra_rows || !w->plp          ? 0
                    : run - 1 < IFD_ENGINE_PLP_ROWS ? run - 1
                                                    : IFD_ENGINE_PLP_ROWS;
    const int spec = !extra_rows ? 0 : run - 1 - plp < w->spec_rows ? run - 1 - plp : w->spec_rows;
    for (int i = 0; i < plp + spec; i++)
        w->rows[S + i] = S - 1 + i;
    for (int i = 0; i < S + plp + spec; i++)
        w->srows[i].params = i < S ? w->row_sp : NULL;
    for (int i = 0; lp && i < S + plp; i++) { /* sampled rows, then scoring rows */
        ifd_sample_result_t *r = &lp->res[i];
        *r = (ifd_sample_result_t){.more_ids = lp->ids + (size_t)i * (size_t)lp->k,
                                   .more_logprobs = lp->lps + (size_t)i * (size_t)lp->k,
                                   .more_cap = lp->k};
        w->srows[i] = i < S ? (ifd_sample_row_t){.params = &lp->p, .result = r}
                            : (ifd_sample_row_t){.result = r,
                                                 .score_token = w->tokens[w->rows[i] + 1],
                                                 .score_top = lp->k};
    }
    int rc = ifd__warm_step(w, n, S, max_blocks, S + plp + spec);
    for (int i = 0; lp && i < S + plp; i++)
        w->srows[i] = (ifd_sample_row_t){.params = &w->sp};
    return rc;
}

/* Step 2c: the largest prefill again, its S sampled rows and its prompt-
 * logprob rows each asking k = min(max_logprobs, V) alternatives (skipped
 * while k stays inline): the most the device sampler downloads in one step
 * (8 bytes an alternative past the inline ones), so that its buffer is
 * grown now rather than by the first such step while serving, from memory
 * the pool was given. The host room is the warm-up's, freed after. */
static int ifd__warm_logprobs(ifd__warm_t *w, const ifd_kvprobe_params_t *p)
{
    const int32_t V = (int32_t)ifd_model_config(w->m)->n_vocab;
    const int64_t k = p->max_logprobs < 0 || p->max_logprobs > V ? V : p->max_logprobs;
    if (p->draft || k <= IFD_SAMPLER_INLINE_LOGPROBS)
        return 0;
    const size_t rows = (size_t)w->cap_rows;
    ifd__lpwarm_t lp = {.p = w->sp, .k = (int32_t)k};
    lp.p.n_logprobs = (int32_t)k;
    lp.res = calloc(rows, sizeof *lp.res);
    lp.ids = malloc(rows * (size_t)k * sizeof *lp.ids);
    lp.lps = malloc(rows * (size_t)k * sizeof *lp.lps);
    int rc = lp.res && lp.ids && lp.lps
                 ? ifd__warm_prefill(w, p->max_batched_tokens, p->max_seqs, true, &lp)
                 : IFD_ENOMEM;
    free(lp.res);
    free(lp.ids);
    free(lp.lps);
    return rc;
}

/* A decode step of n sequences: sequence 0 at position ctx - 1, the others
 * at 0, nothing written. */
static int ifd__warm_decode(ifd__warm_t *w, int n, int ctx)
{
    const int max_blocks = (ctx + w->bs - 1) / w->bs;
    for (int i = 0; i < n; i++) {
        w->tokens[i] = (int32_t)(i + 1) % (int32_t)ifd_model_config(w->m)->n_vocab;
        w->seq[i] = i;
        w->pos[i] = i == 0 ? ctx - 1 : 0;
        w->slot[i] = -1;
        w->rows[i] = i;
        w->srows[i].params = w->row_sp;
    }
    return ifd__warm_step(w, n, n, max_blocks, n);
}

/* Step 2b: one decode step of n sequences whose rows ask for all that the
 * device sampler keeps per row, so that its buffers are grown before the
 * memory is read: 20 raw logprobs of a row that a logit bias and a
 * frequency penalty change (the raw copy, V floats a row, is the largest),
 * with a history of min(ctx, V) distinct ids, the most a row can bring (the
 * penalties' id table). Grammar masks (V/8 bytes a row) are left to the
 * margin: a constraint needs the tokenizer, which the warm-up has not. */
static int ifd__warm_sample_worst(ifd__warm_t *w, int n, int ctx)
{
    const int32_t V = ifd_model_config(w->m)->n_vocab;
    const int32_t n_ids = ctx < V ? ctx : V;
    const ifd_logit_bias_t bias = {.id = 0, .bias = 1.0f};
    ifd_sampling_params_t p = w->sp;
    p.n_logprobs = IFD_SAMPLER_INLINE_LOGPROBS;
    p.logprobs_mode = IFD_LOGPROBS_RAW;
    p.logit_bias = &bias;
    p.n_logit_bias = 1;
    p.frequency_penalty = 0.5f;
    ifd_sample_result_t *res = calloc((size_t)n, sizeof *res);
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    if (!res || !ids) {
        free(res);
        free(ids);
        return IFD_ENOMEM;
    }
    for (int32_t i = 0; i < n_ids; i++)
        ids[i] = i;
    const ifd_sampler_history_t hist = {.generated = ids, .n_generated = (size_t)n_ids};
    const int max_blocks = (ctx + w->bs - 1) / w->bs;
    for (int i = 0; i < n; i++) {
        w->tokens[i] = (int32_t)(i + 1) % V;
        w->seq[i] = i;
        w->pos[i] = i == 0 ? ctx - 1 : 0;
        w->slot[i] = -1;
        w->rows[i] = i;
        w->srows[i] = (ifd_sample_row_t){.params = &p, .hist = &hist, .result = &res[i]};
    }
    int rc = ifd__warm_step(w, n, n, max_blocks, n);
    for (int i = 0; i < n; i++)
        w->srows[i] = (ifd_sample_row_t){.params = &w->sp};
    free(res);
    free(ids);
    return rc;
}

/* The decode steps of step 2 (every_ctx false: at max_ctx only) or 3 (each
 * context bucket up to max_ctx): each batch bucket up to cap sequences (and
 * cap itself), `reps` times each. */
static int ifd__warm_decodes(ifd__warm_t *w, int cap, int max_ctx, bool every_ctx, int reps,
                             int *failed_n)
{
    int rc = 0;
    for (int ctx = every_ctx ? IFD__CTX_MIN : max_ctx;; ctx *= 2) {
        const int c = ctx < max_ctx ? ctx : max_ctx;
        for (size_t i = 0; i <= sizeof ifd__batch_buckets / sizeof ifd__batch_buckets[0]; i++) {
            const bool last = i == sizeof ifd__batch_buckets / sizeof ifd__batch_buckets[0];
            const int n = last ? cap : ifd__batch_buckets[i];
            if (n > cap || (!last && n == cap))
                continue;
            for (int r = 0; r < reps && rc == 0; r++)
                rc = ifd__warm_decode(w, n, c);
            if (rc) {
                *failed_n = n;
                return rc;
            }
        }
        if (c >= max_ctx)
            return 0;
    }
}

static int ifd__mem(ifd_kvprobe_mem_cb mem, void *ctx, ifd_backend_t *be, uint64_t *out)
{
    int rc = be->ops->sync(be);
    return rc ? rc : mem(ctx, out);
}

int ifd_kvprobe_warmup(ifd_model_t *m, const ifd_kvprobe_params_t *p, ifd_kvprobe_mem_cb mem,
                       void *mem_ctx, ifd_kvprobe_result_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (p->max_batched_tokens < 1 || p->max_seqs < 1 || p->max_ctx < 1 || p->block_size < 1) {
        snprintf(err, errlen,
                 "the warm-up needs max_batched_tokens, max_seqs, the context and "
                 "the block size >= 1");
        return IFD_EINVAL;
    }
    ifd__warm_t w = {.m = m, .be = ifd_model_backend(m), .bs = p->block_size};
    w.row_sp = p->draft ? NULL : &w.sp;
    w.plp = !p->draft;
    w.spec_rows = ifd__spec_rows(p);
    ifd_kvpool_params_t kp_g, kp_l;
    w.local_tables = ifd_kvpool_model_params_split(ifd_model_config(m), &kp_g, &kp_l);
    const int T = p->max_batched_tokens;
    const int cap = p->max_seqs < T ? p->max_seqs : T; /* sequences in a decode step */
    ifd_model_set_max_seqs(m, cap); /* as the worker will (serve.c) */
    /* blocks the longest prefill run writes, and at least one */
    w.nb = (T + p->block_size - 1) / p->block_size + 1;
    const size_t ctx_blocks = ((size_t)p->max_ctx + (size_t)p->block_size - 1) / p->block_size;
    const size_t bt = (size_t)cap * ctx_blocks > (size_t)T * (size_t)w.nb
                          ? (size_t)cap * ctx_blocks
                          : (size_t)T * (size_t)w.nb;
    ifd_model_graph_stats_t g0, g1;
    uint64_t f_kv = 0, f1 = 0, f2 = 0;
    int rc, n = 0;
    const char *what = "";
    bool step = false;
    if ((rc = ifd__mem(mem, mem_ctx, w.be, &out->free_before))) {
        what = "reading the free memory";
        goto fail;
    }
    if ((rc = ifd__warm_arrays(&w, T > cap ? T : cap, cap + IFD_ENGINE_PLP_ROWS + w.spec_rows,
                               bt)) ||
        (rc = ifd__warm_kv(&w, p)) || (rc = ifd__mem(mem, mem_ctx, w.be, &f_kv))) {
        what = "allocating the warm-up's scratch KV cache";
        goto fail;
    }
    out->kv_scratch_bytes = out->free_before > f_kv ? out->free_before - f_kv : 0;
    ifd_model_set_graphs(m, false);
    /* 1: prefill steps growing by 3/2 up to T */
    for (n = 16 < T ? 16 : T;; n = n + n / 2 < T ? n + n / 2 : T) {
        /* the logits rows matter only at their largest (the model
         * reallocates them, no backend scratch depends on them) */
        if ((rc = ifd__warm_prefill(&w, n, p->max_seqs, n == T, NULL))) {
            what = "prefill";
            step = true;
            goto fail;
        }
        out->prefill_steps++;
        if (n == T)
            break;
    }
    /* 2: decode steps at the largest context, eager */
    const int before = w.steps;
    if ((rc = ifd__warm_decodes(&w, cap, p->max_ctx, false, 1, &n))) {
        what = "decode";
        step = true;
        goto fail;
    }
    if (!p->draft && (rc = ifd__warm_sample_worst(&w, cap, p->max_ctx))) {
        what = "decode (sampling with raw logprobs)";
        n = cap;
        step = true;
        goto fail;
    }
    if ((rc = ifd__warm_logprobs(&w, p))) {
        what = "prefill (max_logprobs alternatives a row)";
        n = T;
        step = true;
        goto fail;
    }
    if ((rc = ifd__mem(mem, mem_ctx, w.be, &f1))) {
        what = "reading the free memory";
        goto fail;
    }
    /* 3: the same with graphs: recorded, then replayed (a draft's in its
     * own set, as spec_draft.c records them) */
    ifd_model_set_graphs(m, true);
    ifd_model_set_graph_set(m, p->draft ? 1 : 0);
    ifd_model_graph_stats(m, &g0);
    rc = ifd__warm_decodes(&w, cap, p->max_ctx, true, 2, &n);
    ifd_model_set_graph_set(m, 0);
    if (rc) {
        what = "graph-recorded decode";
        step = true;
        goto fail;
    }
    out->decode_steps = w.steps - before;
    ifd_model_graph_stats(m, &g1);
    out->n_graphs = (int)(g1.captures - g0.captures);
    if ((rc = ifd__mem(mem, mem_ctx, w.be, &f2))) {
        what = "reading the free memory";
        goto fail;
    }
    out->activation_bytes = f_kv > f1 ? f_kv - f1 : 0;
    out->graph_bytes = f1 > f2 ? f1 - f2 : 0;
    w.be->ops->free(w.be, w.kv_mem);
    w.kv_mem = NULL;
    if ((rc = ifd__mem(mem, mem_ctx, w.be, &out->free_after))) {
        what = "reading the free memory";
        goto fail;
    }
    ifd__warm_free(&w);
    return 0;
fail:
    if (step)
        snprintf(err, errlen, "a warm-up %s step of %d tokens failed: %s", what, n,
                 ifd_strerror(rc));
    else
        snprintf(err, errlen, "warm-up: %s failed: %s", what, ifd_strerror(rc));
    ifd__warm_free(&w);
    return rc;
}

ifd_kvprobe_params_t ifd_kvprobe_draft_params(const ifd_kvprobe_params_t *model)
{
    ifd_kvprobe_params_t d = *model;
    if (d.max_batched_tokens < IFD_ENGINE_SPEC_ROWS)
        d.max_batched_tokens = IFD_ENGINE_SPEC_ROWS;
    /* one logits row per speculating sequence: at most max_seqs of them */
    if (d.max_seqs > IFD_ENGINE_SPEC_ROWS)
        d.max_seqs = IFD_ENGINE_SPEC_ROWS;
    d.draft = true;
    d.spec_rows = 0;
    return d;
}

/* Bytes of one block of every layer of m's K and V in the given type. */
static uint64_t ifd__block_bytes(const ifd_model_t *m, const ifd_kvprobe_params_t *w)
{
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(ifd_model_config(m));
    kp.dtype = w->kv_dtype;
    kp.block_size = w->block_size;
    return 2 * (uint64_t)kp.n_layers * ifd_kvpool_block_bytes(&kp);
}

/* The draft's warm-up after the model's (ifd_kvprobe_size_params_t). */
static int ifd__warm_draft(const ifd_kvprobe_size_params_t *p, ifd_kvprobe_mem_cb mem,
                           void *mem_ctx, ifd_kvprobe_size_t *out, char *err, size_t errlen)
{
    const ifd_kvprobe_params_t dw = ifd_kvprobe_draft_params(&p->warm);
    out->draft_weight_bytes = ifd_model_weight_bytes(p->draft);
    out->draft_block_bytes = ifd__block_bytes(p->draft, &dw);
    char why[384];
    int rc = ifd_kvprobe_warmup(p->draft, &dw, mem, mem_ctx, &out->draft_warm, why, sizeof why);
    if (rc)
        snprintf(err, errlen, "the draft model's warm-up: %s", why);
    return rc;
}

int ifd_kvprobe_size(ifd_model_t *m, const ifd_kvprobe_size_params_t *p, ifd_kvprobe_mem_cb mem,
                     void *mem_ctx, ifd_kvprobe_size_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->total_bytes = p->total_bytes;
    out->weight_bytes = ifd_model_weight_bytes(m);
    out->block_bytes = ifd__block_bytes(m, &p->warm);
    int rc = ifd_kvprobe_warmup(m, &p->warm, mem, mem_ctx, &out->warm, err, errlen);
    if (!rc && p->draft)
        rc = ifd__warm_draft(p, mem, mem_ctx, out, err, errlen);
    if (rc)
        return rc;
    const uint64_t total = p->total_bytes;
    const uint64_t free_b = p->draft ? out->draft_warm.free_after : out->warm.free_after;
    const uint64_t used = free_b <= total ? total - free_b : 0; /* else no block fits */
    const uint64_t act = out->warm.activation_bytes + out->draft_warm.activation_bytes;
    out->free_bytes = free_b;
    const uint64_t graphs = out->warm.graph_bytes + out->draft_warm.graph_bytes;
    out->margin_bytes = ifd_kvsize_margin(total, act + graphs);
    out->n_blocks = ifd_kvsize_blocks(total, free_b, p->fraction, out->margin_bytes,
                                      out->block_bytes + out->draft_block_bytes);
    /* the bytes below the same rounding as the blocks: kvsize.h's formula,
     * less the draft's blocks */
    const double left = p->fraction * (double)total - (double)used - (double)out->margin_bytes -
                        (double)out->n_blocks * (double)out->draft_block_bytes;
    out->usable_bytes = out->n_blocks > 0 && left > 0 ? (uint64_t)left : 0;
    if (out->n_blocks < 1) {
        const double mib = 1024.0 * 1024.0;
        char dpart[192] = "";
        if (p->draft)
            snprintf(dpart, sizeof dpart,
                     "; the draft model's weights %.0f MiB and activations %.0f MiB in use, "
                     "its KV %.1f KiB a block beside the model's %.1f KiB",
                     (double)out->draft_weight_bytes / mib,
                     (double)out->draft_warm.activation_bytes / mib,
                     (double)out->draft_block_bytes / 1024.0, (double)out->block_bytes / 1024.0);
        snprintf(err, errlen,
                 "no KV block fits: %.2f of %.0f MiB minus %.0f MiB in use (weights %.0f MiB, "
                 "activations %.0f MiB, graphs %.0f MiB) minus a %.0f MiB margin leaves "
                 "nothing%s: raise --gpu-memory-fraction or lower --max-batched-tokens%s",
                 p->fraction, (double)total / mib, (double)used / mib,
                 (double)out->weight_bytes / mib, (double)out->warm.activation_bytes / mib,
                 (double)graphs / mib, (double)out->margin_bytes / mib, dpart,
                 p->draft ? ", or take a smaller draft model" : "");
        return IFD_ENOMEM;
    }
    return 0;
}
