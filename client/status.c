/*
 * status.c — `infer models` and `infer status` (see status.h).
 *
 * status takes two scrapes of /metrics `--interval` apart (one second by
 * default; in --watch, successive refreshes) so tokens/s is the current
 * rate, not an average since start. Everything it shows comes from the
 * metric names of daemon/metrics.c and the /health object; a field the
 * daemon does not report is shown as "-" rather than guessed.
 */
#include "status.h"

#include "cli.h"
#include "error.h"
#include "prom.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    OPT_JSON = IFD_CLI_OPT_FIRST_FREE,
    OPT_WATCH,
    OPT_INTERVAL,
};

/* ---- infer models ---------------------------------------------------------------------------- */

static void models_usage(FILE *f)
{
    fprintf(f,
            "Usage: infer models [--json] [connection options]\n"
            "\n"
            "List the models the daemon serves (GET /v1/models): the id to pass as --model,\n"
            "its context length, architecture, format (gguf, or hf: a Hugging Face\n"
            "directory of safetensors) and the path it was loaded from.\n"
            "\n"
            "      --json          print the daemon's JSON as it is\n"
            "  -h, --help          this help\n"
            "\n%s",
            ifd_cli_conn_help);
}

int ifd_cli_status_models_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        IFD_CLI_CONN_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    ifd_cli_conn_t co;
    ifd_cli_conn_defaults(&co);
    bool as_json = false;
    int c;
    while ((c = ifd_cli_getopt(argc, argv, "h", opts, &co, NULL)) >= 0) {
        if (c == OPT_JSON) {
            as_json = true;
        } else if (c == 'h') {
            models_usage(stdout);
            return IFD_CLI_EXIT_OK;
        } else {
            return ifd_cli_usage_hint("models");
        }
    }
    if (c == IFD_CLI_OPT_BAD || ifd_cli_no_operands("models", argc, argv))
        return IFD_CLI_EXIT_USAGE;
    ifd_cli_http_target_t t;
    json_t *o = NULL;
    int code = ifd_cli_target(&co, &t);
    if (code == 0)
        code = ifd_cli_get_json(&t, &co, "GET", "/v1/models", NULL, &o);
    if (code != 0)
        return code;
    if (as_json) {
        json_dumpf(o, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        json_t *data = json_object_get(o, "data");
        printf("%-32s %8s  %-8s %-6s %s\n", "MODEL", "CONTEXT", "ARCH", "FORMAT", "SOURCE");
        size_t i;
        json_t *m;
        json_array_foreach(data, i, m)
        {
            /* architecture and format are inferd's; another server may omit them */
            const char *id = json_string_value(json_object_get(m, "id"));
            const char *arch = json_string_value(json_object_get(m, "architecture"));
            const char *fmt = json_string_value(json_object_get(m, "format"));
            const char *root = json_string_value(json_object_get(m, "root"));
            json_t *ctx = json_object_get(m, "max_model_len");
            char ctxs[24] = "-";
            if (json_is_integer(ctx))
                snprintf(ctxs, sizeof(ctxs), "%lld", (long long)json_integer_value(ctx));
            printf("%-32s %8s  %-8s %-6s %s\n", id ? id : "?", ctxs, arch ? arch : "-",
                   fmt ? fmt : "-", root ? root : "-");
        }
        if (json_array_size(data) == 0)
            printf("(no models)\n");
    }
    json_decref(o);
    return fflush(stdout) == 0 ? IFD_CLI_EXIT_OK : IFD_CLI_EXIT_FAIL;
}

/* ---- infer status ---------------------------------------------------------------------------- */

typedef struct {
    double t; /* monotonic seconds of the scrape */
    ifd_cli_prom_t prom;
    bool have_prom;
    json_t *health;    /* the /health object, or NULL */
    int health_status; /* its HTTP status */
    char health_text[128];
} snap_t;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void snap_free(snap_t *s)
{
    ifd_cli_prom_free(&s->prom);
    json_decref(s->health);
    memset(s, 0, sizeof(*s));
}

