/*
 * serve.c — see serve.h.
 *
 * Writes are blocking and complete (the router reads its workers eagerly);
 * reads are non-blocking and feed a wire reader. Token events of one step
 * are gathered by the engine callbacks into `ev` and sent as TOKENS frames;
 * a finishing request first flushes the events gathered so far, so the
 * router always sees a request's last token before its FINISHED frame.
 *
 * ifd_worker_serve runs its phases in order over one ifd__srv_t, each
 * filling its part of it: handshake (HELLO), load (backend, model), the
 * POOL step when HELLO asks for it, attach_pools, start_engine, send_ready,
 * then serve_loop; teardown frees whatever the phases made. A phase that
 * fails reports through ifd__fatal (one ERROR frame, one log line) and the
 * next ones do not run.
 */
#include "serve.h"
#include "kvpool/kvparams.h"

#include "backend.h"
#include "backend_factory.h"
#include "engine.h"
#include "error.h"
#include "fdpass.h"
#include "kvpool/kvpool.h"
#include "kvprobe.h"
#include "log.h"
#include "model.h"
#include "proto/wire.h"
#include "serve_vision.h"
#include "spec_draft.h"
#include "tokenizer/tokenizer.h"
#include "worker_model.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The serving worker: what the start-up phases make (each fills its part;
 * ifd__teardown frees whatever is there) and the loop's state. */
typedef struct {
    int fd;
    ifd_buf_t out;            /* encoded frames to write after the step */
    ifd_wire_token_t *ev;     /* this step's token events */
    ifd_wire_top_t *tops;     /* their top logprobs, one after the other in event order */
    uint32_t n_ev, cap_ev;
    size_t n_tops, cap_tops;
    size_t ev_bytes; /* the most the pending events take encoded (ifd__event_bytes) */
    size_t frame_budget; /* IFD__FRAME_BUDGET (a test hook may lower it) */
    uint64_t step;
    ifd_engine_t *eng;
    ifd_tokenizer_t *tok;
    ifd_vocab_t *vocab;   /* built at the first request with a grammar */
    ifd_gstore_t *gstore; /* compiled grammars and their mask caches */
    bool draining;
    int status;
    /* start-up */
    ifd_wire_reader_t rd;
    ifd_wire_msg_t hello; /* HELLO, its kv and fd counts replaced by POOL's */
    int fds[IFD_FDPASS_MAX_FDS], nfds;
    bool sizing;          /* HELLO asked for the POOL step */
    bool quiet;           /* sizing, before POOL_SIZE: errors go to the router only */
    ifd_backend_t *be;
    ifd_model_t *model;
    ifd_model_t *draft;        /* the draft model (HELLO's draft_model_path), or NULL */
    ifd_spec_draft_t *drafter; /* its proposer, over a private pool */
    ifd_serve_vision_t *vis;   /* the vision tower and its queue, or NULL (text only) */
    ifd_kvpool_t *pool, *lpool;
    ifd_kvdisk_t *disk; /* the pool's disk tier, or NULL */
    ifd_kvhost_t *host; /* the host-RAM tier of a device pool, or NULL */
    ifd_engine_model_t em;
    ifd_engine_params_t ep;
    uint64_t n_blocks;    /* the pool's, for STATS */
    char devname[160];    /* the backend's device, for READY and the log */
    char err[1024];       /* a failing phase's reason */
    int64_t max_logprobs; /* the router's (ifd_serve_opts_t), for the POOL step's warm-up */
} ifd__srv_t;

static int ifd__write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd pfd = {fd, POLLOUT, 0};
                poll(&pfd, 1, -1);
                continue;
            }
            return -errno;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int ifd__queue(ifd__srv_t *s, const ifd_wire_msg_t *m)
{
    int rc = ifd_wire_encode(&s->out, m);
    if (rc)
        IFD_ERROR("worker: encoding a %s frame: %s", ifd_wire_type_name(m->type), ifd_strerror(rc));
    return rc;
}

static int ifd__flush(ifd__srv_t *s)
{
    if (!s->out.len)
        return 0;
    int rc = ifd__write_all(s->fd, s->out.data, s->out.len);
    ifd_buf_clear(&s->out);
    return rc;
}

/* Flushes with n fds attached to the first byte (SCM_RIGHTS): how READY
 * hands the router its CUDA VMM segments' fds, which it holds for the
 * daemon's life (daemon/supervisor.c reads with an IPC pipe). n == 0: a
 * plain flush. */
static int ifd__flush_fds(ifd__srv_t *s, const int *fds, int n)
{
    if (n <= 0 || !s->out.len)
        return ifd__flush(s);
    int rc = ifd_fdpass_send(s->fd, s->out.data, 1, fds, n);
    if (!rc)
        rc = ifd__write_all(s->fd, (const char *)s->out.data + 1, s->out.len - 1);
    ifd_buf_clear(&s->out);
    return rc;
}

static void ifd__send_error(ifd__srv_t *s, uint64_t id, int code, const char *msg)
{
    ifd_wire_msg_t m = {.type = IFD_WIRE_ERROR};
    m.u.error.id = id;
    m.u.error.code = code;
    m.u.error.message = (char *)msg;
    ifd__queue(s, &m);
}

/* A frame's share of the body limit: the pending token events (or a prompt
 * chunk's entries) go out in one more frame before they would pass it, so
 * that thousands of alternatives per token (max_logprobs up to the
 * vocabulary) never make a frame the router refuses. Half the limit leaves
 * room for the estimate's own slack. */
#define IFD__FRAME_BUDGET (IFD_WIRE_MAX_BODY / 2)

/* The frame budget: IFD__FRAME_BUDGET, or with the test hooks
 * INFERD_TEST_FRAME_BUDGET bytes (integration tests split frames without
 * megabytes of alternatives). */
static size_t ifd__frame_budget(void)
{
#ifdef IFD_TEST_HOOKS
    const char *e = getenv("INFERD_TEST_FRAME_BUDGET");
    if (e && *e) {
        const long long v = atoll(e);
        if (v > 0 && v < (long long)IFD__FRAME_BUDGET)
            return (size_t)v;
    }
#endif
    return IFD__FRAME_BUDGET;
}

/* The most one event or prompt entry with n top alternatives takes encoded:
 * its fixed fields (at most 48 bytes) and the alternatives. */
static size_t ifd__event_bytes(int32_t n_top)
{
    return 48u + (size_t)(n_top > 0 ? n_top : 0) * IFD_WIRE_TOP_BYTES;
}

static void ifd__queue_tokens(ifd__srv_t *s);

/* Room for one more event with n_top alternatives (0, or IFD_ENOMEM). */
static int ifd__ev_reserve(ifd__srv_t *s, size_t n_top)
{
    if (s->n_ev == s->cap_ev) {
        uint32_t cap = s->cap_ev ? s->cap_ev * 2 : 64;
        ifd_wire_token_t *ev = realloc(s->ev, cap * sizeof *ev);
        if (!ev)
            return IFD_ENOMEM;
        s->ev = ev;
        s->cap_ev = cap;
    }
    if (s->n_tops + n_top > s->cap_tops) {
        size_t cap = s->cap_tops ? s->cap_tops : 1024;
        while (cap < s->n_tops + n_top)
            cap *= 2;
        ifd_wire_top_t *tops = realloc(s->tops, cap * sizeof *tops);
        if (!tops)
            return IFD_ENOMEM;
        s->tops = tops;
        s->cap_tops = cap;
        size_t off = 0; /* the pending events' alternatives moved */
        for (uint32_t i = 0; i < s->n_ev; i++) {
            s->ev[i].top = s->ev[i].n_top ? s->tops + off : NULL;
            off += s->ev[i].n_top;
        }
    }
    return 0;
}

