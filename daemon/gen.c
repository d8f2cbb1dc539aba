/*
 * gen.c — see gen.h.
 *
 * A request (ifd_gen_t) has one choice per (prompt, sample) pair, each with
 * its router sequence and its text (textout.h: detokenizing, stop strings,
 * what may be streamed, tool calls and the finish reason — the request's
 * rules are made once, in ifd__start). This file moves the bytes: a
 * matched stop string finishes the choice with "stop" and releases
 * (cancels) its sequence at once; streams send what textout releases.
 *
 * Prompt logprobs (vLLM's prompt_logprobs, completions echo + logprobs) are
 * computed once per prompt, by its first sample's sequence, and kept once
 * (ifd__plp_t); their JSON is written once too and shared by the prompt's
 * choices. A streaming echo + logprobs choice sends its echo chunk (prompt
 * text and prompt logprobs) first: the other samples hold their text back
 * until the first sample's sequence has delivered the prompt's logprobs,
 * which the router guarantees is before that sequence's first token.
 *
 * Size: a non-streamed response is bounded by max_response_bytes. The
 * request is refused up front (400) when what its answer must hold is
 * already over (ifd_oai_response_min_bytes); the same lower bound grows with
 * each token's logprobs and ends the request with a 400 once over, so
 * memory never grows past the limit for long; and the writer stops at it.
 * The response is written on the thread pool (it grows with the request:
 * never on the loop) into one buffer the connection then takes.
 *
 * Lifetime rules: the gen is freed by ifd__gen_free only — when its
 * response is complete, its client went away (and no threadpool job is
 * pending), or the daemon aborts it. Router callbacks may free it: they
 * release every sequence first, so the router never calls into freed
 * memory afterwards.
 */
#include "gen.h"

#include "error.h"
#include "hash.h"
#include "ids.h"
#include "images.h"
#include "log.h"
#include "outcheck.h"
#include "prompt.h"
#include "proto/responses.h"
#include "proto/sse.h"
#include "reply.h"
#include "textout.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define IFD__MAX_CHOICES 256

/* Responses (and a stream's waiting chunks) whose text and logprobs are
 * smaller are written on the loop (well under a millisecond): a
 * thread-pool round trip would only delay them, and the tokenizing jobs
 * that share the pool. */
#define IFD__BUILD_INLINE_BYTES (64u << 10)

/* A generated token's alternatives past this many (vLLM's max_logprobs
 * above OpenAI's 20, up to the vocabulary) are kept as the worker sent them
 * (ids and logprobs, a copy in the choice's arena) and decoded — each id's
 * string looked up — where the chunk or the response is written
 * (ifd__lp_resolve): on the thread pool when large. The loop's work per
 * token is then a copy of the frame's decoded entries, no lookup. */
#define IFD__LP_DEFER 20u

/* A token with more deferred alternatives than this is never decoded on
 * the loop: its chunk's estimate (16 bytes an alternative, ifd__lp_bytes)
 * alone reaches IFD__BUILD_INLINE_BYTES, which sends it to the pool. */
#define IFD__LP_LOOP_MAX (IFD__BUILD_INLINE_BYTES / 16u)

/* One deferred token's alternatives (parallel to a choice's lp entries). */
typedef struct {
    const ifd_wire_top_t *top; /* the worker's entries, in the choice's lpa */
    uint32_t n;
    int32_t token; /* the sampled token (logprob_token_ids: first, once) */
    bool pending;  /* not decoded yet: the entry's top is NULL until then */
} ifd__lpraw_t;

/* One prompt's logprobs: positions 1 .. n of n_prompt - 1 (v), and the
 * completions echo form over all n_prompt tokens once complete (echo_lp);
 * then, once, their JSON: vLLM's prompt_logprobs array (json) and the echo
 * form's columns (prefix). Shared by the prompt's choices.
 *
 * The loop keeps v's rows as the worker sent them (ids, logprobs, ranks:
 * a copy of each frame, no lookup) — a long prompt at a large k is
 * hundreds of thousands of strings. Their strings (decoded_token) and the
 * echo form are made by whoever writes the rows (ifd__plp_resolve): the
 * response's build, or the stream's echo chunk — on the thread pool when
 * large, as their size estimates count n_strs. a holds those strings and
 * the echo form; it is used only by that writer (the loop adds no rows to
 * a prompt once its rows are written: they are all in by then). */
typedef struct {
    ifd_oai_prompt_logprob_t *v;
    size_t n;
    size_t n_res;    /* rows whose strings are looked up (ifd__plp_resolve) */
    uint64_t n_strs; /* strings v's rows hold (token and alternatives) */
    ifd_arena_t a;
    ifd_oai_logprob_t *echo_lp;
    ifd_buf_t json;
    ifd_oai_lp_prefix_t prefix;
    bool has_prefix;
#ifdef IFD_TEST_HOOKS
    uint64_t loop_strs; /* strings looked up on the loop's thread (ifd__test_plp_off_loop) */
#endif
} ifd__plp_t;

typedef struct {
    ifd_gen_t *g;
    uint32_t index;
    uint32_t prompt;
    ifd_rseq_t *seq;    /* NULL once finished or released */
    ifd_textout_t text; /* its text (textout.h); text.n_tokens: completion tokens */
    bool done;
    const char *finish; /* "stop" | "length" | "tool_calls" once done */
    bool cut;           /* done at max_tokens */
    uint32_t cached;
    ifd_oai_logprob_t *lp;
    ifd__lpraw_t *raw; /* [cap_lp]: lp[i]'s deferred alternatives (IFD__LP_DEFER) */
    size_t n_lp, cap_lp, lp_sent;
    /* the alternatives and token strings of lp's entries; a stream's chunk
     * takes it with the entries it carries (ifd__queue), so a stream holds
     * only what it has not sent */
    ifd_arena_t lpa;
    ifd_tokens_t ids;     /* return_token_ids: every id sampled (FINISHED's stop id too) */
    size_t ids_sent;      /* streams: ids already in a chunk */
    bool prompt_ids_sent; /* streams: prompt_token_ids went out (chat: choice 0 only) */
    uint64_t t_last_ns;
    uint64_t t_sched_ns, t_first_ns; /* dispatched to a worker, first token (metrics) */
    bool echoed; /* streams: its echo chunk is sent (echo + logprobs: it held its text till then) */
} ifd__choice_t;

struct ifd_gen {
    ifd_api_t *api;
    ifd_gen_t *prev, *next;
    ifd_http_conn_t *conn; /* NULL once the client is gone */
    ifd_arena_t arena;
    ifd_oai_request_t req;
    ifd_oai_kind_t kind;     /* how the request is served: chat for /v1/responses too */
    ifd_oai_kind_t api_kind; /* how it is answered (ifd_oai_meta_t.kind) */
    ifd_oai_usage_t live;    /* continuous_usage_stats: the usage so far (streams) */
    uint32_t client;         /* who sent it (ifd__client_id) */
    uint64_t t_arrival_ns;
    bool first_token_seen;

    /* tokenizing on the threadpool */
    uv_work_t work;
    bool work_pending;
    bool reserved; /* counted in api->n_tokenizing */
    bool running;  /* counted in api->n_running */
    bool aborted;
    /* set when the client leaves: the job's template rendering and grammar
     * building stop at their next check (read by the threadpool's thread) */
    atomic_int cancel;
    int32_t *gwords; /* the compiled grammar handed to the worker (arena), or NULL */
    size_t n_gwords;
    /* the schemas outputs are checked against (a reference, shared with gcache.h; NULL:
     * none): {"output": response_format's schema (req.so_check), "tools": {name: the
     * parameters of each enforced tool (ifd_oai_tool_enforced)}} */
    json_t *checks;
    uint32_t n_checks;   /* output checks on the thread pool (outcheck.h): each holds g */
    ifd_tokens_t *ptoks; /* per prompt */
    /* chat with images: what they are held to (read at admission), their
     * pictures (decoded by the job; kept until the request is freed, so a
     * re-dispatched sequence re-sends them: the router borrows them) */
    ifd_images_setup_t img_setup;
    ifd_images_t images;
    char **echo;         /* per prompt: text to echo (completions) */
    size_t *echo_len;
    ifd__plp_t *plp;  /* per prompt, when prompt logprobs are wanted (arena) */
    uint32_t plp_top; /* alternatives asked of the worker */
    int work_rc;
    ifd_oai_error_t work_err;

    /* non-streamed: the response's size (max_response_bytes, read at start) */
    uint64_t size_limit;      /* 0: none (streams) */
    uint64_t size_min;        /* what the answer must hold so far (ifd_oai_*_min_bytes) */
    uint64_t lp_deferred;     /* alternatives kept undecoded so far (ifd__add_logprob) */
    struct ifd__build *build; /* while the response is written on the thread pool (arena) */

    ifd_textout_rules_t rules; /* every choice's text obeys them (ifd__start) */

    size_t n_prompts; /* 1 for chat */
    uint32_t n_choices;
    uint32_t n_done;
    bool in_start; /* ifd__start is submitting: completion waits */
    bool complete_pending;
    bool counted; /* its tokens are in the metrics (ifd__count_tokens) */
    ifd__choice_t *ch;

    bool store; /* /v1/responses: keep the Response once answered (ifd__keep) */
    /* /v1/responses background: answered as soon as its sequences are
     * queued (ifd__detach; streamed: its stream, while the client reads),
     * then runs without a connection and is kept when it ends; counted in
     * api->n_background from admission */
    bool background;
    bool dispatched; /* a sequence reached a worker: "in_progress", not "queued" */
    bool ids_failed;                  /* a tool call id could not be drawn (ifd__call_id): a 500 */
    char owner[IFD_API_IDENTITY_MAX]; /* the client's identity: its stored Responses' owner */
    char id[IFD_OAI_ID_MAX];
    int64_t created;
    ifd_oai_stream_t stream;
    ifd_arena_t sarena; /* the stream state's: used only by whoever runs its chunks */
    bool streaming;     /* headers sent */
    ifd_buf_t out;
    /* streams: the chunks waiting to be written, in order (ifd__queue), what
     * they hold at least (ops_est, bounded by output_buffer_bytes), and the
     * job that writes large ones on the thread pool: while it runs it owns
     * stream and sarena, and every later chunk waits behind it */
    struct ifd__op *ops_head, *ops_tail;
    uint64_t ops_est;
    struct ifd__cjob {
        uv_work_t work;
        struct ifd__op *ops; /* what it writes, in order (taken from the queue) */
        ifd_buf_t out;
        int rc;
    } cjob;
    bool cjob_pending;
    bool end_owed;  /* ifd__complete waited for the chunks before its end */
    bool overflown; /* the waiting chunks passed output_buffer_bytes: ending with an error */
    bool failed;
    ifd_oai_error_t err;
};

static void ifd__gen_free(ifd_gen_t *g);
static void ifd__drop(ifd_gen_t *g);
static void ifd__complete(ifd_gen_t *g);
static void ifd__usage(const ifd_gen_t *g, ifd_oai_usage_t *u);

/* ---- helpers ------------------------------------------------------------------------------ */

/* The client a request counts to for fairness (router.h, worker/engine.h:
 * "Fairness"), as the number the router and the engine compare: a hash of
 * the client's identity (ifd_api_identity: "uid:N" on the Unix socket from
 * SO_PEERCRED, "key:NAME" on TCP, one name for every TCP client without API
 * keys) — the same identity that owns its stored Responses. Two identities
 * that collide share one share. */
static uint32_t ifd__client_id(const char *owner)
{
    return (uint32_t)ifd_hash_bytes(owner, strlen(owner));
}

static double ifd__secs(uint64_t a_ns, uint64_t b_ns)
{
    return b_ns > a_ns ? (double)(b_ns - a_ns) / 1e9 : 0.0;
}

