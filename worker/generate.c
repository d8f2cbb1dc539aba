/*
 * generate.c — see generate.h.
 *
 * The sequence's KV lives in a private single-device host pool sized for
 * prompt + n_predict tokens; blocks are allocated as the sequence grows and
 * its block table grows with them. Without the cache, every step runs the
 * whole context as one prefill (positions 0..n-1 written into the same
 * blocks again) and samples from its last row.
 */
#include "generate.h"
#include "kvpool/kvparams.h"

#include "engine.h"

#include "error.h"
#include "kvpool/kvpool.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double ifd__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

ifd_generate_params_t ifd_generate_default_params(void)
{
    ifd_generate_params_t p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.use_cache = true;
    p.prefill_chunk = 512;
    p.kv_dtype = -1;
    p.sampling = ifd_sampling_default_params();
    p.sampling.temperature = 0.0f;
    return p;
}

void ifd_generate_result_free(ifd_generate_result_t *r)
{
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

/* NumPy .npy v1.0 float32 [rows, cols]: the header is a fixed 128 bytes so
 * the row count can be patched in at the end. */
static int ifd__npy_header(FILE *f, int64_t rows, int64_t cols)
{
    char hdr[128];
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (char)(118 & 0xff);
    hdr[9] = 0;
    char dict[118];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    if (n < 0 || n >= (int)sizeof dict - 1)
        return IFD_EOVERFLOW;
    memcpy(hdr + 10, dict, (size_t)n);
    hdr[127] = '\n';
    if (fseek(f, 0, SEEK_SET) != 0 || fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr)
        return IFD_EINTERNAL;
    return 0;
}

/* The KV cache: a private pool, its data segment in the backend's memory —
 * a host memfd for host-memory backends, a CUDA device segment for the CUDA
 * backend (bound through the backend's provider by ifd_engine_model_from),
 * f16 there (what the GPU attention kernels read). With local_pool the
 * local layers' pool is a second segment of the same kind. */
typedef struct {
    ifd_kvpool_t *pool;
    ifd_engine_model_t em; /* the model over the pool's KV views */
    ifd_model_t *m;
    ifd_backend_t *be;
    int32_t *blocks; /* the block table */
    int n_blocks, max_blocks, block_size;
    /* local_pool: the local layers' table (entries before l_first released,
     * 0 there: never read, before the window), their pool and window */
    ifd_kvpool_t *lpool;
    int32_t *lblocks;
    int l_first, window;
    int n_released;
    /* batch buffers */
    int32_t *pos, *seq, *rows;
    int64_t *slot, *lslot;
    int32_t *last;      /* kv_last of the run (images) */
    const float **embd; /* embd of the run (images) */
    const ifd_generate_params_t *p;
    int n_prompt;
    float *logits;
    int vocab;
    int32_t *tokens; /* the prompt, then the generated tokens */
    ifd_sampler_t *sampler;
} ifd__gen_t;

/* Makes sure blocks cover positions [0, n_tokens). */
static int ifd__ensure_blocks(ifd__gen_t *g, int n_tokens)
{
    int need = (n_tokens + g->block_size - 1) / g->block_size;
    if (need > g->max_blocks)
        return IFD_EINVAL;
    if (need > g->n_blocks) {
        int rc = ifd_kvpool_alloc(g->pool, 0, 0, need - g->n_blocks, g->blocks + g->n_blocks);
        if (rc)
            return rc;
        if (g->lpool &&
            (rc = ifd_kvpool_alloc(g->lpool, 0, 0, need - g->n_blocks, g->lblocks + g->n_blocks))) {
            ifd_kvpool_free(g->pool, 0, g->blocks + g->n_blocks, need - g->n_blocks);
            return rc;
        }
        g->n_blocks = need;
    }
    return 0;
}

/* local_pool: releases the local blocks a query at position q and later
 * ones never read (wholly before q - window + 1). */
static void ifd__release_local(ifd__gen_t *g, int q)
{
    int lo = q - g->window + 1;
    int first_live = lo > 0 ? lo / g->block_size : 0;
    if (first_live > g->n_blocks)
        first_live = g->n_blocks;
    if (first_live <= g->l_first)
        return;
    ifd_kvpool_free(g->lpool, 0, g->lblocks + g->l_first, first_live - g->l_first);
    g->n_released += first_live - g->l_first;
    for (int b = g->l_first; b < first_live; b++)
        g->lblocks[b] = 0;
    g->l_first = first_live;
}

/* Runs tokens[start..end) at positions start..end-1; logits for the last
 * `n_logits` rows into g->logits. */
static int ifd__run(ifd__gen_t *g, const int32_t *tokens, int start, int end, int n_logits)
{
    int n = end - start;
    if (g->lpool)
        ifd__release_local(g, start);
    int rc = ifd__ensure_blocks(g, end);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        int p = start + i;
        g->pos[i] = p;
        g->seq[i] = 0;
        int32_t blk = ifd_kvpool_block_local(g->pool, g->blocks[p / g->block_size]);
        g->slot[i] = (int64_t)blk * g->block_size + p % g->block_size;
        if (g->lpool)
            g->lslot[i] = (int64_t)g->lblocks[p / g->block_size] * g->block_size +
                          p % g->block_size;
        g->last[i] = p < g->n_prompt && g->p->kv_last ? g->p->kv_last[p] : p;
        g->embd[i] = p < g->n_prompt && g->p->embd ? g->p->embd[p] : NULL;
    }
    for (int i = 0; i < n_logits; i++)
        g->rows[i] = n - n_logits + i;
    ifd_batch_t b = {
        .n_tok = n,
        .tokens = tokens + start,
        .pos = g->pos,
        .seq = g->seq,
        .slot = g->slot,
        .n_seqs = 1,
        .block_tables = g->blocks,
        .max_blocks = g->max_blocks,
        .n_logits = n_logits,
        .logit_rows = g->rows,
        .local_block_tables = g->lpool ? g->lblocks : NULL,
        .local_slot = g->lpool ? g->lslot : NULL,
        .kv_last = g->p->kv_last ? g->last : NULL,
        .embd = g->p->embd ? g->embd : NULL,
    };
    /* block tables hold local ids for the kernels (one device here) */
    return g->em.forward(g->em.ctx, &b, g->logits);
}

