/*
 * loadgen.c — the load generator and its figures (see loadgen.h).
 *
 * One poll(2) loop: start requests while the concurrency limit and the
 * arrival times allow, poll every open connection (100 ms at most, less
 * when the next arrival is due), advance the ready ones, and finish each
 * as soon as its response is complete, closing its socket at once.
 */
#include "loadgen.h"

#include "cli.h"
#include "error.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- one request ----------------------------------------------------------------------------- */

static void on_chunk(void *ud, bool has_text)
{
    ifd_cli_loadgen_req_t *r = ud;
    if (!has_text)
        return; /* role-only, finish-only chunks: see the top of the file */
    double t = now_s();
    if (r->n_chunks == r->cap_chunks) {
        size_t nc = r->cap_chunks ? r->cap_chunks * 2 : 64;
        double *p = realloc(r->chunks, nc * sizeof(*p));
        if (!p)
            return; /* ITL then misses points; TTFT and E2E stay right */
        r->chunks = p;
        r->cap_chunks = nc;
    }
    r->chunks[r->n_chunks++] = t;
    if (r->n_chunks == 1)
        r->t_first = t;
    r->t_last = t;
}

static int on_body(void *ud, const char *data, size_t len)
{
    ifd_cli_loadgen_req_t *r = ud;
    r->t_active = now_s();
    if (r->conn.status != 200)
        return r->errbody.len < 4096 ? ifd_buf_append(&r->errbody, data, len) : 0;
    return ifd_cli_api_reader_feed(
        &r->rd, strstr(r->conn.content_type, "text/event-stream") != NULL, data, len);
}

static void req_fail(ifd_cli_loadgen_req_t *r, const char *what, const char *detail)
{
    if (!r->err[0])
        snprintf(r->err, sizeof(r->err), "%s%.200s", what, detail ? detail : "");
}

/* The connection finished (rc: 1 done, < 0 error): judge the request. */
static void req_finish(ifd_cli_loadgen_req_t *r, int rc)
{
    r->finished = true;
    r->t_end = now_s();
    if (rc < 0 && !(r->conn.status == 200 && r->rd.done)) {
        if (r->conn.status != 0 && r->conn.status != 200) {
            char msg[200];
            ifd_cli_api_error_message(r->errbody.data, r->errbody.len, msg, sizeof(msg));
            snprintf(r->err, sizeof(r->err), "HTTP %d: %s", r->conn.status, msg);
        } else {
            req_fail(r, ifd_strerror(rc), NULL);
        }
    } else if (r->conn.status != 200) {
        char msg[200];
        ifd_cli_api_error_message(r->errbody.data, r->errbody.len, msg, sizeof(msg));
        snprintf(r->err, sizeof(r->err), "HTTP %d: %s", r->conn.status, msg);
    } else if (ifd_cli_api_reader_finish(&r->rd) < 0) {
        req_fail(r, "malformed response", NULL);
    } else if (r->rd.error[0]) {
        req_fail(r, "error event: ", r->rd.error);
    } else if (!r->rd.done) {
        req_fail(r, "stream ended without [DONE]", NULL);
    } else if (r->n_chunks == 0) {
        req_fail(r, "never received a content chunk", NULL);
    }
    r->ok = !r->err[0];
    r->has_usage = r->rd.has_usage;
    if (r->rd.has_usage) {
        r->prompt_tokens = r->rd.usage.prompt_tokens;
        r->output_tokens = r->rd.usage.completion_tokens;
        r->cached_tokens = r->rd.usage.cached_tokens;
    } else {
        r->output_tokens = (int64_t)r->n_chunks; /* one token per chunk: the best guess */
    }
    ifd_cli_http_conn_close(&r->conn);
    ifd_buf_free(&r->errbody);
    ifd_cli_api_reader_close(&r->rd);
}

void ifd_cli_loadgen_req_reset(ifd_cli_loadgen_req_t *r)
{
    free(r->body);
    free(r->chunks);
    ifd_cli_http_conn_close(&r->conn);
    ifd_cli_api_reader_close(&r->rd);
    ifd_buf_free(&r->errbody);
    memset(r, 0, sizeof(*r));
}

static int req_start(ifd_cli_loadgen_req_t *r, const ifd_cli_http_target_t *t, const char *path)
{
    ifd_cli_http_conn_init(&r->conn);
    ifd_cli_api_reader_init(&r->rd, NULL, on_chunk, r);
    ifd_cli_http_conn_set_cb(&r->conn, NULL, on_body, r);
    r->started = true;
    r->t_start = r->t_active = now_s();
    int rc = ifd_cli_http_conn_start(&r->conn, t, "POST", path, "text/event-stream", r->body,
                                     strlen(r->body));
    if (rc < 0)
        req_finish(r, rc);
    return rc;
}