/* Takes one snapshot. 0 or an exit code (reason printed). */
static int snap_take(snap_t *s, const ifd_cli_http_target_t *t, const ifd_cli_conn_t *co)
{
    ifd_buf_t b = IFD_BUF_INIT;
    int status = 0;
    memset(s, 0, sizeof(*s));
    int rc = ifd_cli_http_fetch(t, "GET", "/health", NULL, 0, co->timeout_s * 1000, &status, &b);
    if (rc < 0)
        return ifd_cli_report(t, rc);
    s->health_status = status;
    s->health = json_loadb(b.data, b.len, 0, NULL);
    if (!s->health) {
        size_t n = strcspn(b.data, "\r\n");
        snprintf(s->health_text, sizeof(s->health_text), "%.*s", (int)(n < 100 ? n : 100), b.data);
    }
    ifd_buf_free(&b);
    rc = ifd_cli_http_fetch(t, "GET", "/metrics", NULL, 0, co->timeout_s * 1000, &status, &b);
    s->t = mono_s();
    if (rc < 0) {
        snap_free(s);
        return ifd_cli_report(t, rc);
    }
    if (status == 200 && ifd_cli_prom_parse(&s->prom, b.data, b.len, NULL) == 0)
        s->have_prom = true;
    ifd_buf_free(&b);
    return 0;
}

static double metric(const snap_t *s, const char *name, const char *key, const char *value,
                     bool *found)
{
    return ifd_cli_prom_sum(&s->prom, name, key, value, found);
}

/* "12.3k", "4.56M", "789" */
static const char *human(char *buf, size_t n, double v)
{
    if (!isfinite(v))
        snprintf(buf, n, "-");
    else if (fabs(v) >= 1e9)
        snprintf(buf, n, "%.2fG", v / 1e9);
    else if (fabs(v) >= 1e6)
        snprintf(buf, n, "%.2fM", v / 1e6);
    else if (fabs(v) >= 1e4)
        snprintf(buf, n, "%.1fk", v / 1e3);
    else
        snprintf(buf, n, "%.0f", v);
    return buf;
}

static const char *duration(char *buf, size_t n, double s)
{
    long long x = (long long)s;
    if (s < 0 || !isfinite(s))
        snprintf(buf, n, "-");
    else if (x < 120)
        snprintf(buf, n, "%llds", x);
    else if (x < 7200)
        snprintf(buf, n, "%lldm%02llds", x / 60, x % 60);
    else if (x < 172800)
        snprintf(buf, n, "%lldh%02lldm", x / 3600, x % 3600 / 60);
    else
        snprintf(buf, n, "%lldd%02lldh", x / 86400, x % 86400 / 3600);
    return buf;
}

/* A field of a worker object by any of a few names (daemons evolve). */
static json_t *wget(json_t *w, const char *const *names)
{
    for (; *names; names++) {
        const char *dot = strchr(*names, '.');
        if (dot) {
            char head[64];
            snprintf(head, sizeof(head), "%.*s", (int)(dot - *names), *names);
            json_t *v = json_object_get(json_object_get(w, head), dot + 1);
            if (v)
                return v;
        } else {
            json_t *v = json_object_get(w, *names);
            if (v && !json_is_null(v))
                return v;
        }
    }
    return NULL;
}

static const char *wstr(char *buf, size_t n, json_t *v)
{
    if (json_is_string(v))
        snprintf(buf, n, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, n, "%.1f", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, n, "%s", json_is_true(v) ? "yes" : "no");
    else
        snprintf(buf, n, "-");
    return buf;
}

/* Worker table columns: header, width, the field names to try. A column
 * other than the first two is shown only when some worker has the field. */
typedef struct {
    const char *head;
    int width;
    const char *names[4];
} wcol_t;

static const wcol_t wcols[] = {
    {"WORKER", 6, {"id", "slot", "worker", NULL}},
    {"STATE", 9, {"state", "status", NULL}},
    {"PID", 7, {"pid", NULL}},
    {"DEVICE", 16, {"device", "device_name", NULL}},
    {"RUNNING", 7, {"running", "stats.running", NULL}},
    {"WAITING", 7, {"waiting", "stats.waiting", NULL}},
    {"KV HELD", 7, {"kv_blocks_in_use", "stats.kv_blocks_in_use", NULL}},
    {"CRASHES", 7, {"crashes", "restarts", NULL}},
    {"LAST EXIT", 12, {"last_exit", NULL}},
};
#define N_WCOLS (sizeof wcols / sizeof wcols[0])