static void ifd__fail(ifd_gen_t *g, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void ifd__fail(ifd_gen_t *g, int status, const char *code, const char *fmt, ...)
{
    if (g->failed)
        return;
    g->failed = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ifd_oai_error_set(&g->err, status, NULL, code, NULL, "%s", msg);
}

/* ---- output ------------------------------------------------------------------------------- */

/* A streamed background Response whose client left or stopped reading
 * runs on without it (its events are dropped; it is polled by id). */
static void ifd__stream_orphan(ifd_gen_t *g)
{
    IFD_INFO("gen %s: the client of a background Response left: it runs on", g->id);
    g->conn = NULL;
}

/* After a stream write that returned rc: a failed write orphans a
 * background Response (the connection is being closed, without its abort
 * call) and cancels any other request. false: g freed. */
static bool ifd__flushed(ifd_gen_t *g, int rc)
{
    if (rc && g->background) {
        ifd_http_set_abort(g->conn, NULL, NULL);
        ifd__stream_orphan(g);
        return true;
    }
    if (rc) {
        IFD_INFO("gen %s: client stopped reading or left: cancelling", g->id);
        g->conn = NULL;
        ifd__drop(g);
        return false;
    }
    return true;
}

/* Sends what g->out holds (streams). false: the client is gone (g freed). */
static bool ifd__flush(ifd_gen_t *g)
{
    if (!g->out.len)
        return true;
    if (!g->conn && g->background) {
        ifd_buf_clear(&g->out);
        return true;
    }
    int rc = g->conn ? ifd_http_stream_write(g->conn, g->out.data, g->out.len) : IFD_ECLOSED;
    ifd_buf_clear(&g->out);
    return ifd__flushed(g, rc);
}

/* Sends bytes the connection takes (a chunk job's). false: g freed. */
static bool ifd__flush_take(ifd_gen_t *g, ifd_buf_t *b)
{
    if (!b->len || (!g->conn && g->background)) {
        ifd_buf_free(b);
        return true;
    }
    int rc = g->conn ? ifd_http_stream_write_buf(g->conn, b) : IFD_ECLOSED;
    ifd_buf_free(b);
    return ifd__flushed(g, rc);
}

static bool ifd__echo_lp(const ifd_gen_t *g);
static ifd_oai_logprob_t *ifd__echo_logprobs(ifd_gen_t *g, size_t p);
static uint64_t ifd__plp_strs(const ifd_gen_t *g, size_t p);

/* ---- a stream's chunks -------------------------------------------------------------------

 * Every chunk after the stream's start is an op: a copy of what it says
 * (text, logprobs, ids, usage), made on the loop when the choice moves on,
 * queued in order. The queue is written on the loop while what waits is
 * small (IFD__BUILD_INLINE_BYTES, the non-streamed responses' bound), else
 * by one job on the thread pool (ifd__cjob_*): a streamed token's chunk
 * grows with its alternatives (~3 MB at top_logprobs -1), never written on
 * the loop. One job at a time per stream, owning the stream state while it
 * runs; what comes meanwhile waits behind it, so chunks keep their order.
 * What waits is bounded: past output_buffer_bytes (the bound of a client's
 * unread output) the stream ends with an error (ifd__overflow). */

typedef enum { IFD__OP_DELTA, IFD__OP_FINISH, IFD__OP_TOOLS, IFD__OP_ECHO } ifd__op_kind_t;

typedef struct ifd__op {
    struct ifd__op *next;
    ifd__op_kind_t kind;
    uint32_t prompt;      /* ECHO: whose prompt logprobs (the prefix) it carries */
    ifd_oai_choice_t oc;  /* points into the copies below or g's lasting memory */
    ifd_oai_usage_t live; /* continuous_usage_stats: the usage when it was made */
    ifd_arena_t lpa;      /* its logprobs' alternatives and strings (the choice's) */
    char *text;           /* copies (malloc) */
    ifd_oai_logprob_t *lp;
    ifd__lpraw_t *raw; /* lp's deferred alternatives (NULL: none), decoded by ifd__op_run */
    int32_t *ids;
    uint64_t est; /* about its bytes (ifd__lp_bytes) */
} ifd__op_t;

static void ifd__op_free(ifd__op_t *op)
{
    while (op) {
        ifd__op_t *next = op->next;
        ifd_arena_close(&op->lpa);
        free(op->text);
        free(op->lp);
        free(op->raw);
        free(op->ids);
        free(op);
        op = next;
    }
}

static bool ifd__live(const ifd_gen_t *g)
{
    return g->req.include_usage && g->req.continuous_usage;
}

static void ifd__lp_resolve(ifd_gen_t *g, ifd_arena_t *a, ifd_oai_logprob_t *lp, ifd__lpraw_t *raw,
                            size_t n);

/* Writes one chunk into out (loop, or the job that owns the stream): its
 * deferred alternatives decoded first (into its own arena). ECHO writes its
 * prompt's logprobs prefix first, once for the prompt's choices. 0 or the
 * ifd_oai_stream_* error. */
static int ifd__op_run(ifd_gen_t *g, ifd__op_t *op, ifd_buf_t *out)
{
    if (op->raw)
        ifd__lp_resolve(g, &op->lpa, op->lp, op->raw, op->oc.n_logprobs);
    ifd_oai_choice_t oc = op->oc;
    if (op->kind == IFD__OP_ECHO && ifd__echo_lp(g)) {
        /* the prompt's strings looked up and its echo form made here, once */
        ifd__plp_t *P = &g->plp[op->prompt];
        const ifd_oai_logprob_t *elp = ifd__echo_logprobs(g, op->prompt);
        if (!P->has_prefix && elp)
            P->has_prefix = ifd_oai_lp_prefix_build(&P->prefix, elp, g->ptoks[op->prompt].n) == 0;
        oc.logprobs_prefix = P->has_prefix ? &P->prefix : NULL;
        oc.has_logprobs = oc.logprobs_prefix != NULL;
        if (!oc.text_len && !oc.has_logprobs && !oc.prompt_token_ids)
            return 0;
    }
    if (ifd__live(g))
        g->stream.live_usage = &op->live;
    int rc;
    switch (op->kind) {
    case IFD__OP_FINISH:
        rc = ifd_oai_stream_finish(&g->stream, out, &oc);
        break;
    case IFD__OP_TOOLS:
        rc = ifd_oai_stream_tool_calls(&g->stream, out, &oc);
        break;
    default:
        rc = ifd_oai_stream_delta(&g->stream, out, &oc);
        break;
    }
    if (ifd__live(g))
        g->stream.live_usage = &g->live;
    return rc;
}

#ifdef IFD_TEST_HOOKS
/* INFERD_TEST_CHUNK_GATE=PATH: a chunk job creates PATH.started, then waits
 * (at most 120 s) until PATH exists — an integration test holds a large
 * chunk's writing to show that the loop serves other streams meanwhile. */
static void ifd__test_chunk_gate(void)
{
    const char *path = getenv("INFERD_TEST_CHUNK_GATE");
    if (!path || !*path)
        return;
    char started[4096];
    snprintf(started, sizeof started, "%s.started", path);
    FILE *f = fopen(started, "w");
    if (f)
        fclose(f);
    for (int i = 0; i < 12000 && access(path, F_OK) != 0; i++)
        uv_sleep(10);
}
#endif

/* Thread pool: the job's chunks, in order. */
static void ifd__cjob_cb(uv_work_t *w)
{
    ifd_gen_t *g = w->data;
#ifdef IFD_TEST_HOOKS
    ifd__test_chunk_gate();
#endif
    int first = 0;
    for (ifd__op_t *op = g->cjob.ops; op; op = op->next) {
        int rc = ifd__op_run(g, op, &g->cjob.out);
        if (rc && !first)
            first = rc;
    }
    g->cjob.rc = first;
}

static bool ifd__busy(const ifd_gen_t *g);
static bool ifd__pump(ifd_gen_t *g);

static void ifd__after_cjob_cb(uv_work_t *w, int status)
{
    (void)status; /* never cancelled: the job always runs */
    ifd_gen_t *g = w->data;
    g->cjob_pending = false;
    ifd__op_free(g->cjob.ops);
    g->cjob.ops = NULL;
    if (g->cjob.rc)
        IFD_ERROR("gen %s: building a chunk: %s", g->id, ifd_strerror(g->cjob.rc));
    if (g->aborted || (!g->conn && !g->background)) {
        ifd_buf_free(&g->cjob.out);
        if (!ifd__busy(g))
            ifd__gen_free(g);
        return;
    }
    if (ifd__flush_take(g, &g->cjob.out))
        ifd__pump(g);
}

/* Sends the waiting chunks: written now when small (or when the pool
 * refuses the job), else by a job; then the end ifd__complete waited for.
 * false: g freed. */
static bool ifd__pump(ifd_gen_t *g)
{
    if (g->cjob_pending)
        return true;
    if (g->out.len && !ifd__flush(g))
        return false;
    if (g->ops_head) {
        ifd__op_t *ops = g->ops_head;
        bool large = g->ops_est >= IFD__BUILD_INLINE_BYTES;
        g->ops_head = g->ops_tail = NULL;
        g->ops_est = 0;
        if (large) {
            g->cjob.ops = ops;
            g->cjob.rc = 0;
            g->cjob.work.data = g;
            uv_loop_t *loop = g->api->loop;
            if (uv_queue_work(loop, &g->cjob.work, ifd__cjob_cb, ifd__after_cjob_cb) == 0) {
                g->cjob_pending = true;
                return true;
            }
            g->cjob.ops = NULL;
        }
        for (ifd__op_t *op = ops; op; op = op->next) {
            int rc = ifd__op_run(g, op, &g->out);
            if (rc)
                IFD_ERROR("gen %s: building a chunk: %s", g->id, ifd_strerror(rc));
        }
        ifd__op_free(ops);
        if (!ifd__flush(g))
            return false;
    }
    if (g->end_owed) {
        g->end_owed = false;
        ifd__complete(g); /* frees g (a stream) */
        return false;
    }
    return true;
}

/* The chunks waiting behind a job passed output_buffer_bytes: the router
 * would hold ever more of them. The request ends — its sequences released,
 * what waits dropped — with an error after the job's chunk. */
static void ifd__overflow(ifd_gen_t *g)
{
    IFD_WARN("gen %s: %llu bytes of chunks waited to be written, past output_buffer_bytes: "
             "ending the stream",
             g->id, (unsigned long long)g->ops_est);
    ifd__fail(g, 503, NULL,
              "The stream fell behind: its chunks waiting to be written passed this server's "
              "output_buffer_bytes (%llu bytes); lower 'top_logprobs' or raise "
              "output_buffer_bytes.",
              (unsigned long long)g->api->cfg->output_buffer_bytes);
    g->overflown = true;
    ifd__op_free(g->ops_head);
    g->ops_head = g->ops_tail = NULL;
    g->ops_est = 0;
    for (uint32_t i = 0; i < g->n_choices; i++) {
        ifd__choice_t *c = &g->ch[i];
        if (c->seq) {
            ifd_router_release(g->api->router, c->seq);
            c->seq = NULL;
        }
        if (!c->done) {
            c->done = true;
            g->n_done++;
            g->api->metrics->finished[IFD_FIN_ERROR]++;
        }
    }
    g->end_owed = true; /* ifd__pump ends the stream once the job is back */
}

/* About the bytes a token's logprobs take in a chunk, alternatives
 * included (ifd_oai_token_min_bytes counts none for completions, whose
 * dict may merge keys: a bound, not the size this decision needs);
 * deferred ones (raw, may be NULL) 16 bytes each, their text unknown yet. */
static uint64_t ifd__lp_bytes(const ifd_oai_logprob_t *lp, const ifd__lpraw_t *raw)
{
    uint64_t n = 32 + (uint64_t)lp->len;
    if (raw && raw->pending)
        return n + 16 * (uint64_t)raw->n;
    for (size_t k = 0; k < lp->n_top; k++)
        n += 16 + (uint64_t)lp->top[k].len;
    return n;
}

/* Queues a chunk of choice c (NULL: none of a choice's logprobs) saying
 * what *oc says: its text, logprobs and ids copied, a choice's logprobs
 * arena taken with them. 0 or IFD_ENOMEM (nothing queued). */
static int ifd__queue(ifd_gen_t *g, ifd__op_kind_t kind, const ifd_oai_choice_t *oc,
                      ifd__choice_t *c)
{
    if (g->overflown)
        return 0;
    ifd__op_t *op = calloc(1, sizeof *op);
    if (!op)
        return IFD_ENOMEM;
    op->kind = kind;
    op->oc = *oc;
    op->est = 64 + oc->text_len + 12 * oc->n_token_ids + 12 * oc->n_prompt_token_ids;
    if (oc->text_len && !(op->text = malloc(oc->text_len)))
        goto oom;
    if (oc->text_len)
        memcpy(op->text, oc->text, oc->text_len);
    op->oc.text = op->text;
    if (oc->n_logprobs) {
        if (!(op->lp = malloc(oc->n_logprobs * sizeof *op->lp)))
            goto oom;
        memcpy(op->lp, oc->logprobs, oc->n_logprobs * sizeof *op->lp);
        /* the deferred alternatives of c's entries (oc->logprobs is in c->lp) */
        const ifd__lpraw_t *raw = c && c->raw ? c->raw + (oc->logprobs - c->lp) : NULL;
        if (raw) {
            if (!(op->raw = malloc(oc->n_logprobs * sizeof *op->raw)))
                goto oom;
            memcpy(op->raw, raw, oc->n_logprobs * sizeof *op->raw);
        }
        for (size_t i = 0; i < oc->n_logprobs; i++)
            op->est += ifd__lp_bytes(&op->lp[i], raw ? &raw[i] : NULL);
    }
    op->oc.logprobs = op->lp;
    if (oc->n_token_ids) {
        if (!(op->ids = malloc(oc->n_token_ids * sizeof *op->ids)))
            goto oom;
        memcpy(op->ids, oc->token_ids, oc->n_token_ids * sizeof *op->ids);
    }
    op->oc.token_ids = op->ids;
    for (size_t i = 0; i < oc->n_tool_calls; i++)
        op->est += 64 + (oc->tool_calls[i].arguments ? strlen(oc->tool_calls[i].arguments) : 0);
    if (kind == IFD__OP_ECHO && ifd__echo_lp(g)) {
        /* the prompt's rows, their strings not looked up yet (ifd__op_run
         * does, and makes the echo form): 32 bytes a token, 16 a string */
        size_t p = oc->index / g->req.n;
        op->est += 32 * (uint64_t)g->ptoks[p].n + 16 * ifd__plp_strs(g, p);
    }
    op->prompt = oc->index / g->req.n;
    if (ifd__live(g))
        op->live = g->live;
    if (c) { /* the entries it carries are all the arena holds (sent ones are dropped) */
        op->lpa = c->lpa;
        ifd_arena_init(&c->lpa, 0);
    }
    if (g->ops_tail)
        g->ops_tail->next = op;
    else
        g->ops_head = op;
    g->ops_tail = op;
    g->ops_est += op->est;
    if (g->cjob_pending && g->ops_est > g->api->cfg->output_buffer_bytes)
        ifd__overflow(g);
    return 0;
oom:
    ifd__op_free(op);
    return IFD_ENOMEM;
}

/* A streamed choice's logprobs are in a chunk (or dropped): its entries
 * start over (their arena went with the chunk, or is emptied). */
static void ifd__lp_sent(ifd__choice_t *c)
{
    c->n_lp = c->lp_sent = 0;
    ifd_arena_reset(&c->lpa);
}

/* A streaming echo + logprobs choice whose echo chunk has not gone out
 * holds its text and its end back (ifd__release_echo sends them). */
static bool ifd__held(const ifd__choice_t *c)
{
    return c->g->streaming && !c->echoed && ifd__echo_lp(c->g);
}

/* return_token_ids in a chunk of choice c: the ids since its last chunk,
 * and the prompt's on its first (chat: in the stream's first chunk, the
 * role chunk ifd__begin_stream sends). */
static void ifd__chunk_ids(const ifd__choice_t *c, ifd_oai_choice_t *oc)
{
    const ifd_gen_t *g = c->g;
    if (!g->req.return_token_ids)
        return;
    oc->has_token_ids = true;
    oc->token_ids = c->ids.ids + c->ids_sent;
    oc->n_token_ids = c->ids.n - c->ids_sent;
    if (!c->prompt_ids_sent && (g->kind != IFD_OAI_CHAT || c->index == 0)) {
        oc->prompt_token_ids = g->ptoks[c->prompt].ids;
        oc->n_prompt_token_ids = g->ptoks[c->prompt].n;
    }
}

/* Streams text[emitted .. upto) (and new logprobs); with finish, the last
 * chunk. false: g freed. */
static bool ifd__emit(ifd__choice_t *c, size_t upto, const char *finish)
{
    ifd_gen_t *g = c->g;
    if (!g->streaming || ifd__held(c))
        return true;
    ifd_oai_choice_t oc;
    memset(&oc, 0, sizeof oc);
    oc.index = c->index;
    oc.text = ifd_textout_take(&c->text, upto, &oc.text_len);
    if (g->req.logprobs) {
        oc.has_logprobs = c->n_lp > c->lp_sent;
        oc.logprobs = c->lp + c->lp_sent;
        oc.n_logprobs = c->n_lp - c->lp_sent;
    }
    ifd__chunk_ids(c, &oc);
    if (!finish && !(oc.text_len || oc.n_logprobs || oc.n_token_ids || oc.prompt_token_ids))
        return true;
    if (ifd__live(g))
        ifd__usage(g, &g->live);
    oc.finish_reason = finish;
    int rc = ifd__queue(g, finish ? IFD__OP_FINISH : IFD__OP_DELTA, &oc, c);
    if (rc)
        IFD_ERROR("gen %s: building a chunk: %s", g->id, ifd_strerror(rc));
    ifd__lp_sent(c);
    c->ids_sent = c->ids.n;
    c->prompt_ids_sent |= oc.prompt_token_ids != NULL;
    return ifd__pump(g);
}

/* Streams the end of a finished choice: the rest of its text (tool calls
 * as deltas) and its last chunk; nothing while it is held. false: g freed. */
static bool ifd__send_end(ifd__choice_t *c)
{
    ifd_gen_t *g = c->g;
    ifd_textout_t *t = &c->text;
    if (!g->streaming || ifd__held(c))
        return true;
    if (!t->n_calls)
        return ifd__emit(c, t->text.len, c->finish);
    /* content before the calls, the calls as deltas, then the end */
    if (t->content_len > t->emitted && !ifd__emit(c, t->content_len, NULL))
        return false;
    ifd_oai_choice_t oc;
    memset(&oc, 0, sizeof oc);
    oc.index = c->index;
    oc.tool_calls = t->calls;
    oc.n_tool_calls = t->n_calls;
    if (ifd__queue(g, IFD__OP_TOOLS, &oc, NULL))
        IFD_ERROR("gen %s: building the tool-call chunks failed", g->id);
    ifd__lp_sent(c);
    return ifd__emit(c, t->emitted, c->finish);
}

/* The end of a finished choice: counted; for streams its last chunk (none
 * for an output that failed its check: the stream ends with the error).
 * false: g freed. */
static bool ifd__choice_end(ifd__choice_t *c, bool length, bool valid)
{
    ifd_gen_t *g = c->g;
    g->n_done++;
    ifd_metrics_t *m = g->api->metrics;
    m->finished[!valid ? IFD_FIN_ERROR : length ? IFD_FIN_LENGTH : IFD_FIN_STOP]++;
    ifd_metrics_seq_t ms = {.arrival_ns = g->t_arrival_ns,
                            .scheduled_ns = c->t_sched_ns,
                            .first_token_ns = c->t_first_ns,
                            .last_token_ns = c->t_last_ns,
                            .end_ns = uv_hrtime(),
                            .prompt_tokens = (uint32_t)g->ptoks[c->prompt].n,
                            .generation_tokens = c->text.n_tokens,
                            .max_tokens = g->req.max_tokens};
    ifd_metrics_seq_done(m, &ms);
    if (valid && !ifd__send_end(c))
        return false;
    if (g->n_done == g->n_choices) {
        ifd__complete(g);
        return false;
    }
    return true;
}

/* The verdict of a choice's checks (rc, item, why: outcheck.h). Invalid —
 * or not checkable (a number beyond a double's range, a pattern past its
 * match limit: what the grammar left out would go unchecked) —: g fails
 * with OpenAI's 500 for invalid content (a client's retry samples again)
 * and false is returned. */
static bool ifd__check_verdict(ifd__choice_t *c, int rc, const ifd_outcheck_item_t *item,
                               const char *why)
{
    ifd_gen_t *g = c->g;
    if (!rc)
        return true;
    char msg[256], what[128] = "";
    if (why[0])
        snprintf(msg, sizeof msg, "%s", why);
    else
        snprintf(msg, sizeof msg, "(the value): %s", ifd_strerror(rc));
    if (item && item->what) /* a tool call's arguments */
        snprintf(what, sizeof what, "'s call to '%.64s'", item->what);
    IFD_INFO("gen %s: choice %u%s: output %s for its schema: %s", g->id, c->index, what,
             rc == IFD_EINVAL ? "invalid" : "not checkable", msg);
    g->api->metrics->invalid_outputs++;
    ifd__fail(g, 500, "invalid_content",
              "The model produced invalid content: choice %u%s %s %s at %s (checked after "
              "generation). Consider modifying your prompt if you are seeing this error "
              "persistently.",
              c->index, what, rc == IFD_EINVAL ? "does not satisfy" : "cannot be checked against",
              what[0] ? "its function's parameters schema" : "the JSON Schema", msg);
    return false;
}

static bool ifd__busy(const ifd_gen_t *g);

/* A choice's checks are back from the thread pool: its end, unless the
 * request was given up meanwhile (then the last job out frees g). */
static void ifd__checked_cb(ifd_outcheck_t *job, int rc, const ifd_outcheck_item_t *item,
                            const char *why, void *ud)
{
    (void)job;
    ifd__choice_t *c = ud;
    ifd_gen_t *g = c->g;
    g->n_checks--;
    if (g->aborted || rc == IFD_ECANCELED) {
        g->api->metrics->finished[IFD_FIN_ABORT]++;
        g->aborted = true;
        if (!ifd__busy(g))
            ifd__gen_free(g);
        return;
    }
    ifd__choice_end(c, c->cut, ifd__check_verdict(c, rc, item, why));
}

/* What a finished choice is checked on (arena; *n 0: nothing): its whole
 * text where the grammar over-approximates response_format's schema
 * (so_check; not when cut at max_tokens: that text is "length" as it is),
 * and each tool call's arguments where its tool is enforced (also the whole
 * calls kept from a forced array cut at max_tokens: they are answered as
 * calls). NULL on OOM. */
static ifd_outcheck_item_t *ifd__check_items(ifd__choice_t *c, size_t *n)
{
    ifd_gen_t *g = c->g;
    const json_t *out = json_object_get(g->checks, "output");
    const json_t *tools = json_object_get(g->checks, "tools");
    ifd_outcheck_item_t *it = ifd_arena_calloc(&g->arena, 1 + c->text.n_calls, sizeof *it);
    *n = 0;
    if (!it)
        return NULL;
    if (g->req.so_check && out && !c->cut)
        it[(*n)++] = (ifd_outcheck_item_t){out, c->text.text.data, c->text.text.len, NULL};
    for (size_t i = 0; tools && i < c->text.n_calls; i++) {
        const ifd_oai_tool_call_t *call = &c->text.calls[i];
        const json_t *params = call->name ? json_object_get(tools, call->name) : NULL;
        if (params && call->arguments)
            it[(*n)++] =
                (ifd_outcheck_item_t){params, call->arguments, strlen(call->arguments), call->name};
    }
    return it;
}

/* A finished choice whose output is checked (ifd__check_items: llguidance's
 * rule for response_format, enforced tools' arguments): checked on the
 * thread pool — the cost grows with the output, never on the loop — the
 * choice ending when it is back (ifd__checked_cb). The schemas were parsed
 * once, with the grammar (ifd__build_grammar). false: g freed. */
static bool ifd__check_output(ifd__choice_t *c)
{
    ifd_gen_t *g = c->g;
    size_t n;
    ifd_outcheck_item_t *items = ifd__check_items(c, &n);
    ifd_outcheck_t *j = items ? ifd_arena_calloc(&g->arena, 1, sizeof *j) : NULL;
    if (!j)
        return ifd__choice_end(c, c->cut, ifd__check_verdict(c, IFD_ENOMEM, NULL, ""));
    if (!n)
        return ifd__choice_end(c, c->cut, true);
    if (ifd_outcheck_queue(g->api->loop, j, items, n, ifd__checked_cb, c) == 0) {
        g->n_checks++;
        return true;
    }
    return ifd__choice_end(c, c->cut, ifd__check_verdict(c, j->rc, &items[j->failed], j->why));
}

/* Marks a choice finished (length: at max_tokens) and ends it, after its
 * output check where it has one. false: g freed. */
static bool ifd__choice_done(ifd__choice_t *c, bool length)
{
    ifd_gen_t *g = c->g;
    c->done = true;
    const char *finish = ifd_textout_end(&c->text, length, &g->arena);
    if (g->ids_failed)
        ifd__fail(g, 500, NULL,
                  "A tool call id could not be drawn from the system's random "
                  "number generator.");
    c->finish = finish;
    c->cut = length;
    if (!g->checks || g->failed || (length && !c->text.n_calls))
        return ifd__choice_end(c, length, true);
    return ifd__check_output(c);
}

/* The text changed (ev, from textout): a stop string ends the choice; else
 * stream what is safe. false: g freed. */
static bool ifd__advance(ifd__choice_t *c, int ev, bool final)
{
    ifd_gen_t *g = c->g;
    if (ev == IFD_TEXTOUT_STOP) {
        if (c->seq) {
            ifd_router_release(g->api->router, c->seq);
            c->seq = NULL;
        }
        return ifd__choice_done(c, false);
    }
    if (final || !g->streaming)
        return true;
    size_t upto;
    if (!ifd_textout_ready(&c->text, &upto))
        return true; /* holding what may be a tool call */
    return ifd__emit(c, upto, NULL);
}

/* ---- router callbacks --------------------------------------------------------------------- */

/* A token's raw bytes, copied into g's arena (NULL on OOM; *len 0 for an
 * id without text). */
static const char *ifd__token_str(ifd_gen_t *g, ifd_arena_t *a, int32_t id, size_t *len)
{
    char tmp[256];
    int n = ifd_tokenizer_token_bytes(g->api->tok, id, 0, tmp, sizeof tmp);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof tmp)
        n = (int)sizeof tmp;
    *len = (size_t)n;
    return ifd_arena_strndup(a, tmp, (size_t)n);
}

