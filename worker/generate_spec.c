/*
 * generate_spec.c — see generate_spec.h. One request through an engine of
 * one sequence over a private pool sized for the prompt, the output and a
 * proposal past it (plus a draft's private pool of as many blocks): the
 * engine's token events become the result's tokens, its finish the
 * result's reason.
 */
#include "generate_spec.h"

#include "engine.h"
#include "error.h"
#include "kvpool/kvparams.h"
#include "kvpool/kvpool.h"
#include "log.h"
#include "spec_draft.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double ifd__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct {
    ifd_engine_t *eng;
    const ifd_generate_params_t *p;
    ifd_generate_result_t *r;
    double t0;
    bool done, stopped; /* finished; stopped by the callback (cancelled) */
    ifd_finish_reason_t reason;
} ifd__gs_t;

static void ifd__gs_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    ifd__gs_t *g = ctx;
    if (g->stopped)
        return; /* tokens of the step the callback stopped in: not the caller's */
    ifd_generate_result_t *r = g->r;
    if (r->n_tokens == 0) {
        r->ttft_ms = ifd__now_ms() - g->t0;
        r->prefill_ms = r->ttft_ms;
    }
    r->tokens[r->n_tokens++] = res->token;
    if (g->p->on_token && g->p->on_token(g->p->cb_ctx, res->token)) {
        g->stopped = true;
        ifd_engine_cancel(g->eng, id);
    }
}

static void ifd__gs_finish(void *ctx, uint64_t id, ifd_finish_reason_t reason,
                           const ifd_engine_usage_t *u)
{
    (void)id, (void)u;
    ifd__gs_t *g = ctx;
    g->done = true;
    g->reason = reason;
}

/* The private pool: the model's geometry (f16 device memory on a GPU, as
 * ifd_generate's), blocks for the whole context and a proposal past it. */
static int ifd__gs_pool(ifd_model_t *m, const ifd_generate_params_t *p, int total,
                        ifd_kvpool_t **pool)
{
    ifd_kvpool_params_t kp = ifd_kvpool_model_params(ifd_model_config(m));
    if (p->block_size > 0)
        kp.block_size = p->block_size;
    if (!ifd_model_backend(m)->ops->host_memory) {
        kp.dtype = IFD_KV_F16;
        kp.kind[0] = IFD_KVSEG_CUDA_VMM;
    }
    if (p->kv_dtype >= 0)
        kp.dtype = (ifd_kv_dtype_t)p->kv_dtype;
    kp.n_blocks = (total + IFD_SPEC_MAX_TOKENS + 1 + kp.block_size - 1) / kp.block_size + 2;
    kp.n_workers = 1;
    return ifd_kvpool_create(&kp, pool);
}

int ifd_generate_spec(ifd_model_t *m, const int32_t *prompt, int n_prompt,
                      const ifd_generate_params_t *p, const ifd_generate_spec_params_t *s,
                      ifd_generate_result_t *r, ifd_generate_spec_stats_t *st)
{
    memset(r, 0, sizeof *r);
    if (st)
        memset(st, 0, sizeof *st);
    const ifd_model_config_t *cfg = ifd_model_config(m);
    if (!prompt || n_prompt < 1 || p->n_predict < 1 || p->prefill_chunk < 1 ||
        (int64_t)n_prompt + p->n_predict > (int64_t)cfg->n_ctx_train)
        return IFD_EINVAL;
    if (p->dump_logits || !p->use_cache || p->kv_last || p->embd || p->local_pool ||
        (s->method == IFD_SPEC_DRAFT && !s->draft))
        return IFD_ENOTSUP;
    if (!(r->tokens = malloc((size_t)p->n_predict * sizeof *r->tokens)))
        return IFD_ENOMEM;
    ifd_kvpool_t *pool = NULL;
    ifd_engine_model_t em = {0};
    ifd_spec_draft_t *d = NULL;
    ifd__gs_t g = {.p = p, .r = r, .t0 = ifd__now_ms()};
    int rc = ifd__gs_pool(m, p, n_prompt + p->n_predict, &pool);
    if (rc || (rc = ifd_engine_model_from(&em, m, pool, 0)))
        goto out;
    ifd_engine_params_t ep = ifd_engine_default_params();
    ep.max_seqs = 1;
    ep.max_batched_tokens = p->prefill_chunk;
    /* generate.h's stop_ids end a generation unless ignore_eos: the
     * engine's eos_ids */
    ep.eos_ids = p->stop_ids;
    ep.n_eos_ids = (int32_t)p->n_stop_ids;
    ep.spec = (ifd_spec_params_t){s->method, s->num_tokens, s->ngram_min, s->ngram_max};
    if (s->method == IFD_SPEC_DRAFT) {
        ifd_kvpool_params_t g0;
        ifd_kvpool_geometry(pool, &g0);
        const ifd_spec_draft_params_t dp = {.n_vocab = em.n_vocab,
                                            .max_batched_tokens = ep.max_batched_tokens,
                                            .n_blocks = g0.n_blocks,
                                            .block_size = g0.block_size,
                                            .dtype = g0.dtype,
                                            .step_tokens = s->draft_step_tokens};
        char err[512] = "";
        if ((rc = ifd_spec_draft_create(&d, s->draft, &dp, err, sizeof err))) {
            IFD_ERROR("%s", err);
            goto out;
        }
        ep.drafter = ifd_spec_draft_drafter(d);
    }
    const ifd_engine_callbacks_t cb = {&g, ifd__gs_token, ifd__gs_finish, NULL};
    if ((rc = ifd_engine_create(&g.eng, &ep, &em, pool, &cb)))
        goto out;
    ifd_engine_request_t req;
    memset(&req, 0, sizeof req);
    req.id = 1;
    req.prompt = prompt;
    req.n_prompt = n_prompt;
    req.sampling = p->sampling;
    req.max_tokens = p->n_predict;
    req.ignore_eos = p->ignore_eos;
    req.use_cache = true;
    if ((rc = ifd_engine_add(g.eng, &req)))
        goto out;
    while (!g.done || !ifd_engine_idle(g.eng)) {
        int n = ifd_engine_step(g.eng, NULL);
        if (n < 0) {
            rc = n;
            goto out;
        }
    }
    if (g.reason == IFD_FINISH_ERROR) {
        rc = IFD_EINTERNAL; /* the engine logged why */
        goto out;
    }
    r->finish_reason = g.stopped                        ? "callback"
                       : g.reason == IFD_FINISH_STOP ? "stop"
                                                       : "length";
    r->total_ms = ifd__now_ms() - g.t0;
    r->decode_ms = r->n_tokens > 0 ? r->total_ms - r->ttft_ms : 0;
    if (st) {
        ifd_engine_stats_t es;
        ifd_engine_stats(g.eng, &es);
        *st = (ifd_generate_spec_stats_t){es.spec_drafts, es.spec_draft_tokens,
                                          es.spec_accepted_tokens, es.steps};
    }
out:
    ifd_engine_destroy(g.eng);
    ifd_spec_draft_destroy(d); /* after the engine that used it */
    if (em.ctx)
        ifd_engine_model_free(&em);
    ifd_kvpool_destroy(pool);
    if (rc)
        ifd_generate_result_free(r);
    return rc;
}