static void ifd__on_token(void *ctx, uint64_t id, const ifd_sample_result_t *res)
{
    ifd__srv_t *s = ctx;
    const bool lp = res->n_top > 0 || res->rank > 0;
    const uint32_t n_top = lp && res->n_top > 0 ? (uint32_t)res->n_top : 0;
    const size_t bytes = ifd__event_bytes((int32_t)n_top);
    if (s->n_ev && s->ev_bytes + bytes > s->frame_budget)
        ifd__queue_tokens(s); /* this step's events so far, in a frame of their own */
    if (ifd__ev_reserve(s, n_top)) {
        IFD_ERROR("worker: out of memory for token events");
        return;
    }
    ifd_wire_token_t *e = &s->ev[s->n_ev];
    memset(e, 0, sizeof *e);
    e->id = id;
    e->token = res->token;
    if (lp) {
        const int32_t *ids = ifd_sample_top_ids(res);
        const float *lps = ifd_sample_top_logprobs(res);
        e->has_logprob = true;
        e->logprob = res->logprob;
        e->n_top = n_top;
        e->top = n_top ? s->tops + s->n_tops : NULL;
        for (uint32_t i = 0; i < n_top; i++)
            e->top[i] = (ifd_wire_top_t){ids[i], lps[i]};
        s->n_tops += n_top;
    }
    s->ev_bytes += bytes;
    s->n_ev++;
}

/* One PROMPT_LOGPROBS frame of res[0..n), prompt positions pos on. */
static void ifd__queue_plp(ifd__srv_t *s, uint64_t id, int32_t pos, const ifd_sample_result_t *res,
                           int32_t n, size_t n_tops)
{
    ifd_wire_plp_t *ent = calloc((size_t)n, sizeof *ent);
    ifd_wire_top_t *tops = n_tops ? calloc(n_tops, sizeof *tops) : NULL;
    if (!ent || (n_tops && !tops)) {
        IFD_ERROR("worker: out of memory for the prompt logprobs of %llu", (unsigned long long)id);
        free(ent);
        free(tops);
        return;
    }
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t *ids = ifd_sample_top_ids(&res[i]);
        const float *lps = ifd_sample_top_logprobs(&res[i]);
        ent[i].token = res[i].token;
        ent[i].logprob = res[i].logprob;
        ent[i].rank = (uint32_t)(res[i].rank > 0 ? res[i].rank : 1);
        ent[i].n_top = (uint32_t)(res[i].n_top > 0 ? res[i].n_top : 0);
        ent[i].top = ent[i].n_top ? tops + off : NULL;
        for (uint32_t k = 0; k < ent[i].n_top; k++)
            ent[i].top[k] = (ifd_wire_top_t){ids[k], lps[k]};
        off += ent[i].n_top;
    }
    ifd_wire_msg_t m = {.type = IFD_WIRE_PROMPT_LOGPROBS};
    m.u.prompt_logprobs.id = id;
    m.u.prompt_logprobs.pos = (uint32_t)pos;
    m.u.prompt_logprobs.entries = ent;
    m.u.prompt_logprobs.n_entries = (uint32_t)n;
    ifd__queue(s, &m);
    free(ent);
    free(tops);
}

/* A prefill chunk's prompt logprobs: PROMPT_LOGPROBS frames queued at once
 * (one, or several in position order when the chunk's alternatives would
 * pass the frame budget), so they precede this step's TOKENS frame (and
 * the request's first token) in the stream. */
static void ifd__on_prompt_logprobs(void *ctx, uint64_t id, int32_t pos,
                                    const ifd_sample_result_t *res, int32_t n)
{
    ifd__srv_t *s = ctx;
    int32_t first = 0;
    size_t bytes = 0, n_tops = 0;
    for (int32_t i = 0; i < n; i++) {
        const size_t b = ifd__event_bytes(res[i].n_top);
        if (i > first && bytes + b > s->frame_budget) {
            ifd__queue_plp(s, id, pos + first, res + first, i - first, n_tops);
            first = i;
            bytes = n_tops = 0;
        }
        bytes += b;
        n_tops += (size_t)(res[i].n_top > 0 ? res[i].n_top : 0);
    }
    if (n > first)
        ifd__queue_plp(s, id, pos + first, res + first, n - first, n_tops);
}

/* Queues this step's token events gathered so far as one TOKENS frame. */
static void ifd__queue_tokens(ifd__srv_t *s)
{
    if (!s->n_ev)
        return;
    ifd_wire_msg_t m = {.type = IFD_WIRE_TOKENS};
    m.u.tokens.step = s->step;
    m.u.tokens.events = s->ev;
    m.u.tokens.n_events = s->n_ev;
    ifd__queue(s, &m);
    s->n_ev = 0;
    s->n_tops = 0;
    s->ev_bytes = 0;
}

static void ifd__on_finish(void *ctx, uint64_t id, ifd_finish_reason_t reason,
                           const ifd_engine_usage_t *u)
{
    ifd__srv_t *s = ctx;
    ifd__queue_tokens(s); /* the tokens of this step go first */
    static const uint32_t map[] = {IFD_WIRE_FINISH_STOP, IFD_WIRE_FINISH_LENGTH,
                                   IFD_WIRE_FINISH_CANCELLED, IFD_WIRE_FINISH_ERROR};
    ifd_wire_msg_t m = {.type = IFD_WIRE_FINISHED};
    m.u.finished.id = id;
    m.u.finished.reason = map[reason];
    m.u.finished.stop_token = -1;
    m.u.finished.prompt_tokens = (uint32_t)u->prompt_tokens;
    m.u.finished.completion_tokens = (uint32_t)u->completion_tokens;
    m.u.finished.cached_tokens = (uint32_t)u->cached_tokens;
    if (reason == IFD_FINISH_ERROR && u->error == IFD_ETOOBIG)
        ifd__send_error(s, id, IFD_ETOOBIG,
                        "the structured-output grammar is too expensive to follow here (its next "
                        "step needs more than the per-token budget)");
    else if (reason == IFD_FINISH_ERROR)
        ifd__send_error(s, id, IFD_EINTERNAL, "the request could not be served (see the worker log)");
    ifd__queue(s, &m);
}

/* The engine's speculation setting of the wire's (same numbers; the
 * decoder bounded each field, the engine checks the rest). */
static ifd_spec_params_t ifd__spec_from_wire(const ifd_wire_spec_t *w)
{
    return (ifd_spec_params_t){(ifd_spec_method_t)w->method, (int32_t)w->num_tokens,
                               (int32_t)w->ngram_min, (int32_t)w->ngram_max};
}

/* A request that does not start: ERROR with msg, then FINISHED "error". */
static void ifd__refuse(ifd__srv_t *s, uint64_t id, int rc, const char *msg, uint32_t n_prompt)
{
    ifd__send_error(s, id, rc, msg);
    ifd_wire_msg_t m = {.type = IFD_WIRE_FINISHED};
    m.u.finished.id = id;
    m.u.finished.reason = IFD_WIRE_FINISH_ERROR;
    m.u.finished.stop_token = -1;
    m.u.finished.prompt_tokens = n_prompt;
    ifd__queue(s, &m);
}

/* The request of ADD a into the engine, with its pictures' rows (images,
 * n_images: from serve_vision) when it has any. */