static int ifd__dump(FILE *f, const float *rows, int n, int vocab, int *written)
{
    if (!f || n <= 0)
        return 0;
    if (fwrite(rows, sizeof(float), (size_t)n * (size_t)vocab, f) != (size_t)n * (size_t)vocab)
        return IFD_EINTERNAL;
    *written += n;
    return 0;
}

/* The KV pools (their geometry for `total` tokens run at most `max_tok` at
 * a time) and the model's view of them. 0, or an error with what was made
 * left in g for ifd_generate to free. */
static int ifd__gen_pools(ifd__gen_t *g, const ifd_model_config_t *cfg,
                          const ifd_generate_params_t *p, int total, int max_tok)
{
    int rc;
    ifd_kvpool_params_t kp, lkp;
    const bool split = ifd_kvpool_model_params_split(cfg, &kp, &lkp);
    const bool two = split && p->local_pool;
    if (!two)
        kp = ifd_kvpool_model_params(cfg); /* every layer in one pool */
    if (p->block_size > 0)
        kp.block_size = lkp.block_size = p->block_size;
    g->block_size = kp.block_size;
    g->max_blocks = (total + kp.block_size - 1) / kp.block_size;
    kp.n_blocks = g->max_blocks;
    kp.n_workers = lkp.n_workers = 1;
    if (!g->be->ops->host_memory) {
        /* f16 (what the GPU attention kernels read) in device memory; the
         * local pool in a device segment of its own */
        kp.dtype = lkp.dtype = IFD_KV_F16;
        kp.kind[0] = lkp.kind[0] = IFD_KVSEG_CUDA_VMM;
    }
    if (p->kv_dtype >= 0)
        kp.dtype = lkp.dtype = (ifd_kv_dtype_t)p->kv_dtype;
    if (two) {
        /* the window before a run's first token, the run (a prefill chunk,
         * or the whole context without the cache), block edges */
        g->window = (int)cfg->sliding_window;
        const int bs = kp.block_size;
        lkp.n_blocks = (g->window - 1 + bs - 1) / bs + (max_tok + bs - 1) / bs + 1;
        if (lkp.n_blocks > g->max_blocks)
            lkp.n_blocks = g->max_blocks;
        g->lblocks = calloc((size_t)g->max_blocks, sizeof *g->lblocks);
        if (!g->lblocks)
            return IFD_ENOMEM;
        if ((rc = ifd_kvpool_create(&lkp, &g->lpool)))
            return rc;
    }
    if ((rc = ifd_kvpool_create(&kp, &g->pool)))
        return rc;
    return ifd_engine_model_from_pools(&g->em, g->m, g->pool, g->lpool, 0);
}

/* Everything one generation holds: the pools, the batch buffers for
 * `max_tok` rows, the token list for `total` tokens with the prompt copied
 * in, r->tokens for the generated ones, and the sampler. 0, or an error
 * with what was made left in g (and r) for ifd_generate to free. */