/* ---- a run: n requests under a concurrency limit and an arrival process ---------------------- */

static void progress_draw(const ifd_cli_loadgen_t *rn, size_t done, size_t n, size_t failed,
                          double el, bool final)
{
    if (!rn->progress)
        return;
    const int width = 30;
    int fill = n ? (int)((double)done / (double)n * width) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r\033[K%s [%s] %zu/%zu requests  %.1f s", rn->label, bar, done, n, el);
    if (failed)
        fprintf(stderr, "  %zu failed", failed);
    if (final)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

/*
 * Runs reqs[0..n) (bodies built): at most `conc` in flight (0: no limit),
 * request i not before arrival[i] seconds after the start (arrival NULL:
 * at once). *duration gets the wall time from the first dispatch until
 * the last request finished. 0, IFD_ECANCELED (Ctrl-C), IFD_ENOMEM.
 */
int ifd_cli_loadgen_run(const ifd_cli_loadgen_t *rn, ifd_cli_loadgen_req_t *reqs, size_t n,
                        int conc, const double *arrival, double *duration)
{
    struct pollfd *pfd = calloc(n ? n : 1, sizeof(*pfd));
    size_t *idx = calloc(n ? n : 1, sizeof(*idx));
    if (!pfd || !idx) {
        free(pfd);
        free(idx);
        return IFD_ENOMEM;
    }
    size_t next = 0, done = 0, failed = 0, inflight = 0;
    double t0 = now_s(), last_draw = 0;
    int rc = 0;
    while (done < n) {
        double now = now_s();
        if (ifd_cli_interrupted) {
            rc = IFD_ECANCELED;
            break;
        }
        while (next < n && (conc <= 0 || inflight < (size_t)conc) &&
               (!arrival || now - t0 >= arrival[next])) {
            ifd_cli_loadgen_req_t *r = &reqs[next++];
            if (req_start(r, rn->t, rn->path) < 0) {
                done++;
                failed++;
            } else {
                inflight++;
            }
            now = now_s();
        }
        size_t np = 0;
        for (size_t i = 0; i < next; i++) {
            ifd_cli_loadgen_req_t *r = &reqs[i];
            if (!r->started || r->finished)
                continue;
            if (rn->timeout_s > 0 && now - r->t_active > rn->timeout_s) {
                snprintf(r->err, sizeof(r->err), "no progress for %d s", rn->timeout_s);
                req_finish(r, IFD_ETIMEDOUT);
                inflight--;
                done++;
                failed++;
                continue;
            }
            pfd[np].fd = ifd_cli_http_conn_fd(&r->conn);
            pfd[np].events = ifd_cli_http_conn_events(&r->conn);
            pfd[np].revents = 0;
            idx[np++] = i;
        }
        int wait = 100;
        if (arrival && next < n && (conc <= 0 || inflight < (size_t)conc)) {
            double until = t0 + arrival[next] - now;
            int ms = until <= 0 ? 0 : (int)ceil(until * 1000);
            if (ms < wait)
                wait = ms;
        }
        if (done >= n)
            break;
        int k = poll(pfd, np, wait);
        if (k < 0 && errno != EINTR) {
            rc = -errno;
            break;
        }
        for (size_t j = 0; k > 0 && j < np; j++) {
            if (!pfd[j].revents)
                continue;
            ifd_cli_loadgen_req_t *r = &reqs[idx[j]];
            r->t_active = now_s();
            int io = ifd_cli_http_conn_io(&r->conn, pfd[j].revents);
            if (io != 0) {
                req_finish(r, io);
                inflight--;
                done++;
                if (!r->ok)
                    failed++;
            }
        }
        now = now_s();
        if (now - last_draw >= 0.1) {
            progress_draw(rn, done, n, failed, now - t0, false);
            last_draw = now;
        }
    }
    double end = t0;
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].started && !reqs[i].finished) { /* cancelled */
            snprintf(reqs[i].err, sizeof(reqs[i].err), "cancelled");
            req_finish(&reqs[i], IFD_ECANCELED);
        }
        if (reqs[i].started && reqs[i].t_end > end)
            end = reqs[i].t_end;
    }
    *duration = end - t0;
    progress_draw(rn, done, n, failed, now_s() - t0, true);
    free(pfd);
    free(idx);
    return rc;
}

/* ---- results --------------------------------------------------------------------------------- */