static void ifd__start_request(ifd__srv_t *s, const ifd_wire_add_t *a,
                               const ifd_engine_image_t *images, uint32_t n_images)
{
    ifd_engine_request_t r;
    memset(&r, 0, sizeof r);
    r.id = a->id;
    r.prompt = a->tokens;
    r.n_prompt = (int32_t)(a->n_tokens - a->n_generated);
    r.generated = a->n_generated ? a->tokens + r.n_prompt : NULL;
    r.n_generated = (int32_t)a->n_generated;
    r.sampling = ifd_sampling_default_params();
    r.sampling.temperature = a->sampling.temperature;
    r.sampling.top_k = a->sampling.top_k;
    r.sampling.top_p = a->sampling.top_p;
    r.sampling.min_p = a->sampling.min_p;
    r.sampling.repetition_penalty = a->sampling.repetition_penalty;
    r.sampling.frequency_penalty = a->sampling.frequency_penalty;
    r.sampling.presence_penalty = a->sampling.presence_penalty;
    r.sampling.logit_bias = a->sampling.logit_bias;
    r.sampling.n_logit_bias = a->sampling.n_logit_bias;
    r.sampling.n_logprobs = a->sampling.n_logprobs;
    r.sampling.logprobs_mode = (ifd_logprobs_mode_t)a->sampling.logprobs_mode;
    r.sampling.seed = a->sampling.seed;
    r.stop_ids = a->stop_ids;
    r.n_stop_ids = (int32_t)a->n_stop_ids;
    r.max_tokens = (int32_t)a->max_tokens;
    r.ignore_eos = a->ignore_eos;
    r.use_cache = a->use_cache;
    r.min_tokens = (int32_t)(a->min_tokens > INT32_MAX ? INT32_MAX : a->min_tokens);
    r.priority = a->priority; /* higher first, on the wire as in the engine */
    r.client = a->client;
    r.prompt_logprobs = (int32_t)a->prompt_logprobs; /* bounded by the decoder */
    r.allowed_ids = a->allowed_ids;
    r.n_allowed_ids = a->n_allowed_ids;
    r.lp_ids = a->lp_ids;
    r.n_lp_ids = a->n_lp_ids;
    r.spec = ifd__spec_from_wire(&a->spec);
    r.images = images;
    r.n_images = (int32_t)n_images;
    int rc = 0;
    char gerr[300] = "";
    if (a->n_grammar) {
        if (!s->gstore) {
            rc = ifd_vocab_create_tokenizer(s->tok, &s->vocab);
            if (!rc)
                rc = ifd_gstore_create(s->vocab, &s->gstore);
            if (rc) {
                ifd_vocab_destroy(s->vocab);
                s->vocab = NULL;
                snprintf(gerr, sizeof gerr, "cannot build the vocabulary trie");
            }
        }
        if (!rc) {
            char e[256] = "";
            rc = ifd_constraint_create_compiled(s->gstore, a->grammar, a->n_grammar,
                                                &r.sampling.constraint, e, sizeof e);
            if (rc)
                snprintf(gerr, sizeof gerr, "invalid grammar: %s", e);
        }
    }
    if (!rc) {
        rc = ifd_engine_add(s->eng, &r);
        if (rc) {
            ifd_constraint_destroy(r.sampling.constraint); /* not taken over */
            if (rc == IFD_EEXIST)
                snprintf(gerr, sizeof gerr, "duplicate request id");
            else if (rc != IFD_EINVAL || !ifd_engine_check(s->eng, &r, gerr, sizeof gerr))
                snprintf(gerr, sizeof gerr,
                         "invalid request (tokens, length or sampling parameters)");
        }
    }
    if (rc)
        ifd__refuse(s, a->id, rc, gerr, (uint32_t)r.n_prompt);
}

/* ADD: into the engine now, or (with pictures) into serve_vision's queue,
 * which takes the frame over (*m left empty). */
static void ifd__handle_add(ifd__srv_t *s, ifd_wire_msg_t *m)
{
    const ifd_wire_add_t *a = &m->u.add;
    const uint32_t n_prompt = a->n_tokens - a->n_generated;
    char err[300];
    int rc;
    if (s->draining)
        ifd__refuse(s, a->id, IFD_EBUSY, "worker is draining", 0);
    else if (!a->n_images)
        ifd__start_request(s, a, NULL, 0);
    else if ((rc = ifd_serve_vision_submit(s->vis, m, err, sizeof err)))
        ifd__refuse(s, a->id, rc, err, n_prompt);
}

/* CANCEL: a request waiting for its pictures ends here, else in the engine. */
static void ifd__handle_cancel(ifd__srv_t *s, uint64_t id)
{
    uint32_t n_prompt;
    if (!ifd_serve_vision_cancel(s->vis, id, &n_prompt)) {
        ifd_engine_cancel(s->eng, id);
        return;
    }
    ifd_wire_msg_t m = {.type = IFD_WIRE_FINISHED};
    m.u.finished.id = id;
    m.u.finished.reason = IFD_WIRE_FINISH_CANCELLED;
    m.u.finished.stop_token = -1;
    m.u.finished.prompt_tokens = n_prompt;
    ifd__queue(s, &m);
}

/* One bounded piece of the pictures' work (serve_vision.h); a request whose
 * pictures all have rows enters the engine. */
static void ifd__vision_step(ifd__srv_t *s)
{
    ifd_serve_vision_job_t *j = ifd_serve_vision_step(s->vis);
    if (!j)
        return;
    const ifd_wire_add_t *a = &j->msg.u.add;
    if (j->rc)
        ifd__refuse(s, a->id, j->rc, j->err, a->n_tokens - a->n_generated);
    else
        ifd__start_request(s, a, j->images, a->n_images);
    ifd_serve_vision_job_free(j);
}

_Static_assert(IFD_KVTIER_COUNT <= IFD_WIRE_MAX_TIER_CTRS, "STATS' draft_tier holds every counter");

static void ifd__send_stats(ifd__srv_t *s, uint64_t seq, uint64_t blocks_total)
{
    ifd_wire_count_t per_pos[IFD_SPEC_MAX_TOKENS];
    ifd_wire_count_t draft_tier[IFD_KVTIER_COUNT];
    ifd_engine_stats_t st;
    ifd_engine_stats(s->eng, &st);
    ifd_wire_msg_t m = {.type = IFD_WIRE_STATS};
    ifd_wire_stats_t *w = &m.u.stats;
    w->seq = seq;
    w->running = (uint32_t)st.running;
    w->waiting = (uint32_t)st.waiting + ifd_serve_vision_pending(s->vis);
    w->kv_blocks_in_use = (uint64_t)st.blocks_held;
    w->kv_blocks_total = blocks_total;
    w->kv_local_releasable_blocks = (uint64_t)st.window_dead_blocks;
    w->kv_local_releasable_bytes = st.window_dead_bytes;
    w->kv_local_released_blocks = (uint64_t)st.local_released_blocks;
    w->kv_local_released_bytes = st.local_released_bytes;
    w->steps = st.steps;
    memcpy(w->step_tokens.n, st.step_tokens, sizeof w->step_tokens.n);
    w->prefill_tokens = st.prefill_tokens;
    w->decode_tokens = st.decode_tokens;
    w->tokens_per_step = st.steps ? (double)st.tokens / (double)st.steps : 0.0;
    w->batch_occupancy = w->tokens_per_step / (double)st.max_batched_tokens;
    w->prefix_query_tokens = st.prompt_tokens;
    w->prefix_hit_tokens = st.cached_prompt_tokens;
    w->prefix_hit_rate =
        st.prompt_tokens ? (double)st.cached_prompt_tokens / (double)st.prompt_tokens : 0.0;
    w->preemptions = st.preemptions;
    w->forward_ns = (uint64_t)(st.forward_ms * 1e6);
    w->sampling_ns = (uint64_t)(st.sample_ms * 1e6);
    w->scheduling_ns = (uint64_t)(st.schedule_ms * 1e6);
    w->spec_drafts = st.spec_drafts;
    w->spec_draft_tokens = st.spec_draft_tokens;
    w->spec_accepted_tokens = st.spec_accepted_tokens;
    uint32_t n_pos = 0; /* positions up to the last one ever proposed */
    for (uint32_t i = 0; i < IFD_SPEC_MAX_TOKENS; i++) {
        per_pos[i].n = st.spec_accepted_per_pos[i];
        if (per_pos[i].n)
            n_pos = i + 1;
    }
    w->spec_accepted_per_pos = n_pos ? per_pos : NULL;
    w->n_spec_per_pos = n_pos;
    /* the draft's tiers count in its private pool, which only we can read */
    if (s->drafter && (ifd_spec_draft_has_disk(s->drafter) || ifd_spec_draft_has_host(s->drafter))) {
        uint64_t c[IFD_KVTIER_COUNT];
        ifd_kvpool_tier_get(ifd_spec_draft_pool(s->drafter), c);
        for (int i = 0; i < IFD_KVTIER_COUNT; i++)
            draft_tier[i].n = c[i];
        w->draft_tier = draft_tier;
        w->n_draft_tier = IFD_KVTIER_COUNT;
    }
    ifd__queue(s, &m);
}

