/*
 * metrics.h — the daemon's counters, gauges and histograms, and their
 * Prometheus text exposition (GET /metrics).
 *
 * Counters and histograms live in ifd_metrics_t, updated by the loop thread
 * as things happen. Gauges (queue depth, running requests, KV blocks,
 * workers by state, …) are not stored: the caller samples them into an
 * ifd_metrics_gauges_t right before rendering. Every metric is defined once,
 * in the tables of metrics.c (name, type, help); names follow Prometheus
 * conventions (`inferd_` prefix, `_total` only on counters, `_seconds`
 * histograms; no gauge is named like a counter family's `_total` sample).
 *
 * The same numbers are also exposed under vLLM's names (`vllm:…`, each with
 * a model_name label), so tools written for vLLM — dashboards, the Gateway
 * API inference extension's endpoint picker — work unmodified. vLLM's
 * histograms have vLLM's buckets (vllm/v1/metrics/loggers.py), so they are
 * histograms of their own (the v_* members), fed by the same observations
 * through ifd_metrics_ttft / _itl / _seq_done / _request_done; the token
 * count histograms' buckets are vLLM's 1-2-5 series up to max_model_len
 * (ifd_metrics_set_max_model_len). The per-sequence times are taken at the
 * router: queue = arrival → dispatch to a worker, prefill = dispatch →
 * first token, decode = first → last token, inference = dispatch → last
 * token (vLLM takes them in its engine core; here they include the
 * router↔worker hop).
 *
 * Plain data, no allocation except into the output buffer. Threading: the
 * loop thread only.
 */
#ifndef IFD_DAEMON_METRICS_H
#define IFD_DAEMON_METRICS_H

#include "arena.h"
#include "kvpool/kvpool.h"
#include "proto/wire.h"

#include <stdbool.h>
#include <stdint.h>

#define IFD_HIST_MAX_BUCKETS  24 /* vLLM's TTFT has 22 */
#define IFD_METRICS_MAX_CODES 32

typedef struct {
    const double *bounds; /* upper bounds, ascending (static storage) */
    int n_bounds;
    uint64_t counts[IFD_HIST_MAX_BUCKETS + 1]; /* per bucket, the last is +Inf */
    uint64_t count;
    double sum;
} ifd_hist_t;

/* Why a completion choice ended (label finish_reason). */
typedef enum {
    IFD_FIN_STOP = 0,
    IFD_FIN_LENGTH,
    IFD_FIN_ABORT, /* the client went away or the daemon gave up on it */
    IFD_FIN_ERROR,
    IFD_FIN_COUNT
} ifd_fin_t;

typedef struct {
    struct {
        int code;
        uint64_t n;
    } http[IFD_METRICS_MAX_CODES]; /* responses by status code */
    int n_http;
    uint64_t finished[IFD_FIN_COUNT]; /* choices by finish reason */
    uint64_t prompt_tokens;           /* of every finished choice */
    uint64_t generation_tokens;
    uint64_t prefix_query_tokens; /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_hit_tokens;   /* of which served from it */
    uint64_t worker_starts;
    uint64_t worker_restarts;
    uint64_t worker_crashes;
    uint64_t worker_redispatched; /* sequences moved after a worker died */
    uint64_t connections_total;
    uint64_t connections_rejected; /* over max_connections */
    uint64_t queue_rejected;       /* 503 because the queue was full */
    uint64_t invalid_outputs;      /* structured outputs that failed their schema check */
    ifd_hist_t ttft;               /* seconds from arrival to the first token */
    ifd_hist_t itl;                /* seconds between two tokens of a sequence */
    ifd_hist_t e2e;                /* seconds from arrival to the last token */
    ifd_hist_t queue_time;         /* seconds from arrival to dispatch */

    /* vLLM's histograms, with its buckets (the vllm: families only) */
    ifd_hist_t v_ttft, v_itl, v_e2e, v_queue, v_prefill, v_decode, v_inference;
    ifd_hist_t v_tpot;                        /* per sequence: decode time / (tokens - 1) */
    ifd_hist_t v_prompt_tokens, v_gen_tokens; /* per finished sequence */
    ifd_hist_t v_max_tokens;                  /* the max_tokens parameter (when given) */
    ifd_hist_t v_n, v_max_gen_tokens;         /* per prompt: n, most tokens of its choices */
    double tok_bounds[IFD_HIST_MAX_BUCKETS];  /* 1-2-5 up to max_model_len: the token hists */
} ifd_metrics_t;

/* One finished sequence (a choice), for vLLM's per-request histograms.
 * Times are uv_hrtime() values; 0 when the event did not happen (no token:
 * first_token_ns and last_token_ns 0). */