/* A token as logprobs name it: its raw bytes, or with vLLM's
 * return_tokens_as_token_ids "token_id:<id>" (arena; NULL on OOM). */
static const char *ifd__lp_token(ifd_gen_t *g, ifd_arena_t *a, int32_t id, size_t *len)
{
    if (!g->req.tokens_as_ids)
        return ifd__token_str(g, a, id, len);
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "token_id:%d", (int)id);
    *len = (size_t)n;
    return ifd_arena_strndup(a, tmp, (size_t)n);
}

#ifdef IFD_TEST_HOOKS
/* INFERD_TEST_LP_OFF_LOOP=1: the daemon aborts when the loop's thread
 * decodes a token with more than IFD__LP_LOOP_MAX alternatives, or looks
 * up more than IFD__LP_LOOP_MAX strings of one prompt's logprobs (all its
 * calls together) — an integration test's proof that such decoding
 * happens on the pool only. */
static uv_thread_t ifd__loop_thread;
static bool ifd__loop_thread_set;

static bool ifd__test_on_loop(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("INFERD_TEST_LP_OFF_LOOP");
        on = v && *v && strcmp(v, "0") != 0;
    }
    if (!on || !ifd__loop_thread_set)
        return false;
    uv_thread_t self = uv_thread_self();
    return uv_thread_equal(&self, &ifd__loop_thread);
}

static void ifd__test_lp_off_loop(uint64_t n)
{
    if (n > IFD__LP_LOOP_MAX && ifd__test_on_loop()) {
        IFD_ERROR("test hook: %llu alternatives decoded on the event loop", (unsigned long long)n);
        abort();
    }
}

/* n more strings of prompt P's logprobs looked up (counted on the loop only). */
static void ifd__test_plp_off_loop(ifd__plp_t *P, uint64_t n)
{
    if (!ifd__test_on_loop())
        return;
    P->loop_strs += n;
    if (P->loop_strs > IFD__LP_LOOP_MAX) {
        IFD_ERROR("test hook: %llu prompt logprob strings looked up on the event loop",
                  (unsigned long long)P->loop_strs);
        abort();
    }
}
#endif

/* Completions echo + logprobs: the choice's logprobs start with the prompt's. */
static bool ifd__echo_lp(const ifd_gen_t *g)
{
    return g->kind == IFD_OAI_COMPLETION && g->req.echo && g->req.logprobs;
}

/* The strings prompt p's logprobs look up at most, once written: its rows'
 * (the token and its alternatives), and for the echo form every prompt
 * token's and, with return_tokens_as_token_ids, the alternatives' again.
 * The size estimates count 16 bytes each, so that a writer with more than
 * IFD__LP_LOOP_MAX of them runs on the thread pool. */
static uint64_t ifd__plp_strs(const ifd_gen_t *g, size_t p)
{
    const ifd__plp_t *P = &g->plp[p];
    uint64_t n = P->n_strs;
    if (ifd__echo_lp(g))
        n += g->ptoks[p].n + (g->req.tokens_as_ids ? P->n_strs : 0);
    return n;
}

/* Prompt p's rows' strings (decoded_token: the raw bytes of the token and
 * of each alternative), looked up once into P->a by whoever writes the
 * rows: the response's build or the stream's echo chunk (see ifd__plp_t).
 * 0 or IFD_ENOMEM. */
static int ifd__plp_resolve(ifd_gen_t *g, size_t p)
{
    ifd__plp_t *P = &g->plp[p];
#ifdef IFD_TEST_HOOKS
    uint64_t n = 0;
    for (size_t i = P->n_res; i < P->n; i++)
        n += 1 + P->v[i].n_top;
    ifd__test_plp_off_loop(P, n);
#endif
    for (; P->n_res < P->n; P->n_res++) {
        ifd_oai_prompt_logprob_t *e = &P->v[P->n_res];
        /* the alternatives are this file's (ifd__on_prompt_logprobs' arena) */
        ifd_oai_plp_token_t *top = (ifd_oai_plp_token_t *)e->top;
        if (!(e->tok.bytes = ifd__token_str(g, &P->a, e->tok.id, &e->tok.len)))
            return IFD_ENOMEM;
        for (size_t k = 0; k < e->n_top; k++)
            if (!(top[k].bytes = ifd__token_str(g, &P->a, top[k].id, &top[k].len)))
                return IFD_ENOMEM;
    }
    return 0;
}

/* The echo form of prompt p's logprobs (once, by the rows' writer, in
 * P->a): every prompt token, the first with none, the others with at most
 * top_logprobs alternatives. NULL on OOM. */
static ifd_oai_logprob_t *ifd__echo_logprobs(ifd_gen_t *g, size_t p)
{
    ifd__plp_t *P = &g->plp[p];
    if (P->echo_lp)
        return P->echo_lp;
    if (ifd__plp_resolve(g, p))
        return NULL;
    const ifd_tokens_t *t = &g->ptoks[p];
#ifdef IFD_TEST_HOOKS
    ifd__test_plp_off_loop(P, ifd__plp_strs(g, p) - P->n_strs);
#endif
    ifd_oai_logprob_t *lp = ifd_arena_calloc(&P->a, t->n, sizeof *lp);
    if (!lp)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        lp[i].bytes = ifd__lp_token(g, &P->a, t->ids[i], &lp[i].len);
        if (!lp[i].bytes)
            return NULL;
        if (i == 0 || i > P->n) {
            lp[i].no_logprob = true;
            continue;
        }
        const ifd_oai_prompt_logprob_t *e = &P->v[i - 1];
        lp[i].logprob = e->tok.logprob;
        size_t k = e->n_top < g->req.top_logprobs ? e->n_top : g->req.top_logprobs;
        ifd_oai_top_logprob_t *top = k ? ifd_arena_calloc(&P->a, k, sizeof *top) : NULL;
        if (k && !top)
            return NULL;
        for (size_t j = 0; j < k; j++) {
            top[j] = (ifd_oai_top_logprob_t){e->top[j].bytes, e->top[j].len, e->top[j].logprob};
            if (g->req.tokens_as_ids &&
                !(top[j].bytes = ifd__lp_token(g, &P->a, e->top[j].id, &top[j].len)))
                return NULL;
        }
        lp[i].top = top;
        lp[i].n_top = k;
    }
    P->echo_lp = lp;
    return lp;
}