/* The next frame from the router, blocking, and the fds that came with its
 * first bytes (SCM_RIGHTS): HELLO, or POOL after POOL_SIZE. A frame already
 * in the reader comes first (no fds: none follow HELLO before POOL). */
static int ifd__read_frame(int fd, ifd_wire_reader_t *rd, ifd_wire_msg_t *msg, int *fds, int *nfds)
{
    *nfds = 0;
    int rc = ifd_wire_reader_next_msg(rd, msg);
    if (rc)
        return rc < 0 ? rc : 0;
    char buf[65536];
    size_t len = 0;
    if ((rc = ifd_fdpass_recv(fd, buf, sizeof buf, &len, fds, IFD_FDPASS_MAX_FDS, nfds)))
        return rc;
    if ((rc = ifd_wire_reader_feed(rd, buf, len)))
        return rc;
    for (;;) {
        rc = ifd_wire_reader_next_msg(rd, msg);
        if (rc < 0)
            return rc;
        if (rc == 1)
            return 0;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0)
            return IFD_ECLOSED;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if ((rc = ifd_wire_reader_feed(rd, buf, (size_t)n)))
            return rc;
    }
}

/* Reads the HELLO frame (with its fds). */
static int ifd__read_hello(int fd, ifd_wire_reader_t *rd, ifd_wire_msg_t *hello, int *fds,
                           int *nfds)
{
    int rc = ifd__read_frame(fd, rd, hello, fds, nfds);
    return rc ? rc : hello->type == IFD_WIRE_HELLO ? 0 : IFD_EFORMAT;
}

/* The POOL step (proto/wire.h, HELLO's size_pool): the weights are loaded
 * (the draft model's too: its warm-up, weights and pool are counted
 * before the target's blocks, kvprobe.h); run the sizing warm-up at the
 * engine's limits (its buffers stay grown for the engine to reuse), send
 * POOL_SIZE, and wait for POOL with the pool's fds. 0 with h->kv,
 * h->n_fds and h->n_local_fds replaced by POOL's and fds/nfds its fds; 1
 * when the router said SHUTDOWN or hung up instead (exit quietly); a
 * negative code with err set otherwise (the caller sends it as ERROR: the
 * router prints it as the start's one error line, so it is not logged
 * here). */
static int ifd__pool_step(ifd__srv_t *s, ifd_wire_reader_t *rd, ifd_backend_t *be,
                          ifd_model_t *model, ifd_wire_hello_t *h, const ifd_engine_params_t *ep,
                          int *fds, int *nfds, char *err, size_t errlen)
{
    const ifd_kvprobe_params_t wp = {.max_batched_tokens = ep->max_batched_tokens,
                                     .max_seqs = ep->max_seqs,
                                     .max_ctx = (int)h->max_model_len,
                                     .block_size = (int)h->kv.block_size,
                                     .kv_dtype = (ifd_kv_dtype_t)h->kv.dtype,
                                     /* any request may speculate ("speculative":
                                      * true), whatever the daemon's spec: kvprobe.h */
                                     .spec_rows = IFD_ENGINE_SPEC_ROWS,
                                     .max_logprobs = s->max_logprobs};
    ifd_kvprobe_size_t sz;
    char desc[128];
    int rc = ifd_backend_factory_gpu_size(be, model, s->draft, &wp, h->gpu_memory_fraction, &sz,
                                          desc, sizeof desc, err, errlen);
    if (rc)
        return rc;
    ifd_wire_msg_t m = {.type = IFD_WIRE_POOL_SIZE};
    ifd_wire_pool_size_t *ps = &m.u.pool_size;
    ps->n_blocks = (uint64_t)sz.n_blocks;
    ps->usable_bytes = sz.usable_bytes;
    ps->block_bytes = sz.block_bytes;
    ps->total_bytes = sz.total_bytes;
    ps->free_bytes = sz.free_bytes;
    /* with a draft model: both models' (usable_bytes is the model's share) */
    ps->weight_bytes = sz.weight_bytes + sz.draft_weight_bytes;
    ps->activation_bytes = sz.warm.activation_bytes + sz.draft_warm.activation_bytes;
    ps->graph_bytes = sz.warm.graph_bytes + sz.draft_warm.graph_bytes;
    ps->margin_bytes = sz.margin_bytes;
    ps->n_graphs = (uint32_t)(sz.warm.n_graphs + sz.draft_warm.n_graphs);
    ps->device = desc;
    if ((rc = ifd__queue(s, &m)) || (rc = ifd__flush(s))) {
        snprintf(err, errlen, "sending POOL_SIZE: %s", ifd_strerror(rc));
        return rc;
    }
    IFD_DEBUG("worker %u: %llu KV blocks fit, waiting for the pool", h->slot,
              (unsigned long long)sz.n_blocks);
    for (;;) {
        ifd_wire_msg_t p = {0};
        rc = ifd__read_frame(s->fd, rd, &p, fds, nfds);
        if (rc == IFD_ECLOSED)
            return 1;
        if (rc) {
            snprintf(err, errlen, "waiting for POOL: %s (%s)", ifd_strerror(rc),
                     ifd_wire_reader_error(rd));
            return rc;
        }
        const int type = p.type;
        const uint32_t level = type == IFD_WIRE_LOG_LEVEL ? p.u.log_level.level : 0;
        if (type == IFD_WIRE_POOL) {
            h->kv = p.u.pool.kv;
            h->n_fds = p.u.pool.n_fds;
            h->n_local_fds = p.u.pool.n_local_fds;
        }
        ifd_wire_msg_free(&p);
        if (type == IFD_WIRE_POOL)
            return 0;
        if (type == IFD_WIRE_SHUTDOWN)
            return 1;
        for (int i = 0; i < *nfds; i++) /* none expected with another frame */
            close(fds[i]);
        *nfds = 0;
        if (type != IFD_WIRE_LOG_LEVEL && type != IFD_WIRE_DRAIN)
            IFD_WARN("worker: a %s frame before POOL: ignored", ifd_wire_type_name(type));
        if (type == IFD_WIRE_LOG_LEVEL)
            ifd_log_set_level((ifd_log_level_t)level);
    }
}

/* The backend HELLO asks for ("cpu", "cuda" or "cuda-f32"; the CUDA ones on
 * device 0 of the CUDA_VISIBLE_DEVICES the router set) and its name for
 * READY and the log. */
