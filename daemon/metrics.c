/*
 * metrics.c — see metrics.h. Three tables define every metric: counters
 * read from ifd_metrics_t, gauges read from ifd_metrics_gauges_t (both by
 * offset), and histograms. Labeled families (status codes, finish reasons,
 * KV block states, worker states) are written by small loops after them.
 */
#include "metrics.h"

#include "error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const double ifd__ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                          1,     2.5,  5,     10,   20,  40,   80};
static const double ifd__itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                         0.1,   0.25,   0.5,   1,    2.5,   5};
static const double ifd__e2e_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320};

/* vLLM's buckets (vllm/v1/metrics/loggers.py): time to first token, inter-
 * token latency (also time per output token), request latencies (e2e,
 * queue, prefill, decode, inference) and the n parameter. */
static const double ifd__v_ttft_bounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                            0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                            20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double ifd__v_itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                           0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                           7.5,  10.0,  20.0, 40.0,  80.0};
static const double ifd__v_latency_bounds[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                               5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double ifd__v_n_bounds[] = {1, 2, 5, 10, 20};

#define IFD__ARRLEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void ifd__hist_set(ifd_hist_t *h, const double *bounds, int n)
{
    IFD_ASSERT(n <= IFD_HIST_MAX_BUCKETS);
    h->bounds = bounds;
    h->n_bounds = n;
}
#define IFD__HIST_SET(h, b) ifd__hist_set(h, b, IFD__ARRLEN(b))

void ifd_metrics_init(ifd_metrics_t *m)
{
    memset(m, 0, sizeof *m);
    IFD__HIST_SET(&m->ttft, ifd__ttft_bounds);
    IFD__HIST_SET(&m->itl, ifd__itl_bounds);
    IFD__HIST_SET(&m->e2e, ifd__e2e_bounds);
    IFD__HIST_SET(&m->queue_time, ifd__ttft_bounds);
    IFD__HIST_SET(&m->v_ttft, ifd__v_ttft_bounds);
    IFD__HIST_SET(&m->v_itl, ifd__v_itl_bounds);
    IFD__HIST_SET(&m->v_tpot, ifd__v_itl_bounds);
    ifd_hist_t *lat[] = {&m->v_e2e, &m->v_queue, &m->v_prefill, &m->v_decode, &m->v_inference};
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++)
        IFD__HIST_SET(lat[i], ifd__v_latency_bounds);
    IFD__HIST_SET(&m->v_n, ifd__v_n_bounds);
    ifd_metrics_set_max_model_len(m, 2048);
}

void ifd_metrics_set_max_model_len(ifd_metrics_t *m, int64_t len)
{
    static const int mant[] = {1, 2, 5};
    int n = 0;
    for (double p = 1; n < IFD_HIST_MAX_BUCKETS; p *= 10) {
        int i = 0;
        for (; i < 3 && n < IFD_HIST_MAX_BUCKETS && mant[i] * p <= (double)len; i++)
            m->tok_bounds[n++] = mant[i] * p;
        if (i < 3)
            break;
    }
    ifd_hist_t *tok[] = {&m->v_prompt_tokens, &m->v_gen_tokens, &m->v_max_tokens,
                         &m->v_max_gen_tokens};
    for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++)
        ifd__hist_set(tok[i], m->tok_bounds, n);
}