/* Streaming completions echo: the prompt text (and, with logprobs, the
 * prompt's logprobs, written once for all its choices) as the choice's
 * first chunk. */
static void ifd__send_echo(ifd__choice_t *c)
{
    ifd_gen_t *g = c->g;
    if (c->echoed)
        return;
    c->echoed = true;
    ifd_oai_choice_t oc;
    memset(&oc, 0, sizeof oc);
    oc.index = c->index;
    oc.text = g->echo[c->prompt];
    oc.text_len = g->echo[c->prompt] ? g->echo_len[c->prompt] : 0;
    if (g->req.return_token_ids) { /* vLLM: the prompt's ids with its echo */
        oc.prompt_token_ids = g->ptoks[c->prompt].ids;
        oc.n_prompt_token_ids = g->ptoks[c->prompt].n;
    }
    /* the prompt's logprobs prefix is written with the chunk (ifd__op_run):
     * on the thread pool when large */
    if ((oc.text_len || ifd__echo_lp(g) || oc.prompt_token_ids) &&
        ifd__queue(g, IFD__OP_ECHO, &oc, NULL) == 0)
        c->prompt_ids_sent |= oc.prompt_token_ids != NULL;
}

/* Streaming echo + logprobs: prompt p's logprobs are in (all of them, or
 * its first sample has gone past them): each choice of p sends its echo
 * chunk, then what it held back (its end, when it is done). false: g freed. */
static bool ifd__release_echo(ifd_gen_t *g, uint32_t p)
{
    for (uint32_t i = p * g->req.n; i < (p + 1) * g->req.n; i++) {
        ifd__choice_t *c = &g->ch[i];
        if (c->echoed)
            continue;
        ifd__send_echo(c);
        size_t upto;
        if (c->done ? !ifd__send_end(c)
                    : ifd_textout_ready(&c->text, &upto) && !ifd__emit(c, upto, NULL))
            return false;
    }
    return ifd__pump(g);
}

/* Before the first sample of a held prompt goes on (a token, its end):
 * its prompt logprobs are complete, the others may go too. false: g freed. */
static bool ifd__unhold(ifd__choice_t *c)
{
    ifd_gen_t *g = c->g;
    if (c->index % g->req.n != 0 || !ifd__held(c))
        return true;
    return ifd__release_echo(g, c->prompt);
}

static void ifd__on_prompt_logprobs(void *owner, ifd_rseq_t *s, const ifd_wire_prompt_logprobs_t *m)
{
    (void)s;
    ifd__choice_t *c = owner;
    ifd_gen_t *g = c->g;
    if (c->done || !g->plp)
        return;
    ifd__plp_t *P = &g->plp[c->prompt];
    const size_t n_prompt = g->ptoks[c->prompt].n;
    for (uint32_t i = 0; i < m->n_entries; i++) {
        const ifd_wire_plp_t *w = &m->entries[i];
        size_t pos = (size_t)m->pos + i;
        if (pos >= n_prompt)
            break;
        if (pos <= P->n)
            continue; /* cannot happen: the router drops what it delivered */
        if (pos != P->n + 1)
            break; /* cannot happen: each sequence delivers in order from 1 */
        /* ids, logprobs and ranks only: the strings are looked up by the
         * rows' writer (ifd__plp_resolve), off the loop when many */
        ifd_oai_prompt_logprob_t *e = &P->v[pos - 1];
        e->tok.id = w->token;
        e->tok.logprob = w->logprob;
        e->tok.rank = w->rank;
        ifd_oai_plp_token_t *top =
            w->n_top ? ifd_arena_calloc(&g->arena, w->n_top, sizeof *top) : NULL;
        if (w->n_top && !top) {
            ifd__fail(g, 500, NULL, "Out of memory for the prompt logprobs.");
            return;
        }
        for (uint32_t k = 0; k < w->n_top; k++) {
            top[k].id = w->top[k].token;
            top[k].logprob = w->top[k].logprob;
            top[k].rank = k + 1;
        }
        e->top = top;
        e->n_top = w->n_top;
        P->n_strs += 1 + (uint64_t)w->n_top;
        P->n = pos;
    }
    if (P->n + 1 == n_prompt)
        ifd__unhold(c); /* may free g: nothing after */
}

/* A token's alternatives as the response shows them: ev's top entries, or
 * with logprob_token_ids vLLM's dict — the sampled token first, then the
 * ids asked for (the sampled one once), all of them — their strings in a.
 * l->top / n_top set; left empty on OOM. */
static void ifd__lp_decode(ifd_gen_t *g, ifd_arena_t *a, ifd_oai_logprob_t *l, int32_t token,
                           const ifd_wire_top_t *src, uint32_t n_src)
{
    const bool ids = g->req.n_logprob_token_ids > 0;
    if (!n_src && !ids)
        return;
#ifdef IFD_TEST_HOOKS
    ifd__test_lp_off_loop(n_src);
#endif
    ifd_oai_top_logprob_t *top = ifd_arena_calloc(a, n_src + 1, sizeof *top);
    if (!top)
        return;
    size_t k = 0;
    if (ids)
        top[k++] = (ifd_oai_top_logprob_t){l->bytes, l->bytes ? l->len : 0, l->logprob};
    for (uint32_t i = 0; i < n_src; i++) {
        if (ids && src[i].token == token)
            continue;
        top[k].bytes = ifd__lp_token(g, a, src[i].token, &top[k].len);
        if (!top[k].bytes)
            top[k].len = 0;
        top[k++].logprob = src[i].logprob;
    }
    l->top = top;
    l->n_top = ids || g->req.top_logprobs > k ? k : g->req.top_logprobs;
}

/* The deferred alternatives among lp[0 .. n) decoded into a (an arena its
 * caller owns: a chunk's, or a finished choice's). */
static void ifd__lp_resolve(ifd_gen_t *g, ifd_arena_t *a, ifd_oai_logprob_t *lp, ifd__lpraw_t *raw,
                            size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (raw[i].pending) {
            ifd__lp_decode(g, a, &lp[i], raw[i].token, raw[i].top, raw[i].n);
            raw[i].pending = false;
        }
}

/* What one alternative adds at least to a chat token's entry
 * (ifd_oai_token_min_bytes' own count, for an alternative of empty text). */
static uint64_t ifd__min_alt_bytes(ifd_oai_kind_t kind)
{
    static const ifd_oai_top_logprob_t empty = {"", 0, 0.0f};
    const ifd_oai_logprob_t none = {"", 0, 0.0f, NULL, 0, false};
    const ifd_oai_logprob_t one = {"", 0, 0.0f, &empty, 1, false};
    return ifd_oai_token_min_bytes(kind, &one) - ifd_oai_token_min_bytes(kind, &none);
}

/* A generated token's logprob entry: its string now; its alternatives now
 * when few, else kept as sent (a copy of the frame's entries, no lookup)
 * and decoded where its chunk or the response is written. */
static void ifd__add_logprob(ifd__choice_t *c, const ifd_wire_token_t *ev)
{
    ifd_gen_t *g = c->g;
    if (c->n_lp == c->cap_lp) {
        size_t cap = c->cap_lp ? c->cap_lp * 2 : 16;
        ifd_oai_logprob_t *v = realloc(c->lp, cap * sizeof *v);
        if (!v)
            return;
        c->lp = v;
        ifd__lpraw_t *r = realloc(c->raw, cap * sizeof *r);
        if (!r)
            return;
        c->raw = r;
        c->cap_lp = cap;
    }
    ifd_oai_logprob_t *l = &c->lp[c->n_lp];
    ifd__lpraw_t *raw = &c->raw[c->n_lp];
    memset(l, 0, sizeof *l);
    memset(raw, 0, sizeof *raw);
    l->bytes = ifd__lp_token(g, &c->lpa, ev->token, &l->len);
    l->logprob = ev->logprob;
    const bool ids = g->req.n_logprob_token_ids > 0;
    uint64_t alts_min = 0; /* alternatives it surely shows, while deferred */
    if (ev->n_top > IFD__LP_DEFER) {
        ifd_wire_top_t *copy = ifd_arena_alloc(&c->lpa, ev->n_top * sizeof *copy);
        if (copy) {
            memcpy(copy, ev->top, ev->n_top * sizeof *copy);
            *raw = (ifd__lpraw_t){copy, ev->n_top, ev->token, true};
            g->lp_deferred += ev->n_top;
            alts_min = ids ? 1 : ev->n_top < g->req.top_logprobs ? ev->n_top : g->req.top_logprobs;
        }
    } else {
        ifd__lp_decode(g, &c->lpa, l, ev->token, ev->top, ev->n_top);
    }
    if (l->bytes) {
        c->n_lp++;
        g->size_min +=
            ifd_oai_token_min_bytes(g->api_kind, l) + alts_min * ifd__min_alt_bytes(g->api_kind);
    }
}

/* The 400 of a non-streamed request whose answer would pass
 * max_response_bytes (min: what it must hold at least, 0 unknown). */
static void ifd__too_large_error(const ifd_gen_t *g, const char *param, uint64_t min,
                                 ifd_oai_error_t *e)
{
    char least[64] = "";
    if (min)
        snprintf(least, sizeof least, "; this answer needs at least %llu", (unsigned long long)min);
    ifd_oai_error_set(e, 400, NULL, "response_too_large", param,
                      "The response would be larger than this server's max_response_bytes, "
                      "%llu bytes%s: lower 'n', 'max_tokens', 'logprobs' / 'top_logprobs', "
                      "'prompt_logprobs' or 'echo', or stream it.",
                      (unsigned long long)g->size_limit, least);
}

static void ifd__set_too_large(ifd_gen_t *g, const char *param, uint64_t min)
{
    if (g->failed)
        return;
    g->failed = true;
    ifd__too_large_error(g, param, min, &g->err);
}

/* The answer has outgrown max_response_bytes while it was generated: the
 * request ends now with a 400, its sequences cancelled, rather than grow
 * further. true: it did (g freed). */
static bool ifd__outgrown(ifd_gen_t *g)
{
    if (!g->size_limit || g->size_min <= g->size_limit)
        return false;
    IFD_INFO("gen %s: the response outgrew max_response_bytes (%llu): ending it", g->id,
             (unsigned long long)g->size_limit);
    ifd__set_too_large(g, "max_tokens", g->size_min);
    ifd__complete(g);
    return true;
}

static void ifd__on_token(void *owner, ifd_rseq_t *s, const ifd_wire_token_t *ev)
{
    (void)s;
    ifd__choice_t *c = owner;
    ifd_gen_t *g = c->g;
    if (c->done || !ifd__unhold(c))
        return;
    uint64_t now = uv_hrtime();
    ifd_metrics_t *m = g->api->metrics;
    if (!g->first_token_seen) {
        g->first_token_seen = true;
        ifd_metrics_ttft(m, ifd__secs(g->t_arrival_ns, now));
    }
    if (c->t_last_ns)
        ifd_metrics_itl(m, ifd__secs(c->t_last_ns, now));
    else
        c->t_first_ns = now;
    c->t_last_ns = now;
    if (g->req.return_token_ids && ifd_tokens_push(&c->ids, ev->token)) {
        ifd__fail(g, 500, NULL, "Out of memory for the token ids.");
        return;
    }
    int r = ifd_textout_push(&c->text, ev->token);
    if (r == IFD_TEXTOUT_NOTEXT)
        return; /* a stop id (FINISHED follows), or echo with max_tokens 0 */
    if (g->req.logprobs && ev->has_logprob) {
        ifd__add_logprob(c, ev);
        if (ifd__outgrown(g))
            return;
    }
    if (r < 0)
        return; /* its text is lost (out of memory, or an id out of range) */
    ifd__advance(c, r, false);
}

static void ifd__on_error(void *owner, ifd_rseq_t *s, int code, const char *msg)
{
    (void)s;
    ifd__choice_t *c = owner;
    ifd_gen_t *g = c->g;
    IFD_WARN("gen %s choice %u: %s (%s)", g->id, c->index, msg, ifd_err_name(code));
    if (code == IFD_ENODEV || code == IFD_ECLOSED)
        ifd__fail(g, 503, NULL, "%s", msg);
    else if (code == IFD_ETOOBIG) /* the request's own grammar: its 400, nobody else's */
        ifd__fail(g, 400, "invalid_value", "The request cannot be completed: %s.", msg);
    else
        ifd__fail(g, 500, NULL, "The request could not be completed: %s", msg);
}

static void ifd__on_finished(void *owner, ifd_rseq_t *s, const ifd_wire_finished_t *f)
{
    (void)s;
    ifd__choice_t *c = owner;
    ifd_gen_t *g = c->g;
    c->seq = NULL; /* freed by the router after this returns */
    if (c->done)
        return;
    c->cached = f->cached_tokens;
    if (f->reason == IFD_WIRE_FINISH_ERROR || f->reason == IFD_WIRE_FINISH_CANCELLED) {
        ifd__fail(g, 500, NULL, "The request could not be completed.");
        g->api->metrics->finished[IFD_FIN_ERROR]++;
        c->done = true;
        g->n_done++;
        ifd__complete(g); /* a failed request ends at once */
        return;
    }
    if (!ifd__unhold(c) || !ifd__advance(c, ifd_textout_flush(&c->text), true) || c->done)
        return;
    ifd__choice_done(c, f->reason == IFD_WIRE_FINISH_LENGTH);
}

static void ifd__on_dispatched(void *owner, ifd_rseq_t *s)
{
    (void)s;
    ifd__choice_t *c = owner;
    c->t_sched_ns = uv_hrtime();
    c->g->dispatched = true;
    ifd_hist_observe(&c->g->api->metrics->queue_time, ifd__secs(c->g->t_arrival_ns, c->t_sched_ns));
}

static const ifd_rseq_ops_t ifd__ops = {ifd__on_token, ifd__on_error, ifd__on_finished,
                                        ifd__on_dispatched, ifd__on_prompt_logprobs};

/* ---- completion and teardown ------------------------------------------------------------ */

static void ifd__usage(const ifd_gen_t *g, ifd_oai_usage_t *u)
{
    memset(u, 0, sizeof *u);
    for (size_t p = 0; p < g->n_prompts; p++) {
        uint32_t best = 0;
        for (uint32_t i = 0; i < g->req.n; i++) {
            const ifd__choice_t *c = &g->ch[p * g->req.n + i];
            if (c->cached > best)
                best = c->cached;
        }
        uint32_t pt = (uint32_t)g->ptoks[p].n;
        u->prompt_tokens += pt;
        u->cached_tokens += best < pt ? best : pt;
    }
    for (uint32_t i = 0; i < g->n_choices; i++)
        u->completion_tokens += g->ch[i].text.n_tokens;
}