static int ifd__serve_backend(const ifd_serve_opts_t *o, const ifd_wire_hello_t *h, int threads,
                              ifd_backend_t **be, char *devname, size_t devlen, char *err,
                              size_t errlen)
{
    const char *name = h->backend && h->backend[0] ? h->backend : "cpu";
    int rc = ifd_backend_factory_create(be, name, threads, o->weights, err, errlen);
    if (rc)
        return rc;
    ifd_backend_factory_describe(name, threads, (int)h->device, devname, devlen);
    return 0;
}

/* The CUDA kernels read the pool's data at device addresses: a host (memfd)
 * segment only works on the kernel emulator, where device memory is host
 * memory. Device segments (CUDA VMM / IPC) come from the KV pool's CUDA
 * provider (kernels/cuda/kvseg_cuda.h). */
static int ifd__check_pool_memory(const ifd_backend_t *be, const ifd_kvpool_t *pool, int dev,
                                  char *err, size_t errlen)
{
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(pool, &g);
    if (be->ops->host_memory || g.kind[dev] != IFD_KVSEG_HOST)
        return 0;
#ifdef IFD_CUDA_EMU
    (void)err;
    (void)errlen;
    return 0;
#else
    snprintf(err, errlen, "the KV pool's device %d segment is host memory, which the %s backend "
                          "cannot read: it needs a CUDA segment (docs/gpu-status.md)",
             dev, be->ops->name);
    return IFD_ENOTSUP;
#endif
}

/* A fatal start-up error: ERROR id 0 with msg to the router, and msg logged
 * too unless the worker is still quiet (sizing the pool before POOL_SIZE
 * was sent: the router prints the ERROR as the start's one error line).
 * Returns rc, for the caller to pass up. msg may be s->err. */
static int ifd__fatal(ifd__srv_t *s, int rc, const char *msg)
{
    if (!s->quiet)
        IFD_ERROR("worker: %s", msg);
    ifd__send_error(s, 0, rc, msg);
    return rc;
}

/* Phase 1, the handshake: HELLO with its fds (none when it asks the worker
 * to size the pool first, which needs a device). */
static int ifd__handshake(ifd__srv_t *s)
{
    int rc = ifd__read_hello(s->fd, &s->rd, &s->hello, s->fds, &s->nfds);
    if (rc) {
        IFD_ERROR("worker: no HELLO from the router: %s (%s)", ifd_strerror(rc),
                  ifd_wire_reader_error(&s->rd));
        return rc;
    }
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    s->sizing = s->quiet = h->size_pool;
    if (s->nfds < 1 && !s->sizing)
        return ifd__fatal(s, IFD_EINVAL, "HELLO came without the KV pool's fds");
    if (s->sizing && (rc = ifd_backend_factory_gpu_check(s->err, sizeof s->err)))
        return ifd__fatal(s, rc, s->err);
    return 0;
}

/* The draft model of speculative decoding (HELLO's draft_model_path) onto
 * the same backend, its tokenizer checked against the model's (the same
 * vocabulary, pieces and special ids: worker/spec_draft.h) before its
 * weights are read: a wrong draft fails at once. */
static int ifd__load_draft(ifd__srv_t *s)
{
    const char *path = s->hello.u.hello.draft_model_path;
    ifd_worker_model_opts_t mo = {path, NULL, 0};
    ifd_tokenizer_t *dtok = NULL;
    char why[768];
    int rc = ifd_tokenizer_create_path(&dtok, path, why, sizeof why);
    if (!rc)
        rc = ifd_spec_draft_check_tokenizers(s->tok, dtok, why, sizeof why);
    ifd_tokenizer_destroy(dtok);
    dtok = NULL;
    if (!rc)
        rc = ifd_worker_model_load(&mo, s->be, &s->draft, &dtok, why, sizeof why);
    ifd_tokenizer_destroy(dtok);
    if (rc) {
        snprintf(s->err, sizeof s->err, "draft model %s: %s", path, why);
        return ifd__fatal(s, rc, s->err);
    }
    return 0;
}

/* The vision tower (serve_vision.h): opts' or HELLO's mmproj, else the
 * model directory's own (none with random weights). */
static int ifd__load_vision(ifd__srv_t *s, const ifd_serve_opts_t *o, const char *model_path)
{
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    const ifd_serve_vision_params_t vp = {
        .model_path = o->shape && o->shape[0] ? NULL : model_path,
        .mmproj_path = o->mmproj_path && o->mmproj_path[0] ? o->mmproj_path : h->mmproj_path,
        .tok = s->tok,
        .text_embd = ifd_model_config(s->model)->n_embd,
        .cache_bytes =
            o->image_cache_bytes ? o->image_cache_bytes : (uint64_t)IFD_SERVE_VISION_CACHE_MB << 20,
        .step_ms = o->vision_step_ms ? o->vision_step_ms : IFD_SERVE_VISION_STEP_MS,
        .step_flops = o->vision_step_flops};
    int rc = ifd_serve_vision_create(&s->vis, &vp, s->be, s->err, sizeof s->err);
    return rc ? ifd__fatal(s, rc, s->err) : 0;
}

/* Phase 2: the backend HELLO names (opts may override the threads), the
 * model and tokenizer (opts may override the path or ask for random
 * weights), and the engine's limits from HELLO. */
static int ifd__load(ifd__srv_t *s, const ifd_serve_opts_t *o)
{
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    const char *path = o->model_path ? o->model_path : h->model_path;
    int threads = o->n_threads > 0 ? o->n_threads : (int)h->n_threads;
    int rc = ifd__serve_backend(o, h, threads, &s->be, s->devname, sizeof s->devname, s->err,
                                sizeof s->err);
    if (rc)
        return ifd__fatal(s, rc, s->err);
    ifd_worker_model_opts_t mo = {path, o->shape, o->weights_seed};
    if ((rc = ifd_worker_model_load(&mo, s->be, &s->model, &s->tok, s->err, sizeof s->err)))
        return ifd__fatal(s, rc, s->err);
    if (h->draft_model_path && h->draft_model_path[0] && (rc = ifd__load_draft(s)))
        return rc;
    if ((rc = ifd__load_vision(s, o, path)))
        return rc;
    s->ep = ifd_engine_default_params();
    s->ep.copy_slots = o->kv_copy_slots; /* the tiers' pinned ring (engine.h) */
    if (o->kv_copy_slots > 0)
        IFD_INFO("kv tier copies: a ring of %d pinned slots", o->kv_copy_slots);
    else if (o->kv_copy_slots < 0)
        IFD_INFO("kv tier copies: synchronous (no pinned ring)");
    if (h->max_seqs)
        s->ep.max_seqs = (int)h->max_seqs;
    if (h->max_batched_tokens)
        s->ep.max_batched_tokens = (int)h->max_batched_tokens;
    return 0;
}

/* Phase 3, only when HELLO asked for it: the POOL step. 1 when the router
 * said SHUTDOWN or hung up meanwhile (a clean exit); from here on failures
 * are logged. */
static int ifd__size_pool(ifd__srv_t *s)
{
    if (!s->sizing)
        return 0;
    int rc = ifd__pool_step(s, &s->rd, s->be, s->model, &s->hello.u.hello, &s->ep, s->fds,
                            &s->nfds, s->err, sizeof s->err);
    if (rc == 1) { /* SHUTDOWN or the router gone while sizing */
        s->status = 0;
        return 1;
    }
    if (rc)
        return ifd__fatal(s, rc, s->err);
    s->quiet = false;
    if (s->nfds < 1)
        return ifd__fatal(s, IFD_EINVAL, "POOL came without the KV pool's fds");
    return 0;
}