static int ifd__gen_open(ifd__gen_t *g, ifd_model_t *m, const int32_t *prompt, int n_prompt,
                         const ifd_generate_params_t *p, int total, int max_tok,
                         ifd_generate_result_t *r)
{
    const ifd_model_config_t *cfg = ifd_model_config(m);
    g->m = m;
    g->be = ifd_model_backend(m);
    g->vocab = (int)cfg->n_vocab;
    int rc = ifd__gen_pools(g, cfg, p, total, max_tok);
    if (rc)
        return rc;
    g->blocks = calloc((size_t)g->max_blocks, sizeof *g->blocks);
    g->pos = malloc((size_t)max_tok * sizeof *g->pos);
    g->seq = malloc((size_t)max_tok * sizeof *g->seq);
    g->rows = malloc((size_t)max_tok * sizeof *g->rows);
    g->slot = malloc((size_t)max_tok * sizeof *g->slot);
    g->lslot = malloc((size_t)max_tok * sizeof *g->lslot);
    g->last = malloc((size_t)max_tok * sizeof *g->last);
    g->embd = malloc((size_t)max_tok * sizeof *g->embd);
    g->p = p;
    g->n_prompt = n_prompt;
    g->logits = malloc((size_t)max_tok * (size_t)g->vocab * sizeof(float));
    g->tokens = malloc((size_t)total * sizeof *g->tokens);
    r->tokens = malloc((size_t)p->n_predict * sizeof *r->tokens);
    if (!g->blocks || !g->pos || !g->seq || !g->rows || !g->slot || !g->lslot || !g->last ||
        !g->embd || !g->logits || !g->tokens || !r->tokens)
        return IFD_ENOMEM;
    if ((rc = ifd_sampler_create(g->vocab, &g->sampler)))
        return rc;
    memcpy(g->tokens, prompt, (size_t)n_prompt * sizeof *g->tokens);
    return 0;
}

/* The end of a prefill chunk [start, end) fitted to the images (kv_last,
 * or NULL): cut before an image it would split, or stretched to the end of
 * one it begins inside; -1 when that one is longer than chunk. */
static int ifd__image_fit(const int32_t *kv_last, int start, int end, int chunk)
{
    if (!kv_last || kv_last[end - 1] < end)
        return end;
    const int32_t L = kv_last[end - 1]; /* the image's last position, past the chunk */
    if (kv_last[start] == L)
        return L + 1 - start <= chunk ? L + 1 : -1;
    while (kv_last[end - 1] == L)
        end--;
    return end;
}

/* Prefill: the prompt in chunks of `chunk` tokens (one run without the
 * cache); the logits of its last row, or of every row when dumping them.
 * *last: the last row's logits (in g->logits). */
static int ifd__gen_prefill(ifd__gen_t *g, const ifd_generate_params_t *p, int n_prompt,
                            int chunk, ifd_generate_result_t *r, const float **last)
{
    const bool dump = p->dump_logits != NULL;
    int rc;
    for (int start = 0; start < n_prompt;) {
        int end = p->use_cache ? (start + chunk < n_prompt ? start + chunk : n_prompt) : n_prompt;
        if ((end = ifd__image_fit(p->kv_last, start, end, chunk)) < 0)
            return IFD_EINVAL;
        int n_logits = dump ? end - start : (end == n_prompt ? 1 : 0);
        if ((rc = ifd__run(g, g->tokens, start, end, n_logits)))
            return rc;
        if ((rc = ifd__dump(p->dump_logits, g->logits, dump ? n_logits : 0, g->vocab,
                            &r->n_logit_rows)))
            return rc;
        if (end == n_prompt)
            *last = g->logits + (size_t)(n_logits - 1) * (size_t)g->vocab;
        start = end;
    }
    return 0;
}

/* Decode: samples from `last` (the prompt's last logits), then one step a
 * token until n_predict tokens, a stop id or the callback's stop; sets
 * r->finish_reason for the last two and r->ttft_ms (from t0) at the first
 * token. */