/* Adds the request's prompt and generated tokens to the metrics, once: at
 * completion, or when it is freed unfinished (a client that went away still
 * had its prompt processed and its streamed tokens generated). */
static void ifd__count_tokens(ifd_gen_t *g, const ifd_oai_usage_t *u)
{
    if (g->counted)
        return;
    g->counted = true;
    ifd_metrics_t *m = g->api->metrics;
    m->prompt_tokens += u->prompt_tokens;
    m->generation_tokens += u->completion_tokens;
    m->prefix_query_tokens += u->prompt_tokens;
    m->prefix_hit_tokens += u->cached_tokens;
}

/* A Response answered in full (JSON `response`) is kept with its
 * conversation when the request asked to store it (responses.h). */
static void ifd__keep(ifd_gen_t *g, const char *response, size_t len)
{
    if (!g->store || g->failed || !g->n_choices)
        return;
    const ifd_textout_t *t = &g->ch[0].text;
    ifd_oai_choice_t oc;
    memset(&oc, 0, sizeof oc);
    oc.text = t->text.data;
    oc.text_len = t->n_calls ? t->content_len : t->text.len;
    oc.tool_calls = t->calls;
    oc.n_tool_calls = t->n_calls;
    ifd_buf_t conv = IFD_BUF_INIT;
    if (ifd_responses_conversation(&conv, &g->req, &oc) == 0)
        ifd_respstore_keep(&g->api->responses, g->api->cfg, g->owner, g->id, response, len,
                           conv.data, conv.len);
    else
        IFD_WARN("gen %s: building the conversation to store failed", g->id);
    ifd_buf_free(&conv);
}

/* The request's meta for its answer (ifd_oai_meta_t). */
static ifd_oai_meta_t ifd__meta(const ifd_gen_t *g)
{
    return (ifd_oai_meta_t){g->api_kind, g->id, g->api->model_id,
                            g->created,  NULL,  g->req.responses_echo};
}

/* A background Response that ends without output (failed, cancelled) is
 * kept as such, with no conversation to continue (a previous_response_id
 * naming it is not found). */
static void ifd__keep_status(ifd_gen_t *g, const char *status, const ifd_oai_error_t *e)
{
    ifd_oai_meta_t m = ifd__meta(g);
    ifd_buf_t b = IFD_BUF_INIT;
    if (ifd_responses_status_json(&b, &m, status, e) == 0)
        ifd_respstore_keep(&g->api->responses, g->api->cfg, g->owner, g->id, b.data, b.len, "",
                           0);
    else
        IFD_WARN("gen %s: keeping the %s Response failed", g->id, status);
    ifd_buf_free(&b);
}

/* Ends the stream of g (when it still has its client) and frees g. */
static void ifd__stream_close(ifd_gen_t *g)
{
    ifd_http_conn_t *conn = g->conn;
    g->conn = NULL;
    if (conn) {
        ifd_http_set_abort(conn, NULL, NULL);
        ifd_http_stream_end(conn);
    }
    ifd__drop(g);
}

/* The request ends with error e: the client's answer, or for a detached
 * background Response, what it is kept as. Frees g. */
static void ifd__end_error(ifd_gen_t *g, const ifd_oai_error_t *e, int retry_after)
{
    ifd_http_conn_t *conn = g->conn;
    g->conn = NULL;
    if (conn) {
        ifd_http_set_abort(conn, NULL, NULL);
        ifd_reply_error(conn, e, retry_after);
    } else if (g->background) {
        IFD_INFO("gen %s: background Response failed: %s", g->id, e->message);
        ifd__keep_status(g, "failed", e);
    }
    ifd__gen_free(g);
}

/* ---- the non-streamed response ------------------------------------------------------------ */

/* A non-streamed response being written on the thread pool (g's arena):
 * what the writer reads is set up on the loop and no longer changes. */
struct ifd__build {
    uv_work_t work;
    ifd_gen_t *g;
    ifd_oai_meta_t meta;
    ifd_oai_usage_t usage;
    ifd_oai_choice_t *oc;
    ifd_buf_t body; /* the response; taken by the connection */
    size_t taken;   /* its capacity when taken (ifd__footprint) */
    int rc;
};

/* The response's choices (loop thread: arena, tokenizer): text with its
 * echo, logprobs, the prompt logprobs each shares. 0 or IFD_ENOMEM. */
static int ifd__response_choices(ifd_gen_t *g, ifd_oai_choice_t *oc)
{
    for (uint32_t i = 0; i < g->n_choices; i++) {
        ifd__choice_t *c = &g->ch[i];
        const ifd_textout_t *t = &c->text;
        oc[i].index = c->index;
        oc[i].finish_reason = c->finish;
        oc[i].text = t->text.data;
        oc[i].text_len = t->n_calls ? t->content_len : t->text.len;
        oc[i].tool_calls = t->calls;
        oc[i].n_tool_calls = t->n_calls;
        if (g->req.echo && g->echo[c->prompt]) {
            size_t el = g->echo_len[c->prompt], tl = oc[i].text_len;
            char *e = ifd_arena_alloc(&g->arena, el + tl + 1);
            if (!e)
                return IFD_ENOMEM;
            memcpy(e, g->echo[c->prompt], el);
            if (tl)
                memcpy(e + el, t->text.data, tl);
            e[el + tl] = '\0';
            oc[i].text = e;
            oc[i].text_len = el + tl;
        }
        if (g->req.logprobs) {
            oc[i].has_logprobs = true;
            oc[i].logprobs = c->lp;
            oc[i].n_logprobs = c->n_lp;
        }
        if (g->req.return_token_ids) {
            oc[i].has_token_ids = true;
            oc[i].token_ids = c->ids.ids;
            oc[i].n_token_ids = c->ids.n;
            oc[i].prompt_token_ids = g->ptoks[c->prompt].ids;
            oc[i].n_prompt_token_ids = g->ptoks[c->prompt].n;
        }
        /* the prompt's logprobs, then the answer's: their strings and echo
         * form made and written once by the build (ifd__build_cb) */
        if (g->plp) { /* vLLM sets prompt_logprobs for echo + logprobs too */
            const ifd__plp_t *P = &g->plp[c->prompt];
            if (c->index % g->req.n == 0 && P->n + 1 < g->ptoks[c->prompt].n)
                IFD_WARN("gen %s: prompt %u: %zu of %zu prompt logprobs", g->id, c->prompt, P->n,
                         g->ptoks[c->prompt].n - 1);
            oc[i].has_prompt_logprobs = true;
            oc[i].prompt_logprobs = P->v;
            oc[i].n_prompt_logprobs = P->n;
            oc[i].prompt_top =
                g->req.prompt_logprobs ? g->req.prompt_top_logprobs : g->req.top_logprobs;
        }
    }
    return 0;
}

/* Thread pool (or the loop when the pool refused the job): each prompt's
 * logprobs written once, then the response around them. Touches only what
 * the loop no longer does: the build, and the prompts' plp buffers. */
static void ifd__build_cb(uv_work_t *w)
{
    struct ifd__build *b = w->data;
    ifd_gen_t *g = b->g;
    int rc = 0;
    for (uint32_t i = 0; i < g->n_choices; i++) { /* deferred alternatives (done: the loop no
                                                   * longer adds to the choices) */
        ifd__choice_t *c = &g->ch[i];
        if (c->raw)
            ifd__lp_resolve(g, &c->lpa, c->lp, c->raw, c->n_lp);
    }
    for (size_t p = 0; g->plp && p < g->n_prompts && !rc; p++) {
        ifd__plp_t *P = &g->plp[p];
        const ifd_oai_choice_t *first = &b->oc[p * g->req.n];
        rc = ifd__plp_resolve(g, p);
        if (!rc && ifd__echo_lp(g) && !ifd__echo_logprobs(g, p))
            rc = IFD_ENOMEM;
        if (!rc)
            rc = ifd_oai_prompt_logprobs_json(&P->json, P->v, P->n, first->prompt_top);
        if (!rc && ifd__echo_lp(g) && !P->has_prefix) {
            rc = ifd_oai_lp_prefix_build(&P->prefix, P->echo_lp, g->ptoks[p].n);
            P->has_prefix = rc == 0;
        }
    }
    for (uint32_t i = 0; g->plp && i < g->n_choices && !rc; i++) {
        const ifd__plp_t *P = &g->plp[g->ch[i].prompt];
        b->oc[i].prompt_logprobs_json = P->json.data;
        b->oc[i].prompt_logprobs_json_len = P->json.len;
        if (ifd__echo_lp(g))
            b->oc[i].logprobs_prefix = &P->prefix;
    }
    if (!rc)
        rc = ifd_oai_response_json_max(&b->body, &b->meta, b->oc, g->n_choices, &b->usage,
                                       (size_t)g->size_limit);
    b->rc = rc;
}

/* The response is written (b->rc): sends it, keeps it (store), frees g. */
static void ifd__respond(ifd_gen_t *g)
{
    struct ifd__build *b = g->build;
    if (b->rc == IFD_ETOOBIG) {
        ifd__set_too_large(g, "max_tokens", 0);
        ifd__end_error(g, &g->err, 0);
        return;
    }
    if (b->rc) {
        ifd_oai_error_set(&g->err, 500, NULL, NULL, NULL, "Building the response failed: %s",
                          ifd_strerror(b->rc));
        ifd__end_error(g, &g->err, 0);
        return;
    }
    ifd__keep(g, b->body.data, b->body.len);
    ifd_http_conn_t *conn = g->conn;
    g->conn = NULL;
    if (conn) { /* a background Response has none: it is kept */
        ifd_http_set_abort(conn, NULL, NULL);
        b->taken = b->body.cap;
        ifd_http_respond_buf(conn, 200, "application/json", NULL, &b->body);
    }
    ifd__gen_free(g);
}

static void ifd__after_build_cb(uv_work_t *w, int status)
{
    struct ifd__build *b = w->data;
    ifd_gen_t *g = b->g;
    g->work_pending = false;
    if (g->aborted || (!g->conn && !g->background) || status == UV_ECANCELED) {
        ifd__gen_free(g);
        return;
    }
    ifd__respond(g);
}


/* Every choice is done: the response is written — on the thread pool when
 * it may be large (its size grows with the request: never on the loop) —
 * then sent. The client may go away meanwhile (ifd__abort_cb). */
static void ifd__build_response(ifd_gen_t *g, const ifd_oai_usage_t *u)
{
    ifd_api_t *api = g->api;
    struct ifd__build *b = ifd_arena_calloc(&g->arena, 1, sizeof *b);
    ifd_oai_choice_t *oc = ifd_arena_calloc(&g->arena, g->n_choices, sizeof *oc);
    if (!b || !oc || ifd__response_choices(g, oc)) {
        ifd_oai_error_set(&g->err, 500, NULL, NULL, NULL, "Building the response failed: %s",
                          ifd_strerror(IFD_ENOMEM));
        ifd__end_error(g, &g->err, 0);
        return;
    }
    b->g = g;
    b->meta = ifd__meta(g);
    b->usage = *u;
    b->oc = oc;
    b->work.data = b;
    g->build = b;
    /* the logprobs and prompt logprobs, at least; deferred alternatives and
     * the prompt logprobs' strings (looked up by the build) at 16 bytes
     * each (completions' minimum counts no alternative) */
    uint64_t est = g->size_min + 16 * g->lp_deferred;
    for (size_t p = 0; g->plp && p < g->n_prompts; p++)
        est += 16 * ifd__plp_strs(g, p);
    for (uint32_t i = 0; i < g->n_choices; i++)
        est += oc[i].text_len;
    if (est >= IFD__BUILD_INLINE_BYTES &&
        uv_queue_work(api->loop, &b->work, ifd__build_cb, ifd__after_build_cb) == 0) {
        g->work_pending = true;
        return;
    }
    ifd__build_cb(&b->work); /* small, or the pool refused it: bounded by max_response_bytes */
    ifd__respond(g);
}

/* Every choice is done (or the request failed): send the end, free. */
static void ifd__complete(ifd_gen_t *g)
{
    if (g->in_start) {
        g->complete_pending = true;
        return;
    }
    if (g->streaming && (g->cjob_pending || g->ops_head)) {
        g->end_owed = true; /* after the chunks before it (ifd__pump) */
        return;
    }
    ifd_api_t *api = g->api;
    ifd_metrics_t *m = api->metrics;
    ifd_oai_usage_t u;
    ifd__usage(g, &u);
    ifd__count_tokens(g, &u);
    ifd_hist_observe(&m->e2e, ifd__secs(g->t_arrival_ns, uv_hrtime()));
    for (size_t p = 0; g->ch && !g->failed && p < g->n_prompts; p++) {
        uint32_t most = 0;
        for (uint32_t i = 0; i < g->req.n; i++)
            if (g->ch[p * g->req.n + i].text.n_tokens > most)
                most = g->ch[p * g->req.n + i].text.n_tokens;
        ifd_metrics_request_done(m, g->req.n, most);
    }
    if (!g->conn && !g->background) {
        ifd__gen_free(g);
        return;
    }
    if (g->streaming) {
        if (g->failed) {
            ifd_oai_stream_fail(&g->stream, &g->out, &g->err);
        } else if (ifd_oai_stream_end(&g->stream, &g->out, &u)) {
            IFD_ERROR("gen %s: ending the stream failed", g->id);
            ifd_sse_done(&g->out);
        } else if (g->store) {
            ifd_buf_t snap = IFD_BUF_INIT;
            if (ifd_responses_stream_snapshot(&g->stream, &u, &snap) == 0)
                ifd__keep(g, snap.data, snap.len);
            ifd_buf_free(&snap);
        }
        if (g->failed && g->background)
            ifd__keep_status(g, "failed", &g->err);
        if (ifd__flush(g))
            ifd__stream_close(g);
        return;
    }
    if (g->failed) {
        ifd__end_error(g, &g->err, g->err.status == 503 ? 1 : 0);
        return;
    }
    ifd__build_response(g, &u);
}

/* The bytes g holds beyond its structs: what decides whether its end is
 * followed by a trim (memtrim.h). */
static size_t ifd__footprint(const ifd_gen_t *g)
{
    size_t n = g->arena.total + g->out.cap;
    for (uint32_t i = 0; i < g->n_choices; i++)
        n += g->ch[i].cap_lp * (sizeof *g->ch[i].lp + sizeof *g->ch[i].raw) +
             g->ch[i].text.text.cap + g->ch[i].lpa.total;
    n += g->sarena.total + g->cjob.out.cap;
    for (size_t p = 0; g->plp && p < g->n_prompts; p++) {
        const ifd__plp_t *P = &g->plp[p];
        n += P->a.total + P->json.cap + P->prefix.tokens.cap + P->prefix.token_logprobs.cap +
             P->prefix.top_logprobs.cap + P->prefix.text_offset.cap;
    }
    if (g->build)
        n += g->build->body.cap + g->build->taken;
    for (uint32_t k = 0; k < g->images.n_pics; k++) /* megabytes each: worth a trim */
        n += g->images.pics[k].n_pixels;
    return n;
}