/* Phase 4: attaches the pool (and the local layers' pool) from the fds
 * HELLO or POOL brought, checked against the model's geometry, and binds
 * the model to them. */
static int ifd__attach_pools(ifd__srv_t *s)
{
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    const ifd_model_config_t *cfg = ifd_model_config(s->model);
    const int *fds = s->fds;
    int rc;
    /* the last n_local_fds fds are the local layers' pool's (proto/wire.h,
     * HELLO, POOL): its metadata, then its data segment when the router has
     * one */
    const int n_local = (int)h->n_local_fds, n_main = s->nfds - n_local;
    if (n_local > 2 || n_main < 1 || n_main > 2) {
        snprintf(s->err, sizeof s->err,
                 "the pool came with %d fds, %u of them the local pool's: expected "
                 "1 or 2 for each pool",
                 s->nfds, h->n_local_fds);
        return ifd__fatal(s, IFD_EINVAL, s->err);
    }
    const bool two_pools = n_local > 0;
    ifd_kvpool_params_t expect, lexpect;
    if (two_pools && !ifd_kvpool_model_params_split(cfg, &expect, &lexpect))
        return ifd__fatal(s, IFD_EINVAL, "HELLO brings a local-layer KV pool, but the model has "
                                         "no local and global layers to split");
    if (!two_pools)
        expect = ifd_kvpool_model_params(cfg);
    expect.dtype = (ifd_kv_dtype_t)h->kv.dtype;
    expect.block_size = (int)h->kv.block_size;
    expect.fingerprint = h->kv.fingerprint;
    lexpect.dtype = expect.dtype;
    lexpect.block_size = expect.block_size;
    lexpect.fingerprint = expect.fingerprint;
    /* a pool's second fd, when present, is its data segment of kv_device */
    int data_fds[IFD_KVPOOL_MAX_DEVICES];
    int n_data = 0;
    if (h->kv_device >= IFD_KVPOOL_MAX_DEVICES) {
        snprintf(s->err, sizeof s->err, "HELLO names pool device %u (at most %d)", h->kv_device,
                 IFD_KVPOOL_MAX_DEVICES);
        return ifd__fatal(s, IFD_EINVAL, s->err);
    }
    for (uint32_t d = 0; d < h->kv_device; d++)
        data_fds[n_data++] = -1;
    data_fds[n_data++] = n_main == 2 ? fds[1] : -1;
    if ((rc = ifd_kvpool_attach(fds[0], data_fds, n_data, &expect, &s->pool))) {
        snprintf(s->err, sizeof s->err, "cannot attach the KV pool: %s", ifd_strerror(rc));
        return ifd__fatal(s, rc, s->err);
    }
    if (two_pools) {
        data_fds[n_data - 1] = n_local == 2 ? fds[n_main + 1] : -1;
        if ((rc = ifd_kvpool_attach(fds[n_main], data_fds, n_data, &lexpect, &s->lpool))) {
            snprintf(s->err, sizeof s->err, "cannot attach the local layers' KV pool: %s",
                     ifd_strerror(rc));
            return ifd__fatal(s, rc, s->err);
        }
    }
    const int dev = (int)h->kv_device;
    if ((rc = ifd__check_pool_memory(s->be, s->pool, dev, s->err, sizeof s->err)) ||
        (s->lpool &&
         (rc = ifd__check_pool_memory(s->be, s->lpool, dev, s->err, sizeof s->err))))
        return ifd__fatal(s, rc, s->err);
    if ((rc = ifd_engine_model_from_pools(&s->em, s->model, s->pool, s->lpool, dev)))
        return ifd__fatal(s, rc, "the KV pool does not fit the model");
    return 0;
}

/* The disk tier's fingerprint: the pool's (the weights file, the KV
 * geometry and dtype, the block size) and what else changes the K/V
 * values — the backend, the CPU weights' type, random weights' shape and
 * seed, the model's RoPE and attention settings, and the local-layer
 * pool's geometry (its twins are in every file) and the window. */
static uint64_t ifd__disk_fingerprint(const ifd__srv_t *s, const ifd_serve_opts_t *o)
{
    const ifd_model_config_t *c = ifd_model_config(s->model);
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    char id[1024];
    int n = snprintf(id, sizeof id, "%s|%d|%s|%llu|%s|%.9g|%.9g|%.9g|%.9g|%d|%u|%.9g|%.9g|%u|%u",
                     h->backend ? h->backend : "cpu", (int)o->weights, o->shape ? o->shape : "",
                     (unsigned long long)o->weights_seed, c->arch_name, (double)c->rope_base,
                     (double)c->rope_freq_scale, (double)c->rope_base_local,
                     (double)c->rope_freq_scale_local, (int)c->rope_neox, c->n_rot,
                     (double)c->attn_scale, (double)c->llama3_factor, c->n_embd, c->n_head);
    if (s->lpool && n > 0 && (size_t)n < sizeof id) {
        ifd_kvpool_params_t g;
        ifd_kvpool_geometry(s->lpool, &g);
        n += snprintf(id + n, sizeof id - (size_t)n, "|local %d %d %d %d %d", g.n_layers,
                      g.n_kv_heads, g.head_dim, (int)g.dtype, (int)c->sliding_window);
    }
    return ifd_kvdisk_fingerprint(s->pool, id, n > 0 ? (size_t)n : 0);
}

/* Phase 4b: the pool's disk tier when the options name a directory; one
 * warning and none when it cannot be had (never a failed start). A device
 * pool's tier is staged (kvdisk.h): the engine copies blocks through host
 * memory. */
static int ifd__start_disk(ifd__srv_t *s, const ifd_serve_opts_t *o)
{
    if (!o->kv_cache_dir || !*o->kv_cache_dir)
        return 0;
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    ifd_kvdisk_params_t p = ifd_kvdisk_default_params();
    p.dir = o->kv_cache_dir;
    p.max_bytes = o->kv_cache_disk_bytes;
    p.fingerprint = ifd__disk_fingerprint(s, o);
    p.worker = (int)h->slot;
    p.device = (int)h->kv_device;
    p.local_pool = s->lpool;
    /* a device pool (and its local pool's twins): through host copies */
    p.staged = s->em.kv_download != NULL;
    int rc = ifd_kvdisk_create(&p, s->pool, &s->disk);
    if (rc)
        IFD_WARN("kv disk tier off: %s: %s", o->kv_cache_dir, ifd_strerror(rc));
    else
        IFD_INFO("kv disk tier: %s, %llu bytes at most, fingerprint %016llx", o->kv_cache_dir,
                 (unsigned long long)p.max_bytes, (unsigned long long)p.fingerprint);
    s->ep.disk = s->disk;
    return 0;
}

/* Phase 4c: a GPU worker's host-RAM tier (kvpool/kvhost.h) when the options
 * give it bytes (with a local-layer pool its entries hold the twins too);
 * one warning and none when it cannot be had: the pool is host memory (a
 * CPU worker: the pool is host RAM already), or the bound is below one
 * block. */