int ifd_cli_loadgen_summarize(const ifd_cli_loadgen_req_t *reqs, size_t n, double duration,
                              bool ignore_eos, ifd_cli_loadgen_result_t *res)
{
    double *ttft = malloc((n + 1) * sizeof(double)), *tpot = malloc((n + 1) * sizeof(double));
    double *e2e = malloc((n + 1) * sizeof(double));
    size_t n_itl = 0, ni = 0, nt = 0, ne = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].ok && reqs[i].n_chunks > 1)
            n_itl += reqs[i].n_chunks - 1;
    double *itl = malloc((n_itl + 1) * sizeof(double));
    if (!ttft || !tpot || !e2e || !itl) {
        free(ttft);
        free(tpot);
        free(e2e);
        free(itl);
        return IFD_ENOMEM;
    }
    res->n = n;
    res->duration = duration;
    for (size_t i = 0; i < n; i++) {
        const ifd_cli_loadgen_req_t *r = &reqs[i];
        if (!r->ok) {
            res->failed++;
            if (!res->first_error[0])
                snprintf(res->first_error, sizeof(res->first_error), "%s", r->err);
            continue;
        }
        res->completed++;
        res->in_tokens += r->prompt_tokens;
        res->out_tokens += r->output_tokens;
        res->cached_tokens += r->cached_tokens;
        if (!r->has_usage)
            res->no_usage++;
        if (ignore_eos && r->output_tokens != r->pr->max_tokens)
            res->length_mismatch++;
        ttft[nt++] = (r->t_first - r->t_start) * 1e3;
        double e = (r->t_last - r->t_start) * 1e3;
        e2e[ne++] = e;
        if (r->output_tokens > 1)
            tpot[ni++] = (e - ttft[nt - 1]) / (double)(r->output_tokens - 1);
    }
    /* ITL, pooled in request order */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].ok)
            for (size_t k = 1; k < reqs[i].n_chunks; k++)
                itl[m++] = (reqs[i].chunks[k] - reqs[i].chunks[k - 1]) * 1e3;
    int rc = ifd_cli_stats_summary(ttft, nt, &res->ttft);
    if (rc == 0)
        rc = ifd_cli_stats_summary(tpot, ni, &res->tpot);
    if (rc == 0)
        rc = ifd_cli_stats_summary(e2e, ne, &res->e2e);
    if (rc == 0)
        rc = ifd_cli_stats_summary(itl, m, &res->itl);
    if (duration > 0) {
        res->req_tput = (double)res->completed / duration;
        res->out_tput = (double)res->out_tokens / duration;
        res->total_tput = (double)(res->in_tokens + res->out_tokens) / duration;
    }
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
    return rc;
}

/* ---- printing -------------------------------------------------------------------------------- */

static void print_row(FILE *f, const char *abbr, const char *stat, double v)
{
    char key[64];
    snprintf(key, sizeof(key), "%s %s (ms):", stat, abbr);
    fprintf(f, "%-40s %10.2f\n", key, v);
}

static void print_metric(FILE *f, const char *title, const char *abbr, const ifd_cli_stats_t *s)
{
    int tl = (int)strlen(title), pad = (50 - 2 - tl) / 2;
    fprintf(f, "%.*s %s %.*s\n", pad, "--------------------------------------------------", title,
            50 - 2 - tl - pad, "--------------------------------------------------");
    print_row(f, abbr, "Mean", s->mean);
    print_row(f, abbr, "Median", s->p50);
    print_row(f, abbr, "P90", s->p90);
    print_row(f, abbr, "P99", s->p99);
}