void ifd_hist_observe(ifd_hist_t *h, double v)
{
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void ifd_metrics_ttft(ifd_metrics_t *m, double secs)
{
    ifd_hist_observe(&m->ttft, secs);
    ifd_hist_observe(&m->v_ttft, secs);
}

void ifd_metrics_itl(ifd_metrics_t *m, double secs)
{
    ifd_hist_observe(&m->itl, secs);
    ifd_hist_observe(&m->v_itl, secs);
}

/* b - a in seconds, 0 unless both happened in that order. */
static double ifd__span(uint64_t a_ns, uint64_t b_ns)
{
    return a_ns && b_ns > a_ns ? (double)(b_ns - a_ns) / 1e9 : 0.0;
}

void ifd_metrics_seq_done(ifd_metrics_t *m, const ifd_metrics_seq_t *s)
{
    /* a sequence that produced no token (max_tokens 0) ends its prefill at its end */
    uint64_t first = s->first_token_ns ? s->first_token_ns : s->end_ns;
    uint64_t last = s->last_token_ns ? s->last_token_ns : first;
    ifd_hist_observe(&m->v_e2e, ifd__span(s->arrival_ns, s->end_ns));
    ifd_hist_observe(&m->v_queue, ifd__span(s->arrival_ns, s->scheduled_ns));
    ifd_hist_observe(&m->v_prefill, ifd__span(s->scheduled_ns, first));
    ifd_hist_observe(&m->v_decode, ifd__span(first, last));
    ifd_hist_observe(&m->v_inference, ifd__span(s->scheduled_ns, last));
    if (s->generation_tokens > 1)
        ifd_hist_observe(&m->v_tpot, ifd__span(first, last) / (s->generation_tokens - 1));
    ifd_hist_observe(&m->v_prompt_tokens, s->prompt_tokens);
    ifd_hist_observe(&m->v_gen_tokens, s->generation_tokens);
    if (s->max_tokens >= 0)
        ifd_hist_observe(&m->v_max_tokens, (double)s->max_tokens);
}

void ifd_metrics_request_done(ifd_metrics_t *m, uint32_t n, uint32_t max_generation_tokens)
{
    ifd_hist_observe(&m->v_n, n);
    ifd_hist_observe(&m->v_max_gen_tokens, max_generation_tokens);
}

void ifd_metrics_count_status(ifd_metrics_t *m, int status)
{
    for (int i = 0; i < m->n_http; i++) {
        if (m->http[i].code == status) {
            m->http[i].n++;
            return;
        }
    }
    if (m->n_http < IFD_METRICS_MAX_CODES) {
        m->http[m->n_http].code = status;
        m->http[m->n_http].n = 1;
        m->n_http++;
    }
}

/* ---- the tables ---------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *help;
    size_t off;
} ifd__u64_row_t;

static const ifd__u64_row_t ifd__counters[] = {
    {"inferd_prompt_tokens_total", "Prompt tokens of finished sequences.",
     offsetof(ifd_metrics_t, prompt_tokens)},
    {"inferd_generation_tokens_total", "Tokens generated.",
     offsetof(ifd_metrics_t, generation_tokens)},
    {"inferd_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
     offsetof(ifd_metrics_t, prefix_query_tokens)},
    {"inferd_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
     offsetof(ifd_metrics_t, prefix_hit_tokens)},
    {"inferd_worker_starts_total", "Worker processes started.",
     offsetof(ifd_metrics_t, worker_starts)},
    {"inferd_worker_restarts_total", "Worker processes restarted after dying.",
     offsetof(ifd_metrics_t, worker_restarts)},
    {"inferd_worker_crashes_total", "Worker processes that died unexpectedly.",
     offsetof(ifd_metrics_t, worker_crashes)},
    {"inferd_redispatched_sequences_total",
     "Sequences resumed on another worker after theirs died.",
     offsetof(ifd_metrics_t, worker_redispatched)},
    {"inferd_connections_total", "Client connections accepted.",
     offsetof(ifd_metrics_t, connections_total)},
    {"inferd_connections_rejected_total", "Connections refused over max_connections.",
     offsetof(ifd_metrics_t, connections_rejected)},
    {"inferd_structured_output_invalid_total",
     "Choices whose output failed the check against its JSON Schema (answered 500).",
     offsetof(ifd_metrics_t, invalid_outputs)},
    {"inferd_queue_rejected_total", "Requests answered 503 because the queue was full.",
     offsetof(ifd_metrics_t, queue_rejected)},
};

typedef struct {
    const char *name;
    const char *type; /* "gauge" or "counter" */
    const char *help;
    size_t off;
} ifd__gauge_row_t;