static int ifd__start_host(ifd__srv_t *s, const ifd_serve_opts_t *o)
{
    if (!o->kv_cache_host_bytes)
        return 0;
    if (!s->em.kv_download) {
        IFD_WARN("kv host tier off: the pool is host memory already");
        return 0;
    }
    ifd_kvpool_params_t g;
    ifd_kvpool_geometry(s->pool, &g);
    ifd_kvhost_params_t p = {.max_bytes = o->kv_cache_host_bytes,
                             .data_bytes = s->em.kv_data_bytes,
                             .block_size = g.block_size,
                             .pool = s->pool};
    int rc = ifd_kvhost_create(&p, &s->host);
    if (rc)
        IFD_WARN("kv host tier off: %llu bytes for blocks of %zu: %s",
                 (unsigned long long)p.max_bytes, p.data_bytes, ifd_strerror(rc));
    else
        IFD_INFO("kv host tier: %llu bytes at most (%llu blocks)", (unsigned long long)p.max_bytes,
                 (unsigned long long)(p.max_bytes / p.data_bytes));
    s->ep.host = s->host;
    return 0;
}

/* The identity of the draft's K/V for its disk tier (spec_draft.h, whose
 * fingerprint adds the draft pool's geometry and "draft"): the draft model
 * file (path, size, mtime, inode: another file is another draft) and what
 * else changes its K/V values — the backend, the CPU weights' type, the
 * draft's RoPE and attention settings. */
static void ifd__draft_identity(const ifd__srv_t *s, const ifd_serve_opts_t *o, char *id, size_t n)
{
    const ifd_model_config_t *c = ifd_model_config(s->draft);
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    struct stat st;
    memset(&st, 0, sizeof st);
    stat(h->draft_model_path, &st);
    snprintf(id, n, "%s|%llu|%llu|%llu|%s|%d|%s|%.9g|%.9g|%.9g|%.9g|%d|%u|%.9g|%.9g|%u|%u",
             h->draft_model_path, (unsigned long long)st.st_size, (unsigned long long)st.st_mtime,
             (unsigned long long)st.st_ino, h->backend ? h->backend : "cpu", (int)o->weights,
             c->arch_name, (double)c->rope_base, (double)c->rope_freq_scale,
             (double)c->rope_base_local, (double)c->rope_freq_scale_local, (int)c->rope_neox,
             c->n_rot, (double)c->attn_scale, (double)c->llama3_factor, c->n_embd, c->n_head);
}

/* The draft model's proposer (worker/spec_draft.h) for the engine: a
 * private pool of the target pool's block count, block size and K/V type
 * in the draft's geometry; its catch-up share of a step (opts'
 * draft_step_tokens, else max_batched_tokens) and, with the disk tier's
 * directory, a disk tier of its own there (its files keyed apart from the
 * model's); with the model's host tier (a GPU worker) a host tier of its
 * own of as many blocks. */
static int ifd__start_drafter(ifd__srv_t *s, const ifd_serve_opts_t *o)
{
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    ifd_kvpool_params_t geo;
    ifd_kvpool_geometry(s->pool, &geo);
    char identity[4096 + 512]; /* a path and some settings */
    ifd__draft_identity(s, o, identity, sizeof identity);
    const bool disk = o->kv_cache_dir && *o->kv_cache_dir;
    const ifd_spec_draft_params_t dp = {
        .n_vocab = s->em.n_vocab,
        .max_batched_tokens = s->ep.max_batched_tokens,
        .n_blocks = geo.n_blocks,
        .block_size = (int)h->kv.block_size,
        .dtype = (ifd_kv_dtype_t)h->kv.dtype,
        .step_tokens = o->draft_step_tokens,
        .disk_dir = disk ? o->kv_cache_dir : NULL,
        .disk_bytes = o->kv_cache_disk_bytes,
        .disk_identity = identity,
        /* as many blocks as the model's host tier */
        .host_blocks = s->host ? (int64_t)(o->kv_cache_host_bytes / s->em.kv_data_bytes) : 0,
        /* its tier copies' ring: as many pinned slots as the engine's */
        .copy_slots = o->kv_copy_slots};
    IFD_INFO("draft model: %d catch-up tokens a step at most",
             dp.step_tokens > 0 ? dp.step_tokens : dp.max_batched_tokens);
    /* a logits row per speculating sequence, as the POOL step's warm-up of
     * the draft set it (kvprobe.h) */
    const ifd_kvprobe_params_t mp = {.max_seqs = s->ep.max_seqs};
    ifd_model_set_max_seqs(s->draft, ifd_kvprobe_draft_params(&mp).max_seqs);
    int rc = ifd_spec_draft_create(&s->drafter, s->draft, &dp, s->err, sizeof s->err);
    if (rc)
        return ifd__fatal(s, rc, s->err);
    s->ep.drafter = ifd_spec_draft_drafter(s->drafter);
    return 0;
}

/* Phase 5: the engine over the attached pools, with the tokenizer's
 * end-of-generation ids and this worker's slot and device. */
static int ifd__start_engine(ifd__srv_t *s, const ifd_serve_opts_t *o)
{
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    ifd_engine_params_t *ep = &s->ep;
    const ifd_token_t *eos;
    size_t n_eos = ifd_tokenizer_eog_ids(s->tok, &eos);
    ep->eos_ids = (const int32_t *)eos;
    ep->n_eos_ids = (int32_t)n_eos;
    ep->worker = (int)h->slot;
    ep->device = (int)h->kv_device;
    ep->prefill_cap = h->prefill_cap;
    ep->spec = ifd__spec_from_wire(&h->spec);
    ep->local_pool = s->lpool;
    /* decode steps hold at most this many sequences: buffers for its bucket */
    ifd_model_set_max_seqs(s->model, ep->max_seqs < ep->max_batched_tokens
                                         ? ep->max_seqs
                                         : ep->max_batched_tokens);
    int rc = s->draft ? ifd__start_drafter(s, o) : 0;
    if (rc)
        return rc;
    ifd_engine_callbacks_t cb = {s, ifd__on_token, ifd__on_finish, ifd__on_prompt_logprobs};
    if ((rc = ifd_engine_create(&s->eng, ep, &s->em, s->pool, &cb)))
        return ifd__fatal(s, rc, "cannot create the engine");
    return 0;
}

/* Phase 6: READY, with the fds of the pools' CUDA VMM segments (made or
 * imported by ifd_engine_model_from) for the router to hold: the global
 * pool's first, then the local pool's — each pool whose kv_device segment
 * is VMM memory, as the router reads the kinds back from the metadata
 * (daemon/supervisor.c). */
static int ifd__send_ready(ifd__srv_t *s)
{
    const ifd_wire_hello_t *h = &s->hello.u.hello;
    const ifd_model_config_t *cfg = ifd_model_config(s->model);
    ifd_kvpool_params_t geo;
    ifd_kvpool_geometry(s->pool, &geo);
    s->n_blocks = (uint64_t)geo.n_blocks;
    ifd_wire_msg_t ready = {.type = IFD_WIRE_READY};
    ifd_wire_ready_t *r = &ready.u.ready;
    r->slot = h->slot;
    r->pid = (int32_t)getpid();
    r->model_name = (char *)cfg->name;
    r->arch = (char *)cfg->arch_name;
    r->n_vocab = cfg->n_vocab;
    r->n_ctx = cfg->n_ctx_train;
    r->backend = (char *)s->be->ops->name;
    r->device_name = s->devname;
    r->max_seqs = (uint32_t)s->ep.max_seqs;
    r->max_batched_tokens = (uint32_t)s->ep.max_batched_tokens;
    r->kv = h->kv;
    r->kv.n_blocks = (uint64_t)geo.n_blocks;
    ifd_serve_vision_ready(s->vis, &r->vision);
    ifd__queue(s, &ready);
    int kv_fds[2], n_kv = 0;
    ifd_kvpool_t *const pools[2] = {s->pool, s->lpool};
    for (int i = 0; i < 2; i++) {
        ifd_kvpool_params_t pg;
        if (!pools[i])
            continue;
        ifd_kvpool_geometry(pools[i], &pg);
        int fd = pg.kind[h->kv_device] == IFD_KVSEG_CUDA_VMM
                     ? ifd_kvpool_data_fd(pools[i], (int)h->kv_device)
                     : -1;
        if (fd >= 0)
            kv_fds[n_kv++] = fd;
    }
    int rc = ifd__flush_fds(s, kv_fds, n_kv);
    if (rc)
        return rc;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (strcmp(s->be->ops->name, "cpu") != 0)
        IFD_INFO("worker %u ready: %s on %s, CUDA_VISIBLE_DEVICES=%s, KV pool device %u",
                 h->slot, cfg->name, s->devname, cvd ? cvd : "(unset)", h->kv_device);
    else
        IFD_INFO("worker %u ready: %s on %s", h->slot, cfg->name, s->devname);
    return 0;
}