typedef struct {
    /* everything shown, NAN when unknown */
    double uptime, kv_total, kv_free, kv_used, kv_cached, hits, queries, running, queued;
    double fin_stop, fin_length, fin_abort, fin_error, tok_in, tok_out;
    double rate_out, rate_in, hit_rate_now; /* over the interval; NAN without one */
    double ttft_mean, itl_mean;
    double spec_drafts, spec_proposed, spec_accepted; /* speculative decoding (vLLM's counters) */
    /* the KV cache's disk tier (capacity 0 or NAN: none) */
    double disk_bytes, disk_cap, disk_files, disk_queries, disk_hits, disk_read, disk_written,
        disk_bad;
    /* GPU workers' host-RAM tiers (capacity 0 or NAN: none) */
    double host_bytes, host_cap, host_blocks, host_queries, host_hits;
    double workers_ready, workers_starting, workers_down, workers_failed;
    const char *version, *model;
    const char *spec; /* the daemon's method (inferd_info's spec label), or NULL */
} view_t;

static double mget(const snap_t *s, const char *name, const char *k, const char *v)
{
    bool found = false;
    double x = metric(s, name, k, v, &found);
    return found ? x : NAN;
}

static double hist_mean(const snap_t *s, const char *base)
{
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s_sum", base);
    snprintf(b, sizeof(b), "%s_count", base);
    double sum = mget(s, a, NULL, NULL), cnt = mget(s, b, NULL, NULL);
    return cnt > 0 ? sum / cnt : NAN;
}

static void view_build(view_t *v, const snap_t *s, const snap_t *prev)
{
    v->uptime = mget(s, "inferd_uptime_seconds", NULL, NULL);
    v->kv_total = mget(s, "inferd_kv_blocks_capacity", NULL, NULL);
    if (isnan(v->kv_total)) /* the name before 0.1.1 */
        v->kv_total = mget(s, "inferd_kv_blocks_total", NULL, NULL);
    v->kv_free = mget(s, "inferd_kv_blocks", "state", "free");
    v->kv_used = mget(s, "inferd_kv_blocks", "state", "used");
    v->kv_cached = mget(s, "inferd_kv_blocks", "state", "cached");
    v->hits = mget(s, "inferd_prefix_cache_hits_total", NULL, NULL);
    v->queries = mget(s, "inferd_prefix_cache_queries_total", NULL, NULL);
    v->running = mget(s, "inferd_requests_running", NULL, NULL);
    v->queued = mget(s, "inferd_queue_depth", NULL, NULL);
    v->fin_stop = mget(s, "inferd_request_success_total", "finish_reason", "stop");
    v->fin_length = mget(s, "inferd_request_success_total", "finish_reason", "length");
    v->fin_abort = mget(s, "inferd_request_success_total", "finish_reason", "abort");
    v->fin_error = mget(s, "inferd_request_success_total", "finish_reason", "error");
    v->tok_in = mget(s, "inferd_prompt_tokens_total", NULL, NULL);
    v->tok_out = mget(s, "inferd_generation_tokens_total", NULL, NULL);
    v->ttft_mean = hist_mean(s, "inferd_time_to_first_token_seconds");
    v->itl_mean = hist_mean(s, "inferd_inter_token_latency_seconds");
    v->disk_bytes = mget(s, "inferd_kv_disk_bytes", NULL, NULL);
    v->disk_cap = mget(s, "inferd_kv_disk_capacity_bytes", NULL, NULL);
    v->disk_files = mget(s, "inferd_kv_disk_files", NULL, NULL);
    v->disk_queries = mget(s, "inferd_kv_disk_queries_total", NULL, NULL);
    v->disk_hits = mget(s, "inferd_kv_disk_hits_total", NULL, NULL);
    v->disk_read = mget(s, "inferd_kv_disk_read_bytes_total", NULL, NULL);
    v->disk_written = mget(s, "inferd_kv_disk_written_bytes_total", NULL, NULL);
    v->disk_bad = mget(s, "inferd_kv_disk_bad_files_total", NULL, NULL);
    v->host_bytes = mget(s, "inferd_kv_host_bytes", NULL, NULL);
    v->host_cap = mget(s, "inferd_kv_host_capacity_bytes", NULL, NULL);
    v->host_blocks = mget(s, "inferd_kv_host_blocks", NULL, NULL);
    v->host_queries = mget(s, "inferd_kv_host_queries_total", NULL, NULL);
    v->host_hits = mget(s, "inferd_kv_host_hits_total", NULL, NULL);
    v->spec_drafts = mget(s, "vllm:spec_decode_num_drafts_total", NULL, NULL);
    v->spec_proposed = mget(s, "vllm:spec_decode_num_draft_tokens_total", NULL, NULL);
    v->spec_accepted = mget(s, "vllm:spec_decode_num_accepted_tokens_total", NULL, NULL);
    v->workers_ready = mget(s, "inferd_workers", "state", "ready");
    v->workers_starting = mget(s, "inferd_workers", "state", "starting");
    v->workers_down = mget(s, "inferd_workers", "state", "down");
    v->workers_failed = mget(s, "inferd_workers", "state", "failed");
    v->rate_out = v->rate_in = v->hit_rate_now = NAN;
    if (prev && prev->have_prom && s->t > prev->t) {
        double dt = s->t - prev->t;
        v->rate_out = (v->tok_out - mget(prev, "inferd_generation_tokens_total", NULL, NULL)) / dt;
        v->rate_in = (v->tok_in - mget(prev, "inferd_prompt_tokens_total", NULL, NULL)) / dt;
        double dq = v->queries - mget(prev, "inferd_prefix_cache_queries_total", NULL, NULL);
        double dh = v->hits - mget(prev, "inferd_prefix_cache_hits_total", NULL, NULL);
        if (dq > 0)
            v->hit_rate_now = dh / dq;
    }
    v->version = v->model = v->spec = NULL;
    for (size_t i = 0; i < s->prom.n; i++) {
        if (strcmp(s->prom.s[i].name, "inferd_info") == 0) {
            v->version = ifd_cli_prom_label(&s->prom.s[i], "version");
            v->model = ifd_cli_prom_label(&s->prom.s[i], "model");
            v->spec = ifd_cli_prom_label(&s->prom.s[i], "spec");
        }
    }
}