static const ifd__gauge_row_t ifd__gauges[] = {
    {"inferd_queue_depth", "gauge", "Sequences waiting for a worker plus requests being tokenized.",
     offsetof(ifd_metrics_gauges_t, queue_depth)},
    {"inferd_requests_running", "gauge", "Generation requests being served.",
     offsetof(ifd_metrics_gauges_t, requests_running)},
    {"inferd_sequences_running", "gauge", "Sequences dispatched to workers.",
     offsetof(ifd_metrics_gauges_t, seqs_running)},
    {"inferd_connections_open", "gauge", "Open client connections.",
     offsetof(ifd_metrics_gauges_t, connections)},
    {"inferd_kv_blocks_capacity", "gauge", "KV cache blocks in the pool.",
     offsetof(ifd_metrics_gauges_t, kv_total)},
    {"inferd_kv_evictions_total", "counter", "Cached KV blocks evicted for new allocations.",
     offsetof(ifd_metrics_gauges_t, kv_evictions)},
    {"inferd_kv_alloc_failures_total", "counter", "KV allocations that found no block.",
     offsetof(ifd_metrics_gauges_t, kv_alloc_failures)},
    {"inferd_preemptions_total", "counter", "Sequences preempted by the workers' schedulers.",
     offsetof(ifd_metrics_gauges_t, preemptions)},
    {"inferd_engine_steps_total", "counter", "Engine steps run by the workers.",
     offsetof(ifd_metrics_gauges_t, engine_steps)},
    {"inferd_kv_local_releasable_blocks", "gauge",
     "KV blocks held by running sequences wholly before every sliding-window layer's window "
     "(their local-layer K/V is never read again but stays allocated: not released yet).",
     offsetof(ifd_metrics_gauges_t, kv_local_releasable_blocks)},
    {"inferd_kv_local_releasable_bytes", "gauge",
     "Local-layer K/V bytes in those blocks: what releasing them per layer would free "
     "(not freed yet).",
     offsetof(ifd_metrics_gauges_t, kv_local_releasable_bytes)},
    {"inferd_kv_local_released_blocks", "gauge",
     "KV blocks held by running sequences whose sliding-window layers' K/V went back to the "
     "local-layer pool (the window moved past them): freed, 0 without that pool.",
     offsetof(ifd_metrics_gauges_t, kv_local_released_blocks)},
    {"inferd_kv_local_released_bytes", "gauge",
     "Local-layer K/V bytes of those blocks: the memory the local-layer pool saves now over one "
     "pool of every layer.",
     offsetof(ifd_metrics_gauges_t, kv_local_released_bytes)},
    {"inferd_kv_local_blocks_capacity", "gauge",
     "Blocks in the sliding-window layers' own KV pool (0: none, one pool holds every layer).",
     offsetof(ifd_metrics_gauges_t, kv_local_total)},
    {"inferd_kv_local_blocks_used", "gauge", "Blocks of the local-layer pool in use.",
     offsetof(ifd_metrics_gauges_t, kv_local_used)},
#define IFD__TIER(c) offsetof(ifd_metrics_gauges_t, kv_tier) + (c) * sizeof(uint64_t)
    {"inferd_kv_disk_bytes", "gauge",
     "Bytes of block files in the KV cache's disk tier (kv_cache_dir), as a worker last "
     "measured them.",
     IFD__TIER(IFD_KVTIER_DISK_BYTES)},
    {"inferd_kv_disk_files", "gauge", "Block files in the disk tier.",
     IFD__TIER(IFD_KVTIER_DISK_FILES)},
    {"inferd_kv_disk_capacity_bytes", "gauge", "The disk tier's size bound (0: no tier).",
     IFD__TIER(IFD_KVTIER_DISK_CAPACITY)},
    {"inferd_kv_disk_queries_total", "counter",
     "Prompt tokens looked up in the disk tier (past the pool's prefix hit).",
     IFD__TIER(IFD_KVTIER_QUERY_TOKENS)},
    {"inferd_kv_disk_hits_total", "counter", "Prompt tokens read back from the disk tier.",
     IFD__TIER(IFD_KVTIER_HIT_TOKENS)},
    {"inferd_kv_disk_hit_blocks_total", "counter", "KV blocks read back from the disk tier.",
     IFD__TIER(IFD_KVTIER_HIT_BLOCKS)},
    {"inferd_kv_disk_misses_total", "counter",
     "Disk tier lookups that found no file for their first block.",
     IFD__TIER(IFD_KVTIER_MISS_BLOCKS)},
    {"inferd_kv_disk_read_bytes_total", "counter", "Bytes read from the disk tier.",
     IFD__TIER(IFD_KVTIER_READ_BYTES)},
    {"inferd_kv_disk_written_bytes_total", "counter", "Bytes written to the disk tier.",
     IFD__TIER(IFD_KVTIER_WRITTEN_BYTES)},
    {"inferd_kv_disk_writes_total", "counter", "Block files written to the disk tier.",
     IFD__TIER(IFD_KVTIER_WRITES)},
    {"inferd_kv_disk_dropped_total", "counter",
     "Published blocks not written (write queue full, or writing turned off).",
     IFD__TIER(IFD_KVTIER_DROPPED)},
    {"inferd_kv_disk_bad_files_total", "counter",
     "Torn, truncated, corrupt or foreign block files skipped and deleted.",
     IFD__TIER(IFD_KVTIER_BAD_FILES)},
    {"inferd_kv_disk_slow_reads_total", "counter",
     "Disk reads cut at their deadline (the rest of the prefix recomputed).",
     IFD__TIER(IFD_KVTIER_SLOW_READS)},
    {"inferd_kv_disk_evicted_files_total", "counter",
     "Block files deleted to keep the disk tier within its size bound.",
     IFD__TIER(IFD_KVTIER_EVICTED_FILES)},
    {"inferd_kv_host_bytes", "gauge",
     "Bytes of KV blocks in the GPU workers' host-RAM tiers (kv_cache_host_bytes), all workers.",
     IFD__TIER(IFD_KVTIER_HOST_BYTES)},
    {"inferd_kv_host_blocks", "gauge", "KV blocks in the host-RAM tiers.",
     IFD__TIER(IFD_KVTIER_HOST_BLOCKS)},
    {"inferd_kv_host_capacity_bytes", "gauge",
     "The host-RAM tiers' size bounds, summed over the workers (0: no tier).",
     IFD__TIER(IFD_KVTIER_HOST_CAPACITY)},
    {"inferd_kv_host_queries_total", "counter",
     "Prompt tokens looked up in the host-RAM tier (past the pool's prefix hit).",
     IFD__TIER(IFD_KVTIER_HOST_QUERY_TOKENS)},
    {"inferd_kv_host_hits_total", "counter",
     "Prompt tokens copied back from the host-RAM tier to the device.",
     IFD__TIER(IFD_KVTIER_HOST_HIT_TOKENS)},
    {"inferd_kv_host_hit_blocks_total", "counter", "KV blocks copied back from the host-RAM tier.",
     IFD__TIER(IFD_KVTIER_HOST_HIT_BLOCKS)},
    {"inferd_kv_host_misses_total", "counter",
     "Host-RAM tier lookups that found no copy of their first block.",
     IFD__TIER(IFD_KVTIER_HOST_MISSES)},
    {"inferd_kv_host_read_bytes_total", "counter", "Bytes copied back from the host-RAM tier.",
     IFD__TIER(IFD_KVTIER_HOST_READ_BYTES)},
    {"inferd_kv_host_writes_total", "counter",
     "Published KV blocks copied from the device into the host-RAM tier.",
     IFD__TIER(IFD_KVTIER_HOST_WRITES)},
    {"inferd_kv_host_evicted_total", "counter",
     "Blocks evicted from the host-RAM tier to stay within its bound.",
     IFD__TIER(IFD_KVTIER_HOST_EVICTED)},
    {"inferd_kv_host_dropped_total", "counter",
     "Published blocks not kept in the host-RAM tier (no memory, or the copy failed).",
     IFD__TIER(IFD_KVTIER_HOST_DROPPED)},
};