static int ifd__gen_decode(ifd__gen_t *g, const int32_t *prompt, int n_prompt,
                           const ifd_generate_params_t *p, const float *last, double t0,
                           ifd_generate_result_t *r)
{
    int rc;
    int n_seq = n_prompt;
    for (int step = 0; step < p->n_predict; step++) {
        ifd_sampler_history_t hist = {prompt, (size_t)n_prompt, r->tokens, (size_t)r->n_tokens};
        ifd_sample_result_t res;
        if ((rc = ifd_sampler_sample(g->sampler, &p->sampling, last, &hist, (uint64_t)n_seq,
                                     &res)))
            return rc;
        if (step == 0)
            r->ttft_ms = ifd__now_ms() - t0;
        r->tokens[r->n_tokens++] = res.token;
        g->tokens[n_seq++] = res.token;
        if (p->on_token && p->on_token(p->cb_ctx, res.token)) {
            r->finish_reason = "callback";
            break;
        }
        bool stop = false;
        for (size_t i = 0; i < p->n_stop_ids && !p->ignore_eos; i++)
            stop |= p->stop_ids[i] == res.token;
        if (stop) {
            r->finish_reason = "stop";
            break;
        }
        if (step + 1 == p->n_predict)
            break;
        /* next logits: one new token with the cache, the whole context without */
        if (p->use_cache)
            rc = ifd__run(g, g->tokens, n_seq - 1, n_seq, 1);
        else
            rc = ifd__run(g, g->tokens, 0, n_seq, 1);
        if (rc)
            return rc;
        last = g->logits;
        if ((rc = ifd__dump(p->dump_logits, g->logits, 1, g->vocab, &r->n_logit_rows)))
            return rc;
    }
    return 0;
}

int ifd_generate(ifd_model_t *m, const int32_t *prompt, int n_prompt,
                 const ifd_generate_params_t *p, ifd_generate_result_t *r)
{
    memset(r, 0, sizeof *r);
    const ifd_model_config_t *cfg = ifd_model_config(m);
    if (n_prompt <= 0 || p->n_predict <= 0)
        return IFD_EINVAL;
    if ((int64_t)n_prompt + p->n_predict > (int64_t)cfg->n_ctx_train) {
        IFD_ERROR("prompt (%d tokens) + %d new tokens exceed the model's context of %u", n_prompt,
                  p->n_predict, cfg->n_ctx_train);
        return IFD_EINVAL;
    }
    const int vocab = (int)cfg->n_vocab;
    const int total = n_prompt + p->n_predict;
    const int chunk = p->prefill_chunk > 0 ? p->prefill_chunk : 512;
    /* rows needed at once: a prefill chunk (all rows when dumping), or the
     * whole context in no-cache mode */
    const int max_tok = p->use_cache ? (chunk < total ? chunk : total) : total;

    ifd__gen_t g;
    memset(&g, 0, sizeof g);
    int rc = ifd__gen_open(&g, m, prompt, n_prompt, p, total, max_tok, r);
    if (rc)
        goto out;
    if (p->dump_logits && (rc = ifd__npy_header(p->dump_logits, 0, vocab)))
        goto out;
    const float *last = g.logits;
    double t0 = ifd__now_ms();
    if ((rc = ifd__gen_prefill(&g, p, n_prompt, chunk, r, &last)))
        goto out;
    r->prefill_ms = ifd__now_ms() - t0;
    r->finish_reason = "length";
    if ((rc = ifd__gen_decode(&g, prompt, n_prompt, p, last, t0, r)))
        goto out;
    double t_end = ifd__now_ms();
    r->decode_ms = t_end - t0 - r->ttft_ms;
    r->total_ms = t_end - t0;
    if (p->dump_logits) {
        if ((rc = ifd__npy_header(p->dump_logits, r->n_logit_rows, vocab)))
            goto out;
        fflush(p->dump_logits);
    }
out:
    ifd_sampler_destroy(g.sampler);
    if (g.pool && g.n_blocks)
        ifd_kvpool_free(g.pool, 0, g.blocks, g.n_blocks);
    if (g.lpool) {
        ifd_kvpool_params_t lg;
        ifd_kvpool_geometry(g.lpool, &lg);
        r->kv_local_pool_blocks = (int)lg.n_blocks;
        r->kv_local_released = g.n_released;
    }
    if (g.lpool && g.n_blocks > g.l_first)
        ifd_kvpool_free(g.lpool, 0, g.lblocks + g.l_first, g.n_blocks - g.l_first);
    ifd_engine_model_free(&g.em);
    ifd_kvpool_destroy(g.pool);
    ifd_kvpool_destroy(g.lpool);
    free(g.lblocks);
    free(g.lslot);
    free(g.last);
    free(g.embd);
    free(g.blocks);
    free(g.pos);
    free(g.seq);
    free(g.rows);
    free(g.slot);
    free(g.logits);
    free(g.tokens);
    if (rc) {
        free(r->tokens);
        r->tokens = NULL;
        r->n_tokens = 0;
    }
    return rc;
}
