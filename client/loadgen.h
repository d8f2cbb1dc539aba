/*
 * loadgen.h — the load generator behind `infer bench`: drives many
 * streaming completion requests from one thread with poll(2) over
 * non-blocking sockets (one connection per request), timestamps every
 * chunk that carries text, and turns the requests into the serving
 * metrics of vLLM's benchmark (TTFT, TPOT, ITL, E2E latency, throughput).
 *
 * Timing rules (CLOCK_MONOTONIC):
 *   - a request starts just before its connection is opened;
 *   - TTFT: the first chunk that carries generated text. (vLLM takes the
 *     first chunk with a non-empty "choices"; inferd sends the chat role
 *     before any token is computed and the finish_reason in a chunk of its
 *     own, right after the last token, so counting those would make TTFT
 *     meaningless for chat and add a ~0 ms gap to every request's ITL.)
 *   - ITL: the gaps between successive text chunks, pooled over requests;
 *   - E2E: the last text chunk minus the start;
 *   - output tokens: usage.completion_tokens of the final usage chunk
 *     (stream_options.include_usage; without it, the number of chunks);
 *   - TPOT: (E2E − TTFT) / (output tokens − 1), for output tokens > 1;
 *   - duration: from the first dispatch until the last request finished.
 * A request succeeds only with HTTP 200, at least one text chunk, no error
 * event and the final [DONE].
 *
 * Ownership: the caller owns the request array; each request's body is
 * malloc'ed by the caller and freed (with everything else the request
 * holds) by ifd_cli_loadgen_req_reset. Prompts are borrowed for the run.
 * Threading: one thread; ifd_cli_loadgen_run watches ifd_cli_interrupted.
 */
#ifndef IFD_CLIENT_LOADGEN_H
#define IFD_CLIENT_LOADGEN_H

#include "api.h"
#include "http.h"
#include "stats.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* What one request asks for: token ids (completions only) or a text. */
typedef struct {
    const int32_t *tokens; /* borrowed, or NULL */
    size_t n_tokens;
    const char *text; /* borrowed, or NULL */
    int max_tokens;
} ifd_cli_loadgen_prompt_t;

/* One request: set pr and body (malloc'ed JSON), zero the rest. */
typedef struct {
    const ifd_cli_loadgen_prompt_t *pr;
    char *body;
    /* results, valid once finished */
    bool started, finished, ok;
    char err[240];                          /* why it failed */
    double t_start, t_first, t_last, t_end; /* seconds, monotonic */
    double *chunks;                         /* times of the text chunks (n_chunks) */
    size_t n_chunks;
    int64_t prompt_tokens, output_tokens, cached_tokens; /* from usage */
    bool has_usage;
    /* private */
    size_t cap_chunks;
    double t_active;
    ifd_cli_http_conn_t conn;
    ifd_cli_api_reader_t rd;
    ifd_buf_t errbody;
} ifd_cli_loadgen_req_t;

/* Frees what the request holds (body included) and zeroes it. */
void ifd_cli_loadgen_req_reset(ifd_cli_loadgen_req_t *r);

/* Where and how a run sends its requests. */
typedef struct {
    const ifd_cli_http_target_t *t;
    const char *path;  /* "/v1/completions" or "/v1/chat/completions" */
    int timeout_s;     /* a request without progress this long fails; 0: never */
    bool progress;     /* draw a progress bar on stderr */
    const char *label; /* in front of the bar */
} ifd_cli_loadgen_t;

/*
 * Runs reqs[0..n): at most `conc` in flight (0: no limit), request i not
 * before arrival[i] seconds after the start (arrival NULL: as soon as the
 * limit allows). *duration gets the wall time from the first dispatch
 * until the last request finished. Returns 0 (failed requests are marked
 * in their req), IFD_ECANCELED (Ctrl-C: the open requests are closed),
 * IFD_ENOMEM, or -errno from poll.
 */
int ifd_cli_loadgen_run(const ifd_cli_loadgen_t *lg, ifd_cli_loadgen_req_t *reqs, size_t n,
                        int conc, const double *arrival, double *duration);

/* The figures of one run. Latencies in milliseconds. */
typedef struct {
    int concurrency; /* 0: unlimited */
    double rate;     /* requests/s; INFINITY: all at once */
    size_t n, completed, failed;
    double duration; /* seconds */
    int64_t in_tokens, out_tokens, cached_tokens;
    double req_tput, out_tput, total_tput;
    ifd_cli_stats_t ttft, tpot, itl, e2e;
    size_t length_mismatch;       /* ignore_eos requests whose output length differs */
    size_t no_usage;              /* requests without a usage chunk */
    double server_in, server_out; /* the daemon's /metrics deltas over the run; NAN unknown */
    char first_error[240];
} ifd_cli_loadgen_result_t;

/* Fills the figures of *res from the finished requests (the caller sets
 * concurrency, rate and server_* itself). 0 or IFD_ENOMEM. */
int ifd_cli_loadgen_summarize(const ifd_cli_loadgen_req_t *reqs, size_t n, double duration,
                              bool ignore_eos, ifd_cli_loadgen_result_t *res);

/* The "Serving Benchmark Result" block, as vLLM prints it. */
void ifd_cli_loadgen_print(FILE *f, const ifd_cli_loadgen_result_t *r, const char *endpoint);

/* The run as JSON, with one entry per request. New reference; NULL on ENOMEM. */
json_t *ifd_cli_loadgen_result_json(const ifd_cli_loadgen_result_t *r,
                                    const ifd_cli_loadgen_req_t *reqs, size_t n);

#endif