typedef struct {
    const char *name;
    const char *help;
    size_t off;
} ifd__hist_row_t;

static const ifd__hist_row_t ifd__hists[] = {
    {"inferd_time_to_first_token_seconds", "Time from a request's arrival to its first token.",
     offsetof(ifd_metrics_t, ttft)},
    {"inferd_inter_token_latency_seconds", "Time between two tokens of one sequence.",
     offsetof(ifd_metrics_t, itl)},
    {"inferd_e2e_request_latency_seconds", "Time from a request's arrival to its last token.",
     offsetof(ifd_metrics_t, e2e)},
    {"inferd_request_queue_time_seconds", "Time from arrival to dispatch to a worker.",
     offsetof(ifd_metrics_t, queue_time)},
};

static const char *const ifd__fin_names[IFD_FIN_COUNT] = {"stop", "length", "abort", "error"};

/* vLLM's names for the same numbers (vllm/v1/metrics/loggers.py), each with
 * a model_name label. Source: a gauge (int64 in ifd_metrics_gauges_t), a
 * counter (uint64 in ifd_metrics_t) or a histogram (ifd_hist_t there). */
typedef enum { IFD__V_GAUGE, IFD__V_COUNTER, IFD__V_HIST } ifd__vsrc_t;

typedef struct {
    const char *name;
    ifd__vsrc_t src;
    const char *help;
    size_t off;
} ifd__vllm_row_t;