static const char *health_word(const snap_t *s)
{
    static const char *const names[] = {"status", "state", NULL};
    const char *st = json_string_value(wget(s->health, names));
    if (st)
        return st;
    if (s->health_text[0])
        return s->health_text;
    return s->health_status == 200 ? "ok" : "unhealthy";
}

/* Prints line[0..len) without trailing blanks, then a newline. */
static void print_trimmed(FILE *f, const char *line, size_t len)
{
    if (len > 511)
        len = 511;
    while (len && line[len - 1] == ' ')
        len--;
    fprintf(f, "%.*s\n", (int)len, line);
}

static void render_text(FILE *f, const ifd_cli_http_target_t *t, const snap_t *s, const view_t *v)
{
    char n[8][32];
    fprintf(f, "inferd %s at %s — %s (HTTP %d)", v->version ? v->version : "?", t->where,
            health_word(s), s->health_status);
    if (v->model)
        fprintf(f, ", model %s", v->model);
    if (isfinite(v->uptime))
        fprintf(f, ", up %s", duration(n[0], 32, v->uptime));
    fputs("\n\n", f);

    json_t *workers = json_object_get(s->health, "workers");
    if (json_is_array(workers) && json_array_size(workers) > 0) {
        bool show[N_WCOLS];
        size_t i;
        json_t *w;
        char x[64];
        for (size_t k = 0; k < N_WCOLS; k++) {
            show[k] = k < 2;
            json_array_foreach(workers, i, w)
            {
                json_t *v = wget(w, wcols[k].names);
                if (v && !(json_is_string(v) && json_string_length(v) == 0))
                    show[k] = true;
            }
        }
        char line[512];
        size_t len = 0;
        for (size_t k = 0; k < N_WCOLS; k++)
            if (show[k] && len < sizeof(line))
                len += (size_t)snprintf(line + len, sizeof(line) - len, "%-*s ", wcols[k].width,
                                        wcols[k].head);
        print_trimmed(f, line, len);
        json_array_foreach(workers, i, w)
        {
            len = 0;
            for (size_t k = 0; k < N_WCOLS; k++) {
                if (!show[k] || len >= sizeof(line))
                    continue;
                json_t *v = wget(w, wcols[k].names);
                if (k == 0 && !v)
                    snprintf(x, sizeof(x), "%zu", i);
                else
                    wstr(x, sizeof(x), v);
                len += (size_t)snprintf(line + len, sizeof(line) - len, "%-*.*s ", wcols[k].width,
                                        k + 1 == N_WCOLS ? 40 : wcols[k].width, x);
            }
            print_trimmed(f, line, len);
        }
        fputc('\n', f);
    } else if (isfinite(v->workers_ready)) {
        fprintf(f, "workers       %.0f ready, %.0f starting, %.0f down, %.0f failed\n\n",
                v->workers_ready, v->workers_starting, v->workers_down, v->workers_failed);
    }
    if (!s->have_prom) {
        fprintf(f, "(no /metrics from the daemon)\n");
        return;
    }
    fprintf(f, "KV blocks     %s free, %s used, %s cached", human(n[0], 32, v->kv_free),
            human(n[1], 32, v->kv_used), human(n[2], 32, v->kv_cached));
    if (v->kv_total > 0)
        fprintf(f, " of %s (%.1f%% in use)", human(n[3], 32, v->kv_total),
                100.0 * v->kv_used / v->kv_total);
    fputc('\n', f);
    fprintf(f, "prefix cache  ");
    if (v->queries > 0)
        fprintf(f, "%.1f%% hit (%s of %s prompt tokens)", 100.0 * v->hits / v->queries,
                human(n[0], 32, v->hits), human(n[1], 32, v->queries));
    else
        fprintf(f, "no lookups yet");
    if (isfinite(v->hit_rate_now))
        fprintf(f, "; now %.1f%%", 100.0 * v->hit_rate_now);
    fputc('\n', f);
    if (v->host_cap > 0) /* no host tier (CPU workers, or off): no line */
        fprintf(f, "host tier     %s of %s bytes in %s blocks; %s of %s looked-up tokens hit\n",
                human(n[0], 32, v->host_bytes), human(n[1], 32, v->host_cap),
                human(n[2], 32, v->host_blocks), human(n[3], 32, v->host_hits),
                human(n[4], 32, v->host_queries));
    if (v->disk_cap > 0) { /* a daemon without a disk tier shows no line */
        fprintf(f,
                "disk tier     %s of %s bytes in %s files; %s of %s looked-up tokens hit; "
                "%s bytes read, %s written",
                human(n[0], 32, v->disk_bytes), human(n[1], 32, v->disk_cap),
                human(n[2], 32, v->disk_files), human(n[3], 32, v->disk_hits),
                human(n[4], 32, v->disk_queries), human(n[5], 32, v->disk_read),
                human(n[6], 32, v->disk_written));
        if (v->disk_bad > 0)
            fprintf(f, "; %s bad files deleted", human(n[0], 32, v->disk_bad));
        fputc('\n', f);
    }
    fprintf(f,
            "requests      %s running, %s queued; finished: %s stop, %s length, %s aborted, "
            "%s error\n",
            human(n[0], 32, v->running), human(n[1], 32, v->queued), human(n[2], 32, v->fin_stop),
            human(n[3], 32, v->fin_length), human(n[4], 32, v->fin_abort),
            human(n[5], 32, v->fin_error));
    fprintf(f, "tokens        %s in, %s out", human(n[0], 32, v->tok_in),
            human(n[1], 32, v->tok_out));
    if (isfinite(v->rate_out))
        fprintf(f, "; now %.1f tokens/s out, %.1f in", v->rate_out, v->rate_in);
    fputc('\n', f);
    /* a daemon that is off and never speculated (per request) shows no line */
    const bool spec_on = v->spec && strcmp(v->spec, "off") != 0;
    if (spec_on || v->spec_proposed > 0) {
        fprintf(f, "speculative   %s", v->spec ? v->spec : "per request");
        if (v->spec_proposed > 0)
            fprintf(f, ": %.1f%% of %s proposed tokens accepted (%s verifications)",
                    100.0 * v->spec_accepted / v->spec_proposed, human(n[0], 32, v->spec_proposed),
                    human(n[1], 32, v->spec_drafts));
        fputc('\n', f);
    }
    if (isfinite(v->ttft_mean) || isfinite(v->itl_mean)) {
        fprintf(f, "latency       ");
        if (isfinite(v->ttft_mean))
            fprintf(f, "TTFT mean %.1f ms", v->ttft_mean * 1e3);
        if (isfinite(v->ttft_mean) && isfinite(v->itl_mean))
            fprintf(f, ", ");
        if (isfinite(v->itl_mean))
            fprintf(f, "inter-token mean %.1f ms", v->itl_mean * 1e3);
        fprintf(f, " (since start)\n");
    }
}