static void ifd__gen_free(ifd_gen_t *g)
{
    ifd_api_t *api = g->api;
    IFD_ASSERT(!g->cjob_pending); /* the job owns g's stream: freed when it is back */
    ifd_memtrim_note(api->trim, ifd__footprint(g));
    if (!g->counted && g->ch) { /* tokenized and dispatched: ch is made then */
        ifd_oai_usage_t u;
        ifd__usage(g, &u);
        ifd__count_tokens(g, &u);
    }
    if (g->conn) {
        ifd_http_set_abort(g->conn, NULL, NULL);
        g->conn = NULL;
    }
    for (uint32_t i = 0; i < g->n_choices; i++) {
        ifd__choice_t *c = &g->ch[i];
        if (c->seq) {
            ifd_router_release(api->router, c->seq);
            c->seq = NULL;
        }
        if (!c->done) {
            api->metrics->finished[IFD_FIN_ABORT]++;
            c->done = true;
        }
        ifd_textout_close(&c->text);
        ifd_arena_close(&c->lpa);
        free(c->lp);
        free(c->raw);
        ifd_tokens_free(&c->ids);
    }
    if (g->ptoks)
        for (size_t p = 0; p < g->n_prompts; p++)
            ifd_tokens_free(&g->ptoks[p]);
    ifd_images_free(&g->images); /* every sequence is released: the router holds none */
    for (size_t p = 0; g->plp && p < g->n_prompts; p++) {
        ifd_arena_close(&g->plp[p].a);
        ifd_buf_free(&g->plp[p].json);
        ifd_oai_lp_prefix_free(&g->plp[p].prefix);
    }
    if (g->build)
        ifd_buf_free(&g->build->body);
    if (g->reserved)
        api->n_tokenizing--;
    if (g->running)
        api->n_running--;
    if (g->background)
        api->n_background--;
    if (g->prev)
        g->prev->next = g->next;
    else if (api->gens == g)
        api->gens = g->next;
    if (g->next)
        g->next->prev = g->prev;
    ifd_buf_free(&g->out);
    ifd__op_free(g->ops_head);
    ifd_buf_free(&g->cjob.out);
    ifd_arena_close(&g->sarena);
    free(g->ch);
    json_decref(g->checks);
    ifd_textout_rules_close(&g->rules);
    ifd_arena_close(&g->arena);
    free(g);
    if (!api->gens)
        ifd_memtrim_idle(api->trim);
    if (!api->gens && api->on_idle)
        api->on_idle(api->idle_ctx);
}

/* A job on the thread pool holds g (tokenizing, the response's writing,
 * output checks): g is freed when it returns. */
static bool ifd__busy(const ifd_gen_t *g)
{
    return g->work_pending || g->n_checks || g->cjob_pending;
}

/* g is given up while a job holds it: its sequences released now (no more
 * router callbacks), g freed when the last job returns. */
static void ifd__abandon(ifd_gen_t *g)
{
    g->aborted = true;
    for (uint32_t i = 0; g->ch && i < g->n_choices; i++)
        if (g->ch[i].seq) {
            ifd_router_release(g->api->router, g->ch[i].seq);
            g->ch[i].seq = NULL;
        }
}

/* g is done with: freed now, or when the jobs that hold it are back. */
static void ifd__drop(ifd_gen_t *g)
{
    if (ifd__busy(g)) {
        ifd__abandon(g);
        return;
    }
    ifd__gen_free(g);
}

static void ifd__abort_cb(void *ud)
{
    ifd_gen_t *g = ud;
    if (g->background && g->streaming) { /* it has its id: polled from now on */
        ifd__stream_orphan(g);
        return;
    }
    g->conn = NULL;
    atomic_store(&g->cancel, 1);
    IFD_INFO("gen %s: client went away: cancelling its sequences", g->id);
    if (ifd__busy(g)) {
        ifd__abandon(g); /* freed when its jobs return */
        return;
    }
    ifd__gen_free(g);
}

void ifd_gen_abort_all(ifd_api_t *api)
{
    ifd_gen_t *g = api->gens;
    while (g) {
        ifd_gen_t *next = g->next;
        if (ifd__busy(g)) {
            if (g->conn) { /* a stream (its outputs being checked) has sent its headers */
                ifd_http_conn_t *conn = g->conn;
                g->conn = NULL;
                ifd_http_set_abort(conn, NULL, NULL);
                if (!g->streaming)
                    ifd_reply_errorf(conn, 503, NULL, NULL, "The server is shutting down.");
            }
            atomic_store(&g->cancel, 1);
            ifd__abandon(g);
        } else {
            ifd__fail(g, 503, NULL, "The server is shutting down.");
            ifd__complete(g);
        }
        g = next;
    }
}

/* ---- tokenizing (uv threadpool) ----------------------------------------------------------- */

/* The key of the request's grammar in the cache: everything its grammar
 * and tool checks depend on (gcache.h). NULL when out of memory. */
static char *ifd__grammar_key(ifd_gen_t *g, size_t *len)
{
    const ifd_oai_request_t *rq = &g->req;
    ifd_buf_t k = IFD_BUF_INIT;
    int e = ifd_buf_printf(&k, "%d %d %u %d|", (int)rq->so_kind, (int)rq->tool_choice,
                           rq->tool_index, (int)rq->parallel_tool_calls);
    if (!e && rq->so_source)
        e = ifd_buf_append(&k, rq->so_source, rq->so_source_len);
    if (!e && rq->tools_json)
        e = ifd_buf_append(&k, "|", 1) || ifd_buf_append(&k, rq->tools_json,
                                                          strlen(rq->tools_json));
    char *key = e ? NULL : ifd_arena_strndup(&g->arena, k.data ? k.data : "", k.len);
    *len = k.len;
    ifd_buf_free(&k);
    return key;
}

/* The schemas the outputs are checked against (g->checks), parsed once per
 * compiled grammar (they are cached with it); *bytes what they count for
 * in the cache (jansson's nodes take several times the bytes of their
 * text). NULL checks: nothing to check. */