static const ifd__vllm_row_t ifd__vllm[] = {
    {"vllm:num_requests_running", IFD__V_GAUGE, "Sequences running on the workers.",
     offsetof(ifd_metrics_gauges_t, seqs_running)},
    {"vllm:num_requests_waiting", IFD__V_GAUGE, "Sequences waiting to be scheduled.",
     offsetof(ifd_metrics_gauges_t, queue_depth)},
    {"vllm:prompt_tokens_total", IFD__V_COUNTER, "Prompt tokens processed.",
     offsetof(ifd_metrics_t, prompt_tokens)},
    {"vllm:generation_tokens_total", IFD__V_COUNTER, "Tokens generated.",
     offsetof(ifd_metrics_t, generation_tokens)},
    {"vllm:num_preemptions_total", IFD__V_GAUGE, "Preemptions by the workers' schedulers.",
     offsetof(ifd_metrics_gauges_t, preemptions)},
    {"vllm:prefix_cache_queries_total", IFD__V_COUNTER, "Prompt tokens looked up in the cache.",
     offsetof(ifd_metrics_t, prefix_query_tokens)},
    {"vllm:prefix_cache_hits_total", IFD__V_COUNTER, "Prompt tokens served from the cache.",
     offsetof(ifd_metrics_t, prefix_hit_tokens)},
    /* vLLM's KV connector (offloading, LMCache) counters: the host and disk tiers' */
    {"vllm:external_prefix_cache_queries_total", IFD__V_GAUGE,
     "External prefix cache (the host-RAM and disk tiers) queries, in tokens (a token "
     "looked up in both counts twice).",
     offsetof(ifd_metrics_gauges_t, kv_ext_query_tokens)},
    {"vllm:external_prefix_cache_hits_total", IFD__V_GAUGE,
     "External prefix cache (the host-RAM and disk tiers) hits, in tokens.",
     offsetof(ifd_metrics_gauges_t, kv_ext_hit_tokens)},
    /* speculative decoding (vLLM's Counter names; prometheus_client adds _total) */
    {"vllm:spec_decode_num_drafts_total", IFD__V_GAUGE,
     "Speculative verifications (steps of a sequence with proposed tokens).",
     offsetof(ifd_metrics_gauges_t, spec_drafts)},
    {"vllm:spec_decode_num_draft_tokens_total", IFD__V_GAUGE, "Proposed tokens verified.",
     offsetof(ifd_metrics_gauges_t, spec_draft_tokens)},
    {"vllm:spec_decode_num_accepted_tokens_total", IFD__V_GAUGE, "Proposed tokens accepted.",
     offsetof(ifd_metrics_gauges_t, spec_accepted_tokens)},
    {"vllm:time_to_first_token_seconds", IFD__V_HIST,
     "Histogram of time to first token in seconds.", offsetof(ifd_metrics_t, v_ttft)},
    {"vllm:time_per_output_token_seconds", IFD__V_HIST,
     "Histogram of time per output token in seconds (vLLM's older name of "
     "vllm:inter_token_latency_seconds).",
     offsetof(ifd_metrics_t, v_itl)},
    {"vllm:inter_token_latency_seconds", IFD__V_HIST,
     "Histogram of inter-token latency in seconds.", offsetof(ifd_metrics_t, v_itl)},
    {"vllm:request_time_per_output_token_seconds", IFD__V_HIST,
     "Histogram of time_per_output_token_seconds per request.", offsetof(ifd_metrics_t, v_tpot)},
    {"vllm:e2e_request_latency_seconds", IFD__V_HIST,
     "Histogram of e2e request latency in seconds.", offsetof(ifd_metrics_t, v_e2e)},
    {"vllm:request_queue_time_seconds", IFD__V_HIST,
     "Histogram of time spent in WAITING phase for request (arrival to dispatch).",
     offsetof(ifd_metrics_t, v_queue)},
    {"vllm:request_inference_time_seconds", IFD__V_HIST,
     "Histogram of time spent in RUNNING phase for request (dispatch to last token).",
     offsetof(ifd_metrics_t, v_inference)},
    {"vllm:request_prefill_time_seconds", IFD__V_HIST,
     "Histogram of time spent in PREFILL phase for request (dispatch to first token).",
     offsetof(ifd_metrics_t, v_prefill)},
    {"vllm:request_decode_time_seconds", IFD__V_HIST,
     "Histogram of time spent in DECODE phase for request (first to last token).",
     offsetof(ifd_metrics_t, v_decode)},
    {"vllm:request_prompt_tokens", IFD__V_HIST, "Number of prefill tokens processed.",
     offsetof(ifd_metrics_t, v_prompt_tokens)},
    {"vllm:request_generation_tokens", IFD__V_HIST, "Number of generation tokens processed.",
     offsetof(ifd_metrics_t, v_gen_tokens)},
    {"vllm:request_max_num_generation_tokens", IFD__V_HIST,
     "Histogram of maximum number of requested generation tokens.",
     offsetof(ifd_metrics_t, v_max_gen_tokens)},
    {"vllm:request_params_n", IFD__V_HIST, "Histogram of the n request parameter.",
     offsetof(ifd_metrics_t, v_n)},
    {"vllm:request_params_max_tokens", IFD__V_HIST,
     "Histogram of the max_tokens request parameter.", offsetof(ifd_metrics_t, v_max_tokens)},
};

