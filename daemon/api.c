/*
 * api.c — see api.h. The route table below is the one list of endpoints;
 * ifd_api_on_request authenticates, finds the route (404 / 405 with Allow)
 * and calls its handler. Each handler answers exactly once. HEAD is served
 * by every GET route: the HTTP layer sends the headers and drops the body.
 */
#include "api.h"

#include "error.h"
#include "gen.h"
#include "prompt.h"
#include "reply.h"
#include "grammar/schema_json.h"

#include <http_parser.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef void (*ifd__handler_fn)(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);

static void ifd__chat(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__completions(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__responses(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__models(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__model(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__health(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__metrics(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__tokenize(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__detokenize(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__version(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__response_get(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__response_delete(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__invocations(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);
static void ifd__response_cancel(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r);

static const struct {
    const char *path;
    enum http_method method;
    ifd__handler_fn fn;
    bool open;   /* no API key needed, even on TCP (vLLM's key guards only /v1) */
    bool prefix; /* path ends in "/": matches it followed by one non-empty segment */
} ifd__routes[] = { /* a '*' in a path stands for one non-empty segment */
    {"/v1/chat/completions", HTTP_POST, ifd__chat, false, false},
    {"/v1/completions", HTTP_POST, ifd__completions, false, false},
    {"/v1/responses", HTTP_POST, ifd__responses, false, false},
    {"/v1/responses/", HTTP_GET, ifd__response_get, false, true},
    {"/v1/responses/", HTTP_DELETE, ifd__response_delete, false, true},
    {"/v1/responses/*/cancel", HTTP_POST, ifd__response_cancel, false, false},
    {"/v1/models", HTTP_GET, ifd__models, false, false},
    {"/v1/models/", HTTP_GET, ifd__model, false, true},
    {"/health", HTTP_GET, ifd__health, true, false},
    {"/ping", HTTP_GET, ifd__health, true, false}, /* vLLM's (SageMaker's) name for it */
    {"/ping", HTTP_POST, ifd__health, true, false},
    {"/invocations", HTTP_POST, ifd__invocations, false, false}, /* SageMaker: by body shape */
    {"/version", HTTP_GET, ifd__version, true, false},
    {"/metrics", HTTP_GET, ifd__metrics, true, false}, /* Prometheus, the endpoint picker */
    {"/tokenize", HTTP_POST, ifd__tokenize, false, false},
    {"/detokenize", HTTP_POST, ifd__detokenize, false, false},
};
#define IFD__N_ROUTES (sizeof ifd__routes / sizeof ifd__routes[0])

/* ---- routing -------------------------------------------------------------------------------- */

static bool ifd__path_is(size_t route, const char *path)
{
    const char *p = ifd__routes[route].path;
    const char *star = strchr(p, '*');
    if (star) {
        size_t n = (size_t)(star - p);
        const char *seg = path + n, *end = strncmp(p, path, n) ? NULL : strchr(seg, '/');
        return end && end > seg && strcmp(end, star + 1) == 0;
    }
    if (!ifd__routes[route].prefix)
        return strcmp(p, path) == 0;
    size_t n = strlen(p);
    return strncmp(p, path, n) == 0 && path[n] && !strchr(path + n, '/');
}

int ifd_api_route_find(const char *path, int method, bool *path_known, bool *open)
{
    if (method == HTTP_HEAD)
        method = HTTP_GET;
    int found = -1;
    *path_known = *open = false;
    for (size_t i = 0; i < IFD__N_ROUTES; i++) {
        if (!ifd__path_is(i, path))
            continue;
        if (!*path_known)
            *open = ifd__routes[i].open;
        *path_known = true;
        if ((int)ifd__routes[i].method == method) {
            *open = ifd__routes[i].open;
            found = (int)i;
            break;
        }
    }
    return found;
}

int ifd_api_route_allow(const char *path, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < IFD__N_ROUTES; i++) {
        if (!ifd__path_is(i, path))
            continue;
        const char *m = http_method_str(ifd__routes[i].method);
        int k = snprintf(buf + n, len - n, "%s%s%s", n ? ", " : "", m,
                         ifd__routes[i].method == HTTP_GET ? ", HEAD" : "");
        if (k < 0 || (size_t)k >= len - n)
            return IFD_ETOOBIG;
        n += (size_t)k;
    }
    return 0;
}

/* The request's path without root_path (uvicorn's rule: stripped when the
 * path starts with it at a segment boundary, else kept as it is). */
static const char *ifd__route_path(const ifd_api_t *api, const char *path)
{
    const char *rp = api->cfg ? api->cfg->root_path : NULL;
    size_t n = rp ? strlen(rp) : 0;
    if (!n || strncmp(path, rp, n) != 0 || (path[n] && path[n] != '/'))
        return path;
    return path[n] ? path + n : "/";
}

void ifd_api_on_request(void *ctx, ifd_http_conn_t *c, const ifd_http_request_t *req)
{
    ifd_api_t *api = ctx;
    ifd_http_request_t routed = *req; /* its path without root_path, for the handlers too */
    routed.path = ifd__route_path(api, req->path);
    const ifd_http_request_t *r = &routed;
    bool known, open;
    int route = ifd_api_route_find(r->path, r->method, &known, &open);
    if (r->transport == IFD_LISTEN_TCP && ifd_apikeys_count(api->keys) && !open &&
        !ifd_apikeys_match(api->keys, r->authorization)) {
        ifd_reply_errorf(c, 401, "invalid_api_key", NULL,
                         r->authorization ? "Incorrect API key provided."
                                          : "You didn't provide an API key. Send it as "
                                            "'Authorization: Bearer KEY'.");
        return;
    }
    if (!known) {
        ifd_reply_errorf(c, 404, "not_found", NULL, "Unknown route: %s %.200s", r->method_name,
                         r->path);
        return;
    }
    if (route >= 0) {
        ifd__routes[route].fn(api, c, r);
        return;
    }
    /* the path exists with other methods */
    char methods[96], allow[128];
    ifd_api_route_allow(r->path, methods, sizeof methods); /* the table's: always fits */
    snprintf(allow, sizeof allow, "Allow: %s\r\n", methods);
    ifd_oai_error_t e;
    ifd_oai_error_set(&e, 405, NULL, "method_not_allowed", NULL, "Method %s is not allowed on %s.",
                      r->method_name, r->path);
    ifd_buf_t b = IFD_BUF_INIT;
    ifd_oai_error_json(&b, &e);
    ifd_http_respond(c, 405, "application/json", allow, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
}

int ifd_api_identity(const ifd_api_t *api, const ifd_http_request_t *r, char *out, size_t len)
{
    int n;
    if (r->transport == IFD_LISTEN_TCP) {
        /* the routes that store or read stored things need the key, so a
         * key set means a key matched (ifd_api_on_request) */
        const char *name = ifd_apikeys_match(api->keys, r->authorization);
        n = name ? snprintf(out, len, "key:%s", name) : snprintf(out, len, "tcp");
    } else if (r->peer_uid >= 0) {
        n = snprintf(out, len, "uid:%lld", (long long)r->peer_uid);
    } else {
        n = snprintf(out, len, "unix");
    }
    return n >= 0 && (size_t)n < len ? 0 : IFD_ETOOBIG;
}

/* ---- completions ---------------------------------------------------------------------------- */

static void ifd__chat(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    ifd_gen_handle(api, c, r, IFD_OAI_CHAT);
}

static void ifd__completions(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    ifd_gen_handle(api, c, r, IFD_OAI_COMPLETION);
}

static void ifd__responses(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    ifd_gen_handle(api, c, r, IFD_OAI_RESPONSES);
}

/* POST /invocations (SageMaker), vLLM's rule: a body with "messages" is a
 * chat completion, else one with "prompt" a completion; an object with
 * neither is a 400 naming both. A body that is not a JSON object goes to
 * the chat parser, whose 400 says why. The route's handler then parses the
 * body as usual. */
static void ifd__invocations(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    json_error_t je;
    json_t *o =
        ifd_schema_json_loadb(r->body, r->body_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    bool object = json_is_object(o);
    bool chat = object && json_object_get(o, "messages");
    bool completion = object && json_object_get(o, "prompt");
    json_decref(o);
    if (chat || !object)
        ifd_gen_handle(api, c, r, IFD_OAI_CHAT);
    else if (completion)
        ifd_gen_handle(api, c, r, IFD_OAI_COMPLETION);
    else
        ifd_reply_errorf(c, 400, NULL, "messages",
                         "Cannot find a handler for this /invocations body: expected a chat "
                         "completion request (with 'messages') or a completion request (with "
                         "'prompt').");
}

/* ---- models, health, metrics ---------------------------------------------------------------- */

/* The served model as /v1/models shows it (vLLM's root and max_model_len,
 * inferd's architecture and format). */
static ifd_oai_model_t ifd__model_info(const ifd_api_t *api)
{
    ifd_oai_model_t m = {api->model_id, api->created, "inferd", api->model_path,
                         api->max_model_len, NULL, NULL};
    if (api->mcfg) {
        m.architecture = api->mcfg->arch_name;
        m.format = ifd_model_format_name(api->mcfg->format);
    }
    return m;
}

static void ifd__models(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    (void)r;
    ifd_oai_model_t m = ifd__model_info(api);
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_oai_models_json(&b, &m, 1);
    ifd_reply_json(c, rc, &b);
    ifd_buf_free(&b);
}

static int ifd__hex(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* GET /v1/models/{id}: the id is percent-decoded (an id with a '/' arrives
 * as %2F); anything but the served model is OpenAI's 404 model_not_found. */
static void ifd__model(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    const char *enc = r->path + strlen("/v1/models/");
    char id[256];
    size_t n = 0;
    bool ok = true;
    for (const char *p = enc; ok && *p; p++) {
        int ch = (unsigned char)*p;
        if (ch == '%') { /* "%XX", not %00; a short escape ends the loop here */
            int hi = ifd__hex(p[1]), lo = hi < 0 ? -1 : ifd__hex(p[2]);
            if (lo < 0 || (hi | lo) == 0) {
                ok = false;
                break;
            }
            ch = hi << 4 | lo;
            p += 2;
        }
        if (n + 1 >= sizeof id) {
            ok = false;
            break;
        }
        id[n++] = (char)ch;
    }
    id[n] = 0;
    if (!ok || strcmp(id, api->model_id) != 0) {
        ifd_reply_errorf(c, 404, "model_not_found", "model", "The model '%.200s' does not exist.",
                         ok ? id : enc);
        return;
    }
    ifd_oai_model_t m = ifd__model_info(api);
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_oai_model_json(&b, &m);
    ifd_reply_json(c, rc, &b);
    ifd_buf_free(&b);
}

static void ifd__version(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    (void)api, (void)r;
    static const char body[] = "{\"version\":\"" IFD_VERSION "\"}";
    ifd_http_respond(c, 200, "application/json", NULL, body, sizeof body - 1);
}

/* A worker's draft-tier counters (STATS' draft_tier) into g: counters and
 * the host tier's gauges (each worker's own tier) summed, the disk tier's
 * gauges (one directory, measured whole by each worker) the largest. */
static void ifd__draft_tier_add(ifd_metrics_gauges_t *g, const ifd_worker_info_t *wi)
{
    const uint32_t n = wi->n_draft_tier < IFD_KVTIER_COUNT ? wi->n_draft_tier : IFD_KVTIER_COUNT;
    for (uint32_t c = 0; c < n; c++) {
        const uint64_t v = wi->draft_tier[c];
        if (c == IFD_KVTIER_DISK_BYTES || c == IFD_KVTIER_DISK_FILES ||
            c == IFD_KVTIER_DISK_CAPACITY)
            g->draft_kv_tier[c] = v > g->draft_kv_tier[c] ? v : g->draft_kv_tier[c];
        else
            g->draft_kv_tier[c] += v;
    }
}

static void ifd__gauges(ifd_api_t *api, ifd_metrics_gauges_t *g)
{
    memset(g, 0, sizeof *g);
    g->queue_depth = api->n_tokenizing + ifd_router_queued(api->router);
    g->requests_running = api->n_running;
    g->seqs_running = ifd_router_dispatched(api->router);
    g->connections = ifd_http_server_connections(api->http);
    ifd_kvpool_stats_t st;
    if (ifd_kvpool_stats(api->pool, &st) == 0) {
        g->kv_total = st.total;
        g->kv_free = st.free;
        g->kv_used = st.in_use;
        g->kv_cached = st.cached;
        g->kv_evictions = st.evictions;
        g->kv_alloc_failures = st.alloc_failures;
        ifd_kvpool_tier_get(api->pool, g->kv_tier);
        g->kv_ext_query_tokens =
            g->kv_tier[IFD_KVTIER_QUERY_TOKENS] + g->kv_tier[IFD_KVTIER_HOST_QUERY_TOKENS];
        g->kv_ext_hit_tokens =
            g->kv_tier[IFD_KVTIER_HIT_TOKENS] + g->kv_tier[IFD_KVTIER_HOST_HIT_TOKENS];
    }
    if (api->local_pool && ifd_kvpool_stats(api->local_pool, &st) == 0) {
        g->kv_local_total = st.total;
        g->kv_local_used = st.in_use;
    }
    int ready, starting, down, failed;
    ifd_sup_counts(api->sup, &ready, &starting, &down, &failed);
    g->workers_ready = ready;
    g->workers_starting = starting;
    g->workers_down = down;
    g->workers_failed = failed;
    for (int w = 0; w < ifd_sup_n_workers(api->sup); w++) {
        const ifd_worker_info_t *wi = ifd_sup_worker(api->sup, w);
        if (wi->has_stats) {
            g->preemptions += wi->stats.preemptions;
            g->spec_drafts += wi->stats.spec_drafts;
            g->spec_draft_tokens += wi->stats.spec_draft_tokens;
            g->spec_accepted_tokens += wi->stats.spec_accepted_tokens;
            for (int i = 0; i < (int)IFD_WIRE_MAX_SPEC_TOKENS; i++)
                g->spec_accepted_per_pos[i] += wi->spec_per_pos[i];
            g->engine_steps += wi->stats.steps;
            for (int b = 0; b < IFD_WIRE_STEP_BUCKETS; b++)
                g->step_tokens[b] += wi->stats.step_tokens.n[b];
            g->step_tokens_sum += wi->stats.prefill_tokens + wi->stats.decode_tokens;
            g->kv_local_releasable_blocks += (int64_t)wi->stats.kv_local_releasable_blocks;
            g->kv_local_releasable_bytes += (int64_t)wi->stats.kv_local_releasable_bytes;
            g->kv_local_released_blocks += (int64_t)wi->stats.kv_local_released_blocks;
            g->kv_local_released_bytes += (int64_t)wi->stats.kv_local_released_bytes;
            ifd__draft_tier_add(g, wi);
        }
    }
    g->draft_tiers = api->cfg->draft_model && api->cfg->draft_model[0];
    g->uptime_s = (double)(uv_hrtime() - api->start_ns) / 1e9;
    ifd_kvpool_params_t geo;
    ifd_kvpool_geometry(api->pool, &geo);
    g->kv_block_size = geo.block_size;
    g->kv_dtype = api->cfg->kv_dtype;
    g->prefix_cache = api->cfg->prefix_cache;
    g->spec = api->cfg->spec; /* checked at start: off, ngram or draft */
}

static void ifd__metrics(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    (void)r;
    ifd_metrics_gauges_t g;
    ifd__gauges(api, &g);
    ifd_buf_t b = IFD_BUF_INIT;
    if (ifd_metrics_render(api->metrics, &g, api->model_id, &b) == 0)
        ifd_http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data, b.len);
    else
        ifd_reply_errorf(c, 500, NULL, NULL, "Out of memory.");
    ifd_buf_free(&b);
}

/* A double as Python's str() writes it ("0.0", "0.25"): vLLM's ORCA values. */
static void ifd__pyfloat(char *out, size_t len, double v)
{
    snprintf(out, len, "%.6g", v);
    if (!strpbrk(out, ".eEni"))
        strncat(out, ".0", len - strlen(out) - 1);
}

int ifd_api_load_report(void *ctx, const char *format, ifd_buf_t *out)
{
    ifd_api_t *api = ctx;
    bool text = !strcasecmp(format, "text");
    if (!text && strcasecmp(format, "json") != 0)
        return 0; /* vLLM ignores other formats too (no header) */
    double usage = 0;
    ifd_kvpool_stats_t st;
    if (ifd_kvpool_stats(api->pool, &st) == 0 && st.total)
        usage = (double)st.in_use / (double)st.total;
    double waiting = (double)(api->n_tokenizing + ifd_router_queued(api->router));
    char u[32], w[32];
    ifd__pyfloat(u, sizeof u, usage);
    ifd__pyfloat(w, sizeof w, waiting);
    int rc =
        text ? ifd_buf_printf(out,
                              "endpoint-load-metrics: TEXT named_metrics.kv_cache_usage_perc=%s, "
                              "named_metrics.num_requests_waiting=%s\r\n",
                              u, w)
             : ifd_buf_printf(out,
                              "endpoint-load-metrics: JSON {\"named_metrics\": "
                              "{\"kv_cache_usage_perc\": %s, \"num_requests_waiting\": %s}}\r\n",
                              u, w);
    return rc ? IFD_ENOMEM : 0;
}

static void ifd__health(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    (void)r;
    int ready, starting, down, failed;
    ifd_sup_counts(api->sup, &ready, &starting, &down, &failed);
    int n = ifd_sup_n_workers(api->sup);
    int stalled = 0; /* ready, but not answering pings */
    for (int w = 0; w < n; w++) {
        const ifd_worker_info_t *wi = ifd_sup_worker(api->sup, w);
        if (wi->state == IFD_W_READY && wi->unresponsive)
            stalled++;
    }
    const char *status;
    int code = 200;
    if (api->draining) {
        status = "draining";
        code = 503;
    } else if (ready == n && !stalled) {
        status = "ok";
    } else if (ready > 0) {
        status = "degraded";
        if (ready == stalled)
            code = 503; /* no worker is answering: nothing would be served soon */
    } else if (failed == n) {
        status = "unavailable";
        code = 503;
    } else {
        status = "starting";
        code = 503;
    }
    json_t *o = json_object();
    json_t *ws = json_array();
    for (int w = 0; w < n; w++) {
        const ifd_worker_info_t *wi = ifd_sup_worker(api->sup, w);
        json_t *x = json_object();
        json_object_set_new(x, "id", json_integer(w));
        json_object_set_new(x, "state",
                            json_string(wi->state == IFD_W_READY && wi->unresponsive
                                            ? "unresponsive"
                                            : ifd_worker_state_name(wi->state)));
        json_object_set_new(x, "pid", json_integer(wi->pid));
        json_object_set_new(x, "device", json_string(wi->device_name));
        json_object_set_new(x, "running", json_integer(ifd_router_worker_load(api->router, w)));
        json_object_set_new(x, "starts", json_integer((json_int_t)wi->starts));
        json_object_set_new(x, "crashes", json_integer((json_int_t)wi->crashes));
        json_object_set_new(x, "crash_loop", json_boolean(wi->crash_loop));
        json_object_set_new(x, "crash_loops", json_integer((json_int_t)wi->crash_loops));
        if (wi->state == IFD_W_FAILED)
            json_object_set_new(x, "retry_in_s", json_real(wi->retry_in_s));
        json_object_set_new(x, "last_exit", json_string(wi->last_exit));
        json_array_append_new(ws, x);
    }
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "model", json_string(api->model_id));
    json_object_set_new(o, "workers", ws);
    json_object_set_new(o, "queue_depth",
                        json_integer(api->n_tokenizing + ifd_router_queued(api->router)));
    json_object_set_new(o, "requests_running", json_integer(api->n_running));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s) {
        ifd_reply_errorf(c, 500, NULL, NULL, "Out of memory.");
        return;
    }
    ifd_http_respond(c, code, "application/json", code == 503 ? "Retry-After: 1\r\n" : NULL, s,
                     strlen(s));
    free(s);
}

/* ---- the Responses store ------------------------------------------------------------------ */

void ifd_api_close(ifd_api_t *api)
{
    ifd_respstore_destroy(api->responses);
    api->responses = NULL;
    ifd_gcache_destroy(api->grammars);
    api->grammars = NULL;
}

/* The stored entry that /v1/responses/{id} names, if the client (who)
 * stored it, or NULL after a 404 (OpenAI's shape: invalid_request_error,
 * param response_id) — the same answer for another client's id as for one
 * never stored, so ids cannot be probed. */
static const ifd_respstore_entry_t *ifd__response_find(ifd_api_t *api, ifd_http_conn_t *c,
                                                       const ifd_http_request_t *r, const char *who)
{
    const char *id = r->path + strlen("/v1/responses/");
    const ifd_respstore_entry_t *e = ifd_respstore_lookup(&api->responses, api->cfg, who, id);
    if (!e)
        ifd_reply_errorf(c, 404, NULL, "response_id", "Response with id '%.200s' not found.", id);
    return e;
}

/* Whether the query string q holds the parameter "name=value". */
static bool ifd__query_has(const char *q, const char *name, const char *value)
{
    size_t n = strlen(name), v = strlen(value);
    for (const char *p = q; p && *p; p = strchr(p, '&'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == '=' && !strncmp(p + n + 1, value, v) &&
            (p[n + 1 + v] == '&' || p[n + 1 + v] == '\0'))
            return true;
    return false;
}

/* GET /v1/responses/{id}: the Response as it was answered, or a
 * background Response's status while it runs (gen.h). Its events are not
 * kept, so OpenAI's streamed retrieval (?stream=true, starting_after) is a
 * 400 rather than JSON a streaming client would misread. */
static void ifd__response_get(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    char who[IFD_API_IDENTITY_MAX];
    if (ifd_api_identity(api, r, who, sizeof who)) {
        ifd_reply_errorf(c, 500, NULL, NULL, "The client's identity does not fit.");
        return;
    }
    if (ifd__query_has(r->query, "stream", "true")) {
        ifd_reply_errorf(c, 400, "unsupported_parameter", "stream",
                         "Unsupported parameter: 'stream' is not supported by this server when "
                         "retrieving a Response (its events are not kept): retrieve it without "
                         "'stream' and poll its status.");
        return;
    }
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_gen_background_status(api, who, r->path + strlen("/v1/responses/"), &b);
    if (rc != IFD_ENOTFOUND) {
        ifd_reply_json(c, rc, &b);
        ifd_buf_free(&b);
        return;
    }
    const ifd_respstore_entry_t *e = ifd__response_find(api, c, r, who);
    if (e)
        ifd_http_respond(c, 200, "application/json", NULL, e->response, e->response_len);
}

/* DELETE /v1/responses/{id}: {"id", "object": "response", "deleted": true}. */
static void ifd__response_delete(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    char who[IFD_API_IDENTITY_MAX];
    if (ifd_api_identity(api, r, who, sizeof who)) {
        ifd_reply_errorf(c, 500, NULL, NULL, "The client's identity does not fit.");
        return;
    }
    /* a background Response still running is cancelled first (kept as such) */
    ifd_gen_background_cancel(api, who, r->path + strlen("/v1/responses/"), NULL);
    const ifd_respstore_entry_t *e = ifd__response_find(api, c, r, who);
    if (!e)
        return;
    json_t *o = json_pack("{s:s,s:s,s:b}", "id", e->id, "object", "response", "deleted", 1);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    ifd_respstore_delete(api->responses, who, r->path + strlen("/v1/responses/"));
    if (s)
        ifd_http_respond(c, 200, "application/json", NULL, s, strlen(s));
    else
        ifd_reply_errorf(c, 500, NULL, NULL, "Out of memory.");
    free(s);
}

/*
 * POST /v1/responses/{id}/cancel (OpenAI's): a background Response still
 * running is stopped and answered as kept, status "cancelled"; one that
 * has ended is answered as it is (cancelling twice is idempotent, OpenAI's
 * rule); a Response that was not created in the background cannot be
 * cancelled (400, vLLM's message); 404 as GET for an unknown or another
 * client's id.
 */
static void ifd__response_cancel(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    char who[IFD_API_IDENTITY_MAX], id[IFD_OAI_ID_MAX + 64];
    if (ifd_api_identity(api, r, who, sizeof who)) {
        ifd_reply_errorf(c, 500, NULL, NULL, "The client's identity does not fit.");
        return;
    }
    const char *seg = r->path + strlen("/v1/responses/");
    size_t n = (size_t)(strchr(seg, '/') - seg); /* the route matched ".../cancel" */
    if (n >= sizeof id) { /* longer than any id: the unknown id's answer */
        ifd_reply_errorf(c, 404, NULL, "response_id", "Response with id '%.*s' not found.",
                         (int)(n < 200 ? n : 200), seg);
        return;
    }
    memcpy(id, seg, n);
    id[n] = '\0';
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_gen_background_cancel(api, who, id, &b);
    if (rc != IFD_ENOTFOUND) {
        ifd_reply_json(c, rc, &b);
        ifd_buf_free(&b);
        return;
    }
    const ifd_respstore_entry_t *e = ifd_respstore_lookup(&api->responses, api->cfg, who, id);
    if (!e) {
        ifd_reply_errorf(c, 404, NULL, "response_id", "Response with id '%.200s' not found.", id);
        return;
    }
    json_t *o = json_loads(e->response, JSON_ALLOW_NUL, NULL);
    bool background = json_is_true(json_object_get(o, "background"));
    json_decref(o);
    if (background)
        ifd_http_respond(c, 200, "application/json", NULL, e->response, e->response_len);
    else
        ifd_reply_errorf(c, 400, NULL, "response_id", "Cannot cancel a synchronous response.");
}

/* ---- /tokenize and /detokenize ----------------------------------------------------------- */

typedef struct {
    uv_work_t work;
    ifd_api_t *api;
    ifd_http_conn_t *conn; /* NULL once the client is gone */
    ifd_arena_t arena;
    ifd_oai_tokenize_t req;
    ifd_oai_request_t chat; /* with messages: the body parsed as a chat request */
    ifd_tokens_t ids;
    int rc;
    ifd_oai_error_t err; /* rc's 400 (the template cannot render), when status is set */
} ifd__tokjob_t;

static void ifd__tokjob_abort(void *ud)
{
    ifd__tokjob_t *j = ud;
    j->conn = NULL;
}

/* With messages, exactly the prompt a chat completion of the same body
 * prefills (prompt.h); add_special_tokens then has no effect, the template
 * placing the special tokens. */
static void ifd__tokjob_work(uv_work_t *w)
{
    ifd__tokjob_t *j = w->data;
    const ifd_api_t *api = j->api;
    if (j->req.messages) {
        j->rc = ifd_prompt_chat(api, &j->arena, &j->chat, NULL, &j->ids, NULL, NULL, &j->err);
        return;
    }
    unsigned flags = IFD_TOK_PARSE_SPECIAL | (j->req.add_special_tokens ? IFD_TOK_ADD_SPECIAL : 0);
    j->rc = ifd_tokenizer_encode(api->tok, j->req.prompt ? j->req.prompt : "", j->req.prompt_len,
                                 flags, &j->ids);
}

static void ifd__tokjob_done(uv_work_t *w, int status)
{
    ifd__tokjob_t *j = w->data;
    ifd_http_conn_t *c = j->conn;
    if (c) {
        ifd_http_set_abort(c, NULL, NULL);
        if (status < 0) {
            ifd_reply_errorf(c, 500, NULL, NULL, "Tokenizing was cancelled.");
        } else if (j->rc && j->err.status) {
            ifd_reply_error(c, &j->err, 0);
        } else if (j->rc) {
            ifd_reply_errorf(c, 500, NULL, NULL, "Tokenizing failed: %s", ifd_strerror(j->rc));
        } else {
            ifd_oai_bytes_t *strs = NULL;
            /* vLLM's convert_ids_to_tokens: the vocabulary's own pieces
             * ("Ġhello", "▁hello", "<0x0A>"), not decoded text; they live
             * as long as the tokenizer */
            if (j->req.return_token_strs && j->ids.n) {
                strs = ifd_arena_calloc(&j->arena, j->ids.n, sizeof *strs);
                for (size_t i = 0; strs && i < j->ids.n; i++) {
                    strs[i].p = ifd_tokenizer_token_text(j->api->tok, j->ids.ids[i], &strs[i].len);
                    if (!strs[i].p) {
                        strs[i].p = "";
                        strs[i].len = 0;
                    }
                }
            }
            ifd_buf_t b = IFD_BUF_INIT;
            int rc = ifd_oai_tokenize_json(&b, j->ids.ids, j->ids.n, j->api->max_model_len, strs);
            ifd_reply_json(c, rc, &b);
            ifd_buf_free(&b);
        }
    }
    ifd_tokens_free(&j->ids);
    ifd_arena_close(&j->arena);
    free(j);
}

static bool ifd__model_ok(ifd_api_t *api, ifd_http_conn_t *c, const char *model)
{
    if (!model || !strcmp(model, api->model_id) || !strcmp(model, api->model_path))
        return true;
    ifd_reply_errorf(c, 404, "model_not_found", "model", "The model `%.200s` does not exist.",
                     model);
    return false;
}

static void ifd__tokenize(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    ifd__tokjob_t *j = calloc(1, sizeof *j);
    if (!j) {
        ifd_reply_errorf(c, 500, NULL, NULL, "Out of memory.");
        return;
    }
    j->api = api;
    ifd_arena_init(&j->arena, 0);
    ifd_oai_error_t e;
    memset(&e, 0, sizeof e);
    if (ifd_oai_parse_tokenize(&j->arena, r->body, r->body_len, &j->req, &e)) {
        ifd_reply_parse_error(c, &e);
        goto fail;
    }
    /* with messages every chat field is read and checked as the chat
     * endpoint does (tools, chat_template_kwargs, continue_final_message, …) */
    if (j->req.messages && ifd_oai_parse_chat(&j->arena, r->body, r->body_len, &j->chat, &e)) {
        ifd_reply_parse_error(c, &e);
        goto fail;
    }
    if (!ifd__model_ok(api, c, j->req.model))
        goto fail;
    j->conn = c;
    j->work.data = j;
    ifd_http_set_abort(c, ifd__tokjob_abort, j);
    if (uv_queue_work(api->loop, &j->work, ifd__tokjob_work, ifd__tokjob_done) != 0) {
        ifd_http_set_abort(c, NULL, NULL);
        ifd_reply_errorf(c, 500, NULL, NULL, "The request could not be queued.");
        goto fail;
    }
    return;
fail:
    ifd_arena_close(&j->arena);
    free(j);
}

static void ifd__detokenize(ifd_api_t *api, ifd_http_conn_t *c, const ifd_http_request_t *r)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_detokenize_t d;
    ifd_oai_error_t e;
    memset(&e, 0, sizeof e);
    if (ifd_oai_parse_detokenize(&a, r->body, r->body_len, &d, &e)) {
        ifd_reply_parse_error(c, &e);
        goto out;
    }
    if (!ifd__model_ok(api, c, d.model))
        goto out;
    for (size_t i = 0; i < d.n_tokens; i++) {
        if (d.tokens[i] < 0 || d.tokens[i] >= api->n_vocab) {
            char param[48];
            snprintf(param, sizeof param, "tokens[%zu]", i);
            ifd_reply_errorf(c, 400, "invalid_value", param,
                             "Token id %d is not in the vocabulary (%d tokens).", d.tokens[i],
                             api->n_vocab);
            goto out;
        }
    }
    char *text = NULL;
    size_t len = 0;
    int rc =
        ifd_tokenizer_decode(api->tok, d.tokens, d.n_tokens, IFD_DETOK_RENDER_SPECIAL, &text, &len);
    if (rc) {
        ifd_reply_errorf(c, 500, NULL, NULL, "Decoding failed: %s", ifd_strerror(rc));
        goto out;
    }
    ifd_buf_t b = IFD_BUF_INIT;
    rc = ifd_oai_detokenize_json(&b, text, len);
    ifd_reply_json(c, rc, &b);
    ifd_buf_free(&b);
    free(text);
out:
    ifd_arena_close(&a);
}