static int ifd__parse_checks(ifd_gen_t *g, size_t *bytes)
{
    const ifd_oai_request_t *rq = &g->req;
    json_t *checks = json_object(), *tools = json_object();
    json_error_t je = {.text = "out of memory"};
    int rc = checks && tools ? 0 : IFD_ENOMEM;
    size_t text = 0;
    if (!rc && rq->so_check) {
        json_t *s = json_loadb(rq->so_source, rq->so_source_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        rc = s && !json_object_set_new(checks, "output", s) ? 0 : IFD_ENOMEM;
        text += rq->so_source_len;
    }
    for (size_t i = 0; !rc && i < rq->n_tools; i++) {
        if (!ifd_oai_tool_enforced(rq, i))
            continue;
        json_t *s = json_loads(rq->tools[i].parameters, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        rc = s && !json_object_set_new(tools, rq->tools[i].name, s) ? 0 : IFD_ENOMEM;
        text += strlen(rq->tools[i].parameters);
    }
    if (!rc && json_object_size(tools))
        rc = json_object_set(checks, "tools", tools) ? IFD_ENOMEM : 0;
    json_decref(tools);
    if (rc || !json_object_size(checks)) {
        json_decref(checks);
        checks = NULL;
    }
    if (rc)
        ifd_oai_error_set(&g->work_err, 500, NULL, NULL, NULL,
                          "Parsing the schemas to check the output with failed: %s", je.text);
    g->checks = checks;
    *bytes = 8 * text + 256;
    return rc;
}

/* The request's structured-output work (its tools' schemas checked, its
 * constraint converted and compiled), off the loop, within grammar_timeout
 * and the client's presence; a request asking what an earlier one did
 * takes it from the cache. On the threadpool's thread. */
static int ifd__build_grammar(ifd_gen_t *g)
{
    ifd_oai_request_t *rq = &g->req;
    if (!rq->so_kind && !rq->n_tools)
        return 0;
    ifd_api_t *api = g->api;
    size_t klen;
    char *key = ifd__grammar_key(g, &klen);
    if (!key)
        return IFD_ENOMEM;
    /* a cache entry is the grammar's words and one more: so_check; and the
     * parsed schema its outputs are checked against */
    size_t bytes;
    if (ifd_gcache_get(api->grammars, key, klen, &g->arena, &g->gwords, &g->n_gwords, &g->checks) &&
        g->n_gwords) {
        rq->so_check = g->gwords[--g->n_gwords] != 0;
        if (!g->n_gwords)
            g->gwords = NULL;
        return g->checks ? 0 : ifd__parse_checks(g, &bytes);
    }
    ifd_grammar_budget_t b = ifd_grammar_default_budget();
    b.max_time_ms = (unsigned)(api->cfg->grammar_timeout * 1000.0);
    b.cancel = &g->cancel;
    ifd_grammar_t *cg = NULL;
    int rc = ifd_oai_build_grammar(&g->arena, rq, &b, &cg, &g->work_err);
    if (rc)
        return rc;
    int32_t *w = NULL;
    size_t n = 0;
    rc = cg ? ifd_grammar_serialize(cg, &w, &n) : 0;
    ifd_grammar_destroy(cg);
    if (!rc && n > IFD_WIRE_MAX_GRAMMAR) {
        free(w);
        ifd_oai_error_set(&g->work_err, 400, NULL, "invalid_value", rq->so_param,
                          "Invalid '%s': its compiled grammar is over %u words.", rq->so_param,
                          IFD_WIRE_MAX_GRAMMAR);
        return IFD_EINVAL;
    }
    if (!rc && !(g->gwords = ifd_arena_alloc(&g->arena, (n + 1) * sizeof *w)))
        rc = IFD_ENOMEM;
    if (!rc) {
        if (n)
            memcpy(g->gwords, w, n * sizeof *w);
        g->gwords[n] = rq->so_check;
        g->n_gwords = n;
        rc = ifd__parse_checks(g, &bytes);
    }
    if (!rc) {
        ifd_gcache_put(api->grammars, key, klen, g->gwords, n + 1, g->checks, bytes);
        if (!n)
            g->gwords = NULL;
    }
    free(w);
    return rc;
}

/* A chat request's prompt; with images, decoded first (their pan-and-scan
 * crops shape the prompt), then placed at their tokens. */
static int ifd__chat_prompt(ifd_gen_t *g, const char **echo)
{
    const ifd_oai_request_t *rq = &g->req;
    if (!rq->n_images)
        return ifd_prompt_chat(g->api, &g->arena, rq, &g->cancel, &g->ptoks[0], echo, NULL,
                               &g->work_err);
    int rc = ifd_images_decode(&g->images, &g->img_setup, rq, &g->cancel, &g->work_err);
    if (rc)
        return rc;
    ifd_prompt_images_t pi = {
        .ip = &g->img_setup.ip,
        .n_crops = g->images.n_crops,
        .spans = ifd_arena_calloc(&g->arena, g->images.n_pics, sizeof(ifd_image_pos_t)),
        .max = g->images.n_pics};
    if (!pi.spans)
        return IFD_ENOMEM;
    rc = ifd_prompt_chat(g->api, &g->arena, rq, &g->cancel, &g->ptoks[0], echo, &pi, &g->work_err);
    if (!rc && ifd_images_place(&g->images, &g->img_setup, pi.spans, pi.n)) {
        ifd_oai_error_set(&g->work_err, 400, NULL, "invalid_value", "messages",
                          "The model's chat template did not render one image per picture.");
        rc = IFD_EINVAL;
    }
    return rc;
}

static void ifd__work_cb(uv_work_t *w)
{
    ifd_gen_t *g = w->data;
    const ifd_tokenizer_t *tok = g->api->tok;
    g->work_rc = ifd__build_grammar(g);
    if (g->work_rc)
        return;
    if (g->kind == IFD_OAI_CHAT) {
        const char *echo = NULL;
        g->work_rc = ifd__chat_prompt(g, &echo);
        if (echo) { /* the last message's content (prompt.h), which may hold NULs */
            g->echo[0] = (char *)echo;
            g->echo_len[0] = g->req.messages[g->req.n_messages - 1].content_len;
        }
        return;
    }
    for (size_t p = 0; p < g->n_prompts && !g->work_rc; p++) {
        ifd_oai_prompt_t *pp = &g->req.prompts[p];
        if (pp->text) {
            g->work_rc =
                ifd_tokenizer_encode(tok, pp->text, pp->text_len,
                                     IFD_TOK_ADD_SPECIAL | IFD_TOK_PARSE_SPECIAL, &g->ptoks[p]);
            g->echo[p] = pp->text;
            g->echo_len[p] = pp->text_len;
        } else {
            for (size_t i = 0; i < pp->n_tokens && !g->work_rc; i++)
                g->work_rc = ifd_tokens_push(&g->ptoks[p], pp->tokens[i]);
            if (!g->work_rc && g->req.echo) {
                char *t = NULL;
                size_t tl = 0;
                if (ifd_tokenizer_decode(tok, pp->tokens, pp->n_tokens, 0, &t, &tl) == 0) {
                    g->echo[p] = ifd_arena_strndup(&g->arena, t, tl);
                    g->echo_len[p] = tl;
                }
                free(t);
            }
        }
    }
}

static void ifd__start(ifd_gen_t *g);

static void ifd__after_work_cb(uv_work_t *w, int status)
{
    ifd_gen_t *g = w->data;
    g->work_pending = false;
    g->reserved = false;
    g->api->n_tokenizing--;
    if (g->aborted || !g->conn || status == UV_ECANCELED) {
        ifd__gen_free(g);
        return;
    }
    if (g->work_rc) {
        ifd_http_conn_t *conn = g->conn;
        g->conn = NULL;
        ifd_http_set_abort(conn, NULL, NULL);
        if (g->work_err.status)
            ifd_reply_error(conn, &g->work_err, 0);
        else
            ifd_reply_errorf(conn, 500, NULL, NULL, "Tokenizing the prompt failed: %s",
                             ifd_strerror(g->work_rc));
        ifd__gen_free(g);
        return;
    }
    ifd__start(g);
}

/* ---- starting the sequences ----------------------------------------------------------------- */

static void ifd__reject(ifd_gen_t *g, int status, const char *code, const char *param,
                        const char *msg)
{
    ifd_http_conn_t *conn = g->conn;
    g->conn = NULL;
    ifd_http_set_abort(conn, NULL, NULL);
    ifd_reply_errorf(conn, status, code, param, "%s", msg);
    ifd__gen_free(g);
}

/* max_tokens for a prompt of n tokens when the request gives none: the rest
 * of the context, capped by generation_config.json's max_new_tokens (when
 * the generation_config setting is on), as vLLM's default
 * (--generation-config auto) takes it for its max_tokens default. */
static int64_t ifd__default_max_tokens(const ifd_api_t *api, int64_t n)
{
    int64_t mt = api->max_model_len - n;
    if (api->mcfg && api->mcfg->gen.present && api->cfg->generation_config &&
        api->mcfg->gen.max_new_tokens > 0 && api->mcfg->gen.max_new_tokens < mt)
        mt = api->mcfg->gen.max_new_tokens;
    return mt;
}

/* Truncates each prompt as asked and checks it against the context length.
 * false: rejected with a 400 (g freed). */
static bool ifd__check_prompts(ifd_gen_t *g)
{
    ifd_api_t *api = g->api;
    const ifd_oai_request_t *rq = &g->req;
    const char *what = g->kind == IFD_OAI_CHAT ? "messages" : "prompt";
    char msg[512];
    for (size_t p = 0; p < g->n_prompts; p++) {
        ifd_prompt_truncate(api, rq, &g->ptoks[p]); /* chat's: done already */
        int64_t n = (int64_t)g->ptoks[p].n;
        if (n == 0) {
            ifd__reject(g, 400, "invalid_value", what, "The prompt is empty.");
            return false;
        }
        int64_t mt = rq->max_tokens >= 0 ? rq->max_tokens : ifd__default_max_tokens(api, n);
        if (n + (mt > 0 ? mt : 1) > api->max_model_len) {
            snprintf(msg, sizeof msg,
                     "This model's maximum context length is %lld tokens. However, you "
                     "requested %lld tokens (%lld in the %s, %lld in the completion). Please "
                     "reduce the length of the %s or completion.",
                     (long long)api->max_model_len, (long long)(n + (mt > 0 ? mt : 0)),
                     (long long)n, what, (long long)(mt > 0 ? mt : 0), what);
            ifd__reject(g, 400, "context_length_exceeded", what, msg);
            return false;
        }
    }
    return true;
}

/* max_response_bytes, up front (non-streamed requests): what the answer
 * must hold — the prompt logprobs above all, n times in completions —
 * against the limit, read now (SIGHUP may change it). false: refused (g
 * freed). */
static bool ifd__check_size(ifd_gen_t *g)
{
    const ifd_oai_request_t *rq = &g->req;
    g->size_limit = rq->stream ? 0 : g->api->cfg->max_response_bytes;
    if (!g->size_limit)
        return true;
    size_t n_tok[IFD__MAX_CHOICES]; /* n_prompts <= the choices' limit */
    for (size_t p = 0; p < g->n_prompts; p++)
        n_tok[p] = g->ptoks[p].n;
    g->size_min = ifd_oai_response_min_bytes(g->api_kind, rq, n_tok, g->n_prompts);
    if (g->size_min <= g->size_limit)
        return true;
    const char *param = rq->prompt_logprobs ? "prompt_logprobs"
                        : ifd__echo_lp(g)   ? "echo"
                                            : "min_tokens";
    ifd_oai_error_t e;
    ifd__too_large_error(g, param, g->size_min, &e);
    IFD_INFO("gen %s: refused: its response would need at least %llu bytes (max_response_bytes "
             "%llu)",
             g->id, (unsigned long long)g->size_min, (unsigned long long)g->size_limit);
    ifd_http_conn_t *conn = g->conn;
    g->conn = NULL;
    ifd_http_set_abort(conn, NULL, NULL);
    ifd_reply_error(conn, &e, 0);
    ifd__gen_free(g);
    return false;
}

/* Tool call ids for textout (ids.h). textout drops the calls when one
 * cannot be drawn; a failed getrandom is remembered so that the request
 * then fails with a 500 (ifd__choice_done) instead of answering without them. */
static char *ifd__call_id(void *ud, ifd_arena_t *a)
{
    ifd_gen_t *g = ud;
    int rc;
    char *id = ifd_ids_tool_call(a, &rc);
    if (!id && rc != IFD_ENOMEM)
        g->ids_failed = true;
    return id;
}

/* The request's text rules and its choices, each with its text. 0 or
 * IFD_ENOMEM. */
static int ifd__make_choices(ifd_gen_t *g)
{
    ifd_api_t *api = g->api;
    const ifd_token_t *eog = NULL;
    size_t n_eog = g->kind == IFD_OAI_CHAT ? ifd_chat_template_stop_ids(api->tpl, &eog)
                                           : ifd_tokenizer_eog_ids(api->tok, &eog);
    if (ifd_textout_rules_init(&g->rules, &g->req, g->kind, eog, n_eog))
        return IFD_ENOMEM;
    g->rules.call_id = ifd__call_id;
    g->rules.call_id_ud = g;
    uint32_t n = (uint32_t)(g->n_prompts * g->req.n);
    g->ch = calloc(n, sizeof *g->ch);
    if (!g->ch)
        return IFD_ENOMEM;
    g->n_choices = n;
    for (uint32_t i = 0; i < n; i++) {
        g->ch[i].g = g;
        g->ch[i].index = i;
        g->ch[i].prompt = i / g->req.n;
        ifd_arena_init(&g->ch[i].lpa, 0);
        if (ifd_textout_init(&g->ch[i].text, &g->rules, api->tok))
            return IFD_ENOMEM;
    }
    return 0;
}

/* The request's logit bias in the wire's form (NULL when none), in the
 * arena. 0 or IFD_ENOMEM. */
static int ifd__logit_bias(ifd_gen_t *g, ifd_wire_logit_bias_t **out)
{
    const ifd_oai_request_t *rq = &g->req;
    *out = NULL;
    if (!rq->n_logit_bias)
        return 0;
    ifd_wire_logit_bias_t *lb = ifd_arena_calloc(&g->arena, rq->n_logit_bias, sizeof *lb);
    if (!lb)
        return IFD_ENOMEM;
    for (size_t i = 0; i < rq->n_logit_bias; i++) {
        lb[i].id = rq->logit_bias[i].id;
        lb[i].bias = rq->logit_bias[i].bias;
    }
    *out = lb;
    return 0;
}

/* Prompt logprobs wanted (vLLM's prompt_logprobs, or completions echo +
 * logprobs): storage per prompt, and the alternatives to ask for. 0 or
 * IFD_ENOMEM. */
static int ifd__alloc_plp(ifd_gen_t *g)
{
    const ifd_oai_request_t *rq = &g->req;
    if (!rq->prompt_logprobs && !ifd__echo_lp(g))
        return 0;
    g->plp = ifd_arena_calloc(&g->arena, g->n_prompts, sizeof *g->plp);
    for (size_t p = 0; g->plp && p < g->n_prompts; p++) {
        size_t n = g->ptoks[p].n > 1 ? g->ptoks[p].n - 1 : 1;
        ifd_arena_init(&g->plp[p].a, 0);
        g->plp[p].v = ifd_arena_calloc(&g->arena, n, sizeof *g->plp[p].v);
        if (!g->plp[p].v)
            g->plp = NULL;
    }
    if (!g->plp)
        return IFD_ENOMEM;
    g->plp_top = rq->prompt_logprobs ? rq->prompt_top_logprobs : 0;
    if (ifd__echo_lp(g) && rq->top_logprobs > g->plp_top)
        g->plp_top = rq->top_logprobs;
    return 0;
}

/* The router sequence of choice c. */
static void ifd__seq_params(ifd_gen_t *g, const ifd__choice_t *c, ifd_wire_logit_bias_t *lb,
                            ifd_wire_add_t *sp)
{
    ifd_api_t *api = g->api;
    const ifd_oai_request_t *rq = &g->req;
    uint32_t sample = c->index % rq->n;
    memset(sp, 0, sizeof *sp);
    sp->tokens = g->ptoks[c->prompt].ids;
    sp->n_tokens = (uint32_t)g->ptoks[c->prompt].n;
    int64_t mt =
        rq->max_tokens >= 0 ? rq->max_tokens : ifd__default_max_tokens(api, (int64_t)sp->n_tokens);
    sp->max_tokens = mt > 0 ? (uint32_t)mt : 1; /* 0: echo alone, the token is dropped */
    sp->sampling = ifd_wire_default_sampling();
    sp->sampling.temperature = rq->temperature;
    sp->sampling.top_k = rq->top_k < 0 ? 0 : rq->top_k;
    sp->sampling.top_p = rq->top_p;
    sp->sampling.min_p = rq->min_p;
    sp->sampling.repetition_penalty = rq->repetition_penalty;
    sp->sampling.frequency_penalty = rq->frequency_penalty;
    sp->sampling.presence_penalty = rq->presence_penalty;
    sp->sampling.logit_bias = lb;
    sp->sampling.n_logit_bias = (uint32_t)rq->n_logit_bias;
    sp->sampling.n_logprobs = rq->logprobs ? (int32_t)rq->top_logprobs : -1;
    sp->sampling.logprobs_mode = 0;
    sp->sampling.seed = rq->has_seed ? rq->seed + sample : ifd_ids_random(&api->rng);
    /* stop ids sent to the worker: chat's end-of-turn ids (EOS is the worker's own) */
    size_t n_stop = g->rules.n_stop_ids;
    sp->stop_ids = g->rules.stop_ids;
    sp->n_stop_ids = (uint32_t)(n_stop > IFD_WIRE_MAX_STOP_IDS ? IFD_WIRE_MAX_STOP_IDS : n_stop);
    sp->ignore_eos = rq->ignore_eos;
    sp->use_cache = rq->use_cache && api->cfg->prefix_cache;
    sp->priority = ifd_wire_priority_from_api(rq->priority);
    sp->client = g->client;
    sp->grammar = g->gwords;
    sp->n_grammar = (uint32_t)g->n_gwords;
    sp->min_tokens = rq->min_tokens;
    sp->allowed_ids = rq->allowed_token_ids;
    sp->n_allowed_ids = (uint32_t)rq->n_allowed_token_ids;
    sp->lp_ids = rq->logprob_token_ids;
    sp->n_lp_ids = (uint32_t)rq->n_logprob_token_ids;
    sp->spec = rq->spec;
    sp->images = g->images.pics;
    sp->n_images = g->images.n_pics;
    /* prompt logprobs: computed once, by the first sample (a streaming echo's
     * other choices wait for them: ifd__held) */
    if (g->plp && sample == 0)
        sp->prompt_logprobs = 1 + g->plp_top;
}

/* Sends the headers of a stream, its first events and the echo chunks that
 * can go now. On failure g is freed. */
static void ifd__begin_stream(ifd_gen_t *g)
{
    const ifd_oai_request_t *rq = &g->req;
    ifd_oai_meta_t meta = ifd__meta(g);
    int rc = ifd_oai_stream_init(&g->stream, &g->sarena, &meta, g->n_choices, rq->include_usage);
    if (!rc && rq->include_usage && rq->continuous_usage)
        g->stream.live_usage = &g->live;
    if (!rc)
        rc = ifd_http_stream_begin(g->conn, 200, "text/event-stream", NULL);
    if (rc) {
        IFD_WARN("gen %s: starting the stream failed: %s", g->id, ifd_strerror(rc));
        g->conn = NULL;
        ifd__gen_free(g);
        return;
    }
    g->streaming = true;
    if (rq->return_token_ids && g->api_kind == IFD_OAI_CHAT) { /* in the first chunk, as vLLM */
        g->stream.prompt_token_ids = g->ptoks[0].ids;
        g->stream.n_prompt_token_ids = g->ptoks[0].n;
        g->ch[0].prompt_ids_sent = true;
    }
    ifd_oai_stream_start(&g->stream, &g->out); /* chat's role chunks, response.created */
    /* those go before the chunks that follow (ifd__pump) */
    if (!ifd__flush(g))
        return;
    /* the echo chunks: now, or with logprobs once the prompt's are in
     * (ifd__on_prompt_logprobs; a one-token prompt has none to wait for) */
    for (uint32_t i = 0; rq->echo && i < g->n_choices; i++)
        if (!ifd__echo_lp(g) || g->ptoks[g->ch[i].prompt].n <= 1)
            ifd__send_echo(&g->ch[i]);
    ifd__pump(g);
}

/* A background Response whose sequences are queued: answered now with its
 * status (queued), then served without its connection. */
static void ifd__detach(ifd_gen_t *g)
{
    ifd_http_conn_t *conn = g->conn;
    ifd_oai_meta_t m = ifd__meta(g);
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_responses_status_json(&b, &m, g->dispatched ? "in_progress" : "queued", NULL);
    g->conn = NULL;
    ifd_http_set_abort(conn, NULL, NULL);
    ifd_reply_json(conn, rc, &b);
    ifd_buf_free(&b);
    if (rc)
        ifd__gen_free(g);
}

/* The prompts are tokenized: checks them, makes the choices and submits
 * one router sequence per choice, then starts the stream. */
static void ifd__start(ifd_gen_t *g)
{
    ifd_api_t *api = g->api;
    if (!ifd__check_prompts(g) || !ifd__check_size(g))
        return;
    ifd_wire_logit_bias_t *lb = NULL;
    if (ifd__make_choices(g) || ifd__logit_bias(g, &lb) || ifd__alloc_plp(g)) {
        ifd__reject(g, 500, NULL, NULL, "Out of memory.");
        return;
    }
    g->running = true;
    api->n_running++;
    g->in_start = true;
    for (uint32_t i = 0; i < g->n_choices; i++) {
        ifd__choice_t *c = &g->ch[i];
        ifd_wire_add_t sp;
        ifd__seq_params(g, c, lb, &sp);
        if (ifd_router_submit(api->router, &sp, &ifd__ops, c, &c->seq)) {
            g->in_start = false;
            ifd__reject(g, 500, NULL, NULL, "The request could not be queued.");
            return;
        }
    }
    g->in_start = false;
    if (g->complete_pending) { /* a sequence failed at once */
        ifd__complete(g);
        return;
    }
    /* headers now: every error that can be decided early has been */
    if (g->req.stream)
        ifd__begin_stream(g); /* a background one too: polled if its client leaves */
    else if (g->background)
        ifd__detach(g);
}

/* ---- entry ------------------------------------------------------------------------------- */

/* Every id of a request's list (n ids, `stride` bytes apart) below n_vocab;
 * else a 400 on param naming each id that is not (what: the message's
 * start), and false. */
static bool ifd__check_vocab(ifd_gen_t *g, const char *param, const char *what, const void *ids,
                             size_t stride, size_t n, int32_t n_vocab)
{
    ifd_oai_names_t bad = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id;
        memcpy(&id, (const char *)ids + i * stride, sizeof id);
        char num[16];
        snprintf(num, sizeof num, "%d", (int)id);
        if (id >= n_vocab)
            ifd_oai_names_add(&bad, num);
    }
    if (!bad.n)
        return true;
    char more[48], msg[512];
    snprintf(msg, sizeof msg, "%s: token id%s %s%s %s not in the vocabulary (%d tokens).", what,
             bad.n > 1 ? "s" : "", bad.text, ifd_oai_names_more(&bad, more, sizeof more),
             bad.n > 1 ? "are" : "is", (int)n_vocab);
    ifd__reject(g, 400, "invalid_value", param, msg);
    return false;
}

/* vLLM's --max-logprobs (the max_logprobs setting, read per request; -1:
 * the vocabulary): a request's -1 becomes the vocabulary (`vocab`, the
 * model's rows: vLLM's get_vocab_size()), then a 400 names the field that
 * asks for more alternatives than the cap or the vocabulary — vLLM's
 * _validate_logprobs, which refuses rather than clamps; false then. */
static bool ifd__check_max_logprobs(ifd_gen_t *g, int32_t vocab)
{
    ifd_oai_request_t *rq = &g->req;
    if (rq->top_logprobs == IFD_OAI_LOGPROBS_VOCAB)
        rq->top_logprobs = (uint32_t)vocab;
    if (rq->prompt_top_logprobs == IFD_OAI_LOGPROBS_VOCAB)
        rq->prompt_top_logprobs = (uint32_t)vocab;
    const int64_t cap = g->api->cfg->max_logprobs;
    const int64_t max = cap < 0 || cap > vocab ? vocab : cap;
    const char *param = NULL, *what = "sample";
    int64_t asked = 0;
    if (rq->logprobs && rq->top_logprobs > max) {
        param = g->kind == IFD_OAI_COMPLETION ? "logprobs" : "top_logprobs";
        asked = rq->top_logprobs;
    } else if (rq->prompt_logprobs && rq->prompt_top_logprobs > max) {
        param = "prompt_logprobs";
        what = "prompt";
        asked = rq->prompt_top_logprobs;
    } else if (rq->n_logprob_token_ids > (uint64_t)max) { /* as many as a top k may have */
        param = "logprob_token_ids";
        asked = (int64_t)rq->n_logprob_token_ids;
    }
    if (!param)
        return true;
    char msg[256];
    snprintf(msg, sizeof msg,
             "Requested %s logprobs of %lld, which is greater than max allowed: %lld (this "
             "server's max_logprobs).",
             what, (long long)asked, (long long)max);
    ifd__reject(g, 400, "invalid_value", param, msg);
    return false;
}

/* A request asking for the draft model (speculative.method "draft_model")
 * of a daemon without one: a 400 naming the field; false then. */
static bool ifd__check_spec(ifd_gen_t *g)
{
    const ifd_config_t *cfg = g->api->cfg;
    if (g->req.spec.method != 3 || (cfg->draft_model && *cfg->draft_model))
        return true;
    ifd__reject(g, 400, "invalid_value", "speculative.method",
                "This server has no draft model (its draft_model setting): use \"ngram\" or "
                "\"off\".");
    return false;
}

/* generation_config.json's sampling defaults for what the request leaves
 * out, unless the generation_config setting is off (docs/models.md); a
 * Response echoes the values in force. 0 or IFD_ENOMEM. */
static int ifd__model_sampling_defaults(const ifd_api_t *api, ifd_arena_t *a,
                                        ifd_oai_request_t *rq)
{
    if (!api->mcfg || !api->mcfg->gen.present || !api->cfg->generation_config)
        return 0;
    const ifd_gen_defaults_t *m = &api->mcfg->gen;
    ifd_oai_sampling_defaults_t d = {m->temperature, m->top_p, m->min_p, m->repetition_penalty,
                                     m->top_k};
    return ifd_responses_echo_defaults(a, rq, ifd_oai_apply_sampling_defaults(rq, &d));
}

/* previous_response_id: the kept conversation of id if this client kept
 * it, or NULL — another client's id is as unknown as one never stored
 * (respstore.h), and so is a background Response kept without one
 * (failed, cancelled: ifd__keep_status). */
static const char *ifd__stored_conversation(void *ud, const char *id)
{
    ifd_gen_t *g = ud;
    const ifd_respstore_entry_t *e =
        ifd_respstore_lookup(&g->api->responses, g->api->cfg, g->owner, id);
    return e && e->conversation_len ? e->conversation : NULL;
}

/* A /v1/responses body against the daemon's Responses store. */
static int ifd__parse_responses(ifd_gen_t *g, const ifd_http_request_t *r, ifd_oai_error_t *e)
{
    ifd_responses_store_t store = {ifd_respstore_enabled(g->api->cfg), ifd__stored_conversation, g};
    ifd_responses_state_t st;
    int rc = ifd_responses_parse_stored(&g->arena, r->body, r->body_len, &store, &g->req, &st, e);
    g->store = !rc && st.store;
    if (rc || !st.background)
        return rc;
    /* a place among the background Responses, bounded (reloadable) */
    const int64_t max = g->api->cfg->responses_background_max;
    if (max == 0) {
        ifd_oai_error_set(e, 400, NULL, "unsupported_parameter", "background",
                          "Unsupported parameter: 'background' is turned off on this server "
                          "(responses_background_max is 0).");
        return IFD_EINVAL;
    }
    if (g->api->n_background >= max) {
        ifd_oai_error_set(e, 429, NULL, "rate_limit_exceeded", "background",
                          "Too many background responses: %lld are running, at most %lld "
                          "(responses_background_max). Retry when one has ended.",
                          (long long)g->api->n_background, (long long)max);
        return IFD_EINVAL;
    }
    g->background = true;
    g->api->n_background++;
    return 0;
}

/* The client's identity (its stored Responses' owner) and the request's
 * id, drawn from getrandom (ids.h). false: answered with a 500, g freed. */
static bool ifd__identify(ifd_gen_t *g, const ifd_http_request_t *r)
{
    const char *why = NULL;
    if (ifd_api_identity(g->api, r, g->owner, sizeof g->owner))
        why = "The client's identity does not fit.";
    else if (ifd_ids_make(g->id, g->api_kind)) /* logged */
        why = "The request id could not be drawn from the system's random number generator.";
    if (!why) {
        g->client = ifd__client_id(g->owner);
        return true;
    }
    snprintf(g->id, sizeof g->id, "(no id)");
    ifd__reject(g, 500, NULL, NULL, why);
    return false;
}

void ifd_gen_handle(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r,
                    ifd_oai_kind_t kind)
{
    ifd_gen_t *g = calloc(1, sizeof *g);
    if (!g) {
        ifd_reply_errorf(c, 500, NULL, NULL, "Out of memory.");
        return;
    }
#ifdef IFD_TEST_HOOKS
    if (!ifd__loop_thread_set) { /* ifd__test_lp_off_loop: this is the loop's thread */
        ifd__loop_thread = uv_thread_self();
        ifd__loop_thread_set = true;
    }
#endif
    g->api = api;
    g->kind = kind == IFD_OAI_RESPONSES ? IFD_OAI_CHAT : kind;
    g->api_kind = kind;
    g->t_arrival_ns = r->t_ns;
    g->created = (int64_t)time(NULL);
    /* 8 KiB chunks, not 64: a streaming request uses a few KiB, and 256 of
     * them each holding a mostly untouched 64 KiB block spread the heap's
     * resident pages (docs/reliability.md, "Memory") */
    ifd_arena_init(&g->arena, 8192);
    ifd_arena_init(&g->sarena, 0);
    g->next = api->gens;
    if (api->gens)
        api->gens->prev = g;
    api->gens = g;
    g->conn = c;
    if (!ifd__identify(g, r))
        return;

    ifd_oai_error_t e;
    memset(&e, 0, sizeof e);
    int rc = kind == IFD_OAI_CHAT ? ifd_oai_parse_chat(&g->arena, r->body, r->body_len, &g->req, &e)
             : kind == IFD_OAI_RESPONSES
                 ? ifd__parse_responses(g, r, &e)
                 : ifd_oai_parse_completion(&g->arena, r->body, r->body_len, &g->req, &e);
    if (rc) {
        g->conn = NULL;
        ifd_reply_parse_error(c, &e);
        ifd__gen_free(g);
        return;
    }
    ifd_oai_request_t *rq = &g->req;
    if (ifd__model_sampling_defaults(api, &g->arena, rq)) {
        ifd__reject(g, 500, NULL, NULL, "Out of memory.");
        return;
    }
    g->n_prompts = g->kind == IFD_OAI_CHAT ? 1 : rq->n_prompts;
    if (rq->model && strcmp(rq->model, api->model_id) != 0 &&
        strcmp(rq->model, api->model_path) != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "The model `%.200s` does not exist.", rq->model);
        ifd__reject(g, 404, "model_not_found", "model", msg);
        return;
    }
    if ((uint64_t)g->n_prompts * rq->n > IFD__MAX_CHOICES) {
        ifd__reject(g, 400, "invalid_value", "n",
                    "Too many choices: the number of prompts times 'n' must be at most 256.");
        return;
    }
    char param[64], msg[256];
    /* logit_bias keys up to the model's vocabulary rows, as vLLM checks them
     * (model_config.get_vocab_size()): an id past the tokenizer's (Gemma 3
     * 4B) is accepted and has no effect, its logit being -inf (worker/model.h) */
    const int32_t n_bias_vocab = api->mcfg && (int32_t)api->mcfg->n_vocab > api->n_vocab
                                     ? (int32_t)api->mcfg->n_vocab
                                     : api->n_vocab;
    /* logit_bias entries start with their id */
    if (!ifd__check_max_logprobs(g, n_bias_vocab) || !ifd__check_spec(g) ||
        !ifd__check_vocab(g, "logit_bias", "Invalid keys in 'logit_bias'", rq->logit_bias,
                          sizeof rq->logit_bias[0], rq->n_logit_bias, n_bias_vocab) ||
        !ifd__check_vocab(g, "allowed_token_ids", "Invalid 'allowed_token_ids'",
                          rq->allowed_token_ids, sizeof(int32_t), rq->n_allowed_token_ids,
                          api->n_vocab) ||
        !ifd__check_vocab(g, "logprob_token_ids", "Invalid 'logprob_token_ids'",
                          rq->logprob_token_ids, sizeof(int32_t), rq->n_logprob_token_ids,
                          api->n_vocab))
        return;
    for (size_t i = 0; i < rq->n_stop_token_ids; i++) {
        if (rq->stop_token_ids[i] >= api->n_vocab) {
            snprintf(param, sizeof param, "stop_token_ids[%zu]", i);
            snprintf(msg, sizeof msg, "Token id %d is not in the vocabulary (%d tokens).",
                     rq->stop_token_ids[i], api->n_vocab);
            ifd__reject(g, 400, "invalid_value", param, msg);
            return;
        }
    }
    for (size_t p = 0; kind == IFD_OAI_COMPLETION && p < g->n_prompts; p++) {
        for (size_t i = 0; i < rq->prompts[p].n_tokens; i++) {
            if (rq->prompts[p].tokens[i] >= api->n_vocab) {
                if (g->n_prompts > 1)
                    snprintf(param, sizeof param, "prompt[%zu][%zu]", p, i);
                else
                    snprintf(param, sizeof param, "prompt[%zu]", i);
                snprintf(msg, sizeof msg, "Token id %d is not in the vocabulary (%d tokens).",
                         rq->prompts[p].tokens[i], api->n_vocab);
                ifd__reject(g, 400, "invalid_value", param, msg);
                return;
            }
        }
    }
    if (rq->max_tokens > api->max_model_len) {
        snprintf(msg, sizeof msg,
                 "This model's maximum context length is %lld tokens, but "
                 "max_tokens is %lld.",
                 (long long)api->max_model_len, (long long)rq->max_tokens);
        ifd__reject(g, 400, "context_length_exceeded", "max_tokens", msg);
        return;
    }
    /* images: the model takes them, their count, data: URLs (images.h) */
    ifd_images_setup(&g->img_setup, &api->vision, api->cfg);
    if (ifd_images_check(&g->img_setup, rq, &e)) {
        ifd_http_conn_t *conn = g->conn;
        g->conn = NULL;
        ifd_http_set_abort(conn, NULL, NULL);
        ifd_reply_error(conn, &e, 0);
        ifd__gen_free(g);
        return;
    }
    /* availability and admission, before any tokenizing */
    if (api->draining) {
        ifd__reject(g, 503, NULL, NULL, "The server is shutting down.");
        return;
    }
    if (ifd_sup_all_failed(api->sup)) {
        ifd__reject(g, 503, NULL, NULL,
                    "No worker is available: they crashed repeatedly (see /health).");
        return;
    }
    int64_t depth = api->n_tokenizing + ifd_router_queued(api->router);
    if (depth >= api->cfg->max_queue) {
        api->metrics->queue_rejected++;
        ifd__reject(g, 503, NULL, NULL,
                    "The server is busy: the request queue is full. "
                    "Retry later.");
        return;
    }
    g->reserved = true;
    api->n_tokenizing++;

    g->ptoks = ifd_arena_calloc(&g->arena, g->n_prompts, sizeof *g->ptoks);
    g->echo = ifd_arena_calloc(&g->arena, g->n_prompts, sizeof *g->echo);
    g->echo_len = ifd_arena_calloc(&g->arena, g->n_prompts, sizeof *g->echo_len);
    if (!g->ptoks || !g->echo || !g->echo_len) {
        ifd__reject(g, 500, NULL, NULL, "Out of memory.");
        return;
    }
    ifd_http_set_abort(c, ifd__abort_cb, g);
    g->work.data = g;
    rc = uv_queue_work(api->loop, &g->work, ifd__work_cb, ifd__after_work_cb);
    if (rc) {
        ifd__reject(g, 500, NULL, NULL, "The request could not be queued.");
        return;
    }
    g->work_pending = true;
}