/* The Prometheus label-value escape: backslash, double quote, newline. */
static void ifd__label_escape(char *out, size_t cap, const char *v)
{
    size_t n = 0;
    for (; v && *v && n + 3 < cap; v++) {
        char ch = *v;
        if (ch == '\\' || ch == '"' || ch == '\n') {
            out[n++] = '\\';
            ch = ch == '\n' ? 'n' : ch;
        }
        out[n++] = ch;
    }
    out[n] = '\0';
}

/* A bucket bound as prometheus_client's floatToGoString writes it, which
 * vLLM's exposition shows: Python's repr ("0.005", "1.0", "2560.0"), with
 * Go's exponent from 1e7 on ("1e+06" is written for 1000000.0). */
static void ifd__le(char *out, size_t len, double v)
{
    if (v == (double)(int64_t)v && v < 1e15) {
        char d[24];
        int dot = snprintf(d, sizeof d, "%.0f", v);
        if (dot > 6) { /* mantissa: the digits, trailing zeros dropped */
            int k = dot;
            while (k > 1 && d[k - 1] == '0')
                k--;
            snprintf(out, len, "%c%s%.*se+0%d", d[0], k > 1 ? "." : "", k - 1, d + 1, dot - 1);
        } else {
            snprintf(out, len, "%s.0", d);
        }
        return;
    }
    for (int p = 1; p <= 17; p++) { /* the shortest text that reads back as v */
        snprintf(out, len, "%.*g", p, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* ---- rendering ----------------------------------------------------------------------- */

static int ifd__head(ifd_buf_t *o, const char *name, const char *type, const char *help)
{
    return ifd_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The writers below append to `out`, and on failure set `rc` and jump to
 * `fail` (each function has all three). */
#define IFD__P(...)                                                                                \
    do {                                                                                           \
        if ((rc = ifd_buf_printf(out, __VA_ARGS__)))                                               \
            goto fail;                                                                             \
    } while (0)
#define IFD__H(n, t, h)                                                                            \
    do {                                                                                           \
        if ((rc = ifd__head(out, n, t, h)))                                                        \
            goto fail;                                                                             \
    } while (0)

/* The draft model's pool's tiers (speculative decoding): a twin of every
 * inferd_kv_* tier row of ifd__gauges, named inferd_draft_kv_* (families of
 * their own, so that a sum over the target's family never adds the
 * draft's), read from g->draft_kv_tier at the row's counter. 0 or IFD_ENOMEM. */
static int ifd__render_draft_tiers(const ifd_metrics_gauges_t *g, ifd_buf_t *out)
{
    int rc = 0;
    const size_t lo = offsetof(ifd_metrics_gauges_t, kv_tier);
    const size_t hi = lo + sizeof g->kv_tier;
    for (size_t i = 0; i < sizeof ifd__gauges / sizeof ifd__gauges[0]; i++) {
        const ifd__gauge_row_t *r = &ifd__gauges[i];
        if (r->off < lo || r->off >= hi || strncmp(r->name, "inferd_kv_", 10) != 0)
            continue;
        const size_t c = (r->off - lo) / sizeof g->kv_tier[0];
        IFD__P("# HELP inferd_draft_%s The draft model's own KV pool (speculative decoding): %s\n"
               "# TYPE inferd_draft_%s %s\n",
               r->name + 7, r->help, r->name + 7, r->type);
        IFD__P("inferd_draft_%s %llu\n", r->name + 7, (unsigned long long)g->draft_kv_tier[c]);
    }
    return 0;
fail:
    return rc;
}

/* The vLLM families (mn: the escaped model name). 0 or IFD_ENOMEM. */
static int ifd__render_vllm(const ifd_metrics_t *m, const ifd_metrics_gauges_t *g, const char *mn,
                            ifd_buf_t *out)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof ifd__vllm / sizeof ifd__vllm[0]; i++) {
        const ifd__vllm_row_t *r = &ifd__vllm[i];
        if (r->src == IFD__V_GAUGE) {
            /* counters among the sampled values are named *_total */
            size_t nl = strlen(r->name);
            bool ctr = nl > 6 && !strcmp(r->name + nl - 6, "_total");
            IFD__H(r->name, ctr ? "counter" : "gauge", r->help);
            IFD__P("%s{model_name=\"%s\"} %lld\n", r->name, mn,
                   (long long)*(const int64_t *)((const char *)g + r->off));
        } else if (r->src == IFD__V_COUNTER) {
            IFD__H(r->name, "counter", r->help);
            IFD__P("%s{model_name=\"%s\"} %llu\n", r->name, mn,
                   (unsigned long long)*(const uint64_t *)((const char *)m + r->off));
        } else {
            const ifd_hist_t *h = (const ifd_hist_t *)((const char *)m + r->off);
            IFD__H(r->name, "histogram", r->help);
            uint64_t cum = 0;
            for (int b = 0; b < h->n_bounds; b++) {
                char le[32];
                ifd__le(le, sizeof le, h->bounds[b]);
                cum += h->counts[b];
                IFD__P("%s_bucket{model_name=\"%s\",le=\"%s\"} %llu\n", r->name, mn, le,
                       (unsigned long long)cum);
            }
            cum += h->counts[h->n_bounds];
            IFD__P("%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", r->name, mn,
                   (unsigned long long)cum);
            IFD__P("%s_sum{model_name=\"%s\"} %.6f\n%s_count{model_name=\"%s\"} %llu\n", r->name,
                   mn, h->sum, r->name, mn, (unsigned long long)h->count);
        }
    }
    /* vLLM names this histogram like a counter; kept, so its dashboards find it */
    static const int step_bounds[] = {IFD_WIRE_STEP_TOKEN_BOUNDS};
    IFD__H("vllm:iteration_tokens_total", "histogram",
           "Histogram of number of tokens per engine_step.");
    uint64_t steps = 0;
    for (int b = 0; b < IFD_WIRE_STEP_BUCKETS; b++) {
        steps += g->step_tokens[b];
        if (b < IFD_WIRE_STEP_BUCKETS - 1)
            IFD__P("vllm:iteration_tokens_total_bucket{model_name=\"%s\",le=\"%d.0\"} %llu\n", mn,
                   step_bounds[b], (unsigned long long)steps);
    }
    IFD__P("vllm:iteration_tokens_total_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", mn,
           (unsigned long long)steps);
    IFD__P("vllm:iteration_tokens_total_sum{model_name=\"%s\"} %llu\n"
           "vllm:iteration_tokens_total_count{model_name=\"%s\"} %llu\n",
           mn, (unsigned long long)g->step_tokens_sum, mn, (unsigned long long)steps);
    IFD__H("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Proposed tokens accepted, by position in the proposal (from 0).");
    for (int i = 0; i < (int)IFD_WIRE_MAX_SPEC_TOKENS; i++)
        IFD__P("vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\","
               "position=\"%d\"} %llu\n",
               mn, i, (unsigned long long)g->spec_accepted_per_pos[i]);
    double usage = g->kv_total ? (double)g->kv_used / (double)g->kv_total : 0.0;
    IFD__H("vllm:kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0 to 1).");
    IFD__P("vllm:kv_cache_usage_perc{model_name=\"%s\"} %.6f\n", mn, usage);
    IFD__H("vllm:gpu_cache_usage_perc", "gauge",
           "Fraction of KV cache blocks in use (0 to 1; vLLM's older name).");
    IFD__P("vllm:gpu_cache_usage_perc{model_name=\"%s\"} %.6f\n", mn, usage);
    IFD__H("vllm:request_success_total", "counter", "Finished requests by finish reason.");
    for (int i = 0; i < IFD_FIN_COUNT; i++)
        IFD__P("vllm:request_success_total{model_name=\"%s\",finished_reason=\"%s\"} %llu\n", mn,
               ifd__fin_names[i], (unsigned long long)m->finished[i]);
    IFD__H("vllm:cache_config_info", "gauge", "The KV cache configuration (value 1).");
    IFD__P("vllm:cache_config_info{model_name=\"%s\",block_size=\"%lld\",cache_dtype=\"%s\","
           "num_gpu_blocks=\"%lld\",enable_prefix_caching=\"%s\"} 1\n",
           mn, (long long)g->kv_block_size, g->kv_dtype ? g->kv_dtype : "", (long long)g->kv_total,
           g->prefix_cache ? "True" : "False");
    return 0;
fail:
    return rc;
}

int ifd_metrics_render(const ifd_metrics_t *m, const ifd_metrics_gauges_t *g, const char *model,
                       ifd_buf_t *out)
{
    size_t start = out->len;
    int rc = 0;

    char mn[600];
    ifd__label_escape(mn, sizeof mn, model);
    IFD__H("inferd_info", "gauge",
           "The daemon's version, model and speculative decoding method (value 1).");
    if (g->spec)
        IFD__P("inferd_info{version=\"%s\",model=\"%s\",spec=\"%s\"} 1\n", IFD_VERSION, mn,
               g->spec);
    else
        IFD__P("inferd_info{version=\"%s\",model=\"%s\"} 1\n", IFD_VERSION, mn);
    IFD__H("inferd_uptime_seconds", "gauge", "Seconds since the daemon started.");
    IFD__P("inferd_uptime_seconds %.3f\n", g->uptime_s);

    IFD__H("inferd_http_requests_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i < m->n_http; i++)
        IFD__P("inferd_http_requests_total{code=\"%d\"} %llu\n", m->http[i].code,
               (unsigned long long)m->http[i].n);
    IFD__H("inferd_request_success_total", "counter",
           "Finished completion choices by finish reason.");
    for (int i = 0; i < IFD_FIN_COUNT; i++)
        IFD__P("inferd_request_success_total{finish_reason=\"%s\"} %llu\n", ifd__fin_names[i],
               (unsigned long long)m->finished[i]);

    for (size_t i = 0; i < sizeof ifd__counters / sizeof ifd__counters[0]; i++) {
        const ifd__u64_row_t *r = &ifd__counters[i];
        IFD__H(r->name, "counter", r->help);
        IFD__P("%s %llu\n", r->name,
               (unsigned long long)*(const uint64_t *)((const char *)m + r->off));
    }
    for (size_t i = 0; i < sizeof ifd__gauges / sizeof ifd__gauges[0]; i++) {
        const ifd__gauge_row_t *r = &ifd__gauges[i];
        IFD__H(r->name, r->type, r->help);
        IFD__P("%s %lld\n", r->name, (long long)*(const int64_t *)((const char *)g + r->off));
    }
    if (g->draft_tiers && (rc = ifd__render_draft_tiers(g, out)))
        goto fail;

    IFD__H("inferd_kv_blocks", "gauge", "KV cache blocks by state (used = held by sequences).");
    IFD__P("inferd_kv_blocks{state=\"free\"} %lld\n", (long long)g->kv_free);
    IFD__P("inferd_kv_blocks{state=\"used\"} %lld\n", (long long)g->kv_used);
    IFD__P("inferd_kv_blocks{state=\"cached\"} %lld\n", (long long)g->kv_cached);
    IFD__H("inferd_kv_cache_usage_ratio", "gauge", "Fraction of KV blocks held by sequences.");
    IFD__P("inferd_kv_cache_usage_ratio %.6f\n",
           g->kv_total ? (double)g->kv_used / (double)g->kv_total : 0.0);
    IFD__H("inferd_prefix_cache_hit_ratio", "gauge",
           "Prompt tokens served from the prefix cache / prompt tokens looked up.");
    IFD__P("inferd_prefix_cache_hit_ratio %.6f\n",
           m->prefix_query_tokens ? (double)m->prefix_hit_tokens / (double)m->prefix_query_tokens
                                  : 0.0);
    IFD__H("inferd_workers", "gauge", "Worker processes by state.");
    IFD__P("inferd_workers{state=\"ready\"} %lld\n", (long long)g->workers_ready);
    IFD__P("inferd_workers{state=\"starting\"} %lld\n", (long long)g->workers_starting);
    IFD__P("inferd_workers{state=\"down\"} %lld\n", (long long)g->workers_down);
    IFD__P("inferd_workers{state=\"failed\"} %lld\n", (long long)g->workers_failed);

    for (size_t i = 0; i < sizeof ifd__hists / sizeof ifd__hists[0]; i++) {
        const ifd__hist_row_t *r = &ifd__hists[i];
        const ifd_hist_t *h = (const ifd_hist_t *)((const char *)m + r->off);
        IFD__H(r->name, "histogram", r->help);
        uint64_t cum = 0;
        for (int b = 0; b < h->n_bounds; b++) {
            cum += h->counts[b];
            IFD__P("%s_bucket{le=\"%g\"} %llu\n", r->name, h->bounds[b], (unsigned long long)cum);
        }
        cum += h->counts[h->n_bounds];
        IFD__P("%s_bucket{le=\"+Inf\"} %llu\n", r->name, (unsigned long long)cum);
        IFD__P("%s_sum %.6f\n%s_count %llu\n", r->name, h->sum, r->name,
               (unsigned long long)h->count);
    }

    if ((rc = ifd__render_vllm(m, g, mn, out)))
        goto fail;
    return 0;
fail:
    out->len = start;
    if (out->data)
        out->data[start] = '\0';
    return rc;
}

#undef IFD__P
#undef IFD__H