static json_t *num_or_null(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static json_t *view_json(const ifd_cli_http_target_t *t, const snap_t *s, const view_t *v)
{
    json_t *o = json_object();
    json_object_set_new(o, "where", json_string(t->where));
    json_object_set_new(o, "health_status", json_integer(s->health_status));
    json_object_set_new(o, "health", s->health ? json_incref(s->health) : json_null());
    json_object_set_new(o, "version", v->version ? json_string(v->version) : json_null());
    json_object_set_new(o, "model", v->model ? json_string(v->model) : json_null());
    json_object_set_new(o, "uptime_s", num_or_null(v->uptime));
    json_object_set_new(o, "kv_blocks",
                        json_pack("{s:o,s:o,s:o,s:o}", "total", num_or_null(v->kv_total), "free",
                                  num_or_null(v->kv_free), "used", num_or_null(v->kv_used),
                                  "cached", num_or_null(v->kv_cached)));
    json_object_set_new(o, "prefix_cache",
                        json_pack("{s:o,s:o,s:o,s:o}", "hit_tokens", num_or_null(v->hits),
                                  "query_tokens", num_or_null(v->queries), "hit_rate",
                                  num_or_null(v->queries > 0 ? v->hits / v->queries : NAN),
                                  "hit_rate_now", num_or_null(v->hit_rate_now)));
    json_object_set_new(
        o, "disk_tier",
        json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "bytes", num_or_null(v->disk_bytes),
                  "capacity_bytes", num_or_null(v->disk_cap), "files", num_or_null(v->disk_files),
                  "query_tokens", num_or_null(v->disk_queries), "hit_tokens",
                  num_or_null(v->disk_hits), "read_bytes", num_or_null(v->disk_read),
                  "written_bytes", num_or_null(v->disk_written), "bad_files",
                  num_or_null(v->disk_bad)));
    json_object_set_new(
        o, "host_tier",
        json_pack("{s:o,s:o,s:o,s:o,s:o}", "bytes", num_or_null(v->host_bytes), "capacity_bytes",
                  num_or_null(v->host_cap), "blocks", num_or_null(v->host_blocks), "query_tokens",
                  num_or_null(v->host_queries), "hit_tokens", num_or_null(v->host_hits)));
    json_object_set_new(
        o, "speculative",
        json_pack("{s:o,s:o,s:o,s:o,s:o}", "method", v->spec ? json_string(v->spec) : json_null(),
                  "verifications", num_or_null(v->spec_drafts), "proposed_tokens",
                  num_or_null(v->spec_proposed), "accepted_tokens", num_or_null(v->spec_accepted),
                  "acceptance_rate",
                  num_or_null(v->spec_proposed > 0 ? v->spec_accepted / v->spec_proposed : NAN)));
    json_object_set_new(o, "requests",
                        json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "running", num_or_null(v->running),
                                  "queued", num_or_null(v->queued), "stop",
                                  num_or_null(v->fin_stop), "length", num_or_null(v->fin_length),
                                  "abort", num_or_null(v->fin_abort), "error",
                                  num_or_null(v->fin_error)));
    json_object_set_new(o, "tokens",
                        json_pack("{s:o,s:o,s:o,s:o}", "in", num_or_null(v->tok_in), "out",
                                  num_or_null(v->tok_out), "out_per_s", num_or_null(v->rate_out),
                                  "in_per_s", num_or_null(v->rate_in)));
    json_object_set_new(o, "latency",
                        json_pack("{s:o,s:o}", "ttft_mean_s", num_or_null(v->ttft_mean),
                                  "itl_mean_s", num_or_null(v->itl_mean)));
    return o;
}