/* ---- background Responses ---------------------------------------------------------------- */

/* owner's detached background Response id, still running, or NULL. */
static ifd_gen_t *ifd__find_background(ifd_api_t *api, const char *owner, const char *id)
{
    for (ifd_gen_t *g = api->gens; g; g = g->next)
        if (g->background && !g->aborted && g->running && !strcmp(g->id, id) &&
            !strcmp(g->owner, owner))
            return g;
    return NULL;
}

int ifd_gen_background_status(ifd_api_t *api, const char *owner, const char *id, ifd_buf_t *out)
{
    ifd_gen_t *g = ifd__find_background(api, owner, id);
    if (!g)
        return IFD_ENOTFOUND;
    ifd_oai_meta_t m = ifd__meta(g);
    return ifd_responses_status_json(out, &m, g->dispatched ? "in_progress" : "queued", NULL);
}

int ifd_gen_background_cancel(ifd_api_t *api, const char *owner, const char *id, ifd_buf_t *out)
{
    ifd_gen_t *g = ifd__find_background(api, owner, id);
    if (!g)
        return IFD_ENOTFOUND;
    IFD_INFO("gen %s: background Response cancelled", g->id);
    ifd_oai_meta_t m = ifd__meta(g);
    int rc = out ? ifd_responses_status_json(out, &m, "cancelled", NULL) : 0;
    ifd__keep_status(g, "cancelled", NULL);
    if (ifd__busy(g)) { /* its answer is being written or checked: dropped when done */
        ifd__abandon(g);
        return rc;
    }
    ifd__stream_close(g); /* a stream still read ends here; its sequences released */
    return rc;
}