typedef struct {
    uint64_t arrival_ns, scheduled_ns, first_token_ns, last_token_ns, end_ns;
    uint32_t prompt_tokens, generation_tokens;
    int64_t max_tokens; /* the request's parameter, -1 when not given */
} ifd_metrics_seq_t;

/* Sampled just before rendering. */
typedef struct {
    int64_t queue_depth;      /* sequences waiting for a worker + requests tokenizing */
    int64_t requests_running; /* generation requests being served */
    int64_t seqs_running;     /* sequences dispatched to workers */
    int64_t connections;
    int64_t kv_total, kv_free, kv_used, kv_cached;
    uint64_t kv_evictions;
    uint64_t kv_alloc_failures;
    uint64_t preemptions; /* summed over workers' last stats */
    /* speculative decoding (summed over workers' last stats): verifications,
     * proposed and accepted tokens, accepted per proposal position */
    uint64_t spec_drafts, spec_draft_tokens, spec_accepted_tokens;
    uint64_t spec_accepted_per_pos[IFD_WIRE_MAX_SPEC_TOKENS];
    uint64_t engine_steps;
    /* steps by batched tokens (IFD_WIRE_STEP_TOKEN_BOUNDS' buckets) and the
     * tokens of all steps, summed over workers: vllm:iteration_tokens_total */
    uint64_t step_tokens[IFD_WIRE_STEP_BUCKETS];
    uint64_t step_tokens_sum;
    /* sliding-window layers: held KV no local layer reads again (summed over workers) */
    int64_t kv_local_releasable_blocks, kv_local_releasable_bytes;
    /* with a local-layer pool: held blocks whose local-layer K/V went back to it
     * and those bytes (summed over workers), and that pool's blocks */
    int64_t kv_local_released_blocks, kv_local_released_bytes;
    int64_t kv_local_total, kv_local_used;
    /* the KV pool's disk tier (kvpool.h, ifd_kvpool_tier_*): every worker's */
    uint64_t kv_tier[IFD_KVTIER_COUNT];
    /* the draft model's own pool's tiers (speculative decoding, docs/
     * speculative.md "The draft's tiers"): its counters and host gauges summed
     * over the workers' last STATS, its disk gauges (the shared directory's,
     * as each worker measured it) their largest; rendered as inferd_draft_kv_*
     * when draft_tiers (the daemon runs a draft model) */
    uint64_t draft_kv_tier[IFD_KVTIER_COUNT];
    bool draft_tiers;
    /* vLLM's external prefix cache: the host and disk tiers together (tokens) */
    uint64_t kv_ext_query_tokens, kv_ext_hit_tokens;
    int64_t workers_ready, workers_starting, workers_down, workers_failed;
    double uptime_s;
    /* the cache configuration (vllm:cache_config_info) */
    int64_t kv_block_size;
    const char *kv_dtype; /* "f16", …; NULL: not shown */
    bool prefix_cache;
    /* the daemon's speculative decoding (the spec setting: "off", "ngram",
     * "draft"), inferd_info's spec label; NULL: not shown */
    const char *spec;
} ifd_metrics_gauges_t;

/* Zeroes m and sets every histogram's buckets (the token ones for a
 * max_model_len of 2048 until ifd_metrics_set_max_model_len). m's token
 * histograms point into m itself: it must not be copied. */
void ifd_metrics_init(ifd_metrics_t *m);

/* The token count histograms' buckets: vLLM's build_1_2_5_buckets(len)
 * (1, 2, 5, 10, …, at most len). Before anything is observed. */
void ifd_metrics_set_max_model_len(ifd_metrics_t *m, int64_t len);

void ifd_hist_observe(ifd_hist_t *h, double v);

/* A request's first token came secs after its arrival / a sequence's token
 * secs after its previous one: both the inferd_ and the vllm: histograms. */
void ifd_metrics_ttft(ifd_metrics_t *m, double secs);
void ifd_metrics_itl(ifd_metrics_t *m, double secs);

/* A sequence finished (stop or length): vLLM's per-request histograms. */
void ifd_metrics_seq_done(ifd_metrics_t *m, const ifd_metrics_seq_t *s);

/* A prompt's choices all finished: vllm:request_params_n (n) and
 * vllm:request_max_num_generation_tokens (the most tokens one generated). */
void ifd_metrics_request_done(ifd_metrics_t *m, uint32_t n, uint32_t max_generation_tokens);

/* Counts one HTTP response with this status. */
void ifd_metrics_count_status(ifd_metrics_t *m, int status);

/* Appends the exposition text (format 0.0.4). model is the served model's
 * name (escaped here for label values). 0 or IFD_ENOMEM. */
int ifd_metrics_render(const ifd_metrics_t *m, const ifd_metrics_gauges_t *g, const char *model,
                       ifd_buf_t *out);

#endif