/* One frame from the router in the serving loop; *done on SHUTDOWN. */
static void ifd__handle_frame(ifd__srv_t *s, ifd_wire_msg_t *m, bool *done)
{
    switch (m->type) {
    case IFD_WIRE_ADD:
        ifd__handle_add(s, m);
        break;
    case IFD_WIRE_CANCEL:
        ifd__handle_cancel(s, m->u.cancel.id);
        break;
    case IFD_WIRE_STATS_REQ:
        ifd__send_stats(s, m->u.stats_req.seq, s->n_blocks);
        break;
    case IFD_WIRE_DRAIN:
        s->draining = true;
        break;
    case IFD_WIRE_SHUTDOWN:
        *done = true;
        break;
    case IFD_WIRE_LOG_LEVEL:
        ifd_log_set_level((ifd_log_level_t)m->u.log_level.level);
        IFD_INFO("worker: log level now %s",
                 ifd_log_level_name((ifd_log_level_t)m->u.log_level.level));
        break;
    default:
        IFD_WARN("worker: unexpected %s frame", ifd_wire_type_name(m->type));
        break;
    }
}

/* Handles every frame already decoded (HELLO may have brought more).
 * IFD_EFORMAT when the framing is lost. */
static int ifd__handle_frames(ifd__srv_t *s, bool *done)
{
    ifd_wire_msg_t m;
    int got;
    while ((got = ifd_wire_reader_next_msg(&s->rd, &m)) != 0) {
        if (got < 0) {
            IFD_ERROR("worker: bad frame from the router: %s", ifd_wire_reader_error(&s->rd));
            if (s->rd.err)
                return IFD_EFORMAT; /* framing lost */
            continue;
        }
        ifd__handle_frame(s, &m, done);
        ifd_wire_msg_free(&m);
    }
    return 0;
}

/* Reads what the socket has into the wire reader. 0, 1 when the router
 * closed the connection, or an error (a bad frame is logged). */
static int ifd__read_more(ifd__srv_t *s)
{
    size_t avail;
    void *dst = ifd_wire_reader_prepare(&s->rd, 65536, &avail);
    if (!dst)
        return IFD_ENOMEM;
    ssize_t n = read(s->fd, dst, avail);
    if (n == 0) {
        IFD_INFO("worker: the router closed the connection");
        return 1;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR)
        return -errno;
    if (n > 0 && ifd_wire_reader_commit(&s->rd, (size_t)n) < 0) {
        IFD_ERROR("worker: bad frame from the router: %s", ifd_wire_reader_error(&s->rd));
        return IFD_EFORMAT;
    }
    return 0;
}

/* One engine step, its token events queued as one TOKENS frame. */
static void ifd__step(ifd__srv_t *s)
{
    s->step++;
    ifd_engine_step(s->eng, NULL);
    if (s->drafter && ifd_engine_idle(s->eng)) /* as the engine's: the tiers have them */
        ifd_spec_draft_flush(s->drafter);
    /* a request's FINISHED frame already queued was preceded by its
     * tokens (ifd__on_finish flushes them): appending is in order */
    ifd__queue_tokens(s);
}

/* Phase 7, the engine loop: frames first, then one step when there is
 * work, sleeping in poll(2) only when idle. Returns the exit status: 0
 * after SHUTDOWN, a finished DRAIN or the router hanging up, 1 on an I/O
 * or framing error. */
static int ifd__serve_loop(ifd__srv_t *s)
{
    fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK);
    bool done = false;
    for (;;) {
        if (ifd__handle_frames(s, &done))
            return 1;
        const bool waiting = ifd_serve_vision_pending(s->vis) > 0; /* pictures to encode */
        if (done || (s->draining && ifd_engine_idle(s->eng) && !waiting))
            break;
        if (ifd__flush(s))
            return 1;
        bool idle = ifd_engine_idle(s->eng) && !waiting;
        struct pollfd pfd = {s->fd, POLLIN, 0};
        int pr = poll(&pfd, 1, idle ? -1 : 0);
        if (pr < 0 && errno != EINTR)
            return 1;
        if (pr > 0) {
            int rc = ifd__read_more(s);
            if (rc)
                return rc == 1 ? 0 : 1;
            continue; /* handle the new frames before stepping */
        }
        if (waiting) /* one bounded piece: the running requests still step after it */
            ifd__vision_step(s);
        if (!ifd_engine_idle(s->eng))
            ifd__step(s);
    }
    ifd__flush(s);
    return 0;
}

/* Phase 8: everything the phases made, in reverse, whichever of them ran.
 * The worker's references in the pools go back to them (reclaim): the
 * blocks it published stay cached for the next worker. */
static void ifd__teardown(ifd__srv_t *s)
{
    const int slot = (int)s->hello.u.hello.slot;
    ifd__flush(s);
    ifd_engine_destroy(s->eng); /* frees the constraints before their store */
    ifd_kvdisk_destroy(s->disk); /* writes what is queued: published blocks keep their files */
    ifd_kvhost_destroy(s->host); /* before the pool its gauges are in */
    ifd_spec_draft_destroy(s->drafter); /* after the engine, which releases its states */
    ifd_serve_vision_destroy(s->vis);   /* before the backend that holds its weights */
    ifd_gstore_destroy(s->gstore);
    ifd_vocab_destroy(s->vocab);
    ifd_engine_model_free(&s->em);
    if (s->pool)
        ifd_kvpool_reclaim(s->pool, slot);
    ifd_kvpool_destroy(s->pool);
    if (s->lpool)
        ifd_kvpool_reclaim(s->lpool, slot);
    ifd_kvpool_destroy(s->lpool);
    ifd_tokenizer_destroy(s->tok);
    ifd_model_destroy(s->draft);
    ifd_model_destroy(s->model);
    if (s->be)
        s->be->ops->destroy(s->be);
    for (int i = 0; i < s->nfds; i++)
        close(s->fds[i]);
    ifd_wire_msg_free(&s->hello);
    ifd_wire_reader_close(&s->rd);
    ifd_buf_free(&s->out);
    free(s->ev);
    free(s->tops);
}

int ifd_worker_serve(const ifd_serve_opts_t *o)
{
    ifd__srv_t s;
    memset(&s, 0, sizeof s);
    s.fd = o->fd;
    s.status = 1;
    s.frame_budget = ifd__frame_budget();
    s.max_logprobs = o->max_logprobs;
    ifd_wire_reader_init(&s.rd, 0);
    if (!ifd__handshake(&s) && !ifd__load(&s, o) && !ifd__size_pool(&s) && !ifd__attach_pools(&s) &&
        !ifd__start_disk(&s, o) && !ifd__start_host(&s, o) && !ifd__start_engine(&s, o) &&
        !ifd__send_ready(&s))
        s.status = ifd__serve_loop(&s);
    ifd__teardown(&s);
    return s.status;
}