static void status_usage(FILE *f)
{
    fprintf(f,
            "Usage: infer status [--watch [SECS]] [--interval SECS] [--json] [connection "
            "options]\n"
            "\n"
            "Show the daemon's state on one screen, from GET /health and GET /metrics:\n"
            "its workers and their state, KV cache blocks free/used/cached, the prefix-cache\n"
            "hit rate, running and queued requests, tokens per second (measured over\n"
            "--interval, default 1 s) and, once the daemon has speculated, the share of\n"
            "proposed tokens accepted.\n"
            "\n"
            "  -w, --watch [SECS]  refresh every SECS seconds (default 2) until Ctrl-C\n"
            "      --interval SECS the sampling interval of a one-shot status (0: no rates)\n"
            "      --json          one JSON object instead of the table\n"
            "  -h, --help          this help\n"
            "\n%s",
            ifd_cli_conn_help);
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL); /* Ctrl-C interrupts it */
}

int ifd_cli_status_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"watch", optional_argument, NULL, 'w'},
        {"interval", required_argument, NULL, OPT_INTERVAL},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        IFD_CLI_CONN_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    ifd_cli_conn_t co;
    ifd_cli_conn_defaults(&co);
    bool as_json = false, watch = false;
    double every = 2, interval = 1;
    int c;
    while ((c = ifd_cli_getopt(argc, argv, "w::h", opts, &co, NULL)) >= 0) {
        switch (c) {
        case 'w':
            watch = true;
            /* "--watch 5" as well as "--watch=5" */
            if (!optarg && optind < argc && argv[optind][0] >= '0' && argv[optind][0] <= '9')
                optarg = argv[optind++];
            if (optarg && ifd_cli_parse_double(optarg, 0.1, 86400, &every) < 0) {
                fprintf(stderr, "infer status: --watch wants seconds, not '%s'\n", optarg);
                return IFD_CLI_EXIT_USAGE;
            }
            break;
        case OPT_INTERVAL:
            if (ifd_cli_parse_double(optarg, 0, 3600, &interval) < 0) {
                fprintf(stderr, "infer status: --interval wants seconds, not '%s'\n", optarg);
                return IFD_CLI_EXIT_USAGE;
            }
            break;
        case OPT_JSON:
            as_json = true;
            break;
        case 'h':
            status_usage(stdout);
            return IFD_CLI_EXIT_OK;
        default:
            return ifd_cli_usage_hint("status");
        }
    }
    if (c == IFD_CLI_OPT_BAD || ifd_cli_no_operands("status", argc, argv))
        return IFD_CLI_EXIT_USAGE;
    ifd_cli_http_target_t t;
    int code = ifd_cli_target(&co, &t);
    if (code != 0)
        return code;

    snap_t prev, cur;
    memset(&prev, 0, sizeof(prev));
    if ((code = snap_take(&cur, &t, &co)) != 0)
        return code;
    bool tty = isatty(STDOUT_FILENO);
    if (watch)
        ifd_cli_catch_sigint(true);
    else if (interval > 0 && cur.have_prom) {
        prev = cur;
        sleep_s(interval);
        if ((code = snap_take(&cur, &t, &co)) != 0)
            goto out;
    }
    for (;;) {
        view_t v;
        view_build(&v, &cur, prev.have_prom ? &prev : NULL);
        if (watch && tty && !as_json)
            fputs("\033[H\033[2J", stdout); /* home, clear */
        if (as_json) {
            json_t *o = view_json(&t, &cur, &v);
            json_dumpf(o, stdout, watch ? JSON_COMPACT : JSON_INDENT(2));
            fputc('\n', stdout);
            json_decref(o);
        } else {
            render_text(stdout, &t, &cur, &v);
            if (watch)
                printf("\n(every %g s; Ctrl-C to stop)\n", every);
        }
        fflush(stdout);
        if (!watch)
            break;
        sleep_s(every);
        if (ifd_cli_interrupted)
            break;
        snap_free(&prev);
        prev = cur;
        if ((code = snap_take(&cur, &t, &co)) != 0) {
            if (ifd_cli_interrupted)
                code = IFD_CLI_EXIT_OK;
            goto out;
        }
        if (ifd_cli_interrupted)
            break;
    }
    code = IFD_CLI_EXIT_OK;
out:
    if (watch)
        ifd_cli_catch_sigint(false);
    snap_free(&prev);
    snap_free(&cur);
    return code;
}