void ifd_cli_loadgen_print(FILE *f, const ifd_cli_loadgen_result_t *r, const char *endpoint)
{
    fprintf(f, "============ Serving Benchmark Result ============\n");
    fprintf(f, "%-40s %10s\n", "Endpoint:", endpoint);
    if (r->concurrency > 0)
        fprintf(f, "%-40s %10d\n", "Maximum concurrency:", r->concurrency);
    else
        fprintf(f, "%-40s %10s\n", "Maximum concurrency:", "unlimited");
    if (isfinite(r->rate))
        fprintf(f, "%-40s %10.2f\n", "Request rate (req/s, Poisson):", r->rate);
    else
        fprintf(f, "%-40s %10s\n", "Request rate (req/s):", "inf");
    fprintf(f, "%-40s %10zu\n", "Successful requests:", r->completed);
    fprintf(f, "%-40s %10zu\n", "Failed requests:", r->failed);
    fprintf(f, "%-40s %10.2f\n", "Benchmark duration (s):", r->duration);
    fprintf(f, "%-40s %10lld\n", "Total input tokens:", (long long)r->in_tokens);
    fprintf(f, "%-40s %10lld\n", "Total generated tokens:", (long long)r->out_tokens);
    fprintf(f, "%-40s %10.2f\n", "Request throughput (req/s):", r->req_tput);
    fprintf(f, "%-40s %10.2f\n", "Output token throughput (tok/s):", r->out_tput);
    fprintf(f, "%-40s %10.2f\n", "Total token throughput (tok/s):", r->total_tput);
    print_metric(f, "Time to First Token", "TTFT", &r->ttft);
    print_metric(f, "Time per Output Token (excl. 1st token)", "TPOT", &r->tpot);
    print_metric(f, "Inter-token Latency", "ITL", &r->itl);
    print_metric(f, "End-to-end Latency", "E2EL", &r->e2e);
    fprintf(f, "==================================================\n");
    if (r->failed)
        fprintf(f, "first failure: %s\n", r->first_error);
    if (r->no_usage)
        fprintf(f,
                "warning: %zu responses had no usage chunk; their output tokens were "
                "counted as chunks\n",
                r->no_usage);
    if (r->length_mismatch)
        fprintf(f,
                "warning: %zu requests with ignore_eos got a different number of tokens "
                "than asked\n",
                r->length_mismatch);
    if (isfinite(r->server_in) && r->failed == 0) {
        bool same =
            (int64_t)r->server_in == r->in_tokens && (int64_t)r->server_out == r->out_tokens;
        fprintf(f, "server /metrics over the run: %.0f prompt, %.0f generated tokens (%s)\n",
                r->server_in, r->server_out,
                same ? "equal to the usage the client saw" : "differs from the client's usage");
    }
}

static json_t *stats_json(const ifd_cli_stats_t *s)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)s->n, "mean", s->mean,
                     "std", s->std, "min", s->min, "median", s->p50, "p90", s->p90, "p99", s->p99,
                     "max", s->max);
}

json_t *ifd_cli_loadgen_result_json(const ifd_cli_loadgen_result_t *r,
                                    const ifd_cli_loadgen_req_t *reqs, size_t n)
{
    json_t *o = json_object();
    json_object_set_new(o, "max_concurrency",
                        r->concurrency > 0 ? json_integer(r->concurrency) : json_null());
    json_object_set_new(o, "request_rate", isfinite(r->rate) ? json_real(r->rate) : json_null());
    json_object_set_new(o, "num_prompts", json_integer((json_int_t)r->n));
    json_object_set_new(o, "completed", json_integer((json_int_t)r->completed));
    json_object_set_new(o, "failed", json_integer((json_int_t)r->failed));
    json_object_set_new(o, "duration_s", json_real(r->duration));
    json_object_set_new(o, "total_input_tokens", json_integer(r->in_tokens));
    json_object_set_new(o, "total_output_tokens", json_integer(r->out_tokens));
    json_object_set_new(o, "total_cached_tokens", json_integer(r->cached_tokens));
    json_object_set_new(o, "request_throughput", json_real(r->req_tput));
    json_object_set_new(o, "output_throughput", json_real(r->out_tput));
    json_object_set_new(o, "total_token_throughput", json_real(r->total_tput));
    json_object_set_new(o, "ttft_ms", stats_json(&r->ttft));
    json_object_set_new(o, "tpot_ms", stats_json(&r->tpot));
    json_object_set_new(o, "itl_ms", stats_json(&r->itl));
    json_object_set_new(o, "e2el_ms", stats_json(&r->e2e));
    json_object_set_new(o, "server_prompt_tokens",
                        isfinite(r->server_in) ? json_integer((json_int_t)r->server_in)
                                               : json_null());
    json_object_set_new(o, "server_generation_tokens",
                        isfinite(r->server_out) ? json_integer((json_int_t)r->server_out)
                                                : json_null());
    json_object_set_new(o, "length_mismatches", json_integer((json_int_t)r->length_mismatch));
    if (r->first_error[0])
        json_object_set_new(o, "first_error", json_string(r->first_error));
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        const ifd_cli_loadgen_req_t *q = &reqs[i];
        json_t *x =
            json_pack("{s:b,s:I,s:I,s:I,s:I,s:I}", "ok", q->ok, "requested_output",
                      (json_int_t)q->pr->max_tokens, "prompt_tokens", (json_int_t)q->prompt_tokens,
                      "output_tokens", (json_int_t)q->output_tokens, "cached_tokens",
                      (json_int_t)q->cached_tokens, "chunks", (json_int_t)q->n_chunks);
        if (q->ok) {
            json_object_set_new(x, "ttft_ms", json_real((q->t_first - q->t_start) * 1e3));
            json_object_set_new(x, "e2el_ms", json_real((q->t_last - q->t_start) * 1e3));
        } else {
            json_object_set_new(x, "error", json_string(q->err));
        }
        json_array_append_new(a, x);
    }
    json_object_set_new(o, "requests", a);
    return o;
}
